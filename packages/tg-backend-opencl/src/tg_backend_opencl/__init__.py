"""The OpenCL backend's plugin module. Light on purpose: discovery imports it, and it does not import
pyopencl - that happens in `check()` (is there a platform with a device?) and when the device is opened
(`tg_backend_opencl.device`)."""

from __future__ import annotations

import functools

from tinygrad.device import BackendInfo, hookimpl

__version__ = "0.1.0"
#: the device contract this backend implements; core refuses it if its major version differs
DEVICE_CONTRACT = "1.0"


def _open(index: int):  # type: ignore[no-untyped-def]
    from tg_backend_opencl.device import CLDevice

    return CLDevice(index)


@functools.cache
def _check() -> str | None:
    try:
        import pyopencl as cl
    except ImportError as e:
        return f"pyopencl is not installed ({e}); `pip install pyopencl` and an OpenCL driver (ICD)"
    try:
        platforms = cl.get_platforms()
    except Exception as e:  # no ICD loader configuration raises PLATFORM_NOT_FOUND_KHR
        return (f"no OpenCL platform found ({type(e).__name__}: {e}); install an OpenCL driver, for example "
                f"`apt-get install pocl-opencl-icd`")
    for platform in platforms:
        try:
            if platform.get_devices():
                return None
        except Exception:  # a platform without devices raises DEVICE_NOT_FOUND
            continue
    names = ", ".join(p.name for p in platforms) or "none"
    return f"no OpenCL device found (platforms: {names}); install an OpenCL driver, for example pocl-opencl-icd"


@hookimpl
def tinygrad_backends() -> list[BackendInfo]:
    # before CPU (1000): an OpenCL device is preferred when one is usable
    return [BackendInfo(name="CL", contract_version=DEVICE_CONTRACT, open=_open, check=_check, priority=100,
                        description="OpenCL C kernels built and launched through pyopencl")]
