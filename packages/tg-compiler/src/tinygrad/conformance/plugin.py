"""The pytest plugin of the conformance kit (registered through the `pytest11` entry point of tg-compiler).

    pytest --pyargs tinygrad.conformance --tg-device=CL [--tg-quick] [--tg-report=report.json]
    pytest --pyargs tinygrad.conformance --tg-device=CUDA --tg-compile-only --tg-target=sm_90

It adds the `--tg-*` options, the session fixtures the kit's tests use (`tg_device`, `tg_claims`,
`tg_size_limit`), the device's claims in the run's header and a per-group report at its end.

With `--tg-compile-only`, the device named by `--tg-device` is replaced in every process of the run by a stand-in
(`tinygrad.conformance.standin`) made of the backend's renderer and compiler for `--tg-target`, which its
`tinygrad_compile_only` hook supplies (`tinygrad.conformance.compile_only`): every kernel is rendered and compiled,
none runs, checks that would read a result skip with that reason, and the end of the run counts the kernels and
lists each one that failed to compile. Any suite works that way (the op table: `DEV=CUDA pytest
packages/tg-core/tests/test_ops.py --tg-device=CUDA --tg-compile-only --tg-target=sm_90`).

Being installed must not change other test runs: its fixtures are only used by the kit's own modules, and those
modules are collected only when asked for - by `--tg-device`, by `--pyargs tinygrad.conformance`, or by a path
inside the kit's folder - so `pytest packages/` in a checkout does not pick them up.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from tinygrad.conformance.claims import DeviceClaims, gather_claims
from tinygrad.conformance.report import CASE_KEY, COMPILE_KEY, GROUP_KEY, CompileOnlyRun, KitReport

if TYPE_CHECKING:
    from tinygrad.conformance.compile_only import CompileOnlyBackend

KIT_DIR = Path(__file__).resolve().parent
KIT_MODULE = "tinygrad.conformance"
NO_DEVICE_REASON = ("no device to check: pass --tg-device=NAME (`python -m tinygrad.device` lists the devices "
                    "installed here)")
#: with --tg-quick, checks on more elements than this are skipped (a slow device, an interpreter like PYREF)
QUICK_SIZE_LIMIT = 70_000
#: kit modules collected only in compile-only mode
COMPILE_ONLY_MODULES = ("test_expressions.py",)


class KitSession:
    """One pytest run's kit state: the device, its claims once opened, and the outcomes for the report.

    Registered as a plugin object in `pytest_configure`, so its hooks see the state without globals."""

    def __init__(self, device: str | None, quick: bool, compile_only: CompileOnlyRun | None = None):
        self.report = KitReport(device, compile_only=compile_only)
        self.quick = quick
        self.opened = False
        self.open_error: str | None = None

    def open(self) -> KitSession:
        """Open the device once per process and read its claims (or why it is unavailable)."""
        report = self.report
        if self.opened or report.device is None:
            return self
        self.opened = True
        from tinygrad.device import Device

        reason = Device.availability(report.device.split(":")[0])
        if reason is not None:
            report.unavailable = f"unavailable here: {reason}"
            return self
        try:
            report.claims = gather_claims(report.device)
        except Exception as e:  # a device that cannot be opened fails every check, with this reason
            self.open_error = report.unavailable = f"opening it failed: {type(e).__name__}: {e}"
        return self

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item,
                                  call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report: pytest.TestReport = yield
        if self.report.compile_only is not None:
            from tinygrad.conformance import standin

            records = standin.drain()  # what this test phase compiled, carried to the controller on the report
            if records:
                text = standin.encode([replace(r, test=item.nodeid) for r in records])
                report.user_properties = [*report.user_properties, (COMPILE_KEY, text)]
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.report.record(report)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        run = self.report.compile_only
        if run is None:
            return
        from tinygrad.conformance import standin

        run.outcomes.add(standin.drain())  # kernels built outside a test (without xdist, this process)
        if run.outcomes.failed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # a kernel that failed to compile fails the run

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
        if not self.report.groups and self.report.device is None:
            return  # the kit was neither asked for nor run
        report = self.open().report
        mode = f" (compile-only, target {report.compile_only.target})" if report.compile_only is not None else ""
        terminalreporter.section(f"tinygrad conformance: {report.device or 'no device'}{mode}", sep="=")
        for line in report.lines():
            terminalreporter.write_line(line)
        if path := config.getoption("tg_report"):
            report.write_json(Path(path))
            terminalreporter.write_line(f"report written to {path}")


_SESSION = pytest.StashKey[KitSession]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tinygrad-conformance", "tinygrad backend conformance kit (tinygrad.conformance)")
    group.addoption("--tg-device", metavar="NAME", default=None,
                    help="the device the conformance kit checks, as DEV would name it (CPU, CL, PYREF, ...)")
    group.addoption("--tg-quick", action="store_true", default=False,
                    help=f"skip the kit's checks on more than {QUICK_SIZE_LIMIT} elements (for slow devices)")
    group.addoption("--tg-report", metavar="PATH", default=None,
                    help="also write the conformance report (claims, outcomes per group) as JSON to PATH")
    group.addoption("--tg-compile-only", action="store_true", default=False,
                    help="the device is absent: render and compile every kernel for --tg-target with the backend's "
                         "compiler, run none (checks that read results skip), report what failed to compile")
    group.addoption("--tg-target", metavar="TARGET", default=None,
                    help="the target --tg-compile-only compiles for, as the backend names it (sm_90, gfx942, ...)")


def _compile_only_backend(device: str, target: str | None) -> tuple[str, CompileOnlyBackend, str]:
    """The backend's compile-only support and the checked target, or a usage error that says what is valid."""
    from tinygrad.conformance.compile_only import compile_only_backends, describe_missing, valid_targets

    name = device.split(":")[0].upper()
    backend = compile_only_backends().get(name)
    if backend is None:
        raise pytest.UsageError(f"--tg-compile-only --tg-device={device}: {describe_missing(name)}")
    try:
        targets = valid_targets(backend)
    except Exception as e:
        raise pytest.UsageError(f"--tg-compile-only: backend {name} could not list its targets: "
                                f"{type(e).__name__}: {e}") from None
    if not target:
        raise pytest.UsageError(f"--tg-compile-only needs --tg-target=TARGET, the target to compile for; {name} "
                                f"compiles for: {', '.join(targets)}")
    if target not in targets:
        raise pytest.UsageError(f"--tg-target={target}: not a target of {name}'s compiler; valid targets: "
                                f"{', '.join(targets)}")
    return name, backend, target


def pytest_configure(config: pytest.Config) -> None:
    device = config.getoption("tg_device")
    compile_only: CompileOnlyRun | None = None
    if config.getoption("tg_target") and not config.getoption("tg_compile_only"):
        raise pytest.UsageError(f"--tg-target={config.getoption('tg_target')} is the target of --tg-compile-only; "
                                f"add --tg-compile-only (a device that is present is checked as it is)")
    if config.getoption("tg_compile_only"):
        if not device:
            raise pytest.UsageError("--tg-compile-only needs --tg-device=NAME, the backend to compile for "
                                    "(CUDA, AMD, ...)")
        from tinygrad.conformance import standin

        name, backend, target = _compile_only_backend(device, config.getoption("tg_target"))
        standin.install_standin(name, backend, target)  # in every process: xdist workers configure too
        compile_only = CompileOnlyRun(target, backend.description, standin.CompileOutcomes(target))
    if device:
        from tinygrad.device import Device, UnknownDeviceError

        try:
            device = Device.canonicalize(device)
        except UnknownDeviceError as e:
            raise pytest.UsageError(f"--tg-device={config.getoption('tg_device')}: {e}") from None
    session = KitSession(device or None, quick=bool(config.getoption("tg_quick")), compile_only=compile_only)
    config.stash[_SESSION] = session
    config.pluginmanager.register(session, "tinygrad-conformance-session")


def _inside_kit(path: Path) -> bool:
    resolved = path.resolve()
    return resolved == KIT_DIR or KIT_DIR in resolved.parents


def _kit_requested(config: pytest.Config) -> bool:
    if config.getoption("tg_device"):
        return True
    for arg in config.args:
        target = str(arg).split("::")[0]
        if target == KIT_MODULE or target.startswith(KIT_MODULE + "."):
            return True
        with contextlib.suppress(OSError, ValueError):
            if _inside_kit(config.invocation_params.dir / target):
                return True
    return False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if _inside_kit(collection_path) and not _kit_requested(config):
        return True
    if collection_path.name in COMPILE_ONLY_MODULES and _inside_kit(collection_path):
        session = config.stash.get(_SESSION, None)
        if session is None or session.report.compile_only is None:
            return True  # the expression table only builds kernels: it belongs to compile-only runs
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    device = config.stash[_SESSION].report.device
    for item in items:
        if not _inside_kit(Path(item.path)):
            continue
        group = Path(item.path).stem.removeprefix("test_")
        # the case names the check and its parameters: "alu[ADD-float32]", "tensor_to_cpu[7-to-cpu]"
        item.user_properties += [(GROUP_KEY, group), (CASE_KEY, item.name.removeprefix("test_"))]
        if device is None:
            item.add_marker(pytest.mark.skip(reason=NO_DEVICE_REASON))


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    session = config.stash.get(_SESSION, None)
    if session is None or session.report.device is None:
        return None
    report = session.open().report
    lines = report.claims.lines() if report.claims is not None else [f"device {report.device}: {report.unavailable}"]
    return ["tinygrad conformance kit:", *(f"  {line}" for line in lines + report.compile_only_lines())]


# ---- fixtures for the kit's tests ----

@pytest.fixture(scope="session")
def tg_device(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The canonical name of the device under test, opened; a skip (or error) says why there is none."""
    session = request.config.stash[_SESSION].open()
    report = session.report
    if report.device is None:
        pytest.skip(NO_DEVICE_REASON)
    if session.open_error is not None:
        raise RuntimeError(f"device {report.device}: {session.open_error}")
    if report.claims is None:
        pytest.skip(f"device {report.device} is {report.unavailable}")
    # a private compile cache: every kernel of the run goes through the backend's compiler
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TINYGRAD_CACHE_DIR", str(tmp_path_factory.mktemp("tg-conformance-cache")))
        yield report.device


@pytest.fixture(scope="session")
def tg_claims(request: pytest.FixtureRequest, tg_device: str) -> DeviceClaims:
    """The `DeviceClaims` of the device under test."""
    claims = request.config.stash[_SESSION].open().report.claims
    assert claims is not None  # tg_device skipped otherwise
    return claims


@pytest.fixture(scope="session")
def tg_size_limit(request: pytest.FixtureRequest) -> int | None:
    """The largest element count a check may use (None: no limit); checks above it skip and say so."""
    return QUICK_SIZE_LIMIT if request.config.stash[_SESSION].quick else None


@pytest.fixture(scope="session")
def tg_compile_only(request: pytest.FixtureRequest) -> CompileOnlyRun | None:
    """The compile-only run (its target), or None when the device itself is checked."""
    return request.config.stash[_SESSION].report.compile_only


def claims_at_collection(config: pytest.Config) -> DeviceClaims | None:
    """The device's claims while tests are generated (None: no device, or it cannot be opened here), for checks
    whose cases depend on them."""
    session = config.stash.get(_SESSION, None)
    return session.open().report.claims if session is not None else None
