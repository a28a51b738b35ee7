"""`Tensor`: a lazy n-dimensional array with autograd, built on the UOp graph.

Every method builds UOps; nothing runs until `realize()` (or `numpy()`, `tolist()`, `item()`),
which hands the graph to the scheduler (engine/schedule.py) and runs the resulting kernels.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from tinygrad.device import Buffer, Device
from tinygrad.dtype import DType, DTypeLike, dtypes, from_numpy, least_upper_dtype, sum_acc_dtype, to_dtype, to_numpy
from tinygrad.engine.realize import run_schedule
from tinygrad.engine.schedule import ScheduleItem, base_buffer, buffer_view, create_schedule, realized_views
from tinygrad.gradient import compute_gradient
from tinygrad.helpers import argsort, prod
from tinygrad.uop.ops import Ops, UOp

Scalar = int | float | bool
ShapeArg = int | Sequence[int]


def _shape_args(shape: tuple[Any, ...]) -> tuple[int, ...]:
    """Accept `f(2, 3)` and `f((2, 3))` alike, and check the sizes."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    for s in shape:
        if not isinstance(s, (int, np.integer)) or isinstance(s, bool):
            raise TypeError(f"shape entries must be ints, got {type(s).__name__} {s!r} in {shape}")
        if s < 0:
            raise ValueError(f"negative dimension {s} in shape {tuple(shape)}")
    return tuple(int(s) for s in shape)


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    ndim = max(len(s) for s in shapes)
    padded = [(1,) * (ndim - len(s)) + s for s in shapes]
    out = []
    for dims in zip(*padded):
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1:
            raise ValueError(f"shapes {' and '.join(str(s) for s in shapes)} cannot be broadcast together: "
                             f"sizes {sorted(sizes)} meet in one dimension; reshape or expand one of them")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


class _RNG:
    """A counter-based generator: value i of a draw is a hash of (seed, counter + i), computed on the host
    with numpy so that every device gets the same numbers for a seed."""

    seed = 0
    counter = 0

    @staticmethod
    def _mix(x: np.ndarray) -> np.ndarray:
        x = x ^ (x >> np.uint32(16))
        x = x * np.uint32(0x7FEB352D)
        x = x ^ (x >> np.uint32(15))
        x = x * np.uint32(0x846CA68B)
        return x ^ (x >> np.uint32(16))

    @classmethod
    def bits(cls, n: int) -> np.ndarray:
        idx = np.arange(cls.counter, cls.counter + n, dtype=np.uint64)
        cls.counter += n
        lo = (idx & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        hi = (idx >> np.uint64(32)).astype(np.uint32)
        key = np.uint32(cls.seed & 0xFFFFFFFF)
        with np.errstate(over="ignore"):
            return cls._mix(cls._mix(lo ^ key) + cls._mix(hi + np.uint32(0x9E3779B9) * (key | np.uint32(1))))

    @classmethod
    def uniform(cls, n: int) -> np.ndarray:
        return (cls.bits(n) >> np.uint32(8)).astype(np.float32) * np.float32(1.0 / (1 << 24))


class _CastShortcuts:
    """PyTorch's dtype shortcuts (`.float()`, `.long()`, ...). A base class of Tensor, so that inside Tensor's
    body the names float/int/bool still mean the builtin types."""

    __slots__ = ()

    def cast(self, dtype: DTypeLike) -> Tensor:
        raise NotImplementedError

    def float(self) -> Tensor:
        return self.cast(dtypes.float32)

    def half(self) -> Tensor:
        return self.cast(dtypes.float16)

    def int(self) -> Tensor:
        return self.cast(dtypes.int32)

    def long(self) -> Tensor:
        return self.cast(dtypes.int64)

    def bool(self) -> Tensor:
        return self.cast(dtypes.bool)

    def double(self) -> Tensor:
        return self.cast(dtypes.float64)

    def short(self) -> Tensor:
        return self.cast(dtypes.int16)

    def bfloat16(self) -> Tensor:
        return self.cast(dtypes.bfloat16)


class Tensor(_CastShortcuts):
    """A lazy tensor. `Tensor([1, 2, 3])`, `Tensor(np_array)`, `Tensor.zeros(2, 3)`, ..."""

    training: ClassVar[bool] = False
    # keyed by id: a WeakSet would compare tensors with ==, which builds a comparison tensor instead of a bool
    _grad_tensors: ClassVar[weakref.WeakValueDictionary[int, Tensor]] = weakref.WeakValueDictionary()

    __slots__ = ("__weakref__", "_requires_grad", "device", "grad", "uop")

    def __init__(self, data: Any, device: str | None = None, dtype: DTypeLike | None = None,
                 requires_grad: bool | None = None):
        self.device = Device.canonicalize(device)
        self.grad: Tensor | None = None
        self._requires_grad = False
        want = to_dtype(dtype) if dtype is not None else None
        if isinstance(data, UOp):
            self.uop = data if want is None else data.cast(want)
        elif isinstance(data, Tensor):
            self.uop = data.uop if want is None else data.uop.cast(want)
            self.device = data.device if device is None else self.device
        elif isinstance(data, (bool, int, float)) and not isinstance(data, np.generic):
            d = want or dtypes.from_py(data)
            if want is None and d == dtypes.int32 and not dtypes.int32.min <= data <= dtypes.int32.max:
                d = dtypes.int64  # a Python int too large for the default int keeps its value
            self.uop = UOp.const(d, data)
        elif isinstance(data, bytes):
            self.uop = self._upload(np.frombuffer(data, dtype=np.uint8), want or dtypes.uint8)
        elif isinstance(data, (list, tuple, np.ndarray, np.generic)):
            arr = np.asarray(data) if not isinstance(data, (list, tuple)) else _list_to_numpy(data, want)
            if arr.dtype == object:
                raise TypeError(f"cannot make a Tensor from ragged or non-numeric data {data!r}")
            d = want or from_numpy(arr.dtype)
            self.uop = self._upload(arr, d)
        else:
            raise TypeError(f"cannot make a Tensor from {type(data).__name__}; pass a number, a (nested) list, "
                            f"a numpy array or bytes")
        if requires_grad:
            self.requires_grad = True

    def _upload(self, arr: np.ndarray, d: DType) -> UOp:
        from tinygrad.device import dtype_error

        if not Device[self.device].supports_dtype(d):
            raise dtype_error(d, self.device)
        if d == dtypes.bfloat16:
            from tinygrad.dtype import float_to_bf16_bits

            flat = np.array([float_to_bf16_bits(float(v)) for v in arr.reshape(-1)], dtype=np.uint16)
        else:
            flat = np.ascontiguousarray(arr.astype(to_numpy(d), copy=False).reshape(-1))
        buf = Buffer(self.device, flat.size, d)
        buf.copyin(flat.data.cast("B"))
        return buffer_view(buf, tuple(arr.shape))

    # ---- basic properties ----
    @property
    def shape(self) -> tuple[int, ...]:
        return self.uop.shape

    @property
    def dtype(self) -> DType:
        return self.uop.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return prod(self.shape)

    def element_size(self) -> int:
        return self.dtype.itemsize

    def nbytes(self) -> int:
        return self.numel() * self.element_size()

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def size(self, dim: int | None = None) -> tuple[int, ...] | int:
        return self.shape if dim is None else self.shape[self._axis(dim)]

    def __repr__(self) -> str:
        return f"<Tensor {self.shape} {self.dtype} on {self.device}{' requires_grad' if self.requires_grad else ''}>"

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise RuntimeError(f"the truth value of a tensor with {self.numel()} elements is ambiguous; "
                               f"use .any() or .all()")
        return bool(self.item())

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if value and not self._requires_grad:
            if not self.dtype.is_float:
                raise RuntimeError(f"only floating point tensors can require gradients, this one is {self.dtype}")
            # a gradient target must be a node of its own: equal lazy expressions are one shared UOp
            if base_buffer(self.uop) is None:
                self.uop = UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,), ("param", id(self)))
            Tensor._grad_tensors[id(self)] = self
        elif not value:
            Tensor._grad_tensors.pop(id(self), None)
        self._requires_grad = bool(value)

    def requires_grad_(self, value: bool = True) -> Tensor:
        self.requires_grad = value
        return self

    def _derive(self, uop: UOp, *others: Tensor) -> Tensor:
        out = Tensor(uop, device=self.device)
        out._requires_grad = self._requires_grad or any(o._requires_grad for o in others)
        return out

    # ---- realization ----
    def schedule(self, *others: Tensor) -> list[ScheduleItem]:
        """The kernels that realize() would run, without running them."""
        tensors = [self, *others]
        items, _, _ = create_schedule([t.uop for t in tensors], [t.device for t in tensors])
        return items

    def realize(self, *others: Tensor) -> Tensor:
        tensors = [self, *others]
        items, views, out_views = create_schedule([t.uop for t in tensors], [t.device for t in tensors])
        run_schedule(items)
        realized_views.update(views)
        for t, view in zip(tensors, out_views):
            realized_views[t.uop] = view
            # A tensor with gradient history keeps its graph, so that backward() still reaches the leaves after
            # realize() (PyTorch users print loss.item() before loss.backward()); the scheduler reads the
            # realized buffer in its place. Leaves and tensors without history just become the buffer.
            if not t._requires_grad or id(t) in Tensor._grad_tensors:
                t.uop = view
        return self

    def _buffer(self) -> Buffer:
        self.realize()
        base = base_buffer(realized_views.get(self.uop, self.uop))
        assert base is not None, "realize() leaves a contiguous buffer"
        return base.arg

    def numpy(self) -> np.ndarray:
        if self.numel() == 0:
            return np.zeros(self.shape, dtype=to_numpy(self.dtype) if self.dtype != dtypes.bfloat16 else np.float32)
        raw = self._buffer().numpy()
        if self.dtype == dtypes.bfloat16:
            raw = (raw.astype(np.uint32) << np.uint32(16)).view(np.float32)
        return raw.reshape(self.shape)

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def item(self) -> Scalar:
        if self.numel() != 1:
            raise ValueError(f"item() needs a tensor with one element, this one has shape {self.shape}")
        return self.numpy().reshape(()).item()

    def data(self) -> memoryview:
        return self.numpy().data

    def contiguous(self) -> Tensor:
        return self._derive(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))

    def detach(self) -> Tensor:
        return Tensor(UOp(Ops.DETACH, self.dtype, (self.uop,)), device=self.device)

    def clone(self) -> Tensor:
        return self._derive(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,), ("clone", id(self))))

    def to(self, device: str | None) -> Tensor:
        dev = Device.canonicalize(device)
        if dev == self.device:
            return self
        out = Tensor(UOp(Ops.COPY, self.dtype, (self.uop,), dev), device=dev)
        out._requires_grad = self._requires_grad
        return out

    def assign(self, x: Tensor | Scalar) -> Tensor:
        """Replace this tensor's value (shapes and dtypes must match); returns self."""
        other = x if isinstance(x, Tensor) else Tensor.full(self.shape, x, dtype=self.dtype, device=self.device)
        if other.shape != self.shape:
            raise ValueError(f"assign of shape {other.shape} to a tensor of shape {self.shape}")
        if other.dtype != self.dtype:
            raise TypeError(f"assign of {other.dtype} to a tensor of {self.dtype}; cast it first")
        self.uop = other.uop
        return self

    # ---- creation ----
    @staticmethod
    def empty(*shape: Any, device: str | None = None, dtype: DTypeLike | None = None, **kwargs: Any) -> Tensor:
        sh = _shape_args(shape)
        d = to_dtype(dtype) if dtype is not None else dtypes.default_float
        dev = Device.canonicalize(device)
        return Tensor(buffer_view(Buffer(dev, prod(sh), d), sh), device=dev, **kwargs)

    @staticmethod
    def full(shape: ShapeArg, fill_value: Scalar, device: str | None = None, dtype: DTypeLike | None = None,
             **kwargs: Any) -> Tensor:
        sh = _shape_args((shape,) if isinstance(shape, int) else tuple(shape))
        d = to_dtype(dtype) if dtype is not None else dtypes.from_py(fill_value)
        c = UOp.const(d, fill_value)
        return Tensor(c.reshape((1,) * len(sh)).expand(sh), device=device, **kwargs)

    @staticmethod
    def zeros(*shape: Any, **kwargs: Any) -> Tensor:
        return Tensor.full(_shape_args(shape), 0.0, **{"dtype": dtypes.default_float, **kwargs})

    @staticmethod
    def ones(*shape: Any, **kwargs: Any) -> Tensor:
        return Tensor.full(_shape_args(shape), 1.0, **{"dtype": dtypes.default_float, **kwargs})

    def full_like(self, fill_value: Scalar, **kwargs: Any) -> Tensor:
        return Tensor.full(self.shape, fill_value, **{"dtype": self.dtype, "device": self.device, **kwargs})

    def zeros_like(self, **kwargs: Any) -> Tensor:
        return self.full_like(0, **kwargs)

    def ones_like(self, **kwargs: Any) -> Tensor:
        return self.full_like(1, **kwargs)

    @staticmethod
    def arange(start: Scalar, stop: Scalar | None = None, step: Scalar = 1, device: str | None = None,
               dtype: DTypeLike | None = None, **kwargs: Any) -> Tensor:
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ValueError("arange step must not be zero")
        d = to_dtype(dtype) if dtype is not None else dtypes.from_py([start, stop, step])
        n = max(0, math.ceil((stop - start) / step))
        steps: np.ndarray = np.arange(n, dtype=np.float64 if d.is_float else np.int64)
        values = steps * step + start
        return Tensor(values.astype(to_numpy(d)) if d != dtypes.bfloat16 else values, device=device, dtype=d, **kwargs)

    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        _RNG.seed, _RNG.counter = int(seed), 0

    @staticmethod
    def rand(*shape: Any, device: str | None = None, dtype: DTypeLike | None = None, **kwargs: Any) -> Tensor:
        sh = _shape_args(shape)
        d = to_dtype(dtype) if dtype is not None else dtypes.default_float
        return Tensor(_RNG.uniform(prod(sh)).reshape(sh), device=device, dtype=d, **kwargs)

    @staticmethod
    def randn(*shape: Any, device: str | None = None, dtype: DTypeLike | None = None, **kwargs: Any) -> Tensor:
        sh = _shape_args(shape)
        n = prod(sh)
        u1, u2 = _RNG.uniform(n).astype(np.float64), _RNG.uniform(n).astype(np.float64)
        z = np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2)  # Box-Muller; 1-u1 is never 0
        d = to_dtype(dtype) if dtype is not None else dtypes.default_float
        return Tensor(z.astype(np.float32).reshape(sh), device=device, dtype=d, **kwargs)

    @staticmethod
    def uniform(*shape: Any, low: float = 0.0, high: float = 1.0, **kwargs: Any) -> Tensor:
        requires_grad = kwargs.pop("requires_grad", None)
        out = (Tensor.rand(*shape, **kwargs) * (high - low) + low).realize()
        return out.requires_grad_(True) if requires_grad else out

    # ---- elementwise helpers ----
    def _const_operand(self, x: Scalar) -> Tensor:
        d = self.dtype
        px = dtypes.from_py(x)
        if (px.is_float and not d.is_float) or (px.is_int and d.is_bool):
            d = px
        return Tensor(UOp.const(d, x), device=self.device)

    def _broadcasted(self, y: Tensor | Scalar, reverse: bool = False) -> tuple[Tensor, Tensor]:
        x: Tensor = self
        other = y if isinstance(y, Tensor) else x._const_operand(y)
        if other.device != x.device:
            raise RuntimeError(f"an operation mixes tensors on {x.device} and {other.device}; "
                               f"move one with .to({x.device!r})")
        if reverse:
            x, other = other, x
        out_dtype = least_upper_dtype(x.dtype, other.dtype)
        shape = broadcast_shape(x.shape, other.shape)
        return x.cast(out_dtype)._broadcast_to(shape), other.cast(out_dtype)._broadcast_to(shape)

    def _broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
        if self.shape == shape:
            return self
        if len(self.shape) > len(shape):
            raise ValueError(f"cannot broadcast shape {self.shape} to {shape}")
        padded = (1,) * (len(shape) - len(self.shape)) + self.shape
        broadcast_shape(padded, shape)
        return self._derive(self.uop.reshape(padded).expand(shape))

    def _binop(self, op: Ops, y: Tensor | Scalar, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(y, reverse)
        return a._derive(a.uop.alu(op, b.uop), b)

    def _unop(self, op: Ops) -> Tensor:
        return self._derive(self.uop.alu(op))

    def _float(self) -> Tensor:
        return self if self.dtype.is_float else self.cast(dtypes.default_float)

    def cast(self, dtype: DTypeLike) -> Tensor:
        d = to_dtype(dtype)
        return self if d == self.dtype else self._derive(self.uop.cast(d))

    def bitcast(self, dtype: DTypeLike) -> Tensor:
        d = to_dtype(dtype)
        if d.itemsize != self.dtype.itemsize:
            raise TypeError(f"bitcast from {self.dtype} ({self.dtype.itemsize} bytes) to {d} ({d.itemsize} bytes) "
                            f"needs dtypes of one size")
        return Tensor(self.uop.bitcast(d), device=self.device)

    # arithmetic
    def add(self, x: Tensor | Scalar, reverse: bool = False) -> Tensor:
        return self._binop(Ops.ADD, x, reverse)

    def sub(self, x: Tensor | Scalar, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        if a.dtype.is_bool:
            raise TypeError("subtraction of bool tensors is not supported; use logical_xor or cast to an integer")
        return a._derive(a.uop.alu(Ops.SUB, b.uop), b)

    def mul(self, x: Tensor | Scalar, reverse: bool = False) -> Tensor:
        return self._binop(Ops.MUL, x, reverse)

    def div(self, x: Tensor | Scalar, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
        if rounding_mode == "floor":
            return self.floordiv(x, reverse)
        if rounding_mode == "trunc":
            a, b = self._broadcasted(x, reverse)
            if a.dtype.is_int:
                return a._derive(a.uop.alu(Ops.IDIV, b.uop), b)
            return a._float().div(b).trunc()
        if rounding_mode is not None:
            raise ValueError(f"rounding_mode must be None, 'floor' or 'trunc', got {rounding_mode!r}")
        a, b = self._broadcasted(x, reverse)
        a, b = a._float(), b._float()
        return a._derive(a.uop.alu(Ops.FDIV, b.uop), b)

    def floordiv(self, x: Tensor | Scalar, reverse: bool = False) -> Tensor:
        """Python's and PyTorch's floor division; an integer divided by zero gives 0 (PyTorch raises)."""
        a, b = self._broadcasted(x, reverse)
        if a.dtype.is_float:
            return a.div(b).floor()
        q = a._derive(a.uop.alu(Ops.IDIV, b.uop), b)
        if a.dtype.is_unsigned:
            return q
        r = a._derive(a.uop.alu(Ops.MOD, b.uop), b)
        needs_fix = (r != 0) & ((a < 0) != (b < 0))
        return needs_fix.where(q - 1, q)

    def mod(self, x: Tensor | Scalar, reverse: bool = False) -> Tensor:
        """Python's and PyTorch's remainder: the result takes the sign of the divisor."""
        a, b = self._broadcasted(x, reverse)
        if a.dtype.is_float:
            return a - (a / b).floor() * b
        r = a._derive(a.uop.alu(Ops.MOD, b.uop), b)
        if a.dtype.is_unsigned:
            return r
        return ((r != 0) & ((r < 0) != (b < 0))).where(r + b, r)

    def pow(self, x: Tensor | Scalar, reverse: bool = False) -> Tensor:
        if not reverse and isinstance(x, (int, float)) and not isinstance(x, bool):
            if x == 2:
                return self * self
            if x == 1:
                return self
            if x == 0.5:
                return self.sqrt()
            if x == -1:
                return self.reciprocal()
        base, exp = self._broadcasted(x, reverse)
        base, exp = base._float(), exp._float()
        # |b|^e, with the sign fixed for negative bases raised to integer exponents. A zero base takes the log
        # of 1 and its value separately: log2(0) = -inf would make the gradient 0 * inf = NaN there
        is_zero = base == 0
        mag = (exp * is_zero.where(1.0, base.abs()).log2()).exp2()
        mag = is_zero.where((exp > 0).where(0.0, (exp == 0).where(1.0, math.inf)), mag)
        is_int_exp = exp.trunc() == exp
        odd = (exp.abs() - (exp.abs() / 2).floor() * 2) == 1
        neg = base < 0
        signed = neg.where(is_int_exp.where(odd.where(-mag, mag), math.nan), mag)
        return ((base == 0) & (exp == 0)).where(1.0, signed)

    def maximum(self, x: Tensor | Scalar) -> Tensor:
        return self._binop(Ops.MAX, x)

    def minimum(self, x: Tensor | Scalar) -> Tensor:
        a, b = self._broadcasted(x)
        if a.dtype.is_bool:
            return a & b
        if a.dtype.is_unsigned:  # negation wraps around for unsigned ints: mirror at the top of the range instead
            top = int(a.dtype.max)
            return (top - (top - a).maximum(top - b)).cast(a.dtype)
        return -((-a).maximum(-b))

    def where(self, x: Tensor | Scalar, y: Tensor | Scalar) -> Tensor:
        cond = self if self.dtype.is_bool else self != 0
        if isinstance(x, Tensor) or not isinstance(y, Tensor):
            xt = x if isinstance(x, Tensor) else cond._const_operand(x).cast(
                y.dtype if isinstance(y, Tensor) and not isinstance(x, float) else dtypes.from_py(x))
            xt, yt = xt._broadcasted(y)
        else:
            yt = y
            xt, yt = yt._broadcasted(x, reverse=True)
        shape = broadcast_shape(cond.shape, xt.shape)
        c, xt, yt = cond._broadcast_to(shape), xt._broadcast_to(shape), yt._broadcast_to(shape)
        return c._derive(c.uop.alu(Ops.WHERE, xt.uop, yt.uop), xt, yt)

    # comparisons
    def __lt__(self, x: Tensor | Scalar) -> Tensor: return self._cmp(Ops.CMPLT, x)  # type: ignore[override]
    def __gt__(self, x: Tensor | Scalar) -> Tensor: return self._cmp(Ops.CMPLT, x, reverse=True)  # type: ignore[override]
    def __le__(self, x: Tensor | Scalar) -> Tensor: return (self > x).logical_not()  # type: ignore[override]
    def __ge__(self, x: Tensor | Scalar) -> Tensor: return (self < x).logical_not()  # type: ignore[override]
    def __eq__(self, x: object) -> Tensor: return self._cmp(Ops.CMPEQ, x)  # type: ignore[override, arg-type]
    def __ne__(self, x: object) -> Tensor: return self._cmp(Ops.CMPNE, x)  # type: ignore[override, arg-type]

    def _cmp(self, op: Ops, x: Tensor | Scalar, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        return Tensor(a.uop.alu(op, b.uop), device=self.device)

    def eq(self, x: Tensor | Scalar) -> Tensor: return self == x
    def ne(self, x: Tensor | Scalar) -> Tensor: return self != x

    def logical_not(self) -> Tensor:
        return Tensor(self.bool().uop.alu(Ops.CMPNE, UOp.const(dtypes.bool, True).reshape(
            (1,) * self.ndim).expand(self.shape)), device=self.device)

    # bitwise
    def _bitop(self, op: Ops, x: Tensor | Scalar, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        if a.dtype.is_float:
            raise TypeError(f"bitwise {op.name} needs integer or bool tensors, got {a.dtype}")
        return Tensor(a.uop.alu(op, b.uop), device=self.device)

    def bitwise_and(self, x: Tensor | Scalar) -> Tensor: return self._bitop(Ops.AND, x)
    def bitwise_or(self, x: Tensor | Scalar) -> Tensor: return self._bitop(Ops.OR, x)
    def bitwise_xor(self, x: Tensor | Scalar) -> Tensor: return self._bitop(Ops.XOR, x)
    def lshift(self, x: Tensor | int) -> Tensor: return self._bitop(Ops.SHL, x)
    def rshift(self, x: Tensor | int) -> Tensor: return self._bitop(Ops.SHR, x)

    # unary math
    def neg(self) -> Tensor:
        if self.dtype.is_bool:
            raise TypeError("negation of a bool tensor is not supported; use logical_not()")
        return self._unop(Ops.NEG)

    def reciprocal(self) -> Tensor: return self._float()._unop(Ops.RECIPROCAL)
    def sqrt(self) -> Tensor: return self._float()._unop(Ops.SQRT)
    def rsqrt(self) -> Tensor: return self.sqrt().reciprocal()
    def exp2(self) -> Tensor: return self._float()._unop(Ops.EXP2)
    def log2(self) -> Tensor: return self._float()._unop(Ops.LOG2)
    def exp(self) -> Tensor: return (self._float() * (1 / math.log(2))).exp2()
    def log(self) -> Tensor: return self.log2() * math.log(2)
    def sin(self) -> Tensor: return self._float()._unop(Ops.SIN)
    def cos(self) -> Tensor: return ((math.pi / 2) - self._float()).sin()
    def tan(self) -> Tensor: return self.sin() / self.cos()

    def trunc(self) -> Tensor:
        return self if not self.dtype.is_float else self._unop(Ops.TRUNC)

    def floor(self) -> Tensor:
        if not self.dtype.is_float:
            return self
        t = self.trunc()
        return (self < t).where(t - 1, t)

    def ceil(self) -> Tensor:
        if not self.dtype.is_float:
            return self
        t = self.trunc()
        return (self > t).where(t + 1, t)

    def abs(self) -> Tensor:
        if self.dtype.is_unsigned or self.dtype.is_bool:
            return self
        if self.dtype.is_float:
            return self * self.sign()  # so that the gradient is sign(x), 0 at 0 as in PyTorch
        return (self < 0).where(-self, self)

    def sign(self) -> Tensor:
        return (self > 0).where(1, (self < 0).where(-1, 0)).cast(self.dtype) if not self.dtype.is_bool else self

    def relu(self) -> Tensor: return (self > 0).where(self, 0)
    def sigmoid(self) -> Tensor: return (1 + (-self._float()).exp()).reciprocal()
    def tanh(self) -> Tensor: return 2.0 * (2.0 * self._float()).sigmoid() - 1.0
    def square(self) -> Tensor: return self * self
    def clip(self, min_: Scalar | None = None, max_: Scalar | None = None) -> Tensor:
        # where, not maximum/minimum: at a bound the gradient passes through (PyTorch's clamp) instead of splitting
        out = self
        if min_ is not None:
            out = (out < min_).where(min_, out)
        if max_ is not None:
            out = (out > max_).where(max_, out)
        return out
    clamp = clip

    # operators
    def __add__(self, x: Tensor | Scalar) -> Tensor: return self.add(x)
    def __radd__(self, x: Scalar) -> Tensor: return self.add(x, reverse=True)
    def __sub__(self, x: Tensor | Scalar) -> Tensor: return self.sub(x)
    def __rsub__(self, x: Scalar) -> Tensor: return self.sub(x, reverse=True)
    def __mul__(self, x: Tensor | Scalar) -> Tensor: return self.mul(x)
    def __rmul__(self, x: Scalar) -> Tensor: return self.mul(x, reverse=True)
    def __truediv__(self, x: Tensor | Scalar) -> Tensor: return self.div(x)
    def __rtruediv__(self, x: Scalar) -> Tensor: return self.div(x, reverse=True)
    def __floordiv__(self, x: Tensor | Scalar) -> Tensor: return self.floordiv(x)
    def __rfloordiv__(self, x: Scalar) -> Tensor: return self.floordiv(x, reverse=True)
    def __mod__(self, x: Tensor | Scalar) -> Tensor: return self.mod(x)
    def __rmod__(self, x: Scalar) -> Tensor: return self.mod(x, reverse=True)
    def __pow__(self, x: Tensor | Scalar) -> Tensor: return self.pow(x)
    def __rpow__(self, x: Scalar) -> Tensor: return self.pow(x, reverse=True)
    def __neg__(self) -> Tensor: return self.neg()
    def __matmul__(self, x: Tensor) -> Tensor: return self.matmul(x)
    def __rmatmul__(self, x: Tensor) -> Tensor: return x.matmul(self)
    def __and__(self, x: Tensor | Scalar) -> Tensor: return self.bitwise_and(x)
    def __or__(self, x: Tensor | Scalar) -> Tensor: return self.bitwise_or(x)
    def __xor__(self, x: Tensor | Scalar) -> Tensor: return self.bitwise_xor(x)
    def __rand__(self, x: Scalar) -> Tensor: return self.bitwise_and(x)
    def __ror__(self, x: Scalar) -> Tensor: return self.bitwise_or(x)
    def __rxor__(self, x: Scalar) -> Tensor: return self.bitwise_xor(x)
    def __lshift__(self, x: Tensor | int) -> Tensor: return self.lshift(x)
    def __rshift__(self, x: Tensor | int) -> Tensor: return self.rshift(x)
    def __invert__(self) -> Tensor:
        return self.logical_not() if self.dtype.is_bool else self ^ -1 if not self.dtype.is_unsigned \
            else self ^ int(self.dtype.max)

    def __iadd__(self, x: Tensor | Scalar) -> Tensor: return self.assign(self + x)
    def __isub__(self, x: Tensor | Scalar) -> Tensor: return self.assign(self - x)
    def __imul__(self, x: Tensor | Scalar) -> Tensor: return self.assign(self * x)
    def __itruediv__(self, x: Tensor | Scalar) -> Tensor: return self.assign(self / x)

    # ---- movement (views; no copies) ----
    def _axis(self, axis: int, ndim: int | None = None) -> int:
        n = self.ndim if ndim is None else ndim
        if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
            raise TypeError(f"an axis must be an int, got {type(axis).__name__} {axis!r}")
        if not -max(n, 1) <= axis < max(n, 1):
            raise IndexError(f"axis {axis} is out of range for a tensor with {n} dimensions (shape {self.shape})")
        return int(axis) % max(n, 1)

    def reshape(self, *shape: Any) -> Tensor:
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        if sum(1 for s in shape if s == -1) > 1:
            raise ValueError(f"only one dimension can be inferred (-1), got shape {shape}")
        for s in shape:
            if not isinstance(s, (int, np.integer)) or isinstance(s, bool) or s < -1:
                raise ValueError(f"invalid dimension {s!r} in reshape to {shape}")
        known = prod(s for s in shape if s != -1)
        if -1 in shape:
            if known == 0 or self.numel() % known:
                raise ValueError(f"cannot reshape a tensor of shape {self.shape} ({self.numel()} elements) to {shape}")
            shape = tuple(self.numel() // known if s == -1 else s for s in shape)
        new = tuple(int(s) for s in shape)
        if prod(new) != self.numel():
            raise ValueError(f"cannot reshape a tensor of shape {self.shape} ({self.numel()} elements) to {new} "
                             f"({prod(new)} elements); the sizes must match")
        return self._derive(self.uop.reshape(new))

    view = reshape

    def permute(self, *order: Any) -> Tensor:
        if len(order) == 1 and isinstance(order[0], (tuple, list)):
            order = tuple(order[0])
        axes = tuple(self._axis(a) for a in order)
        if sorted(axes) != list(range(self.ndim)):
            raise ValueError(f"permute order {order} is not a permutation of the {self.ndim} axes of {self.shape}")
        return self._derive(self.uop.permute(axes))

    def expand(self, *shape: Any) -> Tensor:
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        if len(shape) < self.ndim:
            raise ValueError(f"expand to {shape} has fewer dimensions than the tensor's shape {self.shape}")
        padded = (1,) * (len(shape) - self.ndim) + self.shape
        new = tuple(p if s == -1 else int(s) for s, p in zip(shape, padded))
        for p, s in zip(padded, new):
            if p != s and p != 1:
                raise ValueError(f"cannot expand shape {self.shape} to {tuple(shape)}: only size-1 dims can grow")
        return self._derive(self.uop.reshape(padded).expand(new))

    def pad(self, padding: Sequence[tuple[int, int] | None] | Sequence[int], value: float = 0.0) -> Tensor:
        """`padding` is one (before, after) pair per dimension, or PyTorch's flat form starting at the last dim."""
        pairs: list[tuple[int, int]]
        if padding and all(isinstance(p, int) for p in padding):
            flat = [int(p) for p in padding]  # type: ignore[arg-type]
            if len(flat) % 2:
                raise ValueError(f"flat padding needs an even number of entries, got {padding}")
            pairs = [(0, 0)] * self.ndim
            for i in range(len(flat) // 2):
                pairs[self.ndim - 1 - i] = (flat[2 * i], flat[2 * i + 1])
        else:
            pairs = [(0, 0) if p is None else (int(p[0]), int(p[1])) for p in padding]  # type: ignore[index]
        if len(pairs) != self.ndim:
            raise ValueError(f"padding {padding} has {len(pairs)} entries for a tensor with {self.ndim} dimensions")
        if any(b < 0 or a < 0 for b, a in pairs):
            # negative padding crops, as in PyTorch
            x = self.shrink(tuple((max(0, -b), s - max(0, -a)) for (b, a), s in zip(pairs, self.shape)))
            return x.pad([(max(0, b), max(0, a)) for b, a in pairs], value)
        out = self._derive(self.uop.pad(tuple(pairs)))
        if value != 0:
            mask = Tensor(UOp.const(dtypes.bool, True).reshape((1,) * self.ndim).expand(self.shape).pad(tuple(pairs)),
                          device=self.device)
            out = mask.where(out, value)
        return out

    def shrink(self, bounds: Sequence[tuple[int, int] | None]) -> Tensor:
        if len(bounds) != self.ndim:
            raise ValueError(f"shrink bounds {bounds} need one entry per dimension of {self.shape}")
        bs = tuple((0, s) if b is None else (int(b[0]), int(b[1])) for b, s in zip(bounds, self.shape))
        for (b, e), s in zip(bs, self.shape):
            if not 0 <= b <= e <= s:
                raise ValueError(f"shrink bounds {bounds} are outside shape {self.shape}")
        return self._derive(self.uop.shrink(bs))

    def flip(self, *axis: Any) -> Tensor:
        if len(axis) == 1 and isinstance(axis[0], (tuple, list)):
            axis = tuple(axis[0])
        axes = {self._axis(a) for a in axis}
        return self._derive(self.uop.flip(tuple(i in axes for i in range(self.ndim))))

    def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
        order = list(range(self.ndim))
        a, b = self._axis(dim0), self._axis(dim1)
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:
        return self.permute(tuple(reversed(range(self.ndim))))

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        if self.ndim == 0:
            return self.reshape(1)
        s, e = self._axis(start_dim), self._axis(end_dim)
        return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

    def squeeze(self, dim: int | None = None) -> Tensor:
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        d = self._axis(dim)
        return self if self.shape[d] != 1 else self.reshape(self.shape[:d] + self.shape[d + 1:])

    def unsqueeze(self, dim: int) -> Tensor:
        d = self._axis(dim, self.ndim + 1)
        return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

    def __getitem__(self, index: Any) -> Tensor:
        return _getitem(self, index)

    # ---- reductions ----
    def _reduce_axes(self, axis: int | Sequence[int] | None) -> tuple[int, ...]:
        if axis is None:
            return tuple(range(self.ndim))
        axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)  # _axis rejects what is not an int
        return tuple(sorted({self._axis(a) for a in axes}))

    def _reduce(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool) -> Tensor:
        axes = self._reduce_axes(axis)
        out = self._derive(self.uop.reduce_axis(op, axes)) if axes else self
        if keepdim:
            return out
        return out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def sum(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, dtype: DTypeLike | None = None,
            dim: int | Sequence[int] | None = None) -> Tensor:
        axis = dim if dim is not None else axis
        acc = to_dtype(dtype) if dtype is not None else sum_acc_dtype(self.dtype)
        return self.cast(acc)._reduce(Ops.ADD, axis, keepdim)

    def prod(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        return self.cast(sum_acc_dtype(self.dtype))._reduce(Ops.MUL, axis, keepdim)

    def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
            dim: int | Sequence[int] | None = None) -> Tensor:
        axis = dim if dim is not None else axis
        if self.numel() == 0 and any(self.shape[a] == 0 for a in self._reduce_axes(axis)):
            raise RuntimeError(f"max of an empty dimension of shape {self.shape}: the result has no identity")
        return self._reduce(Ops.MAX, axis, keepdim)

    def min(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
            dim: int | Sequence[int] | None = None) -> Tensor:
        axis = dim if dim is not None else axis
        if self.dtype.is_bool:
            return self.logical_not().max(axis, keepdim).logical_not()
        if self.dtype.is_unsigned:
            return (int(self.dtype.max) - (int(self.dtype.max) - self).max(axis, keepdim)).cast(self.dtype)
        return -((-self).max(axis, keepdim))

    def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
             dim: int | Sequence[int] | None = None) -> Tensor:
        axis = dim if dim is not None else axis
        x = self._float()
        n = prod(self.shape[a] for a in self._reduce_axes(axis))
        s = x.sum(axis, keepdim)
        return s / n if n else s * math.nan

    def any(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        return self.bool()._reduce(Ops.MAX, axis, keepdim) if self.numel() else self.bool().sum(axis, keepdim) != 0

    def all(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        return self.logical_not().any(axis, keepdim).logical_not()

    # ---- linear algebra ----
    def dot(self, w: Tensor) -> Tensor:
        return self.matmul(w)

    def matmul(self, w: Tensor) -> Tensor:
        if not isinstance(w, Tensor):
            raise TypeError(f"matmul needs a Tensor, got {type(w).__name__}")
        if self.ndim == 0 or w.ndim == 0:
            raise ValueError(f"matmul needs tensors with at least one dimension, got {self.shape} and {w.shape}")
        x = self.unsqueeze(0) if self.ndim == 1 else self
        y = w.unsqueeze(-1) if w.ndim == 1 else w
        if x.shape[-1] != y.shape[-2]:
            raise ValueError(f"matmul of shapes {self.shape} and {w.shape}: the inner sizes {x.shape[-1]} and "
                             f"{y.shape[-2]} differ; transpose or reshape one operand")
        try:
            batch = broadcast_shape(x.shape[:-2], y.shape[:-2])
        except ValueError:
            raise ValueError(f"matmul of shapes {self.shape} and {w.shape}: the batch dimensions {x.shape[:-2]} and "
                             f"{y.shape[:-2]} cannot be broadcast together") from None
        n, k, m = x.shape[-2], x.shape[-1], y.shape[-1]
        xb = x.expand(batch + (n, k)).reshape(batch + (n, 1, k))
        yb = y.expand(batch + (k, m)).transpose(-1, -2).reshape(batch + (1, m, k))
        out_dtype = least_upper_dtype(x.dtype, y.dtype)
        out = (xb * yb).sum(-1, dtype=out_dtype)  # integer products stay in their dtype, as in PyTorch
        if self.ndim == 1:
            out = out.squeeze(-2)
        if w.ndim == 1:
            out = out.squeeze(-1)
        return out

    # ---- autograd ----
    def gradient(self, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
        """d(self)/d(target) for each target, as new tensors (nothing is stored in .grad)."""
        if gradient is None:
            if self.numel() != 1:
                raise RuntimeError(f"gradient of a non-scalar tensor of shape {self.shape} needs `gradient=` "
                                   f"of the same shape")
            gradient = Tensor.ones(self.shape, dtype=self.dtype, device=self.device)
        if gradient.shape != self.shape:
            raise ValueError(f"gradient of shape {gradient.shape} for a tensor of shape {self.shape}")
        root, aliases = self._grad_graph(targets)
        grads = compute_gradient(root, gradient.uop, {u for t in targets for u in aliases(t)})
        out = []
        for t in targets:
            parts = [g for u in aliases(t) if (g := grads.get(u)) is not None]
            g = parts[0] if parts else None
            for p in parts[1:]:
                g = g + p  # type: ignore[operator]
            out.append(Tensor(g, device=t.device) if g is not None else t.zeros_like())
        return out

    def _grad_graph(self, targets: Sequence[Tensor]) -> tuple[UOp, Any]:
        """The graph backward() walks, and for each target the nodes in it that stand for the target: realize()
        turns a leaf into a buffer, so a graph built before that holds the leaf's earlier node."""
        root = self.uop
        earlier: dict[UOp, list[UOp]] = {}
        for node in root.toposort():
            if (view := realized_views.get(node)) is not None and view is not node:
                earlier.setdefault(view, []).append(node)
        return root, lambda t: [t.uop, *earlier.get(t.uop, [])]

    def backward(self, gradient: Tensor | None = None) -> Tensor:
        """Accumulate d(self)/d(t) into `t.grad` for every tensor t with requires_grad that self depends on."""
        leaves = list(Tensor._grad_tensors.values())
        root, aliases = self._grad_graph(leaves)
        in_graph = root.toposort()
        targets = [t for t in leaves if any(u in in_graph for u in aliases(t))]
        if not targets:
            if not self.requires_grad:
                raise RuntimeError("backward() on a tensor that does not depend on any tensor with requires_grad=True")
            return self
        for t, g in zip(targets, self.gradient(*targets, gradient=gradient)):
            g = g.cast(t.dtype) if g.dtype != t.dtype else g
            t.grad = g if t.grad is None else t.grad + g
        return self


def _list_to_numpy(data: list | tuple, want: DType | None) -> np.ndarray:
    try:
        arr = np.array(data, dtype=to_numpy(want) if want is not None and want != dtypes.bfloat16 else None)
    except ValueError as e:  # numpy's message talks about "inhomogeneous parts"; say what the user passed
        raise ValueError(f"cannot make a Tensor from {data!r}: nested lists must be rectangular and hold numbers "
                         f"({e})") from None
    if want is not None and want != dtypes.bfloat16:
        return arr
    if arr.dtype == np.float64:
        return arr.astype(np.float32)
    if arr.dtype == np.int64:
        # Python ints default to int32 (tinygrad's default_int) only where that loses nothing
        i32 = np.iinfo(np.int32)
        fits = arr.size == 0 or (int(arr.min()) >= i32.min and int(arr.max()) <= i32.max)
        return arr.astype(np.int32) if fits else arr
    return arr


def _getitem(t: Tensor, index: Any) -> Tensor:
    """Basic indexing: ints, slices (any step), None and Ellipsis."""
    idx = index if isinstance(index, tuple) else (index,)
    for i in idx:
        if isinstance(i, Tensor) or isinstance(i, (list, np.ndarray)):
            raise NotImplementedError("indexing with tensors or lists is not supported yet; use basic slicing")
        if isinstance(i, float):
            # IndexError, as PyTorch and numpy raise for a float index
            raise IndexError(f"tensor indices must be ints, slices, None or ..., not float ({i})")
    n_real = sum(1 for i in idx if i is not None and i is not Ellipsis)
    if sum(1 for i in idx if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis (...)")
    if n_real > t.ndim:
        raise IndexError(f"too many indices ({n_real}) for a tensor of shape {t.shape}")
    if Ellipsis in idx:
        at = idx.index(Ellipsis)
        idx = idx[:at] + (slice(None),) * (t.ndim - n_real) + idx[at + 1:]
    else:
        idx = idx + (slice(None),) * (t.ndim - n_real)
    bounds, flips, steps, final_shape = [], [], [], []
    dim = 0
    for i in idx:
        if i is None:
            final_shape.append(("new", 1))
            continue
        size = t.shape[dim]
        if isinstance(i, (int, np.integer)) and not isinstance(i, bool):
            if not -size <= i < size:
                raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {size}")
            j = int(i) % size
            bounds.append((j, j + 1))
            flips.append(False)
            steps.append(1)
            final_shape.append(("drop", dim))
        elif isinstance(i, slice):
            start, stop, step = i.indices(size)
            if step == 0:
                raise ValueError("slice step cannot be zero")
            if step > 0:
                n = max(0, math.ceil((stop - start) / step))
                bounds.append((start, start + max(0, (n - 1) * step + 1) if n else start))
                flips.append(False)
            else:
                n = max(0, math.ceil((start - stop) / -step))
                lo = start - (n - 1) * (-step) if n else start
                bounds.append((lo, start + 1) if n else (0, 0))
                flips.append(True)
            steps.append(abs(step))
            final_shape.append(("keep", dim))
        else:
            raise IndexError(f"invalid index {i!r} of type {type(i).__name__}; use ints, slices, None or ...")
        dim += 1
    x = t.shrink(tuple(bounds)) if bounds else t
    if any(flips):
        x = x.flip(tuple(i for i, f in enumerate(flips) if f))
    if any(s != 1 for s in steps):
        # take every s-th element: pad to a multiple of s, split off the step, keep index 0
        pads = [(0, (-x.shape[d]) % s if x.shape[d] else 0) for d, s in enumerate(steps)]
        x = x.pad(pads)
        split = []
        for d, s in enumerate(steps):
            split += [x.shape[d] // s, s]
        x = x.reshape(tuple(split)).shrink(tuple((0, v) if k % 2 == 0 else (0, 1) for k, v in enumerate(split)))
        x = x.reshape(tuple(split[0::2]))
    shape = []
    for kind, v in final_shape:
        if kind == "new":
            shape.append(1)
        elif kind == "keep":
            shape.append(x.shape[v])
    return x.reshape(tuple(shape))


# keep `argsort` importable from here for callers that used it with tensors' shapes
__all__ = ["Tensor", "argsort", "broadcast_shape"]
