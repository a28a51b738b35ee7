"""examples/beautiful_mnist.py end to end at a tiny size: it trains, prints its step time and accuracy, and fails
(non-zero exit, with a message) below TARGET_EVAL_ACC_PCT."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

EXAMPLE = pathlib.Path(__file__).parents[3] / "examples" / "beautiful_mnist.py"
FASHION = pathlib.Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")


@pytest.mark.skipif(not FASHION.exists() and not os.environ.get("FASHION_MNIST_DIR"),
                    reason="needs Fashion-MNIST offline: apt-get install dataset-fashion-mnist, or FASHION_MNIST_DIR")
@pytest.mark.skipif(not EXAMPLE.exists(), reason="runs from the monorepo checkout (examples/ is not packaged)")
def test_beautiful_mnist_fails_below_target():
    env = {**os.environ, "FASHION": "1", "STEPS": "2", "BS": "8", "EVAL_SAMPLES": "20",
           "TARGET_EVAL_ACC_PCT": "101"}  # unreachable on purpose
    run = subprocess.run([sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True, timeout=1200)
    assert run.returncode != 0, run.stdout + run.stderr
    assert "below TARGET_EVAL_ACC_PCT=101" in run.stderr
    assert "step time" in run.stdout and "test accuracy" in run.stdout
