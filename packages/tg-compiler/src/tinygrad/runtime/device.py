"""The `Compiled` device base: what a backend plugs its renderer, compiler, allocator and program factory into.
Core asks a device for a runner (`get_runner(ast)`); this turns the AST into a program (codegen), compiles it once
(with an on-disk cache), loads it with its ProgramSpec and launches it with the schedule's buffers.
DEBUG>=7 prints each compiled kernel's assembly, where the device's compiler can give it (`Compiler.disassemble`).
"""

from __future__ import annotations

import concurrent.futures
import os
import time
from collections.abc import Callable
from typing import Any

from tinygrad.codegen import ProgramSpec, get_program
from tinygrad.device import Allocator, DeviceKnobs
from tinygrad.dtype import DType, dtypes
from tinygrad.engine import profile
from tinygrad.helpers import BEAM, NOOPT, PROFILE
from tinygrad.renderer import Renderer
from tinygrad.runtime.beam_timing import searched_opts
from tinygrad.runtime.compiler import Compiler
from tinygrad.runtime.runner import CompiledRunner, ProgramFactory
from tinygrad.uop.ops import UOp

#: compiler threads of `Compiled.precompile`: the cores this process may run on
COMPILE_WORKERS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class Compiled:
    """A device made of the four pieces of the contract. Backends subclass or instantiate this. `runtime` loads a
    program from a kernel's ProgramSpec and the binary the compiler made of its source (`ProgramFactory`)."""

    #: tinygrad's devices name a graph-runner class here (None: none); a TinyJit replay here batches launches through
    #: the backend's `run_together` instead, so there is never one
    graph: None = None

    def __init__(self, name: str, allocator: Allocator, renderer: Renderer, compiler: Compiler,
                 runtime: ProgramFactory):
        self.name, self.allocator, self.renderer = name, allocator, renderer
        self.compiler, self.runtime = compiler, runtime
        self._runners: dict[UOp, CompiledRunner] = {}

    def supports_dtype(self, dtype: DType) -> bool:
        return self.renderer.supports_dtype(dtype)

    @property
    def knobs(self) -> DeviceKnobs:
        """What the renderer declares about the target, for core's layout pass (engine/layout.py) to read."""
        return self.renderer.knobs

    def get_runner(self, ast: UOp) -> CompiledRunner:
        if (hit := self._runners.get(ast)) is not None:
            return hit
        spec = self._program(ast)
        runner = self.runner_from(spec, self._compile(spec))
        self._runners[ast] = runner
        return runner

    def runner_from(self, spec: ProgramSpec, lib: bytes) -> CompiledRunner:
        """A runner for `lib`, which this device's compiler made from `spec` (now, or in a process that pickled
        it)."""
        return CompiledRunner(self, spec, lib)

    def precompile(self, asts: list[UOp]) -> None:
        """Build the runners of kernels about to run, compiling concurrently where the compiler allows it: the
        first step of a training loop compiles about a hundred kernels, each mostly a compiler process that
        waits on nothing but a core. Rendering stays sequential (it is Python), and each kernel's compile starts as
        soon as it is rendered, so the compilers work while the next kernels render; errors surface as in
        get_runner."""
        todo = [ast for ast in dict.fromkeys(asts) if ast not in self._runners]
        workers = min(len(todo), COMPILE_WORKERS)
        if not self.compiler.parallel or workers < 2:
            return
        self.compiler.expect_batch(len(todo))
        try:
            with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="tg-compile") as pool:
                builds = [pool.submit(job) for job in self.background_builds()]
                pending = []
                for ast in todo:
                    spec = self._program(ast)
                    pending.append((ast, spec, pool.submit(self._compile, spec)))
                for ast, spec, lib in pending:
                    self._runners.setdefault(ast, self.runner_from(spec, lib.result()))
                for build in builds:
                    build.result()
        finally:
            self.compiler.end_batch()

    def _compile(self, spec: ProgramSpec) -> bytes:
        if not PROFILE:
            return self.compiler.compile_cached(spec.src)
        st = time.perf_counter()
        lib = self.compiler.compile_cached(spec.src)
        profile.record_compile(self.name, spec.name, st, time.perf_counter() - st, type(self.compiler).__name__)
        return lib

    def background_builds(self) -> list[Callable[[], Any]]:
        """One-off builds the first launches need besides their kernels (the CPU backend's thread pool library):
        `precompile` runs them in its compile threads while the kernels render."""
        return []

    def _program(self, ast: UOp) -> ProgramSpec:
        unsupported = sorted({u.dtype.scalar.name for u in ast.toposort()
                              if u.dtype.kind != "void" and u.dtype != dtypes.index
                              and not self.renderer.supports_dtype(u.dtype)})  # index: typed by the compiler
        if unsupported:
            ok = [d.name for d in dtypes.all() if self.renderer.supports_dtype(d)]
            raise TypeError(f"device {self.name} cannot compute with {', '.join(unsupported)}; it supports {ok}. "
                            f"Cast to a supported dtype first, or use a device that has {unsupported[0]}")
        return get_program(ast, self.renderer, searched_opts(self, ast, int(BEAM)) if BEAM and not NOOPT else None)

    def synchronize(self) -> None:
        pass


__all__ = ["COMPILE_WORKERS", "Compiled"]
