"""The backend conformance kit, run the way a third party runs it: in a clean venv, from a folder that has no
conftest, as `python -m pytest --pyargs tinygrad.conformance --tg-device=NAME`.

* On PYREF (the sample out-of-tree backend) the kit must pass, apart from the bugs pinned in KNOWN_FAILURES.
* On BADREF, a generated plugin package that is PYREF with a wrong MAX and without float64, the kit must fail
  exactly where the backend is wrong and skip what it does not claim: a kit that cannot fail checks nothing.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
from clean_venvs import Venv, tail

KIT = ("-m", "pytest", "-p", "no:cacheprovider", "-q", "--pyargs", "tinygrad.conformance")
KIT_TIMEOUT = 900

#: kit cases that fail on PYREF because of a bug elsewhere; the test fails while an entry is stale (fix the bug,
#: then delete the entry). Keys are the report's case names, "group/case".
KNOWN_FAILURES: dict[str, str] = {}  # kit case id -> why it fails; empty: PYREF passes everything


@pytest.fixture(scope="module")
def kit_tools(tmp_path_factory: pytest.TempPathFactory, clean_venv: Venv, wheelhouse: Path) -> Path:
    """pytest and pytest-xdist in a side folder the kit's runs put on PYTHONPATH (the clean venv has no pytest)."""
    target = tmp_path_factory.mktemp("kit-tools")
    clean_venv.check_pip("install", "--no-index", "--find-links", wheelhouse, "--target", target, "pytest",
                         "pytest-xdist", what="installing pytest for the conformance kit")
    return target


def _run_kit(venv: Venv, device: str, workdir: Path, *extra: str, path: list[Path]) -> tuple[int, str, dict]:
    """Run the kit on `device` from `workdir`; returns (exit code, output, the JSON report)."""
    workdir.mkdir(parents=True, exist_ok=True)
    report = workdir / "report.json"
    proc = venv.run(*KIT, f"--tg-device={device}", f"--tg-report={report}", *extra, path=path, cwd=workdir,
                    timeout=KIT_TIMEOUT)
    out = proc.stdout + proc.stderr
    assert report.exists(), f"the kit wrote no report (exit {proc.returncode}):\n{tail(out, 40)}"
    return proc.returncode, out, json.loads(report.read_text())


def _failures(report: dict) -> set[str]:
    return {f"{group}/{case}" for group, g in report["groups"].items() for case in g["failed"]}


def test_kit_passes_on_pyref(clean_venv: Venv, kit_tools: Path, tmp_path: Path) -> None:
    code, out, report = _run_kit(clean_venv, "PYREF", tmp_path / "anywhere", "--tg-quick", "-n", "2",
                                 path=[kit_tools])
    claims = report["claims"]
    assert (claims["device"], claims["package"], claims["contract_version"]) == \
        ("PYREF", "tg-backend-pyref", "2.0"), claims
    groups = report["groups"]
    assert {"alu", "cast", "bitcast", "reduce", "launch", "copy", "dtypes"} <= set(groups), groups
    assert all(groups[g]["passed"] > 0 for g in ("alu", "cast", "bitcast", "reduce", "launch", "copy")), groups
    failed = _failures(report)
    unexpected = sorted(failed - set(KNOWN_FAILURES))
    stale = sorted(set(KNOWN_FAILURES) - failed)
    assert not unexpected, f"the conformance kit fails on PYREF:\n{unexpected}\n{tail(out, 60)}"
    assert not stale, f"these now pass on PYREF: delete them from KNOWN_FAILURES: {stale}"
    assert (code == 0) == (not failed), f"exit {code} with failures {sorted(failed)}"
    # the end-of-run report is printed too, with the claims and a line per group
    assert "tinygrad conformance: PYREF" in out and re.search(r"^alu\s+\d+ passed", out, re.M), tail(out, 40)


BADREF_SOURCE = '''\
from tinygrad.device import BackendInfo, hookimpl


def _open(index):
    from tinygrad.dtype import dtypes
    from tg_backend_pyref.device import PyRefDevice
    from tg_backend_pyref.renderer import PyRefRenderer

    class WrongMaxRenderer(PyRefRenderer):
        """PYREF's renderer with two deliberate faults: MAX is written as ADD, and float64 is not claimed."""

        device = "BADREF"
        supported_dtypes = frozenset(d for d in dtypes.all() if d != dtypes.float64)

        def render(self, name, program):
            return super().render(name, program).replace('"op": "MAX"', '"op": "ADD"')

    dev = PyRefDevice(index)
    dev.name, dev.renderer = "BADREF", WrongMaxRenderer()
    return dev


@hookimpl
def tinygrad_backends():
    return [BackendInfo(name="BADREF", contract_version="2.0", open=_open, priority=20000)]
'''


@pytest.fixture(scope="module")
def badref_plugin(tmp_path_factory: pytest.TempPathFactory, clean_venv: Venv, wheelhouse: Path) -> Path:
    """A folder holding the pip-installed tg-backend-badref package."""
    return _generated_plugin(tmp_path_factory, clean_venv, wheelhouse, "badref", BADREF_SOURCE)


def _generated_plugin(tmp_path_factory: pytest.TempPathFactory, clean_venv: Venv, wheelhouse: Path, name: str,
                      source: str) -> Path:
    """Build and pip-install (into a side folder, returned) a one-module plugin package tg-backend-`name`."""
    root = tmp_path_factory.mktemp(name)
    pkg = root / "src" / f"tg-backend-{name}"
    (pkg / "src" / f"tg_backend_{name}").mkdir(parents=True)
    (pkg / "src" / f"tg_backend_{name}" / "__init__.py").write_text(source)
    (pkg / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [build-system]
        requires = ["hatchling==1.27.0"]
        build-backend = "hatchling.build"

        [project]
        name = "tg-backend-{name}"
        version = "0.0.1"
        requires-python = ">=3.11"

        [project.entry-points."tinygrad.backends"]
        {name} = "tg_backend_{name}"

        [tool.hatch.build.targets.wheel]
        packages = ["src/tg_backend_{name}"]
        """))
    target = root / "site"
    clean_venv.install_target(target, pkg, wheelhouse=wheelhouse)
    return target


def test_kit_fails_where_a_backend_is_wrong(clean_venv: Venv, kit_tools: Path, badref_plugin: Path,
                                            tmp_path: Path) -> None:
    code, out, report = _run_kit(clean_venv, "BADREF", tmp_path / "anywhere", "--tg-quick", "-k",
                                 "alu or dtypes or test_max", path=[kit_tools, badref_plugin])
    assert code == 1, f"the kit must fail on a wrong MAX (exit {code}):\n{tail(out, 40)}"
    failed = _failures(report)
    wrong_max = {f"alu/alu[MAX-{d}]" for d in ("int8", "int32", "uint64", "float16", "bfloat16", "float32")}
    assert wrong_max <= failed, sorted(failed)
    assert any(f.startswith("reduce/max[") for f in failed), sorted(failed)  # a max reduction is wrong too
    assert not [f for f in failed if "MAX" not in f and "max" not in f], sorted(failed)
    # what it does not claim is skipped with the reason, and refused with a clear error
    assert "float64" not in report["claims"]["dtypes"], report["claims"]
    skipped = report["groups"]["alu"]["skipped"]
    assert skipped.get("device BADREF does not claim float64", 0) >= 10, skipped
    assert report["groups"]["dtypes"]["failed"] == [] and report["groups"]["dtypes"]["passed"] >= 2, report
    assert "=> BADREF FAILS the conformance kit" in out, tail(out, 30)


MINREF_SOURCE = '''\
from tinygrad.device import BackendInfo, hookimpl


def _open(index):
    from tg_backend_pyref.device import PyRefDevice
    from tg_backend_pyref.renderer import PyRefRenderer
    from tinygrad.conformance.minimal import MINIMAL_OPS
    from tinygrad.uop.ops import GroupOp

    class MinimalRenderer(PyRefRenderer):
        """PYREF's renderer declaring only the minimal ALU ops: the compiler's decomposition makes the rest."""

        device = "MINREF"
        supported_ops = MINIMAL_OPS

        def render(self, name, program):
            left = sorted({u.op.name for u in program if u.op in GroupOp.ALU and u.op not in MINIMAL_OPS})
            if left:
                raise RuntimeError(f"the decomposition left ops MINREF does not declare: {left}")
            return super().render(name, program)

    dev = PyRefDevice(index)
    dev.name, dev.renderer = "MINREF", MinimalRenderer()
    return dev


@hookimpl
def tinygrad_backends():
    return [BackendInfo(name="MINREF", contract_version="2.0", open=_open, priority=20000)]
'''

#: kit cases MINREF fails because a decomposition is not exact; keys as in KNOWN_FAILURES
MINREF_KNOWN_FAILURES: dict[str, str] = {}


@pytest.fixture(scope="module")
def minref_plugin(tmp_path_factory: pytest.TempPathFactory, clean_venv: Venv, wheelhouse: Path) -> Path:
    """A folder holding the pip-installed tg-backend-minref package: PYREF declaring only the minimal op set."""
    return _generated_plugin(tmp_path_factory, clean_venv, wheelhouse, "minref", MINREF_SOURCE)


def test_kit_passes_through_the_decomposition(clean_venv: Venv, kit_tools: Path, minref_plugin: Path,
                                              tmp_path: Path) -> None:
    """A renderer that writes only the minimal ops passes the kit: every other op is decomposed into those."""
    _, out, report = _run_kit(clean_venv, "MINREF", tmp_path / "anywhere", "--tg-quick", "-n", "2",
                              path=[kit_tools, minref_plugin])
    groups = report["groups"]
    assert all(groups[g]["passed"] > 0 for g in ("alu", "cast", "bitcast", "reduce", "launch", "copy")), groups
    assert report["claims"]["unclaimed"] == [], report["claims"]  # every dtype, as PYREF
    failed = _failures(report)
    unexpected = sorted(failed - set(MINREF_KNOWN_FAILURES))
    stale = sorted(set(MINREF_KNOWN_FAILURES) - failed)
    assert not unexpected, f"the conformance kit fails through the decomposition:\n{unexpected}\n{tail(out, 60)}"
    assert not stale, f"these now pass on MINREF: delete them from MINREF_KNOWN_FAILURES: {stale}"


def test_kit_without_a_device_skips_and_says_why(clean_venv: Venv, kit_tools: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "anywhere"
    workdir.mkdir()
    proc = clean_venv.run(*KIT, "-rs", "-k", "alu and ADD", path=[kit_tools], cwd=workdir, timeout=KIT_TIMEOUT)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, tail(out, 30)
    assert re.search(r"^\d+ skipped, \d+ deselected in", out, re.M), tail(out, 30)  # and nothing passed or failed
    assert "=> nothing was checked: no --tg-device was given" in out, tail(out, 30)
    assert "no device to check: pass --tg-device=NAME" in out, tail(out, 30)


# ---- the kit's comparison, directly (no device): what it accepts and what it rejects ----

def test_comparison_is_exact_by_default_and_ulp_aware_where_allowed() -> None:
    import numpy as np
    from tinygrad.conformance.compare import mismatches
    from tinygrad.dtype import dtypes

    f32 = dtypes.float32
    want = [1.0, -0.0, float("nan"), float("inf"), 3.0e38, 2.0**-149]
    exact = np.array(want, dtype=np.float32)
    assert not mismatches(exact, want, f32).any()  # NaN matches NaN; everything else bit for bit
    three_ulps = np.nextafter(np.nextafter(np.nextafter(exact, np.float32(np.inf)), np.float32(np.inf)),
                              np.float32(np.inf))
    assert mismatches(three_ulps[:1], want[:1], f32).all()  # exact ops reject 3 ulp
    assert not mismatches(three_ulps[:1], want[:1], f32, ulps=4).any()  # transcendental ones accept it
    assert mismatches(np.array([0.0], dtype=np.float32), [-0.0], f32).all()  # the sign of zero counts
    assert mismatches(np.array([0.0], dtype=np.float32), [-0.0], f32, ulps=4).all()  # even with a tolerance
    finite_max = np.array([np.finfo(np.float32).max], dtype=np.float32)
    assert mismatches(finite_max, [float("inf")], f32, ulps=4).all()  # inf must be inf, not one ulp below
    bf16_bits = np.array([0x3F80, 0x7FC0], dtype=np.uint16)  # bfloat16 1.0 and NaN as raw bits
    assert not mismatches(bf16_bits, [1.0, float("nan")], dtypes.bfloat16).any()


def test_flush_to_zero_is_accepted_only_as_declared() -> None:
    import numpy as np
    from tinygrad.conformance.compare import assert_matches
    from tinygrad.conformance.values import edge_values, flush_subnormal, is_subnormal
    from tinygrad.dtype import dtypes

    f32 = dtypes.float32
    subnormals = [v for v in edge_values(f32) if is_subnormal(v, f32)]
    assert subnormals, "the edge values must include float32 subnormals"
    flushed = np.array([flush_subnormal(v, f32) for v in subnormals], dtype=np.float32)
    with pytest.raises(pytest.fail.Exception, match="differ from the reference"):
        assert_matches(flushed, subnormals, f32, lambda i: f"value {i}")
    assert_matches(flushed, subnormals, f32, lambda i: f"value {i}",
                   also_accept=[[flush_subnormal(v, f32) for v in subnormals]])
