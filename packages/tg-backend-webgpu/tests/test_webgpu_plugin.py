"""Discovery, availability reasons (simulated: wgpu missing, no adapter, no Vulkan loader), the renderer's
WGSL and the dtypes it claims for each feature set."""

from __future__ import annotations

import subprocess
import sys

import pytest

tg_backend_webgpu = pytest.importorskip("tg_backend_webgpu", reason="tg-backend-webgpu is not installed")

from tinygrad.dtype import dtypes  # noqa: E402
from tinygrad.uop.ops import Ops, UOp  # noqa: E402


def test_plugin_module_does_not_import_wgpu() -> None:
    code = "import sys, tg_backend_webgpu; print('wgpu' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


def test_states_its_contract_and_registers_webgpu() -> None:
    assert tg_backend_webgpu.DEVICE_CONTRACT == "1.0"
    (info,) = tg_backend_webgpu.tinygrad_backends()
    assert info.name == "WEBGPU" and info.contract_version == "1.0"


def test_check_names_missing_wgpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wgpu", None)  # makes `import wgpu` raise ImportError
    monkeypatch.delitem(sys.modules, "tg_backend_webgpu.device", raising=False)
    reason = tg_backend_webgpu._check.__wrapped__()
    assert reason is not None and "wgpu is not installed" in reason and "pip install wgpu" in reason


def test_check_names_missing_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wgpu")
    from tg_backend_webgpu import device

    monkeypatch.setattr(device, "request_adapter", lambda: None)
    reason = tg_backend_webgpu._check.__wrapped__()
    assert reason is not None and "no adapter" in reason and "mesa-vulkan-drivers" in reason


def test_check_names_a_failing_driver_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wgpu")
    from tg_backend_webgpu import device

    def no_loader():  # type: ignore[no-untyped-def]
        raise RuntimeError("libvulkan.so.1: cannot open shared object file")

    monkeypatch.setattr(device, "request_adapter", no_loader)
    reason = tg_backend_webgpu._check.__wrapped__()
    assert reason is not None and "libvulkan.so.1" in reason and "mesa-vulkan-drivers libvulkan1" in reason


def test_device_listing_shows_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -m tinygrad.device` prints the check's reason next to WEBGPU."""
    code = ("import sys; sys.modules['wgpu'] = None\n"
            "import runpy; runpy.run_module('tinygrad.device', run_name='__main__')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("WEBGPU"))
    assert "wgpu is not installed" in line


def test_device_number_other_than_zero_is_refused(webgpu_device) -> None:  # type: ignore[no-untyped-def]
    from tg_backend_webgpu.device import WebGPUDevice
    from tinygrad.device import Device

    with pytest.raises(RuntimeError, match="no WEBGPU device number 1"):
        WebGPUDevice(1)
    with pytest.raises(RuntimeError, match="no WEBGPU device number 1"):
        Device["WEBGPU:1"]


def _ast(n: int, dtype=dtypes.float32, reduce: int = 0) -> UOp:  # type: ignore[no-untyped-def]
    out = UOp(Ops.PARAM, dtype, (), (0, n)).reshape((n,))
    if reduce:
        src = UOp(Ops.PARAM, dtype, (), (1, n * reduce)).reshape((n, reduce))
        value = src.reduce_axis(Ops.ADD, (1,)).reshape((n,))
    else:
        src = UOp(Ops.PARAM, dtype, (), (1, n)).reshape((n,))
        value = UOp(Ops.SQRT, dtype, (src,)) * src if dtype.is_float else src + src
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, value)),))


def test_renderer_writes_wgsl() -> None:
    from tg_backend_webgpu.renderer import WGSLRenderer
    from tinygrad.codegen import get_program

    spec = get_program(_ast(37), WGSLRenderer())
    src = spec.src
    assert "@group(0) @binding(0) var<storage, read_write> data0: array<f32>;" in src
    # the work-group shape is the runtime's to set: pipeline-overridable constants, one local size per dimension
    assert "override tg_local_0: u32" in src and "@compute @workgroup_size(tg_workgroup_size)" in src
    assert "local_invocation_index" in src and "workgroupBarrier" not in src
    assert "if ((gidx0 < 37i))" in src and "for (" not in src and "sqrt(" in src
    assert spec.global_size is not None and spec.global_size[0] >= 37


def test_reduction_loop_stays_a_loop_inside_the_work_item() -> None:
    from tg_backend_webgpu.renderer import WGSLRenderer
    from tinygrad.codegen import get_program

    spec = get_program(_ast(5, reduce=7), WGSLRenderer())
    assert "if ((gidx0 < 5i))" in spec.src  # the runtime launches whole workgroups and spec.src.count("for (") == 1
    assert "var acc0: f32" in spec.src


def test_dtypes_follow_the_features() -> None:
    from tg_backend_webgpu.renderer import WGSLRenderer

    core = WGSLRenderer(frozenset())
    assert not core.supports_dtype(dtypes.float16) and not core.supports_dtype(dtypes.int64)
    assert all(core.supports_dtype(d) for d in (dtypes.bool, dtypes.uint8, dtypes.int16, dtypes.bfloat16))
    full = WGSLRenderer(frozenset({"shader-f16", "shader-int64"}))
    assert full.supports_dtype(dtypes.float16) and full.supports_dtype(dtypes.uint64)
    assert not full.supports_dtype(dtypes.float64)  # lavapipe's f64 exp2/log2/sin return garbage


def test_packed_stores_use_atomics_and_f16_enables_the_extension() -> None:
    from tg_backend_webgpu.renderer import WGSLRenderer
    from tinygrad.codegen import get_program

    src = get_program(_ast(9, dtypes.uint8), WGSLRenderer()).src
    assert "data0: array<atomic<u32>>" in src and "data1: array<u32>" in src
    assert "atomicAnd(&data0[" in src and "atomicOr(&data0[" in src
    half = get_program(_ast(9, dtypes.float16), WGSLRenderer()).src
    assert half.startswith("enable f16;") and "array<f16>" in half


def test_symbolic_sizes_come_in_a_uniform(webgpu_device) -> None:  # type: ignore[no-untyped-def]
    import numpy as np
    from tinygrad import Tensor, Variable

    x = Tensor(np.arange(10, dtype=np.float32), device="WEBGPU")
    n = Variable("n", 1, 10)
    before = set(webgpu_device._runners)
    np.testing.assert_array_equal((x[:n.bind(4)] * 2).numpy(), np.arange(4) * 2)
    (runner,) = [r for a, r in webgpu_device._runners.items() if a not in before]
    src = runner.spec.src
    assert "struct TgVars { v0: i32 }" in src and "var<uniform> tg_vars: TgVars;" in src
    assert "tg_vars.v0" in src and runner.spec.var_names == ("n",)
