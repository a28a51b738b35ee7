"""The QCOM backend's plugin module: Qualcomm Adreno's OpenCL flavour on top of tg-backend-opencl.

Light on purpose: discovery imports it, and it does not import pyopencl - that happens in `check()` and when
the device is opened (`tg_backend_qcom.device`). Which platform QCOM runs on (Adreno, or PoCL as a stand-in)
is decided in `tg_backend_qcom.platform`.
"""

from __future__ import annotations

import functools
from typing import Any

from tinygrad.device import BackendInfo, hookimpl

__version__ = "0.1.0"
#: the device contract this backend implements; core refuses it if its major version differs
DEVICE_CONTRACT = "2.0"
#: after CL (100): with both usable, CL ranks first; before CPU (1000) on hardware (a CPU device ranks after it)
PRIORITY = 110


def _open(index: int):  # type: ignore[no-untyped-def]
    from tg_backend_qcom.device import QCOMDevice

    return QCOMDevice(index)


def _choice() -> tuple[Any, str | None]:
    """(the PlatformChoice, None) or (None, why QCOM is unavailable)."""
    try:
        import pyopencl as cl
    except ImportError as e:
        return None, f"pyopencl is not installed ({e}); `pip install pyopencl` and an OpenCL driver (ICD)"
    from tg_backend_qcom.platform import NoPlatformError, choose_platform

    try:
        platforms = cl.get_platforms()
    except Exception as e:  # no ICD loader configuration raises PLATFORM_NOT_FOUND_KHR
        return None, (f"no OpenCL platform found ({type(e).__name__}: {e}); on a Snapdragon install the vendor's "
                      f"OpenCL driver, elsewhere `apt-get install pocl-opencl-icd` for the stand-in")
    try:
        choice = choose_platform(platforms)
    except NoPlatformError as e:
        return None, str(e)
    try:
        has_devices = bool(choice.platform.get_devices())
    except Exception:  # a platform without devices raises DEVICE_NOT_FOUND
        has_devices = False
    if not has_devices:
        return None, f"the OpenCL platform {choice.platform.name} has no devices"
    return choice, None


@functools.cache
def _check() -> str | None:
    return _choice()[1]


@functools.cache
def _note() -> str | None:
    choice, reason = _choice()
    return None if reason is not None else choice.note


@functools.cache
def _software() -> str | None:
    choice, reason = _choice()
    if reason is not None:
        return None
    from tg_backend_opencl import software_device

    # QCOM (QCOM:0) opens the chosen platform's first device; on the PoCL stand-in that is the host CPU
    return software_device(choice.platform.get_devices()[0])


@hookimpl
def tinygrad_backends() -> list[BackendInfo]:
    info = BackendInfo(name="QCOM", contract_version=DEVICE_CONTRACT, open=_open, check=_check, priority=PRIORITY,
                       description="Qualcomm Adreno OpenCL: image-texture reads of weights, native half")
    # set after construction: a tg-core without the `note` field simply ignores it instead of refusing the plugin
    info.note = _note
    info.software = _software  # a CPU device (the PoCL stand-in) ranks after CPU
    return [info]
