"""The LLVM path's first training step with an empty compile cache and with a full one.

A cold run compiles its batch of kernels in worker processes; a second process with the same cache must compile
nothing, start no worker process (their start would be its only compile cost), and compute exactly what the cold
run computed from the objects it compiled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent("""
    import hashlib, json
    import numpy as np
    from tinygrad import Context, Device, Tensor, TinyJit, nn
    from tinygrad.nn.state import get_parameters

    compiler = Device["CPU"].compiler
    calls = []
    compile_one = compiler.compile
    compiler.compile = lambda src: calls.append(src) or compile_one(src)

    class Model:
        def __init__(self):
            self.c1, self.c2 = nn.Conv2d(1, 8, 3), nn.Conv2d(8, 8, 3)
            self.bn, self.l = nn.BatchNorm(8), nn.Linear(8 * 2 * 2, 10)

        def __call__(self, x):
            h = self.c2(self.c1(x).relu())
            return self.l(self.bn(h).relu().max_pool2d().flatten(1))

    Tensor.manual_seed(0)
    model = Model()
    params = get_parameters(model)
    opt = nn.optim.Adam(params, lr=1e-2)

    @TinyJit
    def step(x, y):
        with Context(TRAINING=1, CHECK_INDICES=0):
            opt.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y).backward()
            return loss.realize(*opt.schedule_step())

    rng = np.random.default_rng(0)
    losses = []
    for _ in range(3):
        x = rng.standard_normal((16, 1, 8, 8)).astype(np.float32)
        losses.append(step(Tensor(x), Tensor(rng.integers(0, 10, 16).astype(np.int32))).item())
    digest = hashlib.sha256(b"".join(p.numpy().tobytes() for p in params)).hexdigest()
    print(json.dumps({"compiles": len(calls), "workers": compiler._workers is not None,
                      "note": compiler.workers_note, "losses": losses, "weights": digest}))
""")


def _run(cache: Path) -> dict:  # type: ignore[type-arg]
    env = {**os.environ, "TINYGRAD_CACHE_DIR": str(cache), "DEV": "CPU", "CPU_COMPILER": "llvm"}
    for knob in ("DISABLE_COMPILER_CACHE", "LLVM_COMPILE_PROCESSES"):
        env.pop(knob, None)
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_a_second_process_with_the_same_cache_compiles_nothing_starts_no_worker_and_computes_the_same(
        tmp_path: Path) -> None:
    pytest.importorskip("llvmlite")
    from tg_backend_cpu import llvm_compiler

    cold = _run(tmp_path / "cache")
    assert cold["compiles"] >= llvm_compiler.WORKERS_MIN_BATCH, cold
    if llvm_compiler.COMPILE_WORKERS >= 2:  # one core compiles in process
        assert cold["workers"], cold
    warm = _run(tmp_path / "cache")
    assert warm["compiles"] == 0 and not warm["workers"], warm
    assert warm["losses"] == cold["losses"] and warm["weights"] == cold["weights"]
