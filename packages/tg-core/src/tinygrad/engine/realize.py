"""Running a schedule: allocate buffers, ask each device for a runner, launch, and report (DEBUG)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from tinygrad.device import Buffer, Device, Runner
from tinygrad.engine import profile
from tinygrad.engine.jit_state import check_not_overwritten, overwritten
from tinygrad.engine.schedule import ScheduleItem
from tinygrad.engine.schedule_item import Linear
from tinygrad.helpers import DEBUG, PROFILE, GlobalCounters, colored
from tinygrad.uop.ops import UOp

#: While TinyJit captures, the callback it registers here sees every launched item with its runner (None for a
#: host copy). A list, so that a capture in progress is visible to code that must refuse to nest.
capture_hooks: list[Callable[[ScheduleItem, Runner | None], None]] = []


def copy_between(dest: Buffer, src: Buffer) -> None:
    """Copy a buffer into another of the same size, through the host (any two devices). Memory the host can address
    (the allocator's optional `host_view`) is read in place: one copy, no staging array."""
    import numpy as np

    from tinygrad.dtype import to_numpy

    source = Device[src.device]
    if (host_view := getattr(source.allocator, "host_view", None)) is not None and src.nbytes:
        source.synchronize()
        dest.copyin(host_view(src.ensure_allocated().opaque, src.nbytes))
        return
    host = np.empty(src.size, dtype=to_numpy(src.dtype))
    src.copyout(host.data.cast("B"))
    dest.copyin(host.data.cast("B"))


def timed_launch(device: str, runner: Runner, bufs: list[Buffer], var_vals: dict[str, int], record: bool) -> float:
    """Launch and wait for it; the seconds it ran, by the device's timer where the program has one, else the wall
    clock. `record`: add it to the PROFILE trace."""
    st = time.perf_counter()
    et = runner(bufs, var_vals, wait=True)
    elapsed = et if et is not None else time.perf_counter() - st
    if record:
        profile.record_launch(device, runner, st, elapsed, "wall" if et is None else "device")
    return elapsed


def _precompile(schedule: list[ScheduleItem]) -> None:
    """Let each device build the runners of a schedule's kernels together (in parallel, where it can) before the
    first one runs, instead of one compile at a time as the loop below reaches them."""
    asts: dict[str, list[UOp]] = {}
    for si in schedule:
        if not si.is_copy and si.bufs[0].size:
            asts.setdefault(si.device, []).append(si.ast)
    for device, kernels in asts.items():
        if len(kernels) > 1 and (precompile := getattr(Device[device], "precompile", None)) is not None:
            precompile(kernels)


def run_schedule(schedule: list[ScheduleItem]) -> None:
    debug = DEBUG.value  # read once: an eager step runs this for every op
    profiling = PROFILE.value
    if debug >= 1 and schedule:
        kernels = sum(1 for si in schedule if not si.is_copy)
        print(f"scheduled {kernels} kernel{'s' if kernels != 1 else ''}, {len(schedule) - kernels} copies",
              file=sys.stderr)
    if len(schedule) > 1:
        _precompile(schedule)
    if overwritten:  # an output of an earlier TinyJit replay that a later one wrote over is not read
        for si in schedule:
            check_not_overwritten(si.bufs)
    for si in schedule:
        bufs = si.bufs
        for b in bufs:
            b.ensure_allocated()
        if si.is_copy:
            st = time.perf_counter() if profiling else 0.0
            copy_between(bufs[0], bufs[1])
            if profiling:
                profile.record_copy(bufs[1].device, bufs[0].device, bufs[0].nbytes, st, time.perf_counter() - st)
            if capture_hooks:
                capture_hooks[-1](si, None)
            if debug >= 2:
                print(f"  copy {bufs[1].device} -> {bufs[0].device}: {bufs[0].nbytes} bytes", file=sys.stderr)
            continue
        if bufs[0].size == 0:
            continue  # nothing to compute for an empty output
        runner = Device[si.device].get_runner(si.ast)
        if debug < 2 and not profiling:
            runner(bufs, si.var_vals)
        else:
            elapsed = timed_launch(si.device, runner, bufs, si.var_vals, bool(profiling))
        GlobalCounters.count_launches(1, runner.estimated_ops, runner.estimated_bytes)
        if debug >= 2:
            GlobalCounters.time_sum_s += elapsed
        if capture_hooks:
            capture_hooks[-1](si, runner)
        if debug >= 2:
            gflops = runner.estimated_ops / max(elapsed, 1e-9) / 1e9
            gbs = runner.estimated_bytes / max(elapsed, 1e-9) / 1e9
            print(f"  {colored(si.device, 'yellow')} {runner.display_name:<40} {elapsed * 1e6:9.2f} us  "
                  f"{gflops:8.2f} GFLOPS  {gbs:7.2f} GB/s", file=sys.stderr)


def compile_linear(linear: Linear) -> Linear:
    """tinygrad's: build the runners of a linear's kernels now (together, where the device can), not at the first run.
    Returns the linear."""
    _precompile(list(linear.src))
    for si in linear.src:
        if not si.is_copy and si.bufs[0].size:
            Device[si.device].get_runner(si.ast)
    return linear


def run_linear(linear: Linear, var_vals: dict[str, int] | None = None) -> None:
    """tinygrad's: run the calls of `Tensor.linear_with_vars`, then point its tensors at the buffers they filled.
    `var_vals` are the values it returned with the linear (other values raise: the calls were built for those); a
    linear runs once, as the realize it stands for."""
    if linear.ran:
        raise RuntimeError("this linear has run already: its tensors hold their values; call linear_with_vars again "
                           "for new work")
    bound = {k: v for si in linear.src for k, v in si.var_vals.items()}
    if var_vals is not None and (wrong := {k: v for k, v in var_vals.items() if k in bound and bound[k] != v}):
        raise ValueError(f"run_linear got variable values {wrong}, but its calls were built for "
                         f"{ {k: bound[k] for k in wrong} }; schedule again with the variables bound to the new values")
    run_schedule(list(linear.src))
    linear.ran = True
    linear.adopt()
