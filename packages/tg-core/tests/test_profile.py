"""PROFILE=1: the trace-event file written at exit holds every launch, copy and compile of the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

# An MNIST-like training step (a two-layer MLP on 28x28 inputs, softmax cross-entropy, SGD), jitted and run four
# times (eager, capture, two replays), plus a copy between two CPU devices; it prints how many kernels it launched.
PROGRAM = textwrap.dedent("""
    import numpy as np
    from tinygrad import GlobalCounters, Tensor, TinyJit

    rng = np.random.default_rng(0)
    w1 = Tensor(rng.standard_normal((784, 32), dtype=np.float32) * 0.05, requires_grad=True)
    w2 = Tensor(rng.standard_normal((32, 10), dtype=np.float32) * 0.05, requires_grad=True)

    @TinyJit
    def step(x, y):
        logits = (x @ w1).relu() @ w2
        loss = logits.sparse_categorical_crossentropy(y)
        loss.backward()
        for w in (w1, w2):
            w.assign(w.detach() - 0.01 * w.grad)
        Tensor.realize(w1, w2)
        w1.grad = w2.grad = None
        return loss

    GlobalCounters.reset()
    for _ in range(4):
        x = Tensor(rng.standard_normal((8, 784), dtype=np.float32))
        y = Tensor(rng.integers(0, 10, 8, dtype=np.int32))
        step(x, y)
    launched = GlobalCounters.kernel_count
    w2.to("CPU:1").realize()
    print(launched)
""")


def run_profiled(tmp_path: Path, **env: str) -> tuple[dict[str, Any], int, str]:
    """The trace, the kernel count the program printed, and its stderr."""
    path = tmp_path / "trace.json"
    full_env = {**os.environ, "DEV": "CPU", "PROFILE_PATH": str(path), "TINYGRAD_CACHE_DIR": str(tmp_path / "cache"),
                **env}
    full_env.pop("DEBUG", None)
    done = subprocess.run([sys.executable, "-c", PROGRAM], env=full_env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    trace = json.loads(path.read_text()) if path.exists() else {}
    return trace, int(done.stdout.split()[-1]), done.stderr


def check_trace_events(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """The trace-event format's rules for what we write: a traceEvents list of complete ("X") events with
    numeric, non-negative times in microseconds and integer pid/tid, and metadata ("M") events naming them."""
    assert isinstance(trace.get("traceEvents"), list)
    named: set[tuple[str, int, int]] = set()
    complete = []
    for e in trace["traceEvents"]:
        assert {"name", "ph", "pid", "tid"} <= e.keys(), e
        assert isinstance(e["name"], str) and isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        assert e["ph"] in ("X", "M"), e
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name") and isinstance(e["args"]["name"], str), e
            named.add((e["name"], e["pid"], e["tid"]))
        else:
            for key in ("ts", "dur"):
                assert isinstance(e[key], (int, float)) and e[key] >= 0, e
            assert isinstance(e.get("cat"), str) and isinstance(e.get("args"), dict), e
            complete.append(e)
    for e in complete:  # every lane an event sits on has a name
        assert ("process_name", e["pid"], 0) in named and ("thread_name", e["pid"], e["tid"]) in named, e
    return complete


def test_profile_holds_one_event_per_launch_and_the_copies_and_compiles(tmp_path: Path) -> None:
    trace, launched, stderr = run_profiled(tmp_path, PROFILE="1")
    assert "PROFILE: wrote" in stderr and str(tmp_path / "trace.json") in stderr
    events = check_trace_events(trace)
    kernels = [e for e in events if e["cat"] == "kernel"]
    assert launched > 0 and len(kernels) == launched  # the step launches no host copy: every launch is a kernel
    replayed = [e for e in kernels if "jit" in e["args"]]
    assert replayed and len(replayed) % 2 == 0  # two replays of one capture
    for e in kernels:
        args = e["args"]
        assert args["kernel"] == e["name"] and args["timer"] in ("device", "wall")
        assert isinstance(args["estimated_ops"], int) and isinstance(args["estimated_bytes"], int)
    copies = [e for e in events if e["cat"] == "copy"]
    assert [(c["args"]["from"], c["args"]["to"]) for c in copies] == [("CPU", "CPU:1")]
    assert copies[0]["args"]["bytes"] == 32 * 10 * 4
    compiled = {e["args"]["kernel"] for e in events if e["cat"] == "compile"}
    assert {e["name"] for e in kernels} <= compiled  # every kernel that ran was compiled (or found in the cache)


def test_no_file_without_profile(tmp_path: Path) -> None:
    trace, _, stderr = run_profiled(tmp_path, PROFILE="0")
    assert trace == {} and "PROFILE" not in stderr


def test_context_turns_profiling_on_for_a_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tinygrad import Context, Tensor
    from tinygrad.engine import profile

    monkeypatch.setenv("PROFILE_PATH", str(tmp_path / "at_exit.json"))  # the first event fixes the path for the exit

    x = Tensor.ones(16).contiguous().realize()
    before = len(profile.trace()["traceEvents"])
    (x * 3).realize()
    assert len(profile.trace()["traceEvents"]) == before  # off: nothing recorded
    with Context(PROFILE=1):
        (x * 5).realize()
    kernels = [e for e in profile.trace()["traceEvents"] if e.get("cat") == "kernel"]
    assert kernels and kernels[-1]["args"]["estimated_ops"] == 16
    out = tmp_path / "trace.json"
    profile.write(str(out))
    check_trace_events(json.loads(out.read_text()))

