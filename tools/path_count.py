"""How long is the path from `Tensor` to the launched kernel? Count the project's functions and files it runs.

    python tools/path_count.py            # the README's matmul on the CPU, traced call by call
    python tools/path_count.py --list     # and every function, grouped by file

The program is the README's matmul (`(a.reshape(N,1,N) * b.T.reshape(1,N,N)).sum(axis=2)`, realized), run with a
fresh compile cache so the whole path runs: graph, schedule, codegen, render, compile, launch. Counted are the
distinct functions (lambdas and comprehensions excluded) defined in this repository's packages that run after the
inputs exist, and the files that hold them: what a reader follows from `Tensor` to the kernel.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def trace_matmul(n: int = 64) -> dict[str, set[str]]:
    os.environ.setdefault("DEV", "CPU")
    os.environ["TINYGRAD_CACHE_DIR"] = tempfile.mkdtemp(prefix="path-count-")
    import numpy as np
    from tinygrad import Tensor
    a = Tensor(np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)).realize()
    b = Tensor(np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)).realize()
    seen: dict[str, set[str]] = defaultdict(set)
    packages = str(ROOT / "packages")

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        if code.co_filename.startswith(packages) and not code.co_name.startswith("<"):
            seen[os.path.relpath(code.co_filename, packages)].add(code.co_qualname)
    sys.setprofile(profile)
    try:
        c = (a.reshape(n, 1, n) * b.T.reshape(1, n, n)).sum(axis=2)
        c.realize()
    finally:
        sys.setprofile(None)
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print each file and its functions")
    args = parser.parse_args()
    seen = trace_matmul()
    if args.list:
        for path in sorted(seen):
            print(f"{path} ({len(seen[path])})")
            for fn in sorted(seen[path]):
                print(f"    {fn}")
    print(f"{sum(len(v) for v in seen.values())} functions in {len(seen)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
