"""The `torch.compile` backend: aot_autograd hands over forward and backward FX graphs of aten ops, each graph
runs as tinygrad Tensor ops under a `TinyJit` (one capture per set of input shapes), and a graph with an op the
table lacks runs in torch instead, with a warning naming the op.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.fx
from tinygrad import Device, Tensor, TinyJit, dtypes
from tinygrad.torch_compile.ops import ATEN_OPS, PYTHON_OPS, TORCH_TO_TINY, Unsupported, current_arg_metas, current_meta
from torch._decomp import core_aten_decompositions
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func


class TinygradFallbackWarning(UserWarning):
    """A graph (or one shape of it) runs in torch eager because the tinygrad backend cannot run one of its ops."""


_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, TinygradFallbackWarning, stacklevel=3)


def _decompositions() -> dict[Any, Callable[..., Any]]:
    """torch's core-aten decompositions, except for the ops the table runs whole: one tinygrad expression for a
    batch norm or an nll loss fuses as well as its pieces and keeps the graph short."""
    table = core_aten_decompositions()
    return {op: fn for op, fn in table.items() if op not in ATEN_OPS}


# ---- torch <-> tinygrad ----

def to_tinygrad(t: torch.Tensor) -> Tensor:
    """A CPU torch tensor as a tinygrad one on the default device: sharing its memory through DLPack where that
    device works in host memory, else a copy (a strided view is made contiguous first, so that the jit gets plain
    buffers as inputs)."""
    if t.dtype not in TORCH_TO_TINY:
        raise Unsupported(f"dtype {t.dtype} has no tinygrad counterpart")
    return Tensor.from_dlpack(t.detach().resolve_conj().resolve_neg().contiguous(), device=Device.DEFAULT)


def to_torch(t: Tensor) -> torch.Tensor:
    """A torch tensor holding a copy of t: the jit writes its next results into t's memory (bfloat16 travels as its
    bits, which numpy cannot name)."""
    bf16 = t.dtype == dtypes.bfloat16
    arr = (t.bitcast(dtypes.int16) if bf16 else t).numpy()
    # np.ascontiguousarray would turn a 0-d array into a 1-d one
    arr = arr if arr.flags.c_contiguous and arr.flags.writeable else np.array(arr, order="C")
    out = torch.from_numpy(arr).reshape(t.shape)
    return out.view(torch.bfloat16) if bf16 else out


def _as_int(v: Any) -> Any:
    return int(v) if isinstance(v, (torch.SymInt, np.integer)) else v


# ---- running a graph ----

def _shape_mismatch(meta: Any, value: Any) -> str | None:
    if isinstance(meta, torch.Tensor) and isinstance(value, Tensor):
        ms = tuple(meta.shape)
        if len(ms) != len(value.shape) or any(isinstance(m, int) and m != v for m, v in zip(ms, value.shape)):
            return f"shape {value.shape} where torch has {ms}"
    return None


def _fix_dtype(meta: Any, value: Any) -> Any:
    """Cast the result to the dtype torch gives the node: its type promotion and reduction dtypes rule."""
    if isinstance(value, Tensor) and isinstance(meta, torch.Tensor) and meta.dtype in TORCH_TO_TINY:
        want = TORCH_TO_TINY[meta.dtype]
        return value if value.dtype == want else value.cast(want)
    if isinstance(value, (tuple, list)) and isinstance(meta, (tuple, list)) and len(meta) == len(value):
        return type(value)(_fix_dtype(m, v) for m, v in zip(meta, value))
    return value


class _Interpreter:
    """Evaluates an aten FX graph on tinygrad Tensors; lazily, so nothing runs until the outputs are realized."""

    def __init__(self, gm: torch.fx.GraphModule):
        self.gm = gm
        self.nodes = list(gm.graph.nodes)
        self.constants: dict[str, Tensor] = {}

    def run(self, inputs: Sequence[Any], check: bool) -> list[Any]:
        env: dict[torch.fx.Node, Any] = {}
        it = iter(inputs)
        out: list[Any] = []
        for node in self.nodes:
            if node.op == "placeholder":
                env[node] = next(it)
            elif node.op == "get_attr":
                if node.target not in self.constants:
                    self.constants[node.target] = to_tinygrad(getattr(self.gm, str(node.target))).realize()
                env[node] = self.constants[node.target]
            elif node.op == "call_function":
                args = torch.fx.node.map_arg(node.args, lambda n: env[n])
                kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
                meta = node.meta.get("val")
                token = current_meta.set(meta)
                arg_token = current_arg_metas.set(tuple(a.meta.get("val") if isinstance(a, torch.fx.Node) else None
                                                        for a in node.args))
                try:
                    fn = ATEN_OPS.get(node.target) or PYTHON_OPS[node.target]
                    value = _fix_dtype(meta, fn(*args, **kwargs))
                except Exception as e:  # name the op: the warning of the fallback says which one failed
                    why = str(e) if isinstance(e, Unsupported) else f"{type(e).__name__}: {e}"
                    raise Unsupported(f"{node.target}: {why}") from e
                finally:
                    current_meta.reset(token)
                    current_arg_metas.reset(arg_token)
                if check and (mismatch := _shape_mismatch(meta, value)):
                    raise Unsupported(f"{node.target} gave {mismatch}")
                env[node] = value
            elif node.op == "output":
                out = list(torch.fx.node.map_arg(node.args[0], lambda n: env[n]))
            else:
                raise Unsupported(f"FX node kind {node.op!r}")
        return out


class _CompiledGraph:
    """The callable aot_autograd gets for one graph: boxed (it takes the argument list and empties it)."""

    def __init__(self, gm: torch.fx.GraphModule):
        # on the instance, not the class: torch's wrappers copy the callable's __dict__ to learn it is boxed
        self._boxed_call = True
        self.gm = gm
        self.interp = _Interpreter(gm)
        self.n_inputs = sum(n.op == "placeholder" for n in gm.graph.nodes)
        # per input-shape key: (the jitted graph, which outputs are plain values, those values), or None
        # where this shape runs in torch
        self.runners: dict[tuple[Any, ...], tuple[Callable[..., Any], list[Any]] | None] = {}
        self.eager = make_boxed_func(gm)

    def __call__(self, args: list[Any]) -> list[Any]:
        if any(isinstance(a, torch.Tensor) and a.device.type != "cpu" for a in args):
            _warn_once("device", "the tinygrad torch.compile backend takes CPU tensors: this graph runs in torch")
            return self.eager(args)
        key = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else _as_int(a) for a in args)
        inputs = list(args)
        args.clear()  # boxed: dropping the caller's references lets torch free saved activations early
        first = key not in self.runners
        if first:
            self.runners[key] = self._build(inputs)
        runner = self.runners[key]
        if runner is None:
            return self.eager(inputs)
        jit, layout = runner
        try:
            results = iter(jit(*[to_tinygrad(a) for a in inputs if isinstance(a, torch.Tensor)]))
            return [to_torch(next(results)) if slot is _TENSOR else slot for slot in layout]
        except Exception as e:
            if not first:
                raise
            # the first run of a shape is eager tinygrad: what fails there (a kernel the device cannot compile, say)
            # sends this shape to torch rather than failing the model
            self.runners[key] = None
            _warn_once(f"run {type(e).__name__}: {e}", f"tinygrad torch.compile backend: running the graph failed "
                       f"({type(e).__name__}: {e}); this graph runs in torch eager instead")
            return self.eager(inputs)

    def _build(self, args: list[Any]) -> tuple[Callable[..., Any], list[Any]] | None:
        """Check this shape's graph lazily (every op supported for these arguments, torch's shapes) and make its
        jitted runner; None (with a warning) where it must run in torch."""
        is_tensor = [isinstance(a, torch.Tensor) for a in args]
        values = [None if t else _as_int(a) for a, t in zip(args, is_tensor)]

        def graph(*tensors: Tensor) -> list[Any]:
            it = iter(tensors)
            return self.interp.run([next(it) if t else v for t, v in zip(is_tensor, values)], check=False)

        bad = [a.dtype for a in args if isinstance(a, torch.Tensor) and a.dtype not in TORCH_TO_TINY]
        if bad:
            _warn_once(f"dtype {bad[0]}", f"tinygrad torch.compile backend: dtype {bad[0]} has no tinygrad "
                       f"counterpart; graphs with it run in torch eager instead")
            return None
        try:
            probe = [Tensor.empty(*a.shape, dtype=TORCH_TO_TINY[a.dtype]) if isinstance(a, torch.Tensor) else v
                     for a, v in zip(args, values)]
            outs = self.interp.run(probe, check=True)
        except Exception as e:  # any op that cannot be built for these arguments means torch runs the graph
            reason = str(e) if isinstance(e, Unsupported) else f"{type(e).__name__}: {e}"
            _warn_once(reason, f"tinygrad torch.compile backend: {reason}; this graph runs in torch eager instead")
            return None
        layout = [_TENSOR if isinstance(o, Tensor) else o for o in outs]

        def tensor_outputs(*tensors: Tensor) -> tuple[Tensor, ...]:
            # each output its own buffer: the jit rewrites outputs on the next replay, and they are copied out
            return tuple(o.contiguous() for o in graph(*tensors) if isinstance(o, Tensor))

        return (TinyJit(tensor_outputs) if any(is_tensor) else tensor_outputs), layout


_TENSOR = object()  # marks an output slot that holds a tensor


def unsupported_ops(gm: torch.fx.GraphModule) -> list[str]:
    """The aten ops (and other FX calls) of a graph that the table lacks, in graph order."""
    missing: list[str] = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target not in ATEN_OPS and node.target not in PYTHON_OPS:
            if str(node.target) not in missing:
                missing.append(str(node.target))
        elif node.op not in ("placeholder", "get_attr", "call_function", "output"):
            missing.append(f"FX {node.op} node")
    return missing


def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """aot_autograd's forward/backward compiler: the graph on tinygrad, or in torch where an op is missing."""
    missing = unsupported_ops(gm)
    if missing:
        for op in missing:
            _warn_once(op, f"tinygrad torch.compile backend has no implementation of {op}; "
                           f"the graph that uses it runs in torch eager instead (a graph break)")
        return make_boxed_func(gm)
    return _CompiledGraph(gm)


def tinygrad_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **options: Any) -> Callable[..., Any]:
    """The dynamo backend registered as "tinygrad": `torch.compile(model, backend="tinygrad")`."""
    if options:
        raise TypeError(f"the tinygrad torch.compile backend takes no options, got {sorted(options)}")
    backend = aot_autograd(fw_compiler=compile_graph, bw_compiler=compile_graph, decompositions=_decompositions())
    return backend(gm, example_inputs)
