"""Data types, their numpy equivalents, and the promotion rules for mixed operands.

Promotion follows PyTorch: across categories (bool < integer < floating) the
operand of the higher category wins; within integers the wider type wins, and
a signed/unsigned mix goes to the smallest signed type holding both; float16
with bfloat16 becomes float32.
"""

from __future__ import annotations

import builtins
import math
import struct
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np

Kind = Literal["bool", "int", "uint", "float", "void"]
_INTERNED: dict[tuple, DType] = {}


@dataclass(frozen=True, eq=False)
class DType:
    """A scalar or vector element type. Interned: equal fields make the same object, so `==` and hashing are by
    identity, which keeps them cheap in the dictionaries every UOp passes through."""

    name: str
    itemsize: int
    kind: Kind
    fmt: str | None  # struct format character, None where struct has none (bfloat16)
    vcount: int = 1  # >1 for vector types used inside kernels

    def __new__(cls, name: str, itemsize: int, kind: Kind, fmt: str | None, vcount: int = 1) -> DType:
        key = (name, itemsize, kind, fmt, vcount)
        if (hit := _INTERNED.get(key)) is None:
            hit = _INTERNED[key] = super().__new__(cls)
        return hit

    def __reduce__(self) -> tuple:
        # unpickling and copying go through __new__ too, so they give back the interned object
        return (DType, (self.name, self.itemsize, self.kind, self.fmt, self.vcount))

    def __repr__(self) -> str:
        return f"dtypes.{self.name}" if self.vcount == 1 else f"dtypes.{self.name}.vec({self.vcount})"

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_unsigned(self) -> bool:
        return self.kind == "uint"

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def bits(self) -> int:
        return self.itemsize * 8

    @property
    def scalar(self) -> DType:
        return DType(self.name, self.itemsize // self.vcount, self.kind, self.fmt) if self.vcount > 1 else self

    def vec(self, n: int) -> DType:
        if n == 1:
            return self
        return DType(self.name, self.itemsize * n, self.kind, self.fmt, n)

    @property
    def min(self) -> float | int | bool:
        if self.is_bool:
            return False
        if self.is_unsigned:
            return 0
        if self.is_int:
            return -(1 << (self.bits - 1))
        return -math.inf

    @property
    def max(self) -> float | int | bool:
        if self.is_bool:
            return True
        if self.is_unsigned:
            return (1 << self.bits) - 1
        if self.is_int:
            return (1 << (self.bits - 1)) - 1
        return math.inf


class dtypes:
    bool: Final = DType("bool", 1, "bool", "?")
    int8: Final = DType("int8", 1, "int", "b")
    uint8: Final = DType("uint8", 1, "uint", "B")
    int16: Final = DType("int16", 2, "int", "h")
    uint16: Final = DType("uint16", 2, "uint", "H")
    int32: Final = DType("int32", 4, "int", "i")
    uint32: Final = DType("uint32", 4, "uint", "I")
    int64: Final = DType("int64", 8, "int", "q")
    uint64: Final = DType("uint64", 8, "uint", "Q")
    float16: Final = DType("float16", 2, "float", "e")
    bfloat16: Final = DType("bfloat16", 2, "float", None)
    float32: Final = DType("float32", 4, "float", "f")
    float64: Final = DType("float64", 8, "float", "d")
    void: Final = DType("void", 0, "void", None)  # statements (STORE, SINK, loops) have no value
    # aliases people type
    half = float16
    float = float32
    double = float64
    char = int8
    uchar = uint8
    short = int16
    ushort = uint16
    int = int32
    uint = uint32
    long = int64
    ulong = uint64

    default_float: DType = float32
    default_int: DType = int32
    #: index arithmetic inside kernels: a mathematical integer (64 bits wide while it is simplified), given a
    #: concrete type per expression, int32 or int64 from its value bounds, just before rendering
    #: (`tinygrad.codegen.index_dtype`). Never the dtype of a tensor or a buffer.
    index: Final = DType("index", 8, "int", None)

    @staticmethod
    def all() -> tuple[DType, ...]:
        return ALL_DTYPES

    @staticmethod
    def from_name(name: str) -> DType:
        try:
            return _BY_NAME[name]
        except KeyError:
            raise TypeError(f"unknown dtype {name!r}; known dtypes: {sorted(_BY_NAME)}") from None

    @staticmethod
    def from_py(x: object) -> DType:
        if isinstance(x, bool):
            return dtypes.bool
        if isinstance(x, int):
            return dtypes.default_int
        if isinstance(x, float):
            return dtypes.default_float
        if isinstance(x, (list, tuple)):
            return max((dtypes.from_py(v) for v in x), key=_CATEGORY_RANK, default=dtypes.default_float)
        raise TypeError(f"cannot infer a dtype from {type(x).__name__} {x!r}")

    @staticmethod
    def is_float(d: DType) -> builtins.bool:
        return d.is_float

    @staticmethod
    def is_int(d: DType) -> builtins.bool:
        return d.is_int

    @staticmethod
    def is_unsigned(d: DType) -> builtins.bool:
        return d.is_unsigned


ALL_DTYPES: tuple[DType, ...] = (
    dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
    dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64,
)
_BY_NAME = {d.name: d for d in ALL_DTYPES} | {"half": dtypes.float16, "float": dtypes.float32, "double": dtypes.float64,
                                               "long": dtypes.int64, "int": dtypes.int32}


def _CATEGORY_RANK(d: DType) -> int:
    return {"bool": 0, "int": 1, "uint": 1, "float": 2, "void": -1}[d.kind]


DTypeLike = DType | str


def to_dtype(x: DTypeLike) -> DType:
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        return dtypes.from_name(x)
    if isinstance(x, np.dtype) or (isinstance(x, type) and issubclass(x, np.generic)):
        return from_numpy(np.dtype(x))
    mod = type(x).__module__
    if mod.startswith("torch"):
        return dtypes.from_name(str(x).removeprefix("torch."))
    raise TypeError(f"expected a DType or a dtype name, got {type(x).__name__} {x!r}")


def _promote_ints(a: DType, b: DType) -> DType:
    if a.is_unsigned == b.is_unsigned:
        return a if a.itemsize >= b.itemsize else b
    signed, unsigned = (a, b) if b.is_unsigned else (b, a)
    if signed.itemsize > unsigned.itemsize:
        return signed
    for cand in (dtypes.int16, dtypes.int32, dtypes.int64):
        if cand.itemsize > unsigned.itemsize:
            return cand
    # uint64 with a signed type: no integer type holds both; numpy goes to float64 as well
    return dtypes.float64


def least_upper_dtype(*ds: DType) -> DType:
    """The dtype that an operation mixing `ds` computes in."""
    if not ds:
        raise ValueError("least_upper_dtype needs at least one dtype")
    # the highest category present decides; operands of lower categories do not widen the result
    # (PyTorch: int64 + uint64 + float16 -> float16), which also makes the result independent of order
    top = max(_CATEGORY_RANK(d) for d in ds)
    same = [d for d in ds if _CATEGORY_RANK(d) == top]
    out = same[0]
    for d in same[1:]:
        if d == out:
            continue
        if out.is_float:
            if {out, d} == {dtypes.float16, dtypes.bfloat16}:
                out = dtypes.float32
            else:
                out = out if out.itemsize >= d.itemsize else d
        elif out.is_int:
            out = _promote_ints(out, d)
    return out


def sum_acc_dtype(d: DType) -> DType:
    """The dtype `sum` returns, as PyTorch: integers and bool accumulate in int64."""
    if d.is_bool or (d.is_int and not d.is_unsigned):
        return dtypes.int64
    if d.is_unsigned:
        return dtypes.uint64 if d.itemsize == 8 else dtypes.int64
    return d


_NP_BY_NAME = {d.name: np.dtype(d.name) for d in ALL_DTYPES if d is not dtypes.bfloat16}


def to_numpy(d: DType) -> np.dtype:
    """The numpy dtype holding `d`; bfloat16 data is carried as its raw uint16 bits."""
    if d is dtypes.bfloat16 or d == dtypes.bfloat16:
        return np.dtype(np.uint16)
    return _NP_BY_NAME[d.name]


def from_numpy(nd: np.dtype) -> DType:
    name = np.dtype(nd).name
    if name not in _BY_NAME:
        raise TypeError(f"numpy dtype {name} has no tinygrad equivalent; cast it to one of "
                        f"{[d.name for d in ALL_DTYPES if d is not dtypes.bfloat16]} first")
    return _BY_NAME[name]


# ---- exact value conversion, shared by constant folding and the reference ALU ----

def truncate(value: float | int | bool, d: DType) -> float | int | bool:
    """Convert a Python number into what a `d` variable holds (wrap-around ints, rounded floats)."""
    kind = d.kind
    if kind == "float":
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 1 << 53:
            value = _round_int(value, _MANTISSA_BITS[d.name])  # avoid rounding twice (int -> float64 -> d)
        value = float(value)
        if d is dtypes.float64:
            return value
        if d is dtypes.bfloat16:
            return bf16_bits_to_float(float_to_bf16_bits(value))
        return _round_float(value, d.fmt)  # type: ignore[arg-type]
    if kind == "bool":
        return bool(value)
    if kind == "int" or kind == "uint":
        if isinstance(value, float):
            if math.isnan(value) or math.isinf(value):
                return 0
            value = int(value)
        v = int(value) & ((1 << d.bits) - 1)
        if kind == "int" and v >= 1 << (d.bits - 1):
            v -= 1 << d.bits
        return v
    raise TypeError(f"cannot truncate to {d}")


_MANTISSA_BITS = {"float64": 53, "float32": 24, "float16": 11, "bfloat16": 8}


def _round_int(value: int, bits: int) -> int:
    """Round an integer to `bits` significant bits, to nearest with ties to even."""
    sign, mag = (-1 if value < 0 else 1), abs(value)
    drop = mag.bit_length() - bits
    if drop <= 0:
        return value
    q, r = divmod(mag, 1 << drop)
    half = 1 << (drop - 1)
    if r > half or (r == half and q & 1):
        q += 1
    return sign * (q << drop)


def _round_float(value: float, fmt: str) -> float:
    try:
        return struct.unpack(fmt, struct.pack(fmt, value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


def float_to_bf16_bits(value: float) -> int:
    """Round-to-nearest-even float32 -> bfloat16 bit pattern."""
    if math.isnan(value):
        return 0x7FC0
    bits = struct.unpack("<I", struct.pack("<f", _round_float(value, "f")))[0]
    bits += 0x7FFF + ((bits >> 16) & 1)
    return (bits >> 16) & 0xFFFF


def bf16_bits_to_float(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0]
