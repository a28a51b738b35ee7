"""float32 2**x as plain arithmetic, for both CPU paths (the C renderer's `tg_exp2f`, the LLVM renderer's
`@tg_exp2_f32`): libm's exp2f is a call per element, which no vectoriser puts in SIMD registers, and so softmax,
sigmoid, SiLU and GELU ran one element at a time; this function is a few dozen instructions without branches that the
vectorisers treat like any other arithmetic.

The method: x is clamped to [-151, 129] (past which every result is 0 or inf), n = x rounded to the nearest integer
and f = x - n (exact, |f| <= 1/2); 2**f = exp(f ln 2) by its Taylor polynomial of degree `TAYLOR_DEGREE` in Horner
form (the series' remainder is a tenth of an ulp); 2**n is made from exponent bits as two factors that are each a
normal float, so that a subnormal result is rounded once, by the last product. The result is within 1 ulp of the
correctly rounded one (tests: tg-backend-cpu's test_exp2.py; the conformance kit allows 4) and exact at the special
values: inf -> inf, -inf -> +0.0, NaN -> NaN, 0 -> 1. float16 goes through it in float (one more rounding, to half).
float64 keeps libm's exp2.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable

TAYLOR_DEGREE = 7
LOW, HIGH = -151.0, 129.0
#: (ln 2)**k / k!, the Taylor coefficients of 2**f, each rounded to float32 by the renderers
COEFFICIENTS = tuple(math.log(2) ** k / math.factorial(k) for k in range(TAYLOR_DEGREE + 1))


def _f32_hex(v: float) -> str:
    """A float32 constant as an exact C hexadecimal literal (v rounded to float32 first)."""
    return float.hex(struct.unpack("<f", struct.pack("<f", v))[0]) + "f"


def c_helper() -> str:
    """`tg_exp2f(float)` in C. NaN is replaced by 0 before the conversion to int, which C leaves undefined for NaN,
    and passed through at the end. Under gcc it is libm's exp2f: the C path turns gcc's loop if-conversion off (a
    miscompile, see compiler.py), and without it gcc's vectoriser takes the clamps' selects for control flow and
    leaves the loop scalar, where libm's function is the faster one."""
    horner = _f32_hex(COEFFICIENTS[-1])
    for c in reversed(COEFFICIENTS[:-1]):
        horner = f"({horner} * f + {_f32_hex(c)})"
    return f"""#ifndef __clang__
#define tg_exp2f exp2f
#else
static inline float tg_exp2f(float x) {{
  float c = x < {_f32_hex(LOW)} ? {_f32_hex(LOW)} : x;
  c = c > {_f32_hex(HIGH)} ? {_f32_hex(HIGH)} : c;
  c = c == c ? c : 0.0f;
  float n = __builtin_rintf(c), f = c - n;
  float p = {horner};
  int ni = (int)n, a = ni >> 1, b = ni - a;
  union {{ int i; float f; }} scale_a = {{ (a + 127) << 23 }}, scale_b = {{ (b + 127) << 23 }};
  float y = p * scale_a.f * scale_b.f;
  return x == x ? y : x;
}}
#endif
"""


#: the intrinsics `llvm_helper` calls: the kernel's declarations (one set per module: LLVM refuses a second
#: declaration of the same function)
LLVM_DECLARATIONS = ("declare float @llvm.fmuladd.f32(float, float, float)", "declare float @llvm.roundeven.f32(float)")


def llvm_helper(f32: Callable[[float], str]) -> str:
    """`@tg_exp2_f32(float)` in LLVM IR; `f32` writes a float32 constant. fptosi of NaN is poison, which the last
    select does not pick."""
    horner, p = [], f32(COEFFICIENTS[-1])
    for k in range(TAYLOR_DEGREE - 1, -1, -1):
        horner.append(f"  %p{k} = call float @llvm.fmuladd.f32(float {p}, float %f, float {f32(COEFFICIENTS[k])})")
        p = f"%p{k}"
    body = "\n".join(horner)
    return f"""
define internal float @tg_exp2_f32(float %x) alwaysinline nounwind {{
  %low = fcmp olt float %x, {f32(LOW)}
  %c0 = select i1 %low, float {f32(LOW)}, float %x
  %high = fcmp ogt float %c0, {f32(HIGH)}
  %c = select i1 %high, float {f32(HIGH)}, float %c0
  %n = call float @llvm.roundeven.f32(float %c)
  %f = fsub float %c, %n
{body}
  %ni = fptosi float %n to i32
  %a = ashr i32 %ni, 1
  %b = sub i32 %ni, %a
  %abias = add i32 %a, 127
  %abits = shl i32 %abias, 23
  %scale_a = bitcast i32 %abits to float
  %bbias = add i32 %b, 127
  %bbits = shl i32 %bbias, 23
  %scale_b = bitcast i32 %bbits to float
  %y0 = fmul float %p0, %scale_a
  %y = fmul float %y0, %scale_b
  %nan = fcmp uno float %x, 0.0
  %r = select i1 %nan, float %x, float %y
  ret float %r
}}
"""
