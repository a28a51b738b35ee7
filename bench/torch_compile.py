"""A PyTorch MNIST training step three ways: torch eager, torch.compile's inductor, torch.compile(backend="tinygrad").

    python bench/torch_compile.py               # batch 128, 10 timed steps per backend
    python bench/torch_compile.py --quick       # 3 timed steps: checks that the bench works, its numbers mean nothing
    python bench/torch_compile.py --batch 512 --rounds 20 --backends eager,tinygrad

Standalone, like onnx_bench.py: every backend comes from this Python (torch 2.13 and this project with tg-nn's
`[torch]` extra, whose entry point registers the "tinygrad" backend; inductor needs a C++ compiler). The model is
beautiful_mnist's convnet written in torch (two 5x5 convs, BatchNorm, max pooling, two 3x3 convs, BatchNorm, max
pooling, a linear head) in training mode; a step is forward, cross-entropy loss, backward and an Adam update, with
the model and the loss inside the compiled function and the optimizer eager in all three. Each backend runs in a
process of its own (this file with `--worker`) from the same seed and the same batches: its first `WARM` steps
compile (aot_autograd's forward and backward graphs; the jit's capture) and are reported apart, and their losses
must agree with eager's (1e-3), so a fast wrong answer is an error, not a number. The backends then take turns by
blocks of `BLOCK` timed steps, each timed to the loss read back; the table shows medians and `vs eager` (above 1:
slower). Below it: the share of torch's core aten op set (the overloads tagged `core`) that the backend's op table
covers, and the ops it lacks.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from typing import Any

from envs import cpu_name
from line_worker import LineWorker

#: steps before timing: aot_autograd traces and the backend compiles on the first, TinyJit captures on the second
WARM = 3
#: timed steps in a row per backend before the next backend's turn
BLOCK = 5


def _model(torch: Any) -> Any:
    nn = torch.nn

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.Sequential(
                nn.Conv2d(1, 32, 5), nn.ReLU(), nn.Conv2d(32, 32, 5), nn.ReLU(), nn.BatchNorm2d(32), nn.MaxPool2d(2),
                nn.Conv2d(32, 64, 3), nn.ReLU(), nn.Conv2d(64, 64, 3), nn.ReLU(), nn.BatchNorm2d(64),
                nn.MaxPool2d(2), nn.Flatten(), nn.Linear(576, 10))

        def forward(self, x: Any) -> Any:
            return self.layers(x)

    torch.manual_seed(0)
    return Model()


def worker(backend: str, batch: int) -> None:
    """One backend, in a process of its own: JSON requests on stdin, one JSON reply line each on stdout.
    {"warm": n}: the first n steps, their seconds and losses; {"steps": n}: the seconds of n more steps."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    model = _model(torch)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def loss_fn(x: Any, y: Any) -> Any:
        return F.cross_entropy(model(x), y)

    fn = loss_fn if backend == "eager" else torch.compile(loss_fn, backend=backend)
    rng = np.random.default_rng(0)
    batches = [(torch.from_numpy(rng.standard_normal((batch, 1, 28, 28), dtype=np.float32)),
                torch.from_numpy(rng.integers(0, 10, batch))) for _ in range(4)]
    step_no = 0

    def step() -> float:
        nonlocal step_no
        x, y = batches[step_no % len(batches)]
        step_no += 1
        opt.zero_grad()
        loss = fn(x, y)
        loss.backward()
        opt.step()
        return float(loss.item())

    print(json.dumps({"version": f"torch {torch.__version__}, {torch.get_num_threads()} threads"}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        times, losses = [], []
        for _ in range(req.get("warm", req.get("steps", 0))):
            t0 = time.perf_counter()
            losses.append(step())
            times.append(time.perf_counter() - t0)
        print(json.dumps({"times": times, "losses": losses}), flush=True)


def coverage_report() -> str:
    from tinygrad.torch_compile import core_aten_coverage
    covered, missing = core_aten_coverage()
    total = len(covered) + len(missing)
    return (f"core aten ops covered: {len(covered)} of {total} ({100 * len(covered) / total:.0f}%); missing: "
            + ", ".join(str(op).removeprefix("aten.") for op in missing))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=128, help="batch size (default 128)")
    ap.add_argument("--rounds", type=int, default=10, help="timed steps per backend (default 10)")
    ap.add_argument("--backends", default="eager,inductor,tinygrad", help="default eager,inductor,tinygrad")
    ap.add_argument("--quick", action="store_true", help="3 timed steps")
    ap.add_argument("--worker", nargs=2, metavar=("BACKEND", "BATCH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker[0], int(args.worker[1]))
    rounds = 3 if args.quick else args.rounds
    names = args.backends.split(",")
    if "eager" not in names:
        names.insert(0, "eager")  # the reference for the losses and the ratios
    workers = {n: LineWorker(__file__, n, str(args.batch)) for n in names}
    try:
        warm = {n: w.ask(warm=WARM) for n, w in workers.items()}
        for n in names:
            for a, b in zip(warm[n]["losses"], warm["eager"]["losses"]):
                if abs(a - b) > 1e-3 * max(1.0, abs(b)):
                    raise SystemExit(f"{n}'s losses {warm[n]['losses']} differ from eager's {warm['eager']['losses']}")
        times: dict[str, list[float]] = {n: [] for n in names}
        for block in range(0, rounds, BLOCK):
            for n, w in workers.items():
                times[n] += w.ask(steps=min(BLOCK, rounds - block))["times"]
        version = workers["eager"].version
    finally:
        for w in workers.values():
            w.close()
    print(f"machine: {cpu_name()}, {os.cpu_count()} logical CPUs, Python {platform.python_version()}; {version}; "
          f"batch {args.batch}, {rounds} timed steps, medians\n")
    print("| backend | first step (s) | steps 2-3 (s) | step (ms) | vs eager |")
    print("|---|---:|---:|---:|---:|")
    base = statistics.median(times["eager"])
    for n in names:
        med = statistics.median(times[n])
        label = {"eager": "torch eager", "inductor": "torch.compile inductor",
                 "tinygrad": 'torch.compile backend="tinygrad"'}.get(n, n)
        print(f"| {label} | {warm[n]['times'][0]:.2f} | {sum(warm[n]['times'][1:]):.2f} | {med * 1e3:.1f} | "
              f"{med / base:.2f}x |")
    print()
    print(coverage_report())


if __name__ == "__main__":
    main()
