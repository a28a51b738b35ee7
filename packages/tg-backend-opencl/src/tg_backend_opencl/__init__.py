"""The OpenCL backend's plugin module. Light on purpose: discovery imports it, and it does not import
pyopencl - that happens in `check()` (is there a platform with a device?) and when the device is opened
(`tg_backend_opencl.device`)."""

from __future__ import annotations

import functools
from typing import Any

from tinygrad.device import BackendInfo, hookimpl

__version__ = "0.1.0"
#: the device contract this backend implements; core refuses it if its major version differs
DEVICE_CONTRACT = "2.0"


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


#: words in an OpenCL platform's name or vendor that mean PoCL (the "Portable Computing Language")
POCL_MARKERS = ("portable computing language", "pocl")


def software_device(device: Any) -> str | None:
    """What runs an OpenCL device (a pyopencl.Device, or anything with .type, .name and .platform) in software on
    the host CPU: a device of type CL_DEVICE_TYPE_CPU (PoCL, Intel's CPU runtime); None for any other type."""
    import pyopencl as cl

    if not int(device.type) & int(cl.device_type.CPU):
        return None
    platform = device.platform
    name = str(device.name).strip()
    text = f"{platform.name} {platform.vendor}".lower()
    if any(marker in text for marker in POCL_MARKERS):
        return f"PoCL, OpenCL on the host CPU: {name}"
    return f"{name}, an OpenCL CPU device of {str(platform.name).strip()}"


def first_device() -> Any:
    """The device CL (CL:0) opens: the first device of the first platform that has one; None without any."""
    import pyopencl as cl

    for platform in cl.get_platforms():
        try:
            devices = platform.get_devices()
        except Exception:  # a platform without devices raises DEVICE_NOT_FOUND
            continue
        if devices:
            return devices[0]
    return None


@functools.cache
def _software() -> str | None:
    device = first_device()
    return None if device is None else software_device(device)


@hookimpl
def tinygrad_backends() -> list[BackendInfo]:
    # before CPU (1000) when the device is hardware; a CPU device (PoCL) ranks after CPU through `software`
    info = BackendInfo(name="CL", contract_version=DEVICE_CONTRACT, open=_open, check=_check, priority=100,
                       description="OpenCL C kernels built and launched through pyopencl")
    # set after construction: a tg-core without the `software` field simply ignores it instead of refusing the plugin
    info.software = _software
    return [info]
