"""The parent side of every bench command: worker processes, interleaved rounds, medians, tables.

A table is a list of rows; each row is one framework running one workload in its own worker
process. Rounds are interleaved (row A, row B, row C, ..., then again), so that load from other
processes on the machine spreads over all rows alike, and each row reports the median of its rounds.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs import Framework

WORKER = Path(__file__).resolve().parent / "worker.py"
CALL_TIMEOUT_S = 1800  # one setup or measurement; a worker that takes longer is taken to hang
#: a pause before every measurement of multi-threaded work: BLAS and OpenMP thread pools keep spinning on a core for
#: a while after their last call (OpenBLAS about 0.1 s, Intel's OpenMP 0.2 s), in their own worker or in the next
#: framework's (numpy's reference check in setup), and a measurement started then shares that core with them. Not
#: for measurements of a few microseconds on one thread (dispatch, replay): after an idle pause those time a cold
#: core and cold caches instead (a 100-kernel replay read 2-3x slower)
SETTLE_S = 0.3


class Worker:
    """A framework's worker process, talked to one JSON line at a time."""

    def __init__(self, framework: Framework, module: str, env: dict[str, str] | None = None):
        assert framework.python is not None
        self.framework = framework
        self.log = tempfile.TemporaryFile(mode="w+")  # the worker's stderr, shown when it fails
        base = {**os.environ, **(tinygrad_path() if framework.key == "tinygrad" else {})}
        self.proc = subprocess.Popen([framework.python, str(WORKER), module, framework.key],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     env={**base, **dict(framework.env), **(env or {})}, cwd=WORKER.parent)

    def call(self, **request: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            # the worker answers each request with exactly one line, so nothing is left buffered after it
            ready, _, _ = select.select([self.proc.stdout], [], [], CALL_TIMEOUT_S)
            if not ready:
                self.proc.kill()
                return {"error": f"the {self.framework.label} worker gave no answer in {CALL_TIMEOUT_S} s; "
                                 f"stopped it\nTimeoutError: no answer in {CALL_TIMEOUT_S} s"}
            line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            died = f"the {self.framework.label} worker died (exit code {self.proc.wait()})"
            return {"error": f"{died}:\n{self.stderr_tail()}"}
        reply: dict[str, Any] = json.loads(line)
        return reply

    def stderr_tail(self, chars: int = 2000) -> str:
        self.log.seek(0)
        return self.log.read()[-chars:]

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@dataclass
class Row:
    label: str
    framework: Framework
    workload: str
    params: dict[str, Any] = field(default_factory=dict)
    samples: list[dict[str, float]] = field(default_factory=list)
    note: str = ""  # set instead of samples when the row could not run: "n/a (...)" or "error: ..."
    work: float | None = None  # this row's work per measurement, when it differs from its table's

    def median(self, key: str = "seconds") -> float | None:
        values = [s[key] for s in self.samples if key in s]
        return statistics.median(values) if values else None

    def spread(self, key: str = "seconds") -> float | None:
        """(max - min) / median of the rounds, the noise a reader should allow for."""
        values = [s[key] for s in self.samples if key in s]
        if len(values) < 2 or not statistics.median(values):
            return None
        return (max(values) - min(values)) / statistics.median(values)


def _failed(reply: dict[str, Any]) -> str | None:
    if "na" in reply:
        return f"n/a ({reply['na']})"
    if "error" in reply:
        print(f"[bench] error:\n{reply['error']}", file=sys.stderr)
        last = reply["error"].strip().splitlines()[-1]
        return f"error: {last[:100]}"
    return None


def run_rows(rows: list[Row], workers: dict[str, Worker], rounds: int, settle_s: float = SETTLE_S) -> None:
    """Set every row up in its framework's worker, then measure all rows round-robin `rounds` times, each
    measurement `settle_s` after the previous one."""
    live: list[tuple[int, Row]] = []
    for index, row in enumerate(rows):
        if row.note:
            continue
        if row.framework.python is None:
            row.note = row.framework.why_missing
            continue
        failed = _failed(workers[row.framework.key].call(op="setup", id=str(index), workload=row.workload,
                                                         params=row.params))
        if failed:
            row.note = failed
        else:
            live.append((index, row))
    for _ in range(rounds):
        for index, row in list(live):
            time.sleep(settle_s)
            reply = workers[row.framework.key].call(op="measure", id=str(index))
            if (failed := _failed(reply)) is not None:
                row.note = failed
                live.remove((index, row))
            else:
                row.samples.append(reply["result"])
    for index, row in enumerate(rows):
        if row.framework.python is not None and row.framework.key in workers:
            workers[row.framework.key].call(op="forget", id=str(index))


def run_fresh_processes(rows: list[Row], module: str, rounds: int,
                        env_for: Callable[[Row, str], dict[str, str]]) -> None:
    """Like run_rows, but every measurement in a new worker process: first-call latencies.

    `env_for(row, tmpdir)` gives the environment of that process, for example a compile cache
    pointed at the fresh, empty `tmpdir`.
    """
    for _ in range(rounds):
        for row in rows:
            if row.note:
                continue
            if row.framework.python is None:
                row.note = row.framework.why_missing
                continue
            with tempfile.TemporaryDirectory(prefix="tg-bench-cold-") as tmp:
                worker = Worker(row.framework, module, env_for(row, tmp))
                try:
                    reply = worker.call(op="setup", id="0", workload=row.workload, params=row.params)
                    if (failed := _failed(reply)) is None:
                        reply = worker.call(op="measure", id="0")
                        failed = _failed(reply)
                    if failed:
                        row.note = failed
                    else:
                        row.samples.append(reply["result"])
                finally:
                    worker.close()


# ---- tables ----

@dataclass
class Metric:
    """A table's unit. Throughput: work per measured second (GFLOP/s, GB/s); latency: seconds times a scale."""
    unit: str
    higher_is_better: bool
    amount: float  # work per measurement (throughput) or the scale (latency: 1e6 for microseconds)
    key: str = "seconds"

    def value(self, row: Row, seconds: float) -> float:
        if self.higher_is_better:
            return (row.work if row.work is not None else self.amount) / seconds
        return seconds * self.amount


def throughput(unit: str, amount: float) -> Metric:
    return Metric(unit, True, amount)


def latency(unit: str, scale: float) -> Metric:
    return Metric(unit, False, scale)


def _fmt(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def _ratio(ratio: float) -> str:
    return f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.2g}x"


def render_table(title: str, rows: list[Row], metric: Metric, references: list[str]) -> str:
    """A Markdown table: median, spread, rounds, and the ratio of each row's median to each reference row's.

    A ratio is this row's value divided by the reference's, in the table's unit: for GFLOP/s or GB/s
    above 1 means faster than the reference, for seconds or microseconds above 1 means slower.
    """
    values = {row.label: (None if (m := row.median(metric.key)) is None else metric.value(row, m)) for row in rows}
    refs = [r for r in references if r in values]
    better = "higher is better" if metric.higher_is_better else "lower is better"
    lines = [f"### {title}", "", f"{metric.unit}, {better}; median of interleaved rounds", "",
             "| framework | " + metric.unit + " | spread | rounds | " + " | ".join(f"vs {r}" for r in refs) + " |",
             "|---|---:|---:|---:|" + "---:|" * len(refs)]
    for row in rows:
        value = values[row.label]
        if value is None:
            lines.append(f"| {row.label} | {row.note or 'n/a'} | | |" + " |" * len(refs))
            continue
        spread = row.spread(metric.key)
        ratios = []
        for ref in refs:
            ref_value = values[ref]
            ratios.append("-" if ref == row.label or not ref_value else _ratio(value / ref_value))
        lines.append(f"| {row.label} | {_fmt(value)} | {'' if spread is None else f'{spread:.0%}'} | "
                     f"{len(row.samples)} | " + " | ".join(ratios) + " |")
    return "\n".join(lines) + "\n"


def open_workers(frameworks: list[Framework], module: str, env: dict[str, dict[str, str]]) -> dict[str, Worker]:
    return {fw.key: Worker(fw, module, env.get(fw.kind)) for fw in frameworks if fw.python is not None}


def describe(workers: dict[str, Worker]) -> str:
    """One line per framework: versions and threads, printed above the tables."""
    lines = []
    for worker in workers.values():
        reply = worker.call(op="info")
        info = reply.get("result") or {"error": _failed(reply)}
        lines.append(f"- {worker.framework.label}: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    return "\n".join(lines)


def tinygrad_path() -> dict[str, str]:
    """tinygrad 0.14.0 runs the program named `clang`; Debian installs clang-19 and such under their versioned
    names only. Where `clang` is missing, a PATH whose first folder links `clang` to the newest versioned one."""
    if shutil.which("clang") is not None:
        return {}
    versioned = [name for d in os.environ.get("PATH", "").split(os.pathsep) if os.path.isdir(d)
                 for name in os.listdir(d) if name.startswith("clang-") and name[6:].isdigit()]
    if not versioned:
        return {}
    newest = shutil.which(max(versioned, key=lambda name: int(name[6:])))
    assert newest is not None
    folder = Path(tempfile.gettempdir()) / f"tg-bench-clang-{os.getuid()}"
    folder.mkdir(exist_ok=True)
    link = folder / "clang"
    if not link.is_symlink() or os.readlink(link) != newest:
        link.unlink(missing_ok=True)
        link.symlink_to(newest)
    return {"PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"}


def thread_env(threads: int | None) -> dict[str, str]:
    """Environment that pins every framework's CPU thread count (None: leave each framework's default)."""
    if threads is None:
        return {}
    names = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "CPU_THREADS")  # CPU_THREADS: ours
    return {name: str(threads) for name in names}


def machine_line() -> str:
    load = os.getloadavg()
    cores = len(os.sched_getaffinity(0))
    return (f"{cores} cores usable, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start "
            f"(other processes on the machine make timings noisy; compare ratios from the same run)")


def spawn_json(script: Path, extra: list[str], env: dict[str, str], timeout: int) -> dict[str, Any] | str:
    """Run `script` with `extra` arguments in a fresh interpreter; its last stdout line as JSON, or the error text
    (a timeout or a failed run is a row's result, not a crash of the whole bench)."""
    try:
        done = subprocess.run([sys.executable, str(script), *extra], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **env}, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"no result in {timeout} s (see --timeout)"
    if done.returncode != 0:
        return f"exit {done.returncode}: {done.stderr.strip()[-1500:]}"
    lines = done.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else {}


def proc_status(key: str) -> int:
    """A /proc/self/status value of this process (VmRSS, VmHWM) in bytes; 0 where the file or the key is missing."""
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0
