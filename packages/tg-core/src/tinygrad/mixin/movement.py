"""Movement ops. All of them are views: they build index arithmetic, never copies."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tinygrad.dtype import dtypes
from tinygrad.helpers import prod
from tinygrad.uop.ops import UOp

if TYPE_CHECKING:
    from tinygrad.tensor import Tensor
else:
    Tensor = None  # bound to the real class by tinygrad.tensor once it is defined (the modules import each other)


class MovementMixin:
    __slots__ = ()

    def _axis(self: Tensor, axis: int, ndim: int | None = None) -> int:
        n = self.ndim if ndim is None else ndim
        if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
            raise TypeError(f"an axis must be an int, got {type(axis).__name__} {axis!r}")
        if not -max(n, 1) <= axis < max(n, 1):
            raise IndexError(f"axis {axis} is out of range for a tensor with {n} dimensions (shape {self.shape})")
        return int(axis) % max(n, 1)

    def reshape(self: Tensor, *shape: Any) -> Tensor:
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

    def permute(self: Tensor, *order: Any) -> Tensor:
        if len(order) == 1 and isinstance(order[0], (tuple, list)):
            order = tuple(order[0])
        axes = tuple(self._axis(a) for a in order)
        if sorted(axes) != list(range(self.ndim)):
            raise ValueError(f"permute order {order} is not a permutation of the {self.ndim} axes of {self.shape}")
        return self._derive(self.uop.permute(axes))

    def expand(self: Tensor, *shape: Any) -> Tensor:
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

    def pad(self: Tensor, padding: Sequence[tuple[int, int] | None] | Sequence[int], value: float = 0.0) -> Tensor:
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

    def shrink(self: Tensor, bounds: Sequence[tuple[int, int] | None]) -> Tensor:
        if len(bounds) != self.ndim:
            raise ValueError(f"shrink bounds {bounds} need one entry per dimension of {self.shape}")
        bs = tuple((0, s) if b is None else (int(b[0]), int(b[1])) for b, s in zip(bounds, self.shape))
        for (b, e), s in zip(bs, self.shape):
            if not 0 <= b <= e <= s:
                raise ValueError(f"shrink bounds {bounds} are outside shape {self.shape}")
        return self._derive(self.uop.shrink(bs))

    def flip(self: Tensor, *axis: Any) -> Tensor:
        if len(axis) == 1 and isinstance(axis[0], (tuple, list)):
            axis = tuple(axis[0])
        axes = {self._axis(a) for a in axis}
        return self._derive(self.uop.flip(tuple(i in axes for i in range(self.ndim))))

    def transpose(self: Tensor, dim0: int = 1, dim1: int = 0) -> Tensor:
        order = list(range(self.ndim))
        a, b = self._axis(dim0), self._axis(dim1)
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self: Tensor) -> Tensor:
        return self.permute(tuple(reversed(range(self.ndim))))

    def flatten(self: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        if self.ndim == 0:
            return self.reshape(1)
        s, e = self._axis(start_dim), self._axis(end_dim)
        return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

    def squeeze(self: Tensor, dim: int | None = None) -> Tensor:
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        d = self._axis(dim)
        return self if self.shape[d] != 1 else self.reshape(self.shape[:d] + self.shape[d + 1:])

    def unsqueeze(self: Tensor, dim: int) -> Tensor:
        d = self._axis(dim, self.ndim + 1)
        return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

    def __getitem__(self: Tensor, index: Any) -> Tensor:
        return getitem(self, index)


def getitem(t: Tensor, index: Any) -> Tensor:
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
