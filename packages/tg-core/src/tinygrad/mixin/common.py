"""Small pieces every part of the Tensor API uses: argument normalisation and broadcasting rules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tinygrad.dtype import DType, DTypeLike, dtypes, to_dtype
from tinygrad.errors import BroadcastError
from tinygrad.uop.ops import Ops, UOp, resolve_size, sint, ssimplify

Scalar = int | float | bool
ShapeArg = int | Sequence[int]


def shape_args(shape: tuple[Any, ...], symbolic: bool = False) -> tuple[Any, ...]:
    """Accept `f(2, 3)` and `f((2, 3))` alike, and check the sizes. With `symbolic`, a size may also be a bound
    Variable or an integer expression over bound Variables (`n.bind(10)`, `n.bind(10) * 2`)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    if any(isinstance(s, UOp) for s in shape):
        if not symbolic:
            raise ValueError(f"a symbolic size (a Variable) cannot be used here, only ints: got shape {shape}; random "
                             f"tensors and uploads need a concrete size, as in tinygrad")
        ints = iter(shape_args(tuple(s for s in shape if not isinstance(s, UOp))))  # checks the int entries
        return tuple(symbolic_size(s) if isinstance(s, UOp) else next(ints) for s in shape)
    for s in shape:
        if not isinstance(s, (int, np.integer)) or isinstance(s, bool):
            raise TypeError(f"shape entries must be ints, got {type(s).__name__} {s!r} in {shape}")
        if s < 0:
            raise ValueError(f"negative dimension {s} in shape {tuple(shape)}")
    return tuple(int(s) for s in shape)


def symbolic_size(s: UOp) -> sint:
    """A symbolic size, checked: an integer expression whose Variables are all bound (the bound values are what
    `.numpy()` and `.shape` readers see), in canonical form."""
    if not s.dtype.is_int:
        raise TypeError(f"a symbolic size must be an integer expression over Variables, got {s.dtype}: {s}")
    bound = {u.src[0] for u in s.toposort() if u.op is Ops.BIND}
    free = [u.arg[0] for u in s.toposort() if u.op is Ops.DEFINE_VAR and u not in bound]
    if free:
        raise ValueError(f"Variable {free[0]} is not bound: a size needs a value, use Variable(...).bind(value)")
    if resolve_size(s) < 0:
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
