"""`Tensor`: a lazy n-dimensional array with autograd, built on the UOp graph.

Every method builds UOps; nothing runs until `realize()` (or `numpy()`, `tolist()`, `item()`),
which hands the graph to the scheduler (engine/schedule.py) and runs the resulting kernels.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import itertools
import pathlib
import struct
import weakref
from collections.abc import Sequence
from typing import Any, ClassVar
from typing import cast as cast  # tinygrad's model files import typing.cast from here

import numpy as np

from tinygrad.device import Buffer, Device, dtype_error, shared_buffers, wraps_external
from tinygrad.device.disk import is_disk
from tinygrad.dlpack import aliases_shared, dlpack_device, export_capsule, write_shared
from tinygrad.dtype import (
    DType,
    DTypeLike,
    decode_floats,
    dtypes,
    encode_floats,
    from_numpy,
    is_emulated_float,
    least_upper_dtype,
    to_dtype,
    to_numpy,
)
from tinygrad.dtype import _to_np_dtype as _to_np_dtype  # tinygrad's tests import it from here
from tinygrad.engine import disk_views, dispatch, jit_state
from tinygrad.engine.jit_state import check_host_read, check_not_overwritten, note_assign
from tinygrad.engine.realize import run_schedule
from tinygrad.engine.schedule import (
    InPlaceWrite,
    ScheduleItem,
    base_buffer,
    buffer_view,
    held_values,
    is_held,
    realized_views,
)
from tinygrad.engine.schedule_item import Linear
from tinygrad.errors import BroadcastError, DTypeError
from tinygrad.gradient import compute_gradient
from tinygrad.helpers import prod
from tinygrad.mixin.common import Scalar, TensorRuntime, broadcast_shape, shape_args
from tinygrad.mixin.creation import CreationMixin
from tinygrad.mixin.elementwise import ElementwiseMixin
from tinygrad.mixin.functional import FunctionalMixin
from tinygrad.mixin.indexing import IndexingMixin
from tinygrad.mixin.linalg import LinalgMixin
from tinygrad.mixin.movement import MovementMixin
from tinygrad.mixin.multi import MultiDeviceMixin
from tinygrad.mixin.processing import ProcessingMixin
from tinygrad.mixin.reduce import ReduceMixin
from tinygrad.mixin.unary import UnaryMixin
from tinygrad.mixin.utility import UtilityMixin
from tinygrad.mixin.views import ViewRecord, record_view, view_record, write_through, written_base
from tinygrad.multi import create_schedule, place_on_devices
from tinygrad.uop.ops import Ops, UOp, post_order, resolve_size

#: read by every realize: `Ops.BUFFER` is an attribute lookup through the enum's metaclass, several times a global's
#: cost on Python 3.11
_BUFFER, _RESHAPE = Ops.BUFFER, Ops.RESHAPE

#: a float's bits: the scalar's part of a `_scalar_operands` key
_float_bits = struct.Struct("<d").pack

#: (dtype, scalar's type, scalar, shape) -> the broadcast constant that `x + scalar` reads. Hash-consing would return
#: the same node; remembering it skips the rounding of the scalar and three lookups on every eager op. Cleared when
#: full.
_scalar_operands: dict[tuple, UOp] = {}


def _scalar_key(dtype: DType, y: Scalar, shape: tuple) -> tuple:
    """A `_scalar_operands` key. The scalar's type is in it (1, 1.0 and True are equal in Python), and a float goes in
    by its bits (0.0 and -0.0 are equal, NaN is not equal to itself)."""
    t = type(y)
    return (dtype, t, _float_bits(y) if t is float else y, shape)

#: Every live floating-point tensor that may take a gradient (requires_grad None or True): backward() fills the
#: .grad of each one whose node is in the loss's graph, intermediates included, as tinygrad does. A dict keyed by
#: weak references whose callback is the dict's own pop: registering costs one weakref and one insert, with no
#: Python frame, on the hot path of every op; a tensor leaves the dict when it dies.
_live_float: dict[weakref.ref, None] = {}
_forget = _live_float.pop


class _EngineRuntime:
    """The services of the devices and the engine that the mixins ask for (TensorRuntime in mixin/common.py): the
    mixin modules cannot import tinygrad.device or tinygrad.engine, so Tensor hands them this as `_runtime`."""

    __slots__ = ()

    @staticmethod
    def canonical_device(device: str | None) -> str:
        return Device.canonicalize(device)

    @staticmethod
    def supports_dtype(device: str, dtype: DType) -> bool:
        return Device[device].supports_dtype(dtype)

    @staticmethod
    def require_dtype(device: str, dtype: DType) -> None:
        if not Device[device].supports_dtype(dtype):
            raise dtype_error(dtype, device)

    @staticmethod
    def new_memory(device: str, dtype: DType, shape: tuple[int, ...]) -> UOp:
        return buffer_view(Buffer(device, prod(shape), dtype), shape)

    @staticmethod
    def host_memory(device: str, dtype: DType, shape: tuple[int, ...], address: int, keepalive: Any) -> UOp:
        size = prod(shape)
        if wraps_external(device):
            if address % dtype.itemsize:
                raise ValueError(f"from_blob's address {address:#x} is not aligned to the {dtype.itemsize}-byte "
                                 f"elements of {dtype.name}; copy the data to aligned memory (numpy arrays are) first")
            buf = Buffer.external(device, size, dtype, address, keepalive=keepalive)
        else:
            host = memoryview((ctypes.c_char * (size * dtype.itemsize)).from_address(address)).cast("B")
            buf = Buffer(device, size, dtype).copyin(host)
        return buffer_view(buf, shape)

    @staticmethod
    def capturing() -> bool:
        return bool(jit_state.tracing_functions) or bool(jit_state.running and jit_state.running[-1].capturing)

    @staticmethod
    def jit_capturing() -> bool:
        return any(j.capturing for j in jit_state.running)

    @staticmethod
    def note_assign(t: Any) -> None:
        note_assign(t)

    @staticmethod
    def is_disk(device: object) -> bool:
        return is_disk(device)

    @staticmethod
    def is_computed(uop: UOp) -> bool:
        return base_buffer(uop) is not None or uop in realized_views

    @staticmethod
    def in_memory(uop: UOp) -> bool:
        return base_buffer(realized_views.get(uop) or uop) is not None

    @staticmethod
    def in_place_write(value: UOp, region: tuple) -> UOp:
        return UOp(Ops.CONTIGUOUS, value.dtype, (value,), InPlaceWrite(region))


class _CastShortcuts:
    """PyTorch's dtype shortcuts (`.float()`, `.long()`, ...). A base class of Tensor, so that inside Tensor's
    body the names float/int/bool still mean the builtin types."""

    __slots__ = ()

    def cast(self, dtype: DTypeLike) -> Tensor:
        raise NotImplementedError

    def float(self) -> Tensor:
        """`self.cast(dtypes.float32)`: PyTorch's shortcut for a cast to float32.

        Examples:
            >>> Tensor([1, 2]).float().tolist()
            [1.0, 2.0]
        """
        return self.cast(dtypes.float32)

    def half(self) -> Tensor:
        """`self.cast(dtypes.float16)`: PyTorch's shortcut for a cast to float16.

        Examples:
            >>> Tensor([1.5, 2.0]).half().dtype
            dtypes.float16
        """
        return self.cast(dtypes.float16)

    def int(self) -> Tensor:
        """`self.cast(dtypes.int32)`: floats are truncated toward zero, as in C and PyTorch.

        Examples:
            >>> Tensor([1.5, -2.7]).int().tolist()
            [1, -2]
        """
        return self.cast(dtypes.int32)

    def long(self) -> Tensor:
        """`self.cast(dtypes.int64)`: floats are truncated toward zero.

        Examples:
            >>> Tensor([1.9, -1.9]).long().tolist()
            [1, -1]
        """
        return self.cast(dtypes.int64)

    def bool(self) -> Tensor:
        """`self.cast(dtypes.bool)`: True where the element is nonzero (NaN is nonzero).

        Examples:
            >>> Tensor([0, 2, -1]).bool().tolist()
            [False, True, True]
        """
        return self.cast(dtypes.bool)

    def double(self) -> Tensor:
        """`self.cast(dtypes.float64)`, on devices that have float64.

        Examples:
            >>> Tensor([1, 2]).double().dtype
            dtypes.float64
        """
        return self.cast(dtypes.float64)

    def short(self) -> Tensor:
        """`self.cast(dtypes.int16)`; values outside int16 wrap around.

        Examples:
            >>> Tensor([1, 40000]).short().tolist()
            [1, -25536]
        """
        return self.cast(dtypes.int16)

    def bfloat16(self) -> Tensor:
        """`self.cast(dtypes.bfloat16)`: stored as 16-bit patterns, computed in float32 and rounded after each op.

        Examples:
            >>> Tensor([1.0, 3.140625]).bfloat16().tolist()
            [1.0, 3.140625]
        """
        return self.cast(dtypes.bfloat16)


class Tensor(_CastShortcuts, CreationMixin, ElementwiseMixin, UnaryMixin, MovementMixin, IndexingMixin, ReduceMixin,
             FunctionalMixin, ProcessingMixin, LinalgMixin, UtilityMixin, MultiDeviceMixin):
    """A lazy tensor. `Tensor([1, 2, 3])`, `Tensor(np_array)`, `Tensor.zeros(2, 3)`, ..."""

    training: ClassVar[bool] = False
    """Whether training mode is on (`dropout` reads it); set it with `Tensor.train()` or `Context(TRAINING=1)`.

    Examples:
        >>> Tensor.training
        False
    """

    class train(contextlib.ContextDecorator):
        """`with Tensor.train():` or `@Tensor.train()`: training mode inside (earlier tinygrad releases' spelling
        of `Context(TRAINING=1)`); `Tensor.train(False)` turns it off inside.

        Training mode is what `dropout` (and layers built on it) read; the previous mode comes back on exit.

        Examples:
            >>> with Tensor.train():
            ...     print(Tensor.training)
            True
            >>> Tensor.training
            False
        """

        def __init__(self, mode: bool = True):
            self.mode = mode

        def __enter__(self) -> None:
            self.prev, Tensor.training = Tensor.training, self.mode

        def __exit__(self, *exc: object) -> None:
            Tensor.training = self.prev
    # the leaves with requires_grad=True (their own node, kept by realize). Keyed by id: a WeakSet would compare
    # tensors with ==, which builds a comparison tensor instead of a bool
    _grad_tensors: ClassVar[weakref.WeakValueDictionary[int, Tensor]] = weakref.WeakValueDictionary()
    # the devices' and the engine's services that the mixins use (they cannot import them)
    _runtime: ClassVar[TensorRuntime] = _EngineRuntime()

    # _view: None, or for a tensor made by movement ops what assign needs to write through it (mixin/views.py)
    __slots__ = ("__weakref__", "_requires_grad", "_view", "device", "grad", "uop")
    uop: UOp
    """The node of the UOp graph that computes this tensor: a BUFFER (or a view of one) once realized, else the
    op that makes it.

    Examples:
        >>> print((Tensor([1, 2]) + 1).uop.op)
        Ops.ADD
    """
    _view: ViewRecord | None
    device: str | tuple[str, ...]
    """The canonical name of the device that holds the data ("CPU", "CL:1", ...); for a tensor on several devices
    (`shard`, `to` a tuple) the tuple of their names.

    Examples:
        >>> Tensor([1, 2], device="cpu").device
        'CPU'
    """

    def __init__(self, data: Any, device: str | Sequence[str] | None = None, dtype: DTypeLike | None = None,
                 requires_grad: bool | None = None):
        if device is not None and not isinstance(device, str):  # several devices: the data on each (tinygrad/multi.py)
            self.device, data = place_on_devices(Tensor, data, device, dtype)
        else:
            self.device = Device.canonicalize(device)
        self.grad: Tensor | None = None
        """The gradient that `backward()` stored (None until then); parameters (requires_grad=True) accumulate
        it until an optimizer's `zero_grad()`.

        Examples:
            >>> x = Tensor([3.0], requires_grad=True)
            >>> print(x.grad)
            None
            >>> loss = x.square().sum().backward()
            >>> x.grad.tolist()
            [6.0]
        """
        self._view = None  # not a view (see _moved)
        self._requires_grad: bool | None = False  # until the end: see the requires_grad property
        want = to_dtype(dtype) if dtype is not None else None
        if isinstance(data, UOp):
            if want is None and data.dtype == dtypes.index:
                # a Variable (or a size over Variables) as a value: an int tensor, 64-bit only if its range needs it
                want = dtypes.int32 if dtypes.int32.min <= data.vmin and data.vmax <= dtypes.int32.max else dtypes.int64
            self.uop = data if want is None else data.cast(want)
            if device is None and _deviceless(data):  # tinygrad's: a graph of constants alone belongs to no device
                self.device = None  # type: ignore[assignment]
        elif isinstance(data, Tensor):
            self.uop = data.uop if want is None else data.uop.cast(want)
            self.device = data.device if device is None else self.device
        elif data is None:  # tinygrad's Tensor(None): a 0-d zero
            self.uop = UOp.const(want or dtypes.default_float, 0)
        elif isinstance(data, (bool, int, float)) and not isinstance(data, np.generic):
            d = want or dtypes.from_py(data)
            if want is None and d == dtypes.int32 and not dtypes.int32.min <= data <= dtypes.int32.max:
                d = dtypes.int64  # a Python int too large for the default int keeps its value
            self.uop = UOp.const(d, data)
        elif isinstance(data, bytes):
            self.uop = self._upload(np.frombuffer(data, dtype=np.uint8), want or dtypes.uint8)
        elif isinstance(data, pathlib.Path):  # the file's bytes as a uint8 tensor on DISK, read only when used
            size = data.stat().st_size
            on_disk = Tensor(buffer_view(Buffer(Device.canonicalize(f"DISK:{data}"), size, dtypes.uint8), (size,)),
                             device=f"DISK:{data}")
            on_disk = on_disk if want is None or want == dtypes.uint8 else on_disk.bitcast(want)
            self.uop = on_disk.uop if device is None else on_disk.to(self.device).uop
            self.device = on_disk.device if device is None else self.device
        elif isinstance(data, (list, tuple, np.ndarray, np.generic)):
            if isinstance(data, (list, tuple)):
                arr, list_dtype = _list_to_numpy(data, want)
            else:
                arr, list_dtype = np.asarray(data), None
            if arr.dtype == object:
                raise TypeError(f"cannot make a Tensor from ragged or non-numeric data {data!r}")
            d = want or list_dtype or from_numpy(arr.dtype)
            self.uop = self._upload(arr, d)
        else:
            raise TypeError(f"cannot make a Tensor from {type(data).__name__}; pass a number, a (nested) list, "
                            f"a numpy array or bytes")
        self.requires_grad = requires_grad

    def _upload(self, arr: np.ndarray, d: DType) -> UOp:
        from tinygrad.device import dtype_error

        device = self.device
        assert isinstance(device, str), "host data for several devices is uploaded to each one (multi.py)"
        if not Device[device].supports_dtype(d):
            raise dtype_error(d, device)
        if is_emulated_float(d):  # numpy has no such type: upload the rounded bit patterns
            flat = encode_floats(arr, d)
        else:
            flat = np.ascontiguousarray(arr.astype(to_numpy(d), copy=False).reshape(-1))
        buf = Buffer(device, flat.size, d)
        buf.copyin(flat.data.cast("B"))
        return buffer_view(buf, tuple(arr.shape))

    # ---- basic properties ----
    @property
    def shape(self) -> tuple[int, ...]:
        """The size of each dimension, as a tuple (a symbolic dimension is a `UOp` over a bound Variable).

        Examples:
            >>> Tensor([[1, 2, 3], [4, 5, 6]]).shape
            (2, 3)
        """
        return self.uop.shape

    @property
    def dtype(self) -> DType:
        """The element type, a `DType` from `tinygrad.dtypes`. Python ints make int32, Python floats
        `dtypes.default_float` (float32), bools bool.

        Examples:
            >>> Tensor([1, 2]).dtype
            dtypes.int32
            >>> Tensor([1.5]).dtype
            dtypes.float32
        """
        return self.uop.dtype

    @property
    def ndim(self) -> int:
        """The number of dimensions, `len(self.shape)`.

        Examples:
            >>> Tensor.zeros(2, 3, 4).ndim
            3
        """
        return len(self.shape)

    def numel(self) -> int:
        """The number of elements, the product of the shape (1 for a 0-d tensor).

        Examples:
            >>> Tensor.zeros(2, 3).numel()
            6
        """
        return prod(self.shape)

    def element_size(self) -> int:
        """The size of one element in bytes.

        Examples:
            >>> Tensor([1.0], dtype=dtypes.float16).element_size()
            2
        """
        return self.dtype.itemsize

    def nbytes(self) -> int:
        """The size of the data in bytes, `numel() * element_size()`.

        Examples:
            >>> Tensor([1, 2, 3]).nbytes()
            12
        """
        return self.numel() * self.element_size()

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def size(self, dim: int | None = None) -> tuple[int, ...] | int:
        """The shape, or with `dim` the size of that dimension (negative counts from the end), as PyTorch's `size`.

        Examples:
            >>> t = Tensor.zeros(2, 3)
            >>> t.size(), t.size(-1)
            ((2, 3), 3)
        """
        return self.shape if dim is None else self.shape[self._axis(dim)]

    def __repr__(self) -> str:
        # tinygrad's format: the node (where it lives, shape, dtype), the device, the gradient's node
        def node(t: Tensor) -> str:
            return f"<UOp {t.device} {t.shape} {t.dtype.name}>"
        return f"<Tensor {node(self)} on {self.device} with grad {None if self.grad is None else node(self.grad)}>"

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """A DLPack capsule lending this tensor's memory (host memory only), so that `np.from_dlpack(t)` and
        `torch.from_dlpack(t)` share it: writes on either side are seen by the other, and the memory lives while
        the consumer holds it. A tensor that is not a realized, contiguous buffer is realized first, into a
        contiguous copy where it is a view (the consumer then shares that copy). `max_version` (1, x) asks for a
        versioned capsule; `copy=True` lends a copy; `dl_device` must be the CPU's (1, 0), and a tensor on another
        device is copied to the host only when it asks for that; `stream` must be None.

        Examples:
            >>> t = Tensor([1.0, 2.0, 3.0])
            >>> a = np.from_dlpack(t)
            >>> a[0] = 5.0
            >>> t.tolist()
            [5.0, 2.0, 3.0]
        """
        return export_capsule(self, stream, max_version, dl_device, copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        """DLPack's (device type, device id) of this tensor: (1, 0), the CPU, for host memory; other devices raise
        BufferError (move the tensor with .to("CPU") first).

        Examples:
            >>> Tensor([1, 2]).__dlpack_device__()
            (1, 0)
        """
        return dlpack_device(self.device)

    def __getstate__(self) -> tuple[None, dict[str, Any]]:
        # pickled: its graph (realized: its buffer, with the bytes), device, gradient and flag. Not the record of the
        # view it was made as (what assign writes through): that is a weak reference to another tensor, which a
        # loaded tensor does not have, so a loaded view is a tensor of its own
        return None, {"uop": self.uop, "device": self.device, "grad": self.grad,
                      "_requires_grad": self._requires_grad, "_view": None}

    # by identity (== is elementwise); object's own hash, in C, as the weak registry hashes every new tensor
    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        # tinygrad defines no truth value, not even for one element (PyTorch does): `if t:` and `t in [a, b]`
        # would otherwise realize the tensor behind the program's back
        raise TypeError("a Tensor has no truth value; compare explicitly and read it: `if t.item():`, "
                        "`(t > 0).all().item()`")

    @property
    def requires_grad(self) -> bool | None:
        """Tri-state, as in tinygrad. None (the default): backward() fills this tensor's .grad when the loss depends
        on it (floating point only), and an optimizer given it makes it True. True: a parameter, a leaf of its own
        that realize() keeps (PyTorch's requires_grad). False: never takes a gradient, and what is computed from it
        alone neither; optimizers keep such tensors as buffers (running statistics, counters).

        Examples:
            >>> print(Tensor([1.0]).requires_grad)
            None
            >>> Tensor([1.0], requires_grad=True).requires_grad
            True
        """
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool | None) -> None:
        was = self._requires_grad
        if value and was is not True:
            if not self.dtype.is_float:
                raise RuntimeError(f"only floating point tensors can require gradients, this one is {self.dtype}")
            # a gradient target must be a node of its own: equal lazy expressions are one shared UOp
            if base_buffer(self.uop) is None:
                self.uop = UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,), ("param", id(self)))
            Tensor._grad_tensors[id(self)] = self
        elif not value:
            Tensor._grad_tensors.pop(id(self), None)
        if was is False and value is not False and self.uop.dtype.is_float:
            _live_float[weakref.ref(self, _forget)] = None  # backward() may fill its .grad from now on
        self._requires_grad = None if value is None else bool(value)

    def requires_grad_(self, value: bool | None = True) -> Tensor:
        """Set `requires_grad` (True by default) and return self; only floating-point tensors can be True.

        Examples:
            >>> Tensor([1.0, 2.0]).requires_grad_().requires_grad
            True
        """
        self.requires_grad = value
        return self

    @property
    def is_param(self) -> bool:
        """tinygrad 0.14's spelling: whether an optimizer optimises this tensor (requires_grad is not False).

        Setting it to False sets requires_grad to False; setting it to True turns a False into None.

        Examples:
            >>> Tensor([1.0]).is_param
            True
            >>> Tensor([1.0], requires_grad=False).is_param
            False
        """
        return self._requires_grad is not False

    @is_param.setter
    def is_param(self, value: bool) -> None:
        if not value:
            self.requires_grad = False
        elif self._requires_grad is False:
            self.requires_grad = None

    def is_param_(self, value: bool = True) -> Tensor:
        """Set `is_param` and return self (tinygrad 0.14's spelling of `requires_grad_`).

        Examples:
            >>> Tensor([1.0]).is_param_(False).requires_grad
            False
        """
        self.is_param = value
        return self

    @staticmethod
    def _over(uop: UOp, device: str | tuple[str, ...], requires_grad: bool | None) -> Tensor:
        """A tensor of `uop` on `device`, already canonical: __init__ without its parsing, for a caller that makes
        many (TinyJit makes its outputs on every replay). `requires_grad` is taken as it is."""
        out = Tensor.__new__(Tensor)
        out.uop, out.device, out.grad, out._view, out._requires_grad = uop, device, None, None, requires_grad
        if requires_grad is not False and uop.dtype.kind == "float":  # as the requires_grad setter registers it
            _live_float[weakref.ref(out, _forget)] = None
        return out

    def _derive(self, uop: UOp, *others: Tensor) -> Tensor:
        # the hot path of every op: skip __init__'s argument parsing, the device is already canonical
        out = Tensor.__new__(Tensor)
        out.uop, out.device, out.grad, out._view = uop, self.device, None, None
        # True if any input is True, else None if any is None, else False (computed from buffers alone)
        rg = self._requires_grad
        if others and rg is not True:
            for o in others:
                if o._requires_grad:
                    rg = True
                    break
                if o._requires_grad is None:
                    rg = None
        out._requires_grad = rg
        if rg is not False and uop.dtype.kind == "float":  # dtype.is_float, without the property's call
            _live_float[weakref.ref(out, _forget)] = None
        return out

    def _moved(self, uop: UOp) -> Tensor:
        """_derive for a movement op: the result is a view that remembers its base, so assign can write through it."""
        out = self._derive(uop)
        record_view(out, self, self._view)
        return out

    # ---- realization ----
    def schedule(self, *others: Tensor) -> list[ScheduleItem]:
        """The kernels that realize() would run, without running them: a list of `ScheduleItem`s. Already
        realized tensors need none; the tensors in `others` are scheduled together with self.

        Examples:
            >>> t = Tensor([1, 2, 3])
            >>> len(t.schedule()), len((t + 1).schedule())
            (0, 1)
        """
        tensors = [t for t in (self, *others) if t.device is not None]  # constants alone need no kernel yet
        if not tensors:
            return []
        items, _, _ = create_schedule([t.uop for t in tensors], [t.device for t in tensors])
        return items

    def realize(self, *others: Tensor) -> Tensor:
        """Run the kernels that compute this tensor (and `others`, in one schedule) and keep the result in a
        buffer; returns self. Reading a value (`numpy`, `tolist`, `item`) realizes first, so an explicit call is
        only needed to control when work happens (for example to time it).

        Examples:
            >>> t = (Tensor([1, 2]) * 3).realize()
            >>> t.tolist()
            [3, 6]
        """
        keyed = None
        if self.device is None or any(t.device is None for t in others):
            # constants alone stay a graph (tinygrad's no-op): they get a device, and a buffer, when they meet one
            if rest := [t for t in (self, *others) if t.device is not None]:
                rest[0].realize(*rest[1:])
            return self
        if not others and self._view is None:  # one tensor that is not a view, as in every eager step
            root, device = self.uop, self.device
            if root.op is _BUFFER or (root.op is _RESHAPE and root.src[0].op is _BUFFER):
                return self  # realized already (an uploaded array is a reshaped buffer), and not a view of a base
            if type(device) is str and (keyed := dispatch.eager_key(root, device)) is not None \
                    and (entry := dispatch.entries.get(keyed[0])) is not None:
                view = dispatch.launch(entry, keyed[1])
                root._realized = view  # realized_views[root] = view, without the call
                if self._requires_grad is not True or id(self) in Tensor._grad_tensors:
                    self.uop = view
                return self
        tensors = self._with_written(others)
        if len(tensors) > 1:
            items, views, out_views = create_schedule([t.uop for t in tensors], [t.device for t in tensors])
        else:
            root, device = self.uop, self.device
            items, views, out_views = create_schedule([root], [device])
            if keyed is not None:
                dispatch.learn(keyed[0], keyed[1], items, root.shape)  # type: ignore[arg-type]
        run_schedule(items)
        Tensor._adopt(tensors, views, out_views)
        return self

    def _with_written(self, others: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        """The tensors a realize of self and `others` computes: with the bases that views among them write into."""
        tensors = (self, *others)
        for t in tensors:
            if is_disk(t.device) and t.uop.op is not Ops.COPY:  # a DISK view is a buffer on the same file
                t.uop = disk_views.realize_view(t.uop)
        written = [b for t in tensors if (b := written_base(t)) is not None and all(b is not u for u in tensors)] \
            if others or self._view is not None else None
        if written:  # `cache[:, i:i+1].assign(x).realize()` writes the cache, as in tinygrad
            tensors += tuple(dict.fromkeys(written))
        return tensors

    @staticmethod
    def _adopt(tensors: Sequence[Tensor], views: dict[UOp, UOp], out_views: list[UOp]) -> None:
        """After a schedule ran: remember where each node's value is, and point the tensors at their buffers."""
        for node, view in views.items():
            realized_views[node] = view
            if node.op is Ops.CONTIGUOUS and node.arg is None:
                Tensor._hand_fill(node, view)
        for t, view in zip(tensors, out_views):
            if view is not t.uop and views.get(t.uop) is not view:  # an output the schedule did not remember
                realized_views[t.uop] = view
            # A tensor with gradient history (computed from a requires_grad=True tensor) keeps its graph, so that
            # backward() still reaches the leaves after realize() (PyTorch users print loss.item() before
            # loss.backward()); the scheduler reads the realized buffer in its place. Leaves and the others (None:
            # keeping every float graph alive would hold every input buffer it read) just become the buffer.
            if (t._requires_grad is not True or id(t) in Tensor._grad_tensors) and \
                    not (shared_buffers and aliases_shared(t.uop)):  # a view of shared memory keeps reading it
                t.uop = view

    @staticmethod
    def _hand_fill(node: UOp, view: UOp) -> None:
        """A held `contiguous()` of constants (`Tensor.zeros(n).contiguous()`) is one node wherever, and on whatever
        device, it is written (hash-consing), so later graphs do not read its buffer through the node, which may be
        another tensor's: the tensor that holds it is pointed at the buffer it was filled into, as realize() points
        its outputs, and its later graphs read that buffer instead of filling it again."""
        ref = held_values.get(node)
        holder = ref() if ref is not None else None
        if holder is None or holder.uop is not node or view.device != holder.device or \
                not dispatch._is_constant_graph(node.src[0]):
            return
        if holder._requires_grad is not True or id(holder) in Tensor._grad_tensors:
            holder.uop = view

    def linear_with_vars(self, *others: Tensor) -> tuple[Linear, dict[str, int]]:
        """tinygrad's: the calls that `realize(*others)` would run, in order, not yet run, and the values of the
        symbolic variables they take. `tinygrad.engine.realize.run_linear(linear, var_vals)` runs them; then the
        tensors hold their values, as after realize(). Until it runs, nothing changes.

        Examples:
            >>> from tinygrad.engine.realize import run_linear
            >>> t = Tensor([1, 2]) + 1
            >>> linear, var_vals = t.linear_with_vars()
            >>> len(linear.src), var_vals
            (1, {})
            >>> run_linear(linear, var_vals); t.tolist()
            [2, 3]
        """
        tensors = tuple(t for t in self._with_written(others) if t.device is not None)  # constants alone: no call
        if not tensors:
            return Linear(()), {}
        items, views, out_views = create_schedule([t.uop for t in tensors], [t.device for t in tensors])
        var_vals = {k: v for si in items for k, v in si.var_vals.items()}
        return Linear(tuple(items), lambda: Tensor._adopt(tensors, views, out_views)), var_vals

    def schedule_linear(self, *others: Tensor) -> Linear:
        """tinygrad's: `linear_with_vars` without the variable values (each call keeps its own).

        Examples:
            >>> len((Tensor([1, 2]) * 2).schedule_linear().src)
            1
        """
        return self.linear_with_vars(*others)[0]

    def _buffer(self) -> Buffer:
        if self.device is None:  # constants alone: computed on the default device to be read
            return self.to(None)._buffer()
        if isinstance(self.device, tuple):
            raise RuntimeError(f"a tensor on {self.device} has one buffer per device; gather it first with .to(device)")
        self.realize()
        view = realized_views.get(self.uop)
        base = base_buffer(view if view is not None else self.uop)
        assert base is not None, "realize() leaves a contiguous buffer"
        check_not_overwritten((base.arg,))
        return base.arg

    def numpy(self) -> np.ndarray:
        """The value as a numpy array (realizing first). bfloat16 and the 8-bit floats come back as float32 values.

        Examples:
            >>> Tensor([[1, 2], [3, 4]]).numpy()
            array([[1, 2],
                   [3, 4]], dtype=int32)
        """
        check_host_read("numpy(), tolist() and item()")
        if isinstance(self.device, tuple):  # gathered onto the first device
            return self.to(self.device[0]).numpy()
        if is_disk(self.device):  # read through the host
            return self.to("CPU").numpy()
        shape = self.uop.shape
        if not all(type(s) is int for s in shape):
            shape = tuple(resolve_size(s) for s in shape)  # symbolic dims take their bound values
        if 0 in shape:
            return np.zeros(shape, dtype=np.float32 if is_emulated_float(self.dtype) else to_numpy(self.dtype))
        raw = self._buffer().numpy()[:prod(shape)]  # a symbolic shape's buffer is sized for its largest value
        if is_emulated_float(self.dtype):  # bfloat16 and the 8-bit floats come back as float32 values
            raw = decode_floats(raw, self.dtype)
        return raw.reshape(shape)

    def tolist(self) -> Any:
        """The value as (nested) Python lists of Python numbers; a 0-d tensor gives a number.

        Examples:
            >>> Tensor([[1, 2], [3, 4]]).tolist()
            [[1, 2], [3, 4]]
        """
        return self.numpy().tolist()

    def item(self) -> Scalar:
        """The value of a one-element tensor as a Python number; raises ValueError for any other size.

        Examples:
            >>> Tensor([[2.5]]).item()
            2.5
        """
        if self.numel() != 1:
            raise ValueError(f"item() needs a tensor with one element, this one has shape {self.shape}")
        return self.numpy().reshape(()).item()

    def data(self) -> memoryview:
        """The value as a `memoryview` of a host copy, with the tensor's shape and the element format of its dtype.

        Examples:
            >>> Tensor([1, 2, 3]).data().tolist()
            [1, 2, 3]
        """
        return self.numpy().data

    def contiguous(self) -> Tensor:
        """The same value, marked to be computed into a buffer of its own (row-major) when realized; a kernel
        boundary for the scheduler. Unlike PyTorch's, it is lazy and may copy even when the tensor is already laid out
        contiguously.

        Examples:
            >>> Tensor([[1, 2], [3, 4]]).T.contiguous().tolist()
            [[1, 3], [2, 4]]
        """
        out = self._derive(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))
        if not is_held(out.uop):  # held: computed once by the first realize that reaches it
            held_values[out.uop] = weakref.ref(out)
        return out

    def contiguous_backward(self) -> Tensor:
        """The same value. tinygrad's spelling for "make the gradient that flows back through here contiguous", a
        scheduling hint; this scheduler places gradient kernels itself, so values and gradients are unchanged.

        Examples:
            >>> x = Tensor([1.0, 2.0], requires_grad=True)
            >>> (x.contiguous_backward() * 3).sum().backward().tolist(), x.grad.tolist()
            (9.0, [3.0, 3.0])
        """
        return self

    def detach(self) -> Tensor:
        """The same value with the gradient stopped: backward() sends nothing through the result. Its
        requires_grad is the default None (PyTorch: False).

        Examples:
            >>> x = Tensor([2.0], requires_grad=True)
            >>> y = (x * x.detach()).backward()
            >>> x.grad.tolist()
            [2.0]
        """
        return Tensor(UOp(Ops.DETACH, self.dtype, (self.uop,)), device=self.device)

    def clone(self, device: str | None = None) -> Tensor:
        """A copy with a node of its own (on `device`, if given): the same value, and assigning to the copy leaves
        self alone. Gradients flow through it, each clone taking its own.

        Examples:
            >>> a = Tensor([1, 2])
            >>> b = a.clone()
            >>> b.assign(Tensor([5, 6])).tolist(), a.tolist()
            ([5, 6], [1, 2])
        """
        src = self if device is None and self.device is not None else self.to(device)  # a clone has a buffer
        # a number of its own, not id(self): two clones of equal temporaries (`Tensor(3.5).clone()` twice) would
        # otherwise be one node whenever the first temporary's id was reused, and share one gradient
        out = src._derive(UOp(Ops.CONTIGUOUS, self.dtype, (src.uop,), ("clone", next(_clone_numbers))))
        if self.grad is not None:  # tinygrad's clone copies the gradient too
            out.grad = self.grad.clone(device)
        return out

    def to(self, device: str | Sequence[str] | None) -> Tensor:
        """This tensor on `device` (a name such as "CPU" or "CL:1"; None is the default device; a tuple of names
        puts a copy on each, see `shard`); self when it is already there. The copy is lazy and keeps requires_grad.

        Examples:
            >>> Tensor([1, 2]).to("CPU").device
            'CPU'
        """
        if device is not None and not isinstance(device, str):  # replicated on several devices (mixin/multi.py)
            return self._to_devices(device)
        dev = Device.canonicalize(device)
        if dev == self.device:
            return self
        if self.device is None:  # constants alone: the same graph, computed on `dev`
            return self._over(self.uop, dev, self._requires_grad)
        if is_disk(dev):  # a write to a file happens now, from the value computed where it lives
            value = self.to("CPU") if is_disk(self.device) else self
            return Tensor(UOp(Ops.COPY, self.dtype, (buffer_view(value.contiguous()._buffer(), self.shape),), dev),
                          device=dev).realize()
        if is_disk(self.device):  # only the bytes the view covers are read
            out = Tensor(disk_views.copy_out(self.uop, dev), device=dev)
            out._requires_grad = self._requires_grad
            return out
        out = Tensor(UOp(Ops.COPY, self.dtype, (self.uop,), dev), device=dev)
        out._requires_grad = self._requires_grad
        return out

    def assign(self, x: Tensor | Scalar) -> Tensor:
        """Replace this tensor's value (shapes, dtypes and devices must match; a Python scalar fills it); returns
        self. Lazy: the value is computed when the tensor (or something read from it) is realized.

        A view (made by slicing, shrink, permute/transpose, reshape, flip, pad, or a chain of them) writes into its
        base: `c[:, 1:2].assign(v)` changes c, in the base's current value, and the view is re-read from the new
        base. Writes into a pad's padding are dropped; an expanded (broadcast) view cannot be assigned to, nor a view
        of a leaf that requires grad. Realizing a view only caches its value: it still writes into its base. Reads
        follow the rule of values: anything computed before the assign, views of the base taken earlier included,
        keeps the value it had (realized yet or not); everything made after reads the new one. `v = c[0];
        c.assign(x); v.assign(y)` writes y into row 0 of x (a write lands in the base's current value).

        Examples:
            >>> c = Tensor.zeros(2, 2).contiguous()
            >>> c[:, 1:2].assign(Tensor([[5.0], [6.0]])).tolist()
            [[5.0], [6.0]]
            >>> c.tolist()
            [[0.0, 5.0], [0.0, 6.0]]
        """
        if is_disk(self.device):
            return self._write_to_disk(x)
        if isinstance(x, Tensor):
            other = x
        elif isinstance(x, (np.ndarray, list, tuple)):  # host data, as tinygrad takes it (`w.assign(arr)`)
            other = Tensor(x, dtype=self.dtype, device=self.device)
        else:
            other = Tensor.full(self.shape, x, dtype=self.dtype, device=self.device)
        if other.shape != self.shape:
            raise ValueError(f"assign of shape {other.shape} to a tensor of shape {self.shape}")
        if other.dtype != self.dtype:
            raise TypeError(f"assign of {other.dtype} to a tensor of {self.dtype}; cast it first")
        if other.device is None:  # constants alone: computed where self lives
            other = other.to(self.device)
        if other.device != self.device:
            raise RuntimeError(f"assign of a tensor on {other.device} to a tensor on {self.device}; move it with "
                               f".to({self.device!r}) first")
        if isinstance(self.device, tuple):  # in place: the new value keeps the placement of the buffers it goes into
            other = other.shard_like(self)
        rec = view_record(self)
        if rec is not None and write_through(self, rec, other):  # a view (made by movement ops): into its base
            return self
        # Functional: the tensor takes the new value's graph. Inside a TinyJit function the old buffer is noted, so
        # that replays write the new value back into it.
        if shared_buffers and write_shared(self, other):  # memory shared with another library: written in place
            return self
        note_assign(self)
        self.uop = other.uop
        return self

    def _write_to_disk(self, x: Tensor | Scalar) -> Tensor:
        """assign() into a DISK tensor: the value is computed (on its own device, or the CPU for host data) and
        its bytes are written into the file now."""
        value = x if isinstance(x, Tensor) else Tensor.full(self.shape, x, dtype=self.dtype, device="CPU") \
            if isinstance(x, (bool, int, float)) else Tensor(x, dtype=self.dtype, device="CPU")
        if value.shape != self.shape:
            value = value.reshape((1,) * (self.ndim - value.ndim) + value.shape).expand(self.shape) \
                if value.ndim <= self.ndim else value.reshape(self.shape)
        if value.dtype != self.dtype:
            raise TypeError(f"assign of {value.dtype} to a tensor of {self.dtype}; cast it first")
        if isinstance(value.device, tuple) or is_disk(value.device):
            value = value.to("CPU")
        disk_views.write(self.uop, value.contiguous()._buffer())
        return self

    # ---- elementwise helpers ----
    def _const_operand(self, x: Scalar | UOp) -> Tensor:
        d = self.dtype
        if isinstance(x, UOp):  # a symbolic int (a bound Variable, `start_pos + 1`): promotes as a Python int does
            if not d.is_float and not d.is_int:
                d = dtypes.default_int
            return Tensor(x, device=self.device).cast(d)
        px = dtypes.from_py(x)
        if (px.is_float and not d.is_float) or (px.is_int and d.is_bool):
            d = px
        return Tensor(UOp.const(d, x), device=self.device)

    def _scalar_operand(self, y: Tensor | Scalar) -> UOp | None:
        """The fast path for `x + 1`: a Python scalar that x's dtype holds is a broadcast constant of x's shape.
        None when the general path (promotion, gradients) must decide."""
        t = type(y)
        if self._requires_grad is True or (t is not int and t is not float and t is not bool):
            return None
        uop = self.uop
        hit = _scalar_operands.get(_scalar_key(uop.dtype, y, uop.shape))  # type: ignore[arg-type]
        return hit if hit is not None else self._new_scalar_operand(y)  # type: ignore[arg-type]

    def _new_scalar_operand(self, y: Scalar) -> UOp | None:
        uop = self.uop
        d = uop.dtype
        px = dtypes.from_py(y)
        if (px.is_float and not d.is_float) or (px.is_int and d.is_bool):
            return None
        c = UOp.const(d, y)
        shape = uop.shape
        out = c.reshape((1,) * len(shape)).expand(shape) if shape else c
        if len(_scalar_operands) >= 1024:
            _scalar_operands.clear()
        _scalar_operands[_scalar_key(d, y, shape)] = out
        return out

    def _broadcasted(self, y: Tensor | Scalar, reverse: bool = False) -> tuple[Tensor, Tensor]:
        x: Tensor = self
        if (c := self._scalar_operand(y)) is not None:
            const = self._derive(c)
            return (const, self) if reverse else (self, const)
        other = y if isinstance(y, Tensor) else x._const_operand(y)
        if (other.device is None) != (x.device is None):  # a graph of constants joins the other operand's device
            x, other = (x, other.to(x.device)) if other.device is None else (x.to(other.device), other)
        if other.device != x.device:
            raise RuntimeError(f"an operation mixes tensors on {x.device} and {other.device}; "
                               f"move one with .to({x.device!r})")
        if reverse:
            x, other = other, x
        out_dtype = least_upper_dtype(x.dtype, other.dtype)
        shape = broadcast_shape(x.shape, other.shape)
        return x.cast(out_dtype)._broadcast_to(shape), other.cast(out_dtype)._broadcast_to(shape)

    def _broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
        if self.shape == shape:
            return self
        if len(self.shape) > len(shape):
            raise BroadcastError(f"cannot broadcast shape {self.shape} to {shape}")
        padded = (1,) * (len(shape) - len(self.shape)) + self.shape
        broadcast_shape(padded, shape)
        return self._derive(self.uop.reshape(padded).expand(shape))

    def _binop(self, op: Ops, y: Tensor | Scalar, reverse: bool = False) -> Tensor:
        # `x + 1`: no Tensor for the constant, and _scalar_operand's cache hit inline: every eager op runs this
        t = type(y)
        if (t is int or t is float or t is bool) and self._requires_grad is not True:
            uop = self.uop
            shape = uop._shape  # the shape property's cached value, without its call
            if type(shape) is not tuple:
                shape = uop.shape
            # _scalar_key written out (a call less on every eager op): keep the two equal
            c = _scalar_operands.get((uop.dtype, t, _float_bits(y) if t is float else y, shape))
            if c is not None or (c := self._new_scalar_operand(y)) is not None:  # type: ignore[arg-type]
                return self._derive(c.alu(op, uop) if reverse else uop.alu(op, c))
        a, b = self._broadcasted(y, reverse)
        return a._derive(a.uop.alu(op, b.uop), b)

    def _unop(self, op: Ops) -> Tensor:
        return self._derive(self.uop.alu(op))

    def _float(self) -> Tensor:
        return self if self.dtype.is_float else self.cast(dtypes.default_float)

    def cast(self, dtype: DTypeLike) -> Tensor:
        """The value converted to `dtype` (a `DType` or its name); self when it already has it. Floats to
        integers truncate toward zero; out-of-range integers wrap.

        Examples:
            >>> Tensor([1.7, -1.7]).cast(dtypes.int32).tolist()
            [1, -1]
            >>> Tensor([1, 2]).cast("float16").dtype
            dtypes.float16
        """
        d = to_dtype(dtype)
        return self if d == self.dtype else self._derive(self.uop.cast(d))

    def bitcast(self, dtype: DTypeLike) -> Tensor:
        """Reinterpret the bits of each element as `dtype` (no value conversion). If the sizes differ, the last axis
        is rescaled: the bytes of each row are read as `dtype` (little-endian), so its length times the old size
        must be a multiple of the new size.

        Examples:
            >>> Tensor([1.0, 2.0]).bitcast(dtypes.int32).tolist()
            [1065353216, 1073741824]
            >>> Tensor([1, 2], dtype=dtypes.uint8).bitcast(dtypes.uint16).tolist()
            [513]
        """
        d = to_dtype(dtype)
        if d.itemsize != self.dtype.itemsize:
            if is_disk(self.device):  # the file's bytes seen as another dtype: a view, as a same-size bitcast is
                return Tensor(disk_views.bitcast_view(self.uop, d), device=self.device)
            return self._bitcast_resized(d)
        return Tensor(self.uop.bitcast(d), device=self.device)

    def _bitcast_resized(self, d: DType) -> Tensor:
        # same-size bitcasts to unsigned integers, then shifts: k narrow elements (little-endian, low bytes first)
        # make one wide one, or one wide one splits into k narrow ones (casting to a narrower unsigned keeps the low
        # bits), which every backend computes exactly
        src, n = self.dtype, (self.shape[-1] if self.ndim else 1)
        if src.is_bool or d.is_bool or not self.ndim or (n * src.itemsize) % d.itemsize:
            raise DTypeError(f"bitcast from {src} ({src.itemsize} bytes) to {d} ({d.itemsize} bytes) needs a last "
                             f"axis whose bytes ({n} x {src.itemsize}) are a multiple of {d.itemsize}")
        unsigned = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}
        bits = self.bitcast(unsigned[src.itemsize])
        if d.itemsize > src.itemsize:
            k = d.itemsize // src.itemsize
            rows = bits.reshape(*self.shape[:-1], n // k, k).cast(unsigned[d.itemsize])
            wide = rows[..., 0]
            for i in range(1, k):
                wide = wide | (rows[..., i] << (8 * src.itemsize * i))
            return wide.bitcast(d)
        k = src.itemsize // d.itemsize
        parts = [(bits >> (8 * d.itemsize * i)).cast(unsigned[d.itemsize]) for i in range(k)]
        return parts[0].stack(*parts[1:], dim=-1).reshape(*self.shape[:-1], n * k).bitcast(d)

    # ---- autograd ----
    def gradient(self, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
        """d(self)/d(target) for each target, as new tensors (nothing is stored in .grad).

        `gradient` is the incoming gradient, required unless self has one element. Targets that self does not
        depend on get zeros.

        Examples:
            >>> x = Tensor([2.0, 3.0])
            >>> (dx,) = (x * x).sum().gradient(x)
            >>> dx.tolist()
            [4.0, 6.0]
        """
        if gradient is None:
            if self.numel() != 1:
                raise RuntimeError(f"gradient of a non-scalar tensor of shape {self.shape} needs `gradient=` "
                                   f"of the same shape")
            gradient = Tensor.ones(self.shape, dtype=self.dtype, device=self.device)
        if gradient.shape != self.shape:
            raise ValueError(f"gradient of shape {gradient.shape} for a tensor of shape {self.shape}")
        root, aliases = self._grad_graph(targets)
        grads = compute_gradient(root, gradient.uop, {u for t in targets for u in aliases(t)})
        out = []
        for t in targets:
            parts = [g for u in aliases(t) if (g := grads.get(u)) is not None]
            g = parts[0] if parts else None
            for p in parts[1:]:
                g = g + p  # type: ignore[operator]
            out.append(Tensor(g, device=t.device) if g is not None else t.zeros_like())
        return out

    def _grad_graph(self, targets: Sequence[Tensor]) -> tuple[UOp, Any]:
        """The graph backward() walks, and for each target the nodes in it that stand for the target: realize()
        turns a leaf into a buffer, so a graph built before that holds the leaf's earlier node."""
        root = self.uop
        earlier: dict[UOp, list[UOp]] = {}
        for node in root.toposort():
            if (view := realized_views.get(node)) is not None and view is not node:
                earlier.setdefault(view, []).append(node)
        return root, lambda t: [t.uop, *earlier.get(t.uop, [])]

    def backward(self, gradient: Tensor | None = None) -> Tensor:
        """Fill `t.grad` with d(self)/d(t) for every live floating-point tensor t that self depends on, as tinygrad
        does: leaves and intermediates (self included), whatever their requires_grad unless it is False. What lies
        behind `detach()` takes no gradient. The gradient accumulates into .grad (clear it with an optimizer's
        zero_grad() or `t.grad = None`). Returns self.

        Examples:
            >>> x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
            >>> loss = (x * x).sum().backward()
            >>> x.grad.tolist()
            [2.0, 4.0, 6.0]
        """
        live = {id(t): t for ref in list(_live_float) if (t := ref()) is not None and t._requires_grad is not False}
        live.update(Tensor._grad_tensors)  # the parameters, however their requires_grad was set
        candidates = list(live.values())
        root, aliases = self._grad_graph(candidates)
        in_graph = _grad_reachable(root)
        targets = [t for t in candidates if any(u in in_graph for u in aliases(t))]
        if not targets:
            raise RuntimeError(f"backward() on a tensor that does not depend on any floating-point tensor that takes "
                               f"gradients: this one is {self.dtype}, requires_grad={self.requires_grad}; compute "
                               f"the loss in a float dtype from tensors without requires_grad=False")
        for t, g in zip(targets, self.gradient(*targets, gradient=gradient)):
            g = g.cast(t.dtype) if g.dtype != t.dtype else g
            # every tensor accumulates, as in tinygrad (and PyTorch for its leaves), until zero_grad or `.grad = None`
            if t.grad is None:
                t.grad = g
                continue
            unread = base_buffer(t.grad.uop) is None  # the sum so far was never realized
            t.grad = t.grad + g
            # A long-lived float tensor read by every eager step (a float dataset indexed per batch) would grow a
            # lazy sum holding every step's graph and buffers: after MAX_LAZY_GRAD_SUMS unread sums the sum is
            # realized, which bounds that memory and leaves the value as it is
            entry = _lazy_grad_sums.get(id(t))
            sums = (entry[1] if entry is not None and entry[0]() is t and unread else 0) + 1
            if sums >= MAX_LAZY_GRAD_SUMS:
                t.grad.realize()
                sums = 0
            _lazy_grad_sums[id(t)] = (weakref.ref(t, functools.partial(_forget_sums, id(t))), sums)
        return self


_clone_numbers = itertools.count()

#: backward() realizes a tensor's .grad after this many sums that nothing realized (see there)
MAX_LAZY_GRAD_SUMS = 8
#: id of a tensor -> (a weak reference to it, its unread sums); not a WeakKeyDictionary, which compares keys with
#: Tensor.__eq__ (elementwise)
_lazy_grad_sums: dict[int, tuple[weakref.ref[Tensor], int]] = {}


def _forget_sums(key: int, ref: weakref.ref[Tensor]) -> None:
    entry = _lazy_grad_sums.get(key)
    if entry is not None and entry[0] is ref:
        del _lazy_grad_sums[key]


def _grad_reachable(root: UOp) -> set[UOp]:
    """The nodes of root's graph that a gradient reaches: all of them but what lies behind a DETACH."""
    return set(post_order((root,), children=lambda n: () if n.op is Ops.DETACH else n.src))


def _deviceless(node: UOp) -> bool:
    """Whether a graph holds constants alone (no buffer, copy or bound variable): it can be computed on any device."""
    return node.device is None and not any(u.op is Ops.DEFINE_VAR or u.op is Ops.BIND for u in node.toposort())


def _list_to_numpy(data: list | tuple, want: DType | None) -> tuple[np.ndarray, DType | None]:
    """The array of a nested list, and the dtype its numbers take (None: the array's own, or object for junk)."""
    try:
        arr = np.array(data, dtype=to_numpy(want) if want is not None and not is_emulated_float(want) else None)
    except OverflowError:
        # a Python int outside an integer dtype's range wraps around, as a cast does (tinygrad and PyTorch)
        assert want is not None
        arr = np.array(data).astype(to_numpy(want))
    except ValueError as e:  # numpy's message talks about "inhomogeneous parts"; say what the user passed
        raise ValueError(f"cannot make a Tensor from {data!r}: nested lists must be rectangular and hold numbers "
                         f"({e})") from None
    if want is not None:
        return arr, want  # bfloat16 and the 8-bit floats keep float64 here: their upload rounds once, from the value
    if arr.dtype == np.float64:
        # Python floats take dtypes.default_float (float32, unless DEFAULT_FLOAT says otherwise)
        d = dtypes.default_float
        return (arr if is_emulated_float(d) else arr.astype(to_numpy(d))), d
    if arr.dtype == np.int64:
        # Python ints default to int32 (tinygrad's default_int) only where that loses nothing
        i32 = np.iinfo(np.int32)
        fits = arr.size == 0 or (int(arr.min()) >= i32.min and int(arr.max()) <= i32.max)
        return (arr.astype(np.int32), dtypes.int32) if fits else (arr, dtypes.int64)
    return arr, None


__all__ = ["Tensor", "broadcast_shape", "shape_args"]
