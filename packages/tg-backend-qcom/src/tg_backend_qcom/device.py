"""The QCOM device: one device of the platform `tg_backend_qcom.platform` chooses, with the OpenCL backend's
compiler, queue and launcher, plus image views of read-only float buffers and work-group limit checks."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from typing import Any

import pyopencl as cl
from tg_backend_opencl.device import CLAllocator, CLDevice, CLProgram
from tinygrad.codegen import ProgramSpec
from tinygrad.dtype import DType
from tinygrad.helpers import prod
from tinygrad.runtime.device import Compiled

from tg_backend_qcom.compiler import QCOMCompiler, QCOMLibrary
from tg_backend_qcom.platform import choose_platform
from tg_backend_qcom.renderer import CHANNEL_TYPES, TEXEL_ELEMENTS, QCOMRenderer

IMAGE_ENV = "IMAGE"
#: bytes per RGBA texel, by channel type
TEXEL_BYTES = {"FLOAT": 4 * TEXEL_ELEMENTS, "HALF_FLOAT": 2 * TEXEL_ELEMENTS}
#: allocations are rounded up to a whole float32 RGBA texel, so that an image view covers every element even when
#: the element count is not a multiple of 4 (the padding is never read: indices stay below the element count)
ALLOC_ALIGN = max(TEXEL_BYTES.values())


class WorkGroupTooLarge(RuntimeError):
    """A launch's local size is over the device's or this kernel's work-group limit."""


class QCOMAllocator(CLAllocator):
    def __init__(self, context: cl.Context, queue: cl.CommandQueue, image_max_texels: int):
        super().__init__(context, queue)
        self.image_max_texels = image_max_texels
        self._views: dict[tuple[int, str], cl.Image] = {}  # (buffer address, channel type) -> image view
        #: objects released only once the queue has run past a marker: [(marker event, objects)], oldest first
        self._retired: list[tuple[cl.Event, tuple[Any, ...]]] = []
        self.snapshots = 0  # how many launches read a buffer they also write through a copy (tests count them)

    def alloc(self, nbytes: int) -> cl.Buffer:
        self.release_finished()
        return super().alloc(-(-max(nbytes, 1) // ALLOC_ALIGN) * ALLOC_ALIGN)

    def free(self, opaque: cl.Buffer, nbytes: int) -> None:
        # a view must not outlive its memory, nor be released while a queued kernel still reads it
        views = [self._views.pop(key) for key in [k for k in self._views if k[0] == opaque.int_ptr]]
        self.retire(*views, opaque)

    def retire(self, *objects: Any) -> None:
        """Release `objects` (image views, snapshot copies, freed buffers) once every command queued so far has
        run. PoCL reads an image argument's descriptor only when the kernel executes and does not keep the image
        alive for it: releasing a view right after the launch was queued crashed its worker threads
        (pocl_fill_dev_image_t on freed memory). The queue is in order, so a marker completes after them all."""
        if objects:
            try:
                marker = cl.enqueue_marker(self.queue)
            except cl.Error:  # the queue is gone (interpreter shutdown): nothing can still be reading them
                for obj in objects:
                    obj.release()
            else:
                self._retired.append((marker, objects))
        self.release_finished()

    def release_finished(self, everything: bool = False) -> None:
        """Release what was retired before a completed marker (`everything`: the queue is known to be idle)."""
        done = cl.command_execution_status.COMPLETE
        while self._retired and (everything or self._retired[0][0].command_execution_status == done):
            for obj in self._retired.pop(0)[1]:
                obj.release()

    def image_view(self, buf: cl.Buffer, channel_type: str) -> cl.Image:
        """The RGBA image1d_buffer over `buf`'s memory (made once per buffer and channel type). Its width is
        clamped to the device limit: the renderer only makes images of buffers whose elements fit in it."""
        key = (buf.int_ptr, channel_type)
        if (view := self._views.get(key)) is None:
            view = self._views[key] = _image_over(self.context, buf, channel_type, self.image_max_texels)
        return view

    def snapshot_view(self, buf: cl.Buffer, channel_type: str) -> tuple[cl.Image, cl.Buffer]:
        """An image view of a copy of `buf` as it is now (queued before the kernel that reads it), and the copy.
        Not cached: the caller retires both once the kernel is queued."""
        copy = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, size=buf.size)
        cl.enqueue_copy(self.queue, copy, buf)
        self.snapshots += 1
        return _image_over(self.context, copy, channel_type, self.image_max_texels), copy


def _image_over(context: cl.Context, buf: cl.Buffer, channel_type: str, max_texels: int) -> cl.Image:
    desc = cl.ImageDescriptor()
    desc.image_type = cl.mem_object_type.IMAGE1D_BUFFER
    desc.shape = (min(buf.size // TEXEL_BYTES[channel_type], max_texels), 0, 0)  # 1D: no height
    desc.buffer = buf
    fmt = cl.ImageFormat(cl.channel_order.RGBA, getattr(cl.channel_type, channel_type))
    return cl.Image(context, cl.mem_flags.READ_ONLY, fmt, desc=desc)


def check_local_size(local_size: Sequence[int], item_sizes: Sequence[int], device_max: int, kernel_max: int,
                     kernel: str) -> None:
    """Refuse a local size the device or the built kernel cannot run, with the limits in the message."""
    if len(local_size) > len(item_sizes) or any(ls > mx for ls, mx in zip(local_size, item_sizes)):
        raise WorkGroupTooLarge(f"kernel {kernel}: local size {tuple(local_size)} is over the device's per-dimension "
                                f"limits {tuple(item_sizes)} (CL_DEVICE_MAX_WORK_ITEM_SIZES)")
    limit = min(device_max, kernel_max)
    if prod(local_size) > limit:
        raise WorkGroupTooLarge(f"kernel {kernel}: local size {tuple(local_size)} has {prod(local_size)} work-items, "
                                f"over this kernel's limit of {limit} (CL_DEVICE_MAX_WORK_GROUP_SIZE {device_max}, "
                                f"CL_KERNEL_WORK_GROUP_SIZE {kernel_max}); use a smaller local size")


class QCOMProgram(CLProgram):
    def __init__(self, device: QCOMDevice, spec: ProgramSpec, lib: bytes):
        library = QCOMLibrary.unpack(lib)
        super().__init__(device, spec, library.binary)
        self.qcom = device
        self.image_args = library.image_args
        info = cl.kernel_work_group_info
        #: what this kernel can launch as one work-group (registers and local memory make it kernel-specific;
        #: on Adreno a kernel with many live values gets less than the device's CL_DEVICE_MAX_WORK_GROUP_SIZE)
        self.max_work_group_size = int(self.kernel.get_work_group_info(info.WORK_GROUP_SIZE, device.device))
        #: a kernel with __local memory depends on its local size (partial results per work-item, barriers);
        #: one without only indexes by get_global_id, so its local size is a hint
        self.uses_local_memory = int(self.kernel.get_work_group_info(info.LOCAL_MEM_SIZE, device.device)) > 0

    def __call__(self, *bufs: Any, global_size: tuple[int, ...] | None = None,
                 local_size: tuple[int, ...] | None = None, vals: tuple[int, ...] = (),
                 wait: bool = False) -> float | None:
        if local_size:
            dev = self.qcom.device
            try:
                check_local_size(local_size, dev.max_work_item_sizes, dev.max_work_group_size,
                                 self.max_work_group_size, self.name)
            except WorkGroupTooLarge:
                if self.uses_local_memory:
                    raise
                local_size = None  # a hint this kernel cannot take: the driver picks a group size it can run
        args, snapshots = self.bind_images(bufs)
        try:
            return super().__call__(*args, global_size=global_size, local_size=local_size, vals=vals, wait=wait)
        finally:
            self.qcom.qcom_allocator.retire(*snapshots)

    def prepare(self, *bufs: Any, global_size: tuple[int, ...] | None = None,
                local_size: tuple[int, ...] | None = None, vals: tuple[int, ...] = ()) -> Callable[[], float | None]:
        """A launch TinyJit replays. Explicit so that it always goes through `__call__` (image views, snapshots,
        limit checks), whatever CLProgram offers."""
        return functools.partial(self, *bufs, global_size=global_size, local_size=local_size, vals=vals)

    def bind_images(self, bufs: Sequence[cl.Buffer]) -> tuple[list[Any], list[Any]]:
        """The kernel's arguments: image views where it reads images, the buffers elsewhere; and the snapshot
        objects made for this launch (to retire after it is queued). A buffer that is also written by this launch
        (the same memory passed as an output) is read from a snapshot instead: an image and a writable buffer
        over one memory object in one kernel is undefined in OpenCL, and a texture cache need not see the
        kernel's own writes."""
        allocator = self.qcom.qcom_allocator
        written = {b.int_ptr for i, b in enumerate(bufs) if i not in self.image_args}
        args: list[Any] = []
        snapshots: list[Any] = []
        for i, b in enumerate(bufs):
            if i not in self.image_args:
                args.append(b)
            elif b.int_ptr in written:
                view, copy = allocator.snapshot_view(b, self.image_args[i])
                args.append(view)
                snapshots += [view, copy]
            else:
                args.append(allocator.image_view(b, self.image_args[i]))
        return args, snapshots


def image_dtypes_of(device: cl.Device, context: cl.Context) -> frozenset[DType]:
    """The float dtypes whose RGBA format this device supports for read-only 1D buffer images."""
    if not device.image_support:
        return frozenset()
    formats = cl.get_supported_image_formats(context, cl.mem_flags.READ_ONLY, cl.mem_object_type.IMAGE1D_BUFFER)
    have = {(f.channel_order, f.channel_data_type) for f in formats}
    return frozenset(d for d, ctype in CHANNEL_TYPES.items()
                     if (cl.channel_order.RGBA, getattr(cl.channel_type, ctype)) in have)


def images_requested(supported: bool, device_name: str) -> bool:
    """IMAGE=0/1 from the environment; unset: on where the device supports images."""
    value = os.environ.get(IMAGE_ENV, "").strip()
    if value == "":
        return supported
    if value not in ("0", "1"):
        raise ValueError(f"{IMAGE_ENV}={value!r}: use IMAGE=1 (read-only float buffers through images) or IMAGE=0")
    if value == "1" and not supported:
        raise RuntimeError(f"{IMAGE_ENV}=1, but the OpenCL device {device_name} cannot make RGBA float images of "
                           f"buffers; unset {IMAGE_ENV} or set {IMAGE_ENV}=0")
    return value == "1"


class QCOMDevice(CLDevice):
    def __init__(self, index: int = 0, images: bool | None = None):
        """Device number `index` of the chosen platform. `images`: read read-only float buffers through images
        (None: from IMAGE, else on where supported)."""
        choice = choose_platform(cl.get_platforms())
        self.stand_in, self.platform = choice.stand_in, choice.platform
        devices = choice.platform.get_devices()
        if not 0 <= index < len(devices):
            listed = ", ".join(f"QCOM:{i} = {d.name}" for i, d in enumerate(devices))
            raise RuntimeError(f"there is no QCOM device number {index} on {choice.platform.name}; the devices are: "
                               f"{listed}")
        # CLDevice.__init__ numbers the devices of all platforms; QCOM numbers those of its platform only, so it
        # opens the device itself and then builds the same pieces around it
        self.device = devices[index]
        self.context = cl.Context([self.device])
        self.queue = cl.CommandQueue(self.context, self.device,
                                     properties=cl.command_queue_properties.PROFILING_ENABLE)
        self.image_dtypes = image_dtypes_of(self.device, self.context)
        use_images = images_requested(bool(self.image_dtypes), self.device.name) if images is None else images
        if use_images and not self.image_dtypes:
            raise RuntimeError(f"images were asked for, but the OpenCL device {self.device.name} cannot make RGBA "
                               f"float images of buffers; open it with images=False")
        image_max_texels = int(self.device.image_max_buffer_size) if self.image_dtypes else 0
        renderer = QCOMRenderer(frozenset(self.device.extensions.split()),
                                self.image_dtypes if use_images else frozenset(), image_max_texels)
        set_work_group_limits(renderer, self.device)
        #: the allocator with its QCOM type (image views), for the launcher
        self.qcom_allocator = QCOMAllocator(self.context, self.queue, image_max_texels)
        Compiled.__init__(self, "QCOM" if index == 0 else f"QCOM:{index}", self.qcom_allocator, renderer,
                          QCOMCompiler(self.context, self.device), lambda spec, lib: QCOMProgram(self, spec, lib))

    def synchronize(self) -> None:
        super().synchronize()
        self.qcom_allocator.release_finished(everything=True)

    @property
    def images_enabled(self) -> bool:
        return bool(self._qcom_renderer.image_dtypes)

    @images_enabled.setter
    def images_enabled(self, enabled: bool) -> None:
        """Switch the texture path for kernels compiled from now on (compiled kernels are forgotten)."""
        if enabled and not self.image_dtypes:
            raise RuntimeError(f"the OpenCL device {self.device.name} cannot make RGBA float images of buffers")
        self._qcom_renderer.image_dtypes = self.image_dtypes if enabled else frozenset()
        self._runners.clear()

    @property
    def _qcom_renderer(self) -> QCOMRenderer:
        assert isinstance(self.renderer, QCOMRenderer)
        return self.renderer


def set_work_group_limits(renderer: QCOMRenderer, device: cl.Device) -> None:
    """The device's launch limits on the renderer (the `Renderer` fields the compiler's work-group choice reads):
    work-items per dimension of a group, each capped by the group size (Adreno reports 1024 per dimension and
    1024 per group), work-items per group, and local memory bytes."""
    group = int(device.max_work_group_size)
    renderer.local_max = tuple(min(int(s), group) for s in device.max_work_item_sizes)
    renderer.max_work_group_size = group
    renderer.local_mem_max = int(device.local_mem_size)

