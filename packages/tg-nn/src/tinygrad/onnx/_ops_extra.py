"""Less common ops: sampling (GridSample), spectral (DFT, STFT, MelWeightMatrix), Col2Im, Det, the recurrent
state ops of opset 27 (CausalConvWithState, LinearAttention), NonMaxSuppression, string ops (host only: strings
never reach the device) and the optimizers of the ai.onnx.preview.training domain."""

from __future__ import annotations

import itertools
import math
import re
import unicodedata
from typing import Any

import numpy as np
from tinygrad import Tensor, dtypes
from tinygrad.onnx._base import NodeCtx, Value, axis_of, op

# ---- GridSample ----


def _reflect(v: Tensor, lo: float, hi: float) -> Tensor:
    """Reflect coordinates at the borders [lo, hi] until they fall inside (any number of bounces)."""
    rng = hi - lo
    if rng <= 0:
        return v * 0 + lo
    below, above = lo - v, v - hi
    d = (v < lo).where(below, above)
    n = (d / rng).floor()
    r = d - n * rng
    even = (n % 2) == 0
    from_lo = (v < lo).where(even.where(lo + r, hi - r), even.where(hi - r, lo + r))
    return ((v < lo) | (v > hi)).where(from_lo, v)


def _cubic_weights(t: Tensor) -> list[Tensor]:
    # Keys' kernel (a = -0.75), written with additions of its constants: the CPU backend's C renderer turns
    # `x - (negative constant)` into `x--c`, which does not compile
    A = -0.75
    def near(x: Tensor) -> Tensor: return ((A + 2) * x + -(A + 3)) * x * x + 1
    def far(x: Tensor) -> Tensor: return ((A * x + -5 * A) * x + 8 * A) * x + -4 * A
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


@op("GridSample")
def grid_sample(ctx: NodeCtx, x_in: Value, grid_in: Value) -> Tensor:
    x, grid = ctx.t(x_in), ctx.t(grid_in)
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(ctx.attr("mode", "linear"), ctx.attr("mode", "linear"))
    padding = ctx.attr("padding_mode", "zeros")
    align = bool(ctx.attr("align_corners", 0))
    n, c = x.shape[:2]
    dims = x.shape[2:]
    nd = len(dims)
    out_sp = grid.shape[1:-1]
    g = grid.cast(dtypes.float32).reshape(n, -1, nd)
    coords = []
    for k, size in enumerate(dims):  # grid's last axis is (x, y[, z]): reversed against the tensor's dims
        v = g[:, :, nd - 1 - k]
        v = (v + 1) / 2 * (size - 1) if align else ((v + 1) * size - 1) / 2
        if mode == "nearest":
            v = v.round()
        lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        if padding == "border":
            v = ((v < lo) | (v > hi)).where(v.clip(0, size - 1), v)
        elif padding == "reflection":
            v = _reflect(v, lo, hi)
        coords.append((v, size, lo, hi))
    out = _sample(x.cast(dtypes.float32), [v for v, _, _, _ in coords], mode, padding,
                  [(lo, hi) for _, _, lo, hi in coords])
    return out.reshape((n, c) + out_sp).cast(x.dtype)


def _sample(x: Tensor, coords: list[Tensor], mode: str, padding: str, bounds: list[tuple[float, float]]) -> Tensor:
    """x (n, c, *dims) read at the pixel coordinates coords[k] (n, P) of each spatial dim k, interpolated
    (nearest: coordinates already rounded; linear; cubic) with the padding rule for taps outside the input:
    zeros, border (clamped) or reflection (within bounds). -> (n, c, P) float32."""
    n, c = x.shape[:2]
    dims = x.shape[2:]
    taps: list[list[tuple[Tensor, Tensor]]] = []  # per dim: (index, weight) pairs
    for v, size, (lo, hi) in zip(coords, dims, bounds):
        if mode == "nearest":
            opts = [(v, v * 0 + 1)]
        else:
            base = v.floor()
            t = v - base
            if mode == "linear":
                opts = [(base, 1 - t), (base + 1, t)]
            else:
                opts = list(zip([base - 1, base, base + 1, base + 2], _cubic_weights(t)))
        dim_taps = []
        for idx, w in opts:
            if padding == "zeros":
                w = ((idx >= 0) & (idx <= size - 1)).where(w, 0)
            elif padding == "reflection":
                idx = _reflect(idx, lo, hi).trunc()
            dim_taps.append((idx.clip(0, size - 1).cast(dtypes.int32), w))
        taps.append(dim_taps)
    flat_x = x.reshape(n, c, -1)
    strides = [math.prod(dims[k + 1:]) for k in range(len(dims))]
    points = coords[0].shape[1]
    out: Tensor | None = None
    for combo in itertools.product(*taps):
        lin = combo[0][0] * strides[0]
        w = combo[0][1]
        for (idx, wt), st in zip(combo[1:], strides[1:]):
            lin, w = lin + idx * st, w * wt
        vals = flat_x.gather(2, lin.reshape(n, 1, points).expand(n, c, points))
        term = vals * w.reshape(n, 1, points)
        out = term if out is None else out + term
    assert out is not None
    return out


@op("DeformConv")
def deform_conv(ctx: NodeCtx, x_in: Value, w_in: Value, off_in: Value, b_in: Value = None,
                mask_in: Value = None) -> Tensor:
    """Convolution whose taps read the input at learned offsets (bilinear, zero outside), as a sampled im2col
    followed by a grouped matmul."""
    x, w, off = ctx.t(x_in), ctx.t(w_in), ctx.t(off_in)
    if x.ndim != 4:
        raise NotImplementedError(f"{ctx}: DeformConv is implemented for 2-D images only")
    n, ic, ih, iw = x.shape
    oc = w.shape[0]
    if w.ndim != 4:
        raise ctx.fail(f"the weight has shape {w.shape}; a 2-D DeformConv needs rank 4")
    kh, kw = ctx.sized_ints("kernel_shape", 2, 0, minimum=1) if ctx.attr("kernel_shape") else w.shape[2:]
    sth, stw = ctx.sized_ints("strides", 2, 1, minimum=1)
    dh, dw = ctx.sized_ints("dilations", 2, 1, minimum=1)
    p = ctx.sized_ints("pads", 4, 0)
    group, og = int(ctx.attr("group", 1)), int(ctx.attr("offset_group", 1))
    oh, ow = off.shape[2:]
    k, length = kh * kw, oh * ow
    off = off.cast(dtypes.float32).reshape(n, og, kh, kw, 2, oh, ow)
    mask = ctx.t(mask_in).cast(dtypes.float32).reshape(n, og, k, length) if mask_in is not None else None
    # base position of each tap: output position * stride - pad + kernel offset * dilation
    base_h = (np.arange(kh)[:, None, None, None] * dh + np.arange(oh)[None, None, :, None] * sth - p[0])
    base_w = (np.arange(kw)[None, :, None, None] * dw + np.arange(ow)[None, None, None, :] * stw - p[1])
    base_h = np.broadcast_to(base_h, (kh, kw, oh, ow)).astype(np.float32)
    base_w = np.broadcast_to(base_w, (kh, kw, oh, ow)).astype(np.float32)
    icg = ic // og
    cols = []
    xf = x.cast(dtypes.float32)
    for g in range(og):
        ys = (off[:, g, :, :, 0] + Tensor(base_h, device=x.device)).reshape(n, -1)
        xs = (off[:, g, :, :, 1] + Tensor(base_w, device=x.device)).reshape(n, -1)
        part = xf[:, g * icg:(g + 1) * icg]
        sampled = _sample(part, [ys, xs], "linear", "zeros", [(0.0, ih - 1.0), (0.0, iw - 1.0)])
        sampled = sampled.reshape(n, icg, k, length)
        if mask is not None:
            sampled = sampled * mask[:, g].reshape(n, 1, k, length)
        cols.append(sampled)
    col = cols[0].cat(*cols[1:], dim=1) if len(cols) > 1 else cols[0]  # (n, ic, k, L)
    icc, occ = ic // group, oc // group
    wf = w.cast(dtypes.float32).reshape(group, occ, icc * k)
    outs = [wf[gi].matmul(col[:, gi * icc:(gi + 1) * icc].reshape(n, icc * k, length)) for gi in range(group)]
    y = outs[0].cat(*outs[1:], dim=1) if len(outs) > 1 else outs[0]
    if b_in is not None:
        y = y + ctx.t(b_in).cast(dtypes.float32).reshape(1, -1, 1)
    return y.reshape(n, oc, oh, ow).cast(x.dtype)


@op("RoiAlign")
def roi_align(ctx: NodeCtx, x_in: Value, rois_in: Value, idx_in: Value) -> Tensor:
    """Each region's sampling grid depends on its size, so the sample positions and weights are computed on the
    host from the region boxes; the gathers and the pooling run on the device."""
    x = ctx.t(x_in)
    rois = ctx.host(rois_in).astype(np.float64)
    bidx = ctx.host(idx_in).astype(np.int64).reshape(-1)
    n_rois, (_, c, h, w) = rois.shape[0], x.shape
    ph, pw = int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))
    ratio, scale = int(ctx.attr("sampling_ratio", 0)), float(ctx.attr("spatial_scale", 1.0))
    half = ctx.attr("coordinate_transformation_mode", "half_pixel") == "half_pixel"
    is_max = ctx.attr("mode", "avg") == "max"
    per_roi = []
    for r in range(n_rois):
        x0, y0, x1, y1 = (rois[r] * scale - (0.5 if half else 0.0)).tolist()
        rw, rh = x1 - x0, y1 - y0
        if not half:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        gh = ratio if ratio > 0 else math.ceil(rh / ph)
        gw = ratio if ratio > 0 else math.ceil(rw / pw)
        # a region's grid grows with its box, which is data: a vast box must not size the host arrays below
        ctx.check_shape((n_rois, ph, pw, gh * gw, 4), 4)
        yy = y0 + np.arange(ph)[:, None] * rh / ph + (np.arange(gh)[None, :] + 0.5) * rh / ph / gh  # (ph, gh)
        xx = x0 + np.arange(pw)[:, None] * rw / pw + (np.arange(gw)[None, :] + 0.5) * rw / pw / gw  # (pw, gw)
        per_roi.append((yy, xx, max(gh * gw, 1)))
    samples = max(yy.shape[1] * xx.shape[1] for yy, xx, _ in per_roi) if per_roi else 1
    pos = np.zeros((n_rois, ph, pw, samples, 4), dtype=np.int32)
    wt = np.zeros((n_rois, ph, pw, samples, 4), dtype=np.float32)
    valid = np.zeros((n_rois, ph, pw, samples), dtype=bool)
    counts = np.ones((n_rois,), dtype=np.float32)
    for r, (yy, xx, count) in enumerate(per_roi):
        counts[r] = count
        for i in range(ph):
            for j in range(pw):
                for si, (ys, xs) in enumerate(itertools.product(yy[i], xx[j])):
                    valid[r, i, j, si] = True
                    if ys < -1.0 or ys > h or xs < -1.0 or xs > w:
                        continue  # outside: contributes 0
                    ys, xs = max(ys, 0.0), max(xs, 0.0)
                    yl, xl = int(ys), int(xs)
                    yh, xh = (yl + 1, xl + 1)
                    if yl >= h - 1:
                        yl = yh = h - 1
                        ys = float(yl)
                    if xl >= w - 1:
                        xl = xh = w - 1
                        xs = float(xl)
                    ly, lx = ys - yl, xs - xl
                    pos[r, i, j, si] = (yl * w + xl, yl * w + xh, yh * w + xl, yh * w + xh)
                    wt[r, i, j, si] = ((1 - ly) * (1 - lx), (1 - ly) * lx, ly * (1 - lx), ly * lx)
    flat = x.cast(dtypes.float32).reshape(x.shape[0], c, h * w)[Tensor(bidx.astype(np.int32), device=x.device)]
    total = ph * pw * samples * 4
    vals = flat.gather(2, Tensor(pos.reshape(n_rois, 1, total), device=x.device).expand(n_rois, c, total))
    vals = vals.reshape(n_rois, c, ph, pw, samples, 4) * Tensor(wt, device=x.device).reshape(
        n_rois, 1, ph, pw, samples, 4)
    keep = Tensor(valid, device=x.device).reshape(n_rois, 1, ph, pw, samples)
    if is_max:
        out = keep.where(vals.max(-1), -math.inf).max(-1)
    else:
        out = keep.where(vals.sum(-1), 0).sum(-1) / Tensor(counts, device=x.device).reshape(n_rois, 1, 1, 1)
    return out.cast(x.dtype)


# ---- convolution-like ----
@op("CausalConvWithState")
def causal_conv_with_state(ctx: NodeCtx, x_in: Value, w_in: Value, b_in: Value = None,
                           past: Value = None) -> tuple[Tensor, Tensor]:
    """Depthwise causal conv1d whose left context is the carried state; returns the output and the new state."""
    x, w = ctx.t(x_in), ctx.t(w_in)
    bsz, ch, _ = x.shape
    k = w.shape[2]
    state = ctx.t(past) if past is not None else Tensor.zeros(bsz, ch, k - 1, dtype=x.dtype, device=x.device)
    padded = state.cast(x.dtype).cat(x, dim=2) if k > 1 else x
    y = padded.conv2d(w, ctx.t(b_in) if b_in is not None else None, groups=ch).cast(x.dtype)
    if ctx.attr("activation", "none") in ("silu", "swish"):
        yf = y.cast(dtypes.float32)
        y = (yf * yf.sigmoid()).cast(x.dtype)
    total = padded.shape[2]
    present = padded.shrink((None, None, (total - (k - 1), total)))
    return y, present


@op("Col2Im")
def col2im(ctx: NodeCtx, a: Value, image_shape: Value, block_shape: Value) -> Tensor:
    x = ctx.t(a)
    img = ctx.ints(image_shape)
    blk = ctx.ints(block_shape)
    nd = len(img)
    if len(blk) != nd:
        raise ctx.fail(f"image_shape {img} and block_shape {blk} have different lengths")
    dil = ctx.sized_ints("dilations", nd, 1, minimum=1)
    st = ctx.sized_ints("strides", nd, 1, minimum=1)
    p = ctx.sized_ints("pads", 2 * nd, 0, minimum=0)
    padded = [i + p[d] + p[d + nd] for d, i in enumerate(img)]
    blocks = [(padded[d] - (dil[d] * (blk[d] - 1) + 1)) // st[d] + 1 for d in range(nd)]
    if any(b < 1 for b in blk) or any(b < 1 for b in blocks):
        raise ctx.fail(f"block_shape {blk} does not fit image_shape {img} with pads {p}")
    kb, lb = math.prod(blk), math.prod(blocks)
    ctx.check_shape((kb * lb, math.prod(padded)), 4)  # the 0/1 matrix below is built on the host
    # every (kernel offset, block) column lands on one pixel of the padded image: a 0/1 matrix sums them
    m = np.zeros((kb * lb, math.prod(padded)), dtype=np.float32)
    for ki, off in enumerate(itertools.product(*[range(b) for b in blk])):
        for li, pos in enumerate(itertools.product(*[range(b) for b in blocks])):
            pix = [pos[d] * st[d] + off[d] * dil[d] for d in range(nd)]
            m[ki * lb + li, int(np.ravel_multi_index(pix, padded))] = 1.0
    n, cols = x.shape[0], x.shape[1] // kb
    y = x.reshape(n, cols, kb * lb).cast(dtypes.float32).matmul(Tensor(m, device=x.device))
    y = y.reshape([n, cols, *padded])
    y = y.shrink([None, None] + [(p[d], p[d] + img[d]) for d in range(nd)])
    return y.cast(x.dtype)


# ---- spectral ----
def _dft_along(re_: Tensor, im: Tensor | None, axis: int, length: int, inverse: bool, onesided: bool,
               scale: float = 1.0) -> tuple[Tensor, Tensor | None]:
    """The (inverse) DFT of re + i*im along `axis`, as matmuls with cos/sin matrices built on the host (float64,
    rounded once). The signal is cut or zero-padded to `length`."""
    def fit(t: Tensor, n: int) -> Tensor:
        s = t.shape[axis]
        if s > n:
            return t.shrink(tuple((0, n) if i == axis else None for i in range(t.ndim)))
        if s < n:
            return t.pad(tuple((0, n - s) if i == axis else None for i in range(t.ndim)))
        return t
    if inverse and onesided:
        # irfft: the missing half of the spectrum mirrors the given one; a real signal comes back
        m = length // 2 + 1
        re_ = fit(re_, m)
        im = fit(im, m) if im is not None else None
        k = np.arange(m)[:, None]
        n = np.arange(length)[None, :]
        ang = 2 * np.pi * k * n / length
        w = np.where((k == 0) | ((length % 2 == 0) & (k == length // 2)), 1.0, 2.0) / length * scale
        cos_w = Tensor((np.cos(ang) * w).astype(np.float32), device=re_.device)
        sin_w = Tensor((np.sin(ang) * w).astype(np.float32), device=re_.device)
        out = re_.transpose(axis, -1).matmul(cos_w)
        if im is not None:
            out = out - im.transpose(axis, -1).matmul(sin_w)
        return out.transpose(axis, -1), None
    re_ = fit(re_, length)
    im = fit(im, length) if im is not None else None
    n_out = length // 2 + 1 if onesided else length
    ang = 2 * np.pi * np.arange(length)[:, None] * np.arange(n_out)[None, :] / length
    sign = 1.0 if inverse else -1.0
    norm = (1.0 / length if inverse else 1.0) * scale
    cmat = Tensor((np.cos(ang) * norm).astype(np.float32), device=re_.device)
    smat = Tensor((sign * np.sin(ang) * norm).astype(np.float32), device=re_.device)
    rt = re_.transpose(axis, -1)
    out_re, out_im = rt.matmul(cmat), rt.matmul(smat)
    if im is not None:
        it = im.transpose(axis, -1)
        out_re, out_im = out_re - it.matmul(smat), out_im + it.matmul(cmat)
    return out_re.transpose(axis, -1), out_im.transpose(axis, -1)


@op("DFT")
def dft(ctx: NodeCtx, a: Value, length_in: Value = None, axis_in: Value = None) -> Tensor:
    x = ctx.t(a)
    if ctx.opset >= 20:
        axis = int(ctx.host(axis_in).reshape(-1)[0]) if axis_in is not None else -2
    else:
        axis = int(ctx.attr("axis", 1))
    axis = axis_of(axis, x.ndim, ctx)
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    if length_in is not None and not (isinstance(length_in, np.ndarray) and length_in.size == 0):
        length = int(ctx.host(length_in).reshape(-1)[0])
    else:
        length = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
    if length < 1:
        raise ctx.fail(f"dft_length {length} is not positive")
    ctx.check_shape((length, length), 8)  # the cos/sin matrices are built on the host
    xf = x.cast(dtypes.float32)
    re_ = xf[..., 0]
    im = xf[..., 1] if x.shape[-1] == 2 else None
    out_re, out_im = _dft_along(re_, im, axis, length, inverse, onesided)
    out = out_re.unsqueeze(-1) if out_im is None else out_re.stack(out_im, dim=-1)
    return out.cast(x.dtype)


@op("STFT")
def stft(ctx: NodeCtx, a: Value, step_in: Value, window_in: Value = None, length_in: Value = None) -> Tensor:
    x = ctx.t(a)
    step = int(ctx.host(step_in).reshape(-1)[0])
    window = ctx.t(window_in) if window_in is not None else None
    if length_in is not None:
        flen = int(ctx.host(length_in).reshape(-1)[0])
    else:
        flen = window.shape[0] if window is not None else x.shape[-2]
    wsize = window.shape[0] if window is not None else flen
    if step < 1 or flen < 1:
        raise ctx.fail(f"frame_step {step} and frame_length {flen} must be positive")
    frames = 1 + (x.shape[-2] - flen) // step
    if frames < 1:
        raise ctx.fail(f"a frame of {flen} does not fit a signal of {x.shape[-2]}")
    ctx.check_shape((frames, wsize), 8)
    ctx.check_shape((flen, flen), 8)
    idx = np.arange(frames)[:, None] * step + np.arange(wsize)[None, :]
    valid = idx < x.shape[-2]
    xf = x.cast(dtypes.float32)
    fr = xf[:, Tensor(np.minimum(idx, x.shape[-2] - 1).astype(np.int32), device=x.device)]  # (b, frames, w, c)
    fr = fr * Tensor(valid.astype(np.float32), device=x.device).reshape(1, frames, wsize, 1)
    if window is not None:
        fr = fr * window.cast(dtypes.float32).reshape(1, 1, wsize, 1)
    re_ = fr[..., 0]
    im = fr[..., 1] if x.shape[-1] == 2 else None
    out_re, out_im = _dft_along(re_, im, 2, flen, False, bool(ctx.attr("onesided", 1)))
    assert out_im is not None
    return out_re.stack(out_im, dim=-1).cast(x.dtype)


@op("MelWeightMatrix")
def mel_weight_matrix(ctx: NodeCtx, bins: Value, dft_len: Value, rate: Value, lo: Value, hi: Value) -> Tensor:
    """On the host: a constant of its scalar inputs."""
    nb, dl, sr = (int(ctx.host(v).reshape(-1)[0]) for v in (bins, dft_len, rate))
    lo_hz, hi_hz = (float(ctx.host(v).reshape(-1)[0]) for v in (lo, hi))
    spec = dl // 2 + 1
    if nb < 1 or dl < 1 or sr < 1:
        raise ctx.fail(f"num_mel_bins {nb}, dft_length {dl} and sample_rate {sr} must be positive")
    ctx.check_shape((spec, nb), 8)
    lo_mel, hi_mel = 2595 * np.log1p(lo_hz / 700) / np.log(10), 2595 * np.log1p(hi_hz / 700) / np.log(10)
    points = np.arange(nb + 2) * (hi_mel - lo_mel) / (nb + 2) + lo_mel
    hz = 700 * np.expm1(points / 2595 * np.log(10))
    fb = (((dl + 1) * hz) // sr).astype(int)
    out = np.zeros((spec, nb))
    for i in range(nb):
        left, center, right = fb[i], fb[i + 1], fb[i + 2]
        if center == left:
            out[center, i] = 1
        else:
            for j in range(left, center + 1):
                out[j, i] = (j - left) / (center - left)
        for j in range(center, right):
            out[j, i] = (right - j) / (right - center)
    d = ctx.dtype_of_type(int(ctx.attr("output_datatype", 1)))
    return Tensor(out.astype(np.float32)).cast(d)


# ---- linear algebra ----
@op("Det")
def det(ctx: NodeCtx, a: Value) -> Tensor:
    """Gaussian elimination with partial pivoting, unrolled over the (static) matrix size, on the device."""
    x = ctx.t(a)
    n = x.shape[-1]
    batch = x.shape[:-2]
    m = x.cast(dtypes.float32 if x.dtype != dtypes.float64 else dtypes.float64).reshape(-1, n, n)
    det_v = Tensor.ones(m.shape[0], dtype=m.dtype, device=x.device)
    rows = Tensor.arange(n, device=x.device).reshape(1, n, 1)
    for k in range(n):
        col = m[:, :, k].abs()
        col = (Tensor.arange(n, device=x.device).reshape(1, n) >= k).where(col, -1.0)
        piv = col.argmax(1).reshape(-1, 1, 1)
        row_k, row_p = m[:, k:k + 1, :], m.gather(1, piv.expand(m.shape[0], 1, n))
        swapped = piv.reshape(-1) != k
        m = (rows == k).where(row_p, (rows == piv).where(row_k, m))
        det_v = det_v * swapped.where(-1.0, 1.0)
        pivot = m[:, k, k]
        det_v = det_v * pivot
        safe = (pivot == 0).where(1.0, pivot)
        factors = (m[:, :, k] / safe.reshape(-1, 1)).reshape(-1, n, 1)
        below = rows > k
        m = below.where(m - factors * m[:, k:k + 1, :], m)
    return det_v.reshape(batch).cast(x.dtype)


# ---- opset 27 recurrent-state ops ----
@op("LinearAttention")
def linear_attention(ctx: NodeCtx, q_in: Value, k_in: Value, v_in: Value, past: Value = None, decay: Value = None,
                     beta: Value = None) -> tuple[Tensor, Tensor]:
    """Linear attention with a (batch, kv_heads, d_k, d_v) state updated step by step: linear, gated (decay),
    delta (beta) or gated_delta; float32 inside."""
    q, k, v = ctx.t(q_in), ctx.t(k_in), ctx.t(v_in)
    qh, kvh = int(ctx.attr("q_num_heads")), int(ctx.attr("kv_num_heads"))
    b, t, _ = q.shape
    dk, dv = q.shape[-1] // qh, v.shape[-1] // kvh
    group = qh // kvh

    def heads(z: Tensor, h: int) -> Tensor:
        return z.reshape(b, t, h, -1).permute(0, 2, 1, 3).cast(dtypes.float32)
    q4, k4, v4 = heads(q, qh), heads(k, kvh), heads(v, kvh)
    g4 = None
    if decay is not None:
        dcy = ctx.t(decay)
        g4 = dcy.reshape(b, t, kvh, 1).permute(0, 2, 1, 3) if dcy.shape[-1] == kvh else heads(dcy, kvh)
        g4 = g4.cast(dtypes.float32)
    b4 = None
    if beta is not None:
        bt = ctx.t(beta)
        b4 = bt.reshape(b, t, bt.shape[-1], 1).permute(0, 2, 1, 3).cast(dtypes.float32)
    state_dtype = ctx.t(past).dtype if past is not None else q.dtype
    state = ctx.t(past).cast(dtypes.float32) if past is not None else \
        Tensor.zeros(b, kvh, dk, dv, dtype=dtypes.float32, device=q.device)
    scale = ctx.attr("scale")
    scale = 1 / math.sqrt(dk) if not scale else float(scale)
    outs = []
    for i in range(t):
        kt, vt = k4[:, :, i, :], v4[:, :, i, :]
        if g4 is not None:
            state = state * g4[:, :, i, :].exp().unsqueeze(-1)
        if b4 is not None:
            retrieved = (state * kt.unsqueeze(-1)).sum(2)
            vt = b4[:, :, i, :] * (vt - retrieved)
        state = state + kt.unsqueeze(-1) * vt.unsqueeze(-2)
        read = state.repeat_interleave(group, 1) if group > 1 else state
        outs.append(scale * (q4[:, :, i, :].unsqueeze(-1) * read).sum(2))
    y = Tensor.stack(*outs, dim=2)  # (b, qh, t, dv)
    return y.permute(0, 2, 1, 3).reshape(b, t, qh * dv).cast(q.dtype), state.cast(state_dtype)


# ---- detection ----
@op("NonMaxSuppression")
def non_max_suppression(ctx: NodeCtx, boxes_in: Value, scores_in: Value, max_in: Value = None, iou_in: Value = None,
                        score_in: Value = None) -> np.ndarray:
    """On the host: the number of boxes kept decides the output's shape."""
    boxes, scores = ctx.host(boxes_in).astype(np.float64), ctx.host(scores_in).astype(np.float64)

    def scalar(v: Value, default: float) -> float:
        if v is None:
            return default
        arr = ctx.host(v)
        return float(arr.reshape(-1)[0]) if arr.size else default
    max_out = int(max(scalar(max_in, 0), 0))
    iou_t = scalar(iou_in, 0.0)
    score_t = None if score_in is None or ctx.host(score_in).size == 0 else scalar(score_in, 0.0)
    center = bool(ctx.attr("center_point_box", 0))
    if center:
        cx, cy, w, h = (boxes[..., i] for i in range(4))
        y1, x1, y2, x2 = cy - h / 2, cx - w / 2, cy + h / 2, cx + w / 2
    else:
        y1 = np.minimum(boxes[..., 0], boxes[..., 2])
        y2 = np.maximum(boxes[..., 0], boxes[..., 2])
        x1 = np.minimum(boxes[..., 1], boxes[..., 3])
        x2 = np.maximum(boxes[..., 1], boxes[..., 3])
    selected: list[tuple[int, int, int]] = []
    for bi in range(scores.shape[0]):
        area = (x2[bi] - x1[bi]) * (y2[bi] - y1[bi])
        for ci in range(scores.shape[1]):
            s = scores[bi, ci]
            cand = [i for i in range(s.shape[0]) if score_t is None or s[i] > score_t]
            cand.sort(key=lambda i: (-s[i], i))  # highest score first, lower index on ties
            keep: list[int] = []
            for i in cand:
                if len(keep) >= max_out:
                    break
                ok = True
                for j in keep:
                    iw = min(x2[bi, i], x2[bi, j]) - max(x1[bi, i], x1[bi, j])
                    ih = min(y2[bi, i], y2[bi, j]) - max(y1[bi, i], y1[bi, j])
                    if iw <= 0 or ih <= 0 or area[i] <= 0 or area[j] <= 0:
                        continue
                    inter = iw * ih
                    if inter / (area[i] + area[j] - inter) > iou_t:
                        ok = False
                        break
                if ok:
                    keep.append(i)
                    selected.append((bi, ci, i))
    return np.asarray(selected, dtype=np.int64).reshape(-1, 3)


# ---- strings (host) ----
def _strings(ctx: NodeCtx, v: Value) -> np.ndarray:
    arr = ctx.host(v)
    if arr.dtype.kind not in "OUS":
        raise ctx.fail(f"expected a string tensor, got {arr.dtype}")
    return arr.astype(object)


@op("StringConcat")
def string_concat(ctx: NodeCtx, a: Value, b: Value) -> np.ndarray:
    x, y = np.broadcast_arrays(_strings(ctx, a), _strings(ctx, b))
    return np.asarray([p + q for p, q in zip(x.reshape(-1), y.reshape(-1))], dtype=object).reshape(x.shape)


@op("StringSplit")
def string_split(ctx: NodeCtx, a: Value) -> tuple[np.ndarray, np.ndarray]:
    x = _strings(ctx, a)
    sep = ctx.attr("delimiter") or None
    maxsplit = ctx.attr("maxsplit")
    parts = [s.split(sep, -1 if maxsplit is None else int(maxsplit)) for s in x.reshape(-1)]
    width = max((len(p) for p in parts), default=0)
    out = np.asarray([p + [""] * (width - len(p)) for p in parts], dtype=object).reshape(x.shape + (width,))
    return out, np.asarray([len(p) for p in parts], dtype=np.int64).reshape(x.shape)


@op("StringNormalizer")
def string_normalizer(ctx: NodeCtx, a: Value) -> np.ndarray:
    x = _strings(ctx, a)
    action = ctx.attr("case_change_action", "NONE")
    sensitive = bool(ctx.attr("is_case_sensitive", 0))
    stops = list(ctx.attr("stopwords") or [])
    change = {"LOWER": str.lower, "UPPER": str.upper}.get(action, lambda s: s)

    def strip_accents(s: str) -> str:
        if s.isascii():
            return s
        return "".join(ch for ch in unicodedata.normalize("NFKD", s) if not unicodedata.combining(ch))

    def drop(s: str, words: set[str]) -> str:
        return " ".join(w for w in s.split(" ") if w not in words)

    def norm(s: str) -> str:
        s = strip_accents(s)
        if sensitive and stops:
            s = drop(s, set(stops))
        s = change(s)
        if not sensitive and stops:
            s = drop(s, {change(w) for w in stops})
        return s
    res = [norm(s) for s in x.reshape(-1)]
    kept = [s for s in res if s]
    if x.ndim == 2 and x.shape[0] == 1:
        return np.asarray([kept or [""]], dtype=object)
    return np.asarray(kept or [""], dtype=object) if x.ndim == 1 else np.asarray(res, dtype=object).reshape(x.shape)


@op("RegexFullMatch")
def regex_full_match(ctx: NodeCtx, a: Value) -> np.ndarray:
    x = _strings(ctx, a)
    pattern = re.compile(str(ctx.attr("pattern")))
    return np.asarray([pattern.fullmatch(s) is not None for s in x.reshape(-1)], dtype=bool).reshape(x.shape)


# ---- ai.onnx.preview.training ----
_TRAINING = "ai.onnx.preview.training"


def _optimizer_groups(args: tuple[Value, ...], per: int) -> list[list[Value]]:
    n = (len(args) - 2) // per
    return [[args[2 + j * n + i] for j in range(per)] for i in range(n)]


@op("Adagrad", domain=_TRAINING)
def adagrad(ctx: NodeCtx, *args: Value) -> tuple[Tensor, ...]:
    r, t = ctx.t(args[0]).cast(dtypes.float32), ctx.t(args[1]).cast(dtypes.float32)
    decay, eps, norm = (float(ctx.attr(k, d)) for k, d in (("decay_factor", 0.0), ("epsilon", 0.0),
                                                          ("norm_coefficient", 0.0)))
    xs, hs = [], []
    for x_in, g_in, h_in in _optimizer_groups(args, 3):
        x, g, h = ctx.t(x_in), ctx.t(g_in), ctx.t(h_in)
        rate = r / (1 + t * decay)
        greg = norm * x + g
        h_new = h + greg * greg
        xs.append((x - rate * greg / (h_new.sqrt() + eps)).cast(x.dtype))
        hs.append(h_new.cast(h.dtype))
    return tuple(xs + hs)


@op("Momentum", domain=_TRAINING)
def momentum(ctx: NodeCtx, *args: Value) -> tuple[Tensor, ...]:
    r, t = ctx.t(args[0]).cast(dtypes.float32), ctx.host(args[1]).reshape(-1)[0]
    alpha, beta, norm = (float(ctx.attr(k, 0.0)) for k in ("alpha", "beta", "norm_coefficient"))
    nesterov = ctx.attr("mode", "standard") == "nesterov"
    b = beta if t > 0 else 1.0
    xs, vs = [], []
    for x_in, g_in, v_in in _optimizer_groups(args, 3):
        x, g, v = ctx.t(x_in), ctx.t(g_in), ctx.t(v_in)
        greg = norm * x + g
        v_new = alpha * v + b * greg
        xs.append((x - r * (greg + alpha * v_new if nesterov else v_new)).cast(x.dtype))
        vs.append(v_new.cast(v.dtype))
    return tuple(xs + vs)


@op("Adam", domain=_TRAINING)
def adam(ctx: NodeCtx, *args: Value) -> tuple[Tensor, ...]:
    r, t = ctx.t(args[0]).cast(dtypes.float32), float(ctx.host(args[1]).reshape(-1)[0])
    alpha, beta = float(ctx.attr("alpha", 0.9)), float(ctx.attr("beta", 0.999))
    eps, norm = float(ctx.attr("epsilon", 1e-6)), float(ctx.attr("norm_coefficient", 0.0))
    post = float(ctx.attr("norm_coefficient_post", 0.0))
    rate = r * math.sqrt(1 - beta ** t) / (1 - alpha ** t) if t > 0 else r
    xs, vs, hs = [], [], []
    for x_in, g_in, v_in, h_in in _optimizer_groups(args, 4):
        x, g, v, h = ctx.t(x_in), ctx.t(g_in), ctx.t(v_in), ctx.t(h_in)
        greg = norm * x + g
        v_new = alpha * v + (1 - alpha) * greg
        h_new = beta * h + (1 - beta) * greg * greg
        x_new = x - rate * (v_new / (h_new.sqrt() + eps))
        xs.append(((1 - post) * x_new).cast(x.dtype))
        vs.append(v_new.cast(v.dtype))
        hs.append(h_new.cast(h.dtype))
    return tuple(xs + vs + hs)



# ---- ai.onnx.ml (the simple ones) ----
_ML = "ai.onnx.ml"


@op("Binarizer", domain=_ML)
def binarizer(ctx: NodeCtx, a: Value) -> Tensor:
    x = ctx.t(a)
    return (x > float(ctx.attr("threshold", 0.0))).cast(x.dtype)


@op("ArrayFeatureExtractor", domain=_ML)
def array_feature_extractor(ctx: NodeCtx, a: Value, idx_in: Value) -> Tensor:
    x = ctx.t(a)
    idx = ctx.host(idx_in).reshape(-1).astype(np.int64)
    out = x[..., Tensor(idx.astype(np.int32), device=x.device)]
    return out.reshape(1, len(idx)) if x.ndim == 1 else out


@op("LabelEncoder", domain=_ML)
def label_encoder(ctx: NodeCtx, a: Value) -> np.ndarray:
    """On the host: a dictionary lookup, usually over strings."""
    x = ctx.host(a)
    keys: Any = next((ctx.attr(k) for k in ("keys_floats", "keys_int64s", "keys_strings", "keys_tensor")
                 if ctx.attr(k) is not None), [])
    kind = next((k for k in ("values_floats", "values_int64s", "values_strings", "values_tensor")
                 if ctx.attr(k) is not None), "values_strings")
    values = ctx.attr(kind)
    if isinstance(keys, np.ndarray):
        keys = keys.reshape(-1).tolist()
    if isinstance(values, np.ndarray):
        values = values.reshape(-1).tolist()
    table = dict(zip(keys, values))
    if kind == "values_tensor":
        dt = ctx.attr("default_tensor")
        default, otype = dt.reshape(-1)[0].item(), dt.dtype
    else:
        default, otype = {"values_floats": (ctx.attr("default_float", -0.0), np.float32),
                          "values_int64s": (ctx.attr("default_int64", -1), np.int64),
                          "values_strings": (ctx.attr("default_string", "_Unused"), object)}[kind]
    flat = [table.get(v.item() if isinstance(v, np.generic) else v, default) for v in x.reshape(-1)]
    return np.asarray(flat, dtype=otype).reshape(x.shape)
