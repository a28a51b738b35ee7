"""Movement ops: reshapes, pads, concatenation, windows and friends.

The primitives (reshape, permute, expand, pad, shrink, flip) are views: they build index arithmetic, never copies.
Everything else here is made of them plus, where pieces meet (cat, the padding modes, triu/tril), a `where` over
masks that are themselves padded constants, so a whole chain stays one fused kernel and differentiates through
the primitive gradient rules. Indexing (`t[...]`, gather, scatter) lives in indexing.py."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Self

import numpy as np

from tinygrad.dtype import DType, dtypes, least_upper_dtype
from tinygrad.errors import ArgListError, ArgumentError, ConcatDimError, ConcatError, DTypeError, ModeError, ShapeError
from tinygrad.helpers import prod
from tinygrad.mixin.common import TensorBase, TensorT, joined, placed_mask, scalar_like, select, symbolic_size
from tinygrad.uop.ops import UOp, resolve_size, sint, sym_div_exact, sym_prod


class MovementMixin(TensorBase):
    __slots__ = ()

    def _axis(self, axis: int, ndim: int | None = None) -> int:
        n = self.ndim if ndim is None else ndim
        if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
            raise TypeError(f"an axis must be an int, got {type(axis).__name__} {axis!r}")
        if not -max(n, 1) <= axis < max(n, 1):
            raise IndexError(f"axis {axis} is out of range for a tensor with {n} dimensions (shape {self.shape})")
        return int(axis) % max(n, 1)

    def reshape(self, *dims: Any, shape: Any = None) -> Self:
        """The same elements in a new shape (`reshape(2, 3)`, `reshape((2, 3))` or `reshape(shape=(2, 3))`); one size
        may be -1 (inferred). A view: nothing is copied, and assigning to the result writes into self.

        Examples:
            >>> Tensor.arange(6).reshape(2, 3).tolist()
            [[0, 1, 2], [3, 4, 5]]
            >>> Tensor.arange(6).reshape(-1, 2).shape
            (3, 2)
        """
        shape = _sizes(dims, shape, "reshape", "shape")
        if any(s is None for s in shape):  # None keeps dimension i's size, as tinygrad's reshape(None, None, 3, ...)
            if any(s is None for s in shape[self.ndim:]):
                raise ValueError(f"None in reshape to {tuple(shape)} keeps a dimension, but {self.shape} lacks it")
            shape = tuple(self.shape[i] if s is None else s for i, s in enumerate(shape))
        if any(isinstance(s, UOp) for s in (*shape, *self.shape)):
            return _symbolic_reshape(self, tuple(shape))
        if sum(1 for s in shape if s == -1) > 1:
            raise ShapeError(f"only one dimension can be inferred (-1), got shape {shape}")
        for s in shape:
            if not isinstance(s, (int, np.integer)) or isinstance(s, bool) or s < -1:
                raise ValueError(f"invalid dimension {s!r} in reshape to {shape}")
        known = prod(s for s in shape if s != -1)
        if -1 in shape:
            if known == 0 or self.numel() % known:
                raise ShapeError(f"cannot reshape a tensor of shape {self.shape} ({self.numel()} elements) to {shape}")
            shape = tuple(self.numel() // known if s == -1 else s for s in shape)
        new = tuple(int(s) for s in shape)
        if prod(new) != self.numel():
            raise ShapeError(f"cannot reshape a tensor of shape {self.shape} ({self.numel()} elements) to {new} "
                             f"({prod(new)} elements); the sizes must match")
        return self._moved(self.uop.reshape(new))

    def permute(self, *axes_in_order: Any, order: Any = None) -> Self:
        """The dimensions in the order `order` (`permute(1, 0)`, `permute((1, 0))` or `permute(order=(1, 0))`), as a
        view.

        Examples:
            >>> Tensor.zeros(2, 3, 4).permute(2, 0, 1).shape
            (4, 2, 3)
            >>> Tensor([[1, 2], [3, 4]]).permute(1, 0).tolist()
            [[1, 3], [2, 4]]
        """
        order = _sizes(axes_in_order, order, "permute", "order")
        axes = tuple(self._axis(a) for a in order)
        if sorted(axes) != list(range(self.ndim)):
            raise ShapeError(f"permute order {order} is not a permutation of the {self.ndim} axes of {self.shape}")
        return self._moved(self.uop.permute(axes))

    def expand(self, *dims: Any, shape: Any = None) -> Self:
        """Broadcast size-1 dimensions to `shape` without copying (-1 keeps a size; new leading dimensions may be
        added); `expand(2, 3)`, `expand((2, 3))` or `expand(shape=(2, 3))`. Only size-1 dimensions can grow.

        Examples:
            >>> Tensor([[1], [2]]).expand(2, 3).tolist()
            [[1, 1, 1], [2, 2, 2]]
            >>> Tensor([1, 2]).expand(2, -1).tolist()
            [[1, 2], [1, 2]]
        """
        shape = _sizes(dims, shape, "expand", "shape")
        if len(shape) < self.ndim:
            raise ShapeError(f"expand to {shape} has fewer dimensions than the tensor's shape {self.shape}")
        padded = (1,) * (len(shape) - self.ndim) + self.shape
        new = tuple(p if isinstance(s, int) and s == -1 else _size(s) for s, p in zip(shape, padded))
        for p, s in zip(padded, new):
            if p != s and p != 1:
                raise ShapeError(f"cannot expand shape {self.shape} to {tuple(shape)}: only size-1 dims can grow")
        return self._moved(self.uop.reshape(padded).expand(new))

    def view(self, *shape: Any) -> Self:
        """An alias of reshape (movement ops never copy here, so every reshape is a view). `view(dtype)`
        reinterprets the bytes as PyTorch's does, for dtypes of one size.

        Examples:
            >>> Tensor.arange(4).view(2, 2).tolist()
            [[0, 1], [2, 3]]
            >>> Tensor([1.0]).view(dtypes.int32).tolist()
            [1065353216]
        """
        if len(shape) == 1 and isinstance(shape[0], DType):
            return self.bitcast(shape[0])
        return self.reshape(*shape)

    def pad(self, padding: Sequence[tuple[int, int] | None] | Sequence[int], mode: str = "constant",
            value: float = 0.0) -> Self:
        """Pad with `value` (mode "constant"), the mirror image without the edge ("reflect"), copies of the edge
        ("replicate") or the other end of the axis ("circular").

        `padding` is one (before, after) pair or None per dimension (tinygrad's form), or PyTorch's flat form
        (before, after, before, after, ...) starting at the last dimension. Negative amounts crop.

        Examples:
            >>> Tensor([1, 2, 3]).pad(((1, 2),)).tolist()
            [0, 1, 2, 3, 0, 0]
            >>> Tensor([1, 2, 3]).pad((2, 1), mode="reflect").tolist()
            [3, 2, 1, 2, 3, 2]
            >>> Tensor([[1, 2]]).pad((None, (1, 0)), value=9).tolist()
            [[9, 1, 2]]
        """
        pairs = _pad_pairs(self, padding)
        if mode not in PAD_MODES:
            raise ModeError(f"padding mode {mode!r} is not one of {', '.join(PAD_MODES)}")
        if mode != "constant" and value != 0:
            raise ValueError(f"padding mode {mode!r} takes no value (got value={value}); use mode='constant'")
        if any(_negative(b) or _negative(a) for b, a in pairs):
            if mode in ("reflect", "replicate"):
                # the mirror and the edge copies are read from the uncropped data, so these pad first and crop
                # after (as tinygrad and PyTorch do): a reflect pad of 2 next to a crop of 1 on a size-3 dimension
                # is valid, where cropping first would leave too few elements to mirror
                x = self.pad([(max(0, b), max(0, a)) for b, a in pairs], mode)
                return x.shrink(tuple((max(0, -b), s - max(0, -a)) for (b, a), s in zip(pairs, x.shape)))
            # constant and circular padding crop first, as in PyTorch
            for d, ((b, a), s) in enumerate(zip(pairs, self.shape)):
                if max(0, -b) + max(0, -a) > s:
                    raise ShapeError(f"padding {padding} crops more than the {s} elements of dimension {d} "
                                     f"(shape {self.shape})")
            x = self.shrink(tuple((max(0, -b), s - max(0, -a)) for (b, a), s in zip(pairs, self.shape)))
            return x.pad([(max(0, b), max(0, a)) for b, a in pairs], mode, value)
        if mode != "constant":
            x = self
            for d, (b, a) in enumerate(pairs):
                if b or a:
                    x = _pad_dim(x, d, b, a, mode)
            return x
        out = self._moved(self.uop.pad(tuple(pairs)))
        if value != 0:
            out = select(placed_mask(out, self.shape, tuple(pairs)), out, scalar_like(out, value))
        return out

    def pad_to(self, *shape: Any, value: float = 0) -> Self:
        """Pad at the end of each dimension up to `shape` (None keeps a dimension) with `value`.

        Examples:
            >>> Tensor([[1, 2]]).pad_to(2, 3).tolist()
            [[1, 2, 0], [0, 0, 0]]
            >>> Tensor([1, 2]).pad_to(3, value=7).tolist()
            [1, 2, 7]
        """
        sizes = _sizes_or_none(self, shape, "pad_to")
        for d, (s, n) in enumerate(zip(self.shape, sizes)):
            if n is not None and n < s:
                raise ValueError(f"pad_to{tuple(sizes)}: dimension {d} has size {s}, more than {n}; use shrink_to")
        return self.pad([(0, 0 if n is None else n - s) for s, n in zip(self.shape, sizes)], value=value)

    def shrink_to(self, *shape: Any) -> Self:
        """Keep the first `shape[d]` elements of each dimension d (None keeps a dimension).

        Examples:
            >>> Tensor.arange(6).reshape(2, 3).shrink_to(None, 2).tolist()
            [[0, 1], [3, 4]]
        """
        sizes = _sizes_or_none(self, shape, "shrink_to")
        for d, (s, n) in enumerate(zip(self.shape, sizes)):
            if n is not None and n > s:
                raise ValueError(f"shrink_to{tuple(sizes)}: dimension {d} has size {s}, less than {n}; use pad_to")
        return self.shrink(tuple(None if n is None else (0, n) for n in sizes))

    def shrink(self, bounds: Sequence[tuple[sint, sint] | None]) -> Self:
        """Keep [begin, end) of each dimension (None keeps it whole). A bound may be a bound Variable
        (`Variable("n", 1, 64).bind(10)`): the kernels then take n as an argument and serve every value of it.

        Examples:
            >>> Tensor.arange(9).reshape(3, 3).shrink(((1, 3), None)).tolist()
            [[3, 4, 5], [6, 7, 8]]
        """
        if len(bounds) != self.ndim:
            raise ShapeError(f"shrink bounds {bounds} need one entry per dimension of {self.shape}")
        bs = tuple((0, s) if b is None else (_size(b[0]), _size(b[1])) for b, s in zip(bounds, self.shape))
        for (b, e), s in zip(bs, self.shape):
            # bounds are checked at the Variables' bound values, as tinygrad does: a prompt step may shrink to
            # start_pos+len with start_pos bound to 0 though start_pos's range, plus len, passes the end
            vb, ve, vs = resolve_size(b), resolve_size(e), resolve_size(s)
            if not 0 <= vb <= ve <= vs:
                raise ShapeError(f"shrink bounds {bounds} are outside shape {self.shape}")
        return self._moved(self.uop.shrink(bs))

    def flip(self, *axes: Any, axis: Any = None) -> Self:
        """Reverse the order of the elements along the given axes (`flip(0)`, `flip(0, 1)`, `flip((0, 1))` or
        `flip(axis=0)`), as a view.

        Examples:
            >>> Tensor([[1, 2], [3, 4]]).flip(1).tolist()
            [[2, 1], [4, 3]]
            >>> Tensor([[1, 2], [3, 4]]).flip(0, 1).tolist()
            [[4, 3], [2, 1]]
        """
        axes_list = [self._axis(a) for a in _sizes(axes, axis, "flip", "axis")]
        if len(set(axes_list)) != len(axes_list):
            # flipping an axis twice is most likely a typo for another axis; both libraries refuse it
            raise ArgumentError(f"flip names a dimension more than once: {axes_list} for shape {self.shape}")
        flipped = set(axes_list)
        return self._moved(self.uop.flip(tuple(i in flipped for i in range(self.ndim))))

    def transpose(self, dim0: int = 1, dim1: int = 0) -> Self:
        """Swap dimensions `dim0` and `dim1` (by default 1 and 0), as a view.

        Examples:
            >>> Tensor([[1, 2, 3]]).transpose().tolist()
            [[1], [2], [3]]
            >>> Tensor.zeros(2, 3, 4).transpose(0, 2).shape
            (4, 3, 2)
        """
        order = list(range(self.ndim))
        a, b = self._axis(dim0), self._axis(dim1)
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Self:
        """The tensor with its dimensions reversed (the transpose of a matrix), as a view.

        Examples:
            >>> Tensor([[1, 2], [3, 4]]).T.tolist()
            [[1, 3], [2, 4]]
        """
        return self.permute(tuple(reversed(range(self.ndim))))

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Self:
        """Merge dimensions `start_dim` to `end_dim` (all by default) into one; a 0-d tensor becomes 1-d.

        Examples:
            >>> Tensor([[1, 2], [3, 4]]).flatten().tolist()
            [1, 2, 3, 4]
            >>> Tensor.zeros(2, 3, 4).flatten(1).shape
            (2, 12)
        """
        if self.ndim == 0:
            return self.reshape(1)
        s, e = self._axis(start_dim), self._axis(end_dim)
        return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

    def squeeze(self, dim: int | None = None) -> Self:
        """Remove dimension `dim` if its size is 1 (else return self), or every size-1 dimension when dim is None.

        Examples:
            >>> Tensor.zeros(1, 3, 1).squeeze().shape
            (3,)
            >>> Tensor.zeros(1, 3, 1).squeeze(0).shape
            (3, 1)
        """
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        d = self._axis(dim)  # a 0-d tensor takes dim 0 and -1, as in both libraries, and is returned as it is
        return self if self.ndim == 0 or self.shape[d] != 1 else self.reshape(self.shape[:d] + self.shape[d + 1:])

    def unsqueeze(self, dim: int) -> Self:
        """Insert a dimension of size 1 at `dim` (negative counts from the end of the result).

        Examples:
            >>> Tensor([1, 2]).unsqueeze(0).tolist()
            [[1, 2]]
            >>> Tensor([1, 2]).unsqueeze(-1).tolist()
            [[1], [2]]
        """
        d = self._axis(dim, self.ndim + 1)
        return self.reshape(self.shape[:d] + (1,) + self.shape[d:])


    def unflatten(self, dim: int, sizes: Sequence[int]) -> Self:
        """Split dimension `dim` into `sizes` (one entry may be -1); the inverse of flatten.

        Examples:
            >>> Tensor.arange(6).unflatten(0, (2, -1)).tolist()
            [[0, 1, 2], [3, 4, 5]]
        """
        d = self._axis(dim)
        sizes = tuple(int(s) for s in sizes)
        known = prod(s for s in sizes if s != -1)
        if (-1 not in sizes and known != self.shape[d]) or (-1 in sizes and (known == 0 or self.shape[d] % known)):
            raise ShapeError(f"unflatten: sizes {sizes} do not multiply to the size {self.shape[d]} of dimension {d} "
                             f"(shape {self.shape})")
        return self.reshape(self.shape[:d] + sizes + self.shape[d + 1:])

    # ---- joining and splitting ----
    def cat(self, *args: Self, dim: int = 0) -> Self:
        """Concatenate along `dim`: `a.cat(b, c, dim=1)`, `Tensor.cat(a, b)` or `Tensor.cat([a, b])`. Mixed dtypes
        promote as in PyTorch; a 1-D empty tensor is skipped, as PyTorch does for legacy code.

        Examples:
            >>> Tensor([1, 2]).cat(Tensor([3])).tolist()
            [1, 2, 3]
            >>> Tensor.cat(Tensor([[1], [2]]), Tensor([[3], [4]]), dim=1).tolist()
            [[1, 3], [2, 4]]
        """
        tensors = _tensor_list(self, args, "cat")
        ref = next((t for t in tensors if t.shape != (0,)), tensors[0])
        parts = [t for t in tensors if t.shape != (0,) or ref.ndim == 1]
        if ref.ndim == 0:
            raise ConcatDimError("cat of 0-d tensors: they have no dimension to join along; use stack")
        d = ref._axis(dim)
        for i, t in enumerate(parts):
            if t.ndim != ref.ndim or any(a != b for k, (a, b) in enumerate(zip(t.shape, ref.shape)) if k != d):
                raise ConcatError(f"cat along dimension {d}: shapes {ref.shape} and {t.shape} (tensor {i}) must match "
                                 f"in every other dimension")
        out_dtype = least_upper_dtype(*(t.dtype for t in parts))
        parts = [t.cast(out_dtype) for t in parts]
        if len(parts) == 1:
            return parts[0]
        total = sum(t.shape[d] for t in parts)
        out: Self | None = None
        offset = 0
        for t in parts:
            n = t.shape[d]
            pairs = tuple((offset, total - offset - n) if k == d else (0, 0) for k in range(t.ndim))
            placed = t._derive(t.uop.pad(pairs))
            # a where, not a sum of the padded pieces: that keeps -0.0 and needs no add for bool
            out = placed if out is None else select(placed_mask(t, t.shape, pairs), placed, out)
            offset += n
        assert out is not None
        return out

    def stack(self, *args: Self, dim: int = 0) -> Self:
        """Join tensors of one shape along a new dimension `dim` (`a.stack(b)`, `Tensor.stack(a, b)` or
        `Tensor.stack([a, b])`).

        Examples:
            >>> Tensor.stack(Tensor([1, 2]), Tensor([3, 4])).tolist()
            [[1, 2], [3, 4]]
            >>> Tensor([1, 2]).stack(Tensor([3, 4]), dim=1).tolist()
            [[1, 3], [2, 4]]
        """
        tensors = _tensor_list(self, args, "stack")
        for i, t in enumerate(tensors):
            if t.shape != tensors[0].shape:
                raise ConcatError(f"stack needs tensors of one shape, got {tensors[0].shape} (tensor 0) and {t.shape} "
                                 f"(tensor {i})")
        d = tensors[0]._axis(dim, tensors[0].ndim + 1)
        return type(tensors[0]).cat(*[t.unsqueeze(d) for t in tensors], dim=d)  # self may be a list

    def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Self, ...]:
        """Pieces of `sizes` elements along `dim` (an int: equal pieces, the last one smaller), as views.

        Examples:
            >>> [t.tolist() for t in Tensor.arange(5).split(2)]
            [[0, 1], [2, 3], [4]]
            >>> [t.tolist() for t in Tensor.arange(5).split([1, 4])]
            [[0], [1, 2, 3, 4]]
        """
        d = self._axis(dim)
        n = self.shape[d]
        if isinstance(sizes, (int, np.integer)):
            if sizes < 0 or (sizes == 0 and n != 0):
                raise ValueError(f"split size must be positive (0 only for an empty dimension), got {sizes} for "
                                 f"dimension {d} of size {n}")
            step = int(sizes)
            lengths = [min(step, n - i) for i in range(0, n, step)] if n else [0]
        else:
            lengths = [int(s) for s in sizes]
            if any(s < 0 for s in lengths):
                raise ValueError(f"split sizes must not be negative, got {list(sizes)}")
            if sum(lengths) != n:
                raise ShapeError(f"split sizes {list(sizes)} sum to {sum(lengths)}, not to the size {n} of "
                                 f"dimension {d} (shape {self.shape})")
        out, start = [], 0
        for length in lengths:
            out.append(self.shrink(tuple((start, start + length) if k == d else None for k in range(self.ndim))))
            start += length
        return tuple(out)

    def chunk(self, chunks: int, dim: int = 0) -> list[Self]:
        """At most `chunks` pieces of ceil(size / chunks) elements along `dim` (PyTorch's rule: possibly fewer).

        Examples:
            >>> [t.tolist() for t in Tensor.arange(5).chunk(3)]
            [[0, 1], [2, 3], [4]]
        """
        if not isinstance(chunks, (int, np.integer)) or chunks <= 0:
            raise ValueError(f"chunk needs a positive number of chunks, got {chunks!r}")
        d = self._axis(dim)
        n = self.shape[d]
        if n == 0:
            return [self] * int(chunks)
        return list(self.split(-(-n // int(chunks)), d))

    # ---- repeating ----
    def repeat(self, *repeats: Any) -> Self:
        """Tile the tensor: `repeats[i]` copies along dimension i (extra leading entries add dimensions).

        Examples:
            >>> Tensor([1, 2]).repeat(2).tolist()
            [1, 2, 1, 2]
            >>> Tensor([1, 2]).repeat(2, 1).tolist()
            [[1, 2], [1, 2]]
        """
        reps = _int_args(repeats, "repeat")
        if len(reps) < self.ndim:
            raise ValueError(f"repeat needs at least one count per dimension: {reps} for shape {self.shape}")
        if any(r < 0 for r in reps):
            raise ValueError(f"repeat counts must not be negative, got {reps}")
        base = (1,) * (len(reps) - self.ndim) + self.shape
        spread = tuple(v for s in base for v in (1, s))
        tiled = tuple(v for r, s in zip(reps, base) for v in (r, s))
        return self.reshape(spread).expand(tiled).reshape(tuple(r * s for r, s in zip(reps, base)))

    def repeat_interleave(self, repeats: int | Sequence[int] | Self, dim: int | None = None) -> Self:
        """Repeat each element `repeats` times along `dim` (the flattened tensor when dim is None). Per-element
        counts (a list or a tensor) decide the output size, so a tensor of counts is realized to read them.

        Examples:
            >>> Tensor([1, 2]).repeat_interleave(2).tolist()
            [1, 1, 2, 2]
            >>> Tensor([[1, 2], [3, 4]]).repeat_interleave([1, 2], dim=0).tolist()
            [[1, 2], [3, 4], [3, 4]]
        """
        x = self.flatten() if dim is None else self
        d = 0 if dim is None else x._axis(dim)
        if isinstance(repeats, (int, np.integer)) and not isinstance(repeats, bool):
            if repeats < 0:
                raise ValueError(f"repeat_interleave count must not be negative, got {repeats}")
            shape = x.shape
            spread = x.reshape(shape[:d + 1] + (1,) + shape[d + 1:])
            return spread.expand(shape[:d + 1] + (int(repeats),) + shape[d + 1:]).flatten(d, d + 1)
        counts = np.asarray(repeats.numpy() if isinstance(repeats, TensorBase) else repeats).reshape(-1)
        if counts.dtype.kind not in "iu":
            raise DTypeError(f"repeat_interleave counts must be integers, got {counts.dtype}")
        if counts.size == 1:
            return x.repeat_interleave(int(counts[0]), d)
        if counts.size != x.shape[d] or (counts < 0).any():
            raise ValueError(f"repeat_interleave needs one non-negative count per element of dimension {d} "
                             f"(size {x.shape[d]}), got {counts.tolist()}")
        picks = np.repeat(np.arange(x.shape[d]), counts)
        return x[(slice(None),) * d + (picks,)]

    # ---- windows, diagonals, rolls ----
    def unfold(self, dim: int, size: int, step: int) -> Self:
        """PyTorch's Tensor.unfold: every window of `size` elements along `dim`, starting every `step` elements.
        The windows become dimension `dim`; their elements a new last dimension.

        Examples:
            >>> Tensor.arange(5).unfold(0, 2, 1).tolist()
            [[0, 1], [1, 2], [2, 3], [3, 4]]
        """
        if self.ndim == 0:
            raise ValueError("unfold needs a tensor with at least one dimension")
        d = self._axis(dim)
        n = self.shape[d]
        if size < 0 or size > n:
            raise ShapeError(f"unfold window size {size} does not fit dimension {d} of size {n} (shape {self.shape})")
        if step <= 0:
            raise ArgumentError(f"unfold step must be positive, got {step}")
        others = [k for k in range(self.ndim) if k != d]
        x = self.permute(others + [d])
        lead, count = x.shape[:-1], n - size + 1
        nopad, whole = ((0, 0),) * len(lead), (None,) * len(lead)
        # size copies of the row, each re-read one element later (a row stride of n+1): row j holds x[j:j+count]
        rows = x.unsqueeze(-2).expand(lead + (size, n)).reshape(lead + (size * n,)).pad(nopad + ((0, size),))
        rows = rows.reshape(lead + (size, n + 1)).shrink(whole + ((0, size), (0, count)))
        windows = rows.transpose(-1, -2)[(Ellipsis, slice(None, None, step), slice(None))]  # (..., windows, size)
        order = list(range(len(lead)))
        order.insert(d, len(lead))
        return windows.permute(order + [len(lead) + 1])

    def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Self:
        """Shift elements along `dims` by `shifts`, wrapping around (the flattened tensor when dims is None).

        Examples:
            >>> Tensor([1, 2, 3, 4]).roll(1).tolist()
            [4, 1, 2, 3]
            >>> Tensor([[1, 2], [3, 4]]).roll(-1, dims=1).tolist()
            [[2, 1], [4, 3]]
        """
        if dims is None:
            if not isinstance(shifts, (int, np.integer)) and len(shifts) != 1:
                raise ArgumentError(f"roll without dims takes one shift, got {shifts}")
            shift = int(shifts) if isinstance(shifts, (int, np.integer)) else int(shifts[0])
            return self.flatten().roll(shift, 0).reshape(self.shape)
        shift_list = [shifts] if isinstance(shifts, (int, np.integer)) else list(shifts)
        dim_list = [dims] if isinstance(dims, (int, np.integer)) else list(dims)
        if len(shift_list) != len(dim_list):
            raise ArgumentError(f"roll needs one shift per dimension, got shifts={shifts} and dims={dims}")
        x = self
        for shift, dim in zip(shift_list, dim_list):
            d = x._axis(dim)
            n = x.shape[d]
            if n == 0 or int(shift) % n == 0:
                continue
            s = int(shift) % n
            # two copies back to back along d, read from n-s: no data moves, only the view
            twice = x.unsqueeze(d).expand(x.shape[:d] + (2,) + x.shape[d:]).flatten(d, d + 1)
            x = twice.shrink(tuple((n - s, 2 * n - s) if k == d else None for k in range(x.ndim)))
        return x

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Self:
        """The diagonal of the (dim1, dim2) planes, `offset` above (positive) or below the main one, as a new
        last dimension.

        Examples:
            >>> t = Tensor.arange(9).reshape(3, 3)
            >>> t.diagonal().tolist(), t.diagonal(offset=1).tolist()
            ([0, 4, 8], [1, 5])
        """
        a, b = self._axis(dim1), self._axis(dim2)
        if a == b:
            raise ArgumentError(f"diagonal needs two different dimensions, got {dim1} and {dim2}")
        x = self.permute([k for k in range(self.ndim) if k not in (a, b)] + [a, b])
        lead, (rows, cols) = x.shape[:-2], x.shape[-2:]
        nopad, whole = ((0, 0),) * len(lead), (None,) * len(lead)
        r0, c0 = (0, min(offset, cols)) if offset >= 0 else (min(-offset, rows), 0)
        m = max(0, min(rows - r0, cols - c0))
        square = x.shrink(whole + ((r0, r0 + m), (c0, c0 + m)))
        # read the m*m square with a row stride of m+1: element i of the first column is square[i, i]
        flat = square.reshape(lead + (m * m,)).pad(nopad + ((0, m),)).reshape(lead + (m, m + 1))
        return flat.shrink(whole + ((0, m), (0, 1))).reshape(lead + (m,))

    def diag(self, diagonal: int = 0) -> Self:
        """PyTorch's diag: a 1-D tensor becomes a square matrix with it on diagonal `diagonal`; a matrix gives that
        diagonal as a 1-D tensor.

        Examples:
            >>> Tensor([1, 2]).diag().tolist()
            [[1, 0], [0, 2]]
            >>> Tensor([[1, 2], [3, 4]]).diag().tolist()
            [1, 4]
        """
        if self.ndim == 2:
            return self.diagonal(diagonal)
        if self.ndim != 1:
            raise ValueError(f"diag needs a 1-D or 2-D tensor, got shape {self.shape}")
        n, k = self.shape[0], abs(diagonal)
        # rows of [x_i, 0, ..., 0] (length n+1) read n at a time put x_i at column i
        square = self.reshape(n, 1).pad(((0, 0), (0, n))).reshape(n * (n + 1)).shrink(((0, n * n),)).reshape(n, n)
        return square.pad(((0, k), (k, 0)) if diagonal >= 0 else ((k, 0), (0, k)))

    def triu(self, diagonal: int = 0) -> Self:
        """Zero everything below diagonal `diagonal` of the last two dimensions.

        Examples:
            >>> Tensor.ones(3, 3, dtype=dtypes.int32).triu().tolist()
            [[1, 1, 1], [0, 1, 1], [0, 0, 1]]
            >>> Tensor.ones(2, 3, dtype=dtypes.int32).triu(1).tolist()
            [[0, 1, 1], [0, 0, 1]]
        """
        return _triangle(self, diagonal, upper=True)

    def tril(self, diagonal: int = 0) -> Self:
        """Zero everything above diagonal `diagonal` of the last two dimensions.

        Examples:
            >>> Tensor.ones(3, 3, dtype=dtypes.int32).tril().tolist()
            [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
        """
        return _triangle(self, diagonal, upper=False)

    def meshgrid(self, *args: Self, indexing: str = "ij") -> tuple[Self, ...]:
        """Coordinate grids of 1-D tensors: `Tensor.meshgrid(x, y)`. indexing "ij" (matrix) gives shape
        (len(x), len(y)); "xy" (Cartesian) swaps the first two dimensions.

        Examples:
            >>> gx, gy = Tensor.meshgrid(Tensor([1, 2]), Tensor([3, 4, 5]))
            >>> gx.tolist()
            [[1, 1, 1], [2, 2, 2]]
            >>> gy.tolist()
            [[3, 4, 5], [3, 4, 5]]
        """
        if indexing not in ("ij", "xy"):
            raise ArgumentError(f"meshgrid indexing must be 'ij' or 'xy', got {indexing!r}")
        tensors = _tensor_list(self, args, "meshgrid")
        for i, t in enumerate(tensors):
            if t.ndim > 1:
                raise ValueError(f"meshgrid takes 0-d or 1-D tensors, tensor {i} has shape {t.shape}")
        flat = [t.reshape(-1) for t in tensors]
        swap = indexing == "xy" and len(flat) > 1
        if swap:
            flat[0], flat[1] = flat[1], flat[0]
        shape = tuple(t.shape[0] for t in flat)
        k = len(flat)
        grids = [t.reshape((1,) * i + (t.shape[0],) + (1,) * (k - i - 1)).expand(shape) for i, t in enumerate(flat)]
        if swap:
            grids[0], grids[1] = grids[1], grids[0]
        return tuple(grids)

    def rearrange(self, formula: str, **sizes: int) -> Self:
        """einops-style rearrangement: `x.rearrange("b c (h w) -> b (c h) w", h=2)`. Names stand for axes,
        parentheses group axes into one dimension, `1` or `()` is a dimension of size 1 and `...` stands for the
        dimensions not named.

        Examples:
            >>> Tensor.arange(6).reshape(2, 3).rearrange("a b -> b a").tolist()
            [[0, 3], [1, 4], [2, 5]]
            >>> Tensor.arange(6).rearrange("(h w) -> h w", h=2).shape
            (2, 3)
        """
        return _rearrange(self, formula, sizes)


PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _pad_pairs(t: TensorT, padding: Sequence[tuple[int, int] | None] | Sequence[int]) -> list[tuple[int, int]]:
    pairs: list[tuple[int, int]]
    if padding and all(isinstance(p, (int, np.integer)) for p in padding):
        flat = [int(p) for p in padding]  # type: ignore[arg-type]
        if len(flat) % 2 or len(flat) > 2 * t.ndim:
            raise ValueError(f"flat padding needs an even number of entries, at most two per dimension; got "
                             f"{tuple(padding)} for shape {t.shape}")
        pairs = [(0, 0)] * t.ndim
        for i in range(len(flat) // 2):
            pairs[t.ndim - 1 - i] = (flat[2 * i], flat[2 * i + 1])
        return pairs
    pairs = [(0, 0) if p is None else (_size(p[0]), _size(p[1])) for p in padding]  # type: ignore[index, misc]
    if len(pairs) != t.ndim:
        raise ShapeError(f"padding {padding} has {len(pairs)} entries for a tensor with {t.ndim} dimensions")
    return pairs


def _pad_dim(x: TensorT, d: int, before: int, after: int, mode: str) -> TensorT:
    n = x.shape[d]

    def part(lo: int, hi: int) -> TensorT:
        return x.shrink(tuple((lo, hi) if k == d else None for k in range(x.ndim)))

    if mode == "reflect":
        if before >= n or after >= n:
            raise ShapeError(f"reflect padding ({before}, {after}) of dimension {d} must be smaller than its size {n} "
                             f"(shape {x.shape})")
        left, right = part(1, before + 1).flip(d), part(n - 1 - after, n - 1).flip(d)
    elif mode == "replicate":
        if n == 0:
            raise ShapeError(f"replicate padding of dimension {d}, which is empty (shape {x.shape})")
        left = part(0, 1).expand(x.shape[:d] + (before,) + x.shape[d + 1:])
        right = part(n - 1, n).expand(x.shape[:d] + (after,) + x.shape[d + 1:])
    else:
        if before > n or after > n:
            raise ShapeError(f"circular padding ({before}, {after}) of dimension {d} wraps around more than once: at "
                             f"most its size {n} (shape {x.shape})")
        left, right = part(n - before, n), part(0, after)
    return type(x).cat(*[p for p in (left, x, right) if p.shape[d]] or [x], dim=d)


def _tensor_list(first: Any, rest: Sequence[TensorT], name: str) -> list[TensorT]:
    # Tensor.cat([a, b]) calls the method with the list as `self`
    if isinstance(first, (list, tuple)) and rest:
        # Tensor.stack([a, b], c) is most likely a misplaced argument (PyTorch would read c as the dim)
        raise ArgListError(f"{name} takes its tensors either as one list or as separate arguments, got a list of "
                           f"{len(first)} and {len(rest)} more")
    tensors: list[TensorT] = [*first, *rest] if isinstance(first, (list, tuple)) else [first, *rest]
    if not tensors:
        raise ValueError(f"{name} needs at least one tensor")
    for i, t in enumerate(tensors):
        if not isinstance(t, TensorBase):
            raise TypeError(f"{name} takes tensors, argument {i} is {type(t).__name__}")
    if (placed := next((t for t in tensors if t.device is not None), None)) is not None:
        tensors = [joined(placed, t) for t in tensors]
    for t in tensors:
        if t.device != tensors[0].device:
            raise RuntimeError(f"{name} mixes tensors on {tensors[0].device} and {t.device}; move one with .to()")
    return tensors


def _int_args(args: tuple[Any, ...], name: str) -> tuple[int, ...]:
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    for a in args:
        if not isinstance(a, (int, np.integer)) or isinstance(a, bool):
            raise TypeError(f"{name} takes ints, got {type(a).__name__} {a!r}")
    return tuple(int(a) for a in args)


def _sizes_or_none(t: TensorT, shape: tuple[Any, ...], name: str) -> tuple[int | None, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    if len(shape) != t.ndim:
        raise ValueError(f"{name}{shape}: one size per dimension of {t.shape} needed")
    for s in shape:
        if s is not None and (not isinstance(s, (int, np.integer)) or isinstance(s, bool) or s < 0):
            raise ValueError(f"{name}{shape}: sizes must be non-negative ints or None")
    return tuple(None if s is None else int(s) for s in shape)


def _triangle(x: TensorT, diagonal: int, upper: bool) -> TensorT:
    if x.ndim < 2:
        name = "triu" if upper else "tril"
        raise ValueError(f"{name} needs a tensor with at least 2 dimensions, got shape {x.shape}")
    rows, cols = x.shape[-2:]
    r = type(x).arange(rows, device=x.device, dtype=dtypes.int32).reshape(rows, 1)
    c = type(x).arange(cols, device=x.device, dtype=dtypes.int32).reshape(1, cols)
    inside = (c - r >= diagonal) if upper else (c - r <= diagonal)
    return select(inside, x, scalar_like(x, 0))


# ---- rearrange ----

_TOKEN = re.compile(r"\.\.\.|…|\(|\)|[^\s()]+")


def _parse_side(side: str, formula: str) -> list[list[str]]:
    """One side of a rearrange formula as its dimensions, each the list of axis names it merges. A bare `...` is
    the entry ["..."]; a parenthesized one, (["..."], ...), is marked by a leading "(" entry."""
    groups: list[list[str]] = []
    current: list[str] | None = None
    for tok in _TOKEN.findall(side):
        if tok == "(":
            if current is not None:
                raise ValueError(f"rearrange {formula!r}: nested parentheses")
            current = ["("]
        elif tok == ")":
            if current is None:
                raise ValueError(f"rearrange {formula!r}: unbalanced parentheses")
            groups.append(current)
            current = None
        else:
            name = "..." if tok in ("...", "…") else tok
            if name == "1":
                if current is None:
                    groups.append(["("])
                continue
            if name != "..." and not name.isidentifier():
                raise ValueError(f"rearrange {formula!r}: {tok!r} is not an axis name")
            if current is None:
                groups.append([name])
            else:
                current.append(name)
    if current is not None:
        raise ValueError(f"rearrange {formula!r}: unbalanced parentheses")
    return groups


def _rearrange(t: TensorT, formula: str, sizes: dict[str, int]) -> TensorT:
    if formula.count("->") != 1:
        raise ValueError(f"rearrange {formula!r}: needs exactly one '->'")
    left_text, right_text = formula.split("->")
    lhs, rhs = _parse_side(left_text, formula), _parse_side(right_text, formula)
    left_names = [n for g in lhs for n in g if n != "("]
    right_names = [n for g in rhs for n in g if n != "("]
    for side, names in (("left", left_names), ("right", right_names)):
        if len(set(names)) != len(names):
            raise ValueError(f"rearrange {formula!r}: an axis name repeats on the {side} side")
    if set(left_names) != set(right_names):
        raise ValueError(f"rearrange {formula!r}: the two sides name different axes "
                         f"({sorted(set(left_names) ^ set(right_names))})")
    for name in sizes:
        if name not in left_names:
            raise ValueError(f"rearrange {formula!r}: size given for {name!r}, which the formula does not use")
    if any("..." in g and g[0] == "(" for g in lhs):
        raise ValueError(f"rearrange {formula!r}: '...' cannot be inside parentheses on the left side")
    n_named = len(lhs) - (1 if ["..."] in lhs else 0)
    if ("..." in left_names and n_named > t.ndim) or ("..." not in left_names and len(lhs) != t.ndim):
        raise ValueError(f"rearrange {formula!r}: the left side has {len(lhs)} dimensions, the tensor {t.ndim} "
                         f"(shape {t.shape})")
    # '...' stands for the dimensions that no other name covers
    ell = [f"...{i}" for i in range(t.ndim - n_named)]

    def expand_ellipsis(groups: list[list[str]]) -> list[list[str]]:
        out: list[list[str]] = []
        for g in groups:
            if g == ["..."]:
                out += [[e] for e in ell]
            else:
                out.append([e for n in g if n != "(" for e in (ell if n == "..." else [n])])
        return out

    lhs, rhs = expand_ellipsis(lhs), expand_ellipsis(rhs)
    axis_size: dict[str, int] = {}
    for g, dim_size in zip(lhs, t.shape):
        unknown = [n for n in g if n not in sizes]
        known = prod(sizes[n] for n in g if n in sizes)
        if len(unknown) > 1:
            raise ValueError(f"rearrange {formula!r}: cannot infer the sizes of {unknown} from one dimension of size "
                             f"{dim_size}; pass all but one as keywords")
        if (unknown and (known == 0 or dim_size % known)) or (not unknown and known != dim_size):
            raise ValueError(f"rearrange {formula!r}: sizes {({n: sizes[n] for n in g if n in sizes})} do not fit a "
                             f"dimension of size {dim_size}")
        for n in g:
            axis_size[n] = sizes[n] if n in sizes else dim_size // known
    order = [n for g in lhs for n in g]
    x = t.reshape(tuple(axis_size[n] for n in order))
    x = x.permute([order.index(n) for g in rhs for n in g])
    return x.reshape(tuple(prod(axis_size[n] for n in g) for g in rhs))


def _size(v: Any) -> sint:
    """A size argument: an int, or a bound Variable (or an expression over one), in canonical form."""
    return symbolic_size(v) if isinstance(v, UOp) else int(v)


def _negative(v: sint) -> bool:
    # a symbolic amount was checked non-negative for its bound value by _size
    return isinstance(v, int) and v < 0


def _symbolic_reshape(x: TensorT, shape: tuple[Any, ...]) -> TensorT:
    """Reshapes that involve Variables: the element counts must be equal as expressions, i.e. for every value of the
    Variables (n*4 elements to (n, 2, 2)), since one kernel serves every value. One -1 is inferred when the other
    sizes divide the count exactly."""
    if sum(1 for s in shape if isinstance(s, int) and s == -1) > 1:
        raise ShapeError(f"only one dimension can be inferred (-1), got shape {shape}")
    new = [s if isinstance(s, int) and s == -1 else _size(s) for s in shape]
    total = sym_prod(x.shape)
    if -1 in [s for s in new if isinstance(s, int)]:
        inferred = sym_div_exact(total, sym_prod(s for s in new if not (isinstance(s, int) and s == -1)))
        if inferred is None:
            raise ShapeError(f"reshape of a tensor of shape {x.shape} to {shape}: -1 cannot be inferred, the other "
                             f"sizes do not divide {total} for every value of the Variables")
        new = [inferred if isinstance(s, int) and s == -1 else s for s in new]
    if sym_prod(new) is not total:
        raise ShapeError(f"cannot reshape a tensor of shape {x.shape} to {shape}: with symbolic dimensions the "
                         f"element counts must be equal for every value of the Variables (adding or removing "
                         f"size-1 dimensions always is)")
    return x._moved(x.uop.reshape(tuple(new)))


def _sizes(args: tuple[Any, ...], keyword: Any, method: str, name: str) -> tuple[Any, ...]:
    """The sizes or axes given as `f(2, 3)`, `f((2, 3))` or tinygrad's keyword `f(name=(2, 3))` (or one int)."""
    if keyword is not None:
        if args:
            raise TypeError(f"{method}() got its {name} both as arguments {args} and as {name}={keyword!r}; give one")
        args = tuple(keyword) if isinstance(keyword, (tuple, list)) else (keyword,)
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return tuple(args[0])
    return args
