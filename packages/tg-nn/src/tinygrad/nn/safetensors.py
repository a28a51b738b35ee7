"""The safetensors format, written from its specification:

    8 bytes   N, the header length (unsigned little-endian)
    N bytes   a JSON object: {name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
              optionally "__metadata__": {str: str}}; may be padded with trailing spaces
    rest      the data: every tensor's C-order little-endian bytes at its offsets, relative to the data start

Everything read is validated before any tensor is built: the header length against the file, the JSON, every
dtype, shape and offset range (in bounds, matching the tensor's size, no overlaps and no gaps), so a damaged or
hostile file gives an error naming the problem and never a read outside the file.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np
from tinygrad import Tensor, dtypes
from tinygrad.dtype import DType
from tinygrad.helpers import atomic_write, prod
from tinygrad.nn._bytes import FileLike, read_bytes, tensor_from_raw, tensor_to_raw

# the specification's dtype codes
SAFE_DTYPES: dict[str, DType] = {
    "BOOL": dtypes.bool, "U8": dtypes.uint8, "I8": dtypes.int8, "U16": dtypes.uint16, "I16": dtypes.int16,
    "U32": dtypes.uint32, "I32": dtypes.int32, "U64": dtypes.uint64, "I64": dtypes.int64, "F16": dtypes.float16,
    "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64, "F8_E4M3": dtypes.fp8e4m3,
    "F8_E5M2": dtypes.fp8e5m2,
}
_CODE_OF = {d.name: code for code, d in SAFE_DTYPES.items()}
# the reference implementation refuses headers over 100 MB: a larger one is a damaged or hostile file
MAX_HEADER_BYTES = 100_000_000
# a valid header nests three deep (header -> tensor entry -> shape list); Python's JSON parser recurses once per level,
# so a deeply nested header must be refused before it is parsed
MAX_HEADER_DEPTH = 64
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_BRACKET_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 and -1 as int8
_NESTING_CHUNK = 1 << 20


class SafetensorsError(ValueError):
    """A file that is not valid safetensors."""


def safe_load_metadata(fn: FileLike) -> tuple[Tensor, int, dict[str, Any]]:
    """(the file's bytes as a uint8 tensor, the offset where the data starts, the parsed and validated header)."""
    raw = read_bytes(fn)
    data_start, header = _parse(raw, _name(fn))
    return Tensor(raw) if not isinstance(fn, Tensor) else fn, data_start, header


def safe_load(fn: FileLike, device: str | None = None) -> dict[str, Tensor]:
    """Every tensor in a safetensors file, by name, in the file's order."""
    raw = read_bytes(fn)
    data_start, header = _parse(raw, _name(fn))
    data = memoryview(raw)[data_start:]
    out: dict[str, Tensor] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = tensor_from_raw(data[begin:end], SAFE_DTYPES[info["dtype"]], tuple(info["shape"]), device)
    return out


def safe_save(tensors: Mapping[str, Tensor], fn: str | os.PathLike, metadata: Mapping[str, str] | None = None) -> None:
    """Write `tensors` (name -> Tensor) and optional string metadata to a safetensors file."""
    header: dict[str, Any] = {}
    if metadata:
        bad = {k: type(v).__name__ for k, v in metadata.items() if not isinstance(k, str) or not isinstance(v, str)}
        if bad:
            raise TypeError(f"safetensors metadata maps strings to strings; these entries are not: {bad}")
        header["__metadata__"] = dict(metadata)
    blobs, offset = [], 0
    for name, t in tensors.items():
        if name == "__metadata__":
            raise ValueError("'__metadata__' is reserved by the format; rename that tensor")
        if not isinstance(t, Tensor):
            raise TypeError(f"safe_save: {name!r} is a {type(t).__name__}, not a Tensor")
        if t.dtype.name not in _CODE_OF:
            raise TypeError(f"safe_save: {name!r} has dtype {t.dtype}, which safetensors cannot store; cast it to one "
                            f"of {sorted(d.name for d in SAFE_DTYPES.values())}")
        blob = tensor_to_raw(t)
        header[name] = {"dtype": _CODE_OF[t.dtype.name], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # pad so the data starts 8-byte aligned, as the specification recommends
    with atomic_write(fn) as f:  # a crash mid-save leaves the previous file, not a truncated one
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def _name(fn: FileLike) -> str:
    return str(fn) if isinstance(fn, (str, os.PathLike, pathlib.Path)) else "<bytes>"


def _parse(raw: bytes, where: str) -> tuple[int, dict[str, Any]]:
    if len(raw) < 8:
        raise SafetensorsError(f"{where}: {len(raw)} bytes is too short for a safetensors file (8-byte header length "
                               f"missing); the file is truncated or not safetensors")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > MAX_HEADER_BYTES:
        raise SafetensorsError(f"{where}: header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit; the file is "
                               f"damaged or not safetensors")
    if 8 + n > len(raw):
        raise SafetensorsError(f"{where}: the header claims {n} bytes but the file has only {len(raw) - 8} after the "
                               f"length; the file is truncated")
    _check_nesting(raw[8:8 + n], where)
    try:
        header = json.loads(raw[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{where}: the header is not valid UTF-8 JSON ({e})") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{where}: the header must be a JSON object, got {type(header).__name__}")
    data_len = len(raw) - 8 - n
    spans = []
    for name, info in header.items():
        if name == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise SafetensorsError(f"{where}: __metadata__ must map strings to strings")
            continue
        spans.append((_check_entry(name, info, data_len, where), name))
    spans.sort()
    expected = 0
    for (begin, end), name in spans:
        if begin < expected:
            raise SafetensorsError(f"{where}: tensor {name!r} at bytes [{begin}, {end}) overlaps the tensor before it "
                                   f"(which ends at {expected})")
        if begin > expected:
            raise SafetensorsError(f"{where}: bytes [{expected}, {begin}) before tensor {name!r} belong to no tensor; "
                                   f"the data must be fully covered")
        expected = end
    if expected != data_len:
        raise SafetensorsError(f"{where}: the tensors cover {expected} data bytes but the file holds {data_len}")
    return 8 + n, header


def _check_nesting(text: bytes, where: str) -> None:
    """Refuse a header whose arrays and objects nest deeper than MAX_HEADER_DEPTH, without recursing. With the
    strings taken out, the running count of brackets opened and not yet closed is the depth the parser would recurse
    to at that point (it stops at a stray closing bracket, where the count goes negative)."""
    steps = _JSON_STRING.sub(b'""', text).translate(_BRACKET_STEPS, _NOT_BRACKET)
    depth = 0
    for start in range(0, len(steps), _NESTING_CHUNK):  # in chunks: a hostile header is up to MAX_HEADER_BYTES
        chunk = np.frombuffer(steps, dtype=np.int8, count=min(_NESTING_CHUNK, len(steps) - start), offset=start)
        running = depth + np.cumsum(chunk, dtype=np.int32)
        if running.max() > MAX_HEADER_DEPTH:
            raise SafetensorsError(f"{where}: the header's JSON nests arrays and objects more than "
                                   f"{MAX_HEADER_DEPTH} deep; a safetensors header nests three deep, so the file "
                                   f"is damaged or not safetensors")
        depth = int(running[-1])


def _check_entry(name: str, info: Any, data_len: int, where: str) -> tuple[int, int]:
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
        raise SafetensorsError(f"{where}: tensor {name!r} needs 'dtype', 'shape' and 'data_offsets', got {info!r}")
    code, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if code not in SAFE_DTYPES:
        raise SafetensorsError(f"{where}: tensor {name!r} has dtype {code!r}, which this reader does not know; "
                               f"known: {sorted(SAFE_DTYPES)}")
    if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                              for s in shape):
        raise SafetensorsError(f"{where}: tensor {name!r} has shape {shape!r}; a shape is a list of ints >= 0")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
        raise SafetensorsError(f"{where}: tensor {name!r} has data_offsets {offsets!r}; they are [begin, end] ints")
    begin, end = offsets
    if not 0 <= begin <= end:
        raise SafetensorsError(f"{where}: tensor {name!r} has data_offsets [{begin}, {end}] out of order; "
                               f"0 <= begin <= end is required")
    if end > data_len:
        raise SafetensorsError(f"{where}: tensor {name!r} ends at data byte {end}, past the end of the data "
                               f"({data_len} bytes); the file is truncated or damaged")
    want = prod(shape) * SAFE_DTYPES[code].itemsize
    if end - begin != want:
        raise SafetensorsError(f"{where}: tensor {name!r} ({code}, shape {shape}) needs {want} bytes but its "
                               f"offsets span {end - begin}")
    return begin, end
