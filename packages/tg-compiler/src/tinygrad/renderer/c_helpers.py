"""C helper functions that a C-style kernel gets when it uses an emulated float: bfloat16 and the OCP 8-bit floats
(fp8e4m3, fp8e5m2 and their fnuz forms) are stored as their 16- and 8-bit patterns and computed in float, rounded
back after every op by these helpers (`tinygrad.renderer.cstyle` places them before the kernel). A target whose
C dialect spells the bit casts differently replaces `FLOAT_BITS_PRELUDE` (OpenCL's as_uint, Metal's as_type).
"""

from __future__ import annotations

from tinygrad.dtype import FP8_FORMATS, DType, FP8Format

BF16_PRELUDE = """static inline float tg_bf16_to_f32(unsigned short b) {
  unsigned int u = ((unsigned int)b) << 16; float f; __builtin_memcpy(&f, &u, 4); return f;
}
static inline unsigned short tg_f32_to_bf16(float f) {
  unsigned int u; __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  /* NaN stays a quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);  /* round to nearest even */
  return (unsigned short)(u >> 16);
}
static inline float tg_round_bf16(float f) { return tg_bf16_to_f32(tg_f32_to_bf16(f)); }
"""

#: float <-> its 32 bits, which the 8-bit float helpers are written with (OpenCL spells them as_uint/as_float)
FLOAT_BITS_PRELUDE = """static inline unsigned int tg_f32_bits(float f) {
  unsigned int u; __builtin_memcpy(&u, &f, 4); return u;
}
static inline float tg_bits_f32(unsigned int u) { float f; __builtin_memcpy(&f, &u, 4); return f; }
"""

#: a double rounded to float toward zero, with the last bit set when inexact ("round to odd"): rounding that float
#: again to a format of at most 22 bits gives what rounding the double directly would, so a float64 -> 8-bit float
#: cast rounds once
F64_TO_F32_ODD = """{q} float tg_f64_to_f32_odd(double d) {{
  float f = (float)d;
  if (d != d || (double)f == d) return f;
  unsigned int u = tg_f32_bits(f);
  if (d > 0.0 ? (double)f > d : (double)f < d) u -= 1u;  /* rounded away from zero: step back toward it */
  return tg_bits_f32(u | 1u);
}}
"""

_FP8_HELPERS = """{q} float tg_{n}_to_f32(unsigned char b) {{
  unsigned int sign = ((unsigned int)b & 0x80u) << 24;
  unsigned int e = ((unsigned int)b >> {m}) & {emask}u, m = (unsigned int)b & {mmask}u;
  if ({fnuz}u && b == 0x80u) return tg_bits_f32(0x7fc00000u);  /* fnuz: the negative-zero pattern is NaN */
  if (((unsigned int)b & 0x7fu) > {max_code}u) return tg_bits_f32(sign | {special});
  if (e == 0u) {{ float v = (float)m * {subnormal_step}f; return sign ? -v : v; }}  /* subnormal */
  return tg_bits_f32(sign | ((e + {rebias}u) << 23) | (m << {shift}));
}}
{q} unsigned char tg_f32_to_{n}(float f) {{
  unsigned int u = tg_f32_bits(f), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (unsigned char)(sign | {nan_code}u);  /* NaN keeps its sign */
  if (a == 0x7f800000u) return (unsigned char)(sign | {inf_code}u);
  unsigned int zero = {fnuz}u ? 0u : sign;  /* fnuz has no negative zero: that pattern is its NaN */
  if (a < 0x00800000u) return (unsigned char)zero;  /* zero, and float32 subnormals: far below the smallest step */
  int e = (int)(a >> 23) - 127, sub = e < {min_exp};
  unsigned int m = (a & 0x7fffffu) | 0x800000u;
  int drop = {shift} + (sub ? {min_exp} - e : 0);  /* significand bits below this binade's step */
  if (drop > 24) return (unsigned char)zero;
  unsigned int q = m >> drop, rest = m & ((1u << drop) - 1u), halfway = 1u << (drop - 1);
  if (rest > halfway || (rest == halfway && (q & 1u))) q++;  /* round to nearest, ties to even */
  unsigned int code = sub ? q : ((unsigned int)(e + {bias_m1}) << {m}) + q;  /* a carry moves up one binade */
  if (code == 0u) return (unsigned char)zero;
  return (unsigned char)(sign | (code > {max_code}u ? {max_code}u : code));  /* finite values saturate */
}}
{q} float tg_round_{n}(float f) {{ return tg_{n}_to_f32(tg_f32_to_{n}(f)); }}
"""


def fp8_prelude(d: DType, qualifier: str = "static inline") -> str:
    """C helpers of one 8-bit float: decode a pattern to float, encode a float (ties to even; finite values past
    the largest saturate to it, as `tinygrad.dtype.fp8_encode`), and round a float to the format. They use
    `tg_f32_bits`/`tg_bits_f32` (FLOAT_BITS_PRELUDE or the target's own)."""
    fmt: FP8Format = FP8_FORMATS[d.scalar]
    m = fmt.mantissa_bits
    # codes above the largest finite one: NaN, or (E5M2) infinity for the first of them
    special = f"(((unsigned int)b & 0x7fu) == {fmt.inf_code}u ? 0x7f800000u : 0x7fc00000u)" if fmt.has_inf \
        else "0x7fc00000u"
    return _FP8_HELPERS.format(
        q=qualifier, n=d.scalar.name, m=m, emask=(1 << fmt.exponent_bits) - 1, mmask=(1 << m) - 1,
        max_code=fmt.max_code, special=special, subnormal_step=repr(2.0 ** (1 - fmt.bias - m)),
        rebias=127 - fmt.bias, shift=23 - m, nan_code=fmt.nan_code, inf_code=fmt.inf_code, min_exp=1 - fmt.bias,
        bias_m1=fmt.bias - 1, fnuz=int(fmt.fnuz))
