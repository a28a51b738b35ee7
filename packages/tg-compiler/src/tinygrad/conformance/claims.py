"""What a device says about itself: the facts the kit checks against and prints at the start of a run.

Everything comes from public places: the backend's `BackendInfo` (package, version, device-contract
version), the opened device's `supports_dtype`, and its renderer's declarations (`has_local`, launch limits,
and `flushes_denormals`).

`flushes_denormals` is optional on a renderer: `True` (every float dtype) or a collection of dtypes whose
subnormal inputs and results the device may treat as zero. Without it, subnormals must survive exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tinygrad.device import CONTRACT_VERSION, Device
from tinygrad.dtype import DType, dtypes

#: dtypes the Tensor API itself needs on every device: index arithmetic, comparisons, the default float
REQUIRED_DTYPES: tuple[DType, ...] = (dtypes.bool, dtypes.int32, dtypes.float32)
#: renderer attributes reported when present (launch limits differ between targets; none is required)
LIMIT_ATTRIBUTES = ("global_max", "local_max", "shared_max")


@dataclass(frozen=True)
class DeviceClaims:
    device: str
    package: str
    version: str
    contract_version: str
    core_contract_version: str
    description: str
    runtime: str  # the class of the opened device
    renderer: str  # the class of its renderer, or "none" when the device has no `renderer` attribute
    dtypes: tuple[DType, ...]
    has_local: bool | None
    limits: dict[str, Any] = field(default_factory=dict)
    flushes_denormals: frozenset[DType] = frozenset()

    def claims(self, d: DType) -> bool:
        return d.scalar in self.dtypes

    @property
    def unclaimed(self) -> tuple[DType, ...]:
        return tuple(d for d in dtypes.all() if d not in self.dtypes)

    def lines(self) -> list[str]:
        limits = ", ".join(f"{k}={v}" for k, v in self.limits.items()) or "none declared"
        ftz = ", ".join(d.name for d in dtypes.all() if d in self.flushes_denormals) or "none (subnormals exact)"
        return [
            f"device {self.device}: package {self.package or '?'} {self.version or '?'}, device contract "
            f"{self.contract_version} (this core: {self.core_contract_version})",
            f"  runtime {self.runtime}, renderer {self.renderer}, has_local={self.has_local}, limits: {limits}",
            f"  claims dtypes: {', '.join(d.name for d in self.dtypes) or 'none'}",
            f"  does not claim: {', '.join(d.name for d in self.unclaimed) or 'none'}",
            f"  flushes denormals: {ftz}",
        ]

    def as_json(self) -> dict[str, Any]:
        return {"device": self.device, "package": self.package, "version": self.version,
                "contract_version": self.contract_version, "core_contract_version": self.core_contract_version,
                "runtime": self.runtime, "renderer": self.renderer, "dtypes": [d.name for d in self.dtypes],
                "unclaimed": [d.name for d in self.unclaimed], "has_local": self.has_local,
                "limits": {k: repr(v) for k, v in self.limits.items()},
                "flushes_denormals": [d.name for d in dtypes.all() if d in self.flushes_denormals]}


def _flushing_dtypes(renderer: object) -> frozenset[DType]:
    declared = getattr(renderer, "flushes_denormals", False)
    if declared is True:
        return frozenset(d for d in dtypes.all() if d.is_float)
    if not declared:
        return frozenset()
    return frozenset(d for d in declared if isinstance(d, DType) and d.is_float)


def gather_claims(device: str) -> DeviceClaims:
    """Open `device` (raises the registry's error when it cannot be opened) and read what it claims."""
    name = Device.canonicalize(device)
    info = Device.backends[name.split(":")[0]]
    dev = Device[name]
    renderer = getattr(dev, "renderer", None)
    limits = {attr: getattr(renderer, attr) for attr in LIMIT_ATTRIBUTES if getattr(renderer, attr, None) is not None}
    return DeviceClaims(
        device=name, package=info.package, version=info.version, contract_version=info.contract_version,
        core_contract_version=CONTRACT_VERSION, description=info.description, runtime=type(dev).__name__,
        renderer=type(renderer).__name__ if renderer is not None else "none",
        dtypes=tuple(d for d in dtypes.all() if dev.supports_dtype(d)),
        has_local=getattr(renderer, "has_local", None), limits=limits,
        flushes_denormals=_flushing_dtypes(renderer))
