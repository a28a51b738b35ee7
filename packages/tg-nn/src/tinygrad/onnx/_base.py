"""What every operator implementation shares: the value types flowing through a graph, the per-node context that
gives attributes and converts values, and the operator registries.

A value is one of
  * a Tensor (device data, computed lazily),
  * a numpy array (host data known before the device runs: initializers, Constant nodes, shapes, and whatever
    shape arithmetic is computed from those alone, see _host.py),
  * a list of values (an ONNX sequence), or Absent / None (an optional without a value / an input left out).
Operators take values and return values; `ctx.t(v)` makes a Tensor of any of them, `ctx.host(v)` a numpy array.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from tinygrad import Tensor, dtypes
from tinygrad.dtype import DType
from tinygrad.onnx._proto import EMULATED, OnnxError, tg_dtype

if TYPE_CHECKING:
    from tinygrad.onnx._runner import _Scope

Value = Any  # Tensor | np.ndarray | list | _AbsentType | None (see the module docstring)


class _AbsentType:
    """An optional value that holds nothing (ONNX `Optional()` without input), unlike an input left out (None)."""

    _inst: _AbsentType | None = None

    def __new__(cls) -> _AbsentType:
        if cls._inst is None:
            cls._inst = super().__new__(cls)
        return cls._inst

    def __repr__(self) -> str:
        return "Absent"


Absent = _AbsentType()


class HostRead(Exception):
    """Raised inside an op that needs a device tensor's value on the host while the runner may not read one."""


class TooBig(Exception):
    """A host implementation declining a result too large for the host (the device implementation runs)."""


class NodeCtx:
    """One node of a graph as its operator sees it: attributes (with defaults), the opset of its domain, the
    number of outputs wanted, and conversions between values."""

    __slots__ = ("attrs", "domain", "in_types", "inputs", "name", "op", "opset", "outputs", "scope")

    def __init__(self, op: str, domain: str, name: str, inputs: list[str], outputs: list[str], attrs: dict[str, Any],
                 opset: int):
        self.op, self.domain, self.name = op, domain, name
        self.inputs, self.outputs, self.attrs, self.opset = inputs, outputs, attrs, opset
        self.in_types: list[int | None] = [None] * len(inputs)  # static ONNX element types, where known
        self.scope: _Scope | None = None  # set while the node runs

    def __repr__(self) -> str:
        return f"{self.op} node {self.name!r}"

    # ---- attributes ----
    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def required(self, name: str) -> Any:
        """An attribute the op cannot run without (a subgraph, a count): its absence is the model's fault."""
        if name not in self.attrs:
            raise self.fail(f"the required attribute {name!r} is missing")
        return self.attrs[name]

    def sized_ints(self, name: str, n: int, default: int, minimum: int | None = None, need: str = "") -> list[int]:
        """An INTS attribute that must hold exactly `n` values (one per spatial axis, or two for pads); `default`
        fills all `n` when it is absent. Values below `minimum` are refused (a zero stride divides by zero)."""
        v = self.attrs.get(name)
        if v is None or (isinstance(v, list) and not v):
            return [default] * n
        if not isinstance(v, list) or not all(isinstance(x, int) for x in v):
            raise self.fail(f"attribute {name!r} must be a list of ints, got {v!r}")
        if len(v) != n:
            raise self.fail(f"attribute {name!r} has {len(v)} values {v}; {need or f'{n} are needed'}")
        if minimum is not None and any(x < minimum for x in v):
            raise self.fail(f"attribute {name!r} is {v}; each value must be at least {minimum}")
        return list(v)

    def has(self, name: str) -> bool:
        return name in self.attrs

    @property
    def n_out(self) -> int:
        """Outputs wanted: trailing empty output names do not count."""
        n = len(self.outputs)
        while n and not self.outputs[n - 1]:
            n -= 1
        return n

    def wants(self, i: int) -> bool:
        return i < len(self.outputs) and bool(self.outputs[i])

    def fail(self, msg: str) -> OnnxError:
        return OnnxError(f"{self.op} node {self.name!r}: {msg}")

    # ---- values ----
    def t(self, v: Value) -> Tensor:
        """The value as a Tensor (host arrays are uploaded; constants of the graph only once)."""
        if isinstance(v, Tensor):
            return v
        if isinstance(v, np.ndarray):
            assert self.scope is not None
            return self.scope.runner.to_tensor(v)
        if isinstance(v, np.generic):
            assert self.scope is not None
            return self.scope.runner.to_tensor(np.asarray(v))
        if isinstance(v, (bool, int, float)):
            return Tensor(v)
        raise self.fail(f"expected a tensor, got {'nothing' if v is None or v is Absent else type(v).__name__}")

    def host(self, v: Value) -> np.ndarray:
        """The value as a numpy array; a device tensor is read (which a jitted run refuses, see HostRead)."""
        if isinstance(v, np.ndarray):
            return v
        if isinstance(v, Tensor):
            assert self.scope is not None
            return self.scope.runner.read_host(v, self)
        if isinstance(v, (bool, int, float, np.generic)):
            return np.asarray(v)
        raise self.fail(f"expected a tensor, got {'nothing' if v is None or v is Absent else type(v).__name__}")

    def ints(self, v: Value) -> list[int]:
        return [int(x) for x in self.host(v).reshape(-1).tolist()]

    def shape_arg(self, v: Value, itemsize: int = 1) -> tuple[int, ...]:
        """A shape given as a tensor input: non-negative ints whose tensor stays within the size limit."""
        shape = tuple(self.ints(v))
        self.check_shape(shape, itemsize)
        return shape

    def check_shape(self, shape: Sequence[int], itemsize: int = 1, dtype: str = "") -> None:
        """Refuse, before anything is built, a tensor of this shape (elements of `itemsize` bytes) that is out of
        proportion to the model and its inputs (see _limits.py)."""
        assert self.scope is not None
        self.scope.runner.size_limit.check(str(self), shape, itemsize, dtype)

    def dtype_of_type(self, elem_type: int) -> DType:
        try:
            return tg_dtype(elem_type)
        except NotImplementedError as e:
            raise NotImplementedError(f"{self}: {e}") from None


# ---- registries ----
OpFn = Callable[..., Any]
#: (domain, op_type) -> implementation taking (ctx, *inputs) and returning a value or a tuple of values
OPS: dict[tuple[str, str], OpFn] = {}
#: op_type -> numpy implementation used when every input is a host array (shape arithmetic); same signature
HOST_OPS: dict[str, OpFn] = {}
#: ops whose results differ between runs (never folded into constants at load)
RANDOM_OPS = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial",
              "Dropout"}
#: ops that run subgraphs or need the runner itself (never folded, never run on the host by _host.py)
SCOPE_OPS = {"If", "Loop", "Scan", "SequenceMap"}


def op(*names: str, domain: str = "") -> Callable[[OpFn], OpFn]:
    def deco(fn: OpFn) -> OpFn:
        for n in names:
            OPS[(domain, n)] = fn
        return fn
    return deco


def host_op(*names: str) -> Callable[[OpFn], OpFn]:
    def deco(fn: OpFn) -> OpFn:
        for n in names:
            HOST_OPS[n] = fn
        return fn
    return deco


# ---- small helpers used by many ops ----
def axis_of(axis: int, ndim: int, ctx: NodeCtx) -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise ctx.fail(f"axis {axis} is out of range for rank {ndim}")
    return axis + ndim if axis < 0 else axis


def float_like(x: Tensor) -> Tensor:
    return x if x.dtype.is_float else x.cast(dtypes.float32)


def emulated_kind(elem_type: int | None) -> str | None:
    return EMULATED.get(elem_type, (None, None))[1] if elem_type is not None else None
