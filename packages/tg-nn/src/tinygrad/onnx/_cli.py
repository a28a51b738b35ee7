"""The `compile` and `run` commands of `python -m tinygrad.onnx`, and what the commands share.

    python -m tinygrad.onnx compile MODEL.onnx OUT [--input NAME=FILE.npy | NAME=D0,D1,...] [--dim NAME=SIZE]
                                                   [--device DEV] [--seed N] [--no-verify]
    python -m tinygrad.onnx run OUT [--input NAME=FILE.npy] [--runs N] [--save FOLDER] [--seed N]

`compile` runs the model under TinyJit on the given arrays, or on random data of the given shapes (the model's own
shapes where it fixes them) and writes the captured program to OUT. `run` loads OUT, which needs neither the model
nor the onnx package, runs it on the given arrays or random ones of its shapes, prints each output and the times
of the calls, and with --save writes each output to FOLDER/NAME.npy (characters other than letters,
digits, `_`, `-` and `.` in NAME become `_`).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import time
from typing import Any

import numpy as np


def pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"{what} takes name=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k] = v
    return out


def timed_first_call(fn: Any, device: str, inputs: Any) -> tuple[Any, float]:
    """The outputs of `fn(inputs)` and the seconds until the device finished them (for a first call: compiles too)."""
    from tinygrad import Device

    t0 = time.perf_counter()
    out = fn(inputs)
    Device[device].synchronize()
    return out, time.perf_counter() - t0


def summary(v: Any, n: int = 6) -> str:
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


def _file_name(output: str) -> str:
    """An output's name as a file name: ONNX names may hold slashes, which must not reach outside the folder."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", output)
    return safe if safe.strip(".") else f"output_{safe}"


def _shape_or_file(name: str, value: str) -> Any:
    """--input NAME=VALUE of `compile`: a .npy file, or a shape as sizes separated by commas or x (1,3,224,224)."""
    if value.endswith(".npy") or os.path.exists(value):
        return np.load(value)
    parts = value.replace("x", ",").split(",")
    if not all(p.strip().isdigit() for p in parts):
        raise SystemExit(f"--input {name}={value}: give a .npy file or a shape such as {name}=1,3,224,224")
    return tuple(int(p) for p in parts)


def compile_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m tinygrad.onnx compile",
                                 description="Capture an ONNX model's kernels and weights into one file.")
    ap.add_argument("model", help="path to an .onnx file")
    ap.add_argument("out", help="the file to write (replaced whole, through a temporary file)")
    ap.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy|NAME=SHAPE",
                    help="an input's data, or its shape (random data); default: the model's static shape")
    ap.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE", help="size of a symbolic dim")
    ap.add_argument("--device", default=None, help="device (default: Device.DEFAULT)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    ap.add_argument("--no-verify", action="store_true",
                    help="do not load the written file back to check that it gives the same outputs")
    ap.add_argument("--max-tensor-bytes", type=int, default=None, metavar="BYTES",
                    help="the largest tensor the model may make (default: in proportion to the model and its inputs)")
    args = ap.parse_args(argv)

    from tinygrad.onnx._compiled import compile_onnx

    inputs = {k: _shape_or_file(k, v) for k, v in pairs(args.input, "--input").items()}
    dims = {k: int(v) for k, v in pairs(args.dim, "--dim").items()}
    t0 = time.perf_counter()
    res = compile_onnx(args.model, args.out, inputs, device=args.device, dims=dims, seed=args.seed,
                       verify=not args.no_verify, max_tensor_bytes=args.max_tensor_bytes)
    took = time.perf_counter() - t0
    for name, arr in res.outputs.items():
        print(f"output {name}: {summary(arr)}")
    check = "loaded back and checked bit for bit" if res.verified else "not checked after writing"
    print(f"wrote {res.path}: {res.nbytes} bytes, {res.launches} launches on {res.device} ({check}); "
          f"{took:.2f} s")
    return 0


def run_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m tinygrad.onnx run",
                                 description="Run a program written by `python -m tinygrad.onnx compile`.")
    ap.add_argument("program", help="the file `compile` wrote")
    ap.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", help="an input from a file")
    ap.add_argument("--runs", type=int, default=10, help="timed calls after the first (default 10)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    ap.add_argument("--save", default=None, metavar="FOLDER", help="write each output to FOLDER/NAME.npy")
    args = ap.parse_args(argv)

    from tinygrad.helpers import atomic_write
    from tinygrad.onnx._compiled import load_compiled, time_calls

    t0 = time.perf_counter()
    program = load_compiled(args.program)
    load_s = time.perf_counter() - t0
    given = {k: np.load(v) for k, v in pairs(args.input, "--input").items()}
    unknown = sorted(set(given) - set(program.input_names))
    if unknown:
        raise SystemExit(f"--input for unknown input(s) {unknown}; the program's inputs: {program.input_spec_text()}")
    rng = np.random.default_rng(args.seed)
    inputs: dict[str, Any] = {}
    for name, (shape, dtype) in program.input_spec().items():
        if name in given:
            inputs[name] = given[name]
        elif dtype.kind == "f":
            inputs[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            inputs[name] = rng.integers(0, 2, shape).astype(dtype)
        else:
            inputs[name] = rng.integers(0, 10, shape).astype(dtype)
        if name not in given:
            print(f"input  {name}: random {dtype.name} {shape}")
    out, first_s = timed_first_call(program, program.device, inputs)
    for name, v in out.items():
        print(f"output {name}: {summary(v)}")
        if args.save is not None:
            os.makedirs(args.save, exist_ok=True)
            with atomic_write(os.path.join(args.save, f"{_file_name(name)}.npy")) as f:
                np.save(f, v.numpy())
    times = time_calls(program, inputs, args.runs)
    print(f"device {program.device}; {program.launches} launches; load {load_s * 1e3:.1f} ms; first call "
          f"{first_s * 1e3:.1f} ms", end="")
    if times:
        print(f"; median of {len(times)} calls {statistics.median(times) * 1e3:.3f} ms "
              f"(min {min(times) * 1e3:.3f} ms)")
    else:
        print()
    return 0


__all__ = ["compile_main", "pairs", "run_main", "summary"]
