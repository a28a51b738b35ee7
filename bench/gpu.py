"""GPU-style benchmark: a fused elementwise kernel and a reduction on one device, beside that device's
own buffer-to-buffer copy, and the compile + first-launch latency of a kernel with a cold cache.

    python bench/gpu.py                    # every device in --device (default CL,WEBGPU)
    python bench/gpu.py --device CL --quick

Rows: this project and tinygrad 0.14.0 on the device, the device's native copy (pyopencl
enqueue_copy or wgpu copy_buffer_to_buffer, measured through this project's backend objects),
and numpy on the host CPU for scale. A device that does not open is skipped with its reason.
"""

from __future__ import annotations

import argparse
import sys

from envs import Framework, frameworks
from harness import (
    SETTLE_S,
    Row,
    describe,
    latency,
    machine_line,
    open_workers,
    render_table,
    run_fresh_processes,
    run_rows,
    throughput,
)

MODULE = "gpu_workloads"


def _labelled(fws: list[Framework], workload: str, n: int, device: str) -> list[Row]:
    rows = []
    for fw in fws:
        label = f"{fw.label} (host CPU)" if fw.key == "numpy" else f"{fw.label} on {device}"
        rows.append(Row(label, fw, workload, {"n": n}))
    return rows


def device_tables(device: str, fws: list[Framework], n: int, first_n: int, rounds: int,
                  settle_s: float = SETTLE_S) -> list[str]:
    on_device = [fw for fw in fws if fw.key != "numpy"]
    workers = open_workers(fws, MODULE, {fw.key: {"DEV": device} for fw in on_device})
    ours = next((fw for fw in fws if fw.key == "ours"), None)
    try:
        if ours is None or ours.key not in workers:
            return [f"{device}: skipped (this project's framework is not selected or not installed)\n"]
        probe = workers[ours.key].call(op="setup", id="probe", workload="probe", params={})
        if "ok" not in probe:
            return [f"### {device}\n\nskipped: {probe.get('na') or probe.get('error', '').strip().splitlines()[-1]}\n"]
        print(describe(workers) + "\n", flush=True)
        copy_label = f"{device} copy (native)"
        ref_names = [copy_label, "numpy (host CPU)", f"tinygrad 0.14.0 on {device}"]
        tables = []
        for workload, title, bytes_per_element in (("elementwise", "fused elementwise a*b+c", 16),
                                                    ("reduce", "reduction sum()", 4)):
            rows = _labelled(fws, workload, n, device)
            copy = Row(copy_label, ours, "devcopy", {"n": n}, work=8 * n / 1e9)
            run_rows(rows + [copy], workers, rounds, settle_s)
            tables.append(render_table(f"{device}: {title} over {n:,} float32 ({bytes_per_element} bytes per "
                                       "element; the copy row 8)", rows + [copy],
                                       throughput("GB/s", bytes_per_element * n / 1e9), ref_names))
    finally:
        for worker in workers.values():
            worker.close()
    first = [row for row in _labelled(on_device, "firstlaunch", first_n, device)]
    run_fresh_processes(first, MODULE, max(1, rounds // 3),
                        lambda row, tmp: {"DEV": device, "TINYGRAD_CACHE_DIR": tmp, "CACHEDB": f"{tmp}/cache.db"})
    tables.append(render_table(f"{device}: compile + first launch of a*b+c over {first_n:,} float32, new process, "
                               "cold compile cache", first, latency("ms", 1e3), ref_names))
    return tables


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", action="append", help="CL or WEBGPU; repeatable (default: both)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes and 2 rounds: checks that it works")
    parser.add_argument("--frameworks", default="numpy,tinygrad,ours", help="subset of numpy,tinygrad,ours")
    parser.add_argument("--rounds", type=int, help="interleaved rounds per table (default 7; 2 with --quick)")
    parser.add_argument("--no-setup", action="store_true", help="do not make missing venvs; report n/a instead")
    args = parser.parse_args(argv)
    devices = [d.upper() for spec in (args.device or ["CL,WEBGPU"]) for d in spec.split(",") if d]
    n, first_n = (2**16, 2**12) if args.quick else (16 * 2**20, 2**20)
    rounds = args.rounds or (2 if args.quick else 7)
    fws = frameworks(args.frameworks.split(","), setup=not args.no_setup)
    print("## GPU-style benchmark\n")
    print(machine_line() + "\n")
    for fw in fws:
        if fw.python is None:
            print(f"- {fw.label}: {fw.why_missing}")
    for device in devices:
        for table in device_tables(device, fws, n, first_n, rounds, 0.0 if args.quick else SETTLE_S):
            print(table, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
