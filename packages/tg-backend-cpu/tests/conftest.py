"""Fixtures for the CPU backend tests: a private compile cache, and a fresh compiler lookup per test."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_compile_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # never touch ~/.cache; the parent of the base temp dir is shared by xdist workers, so they reuse kernels
    monkeypatch.setenv("TINYGRAD_CACHE_DIR", str(tmp_path_factory.getbasetemp().parent / "tg-cpu-cache"))


@pytest.fixture
def fresh_compiler_lookup():
    """`find_c_compiler` is functools.cache'd: clear it before and after a test that changes CC or PATH."""
    from tg_backend_cpu.compiler import find_c_compiler

    find_c_compiler.cache_clear()
    yield find_c_compiler
    find_c_compiler.cache_clear()
