"""docs/architecture.md's DEBUG listings are what the code prints (tools/doc_listings.py regenerates them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tinygrad import Device

ROOT = Path(__file__).resolve().parents[3]
TOOL = ROOT / "tools" / "doc_listings.py"


def _clang_path() -> str | None:
    """Why the CPU backend's clang path cannot run here, or None."""
    if "CPU" not in Device.backends or Device.availability("CPU") is not None:
        return "the listings are the CPU backend's; it is not installed or not usable here"
    import os
    from unittest import mock

    from tg_backend_cpu import compiler

    with mock.patch.dict(os.environ, {"CPU_COMPILER": "clang"}):
        compiler.find_c_compiler.cache_clear()
        try:
            return compiler.find_c_compiler()[1]
        finally:
            compiler.find_c_compiler.cache_clear()


@pytest.mark.skipif(not TOOL.exists(), reason="runs from a checkout of the repository (tools/, docs/)")
def test_architecture_listings_match_the_code() -> None:
    if (why := _clang_path()) is not None:
        pytest.skip(f"the listings are the CPU backend's C (CPU_COMPILER=clang): {why}")
    done = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
