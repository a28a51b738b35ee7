"""Run tinygrad's examples and model files on this project and on tinygrad 0.14.0, and compare their outputs.

    python tools/tinygrad_compat/run_examples.py --tinygrad PATH [--only resnet,vit] [--sides tinygrad,ours]
        [--keep DIR]

PATH is a tinygrad checkout (work tree or bare repository). Its test/, extra/ and examples/ are copied into a
workspace without tinygrad's package (run.py's `workspace()`), so `import tinygrad` finds the side's tinygrad.

Each example has a driver, `example_drivers/<name>.py`, run as `python DRIVER OUT.npz` by each side's Python with
the workspace as the working directory, PYTHONPATH = the workspace + this folder, DEV=CPU and a compile cache per
side. A driver imports the example's code unchanged, builds it at a tiny size with weights and data made by numpy
from a fixed seed (the two tinygrads' random generators differ), runs it and saves its outputs with `seconds`, the
wall time of the measured part, into OUT.npz. The driver's module-level RTOL and ATOL (defaults below) are the
tolerance of the comparison. The report is a markdown table on stdout; the exit status is 0 whatever it says.

A driver that sets `SEQUENTIAL_SUMS = True` (a training run on raw pixel values, whose gradients depend on how
accurately float32 reductions are summed, and whose Adam steps amplify the difference) is also run on this project
with one float32 accumulator per output, as tinygrad 0.14.0 sums (`NOOPT=1 SPLIT_REDUCE=0`, `SEQUENTIAL_ENV`): its
verdict compares that run with tinygrad's, and the cell gives the default run's difference too. The default sums
in chunks and several accumulators, closer to the exact sum (test_accuracy_of_sums.py in tg-nn compares such a
model's gradients with float64).
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from run import HERE, Side, prepare

DRIVERS = HERE / "example_drivers"
RTOL, ATOL = 1e-4, 1e-5


@dataclass
class Result:
    error: str = ""  # the first line of the failure, empty when the driver ran
    outputs: dict[str, np.ndarray] | None = None
    seconds: float = float("nan")


#: how this project sums when a driver asks for tinygrad's summation order: one accumulator per output (no kernel
#: opts, so no unrolled partial sums) and no reduction split into chunks
SEQUENTIAL_ENV = {"NOOPT": "1", "SPLIT_REDUCE": "0"}


def driver_constants(driver: Path) -> dict[str, float]:
    """The driver's module-level RTOL, ATOL and SEQUENTIAL_SUMS constants (defaults for those it does not set), read
    without importing it (it imports tinygrad)."""
    found = {"RTOL": RTOL, "ATOL": ATOL, "SEQUENTIAL_SUMS": 0.0}
    for node in ast.parse(driver.read_text()).body:
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:  # RTOL = 1e-3, or RTOL, ATOL = 1e-3, 1e-4
            names = target.elts if isinstance(target, ast.Tuple) else [target]
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            for name, value in zip(names, values):
                if isinstance(name, ast.Name) and name.id in found and isinstance(value, ast.Constant):
                    found[name.id] = float(value.value)
    return found


def tolerance(driver: Path) -> tuple[float, float]:
    """The driver's RTOL/ATOL."""
    found = driver_constants(driver)
    return found["RTOL"], found["ATOL"]


def first_line(log: str) -> str:
    """The line that says what went wrong: the last exception line of a traceback, else the last line."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if re.match(r"[\w.]*(Error|Exception|Exit|Used|Interrupt)\b", ln):
            return ln[:160]
    return lines[-1][:160] if lines else "no output"


def run_driver(side: Side, driver: Path, ws: Path, out_dir: Path, timeout: int) -> Result:
    out = out_dir / f"{driver.stem}-{side.key}.npz"
    log = out_dir / f"{driver.stem}-{side.key}.log"
    out.unlink(missing_ok=True)  # a kept folder's output of an earlier run is not this run's
    # the workspace first: its examples/ package is what `import examples.x` means
    env = {**os.environ, "DEV": "CPU", "PYTHONPATH": os.pathsep.join([str(ws), str(HERE)]), **side.env}
    start = time.perf_counter()
    try:
        proc = subprocess.run([side.python, str(driver), str(out)], cwd=ws, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return Result(error=f"timed out after {timeout} s")
    log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0 or not out.exists():
        return Result(error=first_line(proc.stderr or proc.stdout))
    with np.load(out) as data:
        outputs = {k: data[k] for k in data.files if k != "seconds"}
        seconds = float(data["seconds"]) if "seconds" in data.files else time.perf_counter() - start
    return Result(outputs=outputs, seconds=seconds)


def compare(a: dict[str, np.ndarray], b: dict[str, np.ndarray], rtol: float, atol: float) -> str:
    """'ok'/'DIFF' with the largest absolute and relative difference over every output both sides saved."""
    if set(a) != set(b):
        return f"DIFF: outputs {sorted(set(a) ^ set(b))} on one side only"
    worst_abs = worst_rel = 0.0
    ok = True
    for k in a:
        x, y = np.atleast_1d(np.asarray(a[k], dtype=np.float64)), np.atleast_1d(np.asarray(b[k], dtype=np.float64))
        if x.shape != y.shape:
            return f"DIFF: {k} has shape {x.shape} vs {y.shape}"
        if x.size == 0:
            continue
        both_nan = np.isnan(x) & np.isnan(y)  # (a test accuracy neither side computed yet)
        diff = np.where(both_nan, 0.0, np.abs(x - y))
        worst_abs = max(worst_abs, float(np.nanmax(diff)) if not np.isnan(diff).all() else float("inf"))
        scale = np.where(both_nan, 0.0, np.abs(y))
        # relative to the value, or to ATOL where the value is smaller (near zero every difference is large)
        worst_rel = max(worst_rel, float(np.max(diff / np.maximum(scale, max(atol, 1e-30)))))
        ok = ok and bool(np.all(diff <= atol + rtol * scale))  # a NaN on one side only is a difference
    return f"{'ok' if ok else 'DIFF'} {worst_abs:.1e} / {worst_rel:.1e}"


def sequential_verdict(results: dict[str, Result], driver: Path, ws: Path, out_dir: Path, timeout: int,
                       chosen: list[Side], default_diff: str) -> str:
    """For a SEQUENTIAL_SUMS driver: this project run again summing as tinygrad does, compared with tinygrad's
    outputs; the default run's difference follows in brackets."""
    ours = next(s for s in chosen if s.key == "ours")
    side = Side("ours-sequential", f"{ours.label}, {' '.join(f'{k}={v}' for k, v in SEQUENTIAL_ENV.items())}",
                ours.python, {**ours.env, **SEQUENTIAL_ENV})
    print(f"[examples] {side.label}: {driver.stem}", file=sys.stderr, flush=True)
    seq, theirs = run_driver(side, driver, ws, out_dir, timeout), results["tinygrad"]
    if seq.outputs is None or theirs.outputs is None:
        return f"{side.label} failed: {seq.error} (default sums: {default_diff})"
    verdict = compare(seq.outputs, theirs.outputs, *tolerance(driver))
    return f"{verdict} summed as tinygrad (default sums: {default_diff})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tinygrad", required=True, type=Path, help="a tinygrad checkout (work tree or bare repo)")
    parser.add_argument("--only", default="", help="comma-separated example names (driver file stems)")
    parser.add_argument("--sides", default="tinygrad,ours", help="comma-separated: tinygrad, ours")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per example and side")
    parser.add_argument("--keep", type=Path, help="keep the workspace, outputs and logs in this folder")
    args = parser.parse_args()

    drivers = sorted(p for p in DRIVERS.glob("*.py") if not p.name.startswith("_"))
    if args.only:
        wanted = args.only.split(",")
        drivers = [p for p in drivers if p.stem in wanted]
        if missing := set(wanted) - {p.stem for p in drivers}:
            raise SystemExit(f"no driver for {sorted(missing)} in {DRIVERS}")
    ws, out_dir, chosen = prepare(args.tinygrad, args.keep, args.sides, "tg-examples-")

    rows = []
    for driver in drivers:
        results = {}
        for side in chosen:
            print(f"[examples] {side.label}: {driver.stem}", file=sys.stderr, flush=True)
            results[side.key] = run_driver(side, driver, ws, out_dir, args.timeout)
        cells = [r.error or "ok" for r in results.values()]
        diff = time_ratio = ""
        ours, theirs = results.get("ours"), results.get("tinygrad")
        if ours and theirs and ours.outputs is not None and theirs.outputs is not None:
            diff = compare(ours.outputs, theirs.outputs, *tolerance(driver))
            time_ratio = f"{ours.seconds / theirs.seconds:.2f} ({ours.seconds:.2f} s / {theirs.seconds:.2f} s)"
            if driver_constants(driver)["SEQUENTIAL_SUMS"]:
                diff = sequential_verdict(results, driver, ws, out_dir, args.timeout, chosen, diff)
        rows.append(f"| {driver.stem} | " + " | ".join(c.replace("|", "/") for c in cells) +
                    f" | {diff} | {time_ratio} |")
        print(f"[examples] {rows[-1]}", file=sys.stderr, flush=True)

    print("| example | " + " | ".join(s.label for s in chosen) + " | max abs / rel diff | time ours/tinygrad |")
    print("|" + "---|" * (len(chosen) + 3))
    print("\n".join(rows))
    print(f"[examples] outputs and logs: {out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
