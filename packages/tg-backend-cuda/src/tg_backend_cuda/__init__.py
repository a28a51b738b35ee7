"""The CUDA backend's plugin module. Light on purpose: discovery imports it, and it imports neither pycuda nor
NVRTC - `check()` tries them (is there a driver with a GPU, and a compiler?), and opening the device imports the
runtime (`tg_backend_cuda.device`).

The renderer and compiler work without a GPU (`tg_backend_cuda.renderer.CUDARenderer`,
`tg_backend_cuda.compiler.CUDACompiler`); `tinygrad_compile_only()` hands them to the conformance kit's
compile-only mode for a target (`--tg-device=CUDA --tg-compile-only --tg-target=sm_90`), which builds every kernel
as the device would (NVRTC to SASS for that architecture) and runs none.
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

RUNTIME_FIX = ("`pip install 'tg-backend-cuda[runtime]'` on a machine with an NVIDIA driver (pycuda builds from "
               "source against a CUDA toolkit: nvcc and the CUDA headers must be installed)")
#: what NVRTC 12.9 compiles for, listed as valid targets where NVRTC itself cannot be loaded to ask
NVRTC_12_9_TARGETS = tuple(f"sm_{cc}" for cc in (50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 103,
                                                 120, 121))


def _open(index: int):  # type: ignore[no-untyped-def]
    from tg_backend_cuda.device import CUDADevice

    return CUDADevice(index)


@functools.cache
def _check() -> str | None:
    try:
        import pycuda.driver as cuda
    except ImportError as e:
        if "libcuda" in str(e):  # pycuda is built, the driver's library is not there
            return f"the NVIDIA driver is not installed (pycuda cannot load libcuda: {e}); install the NVIDIA driver"
        return f"pycuda is not installed ({e}); {RUNTIME_FIX}"
    from tg_backend_cuda.nvrtc import nvrtc_unavailable

    if (reason := nvrtc_unavailable()) is not None:
        return reason
    try:
        cuda.init()
        count = cuda.Device.count()
    except Exception as e:  # pycuda raises its own errors (cuInit failed: no CUDA-capable device is detected)
        return f"the CUDA driver found no usable GPU ({type(e).__name__}: {e}); is an NVIDIA GPU and driver installed?"
    if count == 0:
        return "the CUDA driver reports no GPU; is an NVIDIA GPU installed (and visible: CUDA_VISIBLE_DEVICES)?"
    return None


@hookimpl
def tinygrad_backends() -> list[BackendInfo]:
    # before OpenCL (100) and CPU (1000): a CUDA GPU is the device to use where there is one
    return [BackendInfo(name="CUDA", contract_version=DEVICE_CONTRACT, open=_open, check=_check, priority=50,
                        description="CUDA C++ kernels compiled by NVRTC and launched through pycuda")]


# ---- compile-only: the conformance kit builds kernels for a target where there is no GPU ----

def _compile_targets() -> tuple[str, ...]:
    from tg_backend_cuda.nvrtc import NVRTCError, load_nvrtc

    try:
        return tuple(f"sm_{cc}" for cc in load_nvrtc().supported_archs)
    except NVRTCError:
        return NVRTC_12_9_TARGETS


def _compile_for(target: str) -> tuple[Renderer, Compiler]:
    from tg_backend_cuda.compiler import CUDACompiler
    from tg_backend_cuda.renderer import CUDARenderer

    renderer = CUDARenderer(target)
    return renderer, CUDACompiler(renderer.cc, cubin=True)  # the SASS the device loads (without CUDA_PTX=1)


def _compiler_missing() -> str | None:
    from tg_backend_cuda.nvrtc import nvrtc_unavailable

    return nvrtc_unavailable()


@hookimpl
def tinygrad_compile_only() -> list[CompileOnlyBackend]:
    from tinygrad.conformance.compile_only import CompileOnlyBackend

    return [CompileOnlyBackend(name="CUDA", targets=_compile_targets, make=_compile_for, check=_compiler_missing,
                               description="NVRTC compiles each kernel's CUDA C++ to SASS for the target (the "
                                           "cubin the device would load)")]
