"""All-reduce bandwidth: two devices in one process, and two processes over MPI, each against a plain baseline.

    python bench/allreduce.py             # 1, 16 and 64 MiB per device; MPI part when mpirun and mpi4py are here
    python bench/allreduce.py --quick     # small sizes, few rounds: checks the bench works, numbers mean nothing

One process: `x.sum(0)` of a (2, N) float32 tensor sharded on axis 0 over CPU:0 and CPU:1 (each device holds one
row: the sum is each device's row reduced, then all-reduced, tinygrad/engine/collectives.py), replayed by TinyJit,
against numpy copying the same N floats (`np.copyto`): how the kernels and copies of the all-reduce compare with
one pass over the bytes. Two processes (`mpirun -n 2`): `tinygrad.distributed.all_reduce` of a CPU tensor of N
floats (staged through host numpy) against mpi4py's own `Allreduce` of numpy arrays of the same size.

Bandwidth is N * 4 bytes / time (the "algorithm bandwidth" of an all-reduce: the size of one device's value, not
the bytes moved). Each call takes other buffers than the call before it (ours and the baseline alike, `INPUTS` sets
in turn), so that nothing answers from a result kept before; a call's time includes the realize of its result.
Rounds are interleaved and medians printed; the machine is shared, so compare ratios from the same run only. Prints
Markdown tables.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

MIB = 1 << 20
#: sets of buffers each side cycles through, one per call
INPUTS = 3


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except (OSError, StopIteration, subprocess.SubprocessError):
        return "unknown CPU"


def medians(fns: dict[str, Callable[[], None]], rounds: int) -> dict[str, float]:
    """Seconds per call of each function: warmed once, then called in interleaved rounds; the median."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            st = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - st)
    return {name: float(np.median(t)) for name, t in times.items()}


def table(title: str, rows: list[tuple[int, float, float]], ours: str, base: str) -> str:
    lines = [f"### {title}", "", f"| MiB per device | {ours} GB/s | {base} GB/s | {ours} / {base} |",
             "|---:|---:|---:|---:|"]
    for nbytes, t_ours, t_base in rows:
        gb_ours, gb_base = nbytes / t_ours / 1e9, nbytes / t_base / 1e9
        lines.append(f"| {nbytes // MIB} | {gb_ours:.2f} | {gb_base:.2f} | {gb_ours / gb_base:.2f}x |")
    return "\n".join(lines)


def in_process(sizes: list[int], rounds: int) -> str:
    from tinygrad import Device, Tensor, TinyJit

    devices = ("CPU:0", "CPU:1")
    for d in devices:
        Device[d]
    rows = []
    for nbytes in sizes:
        n = nbytes // 4
        a = np.random.default_rng(0).standard_normal((2, n)).astype(np.float32)

        @TinyJit
        def allreduce(t: Tensor) -> Tensor:
            return t.sum(0).realize()

        # eager, capture, replay, each on new buffers: the same graph over buffers seen before would be answered by
        # the result realized then, and a capture of that would hold no work
        for _ in range(3):
            out = allreduce(Tensor(a).shard(devices, 0).realize())
        np.testing.assert_array_equal(out.numpy(), a[0] + a[1])
        xs = [Tensor(a).shard(devices, 0).realize() for _ in range(INPUTS)]
        srcs = [np.ascontiguousarray(a[0]) for _ in range(INPUTS)]
        dsts = [np.empty(n, np.float32) for _ in range(INPUTS)]

        def ours(x: Callable[[], Tensor] = itertools.cycle(xs).__next__, allreduce: TinyJit = allreduce) -> None:
            allreduce(x())
            for d in devices:
                Device[d].synchronize()

        def memcpy(pair: Callable[[], tuple[np.ndarray, np.ndarray]] = itertools.cycle(zip(dsts, srcs)).__next__
                   ) -> None:
            np.copyto(*pair())

        t = medians({"ours": ours, "memcpy": memcpy}, rounds)
        for x in xs:
            np.testing.assert_array_equal(allreduce(x).numpy(), a[0] + a[1])
        assert allreduce.captured_kernels > 0
        rows.append((nbytes, t["ours"], t["memcpy"]))
    return table("One process, CPU:0 + CPU:1: `x.sum(0)` of a (2, N) float32 tensor sharded on axis 0 (TinyJit "
                 "replay)", rows, "all-reduce", "numpy memcpy")


def mpi_worker(sizes: list[int], rounds: int) -> None:
    from mpi4py import MPI
    from tinygrad import Tensor, distributed

    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    out = []
    for nbytes in sizes:
        n = nbytes // 4
        mine = np.random.default_rng(rank).standard_normal(n).astype(np.float32)
        ts = [Tensor(mine).realize() for _ in range(INPUTS)]
        want = sum(np.random.default_rng(r).standard_normal(n).astype(np.float32) for r in range(world))
        np.testing.assert_allclose(distributed.all_reduce(ts[0]).numpy(), want, rtol=1e-6, atol=1e-6)
        sends = [mine.copy() for _ in range(INPUTS)]
        recvs = [np.empty_like(mine) for _ in range(INPUTS)]

        def ours(t: Callable[[], Tensor] = itertools.cycle(ts).__next__) -> None:
            comm.Barrier()
            distributed.all_reduce(t())

        def theirs(pair: Callable[[], tuple[np.ndarray, np.ndarray]] = itertools.cycle(zip(sends, recvs)).__next__
                   ) -> None:
            comm.Barrier()
            comm.Allreduce(*pair())

        t_med = medians({"ours": ours, "mpi4py": theirs}, rounds)
        out.append((nbytes, t_med["ours"], t_med["mpi4py"]))
    if rank == 0:
        print("RESULT " + json.dumps(out), flush=True)


def over_mpi(sizes: list[int], rounds: int) -> str:
    if shutil.which("mpirun") is None:
        return "### Two processes over MPI\n\nskipped: no mpirun (Debian: apt-get install openmpi-bin libopenmpi-dev)"
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "### Two processes over MPI\n\nskipped: no mpi4py (pip install 'tg-core[mpi]')"
    cmd = ["mpirun", "-n", "2", "--oversubscribe", "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += [sys.executable, str(Path(__file__).resolve()), "--mpi-worker", "--sizes", ",".join(map(str, sizes)),
            "--rounds", str(rounds)]
    env = {**os.environ, "DEV": "CPU", "CPU_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        log = (proc.stdout + proc.stderr)[-3000:]
        return f"### Two processes over MPI\n\nfailed ({proc.returncode}):\n```\n{log}\n```"
    rows = [tuple(r) for r in json.loads(line[len("RESULT "):])]
    return table("Two processes over MPI (Open MPI, TCP over loopback): `distributed.all_reduce` of a CPU tensor",
                 rows, "ours", "mpi4py Allreduce")  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few rounds")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--sizes", default=None, help="bytes per device, comma-separated")
    parser.add_argument("--mpi-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else \
        ([MIB // 4, MIB] if args.quick else [MIB, 16 * MIB, 64 * MIB])
    rounds = args.rounds or (3 if args.quick else 9)
    if args.mpi_worker:
        mpi_worker(sizes, rounds)
        return
    print(f"all-reduce bandwidth on {cpu_name()}, {len(os.sched_getaffinity(0))} cores usable; {rounds} rounds, "
          f"medians\n")
    print(in_process(sizes, rounds) + "\n")
    print(over_mpi(sizes, rounds))


if __name__ == "__main__":
    main()
