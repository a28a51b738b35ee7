"""The CUDA backend's plugin module. Light on purpose: discovery imports it, and it imports neither pycuda nor
NVRTC - `check()` tries them (is there a driver with a GPU, and a compiler?), and opening the device imports the
runtime (`tg_backend_cuda.device`).

The renderer and compiler work without a GPU (`tg_backend_cuda.renderer.CUDARenderer`,
`tg_backend_cuda.compiler.CUDACompiler`): what this machine checks is that kernels compile to PTX for sm_80 and
sm_90 and that ptxas accepts it.
"""

from __future__ import annotations

import functools

from tinygrad.device import BackendInfo, hookimpl

__version__ = "0.1.0"
#: the device contract this backend implements; core refuses it if its major version differs
DEVICE_CONTRACT = "1.0"

RUNTIME_FIX = ("`pip install 'tg-backend-cuda[runtime]'` on a machine with an NVIDIA driver (pycuda builds from "
               "source against a CUDA toolkit: nvcc and the CUDA headers must be installed)")


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
