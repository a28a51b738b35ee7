"""The disk cache of `tinygrad.helpers` (`disk_cache_get`/`disk_cache_put`), which the compile and BEAM caches use:
a failed read is a miss, a failed write warns once per table and goes on, and writes are atomic.

Every test points TINYGRAD_CACHE_DIR at a temporary folder of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from tinygrad import helpers
from tinygrad.helpers import disk_cache_get, disk_cache_path, disk_cache_put


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TINYGRAD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(helpers, "_disk_cache_warned", set())  # each test sees its own first warning
    return tmp_path / "cache"


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_round_trip_and_miss(cache: Path) -> None:
    assert disk_cache_get("table", "key") is None
    assert disk_cache_put("table", "key", b"\x00value\xff") is True
    assert disk_cache_get("table", "key") == b"\x00value\xff"
    assert disk_cache_get("table", "other key") is None and disk_cache_get("other", "key") is None
    assert disk_cache_put("table", "key", b"") and disk_cache_get("table", "key") == b""  # an empty value is a hit
    # the file layout the caches had before the helper: table/<sha256 of key><suffix>
    assert disk_cache_path("beam", "k", ".json") == cache / "beam" / (
        "8254c329a92850f6d539dd376f4816ee2764517da5e0235514af433164480d7a.json")
    assert files(cache / "table") == [disk_cache_path("table", "key").name]


def test_a_cache_under_a_regular_file_warns_once_and_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # fails for every user, root included: no folder can be made inside a file
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TINYGRAD_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setattr(helpers, "_disk_cache_warned", set())
    with pytest.warns(RuntimeWarning, match=r"tinygrad's compile cache cannot be written .*TINYGRAD_CACHE_DIR"):
        assert disk_cache_put("compile", "k", b"v") is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second failure of the same table is quiet
        assert disk_cache_put("compile", "k2", b"v") is False
        assert disk_cache_get("compile", "k") is None
    with pytest.warns(RuntimeWarning, match="beam cache"):  # another table warns for itself
        disk_cache_put("beam", "k", b"v")


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root can write to a read-only directory")
def test_a_read_only_cache_warns_and_goes_on(cache: Path) -> None:
    (cache / "table").mkdir(parents=True)
    (cache / "table").chmod(0o555)
    try:
        with pytest.warns(RuntimeWarning, match="table cache cannot be written"):
            assert disk_cache_put("table", "k", b"v") is False
        assert files(cache / "table") == []
    finally:
        (cache / "table").chmod(0o755)


def test_an_unreadable_entry_is_a_miss(cache: Path) -> None:
    disk_cache_path("table", "k").mkdir(parents=True)  # something that is not a file where the entry belongs
    assert disk_cache_get("table", "k") is None


def test_a_failed_write_leaves_no_temporary_file(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full_disk(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.warns(RuntimeWarning, match="No space left on device"):
        assert disk_cache_put("table", "k", b"v" * 1000) is False
    assert files(cache / "table") == []


def test_processes_writing_one_key_at_once_leave_one_whole_entry(cache: Path, tmp_path: Path) -> None:
    # each process writes its own 1 MB value under the same key many times and reads it back in between: a reader
    # must only ever see one writer's whole value, never a mix or a part
    script = textwrap.dedent("""
        import sys, time
        from pathlib import Path
        from tinygrad.helpers import disk_cache_get, disk_cache_put
        me, go = int(sys.argv[1]), Path(sys.argv[2])
        while not go.exists():
            time.sleep(0.005)
        values = {bytes([i]) * 1_000_000 for i in range(4)}
        for _ in range(30):
            assert disk_cache_put("table", "shared key", bytes([me]) * 1_000_000)
            got = disk_cache_get("table", "shared key")
            assert got in values, (None if got is None else (len(got), set(got)))
        print("ok")
    """)
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", script, str(i), str(go)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=os.environ.copy()) for i in range(4)]
    go.touch()
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and out.strip() == "ok", err
    assert files(cache / "table") == [disk_cache_path("table", "shared key").name]  # no temporary files left
    final = disk_cache_get("table", "shared key")
    assert final is not None and len(final) == 1_000_000 and len(set(final)) == 1
