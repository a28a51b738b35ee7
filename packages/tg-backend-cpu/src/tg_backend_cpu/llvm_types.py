"""How the LLVM path writes dtypes and constants: the type a value is computed in, the type it is stored as, and
constants by their exact bits (`LLVMRenderer` and its vector tiles, `llvm_tiles`)."""

from __future__ import annotations

import functools
import struct

from tinygrad.dtype import EMULATED_FLOATS, DType, dtypes, is_emulated_float, truncate


@functools.cache  # asked for every operand of every instruction; dtypes are few and interned
def value_type(d: DType) -> str:
    """The LLVM type values of `d` are computed in (bfloat16 in float)."""
    d = d.scalar
    if d.is_bool:
        return "i1"
    if is_emulated_float(d) or d == dtypes.float32:
        return "float"
    if d == dtypes.float16:
        return "half"
    if d == dtypes.float64:
        return "double"
    return f"i{d.bits}"


@functools.cache
def memory_type(d: DType) -> str:
    """The LLVM type of `d` in a buffer: bool is a byte, bfloat16 its bit pattern."""
    if d.scalar.is_bool:
        return "i8"
    bits = EMULATED_FLOATS.get(d.scalar)
    return value_type(bits if bits is not None else d)


def float_suffix(t: str) -> str:
    return {"half": "f16", "float": "f32", "double": "f64"}[t]


def literal(value: float | int | bool, d: DType) -> str:
    """A constant of dtype `d` as LLVM writes it: floats by their bits, so that every value (NaN, -0.0) is exact."""
    t = value_type(d)
    if t == "i1":
        return "true" if value else "false"
    if d.is_float:
        v = float(truncate(float(value), d.scalar))
        if t == "half":
            return f"0xH{struct.unpack('<H', struct.pack('<e', v))[0]:04X}"
        # float constants are written as the double of the same value, which LLVM requires to be exact
        return f"0x{struct.unpack('<Q', struct.pack('<d', v))[0]:016X}"
    bits = d.scalar.bits
    v = int(value) & ((1 << bits) - 1)
    return str(v - (1 << bits) if v >= 1 << (bits - 1) else v)


def vector_type(width: int, element: str) -> str:
    """The LLVM vector of `width` lanes of type `element`."""
    return f"<{width} x {element}>"
