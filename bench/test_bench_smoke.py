"""Smoke test of the bench commands: each runs in --quick mode and prints its tables.

No timing is asserted. The commands run with --no-setup, so a framework whose venv was never made
(run `python bench/envs.py` once to make them) shows up as an "n/a" row with the reason instead of
being installed here; this project's own rows must hold numbers, never an error.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import envs  # noqa: E402 - the bench folder is not a package
import fashion_mnist  # noqa: E402


def run_bench(*args: str, timeout: int = 900) -> str:
    done = subprocess.run([sys.executable, str(BENCH / args[0]), *args[1:], "--quick", "--no-setup"],
                          capture_output=True, text=True, timeout=timeout, cwd=BENCH.parent)
    assert done.returncode == 0, f"{args[0]} failed:\n{done.stdout}\n{done.stderr[-4000:]}"
    return done.stdout


def table_rows(output: str, label: str) -> list[str]:
    """The rows of every table whose framework is `label`, or `label (compiler)` (this project's rows name the CPU
    compiler path they ran on)."""
    return [line for line in output.splitlines() if line.startswith((f"| {label} |", f"| {label} ("))]


def missing_venvs() -> list[str]:
    return [f"{fw.label}: {fw.why_missing}" for fw in envs.frameworks(["torch", "tinygrad"], setup=False)
            if fw.python is None]


def test_cpu_bench_prints_every_table() -> None:
    output = run_bench("run.py")
    for title in ("fp32 matmul N=64", "fused elementwise a*b+c", "eager dispatch", "TinyJit replay",
                  "a @TinyJit method", "first realize of a 64 fp32 matmul"):
        assert f"### {title}" in output, f"no table {title!r} in:\n{output}"
    paths = [line for line in output.splitlines() if line.startswith("- this project")]  # one per compiler path
    assert paths, output
    for title in ("fp32 matmul N=64", "fused elementwise a*b+c", "eager dispatch", "TinyJit replay"):
        section = output.split(f"### {title}")[1].split("\n### ")[0]
        ours = [row for row in table_rows(section, "this project") if "copy" not in row and "back to back" not in row]
        assert len(ours) == len(paths), f"{title}: one row per compiler path expected:\n{section}"
    replay = output.split("### TinyJit replay")[1].split("\n### ")[0]
    back_to_back = [row for row in table_rows(replay, "this project") if "calls back to back" in row]
    assert len(back_to_back) == len(paths), f"one back-to-back replay row per compiler path expected:\n{replay}"
    ours = table_rows(output, "this project")
    assert not any("error:" in row or "n/a" in row for row in ours), "\n".join(ours)
    numpy_rows = table_rows(output, "numpy")
    assert numpy_rows and "GFLOP/s" in output and not any("error:" in row for row in numpy_rows)
    for missing in missing_venvs():  # their rows say why, they are not failures
        label = missing.split(":")[0]
        assert all("n/a" in row for row in table_rows(output, label)), missing


def test_gpu_bench_on_opencl_or_says_why() -> None:
    output = run_bench("gpu.py", "--device", "CL", "--frameworks", "numpy,ours")
    if "skipped:" in output:
        pytest.skip(f"the CL device is not available here: {output.split('skipped:')[1].splitlines()[0]}")
    for title in ("CL: fused elementwise", "CL: reduction sum()", "CL: compile + first launch"):
        assert f"### {title}" in output, output
    rows = table_rows(output, "this project on CL") + table_rows(output, "CL copy (native)")
    assert len(rows) == 5 and not any("error:" in row or "n/a" in row for row in rows), "\n".join(rows)


def test_mnist_bench_trains_a_few_steps() -> None:
    if (why := fashion_mnist.missing_reason()) is not None:
        pytest.skip(why)
    frameworks = "torch,ours" if not os.environ.get("BENCH_SMOKE_ALL") else "torch,tinygrad,ours"
    output = run_bench("mnist.py", "--frameworks", frameworks)
    assert "### beautiful_mnist on Fashion-MNIST" in output, output
    ours = table_rows(output, "this project")
    paths = [line for line in output.splitlines() if line.startswith("- this project")]  # one per compiler path
    assert paths and len(ours) == len(paths), output
    assert all(" s" in row and "error:" not in row for row in ours), output


def test_idx_reader_rejects_a_truncated_file(tmp_path: Path) -> None:
    good = bytes([0, 0, 8, 1]) + (3).to_bytes(4, "big") + bytes([7, 8, 9])
    (tmp_path / "ok").write_bytes(good)
    assert fashion_mnist.read_idx(tmp_path / "ok").tolist() == [7, 8, 9]
    (tmp_path / "short").write_bytes(good[:-1])
    with pytest.raises(ValueError, match="header says"):
        fashion_mnist.read_idx(tmp_path / "short")
    (tmp_path / "bad").write_bytes(b"PK\x03\x04")
    with pytest.raises(ValueError, match="not an IDX file"):
        fashion_mnist.read_idx(tmp_path / "bad")


def test_batches_are_the_same_in_every_process() -> None:
    first = fashion_mnist.batch_indices(3, 16, 60000)
    assert (first == fashion_mnist.batch_indices(3, 16, 60000)).all()
    assert not (first == fashion_mnist.batch_indices(4, 16, 60000)).all()
