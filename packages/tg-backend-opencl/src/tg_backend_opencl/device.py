"""The CL device: one OpenCL device (all platforms' devices, in order, numbered from 0), its buffers,
and kernels launched on one in-order command queue."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyopencl as cl
from tinygrad.codegen import ProgramSpec
from tinygrad.device import Allocator
from tinygrad.runtime.device import Compiled

from tg_backend_opencl.compiler import CLCompiler
from tg_backend_opencl.renderer import OpenCLRenderer


def all_devices() -> list[cl.Device]:
    found: list[cl.Device] = []
    for platform in cl.get_platforms():
        try:
            found.extend(platform.get_devices())
        except cl.Error:  # a platform with no devices
            continue
    return found


class CLAllocator(Allocator):
    def __init__(self, context: cl.Context, queue: cl.CommandQueue):
        self.context, self.queue = context, queue
        # CL_DEVICE_MAX_MEM_ALLOC_SIZE: the largest buffer the device promises to create
        self.max_buffer_bytes = min(int(d.max_mem_alloc_size) for d in context.devices)

    def alloc(self, nbytes: int) -> cl.Buffer:
        # OpenCL refuses 0-byte buffers; core asks for at least 1 byte, this keeps the allocator safe alone
        return cl.Buffer(self.context, cl.mem_flags.READ_WRITE, size=max(nbytes, 1))

    def free(self, opaque: cl.Buffer, nbytes: int) -> None:
        opaque.release()

    def copyin(self, dest: cl.Buffer, src: memoryview) -> None:
        if src.nbytes == 0:
            return
        cl.enqueue_copy(self.queue, dest, np.frombuffer(src.cast("B") if src.ndim != 1 or src.format != "B" else src,
                                                        dtype=np.uint8), is_blocking=True)

    def copyout(self, dest: memoryview, src: cl.Buffer) -> None:
        if dest.nbytes == 0:
            return
        out = dest.cast("B") if dest.ndim != 1 or dest.format != "B" else dest
        cl.enqueue_copy(self.queue, np.frombuffer(out, dtype=np.uint8), src, is_blocking=True)


class CLProgram:
    def __init__(self, device: CLDevice, spec: ProgramSpec, binary: bytes):
        self.device, self.name = device, spec.name
        self.program = cl.Program(device.context, [device.device], [binary]).build()
        self.kernel = cl.Kernel(self.program, spec.name)

    def __call__(self, *bufs: Any, global_size: tuple[int, ...] | None = None,
                 local_size: tuple[int, ...] | None = None, vals: tuple[int, ...] = (),
                 wait: bool = False) -> float | None:
        size = tuple(global_size) if global_size else (1,)
        if 0 in size:  # nothing to run (OpenCL 1.2 rejects an empty launch)
            return 0.0 if wait else None
        self.kernel.set_args(*bufs, *(np.int32(v) for v in vals))
        event = cl.enqueue_nd_range_kernel(self.device.queue, self.kernel, size,
                                           tuple(local_size) if local_size else None)
        if not wait:
            return None
        event.wait()
        return (event.profile.end - event.profile.start) * 1e-9


class CLDevice(Compiled):
    def __init__(self, index: int = 0):
        devices = all_devices()
        if not 0 <= index < len(devices):
            listed = ", ".join(f"CL:{i} = {d.name} ({d.platform.name})" for i, d in enumerate(devices)) or "none"
            raise RuntimeError(f"there is no OpenCL device number {index}; the devices are: {listed}")
        self.device = devices[index]
        self.context = cl.Context([self.device])
        self.queue = cl.CommandQueue(self.context, self.device,
                                     properties=cl.command_queue_properties.PROFILING_ENABLE)
        renderer = OpenCLRenderer(frozenset(self.device.extensions.split()),
                                  local_max=tuple(int(x) for x in self.device.max_work_item_sizes),
                                  max_work_group_size=int(self.device.max_work_group_size),
                                  local_mem_max=int(self.device.local_mem_size))
        super().__init__("CL" if index == 0 else f"CL:{index}", CLAllocator(self.context, self.queue), renderer,
                         CLCompiler(self.context, self.device), lambda spec, lib: CLProgram(self, spec, lib))

    def synchronize(self) -> None:
        self.queue.finish()
