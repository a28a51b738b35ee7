"""The reference semantics of every ALU op, as plain Python on scalars.

Constant folding uses this table, the Python reference backend executes kernels with it, and the
conformance tests compare devices against it. Where C leaves a result undefined we define one, and
every renderer must produce it:

* IDIV truncates toward zero and MOD takes the sign of the dividend (C's rules); dividing an
  integer by zero gives 0, and MIN_INT // -1 wraps to MIN_INT.
* SHL/SHR by a negative amount or by the bit width or more gives 0 (SHR of a negative signed value: -1).
* Integer arithmetic wraps around; float arithmetic rounds to the result dtype.
* MAX propagates NaN and is IEEE 754-2019 `maximum` on zeros: MAX(-0.0, +0.0) is +0.0 in either order, so the
  op is commutative (numpy returns the second operand on ties, PyTorch the first).
* IDIV of floats is TRUNC of the quotient rounded to the operand dtype (what C's `trunc(a/b)` computes).
* The 8-bit floats (fp8e4m3, fp8e5m2) compute in float32 and round to nearest, ties to even; a finite result past
  the largest value saturates to it (448, 57344) with its sign, NaN stays NaN, and infinity becomes NaN in
  fp8e4m3, which has none (`tinygrad.dtype.fp8_encode`).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import Any

from tinygrad.dtype import EMULATED_FLOATS, FP8_FORMATS, DType, bits_to_float, dtypes, float_to_bits, truncate
from tinygrad.uop import Ops

Number = int | float | bool


def _idiv(a: int, b: int) -> int:
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _mod(a: int, b: int) -> int:
    return 0 if b == 0 else a - _idiv(a, b) * b


def _fdiv(a: float, b: float) -> float:
    if b == 0:
        if a == 0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _recip(a: float) -> float:
    return _fdiv(1.0, a)


def _sqrt(a: float) -> float:
    return math.nan if a < 0 or math.isnan(a) else math.sqrt(a)


def _exp2(a: float) -> float:
    try:
        return math.pow(2.0, a)
    except OverflowError:
        return math.inf


def _log2(a: float) -> float:
    if math.isnan(a) or a < 0:
        return math.nan
    if a == 0:
        return -math.inf
    return math.log2(a)


def _sin(a: float) -> float:
    return math.nan if math.isinf(a) or math.isnan(a) else math.sin(a)


def _trunc(a: float) -> float:
    # copysign keeps the sign of zero: trunc(-0.5) is -0.0, as in C
    return a if math.isinf(a) or math.isnan(a) else math.copysign(float(math.trunc(a)), a)


def _max(a: Number, b: Number) -> Number:
    if isinstance(a, float) and math.isnan(a):
        return a
    if isinstance(b, float) and math.isnan(b):
        return b
    if a == b and isinstance(a, float) and a == 0:
        # -0.0 == +0.0: pick +0.0 whatever the order, keeping MAX commutative
        return a if math.copysign(1.0, a) > 0 else b
    return a if a >= b else b


def _shl(a: int, b: int, bits: int) -> int:
    return 0 if b < 0 or b >= bits else a << b


def _shr(a: int, b: int, bits: int) -> int:
    if b < 0 or b >= bits:
        return -1 if a < 0 else 0
    return a >> b


# ops whose Python implementation needs the operand dtype
_SIMPLE: dict[Ops, Callable[..., Any]] = {
    Ops.NEG: lambda a: (not a) if isinstance(a, bool) else -a,
    Ops.RECIPROCAL: _recip, Ops.SQRT: _sqrt, Ops.EXP2: _exp2, Ops.LOG2: _log2, Ops.SIN: _sin, Ops.TRUNC: _trunc,
    Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b, Ops.MUL: lambda a, b: a * b,
    Ops.IDIV: _idiv, Ops.MOD: _mod, Ops.FDIV: _fdiv, Ops.MAX: _max,
    Ops.CMPLT: lambda a, b: a < b, Ops.CMPNE: lambda a, b: a != b, Ops.CMPEQ: lambda a, b: a == b,
    Ops.AND: lambda a, b: a & b, Ops.OR: lambda a, b: a | b, Ops.XOR: lambda a, b: a ^ b,
    Ops.WHERE: lambda c, a, b: a if c else b,
}

#: every ALU op the reference knows; the renderer contract is this set plus CAST and BITCAST
REFERENCE_OPS = frozenset(_SIMPLE) | {Ops.SHL, Ops.SHR}


def exec_alu(op: Ops, dtype: DType, operands: tuple[Number, ...], operand_dtype: DType | None = None) -> Number:
    """What `op` computes on Python scalars, truncated to `dtype` (the result dtype)."""
    src_dtype = operand_dtype or dtype
    if op in (Ops.SHL, Ops.SHR):
        fn = _shl if op is Ops.SHL else _shr
        return truncate(fn(int(operands[0]), int(operands[1]), src_dtype.bits), dtype)
    if op in (Ops.AND, Ops.OR, Ops.XOR) and dtype.is_bool:
        operands = tuple(bool(x) for x in operands)
    if op is Ops.IDIV and src_dtype.is_float:
        # the quotient is rounded to the operand dtype before truncating (37575424/6.7109747 is 5599100.9997 exactly
        # but 5599101.0 as a float32), as a kernel computing trunc(a/b) in that dtype does
        quotient = truncate(_fdiv(float(operands[0]), float(operands[1])), src_dtype)
        return truncate(_trunc(float(quotient)), dtype)
    if op is Ops.MOD and src_dtype.is_float:
        a, b = float(operands[0]), float(operands[1])
        return truncate(math.fmod(a, b) if b != 0 and not math.isinf(a) else math.nan, dtype)
    try:
        fn = _SIMPLE[op]
    except KeyError:
        raise NotImplementedError(f"{op} has no reference implementation") from None
    result = fn(*operands)
    if isinstance(result, float) and dtype.scalar in FP8_FORMATS:
        # the 8-bit floats compute in float32 and round from there: exp2(448) overflows float32 to inf, which
        # E4M3 makes NaN, where rounding the float64 result would saturate to 448
        result = truncate(result, dtypes.float32)
    return truncate(result, dtype)


def exec_cast(value: Number, to: DType) -> Number:
    if to.is_float and to.scalar != dtypes.float64 and isinstance(value, int) and not isinstance(value, bool) \
            and abs(value) > 1 << 53:
        value = _int_to_float_once(value)
    return truncate(value, to)


def _int_to_float_once(value: int) -> float:
    """A float64 that rounds to the same narrower float as `value` itself does.

    float(value) rounds to 53 bits, and rounding that again to float32 can land on a tie the exact integer
    was not on (2**60 + 2**36 + 1 -> 2**60 + 2**36 -> 2**60, where C's direct conversion gives 2**60 + 2**37).
    Folding the dropped low bits into one sticky bit keeps 53 significant bits that float() holds exactly and
    that round like the whole integer for any target of at most 51 bits of precision.
    """
    sign, mag = (-1, -value) if value < 0 else (1, value)
    drop = mag.bit_length() - 53
    kept = (mag >> drop) | (1 if mag & ((1 << drop) - 1) else 0)
    return sign * math.ldexp(float(kept), drop)


def exec_bitcast(value: Number, frm: DType, to: DType) -> Number:
    if frm.itemsize != to.itemsize:
        raise TypeError(f"bitcast needs dtypes of one size, got {frm} ({frm.itemsize} bytes) and {to} ({to.itemsize})")
    return _from_raw(_to_raw(value, frm), to)


def _to_raw(value: Number, d: DType) -> bytes:
    # bfloat16 and the 8-bit floats: the bit pattern the value is stored as (NaN as the one NaN each writes)
    if (bits := EMULATED_FLOATS.get(d.scalar)) is not None:
        return struct.pack("<" + str(bits.fmt), float_to_bits(float(value), d))
    return struct.pack("<" + str(d.fmt), value)


def _from_raw(raw: bytes, d: DType) -> Number:
    if (bits := EMULATED_FLOATS.get(d.scalar)) is not None:
        return bits_to_float(struct.unpack("<" + str(bits.fmt), raw)[0], d)
    return struct.unpack("<" + str(d.fmt), raw)[0]
