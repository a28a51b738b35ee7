"""Discovery, the reasons AMD is unavailable (no tools, no HIP runtime, no GPU), the launch geometry, target
detection, the rendered source of simple kernels and - where an AMD GPU is present - a kernel that runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

tg_backend_amd = pytest.importorskip("tg_backend_amd", reason="tg-backend-amd is not installed")

from tg_backend_amd.launch import default_block, launch_dims  # noqa: E402
from tg_backend_amd.renderer import AMDRenderer  # noqa: E402
from tinygrad import Tensor  # noqa: E402
from tinygrad.codegen import get_program  # noqa: E402
from tinygrad.device import Device  # noqa: E402
from tinygrad.dtype import dtypes  # noqa: E402


def test_plugin_module_imports_neither_runtime_nor_compiler() -> None:
    code = ("import sys, tg_backend_amd; print(any(m.startswith('tg_backend_amd.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


def test_states_its_contract_and_registers_amd() -> None:
    (info,) = tg_backend_amd.tinygrad_backends()
    assert info.name == "AMD" and info.contract_version == tg_backend_amd.DEVICE_CONTRACT == "2.0"
    assert "AMD" in Device.backends and Device.backends["AMD"].package == "tg-backend-amd"


def test_check_names_missing_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TG_AMD_CLANG", "no-such-clang-19")
    reason = tg_backend_amd._check.__wrapped__()
    assert reason is not None and "no-such-clang-19" not in reason and "clang-19 not found" in reason
    assert "apt-get install clang-19 lld-19" in reason


def test_check_names_a_missing_hip_runtime(monkeypatch: pytest.MonkeyPatch, amd_tools: None) -> None:
    from tg_backend_amd import hip

    def no_lib() -> None:
        raise OSError("libamdhip64.so: cannot open shared object file")

    monkeypatch.setattr(hip, "load_hip", no_lib)
    reason = tg_backend_amd._check.__wrapped__()
    assert reason is not None and "HIP runtime is not installed" in reason and "TG_AMD_HIP_LIB" in reason


def test_check_names_no_gpu(monkeypatch: pytest.MonkeyPatch, amd_tools: None) -> None:
    from tg_backend_amd import hip

    monkeypatch.setattr(hip, "load_hip", lambda: None)
    monkeypatch.setattr(hip, "device_count", lambda: 0)
    reason = tg_backend_amd._check.__wrapped__()
    assert reason is not None and "no GPU" in reason


def test_unavailable_here_with_a_reason() -> None:
    if tg_backend_amd._check() is None:
        pytest.skip("an AMD GPU is usable here")
    assert Device.availability("AMD") is not None


def test_launch_dims() -> None:
    assert default_block((1000,)) == (256, 1, 1)
    assert launch_dims((1000,), None) == ((4, 1, 1), (256, 1, 1))
    assert launch_dims((2, 70000, 3), (2, 16, 1)) == ((1, 4375, 3), (2, 16, 1))  # no y limit to flatten around
    with pytest.raises(ValueError, match="exceeds the device's limits"):
        launch_dims((4096,), (2048,))
    with pytest.raises(ValueError, match="2\\*\\*32-1"):
        launch_dims((2**32 + 5,), (1,))


def test_targets_come_from_kfd_topology(tmp_path: Path) -> None:
    from tg_backend_amd.device import gfx_name, gpu_targets

    assert gfx_name(90402) == "gfx942" and gfx_name(110000) == "gfx1100" and gfx_name(90010) == "gfx90a"
    for node, version in (("0", 0), ("1", 90402), ("2", 110000)):
        (tmp_path / node).mkdir()
        (tmp_path / node / "properties").write_text(f"cpu_cores_count 4\ngfx_target_version {version}\n")
    assert gpu_targets(tmp_path) == ["gfx942", "gfx1100"]


# ---- rendered source ----

def _src(out: Tensor) -> str:
    (si,) = [s for s in Tensor.schedule(out) if not s.is_copy]
    return get_program(si.ast, AMDRenderer()).src


def _cpu(*shape: int, dtype=dtypes.float32) -> Tensor:  # type: ignore[no-untyped-def]
    return Tensor.empty(*shape, dtype=dtype, device="CPU")


def test_kernels_use_amdgcn_builtins_and_no_headers() -> None:
    src = _src(_cpu(1000) + _cpu(1000))
    assert 'extern "C" __attribute__((global)) __attribute__((amdgpu_flat_work_group_size(1, 1024))) void' in src
    assert "__builtin_amdgcn_workgroup_id_x()*__builtin_amdgcn_workgroup_size_x()+__builtin_amdgcn_workitem_id_x()" \
        in src
    assert "#include" not in src


def test_group_reduction_in_lds_with_fenced_barrier() -> None:
    src = _src(_cpu(8, 8192).sum(1))
    assert "__attribute__((shared)) float temp0[" in src
    assert '__builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); __builtin_amdgcn_s_barrier();' in src


def test_half_bfloat16_and_math_builtins() -> None:
    assert "_Float16* __restrict__ data0" in _src(_cpu(64, dtype=dtypes.float16) + 1)
    bf = _src(_cpu(64, dtype=dtypes.bfloat16).exp())
    assert "static __attribute__((device)) __attribute__((always_inline)) inline unsigned short tg_f32_to_bf16" in bf
    assert "__builtin_exp2f(" in bf and "exp2f(" not in bf.replace("__builtin_exp2f(", "")
    assert "__builtin_bit_cast(int, (float)(x))" == AMDRenderer().pun("x", "float", "int")


def test_compile_gives_a_code_object_per_target(amd_tools: None) -> None:
    from tg_backend_amd.compiler import AMDCompiler

    src = _src(_cpu(1000) * 2)
    for arch, wave in (("gfx942", 64), ("gfx1100", 32)):
        compiler = AMDCompiler(arch)
        lib = compiler.compile(src)
        assert lib[:4] == b"\x7fELF" and f"amdgcn-amd-amdhsa--{arch}".encode() in lib
        asm = compiler.disassemble(lib, src)
        assert asm is not None and f".wavefront_size: {wave}" in asm
    assert AMDCompiler("gfx942").cache_key != AMDCompiler("gfx1100").cache_key


def test_compile_errors_carry_the_log_and_the_source(amd_tools: None) -> None:
    from tg_backend_amd.compiler import AMDCompiler
    from tinygrad.errors import CompileError

    src = 'extern "C" __attribute__((global)) void broken(float* x) { x[0] = undefined_name; }'
    with pytest.raises(CompileError, match="undefined_name") as info:
        AMDCompiler("gfx942").compile(src)
    assert "--- log ---" in str(info.value) and "--- source ---" in str(info.value)
    with pytest.raises(CompileError, match="not an AMD GPU target"):
        AMDCompiler("sm_90")


def test_add_runs_on_the_gpu(amd_device) -> None:  # type: ignore[no-untyped-def]
    a, b = np.arange(1000, dtype=np.float32), np.full(1000, 0.5, dtype=np.float32)
    np.testing.assert_array_equal((Tensor(a, device="AMD") + Tensor(b, device="AMD")).numpy(), a + b)
