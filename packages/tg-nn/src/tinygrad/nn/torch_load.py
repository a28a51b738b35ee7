"""Read PyTorch checkpoints (`torch.save` files) without torch and without running code from the file.

A checkpoint is a pickle whose tensors point at raw storages. Unpickling an untrusted pickle can call any Python
function, so this reader's unpickler resolves only an allow-list of globals (containers and torch's tensor
rebuild functions, mapped to functions defined here); any other global, `os.system` for instance, stops the load
with an error naming it, before anything is called.

Both container formats are read: the zip format (torch >= 1.6: `<archive>/data.pkl` plus one entry per storage
under `<archive>/data/`) and the legacy one (a magic-number pickle, a protocol-version pickle, a system-info
pickle, the object pickle, the list of storage keys, then each storage as an int64 element count and its bytes).
"""

from __future__ import annotations

import collections
import io
import pickle
import struct
import zipfile
from collections.abc import Callable
from typing import Any

import numpy as np
from tinygrad import Tensor, dtypes
from tinygrad.dtype import DType, to_numpy
from tinygrad.nn._bytes import FileLike, read_bytes, tensor_from_raw

_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C

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


class _StorageType:
    """Stands for one of torch's storage classes: only its element dtype matters here."""

    def __init__(self, dtype: DType):
        self.dtype = dtype


class _DType:
    """Stands for a torch dtype object (torch.float32, ...)."""

    def __init__(self, dtype: DType):
        self.dtype = dtype


class _Storage:
    """One storage's bytes, read as a flat numpy array of its dtype once a tensor needs it."""

    def __init__(self, raw: bytes, dtype: DType, byteswap: bool):
        self.raw, self.dtype, self.byteswap = raw, dtype, byteswap

    def elements(self, dtype: DType) -> np.ndarray:
        npd = to_numpy(dtype).newbyteorder(">" if self.byteswap else "<")
        usable = len(self.raw) - len(self.raw) % npd.itemsize
        return np.frombuffer(self.raw[:usable], dtype=npd)


def _rebuild_tensor(storage: _Storage, offset: int, size: tuple[int, ...], stride: tuple[int, ...],
                    dtype: DType | None = None) -> Tensor:
    if not isinstance(storage, _Storage):
        raise TorchLoadError(f"a tensor in the checkpoint refers to {type(storage).__name__}, not a storage")
    dtype = dtype or storage.dtype
    flat = storage.elements(dtype)
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if len(size) != len(stride) or any(s < 0 for s in size) or any(s < 0 for s in stride) or offset < 0:
        raise TorchLoadError(f"tensor with size {size}, stride {stride}, offset {offset} is malformed")
    if all(size):
        last = offset + sum((n - 1) * s for n, s in zip(size, stride))
        if last >= len(flat):
            raise TorchLoadError(f"tensor of size {size} with stride {stride} at offset {offset} reads element {last} "
                                 f"of a storage with {len(flat)}; the checkpoint is damaged")
        view = np.lib.stride_tricks.as_strided(flat[offset:], size, tuple(s * flat.itemsize for s in stride),
                                               writeable=False)
    else:
        view = np.zeros(size, dtype=flat.dtype)
    data = np.ascontiguousarray(view).astype(flat.dtype.newbyteorder("<"))
    return tensor_from_raw(data.tobytes(), dtype, size)


def _rebuild_tensor_v2(storage: _Storage, offset: int, size: tuple[int, ...], stride: tuple[int, ...],
                       requires_grad: bool = False, backward_hooks: Any = None, metadata: Any = None) -> Tensor:
    return _rebuild_tensor(storage, offset, size, stride)


def _rebuild_tensor_v3(storage: _Storage, offset: int, size: tuple[int, ...], stride: tuple[int, ...],
                       requires_grad: bool, backward_hooks: Any, dtype: _DType, metadata: Any = None) -> Tensor:
    if not isinstance(dtype, _DType):
        raise TorchLoadError(f"_rebuild_tensor_v3 got {dtype!r} where a torch dtype belongs")
    return _rebuild_tensor(storage, offset, size, stride, dtype.dtype)


def _rebuild_parameter(data: Tensor, requires_grad: bool = False, backward_hooks: Any = None,
                       *state: Any) -> Tensor:
    return data


def _allowed(module: str, name: str) -> Any:
    """The stand-in for an allowed global, or None."""
    table: dict[tuple[str, str], Any] = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
        ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
        ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
        ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
        ("builtins", "set"): set,
        ("builtins", "frozenset"): frozenset,
        ("builtins", "slice"): slice,
        ("torch", "Size"): tuple,
    }
    if (module, name) in table:
        return table[(module, name)]
    if module in ("torch", "torch.storage") and name in _STORAGE_DTYPES:
        return _StorageType(_STORAGE_DTYPES[name])
    if module == "torch" and name in _TORCH_DTYPES:
        return _DType(_TORCH_DTYPES[name])
    return None


class _SafeUnpickler(pickle.Unpickler):
    def __init__(self, stream: io.BytesIO, load_storage: Callable[[tuple], _Storage], deferred: bool = False):
        super().__init__(stream)
        self._load_storage, self._deferred = load_storage, deferred

    def find_class(self, module: str, name: str) -> Any:
        found = _allowed(module, name)
        if self._deferred and found in (_rebuild_tensor_v2, _rebuild_tensor_v3, _rebuild_parameter):
            return lambda *args, _fn=found: _Deferred(_fn, args)
        if found is None:
            raise TorchLoadError(f"the checkpoint asks for the global {module}.{name}, which torch_load does not "
                                 f"allow (it only rebuilds tensors and plain containers, and never runs code from a "
                                 f"file); if you trust the file, load it with torch and save its state_dict")
        return found

    def persistent_load(self, pid: Any) -> Any:
        if not isinstance(pid, tuple) or not pid or pid[0] != "storage":
            raise TorchLoadError(f"unknown persistent id {pid!r} in the checkpoint; only storages are supported")
        return self._load_storage(pid)


def _unpickle(data: bytes, load_storage: Callable[[tuple], _Storage]) -> Any:
    try:
        return _SafeUnpickler(io.BytesIO(data), load_storage).load()
    except TorchLoadError:
        raise
    except (pickle.UnpicklingError, EOFError, struct.error, ValueError, TypeError, IndexError, KeyError,
            RecursionError) as e:
        raise TorchLoadError(f"the checkpoint's pickle is damaged or truncated ({type(e).__name__}: {e})") from None


def _storage_type(pid: tuple) -> DType:
    st = pid[1]
    if not isinstance(st, _StorageType):
        raise TorchLoadError(f"storage of unknown type {st!r} in the checkpoint")
    return st.dtype


def _load_zip(raw: bytes) -> Any:
    try:
        zf = zipfile.ZipFile(io.BytesIO(raw))
        names = zf.namelist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile) as e:
        raise TorchLoadError(f"the checkpoint is a damaged or truncated zip archive ({e})") from None
    pkl = [n for n in names if n.endswith("/data.pkl") or n == "data.pkl"]
    if len(pkl) != 1:
        raise TorchLoadError(f"a torch zip checkpoint holds exactly one data.pkl, this one has {len(pkl)}")
    prefix = pkl[0][:-len("data.pkl")]

    def read(name: str) -> bytes:
        try:
            return zf.read(prefix + name)
        except KeyError:
            raise TorchLoadError(f"the checkpoint lacks the entry {prefix + name}") from None
        except (zipfile.BadZipFile, EOFError, OSError) as e:
            raise TorchLoadError(f"entry {prefix + name} of the checkpoint is damaged or truncated ({e})") from None

    byteswap = (prefix + "byteorder" in names) and read("byteorder").strip() == b"big"
    storages: dict[str, _Storage] = {}

    def load_storage(pid: tuple) -> _Storage:
        if len(pid) < 5:
            raise TorchLoadError(f"malformed storage reference {pid!r}")
        key = str(pid[2])
        if key not in storages:
            storages[key] = _Storage(read(f"data/{key}"), _storage_type(pid), byteswap)
        return storages[key]

    return _unpickle(read("data.pkl"), load_storage)


class _Deferred:
    """A tensor rebuild recorded while the legacy format's storage bytes, which follow the pickle, are unread."""

    def __init__(self, fn: Callable[..., Tensor], args: tuple):
        self.fn, self.args = fn, args


def _resolve(obj: Any) -> Any:
    """Run the recorded rebuilds, in a structure of dicts, lists and tuples."""
    if isinstance(obj, _Deferred):
        return obj.fn(*(_resolve(a) for a in obj.args))
    if isinstance(obj, dict):
        out = type(obj)() if isinstance(obj, collections.OrderedDict) else {}
        for k, v in obj.items():
            out[k] = _resolve(v)
        return out
    if isinstance(obj, list):
        return [_resolve(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_resolve(v) for v in obj)
    return obj


def _load_legacy(raw: bytes) -> Any:
    stream = io.BytesIO(raw)
    storages: dict[str, _Storage] = {}

    def no_storage(pid: tuple) -> _Storage:
        raise TorchLoadError("a storage reference outside the object pickle; the checkpoint is damaged")

    def placeholder(pid: tuple) -> _Storage:
        # the bytes come after the object pickle: hand out an empty storage and fill it in below
        if len(pid) < 5:
            raise TorchLoadError(f"malformed storage reference {pid!r}")
        key = str(pid[2])
        if key not in storages:
            storages[key] = _Storage(b"", _storage_type(pid), False)
        return storages[key]

    def load_one(what: str, load_storage: Callable[[tuple], _Storage], deferred: bool = False) -> Any:
        # pickle stops reading right after its STOP opcode, so consecutive pickles load one after another
        try:
            return _SafeUnpickler(stream, load_storage, deferred).load()
        except TorchLoadError:
            raise
        except (pickle.UnpicklingError, EOFError, struct.error, ValueError, TypeError, IndexError, KeyError) as e:
            raise TorchLoadError(f"the checkpoint's {what} is damaged or truncated ({type(e).__name__}: {e})") \
                from None

    if load_one("magic number", no_storage) != _LEGACY_MAGIC:
        raise TorchLoadError("not a torch checkpoint: neither a zip archive nor the legacy format's magic number")
    load_one("protocol version", no_storage)
    load_one("system info", no_storage)
    obj = load_one("object pickle", placeholder, deferred=True)
    keys = load_one("storage key list", no_storage)
    if not isinstance(keys, list):
        raise TorchLoadError("the checkpoint's storage key list is damaged")
    for key in keys:
        st = storages.get(str(key))
        if st is None:
            raise TorchLoadError(f"the checkpoint stores storage {key}, which no tensor refers to")
        header = stream.read(8)
        if len(header) != 8:
            raise TorchLoadError(f"the checkpoint is truncated before storage {key}")
        (numel,) = struct.unpack("<q", header)
        nbytes = numel * st.dtype.itemsize
        data = stream.read(max(nbytes, 0))
        if numel < 0 or len(data) != nbytes:
            raise TorchLoadError(f"the checkpoint is truncated inside storage {key} ({len(data)} of {nbytes} bytes)")
        st.raw = data
    try:
        return _resolve(obj)
    except TorchLoadError:
        raise
    except (ValueError, TypeError, IndexError, RecursionError) as e:
        raise TorchLoadError(f"a tensor in the checkpoint is malformed ({type(e).__name__}: {e})") from None


def torch_load(fn: FileLike) -> Any:
    """The object a `torch.save` file holds (usually a state dict), with every tensor as a realized Tensor.
    Takes a file name, bytes, or a uint8 tensor of the file's bytes."""
    raw = read_bytes(fn)
    if raw[:4] == b"PK\x03\x04":
        return _load_zip(raw)
    if not raw:
        raise TorchLoadError("the checkpoint is empty")
    return _load_legacy(raw)
