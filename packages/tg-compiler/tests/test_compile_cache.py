"""The on-disk compile cache (`disk_cache_get_or_make`), keyed by compiler id + source.

Every test points TINYGRAD_CACHE_DIR at its own temporary directory (conftest sets a shared one; these
tests override it), so nothing here touches ~/.cache.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tinygrad import helpers
from tinygrad.helpers import Context
from tinygrad.runtime.compiler import Compiler, disk_cache_get_or_make


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TINYGRAD_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "compile"


class Maker:
    def __init__(self, payload: bytes):
        self.payload, self.calls = payload, 0

    def __call__(self) -> bytes:
        self.calls += 1
        return self.payload


def entries(cache: Path) -> list[Path]:
    return sorted(p for p in cache.iterdir() if not p.name.startswith(".")) if cache.exists() else []


def test_second_lookup_is_a_hit(cache: Path) -> None:
    make = Maker(b"\x7fELF binary")
    assert disk_cache_get_or_make("cc|v1", "int main;", make) == b"\x7fELF binary"
    assert disk_cache_get_or_make("cc|v1", "int main;", make) == b"\x7fELF binary"
    assert make.calls == 1
    assert len(entries(cache)) == 1


def test_key_covers_compiler_and_source(cache: Path) -> None:
    make = Maker(b"x")
    disk_cache_get_or_make("cc|v1", "a", make)
    disk_cache_get_or_make("cc|v2", "a", make)  # another compiler version: another binary
    disk_cache_get_or_make("cc|v1", "b", make)
    disk_cache_get_or_make("cc|v1\0b", "", make)  # the separator keeps (namespace, src) pairs apart
    assert make.calls == 4
    assert len(entries(cache)) == 4


def test_empty_payload_round_trips(cache: Path) -> None:
    make = Maker(b"")
    assert disk_cache_get_or_make("ns", "src", make) == b""
    assert disk_cache_get_or_make("ns", "src", make) == b"" and make.calls == 1


@pytest.mark.parametrize("damage", ["flip-a-byte", "truncate", "empty", "garbage"])
def test_corrupt_entry_is_detected_and_rebuilt(cache: Path, damage: str) -> None:
    payload = bytes(range(256)) * 8
    make = Maker(payload)
    disk_cache_get_or_make("ns", "src", make)
    (entry,) = entries(cache)
    blob = entry.read_bytes()
    entry.write_bytes({"flip-a-byte": blob[:100] + bytes([blob[100] ^ 1]) + blob[101:], "truncate": blob[:-7],
                       "empty": b"", "garbage": b"not a cache entry"}[damage])
    assert disk_cache_get_or_make("ns", "src", make) == payload
    assert make.calls == 2
    assert disk_cache_get_or_make("ns", "src", make) == payload  # and the rebuilt entry is good again
    assert make.calls == 2


def test_unwritable_cache_does_not_break_compilation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("the cache dir cannot live under a regular file")
    monkeypatch.setenv("TINYGRAD_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setattr(helpers, "_disk_cache_warned", set())
    make = Maker(b"bin")
    with pytest.warns(RuntimeWarning, match="compile cache cannot be written"):  # once, not on every kernel
        assert disk_cache_get_or_make("ns", "src", make) == b"bin"
        assert disk_cache_get_or_make("ns", "src", make) == b"bin"
    assert make.calls == 2  # nothing could be stored, so it compiles again - but it works
    assert helpers._disk_cache_warned == {"compile"}


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root can write to a read-only directory")
def test_read_only_cache_dir(cache: Path) -> None:
    cache.mkdir(parents=True)
    cache.chmod(0o555)
    try:
        make = Maker(b"bin")
        assert disk_cache_get_or_make("ns", "src", make) == b"bin"
        assert entries(cache) == []
    finally:
        cache.chmod(0o755)


def test_failed_write_leaves_no_temporary_files(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> None:
        raise PermissionError("read-only file system")

    monkeypatch.setattr(os, "replace", refuse)
    monkeypatch.setattr(helpers, "_disk_cache_warned", set())
    with pytest.warns(RuntimeWarning, match="read-only file system"):
        assert disk_cache_get_or_make("ns", "src", Maker(b"bin")) == b"bin"
    assert list(cache.iterdir()) == []


def test_concurrent_processes_share_the_cache(cache: Path, tmp_path: Path) -> None:
    # several processes miss the cache at the same moment, "compile" slowly, and write the same entry
    script = textwrap.dedent("""
        import sys, time
        from pathlib import Path
        from tinygrad.runtime.compiler import disk_cache_get_or_make
        go = Path(sys.argv[1])
        while not go.exists():
            time.sleep(0.005)
        payload = bytes(i % 251 for i in range(2_000_000))
        def make():
            time.sleep(0.2)
            return payload
        for _ in range(3):
            assert disk_cache_get_or_make("ns", "shared source", make) == payload
        print("ok")
    """)
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", script, str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=os.environ.copy()) for _ in range(4)]
    go.touch()
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0 and out.strip() == "ok", err
    assert len(entries(cache)) == 1
    assert [p for p in cache.iterdir() if p.name.startswith(".tmp")] == []
    make = Maker(b"")
    assert disk_cache_get_or_make("ns", "shared source", make) == bytes(i % 251 for i in range(2_000_000))
    assert make.calls == 0


class CountingCompiler(Compiler):
    cache_key = "counting|1"

    def __init__(self) -> None:
        self.calls = 0

    def compile(self, src: str) -> bytes:
        self.calls += 1
        return src.encode()[::-1]


def test_compiler_uses_the_cache_unless_disabled(cache: Path) -> None:
    c = CountingCompiler()
    assert c.compile_cached("abc") == b"cba"
    assert c.compile_cached("abc") == b"cba"
    assert c.calls == 1
    with Context(DISABLE_COMPILER_CACHE=1):
        c.compile_cached("abc")
    assert c.calls == 2
    nokey = CountingCompiler()
    nokey.cache_key = ""  # a compiler that cannot name its output does not cache
    nokey.compile_cached("abc")
    nokey.compile_cached("abc")
    assert nokey.calls == 2


def test_cache_dir_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tinygrad.helpers import cache_dir

    monkeypatch.setenv("TINYGRAD_CACHE_DIR", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x"
    monkeypatch.delenv("TINYGRAD_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "tinygrad"


def test_precompile_builds_a_schedules_kernels_concurrently(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    import numpy as np
    from tinygrad import Device, Tensor
    from tinygrad.runtime import device as runtime_device

    dev = Device["CPU"]
    if not dev.compiler.parallel:
        pytest.skip("the CPU compiler here does not compile in parallel")
    monkeypatch.setattr(runtime_device, "COMPILE_WORKERS", 2)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal((5, 7)).astype(np.float32)
    # constants no other test uses: kernels that are neither compiled in this process nor in the (new) cache
    outs = [(Tensor(a) * 3.25 + Tensor(b)).exp(), (Tensor(a) - 1.75).relu().sum(axis=1), (Tensor(b) * 0.625).max()]
    asts = [si.ast for si in outs[0].schedule(*outs[1:])]
    assert len(asts) == 3 and not any(ast in dev._runners for ast in asts)
    inside, most = 0, 0
    real = type(dev.compiler).compile

    events: list[str] = []
    render = dev._program

    def slow_render(ast: object) -> object:  # the order of renders and compile starts
        time.sleep(0.05)
        spec = render(ast)  # type: ignore[arg-type]
        events.append("render")
        return spec
    monkeypatch.setattr(dev, "_program", slow_render)

    def slow_compile(self: Compiler, src: str) -> bytes:  # counts compiles in flight at once
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
            events.append("compile")
        time.sleep(0.2)
        try:
            return real(self, src)  # type: ignore[arg-type]
        finally:
            with lock:
                inside -= 1
    lock = threading.Lock()
    monkeypatch.setattr(type(dev.compiler), "compile", slow_compile)
    built: list[str] = []  # a one-off build (the CPU pool's library) runs in a compile thread, next to the kernels
    monkeypatch.setattr(dev, "background_builds", lambda: [lambda: built.append(threading.current_thread().name)])
    dev.precompile(asts)
    assert len(built) == 1 and built[0].startswith("tg-compile")
    assert all(ast in dev._runners for ast in asts) and most == 2
    # the first kernel compiles while the others render
    assert events.index("compile") < len(events) - 1 - events[::-1].index("render")
    np.testing.assert_allclose(outs[0].numpy(), np.exp(a * 3.25 + b), rtol=1e-5)
    np.testing.assert_allclose(outs[1].numpy(), np.maximum(a - 1.75, 0).sum(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outs[2].numpy(), (b * 0.625).max(), rtol=1e-6)
