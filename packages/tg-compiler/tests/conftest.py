"""Fixtures for the compiler tests: a private compile cache, and a C compiler for "does it compile" checks."""

from __future__ import annotations

import os
import shutil

import pytest


@pytest.fixture(autouse=True)
def _private_compile_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # never touch ~/.cache; the parent of the base temp dir is shared by xdist workers
    monkeypatch.setenv("TINYGRAD_CACHE_DIR", str(tmp_path_factory.getbasetemp().parent / "tg-compiler-cache"))


@pytest.fixture(scope="session")
def c_compiler() -> str:
    """A C compiler for syntax checks of rendered source: the one the CPU backend would use (CC, else a clang
    new enough for _Float16, else gcc), or any compiler on PATH where that backend is not installed."""
    try:
        from tg_backend_cpu.compiler import find_c_compiler
    except ImportError:
        found = next((p for n in (os.environ.get("CC"), "clang", "gcc", "cc") if n and (p := shutil.which(n))), None)
    else:
        found = find_c_compiler()[0]
    if found is None:
        pytest.skip("no C compiler (CC, clang, gcc or cc) to check that rendered C compiles")
    return found
