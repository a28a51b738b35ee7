"""How Device.DEFAULT is chosen: backends by priority, except that one whose device runs in software on the host CPU
(`BackendInfo.software`: PoCL, lavapipe) ranks after every hardware backend, the CPU backend included; DEV= still
picks it. And what `python -m tinygrad.device` says about it.

Each test uses a registry of its own with entry-point discovery off, so the installed backends stay out of it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import tinygrad.device.__main__ as doctor
from tinygrad.device import BackendInfo, _DeviceRegistry


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> _DeviceRegistry:
    monkeypatch.setenv("TINYGRAD_NO_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("DEV", raising=False)
    return _DeviceRegistry()


def _never_open(index: int) -> object:
    raise AssertionError("ranking must not open a device")


class Probe:
    """A `software` callable that counts its calls."""

    def __init__(self, answer: str | Exception | None):
        self.answer, self.calls = answer, 0

    def __call__(self) -> str | None:
        self.calls += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _add(registry: _DeviceRegistry, name: str, priority: int, software: Callable[[], str | None] | None = None,
         unavailable: str | None = None) -> None:
    info = BackendInfo(name=name, contract_version="2.0", open=_never_open, priority=priority,
                       check=lambda: unavailable, package=f"tg-backend-{name.lower()}", version="0.1.0")
    if software is not None:
        info.software = software
    registry.register(info)


def test_a_software_device_ranks_after_cpu(registry: _DeviceRegistry) -> None:
    _add(registry, "SOFTCL", 100, Probe("PoCL, OpenCL on the host CPU"))
    _add(registry, "CPU", 1000)
    assert registry.DEFAULT == "CPU"
    assert registry.ranking() == ["CPU", "SOFTCL"]


def test_hardware_keeps_its_priority_ahead_of_cpu(registry: _DeviceRegistry) -> None:
    _add(registry, "SOFTCL", 100, Probe("PoCL, OpenCL on the host CPU"))
    _add(registry, "GPU", 200, Probe(None))
    _add(registry, "CPU", 1000)
    _add(registry, "SOFTWG", 150, Probe("llvmpipe through Vulkan"))
    _add(registry, "ORACLE", 10_000)  # meant for explicit use (the sample backend's PYREF): after CPU
    assert registry.DEFAULT == "GPU"
    # by priority, the software devices moved to right after CPU, in their own priority order
    assert registry.ranking() == ["GPU", "CPU", "SOFTCL", "SOFTWG", "ORACLE"]


def test_a_software_device_still_ranks_before_a_backend_meant_for_explicit_use(registry: _DeviceRegistry) -> None:
    _add(registry, "ORACLE", 10_000)
    _add(registry, "SOFTCL", 100, Probe("PoCL, OpenCL on the host CPU"))
    _add(registry, "CPU", 1000, unavailable="no C compiler found")
    _add(registry, "LATESOFT", 20_000, Probe("an emulator"))
    assert registry.DEFAULT == "SOFTCL"
    assert registry.ranking() == ["SOFTCL", "ORACLE", "LATESOFT"]


def test_dev_still_picks_a_software_device(registry: _DeviceRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    _add(registry, "SOFTCL", 100, Probe("PoCL, OpenCL on the host CPU"))
    _add(registry, "CPU", 1000)
    monkeypatch.setenv("DEV", "SOFTCL")
    assert registry.DEFAULT == "SOFTCL"


def test_a_software_device_is_the_default_when_no_hardware_is_usable(registry: _DeviceRegistry) -> None:
    _add(registry, "SOFTWG", 200, Probe("llvmpipe through Vulkan"))
    _add(registry, "SOFTCL", 100, Probe("PoCL, OpenCL on the host CPU"))
    _add(registry, "CPU", 1000, unavailable="no C compiler found")
    assert registry.DEFAULT == "SOFTCL"


def test_software_is_probed_only_where_the_ranking_reaches(registry: _DeviceRegistry) -> None:
    early, gone, late = Probe("PoCL"), Probe("lavapipe"), Probe("never asked")
    _add(registry, "SOFTCL", 100, early)
    _add(registry, "GONE", 150, gone, unavailable="no driver")
    _add(registry, "CPU", 1000)
    _add(registry, "LATE", 2000, late)
    assert registry.DEFAULT == "CPU"
    # the usable backend ahead of CPU was asked; the unusable one and the one behind CPU were not
    assert (early.calls, gone.calls, late.calls) == (1, 0, 0)


def test_a_failing_software_probe_keeps_the_priority(registry: _DeviceRegistry) -> None:
    _add(registry, "ODD", 100, Probe(RuntimeError("driver query failed")))
    _add(registry, "CPU", 1000)
    assert registry.DEFAULT == "ODD"
    assert registry.software("ODD") is None


def test_the_doctor_says_software_devices_rank_after_cpu(registry: _DeviceRegistry,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "Device", registry)
    _add(registry, "SOFTCL", 100, Probe("PoCL, OpenCL on the host CPU: pthread-zen4"))
    _add(registry, "GONE", 50, Probe("never shown"), unavailable="no driver")
    _add(registry, "CPU", 1000)
    text = doctor.report()
    rows = {line.split()[0]: line for line in text.splitlines()[3:] if line.strip() and not line.startswith("Dev")}
    assert rows["SOFTCL"].endswith(
        "available (software device: ranked after CPU; PoCL, OpenCL on the host CPU: pthread-zen4)"), text
    assert rows["CPU"].endswith("  available"), text
    assert rows["GONE"].endswith("unavailable: no driver"), text  # an unusable backend is not probed
    assert text.splitlines()[-1] == "Device.DEFAULT = CPU (SOFTCL runs in software on the host CPU and ranks after it)"
    # the rows follow the ranking: CPU, then the software device, then the unusable backend
    assert [line.split()[0] for line in text.splitlines()[3:6]] == ["CPU", "SOFTCL", "GONE"], text


def test_the_doctor_names_dev_and_a_software_default(registry: _DeviceRegistry,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "Device", registry)
    _add(registry, "SOFTCL", 100, Probe("PoCL"))
    assert doctor.report().splitlines()[-1] == \
        "Device.DEFAULT = SOFTCL (it runs in software on the host CPU; no usable hardware backend ranks before it)"
    registry.reset_default()
    monkeypatch.setenv("DEV", "SOFTCL")
    assert doctor.report().splitlines()[-1] == "Device.DEFAULT = SOFTCL (DEV=SOFTCL)"


def test_the_doctor_shows_a_failing_software_probe(registry: _DeviceRegistry,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "Device", registry)
    _add(registry, "ODD", 100, Probe(RuntimeError("driver query failed")))
    row = next(line for line in doctor.report().splitlines() if line.startswith("ODD"))
    assert row.endswith("available (software probe failed: RuntimeError: driver query failed)")
