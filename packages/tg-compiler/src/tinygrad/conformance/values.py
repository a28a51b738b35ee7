"""Edge values per dtype, and how a buffer of each dtype holds them.

The values are Python numbers exactly as a variable of that dtype holds them (`truncate` applied), so they
can be fed to the reference ALU unchanged. Each list is free of duplicate bit patterns (-0.0 and 0.0 are
both kept; they differ in bits).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence

import numpy as np
from tinygrad.dtype import DType, bits_to_float, dtypes, encode_floats, is_emulated_float, to_numpy, truncate

Scalar = float | int | bool

#: the smallest positive normal number of each float dtype; anything nonzero below it is subnormal
SMALLEST_NORMAL: dict[str, float] = {"float16": 2.0**-14, "bfloat16": 2.0**-126, "float32": 2.0**-126,
                                     "float64": 2.0**-1022, "fp8e4m3": 2.0**-6, "fp8e5m2": 2.0**-14}

_FLOAT_EDGES: tuple[float, ...] = (
    0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 7.0, 1 / 3, -100.25, 2.0**-11, 2.0**-8 + 2.0**-10, 1e-3, 1e4,
    65504.0, 3.0e38, math.inf, -math.inf, math.nan,
    1e-40, 2.0**-24, 2.0**-133,  # subnormals of float32, float16 and bfloat16 (each rounds within its dtype)
    37575424.0, 6.71097469329834,  # a pair whose float32 quotient rounds up to an integer: catches trunc(a/b) slips
)
#: the 8-bit floats: their largest value and a value past it (saturates), the subnormals and a tie between two
#: of them, and values halfway between neighbours (ties to even): E4M3 steps by 2**-3 at 1, E5M2 by 2**-2
_FP8_EXTRA: dict[str, tuple[float, ...]] = {
    "fp8e4m3": (448.0, -448.0, 500.0, 2.0**-9, -3 * 2.0**-9, 2.0**-10, 1.0625, 1.1875, 0.1),
    "fp8e5m2": (57344.0, -57344.0, 61440.0, 2.0**-16, -3 * 2.0**-16, 2.0**-17, 1.125, 1.375, 0.1),
}
_FLOAT64_EXTRA: tuple[float, ...] = (1e300, -1e-310, 2.0**1023)


def dedup_bits(values: Sequence[Scalar]) -> list[Scalar]:
    """The values in order, each bit pattern once (floats are compared by bits, so -0.0 and one NaN survive)."""
    seen: set[object] = set()
    out: list[Scalar] = []
    for v in values:
        key = ("f", struct.pack("<d", v)) if isinstance(v, float) else ("i", v)
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


def edge_values(d: DType) -> list[Scalar]:
    """NaN, +-inf, -0.0, subnormals, 1/3, huge and tiny floats; 0, +-1, MIN, MAX, shift widths for integers."""
    if d.is_bool:
        return [False, True]
    if d.is_float:
        raw = _FLOAT_EDGES + (_FLOAT64_EXTRA if d == dtypes.float64 else ()) + _FP8_EXTRA.get(d.name, ())
        return dedup_bits([truncate(v, d) for v in raw])
    bits = d.bits
    raw_ints = (0, 1, -1, 2, -2, 3, 7, -7, 8, bits - 1, bits, bits + 1, 100, d.min, d.min + 1, d.max, d.max - 1)
    return dedup_bits([truncate(v, d) for v in raw_ints])


def is_subnormal(v: Scalar, d: DType) -> bool:
    return isinstance(v, float) and d.is_float and v != 0 and abs(v) < SMALLEST_NORMAL[d.name]


def flush_subnormal(v: Scalar, d: DType) -> Scalar:
    """What a flush-to-zero device makes of `v`: a subnormal becomes a zero of the same sign."""
    return math.copysign(0.0, float(v)) if is_subnormal(v, d) else v


def to_buffer_array(values: Sequence[Scalar] | np.ndarray, d: DType) -> np.ndarray:
    """The array a buffer of dtype d holds for these values (bfloat16 and the 8-bit floats as their raw bits)."""
    if is_emulated_float(d):
        return encode_floats([float(v) for v in values], d)
    if isinstance(values, np.ndarray):
        return values.astype(to_numpy(d))
    return np.array(values, dtype=to_numpy(d))


def from_buffer_array(arr: np.ndarray, d: DType) -> list[Scalar]:
    """Python numbers from a buffer's array (the inverse of `to_buffer_array`)."""
    if is_emulated_float(d):
        return [bits_to_float(int(b), d) for b in arr]
    return [v.item() for v in arr]
