"""The compatibility suite: tinygrad programs (tinygrad_programs.py) run here unchanged and compute what numpy
says they should. Where a venv of tinygrad 0.14.0 exists (the benchmarks make one: bench/envs.py), the same file
runs under tinygrad too, which proves the programs are written in tinygrad's idioms, not ours."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest
import tinygrad_programs
from tinygrad import Context, Device, Tensor, dtypes, nn

HERE = pathlib.Path(__file__).parent
REFERENCE_PYTHON = pathlib.Path(os.environ.get("TG_BENCH_CACHE", pathlib.Path.home() / ".cache" / "tg-bench")) \
    / "tinygrad-0.14.0" / "bin" / "python"
# where tinygrad 0.14.0 itself departs from the OCP tables (this project follows the spec)
REFERENCE_DEVIATIONS = {"fp8_round_trips": "tinygrad 0.14.0 flushes E4M3's smallest subnormal, 2**-9, to zero"}


@pytest.mark.parametrize("name", list(tinygrad_programs.PROGRAMS))
def test_program_runs_unchanged(name: str) -> None:
    if name == "fp8_round_trips" and not Device[Device.DEFAULT].supports_dtype(dtypes.fp8e4m3):
        pytest.skip(f"{Device.DEFAULT} has no 8-bit floats (it refuses them with a TypeError)")
    tinygrad_programs.check(tinygrad_programs.PROGRAMS[name]())


def test_older_tinygrad_spelling_of_training_mode() -> None:
    # `@Tensor.train()` (tinygrad before Context(TRAINING=1)) switches training on inside, and back off after
    assert not Tensor.training

    @Tensor.train()
    def step() -> bool:
        return Tensor.training

    assert step() and not Tensor.training
    with Tensor.train():
        with Tensor.train(False):
            assert not Tensor.training
        assert Tensor.training
    assert not Tensor.training


def test_context_training_turns_dropout_on() -> None:
    x = Tensor.ones(1000)
    assert (x.dropout(0.5).numpy() == 1).all()
    with Context(TRAINING=1):
        kept = x.dropout(0.5).numpy()
    assert 0 < (kept == 0).sum() < 1000 and set(kept.tolist()) <= {0.0, 2.0}
    bn = nn.BatchNorm(3)
    with Context(TRAINING=1):
        bn(Tensor.rand(4, 3, 2, 2) * 5).realize()
    assert abs(float(bn.running_mean.numpy().mean())) > 0  # the running statistics moved


@pytest.mark.skipif(not REFERENCE_PYTHON.exists(),
                    reason=f"no tinygrad 0.14.0 venv at {REFERENCE_PYTHON} (python bench/run.py makes it once)")
@pytest.mark.skipif(shutil.which("clang") is None, reason="tinygrad's CPU backend runs `clang`, which is not on PATH")
def test_programs_run_under_tinygrad_itself() -> None:
    env = {**os.environ, "DEV": "CPU"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run([str(REFERENCE_PYTHON), str(HERE / "tinygrad_programs.py")], capture_output=True,
                          text=True, env=env, cwd=HERE, timeout=900)
    results = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
    assert set(results) == set(tinygrad_programs.PROGRAMS), done.stdout + done.stderr[-2000:]
    failed = {name: r for name, r in results.items() if r != "ok" and name not in REFERENCE_DEVIATIONS}
    assert not failed, failed
