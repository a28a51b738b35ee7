"""Finding the C compiler, and what users see when there is none."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
import tg_backend_cpu
from tg_backend_cpu.compiler import CANDIDATES, CCompiler
from tinygrad.codegen.compiled import CompileError


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
    program = CPUProgram("k", CCompiler().compile(SELECT_IN_REDUCTION))
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

def _machine_with(monkeypatch: pytest.MonkeyPatch, compiler: str | None, llvmlite: bool) -> None:
    """A machine whose only C compiler is `compiler` (None: none), with or without llvmlite installed."""
    from importlib.machinery import ModuleSpec

    from tg_backend_cpu import compiler as cc

    for var in ("CC", cc.COMPILER_ENV):
        monkeypatch.delenv(var, raising=False)
    found = (compiler, None) if compiler else (None, "no C compiler found")
    monkeypatch.setattr(cc, "find_c_compiler", lambda: found)
    monkeypatch.setattr(cc, "clang_major", lambda path: 19 if "clang" in path else None)
    monkeypatch.setattr(cc, "compiler_version", lambda path: "19.1.7" if "clang" in path else "12.2.0")
    real_find_spec = cc.importlib.util.find_spec
    monkeypatch.setattr(cc.importlib.util, "find_spec", lambda name, *a: (ModuleSpec(name, None) if llvmlite else None)
                        if name == "llvmlite" else real_find_spec(name, *a))


@pytest.mark.parametrize(("compiler", "llvmlite", "llvm"), [
    ("/usr/bin/clang-19", True, False),  # clang >= 15 is the best C path: kept
    ("/usr/bin/gcc", True, True),  # gcc's code is slower: LLVM where it is installed
    ("/usr/bin/gcc", False, False),
    (None, True, True),  # no C compiler at all: LLVM runs kernels (on one thread)
])
def test_the_default_path_is_clang_then_llvm_then_gcc(monkeypatch: pytest.MonkeyPatch, compiler: str | None,
                                                     llvmlite: bool, llvm: bool) -> None:
    from tg_backend_cpu import compiler as cc

    _machine_with(monkeypatch, compiler, llvmlite)
    assert cc.uses_llvm() is llvm
    monkeypatch.setenv(cc.COMPILER_ENV, "gcc")  # an explicit choice wins
    assert cc.uses_llvm() is False
    monkeypatch.setenv(cc.COMPILER_ENV, "llvm")
    assert cc.uses_llvm() is True


def test_the_listing_names_the_compiler_and_warns_on_the_slow_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from tg_backend_cpu import compiler as cc

    _machine_with(monkeypatch, "/usr/bin/clang-19", llvmlite=False)
    note = tg_backend_cpu._note()
    assert note is not None and note.startswith("compiler: clang-19 19.1.7") and "thread" in note
    bits = cc.host_vector_bits()
    assert bits is None or f"{bits}-bit vectors" in note
    assert "slower" not in note
    _machine_with(monkeypatch, "/usr/bin/gcc", llvmlite=False)
    note = tg_backend_cpu._note()
    assert note is not None and note.startswith("compiler: gcc 12.2.0")
    assert "slower" in note and "pip install 'tg-backend-cpu[llvm]'" in note and "clang >= 15" in note
    monkeypatch.setenv("CC", "gcc")  # chosen on purpose: no advice
    assert "slower" not in (tg_backend_cpu._note() or "")
