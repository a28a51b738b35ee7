"""Discovery, availability reasons (simulated: wgpu missing, no adapter, no Vulkan loader), the renderer's
WGSL and the dtypes it claims for each feature set."""

from __future__ import annotations

import os
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
    assert tg_backend_webgpu.DEVICE_CONTRACT == "2.0"
    (info,) = tg_backend_webgpu.tinygrad_backends()
    assert info.name == "WEBGPU" and info.contract_version == "2.0"


def test_check_names_missing_wgpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wgpu", None)  # makes `import wgpu` raise ImportError
    monkeypatch.delitem(sys.modules, "tg_backend_webgpu.device", raising=False)
    reason = tg_backend_webgpu._probe.__wrapped__()[1]
    assert reason is not None and "wgpu is not installed" in reason and "pip install wgpu" in reason


def test_check_names_missing_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wgpu")
    from tg_backend_webgpu import device

    monkeypatch.setattr(device, "request_adapter", lambda: None)
    reason = tg_backend_webgpu._probe.__wrapped__()[1]
    assert reason is not None and "no adapter" in reason and "mesa-vulkan-drivers" in reason


def test_check_names_a_failing_driver_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wgpu")
    from tg_backend_webgpu import device

    def no_loader():  # type: ignore[no-untyped-def]
        raise RuntimeError("libvulkan.so.1: cannot open shared object file")

    monkeypatch.setattr(device, "request_adapter", no_loader)
    reason = tg_backend_webgpu._probe.__wrapped__()[1]
    assert reason is not None and "libvulkan.so.1" in reason and "mesa-vulkan-drivers libvulkan1" in reason


def test_device_listing_shows_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -m tinygrad.device` prints the check's reason next to WEBGPU."""
    code = ("import sys; sys.modules['wgpu'] = None\n"
            "import runpy; runpy.run_module('tinygrad.device', run_name='__main__')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("WEBGPU"))
    assert "wgpu is not installed" in line


@pytest.mark.parametrize("info,software", [
    ({"device": "llvmpipe (LLVM 15.0.6, 256 bits)", "adapter_type": "CPU", "backend_type": "Vulkan"},
     "llvmpipe (LLVM 15.0.6, 256 bits) through Vulkan, a renderer on the host CPU"),
    ({"device": "llvmpipe (LLVM 15.0.6, 256 bits)", "adapter_type": "CPU", "backend_type": "OpenGL"},
     "llvmpipe (LLVM 15.0.6, 256 bits) through OpenGL, a renderer on the host CPU"),
    # a driver that does not report the CPU type is still known by its renderer's name
    ({"device": "SwiftShader Device (Subzero)", "adapter_type": "Unknown", "backend_type": "Vulkan"},
     "SwiftShader Device (Subzero) through Vulkan, a renderer on the host CPU"),
    ({"device": "NVIDIA H100 80GB HBM3", "adapter_type": "DiscreteGPU", "backend_type": "Vulkan"}, None),
    ({"device": "Mesa Intel(R) UHD Graphics 630", "adapter_type": "IntegratedGPU", "backend_type": "OpenGL"}, None),
])
def test_software_adapters_are_told_from_gpus(info: dict[str, str], software: str | None) -> None:
    assert tg_backend_webgpu.software_adapter(info) == software


def _adapter_info_or_skip() -> dict[str, str]:
    pytest.importorskip("wgpu")
    info, reason = tg_backend_webgpu._probe()
    if info is None:
        pytest.skip(f"no usable WebGPU adapter: {reason}")
    return dict(info)


def test_a_cpu_adapter_here_is_software_and_ranks_after_cpu() -> None:
    info = _adapter_info_or_skip()
    if info.get("adapter_type") != "CPU":
        pytest.skip(f"the adapter here is {info.get('device')} ({info.get('adapter_type')}), not a CPU adapter")
    assert tg_backend_webgpu._software() == tg_backend_webgpu.software_adapter(info) is not None
    from tinygrad.device import Device

    if "CPU" not in Device.backends or Device.availability("CPU") is not None:
        pytest.skip("the CPU backend is not usable here")
    code = "from tinygrad import Device; print(Device.DEFAULT, *Device.ranking())"
    env = {k: v for k, v in os.environ.items() if k != "DEV"}
    default, *ranking = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                       env=env).stdout.split()
    assert default != "WEBGPU" and ranking.index("CPU") < ranking.index("WEBGPU"), ranking
    code = ("from tinygrad import Device, Tensor; t = Tensor([1.0, 2.0]) * 3\n"
            "print(Device.DEFAULT, t.device, t.tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**env, "DEV": "WEBGPU"}).stdout.strip()
    assert out == "WEBGPU WEBGPU [3.0, 6.0]"


def test_probing_devices_prints_nothing_on_stderr() -> None:
    """Without XDG_RUNTIME_DIR (a machine with no desktop session), wgpu's GL backend made libwayland print
    `error: XDG_RUNTIME_DIR is invalid` for every look for an adapter; the listing must have a clean stderr."""
    _adapter_info_or_skip()
    env = {k: v for k, v in os.environ.items() if k not in ("DEV", "XDG_RUNTIME_DIR", "DEBUG")}
    proc = subprocess.run([sys.executable, "-m", "tinygrad.device"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert next(ln for ln in proc.stdout.splitlines() if ln.startswith("WEBGPU ")).split()[4] == "available"


def _write_fd2(text: str) -> None:
    os.write(2, text.encode())


def test_held_stderr_is_dropped_on_success(capfd: pytest.CaptureFixture[str]) -> None:
    from tg_backend_webgpu.stderr import hold_stderr

    assert hold_stderr(lambda: _write_fd2("driver noise\n") or 7, failed=lambda r: r is None) == 7
    sys.stderr.write("after\n")
    assert capfd.readouterr().err == "after\n"


def test_held_stderr_is_shown_when_the_probe_fails(capfd: pytest.CaptureFixture[str]) -> None:
    from tg_backend_webgpu.stderr import hold_stderr

    assert hold_stderr(lambda: _write_fd2("why none was found\n"), failed=lambda r: r is None) is None
    assert capfd.readouterr().err == "why none was found\n"

    def raising() -> None:
        _write_fd2("loader: libvulkan.so.1 missing\n")
        raise RuntimeError("no backend")

    with pytest.raises(RuntimeError, match="no backend"):
        hold_stderr(raising, failed=lambda r: False)
    assert capfd.readouterr().err == "loader: libvulkan.so.1 missing\n"


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


def test_the_opened_adapter_claims_what_its_features_allow(webgpu_device) -> None:  # type: ignore[no-untyped-def]
    features = webgpu_device.adapter.features
    assert webgpu_device.supports_dtype(dtypes.float16) == ("shader-f16" in features)
    for d in (dtypes.int64, dtypes.uint64):
        assert webgpu_device.supports_dtype(d) == ("shader-int64" in features)


_GL_PROGRAM = """
import wgpu
from tinygrad import Device, Tensor, dtypes
from tinygrad.errors import DeviceDTypeError
dev = Device["WEBGPU"]
assert dev.adapter.info["backend_type"] == "OpenGL", dev.adapter.info
features = dev.adapter.features
print("claims", *(d.name for d in (dtypes.float16, dtypes.int64) if dev.supports_dtype(d)))
print("features", *sorted(f for f in ("shader-f16", "shader-int64") if f in features))
print("one_hot", Tensor([0, 2, 1]).one_hot(3).tolist())
try:
    Tensor([1, 2], dtype=dtypes.int64).realize()
    print("int64 held")
except DeviceDTypeError as e:
    print("int64 refused", "cannot hold int64" in str(e))
"""


def test_wgpus_gl_backend_claims_only_what_it_has() -> None:
    """wgpu's OpenGL backend (over llvmpipe here) has neither shader-f16 nor shader-int64: WEBGPU on it claims
    neither float16 nor int64, one_hot runs, and an int64 tensor is refused with the device's dtypes named."""
    pytest.importorskip("wgpu")
    env = {**{k: v for k, v in os.environ.items() if k != "DEV"}, "WGPU_BACKEND_TYPE": "OpenGL", "DEV": "WEBGPU"}
    probe = "import wgpu; a = wgpu.gpu.request_adapter_sync(); print(a is not None and a.info['backend_type'])"
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    if found.returncode != 0 or found.stdout.strip() != "OpenGL":
        pytest.skip(f"wgpu has no OpenGL adapter here: {found.stdout.strip()} {found.stderr.strip()[-300:]}")
    proc = subprocess.run([sys.executable, "-c", _GL_PROGRAM], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(" ", 1) if " " in line else (line, "") for line in proc.stdout.splitlines())
    claimed = set(lines["claims"].split())
    features = set(lines["features"].split())
    assert ("float16" in claimed) == ("shader-f16" in features)
    assert ("int64" in claimed) == ("shader-int64" in features)
    assert lines["one_hot"] == "[[1, 0, 0], [0, 0, 1], [0, 1, 0]]"
    assert lines["int64"] == ("held" if "int64" in claimed else "refused True"), proc.stdout


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


def test_a_kernel_past_the_buffer_limit_is_refused_by_name(webgpu_device, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """wgpu's OpenGL backend binds fewer storage buffers per kernel than its Vulkan one; a kernel past the limit is
    refused with the kernel, both counts and what to do, not wgpu's bind-group validation error."""
    from tinygrad import Tensor

    monkeypatch.setattr(webgpu_device, "max_storage_buffers", 2)
    a = Tensor([1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0], device="WEBGPU").realize()
    b = Tensor([0.5] * 7, device="WEBGPU").realize()
    with pytest.raises(RuntimeError, match=r"binds 3 buffers, but .* allows 2 per kernel \(maxStorageBuffersPerShader"):
        (a * 3 - b).realize()
