"""Reductions over axes, and the ops built on them: statistics, arg-extremes, softmax and friends, cumulative
scans, sorting.

Everything here is lazy and made of Tensor ops, so gradients come from the ordinary autograd rules. Two building
blocks carry the ops that are not plain reductions:

* `_scan`: an inclusive scan (cumsum, cumprod, running max, running logsumexp) along the last axis. Each output
  element reduces a *window* of the input, a view built from pad/expand/reshape/shrink without copying. Windows of
  all n positions would cost n*n work, so the axis is cut into blocks of `SCAN_BLOCK`: scan inside each block
  (n*SCAN_BLOCK work), scan the n/SCAN_BLOCK block totals the same way (recursively), and combine. Work is
  O(n * SCAN_BLOCK), memory O(n): the windows are views that fuse into their reduction, never buffers.
* `_take_last`: gather along the last axis by comparing each index with every position (a one-hot mask that
  fuses into a sum). O(m * n) work for m indices into n positions, O(m) memory, no host round trip, and the
  gradient reaches exactly the gathered elements. Sorting ranks by comparison the same way: O(n * n) work,
  O(n) memory per row.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Self

from tinygrad.dtype import DType, DTypeLike, dtypes, sum_acc_dtype, to_dtype
from tinygrad.mixin.common import TensorBase, TensorT, index_dtype
from tinygrad.uop.ops import Ops, UOp, sym_prod

Axis = int | Sequence[int] | None

# block length of the blocked scans (see the module docstring); a plain module variable so that tests can
# make it small and reach the blocked path with small inputs
SCAN_BLOCK = 64


def _accumulation_dtype(d: DType) -> DType:
    """The dtype a sum of `d` adds up in: float32 for floats narrower than it (half and bfloat16, whose 11 and 8
    bits of mantissa would drop every term below a 2048th or a 256th of the running sum, and 8-bit floats);
    `sum_acc_dtype` (int32 or uint32 for narrower integers, as tinygrad) otherwise."""
    return dtypes.float32 if d.is_float and d.itemsize < 4 else sum_acc_dtype(d)


def _integer_sum_dtype(d: DType, count: int) -> DType:
    """`sum_acc_dtype(d)`, widened to 64 bits where a sum of `count` values narrower than 32 bits could pass the
    32-bit range: tinygrad's int32 would wrap there (a count of booleans past 2**31), which is this project's
    choice of dtype and not the input's range, so the sum stays exact (a 32-bit input wraps as its own dtype does)."""
    acc = sum_acc_dtype(d)
    if (d.is_int or d.is_bool) and d.itemsize < 4 and count * max(abs(int(d.min)), int(d.max)) > int(acc.max):
        return dtypes.uint64 if acc.is_unsigned else dtypes.int64
    return acc


def _pick(axis: Axis, dim: Axis) -> Axis:
    """PyTorch spells the axis `dim=`, tinygrad `axis=`; both are accepted."""
    return dim if dim is not None else axis


def _lowest(d: DType) -> float | int | bool:
    """The identity of max: the smallest value of the dtype (-inf for floats that have it; fp8e4m3 has none)."""
    return d.min


def _isnan(x: TensorT) -> TensorT:
    return x != x


def _isinf(x: TensorT) -> TensorT:
    return (x == math.inf) | (x == -math.inf)


def _reversed_order(x: TensorT) -> TensorT:
    """An order-reversing map that never overflows: -x for floats (NaN stays NaN), ~x for integers and bool."""
    return -x if x.dtype.is_float else ~x


class ReduceMixin(TensorBase):
    __slots__ = ()

    # ---- plain reductions ----
    def _reduce_axes(self, axis: Axis) -> tuple[int, ...]:
        if axis is None:
            return tuple(range(self.ndim))
        axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)  # _axis rejects what is not an int
        checked = {self._axis(a) for a in axes}
        return tuple(sorted(checked)) if self.ndim else ()  # a 0-d tensor accepts dim 0 or -1 and has nothing to reduce

    def _reduce(self, op: Ops, axis: Axis, keepdim: bool) -> Self:
        axes = self._reduce_axes(axis)
        out = self._derive(self.uop.reduce_axis(op, axes)) if axes else self
        if keepdim:
            return out
        return out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def sum(self, axis: Axis = None, keepdim: bool = False, dtype: DTypeLike | None = None,
            dim: Axis = None) -> Self:
        """Sum in `dtype` if given; else bool and integers sum to int32 (unsigned: uint32; 64-bit ones in their own
        dtype, and narrower ones in 64 bits where so many are added that 32 bits could overflow), as in tinygrad, and
        floats to their own dtype, where floats
        narrower than float32 (half, bfloat16) are added up in float32 and rounded once at the end, as in PyTorch.
        `axis` (or PyTorch's `dim`) is an int, a tuple of ints, or None for all; `keepdim` keeps reduced dimensions
        as size 1.

        Examples:
            >>> t = Tensor([[1, 2], [3, 4]])
            >>> t.sum().item(), t.sum(0).tolist(), t.sum(axis=1, keepdim=True).tolist()
            (10, [4, 6], [[3], [7]])
            >>> t.sum().dtype
            dtypes.int32
        """
        if dtype is not None:
            return self.cast(to_dtype(dtype))._reduce(Ops.ADD, _pick(axis, dim), keepdim)
        s = self._accumulated_sum(_pick(axis, dim), keepdim)
        return s if s.dtype.is_int else s.cast(sum_acc_dtype(self.dtype))

    def _accumulated_sum(self, axis: Axis, keepdim: bool) -> Self:
        """The sum in the dtype it accumulates in (`_accumulation_dtype`, `_integer_sum_dtype` for integers), before
        any rounding to the result's."""
        acc = _accumulation_dtype(self.dtype)
        if acc.is_int:
            acc = _integer_sum_dtype(self.dtype, self._reduced_count(axis))
        return self.cast(acc)._reduce(Ops.ADD, axis, keepdim)

    def _reduced_count(self, axis: Axis) -> int:
        """How many elements each output of a reduction over `axis` adds up (a symbolic size at its largest)."""
        sizes = (self.shape[a] for a in self._reduce_axes(axis))
        return math.prod(s if isinstance(s, int) else int(s.vmax) for s in sizes)

    def prod(self, axis: Axis = None, keepdim: bool = False, dtype: DTypeLike | None = None,
             dim: Axis = None) -> Self:
        """The product over `axis` (all by default); integers and bool multiply in `sum`'s dtype; `dtype`
        overrides.

        Examples:
            >>> Tensor([[1, 2], [3, 4]]).prod().item()
            24
            >>> Tensor([[1, 2], [3, 4]]).prod(axis=1).tolist()
            [2, 12]
        """
        acc = to_dtype(dtype) if dtype is not None else sum_acc_dtype(self.dtype)
        return self.cast(acc)._reduce(Ops.MUL, _pick(axis, dim), keepdim)

    def max(self, axis: Axis = None, keepdim: bool = False, dim: Axis = None) -> Self:
        """The largest value over `axis` (all by default; PyTorch's `dim=` works too), NaN if there is one; over an
        empty dimension the identity, -inf or the dtype's smallest value (tinygrad; PyTorch raises). Returns values
        only (PyTorch's `max(dim)` also returns indices: use `argmax`); the gradient is shared among ties.

        Examples:
            >>> t = Tensor([[1, 5], [3, 2]])
            >>> t.max().item(), t.max(axis=0).tolist(), t.max(1, keepdim=True).tolist()
            (5, [3, 5], [[5], [3]])
        """
        axis = _pick(axis, dim)
        return self._reduce(Ops.MAX, axis, keepdim)

    def min(self, axis: Axis = None, keepdim: bool = False, dim: Axis = None) -> Self:
        """The smallest value over `axis` (all by default), NaN if there is one, inf or the dtype's largest value
        over an empty dimension; values only (see `argmin`).

        Examples:
            >>> t = Tensor([[1, 5], [3, 2]])
            >>> t.min().item(), t.min(axis=1).tolist()
            (1, [1, 2])
        """
        axis = _pick(axis, dim)
        return _reversed_order(_reversed_order(self).max(axis, keepdim))

    def mean(self, axis: Axis = None, keepdim: bool = False, dim: Axis = None) -> Self:
        """The mean over `axis` (all by default), as a float; half floats accumulate in float32. The mean of an
        empty selection is NaN.

        Examples:
            >>> t = Tensor([[1, 2], [3, 4]])
            >>> t.mean().item(), t.mean(axis=0).tolist()
            (2.5, [2.0, 3.0])
        """
        axis = _pick(axis, dim)
        x = self._float()
        n = sym_prod([self.shape[a] for a in self._reduce_axes(axis)])
        s = x._accumulated_sum(axis, keepdim)  # divided before it is rounded: a half sum may overflow, its mean not
        if isinstance(n, UOp):  # a symbolic count: divide by the Variable's value at run time
            return (s / type(self)(n, device=self.device).cast(s.dtype)).cast(x.dtype)
        return (s / n if n else s * math.nan).cast(x.dtype)

    def any(self, axis: Axis = None, keepdim: bool = False, dim: Axis = None) -> Self:
        """Whether any element over `axis` (all by default) is true (nonzero), as a bool tensor.

        Examples:
            >>> t = Tensor([[True, False], [False, False]])
            >>> t.any().item(), t.any(axis=1).tolist()
            (True, [True, False])
        """
        axis = _pick(axis, dim)
        return self.bool()._reduce(Ops.MAX, axis, keepdim) if self.numel() else self.bool().sum(axis, keepdim) != 0

    def all(self, axis: Axis = None, keepdim: bool = False, dim: Axis = None) -> Self:
        """Whether every element over `axis` (all by default) is true (nonzero), as a bool tensor.

        Examples:
            >>> t = Tensor([[1, 1], [0, 1]])
            >>> t.all().item(), t.all(axis=0).tolist()
            (False, [False, True])
        """
        return self.logical_not().any(_pick(axis, dim), keepdim).logical_not()

    # ---- statistics ----
    def var(self, axis: Axis = None, keepdim: bool = False, correction: float = 1, *, dim: Axis = None,
            unbiased: bool | None = None) -> Self:
        """Variance with Bessel's `correction` (PyTorch's; `unbiased=False` is `correction=0`). When the number of
        elements is not above the correction the result is inf or NaN, as in PyTorch.

        Examples:
            >>> t = Tensor([1.0, 2.0, 3.0, 4.0])
            >>> [round(v, 4) for v in (t.var().item(), t.var(correction=0).item())]
            [1.6667, 1.25]
        """
        axis = _pick(axis, dim)
        if unbiased is not None:
            correction = 1 if unbiased else 0
        axes = self._reduce_axes(axis)
        x = self._float()
        n = sym_prod(self.shape[a] for a in axes)
        squares = (x - x.mean(axes, keepdim=True)).square().sum(axes, keepdim=keepdim)
        if isinstance(n, UOp):  # a symbolic count: the divisor is computed from the Variable's value at run time
            return squares / (type(self)(n, device=self.device).cast(squares.dtype) - correction).maximum(0)
        return squares / max(0, n - correction)

    def std(self, axis: Axis = None, keepdim: bool = False, correction: float = 1, *, dim: Axis = None,
            unbiased: bool | None = None) -> Self:
        """The standard deviation, `sqrt(var(...))`, with the same `correction` (Bessel's by default).

        Examples:
            >>> Tensor([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).std(correction=0).item()
            2.0
        """
        return self.var(axis, keepdim, correction, dim=dim, unbiased=unbiased).sqrt()

    def var_mean(self, axis: Axis = None, keepdim: bool = False, correction: float = 1, *,
                 dim: Axis = None, unbiased: bool | None = None) -> tuple[Self, Self]:
        """`(var, mean)` over the same axes, as PyTorch's `torch.var_mean`.

        Examples:
            >>> v, m = Tensor([1.0, 3.0]).var_mean()
            >>> v.item(), m.item()
            (2.0, 2.0)
        """
        axis = _pick(axis, dim)
        return self.var(axis, keepdim, correction, unbiased=unbiased), self.mean(axis, keepdim)

    def std_mean(self, axis: Axis = None, keepdim: bool = False, correction: float = 1, *,
                 dim: Axis = None, unbiased: bool | None = None) -> tuple[Self, Self]:
        """`(std, mean)` over the same axes, as PyTorch's `torch.std_mean`.

        Examples:
            >>> s, m = Tensor([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).std_mean(correction=0)
            >>> s.item(), m.item()
            (2.0, 5.0)
        """
        axis = _pick(axis, dim)
        return self.std(axis, keepdim, correction, unbiased=unbiased), self.mean(axis, keepdim)

    # ---- arg-extremes ----
    def argmax(self, axis: int | None = None, keepdim: bool = False, *, dim: int | None = None) -> Self:
        """The index of the largest value; the first one among ties, and NaN counts as largest (PyTorch). int32
        as in tinygrad (int64 along an axis too long for int32; PyTorch: always int64). Without `axis`, the index
        into the flattened tensor.

        Examples:
            >>> t = Tensor([[1, 5, 5], [7, 0, 2]])
            >>> t.argmax().item(), t.argmax(axis=1).tolist()
            (3, [1, 0])
        """
        return self._arg_extreme(_pick(axis, dim), keepdim, "argmax")  # type: ignore[arg-type]

    def argmin(self, axis: int | None = None, keepdim: bool = False, *, dim: int | None = None) -> Self:
        """The index (int32, as argmax) of the smallest value; the first one among ties, and NaN counts as
        smallest.

        Examples:
            >>> Tensor([[3, 1, 1], [0, 4, 2]]).argmin(axis=1).tolist()
            [1, 0]
        """
        return _reversed_order(self)._arg_extreme(_pick(axis, dim), keepdim, "argmin")  # type: ignore[arg-type]

    def _arg_extreme(self, axis: int | None, keepdim: bool, name: str) -> Self:
        if axis is None:
            if self.numel() == 0:
                raise IndexError(f"{name} of an empty tensor of shape {self.shape} has no answer; pass dim= to "
                                 f"reduce one dimension")
            out = self.reshape(-1)._arg_extreme(0, False, name)
            return out.reshape((1,) * self.ndim) if keepdim else out
        ax = self._axis(axis)
        x = self.reshape(1) if self.ndim == 0 else self
        n = x.shape[ax]
        if n == 0:
            raise IndexError(f"{name} over dimension {axis} of size 0 (shape {self.shape}) has no answer")
        top = x.max(ax, keepdim=True)
        hit = x == top
        if x.dtype.is_float:  # the max is NaN where the slice holds a NaN (MAX propagates it): then the NaNs are hits
            hit = _isnan(top).where(_isnan(x), hit)
        # the first hit scores highest: position i scores n - i. The positions are a lazy ARANGE, the reduce loop's
        # own index, not a host-made buffer that the kernel would read beside x
        dt = dtypes.int32 if n <= dtypes.int32.max else dtypes.int64
        positions = type(self)(UOp(Ops.ARANGE, dt, (), n), device=self.device)
        score = (n - positions).reshape((n,) + (1,) * (x.ndim - ax - 1))
        first = (n - hit.where(score, 0).max(ax, keepdim=True)).cast(index_dtype(n))
        if not keepdim:
            first = first.reshape(tuple(s for i, s in enumerate(x.shape) if i != ax))
        return first.reshape(()) if self.ndim == 0 else first

    # ---- softmax family ----
    def softmax(self, axis: int = -1, dtype: DTypeLike | None = None, *, dim: int | None = None) -> Self:
        """exp(x) / sum(exp(x)) along `axis` (the last by default), computed stably (shifted by the max), as a
        float (`dtype` computes in that dtype).

        Examples:
            >>> Tensor([1.0, 1.0, 2.0]).log().softmax().tolist()
            [0.25, 0.25, 0.5]
        """
        x, ax = self._along(_pick(axis, dim), dtype)  # type: ignore[arg-type]
        if x.shape[ax] == 0:
            return x.reshape(self.shape)
        e = (x - x.max(ax, keepdim=True).detach()).exp()  # shifting by the max (no gradient: softmax ignores it)
        return (e / e.sum(ax, keepdim=True)).reshape(self.shape)

    def log_softmax(self, axis: int = -1, dtype: DTypeLike | None = None, *, dim: int | None = None) -> Self:
        """log(softmax(x)) along `axis` (the last by default), computed stably without taking the log of a
        softmax.

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, 0.0]).log_softmax().tolist()]
            [-0.6931, -0.6931]
        """
        x, ax = self._along(_pick(axis, dim), dtype)  # type: ignore[arg-type]
        if x.shape[ax] == 0:
            return x.reshape(self.shape)
        shifted = x - x.max(ax, keepdim=True).detach()
        return (shifted - shifted.exp().sum(ax, keepdim=True).log()).reshape(self.shape)

    def softmin(self, axis: int = -1, dtype: DTypeLike | None = None, *, dim: int | None = None) -> Self:
        """softmax of -x along `axis`: the largest weight goes to the smallest value.

        Examples:
            >>> Tensor([1.0, 1.0, 2.0]).log().neg().softmin().tolist()
            [0.25, 0.25, 0.5]
        """
        x = self.cast(dtype) if dtype is not None else self._float()
        return (-x).softmax(_pick(axis, dim))  # type: ignore[arg-type]

    def _along(self, axis: int, dtype: DTypeLike | None = None) -> tuple[Self, int]:
        """The tensor as floats (0-d made 1-d) and the checked axis."""
        ax = self._axis(axis)
        x = self.cast(dtype) if dtype is not None else self._float()
        return (x.reshape(1) if self.ndim == 0 else x), ax

    def logsumexp(self, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Self:
        """log(sum(exp(x))) without overflow; -inf over an empty dimension, as in PyTorch.

        Examples:
            >>> [round(v, 4) for v in Tensor([[0.0, 0.0], [100.0, 100.0]]).logsumexp(axis=1).tolist()]
            [0.6931, 100.6931]
            >>> Tensor([1000.0, -math.inf]).logsumexp().item()
            1000.0
        """
        axes = self._reduce_axes(_pick(axis, dim))
        x = self._float()
        if any(self.shape[a] == 0 for a in axes):
            out = x.sum(axes, keepdim=True) - math.inf  # an empty sum is 0; built from x, so backward reaches x
        else:
            m = x.max(axes, keepdim=True).detach()
            m = _isinf(m).where(0.0, m)  # all -inf (or an inf): shifting by it would give inf - inf = NaN
            out = (x - m).exp().sum(axes, keepdim=True).log() + m
        return out if keepdim else out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    # ---- cumulative scans ----
    def cumsum(self, axis: int = 0, dtype: DTypeLike | None = None, *, dim: int | None = None) -> Self:
        """Running sums along `axis` (0 by default; PyTorch's `dim=` works too). Integers and bool accumulate in
        int64, as `sum`; `dtype` overrides.

        Examples:
            >>> Tensor([1, 2, 3, 4]).cumsum().tolist()
            [1, 3, 6, 10]
            >>> Tensor([[1, 2], [3, 4]]).cumsum(axis=1).tolist()
            [[1, 3], [3, 7]]
        """
        ax = _pick(axis, dim)
        acc = to_dtype(dtype) if dtype is not None else sum_acc_dtype(self.dtype) if self.dtype.is_float else \
            _integer_sum_dtype(self.dtype, self._reduced_count(ax))
        return self.cast(acc)._scan_along(ax, _sum_window, type(self).add, 0)  # type: ignore[arg-type]

    def cumprod(self, axis: int = 0, dtype: DTypeLike | None = None, *, dim: int | None = None) -> Self:
        """Running products along `axis` (0 by default); integers multiply in `sum`'s dtype.

        Examples:
            >>> Tensor([1, 2, 3, 4]).cumprod().tolist()
            [1, 2, 6, 24]
        """
        acc = to_dtype(dtype) if dtype is not None else sum_acc_dtype(self.dtype)
        return self.cast(acc)._scan_along(_pick(axis, dim), _prod_window, type(self).mul, 1)  # type: ignore[arg-type]

    def logcumsumexp(self, axis: int = 0, *, dim: int | None = None) -> Self:
        """Running log(sum(exp(x))) along `axis` (0 by default), computed without overflow.

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, 0.0, 0.0]).logcumsumexp().tolist()]
            [0.0, 0.6931, 1.0986]
        """
        x = self._float()
        return x._scan_along(_pick(axis, dim), _logsumexp_window, _logaddexp, -math.inf)  # type: ignore[arg-type]

    def cummax(self, axis: int = 0, *, dim: int | None = None) -> tuple[Self, Self]:
        """Running maximum and the index where it was reached (int32 as in tinygrad, int64 for a huge axis):
        the latest index among ties, and NaN wins once seen, as PyTorch's `cummax` (which returns a (values,
        indices) namedtuple).

        Examples:
            >>> values, indices = Tensor([1, 3, 2, 3, 5]).cummax()
            >>> values.tolist(), indices.tolist()
            ([1, 3, 3, 3, 5], [0, 1, 1, 3, 4])
        """
        return self._cum_extreme(_pick(axis, dim), largest=True)  # type: ignore[arg-type]

    def cummin(self, axis: int = 0, *, dim: int | None = None) -> tuple[Self, Self]:
        """Running minimum and the index where it was reached (the latest among ties; NaN wins once seen), as
        `cummax`.

        Examples:
            >>> values, indices = Tensor([4, 2, 3, 1]).cummin()
            >>> values.tolist(), indices.tolist()
            ([4, 2, 2, 1], [0, 1, 1, 3])
        """
        return self._cum_extreme(_pick(axis, dim), largest=False)  # type: ignore[arg-type]

    def _scan_along(self, axis: int, window: Callable[[Self], Self],
                    combine: Callable[[Self, Self], Self], identity: float) -> Self:
        ax = self._axis(axis)
        if self.ndim == 0:
            return _scan(self.reshape(1), window, combine, identity).reshape(())
        x = self.transpose(ax, -1)
        return _scan(x, window, combine, identity).transpose(ax, -1)

    def _cum_extreme(self, axis: int, largest: bool) -> tuple[Self, Self]:
        ax = self._axis(axis)
        x = self.reshape(1) if self.ndim == 0 else self.transpose(ax, -1)
        n = x.shape[-1]
        if n == 0:
            return self, type(self).full(self.shape, 0, dtype=index_dtype(n), device=self.device)
        key = (x if largest else _reversed_order(x)).detach()
        lowest = _lowest(key.dtype)
        running = _scan(key, _max_window, type(self).maximum, lowest)
        before = _shift_right(running, lowest)
        # a position sets the running extreme if it reaches the extreme so far; the index is the last such one
        sets = (key > before) | (key == before)
        if key.dtype.is_float:
            sets = sets | _isnan(key)
        pos = type(self).arange(n, device=self.device)
        idx = _scan(sets.where(pos, -1), _max_window, type(self).maximum, -1)
        values = _take_last(x, idx)
        if self.ndim == 0:
            return values.reshape(()), idx.reshape(()).cast(index_dtype(n))
        return values.transpose(ax, -1), idx.cast(index_dtype(n)).transpose(ax, -1)

    # ---- sorting ----
    def sort(self, dim: int = -1, descending: bool = False, *, stable: bool = True) -> tuple[Self, Self]:
        """Sorted values and the indices they came from (int32 as in tinygrad, int64 for a huge axis). The order
        is always stable (equal values keep their order, PyTorch's `stable=True`) and NaN sorts above everything.
        O(n^2) work, O(n) memory per row.

        Examples:
            >>> values, indices = Tensor([3, 1, 2, 1]).sort()
            >>> values.tolist(), indices.tolist()
            ([1, 1, 2, 3], [1, 3, 2, 0])
            >>> Tensor([3, 1, 2]).sort(descending=True)[0].tolist()
            [3, 2, 1]
        """
        del stable
        x, back = self._last(dim)
        perm = _rank_permutation(x, descending, x.shape[-1])
        return back(_take_last(x, perm)), back(perm.cast(index_dtype(x.shape[-1])))

    def argsort(self, dim: int = -1, descending: bool = False, *, stable: bool = True) -> Self:
        """The indices that sort `dim` (the last by default), stably; `sort(...)[1]`.

        Examples:
            >>> Tensor([3, 1, 2]).argsort().tolist()
            [1, 2, 0]
            >>> Tensor([3, 1, 2]).argsort(descending=True).tolist()
            [0, 2, 1]
        """
        return self.sort(dim, descending)[1]

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True, *,
             sorted: bool | None = None) -> tuple[Self, Self]:
        """The k largest (or smallest) values along `dim` and their indices (int32 as sort), always in sorted order
        (`sorted_=False` / PyTorch's `sorted=False` allow any order, so sorted is correct too).

        Examples:
            >>> values, indices = Tensor([1, 5, 3, 4]).topk(2)
            >>> values.tolist(), indices.tolist()
            ([5, 4], [1, 3])
            >>> Tensor([1, 5, 3, 4]).topk(2, largest=False)[0].tolist()
            [1, 3]
        """
        del sorted_, sorted
        x, back = self._last(dim)
        n = x.shape[-1]
        if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= n:
            raise RuntimeError(f"topk: k={k!r} is out of range for dimension {dim} of size {n} (shape {self.shape}); "
                               f"k must be an int from 0 to {n}")
        perm = _rank_permutation(x, largest, k)
        return back(_take_last(x, perm)), back(perm.cast(index_dtype(n)))

    def _last(self, dim: int) -> tuple[Self, Callable[[Self], Self]]:
        """The tensor with `dim` moved last (0-d made 1-d), and the function that moves it back."""
        ax = self._axis(dim)
        if self.ndim == 0:
            return self.reshape(1), lambda t: t.reshape(())
        return self.transpose(ax, -1), lambda t: t.transpose(ax, -1)

    # ---- norms ----
    def normalize(self, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Self:
        """x / max(||x||_p, eps) along `dim` (PyTorch's `F.normalize`). p = 0 counts the nonzero elements (a norm
        without gradient, as PyTorch's), a negative p is (sum |x|^p)^(1/p). The gradient at a zero vector is
        finite, as in PyTorch.

        Examples:
            >>> Tensor([[0.0, 2.0], [0.0, 0.0]]).normalize().tolist()
            [[0.0, 1.0], [0.0, 0.0]]
            >>> Tensor([1.0, 3.0]).normalize(p=1, dim=0).tolist()
            [0.25, 0.75]
        """
        if math.isnan(p):
            raise ValueError(f"normalize needs a number for p, got p={p}")
        ax = self._axis(dim)
        x = self._float()
        a = x.abs()
        if p == 0:
            norm = (x != 0).sum(ax, keepdim=True).cast(x.dtype)
        elif math.isinf(p):  # the largest magnitude, or for -inf the smallest
            norm = (a.max(ax, keepdim=True) if p > 0 else a.min(ax, keepdim=True)) if self.shape[ax] \
                else a.sum(ax, keepdim=True)
        elif p == 1:
            norm = a.sum(ax, keepdim=True)
        elif p < 0:  # a zero element makes the sum inf and the norm 0
            # |x|^p's derivative is infinite at 0: PyTorch's norm takes it as 0 there (inf * 0 would be NaN)
            zero = a == 0
            norm = zero.where(math.inf, zero.where(1.0, a).pow(p)).sum(ax, keepdim=True).pow(1.0 / p)
        else:
            if p < 1:  # as for p < 0, the derivative of |x|^p at 0 is taken as 0
                zero = a == 0
                powed = zero.where(0.0, zero.where(1.0, a).pow(p))
            else:
                powed = a * a if p == 2 else a.pow(p)
            s = powed.sum(ax, keepdim=True)
            pos = s > 0
            # the root's derivative is infinite at 0: take it of 1 there so that 0 * inf never reaches the gradient
            root = pos.where(s, 1.0).sqrt() if p == 2 else pos.where(s, 1.0).pow(1.0 / p)
            norm = pos.where(root, 0.0)
        return x / (norm > eps).where(norm, eps)


# ---- scan machinery ----

def _windows(x: TensorT, identity: float) -> TensorT:
    """For x of shape (..., L): the view W of shape (..., L, L) with W[..., i, k] = x[..., i + k - (L - 1)], the
    identity where that index is negative. Row i holds x[..., :i + 1], so reducing over k gives an inclusive scan.
    Built by repeating the padded row (length 2L-1) L+1 times and re-reading it with a row stride of 2L: each row
    starts one element later than the previous."""
    lead, n = x.shape[:-1], x.shape[-1]
    no_pad, whole = ((0, 0),) * len(lead), (None,) * len(lead)
    z = x.pad(no_pad + ((n - 1, 0),), value=identity)
    z = z.unsqueeze(-2).expand(lead + (n + 1, 2 * n - 1)).reshape(lead + ((n + 1) * (2 * n - 1),))
    z = z.shrink(whole + ((0, n * 2 * n),)).reshape(lead + (n, 2 * n))
    return z.shrink(whole + ((0, n), (0, n)))


def _scan(x: TensorT, window: Callable[[TensorT], TensorT], combine: Callable[[TensorT, TensorT], TensorT],
          identity: float) -> TensorT:
    """Inclusive scan along the last axis, blocked (see the module docstring)."""
    lead, n = x.shape[:-1], x.shape[-1]
    if not isinstance(n, int):  # a symbolic length: one window of its largest size, read at the bound value
        if n.vmax > SCAN_BLOCK:
            raise ValueError(f"a cumulative op over a symbolic length {n} of up to {n.vmax} elements: at most "
                             f"{SCAN_BLOCK} are supported; shrink to an int size first")
        return window(_windows(x, identity))
    if n == 0:
        return x
    if n <= SCAN_BLOCK:
        return window(_windows(x, identity))
    nb = -(-n // SCAN_BLOCK)
    no_pad, whole = ((0, 0),) * len(lead), (None,) * len(lead)
    blocks = x.pad(no_pad + ((0, nb * SCAN_BLOCK - n),), value=identity).reshape(lead + (nb, SCAN_BLOCK))
    inner = window(_windows(blocks, identity))  # (..., nb, B): scans inside each block
    totals = inner.shrink(whole + (None, (SCAN_BLOCK - 1, SCAN_BLOCK))).reshape(lead + (nb,))
    carry = _shift_right(_scan(totals, window, combine, identity), identity)  # everything before each block
    out = combine(carry.unsqueeze(-1), inner).reshape(lead + (nb * SCAN_BLOCK,))
    return out.shrink(whole + ((0, n),))


def _shift_right(x: TensorT, fill: float) -> TensorT:
    """x moved one place along the last axis, `fill` entering at the front."""
    lead = x.ndim - 1
    return x.pad(((0, 0),) * lead + ((1, 0),), value=fill).shrink((None,) * lead + ((0, x.shape[-1]),))


def _sum_window(w: TensorT) -> TensorT:
    return w.sum(-1, dtype=w.dtype)


def _prod_window(w: TensorT) -> TensorT:
    return w.prod(-1, dtype=w.dtype)


def _max_window(w: TensorT) -> TensorT:
    return w.max(-1)


def _logsumexp_window(w: TensorT) -> TensorT:
    return w.logsumexp(-1)


def _logaddexp(a: TensorT, b: TensorT) -> TensorT:
    m = a.maximum(b).detach()
    m = _isinf(m).where(0.0, m)
    return ((a - m).exp() + (b - m).exp()).log() + m


# ---- gather and ranking ----

def _take_last(x: TensorT, idx: TensorT) -> TensorT:
    """out[..., i] = x[..., idx[..., i]] for idx (any int dtype, values in range) of shape (..., m): a one-hot
    comparison that fuses into a reduction. Floats sum the one selected value (the gradient goes exactly there);
    other dtypes take the max over the selection, which keeps their dtype."""
    n = x.shape[-1]
    picked = idx.unsqueeze(-1) == type(x).arange(n, device=x.device)  # (..., m, n)
    if x.dtype.is_float:
        return picked.where(x.unsqueeze(-2), 0.0).sum(-1, dtype=x.dtype)
    return picked.where(x.unsqueeze(-2), _lowest(x.dtype)).max(-1)


def _before(a: TensorT, b: TensorT, descending: bool) -> TensorT:
    """Whether a sorts strictly before b; NaN is above every number."""
    lo, hi = (b, a) if descending else (a, b)
    out = lo < hi
    return out | (_isnan(hi) & ~_isnan(lo)) if a.dtype.is_float else out


def _equal(a: TensorT, b: TensorT) -> TensorT:
    return (a == b) | (_isnan(a) & _isnan(b)) if a.dtype.is_float else a == b


def _rank_permutation(x: TensorT, descending: bool, k: int) -> TensorT:
    """For x of shape (..., n): the (int32) indices of its first k elements in stable sorted order."""
    n = x.shape[-1]
    xi, xj = x.detach().unsqueeze(-1), x.detach().unsqueeze(-2)  # element i against every element j
    pos = type(x).arange(n, device=x.device)
    earlier = pos.unsqueeze(-1) > pos  # j < i: among equal values, the earlier one goes first
    rank = (_before(xj, xi, descending) | (_equal(xj, xi) & earlier)).sum(-1, dtype=dtypes.int32)  # (..., n)
    slots = type(x).arange(k, device=x.device).unsqueeze(-1)  # (k, 1)
    return (rank.unsqueeze(-2) == slots).where(pos, 0).sum(-1, dtype=dtypes.int32)  # (..., k)
