"""The Metal backend's plugin module: light (discovery imports it); `check()` says why Metal is unusable (not
macOS, no pyobjc, no GPU) and opening the device imports the runtime (`tg_backend_metal.device`)."""

from __future__ import annotations

import functools
import sys

from tinygrad.device import BackendInfo, hookimpl

__version__ = "0.1.0"
DEVICE_CONTRACT = "2.0"
RUNTIME_FIX = "`pip install 'tg-backend-metal[runtime]'` (pyobjc-framework-Metal) on macOS"


def _open(index: int):  # type: ignore[no-untyped-def]
    from tg_backend_metal.device import MetalDevice

    return MetalDevice()


@functools.cache
def _check() -> str | None:
    if sys.platform != "darwin":
        return f"not macOS (Metal exists only on Apple platforms; this is {sys.platform})"
    try:
        import Metal
    except ImportError as e:
        return f"pyobjc's Metal bindings are not installed ({e}); {RUNTIME_FIX}"
    if Metal.MTLCreateSystemDefaultDevice() is None:
        return "Metal reports no GPU (MTLCreateSystemDefaultDevice returned nil)"
    return None


@hookimpl
def tinygrad_backends() -> list[BackendInfo]:
    return [BackendInfo(name="METAL", contract_version=DEVICE_CONTRACT, open=_open, check=_check, priority=50,
                        description="MSL kernels compiled and run through Metal (macOS)")]
