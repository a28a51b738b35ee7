"""The WEBGPU device: a wgpu-py adapter and device (Vulkan through wgpu-native; lavapipe here), storage
buffers, WGSL compute pipelines cached per kernel and work-group shape, one queue submit per launch."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import wgpu
from tinygrad.codegen import ProgramSpec
from tinygrad.device import Allocator
from tinygrad.errors import CompileError
from tinygrad.runtime.compiler import Compiler
from tinygrad.runtime.device import Compiled

from tg_backend_webgpu.renderer import DEFAULT_WORKGROUP_SIZE, WGSLRenderer
from tg_backend_webgpu.stderr import hold_stderr

#: limits a compute kernel can run into; the device asks for the adapter's values, not WebGPU's defaults
#: (8 storage buffers per stage, for one, is too few for a fused kernel)
COMPUTE_LIMITS = ("max-storage-buffers-per-shader-stage", "max-storage-buffer-binding-size", "max-buffer-size",
                  "max-compute-workgroups-per-dimension", "max-bindings-per-bind-group",
                  "max-uniform-buffer-binding-size", "max-compute-invocations-per-workgroup",
                  "max-compute-workgroup-size-x", "max-compute-workgroup-storage-size")
STORAGE_USAGE = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST


def request_adapter() -> Any:
    """The adapter wgpu picks (high-performance preference), or None when there is none. What the graphics stack
    writes to stderr while wgpu looks is shown only when no adapter is found (see `tg_backend_webgpu.stderr`)."""
    return hold_stderr(lambda: wgpu.gpu.request_adapter_sync(power_preference="high-performance"),
                       failed=lambda adapter: adapter is None)


#: llvmpipe (lavapipe) counts the loop iterations of each invocation, all loops together, and ends the
#: invocation's loops after this many (Mesa's LP_MAX_TGSI_LOOP_ITERATIONS, a guard against hangs)
LLVMPIPE_LOOP_LIMIT = 65535


def loop_limit(info: Any) -> tuple[int | None, str]:
    device = str(info.get("device", ""))
    if "llvmpipe" in device:
        return LLVMPIPE_LOOP_LIMIT, f"{device}, Mesa's lavapipe"
    return None, ""


def _round_up4(n: int) -> int:
    return max(4, (n + 3) & ~3)  # wgpu wants buffer sizes and copy lengths that are multiples of 4, and > 0


class WebGPUAllocator(Allocator):
    def __init__(self, device: Any, max_binding: int):
        self.device, self.max_binding = device, max_binding
        self.max_buffer_bytes = max_binding  # a kernel can bind no larger buffer

    def alloc(self, nbytes: int) -> Any:
        if nbytes > self.max_binding:
            raise MemoryError(f"WEBGPU cannot bind a buffer of {nbytes} bytes: this adapter's "
                              f"max-storage-buffer-binding-size is {self.max_binding} bytes. Split the tensor, "
                              f"or use another device for it")
        return self.device.create_buffer(size=_round_up4(nbytes), usage=STORAGE_USAGE)

    def free(self, opaque: Any, nbytes: int) -> None:
        opaque.destroy()

    def copyin(self, dest: Any, src: memoryview) -> None:
        data = src.cast("B") if src.ndim != 1 or src.format != "B" else src
        if data.nbytes == 0:
            return
        if data.nbytes % 4:  # pad to whole words; the allocation was rounded up, the padding is never read
            data = memoryview(bytes(data) + bytes(4 - data.nbytes % 4))
        self.device.queue.write_buffer(dest, 0, data)

    def copyout(self, dest: memoryview, src: Any) -> None:
        out = dest.cast("B") if dest.ndim != 1 or dest.format != "B" else dest
        n = out.nbytes
        if n == 0:
            return
        # read_buffer waits for the work submitted before it
        raw = self.device.queue.read_buffer(src, 0, _round_up4(n))
        out[:] = memoryview(raw).cast("B")[:n]


class WGSLCompiler(Compiler):
    """WGSL is what wgpu takes: `compile` validates it (naga parses and checks it, as pipeline creation
    would) and returns the source itself as the binary. Nothing is cached on disk: there is no binary to
    save work on, the device translates WGSL again whenever a pipeline is made."""

    cache_key = ""
    no_assembly_reason = ("wgpu-native translates WGSL to SPIR-V with naga inside the driver layer and hands "
                          "neither the SPIR-V nor the driver's machine code to Python; the WGSL above is the program")

    def __init__(self, device: Any, adapter_name: str):
        self.device, self.adapter_name = device, adapter_name
        self.modules: dict[str, Any] = {}  # source -> shader module, reused by the program

    def compile(self, src: str) -> bytes:
        self.module(src)
        return src.encode()

    def module(self, src: str) -> Any:
        if (hit := self.modules.get(src)) is not None:
            return hit
        try:
            module = self.device.create_shader_module(code=src)
        except Exception as e:  # wgpu raises GPUValidationError with naga's message
            raise CompileError(f"WGSL shader failed to compile on {self.adapter_name}: {type(e).__name__}\n"
                               f"--- compiler message ---\n{e}\n--- source ---\n{src}") from None
        self.modules[src] = module
        return module


def launch_grid(groups: int, per_dim: int) -> tuple[int, int, int]:
    """Workgroup counts (x, y, z) holding `groups` workgroups, at most `per_dim` per dimension. The kernel takes
    its workgroup's linear id apart itself and returns from the spare ones at the end."""
    x = min(max(groups, 1), per_dim)
    y = min(math.ceil(groups / x), per_dim)
    z = math.ceil(groups / (x * y))
    if z > per_dim:
        raise ValueError(f"a launch of {groups} workgroups needs more than {per_dim}^3 of them; split the kernel")
    return x, y, max(z, 1)


def default_local_size(global_size: tuple[int, ...], budget: int = DEFAULT_WORKGROUP_SIZE) -> tuple[int, ...]:
    """Work-group sizes for a launch that leaves them to the runtime: dimension 0 (the innermost output loop)
    first, each taking as much of the budget as its size uses, so that a short inner axis (3 channels) leaves
    the rest of the workgroup to the next one instead of running idle invocations."""
    out = []
    for size in global_size:
        take = max(1, min(size, budget))
        out.append(take)
        budget //= take
    return tuple(out)


class WebGPUProgram:
    def __init__(self, device: WebGPUDevice, spec: ProgramSpec, lib: bytes):
        self.device, self.name = device, spec.name
        self.src = lib.decode()
        self.module = device.wgsl_compiler.module(self.src)
        self._pipelines: dict[tuple[int, int, tuple[int, ...]], tuple[Any, Any]] = {}
        self._uniform: Any = None

    def _pipeline(self, n_bufs: int, n_vals: int, local_size: tuple[int, ...]) -> tuple[Any, Any]:
        """An explicit layout (every binding, used or not: an "auto" layout drops unused ones), and the
        work-group shape set through the shader's override constants (one pipeline per shape)."""
        key = (n_bufs, n_vals, local_size)
        if (hit := self._pipelines.get(key)) is not None:
            return hit
        dev = self.device.device
        if n_bufs > self.device.max_storage_buffers:  # wgpu's own refusal names neither the kernel nor a way out
            raise RuntimeError(f"kernel {self.name} binds {n_bufs} buffers, but {self.device.adapter_name} allows "
                               f"{self.device.max_storage_buffers} per kernel (maxStorageBuffersPerShaderStage); "
                               f"realize some of its inputs or outputs separately, or use another device")
        entries = [{"binding": i, "visibility": wgpu.ShaderStage.COMPUTE,
                    "buffer": {"type": wgpu.BufferBindingType.storage}} for i in range(n_bufs)]
        if n_vals:
            entries.append({"binding": n_bufs, "visibility": wgpu.ShaderStage.COMPUTE,
                            "buffer": {"type": wgpu.BufferBindingType.uniform}})
        layout = dev.create_bind_group_layout(entries=entries)
        stage: dict[str, Any] = {"module": self.module, "entry_point": self.name}
        if local_size:
            stage["constants"] = {**{f"tg_local_{d}": size for d, size in enumerate(local_size)},
                                  "tg_workgroup_size": math.prod(local_size)}
        try:
            pipeline = dev.create_compute_pipeline(layout=dev.create_pipeline_layout(bind_group_layouts=[layout]),
                                                   compute=stage)
        except Exception as e:
            raise CompileError(f"WGSL pipeline creation failed on {self.device.adapter_name}: {type(e).__name__}\n"
                               f"--- message ---\n{e}\n--- source ---\n{self.src}") from None
        self._pipelines[key] = (layout, pipeline)
        return layout, pipeline

    def __call__(self, *bufs: Any, global_size: tuple[int, ...] | None = None,
                 local_size: tuple[int, ...] | None = None, vals: tuple[int, ...] = (),
                 wait: bool = False) -> float | None:
        global_size = global_size or ()
        if math.prod(global_size) == 0:
            return 0.0 if wait else None
        local = self.device.work_group(global_size, local_size, self.name)
        blocks = math.prod(-(-g // size) for g, size in zip(global_size, local))
        grid = launch_grid(blocks, self.device.max_workgroups) if global_size else (1, 1, 1)
        dev = self.device.device
        layout, pipeline = self._pipeline(len(bufs), len(vals), local)
        entries = [{"binding": i, "resource": {"buffer": b, "offset": 0, "size": b.size}} for i, b in enumerate(bufs)]
        if vals:
            if self._uniform is None:
                self._uniform = dev.create_buffer(size=max(16, -(-4 * len(vals) // 16) * 16),
                                                  usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
            # ordered before this launch's submit, after the previous one's
            dev.queue.write_buffer(self._uniform, 0, np.array(vals, dtype=np.int32).tobytes())
            entries.append({"binding": len(bufs), "resource": {"buffer": self._uniform, "offset": 0,
                                                                "size": self._uniform.size}})
        bind_group = dev.create_bind_group(layout=layout, entries=entries)
        timer = self.device.timer if wait else None
        encoder = dev.create_command_encoder()
        compute = encoder.begin_compute_pass(timestamp_writes=timer.writes if timer else None)
        compute.set_pipeline(pipeline)
        compute.set_bind_group(0, bind_group)
        compute.dispatch_workgroups(*grid)
        compute.end()
        if timer:
            timer.resolve(encoder)
        start = time.perf_counter()
        dev.queue.submit([encoder.finish()])
        if not wait:
            return None
        if timer:
            return timer.elapsed()
        self.device.synchronize()
        return time.perf_counter() - start


class TimestampTimer:
    """GPU time of one compute pass from timestamp queries (the `timestamp-query` feature)."""

    def __init__(self, device: Any):
        self.device = device
        self.query_set = device.create_query_set(type=wgpu.QueryType.timestamp, count=2)
        self.resolved = device.create_buffer(size=16, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
        self.writes = {"query_set": self.query_set, "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1}

    def resolve(self, encoder: Any) -> None:
        encoder.resolve_query_set(self.query_set, 0, 2, self.resolved, 0)

    def elapsed(self) -> float:
        start, end = np.frombuffer(self.device.queue.read_buffer(self.resolved), dtype=np.uint64)
        return max(int(end) - int(start), 0) * 1e-9  # WebGPU timestamps are nanoseconds


class WebGPUDevice(Compiled):
    def __init__(self, index: int = 0):
        if index != 0:
            raise RuntimeError(f"there is no WEBGPU device number {index}; wgpu exposes one adapter (WEBGPU:0), the "
                               f"one it prefers")
        adapter = request_adapter()
        if adapter is None:
            raise RuntimeError("wgpu found no adapter; install a Vulkan driver (mesa-vulkan-drivers) or a GPU driver")
        self.adapter = adapter
        self.adapter_name = f"{adapter.info.get('device', '?')} ({adapter.info.get('backend_type', '?')})"
        # shader-f64 is not for float64 tensors (lavapipe's f64 transcendentals are broken) but for exp2/log2
        features = [f for f in ("shader-f16", "shader-int64", "shader-f64", "timestamp-query")
                    if f in adapter.features]
        limits = {k: adapter.limits[k] for k in COMPUTE_LIMITS if k in adapter.limits}
        self.device = adapter.request_device_sync(required_features=features, required_limits=limits)
        self.max_workgroups = int(self.device.limits["max-compute-workgroups-per-dimension"])
        lim = self.device.limits
        # workgroups are flat (one dimension, see the renderer): their size is bound by the invocations limit and
        # by the x limit; y and z are always 1, within any device's maxComputeWorkgroupSizeY/Z
        self.max_workgroup_invocations = min(int(lim["max-compute-invocations-per-workgroup"]),
                                             int(lim["max-compute-workgroup-size-x"]))
        self.workgroup_storage = int(lim["max-compute-workgroup-storage-size"])
        #: storage buffers one kernel may bind (wgpu's OpenGL backend allows fewer than its Vulkan one)
        self.max_storage_buffers = int(lim["max-storage-buffers-per-shader-stage"])
        self.timer = TimestampTimer(self.device) if "timestamp-query" in features else None
        self._sync_buffer = self.device.create_buffer(size=4, usage=STORAGE_USAGE)
        self.wgsl_compiler = WGSLCompiler(self.device, self.adapter_name)
        renderer = WGSLRenderer(frozenset(features), *loop_limit(adapter.info),
                                max_workgroup_invocations=self.max_workgroup_invocations,
                                workgroup_storage=self.workgroup_storage)
        allocator = WebGPUAllocator(self.device, int(self.device.limits["max-storage-buffer-binding-size"]))
        super().__init__("WEBGPU", allocator, renderer, self.wgsl_compiler,
                         lambda spec, lib: WebGPUProgram(self, spec, lib))

    def work_group(self, global_size: tuple[int, ...], local_size: tuple[int, ...] | None,
                   kernel: str) -> tuple[int, ...]:
        """The work-group shape of a launch: the kernel's own (LOCAL/GROUP opts), else one the runtime picks;
        a shape this device cannot run is refused (the compiler checks the same limits when it applies opts)."""
        if not global_size:
            return ()
        if local_size is None:
            return default_local_size(global_size)
        if len(local_size) != len(global_size) or min(local_size) < 1:
            raise ValueError(f"kernel {kernel}: local size {local_size} does not match global size {global_size}")
        if (n := math.prod(local_size)) > self.max_workgroup_invocations:
            raise RuntimeError(f"kernel {kernel}: a workgroup of {n} invocations {local_size} exceeds this device's "
                               f"{self.max_workgroup_invocations} (maxComputeInvocationsPerWorkgroup and "
                               f"maxComputeWorkgroupSizeX of {self.adapter_name}); compile it for this device")
        return tuple(local_size)

    def synchronize(self) -> None:
        # reading a buffer back waits for everything submitted before it (wgpu 0.32.0's
        # on_submitted_work_done_sync fails with a cffi callback type mismatch)
        self.device.queue.read_buffer(self._sync_buffer, 0, 4)
