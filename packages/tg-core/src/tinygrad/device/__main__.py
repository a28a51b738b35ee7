"""`python -m tinygrad.device`: list every discovered backend, its package, version, contract and status, in the
order Device.DEFAULT ranks them, and which one is the default and why."""

from __future__ import annotations

import os

from tinygrad.device import CONTRACT_VERSION, BackendInfo, Device, UnknownDeviceError


def _note(info: BackendInfo) -> str | None:
    try:
        return info.note()
    except Exception as e:  # a remark must never break the listing
        return f"note failed: {type(e).__name__}: {e}"


def _software(info: BackendInfo) -> tuple[str | None, str | None]:
    """(what runs the device in software on the host CPU, or None; why the probe failed, or None)."""
    try:
        return info.software(), None
    except Exception as e:  # the registry ranks such a backend as hardware; say that the probe failed
        return None, f"software probe failed: {type(e).__name__}: {e}"


def _default_line(software: dict[str, str]) -> str:
    try:
        default = Device.DEFAULT
    except (RuntimeError, UnknownDeviceError) as e:
        return f"no default device: {e}"
    line = f"Device.DEFAULT = {default}"
    if os.environ.get("DEV"):
        return f"{line} (DEV={os.environ['DEV']})"
    if default in software:
        return f"{line} (it runs in software on the host CPU; no usable hardware backend ranks before it)"
    if software:
        s = "s" if len(software) == 1 else ""
        return f"{line} ({', '.join(software)} run{s} in software on the host CPU and rank{s} after it)"
    return line


def report() -> str:
    lines = [f"tinygrad device contract {CONTRACT_VERSION}", ""]
    rows: list[tuple[str, str, str, str, str]] = []
    software: dict[str, str] = {}  # usable backends that run in software on the host CPU: what runs them
    for name in sorted(Device.backends, key=lambda n: (Device.backends[n].priority, n)):
        info = Device.backends[name]
        reason = Device.availability(name)
        status = "available" if reason is None else f"unavailable: {reason}"
        remarks = []
        if reason is None:
            remarks += [r for r in (_note(info),) if r]
            what, failed = _software(info)
            if what is not None:
                software[name] = what
                remarks.append(f"software device: ranked after CPU; {what}")
            remarks += [r for r in (failed,) if r]
        if remarks:
            status += f" ({'; '.join(remarks)})"
        rows.append((name, info.package or "-", info.version or "-", info.contract_version, status))
    # the usable backends in the order Device.DEFAULT ranks them in, then the unusable ones by priority
    rows.sort(key=lambda r: (0, Device._rank(r[0], r[0] in software)) if r[4].startswith("available") else (1,))
    rows.insert(0, ("device", "package", "version", "contract", "status"))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4])
    for b in Device.broken:
        lines.append(f"broken plugin {b.entry_point} ({b.package} {b.version}): {b.reason}")
    lines.append("\n" + _default_line(software))
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
