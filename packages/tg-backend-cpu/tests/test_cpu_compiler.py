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
