"""float32 2**x as plain arithmetic, for both CPU paths (the C renderer's `tg_exp2f`, the LLVM renderer's
`@tg_exp2_f32`): libm's exp2f is a call per element, which no vectoriser puts in SIMD registers, and so softmax,
sigmoid, SiLU and GELU ran one element at a time; this function is a few dozen instructions without branches that the
vectorisers treat like any other arithmetic.

The method, in float64: x is clamped to [-151, 129] (past which every float32 result is 0 or inf), n = x rounded
to the nearest integer and f = x - n (exact, |f| <= 1/2); 2**f = exp(f ln 2) by its Taylor polynomial of degree
`TAYLOR_DEGREE` in Horner form (the series' remainder is 2**-32 of the result); times 2**n, made from exponent
bits (exact). The one rounding to float32 at the end also rounds subnormal results and overflows to inf correctly.
The result is the correctly rounded one but for the rare value within 2**-32 of a rounding boundary, where it is
1 ulp off (tests: tg-backend-cpu's test_exp2.py; the conformance kit allows 4): a float32 polynomial was within
1 ulp too, but one result in ten differed from libm's, enough to move a training run's trajectory. Special values
are exact: inf -> inf, -inf -> +0.0, NaN -> NaN, 0 -> 1. float16 goes through it in float (one more rounding, to
half). float64 keeps libm's exp2.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable

TAYLOR_DEGREE = 8
LOW, HIGH = -151.0, 129.0
#: (ln 2)**k / k!, the Taylor coefficients of 2**f (float64)
COEFFICIENTS = tuple(math.log(2) ** k / math.factorial(k) for k in range(TAYLOR_DEGREE + 1))


def _f32_hex(v: float) -> str:
    """A float32 constant as an exact C hexadecimal literal (v rounded to float32 first)."""
    return float.hex(struct.unpack("<f", struct.pack("<f", v))[0]) + "f"


def c_helper() -> str:
    """`tg_exp2f(float)` in C. NaN is replaced by 0 before the conversion to an integer, which C leaves undefined
    for NaN, and passed through at the end. Under gcc it is libm's exp2f: the C path turns gcc's loop if-conversion
    off (a miscompile, see compiler.py), and without it gcc's vectoriser takes the clamps' selects for control flow
    and leaves the loop scalar, where libm's function is the faster one."""
    horner = float.hex(COEFFICIENTS[-1])
    for c in reversed(COEFFICIENTS[:-1]):
        horner = f"({horner} * f + {float.hex(c)})"
    return f"""#ifndef __clang__
#define tg_exp2f exp2f
#else
static inline float tg_exp2f(float x) {{
  float c = x < {_f32_hex(LOW)} ? {_f32_hex(LOW)} : x;
  c = c > {_f32_hex(HIGH)} ? {_f32_hex(HIGH)} : c;
  c = c == c ? c : 0.0f;
  double d = c, n = __builtin_rint(d), f = d - n;
  double p = {horner};
  union {{ long long i; double f; }} scale = {{ ((long long)n + 1023) << 52 }};
  float y = (float)(p * scale.f);
  return x == x ? y : x;
}}
#endif
"""


#: the intrinsics `llvm_helper` calls: the kernel's declarations (one set per module: LLVM refuses a second
#: declaration of the same function)
LLVM_DECLARATIONS = ("declare double @llvm.fmuladd.f64(double, double, double)",
                     "declare double @llvm.roundeven.f64(double)")


def llvm_helper(f32: Callable[[float], str], f64: Callable[[float], str]) -> str:
    """`@tg_exp2_f32(float)` in LLVM IR; `f32` and `f64` write a float32 and a float64 constant. fptosi of NaN is
    poison, which the last select does not pick."""
    horner, p = [], f64(COEFFICIENTS[-1])
    for k in range(TAYLOR_DEGREE - 1, -1, -1):
        horner.append(f"  %p{k} = call double @llvm.fmuladd.f64(double {p}, double %f, double {f64(COEFFICIENTS[k])})")
        p = f"%p{k}"
    body = "\n".join(horner)
    return f"""
define internal float @tg_exp2_f32(float %x) alwaysinline nounwind {{
  %low = fcmp olt float %x, {f32(LOW)}
  %c0 = select i1 %low, float {f32(LOW)}, float %x
  %high = fcmp ogt float %c0, {f32(HIGH)}
  %c = select i1 %high, float {f32(HIGH)}, float %c0
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
