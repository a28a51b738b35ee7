"""DLPack: sharing a tensor's memory with numpy, PyTorch and other array libraries, without a copy.

DLPack (https://dmlc.github.io/dlpack/latest/) hands memory from a producer to a consumer as a `PyCapsule` holding
a `DLManagedTensor` (named "dltensor") or, from version 1.0 on, a `DLManagedTensorVersioned` ("dltensor_versioned"):
the address, device, dtype, shape and strides of the data, and a deleter. The consumer renames the capsule
("used_dltensor", "used_dltensor_versioned") so that no one else takes it, and calls the deleter exactly once when
it is done with the memory; a capsule that nobody took calls the deleter when it dies. The C structs are written
here with ctypes.

Importing (`Tensor.from_dlpack`) wraps host memory in a buffer of the CPU device (its allocator's `wrap_external`)
and shows the producer's strides as movement ops over it; exporting (`Tensor.__dlpack__`) lends a realized,
contiguous buffer of a host-memory device. Either way the buffer is then in `tinygrad.device.shared_buffers`: memory
another library may write behind the engine's back, which the engine's caches treat accordingly, and into which an
assign writes in place (`write_shared`).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tinygrad.device import Buffer, Device, SharedMemory, shared_buffers, wraps_external
from tinygrad.device.disk import is_disk
from tinygrad.dtype import DType, dtypes, to_numpy
from tinygrad.engine import jit_state
from tinygrad.engine.schedule_item import buffer_view
from tinygrad.helpers import prod
from tinygrad.uop.ops import GroupOp, Ops, UOp

if TYPE_CHECKING:
    from tinygrad.mixin.common import TensorT
    from tinygrad.tensor import Tensor

# ---- the C structs (dlpack.h) ----

#: DLDeviceType values
KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_OPENCL, KDL_VULKAN, KDL_METAL, KDL_ROCM = 1, 2, 3, 4, 7, 8, 10
_DEVICE_NAMES = {1: "CPU", 2: "CUDA", 3: "CUDA host", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 9: "VPI", 10: "ROCm",
                 11: "ROCm host", 12: "ExtDev", 13: "CUDA managed", 14: "oneAPI", 15: "WebGPU", 16: "Hexagon",
                 17: "MAIA"}
#: DLDataTypeCode values
KDL_INT, KDL_UINT, KDL_FLOAT, KDL_BFLOAT, KDL_COMPLEX, KDL_BOOL = 0, 1, 2, 4, 5, 6
#: DLManagedTensorVersioned.flags bits
FLAG_READ_ONLY, FLAG_IS_COPIED = 1, 2
#: the DLPack version this module reads and writes
VERSION = (1, 0)

_DTYPE_CODES: dict[DType, tuple[int, int]] = {
    dtypes.bool: (KDL_BOOL, 8),
    **{d: (KDL_INT, d.itemsize * 8) for d in (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)},
    **{d: (KDL_UINT, d.itemsize * 8) for d in (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)},
    **{d: (KDL_FLOAT, d.itemsize * 8) for d in (dtypes.float16, dtypes.float32, dtypes.float64)},
    dtypes.bfloat16: (KDL_BFLOAT, 16),
}
_DTYPES_BY_CODE = {code: d for d, code in _DTYPE_CODES.items()}

_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # both managed structs' deleters take the struct's address


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


# ---- the capsule API ----
# Prototypes of our own over the interpreter's symbols: setting argtypes on `ctypes.pythonapi`'s shared function
# objects would change them for every other user of ctypes in the process.
_py = ctypes.PyDLL(None, handle=ctypes.pythonapi._handle)
_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, _CapsuleDestructor)(
    ("PyCapsule_New", _py))
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_IsValid", _py))
_capsule_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _py))
_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_SetName", _py))
_capsule_get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", _py))
# Called from a capsule's destructor, on an object that is being freed: by address (no reference may be taken), and
# without ctypes' check of the error indicator, which an exception on its way up may have set. Both only read the
# capsule's fields, so they need no interpreter state.
_capsule_is_valid_raw = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _py))
_capsule_get_pointer_raw = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _py))

_NAME, _USED = b"dltensor", b"used_dltensor"
_NAME_V, _USED_V = b"dltensor_versioned", b"used_dltensor_versioned"


def _is_capsule(x: Any) -> bool:
    return type(x).__name__ == "PyCapsule"


# ---- export ----

@dataclass
class _Export:
    """What one exported capsule's memory needs while a consumer may use it: the struct, its arrays and the buffer."""

    managed: DLManagedTensor | DLManagedTensorVersioned
    shape: ctypes.Array
    strides: ctypes.Array
    buffer: Buffer


#: the live exports, by the address of their managed struct: the deleter's only way back to them
_exports: dict[int, _Export] = {}


@_Deleter
def _release_export(address: int | None) -> None:
    # the consumer is done: the buffer may be freed once nothing else of ours holds it
    if address is not None:
        _exports.pop(address, None)


@_CapsuleDestructor
def _capsule_died(capsule: int | None) -> None:
    # a capsule nobody consumed (it still has its first name) releases its memory itself; a consumed one was renamed
    # and its consumer calls the deleter
    for name in (_NAME, _NAME_V):
        if _capsule_is_valid_raw(capsule, name):
            _exports.pop(_capsule_get_pointer_raw(capsule, name) or 0, None)


def dlpack_device(device: str | tuple[str, ...]) -> tuple[int, int]:
    """`Tensor.__dlpack_device__`: (DLDeviceType, device id) of tensors on `device`."""
    if isinstance(device, tuple):
        raise BufferError(f"a tensor on {device} has one buffer per device and cannot be exported with DLPack; "
                          f"gather it first with .to(device)")
    if is_disk(device) or getattr(Device[device].allocator, "host_view", None) is None:
        raise BufferError(f"tensors on {device} cannot be exported with DLPack: only host memory (the CPU device) "
                          f"is; move the tensor with .to('CPU') first")
    return (KDL_CPU, 0)


def export_capsule(t: Tensor, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
    """`Tensor.__dlpack__`: a capsule lending `t`'s memory (see the method's docstring)."""
    if stream is not None and stream != -1:
        raise BufferError(f"DLPack stream {stream!r} given for a host-memory tensor: CPU tensors take stream=None")
    if dl_device is not None and tuple(dl_device) != (KDL_CPU, 0):
        raise BufferError(f"cannot export to DLPack device {_device_name(dl_device[0])} {dl_device[1]}: tensors "
                          f"are exported as host memory only (dl_device=(1, 0))")
    if t.dtype not in _DTYPE_CODES:
        raise BufferError(f"DLPack export of {t.dtype.name} is not supported (it has no DLPack type code here); "
                          f"cast the tensor first")
    if not all(isinstance(s, int) for s in t.shape):
        raise BufferError(f"a tensor of symbolic shape {t.shape} cannot be exported with DLPack; bind its variables "
                          f"and take a concrete slice first")
    copied = copy is True
    if isinstance(t.device, tuple) or is_disk(t.device) or \
            getattr(Device[t.device].allocator, "host_view", None) is None:
        if dl_device is None or copy is False:  # a copy to the host only where the consumer asked for one
            dlpack_device(t.device)  # raises, saying why
        t, copied = t.to("CPU").contiguous(), True  # a copy of its own already
    elif copied:
        t = t.clone()
    buf = _contiguous_buffer(t)
    Device[buf.device].synchronize()  # a kernel still running may write it
    address = _address(buf)
    versioned = max_version is not None and max_version[0] >= 1
    managed: DLManagedTensor | DLManagedTensorVersioned
    if versioned:
        managed = DLManagedTensorVersioned()
        managed.version.major, managed.version.minor = VERSION
        managed.flags = FLAG_IS_COPIED if copied else 0
    else:
        managed = DLManagedTensor()
    shape = tuple(int(s) for s in t.shape)
    shape_arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    strides_arr = (ctypes.c_int64 * max(len(shape), 1))(*_row_major_strides(shape))
    dl = managed.dl_tensor
    dl.data, dl.device.device_type, dl.device.device_id, dl.ndim = address, KDL_CPU, 0, len(shape)
    dl.dtype.code, dl.dtype.bits = _DTYPE_CODES[t.dtype]
    dl.dtype.lanes = 1
    dl.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    dl.strides = ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64))
    dl.byte_offset = 0
    managed.deleter = _release_export
    key = ctypes.addressof(managed)
    managed.manager_ctx = key
    # the consumer may write the memory from now on: results computed from it are not reused, and an assign into a
    # tensor over it writes it in place (so that the consumer sees it)
    if buf.storage not in shared_buffers:
        shared_buffers[buf.storage] = SharedMemory(external=False)
    _exports[key] = _Export(managed, shape_arr, strides_arr, buf)
    return _capsule_new(key, _NAME_V if versioned else _NAME, _capsule_died)


def _contiguous_buffer(t: Tensor) -> Buffer:
    """The buffer holding `t`'s value row-major from its start: t's own when it is one (realized first), else a
    contiguous copy's."""
    t.realize()
    node = t.uop if t.uop._realized is None else t.uop._realized  # a view of shared memory keeps its graph
    if node.op is Ops.RESHAPE:
        node = node.src[0]
    if node.op is Ops.BUFFER and node.arg.size == prod(t.shape):
        return node.arg
    return t.contiguous()._buffer()


def _address(buf: Buffer) -> int:
    buf.ensure_allocated()
    host_view = buf._allocator.host_view  # type: ignore[union-attr]  # checked by the caller
    return np.frombuffer(host_view(buf.opaque, max(buf.nbytes, 1)), dtype=np.uint8).ctypes.data


def _row_major_strides(shape: tuple[int, ...]) -> list[int]:
    strides, step = [], 1
    for s in reversed(shape):
        strides.append(step)
        step *= max(s, 1)
    return strides[::-1]


def _device_name(device_type: int) -> str:
    return f"{_DEVICE_NAMES.get(device_type, 'unknown')} (DLDeviceType {device_type})"


# ---- import ----

class _Imported:
    """Ownership of a consumed capsule's memory: calls the producer's deleter exactly once, when it dies (with the
    buffer that uses the memory). Holds the producer object too, so it outlives every tensor over its memory."""

    __slots__ = ("address", "deleter", "producer")

    def __init__(self, address: int, deleter: Any, producer: Any):
        self.address, self.deleter, self.producer = address, deleter, producer

    def __del__(self) -> None:
        deleter, self.deleter = self.deleter, None
        if deleter:
            deleter(self.address)


@dataclass(frozen=True)
class _Description:
    data: int  # the address of element [0, ..., 0]
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    dtype: DType
    readonly: bool


def _capsule_of(x: Any) -> tuple[Any, Any]:
    """The DLPack capsule of `x` (an object with `__dlpack__`, or a capsule) and the producer object to keep."""
    if _is_capsule(x):
        return x, None
    if not hasattr(x, "__dlpack__"):
        raise TypeError(f"from_dlpack needs an object with __dlpack__ (a numpy array, a torch tensor, ...) or a "
                        f"DLPack capsule, got {type(x).__name__}")
    if hasattr(x, "__dlpack_device__"):
        dev_type, dev_id = x.__dlpack_device__()
        if int(dev_type) not in (KDL_CPU, KDL_CUDA_HOST):
            raise BufferError(f"from_dlpack takes host memory only; this {type(x).__name__} is on "
                              f"{_device_name(int(dev_type))} {dev_id}: move it to the CPU first (torch: .cpu())")
    try:
        return x.__dlpack__(max_version=VERSION), x
    except TypeError:  # a producer older than DLPack 1.0, whose __dlpack__ takes no max_version
        return x.__dlpack__(), x


def _describe(capsule: Any) -> tuple[int, bool, _Description]:
    """Read a capsule without consuming it: (managed struct address, versioned, what it holds). Raises for anything
    this module cannot take, leaving the capsule to its producer."""
    versioned = bool(_capsule_is_valid(capsule, _NAME_V))
    if not versioned and not _capsule_is_valid(capsule, _NAME):
        name = _capsule_get_name(capsule)
        if name in (_USED, _USED_V):
            raise BufferError("this DLPack capsule was already consumed: a capsule can be used once; ask the producer "
                              "for a new one (x.__dlpack__()) or pass the array itself to from_dlpack")
        raise TypeError(f"not a DLPack capsule: its name is {name!r}, not 'dltensor' or 'dltensor_versioned'")
    address = _capsule_get_pointer(capsule, _NAME_V if versioned else _NAME)
    if not address:
        raise BufferError("the DLPack capsule holds a null DLManagedTensor pointer")
    readonly = False
    if versioned:
        mv = DLManagedTensorVersioned.from_address(address)
        if mv.version.major != VERSION[0]:
            raise BufferError(f"DLPack version {mv.version.major}.{mv.version.minor} is not supported (this reads "
                              f"{VERSION[0]}.x)")
        readonly, dl = bool(mv.flags & FLAG_READ_ONLY), mv.dl_tensor
    else:
        dl = DLManagedTensor.from_address(address).dl_tensor
    if dl.device.device_type not in (KDL_CPU, KDL_CUDA_HOST):
        raise BufferError(f"from_dlpack takes host memory only; the capsule's tensor is on "
                          f"{_device_name(dl.device.device_type)} {dl.device.device_id}: move it to the CPU first")
    code = (dl.dtype.code, dl.dtype.bits)
    if dl.dtype.lanes != 1 or code not in _DTYPES_BY_CODE:
        raise BufferError(f"DLPack dtype (code {dl.dtype.code}, {dl.dtype.bits} bits, {dl.dtype.lanes} lanes) is not "
                          f"supported: from_dlpack takes bool, int8-64, uint8-64, float16/32/64 and bfloat16")
    if dl.ndim < 0:
        raise BufferError(f"the DLPack tensor has a negative number of dimensions ({dl.ndim})")
    shape = tuple(dl.shape[i] for i in range(dl.ndim))
    if any(s < 0 for s in shape):
        raise BufferError(f"the DLPack tensor has a negative size in its shape {shape}")
    strides = tuple(dl.strides[i] for i in range(dl.ndim)) if dl.strides else tuple(_row_major_strides(shape))
    data = (dl.data or 0) + dl.byte_offset
    if prod(shape) and not dl.data:
        raise BufferError(f"the DLPack tensor of shape {shape} has a null data pointer")
    return address, versioned, _Description(data, shape, strides, _DTYPES_BY_CODE[code], readonly)


def _consume(capsule: Any, address: int, versioned: bool, producer: Any) -> _Imported:
    deleter = (DLManagedTensorVersioned if versioned else DLManagedTensor).from_address(address).deleter
    if _capsule_set_name(capsule, _USED_V if versioned else _USED):
        raise BufferError("could not mark the DLPack capsule as used")
    return _Imported(address, deleter, (producer, capsule))


def import_dlpack(cls: type[TensorT], x: Any, device: str | None, copy: bool | None) -> TensorT:
    """`Tensor.from_dlpack` (see its docstring)."""
    capsule, producer = _capsule_of(x)
    address, versioned, desc = _describe(capsule)
    dev = Device.canonicalize(device if device is not None else "CPU")
    if not Device[dev].supports_dtype(desc.dtype):
        raise BufferError(f"{dev} does not support {desc.dtype.name}; pass device= a device that does")
    owner = _consume(capsule, address, versioned, producer)
    if prod(desc.shape) == 0:  # nothing to share: an empty tensor of that shape
        return cls(buffer_view(Buffer(dev, 0, desc.dtype), (0,)).reshape(desc.shape), device=dev)
    plan = None if copy is True or not wraps_external(dev) else _view_plan(desc)
    if plan is None:
        if copy is False:
            why = f"{dev} cannot use host memory in place" if not wraps_external(dev) else \
                "its strides are not expressible as a view (overlapping or uneven strides, or a misaligned address)"
            raise BufferError(f"from_dlpack(copy=False) cannot share this memory: {why}; allow a copy (copy=None)")
        return cls(buffer_view(_copy_in(desc, dev), desc.shape), device=dev)
    lowest, span, build = plan
    buf = Buffer.external(dev, span, desc.dtype, lowest, keepalive=owner, writable=not desc.readonly)
    return cls(build(buffer_view(buf, (span,))), device=dev)


def _view_plan(desc: _Description) -> tuple[int, int, Any] | None:
    """How to show the producer's strided memory as movement ops over one flat buffer: (the buffer's address, its
    elements, a function building the view from the buffer's node); None when the views cannot express the strides.

    With every stride made positive (flipping those that are not), take the dimensions by decreasing stride: the
    buffer (from the lowest address to the highest element) is padded to the outermost dimension's full extent
    (size times stride), reshaped into rows of one stride, and each row cut to what the inner dimensions reach, and
    so on inwards. That works when the inner dimensions of each fit within one step of the outer one (no two
    elements overlap); the view is then permuted back to the producer's order, broadcast over the zero strides and
    flipped where the strides were negative."""
    itemsize = desc.dtype.itemsize
    shape, strides = desc.shape, list(desc.strides)
    data = desc.data
    flips = [False] * len(shape)
    for i, (s, st) in enumerate(zip(shape, strides)):
        if s == 1:
            strides[i] = 0  # a size-1 dimension's stride does not matter
        elif st < 0:
            data += (s - 1) * st * itemsize
            strides[i], flips[i] = -st, True
    if data % itemsize:
        return None  # kernels load whole elements at their natural alignment
    real = sorted((i for i in range(len(shape)) if strides[i]), key=lambda i: -strides[i])
    # reach[k]: the elements dimensions real[k:] span from their first element
    reach = [1] * (len(real) + 1)
    for k in reversed(range(len(real))):
        reach[k] = reach[k + 1] + (shape[real[k]] - 1) * strides[real[k]]
        if reach[k + 1] > strides[real[k]]:
            return None  # the inner dimensions overlap the next step of this one

    def build(flat: UOp) -> UOp:
        v = flat
        lead: tuple[int, ...] = ()
        for k, i in enumerate(real):
            s, st = shape[i], strides[i]
            keep = tuple((0, n) for n in lead)
            if s * st > reach[k]:
                v = v.pad(tuple((0, 0) for _ in lead) + ((0, s * st - reach[k]),))
            v = _reshape(v, (*lead, s, st))
            if reach[k + 1] < st:
                v = v.shrink((*keep, (0, s), (0, reach[k + 1])))
            lead = (*lead, s)
        v = _reshape(v, lead)
        order = sorted(range(len(real)), key=lambda k: real[k])
        if order != list(range(len(real))):
            v = v.permute(tuple(order))
        v = _reshape(v, tuple(s if strides[i] else 1 for i, s in enumerate(shape)))
        if v.shape != shape:
            v = v.expand(shape)
        if any(flips):
            v = v.flip(tuple(flips))
        return v
    return data, reach[0], build


def _reshape(v: UOp, shape: tuple[int, ...]) -> UOp:
    """v reshaped, as one reshape of what v reshapes (a buffer's view stays a reshape of the BUFFER node)."""
    if v.shape == shape:
        return v
    if v.op is Ops.RESHAPE:
        v = v.src[0]
    return v if v.shape == shape else v.reshape(shape)


def _copy_in(desc: _Description, device: str) -> Buffer:
    """A buffer of `device` holding a row-major copy of the producer's strided host memory."""
    itemsize, np_dtype = desc.dtype.itemsize, to_numpy(desc.dtype)
    low = desc.data + sum((s - 1) * st * itemsize for s, st in zip(desc.shape, desc.strides) if st < 0 and s > 0)
    high = desc.data + sum((s - 1) * st * itemsize for s, st in zip(desc.shape, desc.strides) if st > 0 and s > 0)
    raw = np.frombuffer(memoryview((ctypes.c_uint8 * (high - low + itemsize)).from_address(low)), dtype=np.uint8)
    strided = np.lib.stride_tricks.as_strided(raw[desc.data - low:], shape=desc.shape + (itemsize,),
                                              strides=tuple(st * itemsize for st in desc.strides) + (1,))
    host = np.ascontiguousarray(strided).view(np_dtype)
    buf = Buffer(device, prod(desc.shape), desc.dtype)
    return buf.copyin(host.data.cast("B"))


# ---- writes into shared memory ----

def write_shared(target: Tensor, value: Tensor) -> bool:
    """`target.assign(value)` when target's value is shared memory (movement ops over a buffer in `shared_buffers`):
    value is computed now and written into that memory in place, so that the library sharing it sees the write, and
    target keeps reading the memory. False when target is not over shared memory (the caller assigns as usual)."""
    if not shared_buffers or isinstance(target.device, tuple):
        return False
    node = target.uop
    while node.op in GroupOp.Movement:
        node = node.src[0]
    if node.op is not Ops.BUFFER or (mem := node.arg.shared) is None:
        return False
    buf: Buffer = node.arg
    if not mem.writable:
        raise ValueError("cannot assign into memory its producer lent read-only (a DLPack export with the read-only "
                         "flag, such as a read-only numpy array); assign to a copy: t = t.clone()")
    if jit_state.running and jit_state.running[-1].capturing:
        raise RuntimeError("an assign into memory shared with another library (from_blob, DLPack) inside a TinyJit "
                           "function is not supported: it writes the memory now, which a replay would not repeat; "
                           "assign outside the function, or to a tensor of the function's own")
    whole = target.uop is node or (target.uop.op is Ops.RESHAPE and target.uop.src[0] is node)
    positions: Any = slice(None)  # every element, in order
    if not whole:
        positions = _element_positions(target, node)
        if len(positions) and positions.min() < 0:
            raise ValueError(f"cannot assign through a padded view of shared memory (shape {target.shape}): some of "
                             f"its elements are padding, not memory; assign to the tensor the memory was imported as")
        if len(np.unique(positions)) != len(positions):
            raise ValueError(f"cannot assign through a broadcast view of shared memory (shape {target.shape}): "
                             f"several of its elements are one element of the memory; assign to a contiguous copy")
    new = value.contiguous()._buffer()  # computed before anything is written: it may read the memory it replaces
    raw = np.dtype(f"u{buf.dtype.itemsize}")
    src = _host_bytes(new).view(raw)
    if buf.nbytes and (dest := buf.host_array()) is not None:
        dest.view(raw)[positions] = src
    else:
        memory = _host_bytes(buf).view(raw)
        memory[positions] = src
        buf.copyin(memory.data.cast("B"))
    return True


def _element_positions(target: Tensor, node: UOp) -> np.ndarray:
    """For each element of target (row-major), its index in node's buffer; -1 where it is padding."""
    index_dtype = dtypes.int64 if node.arg.size >= 2 ** 31 - 1 else dtypes.int32
    # the view applied to the buffer's element numbers, one-based so that padding (zeros) stands out
    moves = []
    u = target.uop
    while u is not node:
        moves.append((u.op, u.arg))
        u = u.src[0]
    v = type(target).arange(1, node.arg.size + 1, dtype=index_dtype, device=target.device).uop
    for op, arg in reversed(moves):
        v = UOp(op, v.dtype, (v,), arg)
    return type(target)(v, device=target.device).numpy().reshape(-1) - 1


def _host_bytes(buf: Buffer) -> np.ndarray:
    out = np.empty(buf.nbytes, dtype=np.uint8)
    buf.copyout(out.data)
    return out


def aliases_shared(u: UOp) -> bool:
    """Whether node `u` is movement ops over a buffer whose memory is shared (a view that must keep reading it)."""
    while u.op in GroupOp.Movement:
        u = u.src[0]
    return u.op is Ops.BUFFER and u.arg.shared is not None
