"""Running a schedule: allocate buffers, ask each device for a runner, launch, and report (DEBUG)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from tinygrad.device import Buffer, Device, Runner
from tinygrad.engine.schedule import ScheduleItem
from tinygrad.helpers import DEBUG, colored

kernel_count = 0  # total kernels launched by this process; tests use it to count kernels

#: While TinyJit captures, the callback it registers here sees every launched item with its runner (None for a
#: host copy). A list, so that a capture in progress is visible to code that must refuse to nest.
capture_hooks: list[Callable[[ScheduleItem, Runner | None], None]] = []


def copy_between(dest: Buffer, src: Buffer) -> None:
    """Copy a buffer into another of the same size, through the host (any two devices)."""
    import numpy as np

    from tinygrad.dtype import to_numpy

    host = np.empty(src.size, dtype=to_numpy(src.dtype))
    src.copyout(host.data.cast("B"))
    dest.copyin(host.data.cast("B"))


def run_schedule(schedule: list[ScheduleItem]) -> None:
    global kernel_count
    if DEBUG >= 1 and schedule:
        kernels = sum(1 for si in schedule if not si.is_copy)
        print(f"scheduled {kernels} kernel{'s' if kernels != 1 else ''}, {len(schedule) - kernels} copies",
              file=sys.stderr)
    for si in schedule:
        for b in si.bufs:
            b.ensure_allocated()
        if si.is_copy:
            copy_between(si.bufs[0], si.bufs[1])
            if capture_hooks:
                capture_hooks[-1](si, None)
            if DEBUG >= 2:
                print(f"  copy {si.bufs[1].device} -> {si.bufs[0].device}: {si.bufs[0].nbytes} bytes", file=sys.stderr)
            continue
        if si.bufs[0].size == 0:
            continue  # nothing to compute for an empty output
        # the registry's table of opened devices first: Device[...] validates the name on every call
        dev = Device._state.opened.get(si.device) or Device[si.device]
        runner = dev.get_runner(si.ast)
        st = time.perf_counter()
        et = runner(si.bufs, si.var_vals, wait=DEBUG >= 2)
        kernel_count += 1
        if capture_hooks:
            capture_hooks[-1](si, runner)
        if DEBUG >= 2:
            elapsed = et if et is not None else time.perf_counter() - st
            gflops = runner.estimated_ops / max(elapsed, 1e-9) / 1e9
            gbs = runner.estimated_bytes / max(elapsed, 1e-9) / 1e9
            print(f"  {colored(si.device, 'yellow')} {runner.display_name:<40} {elapsed * 1e6:9.2f} us  "
                  f"{gflops:8.2f} GFLOPS  {gbs:7.2f} GB/s", file=sys.stderr)
