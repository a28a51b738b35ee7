"""Compile-only checks of the AMD backend, for a machine without an AMD GPU, through the conformance kit's
compile-only mode: the kit's stand-in device builds every kernel with this backend's renderer and compiler for a
target (clang-19 to amdgcn, ld.lld-19 to the code object the device would load: gfx942 is CDNA3, wave64; gfx1100
is RDNA3, wave32) and runs none.

    pytest --pyargs tinygrad.conformance --tg-device=AMD --tg-compile-only --tg-target=gfx942

`nox -s backend_amd` runs that for gfx942 and gfx1100 (the kit's checks and its table of ~300 Tensor
expressions). Here: the backend's `tinygrad_compile_only` hook, a few kernels built in process on the kit's
stand-in, and, in a subprocess with TG_AMD_COMPILE_TABLES=1, the kit and the op table
(packages/tg-core/tests/test_ops.py) for both targets: those take minutes, and nox leaves the op table out (-k).
Whether kernels compute the right values is checked only on an AMD GPU (`--tg-device=AMD`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tg_backend_amd", reason="tg-backend-amd is not installed")

from tg_backend_amd.compiler import check_code_object
from tinygrad.conformance import expressions, standin
from tinygrad.conformance.compile_only import check_tables_compile, compile_only_backends
from tinygrad.device import Device

ROOT = Path(__file__).resolve().parents[3]
TARGETS = ("gfx942", "gfx1100")
TABLES_ENV = "TG_AMD_COMPILE_TABLES"
#: a few expressions of the kit's table: half and bfloat16, the 8-bit floats, LDS reductions, 64-bit indices
SAMPLE = ("add-float16", "cast-float32-bfloat16", "bitcast-bfloat16-float16", "sum-grouped", "matmul-bfloat16",
          "index-int64", "grid-tall", "symbolic-matmul", "cast-float32-fp8e4m3")


def test_the_hook_offers_the_targets_clang_knows(amd_tools: None) -> None:
    backend = compile_only_backends()["AMD"]
    assert backend.package == "tg-backend-amd" and "clang-19" in backend.description
    targets = set(backend.targets())
    assert {"gfx90a", "gfx942", "gfx1100", "gfx1201"} <= targets and not any("generic" in t for t in targets)
    renderer, compiler = backend.make("gfx1100")
    assert renderer.arch == compiler.arch == "gfx1100"  # type: ignore[attr-defined]


@pytest.mark.parametrize("target", TARGETS)
def test_kernels_build_on_the_kits_standin(amd_tools: None, target: str) -> None:
    standin.drain()
    with standin.standin_device("AMD", target) as name:
        dev = Device[name]
        for expr in SAMPLE:
            for ast in expressions.build(expr, name):
                lib = dev.get_runner(ast).lib
                assert check_code_object(lib, target) is None
    records = standin.drain()
    assert records and all(r.stage == "ok" and r.target == target for r in records), records


def test_a_code_object_for_another_target_is_refused() -> None:
    assert check_code_object(b"not an elf", "gfx942") is not None


def test_an_unknown_target_is_a_usage_error_that_lists_the_valid_ones(amd_tools: None) -> None:
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--co", "-q", "--pyargs",
                           "tinygrad.conformance", "--tg-device=AMD", "--tg-compile-only", "--tg-target=gfx9999"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert "--tg-target=gfx9999: not a target of AMD's compiler" in proc.stderr and "gfx942, " in proc.stderr


# ---- the kit and the op table in compile-only mode, in a subprocess (minutes each) ----

@pytest.mark.parametrize("target", TARGETS)
def test_conformance_kit_kernels_compile(amd_tools: None, tmp_path: Path, target: str) -> None:
    check_tables_compile(["--pyargs", "tinygrad.conformance"], "AMD", target, str(tmp_path / "kit.json"), at_least=500,
                         opt_in=TABLES_ENV, session="backend_amd", cwd=str(ROOT),
                         env={"TINYGRAD_CACHE_DIR": str(tmp_path / "cache")})


@pytest.mark.parametrize("target", TARGETS)
def test_op_table_kernels_compile(amd_tools: None, tmp_path: Path, target: str) -> None:
    check_tables_compile([str(ROOT / "packages/tg-core/tests/test_ops.py")], "AMD", target, str(tmp_path / "ops.json"),
                         at_least=200, opt_in=TABLES_ENV, session="backend_amd", cwd=str(ROOT),
                         env={"DEV": "AMD", "TINYGRAD_CACHE_DIR": str(tmp_path / "cache")})


# ---- tensor cores: the TC opt's kernels compiled for each target (whether they compute right: on a GPU, and on
# an emulation of the same layouts in tg-backend-opencl's test_tensor_core_emulation.py) ----

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_tensor_core_kernels_compile(amd_tools: None, target: str, dtype: str) -> None:
    """Matmuls and a convolution of float16/bfloat16 get the TC opt from the heuristics: RDNA3's WMMA in a
    wave32 work-group, CDNA3's MFMA in a wave64 one, and the assembly has the instruction."""
    from tg_backend_amd.compiler import AMDCompiler
    from tg_backend_amd.renderer import AMDRenderer
    from tinygrad import Tensor, dtypes
    from tinygrad.codegen import get_program

    d = getattr(dtypes, dtype)
    renderer, compiler = AMDRenderer(target), AMDCompiler(target)
    suffix = "f16" if d == dtypes.float16 else "bf16"
    wave, instruction = (32, f"v_wmma_f32_16x16x16_{suffix}") if target == "gfx1100" else \
        (64, f"v_mfma_f32_16x16x16_{suffix}")
    outs = [Tensor.empty(128, 64, dtype=d).dot(Tensor.empty(64, 96, dtype=d), dtype=dtypes.float32),
            Tensor.empty(64, 32, dtype=d) @ Tensor.empty(32, 48, dtype=d),
            Tensor.empty(2, 32, 18, 18, dtype=d).conv2d(Tensor.empty(16, 32, 3, 3, dtype=d), dtype=dtypes.float32)]
    for out in outs:
        (si,) = out.schedule()
        spec = get_program(si.ast, renderer)
        assert spec.applied_opts[0].startswith("TC(") and spec.local_size is not None and spec.local_size[0] == wave
        assert instruction in compiler.assembly(spec.src), spec.src
        check_code_object(compiler.compile(spec.src), target)
