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
    """A C compiler for syntax checks of rendered source (CC, else clang or gcc)."""
    for name in (os.environ.get("CC"), "clang", "gcc", "cc"):
        if name and (path := shutil.which(name)):
            return path
    pytest.skip("no C compiler (CC, clang, gcc or cc) to check that rendered C compiles")
