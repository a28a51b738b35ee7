"""`python -m tinygrad.device`: list every discovered backend, its package, version, contract and status."""

from __future__ import annotations

from tinygrad.device import CONTRACT_VERSION, BackendInfo, Device, UnknownDeviceError


def _note(info: BackendInfo) -> str | None:
    try:
        return info.note()
    except Exception as e:  # a remark must never break the listing
        return f"note failed: {type(e).__name__}: {e}"


def report() -> str:
    lines = [f"tinygrad device contract {CONTRACT_VERSION}", ""]
    rows = [("device", "package", "version", "contract", "status")]
    for name, info in sorted(Device.backends.items(), key=lambda kv: (kv[1].priority, kv[0])):
        reason = Device.availability(name)
        status = "available" if reason is None else f"unavailable: {reason}"
        if reason is None and (note := _note(info)):
            status += f" ({note})"
        rows.append((name, info.package or "-", info.version or "-", info.contract_version, status))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4])
    for b in Device.broken:
        lines.append(f"broken plugin {b.entry_point} ({b.package} {b.version}): {b.reason}")
    try:
        lines.append(f"\nDevice.DEFAULT = {Device.DEFAULT}")
    except (RuntimeError, UnknownDeviceError) as e:
        lines.append(f"\nno default device: {e}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
