"""How many threads CPU kernels use: $CPU_THREADS, else every core this process may run on (its affinity mask,
capped by a control-group CPU quota).

Kept apart from the pool (no ctypes, no compiler) so that listing backends can check and show it cheaply.
"""

from __future__ import annotations

import math
import os

THREADS_ENV = "CPU_THREADS"
#: where Linux states a CPU quota for this process's control group: (file, cgroup version)
CGROUP_CPU_FILES = (("/sys/fs/cgroup/cpu.max", 2), ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", 1))


def cgroup_cpu_limit() -> int | None:
    """The CPUs a control-group quota allows (a container's `--cpus`), rounded up; None without a quota.
    A quota of 2 CPUs on a 64-core host still shows all 64 in the affinity mask, and 64 threads would then
    take turns on 2 CPUs' worth of time."""
    for path, version in CGROUP_CPU_FILES:
        try:
            with open(path) as f:
                fields = f.read().split()
            if version == 1:
                with open(os.path.join(os.path.dirname(path), "cpu.cfs_period_us")) as f:
                    fields.append(f.read().strip())
        except OSError:
            continue
        if len(fields) < 2 or fields[0] in ("max", "-1"):
            return None
        try:
            quota, period = int(fields[0]), int(fields[1])
        except ValueError:
            return None
        return max(1, math.ceil(quota / period)) if quota > 0 and period > 0 else None
    return None


def available_cores() -> int:
    """The cores this process may run on: its affinity mask, capped by a control-group CPU quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity masks (macOS)
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    return min(cores, limit) if limit is not None else cores


def thread_count() -> int:
    """Threads CPU kernels run on: $CPU_THREADS if set, else `available_cores()`."""
    raw = os.environ.get(THREADS_ENV, "").strip()
    if not raw:
        return available_cores()
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{THREADS_ENV}={raw!r} is not a positive whole number; set it to how many threads CPU "
                         f"kernels may use (1 runs them on the calling thread only), or unset it to use all "
                         f"{available_cores()} cores this process may run on")
    return n


PIN_ENV = "CPU_PIN"


def pinned_cpus(threads: int) -> list[int]:
    """The CPUs to bind the pool's workers to, one each; empty for a pool whose workers run anywhere.

    Workers are bound only when the pool uses every CPU this process may run on (the default thread count on a
    machine without a CPU quota): then each CPU has its worker and a launch leaves out the one on the caller's
    CPU. With fewer threads than CPUs (a quota, `CPU_THREADS`, a shared machine) the scheduler keeps its freedom
    to place them. `CPU_PIN=0` turns binding off."""
    if threads < 2 or os.environ.get(PIN_ENV, "").strip() == "0" or not hasattr(os, "sched_getaffinity"):
        return []
    cpus = sorted(os.sched_getaffinity(0))
    return cpus if len(cpus) == threads else []


def still_usable(cpus: tuple[int, ...]) -> tuple[int, ...]:
    """`cpus` when they are still exactly the CPUs the calling thread may run on, else none: a pool that starts
    after the program narrowed its affinity (`os.sched_setaffinity`) must not bind a worker outside it."""
    if not cpus or not hasattr(os, "sched_getaffinity"):
        return ()
    return cpus if tuple(sorted(os.sched_getaffinity(0))) == tuple(cpus) else ()
