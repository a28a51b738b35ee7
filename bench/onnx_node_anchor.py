"""The ONNX backend node tests through this project's tinygrad.onnx and through tinygrad 0.14.0's own ONNX runner
(`tinygrad.nn.onnx.OnnxRunner`, in its venv), on the CPU, in one run: passed / failed / unsupported for each.

    python bench/onnx_node_anchor.py                 # every case
    python bench/onnx_node_anchor.py --cases 'conv'  # the cases whose name matches a regular expression

Both runners get the same inputs and are judged by the node-test session's comparison (`assert_matches` in
packages/tg-nn/tests/onnx_tests/test_node_suite.py: float32 within rtol 1e-3 / atol 1e-4, integers exactly; the
random ops by shape and dtype). "unsupported" is a NotImplementedError from the runner (an op or op feature it does
not have) or, for this project, a dtype the device cannot hold; any other exception or a wrong value is "failed".

tinygrad 0.14.0 and this project share the import name `tinygrad`, so tinygrad 0.14.0 runs in a worker process of
its own venv ($TG_BENCH_CACHE/tinygrad-0.14.0-onnx, made with pip on first use: tinygrad, numpy, ml_dtypes), which
has no onnx package: this process reads each case's inputs and hands them over pickled. The worker runs a case
while this process runs the same case here (2 cores, 2 runners). A case that crashes the worker or runs past
--timeout counts as failed, and a new worker takes the next case.
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

NODE_TESTS = Path(__file__).resolve().parent.parent / "packages" / "tg-nn" / "tests" / "onnx_tests"


# ---- the worker, in tinygrad 0.14.0's venv: numpy and tinygrad only ----

def worker() -> None:
    import numpy as np
    from tinygrad import Tensor
    from tinygrad.nn.onnx import OnnxRunner

    def host(v: Any) -> Any:
        if isinstance(v, Tensor):
            return v.numpy()
        if isinstance(v, (list, tuple)):
            return [host(x) for x in v]
        return None if v is None else np.asarray(v)

    for line in sys.stdin:
        request = Path(line.strip())
        try:
            case = pickle.loads(request.read_bytes())  # inputs of a dtype numpy lacks (bfloat16) fail here
            runner = OnnxRunner(case["model"])
            outputs = [{k: host(v) for k, v in runner(feed).items()} for feed in case["feeds"]]
            reply: dict[str, Any] = {"status": "ok", "outputs": outputs}
        except NotImplementedError as e:
            reply = {"status": "unsupported", "message": f"{e}"}
        except Exception as e:
            reply = {"status": "failed", "message": f"{type(e).__name__}: {e}"}
        request.with_suffix(".out").write_bytes(pickle.dumps(reply))
        print("done", flush=True)


class _Tinygrad014:
    def __init__(self, python: str, env: dict[str, str]):
        self.python, self.env = python, env
        self.proc: subprocess.Popen[str] | None = None

    def start(self, request: Path) -> None:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([self.python, __file__, "--worker"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True, env=self.env)
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{request}\n")
        self.proc.stdin.flush()

    def finish(self, request: Path, timeout: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if line.strip() != "done":
            reason = f"ran past {timeout:.0f} s" if not ready else f"worker ended (status {self.proc.poll()})"
            self.close()
            return {"status": "failed", "message": reason}
        reply: dict[str, Any] = pickle.loads(request.with_suffix(".out").read_bytes())
        return reply

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


# ---- this process: the cases, this project's runner, the comparison ----

def _ours(folder: Path, feeds: list[dict[str, Any]]) -> dict[str, Any]:
    from test_node_suite import _to_numpy
    from tinygrad.onnx import OnnxRunner

    try:
        runner = OnnxRunner(folder / "model.onnx")
        return {"status": "ok", "outputs": [{k: _to_numpy(v) for k, v in runner(feed).items()} for feed in feeds]}
    except NotImplementedError as e:
        return {"status": "unsupported", "message": f"{e}"}
    except TypeError as e:
        if "cannot hold" in str(e):
            return {"status": "unsupported", "message": f"{e}"}
        return {"status": "failed", "message": f"TypeError: {e}"}
    except Exception as e:
        return {"status": "failed", "message": f"{type(e).__name__}: {e}"}


def _judge(reply: dict[str, Any], wants: list[list[Any]], names: list[str], shape_only: bool) -> str:
    from test_node_suite import assert_matches

    if reply["status"] != "ok":
        return str(reply["status"])
    try:
        for got, want in zip(reply["outputs"], wants):
            for name, w in zip(names, want):
                assert_matches(got.get(name) if isinstance(got, dict) else None, w, name, shape_only)
    except (AssertionError, TypeError, ValueError):
        return "failed"
    return "passed"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="", help="a regular expression the case names must match (default: all)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds a case may take in tinygrad 0.14.0")
    ap.add_argument("--why", action="store_true", help="print why each case that one side passes fails on the other")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker()
    os.environ.setdefault("DEV", "CPU")
    sys.path[:0] = [str(NODE_TESTS), str(Path(__file__).resolve().parent)]
    import onnx
    from envs import TINYGRAD_REQUIREMENTS, ensure_venv
    from harness import tinygrad_path
    from node_data import node_data_dir, read_value
    from test_node_suite import _is_random

    # tinygrad 0.14.0's bench venv plus ml_dtypes (the version onnx brings here), so that inputs of bfloat16, the
    # 8- and 4-bit floats and the 4-bit ints reach its runner as they reach ours
    anchor_python = str(ensure_venv("tinygrad-0.14.0-onnx", [*TINYGRAD_REQUIREMENTS, "ml_dtypes==0.7.0"]))
    data = node_data_dir(onnx)
    cases = sorted(p.name for p in data.iterdir() if (p / "model.onnx").is_file() and re.search(args.cases, p.name))
    env = {**os.environ, **tinygrad_path(), "DEV": "CPU", "CPU": "1"}
    theirs = _Tinygrad014(anchor_python, env)
    counts = {side: {"passed": 0, "failed": 0, "unsupported": 0} for side in ("ours", "tinygrad")}
    only: dict[str, list[str]] = {"ours": [], "tinygrad": []}  # cases only one side passes
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for i, case in enumerate(cases):
                folder = data / case
                model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
                g = model.graph
                inits = {init.name for init in g.initializer}
                inputs = [x for x in g.input if x.name not in inits]
                feeds, wants = [], []
                for ds in sorted(folder.glob("test_data_set_*")):
                    feeds.append({x.name: read_value(onnx, ds / f"input_{j}.pb", x.type)
                                  for j, x in enumerate(inputs) if (ds / f"input_{j}.pb").exists()})
                    wants.append([read_value(onnx, ds / f"output_{j}.pb", o.type) for j, o in enumerate(g.output)])
                request = Path(tmp) / f"case{i}.pkl"
                request.write_bytes(pickle.dumps({"model": str(folder / "model.onnx"), "feeds": feeds}))
                theirs.start(request)
                names, shape_only = [o.name for o in g.output], _is_random(model, case)
                replies = {"ours": _ours(folder, feeds), "tinygrad": theirs.finish(request, args.timeout)}
                results = {side: _judge(reply, wants, names, shape_only) for side, reply in replies.items()}
                for side, result in results.items():
                    counts[side][result] += 1
                if results["ours"] != results["tinygrad"] and "passed" in results.values():
                    only["ours" if results["ours"] == "passed" else "tinygrad"].append(case)
                    if args.why:
                        loser = "tinygrad" if results["ours"] == "passed" else "ours"
                        print(f"[anchor] {case}: {loser} {results[loser]}: "
                              f"{str(replies[loser].get('message', 'wrong values'))[:300]}", file=sys.stderr)
                if (i + 1) % 100 == 0:
                    print(f"[anchor] {i + 1}/{len(cases)} cases, {time.perf_counter() - start:.0f} s", file=sys.stderr,
                          flush=True)
        finally:
            theirs.close()
    print(f"ONNX backend node tests (onnx {onnx.__version__}), {len(cases)} cases, on the CPU, "
          f"{time.perf_counter() - start:.0f} s\n")
    print("| runner | passed | failed | unsupported | pass rate |")
    print("|---|---:|---:|---:|---:|")
    for side, label in (("ours", "this project (tinygrad.onnx)"), ("tinygrad", "tinygrad 0.14.0 (tinygrad.nn.onnx)")):
        c = counts[side]
        print(f"| {label} | {c['passed']} | {c['failed']} | {c['unsupported']} | "
              f"{100 * c['passed'] / max(1, len(cases)):.1f}% |")
    for side, label in (("ours", "this project"), ("tinygrad", "tinygrad 0.14.0")):
        print(f"\npassed by {label} only ({len(only[side])}): {', '.join(only[side][:40])}"
              + (" ..." if len(only[side]) > 40 else ""))


if __name__ == "__main__":
    main()
