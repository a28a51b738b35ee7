"""The AMD device through the HIP runtime: hipMalloc buffers, synchronous hipMemcpy, code objects loaded with
hipModuleLoadData, launches with hipModuleLaunchKernel on the null stream, hipEvents for timing. Only imported
when an AMD device is opened. Every call runs with this device current (hipSetDevice), since HIP's current device
is per host thread and another AMD device may have been used since.

The target (gfx942, gfx1100, ...) is read from the kernel driver's topology in sysfs (`gfx_target_version`), which
needs no struct of the HIP API whose layout changes between ROCm releases; AMD_ARCH overrides it.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tinygrad.codegen import ProgramSpec
from tinygrad.device import Allocator
from tinygrad.runtime.device import Compiled

from tg_backend_amd import hip
from tg_backend_amd.compiler import AMDCompiler
from tg_backend_amd.launch import launch_dims
from tg_backend_amd.renderer import AMDRenderer

ARCH_ENV = "AMD_ARCH"
KFD_NODES = Path("/sys/class/kfd/kfd/topology/nodes")


def gfx_name(target_version: int) -> str:
    """KFD's gfx_target_version (major*10000 + minor*100 + stepping, e.g. 90402) as a target name (gfx942)."""
    major, minor, step = target_version // 10000, target_version // 100 % 100, target_version % 100
    return f"gfx{major}{minor:x}{step:x}"


def gpu_targets(nodes: Path = KFD_NODES) -> list[str]:
    """The targets of the GPUs the kernel driver lists, in node order (CPU nodes report version 0)."""
    out = []
    for node in sorted(nodes.glob("*"), key=lambda p: int(p.name) if p.name.isdigit() else 1 << 30):
        try:
            props = dict(line.split()[:2] for line in (node / "properties").read_text().splitlines() if line.split())
        except OSError:
            continue
        if int(props.get("gfx_target_version", "0")) > 0:
            out.append(gfx_name(int(props["gfx_target_version"])))
    return out


class AMDAllocator(Allocator):
    def __init__(self, device: AMDDevice):
        self.device = device
        total = ctypes.c_size_t(0)
        hip.call("hipDeviceTotalMem", ctypes.byref(total), device.index)
        self.max_buffer_bytes = int(total.value)

    def alloc(self, nbytes: int) -> Any:
        self.device.activate()
        ptr = ctypes.c_void_p()
        hip.call("hipMalloc", ctypes.byref(ptr), max(nbytes, 1))
        return ptr

    def free(self, opaque: Any, nbytes: int) -> None:
        self.device.activate()
        hip.call("hipFree", opaque)

    def copyin(self, dest: Any, src: memoryview) -> None:
        if src.nbytes:
            self.device.activate()
            host = (ctypes.c_char * src.nbytes).from_buffer(src) if not src.readonly else \
                ctypes.create_string_buffer(bytes(src), src.nbytes)
            hip.call("hipMemcpy", dest, host, src.nbytes, hip.HOST_TO_DEVICE)

    def copyout(self, dest: memoryview, src: Any) -> None:
        if dest.nbytes:
            self.device.activate()
            hip.call("hipMemcpy", (ctypes.c_char * dest.nbytes).from_buffer(dest), src, dest.nbytes,
                     hip.DEVICE_TO_HOST)


class AMDProgram:
    def __init__(self, device: AMDDevice, spec: ProgramSpec, lib: bytes):
        self.device, self.name, self.lib = device, spec.name, lib  # the image must outlive the module
        device.activate()
        self.module, self.function = ctypes.c_void_p(), ctypes.c_void_p()
        try:
            hip.call("hipModuleLoadData", ctypes.byref(self.module), ctypes.c_char_p(lib))
        except hip.HIPError as e:
            raise RuntimeError(f"HIP could not load kernel {self.name} built for {device.renderer.arch}: {e}; if the "
                               f"GPU is another target, set {ARCH_ENV}") from None
        hip.call("hipModuleGetFunction", ctypes.byref(self.function), self.module, self.name.encode())

    def __del__(self) -> None:
        if getattr(self, "module", None):
            try:
                hip.call("hipModuleUnload", self.module)
            except Exception:  # at interpreter exit the runtime may be gone already
                pass

    def prepare(self, *bufs: Any, global_size: tuple[int, ...] | None = None,
                local_size: tuple[int, ...] | None = None, vals: tuple[int, ...] = ()) -> Callable[..., float | None]:
        r = self.device.renderer
        assert r.local_max is not None
        try:
            grid, block = launch_dims(global_size, local_size, r.local_max, r.max_work_group_size)
        except ValueError as e:
            raise RuntimeError(f"kernel {self.name}: {e}") from None
        if any(g == 0 for g in global_size or ()):  # nothing to run; HIP rejects an empty grid
            return lambda wait=False: 0.0 if wait else None
        # kernelParams: one pointer per argument to its value (buffers are device pointers, variables int32)
        values = [ctypes.c_void_p(b.value if isinstance(b, ctypes.c_void_p) else int(b)) for b in bufs]
        values += [ctypes.c_int32(v) for v in vals]  # type: ignore[misc]
        params = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])
        function, device = self.function, self.device

        def launch(wait: bool = False) -> float | None:
            device.activate()
            _ = values  # the argument values must live as long as the launch that points at them
            if not wait:
                hip.call("hipModuleLaunchKernel", function, *grid, *block, 0, None, params, None)
                return None
            start, end = ctypes.c_void_p(), ctypes.c_void_p()
            hip.call("hipEventCreate", ctypes.byref(start))
            hip.call("hipEventCreate", ctypes.byref(end))
            try:
                hip.call("hipEventRecord", start, None)
                hip.call("hipModuleLaunchKernel", function, *grid, *block, 0, None, params, None)
                hip.call("hipEventRecord", end, None)
                hip.call("hipEventSynchronize", end)
                ms = ctypes.c_float()
                hip.call("hipEventElapsedTime", ctypes.byref(ms), start, end)
                return ms.value * 1e-3
            finally:
                hip.call("hipEventDestroy", start)
                hip.call("hipEventDestroy", end)

        return launch

    def __call__(self, *bufs: Any, global_size: tuple[int, ...] | None = None,
                 local_size: tuple[int, ...] | None = None, vals: tuple[int, ...] = (),
                 wait: bool = False) -> float | None:
        return self.prepare(*bufs, global_size=global_size, local_size=local_size, vals=vals)(wait)


class AMDDevice(Compiled):
    renderer: AMDRenderer
    compiler: AMDCompiler

    def __init__(self, index: int = 0):
        count = hip.device_count()
        if not 0 <= index < count:
            listed = ", ".join(f"AMD:{i} = {hip.device_name(i)}" for i in range(count)) or "none"
            raise RuntimeError(f"there is no AMD device number {index}; the devices are: {listed}")
        self.index = index
        self.activate()
        targets = gpu_targets()
        arch = os.environ.get(ARCH_ENV) or (targets[index] if index < len(targets) else None)
        if arch is None:
            raise RuntimeError(f"cannot tell the GPU's target (no {KFD_NODES}); set {ARCH_ENV}=gfx942 (or the "
                               f"GPU's gfx name, `amdgpu-arch` prints it)")
        # block and LDS limits are the same on every gfx9/gfx10/gfx11 GPU (see launch.py and the renderer)
        renderer = AMDRenderer(arch)
        super().__init__("AMD" if index == 0 else f"AMD:{index}", AMDAllocator(self), renderer, AMDCompiler(arch),
                         lambda spec, lib: AMDProgram(self, spec, lib))

    def activate(self) -> None:
        hip.call("hipSetDevice", self.index)

    def synchronize(self) -> None:
        self.activate()
        hip.call("hipDeviceSynchronize")
