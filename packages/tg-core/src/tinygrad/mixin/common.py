"""Small pieces every part of the Tensor API uses: argument normalisation and broadcasting rules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tinygrad.dtype import DType, DTypeLike, dtypes, to_dtype
from tinygrad.errors import BroadcastError, ShapeArgError
from tinygrad.uop.ops import Ops, UOp, resolve_size, sint, ssimplify

if TYPE_CHECKING:
    from tinygrad.tensor import Tensor

Scalar = int | float | bool
ShapeArg = int | Sequence[int]


class TensorBase:
    """The base of every mixin class, so of Tensor. The mixin modules cannot import Tensor at run time (tensor.py
    imports them), so `isinstance(x, TensorBase)` is their test for "x is a Tensor"; the methods reach the class
    itself through `type(self)` or `cls`."""

    __slots__ = ()


def shape_args(shape: tuple[Any, ...], symbolic: bool = False, unbound: bool = False) -> tuple[Any, ...]:
    """Accept `f(2, 3)` and `f((2, 3))` alike, and check the sizes. With `symbolic`, a size may also be a bound
    Variable or an integer expression over bound Variables (`n.bind(10)`, `n.bind(10) * 2`)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    if any(isinstance(s, UOp) for s in shape):
        if not symbolic:
            raise ValueError(f"a symbolic size (a Variable) cannot be used here, only ints: got shape {shape}; random "
                             f"tensors and uploads need a concrete size, as in tinygrad")
        ints = iter(shape_args(tuple(s for s in shape if not isinstance(s, UOp))))  # checks the int entries
        return tuple(symbolic_size(s, unbound) if isinstance(s, UOp) else next(ints) for s in shape)
    for s in shape:
        if not isinstance(s, (int, np.integer)) or isinstance(s, bool):
            raise ShapeArgError(f"shape entries must be ints, got {type(s).__name__} {s!r} in {shape}")
        if s < 0:
            raise ValueError(f"negative dimension {s} in shape {tuple(shape)}")
    return tuple(int(s) for s in shape)


def symbolic_size(s: UOp, unbound: bool = False) -> sint:
    """A symbolic size, checked: an integer expression whose Variables are all bound (the bound values are what
    `.numpy()` and `.shape` readers see), in canonical form. With `unbound`, free Variables are allowed too (memory
    sized for their largest values, as `Tensor.empty` makes it): computing with such a size asks for a binding."""
    if not s.dtype.is_int:
        raise TypeError(f"a symbolic size must be an integer expression over Variables, got {s.dtype}: {s}")
    bound = {u.src[0] for u in s.toposort() if u.op is Ops.BIND}
    free = [u.arg.name for u in s.toposort() if u.op is Ops.DEFINE_VAR and u not in bound]
    if free:
        if not unbound:
            raise ValueError(f"Variable {free[0]} is not bound: a size needs a value, use Variable(...).bind(value)")
    elif resolve_size(s) < 0:
        raise ValueError(f"a symbolic size must not be negative, got {s} = {resolve_size(s)}")
    return ssimplify(s)


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    ndim = max(len(s) for s in shapes)
    padded = [(1,) * (ndim - len(s)) + s for s in shapes]
    out = []
    for dims in zip(*padded):
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1:
            raise BroadcastError(f"shapes {' and '.join(str(s) for s in shapes)} cannot be broadcast together: "
                             f"sizes {sorted(sizes, key=str)} meet in one dimension; reshape or expand one of them")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def acc_dtype(out: DType, dtype: DTypeLike | None) -> tuple[DType, DType]:
    """(accumulation dtype, result dtype) of a sum of products: half floats accumulate in float32, as PyTorch's CPU
    kernels do; an explicit dtype is both (tinygrad's `dtype=` argument)."""
    if dtype is not None:
        d = to_dtype(dtype)
        return d, d
    return (dtypes.float32 if out.is_float and out.itemsize < 4 else out), out


def index_dtype(size: sint) -> DType:
    """The dtype of positions along an axis of `size` (argmax, sort and topk indices, nonzero coordinates):
    tinygrad's int32, or int64 where an index could exceed int32 (decided from the size's static upper bound)."""
    bound = size if isinstance(size, int) else int(size.vmax)
    return dtypes.int32 if bound - 1 <= dtypes.int32.max else dtypes.int64


# ---- building blocks of the ops that compose others (type(like) is the Tensor class: it imports this module) ----

def scalar_like(like: Tensor, value: Scalar) -> Tensor:
    """`value` as a 0-d tensor of like's dtype on like's device. where() of Python numbers would be float32 (losing
    float64 digits) and promote integers; this keeps the dtype exactly."""
    return type(like)(UOp.const(like.dtype, value), device=like.device)


def select(cond: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """where(cond, a, b) for a and b of one dtype, broadcasting all three; keeps the dtype exactly (no promotion,
    no rounding through a Python scalar), which the ops need for every dtype, bool included."""
    if a.dtype != b.dtype:
        raise TypeError(f"select of {a.dtype} and {b.dtype}")
    shape = broadcast_shape(cond.shape, a.shape, b.shape)
    c, a, b = cond._broadcast_to(shape), a._broadcast_to(shape), b._broadcast_to(shape)
    return a._derive(c.uop.alu(Ops.WHERE, a.uop, b.uop), b)


def placed_mask(like: Tensor, shape: tuple[int, ...], pairs: tuple[tuple[int, int], ...]) -> Tensor:
    """True where a tensor of `shape`, padded by `pairs`, has its own elements; False in the padding. On like's
    device."""
    ones = UOp.const(dtypes.bool, True).reshape((1,) * len(shape)).expand(shape)
    return type(like)(ones.pad(pairs), device=like.device)


def sign_bit(x: Tensor) -> Tensor:
    """The sign bit of a float, so that -0.0 (and a negative NaN) count as negative."""
    ints = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}
    return x.bitcast(ints[x.dtype.itemsize]) < 0
