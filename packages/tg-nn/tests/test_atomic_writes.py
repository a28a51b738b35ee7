"""Never lose a file (issue 34): a checkpoint, a PROFILE trace, a VIZ trace or a kit report is written beside its
target and renamed over it, so a crash at any instant leaves the old file or the new one, whole. And a hostile
safetensors header (JSON nested deep enough to exhaust Python's recursion) is refused with SafetensorsError."""

from __future__ import annotations

import json
import os
import random
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tinygrad import Tensor
from tinygrad.nn.safetensors import SafetensorsError, safe_load, safe_save

# ---- a checkpoint killed mid-save ----

# One definition of the checkpoint's contents, run by the saving child and by the test that checks what survived:
# 128 MiB in 8 tensors whose values differ for every version, exactly representable in their dtypes.
_STATE_CODE = """
import numpy as np
def state_arrays(version):
    n = 4 << 20
    out = {}
    for i in range(8):
        dtype = np.int32 if i % 2 else np.float32  # float32 holds every integer below 2**24 exactly
        out[f"layers.{i}.weight"] = values = np.arange(n, dtype=dtype)
        values += dtype(version * 8 + i)
    return out
"""

# The saver is a fork server: it imports tinygrad once and forks one process per save, so a round costs a fork and
# building the tensors, not a Python start. Each forked saver builds its version, says "ready", and saves when it gets
# SIGUSR1 ("go"); the test kills it with SIGKILL at a chosen instant. SIGUSR1 is blocked from before the fork, so a
# "go" that comes early stays pending until the saver waits for it, instead of killing the saver.
_SAVER_CODE = _STATE_CODE + """
import os, signal, sys, time, traceback
from tinygrad import Tensor
from tinygrad.nn.safetensors import safe_save
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps a killed saver: its pid vanishes when it is dead
target = sys.argv[1]
def say(line):
    os.write(1, (line + "\\n").encode())  # one write, no buffer: the savers share this stdout
for command in sys.stdin:
    version = int(command.split()[1])
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    if os.fork() == 0:
        try:
            state = {name: Tensor(a).realize() for name, a in state_arrays(version).items()}
            say(f"ready {version} {os.getpid()}")
            if signal.sigtimedwait({signal.SIGUSR1}, 120) is not None:  # a saver the test forgot ends by itself
                start = time.perf_counter()
                safe_save(state, target)
                say(f"done {version} {time.perf_counter() - start}")
                signal.sigtimedwait({signal.SIGUSR1}, 120)  # until it is killed
        except BaseException:
            say("error " + traceback.format_exc().replace("\\n", " | "))
        os._exit(0)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})
"""

KILLS = 20


def _state_arrays(version: int) -> dict[str, np.ndarray]:
    namespace: dict[str, Any] = {}
    exec(_STATE_CODE, namespace)
    return namespace["state_arrays"](version)


class _Savers:
    """The test's side of the fork server."""

    def __init__(self, target: Path, log: Path):
        self.log = log.open("w")
        self.unread: dict[tuple[str, int], str] = {}
        self.server = subprocess.Popen([sys.executable, "-c", _SAVER_CODE, str(target)], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=self.log, text=True)

    def build(self, version: int) -> None:
        assert self.server.stdin is not None
        self.server.stdin.write(f"save {version}\n")
        self.server.stdin.flush()

    def wait_for(self, kind: str, version: int, timeout: float = 120.0) -> str:
        """The rest of the line `<kind> <version> ...`. Lines come in any order (the next saver may be ready before
        the current one is done), so the ones not asked for yet are kept."""
        assert self.server.stdout is not None
        watchdog = threading.Timer(timeout, self.server.kill)  # a hung saver fails the test instead of hanging it
        watchdog.start()
        try:
            while (rest := self.unread.pop((kind, version), None)) is None:
                line = self.server.stdout.readline()
                if not line or line.startswith("error"):
                    self.close()
                    raise AssertionError(f"the saver failed waiting for '{kind} {version}': {line}\n"
                                         f"{self.log.name}: {Path(self.log.name).read_text()[-3000:]}")
                said, said_version, *words = line.split()
                self.unread[said, int(said_version)] = " ".join(words)
            return rest
        finally:
            watchdog.cancel()

    def close(self) -> None:
        if self.server.stdin is not None:
            self.server.stdin.close()
        self.server.kill()
        self.server.wait()
        self.log.close()


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # a process in the middle of a system call dies when the call returns
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.001)
    raise AssertionError(f"saver {pid} survived SIGKILL for 30 s")


def _version_on_disk(target: Path, candidates: dict[int, dict[str, np.ndarray]]) -> int | None:
    """Which candidate version the file holds, exactly; None if it loads as none of them. Raises if it does not
    load at all (SafetensorsError on a truncated file)."""
    loaded = {name: t.numpy() for name, t in safe_load(target).items()}
    for version, arrays in candidates.items():
        if loaded.keys() == arrays.keys() and all(np.array_equal(loaded[k], a) for k, a in arrays.items()):
            return version
    return None


@pytest.mark.skipif(sys.platform == "win32", reason="forks, and kills with SIGKILL")
def test_safe_save_killed_at_any_instant_leaves_the_old_or_the_new_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "ckpt").mkdir()
    target = tmp_path / "ckpt" / "model.safetensors"
    savers = _Savers(target, tmp_path / "saver.log")
    try:
        savers.build(0)
        pid = int(savers.wait_for("ready", 0))
        savers.build(1)  # each saver builds while the one before saves
        os.kill(pid, signal.SIGUSR1)
        save_seconds = float(savers.wait_for("done", 0))
        _kill(pid)
        expected = {0: _state_arrays(0)}
        assert _version_on_disk(target, expected) == 0
        on_disk: int | None = 0  # None once a kill has left a file that holds no version

        # kill instants spread evenly over the save and a little past its end, in random order
        delays = [(i + random.random()) / KILLS * 1.2 * save_seconds for i in range(KILLS)]
        random.shuffle(delays)
        outcomes: list[tuple[float, str]] = []
        for version, delay in enumerate(delays, start=1):
            pid = int(savers.wait_for("ready", version))
            if version < KILLS:
                savers.build(version + 1)
            os.kill(pid, signal.SIGUSR1)
            time.sleep(delay)
            _kill(pid)
            for leftover in target.parent.glob(".tmp-*"):  # the killed saver's unfinished file: nobody's data
                leftover.unlink()
            expected = {v: a for v, a in expected.items() if v == on_disk} | {version: _state_arrays(version)}
            try:
                found = _version_on_disk(target, expected)
            except SafetensorsError as e:
                found, outcome = None, f"does not load: {e}"
            else:
                outcome = "neither old nor new" if found is None else "old" if found == on_disk else "new"
            outcomes.append((delay, outcome))
            on_disk = found
    finally:
        savers.close()
    history = "\n".join(f"killed {delay:.3f} s into the save: {outcome}" for delay, outcome in outcomes)
    broken = sum(outcome not in ("old", "new") for _, outcome in outcomes)
    assert broken == 0, f"a {save_seconds:.3f} s save killed {KILLS} times left {broken} broken files:\n{history}"
    assert any(outcome == "old" for _, outcome in outcomes), f"no kill landed before a save finished:\n{history}"


def test_safe_save_replaces_through_a_synced_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "small.safetensors"
    safe_save({"w": Tensor([1.0, 2.0])}, target)
    events = _spy_on_replace_and_fsync(monkeypatch)
    safe_save({"w": Tensor([3.0, 4.0])}, target)
    assert ("replace", str(target)) in events and events.index(("fsync", "")) < events.index(("replace", str(target)))
    assert safe_load(target)["w"].tolist() == [3.0, 4.0]
    assert os.listdir(tmp_path) == ["small.safetensors"]


# ---- the other files written for a user ----

def _spy_on_replace_and_fsync(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", ""))
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        events.append(("replace", os.fspath(dst)))
        real_replace(src, dst)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


class _Unserializable:
    """Makes json.dump fail after it has written part of the file."""


def test_profile_trace_failing_mid_write_keeps_the_previous_trace(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from tinygrad.engine import profile

    target = tmp_path / "tinygrad_profile.json"
    target.write_text('{"traceEvents": []}')
    events = [{"name": f"kernel{i}", "ph": "X", "ts": i, "dur": 1} for i in range(5000)]
    monkeypatch.setattr(profile, "trace", lambda: {"traceEvents": [*events, _Unserializable()]})
    with pytest.raises(TypeError):
        profile.write(str(target))
    assert target.read_text() == '{"traceEvents": []}'
    assert os.listdir(tmp_path) == [target.name]

    spied = _spy_on_replace_and_fsync(monkeypatch)
    monkeypatch.setattr(profile, "trace", lambda: {"traceEvents": events})
    profile.write(str(target))
    assert spied[:2] == [("fsync", ""), ("replace", str(target))]  # the data is on disk before the rename
    assert json.loads(target.read_text())["traceEvents"] == events


def test_viz_save_failing_mid_write_keeps_the_previous_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tinygrad.viz import record

    target = tmp_path / "viz.json"
    target.write_text('{"old": true}')
    with pytest.raises(TypeError):
        record.save(str(target), {"kernels": [{"name": f"k{i}"} for i in range(5000)] + [_Unserializable()]})
    assert target.read_text() == '{"old": true}'
    assert os.listdir(tmp_path) == [target.name]  # no temporary file left beside it

    spied = _spy_on_replace_and_fsync(monkeypatch)
    assert record.save(str(target), {"new": True}) == str(target)
    assert spied[:2] == [("fsync", ""), ("replace", str(target))]
    assert json.loads(target.read_text()) == {"new": True}


def test_kit_report_is_replaced_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tinygrad.conformance.report import KitReport

    target = tmp_path / "reports" / "kit.json"
    spied = _spy_on_replace_and_fsync(monkeypatch)
    KitReport(device="CPU").write_json(target)
    assert ("replace", str(target)) in spied
    assert json.loads(target.read_text())["device"] == "CPU"


# ---- safetensors headers nested too deep ----

def _with_header(header: bytes) -> bytes:
    return struct.pack("<Q", len(header)) + header


@pytest.mark.parametrize("header", [
    b'{"__metadata__": ' + b'{"a": ' * 1000 + b'"x"' + b"}" * 1000 + b"}",
    b'{"w": {"dtype": "F32", "shape": ' + b"[" * 1000 + b"]" * 1000 + b', "data_offsets": [0, 0]}}',
    b"[" * 1000,  # never closed: the parser recurses as deep before it finds the JSON invalid
    b'{"a": ' + b'[{"b": ' * 500 + b"1" + b"}]" * 500 + b"}",
], ids=["objects", "arrays", "unclosed", "mixed"])
def test_deeply_nested_header_is_a_safetensors_error(header: bytes) -> None:
    with pytest.raises(SafetensorsError, match="nests arrays and objects more than 64 deep"):
        safe_load(_with_header(header))


def test_brackets_inside_strings_are_not_nesting(tmp_path: Path) -> None:
    target = tmp_path / "b.safetensors"
    name = '[{"' * 100 + "\\" + '"}]' * 100
    safe_save({name: Tensor([1, 2])}, target, metadata={"note": "[" * 500 + '\\"' + "{" * 500})
    assert safe_load(target)[name].tolist() == [1, 2]


def test_header_nested_within_the_bound_reaches_the_format_checks() -> None:
    header = b'{"__metadata__": {"a": ' + b"[" * 60 + b"]" * 60 + b"}}"
    with pytest.raises(SafetensorsError, match="__metadata__ must map strings to strings"):
        safe_load(_with_header(header))
    with pytest.raises(SafetensorsError, match="not valid UTF-8 JSON"):
        safe_load(_with_header(b'{"a": [1, 2}'))
