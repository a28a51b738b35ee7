"""Run tinygrad's own test files against this project and against tinygrad 0.14.0, in one run.

    python tools/tinygrad_compat/run.py --tinygrad PATH                 # the six files, both sides
    python tools/tinygrad_compat/run.py --tinygrad PATH test/backend/test_ops.py --sides ours -k pow
    python tools/tinygrad_compat/run_examples.py --tinygrad PATH        # the examples (drivers in example_drivers/)

PATH is a tinygrad checkout (a work tree, or a bare git repository, whose HEAD is read). Its test/, extra/ and
examples/ folders are copied into a temporary workspace outside this repository -- never its tinygrad/ package,
so `import tinygrad` finds the tinygrad of the side being run: this project (the interpreter running this
script, when it imports this checkout), or tinygrad 0.14.0 from PyPI in a venv made on first use under
~/.cache/tg-bench (with pytest, hypothesis and torch, which tinygrad's tests import). Both sides run under the
stand-ins of `standins.py` for exactly the names on the internals list (`internals.py`), on the CPU, each with
a compile cache of its own. The table gives per file passed / failed / errors / skipped for both sides;
--details FILE writes the tests that tinygrad 0.14.0 passes and this project does not.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "bench"))
from envs import _imports_this_repo, ensure_venv  # noqa: E402
from harness import tinygrad_path  # noqa: E402

DEFAULT_FILES = [f"test/backend/test_{name}.py" for name in ("ops", "tensor", "jit", "dtype", "nn", "optim")]
#: environment per file, as tinygrad's CI runs them (RUN_SLOW: the tests it marks slow run too)
FILE_ENV = {"test/backend/test_nn.py": {"RUN_SLOW": "1"}, "test/backend/test_optim.py": {"RUN_SLOW": "1"}}
TINYGRAD_REQUIREMENTS = ["tinygrad==0.14.0", "numpy", "torch==2.13.0", "pytest==9.2.0", "pytest-xdist==3.8.0",
                         "hypothesis==6.170.17", "safetensors==0.8.0", "pillow"]
COPIED = ("test", "extra", "examples", "conftest.py")


def workspace(checkout: Path, into: Path) -> Path:
    """test/, extra/, examples/ and conftest.py of the checkout, in a folder without tinygrad's package."""
    if (checkout / "test").is_dir():
        for name in COPIED:
            src = checkout / name
            if src.is_dir():
                shutil.copytree(src, into / name, symlinks=True)
            elif src.is_file():
                shutil.copy2(src, into / name)
    else:  # a bare repository (what `fetch` gives)
        archive = subprocess.run(["git", "-C", str(checkout), "archive", "HEAD", *COPIED], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    if not (into / "test").is_dir():
        raise SystemExit(f"{checkout} holds no test/ folder: pass a tinygrad checkout")
    return into


@dataclass
class Outcome:
    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    note: str = ""

    def cell(self) -> str:
        if self.note:
            return self.note
        return f"{len(self.passed)} / {len(self.failed)} / {len(self.errors)} / {len(self.skipped)}"


def read_junit(path: Path) -> Outcome:
    out = Outcome()
    for case in ET.parse(path).iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        kinds = {child.tag for child in case}
        (out.errors if "error" in kinds else out.failed if "failure" in kinds
         else out.skipped if "skipped" in kinds else out.passed).append(name)
    return out


@dataclass(frozen=True)
class Side:
    key: str
    label: str
    python: str
    env: dict[str, str]


def sides(wanted: list[str], cache: Path) -> list[Side]:
    found = []
    for key in wanted:
        if key == "ours":
            if not _imports_this_repo(sys.executable):
                raise SystemExit("run this script with a Python that imports this checkout's tinygrad "
                                 "(the README's dev setup)")
            found.append(Side("ours", "this project", sys.executable,
                              {"TINYGRAD_CACHE_DIR": str(cache / "ours")}))
        elif key == "tinygrad":
            python = ensure_venv("tinygrad-0.14.0-tests", TINYGRAD_REQUIREMENTS)
            found.append(Side("tinygrad", "tinygrad 0.14.0", str(python),
                              {"XDG_CACHE_HOME": str(cache / "tinygrad"), "CACHEDB": str(cache / "tinygrad.db"),
                               **tinygrad_path()}))
        else:
            raise SystemExit(f"unknown side {key!r}: ours or tinygrad")
    return found


def prepare(checkout: Path, keep: Path | None, wanted: str, prefix: str) -> tuple[Path, Path, list[Side]]:
    """The workspace, the results folder and the sides of one run, under `keep` (else a new temporary folder)."""
    root = Path(tempfile.mkdtemp(prefix=prefix)) if keep is None else keep
    root.mkdir(parents=True, exist_ok=True)
    ws = workspace(checkout.resolve(), Path(tempfile.mkdtemp(dir=root, prefix="ws-")))
    results = root / "results"
    results.mkdir(exist_ok=True)
    return ws, results, sides(wanted.split(","), root / "cache")


def run_file(side: Side, ws: Path, test_file: str, args: argparse.Namespace, results: Path) -> Outcome:
    junit = results / f"{side.key}-{test_file.replace('/', '_')}.xml"
    cmd = [side.python, "-m", "pytest", "-p", "standins", "-p", "no:cacheprovider", "-q", "--tb=line",
           "-o", "addopts=", "-o", "python_files=test_*.py", f"--junitxml={junit}", test_file]
    if args.workers > 1:
        cmd[3:3] = ["-n", str(args.workers)]
    if args.k:
        cmd += ["-k", args.k]
    env = {**os.environ, "DEV": "CPU", "PYTHONPATH": os.pathsep.join([str(HERE), str(ws)]),
           **FILE_ENV.get(test_file, {}), **side.env}
    env.pop("PYTEST_ADDOPTS", None)
    log = results / f"{side.key}-{test_file.replace('/', '_')}.log"
    with open(log, "w") as out:
        try:
            subprocess.run(cmd, cwd=ws, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            return Outcome(note=f"timed out after {args.timeout} s")
    if not junit.exists():
        return Outcome(note=f"no report (see {log})")
    return read_junit(junit)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tinygrad", required=True, type=Path, help="a tinygrad checkout (work tree or bare repo)")
    parser.add_argument("files", nargs="*", default=DEFAULT_FILES, help="test files, relative to the checkout")
    parser.add_argument("--sides", default="tinygrad,ours", help="comma-separated: tinygrad, ours")
    parser.add_argument("-k", default="", help="pytest -k expression")
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers per file (1: none)")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per file and side")
    parser.add_argument("--keep", type=Path, help="keep the workspace, junit files and logs in this folder")
    parser.add_argument("--details", type=Path, help="write the tests tinygrad passes and this project does not")
    args = parser.parse_args()

    ws, results, chosen = prepare(args.tinygrad, args.keep, args.sides, "tg-compat-")
    table: dict[str, dict[str, Outcome]] = {}
    for test_file in args.files:
        for side in chosen:
            print(f"[compat] {side.label}: {test_file}", file=sys.stderr, flush=True)
            table.setdefault(test_file, {})[side.key] = run_file(side, ws, test_file, args, results)

    head = "| file | " + " | ".join(f"{s.label}: passed / failed / errors / skipped" for s in chosen) + " |"
    print(head)
    print("|" + "---|" * (len(chosen) + 1))
    for test_file, by_side in table.items():
        print(f"| {test_file} | " + " | ".join(by_side[s.key].cell() for s in chosen) + " |")
    totals = {s.key: sum(len(by[s.key].passed) for by in table.values()) for s in chosen}
    print("| **passed, all files** | " + " | ".join(str(totals[s.key]) for s in chosen) + " |")
    if args.details and {"ours", "tinygrad"} <= {s.key for s in chosen}:
        lines = []
        for test_file, by_side in table.items():
            ours = set(by_side["ours"].passed)
            lines += [f"{test_file} {name}" for name in by_side["tinygrad"].passed if name not in ours]
        args.details.write_text("\n".join(lines) + "\n")
        print(f"[compat] {len(lines)} tests pass on tinygrad 0.14.0 and not here: {args.details}", file=sys.stderr)
    print(f"[compat] logs and junit files: {results}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
