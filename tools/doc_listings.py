"""The DEBUG listings in docs/architecture.md, produced by running the page's matmul, so that they cannot drift.

    python tools/doc_listings.py            # exit 1 and show a diff if a listing differs from what the code prints
    python tools/doc_listings.py --write    # rewrite the listings in place

A listing in the page is a fenced block right after a marker line `<!-- debug-listing: N -->`; it holds what
`DEBUG=N` prints for the page's expression on the CPU with `NOOPT=1` (no optimisation: the plain loops the page
walks through) and `CPU_COMPILER=clang` (the C path, whose source the page reads; the default LLVM path prints IR),
minus the lines that depend on the machine (timings, thread counts, devices opened).
packages/tg-compiler/tests/test_doc_listings.py runs the check.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
PROGRAM = """
from tinygrad import Tensor
N = 64
a, b = Tensor.empty(N, N), Tensor.empty(N, N)
c = (a.reshape(N, 1, N) * b.T.reshape(1, N, N)).sum(axis=2)
c.realize()
"""
MARKER = re.compile(r"<!-- debug-listing: (\d) -->\n```(\w*)\n(.*?)```\n", re.S)
# what a DEBUG run prints that belongs to the machine or the moment, not to the kernel
MACHINE_LINES = re.compile(r"^(scheduled \d+ kernel|opened device|.*threads per launch|\s+CPU r_\w+\s+[\d.]+ us)")


def debug_output(level: int) -> list[str]:
    env = {**os.environ, "DEBUG": str(level), "NOOPT": "1", "DEV": "CPU", "DISABLE_COMPILER_CACHE": "1",
           "CPU_COMPILER": "clang"}
    done = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"DEBUG={level} run failed:\n{done.stderr[-2000:]}")
    return [line for line in (done.stdout + done.stderr).splitlines() if not MACHINE_LINES.match(line)]


def listing(level: int) -> str:
    """The part of the DEBUG=level output that is new at that level."""
    lines = debug_output(level)
    if level == 3:
        picked = [line for line in lines if "opts applied" in line]
    elif level == 4:
        start = next(i for i, line in enumerate(lines) if line.startswith("void r_"))
        picked = lines[start:]
        while picked and not picked[-1].strip():
            picked.pop()
    elif level == 5:
        start = next(i for i, line in enumerate(lines) if line.startswith("UOp(Ops.SINK"))
        end = next(i for i in range(start, len(lines)) if lines[i] == ")")
        picked = lines[start:end + 1]
    elif level == 6:
        picked = [line for line in lines if re.match(r"^\s*\d+ [A-Z_]+\s", line)]
    else:
        raise ValueError(f"no listing for DEBUG={level}")
    return "\n".join(picked) + "\n"


def render(text: str) -> str:
    def fill(m: re.Match) -> str:
        return f"<!-- debug-listing: {m.group(1)} -->\n```{m.group(2)}\n{listing(int(m.group(1)))}```\n"
    return MARKER.sub(fill, text)


def main() -> int:
    text = DOC.read_text()
    if not MARKER.search(text):
        print(f"{DOC} has no `<!-- debug-listing: N -->` markers", file=sys.stderr)
        return 1
    new = render(text)
    if "--write" in sys.argv[1:]:
        from tinygrad.helpers import atomic_write

        with atomic_write(DOC, "w") as f:
            f.write(new)
        return 0
    if new != text:
        sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True), "docs (now)",
                                                   "docs (what the code prints)"))
        print("\nrun `python tools/doc_listings.py --write` and read the new listings against the prose",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
