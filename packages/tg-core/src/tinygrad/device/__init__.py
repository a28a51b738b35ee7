"""Devices: the plugin registry, `Buffer`, and the device contract (defined in device/contract.py, re-exported here).

Backends are plugins. A backend package advertises an entry point in the group `tinygrad.backends`
naming a *light* module that implements the pluggy hook `tinygrad_backends()`; that hook returns
`BackendInfo` records whose `open` callable does the heavy imports (pyopencl, pycuda, ...) only when
the device is first used. A plugin that fails to import or to open is recorded with its reason and
never breaks `import tinygrad`.

Run `python -m tinygrad.device` to list what was found.
"""

from __future__ import annotations

import atexit
import functools
import importlib.metadata
import os
import pickle
import sys
import traceback
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pluggy

# the contract's names are defined in device/contract.py; backends and core import them from here
from tinygrad.device.contract import CONTRACT_VERSION, CPU_PRIORITY, Allocator, BackendHooks, BackendInfo, DeviceRuntime
from tinygrad.device.contract import DeviceKnobs as DeviceKnobs
from tinygrad.device.contract import Runner as Runner
from tinygrad.device.contract import hookimpl as hookimpl
from tinygrad.device.contract import hookspec as hookspec
from tinygrad.dtype import DType, dtypes, to_numpy
from tinygrad.errors import DeviceDTypeError
from tinygrad.helpers import DEBUG, DEV, GlobalCounters, Target

ENTRY_POINT_GROUP = "tinygrad.backends"
#: Set to 1 to skip entry-point discovery (register backends by hand with `Device.register`).
NO_AUTOLOAD_ENV = "TINYGRAD_NO_PLUGIN_AUTOLOAD"

# ---- buffers ----

#: buffers up to this many bytes are not checked against the device's limit (no device is that small): the check
#: opens the device, and the many small buffers of eager ops should not pay for a lookup
_UNCHECKED_BUFFER_BYTES = 1 << 24


def _check_buffer_fits(device: str, size: int, dtype: DType) -> None:
    limit = Device[device].allocator.max_buffer_bytes
    nbytes = size * dtype.itemsize
    if limit is not None and nbytes > limit:
        raise MemoryError(f"a buffer of {size} {dtype.name} elements ({_human_bytes(nbytes)}) does not fit on "
                          f"{device}, whose largest buffer is {_human_bytes(limit)}; split the tensor into smaller "
                          f"parts, compute a reduction of it without realizing it whole, or use another device")


def _human_bytes(n: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


@dataclass(frozen=True, slots=True)
class SharedMemory:
    """How a buffer's memory is shared with another owner (numpy, PyTorch, a C library): see `shared_buffers`."""

    #: what keeps imported memory valid while the buffer uses it (a DLPack producer and its capsule, a ctypes array);
    #: None when the caller promised to (Tensor.from_blob with an int address) or for exported memory of our own
    keepalive: Any = None
    #: False for memory the producer lent read-only: an assign into it raises
    writable: bool = True
    #: True for memory another owner allocated (never freed here); False for the buffer's own memory, lent out
    external: bool = True


#: Buffers whose memory another library may read or write behind the engine's back: imported (Tensor.from_blob,
#: Tensor.from_dlpack) or exported (DLPack). The engine's caches assume a buffer changes only by its own kernels, so
#: for these it reuses no result computed from them (the memory may have changed since), keeps views of them
#: reading the memory, and writes an assign into them into the memory itself (tinygrad/dlpack.py). Empty in a
#: program that shares nothing, where the checks cost one test of this mapping's length.
shared_buffers: weakref.WeakKeyDictionary[Buffer, SharedMemory] = weakref.WeakKeyDictionary()


def wraps_external(device: str) -> bool:
    """Whether `device`'s allocator can use memory allocated elsewhere in place (the optional `wrap_external`)."""
    return getattr(Device[device].allocator, "wrap_external", None) is not None


class Buffer:
    """`size` elements of `dtype` on `device`. Memory is allocated on first use and freed with the object."""

    # slots: every eager op makes a Buffer, and one without a __dict__ is smaller and quicker to make and fill
    __slots__ = ("__weakref__", "_allocator", "_node", "_opaque", "base", "device", "dtype", "size")

    def __init__(self, device: str, size: int, dtype: DType, base: Buffer | None = None):
        if size < 0:
            raise ValueError(f"a buffer cannot have a negative size ({size})")
        self.device: str = device
        self.size: int = size
        self.dtype: DType = dtype
        if base is not None and (base.device != device or base.nbytes < self.nbytes):
            raise ValueError(f"a buffer of {self.nbytes} bytes on {device} cannot alias {base}")
        if base is None and self.nbytes > _UNCHECKED_BUFFER_BYTES:
            _check_buffer_fits(device, size, dtype)
        self._opaque: Any = None
        self._allocator: Allocator | None = None
        #: the graph's BUFFER node for this buffer, while it lives (uop/ops.py: buffer_node)
        self._node: weakref.ref | None = None
        # with a base, this buffer is another name for the start of base's memory (the engine's memory planner
        # and in-place writes use that); the base owns the memory and is kept alive by this reference.
        # Buffer.allocated fills these attributes too, and must follow any change
        self.base: Buffer | None = base.base or base if base is not None else None

    @classmethod
    def allocated(cls, device: str, size: int, dtype: DType, allocator: Allocator) -> Buffer:
        """A new buffer (no base) with its memory, from `allocator` (the device's). For a caller that already knows
        the size is valid for the device, as the eager dispatch path does for the outputs it makes again and again:
        it skips __init__'s checks and ensure_allocated's lookups, and fills the same attributes."""
        buf = cls.__new__(cls)
        buf.device, buf.size, buf.dtype, buf._node, buf.base = device, size, dtype, None, None
        nbytes = max(size * dtype.itemsize, 1)  # as ensure_allocated: a valid pointer even when empty
        buf._opaque = opaque = allocator.alloc(nbytes)
        buf._allocator = allocator
        _own_memory(buf, allocator, opaque, nbytes)
        return buf

    @classmethod
    def external(cls, device: str, size: int, dtype: DType, address: int, keepalive: Any = None,
                 writable: bool = True) -> Buffer:
        """A buffer over `size` elements of `dtype` at `address`, memory that another owner allocated and keeps
        valid (held alive through `keepalive`, if given, for as long as the buffer lives): used in place, never freed
        here. The device's allocator must offer `wrap_external` (see `wraps_external`)."""
        allocator = Device[device].allocator
        wrap = getattr(allocator, "wrap_external", None)
        if wrap is None:
            raise NotImplementedError(f"{device} cannot use memory allocated elsewhere in place (its allocator has no "
                                      f"wrap_external); copy the data in instead")
        buf = cls(device, size, dtype)
        if buf.nbytes == 0 or not address:
            raise ValueError(f"an external buffer needs a non-null address and at least one byte, got {address:#x} "
                             f"for {size} {dtype.name} elements")
        buf._opaque, buf._allocator = wrap(address, buf.nbytes), allocator
        shared_buffers[buf] = SharedMemory(keepalive, writable, external=True)
        return buf

    @property
    def shared(self) -> SharedMemory | None:
        """How this buffer's memory is shared with another library (None when it is not: see `shared_buffers`)."""
        return shared_buffers.get(self.storage) if shared_buffers else None

    def __reduce_ex__(self, protocol: Any) -> tuple:
        # what the buffer is, and its bytes when it holds any (an unallocated buffer has no value to keep). With
        # protocol 5 the bytes go as a PickleBuffer: a `buffer_callback` then takes them out of band, and memory on
        # the host is handed over without a copy
        if self.base is not None:
            return Buffer, (self.device, self.size, self.dtype, self.base)
        if self._opaque is None:
            return Buffer, (self.device, self.size, self.dtype)
        data: Any = self.host_array() if self.nbytes else None
        if data is None:
            data = self.numpy()
        data = data.view(np.uint8)
        # the bytes as the state, not in the arguments: pickle keeps every argument tuple (memo) to the end of a
        # dump or load, and with them each buffer's bytes, while the state is dropped once it is applied
        return Buffer, (self.device, self.size, self.dtype), pickle.PickleBuffer(data) if protocol >= 5 else \
            data.tobytes()

    def __setstate__(self, data: Any) -> None:
        """pickle's: the bytes __reduce_ex__ gave, into memory of this buffer's own, allocated here."""
        self.ensure_allocated().copyin(memoryview(data).cast("B"))

    def __repr__(self) -> str:
        return f"<buf {self.device} {self.dtype.name}[{self.size}]{'' if self.is_allocated else ' unallocated'}>"

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def storage(self) -> Buffer:
        """The buffer that owns this one's memory: its base, or itself."""
        return self.base if self.base is not None else self

    @property
    def is_allocated(self) -> bool:
        return self._opaque is not None

    def ensure_allocated(self, allocator: Allocator | None = None) -> Buffer:
        """Allocate the memory if it is not yet there (`allocator`: the device's, when the caller has it at hand)."""
        if self._opaque is None and self.base is not None:
            self._opaque = self.base.ensure_allocated()._opaque
            self._allocator = self.base._allocator
        if self._opaque is None:
            self._allocator = allocator or Device[self.device].allocator
            # zero-sized buffers still get a 1-byte allocation so that every kernel argument is a valid pointer
            nbytes = max(self.nbytes, 1)
            self._opaque = self._allocator.alloc(nbytes)
            _own_memory(self, self._allocator, self._opaque, nbytes)
        return self

    def deallocate(self) -> int:
        """Give this buffer's own memory back now, rather than when the buffer dies (a TinyJit capture's
        free_intermediates); the next use allocates it again, with its contents lost. Returns the bytes freed."""
        if self.base is not None or self._opaque is None:
            return 0
        if shared_buffers and self in shared_buffers:
            return 0  # another owner's memory, or ours lent out (DLPack) that a consumer may still read: kept
        ref = next((r for r in _owned_memory if r() is self and r.nbytes), None)
        self._opaque = None
        if ref is None:  # memory this buffer does not own: just forget it
            return 0
        # emptied and out of the table: live weak references to one buffer are equal keys, so the next allocation's
        # reference must not find this one there. Its callback still runs when the buffer dies, and frees nothing
        nbytes, ref.nbytes = ref.nbytes, 0
        del _owned_memory[ref]
        ref.allocator.free(ref.opaque, nbytes)
        GlobalCounters.mem_used -= nbytes
        return nbytes

    def forget_memory(self) -> None:
        """A view of a buffer whose memory was given back: look the address up again at its next use."""
        if self.base is not None:
            self._opaque = None

    @property
    def opaque(self) -> Any:
        opaque = self._opaque  # read on every launch: no call when the memory is there
        return opaque if opaque is not None else self.ensure_allocated()._opaque

    def copyin(self, data: memoryview) -> Buffer:
        if data.nbytes != self.nbytes:
            raise ValueError(f"copyin of {data.nbytes} bytes into a buffer of {self.nbytes} bytes ({self})")
        self.ensure_allocated()
        assert self._allocator is not None
        if self.nbytes:
            self._allocator.copyin(self._opaque, data)
        return self

    def copyout(self, dest: memoryview) -> memoryview:
        if dest.nbytes != self.nbytes:
            raise ValueError(f"copyout of a buffer of {self.nbytes} bytes into {dest.nbytes} bytes ({self})")
        self.ensure_allocated()
        assert self._allocator is not None
        Device[self.device].synchronize()
        if self.nbytes:
            self._allocator.copyout(dest, self._opaque)
        return dest

    def host_array(self) -> np.ndarray | None:
        """The buffer's memory as a flat numpy array, in place, where its device's memory is host memory (an
        allocator with the optional `host_view`), after the device's pending work; None elsewhere."""
        self.ensure_allocated()
        host_view = getattr(self._allocator, "host_view", None)
        if host_view is None:
            return None
        Device[self.device].synchronize()  # a kernel still running may write it
        return np.frombuffer(host_view(self._opaque, self.nbytes), dtype=to_numpy(self.dtype))

    def numpy(self) -> np.ndarray:
        if self.nbytes and (memory := self.host_array()) is not None:  # host memory: one copy
            return memory.copy()
        out = np.empty(self.size, dtype=to_numpy(self.dtype))
        self.copyout(out.data.cast("B"))
        return out


class _Memory(weakref.ref["Buffer"]):
    """A weak reference to a Buffer that carries the memory it allocated, for the callback that frees it."""

    __slots__ = ("allocator", "nbytes", "opaque")
    allocator: Allocator
    opaque: Any
    nbytes: int


#: the weak reference of each live Buffer that allocated memory. The reference's callback frees the memory when the
#: buffer dies, and whatever is left at interpreter exit is freed then, newest first: what weakref.finalize does,
#: with a fraction of its Python per buffer (an eager op allocates one)
_owned_memory: dict[_Memory, None] = {}


def _own_memory(buf: Buffer, allocator: Allocator, opaque: Any, nbytes: int) -> None:
    if not _owned_memory:
        _register_exit_once()
    ref = _Memory(buf, _free_owned)
    ref.allocator, ref.opaque, ref.nbytes = allocator, opaque, nbytes
    _owned_memory[ref] = None
    GlobalCounters.mem_used += nbytes


def _free_owned(ref: _Memory) -> None:
    if not ref.nbytes:  # given back early by Buffer.deallocate, and already out of the table
        return
    del _owned_memory[ref]
    ref.allocator.free(ref.opaque, ref.nbytes)
    GlobalCounters.mem_used -= ref.nbytes


@functools.cache
def _register_exit_once() -> None:
    # registered with the first allocation, as weakref.finalize registers itself with its first use: exit handlers
    # run last-registered first, so backends opened before that are still usable when their memory is freed
    atexit.register(_free_all_owned)


def _free_all_owned() -> None:
    while _owned_memory:
        _free_owned(next(reversed(_owned_memory)))


# ---- the registry ----

@dataclass
class BrokenPlugin:
    entry_point: str
    package: str
    version: str
    reason: str


@dataclass
class _State:
    discovered: bool = False
    backends: dict[str, BackendInfo] = field(default_factory=dict)
    broken: list[BrokenPlugin] = field(default_factory=list)
    opened: dict[str, DeviceRuntime] = field(default_factory=dict)
    manager: pluggy.PluginManager | None = None


class UnknownDeviceError(ValueError):
    pass


def _major(version: str) -> int:
    try:
        return int(version.split(".")[0])
    except ValueError:
        return -1


class _DeviceRegistry:
    """`Device["CPU"]` opens a device; `Device.DEFAULT` is the one tensors land on."""

    def __init__(self) -> None:
        self._state = _State()
        self._default: str | None = None

    # discovery
    def _plugin_manager(self) -> pluggy.PluginManager:
        if self._state.manager is None:
            pm = pluggy.PluginManager("tinygrad")
            pm.add_hookspecs(BackendHooks)
            self._state.manager = pm
        return self._state.manager

    def _discover(self) -> None:
        if self._state.discovered:
            return
        self._state.discovered = True
        if os.environ.get(NO_AUTOLOAD_ENV, "0") not in ("", "0"):
            return
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = getattr(ep, "dist", None)
            package = dist.name if dist is not None else "?"
            version = dist.version if dist is not None else "?"
            try:
                module = ep.load()
                self.register_plugin(module, name=ep.name, package=package, version=version)
            except Exception as e:  # a broken plugin must never break import tinygrad
                reason = f"{type(e).__name__}: {e}"
                self._state.broken.append(BrokenPlugin(ep.name, package, version, reason))
                if DEBUG >= 3:
                    traceback.print_exc()

    def register_plugin(self, module: object, name: str | None = None, package: str = "", version: str = "") -> None:
        """Register a plugin module (or object) implementing `tinygrad_backends`, as discovery would."""
        pm = self._plugin_manager()
        plugin_name = str(name or getattr(module, "__name__", None) or repr(module))
        if pm.has_plugin(plugin_name):
            pm.unregister(name=plugin_name)
        pm.register(module, name=plugin_name)
        if not any(impl.plugin_name == plugin_name for impl in pm.hook.tinygrad_backends.get_hookimpls()):
            pm.unregister(name=plugin_name)
            unmarked = callable(getattr(module, "tinygrad_backends", None))
            raise TypeError(f"plugin {plugin_name} has no tinygrad_backends() hook" + (
                "; its tinygrad_backends function needs the @tinygrad.device.hookimpl decorator" if unmarked else ""))
        # the hook of this plugin alone: each plugin's backends are recorded with its package, and a plugin whose
        # hook raises is reported as broken without hiding the backends of the others
        others = [p for p in pm.get_plugins() if pm.get_name(p) != plugin_name]
        results = pm.subset_hook_caller("tinygrad_backends", remove_plugins=others)()
        if not results:  # pluggy leaves out a None result
            raise TypeError(f"plugin {plugin_name}'s tinygrad_backends() returned None; return a list of BackendInfo")
        for info in results[0]:
            info.package = info.package or package
            info.version = info.version or version
            self.register(info, source=plugin_name)

    def register(self, info: BackendInfo, source: str = "") -> None:
        """Register one backend by hand (tests, or a backend that is not an installed package)."""
        self._discover()
        if _major(info.contract_version) != _major(CONTRACT_VERSION):
            reason = (f"backend {info.name} from {info.package or source or '?'} implements device contract "
                      f"{info.contract_version}, but this tinygrad core implements {CONTRACT_VERSION}; install a "
                      f"version of {info.package or 'the backend'} built for contract {_major(CONTRACT_VERSION)}.x "
                      f"(or a tg-core matching contract {info.contract_version})")
            self._state.broken.append(BrokenPlugin(source or info.name, info.package, info.version, reason))
            return
        self._state.backends[info.name.upper()] = info
        self._default = None

    def unregister(self, name: str) -> None:
        self._state.backends.pop(name.upper(), None)
        for key in [k for k in self._state.opened if k.split(":")[0] == name.upper()]:
            del self._state.opened[key]
        self._default = None

    @property
    def backends(self) -> dict[str, BackendInfo]:
        self._discover()
        return dict(self._state.backends)

    @property
    def broken(self) -> list[BrokenPlugin]:
        self._discover()
        return list(self._state.broken)

    def software(self, name: str) -> str | None:
        """What a backend runs on when it is software on the host CPU (its `BackendInfo.software`), else None. A probe
        that fails counts as hardware: the ranking then keeps the backend's priority, as before probes existed."""
        info = self.backends.get(name.upper())
        if info is None:
            return None
        try:
            return info.software()
        except Exception:  # `python -m tinygrad.device` shows the failure; choosing a device must not raise for it
            return None

    def ranking(self) -> list[str]:
        """The usable backends in the order Device.DEFAULT chooses from (without DEV): by priority, except that a
        device running in software on the host CPU ranks right after the CPU backend (as if its priority were the
        CPU backend's, and behind it), ahead only of backends meant for explicit use (priority past the CPU's)."""
        usable = [name for name in self._by_priority() if self.availability(name) is None]
        return sorted(usable, key=lambda name: self._rank(name, self.software(name) is not None))

    def _by_priority(self) -> list[str]:
        return [name for name, _ in sorted(self.backends.items(), key=lambda kv: (kv[1].priority, kv[0]))]

    def _rank(self, name: str, software: bool) -> tuple[int, bool, int, str]:
        priority = self._state.backends[name].priority
        if not software:
            return priority, False, priority, name
        cpu = self._state.backends.get("CPU")
        return max(priority, cpu.priority if cpu is not None else CPU_PRIORITY), True, priority, name

    def availability(self, name: str) -> str | None:
        """None if the backend can be used, else the reason it cannot."""
        info = self.backends.get(name.upper())
        if info is None:
            return f"no backend named {name}"
        try:
            return info.check()
        except Exception as e:
            return f"{type(e).__name__}: {e}"

    # lookup
    def canonicalize(self, device: str | None) -> str:
        if device is None:
            return self.DEFAULT
        name, _, num = device.partition(":")
        name = name.upper()
        if name == "DISK":  # core's own device for files: what follows ':' is a path (tinygrad/device/disk.py)
            if not num:
                raise UnknownDeviceError(f"device {device!r} names no file: write disk:/path/to/file")
            return f"DISK:{num}"
        if num and not num.isdigit():
            raise UnknownDeviceError(f"device {device!r}: the part after ':' must be a device number, like {name}:1")
        self._discover()
        if name not in self._state.backends:  # not self.backends, which copies the table: every Tensor() asks
            refused = [b.reason for b in self.broken if name in b.reason or b.entry_point.upper() == name]
            if refused:
                raise UnknownDeviceError(f"device {device!r} was found but not loaded: {'; '.join(refused)}")
            raise UnknownDeviceError(
                f"unknown device {device!r}; available backends: {sorted(self.backends)}. "
                f"Install the backend's package (for example tg-backend-{name.lower()}) or pick one of those; "
                f"`python -m tinygrad.device` lists what was found and why some are unavailable")
        return name if not num or num == "0" else f"{name}:{num}"

    def __getitem__(self, device: str) -> DeviceRuntime:
        if (dev := self._state.opened.get(device)) is not None:  # an open device by its canonical name: every launch
            return dev
        key = self.canonicalize(device)
        if (dev := self._state.opened.get(key)) is not None:
            return dev
        if key.startswith("DISK:"):
            from tinygrad.device.disk import DiskDevice
            disk = self._state.opened[key] = DiskDevice(key)
            return disk
        name, _, num = key.partition(":")
        info = self._state.backends[name]
        reason = self.availability(name)
        if reason is not None:
            raise RuntimeError(f"device {key} is unavailable: {reason}")
        try:
            dev = info.open(int(num or 0))
        except Exception as e:
            raise RuntimeError(f"opening device {key} from {info.package or 'a hand-registered plugin'} failed: "
                               f"{type(e).__name__}: {e}") from e
        self._state.opened[key] = dev
        if DEBUG >= 1:
            print(f"opened device {key} from {info.package or 'a hand-registered plugin'}", file=sys.stderr)
        return dev

    @property
    def DEFAULT(self) -> str:
        if self._default is not None:
            return self._default
        requested = os.environ.get("DEV")
        if requested:
            key = self.canonicalize(_default_device_of(requested))
            reason = self.availability(key.split(":")[0])
            if reason is not None:
                raise RuntimeError(f"DEV={requested} asks for an unavailable device: {reason}")
            self._default = key
            return key
        # the first of `ranking()`, probing `software` only up to the first usable hardware backend: no backend after
        # that one ranks before it, and no software device after the first one met ranks before that one
        chosen: str | None = None
        for name in self._by_priority():
            if self.availability(name) is not None:
                continue
            if self.software(name) is not None:
                chosen = chosen or name
                continue
            if chosen is None or self._rank(name, False) < self._rank(chosen, True):
                chosen = name
            break
        if chosen is not None:
            self._default = chosen
            return chosen
        raise RuntimeError("no usable tinygrad backend was found; install one, for example `pip install tg-backend-cpu`"
                           f" (broken plugins: {[b.reason for b in self.broken] or 'none'})")

    @DEFAULT.setter
    def DEFAULT(self, device: str) -> None:
        self._default = self.canonicalize(device)

    def reset_default(self) -> None:
        self._default = None


def _default_device_of(dev: str) -> str:
    """The device that DEV's first entry names: `CPU:LLVM` is CPU with the LLVM renderer (which the CPU backend
    reads from DEV), `CPU:1` is this project's spelling of the second CPU device."""
    try:
        first = DEV.targets[0] if dev == DEV.value else Target.parse(dev.split(";")[0])
    except ValueError as e:
        raise UnknownDeviceError(f"DEV={dev!r}: {e}") from None
    return f"{first.device}:{first.renderer}" if first.renderer.isdigit() else first.device


Device = _DeviceRegistry()


def dtype_error(dtype: DType, device: str) -> TypeError:
    dev = Device[device]
    ok = [d.name for d in dtypes.all() if dev.supports_dtype(d)]
    return DeviceDTypeError(f"device {device} cannot hold {dtype.name}; it supports {ok}. Cast the tensor "
                     f"(for example .cast(dtypes.float32)) or move it to a device that supports {dtype.name}")
