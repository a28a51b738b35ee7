"""docs/architecture.md's DEBUG listings are what the code prints (tools/doc_listings.py regenerates them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tinygrad import Device

ROOT = Path(__file__).resolve().parents[3]
TOOL = ROOT / "tools" / "doc_listings.py"


@pytest.mark.skipif(not TOOL.exists(), reason="runs from a checkout of the repository (tools/, docs/)")
@pytest.mark.skipif("CPU" not in Device.backends or Device.availability("CPU") is not None,
                    reason="the listings are the CPU backend's; it is not installed or has no C compiler here")
def test_architecture_listings_match_the_code() -> None:
    done = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
