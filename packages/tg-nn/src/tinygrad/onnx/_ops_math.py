"""Elementwise math, logic, comparisons, casts, reductions, activations and quantization."""

from __future__ import annotations

import math
from functools import reduce
from typing import Any

import numpy as np
from tinygrad import Device, Tensor, dtypes
from tinygrad.dtype import DType
from tinygrad.onnx._base import NodeCtx, Value, axis_of, emulated_kind, float_like, op
from tinygrad.onnx._proto import STRING

# ---- elementwise arithmetic ----


def _same(ctx: NodeCtx, a: Value, b: Value) -> tuple[Tensor, Tensor]:
    return ctx.t(a), ctx.t(b)


@op("Add")
def add(ctx: NodeCtx, a: Value, b: Value) -> Tensor:
    x, y = _same(ctx, a, b)
    return _keep(x + y, x.dtype)


@op("Sub")
def sub(ctx: NodeCtx, a: Value, b: Value) -> Tensor:
    x, y = _same(ctx, a, b)
    return _keep(x - y, x.dtype)


@op("Mul")
def mul(ctx: NodeCtx, a: Value, b: Value) -> Tensor:
    x, y = _same(ctx, a, b)
    if x.dtype == dtypes.bool:
        return x & y
    return _keep(x * y, x.dtype)


@op("Div")
def div(ctx: NodeCtx, a: Value, b: Value) -> Tensor:
    x, y = _same(ctx, a, b)
    if x.dtype.is_int:
        # C-style truncation toward zero (numpy's // floors)
        return x.div(y, rounding_mode="trunc").cast(x.dtype)
    return _keep(x / y, x.dtype)


def _keep(r: Tensor, d: DType) -> Tensor:
    """ONNX keeps the operands' dtype (no promotion); integer wrap-around included."""
    return r if r.dtype == d else r.cast(d)


@op("Mod")
def mod(ctx: NodeCtx, a: Value, b: Value) -> Tensor:
    x, y = _same(ctx, a, b)
    if ctx.attr("fmod", 0):
        return _keep(x.fmod(y), x.dtype)
    if x.dtype.is_float:
        # numpy's mod: the sign of the divisor; a zero divisor or an infinite dividend is NaN, an infinite divisor
        # keeps the dividend when the signs agree
        r = x - (x / y).floor() * y
        r = (x.isinf().logical_not() & y.isinf()).where((((x >= 0) == (y > 0)) | (x == 0)).where(x, y), r)
        return _keep(r, x.dtype)
    return _keep(x.mod(y), x.dtype)


@op("Pow")
def pow_(ctx: NodeCtx, a: Value, b: Value) -> Tensor:
    x, y = _same(ctx, a, b)
    if x.dtype.is_int and y.dtype.is_int:
        return _int_pow(x, y.cast(x.dtype))
    if x.dtype.is_int:
        # an integral exponent is exact by squaring; others through float64 (numpy's result for int ** float)
        wide = dtypes.float64 if Device[str(x.device)].supports_dtype(dtypes.float64) else dtypes.float32
        whole = (y == y.floor()) & (y >= 0)
        fl = x.cast(wide).pow(y.cast(wide))
        exact = _int_pow(x.cast(dtypes.int64), whole.where(y, 0).cast(dtypes.int64)).cast(wide)
        return whole.where(exact, fl).cast(x.dtype)
    return _keep(x.pow(y.cast(x.dtype)), x.dtype)


def _int_pow(x: Tensor, y: Tensor) -> Tensor:
    """Integer powers by squaring (exact, wrapping like C); exponents up to 63 bits."""
    result = x.ones_like()
    base, e = x, y
    for _ in range(x.dtype.itemsize * 8):
        result = ((e & 1) == 1).where(result * base, result)
        e = e >> 1
        base = base * base
    return (y < 0).where((x == 1).where(1, 0), result).cast(x.dtype)


def _unary(name: str, fn: Any) -> None:
    @op(name)
    def impl(ctx: NodeCtx, a: Value) -> Tensor:
        return fn(ctx.t(a))
    impl.__name__ = name


def _float_fn(fn: Any) -> Any:
    def run(x: Tensor) -> Tensor:
        return fn(x) if x.dtype.is_float else fn(x.cast(dtypes.float32)).cast(x.dtype)
    return run


for _name, _fn in {
    "Abs": lambda x: x.abs(), "Neg": lambda x: -x if x.dtype != dtypes.bool else x,
    "Reciprocal": _float_fn(lambda x: x.reciprocal()), "Sqrt": _float_fn(lambda x: x.sqrt()),
    "Exp": _float_fn(lambda x: x.exp()), "Log": _float_fn(lambda x: x.log()),
    "Ceil": lambda x: x.ceil() if x.dtype.is_float else x, "Floor": lambda x: x.floor() if x.dtype.is_float else x,
    "Round": lambda x: x.round() if x.dtype.is_float else x, "Sign": lambda x: x.sign().cast(x.dtype),
    "Erf": _float_fn(lambda x: x.erf()), "Sin": _float_fn(lambda x: x.sin()), "Cos": _float_fn(lambda x: x.cos()),
    "Tan": _float_fn(lambda x: x.tan()), "Asin": _float_fn(lambda x: x.asin()), "Acos": _float_fn(lambda x: x.acos()),
    "Atan": _float_fn(lambda x: x.atan()), "Sinh": _float_fn(lambda x: x.sinh()),
    "Cosh": _float_fn(lambda x: x.cosh()), "Asinh": _float_fn(lambda x: x.asinh()),
    "Acosh": _float_fn(lambda x: x.acosh()), "Atanh": _float_fn(lambda x: x.atanh()),
    "Tanh": _float_fn(lambda x: x.tanh()), "Sigmoid": _float_fn(lambda x: x.sigmoid()),
    "IsNaN": lambda x: x.isnan(), "Not": lambda x: x.logical_not(), "BitwiseNot": lambda x: x.bitwise_not(),
    "Relu": lambda x: x.relu() if x.dtype.is_float else x.maximum(0).cast(x.dtype),
    "Softsign": lambda x: x / (1 + x.abs()), "Mish": lambda x: x * _softplus(x).tanh(),
    "HardSwish": lambda x: x * (x / 6 + 0.5).clip(0, 1), "Softplus": lambda x: _softplus(x),
}.items():
    _unary(_name, _fn)


def _softplus(x: Tensor) -> Tensor:
    # log(1 + exp(x)), written so that large x neither overflows nor loses the linear part
    return x.maximum(0) + (-x.abs()).exp().log1p()


@op("IsInf")
def isinf(ctx: NodeCtx, a: Value) -> Tensor:
    return ctx.t(a).isinf(bool(ctx.attr("detect_positive", 1)), bool(ctx.attr("detect_negative", 1)))


# ---- variadic ----
@op("Max", "Min", "Sum", "Mean")
def variadic(ctx: NodeCtx, *args: Value) -> Tensor:
    ts = [ctx.t(a) for a in args if a is not None]
    d = ts[0].dtype
    if ctx.op == "Max":
        out = reduce(lambda p, q: _nan_pick(p, q, p.maximum(q)), ts)
    elif ctx.op == "Min":
        out = reduce(lambda p, q: _nan_pick(p, q, p.minimum(q)), ts)
    else:
        out = reduce(lambda p, q: p + q, ts)
        if ctx.op == "Mean":
            out = out / len(ts)
    return _keep(out, d)


def _nan_pick(p: Tensor, q: Tensor, r: Tensor) -> Tensor:
    if not p.dtype.is_float:
        return r
    return p.isnan().where(p, q.isnan().where(q, r))


# ---- logic and comparisons ----
@op("And")
def and_(ctx: NodeCtx, a: Value, b: Value) -> Tensor:
    return ctx.t(a).cast(dtypes.bool) & ctx.t(b).cast(dtypes.bool)


@op("Or")
def or_(ctx: NodeCtx, a: Value, b: Value) -> Tensor:
    return ctx.t(a).cast(dtypes.bool) | ctx.t(b).cast(dtypes.bool)


@op("Xor")
def xor_(ctx: NodeCtx, a: Value, b: Value) -> Tensor:
    return ctx.t(a).cast(dtypes.bool) ^ ctx.t(b).cast(dtypes.bool)


@op("BitwiseAnd", "BitwiseOr", "BitwiseXor")
def bitwise(ctx: NodeCtx, a: Value, b: Value) -> Tensor:
    x, y = _same(ctx, a, b)
    return {"BitwiseAnd": x.bitwise_and, "BitwiseOr": x.bitwise_or, "BitwiseXor": x.bitwise_xor}[ctx.op](y)


@op("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual")
def compare(ctx: NodeCtx, a: Value, b: Value) -> Value:
    if (isinstance(a, np.ndarray) and a.dtype.kind in "OUS") or (isinstance(b, np.ndarray) and b.dtype.kind in "OUS"):
        return _host_compare(ctx.op, ctx.host(a), ctx.host(b))
    x, y = _same(ctx, a, b)
    if ctx.op == "Equal":
        return x == y
    if ctx.op == "Less":
        return x < y
    if ctx.op == "LessOrEqual":
        return x <= y
    if ctx.op == "Greater":
        return x > y
    return x >= y


def _host_compare(name: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    fn = {"Equal": np.equal, "Less": np.less, "LessOrEqual": np.less_equal, "Greater": np.greater,
          "GreaterOrEqual": np.greater_equal}[name]
    return np.asarray(fn(a.astype(str) if a.dtype.kind == "O" else a, b.astype(str) if b.dtype.kind == "O" else b))


@op("Where")
def where(ctx: NodeCtx, c: Value, a: Value, b: Value) -> Tensor:
    x, y = ctx.t(a), ctx.t(b)
    return ctx.t(c).cast(dtypes.bool).where(x, y.cast(x.dtype))


@op("BitShift")
def bitshift(ctx: NodeCtx, a: Value, b: Value) -> Tensor:
    x, s = _same(ctx, a, b)
    bits = x.dtype.itemsize * 8
    s = s.cast(x.dtype)
    valid = (s >= 0) & (s < bits)
    safe = valid.where(s, 0)
    if ctx.attr("direction") == "LEFT":
        return valid.where(x.lshift(safe), 0).cast(x.dtype)
    out_of_range = (x < 0).where(-1, 0) if not x.dtype.is_unsigned else x.zeros_like()
    return valid.where(x.rshift(safe), out_of_range.cast(x.dtype)).cast(x.dtype)


@op("Clip")
def clip(ctx: NodeCtx, a: Value, lo: Value = None, hi: Value = None) -> Tensor:
    x = ctx.t(a)
    if ctx.opset < 11 or ctx.has("min") or ctx.has("max"):
        lo_v, hi_v = ctx.attr("min"), ctx.attr("max")
        if lo_v is not None:
            x = x.maximum(lo_v)
        return x.minimum(hi_v) if hi_v is not None else x
    if lo is not None:
        x = _nan_keep(x, x.maximum(ctx.t(lo).cast(x.dtype)))
    if hi is not None:
        x = _nan_keep(x, x.minimum(ctx.t(hi).cast(x.dtype)))
    return x


def _nan_keep(x: Tensor, r: Tensor) -> Tensor:
    return x.isnan().where(x, r) if x.dtype.is_float else r


# ---- casts ----
@op("Cast")
def cast(ctx: NodeCtx, a: Value) -> Value:
    to = int(ctx.attr("to"))
    return cast_to(ctx, a, to, ctx.in_types[0] if ctx.in_types else None)


@op("CastLike")
def cast_like(ctx: NodeCtx, a: Value, like: Value) -> Value:
    to = ctx.in_types[1] if len(ctx.in_types) > 1 else None
    if to is None:
        if isinstance(like, np.ndarray) and like.dtype.kind in "OUS":
            to = STRING
        else:
            like_t = ctx.t(like)
            return _cast_tensor(ctx, ctx.t(a), like_t.dtype, None)
    return cast_to(ctx, a, int(to), ctx.in_types[0] if ctx.in_types else None)


def cast_to(ctx: NodeCtx, a: Value, to: int, from_type: int | None) -> Value:
    if to == STRING or (isinstance(a, np.ndarray) and a.dtype.kind in "OUS"):
        return _host_string_cast(ctx, ctx.host(a), to)
    x = ctx.t(a)
    kind = emulated_kind(to)
    if kind is not None:
        return round_to_format(x, kind, bool(ctx.attr("saturate", 1)), ctx.attr("round_mode", "up"))
    return _cast_tensor(ctx, x, ctx.dtype_of_type(to), to)


def _cast_tensor(ctx: NodeCtx, x: Tensor, d: DType, to: int | None) -> Tensor:
    if x.dtype == d:
        return x
    if d in (dtypes.fp8e4m3, dtypes.fp8e5m2):
        xf = x.cast(dtypes.float32)
        kind = "e4m3fn" if d == dtypes.fp8e4m3 else "e5m2"
        return round_to_format(xf, kind, bool(ctx.attr("saturate", 1)), "up").cast(d)
    if d == dtypes.bool:
        return x != 0
    if x.dtype.is_float and d.is_int and not d.is_unsigned:
        # C truncation toward zero, NaN to 0 (the device's conversion of NaN is undefined)
        return x.isnan().where(0, x).cast(d)
    return x.cast(d)


def _host_string_cast(ctx: NodeCtx, arr: np.ndarray, to: int) -> np.ndarray:
    if to == STRING:
        if arr.dtype.kind == "f":
            return np.array([repr(float(v)) if not math.isnan(v) else "NaN" for v in arr.reshape(-1)],
                            dtype=object).reshape(arr.shape)
        return arr.astype(str).astype(object)
    from tinygrad.onnx._proto import import_onnx
    np_dtype = import_onnx().helper.tensor_dtype_to_np_dtype(to)
    return np.asarray(arr.astype(str).astype(np.float64 if np.dtype(np_dtype).kind == "f" else np_dtype)
                      ).astype(np_dtype)


# float formats the device has no dtype for, computed in float32: (exponent bits, mantissa bits, exponent bias,
# largest finite value, has infinities, NaN when saturation is off and the value is too large)
_FORMATS = {
    "e4m3fn": (4, 3, 7, 448.0, False), "e5m2": (5, 2, 15, 57344.0, True),
    "e4m3fnuz": (4, 3, 8, 240.0, False), "e5m2fnuz": (5, 2, 16, 57344.0, False),
    "e2m1": (2, 1, 1, 6.0, False),
}
_INT_RANGES = {"int4": (-8, 7), "uint4": (0, 15), "int2": (-2, 1), "uint2": (0, 3)}


def round_to_format(x: Tensor, kind: str, saturate: bool, round_mode: str = "up") -> Tensor:
    """x rounded to the nearest value of a small format (ties to even), held in float32 (or the small int types
    in int8/uint8). Too large: the largest finite value when saturating (the 4-bit float always saturates),
    else infinity or NaN as the format has them."""
    if kind in _INT_RANGES:
        # ml_dtypes' conversion, which the ONNX reference uses: truncate toward zero; a value out of range (and
        # NaN or infinity) becomes 0
        lo, hi = _INT_RANGES[kind]
        d = dtypes.uint8 if kind.startswith("u") else dtypes.int8
        t = x.trunc() if x.dtype.is_float else x
        ok = (t >= lo) & (t <= hi)
        if x.dtype.is_float:
            ok = ok & x.isnan().logical_not()
        return ok.where(t, 0).cast(d)
    if kind == "e8m0":
        return _round_e8m0(x, saturate, round_mode)
    _, mbits, bias, fmax, has_inf = _FORMATS[kind]
    xf = x.cast(dtypes.float32)
    emin = 1 - bias  # exponent of the smallest normal
    a = xf.abs()
    # the exponent of |x| (floor(log2)), exact from the float32 bits; subnormals share the smallest normal's quantum
    bits = a.bitcast(dtypes.int32)
    e = ((bits >> 23) & 0xFF) - 127
    e = e.maximum(emin)
    quantum = ((e - mbits + 127).maximum(1) << 23).bitcast(dtypes.float32)
    r = (a / quantum).round() * quantum
    sign = (xf < 0).where(-1.0, 1.0)
    too_big = r > fmax
    if kind == "e2m1":
        # no NaN or infinity in the format: everything saturates, NaN becomes -0 (ml_dtypes' choice)
        return a.isnan().where(-0.0, sign * too_big.where(fmax, r))
    if saturate:
        return a.isnan().where(math.nan, sign * too_big.where(fmax, r))
    big = math.inf if has_inf else math.nan
    out = sign * too_big.where(big, r)
    if has_inf:
        out = a.isinf().where(sign * math.inf, out)
    return a.isnan().where(math.nan, out)


def _round_e8m0(x: Tensor, saturate: bool, round_mode: str) -> Tensor:
    """FLOAT8E8M0: the float32 exponent alone (2^-127 .. 2^127, NaN), rounded up, down or to nearest on the
    mantissa bits as onnx.numpy_helper.to_float8e8m0 does; the sign is dropped. Infinity and NaN give NaN."""
    bits = x.cast(dtypes.float32).bitcast(dtypes.int32)
    e = (bits >> 23) & 0xFF
    special = e == 0xFF
    if round_mode == "nearest":
        g, r, rest = (bits & 0x400000) != 0, (bits & 0x200000) != 0, (bits & 0x1FFFFF) != 0
        up = g & (r | rest | (e > 0))
    elif round_mode == "up":
        up = (bits & 0x7FFFFF) != 0
    else:
        up = e < 0  # "down": never
    up = up & special.logical_not()
    if saturate:
        up = up & (e != 0xFE)
    e = e + up.cast(dtypes.int32)
    val = (e << 23).bitcast(dtypes.float32)
    val = (e == 0).where(2.0 ** -127, val)  # exponent 0 is 2^-127, a float32 subnormal
    return (special | (e == 0xFF)).where(math.nan, val)


# ---- reductions ----
def _reduce_axes(ctx: NodeCtx, x: Tensor, axes_in: Value) -> tuple[int, ...] | None:
    """The reduced axes; None when the op is a no-op (empty axes with noop_with_empty_axes)."""
    axes = ctx.attr("axes")
    if axes_in is not None:
        axes = ctx.ints(axes_in)
    if not axes:
        if ctx.attr("noop_with_empty_axes", 0):
            return None
        return tuple(range(x.ndim))
    return tuple(sorted({axis_of(int(a), x.ndim, ctx) for a in axes}))


@op("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceSumSquare")
def reduce_op(ctx: NodeCtx, a: Value, axes_in: Value = None) -> Tensor:
    x = ctx.t(a)
    axes = _reduce_axes(ctx, x, axes_in)
    name = ctx.op
    if axes is None:
        # noop: the reduction's elementwise part alone
        return {"ReduceL1": lambda: x.abs(), "ReduceSumSquare": lambda: x * x,
                "ReduceLogSum": lambda: x.log(), "ReduceL2": lambda: x.abs()}.get(name, lambda: x)()
    keep = bool(ctx.attr("keepdims", 1))
    d = x.dtype
    out_shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape)) if keep else \
        tuple(s for i, s in enumerate(x.shape) if i not in axes)
    if any(x.shape[i] == 0 for i in axes):
        ident: Any = {"ReduceSum": 0, "ReduceProd": 1, "ReduceL1": 0, "ReduceL2": 0, "ReduceSumSquare": 0,
                      "ReduceMean": math.nan, "ReduceLogSum": -math.inf, "ReduceLogSumExp": -math.inf,
                      "ReduceMax": -math.inf if d.is_float else (False if d == dtypes.bool else d.min),
                      "ReduceMin": math.inf if d.is_float else (True if d == dtypes.bool else d.max)}[name]
        return Tensor.full(out_shape, ident, dtype=d, device=x.device)
    if d == dtypes.bool and name in ("ReduceMax", "ReduceMin"):
        r = x.any(axes, keepdim=keep) if name == "ReduceMax" else x.all(axes, keepdim=keep)
        return r
    if name == "ReduceSum":
        r = x.sum(axes, keepdim=keep, dtype=_acc(d))
    elif name == "ReduceMean":
        r = float_like(x).mean(axes, keepdim=keep)
    elif name == "ReduceMax":
        r = x.max(axes, keepdim=keep)
    elif name == "ReduceMin":
        r = x.min(axes, keepdim=keep)
    elif name == "ReduceProd":
        r = x.prod(axes, keepdim=keep, dtype=_acc(d))
    elif name == "ReduceL1":
        r = x.abs().sum(axes, keepdim=keep, dtype=_acc(d))
    elif name == "ReduceL2":
        xf = float_like(x)
        r = (xf * xf).sum(axes, keepdim=keep).sqrt()
    elif name == "ReduceSumSquare":
        r = (x * x).sum(axes, keepdim=keep, dtype=_acc(d))
    elif name == "ReduceLogSum":
        r = float_like(x).sum(axes, keepdim=keep).log()
    else:
        r = float_like(x).logsumexp(axes, keepdim=keep)
    return _keep(r, d)


def _acc(d: DType) -> DType:
    return d if d.is_float else (dtypes.uint64 if d.is_unsigned else dtypes.int64)


@op("ArgMax", "ArgMin")
def argmax(ctx: NodeCtx, a: Value) -> Tensor:
    x = ctx.t(a)
    if x.ndim == 0:
        x = x.reshape(1)
    axis = axis_of(int(ctx.attr("axis", 0)), x.ndim, ctx)
    keep = bool(ctx.attr("keepdims", 1))
    if x.dtype == dtypes.bool:
        x = x.cast(dtypes.int32)
    if ctx.op == "ArgMin":
        x = -x.cast(dtypes.float64 if x.dtype.itemsize == 8 else dtypes.float32) if x.dtype.is_unsigned else -x
    if ctx.attr("select_last_index", 0):
        n = x.shape[axis]
        idx = (n - 1) - x.flip(axis).argmax(axis, keepdim=keep)
    else:
        idx = x.argmax(axis, keepdim=keep)
    return idx.cast(dtypes.int64)


# ---- activations ----
@op("LeakyRelu")
def leaky_relu(ctx: NodeCtx, a: Value) -> Tensor:
    x = ctx.t(a)
    return (x < 0).where(x * ctx.attr("alpha", 0.01), x).cast(x.dtype)


@op("PRelu")
def prelu(ctx: NodeCtx, a: Value, slope: Value) -> Tensor:
    x, s = ctx.t(a), ctx.t(slope)
    return (x < 0).where(x * s, x).cast(x.dtype)


@op("Elu")
def elu(ctx: NodeCtx, a: Value) -> Tensor:
    x = ctx.t(a)
    alpha = ctx.attr("alpha", 1.0)
    return (x < 0).where(alpha * (x.exp() - 1), x).cast(x.dtype)


@op("Celu")
def celu(ctx: NodeCtx, a: Value) -> Tensor:
    x = ctx.t(a)
    alpha = ctx.attr("alpha", 1.0)
    return (x.maximum(0) + (alpha * ((x / alpha).exp() - 1)).minimum(0)).cast(x.dtype)


@op("Selu")
def selu(ctx: NodeCtx, a: Value) -> Tensor:
    x = ctx.t(a)
    alpha, gamma = ctx.attr("alpha", 1.67326319217681884765625), ctx.attr("gamma", 1.05070102214813232421875)
    return (gamma * (x <= 0).where(alpha * (x.exp() - 1), x)).cast(x.dtype)


@op("HardSigmoid")
def hard_sigmoid(ctx: NodeCtx, a: Value) -> Tensor:
    x = ctx.t(a)
    return (x * ctx.attr("alpha", 0.2) + ctx.attr("beta", 0.5)).clip(0, 1).cast(x.dtype)


@op("ThresholdedRelu")
def thresholded_relu(ctx: NodeCtx, a: Value) -> Tensor:
    x = ctx.t(a)
    return (x > ctx.attr("alpha", 1.0)).where(x, 0).cast(x.dtype)


@op("Gelu")
def gelu(ctx: NodeCtx, a: Value) -> Tensor:
    x = ctx.t(a)
    if ctx.attr("approximate", "none") == "tanh":
        return x.gelu("tanh").cast(x.dtype)
    return (0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf())).cast(x.dtype)


@op("Swish")
def swish(ctx: NodeCtx, a: Value) -> Tensor:
    x = ctx.t(a)
    return (x * (x * ctx.attr("alpha", 1.0)).sigmoid()).cast(x.dtype)


@op("Shrink")
def shrink(ctx: NodeCtx, a: Value) -> Tensor:
    x = ctx.t(a)
    bias, lambd = ctx.attr("bias", 0.0), ctx.attr("lambd", 0.5)
    return (x < -lambd).where(x + bias, (x > lambd).where(x - bias, 0)).cast(x.dtype)


def _softmax_like(ctx: NodeCtx, a: Value, fn: Any) -> Tensor:
    x = ctx.t(a)
    if ctx.opset < 13:
        # before opset 13: the input as a 2-D matrix split at `axis`, normalized over the second part
        axis = axis_of(int(ctx.attr("axis", 1)), x.ndim, ctx) if x.ndim else 0
        shape = x.shape
        inner = math.prod(shape[axis:])
        return fn(x.reshape(math.prod(shape[:axis]), inner), 1).reshape(shape)
    axis = axis_of(int(ctx.attr("axis", -1)), x.ndim, ctx)
    return fn(x, axis)


@op("Softmax")
def softmax(ctx: NodeCtx, a: Value) -> Tensor:
    return _softmax_like(ctx, a, lambda x, ax: x.softmax(ax))


@op("LogSoftmax")
def log_softmax(ctx: NodeCtx, a: Value) -> Tensor:
    return _softmax_like(ctx, a, lambda x, ax: x.log_softmax(ax))


@op("Hardmax")
def hardmax(ctx: NodeCtx, a: Value) -> Tensor:
    def fn(x: Tensor, ax: int) -> Tensor:
        idx = x.argmax(ax, keepdim=True)
        n = x.shape[ax]
        shape = [1] * x.ndim
        shape[ax] = n
        ar = Tensor.arange(n, device=x.device).reshape(shape)
        return (ar == idx).cast(x.dtype)
    return _softmax_like(ctx, a, fn)


# ---- quantization ----
def _quant_param(p: Tensor, x: Tensor, axis: int, block: int) -> Tensor:
    """A scale or zero point shaped to broadcast against x: per tensor, per axis (1-D) or per block."""
    if p.ndim == 0 or (p.numel() == 1 and p.ndim <= 1):
        return p.reshape(())
    if block:
        p = p.repeat_interleave(block, axis)
        return p.shrink(tuple((0, s) for s in x.shape))
    shape = [1] * x.ndim
    shape[axis] = p.shape[0]
    return p.reshape(shape)


def _quant_axis(ctx: NodeCtx, x: Tensor, scale: Value) -> int:
    # the axis only matters for a per-axis or blocked scale; a per-tensor one works with any rank
    n = int(np.prod(scale.shape)) if isinstance(scale, (np.ndarray, Tensor)) else 1
    if n == 1 and len(getattr(scale, "shape", ())) <= 1:
        return 0
    return axis_of(int(ctx.attr("axis", 1)), x.ndim, ctx)


def _quant_type(ctx: NodeCtx, zp: Value, slot: int) -> int:
    et = ctx.attr("output_dtype", 0)
    if not et and zp is not None and len(ctx.in_types) > slot and ctx.in_types[slot] is not None:
        et = ctx.in_types[slot]
    if not et and isinstance(zp, np.ndarray):
        from tinygrad.onnx._proto import import_onnx
        et = import_onnx().helper.np_dtype_to_tensor_dtype(zp.dtype)
    if not et and isinstance(zp, Tensor):
        et = {dtypes.uint8: 2, dtypes.int8: 3, dtypes.uint16: 4, dtypes.int16: 5, dtypes.int32: 6,
              dtypes.fp8e4m3: 17, dtypes.fp8e5m2: 19}.get(zp.dtype, 2)
    return int(et or 2)


_INT_Q = {2: (0, 255), 3: (-128, 127), 4: (0, 65535), 5: (-32768, 32767), 6: (-(2 ** 31), 2 ** 31 - 1),
          21: (0, 15), 22: (-8, 7), 25: (0, 3), 26: (-2, 1)}


@op("QuantizeLinear")
def quantize_linear(ctx: NodeCtx, a: Value, scale: Value, zp: Value = None) -> Tensor:
    x = ctx.t(a)
    axis = _quant_axis(ctx, x, scale)
    block = int(ctx.attr("block_size", 0))
    et = _quant_type(ctx, zp, 2)
    s = _quant_param(ctx.t(scale), x, axis, block)
    precision = ctx.attr("precision", 0)
    if precision:
        pd = ctx.dtype_of_type(int(precision))
        y = x.cast(pd) / s.cast(pd)
    else:
        y = x.cast(s.dtype) / s if x.dtype != s.dtype else x / s
    if et in _INT_Q:
        lo, hi = _INT_Q[et]
        yi = y.cast(dtypes.float32).round()
        if zp is not None:
            yi = yi + _quant_param(ctx.t(zp), x, axis, block).cast(dtypes.float32)
        yi = yi.clip(lo, hi)
        d = ctx.dtype_of_type(et)
        return yi.cast(d)
    kind = emulated_kind(et)
    if kind is not None:
        if zp is not None:
            y = y + _quant_param(ctx.t(zp), x, axis, block).cast(y.dtype)
        return round_to_format(y, kind, bool(ctx.attr("saturate", 1)))
    d = ctx.dtype_of_type(et)
    fmt = "e4m3fn" if d == dtypes.fp8e4m3 else "e5m2"
    return round_to_format(y, fmt, bool(ctx.attr("saturate", 1))).cast(d)


@op("DequantizeLinear")
def dequantize_linear(ctx: NodeCtx, a: Value, scale: Value, zp: Value = None) -> Tensor:
    x = ctx.t(a)
    axis = _quant_axis(ctx, x, scale)
    block = int(ctx.attr("block_size", 0))
    s = _quant_param(ctx.t(scale), x, axis, block)
    out_type = ctx.attr("output_dtype", 0)
    compute = dtypes.float32 if s.dtype != dtypes.float64 else dtypes.float64
    xf = x.cast(compute)
    if zp is not None:
        xf = xf - _quant_param(ctx.t(zp), x, axis, block).cast(compute)
    y = xf * s.cast(compute)
    return y.cast(ctx.dtype_of_type(int(out_type)) if out_type else s.dtype)


@op("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx: NodeCtx, a: Value) -> tuple[Tensor, Tensor, Tensor]:
    x = ctx.t(a).cast(dtypes.float32)
    lo, hi = x.min().minimum(0), x.max().maximum(0)
    scale = (hi - lo) / 255
    zp = (-lo / scale).round().clip(0, 255)
    zp = (scale == 0).where(0, zp)
    safe = (scale == 0).where(1, scale)
    y = ((x / safe).round() + zp).clip(0, 255)
    return y.cast(dtypes.uint8), scale, zp.cast(dtypes.uint8)


@op("MatMulInteger")
def matmul_integer(ctx: NodeCtx, a: Value, b: Value, a_zp: Value = None, b_zp: Value = None) -> Tensor:
    x, w = ctx.t(a).cast(dtypes.int32), ctx.t(b).cast(dtypes.int32)
    if a_zp is not None:
        z = ctx.t(a_zp).cast(dtypes.int32)
        x = x - (z.reshape(-1, 1) if z.ndim == 1 and z.numel() > 1 else z)
    if b_zp is not None:
        w = w - ctx.t(b_zp).cast(dtypes.int32)
    return x.matmul(w, dtype=dtypes.int32)
