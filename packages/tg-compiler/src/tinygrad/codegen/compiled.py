"""The `Compiled` device base: what a backend plugs its renderer, compiler, allocator and program
launcher into. Core asks a device for a runner (`get_runner(ast)`); this turns the AST into a program
(codegen), compiles it once (with an on-disk cache) and launches it with the schedule's buffers.
DEBUG>=7 prints each compiled kernel's assembly, where the device's compiler can give it (`Compiler.disassemble`).
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from tinygrad.codegen import ProgramSpec, get_program
from tinygrad.codegen.beam import BEAM, beam_opts, beam_search
from tinygrad.codegen.lowerer import lower_kernel
from tinygrad.codegen.opt import Opt, OptError, OptState, apply_opt
from tinygrad.device import Allocator, Buffer, DeviceKnobs
from tinygrad.dtype import DType, dtypes
from tinygrad.engine import profile
from tinygrad.helpers import (
    DEBUG,
    DISABLE_COMPILER_CACHE,
    NOOPT,
    PROFILE,
    cache_dir,
    disk_cache_get,
    disk_cache_put,
)
from tinygrad.renderer import Renderer
from tinygrad.uop.ops import UOp


class CompileError(RuntimeError):
    pass


#: compiler threads of `Compiled.precompile`: the cores this process may run on
COMPILE_WORKERS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class Compiler:
    """`compile(src) -> bytes`. `cache_key` must change whenever the output for the same source could."""

    cache_key: str = ""
    #: whether compile() may run in several threads at once (a compiler run as a subprocess, which also leaves
    #: the GIL); `Compiled.precompile` then builds the kernels of a schedule concurrently
    parallel: bool = False

    def compile(self, src: str) -> bytes:
        raise NotImplementedError

    def expect_batch(self, kernels: int) -> None:
        """`Compiled.precompile` is about to compile `kernels` kernels concurrently (a parallel compiler only): a
        compiler that compiles in process can start helpers here (the CPU backend's LLVM path starts worker
        processes). Optional; the default does nothing."""

    def end_batch(self) -> None:
        """The batch `expect_batch` announced is built (its kernels compiled or read from the cache): helpers that
        were to start for it, and have not, need not start for a later kernel. Optional; the default does nothing."""

    #: why `disassemble` gives nothing, for DEBUG>=7 to say (a compiler that has no assembly to show sets it)
    no_assembly_reason: str = ""

    def disassemble(self, lib: bytes, src: str) -> str | None:
        """The assembly of `lib`, which `compile(src)` made (DEBUG>=7 prints it); None: this device gives none.
        `src` is there for compilers that can only show assembly by building the source again."""
        return None

    def compile_cached(self, src: str) -> bytes:
        if DISABLE_COMPILER_CACHE or not self.cache_key:
            return self.compile(src)
        return disk_cache_get_or_make(self.cache_key, src, lambda: self.compile(src))


def disk_cache_get_or_make(namespace: str, src: str, make: Callable[[], bytes]) -> bytes:
    """A content-addressed cache of compiled binaries, in the `compile` table of the disk cache (`helpers`).

    The key is the compiler's `namespace` and the source, and the disk cache binds each entry to its key and checks
    it on every read: an entry that is corrupt, truncated, not a regular file, or was written for another source
    (a file copied or renamed in the cache) is never served; it is rebuilt and overwritten. A cache that cannot be
    written is warned about once and compiling goes on.
    """
    key = f"{namespace}\0{src}"
    if (payload := disk_cache_get("compile", key)) is not None:
        return payload
    payload = make()
    disk_cache_put("compile", key, payload)
    return payload


class Program(Protocol):
    def __call__(self, *bufs: Any, global_size: tuple[int, ...] | None = None,
                 local_size: tuple[int, ...] | None = None, vals: tuple[int, ...] = (),
                 wait: bool = False) -> float | None: ...


class CompiledRunner:
    """A compiled kernel, ready to launch on the buffers of a schedule item."""

    def __init__(self, device: Compiled, spec: ProgramSpec, lib: bytes):
        self.spec, self.lib = spec, lib
        self.device_name = device.name
        #: what made `lib`: the compiler's class and its cache key, which changes whenever its output could
        self.made_by = compiler_identity(device.compiler)
        self.display_name = spec.name
        self.global_size, self.local_size = spec.global_size, spec.local_size
        self.estimated_ops, self.estimated_bytes = spec.estimated_ops, spec.estimated_bytes
        self.program = device.runtime(spec.name, lib)
        if DEBUG >= 7:
            asm = device.compiler.disassemble(lib, spec.src)
            reason = getattr(device.compiler, "no_assembly_reason", "")
            print(asm.rstrip("\n") if asm is not None else
                  f"{spec.name}: no assembly: {device.name}'s compiler ({type(device.compiler).__name__}) gives none"
                  + (f" ({reason})" if reason else ""), file=sys.stderr)

    def __reduce__(self) -> tuple:
        # the compiled program, not the loaded one (a handle into this process): loading hands `lib` to the
        # device's runtime again, and compiles nothing
        return _runner_from_pickle, (self.device_name, self.made_by, self.spec, self.lib)

    def __call__(self, bufs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
        args = [bufs[i].opaque for i in self.spec.param_indices]
        return self.program(*args, global_size=self.global_size, local_size=self.local_size,
                            vals=tuple(var_vals[name] for name in self.spec.var_names), wait=wait)

    def launcher(self) -> Callable[[list[Buffer]], Any]:
        """A launch function for a kernel without symbolic variables, taking its schedule item's buffers: the eager
        dispatch cache (engine/dispatch.py) calls it once per realize. A program may offer `launcher(global_size,
        local_size)`, taking the buffers in parameter order, to do less per call."""
        if self.spec.var_names:
            raise ValueError(f"kernel {self.display_name} takes symbolic values: launch it with its var_vals")
        order = self.spec.param_indices
        if (fast := getattr(self.program, "launcher", None)) is not None:
            run = fast(self.global_size, self.local_size)
            if list(order) == list(range(len(order))):
                return run  # type: ignore[no-any-return]
            return lambda bufs: run([bufs[i] for i in order])
        return lambda bufs: self(bufs, {})

    def prepare(self, bufs: list[Buffer], var_vals: dict[str, int]) -> Callable[[], float | None]:
        """This launch with its arguments resolved once: TinyJit replays the returned callable, so a replay does no
        per-kernel lookups. A program may offer `prepare(*bufs, global_size=, local_size=, vals=)` to do more."""
        args = [bufs[i].opaque for i in self.spec.param_indices]
        vals = tuple(var_vals[name] for name in self.spec.var_names)
        if (prep := getattr(self.program, "prepare", None)) is not None:
            return prep(*args, global_size=self.global_size, local_size=self.local_size, vals=vals)
        return functools.partial(self.program, *args, global_size=self.global_size, local_size=self.local_size,
                                 vals=vals)


class ProgramMismatchError(RuntimeError):
    """A compiled program (from a pickle) that this machine's device cannot be trusted to run."""


def compiler_identity(compiler: Compiler) -> tuple[str, str]:
    kind = type(compiler)
    return f"{kind.__module__}.{kind.__qualname__}", compiler.cache_key


def _runner_from_pickle(device_name: str, made_by: tuple[str, str], spec: ProgramSpec, lib: bytes) -> CompiledRunner:
    """CompiledRunner.__reduce__'s inverse. The binary runs only where the same compiler with the same key (the
    key of the compile cache: compiler version, flags, target CPU and its features, driver) would have made it;
    anything else is refused rather than run, since another CPU's instructions or another driver's binary could
    crash or compute wrongly."""
    from tinygrad.device import Device

    try:
        device = Device[device_name]
    except Exception as e:
        raise ProgramMismatchError(f"kernel {spec.name} was compiled for device {device_name}, which cannot be "
                                   f"opened here ({type(e).__name__}: {e}); load it on a machine with that "
                                   f"device") from e
    here = compiler_identity(device.compiler) if isinstance(device, Compiled) else None
    if here != made_by or not isinstance(device, Compiled):
        what = f"{here[0]} with key {here[1]!r}" if here is not None else f"no compiler ({type(device).__name__})"
        raise ProgramMismatchError(f"kernel {spec.name} was compiled for {device_name} by {made_by[0]} with key "
                                   f"{made_by[1]!r}, and {device_name} here compiles with {what}: the binary "
                                   f"may not run on this machine (another CPU or CPU features, compiler, flags or "
                                   f"driver). Capture and pickle it again on this machine")
    return device.runner_from(spec, lib)


class Compiled:
    """A device made of the four pieces of the contract. Backends subclass or instantiate this."""

    #: tinygrad's devices name a graph-runner class here (None: none); a TinyJit replay here batches launches through
    #: the backend's `run_together` instead, so there is never one
    graph: None = None

    def __init__(self, name: str, allocator: Allocator, renderer: Renderer, compiler: Compiler,
                 runtime: Callable[[str, bytes], Program]):
        self.name, self.allocator, self.renderer = name, allocator, renderer
        self.compiler, self.runtime = compiler, runtime
        self._runners: dict[UOp, CompiledRunner] = {}

    def supports_dtype(self, dtype: DType) -> bool:
        return self.renderer.supports_dtype(dtype)

    @property
    def knobs(self) -> DeviceKnobs:
        """What the renderer declares about the target, for core (the conv gradient's and matmul's layouts) to read."""
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
        return get_program(ast, self.renderer, self._searched_opts(ast) if BEAM and not NOOPT else None)

    def _searched_opts(self, ast: UOp) -> tuple[Opt, ...]:
        """BEAM=n: the opts the search picks for this kernel on this device (cached on disk). An entry that no
        longer applies (the kernel's axes changed meaning) is searched again."""
        lowered = lower_kernel(ast)
        opts = beam_opts(ast, lowered, self, int(BEAM))
        try:
            state = OptState.from_lowered(lowered)
            for o in opts:
                state = apply_opt(state, o, self.renderer)
        except OptError:
            opts = beam_search(ast, lowered, self, int(BEAM))
        return opts

    def synchronize(self) -> None:
        pass


def cache_path_for_tests() -> Path:
    return cache_dir() / "compile"
