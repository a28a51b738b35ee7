"""What a training script's first step costs: a second run with the same compile cache compiles nothing.

Each run is a new process (an empty in-memory program table, as a user's second `python train.py` has); the compiles
are counted by wrapping the CPU compiler's `compile`, which the cache calls only on a miss.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import numpy as np
    from tinygrad import Context, Device, Tensor, TinyJit, nn
    from tinygrad.nn.state import get_parameters

    compiler = Device["CPU"].compiler
    calls = []
    compile_one = compiler.compile
    compiler.compile = lambda src: calls.append(src) or compile_one(src)

    class Model:
        def __init__(self):
            self.c, self.bn, self.l = nn.Conv2d(1, 4, 3), nn.BatchNorm(4), nn.Linear(4 * 3 * 3, 10)

        def __call__(self, x):
            return self.l(self.bn(self.c(x)).relu().max_pool2d().flatten(1))

    Tensor.manual_seed(0)
    model = Model()
    opt = nn.optim.Adam(get_parameters(model), lr=1e-3)

    @TinyJit
    def step(x, y):
        with Context(TRAINING=1, CHECK_INDICES=0):
            opt.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y).backward()
            return loss.realize(*opt.schedule_step())

    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.standard_normal((8, 1, 8, 8)).astype(np.float32)
        step(Tensor(x), Tensor(rng.integers(0, 10, 8).astype(np.int32)))
    print("compiles", len(calls))
""")


def _compiles(cache: Path) -> int:
    env = {**os.environ, "TINYGRAD_CACHE_DIR": str(cache), "DEV": "CPU"}
    env.pop("DISABLE_COMPILER_CACHE", None)
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split("compiles")[-1])


def test_a_second_run_with_the_same_cache_compiles_nothing(tmp_path: Path) -> None:
    first = _compiles(tmp_path / "cache")
    assert first > 10  # the step's kernels, each compiled once
    assert _compiles(tmp_path / "cache") == 0
