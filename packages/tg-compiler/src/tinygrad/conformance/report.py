"""The end-of-run report: what the device claims, and passed/failed/skipped per group of checks.

Test outcomes arrive as pytest reports (from xdist workers too); each kit test carries its group ("alu",
"cast", ...) and case ("ADD-float32") in `user_properties`, set at collection. In compile-only mode every test's
reports also carry the kernels it built (`COMPILE_KEY`), which `CompileOnlyRun.outcomes` gathers.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from tinygrad.conformance.claims import DeviceClaims
from tinygrad.helpers import atomic_write

if TYPE_CHECKING:  # the stand-in imports the compiler: only compile-only runs load it
    from tinygrad.conformance.standin import CompileOutcomes

GROUP_KEY, CASE_KEY = "tg_group", "tg_case"
#: a report's user property holding the kernels a test built on the compile-only stand-in (JSON)
COMPILE_KEY = "tg_compiled"
#: failed cases listed per group before "... and N more"
SHOWN_FAILURES = 40


@dataclass
class GroupOutcomes:
    passed: int = 0
    failed: list[str] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)  # reason -> count


@dataclass
class CompileOnlyRun:
    """A run with --tg-compile-only: the target, what compiling means for the backend, and the kernels built."""

    target: str
    description: str
    outcomes: CompileOutcomes


@dataclass
class KitReport:
    device: str | None
    claims: DeviceClaims | None = None
    unavailable: str | None = None  # why the device could not be opened
    groups: dict[str, GroupOutcomes] = field(default_factory=lambda: defaultdict(GroupOutcomes))
    compile_only: CompileOnlyRun | None = None

    def record(self, report: pytest.TestReport) -> None:
        if self.compile_only is not None:
            from tinygrad.conformance.standin import decode

            for key, value in report.user_properties:
                if key == COMPILE_KEY:
                    self.compile_only.outcomes.add(decode(str(value)))
        props = dict(report.user_properties)
        group, case = props.get(GROUP_KEY), props.get(CASE_KEY)
        if group is None:
            return  # not a kit test
        outcome = self.groups[str(group)]
        if report.skipped and report.when in ("setup", "call"):
            outcome.skipped[_skip_reason(report)] += 1
        elif report.failed:
            label = f"{case}" if report.when == "call" else f"{case} ({report.when})"
            if label not in outcome.failed:
                outcome.failed.append(label)
        elif report.passed and report.when == "call":
            outcome.passed += 1

    def compile_only_lines(self) -> list[str]:
        """What compile-only mode means for this run (for the header and the report)."""
        run = self.compile_only
        if run is None:
            return []
        how = f": {run.description}" if run.description else ""
        return [f"compile-only: {self.device} is absent; kernels are built for target {run.target}{how}; none runs, "
                f"and checks that would read a result skip"]

    def lines(self) -> list[str]:
        out: list[str] = []
        if self.claims is not None:
            out += self.claims.lines()
        elif self.unavailable:
            out.append(f"device {self.device} could not be checked: {self.unavailable}")
        out += self.compile_only_lines()
        run = self.compile_only
        compiled = [run.outcomes.summary(str(self.device)), *run.outcomes.failure_lines()] \
            if run is not None and self.claims is not None else []
        if not self.groups:
            if run is None:
                out.append("no conformance checks ran")
                return out
            return out + compiled + ([self._compile_only_verdict(0)] if compiled else [])
        width = max(len(g) for g in self.groups)
        total = GroupOutcomes()
        for name in sorted(self.groups):
            g = self.groups[name]
            out.append(f"{name:<{width}}  {g.passed:5d} passed {len(g.failed):5d} failed "
                       f"{sum(g.skipped.values()):5d} skipped")
            total.passed += g.passed
            total.failed += g.failed
            total.skipped.update(g.skipped)
        out.append(f"{'total':<{width}}  {total.passed:5d} passed {len(total.failed):5d} failed "
                   f"{sum(total.skipped.values()):5d} skipped")
        for name in sorted(self.groups):
            failed = self.groups[name].failed
            if failed:
                more = f" ... and {len(failed) - SHOWN_FAILURES} more" if len(failed) > SHOWN_FAILURES else ""
                out.append(f"FAILED {name}: {', '.join(failed[:SHOWN_FAILURES])}{more}")
        reasons: Counter[str] = Counter()
        for g in self.groups.values():
            reasons.update(g.skipped)
        for reason, count in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
            out.append(f"skipped {count}x: {reason}")
        out += compiled
        if run is not None:
            out.append(self._compile_only_verdict(len(total.failed)))
        elif total.failed:
            out.append(f"=> {self.device} FAILS the conformance kit")
        elif total.passed:
            out.append(f"=> {self.device} passes the conformance kit (read the skips: they were not checked)")
        elif self.device is None:
            out.append("=> nothing was checked: no --tg-device was given")
        else:
            out.append(f"=> nothing was checked on {self.device}")
        return out

    def _compile_only_verdict(self, failed_tests: int) -> str:
        run = self.compile_only
        assert run is not None
        target = f"{self.device} ({run.target})"
        if run.outcomes.failed or failed_tests:
            why = f"{run.outcomes.failed} kernels failed to compile or render" if run.outcomes.failed else \
                f"{failed_tests} checks failed"
            return f"=> {target} FAILS in compile-only mode: {why}"
        if run.outcomes.compiled:
            return (f"=> every kernel built for {target} rendered and compiled ({len(run.outcomes.compiled)} "
                    f"kernels); compile-only: no result was checked")
        return f"=> nothing was compiled for {target}"

    def as_json(self) -> dict[str, Any]:
        out = {"device": self.device, "unavailable": self.unavailable,
               "claims": self.claims.as_json() if self.claims is not None else None,
               "groups": {name: {"passed": g.passed, "failed": g.failed, "skipped": dict(g.skipped)}
                          for name, g in sorted(self.groups.items())}}
        if self.compile_only is not None:
            out["compile_only"] = {"description": self.compile_only.description,
                                   **self.compile_only.outcomes.as_json()}
        return out

    def write_json(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(path, "w") as f:
            f.write(json.dumps(self.as_json(), indent=1) + "\n")


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (file, line, "Skipped: reason")
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)
