"""Training benchmark: the beautiful_mnist model on Fashion-MNIST in PyTorch 2.13, tinygrad 0.14.0 and
this project, same data, same batches, same model, Adam, batch 512.

    python bench/mnist.py                  # 70 steps each, then on to 85% test accuracy (capped)
    python bench/mnist.py --quick          # a few tiny steps: checks that it works

Each framework trains in a new worker process with a cold compile cache. The frameworks take turns,
one chunk of steps each (interleaved), and test accuracy is measured after every chunk (not counted
as training time). Reported: the median train step (steps 3 onwards: a JIT captures on step 2),
the first step (compile included, cold cache), test accuracy after --steps, and the training
wall time until test accuracy first reaches --target (checked after each chunk).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

import fashion_mnist
from envs import CPU_COMPILERS, Framework, compiler_paths, frameworks
from harness import Worker, describe, machine_line, thread_env

MODULE = "mnist_workloads"


@dataclass
class Run:
    framework: Framework
    step_times: list[float] = field(default_factory=list)
    accuracy_at: dict[int, float] = field(default_factory=dict)  # steps done -> test accuracy
    time_to_target: float | None = None
    note: str = ""
    done: bool = False

    def median_step(self) -> float | None:
        steady = self.step_times[2:] or self.step_times
        return statistics.median(steady) if steady else None


def _fmt_seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g} s"


def _ratio(value: float | None, reference: float | None) -> str:
    return "" if value is None or not reference else f" ({value / reference:.2f}x)"


def render(runs: list[Run], steps: int, target: float, max_steps: int) -> str:
    torch_run = next((r for r in runs if r.framework.key == "torch"), None)
    ref_step = torch_run.median_step() if torch_run else None
    ref_time = torch_run.time_to_target if torch_run else None
    lines = ["### beautiful_mnist on Fashion-MNIST (ratios in brackets: vs PyTorch 2.13.0, lower is better)", "",
             f"| framework | median train step | first step (cold cache) | test accuracy after {steps} steps | "
             f"training time to {target:.0%} test accuracy | steps run |",
             "|---|---:|---:|---:|---:|---:|"]
    for run in runs:
        if run.note and not run.step_times:
            lines.append(f"| {run.framework.label} | {run.note} | | | | |")
            continue
        first = run.step_times[0] if run.step_times else None
        accuracy = run.accuracy_at.get(steps)
        last_step = max(run.accuracy_at, default=0)
        accuracy_text = (f"{accuracy:.1%}" if accuracy is not None else
                         f"n/a ({run.accuracy_at[last_step]:.1%} at step {last_step})" if last_step else "n/a")
        reached = (f"{run.time_to_target:.3g} s{_ratio(run.time_to_target, ref_time)}"
                   if run.time_to_target is not None else f"not reached in {len(run.step_times)} steps")
        lines.append(f"| {run.framework.label} | {_fmt_seconds(run.median_step())}{_ratio(run.median_step(), ref_step)}"
                     f" | {_fmt_seconds(first)} | {accuracy_text} | {reached} | "
                     f"{len(run.step_times)}{' (' + run.note + ')' if run.note else ''} |")
    return "\n".join(lines) + f"\n\nAccuracy is checked every chunk of steps; runs stop at {max_steps} steps.\n"


def train_all(fws: list[Framework], params: dict[str, Any], steps: int, target: float, max_steps: int,
              budget_s: float) -> list[Run]:
    runs = [Run(fw, note=fw.why_missing) for fw in fws]
    with tempfile.TemporaryDirectory(prefix="tg-bench-mnist-") as cold:
        workers: dict[str, Worker] = {}
        for run in runs:
            if run.framework.python is None:
                run.done = True
                continue
            # each framework's compile cache starts empty, so the first step includes every compile
            cache = f"{cold}/{run.framework.key}"
            workers[run.framework.key] = Worker(run.framework, MODULE, {
                "DEV": "CPU", "TINYGRAD_CACHE_DIR": cache, "CACHEDB": f"{cache}/cache.db"})
        try:
            print(describe(workers) + "\n", flush=True)
            for run in runs:
                if run.done:
                    continue
                reply = workers[run.framework.key].call(op="setup", id="train", workload="train", params=params)
                if "ok" not in reply:
                    run.note, run.done = _why(reply), True
            while not all(run.done for run in runs):
                for run in runs:  # interleaved: one chunk per framework in turn
                    if not run.done:
                        _train_chunk(run, workers[run.framework.key], steps, target, max_steps, budget_s)
        finally:
            for worker in workers.values():
                worker.close()
    return runs


def _why(reply: dict[str, Any]) -> str:
    if "na" in reply:
        return f"n/a ({reply['na']})"
    print(f"[bench] error:\n{reply.get('error')}", file=sys.stderr)
    return f"error: {str(reply.get('error', '')).strip().splitlines()[-1][:100]}"


def _train_chunk(run: Run, worker: Worker, steps: int, target: float, max_steps: int, budget_s: float) -> None:
    reply = worker.call(op="measure", id="train")
    if "result" not in reply:
        run.note, run.done = _why(reply), True
        return
    result = reply["result"]
    run.step_times.extend(result["step_times"])
    done_steps, accuracy = result["steps"], result["accuracy"]
    run.accuracy_at[done_steps] = accuracy
    print(f"[bench] {run.framework.label}: step {done_steps}, loss {result['loss']:.3f}, test accuracy "
          f"{accuracy:.1%}, last step {result['step_times'][-1]:.3g} s", file=sys.stderr, flush=True)
    if run.time_to_target is None and accuracy >= target:
        run.time_to_target = sum(run.step_times)
    past_fixed = done_steps >= steps
    if past_fixed and (run.time_to_target is not None or done_steps >= max_steps):
        run.done = True
    elif sum(run.step_times) > budget_s:
        run.note, run.done = f"stopped at the {budget_s:.0f} s training budget", True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="batch 32, 4 steps, 200 test images")
    parser.add_argument("--frameworks", default="torch,tinygrad,ours", help="subset of torch,tinygrad,ours")
    parser.add_argument("--steps", type=int, default=70, help="report test accuracy after this many steps")
    parser.add_argument("--target", type=float, default=0.85, help="test accuracy to time training to")
    parser.add_argument("--max-steps", type=int, default=300, help="give up on --target after this many steps")
    parser.add_argument("--budget", type=float, default=900.0,
                        help="seconds of training per framework after which it stops (slow frameworks)")
    parser.add_argument("--chunk", type=int, default=10, help="steps per turn; test accuracy is checked after each")
    parser.add_argument("--threads", type=int, help="pin every framework's CPU threads (default: theirs)")
    parser.add_argument("--compilers", default=",".join(CPU_COMPILERS),
                        help="this project's CPU compiler paths, a row each (CPU_COMPILER=...): comma-separated "
                             "subset of " + ",".join(CPU_COMPILERS))
    parser.add_argument("--no-setup", action="store_true", help="do not make missing venvs; report n/a instead")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.max_steps, args.chunk = 4, 4, 2
    if args.steps % args.chunk:
        parser.error(f"--steps ({args.steps}) must be a multiple of --chunk ({args.chunk}) to measure accuracy there")
    print("## Training benchmark\n")
    print(machine_line() + "\n")
    if (why := fashion_mnist.missing_reason()) is not None:
        print(f"skipped: {why}")
        return 0
    params = {"batch": 32 if args.quick else 512, "lr": 1e-3, "chunk": args.chunk,
              "test_limit": 200 if args.quick else 10000, "seed": 0}
    os.environ.update(thread_env(args.threads))  # the workers inherit it
    fws = compiler_paths(frameworks(args.frameworks.split(","), setup=not args.no_setup),
                         [c.strip() for c in args.compilers.split(",") if c.strip()])
    runs = train_all(fws, params, args.steps, args.target, args.max_steps, args.budget)
    print(render(runs, args.steps, args.target, args.max_steps), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
