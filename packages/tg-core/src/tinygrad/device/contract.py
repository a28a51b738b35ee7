"""The device contract: what a backend implements and what core asks of an opened device.

A backend's plugin module implements the pluggy hook `tinygrad_backends()` (`BackendHooks`, marked with `hookimpl`)
and returns `BackendInfo` records; an opened device (`DeviceRuntime`) has an `Allocator` for its memory, gives a
`Runner` for each kernel and declares its tuning `DeviceKnobs`. docs/device-contract.md is the reference.

Kept apart from the registry (tinygrad/device/__init__.py, which re-exports every name here) so that the devices
core itself provides, as DISK (device/disk.py), build on the contract without importing the registry that opens
them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import pluggy

if TYPE_CHECKING:
    from tinygrad.device import Buffer
    from tinygrad.dtype import DType
    from tinygrad.uop.ops import UOp

#: The version of the device contract this core implements. A plugin built for another major version is refused.
CONTRACT_VERSION = "2.0"
#: the CPU backend's priority: hardware backends take less, backends meant only for explicit use (an oracle) more.
#: A software device on the host CPU ranks right after the registered CPU backend, or after this without one
CPU_PRIORITY = 1000

hookspec = pluggy.HookspecMarker("tinygrad")
hookimpl = pluggy.HookimplMarker("tinygrad")


class BackendHooks:
    """The hook specification a backend's plugin module implements."""

    @hookspec
    def tinygrad_backends(self) -> Sequence[BackendInfo]:  # type: ignore[empty-body]
        """Return the backends this plugin provides. Must be cheap: no heavy imports here."""


@dataclass
class BackendInfo:
    name: str  # the device name users type: "CPU", "CL", ...
    contract_version: str  # the device contract the backend implements, "MAJOR.MINOR"
    open: Callable[[int], DeviceRuntime]  # open device number N; heavy imports happen here
    check: Callable[[], str | None] = lambda: None  # None when usable, else why not
    #: lower wins when choosing Device.DEFAULT; CPU uses CPU_PRIORITY (1000) so it comes last among hardware
    priority: int = 100
    description: str = ""
    #: an optional remark `python -m tinygrad.device` shows next to "available" (for example that the backend
    #: runs on a stand-in for its real hardware); None for none
    note: Callable[[], str | None] = lambda: None
    #: None when the device is hardware of its own (a GPU, an accelerator, or the native CPU backend itself); else
    #: what runs it in software on the host CPU, in a few words ("PoCL, OpenCL on the host CPU"). Such a device ranks
    #: after the CPU backend when Device.DEFAULT is chosen (and after every hardware backend): it computes on the same
    #: cores as the CPU backend, through a layer built for other hardware. `DEV=` still picks it. Called only for an
    #: available backend and only when the ranking reaches it, so it may open the driver as `check` does (cache it)
    software: Callable[[], str | None] = lambda: None
    package: str = ""  # the distribution that provided it (filled in by discovery)
    version: str = ""


# ---- the contract: what core needs from an opened device ----

class Allocator(ABC):
    """Device memory. `copyin`/`copyout` move bytes between host memoryviews and device buffers."""

    #: the largest single buffer the device can hold, in bytes (None: no known limit). A larger `Buffer` is refused
    #: when it is made, with a MemoryError that names its size, before any kernel runs.
    max_buffer_bytes: int | None = None

    @abstractmethod
    def alloc(self, nbytes: int) -> Any: ...

    @abstractmethod
    def free(self, opaque: Any, nbytes: int) -> None: ...

    @abstractmethod
    def copyin(self, dest: Any, src: memoryview) -> None: ...

    @abstractmethod
    def copyout(self, dest: memoryview, src: Any) -> None: ...

    # Optional: `wrap_external(address, nbytes) -> opaque`, memory at `address` that another owner allocated and keeps
    # valid (Tensor.from_blob, DLPack imports), as a buffer's handle without a copy. Such a handle is never passed to
    # `free`. A device without it takes host memory by copying it in (`wraps_external` tells which).


@dataclass(frozen=True)
class DeviceKnobs:
    """What the layers that tune code without knowing the device ask of it: the hand-coded heuristics that
    choose a kernel's opts (tg-compiler) and the scheduler's layout pass that chooses operands' layouts (core). Core
    holds no values: a device's renderer declares them (`Renderer` in tg-compiler documents the defaults)."""

    #: bytes of one core's L2 cache; the tuning sizes the working sets it keeps there to half of it
    l2_cache_bytes: int
    #: bytes of one SIMD register (64 for AVX-512)
    simd_bytes: int
    #: SIMD registers a kernel's accumulators may take (a register tile uses at most half of them)
    vector_registers: int
    #: input channels from which a convolution's weight gradient reads a channels-last copy of its input and of
    #: the output gradient (which gives the compiler a SIMD direction); 0: the copies never pay on this device
    channels_last_min: int
    #: whether a padded convolution reads a copy of its input with the zero border written out (one small kernel)
    #: instead of testing the border in its inner loop; pays where the compiler vectorises the copy's own border
    #: tests (False for targets that were not measured)
    conv_border_copy: bool = False
    #: whether a convolution with a window (wider than one) whose output rows are shorter than a register and leave
    #: part of its last half empty (10, 12 or 14 of 16 floats) reads a channels-last weight and tiles its output
    #: channels times images instead of its rows; pays where the compiler builds that tile well (the LLVM path's;
    #: not clang's, measured)
    uneven_rows_channels_last: bool = False

    def simd_lanes(self, dtype: DType) -> int:
        """Elements of `dtype` in one SIMD register."""
        return max(1, self.simd_bytes // dtype.itemsize)


class Runner(Protocol):
    display_name: str
    global_size: tuple[int, ...] | None
    estimated_ops: int
    estimated_bytes: int

    def __call__(self, bufs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None: ...


class DeviceRuntime(Protocol):
    name: str
    allocator: Allocator

    def get_runner(self, ast: UOp) -> Runner: ...
    def supports_dtype(self, dtype: DType) -> bool: ...
    def synchronize(self) -> None: ...

    @property
    def knobs(self) -> DeviceKnobs: ...
