"""The AMD backend's plugin module. Light on purpose: discovery imports it; it loads neither the HIP runtime nor
the compiler. `check()` tries them (clang-19/ld.lld-19 on PATH, libamdhip64 loads, HIP sees a GPU), and opening
the device imports the runtime (`tg_backend_amd.device`).

The renderer and compiler work without a GPU (`tg_backend_amd.renderer.AMDRenderer`,
`tg_backend_amd.compiler.AMDCompiler`); `tinygrad_compile_only()` hands them to the conformance kit's
compile-only mode for a target (`--tg-device=AMD --tg-compile-only --tg-target=gfx942`), which builds every
kernel into a code object for that target as the device would and runs none.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from tinygrad.device import BackendInfo, hookimpl

if TYPE_CHECKING:
    from tinygrad.conformance.compile_only import CompileOnlyBackend
    from tinygrad.renderer import Renderer
    from tinygrad.runtime.compiler import Compiler

__version__ = "0.1.0"
#: the device contract this backend implements; core refuses it if its major version differs
DEVICE_CONTRACT = "2.0"

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


# ---- compile-only: the conformance kit builds kernels for a target where there is no GPU ----

def _compile_targets() -> tuple[str, ...]:
    from tg_backend_amd.compiler import supported_targets

    return supported_targets()


def _compile_for(target: str) -> tuple[Renderer, Compiler]:
    from tg_backend_amd.compiler import AMDCompiler
    from tg_backend_amd.renderer import AMDRenderer

    return AMDRenderer(target), AMDCompiler(target)


def _compiler_missing() -> str | None:
    from tg_backend_amd.compiler import tools_unavailable

    return tools_unavailable()


@hookimpl
def tinygrad_compile_only() -> list[CompileOnlyBackend]:
    from tinygrad.conformance.compile_only import CompileOnlyBackend

    return [CompileOnlyBackend(name="AMD", targets=_compile_targets, make=_compile_for, check=_compiler_missing,
                               description="clang-19 compiles each kernel to amdgcn and ld.lld-19 links the code "
                                           "object the device would load")]
