"""Finding the C compiler, and what users see when there is none."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
import tg_backend_cpu
from tg_backend_cpu.compiler import CANDIDATES, CCompiler
from tinygrad.errors import CompileError


def test_cc_pointing_nowhere_names_cc_and_the_fix(fresh_compiler_lookup, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "/nonexistent")
    path, reason = fresh_compiler_lookup()
    assert path is None
    assert reason is not None and "CC=/nonexistent" in reason
    assert "unset CC" in reason and ("clang" in reason or "gcc" in reason)
    with pytest.raises(RuntimeError, match="CC=/nonexistent"):
        CCompiler()


def test_cc_naming_a_compiler_on_path_is_used(fresh_compiler_lookup, monkeypatch: pytest.MonkeyPatch) -> None:
    found = next((shutil.which(c) for c in CANDIDATES if shutil.which(c)), None)
    if found is None:
        pytest.skip("no C compiler installed")
    monkeypatch.setenv("CC", os.path.basename(found))
    assert fresh_compiler_lookup() == (found, None)


def test_no_compiler_at_all(fresh_compiler_lookup, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory
    path, reason = fresh_compiler_lookup()
    assert path is None
    assert reason is not None and "no C compiler found" in reason
    assert "apt-get install" in reason and "CC" in reason


def test_lookup_is_cached_until_cleared(fresh_compiler_lookup, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "/nonexistent")
    first = fresh_compiler_lookup()
    monkeypatch.setenv("CC", "/also-nonexistent")
    assert fresh_compiler_lookup() == first  # functools.cache: the environment is read once
    fresh_compiler_lookup.cache_clear()
    assert "also-nonexistent" in fresh_compiler_lookup()[1]


def test_backend_check_reports_the_reason(fresh_compiler_lookup, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "/nonexistent")
    assert "CC=/nonexistent" in tg_backend_cpu._check()
    monkeypatch.delenv("CC")
    fresh_compiler_lookup.cache_clear()
    if fresh_compiler_lookup()[0] is not None:
        assert tg_backend_cpu._check() is None


def test_device_listing_shows_cpu_unavailable_with_the_reason(fresh_compiler_lookup,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from tinygrad.device import Device
    from tinygrad.device.__main__ import report

    monkeypatch.setenv("CC", "/nonexistent")
    assert "CC=/nonexistent" in Device.availability("CPU")
    cpu_line = next(line for line in report().splitlines() if line.startswith("CPU"))
    assert "unavailable" in cpu_line and "CC=/nonexistent" in cpu_line and "tg-backend-cpu" in cpu_line


def test_a_compiler_that_is_not_executable_is_not_found(fresh_compiler_lookup, monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    fake = tmp_path / "clang"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(stat.S_IRUSR | stat.S_IWUSR)  # not executable
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert fresh_compiler_lookup()[0] is None


def test_compile_error_names_the_compiler_and_shows_the_source(fresh_compiler_lookup) -> None:
    if fresh_compiler_lookup()[0] is None:
        pytest.skip("no C compiler installed")
    cc = CCompiler()
    with pytest.raises(CompileError) as err:
        cc.compile("void broken(void) { this is not C; }")
    assert cc.path in str(err.value) and "this is not C" in str(err.value)


def test_cache_key_names_the_compiler_and_flags(fresh_compiler_lookup) -> None:
    if fresh_compiler_lookup()[0] is None:
        pytest.skip("no C compiler installed")
    cc = CCompiler()
    assert cc.version in cc.cache_key and "-fwrapv" in cc.cache_key and "-march=native" in cc.cache_key


# A reduction over a select of a comparison: the shape of a relu-of-matmul gradient. gcc 12.2 at -O3 with its loop
# if-conversion on computes [-1, 7, -1, 8] here; the flags CCompiler uses must give the right answer with every
# compiler found on this machine.
SELECT_IN_REDUCTION = """
#include <stdbool.h>
void k(float* restrict out, const float* restrict w, const float* restrict g, const float* restrict z) {
  for (int i = 0; i < 2; i++) for (int j = 0; j < 2; j++) {
    float acc = 0.0f;
    for (int r = 0; r < 2; r++) {
      float v = z[r + i*2];
      acc = acc + (((bool)((v < 0.0f) | (v == 0.0f))) ? 0.0f : g[r + i*2] * 1.0f) * w[r + j*2];
    }
    out[j + i*2] = acc;
  }
}
"""


@pytest.mark.parametrize("name", ["gcc", "clang"])
def test_the_chosen_flags_do_not_miscompile_selects_in_reductions(name: str, fresh_compiler_lookup,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np
    from tg_backend_cpu.device import CPUProgram

    if shutil.which(name) is None:
        pytest.skip(f"{name} is not installed here")
    monkeypatch.setenv("CC", name)
    fresh_compiler_lookup()
    from tinygrad.codegen import ProgramSpec

    # hand-written C: the spec names the function and its buffers; no estimate, so one thread
    spec = ProgramSpec("k", SELECT_IN_REDUCTION, (0, 1, 2, 3), None, None, estimated_ops=0, estimated_bytes=0)
    program = CPUProgram(spec, CCompiler().compile(SELECT_IN_REDUCTION))
    w = np.array([[1.0, -1.0], [2.0, 1.0]], np.float32)
    g = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    z = g @ w  # all positive: the select passes g through
    out = np.zeros(4, np.float32)
    program(*[(a, a.ctypes.data) for a in (out, w, g, z)])
    np.testing.assert_array_equal(out.reshape(2, 2), g @ w.T)


def test_kernels_use_compiler_builtins_instead_of_math_h() -> None:
    """The CPU prelude replaces <math.h> by builtins (a tenth of a small kernel's compile time): every libm
    function the C renderer can call must be among them, or kernels that call it would not compile."""
    from tg_backend_cpu.renderer import BUILTIN_MATH, CPURenderer
    from tinygrad.dtype import dtypes
    r = CPURenderer()
    assert "math.h" not in r.prelude
    called = {r.math_fn(op, d) for op in r.math_fns for d in (dtypes.float32, dtypes.float64)} | {"fmod", "fmodf"}
    # float32's exp2 and log2 are the kernel's own helpers (tg_backend_cpu.vector_math), which under gcc stand for
    # libm's exp2f and log2f
    from tg_backend_cpu.vector_math import HELPERS
    helpers = {h.c_name for h in HELPERS.values()}
    assert helpers == {"tg_exp2f", "tg_log2f"} <= called and {"exp2f", "log2f"} <= set(BUILTIN_MATH)
    assert called - helpers <= set(BUILTIN_MATH), sorted(called - set(BUILTIN_MATH))


# ---- which path compiles kernels, and what the device listing says about it ----

NO_LLVMLITE = "llvmlite, a dependency of tg-backend-cpu, cannot be imported (ImportError: none here); `pip install ..."


def _machine_with(monkeypatch: pytest.MonkeyPatch, compiler: str | None, llvmlite: bool) -> None:
    """A machine whose only C compiler is `compiler` (None: none), where llvmlite imports or not."""
    from tg_backend_cpu import compiler as cc

    for var in ("CC", cc.COMPILER_ENV, "DEV"):
        monkeypatch.delenv(var, raising=False)
    found = (compiler, None) if compiler else (None, "no C compiler found")
    monkeypatch.setattr(cc, "find_c_compiler", lambda: found)
    monkeypatch.setattr(cc, "clang_major", lambda path: 19 if "clang" in path else None)
    monkeypatch.setattr(cc, "compiler_version", lambda path: "19.1.7" if "clang" in path else "12.2.0")
    monkeypatch.setattr(cc, "llvmlite_problem", lambda: None if llvmlite else NO_LLVMLITE)


@pytest.mark.parametrize(("compiler", "llvmlite", "llvm"), [
    ("/usr/bin/clang-19", True, True),  # LLVM is the default on every machine, a C compiler or not
    ("/usr/bin/gcc", True, True),
    (None, True, True),
    ("/usr/bin/gcc", False, False),  # llvmlite missing (no wheel for the platform): the C compiler
    ("/usr/bin/clang-19", False, False),
])
def test_the_default_path_is_llvm_and_a_c_compiler_only_without_llvmlite(
        monkeypatch: pytest.MonkeyPatch, compiler: str | None, llvmlite: bool, llvm: bool) -> None:
    from tg_backend_cpu import compiler as cc

    _machine_with(monkeypatch, compiler, llvmlite)
    assert cc.uses_llvm() is llvm
    for choice, expected in (("gcc", False), ("clang", False), ("llvm", True)):  # an explicit choice wins
        monkeypatch.setenv(cc.COMPILER_ENV, choice)
        assert cc.uses_llvm() is expected
    monkeypatch.delenv(cc.COMPILER_ENV)
    monkeypatch.setenv("CC", "gcc")  # CC names the C compiler to use: the C path
    assert cc.uses_llvm() is False
    monkeypatch.setenv(cc.COMPILER_ENV, "llvm")  # unless CPU_COMPILER says llvm
    assert cc.uses_llvm() is True


@pytest.mark.parametrize(("dev", "llvm"), [("CPU:CLANG", False), ("CPU:GCC", False), ("CPU:LLVM", True),
                                           ("CPU", True), ("CPU:1", True)])
def test_tinygrads_dev_names_the_path(monkeypatch: pytest.MonkeyPatch, dev: str, llvm: bool) -> None:
    from tg_backend_cpu import compiler as cc
    from tinygrad.helpers import DEV

    _machine_with(monkeypatch, "/usr/bin/gcc", llvmlite=True)
    monkeypatch.setattr(DEV, "value", dev)  # DEV is read from the environment once, at import
    assert cc.uses_llvm() is llvm
    monkeypatch.setenv(cc.COMPILER_ENV, "llvm" if not llvm else "gcc")  # CPU_COMPILER is asked first
    assert cc.uses_llvm() is not llvm


def test_llvmlite_problem_says_why_and_how_to_fix_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from tg_backend_cpu import compiler as cc

    cc.llvmlite_problem.cache_clear()
    try:
        assert cc.llvmlite_problem() is None  # a dependency: it imports here
        cc.llvmlite_problem.cache_clear()
        monkeypatch.setitem(sys.modules, "llvmlite", None)
        monkeypatch.setitem(sys.modules, "llvmlite.binding", None)
        problem = cc.llvmlite_problem()
        assert problem is not None and "cannot be imported (ModuleNotFoundError" in problem
        assert "pip install llvmlite==0.50.0" in problem
    finally:
        cc.llvmlite_problem.cache_clear()


def test_the_listing_names_the_compiler_and_says_why_it_fell_back(monkeypatch: pytest.MonkeyPatch) -> None:
    from tg_backend_cpu import compiler as cc

    _machine_with(monkeypatch, "/usr/bin/gcc", llvmlite=True)
    note = tg_backend_cpu._note()
    assert note is not None and note.startswith("compiler: llvm (llvmlite ") and "thread" in note
    assert "fallback" not in note
    _machine_with(monkeypatch, "/usr/bin/clang-19", llvmlite=False)
    note = tg_backend_cpu._note()
    assert note is not None and note.startswith("compiler: clang-19 19.1.7") and "thread" in note
    bits = cc.host_vector_bits()
    assert bits is None or f"{bits}-bit vectors" in note
    assert f"fallback from the LLVM path: {NO_LLVMLITE}" in note and "slower" not in note
    _machine_with(monkeypatch, "/usr/bin/gcc", llvmlite=False)
    note = tg_backend_cpu._note()
    assert note is not None and note.startswith("compiler: gcc 12.2.0")
    assert "fallback from the LLVM path" in note and "slower" in note and "clang >= 15" in note
    monkeypatch.setenv("CC", "gcc")  # chosen on purpose: no advice
    assert "fallback" not in (tg_backend_cpu._note() or "")
    monkeypatch.delenv("CC")
    monkeypatch.setenv(cc.COMPILER_ENV, "gcc")
    assert "fallback" not in (tg_backend_cpu._note() or "")


def test_without_llvmlite_or_a_c_compiler_the_check_names_both_fixes(monkeypatch: pytest.MonkeyPatch) -> None:
    _machine_with(monkeypatch, None, llvmlite=False)
    reason = tg_backend_cpu._check() or ""
    assert NO_LLVMLITE in reason and "no C compiler found" in reason


# ---- gcc: the loop vectoriser off for kernels with a large register tile ----

def _accumulator_kernel(n: int, k: int = 64) -> str:
    """A reduction over k into n accumulators, as the C renderer writes a register tile."""
    decls = "".join(f"  float acc{i} = 0.0f;\n" for i in range(n))
    body = "".join(f"    acc{i} = (acc{i}+(a[ridx0*{n}+{i}]*b[ridx0]));\n" for i in range(n))
    stores = "".join(f"  out[{i}] = acc{i};\n" for i in range(n))
    return (f"void tile(float* restrict out, const float* restrict a, const float* restrict b) {{\n{decls}"
            f"  for (int ridx0 = 0; ridx0 < {k}; ridx0++) {{\n{body}  }}\n{stores}}}\n")


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
def test_gcc_builds_large_register_tiles_without_its_loop_vectoriser(
        fresh_compiler_lookup, monkeypatch: pytest.MonkeyPatch, compiler: str) -> None:
    import ctypes

    import numpy as np
    from tg_backend_cpu import compiler as cc
    from tg_backend_cpu.loader import load_library

    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv(cc.COMPILER_ENV, compiler)
    if fresh_compiler_lookup()[0] is None:
        pytest.skip(f"no {compiler} on this machine")
    c = CCompiler()
    n, k = cc.GCC_TILE_ACCUMULATORS, cc.GCC_TILE_LOOP
    big = _accumulator_kernel(n, k)
    assert ("-fno-tree-loop-vectorize" in c._flags_for(big)) is (compiler == "gcc")
    # a smaller tile, or a short reduction loop (a convolution's window), keeps the loop vectoriser
    assert "-fno-tree-loop-vectorize" not in c._flags_for(_accumulator_kernel(n - 1, k))
    assert "-fno-tree-loop-vectorize" not in c._flags_for(_accumulator_kernel(n, k - 1))
    assert (f"tile-no-loop-vectorize>={n},{k}" in c.cache_key) is (compiler == "gcc")
    # and the kernel built so still computes the reduction
    lib = load_library(c.compile(big))
    a, b = np.random.default_rng(0).standard_normal((2, k * n), np.float32)
    out = np.zeros(n, np.float32)
    lib.tile(ctypes.c_void_p(out.ctypes.data), ctypes.c_void_p(a.ctypes.data), ctypes.c_void_p(b.ctypes.data))
    np.testing.assert_allclose(out, a.reshape(k, n).T @ b[:k], rtol=1e-4, atol=1e-4)
