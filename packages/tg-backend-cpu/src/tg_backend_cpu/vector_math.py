"""exp2 and log2 of float32 as plain arithmetic, for both CPU paths (the C renderer's `tg_exp2f`/`tg_log2f`, the
LLVM renderer's `@tg_exp2_f32`/`@tg_log2_f32`): libm's functions are a call per element, which no vectoriser puts in
SIMD registers, so softmax, sigmoid, SiLU, GELU and log-softmax ran one element at a time; these are a few dozen
instructions without branches that the vectorisers treat like any other arithmetic.

Both compute in float64 and round once to float32 at the end, which also rounds subnormal results and overflows
correctly. Their polynomials leave an error of about 2**-32 of the result, so the float32 result is the correctly
rounded one but for the rare value within that distance of a rounding boundary, where it is 1 ulp off (tests:
tg-backend-cpu's test_vector_math.py; the conformance kit allows 4). A float32 polynomial for exp2 was within 1 ulp
too, but one result in ten differed from libm's, enough to move a training run's trajectory.

* exp2: x is clamped to [-151, 129] (past which every float32 result is 0 or inf), n = x rounded to the nearest
  integer and f = x - n (exact, |f| <= 1/2); 2**f = exp(f ln 2) by its Taylor polynomial of degree
  `EXP2_DEGREE`; times 2**n, made from exponent bits (exact). inf -> inf, -inf -> +0.0, NaN -> NaN, 0 -> 1.
* log2: x = 2**e * m from the bits of x in float64 (float32 subnormals are normal there), m in [sqrt(1/2), sqrt(2)];
  log2(m) = 2/ln 2 * atanh(s), s = (m - 1) / (m + 1), |s| <= 0.172, by the first `LOG2_TERMS` terms of the odd
  series. +-0 -> -inf, inf -> inf, negatives and NaN -> NaN, 1 -> +0.0.

float16 goes through the float32 function (one more rounding, to half). float64 keeps libm's functions. Under gcc
the C helpers are libm's: the C path turns gcc's loop if-conversion off (a miscompile, see compiler.py), and without
it gcc's vectoriser takes the helpers' selects for control flow and leaves the loop scalar, where libm is faster.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from tinygrad.dtype import DType, dtypes
from tinygrad.uop.ops import Ops

EXP2_DEGREE = 8
EXP2_LOW, EXP2_HIGH = -151.0, 129.0
#: (ln 2)**k / k!, the Taylor coefficients of 2**f
EXP2_COEFFICIENTS = tuple(math.log(2) ** k / math.factorial(k) for k in range(EXP2_DEGREE + 1))
LOG2_TERMS = 7
#: 2 / (ln 2 (2k + 1)), the coefficients of s**(2k) in log2(m) / s
LOG2_COEFFICIENTS = tuple(2 / math.log(2) / (2 * k + 1) for k in range(LOG2_TERMS))


def _horner(coefficients: tuple[float, ...], var: str) -> str:
    """c0 + var*(c1 + var*(...)) as a C expression of hexadecimal (exact) double constants."""
    text = float.hex(coefficients[-1])
    for c in reversed(coefficients[:-1]):
        text = f"({text} * {var} + {float.hex(c)})"
    return text


C_EXP2 = f"""static inline float tg_exp2f(float x) {{
  float c = x < {EXP2_LOW}f ? {EXP2_LOW}f : x;
  c = c > {EXP2_HIGH}f ? {EXP2_HIGH}f : c;
  c = c == c ? c : 0.0f;  /* NaN: a number for the conversion to an integer below (undefined for NaN) */
  double d = c, n = __builtin_rint(d), f = d - n;
  double p = {_horner(EXP2_COEFFICIENTS, "f")};
  union {{ long long i; double f; }} scale = {{ ((long long)n + 1023) << 52 }};
  float y = (float)(p * scale.f);
  return x == x ? y : x;
}}
"""

C_LOG2 = f"""static inline float tg_log2f(float x) {{
  union {{ double f; long long i; }} u = {{ (double)x }};
  long long e = (u.i >> 52) - 1023;
  u.i = (u.i & 0xfffffffffffffLL) | 0x3ff0000000000000LL;
  double m = u.f;
  int big = m > {float.hex(math.sqrt(2.0))};
  m = big ? m * 0.5 : m;
  double s = (m - 1.0) / (m + 1.0), s2 = s * s;
  float y = (float)((double)(e + big) + s * {_horner(LOG2_COEFFICIENTS, "s2")});
  y = x == 0.0f ? -__builtin_inff() : y;
  y = x == __builtin_inff() ? x : y;
  return x < 0.0f || x != x ? __builtin_nanf("") : y;
}}
"""


def _llvm_horner(coefficients: tuple[float, ...], var: str, prefix: str, f64: Callable[[float], str]) -> list[str]:
    """Horner's steps as llvm.fmuladd.f64 calls; the last one is named %{prefix}0."""
    lines, acc = [], f64(coefficients[-1])
    for k in range(len(coefficients) - 2, -1, -1):
        lines.append(f"  %{prefix}{k} = call double @llvm.fmuladd.f64(double {acc}, double {var}, "
                     f"double {f64(coefficients[k])})")
        acc = f"%{prefix}{k}"
    return lines


def llvm_exp2(f32: Callable[[float], str], f64: Callable[[float], str]) -> str:
    """`@tg_exp2_f32`. fptosi of NaN is poison, which the last select does not pick."""
    body = "\n".join(_llvm_horner(EXP2_COEFFICIENTS, "%f", "p", f64))
    return f"""
define internal float @tg_exp2_f32(float %x) alwaysinline nounwind {{
  %low = fcmp olt float %x, {f32(EXP2_LOW)}
  %c0 = select i1 %low, float {f32(EXP2_LOW)}, float %x
  %high = fcmp ogt float %c0, {f32(EXP2_HIGH)}
  %c = select i1 %high, float {f32(EXP2_HIGH)}, float %c0
  %d = fpext float %c to double
  %n = call double @llvm.roundeven.f64(double %d)
  %f = fsub double %d, %n
{body}
  %ni = fptosi double %n to i64
  %biased = add i64 %ni, 1023
  %bits = shl i64 %biased, 52
  %scale = bitcast i64 %bits to double
  %yd = fmul double %p0, %scale
  %y = fptrunc double %yd to float
  %nan = fcmp uno float %x, 0.0
  %r = select i1 %nan, float %x, float %y
  ret float %r
}}
"""


def llvm_log2(f32: Callable[[float], str], f64: Callable[[float], str]) -> str:
    """`@tg_log2_f32`; the special values are selected at the end."""
    body = "\n".join(_llvm_horner(LOG2_COEFFICIENTS, "%s2", "p", f64))
    return f"""
define internal float @tg_log2_f32(float %x) alwaysinline nounwind {{
  %d = fpext float %x to double
  %bits = bitcast double %d to i64
  %eb = lshr i64 %bits, 52
  %e0 = sub i64 %eb, 1023
  %mbits = and i64 %bits, 4503599627370495
  %m1bits = or i64 %mbits, 4607182418800017408
  %m1 = bitcast i64 %m1bits to double
  %big = fcmp ogt double %m1, {f64(math.sqrt(2.0))}
  %mhalf = fmul double %m1, 0.5
  %m = select i1 %big, double %mhalf, double %m1
  %inc = zext i1 %big to i64
  %e = add i64 %e0, %inc
  %num = fsub double %m, 1.0
  %den = fadd double %m, 1.0
  %s = fdiv double %num, %den
  %s2 = fmul double %s, %s
{body}
  %ps = fmul double %s, %p0
  %ed = sitofp i64 %e to double
  %yd = fadd double %ed, %ps
  %y = fptrunc double %yd to float
  %zero = fcmp oeq float %x, 0.0
  %y1 = select i1 %zero, float {f32(-math.inf)}, float %y
  %inf = fcmp oeq float %x, {f32(math.inf)}
  %y2 = select i1 %inf, float %x, float %y1
  %bad = fcmp ult float %x, 0.0
  %r = select i1 %bad, float {f32(math.nan)}, float %y2
  ret float %r
}}
"""


@dataclass(frozen=True)
class Helper:
    """One op's float32 function: its C name and definition, its LLVM name and definition (from the float32 and
    float64 constant writers), and the LLVM intrinsics it calls."""
    c_name: str
    c_source: str
    llvm_name: str
    llvm_source: Callable[[Callable[[float], str], Callable[[float], str]], str]
    llvm_declarations: tuple[str, ...]


_FMULADD = "declare double @llvm.fmuladd.f64(double, double, double)"
#: the ops the CPU paths compute with these functions (for float32, float16 and the emulated floats)
HELPERS: dict[Ops, Helper] = {
    Ops.EXP2: Helper("tg_exp2f", C_EXP2, "tg_exp2_f32", llvm_exp2,
                     (_FMULADD, "declare double @llvm.roundeven.f64(double)")),
    Ops.LOG2: Helper("tg_log2f", C_LOG2, "tg_log2_f32", llvm_log2, (_FMULADD,)),
}


def computes(op: Ops, d: DType) -> bool:
    """Whether `op` of dtype `d` is one of these functions' (every float but float64, which keeps libm's)."""
    return op in HELPERS and d.scalar != dtypes.float64


def c_helpers(ops: set[Ops]) -> str:
    """The C definitions of the functions of `ops`, for clang; under gcc each name stands for libm's function."""
    used = [HELPERS[op] for op in sorted(ops, key=lambda o: o.value)]
    if not used:
        return ""
    libm = "".join(f"#define {h.c_name} {h.c_name[3:]}\n" for h in used)
    return "#ifndef __clang__\n" + libm + "#else\n" + "".join(h.c_source for h in used) + "#endif\n"
