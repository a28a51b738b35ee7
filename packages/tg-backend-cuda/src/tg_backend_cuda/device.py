"""The CUDA device through pycuda: device N's primary context, `mem_alloc` buffers, modules loaded from NVRTC's
output, launches on the context's default stream (which orders them with the synchronous copies), events for
timing. Only imported when a CUDA device is opened: it needs pycuda, an NVIDIA driver and a GPU.

Every call into the driver runs with this device's context current (`CUDADevice.active`): the context is pushed
when the device is opened, and another device's calls push their own for the call's duration.
"""

from __future__ import annotations

import atexit
import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import pycuda.driver as cuda
from tinygrad.codegen import ProgramSpec
from tinygrad.device import Allocator
from tinygrad.runtime.device import Compiled

from tg_backend_cuda.compiler import CUDACompiler
from tg_backend_cuda.launch import launch_dims
from tg_backend_cuda.renderer import CUDARenderer

#: CUDA_PTX=1 loads PTX through the driver's compiler instead of SASS built by NVRTC for the device
PTX_ENV = "CUDA_PTX"
_driver_ready = False


def init_driver() -> None:
    global _driver_ready
    if not _driver_ready:
        cuda.init()
        _driver_ready = True


def device_names() -> list[str]:
    init_driver()
    return [cuda.Device(i).name() for i in range(cuda.Device.count())]


class CUDAAllocator(Allocator):
    def __init__(self, device: CUDADevice):
        self.device = device
        # no single buffer can be larger than the GPU's memory
        self.max_buffer_bytes = int(device.cu_device.total_memory())

    def alloc(self, nbytes: int) -> Any:
        with self.device.active():
            return cuda.mem_alloc(max(nbytes, 1))

    def free(self, opaque: Any, nbytes: int) -> None:
        opaque.free()  # pycuda makes the allocation's own context current for this

    def copyin(self, dest: Any, src: memoryview) -> None:
        if src.nbytes:
            with self.device.active():
                cuda.memcpy_htod(dest, src)

    def copyout(self, dest: memoryview, src: Any) -> None:
        if dest.nbytes:
            with self.device.active():
                cuda.memcpy_dtoh(dest, src)

    def transfer(self, dest: Any, src: Any, nbytes: int, src_device: CUDADevice) -> None:
        """Copy `nbytes` from a buffer of another CUDA device straight into `dest` (over NVLink or PCIe, without the
        host). Core copies between devices through the host today; this is here for a direct path."""
        if nbytes:
            cuda.memcpy_peer(dest, src, nbytes, self.device.context, src_device.context)


class CUDAProgram:
    def __init__(self, device: CUDADevice, spec: ProgramSpec, lib: bytes):
        self.device, self.name = device, spec.name
        with device.active():
            try:
                self.module = cuda.module_from_buffer(lib)
            except cuda.Error as e:
                raise RuntimeError(f"the CUDA driver could not load kernel {self.name} for {device.renderer.arch}: "
                                   f"{e}. With CUDA_PTX=1, a driver older than NVRTC {device.compiler.nvrtc.version} "
                                   f"refuses its PTX: unset CUDA_PTX or update the driver") from None
            self.function = self.module.get_function(self.name)
        self._prepared_format: str | None = None

    def prepare(self, *bufs: Any, global_size: tuple[int, ...] | None = None,
                local_size: tuple[int, ...] | None = None, vals: tuple[int, ...] = ()) -> Callable[..., float | None]:
        """The launch with its grid, block and packed arguments worked out once (TinyJit replays it)."""
        renderer = self.device.renderer
        assert renderer.local_max is not None
        try:
            grid, block = launch_dims(global_size, local_size, renderer.local_max, renderer.max_work_group_size)
        except ValueError as e:
            raise RuntimeError(f"kernel {self.name}: {e}") from None
        if any(g == 0 for g in global_size or ()):  # an empty launch: nothing to run, and CUDA rejects it
            return lambda wait=False: 0.0 if wait else None
        # buffers are device pointers, symbolic variables int32 (the kernels' `const int` parameters)
        fmt = "P" * len(bufs) + "i" * len(vals)
        if self._prepared_format != fmt:
            self.function.prepare(fmt)
            self._prepared_format = fmt
        args = (*(int(b) for b in bufs), *vals)
        function, device = self.function, self.device

        def launch(wait: bool = False) -> float | None:
            with device.active():
                if not wait:
                    function.prepared_call(grid, block, *args)
                    return None
                start, end = cuda.Event(), cuda.Event()
                start.record()
                function.prepared_call(grid, block, *args)
                end.record()
                end.synchronize()
                return end.time_since(start) * 1e-3

        return launch

    def __call__(self, *bufs: Any, global_size: tuple[int, ...] | None = None,
                 local_size: tuple[int, ...] | None = None, vals: tuple[int, ...] = (),
                 wait: bool = False) -> float | None:
        return self.prepare(*bufs, global_size=global_size, local_size=local_size, vals=vals)(wait)


class CUDADevice(Compiled):
    renderer: CUDARenderer
    compiler: CUDACompiler

    def __init__(self, index: int = 0):
        init_driver()
        count = cuda.Device.count()
        if not 0 <= index < count:
            listed = ", ".join(f"CUDA:{i} = {n}" for i, n in enumerate(device_names())) or "none"
            raise RuntimeError(f"there is no CUDA device number {index}; the devices are: {listed}")
        self.cu_device = cuda.Device(index)
        self.context = self.cu_device.retain_primary_context()
        self.context.push()
        atexit.register(self._pop_at_exit)  # pycuda complains at exit about contexts left on the stack
        attr = cuda.device_attribute

        def limit(a: Any) -> int:
            return int(self.cu_device.get_attribute(a))

        major, minor = self.cu_device.compute_capability()
        renderer = CUDARenderer(major * 10 + minor,
                                local_max=(limit(attr.MAX_BLOCK_DIM_X), limit(attr.MAX_BLOCK_DIM_Y),
                                           limit(attr.MAX_BLOCK_DIM_Z)),
                                max_work_group_size=limit(attr.MAX_THREADS_PER_BLOCK),
                                # the static __shared__ limit (48 KiB); more needs dynamic shared memory
                                local_mem_max=limit(attr.MAX_SHARED_MEMORY_PER_BLOCK))
        compiler = CUDACompiler(renderer.cc, cubin=os.environ.get(PTX_ENV, "0") in ("", "0"))
        super().__init__("CUDA" if index == 0 else f"CUDA:{index}", CUDAAllocator(self), renderer, compiler,
                         lambda spec, lib: CUDAProgram(self, spec, lib))

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """This device's context current for the block (pushed only when another one is)."""
        current = cuda.Context.get_current()
        if current is not None and current == self.context:
            yield
            return
        self.context.push()
        try:
            yield
        finally:
            cuda.Context.pop()

    def synchronize(self) -> None:
        with self.active():
            cuda.Context.synchronize()

    def _pop_at_exit(self) -> None:
        with contextlib.suppress(Exception):
            current = cuda.Context.get_current()
            if current is not None and current == self.context:
                cuda.Context.pop()
