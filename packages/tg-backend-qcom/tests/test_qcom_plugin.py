"""Discovery, priority, the platform choice (Adreno, the PoCL stand-in, QCOM_PLATFORM), availability reasons,
device numbers and the IMAGE switch."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

import pytest

tg_backend_qcom = pytest.importorskip("tg_backend_qcom", reason="tg-backend-qcom is not installed")

from tg_backend_qcom.platform import NoPlatformError, choose_platform  # noqa: E402


@dataclass
class FakePlatform:
    name: str
    vendor: str


POCL = FakePlatform("Portable Computing Language", "The pocl project")
ADRENO = FakePlatform("QUALCOMM Snapdragon(TM)", "QUALCOMM")
NVIDIA = FakePlatform("NVIDIA CUDA", "NVIDIA Corporation")


def _env_without(*names: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in names}


def test_plugin_module_does_not_import_pyopencl() -> None:
    code = "import sys, tg_backend_qcom; print('pyopencl' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


def test_states_its_contract_and_comes_after_cl_and_before_cpu() -> None:
    (info,) = tg_backend_qcom.tinygrad_backends()
    assert info.name == "QCOM" and info.contract_version == tg_backend_qcom.DEVICE_CONTRACT == "2.0"
    from tinygrad.device import Device

    backends = Device.backends
    if "CL" in backends:
        assert backends["CL"].priority < info.priority
    if "CPU" in backends:
        assert info.priority < backends["CPU"].priority


def test_adreno_is_preferred_over_the_stand_in() -> None:
    choice = choose_platform([POCL, ADRENO], requested="")
    assert choice.platform is ADRENO and not choice.stand_in and choice.note is None


def test_pocl_is_the_stand_in_and_says_so() -> None:
    choice = choose_platform([NVIDIA, POCL], requested="")
    assert choice.platform is POCL and choice.stand_in
    assert choice.note == "stand-in: running on PoCL, not Adreno"


def test_another_vendor_is_never_a_silent_stand_in() -> None:
    with pytest.raises(NoPlatformError, match=r"no Qualcomm Adreno OpenCL platform found \(platforms: NVIDIA CUDA"):
        choose_platform([NVIDIA], requested="")
    with pytest.raises(NoPlatformError, match="platforms: none"):
        choose_platform([], requested="")


def test_qcom_platform_picks_any_platform_by_name_or_vendor() -> None:
    choice = choose_platform([ADRENO, NVIDIA], requested="nvidia")
    assert choice.platform is NVIDIA and choice.stand_in
    assert choice.note == "stand-in: running on NVIDIA CUDA, not Adreno"
    assert choose_platform([POCL, ADRENO], requested="qualcomm").platform is ADRENO
    with pytest.raises(NoPlatformError, match=r"QCOM_PLATFORM=intel matches no OpenCL platform \(platforms: "):
        choose_platform([POCL, ADRENO], requested="intel")


def test_qcom_platform_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QCOM_PLATFORM", "cuda")
    assert choose_platform([POCL, NVIDIA]).platform is NVIDIA
    monkeypatch.delenv("QCOM_PLATFORM")
    assert choose_platform([POCL, NVIDIA]).platform is POCL


def test_check_names_missing_pyopencl(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyopencl", None)  # makes `import pyopencl` raise ImportError
    reason = tg_backend_qcom._check.__wrapped__()
    assert reason is not None and "pyopencl is not installed" in reason


def test_check_names_missing_platform(monkeypatch: pytest.MonkeyPatch) -> None:
    cl = pytest.importorskip("pyopencl")

    def no_platforms():  # type: ignore[no-untyped-def]
        raise cl.LogicError("clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR")

    monkeypatch.setattr(cl, "get_platforms", no_platforms)
    reason = tg_backend_qcom._check.__wrapped__()
    assert reason is not None and "no OpenCL platform found" in reason and "pocl-opencl-icd" in reason


def test_check_explains_a_machine_with_only_another_vendor(monkeypatch: pytest.MonkeyPatch) -> None:
    cl = pytest.importorskip("pyopencl")
    monkeypatch.delenv("QCOM_PLATFORM", raising=False)
    monkeypatch.setattr(cl, "get_platforms", lambda: [NVIDIA])
    reason = tg_backend_qcom._check.__wrapped__()
    assert reason is not None and "no Qualcomm Adreno OpenCL platform" in reason and "QCOM_PLATFORM" in reason
    assert tg_backend_qcom._note.__wrapped__() is None


def test_device_listing_reports_the_stand_in(qcom_device) -> None:  # type: ignore[no-untyped-def]
    out = subprocess.run([sys.executable, "-m", "tinygrad.device"], capture_output=True, text=True, check=True,
                         env=_env_without("DEV", "QCOM_PLATFORM")).stdout
    row = next(line for line in out.splitlines() if line.startswith("QCOM "))
    software = tg_backend_qcom._software()
    if qcom_device.stand_in:
        # the PoCL stand-in runs on the host CPU: a software device, which ranks after CPU
        assert row.endswith(f"available (stand-in: running on PoCL, not Adreno; software device: ranked after CPU; "
                            f"{software})"), out
    else:
        assert row.endswith("available" if software is None else
                            f"available (software device: ranked after CPU; {software})"), out


def test_the_pocl_stand_in_is_software(qcom_device) -> None:  # type: ignore[no-untyped-def]
    if not qcom_device.stand_in or "pocl" not in tg_backend_qcom._note().lower():
        pytest.skip("QCOM runs on a platform other than the PoCL stand-in here")
    assert tg_backend_qcom._software.__wrapped__().startswith("PoCL, OpenCL on the host CPU: ")


def test_cl_ranks_ahead_of_qcom_when_both_are_usable(qcom_device) -> None:  # type: ignore[no-untyped-def]
    from tinygrad.device import Device

    if "CL" not in Device.backends or Device.availability("CL") is not None:
        pytest.skip("CL is not usable here")
    if (Device.software("CL") is None) != (Device.software("QCOM") is None):
        pytest.skip("one of CL and QCOM is a software device and the other is not: software ranks after hardware")
    code = "from tinygrad import Device; print(*Device.ranking())"
    ranking = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env=_env_without("DEV")).stdout.split()
    assert ranking.index("CL") < ranking.index("QCOM"), ranking


def test_device_number_out_of_range_lists_the_devices(qcom_device) -> None:  # type: ignore[no-untyped-def]
    from tg_backend_qcom.device import QCOMDevice
    from tinygrad.device import Device

    n = len(qcom_device.platform.get_devices())
    with pytest.raises(RuntimeError, match=r"no QCOM device number .*QCOM:0 = "):
        QCOMDevice(n)
    with pytest.raises(RuntimeError, match="no QCOM device number"):
        Device[f"QCOM:{n}"]


@pytest.mark.parametrize("value,supported,want", [("", True, True), ("", False, False), ("0", True, False),
                                                   ("1", True, True), (" 1 ", True, True)])
def test_image_switch(monkeypatch: pytest.MonkeyPatch, value: str, supported: bool, want: bool) -> None:
    pytest.importorskip("pyopencl")
    from tg_backend_qcom.device import images_requested

    monkeypatch.setenv("IMAGE", value)
    assert images_requested(supported, "dev") is want


def test_image_switch_errors_name_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pyopencl")
    from tg_backend_qcom.device import images_requested

    monkeypatch.setenv("IMAGE", "yes")
    with pytest.raises(ValueError, match=r"use IMAGE=1 .* or IMAGE=0"):
        images_requested(True, "dev")
    monkeypatch.setenv("IMAGE", "1")
    with pytest.raises(RuntimeError, match=r"IMAGE=1, but the OpenCL device dev cannot .* set IMAGE=0"):
        images_requested(False, "dev")
