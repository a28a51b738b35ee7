"""The README's PyTorch example and its tinygrad translation: both run, and print the same numbers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[3] / "README.md"


def _block(marker: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    found = [b for b in blocks if b.startswith(f"# {marker}\n")]
    assert len(found) == 1, f"the README should have exactly one python block starting with '# {marker}'"
    return found[0]


def _run(code: str) -> list[float]:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    numbers = [float(v) for v in re.findall(r"loss (-?\d+\.\d+)", proc.stdout)]
    assert numbers, f"the example printed no losses:\n{proc.stdout}"
    return numbers


def test_the_tinygrad_translation_prints_a_falling_loss() -> None:
    losses = _run(_block("tinygrad-example"))
    assert len(losses) == 5 and losses[-1] < losses[0]


def test_the_pytorch_snippet_and_its_translation_agree() -> None:
    pytest.importorskip("torch")
    assert _run(_block("pytorch-example")) == pytest.approx(_run(_block("tinygrad-example")), abs=2e-4)
