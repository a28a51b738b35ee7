"""tools/kernel_corpus.py: the dump renders each corpus kernel once per renderer, and the diff finds every change."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TOOL = ROOT / "tools" / "kernel_corpus.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=300)


def test_dump_is_deterministic_and_diff_names_the_changed_kernel(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        r = _run("dump", str(out), "--only", "softmax,symbolic", "--renderers", "cpu-c,cl")
        assert r.returncode == 0, r.stderr
    sources = sorted(p.relative_to(a).as_posix() for p in a.rglob("*.src"))
    assert "cpu-c/softmax.000.src" in sources and "cl/symbolic.000.src" in sources
    assert all(not (a / s).read_text().startswith("ERROR") for s in sources)
    same = _run("diff", str(a), str(b))
    assert same.returncode == 0 and "identical" in same.stdout, same.stdout

    changed = b / "cl" / "symbolic.000.src"
    changed.write_text(changed.read_text().replace("for", "four", 1))
    (b / "cpu-c" / "softmax.000.src").unlink()
    r = _run("diff", str(a), str(b))
    assert r.returncode == 1
    assert "differs: symbolic.000.src" in r.stdout and "gone: softmax.000.src" in r.stdout, r.stdout
