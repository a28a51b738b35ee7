"""The file a compiled ONNX program lives in: one file, checked whole before anything in it is used.

Layout (integers little-endian):

    16 bytes   MAGIC
    u32        format version (FORMAT_VERSION)
    u32        length of the header
    header     JSON, UTF-8: what the program is (device, inputs, outputs, producing versions) and the lengths of the
               sections that follow
    sections   the pickle stream of the program, then each buffer pickle took out of band (protocol 5), in order
    32 bytes   SHA-256 of everything before it

The header can be read without unpickling anything (`read_header`), so a file for another device or version is
refused before any of its code paths run. The checksum makes a truncated, padded or damaged file fail loudly
instead of loading wrong weights. Unpickling goes through an allow-list of the classes and functions a captured
TinyJit is made of (this project's own modules and a few builtins), so a file cannot name `os.system` or the like;
that narrows what a hostile file can do, it does not make one safe: load only files you trust, a loaded program
runs the machine code it holds.
"""

from __future__ import annotations

import builtins
import hashlib
import importlib
import io
import json
import os
import pickle
import struct
from dataclasses import dataclass
from typing import Any

from tinygrad.helpers import atomic_write
from tinygrad.onnx._proto import OnnxError

MAGIC = b"TG-ONNX-PROGRAM\n"
FORMAT_VERSION = 1
_PREFIX = struct.Struct("<II")
_DIGEST = 32
#: a header larger than this is not one this code wrote (it holds names and shapes, not data)
_MAX_HEADER = 16 << 20


class CompiledFileError(OnnxError):
    """A compiled-program file that cannot be loaded as it is: not such a file, another format version, damaged or
    truncated, or made for a device or a build of tinygrad this process does not have."""


@dataclass(frozen=True)
class ProgramFile:
    header: dict[str, Any]
    sections: list[memoryview]  # the pickle stream, then the out-of-band buffers


def write_program(path: str | os.PathLike[str], header: dict[str, Any], obj: Any) -> int:
    """Pickle `obj` (protocol 5, buffers out of band) into `path` with `header`, through a temporary file renamed over
    the target. Returns the size of the file."""
    buffers: list[pickle.PickleBuffer] = []
    stream = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    head = json.dumps({**header, "sections": [len(stream), *(r.nbytes for r in raws)]}, sort_keys=True).encode()
    digest = hashlib.sha256()
    size = 0
    parts: list[bytes | memoryview] = [MAGIC, _PREFIX.pack(FORMAT_VERSION, len(head)), head, stream, *raws]
    with atomic_write(path) as f:
        for part in parts:
            digest.update(part)
            f.write(part)
            size += memoryview(part).nbytes
        f.write(digest.digest())
    return size + _DIGEST


def _read_prefix(data: memoryview, path: str) -> tuple[int, int]:
    if len(data) < len(MAGIC) + _PREFIX.size or bytes(data[:len(MAGIC)]) != MAGIC:
        raise CompiledFileError(f"{path} is not a compiled ONNX program (it does not start with this format's "
                                f"signature); make one with `python -m tinygrad.onnx compile MODEL.onnx {path}`")
    version, head_len = _PREFIX.unpack_from(data, len(MAGIC))
    if version != FORMAT_VERSION:
        raise CompiledFileError(f"{path} is a compiled ONNX program of format version {version}, and this tinygrad "
                                f"reads version {FORMAT_VERSION}; compile the model again with this version "
                                f"(python -m tinygrad.onnx compile MODEL.onnx OUT)")
    return version, head_len


def _parse_header(data: memoryview, head_len: int, path: str) -> dict[str, Any]:
    start = len(MAGIC) + _PREFIX.size
    if head_len > _MAX_HEADER or start + head_len > len(data):
        raise CompiledFileError(f"{path} is truncated or damaged: its header claims {head_len} bytes and the file "
                                f"has {len(data)}; copy or compile it again")
    try:
        header = json.loads(bytes(data[start:start + head_len]).decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise CompiledFileError(f"{path} is damaged: its header is not valid JSON ({e}); copy or compile it again") \
            from e
    sections = header.get("sections") if isinstance(header, dict) else None
    if not isinstance(sections, list) or not sections or not all(type(n) is int and n >= 0 for n in sections):
        raise CompiledFileError(f"{path} is damaged: its header does not list its sections; copy or compile it again")
    return header


def read_header(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The header alone (what the program is), without reading or checking the rest of the file."""
    name = os.fspath(path)
    with open(name, "rb") as f:
        start = f.read(len(MAGIC) + _PREFIX.size)
        _, head_len = _read_prefix(memoryview(start), name)
        return _parse_header(memoryview(start + f.read(min(head_len, _MAX_HEADER))), head_len, name)


def read_program(path: str | os.PathLike[str]) -> ProgramFile:
    """The whole file, checked: signature, format version, header, that the sections fill the file exactly, and the
    checksum. Raises CompiledFileError naming what is wrong."""
    name = os.fspath(path)
    with open(name, "rb") as f:
        data = memoryview(f.read())
    _, head_len = _read_prefix(data, name)
    header = _parse_header(data, head_len, name)
    start = len(MAGIC) + _PREFIX.size + head_len
    lengths: list[int] = header["sections"]
    expected = start + sum(lengths) + _DIGEST
    if expected != len(data):
        what = "truncated" if len(data) < expected else "longer than it should be"
        raise CompiledFileError(f"{name} is {what}: its header describes {expected} bytes and the file has "
                                f"{len(data)}; copy or compile it again")
    if hashlib.sha256(data[:-_DIGEST]).digest() != bytes(data[-_DIGEST:]):
        raise CompiledFileError(f"{name} is damaged: its checksum does not match its contents; copy or compile it "
                                f"again")
    sections = []
    for n in lengths:
        sections.append(data[start:start + n])
        start += n
    return ProgramFile(header, sections)


# ---- unpickling ----

#: builtins a pickled capture may name: containers and plain values, nothing that reaches the system
_BUILTINS = {"set", "frozenset", "slice", "range", "complex", "bytearray", "bytes", "tuple", "list", "dict", "int",
             "float", "bool", "str"}


class _ProgramUnpickler(pickle.Unpickler):
    """pickle's loader restricted to the classes of this project and its backends, their `*_from_pickle`
    rebuilders, and plain builtins: what a captured TinyJit is made of."""

    def find_class(self, module: str, name: str) -> Any:
        ours = module == "tinygrad" or module.startswith(("tinygrad.", "tg_backend_"))
        if module == "builtins" and name in _BUILTINS:
            return getattr(builtins, name)
        obj = None
        if ours and not name.startswith("__"):
            try:
                obj = getattr(importlib.import_module(module), name, None)
            except ImportError:
                obj = None
        if obj is None or not (isinstance(obj, type) or (name.endswith("_from_pickle") and callable(obj))):
            raise CompiledFileError(f"the program names {module}.{name}, which is not a part of a compiled tinygrad "
                                    f"program this tinygrad has: the file was not written by `python -m "
                                    f"tinygrad.onnx compile`, or by another version of it; compile the model again")
        return obj


def unpickle_program(program: ProgramFile) -> Any:
    return _ProgramUnpickler(io.BytesIO(program.sections[0]), buffers=program.sections[1:]).load()


__all__ = ["FORMAT_VERSION", "MAGIC", "CompiledFileError", "ProgramFile", "read_header", "read_program",
           "unpickle_program", "write_program"]
