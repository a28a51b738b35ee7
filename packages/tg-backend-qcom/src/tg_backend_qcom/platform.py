"""Which OpenCL platform QCOM runs on: Qualcomm's Adreno driver when there is one, else PoCL as a stand-in.

The rules, in order:

1. `QCOM_PLATFORM=<text>` picks the platform whose name or vendor contains that text (case-insensitive),
   whatever it is. A platform that is not Qualcomm's is then a stand-in.
2. A platform whose name or vendor mentions Qualcomm or Adreno: the real thing.
3. PoCL (the "Portable Computing Language" CPU implementation) as a stand-in, so that the QCOM code path
   (renderer, image views, launch checks) runs and is tested on machines without a Snapdragon.
4. Nothing else: a GPU of another vendor is deliberately *not* a silent stand-in (it would be mistaken for
   Adreno results); set `QCOM_PLATFORM` to use one on purpose.

Pure logic over objects with `.name`/`.vendor`, so it is tested without any OpenCL driver.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PLATFORM_ENV = "QCOM_PLATFORM"
QUALCOMM_MARKERS = ("qualcomm", "adreno")
STAND_IN_MARKERS = ("portable computing language", "pocl")


class NoPlatformError(RuntimeError):
    """No OpenCL platform QCOM may run on; the message says what was found and what to do."""


@dataclass(frozen=True)
class PlatformChoice:
    platform: Any  # a pyopencl.Platform (or anything with .name and .vendor in tests)
    stand_in: bool  # True when this is not Qualcomm's driver

    @property
    def note(self) -> str | None:
        """What `python -m tinygrad.device` shows next to "available"."""
        if not self.stand_in:
            return None
        return f"stand-in: running on {_label(self.platform)}, not Adreno"


def _label(platform: Any) -> str:
    name = str(getattr(platform, "name", "?")).strip()
    return "PoCL" if _matches(platform, STAND_IN_MARKERS) else name


def _matches(platform: Any, markers: Sequence[str]) -> bool:
    text = f"{getattr(platform, 'name', '')} {getattr(platform, 'vendor', '')}".lower()
    return any(m in text for m in markers)


def choose_platform(platforms: Sequence[Any], requested: str | None = None) -> PlatformChoice:
    """The platform QCOM runs on, following the rules in this module's docstring."""
    requested = os.environ.get(PLATFORM_ENV) if requested is None else requested
    found = ", ".join(f"{p.name!s} ({p.vendor!s})" for p in platforms) or "none"
    if requested:
        for p in platforms:
            if _matches(p, (requested.lower(),)):
                return PlatformChoice(p, stand_in=not _matches(p, QUALCOMM_MARKERS))
        raise NoPlatformError(f"{PLATFORM_ENV}={requested} matches no OpenCL platform (platforms: {found}); "
                              f"set it to part of one of those names, or unset it")
    for p in platforms:
        if _matches(p, QUALCOMM_MARKERS):
            return PlatformChoice(p, stand_in=False)
    for p in platforms:
        if _matches(p, STAND_IN_MARKERS):
            return PlatformChoice(p, stand_in=True)
    raise NoPlatformError(f"no Qualcomm Adreno OpenCL platform found (platforms: {found}); on a Snapdragon install "
                          f"the vendor's OpenCL driver (libOpenCL.so), install pocl-opencl-icd to run QCOM on the CPU "
                          f"as a stand-in, or set {PLATFORM_ENV}=<platform name> to run on another platform")
