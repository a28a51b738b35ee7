"""WGSL helper functions the renderer calls where a WGSL operator's meaning differs from the reference ALU
(`tinygrad.uop.alu`), or where an expression would name an operand twice. Each is added to a shader only
when the shader uses it.

Why each one exists:
- integer `/` by zero is the dividend in WGSL (the reference says 0); `%` by zero is already 0 but is
  guarded alike so as not to depend on that corner of the spec.
- shifts use only the low 5 bits of the amount in WGSL; the reference gives 0 (or -1 for a negative value
  shifted right) once the amount reaches the width.
- lavapipe's float `!=` is an ordered comparison (NaN != NaN is false), so NaN is tested on the bits.
- float `%` is `x - y * trunc(x / y)` in WGSL, which is far from C's exact fmod for large quotients.
- bfloat16 is emulated in f32: its rounding and its 16-bit pattern are integer arithmetic on the f32 bits.
"""

from __future__ import annotations

import math
from functools import cache


def _arctan_inverse(n: int, one: int) -> int:
    """arctan(1/n) in fixed point (`one` is 1.0), by its Taylor series."""
    total, power, k, sign = 0, one // n, 1, 1
    while power:
        total += sign * (power // k)
        power //= n * n
        k += 2
        sign = -sign
    return total


@cache
def frac_two_pi_table() -> list[int]:
    """For k = 0..104: the first 64 bits of the fraction of 2^k / (2*pi), as two u32 words (high first).

    A float32 of magnitude >= 2^23 is m * 2^k with m a 24-bit integer, so its number of turns mod 1 is
    frac(m * frac(2^k / 2pi)): two words of the table times m, in 32-bit fixed point."""
    guard = 300
    one = 1 << guard
    pi = 16 * _arctan_inverse(5, one) - 4 * _arctan_inverse(239, one)  # Machin's formula, 300 bits
    words = []
    for k in range(105):
        frac = ((1 << (k + 64)) << guard) // (2 * pi) % (1 << 64)
        words += [frac >> 32, frac & 0xFFFFFFFF]
    return words


def _horner(var: str, coeffs: list[float]) -> str:
    """c0 + var * (c1 + var * (...)) with f64 literals."""
    return " + ".join(f"{c!r}lf" if i == 0 else f"{var} * ({c!r}lf" for i, c in enumerate(coeffs)) + \
        ")" * (len(coeffs) - 1)


#: e^t for |t| <= ln2 / 2 to f64 precision (Taylor, 15 terms); atanh(s)/s for |s| <= 0.172 (12 terms)
EXP_SERIES = _horner("t", [1 / math.factorial(k) for k in range(15)])
LOG_SERIES = _horner("s2", [1 / (2 * k + 1) for k in range(12)])

HELPERS: dict[str, str] = {
    "tg_isnan_f32": """fn tg_isnan_f32(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }""",
    "tg_idiv_i32": """fn tg_idiv_i32(a: i32, b: i32) -> i32 { return select(a / b, 0i, b == 0i); }""",
    "tg_idiv_u32": """fn tg_idiv_u32(a: u32, b: u32) -> u32 { return select(a / b, 0u, b == 0u); }""",
    "tg_mod_i32": """fn tg_mod_i32(a: i32, b: i32) -> i32 { return select(a % b, 0i, b == 0i || b == -1i); }""",
    "tg_mod_u32": """fn tg_mod_u32(a: u32, b: u32) -> u32 { return select(a % b, 0u, b == 0u); }""",
    # `bits` is the width of the value's dtype (8, 16 or 32); small ints live sign-extended in an i32
    "tg_shl_i32": """fn tg_shl_i32(a: i32, b: i32, bits: u32) -> i32 {
  return select(0i, a << (bitcast<u32>(b) & 31u), bitcast<u32>(b) < bits);
}""",
    "tg_shl_u32": """fn tg_shl_u32(a: u32, b: u32, bits: u32) -> u32 {
  return select(0u, a << (b & 31u), b < bits);
}""",
    # an arithmetic shift by 31 of a sign-extended value is the reference's fill (-1 or 0) for any amount
    # past the width, negative amounts included (they are huge as u32)
    "tg_shr_i32": """fn tg_shr_i32(a: i32, b: i32) -> i32 { return a >> min(bitcast<u32>(b), 31u); }""",
    "tg_shr_u32": """fn tg_shr_u32(a: u32, b: u32) -> u32 { return select(0u, a >> (b & 31u), b < 32u); }""",
    # the 64-bit integers of wgpu-native's `shader-int64`: the same rules, shift amounts are u32 in [0, 63]
    "tg_idiv_i64": """fn tg_idiv_i64(a: i64, b: i64) -> i64 { return select(a / b, 0li, b == 0li); }""",
    "tg_idiv_u64": """fn tg_idiv_u64(a: u64, b: u64) -> u64 { return select(a / b, 0lu, b == 0lu); }""",
    "tg_mod_i64": """fn tg_mod_i64(a: i64, b: i64) -> i64 { return select(a % b, 0li, b == 0li || b == -1li); }""",
    "tg_mod_u64": """fn tg_mod_u64(a: u64, b: u64) -> u64 { return select(a % b, 0lu, b == 0lu); }""",
    "tg_shl_i64": """fn tg_shl_i64(a: i64, b: i64, bits: u32) -> i64 {
  return select(0li, a << u32(b & 63li), bitcast<u64>(b) < 64lu);
}""",
    "tg_shl_u64": """fn tg_shl_u64(a: u64, b: u64, bits: u32) -> u64 {
  return select(0lu, a << u32(b & 63lu), b < 64lu);
}""",
    "tg_shr_i64": """fn tg_shr_i64(a: i64, b: i64) -> i64 { return a >> u32(min(bitcast<u64>(b), 63lu)); }""",
    "tg_shr_u64": """fn tg_shr_u64(a: u64, b: u64) -> u64 { return select(0lu, a >> u32(b & 63lu), b < 64lu); }""",
    "tg_max_i64": """fn tg_max_i64(a: i64, b: i64) -> i64 { return select(b, a, a > b); }""",
    "tg_max_u64": """fn tg_max_u64(a: u64, b: u64) -> u64 { return select(b, a, a > b); }""",
    # IEEE maximum: NaN wins, and +0.0 beats -0.0 in either order
    "tg_max_f32": """fn tg_max_f32(a: f32, b: f32) -> f32 {
  if (tg_isnan_f32(a)) { return a; }
  if (tg_isnan_f32(b)) { return b; }
  if (a == b) { return select(b, a, (bitcast<u32>(a) >> 31u) == 0u); }
  return select(b, a, a > b);
}""",
    "tg_max_f16": """fn tg_max_f16(a: f16, b: f16) -> f16 { return f16(tg_max_f32(f32(a), f32(b))); }""",
    # f32 -> u32 beyond i32's range: WGSL's u32(f) clamps negatives to 0, the reference wraps them
    "tg_f32_to_u32": """fn tg_f32_to_u32(x: f32) -> u32 {
  return select(bitcast<u32>(i32(x)), u32(x), x >= 2147483648.0f);
}""",
    # f32 -> u64 at and past 2^63: i64(x) saturates there (naga clamps float -> int conversions to the target's
    # range), so such values need the unsigned conversion; below it the i64 route wraps negatives like the reference
    "tg_f32_to_u64": """fn tg_f32_to_u64(x: f32) -> u64 {
  return select(bitcast<u64>(i64(x)), u64(x), x >= 9223372036854775808.0f);
}""",
    # exact fmod: the remainder of the significands, shifted 8 bits at a time (|x| / |y| can be 2^277 in f32);
    # at most 35 iterations, which count against lavapipe's loop cap like the kernel's own loops
    "tg_fmod_f32": """fn tg_fmod_f32(x: f32, y: f32) -> f32 {
  let sx = bitcast<u32>(x) & 0x80000000u;
  let ax = bitcast<u32>(x) & 0x7fffffffu;
  let ay = bitcast<u32>(y) & 0x7fffffffu;
  if (ay == 0u || ax >= 0x7f800000u || ay > 0x7f800000u) { return bitcast<f32>(0x7fc00000u); }
  if (ax < ay) { return x; }
  var ex = i32(ax >> 23u);
  var mx = ax & 0x7fffffu;
  if (ex == 0) { let sh = countLeadingZeros(mx) - 8u; mx = mx << sh; ex = 1 - i32(sh); } else { mx = mx | 0x800000u; }
  var ey = i32(ay >> 23u);
  var my = ay & 0x7fffffu;
  if (ey == 0) { let sh = countLeadingZeros(my) - 8u; my = my << sh; ey = 1 - i32(sh); } else { my = my | 0x800000u; }
  var r = mx % my;
  var d = ex - ey;
  loop {
    if (d <= 0 || r == 0u) { break; }
    let step = u32(min(d, 8));
    r = (r << step) % my;
    d = d - i32(step);
  }
  if (r == 0u) { return bitcast<f32>(sx); }
  let sh = countLeadingZeros(r) - 8u;
  r = r << sh;
  let e = ey - i32(sh);
  if (e > 0) { return bitcast<f32>(sx | (u32(e) << 23u) | (r & 0x7fffffu)); }
  return bitcast<f32>(sx | (r >> u32(1 - e)));
}""",
    # lavapipe's log2 treats a subnormal input as the smallest normal: scale it into the normal range first
    "tg_log2_f32": """fn tg_log2_f32(x: f32) -> f32 {
  if (x > 0.0f && x < 1.17549435e-38f) { return log2(x * 18446744073709551616.0f) - 64.0f; }
  return log2(x);
}""",
    # lavapipe's sin loses all accuracy from |x| ~ 2^24: reduce such arguments exactly (Payne-Hanek style,
    # with the table above) to [-pi, pi) first
    "tg_mulhi_u32": """fn tg_mulhi_u32(a: u32, b: u32) -> u32 {
  let al = a & 0xffffu; let ah = a >> 16u; let bl = b & 0xffffu; let bh = b >> 16u;
  let lh = al * bh; let hl = ah * bl;
  let mid = ((al * bl) >> 16u) + (lh & 0xffffu) + (hl & 0xffffu);
  return ah * bh + (lh >> 16u) + (hl >> 16u) + (mid >> 16u);
}""",
    "tg_sin_f32": """fn tg_sin_f32(x: f32) -> f32 {
  let ax = abs(x);
  if (!(ax >= 8388608.0f) || ax > 3.4028235e38f) { return sin(x); }
  let u = bitcast<u32>(ax);
  let k = (u >> 23u) - 150u;
  let m = (u & 0x7fffffu) | 0x800000u;
  let turns = m * tg_frac_two_pi[2u * k] + tg_mulhi_u32(m, tg_frac_two_pi[2u * k + 1u]);
  let s = sin(f32(bitcast<i32>(turns)) * 1.4629180792671596e-09f);
  return select(s, -s, x < 0.0f);
}""",
    # with wgpu-native's `shader-f64`: lavapipe's f32 exp2 and log2 are up to 3 ulp (and log2 near 1 up to
    # hundreds) off. f64 add/mul/div are exact IEEE there (its f64 exp2/log2/sin are not usable), so the
    # series below run in f64 and round once to f32, which gives the correctly rounded result but for
    # extremely rare near-ties.
    "tg_exp2_f64": """fn tg_exp2_f64(x: f32) -> f32 {
  if (!(x == x)) { return x; }
  if (x >= 128.0f) { return bitcast<f32>(0x7f800000u); }
  if (x < -151.0f) { return 0.0f; }
  let n = round(x);
  let t = f64(x - n) * 0.6931471805599453094lf;
  let total = """ + EXP_SERIES + """;
  return f32(total * bitcast<f64>(u64(i64(n) + 1023li) << 52u));
}""",
    "tg_log2_f64": """fn tg_log2_f64(x: f32) -> f32 {
  if (!(x > 0.0f) || x > 3.4028235e38f) {
    if (x == 0.0f) { return bitcast<f32>(0xff800000u); }
    return select(bitcast<f32>(0x7fc00000u), x, x > 0.0f || !(x == x));
  }
  let bits = bitcast<u64>(f64(x));
  var e = f64(i64((bits >> 52u) & 0x7fflu) - 1023li);
  var m = bitcast<f64>((bits & 0xffffffffffffflu) | 0x3ff0000000000000lu);
  if (m > 1.4142135623730951lf) { m = m * 0.5lf; e = e + 1.0lf; }
  let s = (m - 1.0lf) / (m + 1.0lf);
  let s2 = s * s;
  let series = s * (""" + LOG_SERIES + """);
  return f32(e + 2.0lf * series * 1.4426950408889634074lf);
}""",
    "tg_f32_to_bf16": """fn tg_f32_to_bf16(f: f32) -> u32 {
  let u = bitcast<u32>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) { return 0x7fc0u; }
  return (u + 0x7fffu + ((u >> 16u) & 1u)) >> 16u;
}""",
    "tg_round_bf16": """fn tg_round_bf16(f: f32) -> f32 { return bitcast<f32>(tg_f32_to_bf16(f) << 16u); }""",
}

#: helpers that call other helpers
DEPENDS: dict[str, tuple[str, ...]] = {
    "tg_max_f32": ("tg_isnan_f32",), "tg_sin_f32": ("tg_mulhi_u32", "tg_frac_two_pi"),
    "tg_max_f16": ("tg_max_f32",), "tg_round_bf16": ("tg_f32_to_bf16",),
}


def helper_source(used: set[str]) -> str:
    """The WGSL text of the helpers named in `used` (and of those they call), in a fixed order."""
    need: set[str] = set()
    todo = list(used)
    while todo:
        name = todo.pop()
        if name not in need:
            need.add(name)
            todo.extend(DEPENDS.get(name, ()))
    table = ""
    if "tg_frac_two_pi" in need:
        words = frac_two_pi_table()
        table = (f"var<private> tg_frac_two_pi: array<u32, {len(words)}> = array<u32, {len(words)}>("
                 + ", ".join(f"{w}u" for w in words) + ");\n")
    return table + "".join(HELPERS[name] + "\n" for name in HELPERS if name in need)
