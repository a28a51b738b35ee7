"""The WebGPU backend's plugin module. Light on purpose: discovery imports it, and it does not import
wgpu - that happens in `check()` (is there an adapter?) and when the device is opened
(`tg_backend_webgpu.device`)."""

from __future__ import annotations

import functools

from tinygrad.device import BackendInfo, hookimpl

__version__ = "0.1.0"
#: the device contract this backend implements; core refuses it if its major version differs
DEVICE_CONTRACT = "1.0"


def _open(index: int):  # type: ignore[no-untyped-def]
    from tg_backend_webgpu.device import WebGPUDevice

    return WebGPUDevice(index)


@functools.cache
def _check() -> str | None:
    try:
        from tg_backend_webgpu.device import request_adapter
    except ImportError as e:
        return f"wgpu is not installed ({e}); `pip install wgpu==0.32.0` and a Vulkan, Metal or D3D12 driver"
    try:
        adapter = request_adapter()
    except Exception as e:  # wgpu-native raises when no backend (Vulkan loader, driver) can be loaded
        return (f"wgpu could not look for an adapter ({type(e).__name__}: {e}); install a Vulkan driver, for "
                f"example `apt-get install mesa-vulkan-drivers libvulkan1`")
    if adapter is None:
        return ("wgpu found no adapter (no GPU driver and no Vulkan software driver); install one, for example "
                "`apt-get install mesa-vulkan-drivers libvulkan1` (lavapipe)")
    return None


@hookimpl
def tinygrad_backends() -> list[BackendInfo]:
    # after CL (100), before CPU (1000): on a machine with only software drivers both would be emulated
    return [BackendInfo(name="WEBGPU", contract_version=DEVICE_CONTRACT, open=_open, check=_check, priority=200,
                        description="WGSL compute shaders run through wgpu-py (wgpu-native)")]
