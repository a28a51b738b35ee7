"""tools/tinygrad_compat: the stand-ins stand in for exactly the listed internals, the runner reads pytest's reports
and builds a workspace without tinygrad's package. (Running tinygrad's own tests needs a tinygrad checkout and a
tinygrad 0.14.0 venv: `python tools/tinygrad_compat/run.py --tinygrad PATH`, not part of CI.)"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TOOLS = ROOT / "tools" / "tinygrad_compat"
pytestmark = pytest.mark.skipif(not TOOLS.exists(), reason="tools/ is not beside the package (an installed copy)")


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(TOOLS), "DEV": "CPU"})


def test_listed_internals_get_stand_ins_and_public_names_do_not() -> None:
    out = _run("""
        import standins
        from tinygrad.renderer.nir import NIRRenderer          # a module this project does not have
        from tinygrad.helpers import Target, getenv            # a listed name (and a real one)
        from tinygrad.uop.ops import Ops, graph_rewrite        # a listed name, and a listed member of a class
        from tinygrad import Device, Tensor
        assert isinstance(NIRRenderer, type) and not isinstance(object(), NIRRenderer)
        try:
            graph_rewrite(None, None)
        except standins.StandInUsed as e:
            print("used:", e)
        assert Ops.ADD is not Ops.CUSTOM_FUNCTION  # tinygrad's helpers test ops by identity
        try:
            hash(Ops.CUSTOM_FUNCTION) and Ops.CUSTOM_FUNCTION == Ops.ADD
        except standins.StandInUsed:
            print("member raises")
        try:
            from tinygrad.helpers import no_such_public_name
        except ImportError:
            print("public stays missing")
        try:
            bool(__import__("tinygrad.codegen", fromlist=["x"]).to_program)
        except standins.StandInUsed:
            print("truth raises")
        print((Tensor([1, 2]) + 1).tolist())
    """)
    assert out.returncode == 0, out.stderr
    assert "used: tinygrad.uop.ops.graph_rewrite is a tinygrad internal" in out.stdout
    assert "member raises" in out.stdout
    assert "public stays missing" in out.stdout and "truth raises" in out.stdout and "[2, 3]" in out.stdout


def test_every_listed_name_has_a_reason() -> None:
    sys.path.insert(0, str(TOOLS))
    try:
        import internals
    finally:
        sys.path.remove(str(TOOLS))
    assert all(reason.strip() for reason in internals.MODULES.values())
    assert all(reason.strip() for names in internals.NAMES.values() for reason in names.values())
    assert internals.is_internal("tinygrad.codegen.late.linearizer")
    assert internals.is_internal("tinygrad.helpers", "Target") and not internals.is_internal("tinygrad.helpers", "DEV")
    assert not internals.is_internal("tinygrad.codegenx")


def test_the_runner_reads_junit_and_copies_no_tinygrad_package(tmp_path: Path) -> None:
    sys.path.insert(0, str(TOOLS))
    try:
        import run
    finally:
        sys.path.remove(str(TOOLS))
    checkout = tmp_path / "checkout"
    for rel in ("tinygrad/__init__.py", "test/backend/test_x.py", "extra/models/m.py", "conftest.py"):
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / rel).write_text("")
    ws = run.workspace(checkout, tmp_path / "ws")
    assert (ws / "test" / "backend" / "test_x.py").exists() and (ws / "extra" / "models" / "m.py").exists()
    assert not (ws / "tinygrad").exists()
    report = tmp_path / "r.xml"
    report.write_text("""<testsuites><testsuite>
      <testcase classname="a.T" name="ok"/>
      <testcase classname="a.T" name="bad"><failure message="x"/></testcase>
      <testcase classname="a.T" name="err"><error message="x"/></testcase>
      <testcase classname="a.T" name="skip"><skipped message="x"/></testcase>
    </testsuite></testsuites>""")
    got = run.read_junit(report)
    assert (got.passed, got.failed, got.errors, got.skipped) == (["a.T::ok"], ["a.T::bad"], ["a.T::err"],
                                                                ["a.T::skip"])
    assert got.cell() == "1 / 1 / 1 / 1"


def test_the_examples_runner_compares_nans_and_reads_a_drivers_summing(tmp_path: Path) -> None:
    sys.path.insert(0, str(TOOLS))
    try:
        import numpy as np
        import run_examples
    finally:
        sys.path.remove(str(TOOLS))
    nan = float("nan")
    same = {"acc": np.array(nan), "w": np.array([1.0, 2.0])}
    assert run_examples.compare(same, dict(same), 1e-3, 1e-3).startswith("ok")  # NaN on both sides: the same
    assert run_examples.compare({"acc": np.array(1.0), "w": same["w"]}, same, 1e-3, 1e-3).startswith("DIFF")
    assert run_examples.compare({"acc": np.array(nan), "w": np.array([1.0, 2.1])}, same, 1e-3, 1e-3).startswith("DIFF")
    driver = tmp_path / "d.py"
    driver.write_text("SEQUENTIAL_SUMS = True\nRTOL, ATOL = 1e-3, 2e-3\n")
    assert run_examples.driver_constants(driver) == {"RTOL": 1e-3, "ATOL": 2e-3, "SEQUENTIAL_SUMS": 1.0}
    assert run_examples.tolerance(driver) == (1e-3, 2e-3)
    (tmp_path / "e.py").write_text("x = 1\n")
    assert run_examples.driver_constants(tmp_path / "e.py")["SEQUENTIAL_SUMS"] == 0.0
    assert run_examples.SEQUENTIAL_ENV == {"NOOPT": "1", "SPLIT_REDUCE": "0"}
