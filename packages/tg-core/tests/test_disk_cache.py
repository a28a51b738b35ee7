"""The disk cache of `tinygrad.helpers` (`disk_cache_get`/`disk_cache_put`), which the compile and BEAM caches use:
a failed read is a miss, a failed write warns once per table and goes on, and writes are atomic. An entry is bound
to its table and key: one copied, renamed, cut short or replaced by a pipe or a device is a miss, never served.

Every test points TINYGRAD_CACHE_DIR at a temporary folder of its own."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from tinygrad import helpers
from tinygrad.helpers import Context, disk_cache_get, disk_cache_path, disk_cache_put


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


# ---- entries that must not be served ----

def test_an_entry_copied_over_another_keys_file_is_a_miss(cache: Path) -> None:
    disk_cache_put("table", "kernel a", b"binary of a")
    disk_cache_put("table", "kernel b", b"binary of b")
    disk_cache_path("table", "kernel b").write_bytes(disk_cache_path("table", "kernel a").read_bytes())
    assert disk_cache_get("table", "kernel b") is None
    assert disk_cache_get("table", "kernel a") == b"binary of a"
    assert disk_cache_put("table", "kernel b", b"binary of b")  # the rebuilt value overwrites it
    assert disk_cache_get("table", "kernel b") == b"binary of b"


def test_swapped_entries_are_misses(cache: Path) -> None:
    keys = ["kernel a", "kernel b", "kernel c"]
    blobs = {}
    for k in keys:
        disk_cache_put("table", k, f"binary of {k}".encode())
        blobs[k] = disk_cache_path("table", k).read_bytes()
    for k, moved_in in zip(keys, keys[1:] + keys[:1]):  # every entry moved to the next key's file
        disk_cache_path("table", k).write_bytes(blobs[moved_in])
    assert [disk_cache_get("table", k) for k in keys] == [None, None, None]


def test_an_entry_of_another_table_under_the_same_key_is_a_miss(cache: Path) -> None:
    disk_cache_put("beam", "key", b"a beam choice")
    disk_cache_path("compile", "key").parent.mkdir(parents=True)
    disk_cache_path("compile", "key").write_bytes(disk_cache_path("beam", "key").read_bytes())
    assert disk_cache_get("compile", "key") is None


@pytest.mark.parametrize("damage", ["empty", "half the header", "no value", "cut short", "one byte more",
                                    "flipped value byte", "flipped checksum", "previous format"])
def test_a_damaged_entry_is_a_miss(cache: Path, damage: str) -> None:
    value = bytes(range(256)) * 4
    disk_cache_put("table", "key", value)
    path = disk_cache_path("table", "key")
    blob = path.read_bytes()
    header = len(blob) - len(value)
    checksum_at = blob.index(b" ", len(b"tinygrad-cache-1 ") + 1) + 1
    path.write_bytes({
        "empty": b"", "half the header": blob[:header // 2], "no value": blob[:header], "cut short": blob[:-1],
        "one byte more": blob + b"\0",
        "flipped value byte": blob[:header + 7] + bytes([blob[header + 7] ^ 1]) + blob[header + 8:],
        "flipped checksum": blob[:checksum_at] + (b"0" if blob[checksum_at:checksum_at + 1] != b"0" else b"1")
                            + blob[checksum_at + 1:],
        "previous format": hashlib.sha256(value).digest() + value,  # what the compile cache wrote before
    }[damage])
    assert disk_cache_get("table", "key") is None


def test_an_entry_over_the_size_bound_is_a_miss_and_is_not_stored(cache: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    assert disk_cache_put("table", "key", b"x" * 100)
    monkeypatch.setattr(helpers, "DISK_CACHE_MAX_VALUE_BYTES", 10)
    assert disk_cache_get("table", "key") is None
    assert disk_cache_put("table", "big", b"x" * 11) is False and disk_cache_get("table", "big") is None
    assert disk_cache_put("table", "small", b"x" * 10) and disk_cache_get("table", "small") == b"x" * 10


def test_a_skipped_entry_is_reported_once_at_debug(cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(helpers, "_disk_cache_skipped", set())
    disk_cache_put("table", "a", b"a")
    disk_cache_put("table", "b", b"b")
    disk_cache_path("table", "b").write_bytes(disk_cache_path("table", "a").read_bytes())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # quiet by default: no warning, nothing printed
        assert disk_cache_get("table", "b") is None
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(helpers, "_disk_cache_skipped", set())
    with Context(DEBUG=1):
        assert disk_cache_get("table", "b") is None and disk_cache_get("table", "b") is None
    err = capsys.readouterr().err
    assert err.count("written for another key") == 1 and str(disk_cache_path("table", "b")) in err


def test_a_symlinked_cache_folder_is_served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    monkeypatch.setenv("TINYGRAD_CACHE_DIR", str(tmp_path / "link"))
    assert disk_cache_put("table", "key", b"value")
    assert disk_cache_get("table", "key") == b"value"
    assert (tmp_path / "real" / "table").is_dir()


# a read that blocks or never ends would hang or exhaust the test machine: these run in a process of their own with a
# time limit and an address-space limit far above what the check needs
ISOLATED = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    from tinygrad.helpers import disk_cache_get, disk_cache_put, disk_cache_path
    assert disk_cache_get("table", "key") is None, "served"
    assert disk_cache_put("table", "key", b"rebuilt") and disk_cache_get("table", "key") == b"rebuilt"
    print("ok")
""")


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not os.path.exists("/dev/zero"), reason="needs FIFOs and /dev/zero")
@pytest.mark.parametrize("thing", ["fifo", "link to /dev/zero"])
def test_an_entry_that_is_not_a_regular_file_is_a_miss_without_blocking(cache: Path, thing: str) -> None:
    path = disk_cache_path("table", "key")
    path.parent.mkdir(parents=True)
    if thing == "fifo":  # opening it for reading would wait for a writer forever
        os.mkfifo(path)
    else:  # reading it would never end
        path.symlink_to("/dev/zero")
    proc = subprocess.run([sys.executable, "-c", ISOLATED], capture_output=True, text=True, timeout=60,
                          env=os.environ.copy())
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
    assert path.is_file() and not path.is_symlink()  # replaced by a good entry
