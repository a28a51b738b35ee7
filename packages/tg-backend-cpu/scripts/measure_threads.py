"""Measure what the CPU backend's threads buy: a fused elementwise kernel over 16M float32 (GB/s), a 1024x1024
matmul (GFLOPS), each on 1 and 2 threads, and the launch overhead of a tiny kernel (microseconds per call).

    python packages/tg-backend-cpu/scripts/measure_threads.py [--threads 1 2] [--size 16777216] [--matmul 1024]

Each kernel runs --repeat times per thread count, the thread counts taking turns; best and median are shown.
Timings on a shared machine are noisy: compare numbers taken in one run.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from tinygrad import Device, Tensor
from tinygrad.device import Buffer
from tinygrad.dtype import dtypes
from tinygrad.uop.ops import Ops, UOp

try:
    from tg_backend_cpu.thread_pool import ThreadPool
except ImportError:  # a CPU backend from before the thread pool: one thread only
    ThreadPool = None  # type: ignore[assignment,misc]


def launch_overhead_us(calls: int, threads: int | None = None) -> tuple[float, float]:
    """A 16-element add, launched through its runner (no scheduling): what one launch costs, as (wall, CPU time of
    this process) in microseconds. `threads` forces the kernel onto that many threads (one element each)."""
    f32 = dtypes.float32
    out, inp = (UOp(Ops.PARAM, f32, (), (i, 16)).reshape((16,)) for i in (0, 1))
    sink = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, inp + 1.0)),))
    runner = Device["CPU"].get_runner(sink)
    if threads is not None:
        runner.program.plan_launch(1 << 62)  # as if the kernel were huge: split it
        assert runner.program.parts == threads, runner.program.parts
    bufs = [Buffer("CPU", 16, f32).ensure_allocated() for _ in range(2)]
    runner(bufs, {})
    best = (float("inf"), float("inf"))
    for _ in range(5):
        st, cpu = time.perf_counter(), time.process_time()
        for _ in range(calls):
            runner(bufs, {})
        wall, cpu = (time.perf_counter() - st) / calls * 1e6, (time.process_time() - cpu) / calls * 1e6
        best = min(best, (wall, cpu))
    if threads is not None:
        runner.program.plan_launch(runner.estimated_ops)
    return best


def kernel_runner(out: Tensor) -> tuple[Callable[[], object], Any]:
    """A call that launches the single kernel computing `out` (scheduling excluded: graphs are hash-consed, so
    realizing the same expression twice would not run it again)."""
    items = [si for si in out.schedule() if not si.is_copy]
    if len(items) != 1:
        raise RuntimeError(f"expected one kernel, the schedule has {len(items)}")
    si = items[0]
    for buf in si.bufs:
        buf.ensure_allocated()
    runner = Device["CPU"].get_runner(si.ast)
    runner(si.bufs, si.var_vals)  # compile and warm up
    return (lambda: runner(si.bufs, si.var_vals)), runner.program


def interleaved(launch: Callable[[], object], program: Any, thread_counts: list[int],
                rounds: int) -> dict[int, list[float]]:
    """Seconds per launch on each thread count, the counts taking turns so that a change in the machine's load
    hits all of them alike. Each count keeps its own started pool."""
    pools = {n: ThreadPool(n) if n > 1 else None for n in thread_counts} if ThreadPool is not None else {}
    times: dict[int, list[float]] = {n: [] for n in thread_counts}
    for _ in range(rounds):
        for n in thread_counts:
            if pools:
                program.use_pool(pools[n])
            st = time.perf_counter()
            launch()
            times[n].append(time.perf_counter() - st)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--size", type=int, default=1 << 24)
    parser.add_argument("--matmul", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()

    dev = Device["CPU"]
    rng = np.random.default_rng(0)
    a = Tensor(rng.standard_normal(args.size, dtype=np.float32), device="CPU").realize()
    b = Tensor(rng.standard_normal(args.size, dtype=np.float32), device="CPU").realize()
    m = args.matmul
    x = Tensor(rng.standard_normal((m, m), dtype=np.float32), device="CPU").realize()
    y = Tensor(rng.standard_normal((m, m), dtype=np.float32), device="CPU").realize()
    wall, cpu = launch_overhead_us(args.calls)
    print(f"launch overhead of a tiny kernel: {wall:.2f} us per call (CPU time {cpu:.2f} us)")
    counts = args.threads if hasattr(dev, "set_threads") else [1]
    if counts != args.threads:
        print("this CPU backend has no threads: measuring 1 thread only")
    for threads in counts:
        if threads > 1:
            dev.set_threads(threads)
            wall, cpu = launch_overhead_us(args.calls // 4, threads)
            print(f"threads={threads}  the tiny kernel forced onto {threads} threads: {wall:.2f} us per call "
                  f"(CPU time of all threads {cpu:.2f} us)")
    if hasattr(dev, "set_threads"):
        dev.set_threads(1)
    cases = [(f"(a*2+b) over {args.size} float32", kernel_runner(a * 2 + b), 3 * 4 * args.size / 1e9, "GB/s"),
             (f"{m}x{m} matmul", kernel_runner(x @ y), 2 * m ** 3 / 1e9, "GFLOPS")]
    for name, (launch, program), amount, unit in cases:
        for n, ts in interleaved(launch, program, counts, args.repeat).items():
            best, median = min(ts), statistics.median(ts)
            print(f"threads={n}  {name:<34} best {best * 1e3:8.2f} ms {amount / best:7.2f} {unit}   "
                  f"median {median * 1e3:8.2f} ms {amount / median:7.2f} {unit}")


if __name__ == "__main__":
    main()
