"""The WebGPU backend's plugin module. Light on purpose: discovery imports it, and it does not import
wgpu - that happens in `check()` (is there an adapter?), in `software()` (is it a GPU?) and when the device is opened
(`tg_backend_webgpu.device`)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from tinygrad.device import BackendInfo, hookimpl

__version__ = "0.1.0"
#: the device contract this backend implements; core refuses it if its major version differs
DEVICE_CONTRACT = "2.0"


def _open(index: int):  # type: ignore[no-untyped-def]
    from tg_backend_webgpu.device import WebGPUDevice

    return WebGPUDevice(index)


@functools.cache
def _probe() -> tuple[Mapping[str, Any] | None, str | None]:
    """(the adapter's info, None) or (None, why WEBGPU is unavailable). One look for an adapter per process: it
    loads the graphics drivers, which `check` and `software` both need."""
    try:
        from tg_backend_webgpu.device import request_adapter
    except ImportError as e:
        return None, f"wgpu is not installed ({e}); `pip install wgpu==0.32.0` and a Vulkan, Metal or D3D12 driver"
    try:
        adapter = request_adapter()
    except Exception as e:  # wgpu-native raises when no backend (Vulkan loader, driver) can be loaded
        return None, (f"wgpu could not look for an adapter ({type(e).__name__}: {e}); install a Vulkan driver, for "
                      f"example `apt-get install mesa-vulkan-drivers libvulkan1`")
    if adapter is None:
        return None, ("wgpu found no adapter (no GPU driver and no Vulkan software driver); install one, for example "
                      "`apt-get install mesa-vulkan-drivers libvulkan1` (lavapipe)")
    return dict(adapter.info), None


def _check() -> str | None:
    return _probe()[1]


#: device names of renderers that run on the host CPU, for drivers that do not report the CPU adapter type
SOFTWARE_RENDERERS = ("llvmpipe", "lavapipe", "softpipe", "swiftshader", "microsoft basic render")


def software_adapter(info: Mapping[str, Any]) -> str | None:
    """What runs a WebGPU adapter (its `adapter.info`) in software on the host CPU: an adapter of type CPU (Mesa's
    llvmpipe behind lavapipe's Vulkan or behind OpenGL, SwiftShader, WARP), or one named after such a renderer;
    None for a GPU."""
    device = str(info.get("device", "")).strip() or "an unnamed adapter"
    if str(info.get("adapter_type", "")).upper() != "CPU" and not any(m in device.lower() for m in SOFTWARE_RENDERERS):
        return None
    return f"{device} through {info.get('backend_type', '?')}, a renderer on the host CPU"


def _software() -> str | None:
    info = _probe()[0]
    return None if info is None else software_adapter(info)


@hookimpl
def tinygrad_backends() -> list[BackendInfo]:
    # after CL (100), before CPU (1000) on a GPU; a software adapter (lavapipe, llvmpipe) ranks after CPU
    info = BackendInfo(name="WEBGPU", contract_version=DEVICE_CONTRACT, open=_open, check=_check, priority=200,
                       description="WGSL compute shaders run through wgpu-py (wgpu-native)")
    # set after construction: a tg-core without the `software` field simply ignores it instead of refusing the plugin
    info.software = _software
    return [info]
