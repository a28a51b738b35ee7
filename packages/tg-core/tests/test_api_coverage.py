"""tools/api_coverage.py: every public name of tinygrad 0.14.0's Tensor is here, or left out with a reason
that the README lists too."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "tools" / "api_coverage.py"


def _module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("api_coverage", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_name_is_present_or_left_out_with_a_reason() -> None:
    present, left_out, missing = _module().report()
    assert not missing, f"tinygrad 0.14.0 Tensor names neither implemented nor listed in LEFT_OUT: {missing}"
    assert len(present) + len(left_out) == 251 and len(left_out) <= 20


def test_left_out_names_are_really_absent_and_listed_in_the_readme() -> None:
    from tinygrad import Tensor

    mod = _module()
    readme = (ROOT / "README.md").read_text()
    for name, reason in mod.LEFT_OUT.items():
        assert not hasattr(Tensor, name), f"{name} is implemented now: drop it from LEFT_OUT and the README"
        assert f"- `{name}`: {reason}" in readme, f"the README's left-out list lacks {name}"


def test_the_script_prints_the_report_and_exits_zero() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "missing:           0" in proc.stdout and "present here:" in proc.stdout
