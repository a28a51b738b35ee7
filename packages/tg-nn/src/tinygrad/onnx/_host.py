"""numpy implementations of the ops that shape arithmetic uses, run instead of the Tensor ones when every input is
a host array. Shape -> Gather -> Concat -> Reshape then never touches the device: a call reads no device data mid
graph (which TinyJit could not replay) and launches no kernels for a handful of integers.

Each function mirrors its Tensor twin in _ops_*.py. Returning None declines (the Tensor version runs); results
that would be large raise TooBig for the same reason."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from tinygrad.onnx._base import NodeCtx, TooBig, axis_of, host_op
from tinygrad.onnx._ops_tensor import broadcast_shape, resolve_reshape, unsqueeze_shape

HOST_LIMIT = 1 << 16  # elements: beyond this a result is built lazily on the device instead


def _too_big(shape: Any) -> None:
    if math.prod(shape) > HOST_LIMIT:
        raise TooBig


def _numeric(*arrs: Any) -> bool:
    return all(a is None or a.dtype.kind in "biuf" for a in arrs)


@host_op("Add", "Sub", "Mul")
def arith(ctx: NodeCtx, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    if not _numeric(a, b) or a.dtype != b.dtype:
        return None
    with np.errstate(all="ignore"):
        if ctx.op == "Add":
            r = a + b
        elif ctx.op == "Sub":
            r = a - b
        else:
            r = a * b
    return np.asarray(r).astype(a.dtype, copy=False)


@host_op("Div")
def div(ctx: NodeCtx, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    if not _numeric(a, b) or a.dtype != b.dtype:
        return None
    with np.errstate(all="ignore"):
        if a.dtype.kind in "iu":
            if np.any(b == 0):
                return None
            q = np.abs(a) // np.abs(b)
            return np.asarray(np.where((a < 0) ^ (b < 0), -q, q)).astype(a.dtype)
        return np.asarray(a / b).astype(a.dtype)


@host_op("Mod")
def mod(ctx: NodeCtx, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    if a.dtype.kind not in "iu" or b.dtype != a.dtype or np.any(b == 0):
        return None
    return np.asarray(np.fmod(a, b) if ctx.attr("fmod", 0) else np.mod(a, b)).astype(a.dtype)


@host_op("Neg", "Abs")
def unary(ctx: NodeCtx, a: np.ndarray) -> np.ndarray | None:
    if not _numeric(a) or a.dtype.kind == "b":
        return None
    return np.asarray(-a if ctx.op == "Neg" else np.abs(a)).astype(a.dtype)


@host_op("Floor", "Ceil", "Sqrt")
def float_unary(ctx: NodeCtx, a: np.ndarray) -> np.ndarray | None:
    if a.dtype.kind != "f":
        return None
    with np.errstate(all="ignore"):
        return np.asarray({"Floor": np.floor, "Ceil": np.ceil, "Sqrt": np.sqrt}[ctx.op](a)).astype(a.dtype)


@host_op("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual")
def compare(ctx: NodeCtx, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    if not _numeric(a, b):
        return None
    fn = {"Equal": np.equal, "Less": np.less, "LessOrEqual": np.less_equal, "Greater": np.greater,
          "GreaterOrEqual": np.greater_equal}[ctx.op]
    return np.asarray(fn(a, b))


@host_op("Not")
def not_(ctx: NodeCtx, a: np.ndarray) -> np.ndarray | None:
    return np.asarray(np.logical_not(a)) if a.dtype == np.bool_ else None


@host_op("And", "Or")
def logic(ctx: NodeCtx, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    if a.dtype != np.bool_ or b.dtype != np.bool_:
        return None
    return np.asarray(np.logical_and(a, b) if ctx.op == "And" else np.logical_or(a, b))


@host_op("Where")
def where(ctx: NodeCtx, c: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    if not _numeric(a, b) or a.dtype != b.dtype:
        return None
    _too_big(np.broadcast_shapes(c.shape, a.shape, b.shape))
    return np.asarray(np.where(c.astype(bool), a, b))


@host_op("Max", "Min")
def variadic(ctx: NodeCtx, *args: np.ndarray | None) -> np.ndarray | None:
    arrs = [a for a in args if a is not None]
    if not arrs or any(a.dtype.kind not in "iu" or a.dtype != arrs[0].dtype for a in arrs):
        return None
    fn = np.maximum if ctx.op == "Max" else np.minimum
    out = arrs[0]
    for a in arrs[1:]:
        out = fn(out, a)
    return np.asarray(out)


@host_op("Cast")
def cast(ctx: NodeCtx, a: np.ndarray) -> np.ndarray | None:
    from tinygrad.onnx._proto import _NATIVE
    to = int(ctx.attr("to"))
    name = _NATIVE.get(to)
    if name is None or name in ("bfloat16", "fp8e4m3", "fp8e5m2") or not _numeric(a):
        return None
    if a.dtype.kind == "f" and name not in ("float16", "float32", "float64", "bool"):
        if not np.all(np.isfinite(a)):
            return None
        return np.trunc(a).astype(name)
    if name == "bool":
        return a != 0
    return a.astype(name)


@host_op("Identity")
def identity(ctx: NodeCtx, a: np.ndarray) -> np.ndarray:
    return a


@host_op("Gather")
def gather(ctx: NodeCtx, a: np.ndarray, idx: np.ndarray) -> np.ndarray | None:
    if idx.dtype.kind not in "iu" or a.ndim == 0:
        return None
    axis = axis_of(int(ctx.attr("axis", 0)), a.ndim, ctx)
    n = a.shape[axis]
    i = np.where(idx < 0, idx + n, idx)
    if np.any((i < 0) | (i >= n)):
        raise ctx.fail(f"index out of range for axis {axis} of size {n}")
    return np.take(a, i, axis=axis)


@host_op("Concat")
def concat(ctx: NodeCtx, *args: np.ndarray | None) -> np.ndarray | None:
    arrs = [a for a in args if a is not None]
    if not arrs or any(a.dtype != arrs[0].dtype for a in arrs):
        return None
    axis = axis_of(int(ctx.attr("axis", 0)), arrs[0].ndim, ctx)
    return np.concatenate(arrs, axis=axis)


@host_op("Unsqueeze")
def unsqueeze(ctx: NodeCtx, a: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
    ax = [int(v) for v in axes.reshape(-1)] if axes is not None else list(ctx.attr("axes", []))
    return a.reshape(unsqueeze_shape(ctx, a.shape, ax))


@host_op("Squeeze")
def squeeze(ctx: NodeCtx, a: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
    ax = [int(v) for v in axes.reshape(-1)] if axes is not None else ctx.attr("axes")
    if ax is None:
        return a.reshape(tuple(s for s in a.shape if s != 1))
    drop = {axis_of(v, a.ndim, ctx) for v in ax}
    if any(a.shape[d] != 1 for d in drop):
        raise ctx.fail(f"cannot squeeze axes {ax} of shape {a.shape}")
    return a.reshape(tuple(s for i, s in enumerate(a.shape) if i not in drop))


@host_op("Reshape")
def reshape(ctx: NodeCtx, a: np.ndarray, shape: np.ndarray | None = None) -> np.ndarray:
    target = [int(v) for v in shape.reshape(-1)] if shape is not None else list(ctx.attr("shape", []))
    return a.reshape(resolve_reshape(ctx, a.shape, target, bool(ctx.attr("allowzero", 0))))


@host_op("Flatten")
def flatten(ctx: NodeCtx, a: np.ndarray) -> np.ndarray:
    axis = int(ctx.attr("axis", 1))
    axis = axis + a.ndim if axis < 0 else axis
    return a.reshape(math.prod(a.shape[:axis]), math.prod(a.shape[axis:]))


@host_op("Transpose")
def transpose(ctx: NodeCtx, a: np.ndarray) -> np.ndarray:
    perm = ctx.attr("perm") or list(range(a.ndim))[::-1]
    return np.transpose(a, [int(p) for p in perm])


@host_op("Slice")
def slice_(ctx: NodeCtx, a: np.ndarray, starts: np.ndarray | None = None, ends: np.ndarray | None = None,
           axes: np.ndarray | None = None, steps: np.ndarray | None = None) -> np.ndarray | None:
    if starts is None:
        return None
    st, en = [int(v) for v in starts.reshape(-1)], [int(v) for v in ends.reshape(-1)] if ends is not None else []
    ax = [int(v) for v in axes.reshape(-1)] if axes is not None else list(range(len(st)))
    sp = [int(v) for v in steps.reshape(-1)] if steps is not None else [1] * len(st)
    idx: list[Any] = [slice(None)] * a.ndim
    for s, e, d, p in zip(st, en, ax, sp):
        if p == 0:
            raise ctx.fail("slice step 0")
        idx[axis_of(d, a.ndim, ctx)] = slice(s, e, p)
    return a[tuple(idx)]


@host_op("Expand")
def expand(ctx: NodeCtx, a: np.ndarray, shape: np.ndarray) -> np.ndarray:
    shp = broadcast_shape(ctx, a.shape, tuple(int(v) for v in shape.reshape(-1)))
    _too_big(shp)
    return np.broadcast_to(a, shp).copy()


@host_op("ConstantOfShape")
def constant_of_shape(ctx: NodeCtx, shape: np.ndarray) -> np.ndarray | None:
    shp = tuple(int(v) for v in shape.reshape(-1))
    if any(d < 0 for d in shp):
        raise ctx.fail(f"negative dimension in shape {shp}")
    _too_big(shp)
    v = ctx.attr("value")
    if v is None:
        return np.zeros(shp, dtype=np.float32)
    if not isinstance(v, np.ndarray):
        return None
    return np.full(shp, v.reshape(-1)[0], dtype=v.dtype)


@host_op("Tile")
def tile(ctx: NodeCtx, a: np.ndarray, repeats: np.ndarray) -> np.ndarray:
    reps = [int(v) for v in repeats.reshape(-1)]
    _too_big([s * r for s, r in zip(a.shape, reps)])
    return np.tile(a, reps)


@host_op("ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin")
def reduce(ctx: NodeCtx, a: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray | None:
    if a.dtype.kind not in "iu" or a.size == 0:
        return None
    ax_list = [int(v) for v in axes.reshape(-1)] if axes is not None else ctx.attr("axes")
    if not ax_list:
        if ctx.attr("noop_with_empty_axes", 0):
            return a
        ax: tuple[int, ...] = tuple(range(a.ndim))
    else:
        ax = tuple(axis_of(int(v), a.ndim, ctx) for v in ax_list)
    fn: Any = {"ReduceProd": np.prod, "ReduceSum": np.sum, "ReduceMax": np.max, "ReduceMin": np.min}[ctx.op]
    return np.asarray(fn(a, axis=ax, keepdims=bool(ctx.attr("keepdims", 1)))).astype(a.dtype)


@host_op("Split")
def split(ctx: NodeCtx, a: np.ndarray, split: np.ndarray | None = None) -> tuple[np.ndarray, ...] | None:
    axis = axis_of(int(ctx.attr("axis", 0)), a.ndim, ctx)
    sizes = [int(v) for v in split.reshape(-1)] if split is not None else ctx.attr("split")
    n = int(ctx.attr("num_outputs", 0)) or len(ctx.outputs)
    dim = a.shape[axis]
    if not sizes:
        chunk = -(-dim // n)
        sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(n)]
    if sum(sizes) != dim:
        raise ctx.fail(f"split sizes {sizes} do not add up to {dim}")
    cuts = np.cumsum(sizes)[:-1]
    return tuple(np.split(a, cuts, axis=axis))
