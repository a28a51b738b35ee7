"""Neural network ops: matrix products, convolutions, pooling, normalizations, recurrent layers, attention and
losses."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import numpy as np
from tinygrad import Tensor, dtypes
from tinygrad.onnx._base import NodeCtx, Value, axis_of, float_like, op

# ---- matrix products ----


@op("MatMul")
def matmul(ctx: NodeCtx, a: Value, b: Value) -> Tensor:
    x, w = ctx.t(a), ctx.t(b)
    if x.ndim == 1 and w.ndim == 1:
        return (x * w).sum().cast(x.dtype)
    return x.matmul(w).cast(x.dtype)


@op("Gemm")
def gemm(ctx: NodeCtx, a: Value, b: Value, c: Value = None) -> Tensor:
    x, w = ctx.t(a), ctx.t(b)
    if ctx.attr("transA", 0):
        x = x.transpose(0, 1)
    if ctx.attr("transB", 0):
        w = w.transpose(0, 1)
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    y = x.matmul(w)
    if alpha != 1.0:
        y = y * alpha
    if c is not None:
        ct = ctx.t(c)
        y = y + (ct * beta if beta != 1.0 else ct)
    return y.cast(x.dtype)


# ---- convolution ----
def _kernel(ctx: NodeCtx, rank: int, weight: Tensor | None = None) -> tuple[int, ...]:
    """kernel_shape, one positive size per spatial axis; a convolution may leave it to its weight's shape."""
    if weight is not None and weight.ndim != rank + 2:
        raise ctx.fail(f"the weight has shape {weight.shape}; a {rank}-D {ctx.op} needs rank {rank + 2}")
    if weight is not None and not ctx.attr("kernel_shape"):
        return tuple(weight.shape[2:])
    if not ctx.required("kernel_shape"):
        raise ctx.fail("attribute 'kernel_shape' is empty")
    kernel = tuple(ctx.sized_ints("kernel_shape", rank, 1, minimum=1, need=f"a {rank}-D {ctx.op} needs {rank}"))
    if weight is not None and kernel != tuple(weight.shape[2:]):
        raise ctx.fail(f"kernel_shape {list(kernel)} does not match the weight's shape {weight.shape}")
    return kernel


def _axis_ints(ctx: NodeCtx, name: str, n: int, default: int, minimum: int | None) -> list[int]:
    """strides, dilations, output_padding: one value per spatial axis."""
    return ctx.sized_ints(name, n, default, minimum, need=f"a {n}-D {ctx.op} needs {n}, one per spatial axis")


def _pads_attr(ctx: NodeCtx, n: int) -> list[tuple[int, int]]:
    """The pads attribute as (begin, end) per spatial axis."""
    p = ctx.sized_ints("pads", 2 * n, 0, need=f"a {n}-D {ctx.op} needs {2 * n}, a begin and an end per spatial axis")
    return [(p[i], p[i + n]) for i in range(n)]


def _conv_geometry(ctx: NodeCtx, spatial: tuple[int, ...], kernel: tuple[int, ...]
                   ) -> tuple[list[int], list[int], list[tuple[int, int]]]:
    """strides, dilations and (before, after) pads of a Conv or pool, auto_pad resolved."""
    n = len(kernel)
    if len(spatial) != n:
        raise ctx.fail(f"a kernel of {n} spatial axes {kernel} for an input with {len(spatial)} ({spatial})")
    strides = _axis_ints(ctx, "strides", n, 1, 1)
    dil = _axis_ints(ctx, "dilations", n, 1, 1)
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for i, s, k, d in zip(spatial, strides, kernel, dil):
            out = -(-i // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - i)
            small = total // 2
            pads.append((small, total - small) if auto == "SAME_UPPER" else (total - small, small))
    elif auto == "VALID":
        pads = [(0, 0)] * n
    else:
        pads = _pads_attr(ctx, n)
    return strides, dil, pads


def _spatial_pads(pads: list[tuple[int, int]]) -> list[tuple[int, int] | None]:
    """(before, after) per spatial dim -> Tensor.pad's per-dim form, batch and channel dims untouched."""
    return [None, None, *pads]


@op("Conv")
def conv(ctx: NodeCtx, a: Value, w_in: Value, b_in: Value = None) -> Tensor:
    x, w = ctx.t(a), ctx.t(w_in)
    kernel = _kernel(ctx, x.ndim - 2, w)
    strides, dil, pads = _conv_geometry(ctx, x.shape[2:], kernel)
    b = ctx.t(b_in) if b_in is not None else None
    # the pads go to conv2d (tinygrad's form: (before, after) pairs from the last dimension), which chooses the
    # kernel's layout knowing the border (a short padded row reads a channels-last weight on the CPU)
    padding = [p for pair in reversed(pads) for p in pair]
    return x.conv2d(w, b, groups=int(ctx.attr("group", 1)), stride=strides, dilation=dil, padding=padding).cast(x.dtype)


@op("ConvTranspose")
def conv_transpose(ctx: NodeCtx, a: Value, w_in: Value, b_in: Value = None) -> Tensor:
    x, w = ctx.t(a), ctx.t(w_in)
    n = x.ndim - 2
    kernel = _kernel(ctx, n, w)
    strides = _axis_ints(ctx, "strides", n, 1, 1)
    dil = _axis_ints(ctx, "dilations", n, 1, 1)
    opad = _axis_ints(ctx, "output_padding", n, 0, 0)
    auto = ctx.attr("auto_pad", "NOTSET")
    spatial = x.shape[2:]
    full = [(i - 1) * s + (k - 1) * d + 1 for i, s, k, d in zip(spatial, strides, kernel, dil)]
    out_shape = ctx.attr("output_shape")
    if ctx.attr("pads") and auto not in ("SAME_UPPER", "SAME_LOWER"):
        pads = _pads_attr(ctx, n)
    elif out_shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        want = list(out_shape)[-n:] if out_shape is not None else [i * s for i, s in zip(spatial, strides)]
        pads = []
        for L, o, t in zip(full, opad, want):
            total = L + o - t
            pads.append((total // 2, total - total // 2) if auto == "SAME_UPPER" else
                        (total - total // 2, total // 2))
    else:
        pads = [(0, 0)] * n
    y = x.conv_transpose2d(w, None, groups=int(ctx.attr("group", 1)), stride=strides, dilation=dil)
    # y has the full length L per dim; the output is [b, L - e + output_padding) of it, zeros past L
    crop = [(-b, e_len - L) for (b, e), L, o in zip(pads, full, opad) for e_len in [L - e + o]]
    if any(c for pair in crop for c in pair):
        y = y.pad(_spatial_pads(crop))
    if b_in is not None:
        y = y + ctx.t(b_in).reshape((-1,) + (1,) * n)
    return y.cast(x.dtype)


@op("ConvInteger")
def conv_integer(ctx: NodeCtx, a: Value, w_in: Value, a_zp: Value = None, w_zp: Value = None) -> Tensor:
    x, w = ctx.t(a).cast(dtypes.int32), ctx.t(w_in).cast(dtypes.int32)
    if a_zp is not None:
        x = x - ctx.t(a_zp).cast(dtypes.int32)
    if w_zp is not None:
        z = ctx.t(w_zp).cast(dtypes.int32)
        w = w - (z.reshape((-1,) + (1,) * (w.ndim - 1)) if z.ndim == 1 and z.numel() > 1 else z)
    kernel = _kernel(ctx, x.ndim - 2, w)
    strides, dil, pads = _conv_geometry(ctx, x.shape[2:], kernel)
    x = x.pad(_spatial_pads(pads))
    return x.conv2d(w, None, groups=int(ctx.attr("group", 1)), stride=strides, dilation=dil,
                    dtype=dtypes.int32).cast(dtypes.int32)


def _dequant(ctx: NodeCtx, v: Value, s: Value, zp: Value, axis: int) -> Tensor:
    x = ctx.t(v).cast(dtypes.float32)
    sc, z = ctx.t(s).cast(dtypes.float32), ctx.t(zp).cast(dtypes.float32) if zp is not None else None
    if sc.numel() > 1:
        shape = [1] * x.ndim
        shape[axis] = -1
        sc = sc.reshape(shape)
        z = z.reshape(shape) if z is not None and z.numel() > 1 else z
    return (x - z) * sc if z is not None else x * sc


def _requant(ctx: NodeCtx, y: Tensor, s: Value, zp: Value, et: Tensor) -> Tensor:
    sc = ctx.t(s).cast(dtypes.float32)
    q = (y / sc).round() + ctx.t(zp).cast(dtypes.float32)
    lo, hi = et.dtype.min, et.dtype.max
    return q.clip(lo, hi).cast(et.dtype)


@op("QLinearMatMul")
def qlinear_matmul(ctx: NodeCtx, a: Value, a_s: Value, a_zp: Value, b: Value, b_s: Value, b_zp: Value,
                   y_s: Value, y_zp: Value) -> Tensor:
    x = _dequant(ctx, a, a_s, a_zp, 0)
    w = _dequant(ctx, b, b_s, b_zp, 1)
    return _requant(ctx, x.matmul(w), y_s, y_zp, ctx.t(y_zp))


@op("QLinearConv")
def qlinear_conv(ctx: NodeCtx, a: Value, a_s: Value, a_zp: Value, w_in: Value, w_s: Value, w_zp: Value,
                 y_s: Value, y_zp: Value, b_in: Value = None) -> Tensor:
    x = _dequant(ctx, a, a_s, a_zp, 1)
    w = _dequant(ctx, w_in, w_s, w_zp, 0)
    kernel = _kernel(ctx, x.ndim - 2, w)
    strides, dil, pads = _conv_geometry(ctx, x.shape[2:], kernel)
    x = x.pad(_spatial_pads(pads))
    y = x.conv2d(w, None, groups=int(ctx.attr("group", 1)), stride=strides, dilation=dil)
    if b_in is not None:
        scale = ctx.t(a_s).cast(dtypes.float32) * ctx.t(w_s).cast(dtypes.float32).reshape(-1)
        y = y + (ctx.t(b_in).cast(dtypes.float32) * scale).reshape((-1,) + (1,) * (y.ndim - 2))
    return _requant(ctx, y, y_s, y_zp, ctx.t(y_zp))


# ---- pooling ----
def _pool_geometry(ctx: NodeCtx, spatial: tuple[int, ...], kernel: tuple[int, ...]
                   ) -> tuple[list[int], list[int], list[tuple[int, int]], list[int]]:
    """strides, dilations, explicit pads, and the extra padding past the end that the last window reads
    (ceil_mode; negative: input no window reaches). Padding by pads and extra gives exactly the windows of the
    output size ONNX specifies."""
    strides, dil, pads = _conv_geometry(ctx, spatial, kernel)
    auto = ctx.attr("auto_pad", "NOTSET")
    ceil_mode = bool(ctx.attr("ceil_mode", 0))
    extra = []
    for i, s, k, d, (b, e) in zip(spatial, strides, kernel, dil, pads):
        eff = (k - 1) * d + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-i // s)
        elif auto == "VALID":
            o = (i - eff) // s + 1
        else:
            span = i + b + e - eff
            o = (-(-span // s) if ceil_mode else span // s) + 1
            if ceil_mode and (o - 1) * s >= i + b:
                o -= 1  # the last window would start in the padding after the input
        o = max(o, 0)
        extra.append((o - 1) * s + eff - (i + b + e))
    return strides, dil, pads, extra


def _padded(x: Tensor, pads: list[tuple[int, int]], extra: list[int], fill: float) -> Tensor:
    pairs: list[Any] = [None] * (x.ndim - len(pads)) + [(b, e + x_) for (b, e), x_ in zip(pads, extra)]
    if all(p is None or p == (0, 0) for p in pairs):
        return x
    return x.pad(pairs, value=fill) if fill else x.pad(pairs)


@op("MaxPool")
def max_pool(ctx: NodeCtx, a: Value) -> Any:
    x = ctx.t(a)
    kernel = _kernel(ctx, x.ndim - 2)
    strides, dil, pads, extra = _pool_geometry(ctx, x.shape[2:], kernel)
    fill = -math.inf if x.dtype.is_float else x.dtype.min
    xp = _padded(x, pads, extra, fill)
    if not ctx.wants(1):
        return xp.max_pool2d(kernel, strides, dil, 0)
    y, idx = cast(tuple[Tensor, Tensor], xp.max_pool2d(kernel, strides, dil, 0, return_indices=True))
    # indices in the padded plane -> flat indices of the input tensor (row-major, or column-major spatially
    # with storage_order=1)
    spatial, padded = x.shape[2:], xp.shape[2:]
    idx = idx.cast(dtypes.int64)
    coords = []
    rem = idx
    for p in reversed(padded):
        coords.append(rem % p)
        rem = rem // p
    coords = coords[::-1]
    flat = None
    order = range(len(spatial)) if not ctx.attr("storage_order", 0) else reversed(range(len(spatial)))
    for i in order:
        c = coords[i] - pads[i][0]
        flat = c if flat is None else flat * spatial[i] + c
    assert flat is not None
    plane = math.prod(spatial)
    nc = Tensor.arange(x.shape[0] * x.shape[1], device=x.device, dtype=dtypes.int64).reshape(
        (x.shape[0], x.shape[1]) + (1,) * len(spatial))
    return y, flat + nc * plane


@op("AveragePool")
def average_pool(ctx: NodeCtx, a: Value) -> Tensor:
    x = float_like(ctx.t(a))
    kernel = _kernel(ctx, x.ndim - 2)
    strides, dil, pads, extra = _pool_geometry(ctx, x.shape[2:], kernel)
    total = _padded(x, pads, extra, 0).avg_pool2d(kernel, strides, dil, 0) * math.prod(kernel)
    include = bool(ctx.attr("count_include_pad", 0))
    if all(e <= 0 for e in extra) and (include or all(p == (0, 0) for p in pads)):
        return (total / math.prod(kernel)).cast(x.dtype)
    # the divisor of each window: its taps inside the input (or inside the explicit padding too), never those
    # past it that ceil_mode adds; computed on the host, it depends on shapes only
    n = len(kernel)
    ones = np.ones(x.shape[2:], dtype=np.float32)
    mask = np.pad(ones, [(b, e) for b, e in pads], constant_values=1.0 if include else 0.0)
    mask = np.pad(mask, [(0, max(x_, 0)) for x_ in extra])
    if any(x_ < 0 for x_ in extra):
        mask = mask[tuple(slice(0, s + x_) if x_ < 0 else slice(None) for s, x_ in zip(mask.shape, extra))]
    cnt = Tensor(mask, device=x.device).reshape((1,) * (x.ndim - n) + mask.shape).avg_pool2d(
        kernel, strides, dil, 0) * math.prod(kernel)
    return (total / cnt.cast(x.dtype)).cast(x.dtype)


@op("LpPool")
def lp_pool(ctx: NodeCtx, a: Value) -> Tensor:
    x = float_like(ctx.t(a))
    p = float(ctx.attr("p", 2))
    kernel = _kernel(ctx, x.ndim - 2)
    strides, dil, pads, extra = _pool_geometry(ctx, x.shape[2:], kernel)
    s = _padded(x.abs().pow(p), pads, extra, 0).avg_pool2d(kernel, strides, dil, 0) * math.prod(kernel)
    return s.pow(1 / p).cast(x.dtype)


@op("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def global_pool(ctx: NodeCtx, a: Value) -> Tensor:
    x = ctx.t(a)
    axes = tuple(range(2, x.ndim))
    if ctx.op == "GlobalAveragePool":
        return float_like(x).mean(axes, keepdim=True).cast(x.dtype)
    if ctx.op == "GlobalMaxPool":
        return x.max(axes, keepdim=True)
    p = float(ctx.attr("p", 2))
    return x.abs().pow(p).sum(axes, keepdim=True).pow(1 / p)


@op("MaxUnpool")
def max_unpool(ctx: NodeCtx, a: Value, i: Value, out_shape: Value = None) -> Tensor:
    x, idx = ctx.t(a), ctx.t(i).cast(dtypes.int64)
    kernel = _kernel(ctx, x.ndim - 2)
    n = len(kernel)
    strides = _axis_ints(ctx, "strides", n, 1, 1)
    pads = _pads_attr(ctx, n)
    inferred = x.shape[:2] + tuple((s - 1) * st - b - e + k
                                   for s, st, k, (b, e) in zip(x.shape[2:], strides, kernel, pads))
    ctx.check_shape(inferred, x.dtype.itemsize)
    flat = Tensor.zeros(math.prod(inferred), dtype=x.dtype, device=x.device)
    y = flat.scatter(0, idx.reshape(-1), x.reshape(-1)).reshape(inferred)
    if out_shape is not None:
        # a larger output_shape keeps the indices' layout (that of the inferred shape) and pads after it
        shape = tuple(ctx.ints(out_shape))
        y = y.pad([(0, o - i) for o, i in zip(shape, inferred)])
    return y


# ---- normalization ----
def _channel(t: Tensor, ndim: int) -> Tensor:
    return t.reshape((-1,) + (1,) * (ndim - 2))


@op("BatchNormalization")
def batch_norm(ctx: NodeCtx, a: Value, scale: Value, bias: Value, mean: Value, var: Value) -> Any:
    x = ctx.t(a)
    eps = float(ctx.attr("epsilon", 1e-5))
    s, b, m, v = (_channel(ctx.t(t).cast(x.dtype), x.ndim) for t in (scale, bias, mean, var))
    if not ctx.attr("training_mode", 0):
        return ((x - m) * (v + eps).rsqrt() * s + b).cast(x.dtype)
    axes = (0,) + tuple(range(2, x.ndim))
    bm = x.mean(axes, keepdim=True)
    bv = ((x - bm) * (x - bm)).mean(axes, keepdim=True)
    y = (x - bm) * (bv + eps).rsqrt() * s + b
    mom = float(ctx.attr("momentum", 0.9))
    rm = ctx.t(mean) * mom + bm.reshape(-1) * (1 - mom)
    rv = ctx.t(var) * mom + bv.reshape(-1) * (1 - mom)
    return y.cast(x.dtype), rm, rv


@op("InstanceNormalization")
def instance_norm(ctx: NodeCtx, a: Value, scale: Value, bias: Value) -> Tensor:
    x = ctx.t(a)
    xf = float_like(x)
    axes = tuple(range(2, x.ndim))
    eps = float(ctx.attr("epsilon", 1e-5))
    m = xf.mean(axes, keepdim=True)
    var = ((xf - m) * (xf - m)).mean(axes, keepdim=True)
    y = (xf - m) * (var + eps).rsqrt() * _channel(ctx.t(scale), x.ndim) + _channel(ctx.t(bias), x.ndim)
    return y.cast(x.dtype)


def _stash(ctx: NodeCtx, x: Tensor) -> Tensor:
    st = int(ctx.attr("stash_type", 1))
    return x.cast(ctx.dtype_of_type(st)) if st != 1 or x.dtype != dtypes.float64 else x


@op("LayerNormalization")
def layer_norm(ctx: NodeCtx, a: Value, scale: Value, bias: Value = None) -> tuple[Tensor, Tensor, Tensor]:
    x = ctx.t(a)
    axis = axis_of(int(ctx.attr("axis", -1)), x.ndim, ctx)
    eps = float(ctx.attr("epsilon", 1e-5))
    xf = _stash(ctx, x)
    axes = tuple(range(axis, x.ndim))
    m = xf.mean(axes, keepdim=True)
    d = xf - m
    var = (d * d).mean(axes, keepdim=True)
    inv = (var + eps).rsqrt()
    y = (d * inv).cast(x.dtype) * ctx.t(scale)
    if bias is not None:
        y = y + ctx.t(bias)
    return y.cast(x.dtype), m, inv


@op("RMSNormalization")
def rms_norm(ctx: NodeCtx, a: Value, scale: Value) -> Tensor:
    x = ctx.t(a)
    axis = axis_of(int(ctx.attr("axis", -1)), x.ndim, ctx)
    eps = float(ctx.attr("epsilon", 1e-5))
    xf = _stash(ctx, x)
    axes = tuple(range(axis, x.ndim))
    inv = ((xf * xf).mean(axes, keepdim=True) + eps).rsqrt()
    return ((xf * inv).cast(x.dtype) * ctx.t(scale)).cast(x.dtype)


@op("GroupNormalization")
def group_norm(ctx: NodeCtx, a: Value, scale: Value, bias: Value) -> Tensor:
    x = ctx.t(a)
    g = int(ctx.attr("num_groups"))
    eps = float(ctx.attr("epsilon", 1e-5))
    n, c = x.shape[0], x.shape[1]
    xf = _stash(ctx, x)
    xg = xf.reshape(n, g, -1)
    m = xg.mean(-1, keepdim=True)
    d = xg - m
    var = (d * d).mean(-1, keepdim=True)
    y = (d * (var + eps).rsqrt()).reshape(x.shape).cast(x.dtype)
    s, b = ctx.t(scale), ctx.t(bias)
    if s.shape[0] == g and g != c:  # opset 18: one scale per group
        s, b = s.repeat_interleave(c // g), b.repeat_interleave(c // g)
    return (y * _channel(s, x.ndim) + _channel(b, x.ndim)).cast(x.dtype)


@op("LpNormalization")
def lp_norm(ctx: NodeCtx, a: Value) -> Tensor:
    x = ctx.t(a)
    axis = axis_of(int(ctx.attr("axis", -1)), x.ndim, ctx)
    p = int(ctx.attr("p", 2))
    norm = x.abs().sum(axis, keepdim=True) if p == 1 else (x * x).sum(axis, keepdim=True).sqrt()
    return (norm == 0).where(0, x / norm).cast(x.dtype)  # a zero vector stays zero


@op("MeanVarianceNormalization")
def mvn(ctx: NodeCtx, a: Value) -> Tensor:
    x = ctx.t(a)
    axes = tuple(axis_of(int(v), x.ndim, ctx) for v in (ctx.attr("axes") or [0, 2, 3]))
    m = x.mean(axes, keepdim=True)
    var = (x * x).mean(axes, keepdim=True) - m * m
    return ((x - m) / (var.sqrt() + 1e-9)).cast(x.dtype)


@op("LRN")
def lrn(ctx: NodeCtx, a: Value) -> Tensor:
    x = ctx.t(a)
    size = int(ctx.attr("size"))
    alpha, beta, bias = float(ctx.attr("alpha", 1e-4)), float(ctx.attr("beta", 0.75)), float(ctx.attr("bias", 1.0))
    c = x.shape[1]
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = (x * x).pad([None, (before, after)] + [None] * (x.ndim - 2))
    total = sum(sq.shrink(tuple((i, i + c) if d == 1 else None for d in range(x.ndim))) for i in range(size))
    assert isinstance(total, Tensor)
    return (x / (bias + alpha / size * total).pow(beta)).cast(x.dtype)


# ---- recurrent layers ----
def _activation(name: str, alpha: float | None, beta: float | None) -> Callable[[Tensor], Tensor]:
    n = name.lower()
    if n == "tanh": return lambda t: t.tanh()
    if n == "sigmoid": return lambda t: t.sigmoid()
    if n == "relu": return lambda t: t.relu()
    if n == "affine": return lambda t: t * (alpha if alpha is not None else 1.0) + (beta or 0.0)
    if n == "leakyrelu": return lambda t: (t < 0).where(t * (alpha if alpha is not None else 0.01), t)
    if n == "thresholdedrelu": return lambda t: (t > (alpha if alpha is not None else 1.0)).where(t, 0)
    if n == "scaledtanh": return lambda t: (alpha if alpha is not None else 1.0) * (t * (beta or 1.0)).tanh()
    if n == "hardsigmoid":
        return lambda t: (t * (alpha if alpha is not None else 0.2) + (beta if beta is not None else 0.5)).clip(0, 1)
    if n == "elu": return lambda t: (t < 0).where((alpha if alpha is not None else 1.0) * (t.exp() - 1), t)
    if n == "softsign": return lambda t: t / (1 + t.abs())
    if n == "softplus": return lambda t: (1 + t.exp()).log()
    raise NotImplementedError(f"RNN activation {name!r} is not supported")


def _activations(ctx: NodeCtx, defaults: list[str], num_dir: int) -> list[list[Callable[[Tensor], Tensor]]]:
    names = ctx.attr("activations") or defaults * num_dir
    alphas = list(ctx.attr("activation_alpha") or [])
    betas = list(ctx.attr("activation_beta") or [])
    fns = [_activation(nm, alphas[i] if i < len(alphas) else None, betas[i] if i < len(betas) else None)
           for i, nm in enumerate(names)]
    k = len(defaults)
    if len(fns) == k and num_dir == 2:
        fns = fns * 2
    return [fns[d * k:(d + 1) * k] for d in range(num_dir)]


@op("RNN", "GRU", "LSTM")
def recurrent(ctx: NodeCtx, X: Value, W: Value, R: Value, B: Value = None, seq_lens: Value = None,
              h0: Value = None, c0: Value = None, P: Value = None) -> tuple[Tensor, ...]:
    kind = ctx.op
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[kind]
    x, w, r = ctx.t(X), ctx.t(W), ctx.t(R)
    layout = int(ctx.attr("layout", 0))
    if layout:
        x = x.transpose(0, 1)  # (seq, batch, input)
    seq, batch = x.shape[0], x.shape[1]
    num_dir = w.shape[0]
    hidden = int(ctx.attr("hidden_size") or r.shape[-1])
    direction = ctx.attr("direction", "forward")
    clip = ctx.attr("clip")
    defaults = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}[kind]
    acts = _activations(ctx, defaults, num_dir)
    b = ctx.t(B) if B is not None else Tensor.zeros(num_dir, 2 * gates * hidden, dtype=x.dtype, device=x.device)
    h_init = ctx.t(h0) if h0 is not None else None
    c_init = ctx.t(c0) if c0 is not None else None
    if layout and h_init is not None:
        h_init = h_init.transpose(0, 1)
    if layout and c_init is not None:
        c_init = c_init.transpose(0, 1)
    p = ctx.t(P) if P is not None else None
    lens = ctx.t(seq_lens).cast(dtypes.int64) if seq_lens is not None else None
    ys, hs, cs = [], [], []
    for d in range(num_dir):
        reverse = direction == "reverse" or (direction == "bidirectional" and d == 1)
        xd = x
        if reverse:
            xd = _reverse_seq(x, lens)
        wd, rd, bd = w[d], r[d], b[d]
        wb, rb = bd[:gates * hidden], bd[gates * hidden:]
        xw = xd.matmul(wd.transpose(0, 1)) + wb  # (seq, batch, gates*hidden), all steps at once
        h = h_init[d] if h_init is not None else Tensor.zeros(batch, hidden, dtype=x.dtype, device=x.device)
        c = c_init[d] if c_init is not None else Tensor.zeros(batch, hidden, dtype=x.dtype, device=x.device)
        f = acts[d]
        outs = []
        for t in range(seq):
            hr = h.matmul(rd.transpose(0, 1))
            if kind == "RNN":
                pre = _clip(xw[t] + hr + rb, clip)
                h_new, c_new = f[0](pre), c
            elif kind == "GRU":
                xz, xr, xh = (xw[t][:, i * hidden:(i + 1) * hidden] for i in range(3))
                hz, hr_, hh = (hr[:, i * hidden:(i + 1) * hidden] for i in range(3))
                rz, rr, rh = (rb[i * hidden:(i + 1) * hidden] for i in range(3))
                z = f[0](_clip(xz + hz + rz, clip))
                rg = f[0](_clip(xr + hr_ + rr, clip))
                if ctx.attr("linear_before_reset", 0):
                    hc = f[1](_clip(xh + rg * (hh + rh), clip))
                else:
                    hc = f[1](_clip(xh + (rg * h).matmul(rd[2 * hidden:].transpose(0, 1)) + rh, clip))
                h_new, c_new = (1 - z) * hc + z * h, c
            else:
                g = xw[t] + hr + rb
                gi, go, gf, gc = (g[:, i * hidden:(i + 1) * hidden] for i in range(4))
                if p is not None:
                    pi, pf = p[d][:hidden], p[d][2 * hidden:3 * hidden]  # peepholes in i, o, f order
                    gi, gf = gi + pi * c, gf + pf * c
                i_ = f[0](_clip(gi, clip))
                f_ = 1 - i_ if ctx.attr("input_forget", 0) else f[0](_clip(gf, clip))
                c_new = f_ * c + i_ * f[1](_clip(gc, clip))
                if p is not None:
                    go = go + p[d][hidden:2 * hidden] * c_new
                o_ = f[0](_clip(go, clip))
                h_new = o_ * f[2](c_new)
            if lens is not None:
                valid = (lens > t).reshape(batch, 1)
                h = valid.where(h_new, h)
                c = valid.where(c_new, c)
                outs.append(valid.where(h_new, 0))
            else:
                h, c = h_new, c_new
                outs.append(h_new)
        y = Tensor.stack(*outs, dim=0) if outs else Tensor.zeros(0, batch, hidden, dtype=x.dtype, device=x.device)
        if reverse:
            y = _reverse_seq(y, lens)
        ys.append(y)
        hs.append(h)
        cs.append(c)
    Y = Tensor.stack(*ys, dim=1)  # (seq, num_dir, batch, hidden)
    Yh, Yc = Tensor.stack(*hs, dim=0), Tensor.stack(*cs, dim=0)
    if layout:
        Y, Yh, Yc = Y.permute(2, 0, 1, 3), Yh.transpose(0, 1), Yc.transpose(0, 1)
    return (Y, Yh, Yc) if kind == "LSTM" else (Y, Yh)


def _clip(t: Tensor, clip: float | None) -> Tensor:
    return t.clip(-clip, clip) if clip is not None else t


def _reverse_seq(x: Tensor, lens: Tensor | None) -> Tensor:
    """Reverse each batch entry's first lens[b] steps along axis 0 (everything, without lens)."""
    if lens is None:
        return x.flip(0)
    T, B = x.shape[0], x.shape[1]
    t = Tensor.arange(T, device=x.device, dtype=dtypes.int64).reshape(T, 1)
    lb = lens.reshape(1, B)
    src = (t < lb).where(lb - 1 - t, t)
    return x.gather(0, src.reshape((T, B) + (1,) * (x.ndim - 2)).expand(x.shape))


# ---- attention ----
def _safe_softmax(s: Tensor) -> Tensor:
    """softmax over the last axis whose fully masked rows (all -inf) give zeros instead of NaN."""
    m = s.max(-1, keepdim=True)
    m = m.isinf().where(0, m)
    e = (s - m).exp()
    tot = e.sum(-1, keepdim=True)
    return e / (tot == 0).where(1, tot)


@op("Attention")
def attention(ctx: NodeCtx, q_in: Value, k_in: Value, v_in: Value, mask_in: Value = None, past_k: Value = None,
              past_v: Value = None, nonpad: Value = None) -> tuple[Tensor, ...]:
    q, k, v = ctx.t(q_in), ctx.t(k_in), ctx.t(v_in)
    three_d = q.ndim == 3
    if three_d:
        qh, kvh = int(ctx.attr("q_num_heads")), int(ctx.attr("kv_num_heads"))
        b = q.shape[0]
        q = q.reshape(b, q.shape[1], qh, -1).permute(0, 2, 1, 3)
        k = k.reshape(b, k.shape[1], kvh, -1).permute(0, 2, 1, 3)
        v = v.reshape(b, v.shape[1], kvh, -1).permute(0, 2, 1, 3)
    dt = q.dtype
    scale = ctx.attr("scale")
    scale = 1 / math.sqrt(q.shape[3]) if scale is None else float(scale)
    past_len = 0
    if past_k is not None:
        pk = ctx.t(past_k)
        past_len = pk.shape[2]
        k = pk.cat(k, dim=2)
    if past_v is not None:
        v = ctx.t(past_v).cat(v, dim=2)
    present_k, present_v = k, v
    sq, skv = q.shape[2], k.shape[2]
    compute = dt if dt.is_float and dt.itemsize >= 4 else dtypes.float32
    bias = Tensor.zeros(sq, skv, dtype=compute, device=q.device)
    mask = ctx.t(mask_in) if mask_in is not None else None
    if mask is not None and mask.shape[-1] < skv:
        padv: Any = False if mask.dtype == dtypes.bool else -math.inf
        mask = mask.pad([None] * (mask.ndim - 1) + [(0, skv - mask.shape[-1])], value=padv) \
            if mask.dtype != dtypes.bool else mask.pad([None] * (mask.ndim - 1) + [(0, skv - mask.shape[-1])])
    if mask is not None:
        bias = bias + (mask.where(0.0, -math.inf).cast(compute) if mask.dtype == dtypes.bool else mask.cast(compute))
    nonpad_t = ctx.t(nonpad).cast(dtypes.int64) if nonpad is not None else None
    i_idx = Tensor.arange(sq, device=q.device, dtype=dtypes.int64).reshape(sq, 1)
    j_idx = Tensor.arange(skv, device=q.device, dtype=dtypes.int64).reshape(1, skv)
    if past_k is None and nonpad_t is not None:
        offset: Any = (nonpad_t - sq).reshape(-1, 1, 1, 1)
    else:
        offset = past_len
    if ctx.attr("is_causal", 0):
        bias = bias + (j_idx <= i_idx + offset).where(0.0, -math.inf).cast(compute)
    left, right = int(ctx.attr("left_window_size", -1)), int(ctx.attr("right_window_size", -1))
    if left >= 0 or right >= 0:
        diff = i_idx + offset - j_idx
        allowed = Tensor.ones(diff.shape, dtype=dtypes.bool, device=q.device)
        if left >= 0:
            allowed = allowed & (diff <= left)
        if right >= 0:
            allowed = allowed & (-diff <= right)
        bias = bias + allowed.where(0.0, -math.inf).cast(compute)
    if nonpad_t is not None:
        keep = j_idx.reshape(1, 1, 1, skv) < nonpad_t.reshape(-1, 1, 1, 1)
        bias = bias + keep.where(0.0, -math.inf).cast(compute)
    qh_n, kh_n = q.shape[1], k.shape[1]
    if qh_n != kh_n and qh_n % kh_n == 0:
        k, v = k.repeat_interleave(qh_n // kh_n, 1), v.repeat_interleave(qh_n // kh_n, 1)
    rs = math.sqrt(scale)
    qk = (q * rs).matmul((k * rs).transpose(-1, -2)).cast(compute)
    softcap = float(ctx.attr("softcap", 0.0))
    if softcap > 0:
        qk = (qk / softcap).tanh() * softcap
    mode = int(ctx.attr("qk_matmul_output_mode", 0))
    with_bias = qk + bias
    prec = ctx.attr("softmax_precision")
    sm_in = with_bias.cast(ctx.dtype_of_type(int(prec))) if prec else with_bias
    probs = _safe_softmax(sm_in)
    all_masked = bias.max(-1, keepdim=True).isinf() & (bias.max(-1, keepdim=True) < 0)
    probs = all_masked.where(0.0, probs)
    qk_out = {2: with_bias, 3: probs}.get(mode, qk)
    y = probs.cast(dt).matmul(v)
    if three_d:
        y = y.permute(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
    return y.cast(dt), present_k, present_v, qk_out.cast(dt)


@op("RotaryEmbedding")
def rotary_embedding(ctx: NodeCtx, x_in: Value, cos_in: Value, sin_in: Value, pos: Value = None) -> Tensor:
    x = ctx.t(x_in)
    cos, sin = ctx.t(cos_in), ctx.t(sin_in)
    shape = x.shape
    if x.ndim == 4:
        x = x.permute(0, 2, 1, 3)  # (batch, seq, heads, head)
    else:
        nh = int(ctx.attr("num_heads", 0))
        x = x.reshape(shape[0], shape[1], nh, -1)
    head = x.shape[3]
    rd = int(ctx.attr("rotary_embedding_dim", 0)) or head
    if pos is not None:
        pid = ctx.t(pos).cast(dtypes.int64)
        cos, sin = cos[pid], sin[pid]
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    xr, xk = x[..., :rd], x[..., rd:]
    if ctx.attr("interleaved", 0):
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
    else:
        x1, x2 = xr[..., :rd // 2], xr[..., rd // 2:]
    real = cos * x1 - sin * x2
    imag = sin * x1 + cos * x2
    if ctx.attr("interleaved", 0):
        rot = real.unsqueeze(-1).cat(imag.unsqueeze(-1), dim=-1).reshape(xr.shape)
    else:
        rot = real.cat(imag, dim=-1)
    out = rot.cat(xk, dim=-1) if rd < head else rot
    out = out.reshape(shape) if len(shape) == 3 else out.permute(0, 2, 1, 3)
    return out.cast(x.dtype)


# ---- losses ----
def _nll(ctx: NodeCtx, logp: Tensor, target: Tensor, weight: Tensor | None) -> Tensor:
    ignore = ctx.attr("ignore_index")
    tgt = target.cast(dtypes.int64)
    valid = (tgt != ignore) if ignore is not None else None
    safe = valid.where(tgt, 0) if valid is not None else tgt
    picked = logp.gather(1, safe.unsqueeze(1)).squeeze(1)
    w = weight[safe] if weight is not None else Tensor.ones(safe.shape, dtype=logp.dtype, device=logp.device)
    if valid is not None:
        w = valid.where(w, 0)
    loss = -picked * w
    red = ctx.attr("reduction", "mean")
    if red == "none":
        return loss
    if red == "sum":
        return loss.sum()
    return loss.sum() / w.sum()


@op("NegativeLogLikelihoodLoss")
def nll_loss(ctx: NodeCtx, a: Value, target: Value, weight: Value = None) -> Tensor:
    x = ctx.t(a)
    return _nll(ctx, x, ctx.t(target), ctx.t(weight) if weight is not None else None).cast(x.dtype)


@op("SoftmaxCrossEntropyLoss")
def sce_loss(ctx: NodeCtx, a: Value, target: Value, weight: Value = None) -> tuple[Tensor, Tensor]:
    x = ctx.t(a)
    logp = x.log_softmax(1)
    loss = _nll(ctx, logp, ctx.t(target), ctx.t(weight) if weight is not None else None)
    return loss.cast(x.dtype), logp

