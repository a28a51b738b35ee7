"""The walking skeleton's main job, on the CPU:

1. the README's fused matmul - one kernel, checked against numpy;
2. a small two-layer network trained by plain gradient descent, written with Tensor ops only,
   printing its falling loss.

    python examples/train_tiny.py            # STEPS=300 by default
    DEBUG=2 python examples/train_tiny.py    # per-kernel timings
"""

from __future__ import annotations

import math
import os
import sys
import time

import numpy as np
from tinygrad import Device, Tensor


def fused_matmul(n: int = 64) -> None:
    rng = np.random.default_rng(0)
    a_np, b_np = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    a, b = Tensor(a_np), Tensor(b_np)
    c = (a.reshape(n, 1, n) * b.T.reshape(1, n, n)).sum(axis=2)
    kernels = len(c.schedule())
    err = float(np.abs(c.numpy() - a_np @ b_np).max())
    print(f"fused matmul {n}x{n}: {kernels} kernel, max |error| vs numpy = {err:.2e}")
    if kernels != 1 or err > 1e-3:
        sys.exit("fused matmul check failed")


def spirals(n_per_class: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Two interleaved spirals: a data set a linear model cannot fit."""
    t = np.sqrt(rng.uniform(0.05, 1.0, n_per_class)) * 2 * math.pi
    arm = np.stack([t * np.cos(t), t * np.sin(t)], axis=1) / (2 * math.pi)
    x = np.concatenate([arm, -arm]) + rng.normal(0, 0.02, (2 * n_per_class, 2))
    y = np.concatenate([np.zeros(n_per_class), np.ones(n_per_class)])
    return x.astype(np.float32), y.astype(np.float32)


def train(steps: int, lr: float = 0.2, hidden: int = 32) -> tuple[float, float]:
    rng = np.random.default_rng(1)
    x_np, y_np = spirals(256, rng)
    x, y = Tensor(x_np), Tensor(y_np.reshape(-1, 1))
    Tensor.manual_seed(0)
    w1 = Tensor(Tensor.randn(2, hidden).numpy() * math.sqrt(2 / 2), requires_grad=True)
    b1 = Tensor.zeros(1, hidden, requires_grad=True)
    w2 = Tensor(Tensor.randn(hidden, hidden).numpy() * math.sqrt(2 / hidden), requires_grad=True)
    b2 = Tensor.zeros(1, hidden, requires_grad=True)
    w3 = Tensor(Tensor.randn(hidden, 1).numpy() * math.sqrt(1 / hidden), requires_grad=True)
    b3 = Tensor.zeros(1, 1, requires_grad=True)
    params = [w1, b1, w2, b2, w3, b3]
    first = last = math.nan
    st = time.perf_counter()
    for step in range(steps):
        logits = ((x @ w1 + b1).tanh() @ w2 + b2).tanh() @ w3 + b3
        # binary cross-entropy on logits, in the numerically stable form
        loss = (logits.maximum(0) - logits * y + (1 + (-logits.abs()).exp()).log()).mean()
        for p in params:
            p.grad = None
        loss.backward()
        for p in params:
            assert p.grad is not None
            p.assign((p - p.grad * lr).detach())
        Tensor.realize(*params)
        last = loss.item()
        if step == 0:
            first = last
        if step % max(1, steps // 10) == 0 or step == steps - 1:
            acc = float((((logits.numpy() > 0) == (y_np.reshape(-1, 1) > 0.5))).mean())
            print(f"step {step:4d}  loss {last:.4f}  train accuracy {acc * 100:5.1f}%  "
                  f"({time.perf_counter() - st:.1f} s)")
    return first, last


def main() -> None:
    print(f"device: {Device.DEFAULT}")
    fused_matmul()
    steps = int(os.environ.get("STEPS", "300"))
    first, last = train(steps)
    print(f"loss fell from {first:.4f} to {last:.4f}")
    if steps >= 50 and not last < first * 0.5:
        sys.exit("training did not reduce the loss by half")


if __name__ == "__main__":
    main()
