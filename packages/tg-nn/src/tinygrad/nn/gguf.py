"""GGUF, llama.cpp's model format, written from its specification (versions 2 and 3; little-endian only):

    4 bytes   magic "GGUF"
    u32       version
    u64       tensor count, u64 metadata count
    metadata  per entry: key (string), value type (u32), value
    infos     per tensor: name (string), n_dims (u32), n_dims x u64 dims (innermost first), ggml type (u32),
              u64 offset into the data section
    padding   up to a multiple of the alignment (metadata `general.alignment`, default 32)
    data      every tensor's blocks at its offset (each offset a multiple of the alignment)

A string is a u64 byte length and UTF-8 bytes; an array is an element type (u32), a u64 count and the elements.
Quantized tensors are stored in blocks (32 or 256 values) holding small integers and fp16 scales. `gguf_load`
dequantizes them with Tensor ops on the device, from a uint8 tensor of the file's data section that is uploaded once.
`gguf_load_quantized` keeps them as they are: each one a `QuantizedTensor`, a uint8 tensor of its blocks read from
the file straight into device memory, whose `dequantize()` is a lazy graph that a consumer (a matmul) fuses into its
own kernel; so what a model holds is about the size of the file.

Everything read is validated before any tensor is built (lengths against the file, value and tensor types, dims,
offsets, alignment), so a damaged or hostile file gives a GGUFError naming the file, the byte offset and the
problem, and never a read outside the file.
"""

from __future__ import annotations

import mmap
import os
import pathlib
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO, cast

import numpy as np
from tinygrad import Tensor, dtypes
from tinygrad.dtype import DType
from tinygrad.helpers import prod
from tinygrad.nn._bytes import FileLike, read_bytes

__all__ = ["GGML_TYPE_NAMES", "QUANTIZED_TYPES", "GGUFError", "QuantizedTensor", "dequantize_blocks", "gguf_load",
           "gguf_load_quantized"]

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)  # version 1 used 32-bit counts and lengths; 3 only added big-endian files
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS: llama.cpp refuses tensors of more dimensions
MAX_ARRAY_DEPTH = 16  # arrays may nest; a bound keeps a hostile file from exhausting the Python stack


class GGUFError(ValueError):
    """A file that is not valid GGUF, or holds something this reader cannot load."""


# metadata value types: id -> (name, struct/numpy format of a fixed-size value)
_STRING, _ARRAY = 8, 9
_FIXED: dict[int, tuple[str, str]] = {
    0: ("UINT8", "<u1"), 1: ("INT8", "<i1"), 2: ("UINT16", "<u2"), 3: ("INT16", "<i2"), 4: ("UINT32", "<u4"),
    5: ("INT32", "<i4"), 6: ("FLOAT32", "<f4"), 7: ("BOOL", "<u1"), 10: ("UINT64", "<u8"), 11: ("INT64", "<i8"),
    12: ("FLOAT64", "<f8"),
}
_BOOL = 7
_VALUE_TYPE_NAMES = {**{k: v[0] for k, v in _FIXED.items()}, _STRING: "STRING", _ARRAY: "ARRAY"}

# every ggml tensor type id, so that an unsupported but real type is named in the error
GGML_TYPE_NAMES: dict[int, str] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1", 10: "Q2_K", 11: "Q3_K",
    12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S",
    20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64",
    29: "IQ1_M", 30: "BF16", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4", 40: "NVFP4", 41: "Q1_0",
}


@dataclass(frozen=True)
class _TensorInfo:
    name: str
    shape: tuple[int, ...]  # tinygrad (C) order: the file's dims reversed
    ggml_type: int
    offset: int  # into the data section
    nbytes: int
    at: int  # where the info starts in the file, for error messages


# --------------------------------------------------------------------------------------------------------------------
# parsing


class _Reader:
    def __init__(self, raw: bytes, where: str):
        self.raw, self.where, self.pos = raw, where, 0

    def error(self, msg: str, at: int | None = None) -> GGUFError:
        return GGUFError(f"{self.where}: at byte {self.pos if at is None else at}: {msg}")

    def take(self, n: int, what: str) -> memoryview:
        if n > len(self.raw) - self.pos:
            raise self.error(f"{what} needs {n} bytes but the file ends after {len(self.raw) - self.pos}; "
                             f"the file is truncated")
        out = memoryview(self.raw)[self.pos:self.pos + n]
        self.pos += n
        return out

    def u32(self, what: str) -> int:
        return int(struct.unpack("<I", self.take(4, what))[0])

    def u64(self, what: str) -> int:
        return int(struct.unpack("<Q", self.take(8, what))[0])

    def string(self, what: str, strict: bool) -> str:
        at = self.pos
        n = self.u64(f"the length of {what}")
        data = bytes(self.take(n, what))
        if not strict:
            # metadata strings are UTF-8 by the specification, but a vocabulary may hold stray bytes: keep them
            # recoverable (s.encode("utf-8", "surrogateescape")) instead of refusing the whole model
            return data.decode("utf-8", "surrogateescape")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.error(f"{what} is not valid UTF-8 ({e.reason} at byte {e.start} of the string)", at) from None

    def value(self, vtype: int, what: str, depth: int = 0) -> Any:
        if vtype in _FIXED:
            fmt = _FIXED[vtype][1]
            v = np.frombuffer(self.take(int(fmt[-1]), what), dtype=fmt)[0].item()
            return bool(v) if vtype == _BOOL else v
        if vtype == _STRING:
            return self.string(what, strict=False)
        if vtype == _ARRAY:
            return self.array(what, depth)
        raise self.error(f"{what} has value type {vtype}, which GGUF does not define; known: "
                         f"{sorted(_VALUE_TYPE_NAMES.items())}", self.pos - 4)

    def array(self, what: str, depth: int) -> list[Any]:
        if depth >= MAX_ARRAY_DEPTH:
            raise self.error(f"{what} nests arrays deeper than {MAX_ARRAY_DEPTH}; the file is damaged or hostile")
        etype = self.u32(f"the element type of {what}")
        count = self.u64(f"the length of {what}")
        if etype in _FIXED:
            # fixed-size elements are read in one go: vocabularies' score and type arrays are long
            fmt = _FIXED[etype][1]
            size = int(fmt[-1])
            if count > (len(self.raw) - self.pos) // size:
                raise self.error(f"{what} claims {count} {_FIXED[etype][0]} elements ({count * size} bytes) but "
                                 f"the file ends after {len(self.raw) - self.pos}; the file is truncated")
            arr = np.frombuffer(self.take(count * size, what), dtype=fmt)
            return (arr != 0).tolist() if etype == _BOOL else arr.tolist()
        if etype not in (_STRING, _ARRAY):
            raise self.error(f"{what} has element type {etype}, which GGUF does not define; known: "
                             f"{sorted(_VALUE_TYPE_NAMES.items())}", self.pos - 12)
        if count > len(self.raw) - self.pos:  # every string or array element takes at least 8 bytes
            raise self.error(f"{what} claims {count} elements but the file ends after {len(self.raw) - self.pos} "
                             f"bytes; the file is truncated")
        return [self.value(etype, f"element {i} of {what}", depth + 1) for i in range(count)]


def _parse(raw: bytes, where: str) -> tuple[dict[str, Any], list[_TensorInfo], int]:
    """(metadata, tensor infos, the file offset where the data section starts)."""
    r = _Reader(raw, where)
    magic = bytes(r.take(4, "the magic"))
    if magic != GGUF_MAGIC:
        raise r.error(f"bad magic {magic!r}, expected {GGUF_MAGIC!r}; this is not a GGUF file", 0)
    version = r.u32("the version")
    if version not in SUPPORTED_VERSIONS:
        swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
        hint = (" (it reads as a big-endian file, which this reader does not load)" if swapped in (2, 3)
                else " (version 1 used 32-bit counts and is obsolete)" if version == 1 else "")
        raise r.error(f"unknown GGUF version {version}{hint}; supported: {list(SUPPORTED_VERSIONS)}", 4)
    n_tensors = r.u64("the tensor count")
    n_kv = r.u64("the metadata count")
    # the smallest metadata entry is 13 bytes and the smallest tensor info 24: bound the counts by the file size
    # before looping over them
    if n_kv * 13 + n_tensors * 24 > len(raw) - r.pos:
        raise r.error(f"the header claims {n_tensors} tensors and {n_kv} metadata entries, more than the "
                      f"{len(raw) - r.pos} remaining bytes can hold; the file is truncated or damaged", 8)

    kv: dict[str, Any] = {}
    kv_at: dict[str, int] = {}
    for i in range(n_kv):
        at = r.pos
        key = r.string(f"metadata key {i}", strict=True)
        if key in kv:
            raise r.error(f"metadata key {key!r} appears twice (first at byte {kv_at[key]})", at)
        vtype = r.u32(f"the value type of metadata {key!r}")
        kv[key], kv_at[key] = r.value(vtype, f"metadata {key!r}"), at

    alignment = kv.get("general.alignment", DEFAULT_ALIGNMENT)
    if (not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0
            or alignment & (alignment - 1)):
        raise r.error(f"general.alignment is {alignment!r}; it must be a power of two", kv_at["general.alignment"])

    infos: list[_TensorInfo] = []
    seen: dict[str, int] = {}
    for i in range(n_tensors):
        infos.append(_tensor_info(r, i, seen))
    data_start = -(-r.pos // alignment) * alignment
    data_len = max(0, len(raw) - data_start)
    _check_extents(r, infos, alignment, data_start, data_len)
    return kv, infos, data_start


def _tensor_info(r: _Reader, i: int, seen: dict[str, int]) -> _TensorInfo:
    at = r.pos
    name = r.string(f"the name of tensor {i}", strict=True)
    if name in seen:
        raise r.error(f"tensor name {name!r} appears twice (first at byte {seen[name]})", at)
    seen[name] = at
    n_dims = r.u32(f"the dimension count of tensor {name!r}")
    if n_dims > MAX_DIMS:
        raise r.error(f"tensor {name!r} has {n_dims} dimensions; GGUF allows at most {MAX_DIMS}", r.pos - 4)
    dims = [r.u64(f"dimension {d} of tensor {name!r}") for d in range(n_dims)]
    type_at = r.pos
    ggml_type = r.u32(f"the type of tensor {name!r}")
    offset = r.u64(f"the data offset of tensor {name!r}")
    if ggml_type not in QUANTS:
        known = GGML_TYPE_NAMES.get(ggml_type)
        what = f"type {known} ({ggml_type}), which this reader cannot load" if known else \
            f"unknown tensor type {ggml_type}"
        raise r.error(f"tensor {name!r} has {what}; supported: {sorted(q.name for q in QUANTS.values())}", type_at)
    q = QUANTS[ggml_type]
    row = dims[0] if dims else 1  # a 0-d tensor is one value
    if row % q.block_elems:
        raise r.error(f"tensor {name!r} ({q.name}) has rows of {row} values, not a whole number of "
                      f"{q.block_elems}-value blocks", at)
    nbytes = prod(dims) // q.block_elems * q.block_bytes
    return _TensorInfo(name, tuple(reversed(dims)), ggml_type, offset, nbytes, at)


def _check_extents(r: _Reader, infos: list[_TensorInfo], alignment: int, data_start: int, data_len: int) -> None:
    for t in infos:
        if t.offset % alignment:
            raise r.error(f"tensor {t.name!r} has data offset {t.offset}, not a multiple of the alignment "
                          f"{alignment}", t.at)
        if t.offset + t.nbytes > data_len:
            raise r.error(f"tensor {t.name!r} ({QUANTS[t.ggml_type].name}, shape {t.shape}) spans data bytes "
                          f"[{t.offset}, {t.offset + t.nbytes}) but the data section (from byte {data_start}) "
                          f"holds {data_len}; the offset is out of range or the file is truncated", t.at)
    prev: _TensorInfo | None = None
    for t in sorted((t for t in infos if t.nbytes), key=lambda t: t.offset):
        if prev is not None and t.offset < prev.offset + prev.nbytes:
            raise r.error(f"tensor {t.name!r} at data bytes [{t.offset}, {t.offset + t.nbytes}) overlaps tensor "
                          f"{prev.name!r} at [{prev.offset}, {prev.offset + prev.nbytes})", t.at)
        prev = t


# --------------------------------------------------------------------------------------------------------------------
# dequantization: each function maps a (n_blocks, block_bytes) uint8 tensor to (n_blocks, block_elems) values


class _Consts:
    """The small shift vectors the unpacking broadcasts against, made once per load and device."""

    def __init__(self, device: str | tuple[str, ...]):
        self.device = device
        self.cache: dict[tuple[int, ...], Tensor] = {}

    def shifts(self, *values: int) -> Tensor:
        if values not in self.cache:
            self.cache[values] = Tensor(list(values), dtype=dtypes.uint8, device=self.device)
        return self.cache[values]



def _cols(b: Tensor, start: int, stop: int) -> Tensor:
    return b.shrink(((0, b.shape[0]), (start, stop)))


def _words(b: Tensor, dtype: DType) -> Tensor:
    """Little-endian unsigned words of dtype's size from (n, k * size) bytes, assembled with shifts in the kernel
    (a Tensor bitcast only reinterprets between types of one size)."""
    n, width = b.shape
    size = dtype.itemsize
    parts = b.reshape(n, width // size, size)
    out: Tensor | None = None
    for i in range(size):
        byte = parts.shrink(((0, n), (0, width // size), (i, i + 1))).reshape(n, width // size).cast(dtype)
        out = byte if out is None else out | (byte << (8 * i))
    assert out is not None
    return out


def _f16(b: Tensor) -> Tensor:
    """fp16 scales (n, 2k bytes) as float32 (n, k)."""
    return _words(b, dtypes.uint16).bitcast(dtypes.float16).cast(dtypes.float32)


def _bits(c: _Consts, b: Tensor, group: int, shifts: tuple[int, ...], mask: int) -> Tensor:
    """Unpack bit fields: each run of `group` bytes yields len(shifts) runs of `group` values, (byte >> s) & mask,
    in the order of the shifts (the layout every ggml block uses for its low and high bits)."""
    n, width = b.shape
    fields = b.reshape(n, width // group, 1, group) >> c.shifts(*shifts).reshape(1, 1, len(shifts), 1)
    return (fields & mask).reshape(n, width // group * len(shifts) * group)


def _plain(dtype: DType) -> Callable[[_Consts, Tensor], Tensor]:
    def load(c: _Consts, b: Tensor) -> Tensor:
        del c
        return _words(b, dtypes.uint32 if dtype.itemsize == 4 else dtypes.uint16).bitcast(dtype)
    return load


def _q8_0(c: _Consts, b: Tensor) -> Tensor:  # d: fp16, 32 x int8
    return _f16(_cols(b, 0, 2)) * _cols(b, 2, 34).bitcast(dtypes.int8).cast(dtypes.float32)


def _q4_0(c: _Consts, b: Tensor) -> Tensor:  # d: fp16, 16 bytes of 4-bit values (low nibbles first), offset 8
    q = _bits(c, _cols(b, 2, 18), 16, (0, 4), 0xF).cast(dtypes.float32) - 8
    return _f16(_cols(b, 0, 2)) * q


def _q4_1(c: _Consts, b: Tensor) -> Tensor:  # d, m: fp16, 16 bytes of 4-bit values; x = d * q + m
    q = _bits(c, _cols(b, 4, 20), 16, (0, 4), 0xF).cast(dtypes.float32)
    return _f16(_cols(b, 0, 2)) * q + _f16(_cols(b, 2, 4))


def _q5(c: _Consts, b: Tensor, lo_at: int) -> Tensor:
    # the fifth bit of value j is bit j of a little-endian u32: byte j // 8, bit j % 8
    high = _bits(c, _cols(b, lo_at - 4, lo_at), 1, tuple(range(8)), 1)
    low = _bits(c, _cols(b, lo_at, lo_at + 16), 16, (0, 4), 0xF)
    return (low | (high << 4)).cast(dtypes.float32)


def _q5_0(c: _Consts, b: Tensor) -> Tensor:  # d: fp16, qh: 4 bytes, qs: 16 bytes; offset 16
    return _f16(_cols(b, 0, 2)) * (_q5(c, b, 6) - 16)


def _q5_1(c: _Consts, b: Tensor) -> Tensor:  # d, m: fp16, qh: 4 bytes, qs: 16 bytes; x = d * q + m
    return _f16(_cols(b, 0, 2)) * _q5(c, b, 8) + _f16(_cols(b, 2, 4))


def _k_scales(scales: Tensor) -> tuple[Tensor, Tensor]:
    """The 8 six-bit scales and mins of a Q4_K/Q5_K block from its 12 bytes: bytes 0-3 hold scales 0-3 (low 6 bits),
    4-7 mins 0-3; scales and mins 4-7 take their low 4 bits from bytes 8-11 and their top 2 from the spare top bits
    of bytes 0-3 (scales) and 4-7 (mins)."""
    n = scales.shape[0]
    rows = scales.reshape(n, 3, 1, 4)
    d, m, md = (rows.shrink(((0, n), (i, i + 1), (0, 1), (0, 4))).reshape(n, 1, 4).expand(n, 2, 4) for i in range(3))
    # both halves from the same bytes, picked per half with a select rather than joined with cat: cat pads each half,
    # which guards its loads, and a fused consumer (a quantized matmul) then cannot vectorise them
    high = Tensor.arange(2, device=scales.device).reshape(1, 2, 1) == 1
    sc = high.where((md & 0x0F) | ((d >> 2) & 0x30), d & 0x3F).reshape(n, 8)
    mn = high.where((md >> 4) | ((m >> 2) & 0x30), m & 0x3F).reshape(n, 8)
    return sc.cast(dtypes.float32), mn.cast(dtypes.float32)


def _q4_k(c: _Consts, b: Tensor) -> Tensor:
    # d, dmin: fp16, scales: 12 bytes, qs: 128 bytes; 8 sub-blocks of 32: x = d * sc * q - dmin * m
    n = b.shape[0]
    sc, mn = _k_scales(_cols(b, 4, 16))
    scale = (_f16(_cols(b, 0, 2)) * sc).reshape(n, 8, 1)
    offset = (_f16(_cols(b, 2, 4)) * mn).reshape(n, 8, 1)
    q = _bits(c, _cols(b, 16, 144), 32, (0, 4), 0xF).cast(dtypes.float32).reshape(n, 8, 32)
    return (scale * q - offset).reshape(n, 256)


def _q5_k(c: _Consts, b: Tensor) -> Tensor:
    # as Q4_K plus qh: 32 bytes whose bit s of byte l is the fifth bit of value l of sub-block s
    n = b.shape[0]
    sc, mn = _k_scales(_cols(b, 4, 16))
    scale = (_f16(_cols(b, 0, 2)) * sc).reshape(n, 8, 1)
    offset = (_f16(_cols(b, 2, 4)) * mn).reshape(n, 8, 1)
    high = _bits(c, _cols(b, 16, 48), 32, tuple(range(8)), 1)
    low = _bits(c, _cols(b, 48, 176), 32, (0, 4), 0xF)
    q = (low | (high << 4)).cast(dtypes.float32).reshape(n, 8, 32)
    return (scale * q - offset).reshape(n, 256)


def _q6_k(c: _Consts, b: Tensor) -> Tensor:
    # ql: 128 bytes of low 4 bits, qh: 64 bytes of high 2 bits, 16 int8 scales, d: fp16; 16 sub-blocks of 16:
    # x = d * scale * (q - 32)
    n = b.shape[0]
    scale = (_f16(_cols(b, 208, 210)) * _cols(b, 192, 208).bitcast(dtypes.int8).cast(dtypes.float32))
    low = _bits(c, _cols(b, 0, 128), 64, (0, 4), 0xF)
    high = _bits(c, _cols(b, 128, 192), 32, (0, 2, 4, 6), 0x3)
    q = ((low | (high << 4)).cast(dtypes.float32) - 32).reshape(n, 16, 16)
    return (scale.reshape(n, 16, 1) * q).reshape(n, 256)


# IQ4_NL's code (also IQ4_XS's): 16 values spaced for normally distributed weights
_IQ4_VALUES = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)
# MXFP4's code: the values of the 4-bit float E2M1 (sign, 2 exponent bits, 1 mantissa bit), doubled to integers
_E2M1_DOUBLED = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)


def _lookup4(table: tuple[int, ...], code: Tensor) -> Tensor:
    """table[code] as float32 for 4-bit codes (uint8, 0-15) of a 16-entry table of small integers, with ALU ops only.
    Indexing a table tensor would sum a one-hot compare over its entries, a reduction that a fused product cannot
    hold inside its own, so the dequantized weight would be made in a kernel of its own. Instead the entries, offset
    to 0-255, are packed four to a uint32 constant: bits 3 and 2 of the code pick the word (three selects), bits 1
    and 0 the byte within it."""
    low = min(table)
    words = [sum((table[i + j] - low) << (8 * j) for j in range(4)) for i in range(0, 16, 4)]
    assert len(table) == 16 and max(table) - low < 256
    q = code.cast(dtypes.uint32)

    def word(i: int) -> Tensor:
        return Tensor(words[i], dtype=dtypes.uint32, device=code.device)

    bit2, bit3 = (q & 4) != 0, (q & 8) != 0
    picked = bit3.where(bit2.where(word(3), word(2)), bit2.where(word(1), word(0)))
    return (((picked >> ((q & 3) * 8)) & 0xFF).cast(dtypes.int32) + low).cast(dtypes.float32)


def _iq4_xs(c: _Consts, b: Tensor) -> Tensor:
    # d: fp16, scales_h: u16 (2 bits per sub-block), scales_l: 4 bytes (a nibble per sub-block), qs: 128 bytes; 8
    # sub-blocks of 32 whose 6-bit scales are offset by 32: x = d * (scale - 32) * IQ4_VALUES[q]
    n = b.shape[0]
    low = _bits(c, _cols(b, 4, 8), 1, (0, 4), 0xF)
    high = _bits(c, _cols(b, 2, 4), 1, (0, 2, 4, 6), 0x3)
    scale = _f16(_cols(b, 0, 2)) * ((low | (high << 4)).cast(dtypes.float32) - 32)
    q = _lookup4(_IQ4_VALUES, _bits(c, _cols(b, 8, 136), 16, (0, 4), 0xF)).reshape(n, 8, 32)
    return (scale.reshape(n, 8, 1) * q).reshape(n, 256)


def _mxfp4(c: _Consts, b: Tensor) -> Tensor:
    # e: an E8M0 scale (a power of two, 2^(e - 127)), qs: 16 bytes of E2M1 codes (low nibbles first). The codes are
    # doubled values, so the scale is halved: 2^(e - 128), the float32 with exponent field e - 1, or for e < 2 the
    # subnormals 2^-128 and 2^-127 (bit 21 or 22), exactly as llama.cpp's ggml_e8m0_to_fp32_half
    e = _cols(b, 0, 1).cast(dtypes.uint32)
    subnormal = (e == 0).where(0x00200000, 0x00400000).cast(dtypes.uint32)
    half_scale = (e < 2).where(subnormal, (e - 1) << 23).bitcast(dtypes.float32)
    return half_scale * _lookup4(_E2M1_DOUBLED, _bits(c, _cols(b, 1, 17), 16, (0, 4), 0xF))


@dataclass(frozen=True)
class _Quant:
    name: str
    block_elems: int
    block_bytes: int
    dtype: DType  # of the loaded tensor
    load: Callable[[_Consts, Tensor], Tensor]


QUANTS: dict[int, _Quant] = {
    0: _Quant("F32", 1, 4, dtypes.float32, _plain(dtypes.float32)),
    1: _Quant("F16", 1, 2, dtypes.float16, _plain(dtypes.float16)),
    30: _Quant("BF16", 1, 2, dtypes.bfloat16, _plain(dtypes.bfloat16)),
    2: _Quant("Q4_0", 32, 18, dtypes.float32, _q4_0),
    3: _Quant("Q4_1", 32, 20, dtypes.float32, _q4_1),
    6: _Quant("Q5_0", 32, 22, dtypes.float32, _q5_0),
    7: _Quant("Q5_1", 32, 24, dtypes.float32, _q5_1),
    8: _Quant("Q8_0", 32, 34, dtypes.float32, _q8_0),
    12: _Quant("Q4_K", 256, 144, dtypes.float32, _q4_k),
    13: _Quant("Q5_K", 256, 176, dtypes.float32, _q5_k),
    14: _Quant("Q6_K", 256, 210, dtypes.float32, _q6_k),
    23: _Quant("IQ4_XS", 256, 136, dtypes.float32, _iq4_xs),
    39: _Quant("MXFP4", 32, 17, dtypes.float32, _mxfp4),
}

_BY_NAME = {q.name: q for q in QUANTS.values()}
#: the block-quantized types: `gguf_load_quantized` keeps tensors of these as their blocks
QUANTIZED_TYPES = tuple(q.name for q in QUANTS.values() if q.block_elems > 1)


def _quant_named(type_name: str) -> _Quant:
    q = _BY_NAME.get(type_name)
    if q is None or q.block_elems == 1:
        raise ValueError(f"unknown quantization type {type_name!r}; supported: {list(QUANTIZED_TYPES)}")
    return q


def dequantize_blocks(blocks: Tensor, type_name: str) -> Tensor:
    """The float32 values (..., block_elems) of uint8 blocks (..., block_bytes) of a quantization type ("Q4_0",
    "Q8_0", "Q4_K", ...: QUANTIZED_TYPES), as a lazy graph: nothing runs until a consumer realizes it, so a reduction
    over the values (a matmul) reads the bytes in its own kernel."""
    q = _quant_named(type_name)
    if blocks.dtype != dtypes.uint8 or blocks.ndim < 1 or blocks.shape[-1] != q.block_bytes:
        raise ValueError(f"{type_name} blocks must be a uint8 tensor whose last dim is {q.block_bytes} bytes (one "
                         f"block), got {blocks.dtype} of shape {blocks.shape}")
    lead = blocks.shape[:-1]
    flat = blocks.reshape(prod(lead), q.block_bytes)
    return q.load(_Consts(blocks.device), flat).reshape(*lead, q.block_elems)


@dataclass(frozen=True)
class QuantizedTensor:
    """A block-quantized GGUF tensor as it is in the file: `blocks` is a uint8 tensor (rows, row_bytes), one row of
    blocks per row of the tensor (its innermost dim, the one the file's blocks run along), and `shape` the tensor's
    shape in tinygrad order."""

    blocks: Tensor
    shape: tuple[int, ...]
    type_name: str

    def __post_init__(self) -> None:
        q = _quant_named(self.type_name)
        row = self.shape[-1] if self.shape else 1
        rows = prod(self.shape[:-1]) if self.shape else 1
        want = (rows, row // q.block_elems * q.block_bytes)
        if row % q.block_elems or tuple(self.blocks.shape) != want or self.blocks.dtype != dtypes.uint8:
            raise ValueError(f"a {self.type_name} tensor of shape {self.shape} needs uint8 blocks of shape {want} "
                             f"(rows of {q.block_elems}-value blocks of {q.block_bytes} bytes), got "
                             f"{self.blocks.dtype} {tuple(self.blocks.shape)}")

    @property
    def block_elems(self) -> int:
        return _quant_named(self.type_name).block_elems

    @property
    def block_bytes(self) -> int:
        return _quant_named(self.type_name).block_bytes

    @property
    def nbytes(self) -> int:
        return prod(self.blocks.shape)

    def dequantize(self) -> Tensor:
        """The float32 values, shape `shape`, as a lazy graph over the blocks."""
        per_row = self.blocks.shape[1] // self.block_bytes
        blocks = self.blocks.reshape(self.blocks.shape[0], per_row, self.block_bytes)
        return dequantize_blocks(blocks, self.type_name).reshape(self.shape)


# --------------------------------------------------------------------------------------------------------------------
# loading


def _name(fn: FileLike) -> str:
    return str(fn) if isinstance(fn, (str, os.PathLike, pathlib.Path)) else f"<{type(fn).__name__}>"


def gguf_load(fn: FileLike, device: str | None = None) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """(metadata, tensors by name) of a GGUF file, given as a path, bytes, or a 1-d uint8 tensor of the file.

    Shapes are in tinygrad order (the file lists dims innermost first). F32, F16 and BF16 tensors keep their
    dtype; quantized ones (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_XS, MXFP4) are dequantized to
    float32 on the device. Metadata arrays are lists; undecodable bytes in metadata strings are kept as surrogate
    escapes."""
    raw = read_bytes(fn)
    kv, infos, data_start = _parse(raw, _name(fn))
    out: dict[str, Tensor] = {}
    if not any(t.nbytes for t in infos):
        for t in infos:
            out[t.name] = Tensor.zeros(*t.shape, dtype=QUANTS[t.ggml_type].dtype, device=device)
        return kv, out
    if isinstance(fn, Tensor):  # already on a device: use its data section in place
        data = fn.shrink(((data_start, len(raw)),))
        data = data if device is None else data.to(device)
    else:  # the data section's only copy to the device; the parse above needed the host bytes anyway
        data = Tensor(np.frombuffer(raw, dtype=np.uint8, offset=data_start), device=device)
    del raw  # the host copy is no longer needed while the kernels run
    consts = _Consts(data.device)
    for t in infos:
        q = QUANTS[t.ggml_type]
        if not t.nbytes:
            out[t.name] = Tensor.zeros(*t.shape, dtype=q.dtype, device=data.device)
            continue
        blocks = data.shrink(((t.offset, t.offset + t.nbytes),)).reshape(t.nbytes // q.block_bytes, q.block_bytes)
        out[t.name] = q.load(consts, blocks).reshape(t.shape)
    # realize together, so that the data section (which every output reads) can be freed once this returns
    loaded = list(out.values())
    loaded[0].realize(*loaded[1:])
    return kv, out


def gguf_load_quantized(fn: FileLike,
                        device: str | None = None) -> tuple[dict[str, Any], dict[str, Tensor | QuantizedTensor]]:
    """(metadata, tensors by name) of a GGUF file, with its block-quantized tensors (QUANTIZED_TYPES) kept as
    `QuantizedTensor`s, their bytes as in the file; F32, F16 and BF16 tensors are Tensors of their dtype.

    Given a path, the header is read through a memory map and each tensor's bytes are read from the file straight
    into the memory of its own device buffer (where the device's memory is host memory; elsewhere through one
    staging copy per tensor): loading holds no copy of the whole file, and no float copy of a quantized tensor."""
    where = _name(fn)
    out: dict[str, Tensor | QuantizedTensor] = {}
    if isinstance(fn, (str, os.PathLike)):
        with open(fn, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:  # mmap refuses an empty file; the parser names what is missing
                _parse(b"", where)
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                # the parser takes bytes; an mmap slices the same way, and only the header's pages are read
                kv, infos, data_start = _parse(cast(bytes, mm), where)
            def read(at: int, into: memoryview) -> None:
                _read_into(f, data_start + at, into, where)

            for t in infos:
                out[t.name] = _load_one(t, device, read)
        return kv, out
    raw = read_bytes(fn)
    kv, infos, data_start = _parse(raw, where)
    whole = memoryview(raw)

    def copy(at: int, into: memoryview) -> None:
        into[:] = whole[data_start + at:data_start + at + into.nbytes]

    for t in infos:
        out[t.name] = _load_one(t, device, copy)
    return kv, out


def _read_into(f: BinaryIO, at: int, into: memoryview, where: str) -> None:
    f.seek(at)
    done = 0
    while done < into.nbytes:
        n = f.readinto(into[done:])  # type: ignore[attr-defined]
        if not n:  # the file shrank since its header was checked against its size
            raise GGUFError(f"{where}: the file ended at byte {at + done} while reading {into.nbytes} bytes from "
                            f"byte {at}; was it changed while loading?")
        done += n


def _load_one(t: _TensorInfo, device: str | None,
              fill: Callable[[int, memoryview], None]) -> Tensor | QuantizedTensor:
    q = QUANTS[t.ggml_type]
    quantized = q.block_elems > 1
    if not t.nbytes:
        return Tensor.zeros(*t.shape, dtype=q.dtype, device=device)
    # a plain type's bytes are its values on a little-endian host; elsewhere they are assembled as loaded
    as_bytes = quantized or sys.byteorder != "little"
    rows = prod(t.shape[:-1]) if t.shape else 1
    shape = (rows, t.nbytes // rows) if as_bytes else t.shape
    out = Tensor.empty(*shape, dtype=dtypes.uint8 if as_bytes else q.dtype, device=device)
    buf = out._buffer()
    host = buf.host_array()
    if host is not None:  # device memory the host can write: the file's bytes go straight there
        fill(t.offset, memoryview(cast(Any, host)).cast("B"))
    else:
        staging = bytearray(t.nbytes)
        fill(t.offset, memoryview(staging))
        buf.copyin(memoryview(staging))
    if quantized:
        return QuantizedTensor(out, t.shape, q.name)
    if as_bytes:
        return q.load(_Consts(out.device), out.reshape(-1, q.block_bytes)).reshape(t.shape).realize()
    return out
