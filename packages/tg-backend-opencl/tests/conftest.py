"""The OpenCL backend's tests need pyopencl and a usable OpenCL device; without them every test that
opens CL is skipped with the reason `check()` gives. Compiled kernels go to a private cache."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_compile_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINYGRAD_CACHE_DIR", str(tmp_path_factory.getbasetemp().parent / "tg-cl-cache"))


@pytest.fixture(scope="session")
def cl_device():  # type: ignore[no-untyped-def]
    """The opened CL device, or a skip that says why there is none."""
    pytest.importorskip("tg_backend_opencl", reason="tg-backend-opencl is not installed")
    from tinygrad.device import Device

    if "CL" not in Device.backends:
        pytest.skip("the CL backend was not discovered (tg-backend-opencl's entry point is not installed)")
    reason = Device.availability("CL")
    if reason is not None:
        pytest.skip(f"no usable OpenCL device: {reason}")
    return Device["CL"]
