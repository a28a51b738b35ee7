"""The pytest plugin of the conformance kit (registered through the `pytest11` entry point of tg-compiler).

    pytest --pyargs tinygrad.conformance --tg-device=CL [--tg-quick] [--tg-report=report.json]

It adds the `--tg-*` options, the session fixtures the kit's tests use (`tg_device`, `tg_claims`,
`tg_size_limit`), the device's claims in the run's header and a per-group report at its end.

Being installed must not change other test runs: its fixtures are only used by the kit's own modules, and those
modules are collected only when asked for - by `--tg-device`, by `--pyargs tinygrad.conformance`, or by a path
inside the kit's folder - so `pytest packages/` in a checkout does not pick them up.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from tinygrad.conformance.claims import DeviceClaims, gather_claims
from tinygrad.conformance.report import CASE_KEY, GROUP_KEY, KitReport

KIT_DIR = Path(__file__).resolve().parent
KIT_MODULE = "tinygrad.conformance"
NO_DEVICE_REASON = ("no device to check: pass --tg-device=NAME (`python -m tinygrad.device` lists the devices "
                    "installed here)")
#: with --tg-quick, checks on more elements than this are skipped (a slow device, an interpreter like PYREF)
QUICK_SIZE_LIMIT = 70_000


class KitSession:
    """One pytest run's kit state: the device, its claims once opened, and the outcomes for the report.

    Registered as a plugin object in `pytest_configure`, so its hooks see the state without globals."""

    def __init__(self, device: str | None, quick: bool):
        self.report = KitReport(device)
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

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.report.record(report)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
        if not self.report.groups and self.report.device is None:
            return  # the kit was neither asked for nor run
        report = self.open().report
        terminalreporter.section(f"tinygrad conformance: {report.device or 'no device'}", sep="=")
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


def pytest_configure(config: pytest.Config) -> None:
    device = config.getoption("tg_device")
    if device:
        from tinygrad.device import Device, UnknownDeviceError

        try:
            device = Device.canonicalize(device)
        except UnknownDeviceError as e:
            raise pytest.UsageError(f"--tg-device={config.getoption('tg_device')}: {e}") from None
    session = KitSession(device or None, quick=bool(config.getoption("tg_quick")))
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
    return ["tinygrad conformance kit:", *(f"  {line}" for line in lines)]


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



def claims_at_collection(config: pytest.Config) -> DeviceClaims | None:
    """The device's claims while tests are generated (None: no device, or it cannot be opened here), for checks
    whose cases depend on them."""
    session = config.stash.get(_SESSION, None)
    return session.open().report.claims if session is not None else None
