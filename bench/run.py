"""CPU benchmark: this project against numpy, PyTorch 2.13 and tinygrad 0.14.0, in one run.

    python bench/run.py                    # every workload, full sizes (minutes)
    python bench/run.py --quick            # tiny sizes, a few seconds a table: checks the bench works
    python bench/run.py --only matmul,jit  # some workloads
    python bench/run.py --compilers llvm   # this project on one CPU compiler path (default: llvm, clang, gcc)

Each framework runs in its own worker process (PyTorch and tinygrad in venvs that this command
makes under $TG_BENCH_CACHE, else ~/.cache/tg-bench); rounds are interleaved and medians reported.
See bench/README.md for what each table measures.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

from envs import CPU_COMPILERS, Framework, compiler_paths, frameworks
from harness import (
    SETTLE_S,
    Row,
    Worker,
    describe,
    latency,
    machine_line,
    open_workers,
    render_table,
    run_fresh_processes,
    run_rows,
    thread_env,
    throughput,
)

MODULE = "cpu_workloads"
WORKLOADS = ["matmul", "elementwise", "reduce", "dispatch", "jit", "jitcall", "mnistsample", "firstcall"]
# both tinygrad-API frameworks run on their CPU backends (this project's default device is otherwise CL)
DEVICE_ENV = {"tinygrad": {"DEV": "CPU"}, "ours": {"DEV": "CPU"}}


@dataclass(frozen=True)
class Sizes:
    matmul: tuple[int, ...]
    elementwise: int
    reduce: tuple[int, ...]
    dispatch_seconds: float
    jit_kernels: int
    jit_calls: int
    firstcall: int
    rounds: int
    cold_rounds: int
    mnist: tuple[int, int, int] = (60000, 512, 3)  # dataset rows, batch, steps per measurement
    settle_s: float = SETTLE_S  # idle time before each measurement (harness.SETTLE_S says why)


FULL = Sizes(matmul=(256, 1024, 2048), elementwise=16 * 2**20, reduce=(128256, 4_000_000), dispatch_seconds=0.1,
             jit_kernels=100, jit_calls=200, firstcall=1024, rounds=7, cold_rounds=3)
QUICK = Sizes(matmul=(64,), elementwise=2**16, reduce=(5000,), dispatch_seconds=0.005, jit_kernels=10, jit_calls=10,
              firstcall=64, rounds=2, cold_rounds=1, mnist=(2048, 32, 1), settle_s=0.0)
JIT_CALL_LAYERS = 10
JIT_BACK_TO_BACK = 10  # replays per measurement in the jit table's back-to-back rows
REFERENCES = ["numpy", "PyTorch 2.13.0", "tinygrad 0.14.0"]


def _rows(fws: list[Framework], workload: str, **params: object) -> list[Row]:
    return [Row(fw.label, fw, workload, dict(params)) for fw in fws]


def matmul_tables(fws: list[Framework], workers: dict[str, Worker], sizes: Sizes) -> list[str]:
    tables = []
    for n in sizes.matmul:
        flops = 2 * n**3
        inner = max(1, min(50, int(2e9 // flops)))  # ~ tens of ms per measurement at BLAS speed
        rows = _rows(fws, "matmul", n=n, inner=inner)
        run_rows(rows, workers, sizes.rounds, sizes.settle_s)
        tables.append(render_table(f"fp32 matmul N={n}", rows, throughput("GFLOP/s", flops / 1e9), REFERENCES))
    return tables


def elementwise_table(fws: list[Framework], workers: dict[str, Worker], sizes: Sizes) -> str:
    n = sizes.elementwise
    # effective bandwidth: a*b+c reads 3 and writes 1 float32 per element, a copy reads 1 and writes 1
    rows = _rows(fws, "elementwise", n=n)
    copies = [Row(f"{fw.label} copy", fw, "copy", {"n": n}, work=8 * n / 1e9) for fw in fws
              if fw.key in ("numpy", "torch")]
    run_rows(rows + copies, workers, sizes.rounds, sizes.settle_s)
    return render_table(f"fused elementwise a*b+c over {n:,} float32 (16 bytes per element; copy rows 8)",
                        rows + copies, throughput("GB/s", 16 * n / 1e9), ["numpy copy", *REFERENCES])


def reduce_tables(fws: list[Framework], workers: dict[str, Worker], sizes: Sizes) -> list[str]:
    # lengths with an odd factor (a LLaMA-3 vocabulary, 2**8 * 501; 4e6, 2**8 * 15625): not powers of two
    tables = []
    for n in sizes.reduce:
        for op in ("max", "argmax"):
            rows = _rows(fws, "reduce", n=n, op=op)
            run_rows(rows, workers, sizes.rounds, sizes.settle_s)
            tables.append(render_table(f"{op} of {n:,} float32 (one output; GB/s of the input read)", rows,
                                       throughput("GB/s", 4 * n / 1e9), REFERENCES))
    return tables


def dispatch_table(fws: list[Framework], workers: dict[str, Worker], sizes: Sizes) -> str:
    rows = _rows(fws, "dispatch", seconds=sizes.dispatch_seconds)
    run_rows(rows, workers, sizes.rounds, 0.0)  # single-threaded microseconds: back to back (SETTLE_S)
    return render_table(f"eager dispatch: x = x + 1 on {16} floats, realized each time", rows,
                        latency("µs per op", 1e6), REFERENCES)


def jit_table(fws: list[Framework], workers: dict[str, Worker], sizes: Sizes) -> str:
    # one call per measurement: what a training loop's step pays after its other work (the replay's fixed Python
    # cost, cold); the back-to-back rows time JIT_BACK_TO_BACK calls in a row, each on a fresh input, where that
    # fixed cost is warm and the per-kernel cost shows
    rows = [Row(f"{fw.label}{how}", fw, "jit", {"kernels": sizes.jit_kernels, "calls": calls})
            for fw in fws for calls, how in ((1, ""), (JIT_BACK_TO_BACK, f", {JIT_BACK_TO_BACK} calls back to back"))
            if calls == 1 or fw.kind in ("torch", "tinygrad", "ours")]
    run_rows(rows, workers, sizes.rounds, 0.0)  # single-threaded microseconds: back to back (SETTLE_S)
    return render_table(f"TinyJit replay of {sizes.jit_kernels} separately realized x + 1 kernels "
                        "(PyTorch: the same chain in plain eager, no torch.compile)", rows,
                        latency("µs per kernel", 1e6), REFERENCES)


def jit_call_table(fws: list[Framework], workers: dict[str, Worker], sizes: Sizes) -> str:
    rows = [Row(f"{fw.label}{how}", fw, "jit_call", {"layers": JIT_CALL_LAYERS, "calls": sizes.jit_calls,
                                                     "fresh_inputs": fresh})
            for fw in fws for fresh, how in ((True, ""), (False, ", same input"))
            if fresh or fw.kind in ("tinygrad", "ours")]
    run_rows(rows, workers, sizes.rounds, 0.0)  # single-threaded microseconds: back to back (SETTLE_S)
    return render_table(f"a @TinyJit method over {JIT_CALL_LAYERS} Linear(4, 4) layers, called with a new input "
                        "tensor (or the same one again) and an int (PyTorch: the module in plain eager)", rows,
                        latency("µs per call", 1e6), REFERENCES)


def mnist_sample_table(fws: list[Framework], workers: dict[str, Worker], sizes: Sizes) -> str:
    rows_n, batch, steps = sizes.mnist
    rows = [Row(f"{fw.label} {how}", fw, "mnist_sample",
                {"sampling": sampling, "rows": rows_n, "batch": batch, "steps": steps})
            for fw in fws if fw.kind in ("tinygrad", "ours")
            for sampling, how in (("device", "X_train[samples]"), ("host", "host batch"))]
    run_rows(rows, workers, sizes.rounds, sizes.settle_s)
    refs = [r.label for r in rows if r.params["sampling"] == "host"]
    return render_table(f"beautiful_mnist TinyJit step, batch {batch} from {rows_n:,} images: sampled in the step "
                        "(samples = Tensor.randint(...); X_train[samples]) or on the host (numpy, copied in)",
                        rows, latency("ms per step", 1e3), refs)


def firstcall_table(fws: list[Framework], sizes: Sizes) -> str:
    rows = _rows(fws, "firstcall", n=sizes.firstcall)

    def cold_env(row: Row, tmp: str) -> dict[str, str]:
        # every framework's compile cache points into the empty temporary directory
        return {**DEVICE_ENV.get(row.framework.kind, {}), "TINYGRAD_CACHE_DIR": tmp, "CACHEDB": f"{tmp}/cache.db"}
    run_fresh_processes(rows, MODULE, sizes.cold_rounds, cold_env)
    return render_table(f"first realize of a {sizes.firstcall} fp32 matmul in a new process, cold compile cache",
                        rows, latency("ms", 1e3), REFERENCES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes and 2 rounds: checks that it works")
    parser.add_argument("--only", default=",".join(WORKLOADS), help=f"comma-separated subset of {WORKLOADS}")
    parser.add_argument("--frameworks", default="numpy,torch,tinygrad,ours",
                        help="comma-separated subset of numpy,torch,tinygrad,ours")
    parser.add_argument("--compilers", default=",".join(CPU_COMPILERS),
                        help="this project's CPU compiler paths, a row each (CPU_COMPILER=...; the first is the key "
                             "`ours`): comma-separated subset of " + ",".join(CPU_COMPILERS))
    parser.add_argument("--rounds", type=int, help="interleaved rounds per table (default 7; 2 with --quick)")
    parser.add_argument("--threads", type=int, help="pin every framework's CPU threads (default: theirs)")
    parser.add_argument("--no-setup", action="store_true",
                        help="do not make missing venvs; report those frameworks as n/a instead")
    args = parser.parse_args(argv)
    only = [w.strip() for w in args.only.split(",") if w.strip()]
    if unknown := [w for w in only if w not in WORKLOADS]:
        parser.error(f"unknown workload(s) {unknown}; choose from {WORKLOADS}")
    sizes = QUICK if args.quick else FULL
    if args.rounds:
        sizes = Sizes(**{**sizes.__dict__, "rounds": args.rounds})
    fws = compiler_paths(frameworks(args.frameworks.split(","), setup=not args.no_setup),
                         [c.strip() for c in args.compilers.split(",") if c.strip()])

    print("## CPU benchmark\n")
    print(machine_line())
    pinned = thread_env(args.threads)
    if pinned:
        os.environ.update(pinned)  # the workers inherit it, the fresh first-call processes too
    workers = open_workers(fws, MODULE, DEVICE_ENV)
    try:
        print(describe(workers) + "\n", flush=True)
        for fw in fws:
            if fw.python is None:
                print(f"- {fw.label}: {fw.why_missing}")
        steps = {
            "matmul": lambda: matmul_tables(fws, workers, sizes),
            "elementwise": lambda: [elementwise_table(fws, workers, sizes)],
            "reduce": lambda: reduce_tables(fws, workers, sizes),
            "dispatch": lambda: [dispatch_table(fws, workers, sizes)],
            "jit": lambda: [jit_table(fws, workers, sizes)],
            "jitcall": lambda: [jit_call_table(fws, workers, sizes)],
            "mnistsample": lambda: [mnist_sample_table(fws, workers, sizes)],
        }
        for name in only:
            if name in steps:
                for table in steps[name]():
                    print(table, flush=True)
    finally:
        for worker in workers.values():
            worker.close()
    if "firstcall" in only:  # after the long-lived workers are gone, so that they do not share the cores
        print(firstcall_table(fws, sizes), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
