"""Print how much of tinygrad 0.14.0's public `Tensor` API this project has.

    python tools/api_coverage.py             # compare with the stored name list (works offline)
    python tools/api_coverage.py --refresh   # re-read the names from tinygrad 0.14.0 installed in a throwaway venv

Every name is either present on our `Tensor` or listed in LEFT_OUT with the reason; the script exits with
status 1 when a name is neither, so a test keeps the README's list honest.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

HERE = Path(__file__).parent
NAMES_FILE = HERE / "tinygrad-0.14.0-tensor-api.txt"
TINYGRAD_VERSION = "0.14.0"

#: names deliberately not provided, and why; the README's "Left out" list mirrors this
LEFT_OUT: dict[str, str] = {
    "call": "tinygrad's hook for calling a UOp function from its own IR; our IR has no call op",
    "callify": "tinygrad-internal companion of call",
    "custom_kernel": "kernels written directly in tinygrad's UOp dialect; ours has a different kernel IR",
    "as_param": "tinygrad-internal marker for its function-capture (PARAM slots); our JIT (issue 5) works differently",
    "invalids": "tensors of tinygrad's Invalid sentinel value, which our IR does not have",
    "decode_hevc_frame": "hardware video decoding on tinygrad's AMD/NV drivers; no such decoder here",
    "usum": "tinygrad-internal sum over UOp arguments",
    "uprod": "tinygrad-internal product over UOp arguments",
}


def reference_names() -> list[str]:
    return [line.strip() for line in NAMES_FILE.read_text().splitlines() if line.strip() and not line.startswith("#")]


def refresh() -> None:
    """Install tinygrad==0.14.0 into a temporary venv and store its Tensor's public names."""
    with tempfile.TemporaryDirectory(prefix="tg-api-") as tmp:
        venv.create(tmp, with_pip=True)
        py = Path(tmp) / "bin" / "python"
        subprocess.run([py, "-m", "pip", "install", "-q", f"tinygrad=={TINYGRAD_VERSION}"], check=True)
        out = subprocess.run([py, "-c", "from tinygrad import Tensor\n"
                              "print('\\n'.join(sorted(n for n in dir(Tensor) if not n.startswith('_'))))"],
                             check=True, capture_output=True, text=True, cwd=tmp).stdout
    header = (f"# public names of tinygrad {TINYGRAD_VERSION}'s Tensor (dir(Tensor) without leading underscores); "
              "regenerate with tools/api_coverage.py --refresh\n")
    from tinygrad.helpers import atomic_write

    with atomic_write(NAMES_FILE, "w") as f:
        f.write(header + out)


def report() -> tuple[list[str], list[str], list[str]]:
    from tinygrad import Tensor

    names = reference_names()
    present = [n for n in names if hasattr(Tensor, n)]
    left_out = [n for n in names if not hasattr(Tensor, n) and n in LEFT_OUT]
    missing = [n for n in names if not hasattr(Tensor, n) and n not in LEFT_OUT]
    return present, left_out, missing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--refresh", action="store_true", help=f"re-read the names from tinygrad {TINYGRAD_VERSION}")
    args = parser.parse_args()
    if args.refresh:
        refresh()
    present, left_out, missing = report()
    total = len(present) + len(left_out) + len(missing)
    print(f"tinygrad {TINYGRAD_VERSION} Tensor API: {total} public names")
    print(f"  present here:      {len(present)}")
    print(f"  left out (reason): {len(left_out)}")
    for n in left_out:
        print(f"    {n}: {LEFT_OUT[n]}")
    print(f"  missing:           {len(missing)}")
    if missing:
        print("    " + " ".join(missing))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
