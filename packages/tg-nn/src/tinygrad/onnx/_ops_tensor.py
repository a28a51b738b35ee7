"""Shape, movement, indexing and creation ops, Resize, and the random ops."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from tinygrad import Tensor, dtypes
from tinygrad.onnx._base import NodeCtx, Value, axis_of, op

# ---- constants and shapes ----


@op("Constant")
def constant(ctx: NodeCtx) -> Value:
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints", "value_string", "value_strings"):
        if key in ctx.attrs:
            v = ctx.attrs[key]
            if key in ("value_float", "value_floats"):
                return np.asarray(v, dtype=np.float32)
            if key in ("value_int", "value_ints"):
                return np.asarray(v, dtype=np.int64)
            if key in ("value_string", "value_strings"):
                return np.asarray(v, dtype=object)
            return v
    raise NotImplementedError(f"{ctx}: Constant without a dense value (sparse_value) is not supported")


@op("Identity")
def identity(ctx: NodeCtx, a: Value) -> Value:
    return a


@op("Shape")
def shape(ctx: NodeCtx, a: Value) -> np.ndarray:
    s = a.shape if isinstance(a, (Tensor, np.ndarray)) else ctx.t(a).shape
    n = len(s)
    start, end = int(ctx.attr("start", 0)), ctx.attr("end")
    start = min(max(start + n if start < 0 else start, 0), n)
    stop = n if end is None else min(max(int(end) + n if int(end) < 0 else int(end), 0), n)
    return np.asarray(s[start:stop], dtype=np.int64)


@op("Size")
def size(ctx: NodeCtx, a: Value) -> np.ndarray:
    s = a.shape if isinstance(a, (Tensor, np.ndarray)) else ctx.t(a).shape
    return np.asarray(math.prod(s), dtype=np.int64)


@op("ConstantOfShape")
def constant_of_shape(ctx: NodeCtx, shape_in: Value) -> Value:
    v = ctx.attr("value")
    shp = ctx.shape_arg(shape_in, v.dtype.itemsize if isinstance(v, (np.ndarray, Tensor)) else 4)
    if v is None:
        return Tensor.zeros(shp, dtype=dtypes.float32)
    t = ctx.t(v)
    return t.reshape(()).expand(shp) if shp else t.reshape(())


@op("Reshape")
def reshape(ctx: NodeCtx, a: Value, shape_in: Value = None) -> Tensor:
    x = ctx.t(a)
    target = ctx.ints(shape_in) if shape_in is not None else list(ctx.attr("shape", []))
    return x.reshape(resolve_reshape(ctx, x.shape, target, bool(ctx.attr("allowzero", 0))))


def resolve_reshape(ctx: NodeCtx, src: tuple[int, ...], target: list[int], allowzero: bool) -> tuple[int, ...]:
    out = [src[i] if d == 0 and not allowzero and i < len(src) else d for i, d in enumerate(target)]
    if out.count(-1) > 1:
        raise ctx.fail(f"shape {target} has more than one -1")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        total = math.prod(src)
        if known == 0 or total % known:
            raise ctx.fail(f"cannot reshape {src} to {target}")
        out[out.index(-1)] = total // known
    if math.prod(out) != math.prod(src) or any(d < 0 for d in out):
        raise ctx.fail(f"cannot reshape {src} to {target}")
    return tuple(out)


@op("Flatten")
def flatten(ctx: NodeCtx, a: Value) -> Tensor:
    x = ctx.t(a)
    axis = int(ctx.attr("axis", 1))
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis <= x.ndim:
        raise ctx.fail(f"axis {ctx.attr('axis')} is out of range for rank {x.ndim}")
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


@op("Squeeze")
def squeeze(ctx: NodeCtx, a: Value, axes_in: Value = None) -> Tensor:
    x = ctx.t(a)
    axes = ctx.ints(axes_in) if axes_in is not None else ctx.attr("axes")
    if axes is None:
        return x.reshape(tuple(s for s in x.shape if s != 1))
    ax = {axis_of(int(v), x.ndim, ctx) for v in axes}
    for v in ax:
        if x.shape[v] != 1:
            raise ctx.fail(f"cannot squeeze axis {v} of size {x.shape[v]} (shape {x.shape})")
    return x.reshape(tuple(s for i, s in enumerate(x.shape) if i not in ax))


@op("Unsqueeze")
def unsqueeze(ctx: NodeCtx, a: Value, axes_in: Value = None) -> Tensor:
    x = ctx.t(a)
    axes = ctx.ints(axes_in) if axes_in is not None else list(ctx.attr("axes", []))
    return x.reshape(unsqueeze_shape(ctx, x.shape, axes))


def unsqueeze_shape(ctx: NodeCtx, shape: tuple[int, ...], axes: list[int]) -> tuple[int, ...]:
    n = len(shape) + len(axes)
    ax = sorted(axis_of(int(v), n, ctx) for v in axes)
    if len(set(ax)) != len(ax):
        raise ctx.fail(f"repeated axes {axes}")
    it = iter(shape)
    return tuple(1 if i in ax else next(it) for i in range(n))


@op("Transpose")
def transpose(ctx: NodeCtx, a: Value) -> Tensor:
    x = ctx.t(a)
    perm = ctx.attr("perm") or list(range(x.ndim))[::-1]
    return x.permute(tuple(int(p) for p in perm))


def broadcast_shape(ctx: NodeCtx, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise ctx.fail(f"shapes {a} and {b} do not broadcast")
        out.append(y if x == 1 else x)
    return tuple(out)


@op("Expand")
def expand(ctx: NodeCtx, a: Value, shape_in: Value) -> Tensor:
    x = ctx.t(a)
    shp = broadcast_shape(ctx, x.shape, tuple(ctx.ints(shape_in)))
    ctx.check_shape(shp, x.dtype.itemsize)
    return x.reshape((1,) * (len(shp) - x.ndim) + x.shape).expand(shp)


@op("Tile")
def tile(ctx: NodeCtx, a: Value, repeats: Value) -> Tensor:
    x = ctx.t(a)
    reps = ctx.ints(repeats)
    if len(reps) != x.ndim:
        raise ctx.fail(f"{len(reps)} repeats for rank {x.ndim}")
    ctx.check_shape([s * r for s, r in zip(x.shape, reps)], x.dtype.itemsize)
    return x.repeat(*reps) if x.ndim else x


@op("Concat")
def concat(ctx: NodeCtx, *args: Value) -> Tensor:
    ts = [ctx.t(a) for a in args if a is not None]
    axis = axis_of(int(ctx.attr("axis", 0)), ts[0].ndim, ctx)
    ts = [t for t in ts if t.shape[axis] != 0] or ts[:1]
    d = ts[0].dtype
    return ts[0].cat(*[t.cast(d) for t in ts[1:]], dim=axis) if len(ts) > 1 else ts[0]


@op("Split")
def split(ctx: NodeCtx, a: Value, split_in: Value = None) -> tuple[Tensor, ...]:
    x = ctx.t(a)
    axis = axis_of(int(ctx.attr("axis", 0)), x.ndim, ctx)
    dim = x.shape[axis]
    sizes = ctx.ints(split_in) if split_in is not None else ctx.attr("split")
    n = int(ctx.attr("num_outputs", 0)) or len(ctx.outputs)
    if not sizes:
        chunk = -(-dim // n)
        sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(n)]
    if sum(sizes) != dim:
        raise ctx.fail(f"split sizes {sizes} do not add up to {dim}")
    out, start = [], 0
    for s in sizes:
        out.append(x.shrink(tuple((start, start + s) if i == axis else None for i in range(x.ndim))))
        start += s
    return tuple(out)


@op("Slice")
def slice_(ctx: NodeCtx, a: Value, starts: Value = None, ends: Value = None, axes: Value = None,
           steps: Value = None) -> Tensor:
    x = ctx.t(a)
    if ctx.opset < 10 and starts is None:
        st, en, ax, sp = ctx.attr("starts"), ctx.attr("ends"), ctx.attr("axes"), None
    else:
        st, en = ctx.ints(starts), ctx.ints(ends)
        ax = ctx.ints(axes) if axes is not None else None
        sp = ctx.ints(steps) if steps is not None else None
    ax = list(range(len(st))) if ax is None else ax
    sp = [1] * len(st) if sp is None else sp
    idx: list[Any] = [slice(None)] * x.ndim
    for s, e, a_, p in zip(st, en, ax, sp):
        if p == 0:
            raise ctx.fail("slice step 0")
        idx[axis_of(int(a_), x.ndim, ctx)] = slice(int(s), int(e), int(p))
    return slice_tensor(x, idx)


def slice_tensor(x: Tensor, idx: list[Any]) -> Tensor:
    """Basic slicing with numpy's clamping, done as shrink + flip + strided reshape (no gathers)."""
    for d, sl in enumerate(idx):
        if not isinstance(sl, slice) or sl == slice(None):
            continue
        start, stop, step = sl.indices(x.shape[d])
        n = len(range(start, stop, step))
        if n == 0:
            x = x.shrink(tuple((0, 0) if i == d else None for i in range(x.ndim)))
            continue
        last = start + (n - 1) * step
        lo, hi = min(start, last), max(start, last) + 1
        x = x.shrink(tuple((lo, hi) if i == d else None for i in range(x.ndim)))
        if step < 0:
            x = x.flip(d)
        k = abs(step)
        if k > 1:
            # every k-th element: pad to n*k, split the axis into (n, k) and keep the first of each k
            length = x.shape[d]
            x = x.pad(tuple((0, n * k - length) if i == d else None for i in range(x.ndim)))
            x = x.reshape(x.shape[:d] + (n, k) + x.shape[d + 1:])
            x = x.shrink(tuple((0, 1) if i == d + 1 else None for i in range(x.ndim))).reshape(
                x.shape[:d] + (n,) + x.shape[d + 2:])
    return x


# ---- indexing ----
def _norm_index(idx: Tensor, n: int) -> Tensor:
    idx = idx.cast(dtypes.int64) if idx.dtype != dtypes.int64 and idx.dtype != dtypes.int32 else idx
    return (idx < 0).where(idx + n, idx)


@op("Gather")
def gather(ctx: NodeCtx, a: Value, indices: Value) -> Tensor:
    x = ctx.t(a)
    axis = axis_of(int(ctx.attr("axis", 0)), x.ndim, ctx)
    n = x.shape[axis]
    if isinstance(indices, np.ndarray) and indices.ndim == 0:
        i = int(indices)
        if not -n <= i < n:
            raise ctx.fail(f"index {i} is out of range for axis {axis} of size {n}")
        sl = tuple((i % n, i % n + 1) if d == axis else None for d in range(x.ndim))
        return x.shrink(sl).reshape(x.shape[:axis] + x.shape[axis + 1:])
    idx = _norm_index(ctx.t(indices), n)
    if idx.numel() == 0:
        return Tensor.zeros(x.shape[:axis] + idx.shape + x.shape[axis + 1:], dtype=x.dtype)
    return x[(slice(None),) * axis + (idx,)]


@op("GatherElements")
def gather_elements(ctx: NodeCtx, a: Value, indices: Value) -> Tensor:
    x = ctx.t(a)
    axis = axis_of(int(ctx.attr("axis", 0)), x.ndim, ctx)
    return x.gather(axis, _norm_index(ctx.t(indices), x.shape[axis]))


@op("GatherND")
def gather_nd(ctx: NodeCtx, a: Value, indices: Value) -> Tensor:
    x, idx = ctx.t(a), ctx.t(indices)
    b = int(ctx.attr("batch_dims", 0))
    k = idx.shape[-1]
    batch = x.shape[:b]
    nb = math.prod(batch)
    dims = x.shape[b:b + k]
    rest = x.shape[b + k:]
    out_shape = idx.shape[:-1] + rest
    lin = _linear_index(idx, dims)  # (..., ) over the k indexed dims
    xr = x.reshape((nb, math.prod(dims)) + rest)
    lin = lin.reshape(nb, -1) if nb else lin.reshape(0, -1)
    bidx = Tensor.arange(nb, device=x.device).reshape(nb, 1).expand(lin.shape)
    return xr[bidx, lin].reshape(out_shape)


def _linear_index(idx: Tensor, dims: tuple[int, ...]) -> Tensor:
    idx = idx.cast(dtypes.int64)
    lin: Tensor | None = None
    for j, d in enumerate(dims):
        c = idx[..., j]
        c = (c < 0).where(c + d, c)
        lin = c if lin is None else lin * d + c
    return lin if lin is not None else idx.sum(-1) * 0


_REDUCTIONS = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


@op("Scatter", "ScatterElements")
def scatter_elements(ctx: NodeCtx, a: Value, indices: Value, updates: Value) -> Tensor:
    x, u = ctx.t(a), ctx.t(updates)
    axis = axis_of(int(ctx.attr("axis", 0)), x.ndim, ctx)
    idx = _norm_index(ctx.t(indices), x.shape[axis])
    red = ctx.attr("reduction", "none")
    if red == "none":
        return x.scatter(axis, idx, u.cast(x.dtype))
    return x.scatter_reduce(axis, idx, u.cast(x.dtype), _REDUCTIONS[red], include_self=True)


@op("ScatterND")
def scatter_nd(ctx: NodeCtx, a: Value, indices: Value, updates: Value) -> Tensor:
    x, idx, u = ctx.t(a), ctx.t(indices), ctx.t(updates)
    k = idx.shape[-1]
    dims, rest = x.shape[:k], x.shape[k:]
    lin = _linear_index(idx, dims).reshape(-1)
    m = lin.shape[0]
    xr = x.reshape((math.prod(dims),) + rest)
    ur = u.reshape((m,) + rest).cast(x.dtype)
    full = lin.reshape((m,) + (1,) * len(rest)).expand((m,) + rest)
    red = ctx.attr("reduction", "none")
    if red == "none":
        out = xr.scatter(0, full, ur)
    else:
        out = xr.scatter_reduce(0, full, ur, _REDUCTIONS[red], include_self=True)
    return out.reshape(x.shape)


@op("TensorScatter")
def tensor_scatter(ctx: NodeCtx, past: Value, update: Value, write_indices: Value = None) -> Tensor:
    """Write `update` into the cache `past` along `axis`, at a per-batch offset (linear or circular)."""
    x, u = ctx.t(past), ctx.t(update)
    axis = axis_of(int(ctx.attr("axis", -2)), x.ndim, ctx)
    circular = ctx.attr("mode", "linear") == "circular"
    batch = x.shape[0]
    max_len, seq = x.shape[axis], u.shape[axis]
    wi = ctx.t(write_indices).cast(dtypes.int64) if write_indices is not None else \
        Tensor.zeros(batch, dtype=dtypes.int64)
    shape = [1] * x.ndim
    shape[0] = batch
    start = wi.reshape(shape)
    pos_shape = [1] * x.ndim
    pos_shape[axis] = max_len
    pos = Tensor.arange(max_len, device=x.device, dtype=dtypes.int64).reshape(pos_shape)
    if seq == 0:
        return x
    # for each cache position, the update step written there (if any): position - start, wrapped when circular
    rel = pos - start
    if circular:
        rel = rel % max_len
    inside = (rel >= 0) & (rel < seq)
    idx = inside.where(rel, 0).expand(tuple(max_len if i == axis else s for i, s in enumerate(u.shape)))
    return inside.where(u.gather(axis, idx), x)


# ---- padding ----
@op("Pad")
def pad(ctx: NodeCtx, a: Value, pads_in: Value = None, value_in: Value = None, axes_in: Value = None) -> Tensor:
    x = ctx.t(a)
    mode = ctx.attr("mode", "constant")
    pads = ctx.ints(pads_in) if pads_in is not None else list(ctx.attr("pads", []))
    value: float = float(ctx.attr("value", 0.0))
    if value_in is not None and not (isinstance(value_in, np.ndarray) and value_in.size == 0):
        value = ctx.host(value_in).reshape(-1)[0].item()
    axes = ctx.ints(axes_in) if axes_in is not None else list(range(x.ndim))
    axes = [axis_of(v, x.ndim, ctx) for v in axes]
    n = len(axes)
    if len(pads) != 2 * n:
        raise ctx.fail(f"{len(pads)} pads for {n} axes")
    pairs: list[tuple[int, int]] = [(0, 0)] * x.ndim
    for i, ax in enumerate(axes):
        pairs[ax] = (pads[i], pads[i + n])
    ctx.check_shape([s + b + e for s, (b, e) in zip(x.shape, pairs)], x.dtype.itemsize)
    tg_mode = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}.get(mode)
    if tg_mode is None:
        raise ctx.fail(f"unknown pad mode {mode!r}")
    if tg_mode == "constant":
        return x.pad(pairs, value=value) if value else x.pad(pairs)
    if tg_mode == "circular":
        return _pad_wrap(x, pairs)
    return x.pad(pairs, mode=tg_mode)


def _pad_wrap(x: Tensor, pairs: list[tuple[int, int]]) -> Tensor:
    # wrap padding may exceed the axis length (the ONNX test does): repeat the axis enough times, then cut
    for d, (b, e) in enumerate(pairs):
        if b == 0 and e == 0:
            continue
        s = x.shape[d]
        if b < 0 or e < 0:
            x = x.pad(tuple((min(b, 0), min(e, 0)) if i == d else None for i in range(x.ndim)))
            b, e, s = max(b, 0), max(e, 0), x.shape[d]
        reps = 1 + 2 * (-(-max(b, e) // s))
        tiled = x.repeat(*[reps if i == d else 1 for i in range(x.ndim)])
        off = (reps // 2) * s - b
        x = tiled.shrink(tuple((off, off + s + b + e) if i == d else None for i in range(x.ndim)))
    return x


@op("CenterCropPad")
def center_crop_pad(ctx: NodeCtx, a: Value, shape_in: Value) -> Tensor:
    x = ctx.t(a)
    target = ctx.ints(shape_in)
    axes = ctx.attr("axes") or list(range(x.ndim))
    if len(target) != len(axes):
        raise ctx.fail(f"shape {target} has {len(target)} values for {len(axes)} axes")
    out_shape = list(x.shape)
    for ax, t in zip(axes, target):
        out_shape[axis_of(int(ax), x.ndim, ctx)] = t
    ctx.check_shape(out_shape, x.dtype.itemsize)
    for ax, t in zip(axes, target):
        d = axis_of(int(ax), x.ndim, ctx)
        s = x.shape[d]
        if t < s:
            start = (s - t) // 2
            x = x.shrink(tuple((start, start + t) if i == d else None for i in range(x.ndim)))
        elif t > s:
            before = (t - s) // 2
            x = x.pad(tuple((before, t - s - before) if i == d else None for i in range(x.ndim)))
    return x


# ---- creation ----
@op("Range")
def range_(ctx: NodeCtx, start: Value, limit: Value, delta: Value) -> Value:
    """On the host: its length is a value (and it is nearly always shape arithmetic on constants)."""
    s, lim, d = (ctx.host(v).reshape(-1)[0] for v in (start, limit, delta))
    span = (float(lim) - float(s)) / float(d) if float(d) else math.nan
    if not math.isfinite(span):
        raise ctx.fail(f"start {s}, limit {lim} and delta {d} do not describe a finite range")
    n = max(math.ceil(span), 0)
    ctx.check_shape((n,), 8)
    steps = np.arange(n, dtype=np.int64 if s.dtype.kind in "iu" else np.float64)
    out = (s.astype(steps.dtype) + steps * d.astype(steps.dtype)).astype(s.dtype)
    if isinstance(start, Tensor) and start.dtype.name != out.dtype.name:
        return ctx.t(out.astype(np.float32)).cast(start.dtype)  # bfloat16 and friends read back as float32
    return out


@op("EyeLike")
def eye_like(ctx: NodeCtx, a: Value) -> Tensor:
    x = ctx.t(a)
    n, m = x.shape
    k = int(ctx.attr("k", 0))
    d = ctx.dtype_of_type(int(ctx.attr("dtype"))) if ctx.has("dtype") else x.dtype
    r = Tensor.arange(n, device=x.device).reshape(n, 1)
    c = Tensor.arange(m, device=x.device).reshape(1, m)
    return (c - r == k).cast(d)


@op("OneHot")
def one_hot(ctx: NodeCtx, indices: Value, depth: Value, values: Value) -> Tensor:
    idx = ctx.t(indices)
    dep = int(ctx.host(depth).reshape(-1)[0])
    vals = ctx.t(values)
    if vals.numel() != 2:
        raise ctx.fail(f"values must hold 2 entries (off, on), got shape {vals.shape}")
    axis = int(ctx.attr("axis", -1))
    nd = idx.ndim + 1
    axis = axis_of(axis, nd, ctx)
    ctx.check_shape((*idx.shape, dep), vals.dtype.itemsize)
    i = idx.cast(dtypes.int64)  # float indices truncate, as ONNX asks
    i = (i < 0).where(i + dep, i)
    i = i.unsqueeze(axis)
    shp = [1] * nd
    shp[axis] = dep
    ar = Tensor.arange(dep, device=i.device, dtype=dtypes.int64).reshape(shp)
    off, on = vals[0], vals[1]
    return (i == ar).where(on, off)


@op("NonZero")
def nonzero(ctx: NodeCtx, a: Value) -> np.ndarray:
    arr = ctx.host(a)
    return np.asarray(np.nonzero(arr if arr.ndim else arr.reshape(1)), dtype=np.int64)


@op("Trilu")
def trilu(ctx: NodeCtx, a: Value, k_in: Value = None) -> Tensor:
    x = ctx.t(a)
    k = int(ctx.host(k_in).reshape(-1)[0]) if k_in is not None else 0
    n, m = x.shape[-2], x.shape[-1]
    r = Tensor.arange(n, device=x.device).reshape(n, 1)
    c = Tensor.arange(m, device=x.device).reshape(1, m)
    keep = (c - r >= k) if ctx.attr("upper", 1) else (c - r <= k)
    return keep.where(x, Tensor.zeros((), dtype=x.dtype, device=x.device))


# ---- scans, sorting ----
def _cum(ctx: NodeCtx, a: Value, axis_in: Value, prod: bool) -> Tensor:
    x = ctx.t(a)
    axis = axis_of(int(ctx.host(axis_in).reshape(-1)[0]), x.ndim, ctx)
    rev = bool(ctx.attr("reverse", 0))
    if rev:
        x = x.flip(axis)
    if ctx.attr("exclusive", 0):
        n = x.shape[axis]
        pad = tuple((1, 0) if i == axis else None for i in range(x.ndim))
        x = x.pad(pad, value=1 if prod else 0).shrink(
            tuple((0, n) if i == axis else None for i in range(x.ndim)))
    r = x.cumprod(axis) if prod else x.cumsum(axis)
    r = r.cast(x.dtype)
    return r.flip(axis) if rev else r


@op("CumSum")
def cumsum(ctx: NodeCtx, a: Value, axis_in: Value) -> Tensor:
    return _cum(ctx, a, axis_in, False)


@op("CumProd")
def cumprod(ctx: NodeCtx, a: Value, axis_in: Value) -> Tensor:
    return _cum(ctx, a, axis_in, True)


@op("TopK")
def topk(ctx: NodeCtx, a: Value, k_in: Value) -> tuple[Tensor, Tensor]:
    x = ctx.t(a)
    k = int(ctx.host(k_in).reshape(-1)[0])
    axis = axis_of(int(ctx.attr("axis", -1)), x.ndim, ctx)
    largest = bool(ctx.attr("largest", 1))
    if not 0 <= k <= x.shape[axis]:
        raise ctx.fail(f"k = {k} is out of range for axis {axis} of size {x.shape[axis]}")
    vals, idx = x.topk(k, axis, largest)
    return vals, idx.cast(dtypes.int64)


@op("Unique")
def unique(ctx: NodeCtx, a: Value) -> tuple[np.ndarray, ...]:
    """On the host: the number of unique values decides the output shape."""
    arr = ctx.host(a)
    axis = ctx.attr("axis")
    is_sorted = bool(ctx.attr("sorted", 1))
    if axis is None:
        flat = arr.reshape(-1)
        y, first, inverse, counts = np.unique(flat, return_index=True, return_inverse=True, return_counts=True)
    else:
        ax = axis_of(int(axis), arr.ndim, ctx)
        y, first, inverse, counts = np.unique(arr, axis=ax, return_index=True, return_inverse=True,
                                              return_counts=True)
    inverse = inverse.reshape(-1)
    if not is_sorted:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        y = np.take(y, order, axis=0 if axis is None else axis_of(int(axis), arr.ndim, ctx))
        first, counts, inverse = first[order], counts[order], rank[inverse]
    return (y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64))


@op("Einsum")
def einsum(ctx: NodeCtx, *args: Value) -> Tensor:
    ts = [ctx.t(a) for a in args]
    eq = str(ctx.attr("equation")).replace(" ", "")
    d = ts[0].dtype
    return Tensor.einsum(eq, *ts).cast(d)


# ---- rearrangements ----
@op("DepthToSpace")
def depth_to_space(ctx: NodeCtx, a: Value) -> Tensor:
    x = ctx.t(a)
    b = int(ctx.attr("blocksize"))
    n, c, h, w = x.shape
    if b < 1 or c % (b * b):
        raise ctx.fail(f"blocksize {b} does not divide the {c} channels into blocks of {b}x{b}")
    if ctx.attr("mode", "DCR") == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


@op("SpaceToDepth")
def space_to_depth(ctx: NodeCtx, a: Value) -> Tensor:
    x = ctx.t(a)
    b = int(ctx.attr("blocksize"))
    n, c, h, w = x.shape
    if b < 1 or h % b or w % b:
        raise ctx.fail(f"blocksize {b} does not divide the spatial size {h}x{w}")
    if ctx.attr("mode", "DCR") == "CRD":
        y = x.reshape(n, c, h // b, b, w // b, b).permute(0, 1, 3, 5, 2, 4)
        return y.reshape(n, c * b * b, h // b, w // b)
    y = x.reshape(n, c, h // b, b, w // b, b).permute(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


@op("Compress")
def compress(ctx: NodeCtx, a: Value, cond: Value) -> Tensor:
    x = ctx.t(a)
    keep = np.nonzero(ctx.host(cond).reshape(-1))[0]
    axis = ctx.attr("axis")
    if axis is None:
        x, ax = x.reshape(-1), 0
    else:
        ax = axis_of(int(axis), x.ndim, ctx)
    keep = keep[keep < x.shape[ax]]
    if keep.size == 0:
        return x.shrink(tuple((0, 0) if i == ax else None for i in range(x.ndim)))
    return x[(slice(None),) * ax + (Tensor(keep.astype(np.int32), device=x.device),)]


@op("ReverseSequence")
def reverse_sequence(ctx: NodeCtx, a: Value, lens: Value) -> Tensor:
    x = ctx.t(a)
    bax, tax = int(ctx.attr("batch_axis", 1)), int(ctx.attr("time_axis", 0))
    L = ctx.t(lens).cast(dtypes.int64)
    T, B = x.shape[tax], x.shape[bax]
    tshape, bshape = [1] * x.ndim, [1] * x.ndim
    tshape[tax], bshape[bax] = T, B
    t = Tensor.arange(T, device=x.device, dtype=dtypes.int64).reshape(tshape)
    lb = L.reshape(bshape)
    src = (t < lb).where(lb - 1 - t, t).expand(x.shape)
    return x.gather(tax, src)


@op("BitCast")
def bitcast(ctx: NodeCtx, a: Value) -> Tensor:
    x = ctx.t(a)
    d = ctx.dtype_of_type(int(ctx.attr("to")))
    if x.dtype == dtypes.bool:
        x = x.cast(dtypes.uint8)
    if d == dtypes.bool:
        return x.bitcast(dtypes.uint8) != 0
    return x.bitcast(d)


# ---- Resize ----
@op("Resize", "Upsample")
def resize(ctx: NodeCtx, a: Value, roi_in: Value = None, scales_in: Value = None, sizes_in: Value = None) -> Tensor:
    x = ctx.t(a)
    r = x.ndim
    if ctx.op == "Upsample" or (ctx.opset < 11 and ctx.op == "Resize"):
        # Upsample and Resize-10: (X, scales), asymmetric coordinates
        scales_in, roi_in = roi_in, None
        mode, ctm = ctx.attr("mode", "nearest"), "asymmetric"
        nearest = "floor" if ctx.op == "Upsample" or ctx.opset < 11 else "round_prefer_floor"
        if scales_in is None and ctx.has("scales"):
            scales_in = np.asarray(ctx.attr("scales"), dtype=np.float32)
    else:
        mode = ctx.attr("mode", "nearest")
        ctm = ctx.attr("coordinate_transformation_mode", "half_pixel")
        nearest = ctx.attr("nearest_mode", "round_prefer_floor")
    cubic_a = float(ctx.attr("cubic_coeff_a", -0.75))
    exclude = bool(ctx.attr("exclude_outside", 0))
    extrap = float(ctx.attr("extrapolation_value", 0.0))
    antialias = bool(ctx.attr("antialias", 0))
    policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
    axes = [axis_of(int(v), r, ctx) for v in ctx.attr("axes", [])] or list(range(r))
    roi_full = [0.0] * r + [1.0] * r
    if roi_in is not None and not (isinstance(roi_in, np.ndarray) and roi_in.size == 0):
        roi = [float(v) for v in ctx.host(roi_in).reshape(-1)]
        if roi:
            for i, d in enumerate(axes):
                roi_full[d], roi_full[r + d] = roi[i], roi[len(axes) + i]
    scales: list[float] = [1.0] * r
    sizes: list[int] = list(x.shape)
    have_scales = scales_in is not None and not (isinstance(scales_in, np.ndarray) and scales_in.size == 0)
    have_sizes = sizes_in is not None and not (isinstance(sizes_in, np.ndarray) and sizes_in.size == 0)
    if have_sizes:
        sz = ctx.ints(sizes_in)
        for i, d in enumerate(axes):
            sizes[d] = sz[i]
        scales = [sizes[i] / x.shape[i] if x.shape[i] else 1.0 for i in range(r)]
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            s = pick(scales[d] for d in axes)
            scales = [s if i in axes else 1.0 for i in range(r)]
            sizes = [int(s * x.shape[i] + 0.5) if i in axes else x.shape[i] for i in range(r)]
    elif have_scales:
        sc = [float(v) for v in ctx.host(scales_in).reshape(-1)]
        for i, d in enumerate(axes):
            scales[d] = sc[i]
        sizes = [math.floor(s * sc_) if i in axes else s for i, (s, sc_) in enumerate(zip(x.shape, scales))]
    else:
        raise ctx.fail("Resize needs scales or sizes")
    ctx.check_shape(sizes, x.dtype.itemsize)
    out = x
    for d in axes:
        if math.isclose(scales[d], 1.0) and sizes[d] == out.shape[d] and math.isclose(roi_full[d], 0.0) and \
                math.isclose(roi_full[r + d], 1.0) and ctm != "tf_crop_and_resize":
            continue
        if sizes[d] == 0:
            out = out.shrink(tuple((0, 0) if i == d else None for i in range(r)))
            continue
        idx, coef, ext = _resize_weights(out.shape[d], sizes[d], scales[d], mode, ctm, nearest, cubic_a, exclude,
                                         antialias, roi_full[d], roi_full[r + d])
        out = _apply_axis(out, d, idx, coef, ext, extrap)
    return out


def _apply_axis(x: Tensor, d: int, idx: np.ndarray, coef: np.ndarray, ext: np.ndarray | None,
                extrap: float) -> Tensor:
    pre = (slice(None),) * d
    if coef.shape[1] == 1 and np.all(coef == 1.0):
        out = x[pre + (Tensor(idx[:, 0].astype(np.int32), device=x.device),)]
    else:
        xf = x if x.dtype.is_float else x.cast(dtypes.float32)
        shape = [1] * x.ndim
        shape[d] = idx.shape[0]
        terms = [xf[pre + (Tensor(idx[:, k].astype(np.int32), device=x.device),)] *
                 Tensor(coef[:, k].astype(np.float32), device=x.device).reshape(shape).cast(xf.dtype)
                 for k in range(idx.shape[1])]
        out = functools.reduce(lambda p, q: p + q, terms)
        if not x.dtype.is_float:
            out = out.round().clip(x.dtype.min, x.dtype.max)
        out = out.cast(x.dtype)
    if ext is not None and ext.any():
        shape = [1] * x.ndim
        shape[d] = ext.shape[0]
        out = Tensor(ext, device=x.device).reshape(shape).where(Tensor(extrap, dtype=out.dtype), out)
    return out


@functools.lru_cache(maxsize=256)
def _resize_weights(n_in: int, n_out: int, scale: float, mode: str, ctm: str, nearest: str, A: float,
                    exclude: bool, antialias: bool, roi0: float, roi1: float
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """For one axis: each output position's source indices (clamped to the input), their weights, and which
    positions lie outside the input (tf_crop_and_resize extrapolation)."""
    y = np.arange(n_out, dtype=np.float64)
    out_w = scale * n_in
    ext = None
    if ctm == "align_corners":
        x = np.zeros(n_out) if out_w == 1 else y * (n_in - 1) / (out_w - 1)
    elif ctm == "asymmetric":
        x = y / scale
    elif ctm == "tf_crop_and_resize":
        x = np.full(n_out, (roi1 - roi0) * (n_in - 1) / 2) if out_w == 1 else \
            y * (roi1 - roi0) * (n_in - 1) / (out_w - 1)
        x = x + roi0 * (n_in - 1)
        ext = (x < 0) | (x > n_in - 1)
    elif ctm == "pytorch_half_pixel":
        x = np.full(n_out, -0.5) if out_w == 1 else (y + 0.5) / scale - 0.5
    elif ctm == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif ctm == "half_pixel_symmetric":
        adjustment = n_out / out_w
        offset = n_in / 2 * (1 - adjustment)
        x = offset + (y + 0.5) / scale - 0.5
    else:
        raise ValueError(f"Resize: unknown coordinate_transformation_mode {ctm!r}")
    base = np.floor(x)
    ratio = np.where(x == base, 1.0, x - base)
    if mode == "nearest":
        if nearest == "round_prefer_floor":
            up = ratio > 0.5
        elif nearest == "round_prefer_ceil":
            up = ratio >= 0.5
        elif nearest == "floor":
            up = np.zeros(n_out, dtype=bool)
        elif nearest == "ceil":
            up = np.ones(n_out, dtype=bool)
        else:
            raise ValueError(f"Resize: unknown nearest_mode {nearest!r}")
        # the two neighbours are ceil(x)-1 and ceil(x); an integer x has ratio 1 and takes x itself
        hi = np.ceil(x).astype(np.int64)
        pick = np.where(up | (x == base), hi, hi - 1)
        return np.clip(pick, 0, n_in - 1).reshape(-1, 1), np.ones((n_out, 1)), ext
    coeffs = np.stack([_coeffs(mode, float(r_), scale, A, antialias) for r_ in ratio])
    n = coeffs.shape[1]
    start = np.ceil(x).astype(np.int64) - n // 2
    idx = start[:, None] + np.arange(n)[None, :]
    if exclude:
        coeffs = np.where((idx < 0) | (idx >= n_in), 0.0, coeffs)
        total = coeffs.sum(-1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, n_in - 1), coeffs, ext


def _coeffs(mode: str, ratio: float, scale: float, A: float, antialias: bool) -> np.ndarray:
    if mode == "linear":
        if not antialias:
            return np.array([1 - ratio, ratio])
        s = min(scale, 1.0)
        start = int(np.floor(-1 / s) + 1)
        args = (np.arange(start, 2 - start) - ratio) * s
        c = np.clip(1 - np.abs(args), 0, 1)
        return c / c.sum()
    if mode == "cubic":
        if not antialias:
            t = [ratio + 1, ratio, 1 - ratio, 2 - ratio]
            return np.array([_cubic(v, A) for v in t])
        s = min(scale, 1.0)
        i_start = int(np.floor(-2 / s) + 1)
        c = np.array([_cubic(s * (i - ratio), A) for i in range(i_start, 2 - i_start)])
        return c / c.sum()
    raise ValueError(f"Resize: unknown mode {mode!r}")


def _cubic(x: float, A: float) -> float:
    x = abs(x)
    if x <= 1:
        return ((A + 2) * x - (A + 3)) * x * x + 1
    if x < 2:
        return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A
    return 0.0


# ---- random ----
def _rand_dtype(ctx: NodeCtx, like: Tensor | None) -> Any:
    if ctx.has("dtype"):
        return ctx.dtype_of_type(int(ctx.attr("dtype")))
    return like.dtype if like is not None else dtypes.float32


def _seed(ctx: NodeCtx) -> None:
    if ctx.has("seed"):
        Tensor.manual_seed(int(ctx.attr("seed")))


@op("RandomNormal", "RandomNormalLike")
def random_normal(ctx: NodeCtx, a: Value = None) -> Tensor:
    like = ctx.t(a) if a is not None else None
    shp = like.shape if like is not None else tuple(int(v) for v in ctx.attr("shape"))
    ctx.check_shape(shp, 4)
    _seed(ctx)
    t = Tensor.randn(*shp) * ctx.attr("scale", 1.0) + ctx.attr("mean", 0.0)
    return t.cast(_rand_dtype(ctx, like))


@op("RandomUniform", "RandomUniformLike")
def random_uniform(ctx: NodeCtx, a: Value = None) -> Tensor:
    like = ctx.t(a) if a is not None else None
    shp = like.shape if like is not None else tuple(int(v) for v in ctx.attr("shape"))
    ctx.check_shape(shp, 4)
    _seed(ctx)
    lo, hi = ctx.attr("low", 0.0), ctx.attr("high", 1.0)
    return (Tensor.rand(*shp) * (hi - lo) + lo).cast(_rand_dtype(ctx, like))


@op("Bernoulli")
def bernoulli(ctx: NodeCtx, a: Value) -> Tensor:
    p = ctx.t(a)
    _seed(ctx)
    return (Tensor.rand(*p.shape) < p).cast(_rand_dtype(ctx, p))


@op("Multinomial")
def multinomial(ctx: NodeCtx, a: Value) -> Tensor:
    logits = ctx.t(a)
    _seed(ctx)
    n = int(ctx.attr("sample_size", 1))
    ctx.check_shape((*logits.shape[:-1], n), 8)
    probs = logits.float().softmax(-1)
    d = ctx.dtype_of_type(int(ctx.attr("dtype", 6)))
    return probs.multinomial(n, replacement=True).cast(d)


@op("Dropout")
def dropout(ctx: NodeCtx, a: Value, ratio_in: Value = None, training: Value = None) -> tuple[Tensor, Tensor]:
    x = ctx.t(a)
    ratio = float(ctx.host(ratio_in).reshape(-1)[0]) if ratio_in is not None else float(ctx.attr("ratio", 0.5))
    train = bool(ctx.host(training).reshape(-1)[0]) if training is not None else False
    if not train or ratio == 0:
        return x, Tensor.ones(x.shape, dtype=dtypes.bool, device=x.device)
    _seed(ctx)
    keep = Tensor.rand(*x.shape) >= ratio
    return (keep.where(x / (1 - ratio), 0)).cast(x.dtype), keep


# ---- windows and spectra ----
def _window(ctx: NodeCtx, size: Value, fn: Any) -> Tensor:
    n = int(ctx.host(size).reshape(-1)[0])
    ctx.check_shape((n,), 8)
    periodic = bool(ctx.attr("periodic", 1))
    denom = n if periodic else n - 1
    k = np.arange(n, dtype=np.float64)
    w = fn(k, max(denom, 1))
    d = ctx.dtype_of_type(int(ctx.attr("output_datatype", 1)))
    return Tensor(w.astype(np.float32)).cast(d)


@op("HannWindow")
def hann(ctx: NodeCtx, size: Value) -> Tensor:
    return _window(ctx, size, lambda k, N: 0.5 - 0.5 * np.cos(2 * np.pi * k / N))


@op("HammingWindow")
def hamming(ctx: NodeCtx, size: Value) -> Tensor:
    return _window(ctx, size, lambda k, N: 25 / 46 - (21 / 46) * np.cos(2 * np.pi * k / N))


@op("BlackmanWindow")
def blackman(ctx: NodeCtx, size: Value) -> Tensor:
    return _window(ctx, size, lambda k, N: 0.42 - 0.5 * np.cos(2 * np.pi * k / N) + 0.08 * np.cos(4 * np.pi * k / N))
