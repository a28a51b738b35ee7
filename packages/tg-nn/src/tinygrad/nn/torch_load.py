"""Read PyTorch checkpoints (`torch.save` files) without torch and without running code from the file.

A checkpoint is a pickle whose tensors point at raw storages. Unpickling an untrusted pickle with Python's
unpickler can call any function and change any object it hands out, so the pickle is run by this package's own
interpreter (`_safe_pickle`): it builds plain data, and the only things it calls are stand-ins for an allow-list of
globals (containers and torch's tensor rebuild functions, mapped to functions here); any other global, `os.system`
for instance, stops the load with an error naming it, before anything is called. The work done, and the memory
the tensors take, grow with the file's size and no faster, so a small hostile file cannot stall or exhaust the
process; every problem with a file raises `TorchLoadError` (a ValueError).

Both container formats are read: the zip format (torch >= 1.6: `<archive>/data.pkl` plus one entry per storage
under `<archive>/data/`) and the legacy one (a magic-number pickle, a protocol-version pickle, a system-info
pickle, the object pickle, the list of storage keys, then each storage as an int64 element count and its bytes).
"""

from __future__ import annotations

import io
import math
import zipfile
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
from tinygrad import Tensor, dtypes
from tinygrad.dtype import DType, to_numpy
from tinygrad.nn._bytes import FileLike, read_bytes, tensor_from_raw
from tinygrad.nn._safe_pickle import BadPickle, Global, Unpickler, describe, python_globals, tuple_global

_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_MAX_DIMS = 64  # numpy's limit
_MAX_DIM_SIZE = 1 << 48
# What a load may materialise (tensors, inflated zip entries) beyond the file itself: views such as expanded
# tensors legitimately take more than their storage, but a few hundred bytes must not ask for gigabytes.
_EXPANSION_PER_BYTE, _EXPANSION_BASE = 16, 64 << 20

# torch's typed storage classes and dtype objects, by the name the pickle uses
_STORAGE_DTYPES: dict[str, DType] = {
    "FloatStorage": dtypes.float32, "DoubleStorage": dtypes.float64, "HalfStorage": dtypes.float16,
    "BFloat16Storage": dtypes.bfloat16, "LongStorage": dtypes.int64, "IntStorage": dtypes.int32,
    "ShortStorage": dtypes.int16, "CharStorage": dtypes.int8, "ByteStorage": dtypes.uint8,
    "BoolStorage": dtypes.bool, "UntypedStorage": dtypes.uint8,
}
_TORCH_DTYPES: dict[str, DType] = {
    "float32": dtypes.float32, "float": dtypes.float32, "float64": dtypes.float64, "double": dtypes.float64,
    "float16": dtypes.float16, "half": dtypes.float16, "bfloat16": dtypes.bfloat16, "int64": dtypes.int64,
    "long": dtypes.int64, "int32": dtypes.int32, "int": dtypes.int32, "int16": dtypes.int16, "short": dtypes.int16,
    "int8": dtypes.int8, "uint8": dtypes.uint8, "bool": dtypes.bool, "uint16": dtypes.uint16,
    "uint32": dtypes.uint32, "uint64": dtypes.uint64,
}


class TorchLoadError(ValueError):
    """A checkpoint that cannot be read: damaged, truncated, or asking for code this reader does not run."""


class _Frozen:
    """A value the pickle may name and pass around but not change (BUILD is refused by the interpreter anyway;
    this also keeps whoever receives it from changing a value other loads share)."""

    __slots__ = ()

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"{self!r} belongs to torch_load and cannot be changed")

    def __delattr__(self, key: str) -> None:
        raise AttributeError(f"{self!r} belongs to torch_load and cannot be changed")


class _TorchTypeName(_Frozen):
    """A torch object that only names an element dtype here (a storage class, a dtype object)."""

    __slots__ = ("dtype", "name")
    name: str
    dtype: DType

    def __init__(self, name: str, dtype: DType):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "dtype", dtype)

    def __repr__(self) -> str:
        return f"<torch.{self.name} stand-in>"


class _StorageType(_TorchTypeName):
    """Stands for one of torch's storage classes: only its element dtype matters here."""

    __slots__ = ()


class _DType(_TorchTypeName):
    """Stands for a torch dtype object (torch.float32, ...)."""

    __slots__ = ()


class _Pending(_Frozen):
    """What a rebuild gives while the legacy format's storage bytes, which follow the pickle, are not read yet."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<tensor not yet read>"


_STORAGE_TYPES = {name: _StorageType(name, dt) for name, dt in _STORAGE_DTYPES.items()}
_DTYPE_OBJECTS = {name: _DType(name, dt) for name, dt in _TORCH_DTYPES.items()}
_PENDING = _Pending()


class _Storage:
    """One storage's bytes, read as a flat numpy array of a dtype (without copying them) when a tensor needs it."""

    def __init__(self, raw: bytes, dtype: DType, byteswap: bool):
        self.raw, self.dtype, self.byteswap = raw, dtype, byteswap

    def elements(self, dtype: DType) -> np.ndarray:
        npd = to_numpy(dtype).newbyteorder(">" if self.byteswap else "<")
        return np.frombuffer(self.raw, dtype=npd, count=len(self.raw) // npd.itemsize)


class _Allowance:
    """The bytes one load may still materialise."""

    def __init__(self, file_size: int):
        self.limit = _EXPANSION_PER_BYTE * file_size + _EXPANSION_BASE
        self.left = self.limit

    def spend(self, nbytes: int, what: str) -> None:
        self.left -= nbytes
        if self.left < 0:
            raise TorchLoadError(f"{what} would take the load past {self.limit} bytes, far more than a checkpoint of "
                                 f"this size holds; the file is damaged or hostile (if you trust it, load it with "
                                 f"torch and save contiguous copies of its tensors)")


def _shape(what: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, tuple) or len(value) > _MAX_DIMS or \
            not all(type(v) is int and 0 <= v < _MAX_DIM_SIZE for v in value):
        raise TorchLoadError(f"a tensor's {what} is {describe(value)}, not a tuple of at most {_MAX_DIMS} "
                             f"non-negative ints; the checkpoint is damaged")
    return value


def _arity(name: str, args: tuple, least: int, most: int) -> None:
    if not least <= len(args) <= most:
        raise TorchLoadError(f"{name} takes {least} to {most} arguments, the checkpoint passes {len(args)}")


class _Rebuilder:
    """torch's tensor rebuild functions for one load. Skimming (the legacy format's first pass) checks their
    arguments and gives placeholders, as the storage bytes are not read yet."""

    def __init__(self, allowance: _Allowance, skim: bool = False):
        self.allowance, self.skim = allowance, skim

    def tensor(self, storage: Any, offset: Any, size: Any, stride: Any, dtype: DType | None = None) -> Any:
        if not isinstance(storage, _Storage):
            raise TorchLoadError(f"a tensor in the checkpoint refers to {describe(storage)}, not a storage")
        size, stride = _shape("size", size), _shape("stride", stride)
        if type(offset) is not int or offset < 0 or len(size) != len(stride):
            raise TorchLoadError(f"tensor with size {size}, stride {stride}, offset {describe(offset)} is malformed")
        if self.skim:
            return _PENDING
        dtype = dtype or storage.dtype
        numel = math.prod(size)
        self.allowance.spend(numel * dtype.itemsize, f"a tensor of size {size}")
        if numel == 0:
            return tensor_from_raw(b"", dtype, size)
        flat = storage.elements(dtype)
        last = offset + sum((n - 1) * s for n, s in zip(size, stride))
        if last >= len(flat):
            raise TorchLoadError(f"tensor of size {size} with stride {stride} at offset {offset} reads element {last} "
                                 f"of a storage with {len(flat)}; the checkpoint is damaged")
        view = np.lib.stride_tricks.as_strided(flat[offset:], size, tuple(s * flat.itemsize for s in stride),
                                               writeable=False)
        data = np.ascontiguousarray(view).astype(flat.dtype.newbyteorder("<"))
        return tensor_from_raw(data.tobytes(), dtype, size)

    # the functions torch pickles, called with the argument tuple the checkpoint gives them

    def tensor_v2(self, _machine: Unpickler, args: tuple) -> Any:
        # (storage, offset, size, stride, requires_grad, backward_hooks[, metadata])
        _arity("_rebuild_tensor_v2", args, 4, 7)
        return self.tensor(*args[:4])

    def tensor_v3(self, _machine: Unpickler, args: tuple) -> Any:
        # (storage, offset, size, stride, requires_grad, backward_hooks, dtype[, metadata])
        _arity("_rebuild_tensor_v3", args, 7, 8)
        if not isinstance(args[6], _DType):
            raise TorchLoadError(f"_rebuild_tensor_v3 got {describe(args[6])} where a torch dtype belongs")
        return self.tensor(args[0], args[1], args[2], args[3], args[6].dtype)

    def parameter(self, _machine: Unpickler, args: tuple) -> Any:
        # (data, requires_grad, backward_hooks[, state]): a Parameter is its tensor here
        _arity("_rebuild_parameter", args, 1, 4)
        if not isinstance(args[0], Tensor) and args[0] is not _PENDING:
            raise TorchLoadError(f"a parameter in the checkpoint wraps {describe(args[0])}, not a tensor")
        return args[0]

    def allowed_globals(self) -> dict[tuple[str, str], Any]:
        """Every global a checkpoint may name, by (module, name): stand-ins, never the real objects."""
        table: dict[tuple[str, str], Any] = dict(python_globals())
        table[("torch", "Size")] = tuple_global("torch.Size")
        for name, build in (("_rebuild_tensor_v2", self.tensor_v2), ("_rebuild_tensor_v3", self.tensor_v3),
                            ("_rebuild_parameter", self.parameter), ("_rebuild_parameter_with_state", self.parameter)):
            table[("torch._utils", name)] = Global(f"torch._utils.{name}", build)
        for name, storage_type in _STORAGE_TYPES.items():
            table[("torch", name)] = table[("torch.storage", name)] = storage_type
        for name, dtype in _DTYPE_OBJECTS.items():
            table[("torch", name)] = dtype
        return table


def _global_finder(table: dict[tuple[str, str], Any]) -> Callable[[str, str], Any]:
    def find(module: str, name: str) -> Any:
        if (module, name) not in table:
            raise TorchLoadError(f"the checkpoint asks for the global {module}.{name}, which torch_load does not "
                                 f"allow (it only rebuilds tensors and plain containers, and never runs code from a "
                                 f"file); if you trust the file, load it with torch and save its state_dict")
        return table[(module, name)]
    return find


def _run_pickle(data: bytes, start: int, what: str, allowed: dict[tuple[str, str], Any],
                load_storage: Callable[[Any], Any]) -> tuple[Any, int]:
    """The object of the pickle at `data[start:]` and the offset after it."""
    machine = Unpickler(data, _global_finder(allowed), load_storage, start)
    try:
        return machine.load(), machine.end
    except BadPickle as e:
        raise TorchLoadError(f"the checkpoint's {what} is damaged or truncated ({e})") from None


def _storage_ref(pid: Any) -> tuple[str, DType]:
    """The key and element dtype of a persistent id ("storage", storage type, key, location, numel, ...)."""
    if not isinstance(pid, tuple) or not pid or type(pid[0]) is not str or pid[0] != "storage":
        raise TorchLoadError(f"unknown persistent id {describe(pid)} in the checkpoint; only storages are supported")
    if len(pid) < 5 or type(pid[2]) is not str:
        raise TorchLoadError(f"malformed storage reference {describe(pid)}")
    if not isinstance(pid[1], _StorageType):
        raise TorchLoadError(f"storage of unknown type {describe(pid[1])} in the checkpoint")
    return pid[2], pid[1].dtype


def _no_storage(pid: Any) -> Any:
    raise TorchLoadError("a storage reference outside the object pickle; the checkpoint is damaged")


# ---- the zip format ----

def _open_zip(raw: bytes) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(io.BytesIO(raw))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError, NotImplementedError) as e:
        raise TorchLoadError(f"the checkpoint is a damaged or truncated zip archive ({e})") from None


def _entry_reader(zf: zipfile.ZipFile, prefix: str, allowance: _Allowance) -> Callable[[str], bytes]:
    def read(name: str) -> bytes:
        try:
            info = zf.getinfo(prefix + name)
        except KeyError:
            raise TorchLoadError(f"the checkpoint lacks the entry {prefix + name}") from None
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise TorchLoadError(f"entry {info.filename} of the checkpoint is compressed with method "
                                 f"{info.compress_type}; torch checkpoints are stored or deflated")
        # an entry's size is declared up front and bounds what it inflates to: check it before reading
        allowance.spend(info.file_size, f"entry {info.filename} ({info.file_size} bytes)")
        try:
            return zf.read(info)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, RuntimeError) as e:
            raise TorchLoadError(f"entry {prefix + name} of the checkpoint is damaged or truncated ({e})") from None
    return read


def _load_zip(raw: bytes, allowance: _Allowance) -> Any:
    zf = _open_zip(raw)
    names = zf.namelist()
    pkl = [n for n in names if n.endswith("/data.pkl") or n == "data.pkl"]
    if len(pkl) != 1:
        raise TorchLoadError(f"a torch zip checkpoint holds exactly one data.pkl, this one has {len(pkl)}")
    prefix = pkl[0][:-len("data.pkl")]
    read = _entry_reader(zf, prefix, allowance)
    byteswap = (prefix + "byteorder" in names) and read("byteorder").strip() == b"big"
    storages: dict[str, _Storage] = {}

    def load_storage(pid: Any) -> _Storage:
        key, dtype = _storage_ref(pid)
        if key not in storages:
            storages[key] = _Storage(read(f"data/{key}"), dtype, byteswap)
        return storages[key]

    return _run_pickle(read("data.pkl"), 0, "object pickle", _Rebuilder(allowance).allowed_globals(),
                       load_storage)[0]


# ---- the legacy format ----

def _read_legacy_storages(raw: bytes, pos: int, keys: Any, types: dict[str, DType]) -> dict[str, _Storage]:
    """The storages after the key list: for each key in order, an int64 element count and the elements."""
    if not isinstance(keys, list) or not all(type(k) is str for k in keys):
        raise TorchLoadError("the checkpoint's storage key list is damaged")
    storages: dict[str, _Storage] = {}
    for key in keys:
        if key in storages:
            raise TorchLoadError(f"the checkpoint stores storage {describe(key)} twice")
        if key not in types:
            raise TorchLoadError(f"the checkpoint stores storage {describe(key)}, which no tensor refers to")
        if pos + 8 > len(raw):
            raise TorchLoadError(f"the checkpoint is truncated before storage {describe(key)}")
        numel = int.from_bytes(raw[pos:pos + 8], "little", signed=True)
        pos += 8
        nbytes = numel * types[key].itemsize
        if numel < 0 or pos + nbytes > len(raw):
            raise TorchLoadError(f"the checkpoint is truncated inside storage {describe(key)} "
                                 f"({max(len(raw) - pos, 0)} of {nbytes} bytes)")
        storages[key] = _Storage(raw[pos:pos + nbytes], types[key], False)
        pos += nbytes
    return storages


def _load_legacy(raw: bytes, allowance: _Allowance) -> Any:
    not_a_checkpoint = "not a torch checkpoint: neither a zip archive nor a file starting with the legacy " \
                       "format's magic number"
    first = Unpickler(raw, _global_finder({}), _no_storage)
    try:
        magic, pos = first.load(), first.end
    except BadPickle as e:
        raise TorchLoadError(f"{not_a_checkpoint} (its first bytes are no pickle: {e})") from None
    if type(magic) is not int or magic != _LEGACY_MAGIC:
        raise TorchLoadError(not_a_checkpoint)
    _, pos = _run_pickle(raw, pos, "protocol version", {}, _no_storage)
    _, pos = _run_pickle(raw, pos, "system info", {}, _no_storage)
    object_start = pos

    # The storage bytes follow the object pickle, so it runs twice: first to find its end and the type of each
    # storage (tensors are placeholders), then, once the bytes are read, to build the tensors. Each run is
    # linear in the pickle; nothing walks the built object graph afterwards.
    types: dict[str, DType] = {}
    placeholders: dict[str, _Storage] = {}

    def note_storage(pid: Any) -> _Storage:
        key, dtype = _storage_ref(pid)
        if key not in placeholders:
            types[key], placeholders[key] = dtype, _Storage(b"", dtype, False)
        return placeholders[key]

    _, pos = _run_pickle(raw, object_start, "object pickle", _Rebuilder(allowance, skim=True).allowed_globals(),
                         note_storage)
    keys, pos = _run_pickle(raw, pos, "storage key list", {}, _no_storage)
    storages = _read_legacy_storages(raw, pos, keys, types)

    def load_storage(pid: Any) -> _Storage:
        key, _ = _storage_ref(pid)
        if key not in storages:
            raise TorchLoadError(f"a tensor refers to storage {describe(key)}, whose bytes the checkpoint lacks")
        return storages[key]

    return _run_pickle(raw, object_start, "object pickle", _Rebuilder(allowance).allowed_globals(), load_storage)[0]


def torch_load(fn: FileLike) -> Any:
    """The object a `torch.save` file holds (usually a state dict), with every tensor as a realized Tensor.
    Takes a file name, bytes, or a uint8 tensor of the file's bytes. A file that cannot be read safely raises
    TorchLoadError saying what is wrong with it."""
    raw = read_bytes(fn)
    if not raw:
        raise TorchLoadError("the checkpoint is empty")
    allowance = _Allowance(len(raw))
    try:
        return _load_zip(raw, allowance) if raw[:4] == b"PK\x03\x04" else _load_legacy(raw, allowance)
    except TorchLoadError:
        raise
    except Exception as e:
        # every expected problem is reported above; this keeps the promise that a bad file gives TorchLoadError
        # even where a library below (zipfile, numpy) fails in a way not foreseen
        raise TorchLoadError(f"the checkpoint could not be read ({type(e).__name__}: {e})") from e
