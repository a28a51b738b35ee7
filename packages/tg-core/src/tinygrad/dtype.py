"""Data types, their numpy equivalents, and the promotion rules for mixed operands.

Promotion follows PyTorch: across categories (bool < integer < floating) the
operand of the higher category wins; within integers the wider type wins, and
a signed/unsigned mix goes to the smallest signed type holding both; float16
with bfloat16 becomes float32, and the two 8-bit floats together become
float16 (tinygrad's answer; PyTorch refuses to promote them).

bfloat16 and the 8-bit floats (the OCP fp8e4m3 and fp8e5m2, and the "fnuz" variants
fp8e4m3fnuz and fp8e5m2fnuz: no infinities, no negative zero, one NaN at 0x80) have
no numpy type: buffers hold their raw bit patterns (`to_numpy` gives uint16 and
uint8), and kernels compute them in float32, rounding back to the dtype after every op.
`DEFAULT_FLOAT=HALF` (or FLOAT16, BFLOAT16, FP8E4M3, ...) in the environment sets
`dtypes.default_float` when tinygrad is imported.
"""

from __future__ import annotations

import builtins
import functools
import math
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np

from tinygrad.errors import UnknownDTypeError

Kind = Literal["bool", "int", "uint", "float", "void"]
_INTERNED: dict[tuple, DType] = {}


@dataclass(frozen=True, eq=False)
class DType:
    """A scalar or vector element type. Interned: equal fields make the same object, so `==` and hashing are by
    identity, which keeps them cheap in the dictionaries every UOp passes through."""

    name: str
    itemsize: int
    kind: Kind
    fmt: str | None  # struct format character, None where struct has none (bfloat16, the 8-bit floats)
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
        return -self.max  # type: ignore[operator]

    @property
    def max(self) -> float | int | bool:
        if self.is_bool:
            return True
        if self.is_unsigned:
            return (1 << self.bits) - 1
        if self.is_int:
            return (1 << (self.bits - 1)) - 1
        # fp8e4m3 has no infinity: its largest value (448) is what max reductions start from
        fp8 = FP8_FORMATS.get(self.scalar)
        return math.inf if fp8 is None or fp8.has_inf else fp8.max_value


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
    #: the OCP 8-bit floats (OFP8): E4M3 (max 448, no infinities) and E5M2 (IEEE-like, max 57344)
    fp8e4m3: Final = DType("fp8e4m3", 1, "float", None)
    fp8e5m2: Final = DType("fp8e5m2", 1, "float", None)
    #: the "fnuz" 8-bit floats (AMD's and Graphcore's): exponent bias one larger than the OCP formats', all 128
    #: non-negative patterns finite (max 240 and 57344), 0x80 the only NaN, no infinities and no negative zero
    fp8e4m3fnuz: Final = DType("fp8e4m3fnuz", 1, "float", None)
    fp8e5m2fnuz: Final = DType("fp8e5m2fnuz", 1, "float", None)
    fp8_ocp: Final = (fp8e4m3, fp8e5m2)
    fp8_fnuz: Final = (fp8e4m3fnuz, fp8e5m2fnuz)
    fp8s: Final = fp8_ocp + fp8_fnuz
    # tinygrad's groups of dtypes, for membership tests (`d in dtypes.ints`)
    floats: Final = fp8s + (float16, bfloat16, float32, float64)
    uints: Final = (uint8, uint16, uint32, uint64)
    sints: Final = (int8, int16, int32, int64)
    ints: Final = uints + sints
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
            raise UnknownDTypeError(f"unknown dtype {name!r}; known dtypes: {sorted(_BY_NAME)}") from None

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

    @staticmethod
    def is_bool(d: DType) -> builtins.bool:
        return d.is_bool

    @staticmethod
    def finfo(d: DType) -> tuple[builtins.int, builtins.int]:
        """(exponent bits, explicit mantissa bits) of a float dtype, as tinygrad gives them: float32 is (8, 23)."""
        if not d.is_float or d.scalar.name not in _MANTISSA_BITS:
            raise ValueError(f"{d} is not a floating point type")
        mantissa = _MANTISSA_BITS[d.scalar.name] - 1
        return d.scalar.bits - 1 - mantissa, mantissa


ALL_DTYPES: tuple[DType, ...] = (
    dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
    dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64,
    dtypes.fp8e4m3, dtypes.fp8e5m2, dtypes.fp8e4m3fnuz, dtypes.fp8e5m2fnuz,
)
_BY_NAME = {d.name: d for d in ALL_DTYPES} | {"half": dtypes.float16, "float": dtypes.float32, "double": dtypes.float64,
                                               "long": dtypes.int64, "int": dtypes.int32,
                                               # PyTorch's and tinygrad's names of the 8-bit floats
                                               "float8_e4m3fn": dtypes.fp8e4m3, "float8_e4m3": dtypes.fp8e4m3,
                                               "float8_e5m2": dtypes.fp8e5m2, "float8_e4m3fnuz": dtypes.fp8e4m3fnuz,
                                               "float8_e5m2fnuz": dtypes.fp8e5m2fnuz}

#: float dtypes without a numpy type, with the unsigned type of the bit patterns their buffers hold
EMULATED_FLOATS: dict[DType, DType] = {dtypes.bfloat16: dtypes.uint16,
                                       **{d: dtypes.uint8 for d in dtypes.fp8s}}


def is_emulated_float(d: DType) -> bool:
    """Whether `d` is stored as raw bits and computed in float32 (bfloat16 and the 8-bit floats)."""
    return d.scalar in EMULATED_FLOATS


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
    raise UnknownDTypeError(f"expected a DType or a dtype name, got {type(x).__name__} {x!r}")


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
    if same[0].is_float:
        return _promote_floats(same)
    out = same[0]
    for d in same[1:]:
        if d != out and out.is_int:
            out = _promote_ints(out, d)
    return out


def _promote_floats(ds: list[DType]) -> DType:
    """The widest float wins; two different floats of the widest size meet one size up (float16 with bfloat16 is
    float32, fp8e4m3 with fp8e5m2 float16). Looking at the widest size only keeps the answer independent of order:
    fp8e4m3, fp8e5m2 and bfloat16 together are bfloat16, as in tinygrad."""
    widest = max(d.itemsize for d in ds)
    kinds = {d for d in ds if d.itemsize == widest}
    if len(kinds) == 1:
        return kinds.pop()
    return dtypes.float32 if widest == 2 else dtypes.float16


def sum_acc_dtype(d: DType) -> DType:
    """The dtype `sum` returns, as tinygrad's: bool and signed integers accumulate in int32 (int64 stays int64),
    unsigned ones in uint32 (uint64 stays uint64), floats in their own dtype (PyTorch takes int64 for all integers;
    tinygrad's choice keeps sums on devices without 64-bit integers)."""
    if d.is_bool or (d.is_int and not d.is_unsigned):
        return dtypes.int64 if d.itemsize == 8 else dtypes.int32
    if d.is_unsigned:
        return dtypes.uint64 if d.itemsize == 8 else dtypes.uint32
    return d


_NP_BY_NAME = {d.name: np.dtype(d.name) for d in ALL_DTYPES if d not in EMULATED_FLOATS}


def to_numpy(d: DType) -> np.dtype:
    """The numpy dtype holding `d`; bfloat16 and the 8-bit floats are carried as their raw bits (uint16, uint8)."""
    if (bits := EMULATED_FLOATS.get(d.scalar)) is not None:
        return _NP_BY_NAME[bits.name]
    return _NP_BY_NAME[d.name]


def _to_np_dtype(d: DType) -> type:
    """tinygrad's spelling: the numpy scalar type `Tensor.numpy()` returns for `d` (float32 for bfloat16 and the
    8-bit floats, which numpy has no type of)."""
    return np.float32 if d.scalar in EMULATED_FLOATS else _NP_BY_NAME[d.scalar.name].type


class DTypeSet(frozenset[DType]):
    """A set of dtypes that can also be called for itself: renderers here declare `supported_dtypes` as an attribute,
    while tinygrad's code calls it (`renderer.supported_dtypes()`); a renderer's set answers both."""

    def __call__(self) -> DTypeSet:
        return self


def strong_dtype(d: DType) -> DType:
    """tinygrad maps its weak (Python-scalar) dtypes to the defaults here; this project gives a Python scalar its
    default dtype when it becomes a tensor, so every dtype is already strong."""
    return d


@functools.cache
def _to_torch_dtype(d: DType) -> object | None:
    """The torch dtype holding `d` as tinygrad maps it: bfloat16 as torch.bfloat16, the 8-bit floats as their bit
    patterns (torch.uint8), the rest by name; None for dtypes that no tensor has (void, index)."""
    import torch  # only the callers that compare against torch pay its import

    if d.scalar in FP8_FORMATS:
        return torch.uint8
    if d.scalar not in ALL_DTYPES:
        return None
    return getattr(torch, d.scalar.name, None)


#: tinygrad's table of dtypes by the names `dtypes` gives them (aliases such as `half` and `float` included; not the
#: defaults, which follow settings)
DTYPES_DICT: dict[str, DType] = {name: d for name, d in vars(dtypes).items()
                                 if isinstance(d, DType) and d in ALL_DTYPES and not name.startswith("default")}


#: from_numpy's answers by numpy dtype: a numpy dtype's name is computed in Python each time it is read, a cost
#: every Tensor made from an array paid
_FROM_NUMPY: dict[np.dtype, DType] = {}


def from_numpy(nd: np.dtype) -> DType:
    if (known := _FROM_NUMPY.get(nd)) is not None:
        return known
    name = np.dtype(nd).name
    if name not in _BY_NAME or _BY_NAME[name] in EMULATED_FLOATS:
        raise TypeError(f"numpy dtype {name} has no tinygrad equivalent; cast it to one of "
                        f"{[d.name for d in ALL_DTYPES if d not in EMULATED_FLOATS]} first")
    _FROM_NUMPY[np.dtype(nd)] = _BY_NAME[name]
    return _BY_NAME[name]


def encode_floats(values: object, d: DType) -> np.ndarray:
    """The bit patterns (a `to_numpy(d)` array) a buffer of the emulated float `d` holds for these numbers."""
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if d.scalar == dtypes.bfloat16:
        return np.array([float_to_bf16_bits(float(v)) for v in arr], dtype=np.uint16)
    return _encode_fp8_array(arr, FP8_FORMATS[d.scalar])


def decode_floats(bits: np.ndarray, d: DType) -> np.ndarray:
    """The float32 values of a buffer of the emulated float `d` (the inverse of `encode_floats`)."""
    if d.scalar == dtypes.bfloat16:
        return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return FP8_FORMATS[d.scalar].table[bits.astype(np.uint8)]


def float_to_bits(value: float, d: DType) -> int:
    """One number as the bit pattern of the emulated float `d`."""
    if d.scalar == dtypes.bfloat16:
        return float_to_bf16_bits(value)
    return float_to_fp8_bits(value, d)


def bits_to_float(bits: int, d: DType) -> float:
    if d.scalar == dtypes.bfloat16:
        return bf16_bits_to_float(bits)
    return fp8_bits_to_float(bits, d)


# ---- exact value conversion, shared by constant folding and the reference ALU ----

def _truncate(value: float | int | bool, d: DType) -> float | int | bool:
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
        if d in FP8_FORMATS:
            return fp8_bits_to_float(float_to_fp8_bits(value, d), d)
        return _round_float(value, d.fmt)  # type: ignore[arg-type]
    if kind == "bool":
        return bool(value)
    if kind == "int" or kind == "uint":
        if isinstance(value, (float, np.floating)):
            value = float(value)
            if math.isnan(value) or math.isinf(value):
                return 0
            value = int(value)
        v = int(value) & ((1 << d.bits) - 1)
        if kind == "int" and v >= 1 << (d.bits - 1):
            v -= 1 << d.bits
        return v
    raise TypeError(f"cannot truncate to {d}")


class _Truncation:
    """`truncate(value, d)`, and tinygrad's spelling `truncate[d](value)`: the table of one-argument converters by
    dtype."""

    def __call__(self, value: float | int | bool, d: DType) -> float | int | bool:
        return _truncate(value, d)

    def __getitem__(self, d: DType) -> Callable[[float | int | bool], float | int | bool]:
        if d not in _TRUNCATABLE:
            raise KeyError(d)
        return functools.partial(_truncate_to, d)

    def __contains__(self, d: object) -> bool:
        return d in _TRUNCATABLE

    def get(self, d: DType, default: Callable[[float | int | bool], float | int | bool] | None = None
            ) -> Callable[[float | int | bool], float | int | bool] | None:
        return self[d] if d in _TRUNCATABLE else default


def _truncate_to(d: DType, value: float | int | bool) -> float | int | bool:
    return _truncate(value, d)


truncate: Final = _Truncation()
_TRUNCATABLE: Final = frozenset(ALL_DTYPES)


_MANTISSA_BITS = {"float64": 53, "float32": 24, "float16": 11, "bfloat16": 8, "fp8e4m3": 4, "fp8e5m2": 3,
                  "fp8e4m3fnuz": 4, "fp8e5m2fnuz": 3}


def significand_bits(d: DType) -> int:
    """Bits of precision of a float dtype, the implicit leading one included (float32: 24)."""
    return _MANTISSA_BITS[d.scalar.name]


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


# ---- the OCP 8-bit floats ----

@dataclass(frozen=True)
class FP8Format:
    """An 8-bit float format: 1 sign bit, `exponent_bits`, `mantissa_bits`. The OCP OFP8 ones: E5M2 follows IEEE 754
    (infinities at the top exponent, NaNs above them); E4M3 gives the top exponent to finite values and keeps only
    S.1111.111 for NaN. The `fnuz` ones ("finite, no unsigned zero") have a bias one larger, every pattern 0x00-0x7F
    finite (and their negatives), and the negative-zero pattern 0x80 as their only NaN."""

    exponent_bits: int
    mantissa_bits: int
    has_inf: bool
    fnuz: bool = False

    @property
    def bias(self) -> int:
        return (1 << (self.exponent_bits - 1)) - (0 if self.fnuz else 1)

    @property
    def max_code(self) -> int:
        """The pattern of the largest finite value (0x7E for E4M3: 448, 0x7B for E5M2: 57344, 0x7F for the fnuz
        formats: 240 and 57344)."""
        top = (1 << self.exponent_bits) - 1
        if self.fnuz:
            return 0x7F
        if self.has_inf:
            return ((top - 1) << self.mantissa_bits) | ((1 << self.mantissa_bits) - 1)
        return (top << self.mantissa_bits) | ((1 << self.mantissa_bits) - 2)

    @property
    def nan_code(self) -> int:
        """The NaN this project writes (the sign bit is or-ed in): all exponent and mantissa bits set for the OCP
        formats, as PyTorch and tinygrad write it; 0x80 for the fnuz formats, whatever the sign."""
        return 0x80 if self.fnuz else 0x7F

    @property
    def inf_code(self) -> int:
        """The pattern of +infinity; E4M3 and the fnuz formats have none, and an infinity becomes NaN (as in tinygrad
        and PyTorch)."""
        return ((1 << self.exponent_bits) - 1) << self.mantissa_bits if self.has_inf else self.nan_code

    @property
    def max_value(self) -> float:
        return fp8_decode(self.max_code, self)

    @property
    def table(self) -> np.ndarray:
        """The float32 value of each of the 256 patterns."""
        return _fp8_tables(self)[0]


def fp8_decode(bits: int, fmt: FP8Format) -> float:
    """The value of an 8-bit pattern: (-1)^sign * 2^(exponent - bias) * 1.mantissa, or 0.mantissa * 2^(1 - bias) for
    exponent 0 (subnormals); NaN keeps its sign."""
    if fmt.fnuz and bits == 0x80:
        return math.nan
    sign = -1.0 if bits & 0x80 else 1.0
    exponent = (bits >> fmt.mantissa_bits) & ((1 << fmt.exponent_bits) - 1)
    mantissa = bits & ((1 << fmt.mantissa_bits) - 1)
    if (bits & 0x7F) == fmt.inf_code and fmt.has_inf:
        return sign * math.inf
    if (bits & 0x7F) > fmt.max_code:
        return math.copysign(math.nan, sign)
    if exponent == 0:
        return sign * math.ldexp(mantissa, 1 - fmt.bias - fmt.mantissa_bits)
    return sign * math.ldexp((1 << fmt.mantissa_bits) | mantissa, exponent - fmt.bias - fmt.mantissa_bits)


def fp8_encode(value: float, fmt: FP8Format) -> int:
    """Round a float to the nearest 8-bit pattern, ties to even. Finite values past the largest saturate to it with
    their sign (OCP's saturating mode, as tinygrad converts); NaN stays NaN, and infinity stays infinity in E5M2 and
    becomes NaN in E4M3, which has none. Exact for any float64: the rounding happens once, here."""
    sign = 0x80 if math.copysign(1.0, value) < 0 else 0
    if fmt.fnuz and not math.isfinite(value):
        return 0x80
    if math.isnan(value):
        return sign | fmt.nan_code
    if math.isinf(value):
        return sign | fmt.inf_code
    magnitude = abs(value)
    if magnitude == 0:
        return 0 if fmt.fnuz else sign
    # the spacing of representable values where `magnitude` lies: 2^(exponent - mantissa_bits), constant below the
    # smallest normal exponent (subnormals)
    exponent = max(math.frexp(magnitude)[1] - 1, 1 - fmt.bias)
    steps = round(math.ldexp(magnitude, fmt.mantissa_bits - exponent))  # round() on a float: ties to even, exact
    if exponent == 1 - fmt.bias:
        code = steps  # subnormal (steps == 2^mantissa_bits carries into the smallest normal)
    else:
        code = ((exponent + fmt.bias - 1) << fmt.mantissa_bits) + steps  # a carry moves up one exponent
    if code == 0 and fmt.fnuz:
        return 0  # a value that rounds to zero is +0: the negative-zero pattern is NaN
    return sign | min(code, fmt.max_code)


FP8_FORMATS: dict[DType, FP8Format] = {dtypes.fp8e4m3: FP8Format(4, 3, has_inf=False),
                                       dtypes.fp8e5m2: FP8Format(5, 2, has_inf=True),
                                       dtypes.fp8e4m3fnuz: FP8Format(4, 3, has_inf=False, fnuz=True),
                                       dtypes.fp8e5m2fnuz: FP8Format(5, 2, has_inf=False, fnuz=True)}


def float_to_fp8_bits(value: float, d: DType) -> int:
    return fp8_encode(float(value), FP8_FORMATS[d.scalar])


def fp8_bits_to_float(bits: int, d: DType) -> float:
    return fp8_decode(int(bits) & 0xFF, FP8_FORMATS[d.scalar])


def float_to_fp8(x: float, dtype: DType) -> int:
    """tinygrad's name: the 8-bit pattern (0-255) nearest to `x` in the 8-bit float `dtype` (see `fp8_encode`)."""
    if dtype.scalar not in FP8_FORMATS:
        raise ValueError(f"float_to_fp8 converts to the 8-bit floats {dtypes.fp8s}, not {dtype}")
    return float_to_fp8_bits(float(x), dtype)


def fp8_to_float(x: int, dtype: DType) -> float:
    """tinygrad's name: the value of the 8-bit pattern `x` of the 8-bit float `dtype`."""
    if dtype.scalar not in FP8_FORMATS:
        raise ValueError(f"fp8_to_float converts from the 8-bit floats {dtypes.fp8s}, not {dtype}")
    return fp8_bits_to_float(x, dtype)


_FP8_TABLE_CACHE: dict[FP8Format, tuple[np.ndarray, np.ndarray]] = {}


def _fp8_tables(fmt: FP8Format) -> tuple[np.ndarray, np.ndarray]:
    """(float32 value of each pattern, midpoints between consecutive non-negative finite values in float64)."""
    if fmt not in _FP8_TABLE_CACHE:
        values = np.array([fp8_decode(b, fmt) for b in range(256)], dtype=np.float64)
        ladder = values[:fmt.max_code + 1]  # patterns 0..max_code are the non-negative finite values, ascending
        _FP8_TABLE_CACHE[fmt] = (values.astype(np.float32), (ladder[:-1] + ladder[1:]) / 2)
    return _FP8_TABLE_CACHE[fmt]


def _encode_fp8_array(x: np.ndarray, fmt: FP8Format) -> np.ndarray:
    """`fp8_encode` over a float64 array: the nearest pattern is the number of midpoints below |x|; on a midpoint
    the even pattern wins, and past the last midpoint the largest finite value does (saturation)."""
    mids = _fp8_tables(fmt)[1]
    magnitude = np.abs(x)
    below = np.searchsorted(mids, magnitude, side="left")
    on_mid = np.searchsorted(mids, magnitude, side="right") != below
    code = np.where(on_mid & (below % 2 == 1), below + 1, below).astype(np.uint8)
    code = np.where(np.isinf(x), fmt.inf_code, code)
    code = np.where(np.isnan(x), fmt.nan_code, code)
    sign = np.where(np.signbit(x), 0x80, 0)
    if fmt.fnuz:
        sign = np.where(code == 0, 0, sign)  # no negative zero: its pattern is the NaN
    return (code | sign).astype(np.uint8)


# ---- DEFAULT_FLOAT: the dtype of Python floats, read once when tinygrad is imported ----

def _default_float_from_env() -> DType | None:
    name = os.environ.get("DEFAULT_FLOAT", "").strip()
    if not name:
        return None
    floats = sorted({k.upper() for k, v in _BY_NAME.items() if v.is_float} | {"HALF", "FLOAT", "DOUBLE"})
    d = _BY_NAME.get(name.lower()) or getattr(dtypes, name.lower(), None)
    if not isinstance(d, DType) or not d.is_float:
        raise ValueError(f"DEFAULT_FLOAT={name!r} is not a float dtype; use one of {', '.join(floats)}")
    return d


if (_env_float := _default_float_from_env()) is not None:
    dtypes.default_float = _env_float
