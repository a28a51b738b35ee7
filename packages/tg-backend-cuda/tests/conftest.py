"""The CUDA backend's tests. Running kernels needs pycuda, an NVIDIA driver and a GPU: those tests skip with the
reason `check()` gives. Compiling needs only the NVRTC wheel (and ptxas from the nvcc wheel, for the checks of the
PTX path): the compile-only tests skip with the install command where those are missing. Compiled kernels go to a
private cache."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_compile_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # the parent of the base temp dir is shared by xdist workers: one cache for the run
    monkeypatch.setenv("TINYGRAD_CACHE_DIR", str(tmp_path_factory.getbasetemp().parent / "tg-cuda-cache"))


@pytest.fixture(scope="session")
def nvrtc_tools(nvrtc: None) -> str:
    """The path of ptxas, once NVRTC loads; a skip with the install command otherwise."""
    from tg_backend_cuda.nvrtc import NVCC_WHEEL, ptxas_path

    if (ptxas := ptxas_path()) is None:
        pytest.skip(f"ptxas is not available: `pip install {NVCC_WHEEL}`")
    return ptxas


@pytest.fixture(scope="session")
def nvrtc() -> None:
    """Nothing once NVRTC loads; a skip with the reason (and the install command) otherwise."""
    pytest.importorskip("tg_backend_cuda", reason="tg-backend-cuda is not installed")
    from tg_backend_cuda.nvrtc import nvrtc_unavailable

    if (reason := nvrtc_unavailable()) is not None:
        pytest.skip(f"NVRTC is not available: {reason}")


@pytest.fixture(scope="session")
def cuda_device():  # type: ignore[no-untyped-def]
    """The opened CUDA device, or a skip that says why there is none (no pycuda, driver or GPU here)."""
    pytest.importorskip("tg_backend_cuda", reason="tg-backend-cuda is not installed")
    from tinygrad.device import Device

    if "CUDA" not in Device.backends:
        pytest.skip("the CUDA backend was not discovered (tg-backend-cuda's entry point is not installed)")
    if (reason := Device.availability("CUDA")) is not None:
        pytest.skip(f"no usable CUDA device: {reason}")
    return Device["CUDA"]
