"""tools/path_count.py: the traced path of the README's matmul reaches from tensor.py to the kernel's launch."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_path_count_lists_the_path_from_tensor_to_launch() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "path_count.py"), "--list"], capture_output=True,
                       text=True, timeout=300, env={"DEV": "CPU", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    files = [line for line in r.stdout.splitlines() if line and not line.startswith(" ") and "(" in line]
    functions = [line for line in r.stdout.splitlines() if line.startswith("    ")]
    total = re.search(r"^(\d+) functions in (\d+) files$", r.stdout, re.M)
    assert total and int(total[1]) == len(functions) and int(total[2]) == len(files), r.stdout[-500:]
    names = "\n".join(files)
    assert "tinygrad/tensor.py" in names and "renderer" in names and "schedule" in names, names
