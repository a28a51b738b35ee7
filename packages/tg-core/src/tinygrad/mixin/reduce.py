"""Reductions over axes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tinygrad.dtype import DTypeLike, sum_acc_dtype, to_dtype
from tinygrad.helpers import prod
from tinygrad.uop.ops import Ops

if TYPE_CHECKING:
    from tinygrad.tensor import Tensor
else:
    Tensor = None  # bound to the real class by tinygrad.tensor once it is defined (the modules import each other)


class ReduceMixin:
    __slots__ = ()

    def _reduce_axes(self: Tensor, axis: int | Sequence[int] | None) -> tuple[int, ...]:
        if axis is None:
            return tuple(range(self.ndim))
        axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)  # _axis rejects what is not an int
        return tuple(sorted({self._axis(a) for a in axes}))

    def _reduce(self: Tensor, op: Ops, axis: int | Sequence[int] | None, keepdim: bool) -> Tensor:
        axes = self._reduce_axes(axis)
        out = self._derive(self.uop.reduce_axis(op, axes)) if axes else self
        if keepdim:
            return out
        return out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def sum(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False,
            dtype: DTypeLike | None = None, dim: int | Sequence[int] | None = None) -> Tensor:
        axis = dim if dim is not None else axis
        acc = to_dtype(dtype) if dtype is not None else sum_acc_dtype(self.dtype)
        return self.cast(acc)._reduce(Ops.ADD, axis, keepdim)

    def prod(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        return self.cast(sum_acc_dtype(self.dtype))._reduce(Ops.MUL, axis, keepdim)

    def max(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False,
            dim: int | Sequence[int] | None = None) -> Tensor:
        axis = dim if dim is not None else axis
        if self.numel() == 0 and any(self.shape[a] == 0 for a in self._reduce_axes(axis)):
            raise RuntimeError(f"max of an empty dimension of shape {self.shape}: the result has no identity")
        return self._reduce(Ops.MAX, axis, keepdim)

    def min(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False,
            dim: int | Sequence[int] | None = None) -> Tensor:
        axis = dim if dim is not None else axis
        if self.dtype.is_bool:
            return self.logical_not().max(axis, keepdim).logical_not()
        if self.dtype.is_unsigned:
            return (int(self.dtype.max) - (int(self.dtype.max) - self).max(axis, keepdim)).cast(self.dtype)
        return -((-self).max(axis, keepdim))

    def mean(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False,
             dim: int | Sequence[int] | None = None) -> Tensor:
        axis = dim if dim is not None else axis
        x = self._float()
        n = prod(self.shape[a] for a in self._reduce_axes(axis))
        s = x.sum(axis, keepdim)
        return s / n if n else s * math.nan

    def any(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        return self.bool()._reduce(Ops.MAX, axis, keepdim) if self.numel() else self.bool().sum(axis, keepdim) != 0

    def all(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        return self.logical_not().any(axis, keepdim).logical_not()
