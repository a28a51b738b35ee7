"""The AMD backend's plugin module. Light on purpose: discovery imports it; it loads neither the HIP runtime nor
the compiler. `check()` tries them (clang-19/ld.lld-19 on PATH, libamdhip64 loads, HIP sees a GPU), and opening
the device imports the runtime (`tg_backend_amd.device`).

The renderer and compiler work without a GPU (`tg_backend_amd.renderer.AMDRenderer`,
`tg_backend_amd.compiler.AMDCompiler`): what a machine without one checks is that kernels compile and link to
code objects for gfx942 and gfx1100.
"""

from __future__ import annotations

import functools

from tinygrad.device import BackendInfo, hookimpl

__version__ = "0.1.0"
#: the device contract this backend implements; core refuses it if its major version differs
DEVICE_CONTRACT = "1.0"

RUNTIME_FIX = ("install ROCm's HIP runtime (libamdhip64.so, e.g. the `hip-runtime-amd` package of ROCm 6) on a "
               "machine with an AMD GPU and the amdgpu kernel driver, or point TG_AMD_HIP_LIB at the library")


def _open(index: int):  # type: ignore[no-untyped-def]
    from tg_backend_amd.device import AMDDevice

    return AMDDevice(index)


@functools.cache
def _check() -> str | None:
    from tg_backend_amd.compiler import tools_unavailable

    if (reason := tools_unavailable()) is not None:
        return reason
    from tg_backend_amd import hip

    try:
        hip.load_hip()
    except OSError as e:
        return f"the HIP runtime is not installed (cannot load libamdhip64: {e}); {RUNTIME_FIX}"
    try:
        count = hip.device_count()
    except hip.HIPError as e:  # hipErrorNoDevice, or a driver/runtime mismatch
        return f"HIP found no usable GPU ({e}); is an AMD GPU with the amdgpu driver present (/dev/kfd readable)?"
    if count == 0:
        return "HIP reports no GPU; is an AMD GPU present and visible (HIP_VISIBLE_DEVICES, /dev/kfd permissions)?"
    return None


@hookimpl
def tinygrad_backends() -> list[BackendInfo]:
    # like CUDA: before OpenCL (100) and CPU (1000), since a GPU is the device to use where there is one
    return [BackendInfo(name="AMD", contract_version=DEVICE_CONTRACT, open=_open, check=_check, priority=50,
                        description="HIP-style C++ kernels compiled by clang-19, launched through the HIP runtime")]
