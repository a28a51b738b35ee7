"""python -m tinygrad.onnx MODEL.onnx [--input name=file.npy ...] [--dim name=size ...] [--runs N] [--jit]
python -m tinygrad.onnx compile MODEL.onnx OUT [--input name=file.npy|name=shape ...] [--dim name=size ...]
python -m tinygrad.onnx run OUT [--input name=file.npy ...] [--runs N] [--save FOLDER]

The first form runs an ONNX model on the given inputs (.npy files) or random ones of the declared types and shapes
(a symbolic dimension is 1 unless --dim sets it), prints each output's name, shape, dtype and first values, and the
time of the first call (which compiles the kernels) and the median of the next N. DEBUG=2 in the environment lists the
kernels as it does for any tinygrad program.

`compile` captures the model's kernels and weights into one file, and `run` runs that file in a process that needs
neither the model nor the onnx package, and compiles nothing (see tinygrad/onnx/_cli.py and docs/onnx.md).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import numpy as np


def _random_input(elem: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """random_input (tinygrad.onnx._compiled), its error the command's exit message (python -m tinygrad.export uses
    it too)."""
    from tinygrad.onnx._compiled import random_input
    from tinygrad.onnx._proto import OnnxError

    try:
        return random_input(elem, shape, rng)
    except OnnxError as e:
        raise SystemExit(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("compile", "run"):
        from tinygrad.onnx._cli import compile_main, run_main
        from tinygrad.onnx._proto import OnnxError

        try:
            return (compile_main if argv[0] == "compile" else run_main)(argv[1:])
        except OnnxError as e:  # the model, the file or the inputs: the message says what to change
            print(f"error: {e}", file=sys.stderr)
            return 1
    ap = argparse.ArgumentParser(prog="python -m tinygrad.onnx", description=__doc__.split("\n\n")[1])
    ap.add_argument("model", help="path to an .onnx file")
    ap.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", help="an input from a file")
    ap.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE", help="size of a symbolic dim")
    ap.add_argument("--runs", type=int, default=10, help="timed calls after the first (default 10)")
    ap.add_argument("--jit", action="store_true", help="replay calls through TinyJit")
    ap.add_argument("--device", default=None, help="device (default: Device.DEFAULT)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    ap.add_argument("--max-tensor-bytes", type=int, default=None, metavar="BYTES",
                    help="the largest tensor the model may make (default: in proportion to the model and its inputs)")
    args = ap.parse_args(argv)

    from tinygrad import Device
    from tinygrad.onnx import OnnxRunner
    from tinygrad.onnx._cli import pairs, summary, timed_first_call
    from tinygrad.onnx._proto import import_onnx

    import_onnx()  # importing onnx itself is not the model's load time
    t0 = time.perf_counter()
    runner = OnnxRunner(args.model, device=args.device, jit=args.jit, max_tensor_bytes=args.max_tensor_bytes)
    load_s = time.perf_counter() - t0
    given = {k: np.load(v) for k, v in pairs(args.input, "--input").items()}
    dims = {k: int(v) for k, v in pairs(args.dim, "--dim").items()}
    rng = np.random.default_rng(args.seed)
    inputs: dict[str, Any] = {}
    for name, (elem, shape) in runner.input_spec().items():
        if name in given:
            inputs[name] = given[name]
            continue
        concrete = tuple(d if isinstance(d, int) and d > 0 else dims.get(str(d), 1) for d in shape)
        if int(np.prod(concrete)) > 1 << 31:
            raise SystemExit(f"input {name} of shape {concrete} is too large to make up; pass it with --input")
        inputs[name] = _random_input(elem, concrete, rng)
        print(f"input  {name}: random {elem} {concrete}")
    unknown = set(given) - set(inputs)
    if unknown:
        raise SystemExit(f"--input for unknown input(s) {sorted(unknown)}; the model's inputs: {runner.input_names}")

    out, first_s = timed_first_call(runner, runner.device, inputs)
    for name, v in out.items():
        print(f"output {name}: {summary(v)}")
    times = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        runner(inputs)
        Device[runner.device].synchronize()
        times.append(time.perf_counter() - t0)
    print(f"device {runner.device}; load {load_s * 1e3:.1f} ms; first call {first_s * 1e3:.1f} ms", end="")
    if times:
        print(f"; median of {len(times)} calls {statistics.median(times) * 1e3:.3f} ms "
              f"(min {min(times) * 1e3:.3f} ms){' with TinyJit' if args.jit else ''}")
    else:
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
