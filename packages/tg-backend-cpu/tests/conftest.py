"""Fixtures for the CPU backend tests: a private compile cache, a fresh compiler lookup per test, and small kernels
that split as big ones do."""

from __future__ import annotations

from collections.abc import Iterator

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


@pytest.fixture
def split_everything() -> Iterator[None]:
    """Every kernel splits across threads, however little work it does: the threshold (which also decides whether a
    kernel is rendered with sliced loops at all) lowered to 1."""
    from tg_backend_cpu import program as program_module

    # not monkeypatch: that is undone after every other fixture, and `cpu` must re-plan with the real threshold
    before = program_module.MIN_WORK_PER_THREAD
    program_module.MIN_WORK_PER_THREAD = 1
    yield
    program_module.MIN_WORK_PER_THREAD = before
