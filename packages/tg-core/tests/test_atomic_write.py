"""`helpers.atomic_write`: the one way a file is written for a user. The target is the old file or the new one, whole:
a failure in the block (or in the rename) leaves it untouched and removes the temporary file."""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path

import pytest
from tinygrad.helpers import atomic_write

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX permission bits and symlinks")


def test_writes_bytes_and_text(tmp_path: Path) -> None:
    with atomic_write(tmp_path / "a.bin") as f:
        f.write(b"\x00\x01")
    with atomic_write(str(tmp_path / "b.txt"), "w", encoding="utf-8") as g:
        g.write("grüße\n")
    assert (tmp_path / "a.bin").read_bytes() == b"\x00\x01"
    assert (tmp_path / "b.txt").read_text(encoding="utf-8") == "grüße\n"
    assert sorted(os.listdir(tmp_path)) == ["a.bin", "b.txt"]


def test_target_untouched_and_no_temp_file_when_the_block_raises(tmp_path: Path) -> None:
    target = tmp_path / "ckpt.bin"
    target.write_bytes(b"old contents")
    with pytest.raises(RuntimeError, match="boom"), atomic_write(target) as f:
        f.write(b"half of the new")
        f.flush()
        raise RuntimeError("boom")
    assert target.read_bytes() == b"old contents"
    assert os.listdir(tmp_path) == ["ckpt.bin"]


def test_no_temp_file_when_the_rename_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(src: str, dst: str) -> None:
        raise PermissionError(f"cannot rename {src} to {dst}")
    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(PermissionError), atomic_write(tmp_path / "new.bin") as f:
        f.write(b"data")
    assert os.listdir(tmp_path) == []


def test_a_new_target_never_exists_half_written(tmp_path: Path) -> None:
    target = tmp_path / "new.bin"
    with atomic_write(target) as f:
        f.write(b"first half")
        f.flush()
        assert not target.exists()  # the data goes to a hidden file beside it until the block ends
        assert [p.name.startswith(".tmp-") for p in tmp_path.iterdir()] == [True]
    assert target.read_bytes() == b"first half"


def test_flushes_and_syncs_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append("replace"), real_replace(a, b))[1])
    with atomic_write(tmp_path / "x.bin") as f:
        f.write(b"x" * 100_000)
    assert events[:2] == ["fsync", "replace"]  # the data is on disk before the name points at it


@posix_only
def test_keeps_the_permission_bits_of_the_file_it_replaces(tmp_path: Path) -> None:
    target = tmp_path / "shared.bin"
    target.write_bytes(b"old")
    os.chmod(target, 0o640)
    with atomic_write(target) as f:
        f.write(b"new")
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640
    assert target.read_bytes() == b"new"


@posix_only
def test_a_new_file_gets_the_permissions_open_would_give(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        with atomic_write(tmp_path / "new.bin") as f:
            f.write(b"new")
        with open(tmp_path / "plain.bin", "wb") as g:
            g.write(b"new")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "new.bin").st_mode) == stat.S_IMODE(os.stat(tmp_path / "plain.bin").st_mode)
    assert stat.S_IMODE(os.stat(tmp_path / "new.bin").st_mode) == 0o640


@posix_only
def test_a_symlink_stays_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    real = tmp_path / "real" / "model.bin"
    real.write_bytes(b"old")
    link = tmp_path / "model.bin"
    link.symlink_to(real)
    with atomic_write(link) as f:
        f.write(b"new")
    assert link.is_symlink() and real.read_bytes() == b"new"
    assert os.listdir(tmp_path / "real") == ["model.bin"]


@posix_only
def test_a_target_that_is_not_a_regular_file_is_written_in_place(tmp_path: Path) -> None:
    with atomic_write(os.devnull) as f:
        f.write(b"discarded")
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_only_whole_file_modes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'w' or 'wb'"):
        atomic_write(tmp_path / "x", "ab")  # type: ignore[call-overload]
    assert os.listdir(tmp_path) == []


def test_a_folder_that_refuses_new_files_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(path: str, *args: object) -> int:
        raise PermissionError(13, "Permission denied", path)
    monkeypatch.setattr(os, "open", refuse)
    expected = f"temporary file in {re.escape(str(tmp_path))}.*make the folder writable"
    with pytest.raises(PermissionError, match=expected), atomic_write(tmp_path / "x.bin") as f:
        f.write(b"never written")
