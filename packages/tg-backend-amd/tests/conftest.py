"""The AMD backend's tests. Running kernels needs the HIP runtime and an AMD GPU: those tests skip with the reason
`check()` gives. Compiling needs clang-19 and ld.lld-19: the compile-only tests skip with the install command
where those are missing. Compiled kernels go to a private cache."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_compile_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINYGRAD_CACHE_DIR", str(tmp_path_factory.getbasetemp().parent / "tg-amd-cache"))


@pytest.fixture(scope="session")
def amd_tools() -> None:
    pytest.importorskip("tg_backend_amd", reason="tg-backend-amd is not installed")
    from tg_backend_amd.compiler import tools_unavailable

    if (reason := tools_unavailable()) is not None:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def amd_device():  # type: ignore[no-untyped-def]
    pytest.importorskip("tg_backend_amd", reason="tg-backend-amd is not installed")
    from tinygrad.device import Device

    if "AMD" not in Device.backends:
        pytest.skip("the AMD backend was not discovered (tg-backend-amd's entry point is not installed)")
    if (reason := Device.availability("AMD")) is not None:
        pytest.skip(f"no usable AMD device: {reason}")
    return Device["AMD"]
