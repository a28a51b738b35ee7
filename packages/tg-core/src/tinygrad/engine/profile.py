"""PROFILE=1: a Chrome trace-event file of what ran, for chrome://tracing or https://ui.perfetto.dev.

Each kernel launch, copy between devices and kernel compile becomes a complete event ("ph": "X", times in
microseconds since the first event). A device is a process of the trace and each kind of work a thread in it:
launches, copies, and one lane per compiling thread (compiles run in parallel on the CPU backend). The file is
written when the process exits, to $PROFILE_PATH or ./tinygrad_profile.json, and the path is printed to stderr.

Launches are timed one by one, each waited for (the device's own timer where the program has one, else the wall
clock around the launch and a synchronize): a profiled program runs slower than an unprofiled one, and nothing
overlaps on the device. With PROFILE off, the engine's only cost is the one check before it calls in here.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import tinygrad.helpers as helpers
from tinygrad.helpers import atomic_write

if TYPE_CHECKING:
    from tinygrad.device import Runner

#: where the trace goes unless $PROFILE_PATH says otherwise (relative to the working directory at the first event)
DEFAULT_PATH = "tinygrad_profile.json"

_lock = threading.Lock()  # compiles record from the compile threads
_events: list[dict[str, Any]] = []
_pids: dict[str, int] = {}
_tids: dict[tuple[int, str], int] = {}
_start = time.perf_counter()
_path: str | None = None  # set by the first event, which also registers the write at exit


def _lane(device: str, lane: str) -> tuple[int, int]:
    """The (pid, tid) of a device's lane, numbered in order of first use (the trace format wants integers)."""
    if device not in _pids:
        _pids[device] = len(_pids) + 1
    pid = _pids[device]
    if (pid, lane) not in _tids:
        _tids[(pid, lane)] = sum(1 for p, _ in _tids if p == pid) + 1
    return pid, _tids[(pid, lane)]


def _record(device: str, lane: str, cat: str, name: str, start: float, seconds: float, args: dict[str, Any]) -> None:
    global _path
    with _lock:
        if _path is None:
            _path = os.path.abspath(os.environ.get("PROFILE_PATH") or DEFAULT_PATH)
            atexit.register(_write_at_exit)
        pid, tid = _lane(device, lane)
        _events.append({"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid,
                        "ts": round((start - _start) * 1e6, 3), "dur": round(max(seconds, 0.0) * 1e6, 3), "args": args})


def record_launch(device: str, runner: Runner, start: float, seconds: float, timer: str,
                  jit: str | None = None) -> None:
    """A kernel launch that began at `start` (`time.perf_counter()`, as every start here) and ran `seconds`,
    measured by `timer` ("device" or "wall"); `jit` names the TinyJit function replaying it."""
    args: dict[str, Any] = {"kernel": runner.display_name, "global_size": getattr(runner, "global_size", None),
                            "local_size": getattr(runner, "local_size", None), "estimated_ops": runner.estimated_ops,
                            "estimated_bytes": runner.estimated_bytes, "timer": timer}
    if jit is not None:
        args["jit"] = jit
    _record(device, "launches", "kernel", runner.display_name, start, seconds, args)


def record_copy(src_device: str, dest_device: str, nbytes: int, start: float, seconds: float) -> None:
    """A copy between two buffers through the host, on the destination device's copy lane."""
    _record(dest_device, "copies", "copy", f"copy {src_device} -> {dest_device}", start, seconds,
            {"from": src_device, "to": dest_device, "bytes": nbytes})


def record_compile(device: str, kernel: str, start: float, seconds: float, compiler: str) -> None:
    """A kernel's compile (a hit in the compile cache included: it is then only the lookup)."""
    _record(device, f"compile ({threading.current_thread().name})", "compile", f"compile {kernel}", start, seconds,
            {"kernel": kernel, "compiler": compiler})


def record_marker(name: str, color: str) -> None:
    """A named point in time (`helpers.profile_marker`): an instant event across the host's whole trace."""
    global _path
    with _lock:
        if _path is None:
            _path = os.path.abspath(os.environ.get("PROFILE_PATH") or DEFAULT_PATH)
            atexit.register(_write_at_exit)
        pid, tid = _lane("HOST", "markers")
        _events.append({"name": name, "cat": "marker", "ph": "i", "s": "g", "pid": pid, "tid": tid,
                        "ts": round((time.perf_counter() - _start) * 1e6, 3), "args": {"color": color}})


helpers._marker_sink = record_marker


def trace() -> dict[str, Any]:
    """The trace so far: the events, preceded by metadata events naming each process and thread."""
    with _lock:
        names = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": device}}
                 for device, pid in _pids.items()]
        names += [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": lane}}
                  for (pid, lane), tid in _tids.items()]
        return {"traceEvents": names + list(_events), "displayTimeUnit": "ms"}


def write(path: str) -> None:
    with atomic_write(path, "w") as f:
        json.dump(trace(), f)


def _write_at_exit() -> None:
    assert _path is not None
    try:
        write(_path)
    except OSError as e:
        print(f"PROFILE: could not write the trace to {_path}: {e}; set PROFILE_PATH to a writable file",
              file=sys.stderr)
        return
    print(f"PROFILE: wrote {len(_events)} events to {_path} (open it in chrome://tracing or ui.perfetto.dev)",
          file=sys.stderr)
