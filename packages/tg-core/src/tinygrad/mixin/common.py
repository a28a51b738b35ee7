"""Small pieces every part of the Tensor API uses: argument normalisation and broadcasting rules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tinygrad.dtype import DType, DTypeLike, dtypes, to_dtype

Scalar = int | float | bool
ShapeArg = int | Sequence[int]


def shape_args(shape: tuple[Any, ...]) -> tuple[int, ...]:
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


def acc_dtype(out: DType, dtype: DTypeLike | None) -> tuple[DType, DType]:
    """(accumulation dtype, result dtype) of a sum of products: half floats accumulate in float32, as PyTorch's CPU
    kernels do; an explicit dtype is both (tinygrad's `dtype=` argument)."""
    if dtype is not None:
        d = to_dtype(dtype)
        return d, d
    return (dtypes.float32 if out.is_float and out.itemsize < 4 else out), out
