"""Processing ops: convolutions, pooling and interpolation (matmul and einsum live in linalg.py).

Convolution and pooling share one lowering: pad the input, then build every sliding window with movement
ops only (`_windows`: reshape/expand/shrink/permute, all views), so that a convolution is
`(windows * weight).sum(cin, k...)` - one fused reduce kernel, with no im2col buffer - and gradients come
from the rules of those primitive ops.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Self

import numpy as np

from tinygrad.dtype import DTypeLike, dtypes, least_upper_dtype
from tinygrad.errors import DTypeError, ShapeError
from tinygrad.helpers import prod
from tinygrad.mixin.common import TensorBase, TensorT, acc_dtype, index_dtype
from tinygrad.uop.layout import BatchChunked, ConvOperand, WeightGradOperand
from tinygrad.uop.ops import Ops, UOp
from tinygrad.uop.windows import cut_windows, weight_gradient, window_lengths

Pads = list[tuple[int, int]]


# ---------------------------------------------------------------------------------------------------------------------
# argument helpers


def _ints(v: int | Sequence[int], n: int, name: str, minimum: int = 1) -> tuple[int, ...]:
    """One int per spatial dimension, from an int or a sequence of n ints."""
    t = (v,) * n if isinstance(v, (int, np.integer)) else tuple(v)
    if len(t) != n or not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in t):
        raise ValueError(f"{name} must be an int or {n} ints (one per spatial dimension), got {v!r}")
    if any(i < minimum for i in t):
        raise ValueError(f"{name} must be >= {minimum}, got {v!r}")
    return tuple(int(i) for i in t)


def _pads(padding: int | Sequence[int], n: int, name: str = "padding") -> Pads:
    """(before, after) per spatial dimension, in dimension order, from an int, one int per dimension, or
    tinygrad's 2*n form, which is PyTorch's F.pad order: (last_before, last_after, second_last_before, ...)."""
    if isinstance(padding, (int, np.integer)):
        return [(int(padding), int(padding))] * n
    p = tuple(padding)
    if not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in p):
        raise ValueError(f"{name} must hold ints, got {padding!r}")
    if len(p) == n:
        return [(int(i), int(i)) for i in p]
    if len(p) == 2 * n:
        return [(int(p[2 * i]), int(p[2 * i + 1])) for i in range(n)][::-1]
    raise ValueError(f"{name} {padding!r} needs 1, {n} or {2 * n} entries for {n} spatial dimensions")


def _pad_spatial(x: TensorT, pads: Pads, value: float = 0.0) -> TensorT:
    if all(p == (0, 0) for p in pads):
        return x
    return x.pad([None] * (x.ndim - len(pads)) + list(pads), value=value)


def _fit(x: TensorT, lengths: Sequence[int]) -> TensorT:
    """Crop or zero-extend the last len(lengths) dims at their end to the given lengths."""
    n = len(lengths)
    pads = [(0, want - have) for want, have in zip(lengths, x.shape[-n:])]
    return _pad_spatial(x, pads)  # a negative "after" crops


def _windows(x: TensorT, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
             outs: tuple[int, ...]) -> TensorT:
    """Every sliding window of the last n dims as a view: (..., i1..in) -> (..., o1..on, k1..kn), with
    result[..., o, k] = x[..., o*stride + k*dilation] (per dimension). `outs` are the window counts; the input
    must be long enough for them (it is cropped or zero-extended at its end to what the windows read)."""
    return cut_windows(_fit(x, window_lengths(kernel, stride, dilation, outs)), kernel, stride, dilation, outs)


def _pool_geometry(name: str, spatial: tuple[int, ...], kernel: tuple[int, ...], stride: tuple[int, ...],
                   dilation: tuple[int, ...], pads: Pads, ceil_mode: bool) -> tuple[tuple[int, ...], Pads]:
    """Output sizes, and per dim the (before, after) padding including the extra that ceil_mode's last, partial
    window reads past the padded input."""
    outs, full = [], []
    for i, k, s, d, (pb, pa) in zip(spatial, kernel, stride, dilation, pads):
        eff = d * (k - 1) + 1
        if pb < 0 or pa < 0 or 2 * max(pb, pa) > eff:
            raise ValueError(f"{name}: padding must be between 0 and half the effective kernel size, got padding "
                             f"{(pb, pa)} for kernel size {k} with dilation {d}")
        span = i + pb + pa - eff
        if span < 0:
            raise ValueError(f"{name}: the kernel (size {k}, dilation {d}, so {eff} wide) is larger than the padded "
                             f"input ({i} + {pb + pa} padding)")
        o = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (o - 1) * s >= i + pb:
            o -= 1  # PyTorch: the last window must start inside the input or its left padding
        outs.append(o)
        full.append((pb, pa + max(0, (o - 1) * s + eff - (i + pb + pa))))
    return tuple(outs), full


def _pool_args(x: TensorT, name: str, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None,
               dilation: int | Sequence[int], padding: int | Sequence[int]) -> tuple[Any, ...]:
    ks = _ints(kernel_size, 2 if isinstance(kernel_size, (int, np.integer)) else len(tuple(kernel_size)),
               "kernel_size")
    n = len(ks)
    if x.ndim < n:
        raise ValueError(f"{name} with a {n}-D kernel needs an input with at least {n} dimensions, got {x.shape}")
    st = ks if stride is None or (not isinstance(stride, int) and len(tuple(stride)) == 0) else \
        _ints(stride, n, "stride")
    return ks, st, _ints(dilation, n, "dilation"), _pads(padding, n), n


# ---------------------------------------------------------------------------------------------------------------------
# interpolation weights (host side: sizes are static, so each resampled axis is a small constant matrix)

_INTERP_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "trilinear", "bicubic", "cubic")


def _nearest_index(i: int, o: int, scale: float | None, exact: bool) -> np.ndarray:
    # PyTorch computes these in float32, and so must we: floor() of o*scale is discontinuous
    sc = np.float32(1.0 / scale) if scale is not None and scale > 0 else np.float32(i) / np.float32(o)
    dst = np.arange(o, dtype=np.float32) + (np.float32(0.5) if exact else np.float32(0))
    return np.minimum(np.floor(dst * sc).astype(np.int64), i - 1)


def _source_coords(i: int, o: int, scale: float | None, align_corners: bool, cubic: bool) -> np.ndarray:
    dst = np.arange(o, dtype=np.float64)
    if align_corners:
        return dst * ((i - 1) / (o - 1) if o > 1 else 0.0)
    sc = 1.0 / scale if scale is not None and scale > 0 else i / o
    src = sc * (dst + 0.5) - 0.5
    return src if cubic else np.maximum(src, 0.0)


def _cubic_weights(t: np.ndarray, a: float = -0.75) -> list[np.ndarray]:
    """Keys' cubic convolution kernel at distances t+1, t, 1-t, 2-t (a = -0.75, as PyTorch)."""
    def near(x: np.ndarray) -> np.ndarray:  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x: np.ndarray) -> np.ndarray:  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _interp_matrix(mode: str, i: int, o: int, scale: float | None, align_corners: bool) -> np.ndarray:
    """W (o, i) with out = W @ in along one axis."""
    w = np.zeros((o, i), dtype=np.float64)
    rows = np.arange(o)
    if mode in ("nearest", "nearest-exact"):
        w[rows, _nearest_index(i, o, scale, mode == "nearest-exact")] = 1.0
    elif mode == "linear":
        src = _source_coords(i, o, scale, align_corners, cubic=False)
        i0 = np.minimum(src.astype(np.int64), i - 1)
        i1 = np.minimum(i0 + 1, i - 1)
        lam = np.clip(src - i0, 0.0, 1.0)
        np.add.at(w, (rows, i0), 1.0 - lam)
        np.add.at(w, (rows, i1), lam)
    else:
        src = _source_coords(i, o, scale, align_corners, cubic=True)
        base = np.floor(src).astype(np.int64)
        for tap, wt in enumerate(_cubic_weights(src - base)):
            np.add.at(w, (rows, np.clip(base - 1 + tap, 0, i - 1)), wt)  # taps outside the input repeat its edge
    return w


def _fixed_point_resample(moved: TensorT, w: np.ndarray) -> TensorT:
    """Integers resampled along the last axis as PyTorch's uint8 kernel does, so that the result is the same to the
    last unit: the weights are rounded to integers with as many fraction bits as keep the largest one below 2**15,
    and each output is the sum rounded half up, clamped to the dtype's range."""
    bits = 0
    while bits < 15 and int(0.5 + float(w.max()) * (1 << (bits + 1))) < (1 << 15):
        bits += 1
    scaled = w * (1 << bits)
    wq = np.where(scaled >= 0, np.floor(scaled + 0.5), np.ceil(scaled - 0.5))  # rounded half away from zero
    # the products stay within 2**31 for 8- and 16-bit values; wider ones sum in int64
    acc, np_acc = (dtypes.int32, np.int32) if moved.dtype.itemsize <= 2 else (dtypes.int64, np.int64)
    wt = type(moved)(wq.T.astype(np_acc), device=moved.device)
    total = (moved.cast(acc) @ wt + (1 << (bits - 1))) >> bits  # an arithmetic shift: floor, for negative sums too
    return total.clip(moved.dtype.min, moved.dtype.max).cast(moved.dtype)


def _resample_axis(x: TensorT, axis: int, mode: str, o: int, scale: float | None, align_corners: bool) -> TensorT:
    i = x.shape[axis]
    w = _interp_matrix(mode, i, o, scale, align_corners)
    if o == i and np.array_equal(w, np.eye(i)):
        return x
    if mode.startswith("nearest") and i > 0:
        src = w.argmax(1)
        if o % i == 0 and np.array_equal(src, np.arange(o) // (o // i)):
            # whole-number upsampling repeats each element: a view (reshape + expand)
            f = o // i
            x = x.unsqueeze(axis + 1)
            return x.expand(x.shape[:axis + 1] + (f,) + x.shape[axis + 2:]).flatten(axis, axis + 1)
    moved = x.transpose(axis, -1)
    if x.dtype.is_int and not mode.startswith("nearest"):
        return _fixed_point_resample(moved, w).transpose(axis, -1)
    # float32 weights upload on every device (not all have float64); float64 inputs get float64 weights. Half
    # floats are resampled with float32 weights and rounded once at the end.
    wt = type(x)(w.T.astype(np.float64 if x.dtype == dtypes.float64 else np.float32), device=x.device)
    if not x.dtype.is_float:
        wt = wt.cast(x.dtype)  # nearest on integers: a 0/1 matrix keeps the values exact
    return (moved @ wt).cast(x.dtype).transpose(axis, -1)
class ProcessingMixin(TensorBase):
    __slots__ = ()


    # ---- convolution ----
    def conv2d(self, weight: Self, bias: Self | None = None, groups: int = 1,
               stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1,
               padding: int | str | Sequence[int] = 0, dtype: DTypeLike | None = None) -> Self:
        """Convolution (PyTorch's cross-correlation) over any number of spatial dims: the weight (cout, cin/groups,
        k1..kn) decides n, so 3-D and 5-D inputs give conv1d and conv3d. The input is (batch, cin, i1..in), or
        (cin, i1..in) unbatched. `padding`: an int, one int per dim, tinygrad's 2*n form in F.pad order (last dim
        first, before/after), or 'same' / 'valid'; a negative amount crops. `dtype`: accumulation and result dtype.

        Examples:
            >>> x = Tensor.arange(9, dtype=dtypes.float32).reshape(1, 1, 3, 3)
            >>> w = Tensor.ones(1, 1, 2, 2)
            >>> x.conv2d(w).tolist()
            [[[[8.0, 12.0], [20.0, 24.0]]]]
            >>> x.conv2d(w, padding=1).shape
            (1, 1, 4, 4)
            >>> Tensor([[[1.0, 2.0, 3.0]]]).conv2d(Tensor([[[1.0, -1.0]]])).tolist()
            [[[-1.0, -1.0]]]
        """
        if not isinstance(weight, TensorBase) or weight.ndim < 3:
            raise ValueError(f"conv2d needs a weight of shape (cout, cin/groups, k1, ...) with at least one spatial "
                             f"dim, got {getattr(weight, 'shape', weight)!r}")
        n = weight.ndim - 2
        kernel = weight.shape[2:]
        dil = _ints(dilation, n, "dilation")
        st = _ints(stride, n, "stride")
        if isinstance(padding, str):
            if padding == "valid":
                pads: Pads = [(0, 0)] * n
            elif padding == "same":
                if any(s != 1 for s in st):
                    raise ValueError("conv2d: padding='same' is not supported for strided convolutions")
                pads = [(d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for d, k in zip(dil, kernel)]
            else:
                raise ValueError(f"conv2d: padding must be an int, ints, 'same' or 'valid', got {padding!r}")
        else:
            pads = _pads(padding, n)
        x = self
        if any(b < 0 or a < 0 for b, a in pads):
            # a negative padding crops the input, as tinygrad's conv2d (and pad) do; the rest pads as usual
            x = _pad_spatial(self, [(min(b, 0), min(a, 0)) for b, a in pads])
            pads = [(max(b, 0), max(a, 0)) for b, a in pads]
        return _conv(x, weight, bias, groups, st, dil, pads, dtype, "conv2d", border_copy=True)

    def image_conv2d(self, weight: Self, bias: Self | None = None, groups: int = 1,
                     stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1,
                     padding: int | Sequence[int] = 0, dtype: DTypeLike | None = None) -> Self:
        """`conv2d` with tinygrad's name for the variant that, on Qualcomm GPUs, lays activations and weights out as
        image textures. Here it is exactly `conv2d` (same arguments, same results on every device).

        Examples:
            >>> Tensor.ones(1, 1, 3, 3).image_conv2d(Tensor.ones(1, 1, 3, 3)).tolist()
            [[[[9.0]]]]
        """
        return self.conv2d(weight, bias, groups, stride, dilation, padding, dtype)

    def conv_transpose2d(self, weight: Self, bias: Self | None = None, groups: int = 1,
                         stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1,
                         padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0) -> Self:
        """Transposed convolution (the gradient of conv2d with respect to its input), over any number of spatial
        dims; weight is (cin, cout/groups, k1..kn). Output size per dim: (i-1)*stride - pad_before - pad_after +
        dilation*(k-1) + output_padding + 1.

        Examples:
            >>> x = Tensor([[[[1.0, 2.0]]]])
            >>> x.conv_transpose2d(Tensor.ones(1, 1, 1, 2), stride=2).tolist()
            [[[[1.0, 1.0, 2.0, 2.0]]]]
            >>> x.conv_transpose2d(Tensor.ones(1, 1, 1, 2)).tolist()
            [[[[1.0, 3.0, 2.0]]]]
        """
        if not isinstance(weight, TensorBase) or weight.ndim < 3:
            raise ValueError(f"conv_transpose2d needs a weight of shape (cin, cout/groups, k1, ...), got "
                             f"{getattr(weight, 'shape', weight)!r}")
        n = weight.ndim - 2
        x = self.unsqueeze(0) if self.ndim == n + 1 else self
        if x.ndim != n + 2:
            raise ValueError(f"conv_transpose2d: a weight of shape {weight.shape} needs an input of {n + 2} (or "
                             f"{n + 1}, unbatched) dimensions, got shape {self.shape}")
        cin, cout_g, kernel = weight.shape[0], weight.shape[1], weight.shape[2:]
        _check_groups("conv_transpose2d", groups, cin, "input channels of the weight (dim 0)")
        if x.shape[1] != cin:
            raise ValueError(f"conv_transpose2d: weight of shape {weight.shape} expects an input with {cin} channels "
                             f"(dim 1), but the input of shape {self.shape} has {x.shape[1]}")
        st, dil = _ints(stride, n, "stride"), _ints(dilation, n, "dilation")
        pads = _pads(padding, n)
        opad = _ints(output_padding, n, "output_padding", minimum=0)
        for o, s, d in zip(opad, st, dil):
            if o >= max(s, d):
                raise ValueError(f"conv_transpose2d: output_padding {output_padding!r} must be smaller than either "
                                 f"stride {stride!r} or dilation {dilation!r}")
        if any(b < 0 or a < 0 for b, a in pads):
            raise ValueError(f"conv_transpose2d: negative padding {padding!r}")
        spatial = x.shape[2:]
        if any(s > 1 for s in st) and all(i > 0 for i in spatial):
            # spread the input out: stride-1 zeros between neighbours
            pre = x.shape[:2]
            x = x.reshape(pre + tuple(v for i in spatial for v in (i, 1)))
            x = x.pad([None, None] + [p for s in st for p in ((0, 0), (0, s - 1))])
            x = x.reshape(pre + tuple(i * s for i, s in zip(spatial, st)))
            x = x.shrink([None, None] + [(0, (i - 1) * s + 1) for i, s in zip(spatial, st)])
        w = weight.reshape((groups, cin // groups, cout_g) + kernel).transpose(1, 2)
        w = w.reshape((groups * cout_g, cin // groups) + kernel).flip(tuple(range(2, n + 2)))
        conv_pads = [(d * (k - 1) - b, d * (k - 1) - a + o) for d, k, (b, a), o in zip(dil, kernel, pads, opad)]
        out = _conv(x, w, bias, groups, (1,) * n, dil, conv_pads, None, "conv_transpose2d")
        return out.squeeze(0) if self.ndim == n + 1 else out

    # ---- pooling ----
    def max_pool2d(self, kernel_size: int | Sequence[int] = (2, 2), stride: int | Sequence[int] | None = None,
                   dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, ceil_mode: bool = False,
                   return_indices: bool = False) -> Self | tuple[Self, Self]:
        """Max over windows of the last len(kernel_size) dims (an int kernel_size means 2 dims); stride defaults
        to kernel_size, padding is implicit -inf. With return_indices, also the position of each maximum in its
        input plane (flattened spatial dims, first maximum on ties), as PyTorch, for max_unpool2d: int32 as in
        tinygrad (int64 for a plane too large for int32).

        Examples:
            >>> x = Tensor.arange(16).reshape(1, 1, 4, 4)
            >>> x.max_pool2d().tolist()
            [[[[5, 7], [13, 15]]]]
            >>> values, indices = x.max_pool2d(kernel_size=3, stride=1, return_indices=True)
            >>> indices.tolist()
            [[[[10, 11], [14, 15]]]]
        """
        ks, st, dil, pads, n = _pool_args(self, "max_pool2d", kernel_size, stride, dilation, padding)
        spatial = self.shape[-n:]
        outs, full = _pool_geometry("max_pool2d", spatial, ks, st, dil, pads, ceil_mode)
        fill = -math.inf if self.dtype.is_float else (False if self.dtype.is_bool else self.dtype.min)
        win = _windows(_pad_spatial(self, full, fill), ks, st, dil, outs)
        k_axes = tuple(range(-n, 0))
        out = win.max(k_axes)
        if not return_indices:
            return out
        plane = prod(spatial)
        idx = type(self).arange(plane, device=self.device, dtype=index_dtype(plane)).reshape(spatial)
        idx_win = _windows(_pad_spatial(idx, full, plane), ks, st, dil, outs)
        # the first position (in scan order, where indices grow) that holds the maximum
        first = (win == out.reshape(out.shape + (1,) * n)).where(idx_win, plane).min(k_axes)
        return out, first

    def max_unpool2d(self, indices: Self, kernel_size: int | Sequence[int] = (2, 2),
                     stride: int | Sequence[int] | None = None, dilation: int | Sequence[int] = 1,
                     padding: int | Sequence[int] = 0, output_size: Sequence[int] | None = None) -> Self:
        """The inverse of max_pool2d: each value goes to the flat position `indices` gives it in its output plane,
        the rest is zero. The output size is (i-1)*stride - 2*padding + dilation*(k-1) + 1 per dim unless
        output_size (the full shape or its spatial dims) says otherwise.

        Examples:
            >>> x = Tensor([[[[1.0, 4.0], [3.0, 2.0]]]])
            >>> values, indices = x.max_pool2d(return_indices=True)
            >>> values.max_unpool2d(indices).tolist()
            [[[[0.0, 4.0], [0.0, 0.0]]]]
        """
        ks, st, dil, pads, n = _pool_args(self, "max_unpool2d", kernel_size, stride, dilation, padding)
        if not isinstance(indices, TensorBase) or indices.shape != self.shape:
            raise ValueError(f"max_unpool2d: indices must be a Tensor of the input's shape {self.shape}, got "
                             f"{getattr(indices, 'shape', indices)!r}")
        if indices.dtype.is_float:
            raise DTypeError(f"max_unpool2d: indices must be integers, got {indices.dtype}")
        pre, spatial = self.shape[:-n], self.shape[-n:]
        if output_size is None:
            outs = tuple((i - 1) * s - b - a + d * (k - 1) + 1
                         for i, s, (b, a), d, k in zip(spatial, st, pads, dil, ks))
        else:
            outs = tuple(int(v) for v in tuple(output_size)[-n:])
            if len(outs) != n:
                raise ValueError(f"max_unpool2d: output_size {output_size!r} needs at least {n} entries")
        plane = prod(outs)
        values = self.reshape(pre + (prod(spatial), 1))
        hit = indices.reshape(pre + (prod(spatial), 1)) == type(self).arange(plane, device=self.device,
                                                                               dtype=indices.dtype)
        # Overlapping pooling windows can pick one element twice, so an index may repeat; its copies hold one value,
        # which the max over the hits returns exactly (a sum would count it twice).
        lowest = -math.inf if self.dtype.is_float else (False if self.dtype.is_bool else self.dtype.min)
        out = hit.any(-2).where(hit.where(values, lowest).max(-2), False if self.dtype.is_bool else 0)
        out = out.reshape(pre + outs)
        if self.requires_grad is not False and self.dtype.is_float:  # it may take a gradient
            # PyTorch's gradient: every input position gets the output gradient at its index, copies included (the
            # max's own would split it among copies). A rule of its own: a sum over hits added with a forward
            # value of zero, total - total.detach(), is NaN where a value is infinite.
            from tinygrad.gradient import define_gradient
            make, device, shape = type(self), self.device, self.shape

            def rule(g_uop: Any, _values: Any, hit_uop: Any) -> tuple[Any, ...]:
                g = make(g_uop, device=device).reshape(pre + (1, plane))
                return (make(hit_uop, device=device).where(g, 0).sum(-1, dtype=g.dtype).reshape(shape).uop,)
            define_gradient(out.uop, (self.uop,), rule, reads=(hit.uop,))
        return out

    def avg_pool2d(self, kernel_size: int | Sequence[int] = (2, 2), stride: int | Sequence[int] | None = None,
                   dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, ceil_mode: bool = False,
                   count_include_pad: bool = True) -> Self:
        """Mean over windows of the last len(kernel_size) dims. count_include_pad counts the zero padding in the
        divisor; positions that ceil_mode's last window reads past the padded input never count (PyTorch).

        Examples:
            >>> Tensor.arange(16).reshape(1, 1, 4, 4).avg_pool2d().tolist()
            [[[[2.5, 4.5], [10.5, 12.5]]]]
            >>> Tensor.ones(1, 1, 2, 2).avg_pool2d(kernel_size=2, stride=1, padding=1, count_include_pad=False).tolist()
            [[[[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]]]
        """
        ks, st, dil, pads, n = _pool_args(self, "avg_pool2d", kernel_size, stride, dilation, padding)
        x = self._float()
        spatial = x.shape[-n:]
        outs, full = _pool_geometry("avg_pool2d", spatial, ks, st, dil, pads, ceil_mode)
        k_axes = tuple(range(-n, 0))
        total = _windows(_pad_spatial(x, full), ks, st, dil, outs).sum(k_axes)
        if count_include_pad and full == pads:
            return total / prod(ks)
        # how many positions of each window count: ones over what counts, zeros elsewhere, pooled the same way (at
        # the input's full shape, so that both sums run in one kernel instead of broadcasting a separate one)
        counted = type(x).ones(x.shape, device=x.device, dtype=x.dtype)
        if count_include_pad:
            counted = _pad_spatial(counted, pads, 1.0)
            full = [(0, a - pa) for (_, a), (_, pa) in zip(full, pads)]
        divisor = _windows(_pad_spatial(counted, full), ks, st, dil, outs).sum(k_axes)
        return total / divisor

    # ---- resampling ----
    def interpolate(self, size: int | Sequence[int] | None = None, mode: str = "linear",
                    align_corners: bool = False, scale_factor: float | Sequence[float] | None = None,
                    recompute_scale_factor: bool | None = None) -> Self:
        """Resize the last len(size) dims (tinygrad: any number of leading dims) to `size`, or by `scale_factor`
        (PyTorch: a float scales all dims after the first two). Modes: nearest, nearest-exact, linear (also named
        bilinear/trilinear; any number of dims), bicubic/cubic (Keys, a=-0.75), with PyTorch's index rules.
        Integer tensors keep their dtype, rounded as PyTorch's uint8 kernel rounds (the only one it has).

        Examples:
            >>> x = Tensor([[[1.0, 2.0]]])
            >>> x.interpolate(size=4, mode="nearest").tolist()
            [[[1.0, 1.0, 2.0, 2.0]]]
            >>> x.interpolate(size=4).tolist()
            [[[1.0, 1.25, 1.75, 2.0]]]
            >>> x.interpolate(size=3, align_corners=True).tolist()
            [[[1.0, 1.5, 2.0]]]
        """
        if mode not in _INTERP_MODES:
            raise ValueError(f"interpolate: unknown mode {mode!r}; choose one of {', '.join(_INTERP_MODES)}")
        kind = "nearest" if mode == "nearest" else "nearest-exact" if mode == "nearest-exact" else \
            "linear" if mode in ("linear", "bilinear", "trilinear") else "cubic"
        if align_corners and kind.startswith("nearest"):
            raise ValueError("interpolate: align_corners can only be set with the interpolating modes linear, "
                             "bilinear, trilinear and bicubic")
        sizes, scales = _interp_sizes(self.shape, size, scale_factor, recompute_scale_factor)
        n = len(sizes)
        # integers keep their dtype (PyTorch's uint8 resampling); each pass rounds, and as PyTorch's the last axis
        # goes first
        keep = kind.startswith("nearest") or self.dtype.is_int
        x = self if keep else self._float()
        passes = list(zip(range(self.ndim - n, self.ndim), sizes, scales))
        for axis, o, sc in (reversed(passes) if self.dtype.is_int else passes):
            if x.shape[axis] == 0:
                raise ValueError(f"interpolate: cannot resize an empty dimension of shape {self.shape}")
            x = _resample_axis(x, axis, kind, o, sc, align_corners)
        return x


def _interp_sizes(shape: tuple[int, ...], size: int | Sequence[int] | None,
                  scale_factor: float | Sequence[float] | None, recompute_scale_factor: bool | None
                  ) -> tuple[tuple[int, ...], tuple[float | None, ...]]:
    """interpolate's output size and the scale of each resized (trailing) dim of a tensor of `shape`."""
    ndim = len(shape)
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor")
    if size is not None:
        n = len(tuple(size)) if not isinstance(size, (int, np.integer)) else ndim - 2
        if not 1 <= n <= ndim:
            raise ValueError(f"interpolate: cannot resize {n} dims of a tensor of shape {shape}")
        return _ints(size, n, "size", minimum=1), (None,) * n
    one = isinstance(scale_factor, (int, float))
    n = ndim - 2 if one else len(tuple(scale_factor))  # type: ignore[arg-type]
    if not 1 <= n <= ndim:
        raise ValueError(f"interpolate: cannot resize {n} dims of a tensor of shape {shape}")
    factors = tuple(float(v) for v in ((scale_factor,) * n if one else scale_factor))  # type: ignore
    if len(factors) != n or any(v <= 0 for v in factors):
        raise ValueError(f"interpolate: scale_factor {scale_factor!r} must be positive, one per dim")
    sizes = tuple(math.floor(i * v) for i, v in zip(shape[ndim - n:], factors))
    if any(o < 1 for o in sizes):
        raise ValueError(f"interpolate: scale_factor {scale_factor!r} gives the empty output size {sizes}")
    return sizes, (None,) * n if recompute_scale_factor else factors


def _check_groups(name: str, groups: int, channels: int, what: str) -> None:
    if not isinstance(groups, (int, np.integer)) or isinstance(groups, bool) or groups < 1:
        raise ValueError(f"{name}: groups must be a positive int, got {groups!r}")
    if channels % groups:
        raise ValueError(f"{name}: groups={groups} must divide the {channels} {what}")


def _hinted(x: TensorT, hint: BatchChunked | ConvOperand | WeightGradOperand) -> TensorT:
    """x marked as an operand that the scheduler's layout pass (engine/layout.py) may read from a copy in another
    layout, as the target's knobs ask: the same graph on every device."""
    return x._derive(UOp(Ops.LAYOUT, x.dtype, (x.uop,), hint))


def _define_conv_gradient(out: TensorT, xp: TensorT, w: TensorT) -> None:
    """Backpropagate through a stride-1 convolution `out` of the padded input `xp` (bs, cin, i...) with `w`
    (cout, cin, k...) by convolutions, as PyTorch does, instead of by the chain rule through the window view:
    that one scatters the input's gradient through an intermediate of every window (bs x cin x positions x
    taps, 650 MB for one layer of the MNIST example) and a second kernel that sums the overlaps.

    * input: the full convolution of the output gradient with the kernel flipped and its channel axes
      swapped, dx[b, c, i] = sum_{o, t} g[b, o, i - t] w[o, c, t];
    * weight: every window of the input times the output gradient, summed over the batch and the positions,
      dw[o, c, t] = sum_{b, p} xp[b, c, p + t] g[b, o, p] (what the chain rule gives, written out)."""
    from tinygrad.gradient import define_gradient
    n = w.ndim - 2
    kernel, outs = w.shape[2:], out.shape[2:]
    bs, cout, cin = out.shape[0], w.shape[0], w.shape[1]
    # The rule gets UOps, not tensors: CUSTOM_GRADIENTS keys on out.uop weakly, and a value that reaches its own
    # key (through `out`, or through the .grad that backward() gives a live input tensor) would keep the entry and
    # its graphs alive forever. The UOps are also the values the forward pass used, whatever is assigned later.
    make, device = type(out), out.device

    def rule(g_uop: Any, xp_uop: Any, w_uop: Any) -> tuple[Any, ...]:
        xp, w = make(xp_uop, device=device), make(w_uop, device=device)
        # g realized once: both convolutions read every element of g many times, and the ops that made it (the
        # backward of a pool, a norm, a relu) would otherwise be fused into, and redone in, every one of those
        # reads. Then a copy with the full convolution's zero border, which the input's gradient reads without
        # testing for the border. (In one kernel with the border, the index arithmetic of a pool's backward does
        # not simplify, as the border offset can make an index negative: several times slower than two kernels
        # on the MNIST example's second layer, see the CHANGELOG.)
        border = [(k - 1, k - 1) for k in kernel]
        g = make(g_uop, device=device).contiguous()
        full = _pad_spatial(g, border).contiguous()
        flipped = w.flip(tuple(range(2, n + 2))).transpose(0, 1)
        dx = _conv(full, flipped, None, 1, (1,) * n, (1,) * n, [(0, 0)] * n, None, "conv2d (gradient)")
        # the weight gradient's outputs are (cout, cin, taps) and its reduction runs over the batch and the
        # positions, along which no output axis is contiguous: the layout pass may read the input and g from copies
        # with their channels innermost, which gives the compiler a SIMD direction; and it may sum the batch in
        # chunks whose inputs stay in the device's cache (engine/layout.py)
        source = _hinted(xp, WeightGradOperand("input", cin, cout))
        gw = _hinted(g, WeightGradOperand("grad", cin, cout))
        per_image = (cin * math.prod(xp.shape[2:]) + cout * math.prod(outs)) * g.dtype.itemsize
        dw = _hinted(make(weight_gradient(source.uop, gw.uop, kernel, outs, 1), device=device),
                     BatchChunked(bs, per_image))
        return dx.uop, dw.uop
    define_gradient(out.uop, (xp.uop, w.uop), rule)


def _conv(x: TensorT, weight: TensorT, bias: TensorT | None, groups: int, stride: tuple[int, ...],
          dilation: tuple[int, ...], pads: Pads, dtype: DTypeLike | None, name: str,
          border_copy: bool = False) -> TensorT:
    """The convolution of x by weight as windows times weights summed. `border_copy`: the padded input may be a copy
    with its border written out, where the device asks for one (`DeviceKnobs.conv_border_copy`); conv_transpose2d's
    input, spread out with zeros, is left as a view."""
    n = weight.ndim - 2
    unbatched = x.ndim == n + 1
    if unbatched:
        x = x.unsqueeze(0)
    if x.ndim != n + 2:
        raise ValueError(f"{name}: a weight of shape {weight.shape} needs an input of {n + 2} dimensions (batch, "
                         f"channels, {n} spatial) or {n + 1} unbatched, got shape {x.shape}")
    bs, cin, spatial = x.shape[0], x.shape[1], x.shape[2:]
    cout, cin_g, kernel = weight.shape[0], weight.shape[1], weight.shape[2:]
    _check_groups(name, groups, cout, "output channels of the weight (dim 0)")
    if cin != cin_g * groups:
        raise ShapeError(f"{name}: given groups={groups}, a weight of shape {weight.shape} expects an input with "
                         f"{cin_g * groups} channels (dim 1), but the input of shape {x.shape} has {cin}")
    if bias is not None and (not isinstance(bias, TensorBase) or bias.shape != (cout,)):
        raise ValueError(f"{name}: bias must have shape ({cout},), one value per output channel, got "
                         f"{getattr(bias, 'shape', bias)!r}")
    padded = [i + b + a for i, (b, a) in zip(spatial, pads)]
    if any(p < d * (k - 1) + 1 for p, d, k in zip(padded, dilation, kernel)):
        raise ShapeError(f"{name}: padded input size per channel {tuple(padded)} is smaller than the (dilated) kernel "
                         f"size {tuple(d * (k - 1) + 1 for d, k in zip(dilation, kernel))}; the kernel cannot be "
                         f"larger than the padded input")
    outs = tuple((p - d * (k - 1) - 1) // s + 1 for p, d, k, s in zip(padded, dilation, kernel, stride))
    acc, out_dtype = acc_dtype(least_upper_dtype(x.dtype, weight.dtype), dtype)
    xp, wa = _pad_spatial(x.cast(acc), pads), weight.cast(acc)
    # the layout pass may read the padded input from a copy with its border written out, and the weight from a copy
    # with its output channels innermost, as the target's knobs ask (engine/layout.py)
    facts = ConvOperand("input", tuple(xp.shape), (bs, cout) + outs, tuple(pads), kernel[-1] > 1, groups, border_copy)
    xh, wh = _hinted(xp, facts), _hinted(wa, replace(facts, role="weight"))
    win = _windows(xh, kernel, stride, dilation, outs).reshape((bs, groups, 1, cin_g) + outs + kernel)
    w = wh.reshape((1, groups, cout // groups, cin_g) + (1,) * n + kernel)
    out = (win * w).sum((3,) + tuple(range(4 + n, 4 + 2 * n)), dtype=acc).reshape((bs, cout) + outs)
    if groups == 1 and all(s == 1 for s in stride) and all(d == 1 for d in dilation) and acc.is_float:
        _define_conv_gradient(out, xh, wa)  # xh: the gradient reads the input as the forward pass does
    out = out.cast(out_dtype)
    if bias is not None:
        out = out + bias.reshape((1, cout) + (1,) * n)
    return out.squeeze(0) if unbatched else out
