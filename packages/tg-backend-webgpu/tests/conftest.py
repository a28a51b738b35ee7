"""The WebGPU backend's tests need wgpu and an adapter (lavapipe here); without them every test that
opens WEBGPU is skipped with the reason `check()` gives."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def webgpu_device():  # type: ignore[no-untyped-def]
    """The opened WEBGPU device, or a skip that says why there is none."""
    pytest.importorskip("tg_backend_webgpu", reason="tg-backend-webgpu is not installed")
    from tinygrad.device import Device

    if "WEBGPU" not in Device.backends:
        pytest.skip("the WEBGPU backend was not discovered (tg-backend-webgpu's entry point is not installed)")
    reason = Device.availability("WEBGPU")
    if reason is not None:
        pytest.skip(f"no usable WebGPU adapter: {reason}")
    return Device["WEBGPU"]
