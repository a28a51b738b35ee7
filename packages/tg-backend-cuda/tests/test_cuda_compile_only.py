"""Compile-only checks of the CUDA backend, for a machine without a GPU, through the conformance kit's compile-only
mode: the kit's stand-in device builds every kernel with this backend's renderer and NVRTC for a target (SASS for
sm_80 or sm_90, the cubin the device would load) and runs none.

    pytest --pyargs tinygrad.conformance --tg-device=CUDA --tg-compile-only --tg-target=sm_90

`nox -s backend_cuda` runs that for sm_80 and sm_90 (the kit's checks and its table of ~300 Tensor expressions).
Here: the backend's `tinygrad_compile_only` hook, a few kernels built in process on the kit's stand-in, how a
kernel that does not compile is reported, the usage errors, and, in a subprocess with TG_CUDA_COMPILE_TABLES=1,
the kit and the op table (packages/tg-core/tests/test_ops.py) for both targets: those take minutes, and nox leaves
the op table out (-k). Whether kernels compute the right values is checked only on a GPU (`--tg-device=CUDA`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tg_backend_cuda", reason="tg-backend-cuda is not installed")

from tg_backend_cuda.compiler import CUDACompiler
from tg_backend_cuda.renderer import CUDARenderer
from tinygrad.conformance import expressions, standin
from tinygrad.conformance.compile_only import CompileOnlyBackend, check_tables_compile, compile_only_backends
from tinygrad.device import Device
from tinygrad.errors import CompileError
from tinygrad.uop.ops import UOp

ROOT = Path(__file__).resolve().parents[3]
TARGETS = ("sm_80", "sm_90")
TABLES_ENV = "TG_CUDA_COMPILE_TABLES"
#: a few expressions of the kit's table whose CUDA differs most between targets or from the C-style base
SAMPLE = ("add-float16", "cast-float32-bfloat16", "bitcast-bfloat16-float16", "sum-grouped", "matmul-bfloat16",
          "index-int64", "grid-tall", "symbolic-matmul", "cast-float32-fp8e4m3")


def test_the_hook_offers_the_targets_nvrtc_knows(nvrtc: None) -> None:
    backend = compile_only_backends()["CUDA"]
    assert backend.package == "tg-backend-cuda" and "NVRTC" in backend.description
    assert {"sm_80", "sm_90"} <= set(backend.targets())
    renderer, compiler = backend.make("sm_80")
    assert renderer.arch == "sm_80" and compiler.arch == "sm_80" and compiler.cubin  # type: ignore[attr-defined]


@pytest.mark.parametrize("target", TARGETS)
def test_kernels_build_on_the_kits_standin(nvrtc: None, target: str) -> None:
    standin.drain()
    with standin.standin_device("CUDA", target) as name:
        dev = Device[name]
        for expr in SAMPLE:
            for ast in expressions.build(expr, name):
                dev.get_runner(ast)
    records = standin.drain()
    assert records and all(r.stage == "ok" and r.target == target for r in records), records
    assert name not in Device.backends  # the stand-in is gone after the block


class BrokenRenderer(CUDARenderer):
    """CUDA's renderer, with an undefined name in the kernel's body."""

    def render(self, name: str, program: list[UOp]) -> str:
        src = super().render(name, program)
        return src.replace("{\n", "{\n  int tg_broken = undefined_name;\n", 1) if "{\n" in src else src


def test_a_kernel_that_does_not_compile_is_reported_with_the_message_and_the_source(nvrtc: None) -> None:
    real = compile_only_backends()["CUDA"]
    broken = CompileOnlyBackend(name="CUDA", targets=real.targets,
                                make=lambda t: (BrokenRenderer(t), CUDACompiler(t, cubin=True)))
    standin.drain()
    with standin.standin_device(broken, "sm_90", name="CUDA_BROKEN") as name:
        (ast,) = expressions.build("add-float32", name)
        with pytest.raises(CompileError, match="undefined_name"):
            Device[name].get_runner(ast)
    (record,) = standin.drain()
    assert record.stage == "compile" and record.kernel.startswith("E_") and record.target == "sm_90"
    assert 'identifier "undefined_name" is undefined' in record.message
    assert "extern" not in record.message  # the source is in the excerpt, not repeated in the message
    assert "> " in record.excerpt and "undefined_name" in record.excerpt
    outcomes = standin.CompileOutcomes("sm_90")
    outcomes.add([record])
    assert "0 kernels rendered and compiled, 1 failed to compile" in outcomes.summary("CUDA")
    assert any("failed to compile for sm_90" in line for line in outcomes.failure_lines())


def _usage_error(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--co", "-q",
                           "--pyargs", "tinygrad.conformance", *args], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    return proc.stderr


def test_an_unknown_target_is_a_usage_error_that_lists_the_valid_ones(nvrtc: None) -> None:
    err = _usage_error("--tg-device=CUDA", "--tg-compile-only", "--tg-target=sm_91")
    assert "--tg-target=sm_91: not a target of CUDA's compiler" in err and "sm_80, " in err and "sm_90" in err
    err = _usage_error("--tg-device=CUDA", "--tg-compile-only")
    assert "needs --tg-target" in err and "sm_90" in err
    err = _usage_error("--tg-device=CUDA", "--tg-target=sm_90")
    assert "add --tg-compile-only" in err


def test_a_backend_without_compile_only_support_is_a_usage_error() -> None:
    err = _usage_error("--tg-device=CPU", "--tg-compile-only", "--tg-target=x86-64")
    assert "backend CPU has no compile-only support" in err and "tinygrad_compile_only" in err and "CUDA" in err


# ---- the kit and the op table in compile-only mode, in a subprocess (minutes each) ----

@pytest.mark.parametrize("target", TARGETS)
def test_conformance_kit_kernels_compile(nvrtc: None, tmp_path: Path, target: str) -> None:
    check_tables_compile(["--pyargs", "tinygrad.conformance"], "CUDA", target, str(tmp_path / "kit.json"), at_least=500,
                         opt_in=TABLES_ENV, session="backend_cuda", cwd=str(ROOT),
                         env={"TINYGRAD_CACHE_DIR": str(tmp_path / "cache")})


@pytest.mark.parametrize("target", TARGETS)
def test_op_table_kernels_compile(nvrtc: None, tmp_path: Path, target: str) -> None:
    check_tables_compile([str(ROOT / "packages/tg-core/tests/test_ops.py")], "CUDA", target, str(tmp_path / "ops.json"),
                         at_least=200, opt_in=TABLES_ENV, session="backend_cuda", cwd=str(ROOT),
                         env={"DEV": "CUDA", "TINYGRAD_CACHE_DIR": str(tmp_path / "cache")})
