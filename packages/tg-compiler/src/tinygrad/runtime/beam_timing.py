"""`BEAM=n` on a device: time candidate opts of one kernel by compiling and launching them with scratch buffers.
The search (which candidates, the cache of chosen opts) is `tinygrad.codegen.beam`; this is its clock."""

from __future__ import annotations

import contextlib
import math
import sys
from typing import Any, Protocol

from tinygrad.codegen import get_program
from tinygrad.codegen.beam import beam_cache_key, beam_opts, beam_search
from tinygrad.codegen.lowerer import lower_kernel
from tinygrad.codegen.opt import Opt, OptError, OptState, apply_opt
from tinygrad.device import Allocator
from tinygrad.errors import CompileError
from tinygrad.helpers import DEBUG
from tinygrad.renderer import Renderer
from tinygrad.runtime.compiler import Compiler
from tinygrad.runtime.runner import ProgramFactory
from tinygrad.uop.ops import Ops, UOp

#: launches per candidate; the fastest counts (the first may pay for a cold cache)
TIMING_RUNS = 3


class TimingDevice(Protocol):
    """What timing needs of a device: `Compiled` is one."""

    name: str
    allocator: Allocator
    renderer: Renderer
    compiler: Compiler
    runtime: ProgramFactory


class KernelTimer:
    """Compiles and times opt lists for one kernel on one device, with scratch buffers it owns."""

    def __init__(self, ast: UOp, device: TimingDevice):
        self.ast, self.device = ast, device
        params = sorted({u.arg.slot: u for u in ast.toposort() if u.op is Ops.PARAM}.items())
        self.buffers: list[tuple[Any, int]] = []
        for _, p in params:
            nbytes = max(int(p.arg.size) * p.dtype.itemsize, 1)
            buf = device.allocator.alloc(nbytes)
            device.allocator.copyin(buf, memoryview(bytes(nbytes)))  # zeros: no NaN or denormal slow paths
            self.buffers.append((buf, nbytes))
        self.index_of = {i: n for n, (i, _) in enumerate(params)}
        self.var_max = {u.arg.name: int(u.arg.vmax) for u in ast.toposort() if u.op is Ops.DEFINE_VAR}

    def time(self, opts: tuple[Opt, ...]) -> float:
        """Seconds of the fastest of TIMING_RUNS launches with `opts`; inf where they fail to apply, build or run."""
        try:
            spec = get_program(self.ast, self.device.renderer, opts)
            lib = self.device.compiler.compile_cached(spec.src)
            program = self.device.runtime(spec, lib)
            args = [self.buffers[self.index_of[i]][0] for i in spec.param_indices]
            vals = tuple(self.var_max[n] for n in spec.var_names)
            times = []
            for _ in range(TIMING_RUNS):
                t = program(*args, global_size=spec.global_size, local_size=spec.local_size, vals=vals, wait=True)
                times.append(float(t) if t is not None else math.inf)
            return min(times)
        except (OptError, CompileError, RuntimeError) as e:
            if DEBUG >= 4:
                print(f"BEAM: {[str(o) for o in opts]} failed: {e}", file=sys.stderr)
            return math.inf

    def free(self) -> None:
        for buf, nbytes in self.buffers:
            with contextlib.suppress(Exception):
                self.device.allocator.free(buf, nbytes)


def timed_search(device: TimingDevice, ast: UOp, lowered: UOp, width: int) -> tuple[Opt, ...]:
    """The search's pick for this kernel on this device, timing every candidate (no cache)."""
    timer = KernelTimer(ast, device)
    try:
        return beam_search(lowered, device.renderer, timer.time, width)
    finally:
        timer.free()


def searched_opts(device: TimingDevice, ast: UOp, width: int) -> tuple[Opt, ...]:
    """BEAM=width: the opts the search picks for this kernel on this device (cached on disk). An entry that no
    longer applies (the kernel's axes changed meaning) is searched again."""
    lowered = lower_kernel(ast)
    key = beam_cache_key(ast, device.name, device.renderer, getattr(device.compiler, "cache_key", ""), width)
    opts = beam_opts(key, lambda: timed_search(device, ast, lowered, width))
    try:
        state = OptState.from_lowered(lowered)
        for o in opts:
            state = apply_opt(state, o, device.renderer)
    except OptError:
        opts = timed_search(device, ast, lowered, width)
    return opts


__all__ = ["TIMING_RUNS", "KernelTimer", "TimingDevice", "searched_opts", "timed_search"]
