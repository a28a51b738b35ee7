"""OnnxRunner: an ONNX graph as tinygrad Tensor operations.

Loading parses the protobuf, converts every initializer once, resolves each node to its operator (failing early,
with the op, domain, opset and node name, on one that is not supported) and folds the nodes whose inputs are all
constants into constants. A call walks the remaining nodes in graph order, building a lazy Tensor graph; the named
outputs are realized at the end. Shape arithmetic (Shape -> Gather -> Concat -> Reshape and the like) runs on the
host with numpy, so a model whose shapes are known from its input shapes never reads the device mid-graph and can
be replayed by TinyJit (`jit=True`).

Opsets: the default domain from 13 up to the newest the installed onnx defines (newer is refused); older models
run as far as their ops kept their meaning (attributes that later became inputs are read from either place).
An op without an implementation here whose ONNX schema defines it as a function of other ops runs as that function.

JIT and dynamic dimensions: each distinct set of input shapes is captured separately (the last JIT_CACHE of them
are kept). Once a signature of numpy inputs is captured, its calls copy the arrays into input buffers the runner
keeps for it and replay on those: no Tensor is made per call, and the replay's launches stay built. Dimensions are
not turned into bound Variables: Shape would then give symbolic values, and the host shape arithmetic (numpy) and
every op that takes a shape as data would need a symbolic path of its own.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from tinygrad import Device, Tensor, TinyJit
from tinygrad.dtype import DType
from tinygrad.engine.jit import JitError
from tinygrad.errors import DeviceDTypeError
from tinygrad.onnx import _ops  # noqa: F401  (fills the registries)
from tinygrad.onnx._base import HOST_OPS, OPS, RANDOM_OPS, SCOPE_OPS, Absent, HostRead, NodeCtx, TooBig, Value
from tinygrad.onnx._checks import check_node
from tinygrad.onnx._limits import SizeLimit
from tinygrad.onnx._proto import (
    EMULATED,
    STRING,
    OnnxError,
    _AttrRef,
    attribute_value,
    host_array,
    import_onnx,
    load_model,
    tensor_to_numpy,
    tg_dtype,
    type_name,
)

# a host-side constant larger than this stays a device tensor: shape arithmetic only ever needs small ones
HOST_CONST_LIMIT = 1 << 16
JIT_CACHE = 8  # input-shape signatures kept captured at once


_NUMPY_NATIVE = {"bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16",
                 "float32", "float64"}


@dataclass(frozen=True)
class _TensorInput:
    """What a tensor input must be, read from its ONNX type: the element type, its tinygrad and numpy dtypes, the
    rank when the model gives a shape, and the sizes it fixes as (dimension, size)."""
    elem_type: int
    want: DType
    np_type: np.dtype
    rank: int | None
    fixed: tuple[tuple[int, int], ...]

    @staticmethod
    def of(tt: Any) -> _TensorInput | None:
        """None for strings, which stay numpy arrays on the host."""
        et = int(tt.elem_type)
        if et == STRING:
            return None
        np_type = np.dtype(import_onnx().helper.tensor_dtype_to_np_dtype(et))
        if not tt.HasField("shape"):
            return _TensorInput(et, tg_dtype(et), np_type, None, ())
        dims = tt.shape.dim
        fixed = tuple((i, int(d.dim_value)) for i, d in enumerate(dims) if d.HasField("dim_value") and d.dim_value > 0)
        return _TensorInput(et, tg_dtype(et), np_type, len(dims), fixed)


class _Graph:
    """A GraphProto compiled once: constants, nodes with their operators resolved, inputs and outputs."""

    def __init__(self, g: Any, runner: OnnxRunner, outer: _Graph | None, what: str):
        self.runner, self.outer, self.name = runner, outer, g.name or what
        self.consts: dict[str, Value] = {}
        self.types: dict[str, int] = {}  # static ONNX element types where the graph states them
        for init in g.initializer:
            arr = tensor_to_numpy(init, runner.folder, f"initializer {init.name!r}")
            if init.data_location == import_onnx().TensorProto.EXTERNAL:
                runner.size_limit.model_bytes += arr.nbytes  # the protobuf's own size left these out
            self.consts[init.name] = runner.constant(arr, int(init.data_type))
            self.types[init.name] = int(init.data_type)
        if len(g.sparse_initializer):
            raise NotImplementedError("sparse initializers are not supported")
        self.input_info: dict[str, Any] = {}
        for vi in g.input:
            if vi.name not in self.consts:
                # a copy: a sub-message would keep the whole model (weights included) alive through its arena
                tp = import_onnx().TypeProto()
                tp.CopyFrom(vi.type)
                self.input_info[vi.name] = tp
            if vi.type.HasField("tensor_type"):
                self.types[vi.name] = int(vi.type.tensor_type.elem_type)
        for vi in list(g.output) + list(g.value_info):
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
                self.types.setdefault(vi.name, int(vi.type.tensor_type.elem_type))
        self.inputs = list(self.input_info)
        self.tensor_inputs = {k: spec for k, tp in self.input_info.items() if tp.WhichOneof("value") == "tensor_type"
                              and (spec := _TensorInput.of(tp.tensor_type)) is not None}
        self.outputs = [o.name for o in g.output]
        # names defined so far (subgraphs compiled while this graph is compiled may read those of their parents)
        self.known = known = set(self.consts) | set(self.inputs)
        self.nodes: list[tuple[NodeCtx, Callable[..., Any]]] = []
        for i, node in enumerate(g.node):
            ctx, fn = runner.compile_node(node, self, f"{self.name} node {i}")
            for name in ctx.inputs:
                if name and name not in known and not self.visible(name):
                    raise OnnxError(f"{ctx}: input {name!r} is not produced by any earlier node, initializer or "
                                    f"graph input (nodes must be in topological order)")
            ctx.in_types = [self.type_of(n) for n in ctx.inputs]
            self._note_types(ctx)
            known.update(o for o in ctx.outputs if o)
            self.nodes.append((ctx, fn))
        for name in self.outputs:
            if name not in known and not self.visible(name):
                raise OnnxError(f"graph output {name!r} is not produced by any node")
        self._fold()

    def visible(self, name: str) -> bool:
        """Whether an enclosing graph defines `name` (subgraphs may read their parents' values)."""
        g = self.outer
        while g is not None:
            if name in g.known:
                return True
            g = g.outer
        return False

    def type_of(self, name: str) -> int | None:
        g: _Graph | None = self
        while g is not None:
            if name in g.types:
                return g.types[name]
            g = g.outer
        return None

    def _note_types(self, ctx: NodeCtx) -> None:
        # the element types that ops need to know statically: the emulated types (int4, ...) are computed in a
        # wider dtype, so QuantizeLinear and friends read the intended type from here
        if ctx.op == "Cast" and ctx.outputs:
            self.types[ctx.outputs[0]] = int(ctx.attr("to", 0))
        elif ctx.op == "CastLike" and ctx.outputs and len(ctx.in_types) > 1 and (like := ctx.in_types[1]) is not None:
            self.types[ctx.outputs[0]] = like
        elif ctx.op == "Constant" and ctx.outputs and "value" in ctx.attrs:
            self.types[ctx.outputs[0]] = int(ctx.attrs.get("_elem_type", 0))
        elif ctx.op in ("QuantizeLinear",) and ctx.outputs:
            et = ctx.attr("output_dtype", 0) or (ctx.in_types[2] if len(ctx.in_types) > 2 else None)
            if et:
                self.types[ctx.outputs[0]] = int(et)
        elif ctx.op in ("Identity", "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze") and ctx.outputs and \
                ctx.in_types and (src := ctx.in_types[0]) is not None:
            self.types[ctx.outputs[0]] = src

    def lookup_const(self, name: str) -> Value:
        g: _Graph | None = self
        while g is not None:
            if name in g.consts:
                return g.consts[name]
            g = g.outer
        raise KeyError(name)

    def _fold(self) -> None:
        """Evaluate, once, every node whose inputs are all constants; the call only runs the rest."""
        scope = _Scope(self.runner, self, {}, None)
        live: list[tuple[NodeCtx, Callable[..., Any]]] = []
        for ctx, fn in self.nodes:
            has_graph = any(isinstance(v, _Graph) or (isinstance(v, list) and any(isinstance(g, _Graph) for g in v))
                            for v in ctx.attrs.values())
            if ctx.op in RANDOM_OPS or ctx.op in SCOPE_OPS or ctx.domain not in ("", "ai.onnx") or has_graph:
                live.append((ctx, fn))
                continue
            try:
                args = [self.lookup_const(n) if n else None for n in ctx.inputs]
            except KeyError:
                live.append((ctx, fn))
                continue
            if any(isinstance(a, list) for a in args):
                live.append((ctx, fn))
                continue
            try:
                outs = scope.call(ctx, fn, args)
            except (OnnxError, NotImplementedError):
                raise
            except Exception as e:
                raise OnnxError(f"{ctx}: computing it from constants failed: {type(e).__name__}: {e}") from e
            in_elems = sum(int(np.prod(a.shape)) for a in args if isinstance(a, (np.ndarray, Tensor)))
            for name, v in zip(ctx.outputs, outs):
                if not name:
                    continue
                if isinstance(v, Tensor) and v.numel() > max(4 * in_elems, HOST_CONST_LIMIT):
                    # a constant that broadcasts a few values to many (ConstantOfShape, Expand, Tile) stays a lazy
                    # view: realizing it would only spend memory
                    self.consts[name] = v
                else:
                    self.consts[name] = self.runner.keep_const(v)
        self.nodes = live


#: what a node's implementation raises when the model is malformed (attributes, arities, shapes); anything else
#: (a RuntimeError of the device, an assertion) is this project's bug or the machine's and keeps its type
_MALFORMED = (TypeError, AttributeError, IndexError, KeyError, ValueError, ZeroDivisionError, OverflowError)


class _Scope:
    """One execution of a graph: its values, and the scope of the enclosing graph (for subgraphs)."""

    def __init__(self, runner: OnnxRunner, graph: _Graph, values: dict[str, Value], parent: _Scope | None):
        self.runner, self.graph, self.values, self.parent = runner, graph, values, parent

    def get(self, name: str) -> Value:
        s: _Scope | None = self
        while s is not None:
            if name in s.values:
                return s.values[name]
            if name in s.graph.consts:
                return s.graph.consts[name]
            s = s.parent
        raise OnnxError(f"value {name!r} is not defined")

    def call(self, ctx: NodeCtx, fn: Callable[..., Any], args: list[Value]) -> list[Value]:
        ctx.scope = self
        try:
            host = HOST_OPS.get(ctx.op) if ctx.domain in ("", "ai.onnx") else None
            res: Any = None
            if host is not None and all(a is None or isinstance(a, np.ndarray) for a in args) and \
                    any(isinstance(a, np.ndarray) for a in args):
                try:
                    res = host(ctx, *args)
                except TooBig:
                    res = None
            if res is None:
                res = fn(ctx, *args)
            outs = list(res) if isinstance(res, tuple) else [res]
            # numpy returns scalars (np.int64, ...) from some 0-d results; the graph holds arrays
            outs = [np.asarray(o) if isinstance(o, np.generic) else o for o in outs]
            self._check_sizes(ctx, outs)
        except _MALFORMED as e:
            if isinstance(e, (OnnxError, DeviceDTypeError)):  # the device's limit, not the model's fault
                raise
            # building the node tripped over something the model got wrong (a missing or misshapen attribute,
            # an input of the wrong rank, shapes that do not fit): name the node; the original stays the cause
            raise OnnxError(f"{ctx} ({ctx.domain or 'ai.onnx'} opset {ctx.opset}) is malformed or does not fit "
                            f"its inputs: {type(e).__name__}: {e}") from e
        except Exception as e:
            if not isinstance(e, (OnnxError, NotImplementedError, HostRead)) and \
                    not any(n.startswith("while running ONNX") for n in getattr(e, "__notes__", ())):
                # which node failed, on errors that come from tinygrad itself (their messages name tensors)
                e.add_note(f"while running ONNX {ctx.op} node {ctx.name!r}")
            raise
        finally:
            ctx.scope = None
        return outs

    def _check_sizes(self, ctx: NodeCtx, outs: list[Value]) -> None:
        """Every tensor a node made, measured before anything is realized: one out of proportion to the model and
        its inputs is refused here, whatever op made it (see _limits.py)."""
        limit = self.runner.size_limit
        for o in outs:
            for v in (o if isinstance(o, list) else [o]):
                if isinstance(v, Tensor):
                    limit.check(str(ctx), v.shape, v.dtype.itemsize, v.dtype.name)
                elif isinstance(v, np.ndarray):
                    limit.check(str(ctx), v.shape, v.itemsize, v.dtype.name)

    def run(self) -> None:
        for ctx, fn in self.graph.nodes:
            args = [self.get(n) if n else None for n in ctx.inputs]
            outs = self.call(ctx, fn, args)
            for name, v in zip(ctx.outputs, outs):
                if name:
                    self.values[name] = v

    def run_subgraph(self, ctx: NodeCtx, g: _Graph, inputs: list[Value]) -> list[Value]:
        """Run a subgraph attribute of `ctx`'s node (If branches, Loop and Scan bodies), which runs in this scope,
        with the given formal inputs; it sees the values of this graph and of those it is nested in."""
        if len(g.inputs) != len(inputs):
            raise ctx.fail(f"its subgraph {g.name!r} takes {len(g.inputs)} inputs, the node passes it {len(inputs)}")
        scope = _Scope(self.runner, g, dict(zip(g.inputs, inputs)), self)
        scope.run()
        return [scope.get(n) for n in g.outputs]


class OnnxRunner:
    """Run an ONNX model with tinygrad.

        runner = OnnxRunner("model.onnx")             # a path, the model's bytes, or an onnx.ModelProto
        out = runner({"input": np_array_or_tensor})   # -> {output name: Tensor}

    `jit=True` replays repeated calls with the same input shapes through TinyJit (one capture per distinct set of
    input shapes; its outputs are overwritten by the next call with those shapes, so copy what must outlive it).
    A model that reads device values on the host mid-graph (NonZero, a shape computed from data) runs eagerly.
    `device` picks the device (default: Device.DEFAULT). `base_dir` is the folder of external data for a model
    given as bytes or a ModelProto. `max_tensor_bytes` is the largest tensor a node may make (default: the
    environment variable TG_ONNX_MAX_TENSOR_BYTES, else in proportion to the model and its inputs, see _limits.py);
    a node asking for more raises an OnnxError before anything is allocated.
    """

    def __init__(self, model: Any, *, device: str | None = None, jit: bool = False,
                 base_dir: str | os.PathLike | None = None, max_tensor_bytes: int | None = None):
        proto, self.folder = load_model(model, base_dir)
        onnx = import_onnx()
        #: the largest tensor a node may make (see _limits.py); external data adds to the model's bytes as it is read
        self.size_limit = SizeLimit(proto.ByteSize(), max_tensor_bytes)
        self.device = Device.canonicalize(device)
        self.opsets: dict[str, int] = {}
        for imp in proto.opset_import:
            self.opsets["" if imp.domain in ("", "ai.onnx") else imp.domain] = int(imp.version)
        newest = onnx.defs.onnx_opset_version()
        default = self.opsets.get("")
        if default is not None and default > newest:
            raise OnnxError(f"the model uses opset {default} of the default domain; the installed onnx "
                            f"{onnx.__version__} defines opsets up to {newest}")
        if default is None and not self.opsets:
            self.opsets[""] = newest
        self.functions: dict[tuple[str, str], Any] = {}
        for f in proto.functions:  # copies, for the same reason as the input types (see _Graph)
            self.functions[(f.domain, f.name)] = onnx.FunctionProto()
            self.functions[(f.domain, f.name)].CopyFrom(f)
        # constants of the graph by id of their host array, with the device copy made on first use
        self._tensors: dict[int, tuple[np.ndarray, Tensor | None]] = {}
        self._host_reads = 0
        self._reading_allowed = True
        self.graph = _Graph(proto.graph, self, None, "main graph")
        self.jit = jit
        self._jits: OrderedDict[tuple, TinyJit | None] = OrderedDict()
        self._host_outputs: dict[tuple, dict[str, Value] | None] = {}
        self._last_result: dict[str, Value] = {}
        #: numpy inputs by (name, shape, dtype) in the order given -> the key of their captured jit, the jit, the
        #: tensors its replays read, and for each input the function that refills its tensor in place from an array
        #: (`_staged_call`)
        self._staged: OrderedDict[tuple, _Staged] = OrderedDict()

    # ---- description ----
    @property
    def input_names(self) -> list[str]:
        return list(self.graph.inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self.graph.outputs)

    def input_spec(self) -> dict[str, tuple[str, tuple[int | str | None, ...]]]:
        """Each input's ONNX element type name and shape (an int, the dim_param name, or None per dimension)."""
        spec: dict[str, tuple[str, tuple[int | str | None, ...]]] = {}
        for name, tp in self.graph.input_info.items():
            if tp.HasField("tensor_type"):
                tt = tp.tensor_type
                dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim)
                spec[name] = (type_name(tt.elem_type), dims)
            else:
                spec[name] = (tp.WhichOneof("value") or "unknown", ())
        return spec

    # ---- compile ----
    def compile_node(self, node: Any, graph: _Graph, what: str) -> tuple[NodeCtx, Callable[..., Any]]:
        # protobuf hands out a string field that is not UTF-8 (a damaged model) as bytes
        if not all(isinstance(t, str) for t in (node.op_type, node.domain, node.name, *node.input, *node.output,
                                                  *(a.name for a in node.attribute))):
            raise OnnxError(f"{what}: its op type, a name or an attribute name is not valid UTF-8 text")
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        name = node.name or what
        opset = self.opsets.get(domain, 0)
        check_node(node, domain, opset, f"{node.op_type} node {name!r}")
        attrs: dict[str, Any] = {}
        for a in node.attribute:
            v = attribute_value(a, self.folder, f"node {name!r}")
            if isinstance(v, _AttrRef):
                raise OnnxError(f"node {name!r} refers to a function attribute {v.name!r} outside a function")
            if a.type == a.GRAPH:
                v = _Graph(v, self, graph, f"{name}/{a.name}")
            elif a.type == a.GRAPHS:
                v = [_Graph(x, self, graph, f"{name}/{a.name}") for x in v]
            elif a.type == a.TENSOR:
                attrs["_elem_type"] = int(a.t.data_type)
                v = self.constant(v, int(a.t.data_type))
            attrs[a.name] = v
        ctx = NodeCtx(node.op_type, domain, name, list(node.input), list(node.output), attrs, opset)
        fn = OPS.get((domain, node.op_type))
        if fn is None and (node.domain, node.op_type) in self.functions:
            fn = self._function_op(self.functions[(node.domain, node.op_type)], node, graph)
        if fn is None:
            fn = self._schema_function(node, domain, opset, graph)
        if fn is None:
            raise NotImplementedError(f"ONNX op {node.op_type} (domain {domain or 'ai.onnx'}, opset {opset}) of node "
                                      f"{name!r} is not supported by tinygrad.onnx")
        return ctx, fn

    def _function_op(self, f: Any, node: Any, graph: _Graph) -> Callable[..., Any]:
        """A node calling a model-local function: the function body, with the node's attributes substituted."""
        onnx = import_onnx()
        attrs = {a.name: a for a in node.attribute}
        defaults = {a.name: a for a in f.attribute_proto}
        body = onnx.GraphProto()
        body.name = f"function {f.domain}.{f.name}"
        for fn_node in f.node:
            n2 = body.node.add()
            n2.CopyFrom(fn_node)
            del n2.attribute[:]
            for a in fn_node.attribute:
                if a.ref_attr_name:
                    src = attrs.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
                    if src is None:
                        continue  # an unset optional attribute: the op's default
                    a2 = n2.attribute.add()
                    a2.CopyFrom(src)
                    a2.name = a.name
                else:
                    n2.attribute.add().CopyFrom(a)
        for name in f.input:
            body.input.add().name = name
        for name in f.output:
            body.output.add().name = name
        saved = dict(self.opsets)
        for imp in f.opset_import:
            self.opsets.setdefault("" if imp.domain in ("", "ai.onnx") else imp.domain, int(imp.version))
        try:
            sub = _Graph(body, self, None, body.name)
        finally:
            self.opsets = saved
        return _call_subgraph(sub, list(f.input))

    def _schema_function(self, node: Any, domain: str, opset: int, graph: _Graph) -> Callable[..., Any] | None:
        """An op this runner has no implementation of, but whose ONNX schema defines it as a function of other
        ops: that function body (expanded once, at load)."""
        onnx = import_onnx()
        try:
            schema = onnx.defs.get_schema(node.op_type, opset, domain)
        except Exception:
            return None
        body: Any = None
        try:
            if schema.has_function:
                body = schema.get_function_with_opset_version(opset) or schema.function_body
        except Exception:
            body = None
        f = onnx.FunctionProto()
        if isinstance(body, bytes):
            f.ParseFromString(body)
        elif body is not None:
            f.CopyFrom(body)
        if not len(f.node):
            return None
        if not f.name:
            f.name, f.domain = node.op_type, domain
        return self._function_op(f, node, graph)

    # ---- constants and transfers ----
    def constant(self, arr: np.ndarray, elem_type: int) -> Value:
        """A constant of the graph: a host array when numpy holds the type exactly (and it is small enough to
        matter for shapes), else a device tensor made once."""
        if elem_type == STRING:
            return arr
        native = arr.dtype.name in _NUMPY_NATIVE and elem_type not in (16, 17, 19) and elem_type not in EMULATED
        if native and arr.size <= HOST_CONST_LIMIT:
            return self.keep_const(arr)
        # weights: uploaded now, once; the host copy (a view of the protobuf's bytes) is dropped with the proto
        t = Tensor(host_array(arr), device=self.device)
        return (t if t.dtype == tg_dtype(elem_type) else t.cast(tg_dtype(elem_type))).realize()

    def keep_const(self, v: Value) -> Value:
        if isinstance(v, np.ndarray):
            if v.dtype.kind in "OUS":
                return v
            self._tensors.setdefault(id(v), (v, None))
            return v
        if isinstance(v, Tensor):
            if v.dtype.name in _NUMPY_NATIVE and v.numel() <= HOST_CONST_LIMIT:
                return self.keep_const(v.numpy())
            return v.realize()
        return v

    def to_tensor(self, arr: np.ndarray) -> Tensor:
        hit = self._tensors.get(id(arr))
        if hit is not None and hit[0] is arr:
            if hit[1] is None:
                t = Tensor(arr, device=self.device).realize()
                self._tensors[id(arr)] = (arr, t)
                return t
            return hit[1]
        if arr.dtype.kind in "OUS":
            raise OnnxError("string tensors exist only on the host; this op needs a numeric tensor")
        return Tensor(arr, device=self.device)

    def read_host(self, t: Tensor, ctx: NodeCtx) -> np.ndarray:
        if not self._reading_allowed:
            raise HostRead(f"{ctx} reads a device tensor on the host")
        self._host_reads += 1
        return t.numpy()

    # ---- running ----
    def _prepare(self, inputs: Mapping[str, Any]) -> dict[str, Value]:
        expected = self.graph.inputs
        unknown = [k for k in inputs if k not in self.graph.input_info]
        if unknown:
            raise OnnxError(f"unknown input(s) {unknown}; the model's inputs are {expected}")
        missing = [k for k in expected if k not in inputs]
        if missing:
            spec = self.input_spec()
            raise OnnxError("missing input(s): " + ", ".join(f"{k!r} ({spec[k][0]} {list(spec[k][1])})"
                                                                for k in missing))
        # tensor inputs (the usual kind) by the spec read from their type once, not from the protobuf each call
        specs = self.graph.tensor_inputs
        return {k: self._convert_tensor(k, inputs[k], specs[k]) if k in specs else
                self._convert_input(k, inputs[k], self.graph.input_info[k]) for k in expected}

    def _convert_input(self, name: str, v: Any, tp: Any) -> Value:
        kind = tp.WhichOneof("value")
        if kind == "optional_type":
            if v is None:
                return Absent
            return self._convert_input(name, v, tp.optional_type.elem_type)
        if kind == "sequence_type":
            if not isinstance(v, (list, tuple)):
                raise OnnxError(f"input {name!r} is a sequence; pass a list")
            return [self._convert_input(name, x, tp.sequence_type.elem_type) for x in v]
        if kind != "tensor_type":
            raise NotImplementedError(f"input {name!r} has type {kind}, which is not supported")
        spec = _TensorInput.of(tp.tensor_type)
        return np.asarray(v, dtype=object) if spec is None else self._convert_tensor(name, v, spec)

    def _convert_tensor(self, name: str, v: Any, spec: _TensorInput) -> Value:
        if isinstance(v, Tensor):
            t = v if v.device == self.device else v.to(self.device)
            if t.dtype != spec.want:
                raise OnnxError(f"input {name!r} must be {type_name(spec.elem_type)} ({spec.want}), got a {t.dtype} "
                                f"tensor")
        else:
            np_type, native = spec.np_type, spec.np_type.name in _NUMPY_NATIVE
            if isinstance(v, (list, tuple, int, float, bool)):
                # Python data takes the declared type (through float32 for the types numpy lacks)
                arr = np.asarray(v, dtype=np_type if native else np.float32)
            else:
                arr = np.asarray(v)
                if arr.dtype != np_type and not (not native and arr.dtype == np.float32 and spec.want.is_float):
                    raise OnnxError(f"input {name!r} must be {type_name(spec.elem_type)} ({np_type.name}), got an "
                                    f"array of {arr.dtype}")
            t = Tensor(host_array(arr), device=self.device)
            if t.dtype != spec.want:
                t = t.cast(spec.want)
        if spec.rank is not None:
            if spec.rank != t.ndim:
                raise OnnxError(f"input {name!r} must have rank {spec.rank}, got shape {t.shape}")
            for i, size in spec.fixed:
                if t.shape[i] != size:
                    raise OnnxError(f"input {name!r} must have size {size} in dimension {i}, got shape {t.shape}")
        return t

    def _execute(self, values: dict[str, Value]) -> dict[str, Value]:
        self.size_limit.input_bytes = sum(_nbytes(v) for v in values.values())
        scope = _Scope(self, self.graph, dict(values), None)
        scope.run()
        return {name: scope.get(name) for name in self.graph.outputs}

    def __call__(self, inputs: Mapping[str, Any] | None = None, **kw_inputs: Any) -> dict[str, Any]:
        """Run the model. Inputs by name (numpy arrays, Tensors, Python lists); returns {output name: Tensor}
        (a list of Tensors for a sequence output, None for an empty optional)."""
        given = {**(inputs or {}), **kw_inputs}
        if self._staged and (staged := self._staged_call(given)) is not None:
            return staged
        values = self._prepare(given)
        tensors = {k: v for k, v in values.items() if isinstance(v, Tensor)}
        if not self.jit or len(tensors) != len(values):
            return _finish(self._execute(values), self.device)
        key = tuple((k, v.shape, v.dtype) for k, v in tensors.items())
        if key in self._jits:
            self._jits.move_to_end(key)
        else:
            self._jits[key] = self._make_jit(key, list(tensors))
            while len(self._jits) > JIT_CACHE:
                old, _ = self._jits.popitem(last=False)
                self._host_outputs.pop(old, None)
        jit = self._jits[key]
        if jit is None:
            return _finish(self._execute(values), self.device)
        first = jit.cnt == 0
        before = self._host_reads
        # TinyJit's first call runs the graph eagerly: host reads of device data are allowed there, and any makes
        # this input signature one that always runs eagerly (a replay could not repeat them)
        self._reading_allowed = first
        try:
            res = jit(*tensors.values())
        except (HostRead, JitError):
            # a read only a later call made (data-dependent control flow): give up on capturing this signature
            self._jits[key] = None
            return _finish(self._execute(values), self.device)
        finally:
            self._reading_allowed = True
        if first:
            if self._host_reads != before or self._host_outputs.get(key) is None:
                self._jits[key] = None
            return _finish(self._last_result, self.device)  # the eager first call: every output as computed
        out: dict[str, Any] = {**res, **(self._host_outputs.get(key) or {})}
        self._stage(key, jit, given, values)
        return _finish({k: out[k] for k in self.graph.outputs}, self.device)

    @staticmethod
    def _host_key(given: Mapping[str, Any]) -> tuple | None:
        if not all(type(v) is np.ndarray for v in given.values()):
            return None
        return tuple((k, v.shape, v.dtype) for k, v in given.items())

    def _stage(self, key: tuple, jit: TinyJit, given: Mapping[str, Any], values: dict[str, Value]) -> None:
        """After a replay of numpy inputs that became tensors as they were (no cast): keep input buffers for their
        signature, so that later calls copy the arrays in and replay without making tensors. Not when a replay
        returns an input: that output would be the kept buffer, which the next call overwrites."""
        hkey = self._host_key(given)
        if hkey is None or hkey in self._staged or jit.cnt < 2 or jit.returns_inputs:
            return
        specs = self.graph.tensor_inputs
        if any(k not in specs or given[k].dtype != specs[k].np_type or specs[k].np_type.name not in _NUMPY_NATIVE
               or given[k].size == 0 for k in values):
            return
        staging = {k: Tensor(np.ascontiguousarray(given[k]), device=self.device).realize() for k in values}
        writers = [(k, _writer(t)) for k, t in staging.items()]
        self._staged[hkey] = _Staged(key, jit, list(staging.values()), writers)
        while len(self._staged) > JIT_CACHE:
            self._staged.popitem(last=False)

    def _staged_call(self, given: Mapping[str, Any]) -> dict[str, Any] | None:
        """The call for numpy inputs of a staged signature (`_stage`): the arrays copied into the kept buffers and
        the captured kernels replayed on them; None when the signature is not staged (any more)."""
        hkey = self._host_key(given)
        if hkey is None or (entry := self._staged.get(hkey)) is None:
            return None
        key, jit = entry.key, entry.jit
        if self._jits.get(key) is not jit:  # evicted, or given up on since
            del self._staged[hkey]
            return None
        for name, write in entry.writers:
            write(given[name])
        self._jits.move_to_end(key)
        res = jit(*entry.tensors)
        if not (host := self._host_outputs.get(key)):  # every output is a replay's result: realized tensors
            return {k: res[k] for k in self.graph.outputs}
        out: dict[str, Any] = {**res, **host}
        return _finish({k: out[k] for k in self.graph.outputs}, self.device)

    def _make_jit(self, key: tuple, names: list[str]) -> TinyJit:
        def run(*ts: Tensor) -> dict[str, Tensor]:
            res = self._last_result = self._execute(dict(zip(names, ts)))
            if any(isinstance(v, list) for v in res.values()):
                self._host_outputs[key] = None  # sequence outputs: not captured
            else:
                # outputs known on the host (constants, shapes) are not kernels' results: kept aside for replays
                self._host_outputs[key] = {k: v for k, v in res.items() if not isinstance(v, Tensor)}
            return {k: v for k, v in res.items() if isinstance(v, Tensor)}
        return TinyJit(run)


@dataclass(frozen=True)
class _Staged:
    key: tuple
    jit: TinyJit
    tensors: list[Tensor]
    writers: list[tuple[str, Callable[[np.ndarray], None]]]


def _writer(t: Tensor) -> Callable[[np.ndarray], None]:
    """A function writing an array of t's shape and dtype into t's buffer: a copy straight into host memory where
    the device has it (the allocator's `host_view`), else a device copy-in of the array's bytes."""
    buf = t._buffer()
    if buf.nbytes and (memory := buf.host_array()) is not None:
        view = memory.reshape(t.shape)
        return lambda arr: np.copyto(view, arr, casting="no")

    def copy_in(arr: np.ndarray) -> None:
        buf.copyin(np.ascontiguousarray(arr).reshape(-1).view(np.uint8).data)
    return copy_in


def _nbytes(v: Value) -> int:
    if isinstance(v, Tensor):
        return v.numel() * v.dtype.itemsize
    if isinstance(v, np.ndarray):
        return v.nbytes
    if isinstance(v, list):
        return sum(_nbytes(x) for x in v)
    return 0


def _finish(values: dict[str, Value], device: str) -> dict[str, Any]:
    """The outputs as the caller gets them: Tensors (realized together, in one schedule, so that work they share
    runs once), lists for sequences, None for empty optionals; strings stay numpy."""
    def conv(v: Value) -> Any:
        if isinstance(v, np.ndarray):
            return v if v.dtype.kind in "OUS" else Tensor(v, device=device)
        if isinstance(v, list):
            return [conv(x) for x in v]
        return None if v is Absent else v
    out = {k: conv(v) for k, v in values.items()}
    pending = [t for v in out.values() for t in (v if isinstance(v, list) else [v]) if isinstance(t, Tensor)]
    if pending:
        Tensor.realize(*pending)
    return out


def _call_subgraph(sub: _Graph, input_names: list[str]) -> Callable[..., Any]:
    """An op running `sub` on its inputs (model-local functions and schema function bodies)."""
    def fn(ctx: NodeCtx, *args: Value) -> tuple[Value, ...]:
        assert ctx.scope is not None
        vals = {n: a for n, a in zip(input_names, args) if n and a is not None}
        scope = _Scope(ctx.scope.runner, sub, vals, None)
        scope.run()
        return tuple(scope.get(n) for n in sub.outputs)
    return fn


