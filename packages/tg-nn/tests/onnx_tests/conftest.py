"""Counts of the ONNX node suite (test_node_suite.py), printed at the end of the session and kept in pytest's
cache (`pytest --cache-show 'onnx/*'`): passed, failed, skipped by reason (unsupported op, device dtype), xfailed,
out of all cases. Under pytest-xdist the controller receives every worker's reports, but it only loads this file
when this folder (or a file in it) is on the command line: `pytest -n 2 packages/tg-nn/tests/onnx_tests`."""

from __future__ import annotations

import collections
import sys
from pathlib import Path
from typing import Any

import pytest

_MARK = "test_node_suite.py::test_node["
_counts: collections.Counter[str] = collections.Counter()
_unsupported_ops: collections.Counter[str] = collections.Counter()


def pytest_plugin_registered(plugin: Any, manager: Any) -> None:
    # The tg-nn tests import helpers with `from conftest import close`, meaning tests/conftest.py. pytest imports
    # every conftest.py as the module `conftest`, and this folder is collected before their files (it sorts
    # first), so after this file is imported that name would mean this module and their import would fail. Point
    # the name back at the parent folder's conftest once pytest has registered this one.
    if getattr(plugin, "__file__", None) != __file__:
        return
    parent = Path(__file__).resolve().parent.parent / "conftest.py"
    for p in manager.get_plugins():
        if getattr(p, "__file__", None) and Path(p.__file__).resolve() == parent:
            sys.modules["conftest"] = p
            return


def pytest_runtest_logreport(report: Any) -> None:
    if _MARK not in report.nodeid:
        return
    if report.when == "call" and report.passed:
        _counts["passed"] += 1
    elif report.failed and report.when in ("setup", "call"):
        _counts["failed"] += 1
    elif report.skipped and report.when in ("setup", "call"):
        if hasattr(report, "wasxfail"):
            _counts["xfailed"] += 1
            return
        reason = str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
        if "unsupported" in reason:
            _counts["skipped (unsupported)"] += 1
            op = reason.split("ONNX op ", 1)[1].split(" ", 1)[0] if "ONNX op " in reason else "other"
            _unsupported_ops[op] += 1
        elif "device dtype" in reason:
            _counts["skipped (device dtype)"] += 1
        else:
            _counts["skipped (other)"] += 1


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    total = sum(_counts.values())
    if not total:
        return
    parts = ", ".join(f"{v} {k}" for k, v in sorted(_counts.items()))
    pct = 100.0 * _counts["passed"] / total
    terminalreporter.write_sep("-", "ONNX node suite")
    terminalreporter.write_line(f"{parts} of {total} cases: {pct:.1f}% pass")
    if _unsupported_ops:
        ops = ", ".join(f"{op} {n}" for op, n in _unsupported_ops.most_common())
        terminalreporter.write_line(f"unsupported ops (cases): {ops}")
    if getattr(config, "cache", None) is not None:
        config.cache.set("onnx/node_suite", {**_counts, "total": total})
