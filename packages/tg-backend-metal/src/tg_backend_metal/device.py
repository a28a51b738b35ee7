"""The Metal device through pyobjc (macOS only; never run yet): the system default device, buffers in shared
storage (CPU and GPU see the same memory, so copies are memcpys), libraries compiled from MSL source, one command
buffer per launch, GPU timestamps of the command buffer for timing."""

from __future__ import annotations

from typing import Any

import Metal
from tinygrad.codegen import ProgramSpec
from tinygrad.device import Allocator
from tinygrad.errors import CompileError
from tinygrad.runtime.compiler import Compiler
from tinygrad.runtime.device import Compiled

from tg_backend_metal.renderer import MetalRenderer


class MetalCompiler(Compiler):
    """Metal compiles MSL when the library is made (newLibraryWithSource), so the 'binary' is the source itself."""
    cache_key = "metal|source"

    def compile(self, src: str) -> bytes:
        return src.encode()


class MetalAllocator(Allocator):
    def __init__(self, device: MetalDevice):
        self.device = device
        self.max_buffer_bytes = int(device.mtl.maxBufferLength())

    def alloc(self, nbytes: int) -> Any:
        buf = self.device.mtl.newBufferWithLength_options_(max(nbytes, 1), Metal.MTLResourceStorageModeShared)
        if buf is None:
            raise MemoryError(f"Metal could not allocate {nbytes} bytes")
        return buf

    def free(self, opaque: Any, nbytes: int) -> None:
        pass  # pyobjc releases the buffer with its last reference

    def _view(self, buf: Any, nbytes: int) -> memoryview:
        return buf.contents().as_buffer(nbytes)

    def copyin(self, dest: Any, src: memoryview) -> None:
        self.device.synchronize()  # a running kernel may still read the buffer
        self._view(dest, src.nbytes)[:] = src.cast("B")

    def copyout(self, dest: memoryview, src: Any) -> None:
        self.device.synchronize()
        dest.cast("B")[:] = self._view(src, dest.nbytes)


class MetalProgram:
    def __init__(self, device: MetalDevice, spec: ProgramSpec, lib: bytes):
        self.device, self.name = device, spec.name
        options = Metal.MTLCompileOptions.new()
        options.setFastMathEnabled_(False)  # the reference semantics need IEEE results
        library, err = device.mtl.newLibraryWithSource_options_error_(lib.decode(), options, None)
        if library is None:
            raise CompileError(f"Metal could not compile {self.name}: {err}\n--- source ---\n{lib.decode()}")
        self.pipeline, err = device.mtl.newComputePipelineStateWithFunction_error_(
            library.newFunctionWithName_(self.name), None)
        if self.pipeline is None:
            raise RuntimeError(f"Metal could not make a pipeline for {self.name}: {err}")

    def __call__(self, *bufs: Any, global_size: tuple[int, ...] | None = None,
                 local_size: tuple[int, ...] | None = None, vals: tuple[int, ...] = (),
                 wait: bool = False) -> float | None:
        g = [*(global_size or (1,)), 1, 1][:3]
        block = [*(local_size or (min(g[0], 256),)), 1, 1][:3]
        groups = [-(-a // b) for a, b in zip(g, block)]
        cmd = self.device.queue.commandBuffer()
        enc = cmd.computeCommandEncoder()
        enc.setComputePipelineState_(self.pipeline)
        for i, b in enumerate(bufs):
            enc.setBuffer_offset_atIndex_(b, 0, i)
        for i, v in enumerate(vals, start=len(bufs)):
            enc.setBytes_length_atIndex_(int(v).to_bytes(4, "little", signed=True), 4, i)
        enc.dispatchThreadgroups_threadsPerThreadgroup_(Metal.MTLSizeMake(*groups), Metal.MTLSizeMake(*block))
        enc.endEncoding()
        cmd.commit()
        self.device.pending.append(cmd)
        if not wait:
            return None
        cmd.waitUntilCompleted()
        return float(cmd.GPUEndTime() - cmd.GPUStartTime())


class MetalDevice(Compiled):
    def __init__(self) -> None:
        self.mtl = Metal.MTLCreateSystemDefaultDevice()
        self.queue = self.mtl.newCommandQueue()
        self.pending: list[Any] = []
        renderer = MetalRenderer()
        renderer.max_work_group_size = int(self.mtl.maxThreadsPerThreadgroup().width)
        super().__init__("METAL", MetalAllocator(self), renderer, MetalCompiler(),
                         lambda spec, lib: MetalProgram(self, spec, lib))

    def synchronize(self) -> None:
        for cmd in self.pending:
            cmd.waitUntilCompleted()
        self.pending.clear()

