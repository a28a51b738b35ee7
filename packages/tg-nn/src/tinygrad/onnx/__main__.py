"""python -m tinygrad.onnx MODEL.onnx [--input name=file.npy ...] [--dim name=size ...] [--runs N] [--jit]

Runs an ONNX model on the given inputs (.npy files) or random ones of the declared types and shapes (a symbolic
dimension is 1 unless --dim sets it), prints each output's name, shape, dtype and first values, and the time of the
first call (which compiles the kernels) and the median of the next N. DEBUG=2 in the environment lists the kernels
as it does for any tinygrad program.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import numpy as np


def _random_input(elem: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if elem in ("FLOAT", "DOUBLE", "FLOAT16", "BFLOAT16"):
        dt = {"FLOAT": np.float32, "DOUBLE": np.float64, "FLOAT16": np.float16, "BFLOAT16": np.float32}[elem]
        return rng.standard_normal(shape).astype(dt)
    if elem == "BOOL":
        return rng.integers(0, 2, shape).astype(np.bool_)
    ints = {"INT8": np.int8, "UINT8": np.uint8, "INT16": np.int16, "UINT16": np.uint16, "INT32": np.int32,
            "UINT32": np.uint32, "INT64": np.int64, "UINT64": np.uint64}
    if elem in ints:
        return rng.integers(0, 10, shape).astype(ints[elem])
    raise SystemExit(f"cannot make a random input of type {elem}; pass it with --input name=file.npy")


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"{what} takes name=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k] = v
    return out


def _summary(v: Any, n: int = 6) -> str:
    from tinygrad import Tensor
    if isinstance(v, list):
        return f"sequence of {len(v)}"
    if v is None:
        return "empty optional"
    arr = v.numpy() if isinstance(v, Tensor) else np.asarray(v)
    dtype = v.dtype.name if isinstance(v, Tensor) else arr.dtype.name
    flat = arr.reshape(-1)[:n]
    more = " ..." if arr.size > n else ""
    return f"shape {tuple(arr.shape)} {dtype}: {np.array2string(flat, precision=5, separator=', ')}{more}"


def main(argv: list[str] | None = None) -> int:
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
    from tinygrad.onnx._proto import import_onnx

    import_onnx()  # importing onnx itself is not the model's load time
    t0 = time.perf_counter()
    runner = OnnxRunner(args.model, device=args.device, jit=args.jit, max_tensor_bytes=args.max_tensor_bytes)
    load_s = time.perf_counter() - t0
    given = {k: np.load(v) for k, v in _pairs(args.input, "--input").items()}
    dims = {k: int(v) for k, v in _pairs(args.dim, "--dim").items()}
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

    dev = Device[runner.device]
    t0 = time.perf_counter()
    out = runner(inputs)
    dev.synchronize()
    first_s = time.perf_counter() - t0
    for name, v in out.items():
        print(f"output {name}: {_summary(v)}")
    times = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        runner(inputs)
        dev.synchronize()
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
