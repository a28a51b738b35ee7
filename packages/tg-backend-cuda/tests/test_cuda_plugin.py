"""Discovery, the reasons CUDA is unavailable (no pycuda, no driver, no GPU, no NVRTC), the launch geometry, and -
where a GPU is present - kernels that run."""

from __future__ import annotations

import builtins
import os
import subprocess
import sys
import types

import numpy as np
import pytest

tg_backend_cuda = pytest.importorskip("tg_backend_cuda", reason="tg-backend-cuda is not installed")

from tg_backend_cuda.launch import default_block, flat_grid, launch_dims  # noqa: E402
from tinygrad.device import Device  # noqa: E402


def _pycuda_importable() -> bool:
    try:
        import pycuda.driver  # noqa: F401
    except ImportError:
        return False
    return True


def test_plugin_module_imports_neither_pycuda_nor_nvrtc() -> None:
    code = ("import sys, tg_backend_cuda; print('pycuda' in sys.modules, 'tg_backend_cuda.nvrtc' in sys.modules, "
            "'tg_backend_cuda.renderer' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False False False"


def test_states_its_contract_and_registers_cuda() -> None:
    assert tg_backend_cuda.DEVICE_CONTRACT == "2.0"
    (info,) = tg_backend_cuda.tinygrad_backends()
    assert info.name == "CUDA" and info.contract_version == "2.0"
    assert info.priority < 100  # preferred over OpenCL (and CPU) where it is usable
    assert "CUDA" in Device.backends and Device.backends["CUDA"].package == "tg-backend-cuda"


def test_check_names_missing_pycuda_and_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pycuda", None)  # makes `import pycuda.driver` raise ImportError
    monkeypatch.setitem(sys.modules, "pycuda.driver", None)
    reason = tg_backend_cuda._check.__wrapped__()
    assert reason is not None and "pycuda is not installed" in reason and "tg-backend-cuda[runtime]" in reason


def test_check_names_a_missing_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_libcuda(name, *args, **kwargs):  # type: ignore[no-untyped-def]
        if name.startswith("pycuda"):
            raise ImportError("libcuda.so.1: cannot open shared object file: No such file or directory")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_libcuda)
    reason = tg_backend_cuda._check.__wrapped__()
    assert reason is not None and "NVIDIA driver is not installed" in reason and "libcuda" in reason


def _fake_pycuda(monkeypatch: pytest.MonkeyPatch, init_error: Exception | None, count: int) -> None:
    driver = types.ModuleType("pycuda.driver")

    def init(flags: int = 0) -> None:
        if init_error is not None:
            raise init_error

    driver.init = init  # type: ignore[attr-defined]
    driver.Device = types.SimpleNamespace(count=lambda: count)  # type: ignore[attr-defined]
    package = types.ModuleType("pycuda")
    package.driver = driver  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pycuda", package)
    monkeypatch.setitem(sys.modules, "pycuda.driver", driver)


def test_check_names_a_machine_without_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tg_backend_cuda.nvrtc")
    from tg_backend_cuda.nvrtc import nvrtc_unavailable

    if nvrtc_unavailable() is not None:
        pytest.skip("NVRTC is missing here, which check() reports first")
    _fake_pycuda(monkeypatch, RuntimeError("cuInit failed: no CUDA-capable device is detected"), 0)
    reason = tg_backend_cuda._check.__wrapped__()
    assert reason is not None and "no usable GPU" in reason and "no CUDA-capable device" in reason
    _fake_pycuda(monkeypatch, None, 0)
    reason = tg_backend_cuda._check.__wrapped__()
    assert reason is not None and "reports no GPU" in reason
    _fake_pycuda(monkeypatch, None, 1)
    assert tg_backend_cuda._check.__wrapped__() is None


def test_check_names_missing_nvrtc(monkeypatch: pytest.MonkeyPatch) -> None:
    from tg_backend_cuda import nvrtc

    _fake_pycuda(monkeypatch, None, 1)
    monkeypatch.setattr(nvrtc, "nvrtc_unavailable", lambda: "cannot load NVRTC (...); `pip install x`")
    assert tg_backend_cuda._check.__wrapped__() == "cannot load NVRTC (...); `pip install x`"


@pytest.mark.skipif(_pycuda_importable(), reason="pycuda is installed here: CUDA's availability depends on a GPU")
def test_device_listing_and_dev_say_why_cuda_is_unavailable() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DEV"}
    listing = subprocess.run([sys.executable, "-m", "tinygrad.device"], capture_output=True, text=True, env=env,
                             check=True).stdout
    line = next(ln for ln in listing.splitlines() if ln.startswith("CUDA "))
    assert "tg-backend-cuda" in line and "unavailable: pycuda is not installed" in line
    code = "import tinygrad; from tinygrad import Device; Device.DEFAULT"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**env, "DEV": "CUDA"})
    assert proc.returncode != 0 and "DEV=CUDA asks for an unavailable device: pycuda is not installed" in proc.stderr
    with pytest.raises(RuntimeError, match="device CUDA is unavailable: pycuda is not installed"):
        Device["CUDA"]


# ---- launch geometry (pure Python: the renderer and the runtime share it) ----

def test_default_block_fills_the_innermost_dimension_first() -> None:
    assert default_block((1000,)) == (256, 1, 1)
    assert default_block((3, 500)) == (3, 85, 1)
    assert default_block((1, 1, 10**6)) == (1, 1, 64)  # z takes at most 64 threads


def test_launch_dims_cover_the_global_size_in_whole_blocks() -> None:
    assert launch_dims((1000,), None) == ((4, 1, 1), (256, 1, 1))
    assert launch_dims((64, 64), (16, 16)) == ((4, 4, 1), (16, 16, 1))
    assert launch_dims(None, None) == ((1, 1, 1), (1, 1, 1))


def test_launch_dims_flatten_past_the_y_and_z_limits() -> None:
    assert not flat_grid((2**31 - 1, 65535, 65535)) and flat_grid((1, 65536)) and flat_grid((1, 1, 70000))
    grid, block = launch_dims((2, 70000, 3), (2, 16, 1))
    assert block == (2, 16, 1) and grid == (1 * 4375 * 3, 1, 1)


def test_launch_dims_refuse_what_cuda_cannot_launch() -> None:
    with pytest.raises(ValueError, match="exceeds the device's limits"):
        launch_dims((4096,), (2048,))
    with pytest.raises(ValueError, match="exceeds the device's limits"):
        launch_dims((64, 64, 128), (1, 1, 128))
    with pytest.raises(ValueError, match="CUDA allows at most"):
        launch_dims((2**31 - 1, 2**20), (1, 1))


# ---- on a GPU ----

def test_add_runs_on_the_gpu(cuda_device) -> None:  # type: ignore[no-untyped-def]
    from tinygrad import Tensor

    a, b = np.arange(1000, dtype=np.float32), np.full(1000, 0.5, dtype=np.float32)
    got = (Tensor(a, device="CUDA") + Tensor(b, device="CUDA")).numpy()
    np.testing.assert_array_equal(got, a + b)


def test_kernel_timing_comes_from_events(cuda_device) -> None:  # type: ignore[no-untyped-def]
    from tinygrad import Tensor

    x = (Tensor.ones(1 << 20, device="CUDA") * 2).contiguous()
    (si,) = [s for s in x.schedule() if not s.is_copy]
    for b in si.bufs:
        b.ensure_allocated()
    elapsed = cuda_device.get_runner(si.ast)(list(si.bufs), si.var_vals, wait=True)
    assert isinstance(elapsed, float) and 0 < elapsed < 1


def test_device_number_out_of_range_lists_the_devices(cuda_device) -> None:  # type: ignore[no-untyped-def]
    from tg_backend_cuda.device import CUDADevice, device_names

    n = len(device_names())
    with pytest.raises(RuntimeError, match=r"no CUDA device number .*CUDA:0 = "):
        CUDADevice(n)
