"""ONNX inference latency: tinygrad.onnx (this project, TinyJit replays) against onnxruntime, same machine, same run.

    python bench/onnx_bench.py              # ResNet-like convnet and a 2-layer transformer encoder, batch 1 and 32
    python bench/onnx_bench.py --quick      # a few rounds: checks that the bench works, its numbers mean nothing
    python bench/onnx_bench.py --rounds 30 --batches 1,8,32

Standalone (bench/harness.py runs each framework in a worker process of its own venv; here both run in this
Python, which needs torch to export the models, onnx, and onnxruntime). The models are exported once with
torch.onnx.export (dynamo=False, opset 17, dynamic batch) into a temporary folder. Each row checks that both
answers agree (1e-4) before timing; a timed call is numpy in -> numpy out for both (upload, run, download), and
the frameworks take turns by blocks of `BLOCK` calls (each after an untimed one) so that load from other processes
hits both alike. The table shows medians; `ours / ort` above 1 means this project is slower. DEV picks this
project's device (default: tinygrad's default device); the CPU figures are `DEV=CPU`.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np


def _models(torch: Any) -> dict[str, tuple[Any, tuple[int, ...]]]:
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
            self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)) \
                if stride != 1 or cin != cout else nn.Identity()

        def forward(self, x: Any) -> Any:
            return torch.relu(self.b2(self.c2(torch.relu(self.b1(self.c1(x))))) + self.down(x))

    class ResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                                      nn.MaxPool2d(2))
            self.stages = nn.Sequential(Block(16, 16, 1), Block(16, 32, 2), Block(32, 64, 2))
            self.fc = nn.Linear(64, 10)

        def forward(self, x: Any) -> Any:
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.stages(self.stem(x)), 1), 1))

    torch.manual_seed(0)
    resnet = ResNet().eval()
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True), 2,
                                    enable_nested_tensor=False).eval()
    return {"resnet (3x32x32)": (resnet, (3, 32, 32)), "encoder (seq 32, d 64)": (encoder, (32, 64))}


#: timed calls in a row per framework: the frameworks take turns by blocks, each block after one untimed call.
#: Turns of single calls timed each framework while the other's worker threads were still busy-waiting for more
#: work (onnxruntime's spin by default), on a 2-core machine up to 2.7x the time the same calls took in a row.
BLOCK = 5


def _export(torch: Any, model: Any, sample: tuple[int, ...], path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(2, *sample),), str(path), input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, dynamo=False, opset_version=17)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20, help="timed calls per row and framework (default 20)")
    ap.add_argument("--batches", default="1,32", help="batch sizes (default 1,32)")
    ap.add_argument("--quick", action="store_true", help="3 rounds")
    args = ap.parse_args()
    rounds = 3 if args.quick else args.rounds
    batches = [int(b) for b in args.batches.split(",")]

    import onnxruntime as ort
    import torch
    from tinygrad import Device
    from tinygrad.onnx import OnnxRunner

    print(f"machine: {_cpu_name()}, {os.cpu_count()} logical CPUs, Python {platform.python_version()}; "
          f"tinygrad device {Device.DEFAULT}; onnxruntime {ort.__version__} (CPUExecutionProvider); "
          f"{rounds} rounds, medians\n")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (model, sample) in _models(torch).items():
            path = Path(tmp) / "model.onnx"
            _export(torch, model, sample, path)
            sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            runner = OnnxRunner(path, jit=True)
            for batch in batches:
                x = np.random.default_rng(batch).standard_normal((batch, *sample)).astype(np.float32)
                want = sess.run(None, {"x": x})[0]
                for _ in range(3):  # compile, capture, first replay
                    got = runner({"x": x})["y"].numpy()
                np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{name} batch {batch}")
                ours, theirs = [], []
                calls = ((lambda runner=runner, x=x: runner({"x": x})["y"].numpy(), ours),
                         (lambda sess=sess, x=x: sess.run(None, {"x": x}), theirs))
                for block in range(0, rounds, BLOCK):
                    for call, times in calls:
                        call()  # untimed: the other framework's threads may still be spinning down
                        for _ in range(min(BLOCK, rounds - block)):
                            t0 = time.perf_counter()
                            call()
                            times.append(time.perf_counter() - t0)
                a, b = statistics.median(ours) * 1e3, statistics.median(theirs) * 1e3
                rows.append((name, batch, a, b))
    print("| model | batch | tinygrad.onnx (ms) | onnxruntime (ms) | ours / ort |")
    print("|---|---:|---:|---:|---:|")
    for name, batch, a, b in rows:
        print(f"| {name} | {batch} | {a:.3f} | {b:.3f} | {a / b:.2f}x |")


if __name__ == "__main__":
    main()
