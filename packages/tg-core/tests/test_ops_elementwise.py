"""The op-info table for elementwise ops: activations, the transcendental functions composed from the primitive
ALU ops, rounding, special-value predicates, and dtype coverage (float16, bfloat16, float64, the integer widths)
of arithmetic, comparisons, bitwise ops and shifts. Then what a table row cannot express: bad input, signed
zeros, Python-scalar dtype rules. See opinfo.py for how a case is written and checked.

Domains mix random values with the points where PyTorch defines a one-sided gradient (0 for the ReLU family,
the bounds of hardtanh/relu6/hardsigmoid/hardswish, the branch points of the series expansions), so that the
backward rows check those too. numpy references compute in float64."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from opinfo import (
    BINARY,
    BOOL,
    F16,
    F32,
    F64,
    I32,
    I64,
    TERNARY,
    U8,
    UNARY,
    Domain,
    F,
    M,
    OpCase,
    Spec,
    integral,
    nonzero,
    table_tests,
    torch_module,
)
from tinygrad import Device, Tensor, dtypes
from tinygrad.dtype import DType

_torch = torch_module()
I8, I16, BF16 = dtypes.int8, dtypes.int16, dtypes.bfloat16
U3: list[tuple[Spec, ...]] = [((3, 4),), ((0, 3),), (M(2, 3),)]  # plain, empty, non-contiguous
ONE: list[tuple[Spec, ...]] = [((3, 4),)]
# broadcast, scalar with vector, empty, non-contiguous views
BIN: list[tuple[Spec, ...]] = [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((), (3,)), ((0, 4), (1, 4)), (M(2, 3), F(1, 3))]
NAN, INF = math.nan, math.inf


def _f(name: str) -> Callable[..., Any]:
    """torch.nn.functional.<name>, looked up when called (the module imports without torch)."""
    return lambda *a, **kw: getattr(_torch.nn.functional, name)(*a, **kw)


# ---- domains ----

def with_points(lo: float, hi: float, points: Sequence[float]) -> Domain:
    """Uniform in [lo, hi], with about 40% of the values replaced by the given points (kinks, bounds, branches)."""
    def gen(rng: np.random.Generator, shape: tuple[int, ...], nd: np.dtype) -> np.ndarray:
        x = rng.uniform(lo, hi, size=shape)
        return np.where(rng.random(shape) < 0.4, rng.choice(np.asarray(points, dtype=np.float64), size=shape), x)
    return gen


def special(*values: float) -> Domain:
    """Only the given values (NaN, infinities, signed zeros, ...), each one present where the shape has room."""
    def gen(rng: np.random.Generator, shape: tuple[int, ...], nd: np.dtype) -> np.ndarray:
        return np.resize(rng.permutation(np.asarray(values, dtype=np.float64)), shape)
    return gen


def all_pairs(*values: float) -> tuple[list[tuple[Spec, ...]], tuple[Domain, Domain]]:
    """Shapes and per-argument domains under which a binary op meets every pair of the values."""
    v = np.asarray(values, dtype=np.float64)
    n = len(v)
    first: Domain = lambda rng, shape, nd: np.repeat(v, n).reshape(shape)  # noqa: E731
    second: Domain = lambda rng, shape, nd: np.tile(v, n).reshape(shape)  # noqa: E731
    return [((n, n), (n, n))], (first, second)


def halves(lo: int, hi: int) -> Domain:
    """Multiples of 0.5 (ties for rounding) mixed with arbitrary values."""
    def gen(rng: np.random.Generator, shape: tuple[int, ...], nd: np.dtype) -> np.ndarray:
        tie = rng.integers(2 * lo, 2 * hi, size=shape, endpoint=True) / 2
        return np.where(rng.random(shape) < 0.6, tie, rng.uniform(lo, hi, size=shape))
    return gen


def extremes(nd_extra: Sequence[int] = (0, 1, -1, 7)) -> Domain:
    """The ends of an integer dtype's range, and a few small values."""
    def gen(rng: np.random.Generator, shape: tuple[int, ...], nd: np.dtype) -> np.ndarray:
        if nd.kind == "b":
            return rng.random(shape) < 0.5
        info = np.iinfo(nd)
        vals = np.array([info.min, info.max, info.min + 1, info.max - 1, *nd_extra], dtype=object)
        vals = np.array([v for v in vals if info.min <= v <= info.max]).astype(nd)
        return rng.choice(vals, size=shape)
    return gen


def pair_case(name: str, fn: Callable[..., Any], np_fn: Callable[..., Any], values: Sequence[float],
              dts: Sequence[DType] = (F32,), **kw: Any) -> OpCase:
    """A forward row of a binary op over every pair of the special values."""
    shapes, domains = all_pairs(*values)
    return OpCase(name, fn, np_fn, shapes, tuple(dts), domain=domains, grad=False, **kw)


SPECIAL_VALUES = (NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 2.5, -0.5)
SPECIALS = special(*SPECIAL_VALUES)
PAIR_SHAPES, SPECIAL_PAIRS = all_pairs(*SPECIAL_VALUES)  # 81 pairs


# ---- numpy references (float64 inside) ----

def _d(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-_d(x)))


def _softplus(x: np.ndarray, beta: float = 1.0, threshold: float = 20.0) -> np.ndarray:
    z = _d(x) * beta
    return np.where(z > threshold, _d(x), np.log1p(np.exp(np.minimum(z, threshold))) / beta)


def _elu(x: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    return np.where(_d(x) > 0, _d(x), alpha * np.expm1(np.minimum(_d(x), 0)))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    z = _d(x)
    return 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))


def _np_shift(left: bool) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """PyTorch's shifts: by the bit width or more, or by a negative amount, a left shift gives 0 and a right shift
    the sign fill."""
    def run(x: np.ndarray, s: np.ndarray) -> np.ndarray:
        bits = x.dtype.itemsize * 8
        out_of_range = (s < 0) | (s >= bits)
        amount = np.where(out_of_range, 0, s).astype(x.dtype)
        if left:
            return np.where(out_of_range, 0, x << amount).astype(x.dtype)
        fill = np.where(x < 0, -1, 0) if x.dtype.kind == "i" else np.zeros_like(x)
        return np.where(out_of_range, fill, x >> amount).astype(x.dtype)
    return run


def _np_int_pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer power with wraparound; a negative exponent gives 0 unless the base is 1 or -1 (PyTorch's rule)."""
    pos = a ** np.maximum(b, 0).astype(b.dtype)
    if b.dtype.kind == "u":
        return pos
    neg = np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 == 1, -1, 1), 0)).astype(a.dtype)
    return np.where(b < 0, neg, pos).astype(a.dtype)


def _bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (to nearest, ties to even), as float32."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def bf16(name: str, fn: Callable[..., Any], np_fn: Callable[..., Any], nargs: int = 1, **kw: Any) -> OpCase:
    """The op on bfloat16 inputs (cast from float32 and back, since numpy has no bfloat16): the result must be
    the float64 reference on the rounded inputs, within bfloat16's precision."""
    shapes = ONE + [(M(2, 3),)] if nargs == 1 else BINARY[:2]
    return OpCase(f"{name}_bf16", lambda *xs: fn(*[x.bfloat16() for x in xs]).float(),
                  lambda *xs: np.asarray(np_fn(*[_d(_bf16_round(x)) for x in xs]), dtype=np.float64), shapes,
                  grad=False, out_dtype=lambda d: F32, **{"atol": 1e-2, "rtol": 1e-2, **kw})


# ---------------------------------------------------------------------------------------------------------------------
# activations

ACTIVATION_CASES = [
    OpCase("relu_at_zero_and_nan", lambda x: x.relu(), lambda x: np.where(_d(x) <= 0, 0.0, _d(x)), U3, (F32, F16),
           domain=with_points(-2, 2, [0.0]), grad=True),
    OpCase("relu_nan_inf", lambda x: x.relu(), lambda x: np.where(_d(x) <= 0, 0.0, _d(x)), ONE, (F32, F16, F64),
           domain=SPECIALS, grad=False),
    OpCase("leaky_relu", lambda x: x.leaky_relu(), lambda x: np.where(x > 0, _d(x), 0.01 * _d(x)), UNARY,
           (F32, F16, F64), torch_fn=_f("leaky_relu"), domain=with_points(-3, 3, [0.0])),
    OpCase("leaky_relu_slope", lambda x: x.leaky_relu(0.2), lambda x: np.where(x > 0, _d(x), 0.2 * _d(x)), U3,
           torch_fn=lambda x: _f("leaky_relu")(x, 0.2), domain=with_points(-3, 3, [0.0])),
    OpCase("elu", lambda x: x.elu(), _elu, U3, (F32, F16, F64), torch_fn=_f("elu"),
           domain=with_points(-4, 4, [0.0, -0.5, 0.5, 100.0])),
    OpCase("elu_alpha", lambda x: x.elu(2.0), lambda x: _elu(x, 2.0), U3, torch_fn=lambda x: _f("elu")(x, 2.0),
           domain=with_points(-3, 3, [0.0])),
    OpCase("celu", lambda x: x.celu(2.0), lambda x: np.where(x > 0, _d(x), 2 * np.expm1(np.minimum(_d(x), 0) / 2)),
           U3, (F32, F16), torch_fn=lambda x: _f("celu")(x, 2.0), domain=with_points(-3, 3, [0.0, 300.0])),
    OpCase("selu", lambda x: x.selu(), lambda x: 1.0507009873554805 * _elu(x, 1.6732632423543772), U3,
           (F32, F16, F64), torch_fn=_f("selu"), domain=with_points(-3, 3, [0.0])),
    OpCase("gelu", lambda x: x.gelu(), _gelu_tanh, UNARY, (F32, F16, F64),
           torch_fn=lambda x: _f("gelu")(x, approximate="tanh"), domain=with_points(-5, 5, [0.0, -20.0, 20.0])),
    OpCase("gelu_exact", lambda x: x.gelu(approximate="none"), lambda x: 0.5 * _d(x) * (1 + _erf(_d(x) / 2 ** 0.5)),
           U3, (F32, F16), torch_fn=_f("gelu"), domain=with_points(-5, 5, [0.0, -12.0])),
    OpCase("quick_gelu", lambda x: x.quick_gelu(), lambda x: _d(x) * _sigmoid(1.702 * _d(x)), U3, (F32, F16),
           torch_fn=lambda x: x * _torch.sigmoid(1.702 * x)),
    OpCase("silu", lambda x: x.silu(), lambda x: _d(x) * _sigmoid(x), U3, (F32, F16, F64), torch_fn=_f("silu"),
           domain=with_points(-6, 6, [0.0, -100.0, 100.0])),
    OpCase("swish", lambda x: x.swish(), lambda x: _d(x) * _sigmoid(x), U3, torch_fn=_f("silu")),
    OpCase("mish", lambda x: x.mish(), lambda x: _d(x) * np.tanh(np.log1p(np.exp(np.minimum(_d(x), 50)))), U3,
           (F32, F16, F64), torch_fn=_f("mish"), domain=with_points(-6, 6, [0.0, -30.0, 25.0, 100.0])),
    OpCase("softplus", lambda x: x.softplus(), _softplus, UNARY, (F32, F16, F64), torch_fn=_f("softplus"),
           domain=with_points(-6, 6, [0.0, 19.5, 20.0, 21.0, -40.0, 100.0])),
    OpCase("softplus_beta_threshold", lambda x: x.softplus(2.0, 5.0), lambda x: _softplus(x, 2.0, 5.0), U3,
           torch_fn=lambda x: _f("softplus")(x, 2.0, 5.0), domain=with_points(-4, 6, [2.5, 2.0, 3.0])),
    OpCase("softsign", lambda x: x.softsign(), lambda x: _d(x) / (1 + np.abs(_d(x))), U3, (F32, F16),
           torch_fn=_f("softsign"), domain=with_points(-4, 4, [0.0])),
    OpCase("logsigmoid", lambda x: x.logsigmoid(), lambda x: np.minimum(_d(x), 0) - np.log1p(np.exp(-np.abs(_d(x)))),
           U3, (F32, F16, F64), torch_fn=_f("logsigmoid"), domain=with_points(-30, 30, [0.0, -100.0, 100.0])),
    OpCase("hardsigmoid", lambda x: x.hardsigmoid(), lambda x: np.clip(_d(x) / 6 + 0.5, 0, 1), U3, (F32, F16),
           torch_fn=_f("hardsigmoid"), domain=with_points(-5, 5, [-3.0, 3.0, 0.0])),
    OpCase("hardswish", lambda x: x.hardswish(), lambda x: _d(x) * np.clip(_d(x) + 3, 0, 6) / 6, U3, (F32, F16),
           torch_fn=_f("hardswish"), domain=with_points(-5, 5, [-3.0, 3.0, 0.0])),
    OpCase("hardtanh", lambda x: x.hardtanh(), lambda x: np.clip(x, -1, 1), UNARY, (F32, F16, F64),
           torch_fn=_f("hardtanh"), domain=with_points(-2, 2, [-1.0, 1.0])),
    OpCase("hardtanh_bounds", lambda x: x.hardtanh(-0.5, 2.0), lambda x: np.clip(x, -0.5, 2.0), U3,
           torch_fn=lambda x: _f("hardtanh")(x, -0.5, 2.0), domain=with_points(-2, 3, [-0.5, 2.0])),
    OpCase("relu6", lambda x: x.relu6(), lambda x: np.clip(x, 0, 6), U3, (F32, F16),
           torch_fn=_f("relu6"), domain=with_points(-2, 8, [0.0, 6.0])),
    # far from 0: exp(-x) overflows, which must reach neither the value nor the gradient
    OpCase("sigmoid_far", lambda x: x.sigmoid(), _sigmoid, U3, (F32, F16, F64),
           domain=with_points(-100, 100, [0.0, -1000.0, 1000.0])),
    OpCase("tanh_far", lambda x: x.tanh(), lambda x: np.tanh(_d(x)), U3, (F32, F16, F64),
           domain=with_points(-60, 60, [0.0, 1e-3, -1e-4, 500.0])),
    OpCase("tanh_small", lambda x: x.tanh(), lambda x: np.tanh(_d(x)), ONE, domain=(-1e-3, 1e-3), atol=1e-9,
           rtol=1e-6),
]

# ---------------------------------------------------------------------------------------------------------------------
# transcendental and other math

def _far_fn(x: Any) -> Any:
    th = isinstance(x, Tensor)
    def call(name: str, *a: Any) -> Any:
        return getattr(x, name)(*a) if th else getattr(_torch.nn.functional, name)(x, *a)
    return (x.erf() + (-x.abs()).expm1() + x.asinh() + x.atan() + x.tanh() + x.sigmoid() + call("elu")
            + call("softplus") + call("logsigmoid") + call("mish"))


def _far_np(x: np.ndarray) -> np.ndarray:
    z = _d(x)
    return (_erf(z) + np.expm1(-np.abs(z)) + np.arcsinh(z) + np.arctan(z) + np.tanh(z) + _sigmoid(z) + _elu(z)
            + _softplus(z) + np.minimum(z, 0) - np.log1p(np.exp(-np.abs(z))) + z * np.tanh(_softplus(z)))



MATH_CASES = [
    OpCase("erf", lambda x: x.erf(), _erf, UNARY, (F32, F16, F64),
           domain=with_points(-5, 5, [0.0, 0.5, -0.5, 6.0, -7.0, 0.4999, 3e3]), atol=2e-7, rtol=1e-6),
    OpCase("erf_small", lambda x: x.erf(), _erf, ONE, domain=(-1e-3, 1e-3), atol=1e-10, rtol=1e-6),
    OpCase("erf_inf", lambda x: x.erf(), _erf, [((2, 3),)], domain=special(INF, -INF, NAN, 7.0, -0.2, 0.0)),
    OpCase("erf_int", lambda x: x.erf(), _erf, ONE, (I32,), grad=False),
    OpCase("sinh", lambda x: x.sinh(), lambda x: np.sinh(_d(x)), U3, (F32, F16, F64),
           domain=with_points(-5, 5, [0.0, 0.5, -0.5]), rtol=1e-5),
    OpCase("sinh_small", lambda x: x.sinh(), lambda x: np.sinh(_d(x)), ONE, domain=(-1e-3, 1e-3), atol=1e-10),
    OpCase("cosh", lambda x: x.cosh(), lambda x: np.cosh(_d(x)), U3, (F32, F16, F64), domain=(-5.0, 5.0)),
    OpCase("asinh", lambda x: x.asinh(), lambda x: np.arcsinh(_d(x)), U3, (F32, F16, F64),
           domain=with_points(-20, 20, [0.0, 1e9, -3e10])),
    OpCase("acosh", lambda x: x.acosh(), lambda x: np.arccosh(_d(x)), U3, (F32, F16, F64),
           domain=with_points(1.05, 20, [2.0, 1e9])),
    OpCase("atanh", lambda x: x.atanh(), lambda x: np.arctanh(_d(x)), U3, (F32, F16, F64),
           domain=with_points(-0.95, 0.95, [0.0, 0.3, -0.3])),
    OpCase("asin", lambda x: x.asin(), lambda x: np.arcsin(_d(x)), U3, (F32, F16, F64),
           domain=with_points(-0.97, 0.97, [0.0])),
    OpCase("acos", lambda x: x.acos(), lambda x: np.arccos(_d(x)), U3, (F32, F16, F64),
           domain=with_points(-0.97, 0.97, [0.0])),
    OpCase("atan", lambda x: x.atan(), lambda x: np.arctan(_d(x)), UNARY, (F32, F16, F64, I32),
           domain=with_points(-20, 20, [0.0, 1.0, -1.0, 0.41421356, 1e30])),
    OpCase("inverse_trig_edges", lambda x: x.asin() + x.acos() + x.atanh(),
           lambda x: np.arcsin(_d(x)) + np.arccos(_d(x)) + np.arctanh(_d(x)), ONE, (F32, F64),
           domain=special(-1.0, 1.0, 1.5, -2.0, NAN, 0.0), grad=False),
    OpCase("inverse_hyperbolic_edges", lambda x: x.asinh() + x.acosh(),
           lambda x: np.arcsinh(_d(x)) + np.arccosh(_d(x)), ONE, (F32,),
           domain=special(1.0, 0.5, INF, -INF, NAN, 3e38), grad=False),
    OpCase("atan2", lambda y, x: y.atan2(x), lambda y, x: np.arctan2(_d(y), _d(x)), BIN, (F32, F16, F64, I32),
           domain=with_points(-3, 3, [0.0, 1.0, -1.0])),
    OpCase("atan2_specials", lambda y, x: y.atan2(x), lambda y, x: np.arctan2(_d(y), _d(x)), PAIR_SHAPES,
           (F32, F64), domain=SPECIAL_PAIRS, grad=False),
    OpCase("log10", lambda x: x.log10(), lambda x: np.log10(_d(x)), U3, (F32, F16, F64, I32),
           domain=with_points(0.1, 100, [1.0, 10.0])),
    OpCase("log1p", lambda x: x.log1p(), lambda x: np.log1p(_d(x)), UNARY, (F32, F16, F64, I32),
           domain=with_points(-0.95, 3, [0.0, 0.3, -0.3, 0.2999, 1e-6])),
    OpCase("log1p_small", lambda x: x.log1p(), lambda x: np.log1p(_d(x)), ONE, domain=(-1e-4, 1e-4), atol=1e-12,
           rtol=1e-6),
    OpCase("expm1", lambda x: x.expm1(), lambda x: np.expm1(_d(x)), UNARY, (F32, F16, F64, I32),
           domain=with_points(-3, 3, [0.0, 0.5, -0.5, 0.4999, -3e4])),
    OpCase("expm1_small", lambda x: x.expm1(), lambda x: np.expm1(_d(x)), ONE, domain=(-1e-4, 1e-4), atol=1e-12,
           rtol=1e-6),
    OpCase("transcendental_specials", lambda x: x.log1p() + x.expm1() + x.erf() + x.atan() + x.sinh(),
           lambda x: np.log1p(_d(x)) + np.expm1(_d(x)) + _erf(_d(x)) + np.arctan(_d(x)) + np.sinh(_d(x)), ONE,
           (F32,), domain=special(INF, NAN, 0.0, -1.0, 1.0, -0.25), grad=False),
    # where a piece is not selected it must see a harmless input: exp(1e20) or 1e20 ** 15 in the unselected piece
    # would turn its zero gradient into 0 * inf = NaN
    OpCase("far_from_every_branch", _far_fn, _far_np, ONE, torch_fn=_far_fn,
           domain=special(3e3, -3e3, 3e5, -3e5, 1e20, -1e20, 0.0, 0.3, -2.0, 40.0, -40.0, 1e-3)),
    OpCase("cos_large", lambda x: x.cos(), lambda x: np.cos(_d(x)), ONE, (F32, F64), domain=(-1e4, 1e4), grad=False),
    OpCase("round", lambda x: x.round(), lambda x: np.round(x), UNARY, (F32, F16, F64, I32), domain=halves(-6, 6)),
    OpCase("round_decimals", lambda x: x.round(decimals=2), lambda x: np.round(x, 2), U3, (F32, F64),
           torch_fn=lambda x: x.round(decimals=2)),
    OpCase("round_negative_decimals", lambda x: x.round(decimals=-1), lambda x: np.round(x, -1), ONE,
           torch_fn=lambda x: x.round(decimals=-1), domain=halves(-60, 60), grad=False),
    OpCase("round_specials", lambda x: x.round(), np.round, ONE, (F32, F16),
           domain=special(0.5, -0.5, 1.5, -2.5, 0.49999997, INF, -INF, NAN, 2.0 ** 24 + 2, -0.0), grad=False),
    OpCase("lerp", lambda a, b, w: a.lerp(b, w), lambda a, b, w: _d(a) + _d(w) * (_d(b) - _d(a)), TERNARY,
           (F32, F16, F64), domain=((-3.0, 3.0), (-3.0, 3.0), with_points(-0.5, 1.5, [0.0, 0.5, 1.0]))),
    OpCase("lerp_scalar_weight", lambda a, b: a.lerp(b, 0.75), lambda a, b: _d(a) + 0.75 * (_d(b) - _d(a)),
           BINARY[:4]),
    OpCase("copysign", lambda x, y: x.copysign(y), lambda x, y: np.copysign(_d(x), _d(y)), BIN,
           (F32, F64, F16, I32), domain=with_points(-3, 3, [0.0, -0.0])),
    OpCase("copysign_scalar", lambda x: x.copysign(-0.0), lambda x: np.copysign(_d(x), -0.0), U3,
           torch_fn=lambda x: x.copysign(-0.0), domain=with_points(-3, 3, [0.0])),
    OpCase("logaddexp", lambda x, y: x.logaddexp(y), lambda x, y: np.logaddexp(_d(x), _d(y)), BIN,
           (F32, F16, F64), domain=with_points(-5, 5, [0.0, 1.0, -1.0]), rtol=2e-5),
    pair_case("logaddexp_specials", lambda x, y: x.logaddexp(y), lambda x, y: np.logaddexp(_d(x), _d(y)),
              (INF, -INF, NAN, 0.0, -30.0, 80.0)),
    OpCase("fmod", lambda x, y: x.fmod(y), lambda x, y: np.fmod(x, y), BIN, (F32, F64, F16, I32, I64),
           domain=((-9.0, 9.0), nonzero(1.0, 3.0))),
    OpCase("fmod_exact", lambda x, y: x.fmod(y), lambda x, y: np.fmod(x, y), [((6, 7), (6, 7))], (F32, F64),
           domain=(integral(-40, 40), special(0.1, -0.1, 0.2, 0.3, -0.7, 2.5)), grad=False, atol=0, rtol=0),
    OpCase("fmod_specials", lambda x, y: x.fmod(y), lambda x, y: np.fmod(x, y), PAIR_SHAPES, (F32, F64, F16),
           domain=SPECIAL_PAIRS, grad=False),
    # remainder and floor division through fmod: exact where (x / y).floor() would round across an integer
    OpCase("remainder_exact", lambda x, y: x % y, lambda x, y: np.mod(x, y), [((6, 7), (6, 7))], (F32, F64, F16),
           domain=(integral(-40, 40), special(0.1, -0.1, 0.2, 0.3, -0.7, 2.5)), grad=False, atol=0, rtol=0),
    OpCase("remainder_grad", lambda x, y: x % y, lambda x, y: np.mod(x, y), BINARY[:3], (F32, F64),
           domain=((-9.0, 9.0), nonzero(0.5, 3.0))),
    OpCase("remainder_specials", lambda x, y: x % y, lambda x, y: np.mod(x, y), PAIR_SHAPES, (F32, F64),
           domain=SPECIAL_PAIRS, grad=False),
    OpCase("floordiv_exact", lambda x, y: x // y, lambda x, y: np.floor_divide(x, y), [((6, 7), (6, 7))],
           (F32, F64),
           domain=(integral(-40, 40), special(0.1, -0.1, 0.2, 0.3, -0.7, 2.5)), grad=False, atol=0, rtol=0),
    OpCase("floordiv_specials", lambda x, y: x // y, lambda x, y: np.floor_divide(x, y), PAIR_SHAPES,
           (F32, F64, F16), domain=SPECIAL_PAIRS, grad=False),
    OpCase("pow_int", lambda x, y: x ** y, _np_int_pow, BINARY[:3], (I32, I64, I8, U8), grad=False,
           domain=(integral(-4, 4), integral(-2, 12))),
    OpCase("pow_int_wraps", lambda x, y: x ** y, _np_int_pow, [((4, 5), (4, 5))], (I32, I64),
           grad=False, domain=(integral(-7, 7), integral(20, 70))),
    OpCase("pow_int_scalar_exponent", lambda x: x ** 3, lambda x: x ** 3, U3, (I32, U8, I16), grad=False,
           domain=integral(-9, 9)),
    OpCase("pow_int_scalar_base", lambda x: 3 ** x, lambda x: np.int32(3) ** x, U3, (I32,), grad=False,
           domain=integral(0, 19)),
    pair_case("pow_specials", lambda x, y: x ** y, lambda x, y: np.power(_d(x), _d(y)),
              (0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, INF, -INF, NAN, 3.0, -8.0, 1 / 3, -0.5), (F32, F16)),
    OpCase("pow_half", lambda x, y: x ** y, lambda x, y: np.power(_d(x), _d(y)), BINARY[:2], (F16,),
           domain=((0.5, 3.0), (-2.0, 3.0))),
]

# ---------------------------------------------------------------------------------------------------------------------
# predicates, comparisons, bitwise ops, integer dtypes

PREDICATE_CASES = [
    OpCase("isnan", lambda x: x.isnan(), np.isnan, U3, (F32, F16, F64, I32), domain=SPECIALS, grad=False),
    OpCase("isinf", lambda x: x.isinf(), np.isinf, U3, (F32, F16, F64, I32), domain=SPECIALS, grad=False),
    OpCase("isinf_positive", lambda x: x.isinf(detect_negative=False), np.isposinf, ONE, (F32, F64),
           torch_fn=lambda x: _torch.isposinf(x), domain=SPECIALS, grad=False),
    OpCase("isinf_negative", lambda x: x.isinf(detect_positive=False), np.isneginf, ONE,
           torch_fn=lambda x: _torch.isneginf(x), domain=SPECIALS, grad=False),
    OpCase("isfinite", lambda x: x.isfinite(), np.isfinite, U3, (F32, F16, F64, I32), domain=SPECIALS, grad=False),
    # integer data and tolerances whose boundaries no value reaches exactly: no rounding can flip a result
    OpCase("isclose", lambda x, y: x.isclose(y, rtol=0.2, atol=0.5),
           lambda x, y: np.isclose(x, y, rtol=0.2, atol=0.5), BIN, (F32, I32, F16), grad=False,
           domain=integral(-4, 4)),
    pair_case("isclose_specials", lambda x, y: x.isclose(y), np.isclose, (0.0, 1.0, 1.000001, INF, -INF, NAN),
              (F32, F64)),
    pair_case("isclose_equal_nan", lambda x, y: x.isclose(y, equal_nan=True),
              lambda x, y: np.isclose(x, y, equal_nan=True), (0.0, 1.0, INF, NAN)),
    OpCase("le_ge_nan", lambda x, y: (x <= y).int() * 2 + (x >= y).int(),
           lambda x, y: (x <= y).astype(np.int32) * 2 + (x >= y).astype(np.int32), PAIR_SHAPES, (F32, F16, F64),
           grad=False, domain=SPECIAL_PAIRS),
    OpCase("maximum_minimum_nan", lambda x, y: x.maximum(y) + x.minimum(y) * 3,
           lambda x, y: np.maximum(x, y) + np.minimum(x, y) * 3, PAIR_SHAPES, (F32, F16), grad=False,
           domain=SPECIAL_PAIRS),
    OpCase("minimum_int_extremes", lambda x, y: x.minimum(y), np.minimum, BINARY[:3], (I64, I32, I8, U8, I16),
           grad=False, domain=extremes()),
    OpCase("maximum_int_extremes", lambda x, y: x.maximum(y), np.maximum, BINARY[:3], (I64, I8, U8), grad=False,
           domain=extremes()),
    OpCase("bitwise_not", lambda x: x.bitwise_not(), np.invert, U3, (I32, U8, I64, I8, I16, BOOL), grad=False,
           domain=extremes()),
    OpCase("invert_operator", lambda x: ~x, np.invert, ONE, (I32, BOOL), grad=False, domain=integral(-100, 100)),
    OpCase("lshift", lambda x, s: x << s, _np_shift(left=True), BINARY[:3], (I32, I8, I16, I64, U8), grad=False,
           domain=(extremes((0, 1, -1, 5, -77)), integral(-2, 66))),
    OpCase("rshift", lambda x, s: x >> s, _np_shift(left=False), BINARY[:3], (I32, I8, I16, I64, U8), grad=False,
           domain=(extremes((0, 1, -1, 5, -77)), integral(-2, 66))),
    OpCase("compare_ints", lambda x, y: (x < y).int() * 4 + (x <= y).int() * 2 + (x == y).int(),
           lambda x, y: (x < y).astype(np.int32) * 4 + (x <= y).astype(np.int32) * 2 + (x == y).astype(np.int32),
           BINARY[:3], (I8, I16, I64, U8, BOOL), grad=False, domain=extremes()),
    OpCase("bitwise_ints", lambda x, y: (x & y) ^ (x | y), lambda x, y: (x & y) ^ (x | y), BINARY[:3],
           (I8, I16, I64), grad=False, domain=extremes()),
    OpCase("arith_wraps", lambda x, y: x * y + x - y, lambda x, y: x * y + x - y, BINARY[:3], (I8, I16, U8, I32, I64),
           grad=False, domain=extremes()),
    # a Python float next to a 16-bit float tensor keeps the tensor's dtype (PyTorch's rule)
    OpCase("where_scalar_keeps_dtype", lambda c, x: c.where(x, 0.5), lambda c, x: np.where(c, x, 0.5).astype(x.dtype),
           BINARY[:3], (F16, F32, F64), torch_fn=lambda c, x: _torch.where(c, x, 0.5),
           arg_dtypes=lambda d: (BOOL, d), domain=(integral(0, 1), (-3.0, 3.0))),
    OpCase("where_scalar_first", lambda c, x: c.where(2, x), lambda c, x: np.where(c, 2, x).astype(x.dtype),
           BINARY[:2], (F16, I8, U8), torch_fn=lambda c, x: _torch.where(c, 2, x), arg_dtypes=lambda d: (BOOL, d),
           domain=(integral(0, 1), (-3.0, 3.0)), grad=False),
]

# ---------------------------------------------------------------------------------------------------------------------
# dtype coverage of the skeleton's elementwise ops: float16 and float64 rows (test_ops.py has float32), bfloat16
# through casts

DTYPE_CASES = [
    OpCase("sin_cos_tan_wide", lambda x: x.sin() + x.cos() * 2 + x.tan() * 0.25,
           lambda x: np.sin(_d(x)) + np.cos(_d(x)) * 2 + np.tan(_d(x)) * 0.25, ONE, (F16, F64),
           domain=(-1.2, 1.2), grad=False),
    OpCase("exp_log_sqrt_wide", lambda x: x.exp() + x.log() + x.sqrt() + x.rsqrt() + x.log2() + x.exp2(),
           lambda x: np.exp(_d(x)) + np.log(_d(x)) + np.sqrt(_d(x)) + 1 / np.sqrt(_d(x)) + np.log2(_d(x))
           + np.exp2(_d(x)), ONE, (F16, F64), domain=(0.1, 4.0), grad=False),
    OpCase("rounding_wide", lambda x: x.floor() * 8 + x.ceil() * 4 + x.trunc() * 2 + x.sign(),
           lambda x: np.floor(x) * 8 + np.ceil(x) * 4 + np.trunc(x) * 2 + np.sign(x), ONE, (F16, F64),
           domain=halves(-4, 4), grad=False),
    OpCase("abs_reciprocal_sigmoid_wide", lambda x: x.abs() + x.reciprocal() + x.sigmoid() + x.tanh(),
           lambda x: np.abs(_d(x)) + 1 / _d(x) + _sigmoid(x) + np.tanh(_d(x)), ONE, (F16, F64),
           domain=nonzero(0.25, 3.0), grad=False),
    OpCase("arith_wide", lambda x, y: (x + y) * x - y / x + x // y + x % y,
           lambda x, y: (x + y) * x - y / x + x // y + np.mod(x, y), BINARY[:3], (F16, F64),
           domain=nonzero(0.5, 3.0), grad=False, rtol=1e-5),
    bf16("exp_log", lambda x: x.exp() + x.abs().log(), lambda x: np.exp(x) + np.log(np.abs(x)),
         domain=nonzero(0.25, 3.0)),
    bf16("sqrt_reciprocal", lambda x: x.sqrt() + x.reciprocal(), lambda x: np.sqrt(x) + 1 / x, domain=(0.25, 4.0)),
    bf16("sin_cos_tan", lambda x: x.sin() + x.cos() + x.tan(), lambda x: np.sin(x) + np.cos(x) + np.tan(x),
         domain=(-1.2, 1.2)),
    bf16("sigmoid_tanh_erf", lambda x: x.sigmoid() + x.tanh() + x.erf(), lambda x: _sigmoid(x) + np.tanh(x) + _erf(x)),
    bf16("gelu_silu_softplus", lambda x: x.gelu() + x.silu() + x.softplus(),
         lambda x: _gelu_tanh(x) + x * _sigmoid(x) + _softplus(x)),
    bf16("round_floor_relu", lambda x: x.round() + x.floor() + x.relu(),
         lambda x: np.round(x) + np.floor(x) + np.maximum(x, 0), domain=halves(-4, 4)),
    bf16("arith", lambda x, y: (x + y) * x - y / x, lambda x, y: (x + y) * x - y / x, nargs=2,
         domain=nonzero(0.5, 3.0)),
    bf16("maximum_where", lambda x, y: x.maximum(y) + (x < y).where(x, y) * 2,
         lambda x, y: np.maximum(x, y) + np.where(x < y, x, y) * 2, nargs=2),
    bf16("pow_atan2_fmod", lambda x, y: x.abs() ** y + x.atan2(y) + x.fmod(y),
         lambda x, y: np.abs(x) ** y + np.arctan2(x, y) + np.fmod(x, y), nargs=2, domain=nonzero(0.5, 2.0)),
]

CASES = ACTIVATION_CASES + MATH_CASES + PREDICATE_CASES + DTYPE_CASES


# the forward test (values vs numpy, dtype vs PyTorch) and backward test (gradients vs PyTorch) of the table
test_forward, test_backward = table_tests(CASES)


# ---------------------------------------------------------------------------------------------------------------------
# what a table row cannot express

def test_signed_zeros_follow_c() -> None:
    x = Tensor([-0.0, 0.0, -4.0, 3.0, -0.0, 0.0])
    y = Tensor([1.0, -1.0, 2.0, -1.5, -0.0, -0.0])
    # an exact multiple keeps the dividend's sign, -0.0 included
    np.testing.assert_array_equal(np.signbit(x.fmod(y.abs() + 1).numpy()), [True, False, True, False, True, False])
    np.testing.assert_array_equal(np.signbit(x.copysign(y).numpy()), np.signbit(y.numpy()))
    np.testing.assert_array_equal(np.signbit(x.atan2(Tensor([1.0] * 6)).numpy()), np.signbit(x.numpy()))
    assert x.atan2(Tensor([-0.0] * 6)).numpy()[0] == pytest.approx(-math.pi)
    assert (Tensor([-0.0]) ** -1).item() == -math.inf


def test_gradient_at_the_origin_of_atan2_is_zero(torch: Any) -> None:
    y, x = Tensor([0.0, 0.0, 1.0], requires_grad=True), Tensor([0.0, -0.0, 0.0], requires_grad=True)
    y.atan2(x).sum().backward()
    ty, tx = torch.tensor([0.0, 0.0, 1.0], requires_grad=True), torch.tensor([0.0, -0.0, 0.0], requires_grad=True)
    torch.atan2(ty, tx).sum().backward()
    assert y.grad is not None and x.grad is not None
    np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy())
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


def test_gelu_exact_and_tanh_differ_and_reject_other_modes() -> None:
    x = Tensor([1.5])
    assert abs(x.gelu().item() - x.gelu(approximate="none").item()) > 1e-5
    with pytest.raises(ValueError, match="'erf'"):
        x.gelu(approximate="erf")


@pytest.mark.parametrize("make,exc,words", [
    (lambda: Tensor([1.5]).bitwise_not(), TypeError, "float32"),
    (lambda: ~Tensor([1.5]), TypeError, "float32"),
    (lambda: Tensor([True]).fmod(Tensor([True])), TypeError, "bool"),
    (lambda: Tensor([1, 2]).round(decimals=1), TypeError, "int32"),
    (lambda: Tensor([1, 2]) ** -1, RuntimeError, "-1"),
    (lambda: Tensor([1.0]).celu(0.0), ValueError, "alpha"),
    (lambda: Tensor([1.0]).softplus(beta=0), ValueError, "beta"),
    (lambda: Tensor([1.0]).isclose(Tensor([1.0]), rtol=-1.0), ValueError, "rtol=-1.0"),
    (lambda: Tensor([1.0]) << 1, TypeError, "float32"),
    (lambda: Tensor([1.0]) & Tensor([1]), TypeError, "float32"),
], ids=["bitwise_not_float", "invert_float", "fmod_bool", "round_decimals_int", "int_negative_power", "celu_alpha0",
        "softplus_beta0", "isclose_negative_tol", "shift_float", "and_float"])
def test_bad_input_raises(make: Callable[[], Any], exc: type[Exception], words: str) -> None:
    with pytest.raises(exc, match=words.replace("(", r"\(")):
        make()


def test_allclose_and_is_floating_point_match_torch(torch: Any) -> None:
    pairs = [([1.0, 2.0], [1.0, 2.000001]), ([1.0, NAN], [1.0, NAN]), ([INF], [INF]), ([1.0], [1.1]), ([], [])]
    for a, b in pairs:
        for equal_nan in (False, True):
            got = Tensor(a).allclose(Tensor(b), equal_nan=equal_nan)
            assert isinstance(got, bool)
            assert got == torch.allclose(torch.tensor(a), torch.tensor(b), equal_nan=equal_nan), (a, b, equal_nan)
    assert Tensor([1, 2]).allclose(Tensor([1, 3]), atol=1) and not Tensor([1, 2]).allclose(Tensor([1, 4]), atol=1)
    for d in (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64):
        assert Tensor.zeros(2, dtype=d).is_floating_point()
    for d in (dtypes.bool, dtypes.uint8, dtypes.int32, dtypes.int64):
        assert not Tensor.zeros(2, dtype=d).is_floating_point()


def test_lerp_hits_both_ends_exactly() -> None:
    a, b = Tensor([0.1, -3.3, 7.7]), Tensor([0.3, 2.9, -1e-3])
    np.testing.assert_array_equal(a.lerp(b, 0.0).numpy(), a.numpy())
    np.testing.assert_array_equal(a.lerp(b, 1.0).numpy(), b.numpy())
    np.testing.assert_array_equal(a.lerp(b, Tensor([1.0, 1.0, 1.0])).numpy(), b.numpy())


def test_composites_of_half_precision_round_once() -> None:
    # computed in float32 and rounded at the end, the result is the correctly rounded float16 of the exact value
    x = np.linspace(-3, 3, 61).astype(np.float16)
    for fn, ref in [(lambda t: t.erf(), _erf), (lambda t: t.tanh(), np.tanh), (lambda t: t.exp(), np.exp),
                    (lambda t: t.expm1(), np.expm1), (lambda t: t.atan(), np.arctan)]:
        got = fn(Tensor(x)).numpy()
        assert got.dtype == np.float16
        exact = ref(x.astype(np.float64))
        ulp = np.spacing(np.abs(exact).astype(np.float16)).astype(np.float64)
        assert (np.abs(got.astype(np.float64) - exact) <= ulp).all()


@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.int32, dtypes.int64, dtypes.float16, dtypes.float32,
                                   dtypes.float64])
def test_subtracting_a_negative_constant(dtype: DType) -> None:
    # a renderer that prints `a - -8` as `a--8` makes code that does not compile (C) or decrements (WGSL)
    if not Device[Device.DEFAULT].supports_dtype(dtype):
        pytest.skip(f"{Device.DEFAULT} has no {dtype}")
    x = Tensor([1, -2, 3], dtype=dtype)
    np.testing.assert_array_equal(((x - (-8)) * -3 - -0.0).numpy().astype(np.float64) if dtype.is_float else
                                  ((x - (-8)) * -3).numpy(), np.array([-27, -18, -33]))
