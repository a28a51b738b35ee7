"""ONNX inference latency: tinygrad.onnx (this project, TinyJit replays) against onnxruntime, same machine, same run.

    python bench/onnx_bench.py              # ResNet-like convnet and a 2-layer transformer encoder, batch 1 and 32
    python bench/onnx_bench.py --quick      # a few rounds: checks that the bench works, its numbers mean nothing
    python bench/onnx_bench.py --rounds 30 --batches 1,8,32

Standalone (bench/harness.py runs each framework in a worker process of its own venv; here both come from this
Python, which needs torch to export the models, onnx, and onnxruntime). The models are exported once with
torch.onnx.export (dynamo=False, opset 17, dynamic batch) into a temporary folder. Each framework runs in a
process of its own (this file with `--worker`): onnxruntime's threads busy-wait for more work after a run, and in a
shared process they slowed our next calls up to 2.5x for tens of milliseconds. Each row checks that both answers
agree (1e-4) before timing; a timed call is numpy in -> numpy out for both (upload, run, download). The frameworks
take turns by blocks of `BLOCK` calls, each after `WARM_SECONDS` of untimed ones, so that load from other
processes hits both alike. The table shows medians; `ours / ort` above 1 means this project is slower. DEV picks
this project's device (default: tinygrad's default device); the CPU figures are `DEV=CPU`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from envs import cpu_name
from line_worker import LineWorker


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


#: timed calls in a row per framework: the frameworks take turns by blocks, each block after untimed ones.
#: Turns of single calls timed each framework while the other's worker threads were still busy-waiting for more
#: work (onnxruntime's spin by default), on a 2-core machine up to 2.7x the time the same calls took in a row.
BLOCK = 5
#: seconds of untimed calls (3 at least) before each block: onnxruntime's threads spin for more work for
#: milliseconds after a run, taking cores from the other process; and a framework whose process idled while the
#: other ran had its first calls run with its threads crowded onto one core until the OS spread them again (our
#: calls after 50 ms or more of idling took twice as long for several calls, on 2 cores)
WARM_SECONDS = 0.1


def _export(torch: Any, model: Any, sample: tuple[int, ...], path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(2, *sample),), str(path), input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, dynamo=False, opset_version=17)


def _input(batch: int, sample: list[int]) -> np.ndarray:
    return np.random.default_rng(batch).standard_normal((batch, *sample)).astype(np.float32)


def worker(framework: str, path: str) -> None:
    """One framework's side, in a process of its own: JSON requests on stdin, one JSON reply line each on stdout.
    {"batch", "sample", "save"}: run three times (compile, capture, first replay) and save the output there;
    {"batch", "sample", "calls"}: `WARM_SECONDS` of untimed calls, then the seconds of each of `calls` timed ones."""
    if framework == "ort":
        import onnxruntime as ort
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])

        def call(x: np.ndarray) -> np.ndarray:
            return sess.run(None, {"x": x})[0]
        print(json.dumps({"version": f"onnxruntime {ort.__version__} (CPUExecutionProvider)"}), flush=True)
    else:
        from tinygrad import Device
        from tinygrad.onnx import OnnxRunner
        runner = OnnxRunner(path, jit=True)

        def call(x: np.ndarray) -> np.ndarray:
            return runner({"x": x})["y"].numpy()
        print(json.dumps({"version": f"tinygrad device {Device.DEFAULT}"}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        x = _input(req["batch"], req["sample"])
        if "save" in req:
            for _ in range(3):
                out = call(x)
            np.save(req["save"], out)
            reply: dict[str, Any] = {}
        else:
            warm_until = time.perf_counter() + WARM_SECONDS
            for i in range(1_000_000):  # untimed (see WARM_SECONDS)
                call(x)
                if i >= 2 and time.perf_counter() > warm_until:
                    break
            times = []
            for _ in range(req["calls"]):
                t0 = time.perf_counter()
                call(x)
                times.append(time.perf_counter() - t0)
            reply = {"times": times}
        print(json.dumps(reply), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20, help="timed calls per row and framework (default 20)")
    ap.add_argument("--batches", default="1,32", help="batch sizes (default 1,32)")
    ap.add_argument("--quick", action="store_true", help="3 rounds")
    ap.add_argument("--worker", nargs=2, metavar=("FRAMEWORK", "MODEL"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(*args.worker)
    rounds = 3 if args.quick else args.rounds
    batches = [int(b) for b in args.batches.split(",")]
    import torch

    rows, versions = [], ""
    with tempfile.TemporaryDirectory() as tmp:
        for name, (model, sample) in _models(torch).items():
            path = Path(tmp) / f"model{len(rows)}.onnx"
            _export(torch, model, sample, path)
            ours, ort = LineWorker(__file__, "ours", str(path)), LineWorker(__file__, "ort", str(path))
            versions = f"{ours.version}; {ort.version}"
            try:
                for batch in batches:
                    outs = [Path(tmp) / f"{w}.npy" for w in ("ours", "ort")]
                    for w, out in zip((ours, ort), outs):
                        w.ask(batch=batch, sample=list(sample), save=str(out))
                    np.testing.assert_allclose(np.load(outs[0]), np.load(outs[1]), rtol=1e-4, atol=1e-4,
                                               err_msg=f"{name} batch {batch}")
                    times: dict[str, list[float]] = {"ours": [], "ort": []}
                    for block in range(0, rounds, BLOCK):
                        for key, w in (("ours", ours), ("ort", ort)):
                            times[key] += w.ask(batch=batch, sample=list(sample),
                                                calls=min(BLOCK, rounds - block))["times"]
                    rows.append((name, batch, statistics.median(times["ours"]) * 1e3,
                                 statistics.median(times["ort"]) * 1e3))
            finally:
                ours.close()
                ort.close()
    print(f"machine: {cpu_name()}, {os.cpu_count()} logical CPUs, Python {platform.python_version()}; {versions}; "
          f"{rounds} rounds, medians\n")
    print("| model | batch | tinygrad.onnx (ms) | onnxruntime (ms) | ours / ort |")
    print("|---|---:|---:|---:|---:|")
    for name, batch, a, b in rows:
        print(f"| {name} | {batch} | {a:.3f} | {b:.3f} | {a / b:.2f}x |")


if __name__ == "__main__":
    main()
