"""Indexing: `t[...]`, `t[...] = v`, gather, scatter and the masked ops.

Basic indices (ints, slices with any step, None, `...`) are views: a shrink, flips and a strided reshape.

Integer-tensor indices stay on the device and lazy: each index is compared with an arange of the positions it
can pick, and the one-hot masks select with a `where` that fuses into a sum. So `x[idx]` is one kernel, and its
gradient reaches exactly the picked elements (repeated indices accumulate). The positions are a lazy ARANGE, so the
compiler sees the compare-and-sum and folds it into a direct load (tg-compiler's codegen/gather_fold.py): a
gather costs O(len(idx)), not O(len(idx) * size); scatters (`t[idx] = v`, scatter) stay O(len(idx) * size). An
out-of-range value in an index *tensor* matches no position and reads 0 (PyTorch raises; checking it would mean
reading the indices on the host); indices given as Python ints, lists or numpy arrays are checked
and raise IndexError. gather and scatter follow the same rule.

Boolean masks (in `t[mask]`), nonzero() and masked_select() have data-dependent sizes: they realize the mask
and read it on the host to learn which elements are selected; the values are still gathered lazily.
`t[mask] = v` with a v that does not depend on the number of selected elements (a scalar, or a tensor that
broadcasts to the trailing dimensions) needs no size and stays lazy: it is a where.

Setting (`t[idx] = v`) is functional: the new value is computed with the same masks and a where, then assigned
to the tensor, so it takes effect when the tensor is realized (tinygrad's semantics). With basic indices only, it
is `t[idx].assign(v)`: the view writes into t (views.py), as setting into a view does (`t[0][1] = v` reaches t).
Tensors computed before the assignment, views included, keep the old value. Where an index tensor repeats a
position, the last write wins (PyTorch leaves it unspecified).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, Self

import numpy as np

from tinygrad.dtype import dtypes, to_numpy
from tinygrad.errors import ArgumentError, DTypeError, IndexTypeError, ShapeError
from tinygrad.helpers import argsort, prod
from tinygrad.mixin.common import (
    Scalar,
    TensorBase,
    TensorT,
    broadcast_shape,
    index_dtype,
    joined,
    placed_mask,
    scalar_like,
    select,
)
from tinygrad.uop.ops import Ops, UOp, resolve_size

SCATTER_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


class IndexingMixin(TensorBase):
    __slots__ = ()
    _requires_grad: bool | None  # Tensor's slot (see Tensor.requires_grad)

    def __getitem__(self, index: Any) -> Self:
        """NumPy/PyTorch indexing: ints, slices (any step), None, `...`, integer tensors, lists or arrays
        (advanced indexing; several broadcast together) and boolean masks (which realize, see the module notes).
        A slice may end at a bound Variable (`x[:n]` with `n = Variable("n", 1, 64).bind(10)`)."""
        if _symbolic_slices(index) or not all(isinstance(s, int) for s in self.shape):
            return _shrink_by_slices(self, index)
        view = _View(self, _parse(self, index))
        y = view.apply(self)
        picks = view.advanced()
        return _take(y, picks) if picks else y

    def __setitem__(self, index: Any, value: Self | Scalar | Sequence[Any]) -> None:
        if self.requires_grad and id(self) in type(self)._grad_tensors:
            raise RuntimeError("a leaf tensor that requires grad cannot be written in place (PyTorch refuses too); "
                               "write into a copy: y = x.clone(); y[...] = v")
        if type(self)._runtime.is_disk(self.device):  # a file is written through a view of it, never with a kernel
            if any(isinstance(i, type(self)) for i in (index if isinstance(index, tuple) else (index,))):
                raise RuntimeError("advanced setitem (an index that is a Tensor) is not supported for DISK tensors: "
                                   "copy the tensor to a compute device, write there, and write it back")
            self[index].assign(value)  # type: ignore[arg-type]  # host data too, as assign takes it for DISK
            return
        view = _View(self, _parse(self, index))
        y = view.apply(self)
        v = _value_tensor(self, value)
        if not view.picks and not view.masks:  # basic indices: y is a view of self, and assign writes through it
            y.assign(_broadcast_value(v, y.shape))
            return
        new_y = view.masked_write(y, v)
        if new_y is None:
            picks = view.advanced()
            if picks:
                new_y = _put(y, picks, v)
            else:
                new_y = _broadcast_value(v, y.shape)
        everywhere = UOp.const(dtypes.bool, True).reshape((1,) * y.ndim).expand(y.shape)
        written = view.place(type(self)(everywhere, device=y.device))
        new = select(written, view.place(new_y), self)
        self.assign(new)
        if new.requires_grad:  # a value with gradient history makes the target a part of the graph
            self._requires_grad = True

    def gather(self, dim: int, index: Self) -> Self:
        """`out[i][j] = self[index[i][j]][j]` for dim 0 (PyTorch's gather): index has self's number of dimensions
        and no larger sizes outside `dim`. An out-of-range index reads 0 (PyTorch raises).

        Examples:
            >>> t = Tensor([[1, 2], [3, 4]])
            >>> t.gather(1, Tensor([[0, 0], [1, 0]])).tolist()
            [[1, 1], [4, 3]]
        """
        x, idx, d = _scatter_args(self, dim, index, None, "gather")
        s = x.shape[d]
        x = x.shrink(tuple(None if k == d else (0, idx.shape[k]) for k in range(x.ndim)))
        # the gathered axis goes last, with a size-1 axis in its place that the index's axis broadcasts against
        lead = idx.shape[:d] + (1,) + idx.shape[d + 1:]
        candidates = x.permute([k for k in range(x.ndim) if k != d] + [d]).reshape(lead + (s,))
        out = _pick_sum(_one_hot(idx, s), candidates, (idx.ndim,))
        return out.reshape(index.shape)

    def scatter(self, dim: int, index: Self, src: Self | Scalar, reduce: str | None = None) -> Self:
        """A copy of self with `self[index[i][j]][j] = src[i][j]` for dim 0 (PyTorch's scatter); `src` may be a
        scalar. reduce="add" or "multiply" combine with the old value instead. Where an index repeats, the last write
        wins.

        Examples:
            >>> Tensor.zeros(3, dtype=dtypes.int32).scatter(0, Tensor([2, 0]), Tensor([5, 6])).tolist()
            [6, 0, 5]
            >>> Tensor.ones(3).scatter(0, Tensor([1, 1]), 2.0, reduce="add").tolist()
            [1.0, 5.0, 1.0]
        """
        if reduce not in (None, "add", "multiply"):
            raise ValueError(f"scatter reduce must be None, 'add' or 'multiply', got {reduce!r}")
        if reduce is not None and isinstance(src, TensorBase):
            # tinygrad keeps scatter's reduce for a scalar src; a tensor src is combined by scatter_reduce
            raise TypeError(f"scatter with reduce={reduce!r} takes a scalar src, got a tensor; use scatter_reduce(dim, "
                            f"index, src, {'sum' if reduce == 'add' else 'prod'!r})")
        how = {None: "assign", "add": "sum", "multiply": "prod"}[reduce]
        return _scatter(self, dim, index, src, how, include_self=True)

    def scatter_reduce(self, dim: int, index: Self, src: Self, reduce: str,
                       include_self: bool = True) -> Self:
        """Scatter with a reduction ("sum", "prod", "mean", "amax", "amin") over everything sent to one place,
        including the old value unless include_self=False. Integer means round down, as in PyTorch.

        Examples:
            >>> t = Tensor([1, 2, 3, 4])
            >>> Tensor.zeros(2, dtype=dtypes.int32).scatter_reduce(0, Tensor([0, 1, 0, 1]), t, "sum").tolist()
            [4, 6]
            >>> Tensor.zeros(2, dtype=dtypes.int32).scatter_reduce(0, Tensor([0, 1, 0, 1]), t, "amax").tolist()
            [3, 4]
        """
        if reduce not in SCATTER_REDUCTIONS:
            raise ArgumentError(f"scatter_reduce reduce must be one of {', '.join(SCATTER_REDUCTIONS)}, got "
                                f"{reduce!r}")
        if not isinstance(src, TensorBase):
            raise TypeError(f"scatter_reduce needs a tensor src, got {type(src).__name__}; use scatter for a scalar")
        return _scatter(self, dim, index, src, reduce, include_self)

    def masked_fill(self, mask: Self, value: Self | Scalar) -> Self:
        """`value` where the boolean `mask` (broadcast to self's shape) is True.

        Examples:
            >>> Tensor([1, 2, 3]).masked_fill(Tensor([True, False, True]), 0).tolist()
            [0, 2, 0]
        """
        _check_mask(self, mask, "masked_fill")
        if isinstance(value, TensorBase):
            if value.ndim != 0:
                raise ValueError(f"masked_fill takes a 0-d tensor value, got shape {value.shape}")
            v = value.cast(self.dtype)
        else:
            v = scalar_like(self, value)
        return select(mask, v, self)

    def masked_select(self, mask: Self, size: int | None = None, fill_value: Scalar = 0) -> Self:
        """The elements where the boolean `mask` is True, as a 1-D tensor. Without `size`, the mask is realized
        to learn the length; with `size`, the result has exactly that length (cut, or filled with `fill_value`)
        and stays lazy, so it can run inside a TinyJit.

        Examples:
            >>> t = Tensor([[1, 2], [3, 4]])
            >>> t.masked_select(t > 1).tolist()
            [2, 3, 4]
            >>> t.masked_select(t > 1, size=4, fill_value=-1).tolist()
            [2, 3, 4, -1]
        """
        shape = _check_mask(self, mask, "masked_select", both_ways=True)
        if size is not None:
            picks = _first_true_positions(mask._broadcast_to(shape).flatten(), size)  # (size, n) one-hot rows
            taken = (picks.where(self._broadcast_to(shape).flatten().unsqueeze(0), 0)).sum(1).cast(self.dtype)
            return select(picks.any(1), taken, scalar_like(taken, fill_value))
        return self._broadcast_to(shape)[mask._broadcast_to(shape)]

    def nonzero(self, as_tuple: bool = False, size: int | None = None,
                fill_value: Scalar = 0) -> Self | tuple[Self, ...]:
        """The coordinates of the nonzero elements, one row each (int32 as in tinygrad, int64 for a dimension too
        long for int32); with as_tuple, one 1-D tensor per dimension. Without `size`, the count decides the shape,
        so this realizes self and reads it on the host; with `size`, there are exactly `size` rows (cut, or filled
        with `fill_value`) and it stays lazy, so it can run inside a TinyJit.

        Examples:
            >>> Tensor([[0, 1], [2, 0]]).nonzero().tolist()
            [[0, 1], [1, 0]]
            >>> [t.tolist() for t in Tensor([0, 3, 0, 5]).nonzero(as_tuple=True)]
            [[1, 3]]
            >>> Tensor([0, 3, 0, 5]).nonzero(size=3, fill_value=-1).tolist()
            [[1], [3], [-1]]
        """
        if size is not None:
            idx_dtype = index_dtype(max(self.shape, default=1))
            picks = _first_true_positions((self != 0).flatten(), size)  # (size, n)
            flat = type(self).arange(max(self.numel(), 0), device=self.device, dtype=idx_dtype)
            columns = []
            for d in range(self.ndim):  # the coordinate along d of each flat position
                inner = prod(self.shape[d + 1:])
                columns.append((flat // inner) % self.shape[d] if self.shape[d] else flat)
            positions = type(self).stack(*columns, dim=1) if columns else flat.unsqueeze(1)[:, :0]  # (n, ndim)
            got = (picks.unsqueeze(2).where(positions.unsqueeze(0), 0)).sum(1).cast(idx_dtype)
            out = select(picks.any(1, keepdim=True), got, scalar_like(got, fill_value))
            return tuple(out[:, d] for d in range(self.ndim)) if as_tuple else out
        coords = np.argwhere(self.numpy() != 0)  # (count, ndim)
        coords = coords.astype(to_numpy(index_dtype(max(self.shape, default=1))))
        if as_tuple:
            return tuple(type(self)(coords[:, d].copy(), device=self.device) for d in range(max(self.ndim, 1)))
        return type(self)(coords, device=self.device)


def _first_true_positions(flags: TensorT, size: int) -> TensorT:
    """(size, n) bool: row k is True at the position of the k-th True of the 1-D `flags` (all False when there are
    fewer than k+1): the fixed-size form of a data-dependent selection, computed on the device."""
    if not isinstance(size, int) or size < 0:
        raise ValueError(f"size must be a non-negative int, got {size!r}")
    rank = flags.cast(dtypes.int32).cumsum() - 1  # the k of each True
    k = type(flags).arange(size, device=flags.device, dtype=dtypes.int32).unsqueeze(1)
    return flags.unsqueeze(0) & (rank.unsqueeze(0) == k)


# ---- parsing an index ----

def _host_index(i: list | tuple | np.ndarray) -> np.ndarray:
    if isinstance(i, (list, tuple)) and any(isinstance(e, TensorBase) for e in i):
        raise IndexError("a list of tensors is not an index; pass them as a tuple: t[a, b]")
    try:
        arr = np.asarray(i)
    except ValueError:
        raise IndexError(f"index {i!r} is ragged; nested lists must be rectangular") from None
    if arr.size == 0 and arr.dtype.kind == "f":
        return arr.astype(np.int64)  # [] is an empty integer index
    if arr.dtype.kind not in "biu":
        raise IndexError(f"arrays used as indices must be integer or bool, got {arr.dtype} ({i!r})")
    return arr


def _parse(t: TensorT, index: Any) -> list[tuple[Any, ...]]:
    """The index as (kind, ...) items, one per dimension of t it consumes (or adds), ellipsis expanded:
    ("int", i), ("slice", s), ("new",), ("tensor", Tensor | ndarray), ("mask", Tensor | ndarray), ("flag", bool)."""
    raw = list(index) if isinstance(index, tuple) else [index]
    items: list[tuple[Any, ...]] = []
    for i in raw:
        if i is None:
            items.append(("new",))
        elif i is Ellipsis:
            items.append(("ellipsis",))
        elif isinstance(i, slice):
            items.append(("slice", i))
        elif isinstance(i, (bool, np.bool_)):
            items.append(("flag", bool(i)))
        elif isinstance(i, (int, np.integer)):
            items.append(("int", int(i)))
        elif isinstance(i, TensorBase):
            i = joined(t, i)
            if i.device != t.device:
                raise IndexError(f"an index on {i.device} for a tensor on {t.device}; move it with .to()")
            if i.dtype.is_float:
                raise IndexError(f"tensors used as indices must be integer or bool tensors, got {i.dtype}")
            items.append(("mask", i) if i.dtype.is_bool else ("tensor", i))
        elif isinstance(i, (list, tuple, np.ndarray)):
            # a tuple inside the index is a sequence of positions, as in numpy and PyTorch: t[(0, 1), :] picks
            # rows 0 and 1 (only the outermost tuple separates dimensions)
            arr = _host_index(i)
            items.append(("mask", arr) if arr.dtype == np.bool_ else ("tensor", arr))
        elif isinstance(i, UOp) and i.op in (Ops.BIND, Ops.DEFINE_VAR) and not i.dtype.is_float:
            # a (bound) Variable, as tinygrad takes it: a 0-d integer tensor of its value, so that one graph built
            # with it serves every value it is bound to
            items.append(("tensor", type(t)(i, device=t.device)))
        elif isinstance(i, float):
            raise IndexError(f"tensor indices must be ints, slices, None, ..., tensors or lists, not float ({i})")
        else:
            raise IndexError(f"invalid index {i!r} of type {type(i).__name__}; use ints, slices, None, ..., "
                             f"integer or bool tensors, or lists")
    consumed = sum(1 if k in ("int", "slice", "tensor") else item[1].ndim if k == "mask" else 0
                   for item in items for k in (item[0],))
    ellipses = [n for n, item in enumerate(items) if item[0] == "ellipsis"]
    if len(ellipses) > 1:
        raise IndexError("an index can only have a single ellipsis (...)")
    if consumed > t.ndim:
        raise IndexError(f"too many indices for a tensor of shape {t.shape}: the index uses {consumed} dimensions")
    fill = [("slice", slice(None))] * (t.ndim - consumed)
    at = ellipses[0] if ellipses else len(items)
    return items[:at] + fill + items[at + 1:]


class _Pick(Generic[TensorT]):
    """One advanced index: integer positions (a tensor, negative values wrapped) into a dimension of `size`; `host`
    holds the same values when they came from the host."""

    __slots__ = ("host", "index", "size")

    def __init__(self, index: TensorT, size: int, host: np.ndarray | None = None):
        self.index, self.size, self.host = index, size, host


def _pick_from_host(tensor_type: type[TensorT], arr: np.ndarray, size: int, dim: int) -> _Pick[TensorT]:
    if arr.size and (arr.min() < -size or arr.max() >= size):
        bad = int(arr[(arr < -size) | (arr >= size)].reshape(-1)[0])
        raise IndexError(f"index {bad} is out of bounds for dimension {dim} with size {size}")
    wrapped = np.where(arr < 0, arr + size, arr)
    dt = np.int32 if size <= np.iinfo(np.int32).max else np.int64
    return _Pick(tensor_type(wrapped.astype(dt)), size, wrapped)


def _pick_from_tensor(i: TensorT, size: int) -> _Pick[TensorT]:
    if not i.dtype.is_unsigned:
        i = select(i < 0, i + size, i)
    return _Pick(i, size)


class _View(Generic[TensorT]):
    """The basic part of an index as movement ops (shrink, flip, a strided reshape, a final reshape) and their
    inverse. Advanced items keep their dimension (or add one) in the view; they are applied afterwards."""

    def __init__(self, t: TensorT, items: list[tuple[Any, ...]]):
        self.tensor_type = type(t)
        self.in_shape = t.shape
        self.bounds: list[tuple[int, int]] = []
        self.flips: list[int] = []
        self.steps: list[int] = []
        self.counts: list[int] = []  # per dimension of t, its size after the step
        self.out_shape: list[int] = []
        self.picks: list[tuple[int, _Pick[TensorT]]] = []  # (dimension of the view, advanced index)
        self.masks: list[tuple[int, TensorT | np.ndarray]] = []  # (first dimension of the view it covers, mask)
        d = 0
        for item in items:
            kind = item[0]
            if kind == "new":
                self.out_shape.append(1)
                continue
            if kind == "flag":
                # a Python bool adds a dimension of size 1 and keeps it (True) or none of it (False)
                flag = _pick_from_host(self.tensor_type, np.zeros(int(item[1]), np.int64), 1, d)
                self.picks.append((len(self.out_shape), flag))
                self.out_shape.append(1)
                continue
            if kind == "mask":
                mask = item[1]
                k = mask.ndim
                if tuple(mask.shape) != t.shape[d:d + k]:
                    raise IndexError(f"the mask of shape {tuple(mask.shape)} does not match the shape "
                                     f"{t.shape[d:d + k]} of the dimensions {d}..{d + k - 1} it indexes "
                                     f"(tensor shape {t.shape})")
                self.masks.append((len(self.out_shape), mask))
                for _ in range(k):
                    self._keep(t.shape[d], 0, t.shape[d], 1)
                    d += 1
                if k == 0:  # a 0-d mask is a flag
                    self.out_shape.append(1)
                continue
            size = t.shape[d]
            if kind == "int":
                i = item[1]
                if not -size <= i < size:
                    raise IndexError(f"index {i} is out of bounds for dimension {d} with size {size}")
                i %= size
                self.bounds.append((i, i + 1))
                self.steps.append(1)
                self.counts.append(1)
            elif kind == "slice":
                self._slice(item[1], size, d)
            else:  # an integer index: keep the whole dimension, pick from it later
                p = _pick_from_host(self.tensor_type, item[1], size, d) if isinstance(item[1], np.ndarray) else \
                    _pick_from_tensor(item[1], size)
                self.picks.append((len(self.out_shape), p))
                self._keep(size, 0, size, 1)
            d += 1

    def _keep(self, size: int, lo: int, hi: int, step: int) -> None:
        self.bounds.append((lo, hi))
        self.steps.append(step)
        self.counts.append(-(-(hi - lo) // step))
        self.out_shape.append(self.counts[-1])

    def _slice(self, s: slice, size: int, d: int) -> None:
        for part in (s.start, s.stop, s.step):
            if part is not None and (not isinstance(part, (int, np.integer)) or isinstance(part, bool)):
                raise IndexTypeError(f"slice bounds must be ints or None, got {s}")
        start, stop, step = s.indices(size) if s.step != 0 else (0, 0, 0)
        if step == 0:
            raise ValueError("slice step cannot be zero")
        if step > 0:
            n = max(0, -(-(stop - start) // step))
            self._keep(size, start, start + (n - 1) * step + 1 if n else start, step)
        else:
            n = max(0, -(-(start - stop) // -step))
            if n:
                self.flips.append(d)
                self._keep(size, start - (n - 1) * -step, start + 1, -step)
            else:
                self._keep(size, 0, 0, 1)

    def apply(self, t: TensorT) -> TensorT:
        x = t.shrink(tuple(self.bounds)) if self.bounds else t
        if self.flips:
            x = x.flip(self.flips)
        if any(s != 1 for s in self.steps):
            # every s-th element: pad to a multiple of s, split off the step, keep position 0 of it
            x = x.pad([(0, c * s - n) for c, s, n in zip(self.counts, self.steps, x.shape)])
            x = x.reshape(tuple(v for c, s in zip(self.counts, self.steps) for v in (c, s)))
            x = x.shrink(tuple(p for c in self.counts for p in ((0, c), (0, 1)))).reshape(tuple(self.counts))
        return x.reshape(tuple(self.out_shape))

    def place(self, v: TensorT) -> TensorT:
        """The inverse: v (of the view's shape) at the viewed positions of a tensor of t's shape, zeros (False)
        elsewhere."""
        x = v.reshape(tuple(self.counts))
        if any(s != 1 for s in self.steps):
            lengths = [hi - lo for lo, hi in self.bounds]
            x = x.reshape(tuple(v for c in self.counts for v in (c, 1)))
            x = x.pad([p for s in self.steps for p in ((0, 0), (0, s - 1))])
            x = x.reshape(tuple(c * s for c, s in zip(self.counts, self.steps)))
            x = x.shrink(tuple((0, n) for n in lengths))
        if self.flips:
            x = x.flip(self.flips)
        return x.pad([(lo, n - hi) for (lo, hi), n in zip(self.bounds, self.in_shape)]) if self.bounds else x

    def advanced(self) -> list[tuple[int, _Pick[TensorT]]]:
        """All advanced indices in view order, boolean masks turned into the positions they select (this reads
        the masks on the host: how many elements they select decides the result's shape)."""
        picks = list(self.picks)
        for at, mask in self.masks:
            arr = mask if isinstance(mask, np.ndarray) else mask.numpy()
            if arr.ndim == 0:
                picks.append((at, _pick_from_host(self.tensor_type, np.zeros(int(bool(arr)), np.int64), 1, at)))
                continue
            for k, coords in enumerate(np.nonzero(arr)):
                picks.append((at + k, _pick_from_host(self.tensor_type, coords, arr.shape[k], at + k)))
        return sorted(picks, key=lambda p: p[0])

    def masked_write(self, y: TensorT, v: TensorT) -> TensorT | None:
        """`y[mask] = v` as a where, when the mask is the only advanced index and v does not depend on how many
        elements it selects (v broadcasts to the dimensions after the mask). None where that does not apply."""
        if len(self.masks) != 1 or self.picks:
            return None
        at, mask = self.masks[0]
        k = mask.ndim
        tail = y.shape[at + k:]
        if k == 0 or v.ndim > len(tail):
            return None
        m = mask if isinstance(mask, TensorBase) else type(y)(mask, device=y.device)
        m = m.reshape((1,) * at + m.shape + (1,) * len(tail))
        return select(m, _broadcast_value(v, tail).reshape((1,) * (at + k) + tail), y)


# ---- gathering and writing with advanced indices ----

def _one_hot(idx: TensorT, size: int) -> TensorT:
    """(*idx.shape, size) bool: True where the last coordinate equals the index."""
    # lazy positions (an ARANGE node, not a host-made buffer): lowered, they are the reduce loop's own index, so
    # the compiler sees `idx == r` and turns the compare-and-sum into a direct load (codegen/gather_fold.py)
    dt = dtypes.int32 if size < 2**31 else dtypes.int64
    positions = type(idx)(UOp(Ops.ARANGE, dt, (), size), device=idx.device)
    return idx.unsqueeze(-1) == positions


def _pick_sum(mask: TensorT, values: TensorT, axes: tuple[int, ...]) -> TensorT:
    """Reduce `values` where `mask` holds over `axes` (dropped), with at most one True per output element: a sum
    keeps every dtype's value exactly (an OR for bool), and a where (not a multiply) keeps NaN and inf out of the
    elements that are not picked."""
    picked = select(mask, values, scalar_like(values, 0))
    out = picked._derive(picked.uop.reduce_axis(Ops.MAX if values.dtype.is_bool else Ops.ADD, axes))
    return out.reshape(tuple(s for i, s in enumerate(out.shape) if i not in axes))


def _layout(y: TensorT, picks: list[tuple[int, _Pick[TensorT]]]
            ) -> tuple[list[int], list[int], tuple[int, ...], list[int]]:
    """For advanced indices at view dimensions `pos`: the other dimensions, the broadcast index shape, and the
    order that takes (index dims, other dims) to the result: PyTorch keeps the index dims in place when the
    advanced indices are next to each other, else puts them first."""
    pos = [p for p, _ in picks]
    rest = [d for d in range(y.ndim) if d not in pos]
    try:
        bshape = broadcast_shape(*(p.index.shape for _, p in picks))
    except ValueError:
        raise IndexError(f"shape mismatch: indexing tensors could not be broadcast together with shapes "
                         f"{', '.join(str(p.index.shape) for _, p in picks)}") from None
    nb, nr = len(bshape), len(rest)
    order = list(range(nb + nr))
    if pos == list(range(pos[0], pos[0] + len(pos))):
        order = list(range(nb, nb + pos[0])) + list(range(nb)) + list(range(nb + pos[0], nb + nr))
    return pos, rest, bshape, order


def _picks_mask(picks: list[tuple[int, _Pick[TensorT]]], bshape: tuple[int, ...]) -> TensorT:
    """(*bshape, *sizes) bool: for every index position, the one element of the indexed dimensions it picks."""
    k, nb = len(picks), len(bshape)
    mask: TensorT | None = None
    for j, (_, p) in enumerate(picks):
        hot = _one_hot(p.index._broadcast_to(bshape), p.size)  # (*bshape, size)
        hot = hot.reshape(bshape + tuple(p.size if m == j else 1 for m in range(k)))
        mask = hot if mask is None else mask & hot
    assert mask is not None
    return mask._broadcast_to(bshape + tuple(p.size for _, p in picks)) if nb + k else mask


def _take(y: TensorT, picks: list[tuple[int, _Pick[TensorT]]]) -> TensorT:
    pos, rest, bshape, order = _layout(y, picks)
    nb, k, nr = len(bshape), len(pos), len(rest)
    sizes = tuple(y.shape[p] for p in pos)
    mask = _picks_mask(picks, bshape).reshape(bshape + sizes + (1,) * nr)
    values = y.permute(pos + rest).reshape((1,) * nb + sizes + tuple(y.shape[d] for d in rest))
    return _pick_sum(mask, values, tuple(range(nb, nb + k))).permute(order)


def _put(y: TensorT, picks: list[tuple[int, _Pick[TensorT]]], v: TensorT) -> TensorT:
    pos, rest, bshape, order = _layout(y, picks)
    nb, k, nr = len(bshape), len(pos), len(rest)
    sizes = tuple(y.shape[p] for p in pos)
    rest_shape = tuple(y.shape[d] for d in rest)
    natural = bshape + rest_shape
    v = _broadcast_value(v, tuple(natural[o] for o in order)).permute(argsort(order))  # (*bshape, *rest)
    if prod(bshape) == 0:
        return y
    mask = _picks_mask(picks, bshape)  # (*bshape, *sizes)
    if _unique(picks, bshape):
        hit = mask._derive(mask.uop.reduce_axis(Ops.MAX, tuple(range(nb)))).reshape(sizes)
    else:
        # several index positions name one element: the last one writes it
        order_of = type(y).arange(prod(bshape), device=y.device, dtype=dtypes.int32).reshape(bshape + (1,) * k)
        ranked = select(mask, order_of, scalar_like(order_of, -1))
        last = ranked._derive(ranked.uop.reduce_axis(Ops.MAX, tuple(range(nb))))
        mask = mask & (order_of == last)
        hit = last.reshape(sizes) >= 0
    placed = _pick_sum(mask.reshape(bshape + sizes + (1,) * nr), v.reshape(bshape + (1,) * k + rest_shape),
                       tuple(range(nb)))  # (*sizes, *rest)
    written = select(hit.reshape(sizes + (1,) * nr), placed, y.permute(pos + rest))
    return written.permute(argsort(pos + rest))


def _unique(picks: list[tuple[int, _Pick[TensorT]]], bshape: tuple[int, ...]) -> bool:
    """Whether the indices (all known on the host) name every element at most once."""
    hosts = [p.host for _, p in picks]
    if any(h is None for h in hosts):
        return False
    coords = np.stack([np.broadcast_to(h, bshape).reshape(-1) for h in hosts if h is not None])
    return int(np.unique(coords, axis=1).shape[1]) == coords.shape[1]


def _broadcast_value(v: TensorT, shape: tuple[int, ...]) -> TensorT:
    try:
        if broadcast_shape(v.shape, shape) != shape:
            raise ValueError
    except ValueError:
        raise ValueError(f"shape mismatch: a value of shape {v.shape} cannot be broadcast to the indexed shape "
                         f"{shape}") from None
    return v._broadcast_to(shape)


def _value_tensor(t: TensorT, value: TensorT | Scalar | Sequence[Any]) -> TensorT:
    if isinstance(value, TensorBase):
        value = joined(t, value)
        if value.device != t.device:
            raise RuntimeError(f"a value on {value.device} written into a tensor on {t.device}; move it with .to()")
        return value.cast(t.dtype)
    if isinstance(value, (bool, int, float, np.generic)):
        return scalar_like(t, value.item() if isinstance(value, np.generic) else value)
    return type(t)(value, device=t.device, dtype=t.dtype)


# ---- gather and scatter ----

def _scatter_args(t: TensorT, dim: int, index: TensorT, src: TensorT | None, name: str) -> tuple[TensorT, TensorT, int]:
    if not isinstance(index, TensorBase):
        raise TypeError(f"{name} index must be a Tensor, got {type(index).__name__}")
    if not index.dtype.is_int:
        raise DTypeError(f"{name} index must be an integer tensor, got {index.dtype}")
    if index.ndim != t.ndim:
        raise ShapeError(f"{name} index of shape {index.shape} must have as many dimensions as the tensor of shape "
                         f"{t.shape}")
    x, idx = (t.reshape(1), index.reshape(1)) if t.ndim == 0 else (t, index)
    d = x._axis(dim)
    for k in range(x.ndim):
        if k != d and idx.shape[k] > x.shape[k]:
            raise ShapeError(f"{name} index of shape {index.shape} is larger than the tensor's shape {t.shape} in "
                             f"dimension {k} (only dimension {d} may be larger)")
    if src is not None:
        if src.ndim != t.ndim:
            raise ShapeError(f"{name} src of shape {src.shape} must have as many dimensions as the tensor of shape "
                             f"{t.shape}")
        if any(i > s for i, s in zip(index.shape, src.shape)):
            raise ShapeError(f"{name} index of shape {index.shape} is larger than src of shape {src.shape}")
        if src.dtype != t.dtype:
            # both libraries refuse to convert src silently: the values written would not be the ones given
            raise DTypeError(f"{name} src of dtype {src.dtype} into a tensor of dtype {t.dtype}; cast one of them")
    return x, idx, d


def _scatter(t: TensorT, dim: int, index: TensorT, src: TensorT | Scalar, how: str, include_self: bool) -> TensorT:
    src = joined(t, src) if isinstance(src, TensorBase) else src
    x, idx, d = _scatter_args(t, dim, index, src if isinstance(src, TensorBase) else None, "scatter")
    if isinstance(src, TensorBase) and src.device != t.device:
        raise RuntimeError(f"scatter src on {src.device} for a tensor on {t.device}; move it with .to()")
    if idx.numel() == 0:
        return t
    if isinstance(src, TensorBase):
        values = (src.reshape(1) if src.ndim == 0 else src).shrink(tuple((0, n) for n in idx.shape)).cast(t.dtype)
    else:
        values = scalar_like(x, src)._broadcast_to(idx.shape)
    s = x.shape[d]
    # axis d of (index, s) holds the contributors to each of the s targets in the last axis
    hot = _one_hot(idx, s)
    values = values.unsqueeze(-1)
    part_shape = idx.shape[:d] + (s,) + idx.shape[d + 1:]
    part = x.shrink(tuple((0, n) for n in part_shape))

    def over_contributors(u: TensorT, op: Ops) -> TensorT:
        """Reduce axis d and move the targets into its place: (*part_shape)."""
        r = u._derive(u.uop.reduce_axis(op, (d,)))
        r = r.reshape(idx.shape[:d] + idx.shape[d + 1:] + (s,))
        return r.permute(list(range(d)) + [r.ndim - 1] + list(range(d, r.ndim - 1)))

    hit = over_contributors(hot, Ops.MAX)
    if how == "assign" and not isinstance(src, TensorBase):
        new = select(hit, scalar_like(part, src), part)  # one value for every write: no need to rank the writers
    elif how == "assign":
        order = type(x).arange(idx.shape[d], device=x.device, dtype=dtypes.int32)
        order = order.reshape((1,) * d + (idx.shape[d],) + (1,) * (idx.ndim - d))
        ranked = select(hot, order, scalar_like(order, -1))
        last = ranked._derive(ranked.uop.reduce_axis(Ops.MAX, (d,)))
        hot = hot & (order == last)  # several contributors to one place: the last one writes it
        new = select(hit, over_contributors(select(hot, values, scalar_like(values, 0)), Ops.ADD), part)
    elif how in ("sum", "mean"):
        total = over_contributors(select(hot, values, scalar_like(values, 0)), Ops.ADD)
        if how == "sum":
            new = part + total if include_self else select(hit, total, part)
        else:
            count = over_contributors(hot.cast(dtypes.int32), Ops.ADD)
            num, den = (part + total, count + 1) if include_self else (total, count)
            den = select(hit, den, scalar_like(den, 1))
            new = select(hit, (num // den if t.dtype.is_int else num / den).cast(t.dtype), part)
    elif how == "prod":
        total = over_contributors(select(hot, values, scalar_like(values, 1)), Ops.MUL)
        new = part * total if include_self else select(hit, total, part)
    else:  # amax, amin
        picked = select(hot, values, scalar_like(values, t.dtype.min if how == "amax" else t.dtype.max))
        if how == "amax":
            extreme = over_contributors(picked, Ops.MAX)
            both = extreme.maximum(part)
        else:
            # a min as the max of order-reversed values: -x for floats, ~x for integers and bool (never overflows)
            def flip(u: TensorT) -> TensorT:
                return -u if t.dtype.is_float else ~u
            extreme = flip(over_contributors(flip(picked), Ops.MAX))
            both = extreme.minimum(part)
        new = select(hit, both if include_self else extreme, part)
    new = new.cast(t.dtype)
    if part_shape != x.shape:
        pads = tuple((0, n - p) for n, p in zip(x.shape, part_shape))
        new = select(placed_mask(x, part_shape, pads), new.pad(pads), x)
    return new.reshape(t.shape)


def _check_mask(t: TensorT, mask: TensorT, name: str, both_ways: bool = False) -> tuple[int, ...]:
    if not isinstance(mask, TensorBase) or not mask.dtype.is_bool:
        got = mask.dtype if isinstance(mask, TensorBase) else type(mask).__name__
        raise DTypeError(f"{name} needs a bool mask tensor, got {got}")
    try:
        shape = broadcast_shape(t.shape, mask.shape)
    except ValueError:
        shape = None
    if shape is None or (not both_ways and shape != t.shape):
        raise ValueError(f"{name}: the mask of shape {mask.shape} does not broadcast to the tensor's shape {t.shape}")
    return shape


def _symbolic_slices(index: Any) -> bool:
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(p, slice) and any(isinstance(v, UOp) for v in (p.start, p.stop)) for p in parts)


def _basic_index(index: Any) -> bool:
    """Plain slices (step 1) and ints only: what a tensor with symbolic dimensions can be indexed with."""
    parts = index if isinstance(index, tuple) else (index,)
    return all((isinstance(p, slice) and p.step in (None, 1)) or (isinstance(p, (int, np.integer))
                                                                  and not isinstance(p, bool)) for p in parts)


def _shrink_by_slices(x: TensorT, index: Any) -> TensorT:
    """Slices with Variable bounds, or any index of a tensor with symbolic dimensions: a plain shrink per dimension.
    Steps and other index kinds are not supported; ints pick from (and slices with int bounds may count from the end
    of) dimensions of int size only."""
    parts = index if isinstance(index, tuple) else (index,)
    if len(parts) > x.ndim or not _basic_index(index):
        raise IndexError(f"index {index!r} of a tensor of shape {x.shape}: with Variable bounds or symbolic sizes only "
                         f"ints and plain slices (step 1), one per dimension, are supported; shrink to an int size "
                         f"first for steps, None, ... or tensor indices")
    bounds, dropped = [], []
    for d, p in enumerate(parts):
        size = x.shape[d]
        if not isinstance(p, slice):
            known = resolve_size(size)  # a symbolic size is checked at its bound value, as a shape would be
            if not -known <= p < known:
                raise IndexError(f"index {p} is out of bounds for dimension {d} with size {known}")
            start = int(p) if p >= 0 else size + int(p)
            bounds.append((start, start + 1))
            dropped.append(d)
        elif isinstance(size, int) and not isinstance(p.start, UOp) and not isinstance(p.stop, UOp):
            start, stop, _ = p.indices(size)
            bounds.append((start, max(start, stop)))
        else:
            bounds.append((0 if p.start is None else p.start, size if p.stop is None else p.stop))
    out = x.shrink([*bounds, *([None] * (x.ndim - len(parts)))])
    return out.reshape(tuple(s for d, s in enumerate(out.shape) if d not in dropped)) if dropped else out
