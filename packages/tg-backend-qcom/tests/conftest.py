"""The QCOM backend's tests. Those that open QCOM need pyopencl and a platform QCOM may run on (Adreno, or PoCL
as the stand-in); without one they are skipped with the reason `check()` gives. The renderer and platform
tests run anywhere. Compiled kernels go to a private cache."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_compile_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINYGRAD_CACHE_DIR", str(tmp_path_factory.getbasetemp().parent / "tg-qcom-cache"))


@pytest.fixture(scope="session")
def qcom_device():  # type: ignore[no-untyped-def]
    """The opened QCOM device, or a skip that says why there is none."""
    pytest.importorskip("tg_backend_qcom", reason="tg-backend-qcom is not installed")
    from tinygrad.device import Device

    if "QCOM" not in Device.backends:
        pytest.skip("the QCOM backend was not discovered (tg-backend-qcom's entry point is not installed)")
    reason = Device.availability("QCOM")
    if reason is not None:
        pytest.skip(f"no OpenCL platform QCOM can run on: {reason}")
    return Device["QCOM"]


@pytest.fixture
def images(qcom_device):  # type: ignore[no-untyped-def]
    """Run a test body with the texture path on and off: `images(True)` / `images(False)`; restored after."""
    saved = qcom_device.images_enabled

    def switch(enabled: bool) -> None:
        if enabled and not qcom_device.image_dtypes:
            pytest.skip(f"the OpenCL device {qcom_device.device.name} cannot make RGBA float images of buffers")
        qcom_device.images_enabled = enabled

    yield switch
    qcom_device.images_enabled = saved
