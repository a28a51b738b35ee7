"""Tests of the bench harness itself: the worker protocol and how tables compute ratios (no timings asserted)."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from envs import Framework  # noqa: E402 - the bench folder is not a package
from harness import Row, Worker, latency, render_table, throughput  # noqa: E402

NUMPY = Framework("numpy", "numpy", sys.executable)


def _row(label: str, seconds: list[float], work: float | None = None) -> Row:
    return Row(label, NUMPY, "matmul", samples=[{"seconds": s} for s in seconds], work=work)


def _cells(table: str, label: str) -> list[str]:
    line = next(line for line in table.splitlines() if line.startswith(f"| {label} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_throughput_ratios_are_value_over_reference() -> None:
    rows = [_row("ref", [1.0, 2.0, 3.0]), _row("fast", [0.5, 0.5, 0.6])]
    table = render_table("t", rows, throughput("GFLOP/s", 10.0), ["ref"])
    assert _cells(table, "ref")[1] == "5"  # 10 / median 2.0 s
    assert _cells(table, "fast")[1] == "20.0"
    assert _cells(table, "fast")[-1] == "4.00x"  # four times the reference's GFLOP/s
    assert _cells(table, "ref")[2] == "100%"  # (3 - 1) / 2


def test_latency_ratios_and_rows_with_their_own_work() -> None:
    rows = [_row("slow", [2e-6]), _row("quick", [1e-6]), _row("copy", [1.0], work=5.0)]
    table = render_table("t", rows, latency("us", 1e6), ["quick"])
    assert _cells(table, "slow")[1] == "2" and _cells(table, "slow")[-1] == "2.00x"
    gbs = render_table("t", rows[2:] + [_row("kernel", [1.0])], throughput("GB/s", 10.0), ["copy"])
    assert _cells(gbs, "copy")[1] == "5" and _cells(gbs, "kernel")[-1] == "2.00x"


def test_a_row_without_samples_shows_its_reason() -> None:
    missing = Row("absent", Framework("torch", "absent", None, "n/a (no venv)"), "matmul", note="n/a (no venv)")
    table = render_table("t", [missing, _row("ref", [1.0])], throughput("GFLOP/s", 1.0), ["ref"])
    assert _cells(table, "absent")[1] == "n/a (no venv)"
    assert len(_cells(table, "absent")) == len(_cells(table, "ref"))


def test_worker_protocol_measures_reports_na_and_errors() -> None:
    worker = Worker(NUMPY, "cpu_workloads")
    try:
        assert worker.call(op="setup", id="m", workload="matmul", params={"n": 8, "inner": 2}) == {"ok": True}
        assert worker.call(op="measure", id="m")["result"]["seconds"] > 0
        assert "numpy has no JIT" in worker.call(op="setup", id="j", workload="jit", params={"kernels": 3})["na"]
        bad = worker.call(op="setup", id="b", workload="matmul", params={"wrong": 1})
        assert "TypeError" in bad["error"]
        assert "numpy" in worker.call(op="info")["result"]
    finally:
        worker.close()


def test_training_table_ratios_and_unfinished_runs() -> None:
    from mnist import Run, render
    torch_run = Run(Framework("torch", "PyTorch 2.13.0", "x"), step_times=[1.0] + [0.5] * 5,
                    accuracy_at={2: 0.5, 4: 0.7, 6: 0.86}, time_to_target=3.5)
    ours = Run(Framework("ours", "this project", "x"), step_times=[3.0, 1.0, 1.0, 1.0], accuracy_at={2: 0.5, 4: 0.6},
               note="stopped at the 900 s training budget")
    table = render([torch_run, ours], steps=6, target=0.85, max_steps=10)
    assert _cells(table, "PyTorch 2.13.0")[1:4] == ["0.5 s (1.00x)", "1 s", "86.0%"]
    row = _cells(table, "this project")
    assert row[1] == "1 s (2.00x)" and row[2] == "3 s"  # median of steps 3 onwards; the first step alone
    assert row[3] == "n/a (60.0% at step 4)" and row[4] == "not reached in 4 steps"
