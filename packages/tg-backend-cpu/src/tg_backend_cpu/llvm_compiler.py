"""Compiling LLVM IR in this process with llvmlite: no compiler on the machine, no subprocess, no temporary file.

The IR (llvm_renderer.py) goes through LLVM's O2 pipeline, with the loop and SLP vectorisers and without the loop
unroller (`llvm_workers.PIPELINE`), for this host's CPU and features, and comes out as an object file: bytes kept in
the compile cache as the C path keeps shared objects, and loaded by llvm_loader.py.
"""

from __future__ import annotations

import functools
import os
import threading
from types import ModuleType

from tinygrad.errors import CompileError
from tinygrad.runtime.compiler import Compiler
from tinygrad.runtime.device import COMPILE_WORKERS

from tg_backend_cpu.llvm_workers import (
    LLVM_OPTIONS,
    OK,
    PIPELINE,
    CompileWorkers,
    InvalidIR,
    WorkerDied,
    host_features,
    host_target_machine,
    initialize,
    optimized_module,
)

#: the llvmlite release this backend is written and tested against (pinned in its dependencies)
LLVMLITE_VERSION = "0.50.0"


def llvmlite_binding() -> ModuleType:
    """llvmlite.binding with the native target ready, or an error that says how to install it."""
    try:
        import llvmlite.binding as llvm
    except ImportError as e:
        raise RuntimeError(f"the CPU's LLVM path needs llvmlite, a dependency of tg-backend-cpu: pip install "
                           f"llvmlite=={LLVMLITE_VERSION}; or CPU_COMPILER=clang (or gcc) to build kernels with a C "
                           f"compiler instead") from e
    _initialize(llvm)
    return llvm


@functools.cache
def _initialize(llvm: ModuleType) -> None:
    initialize(llvm)


def llvm_description() -> str:
    """"llvmlite 0.50.0, LLVM 22.1.0" (for messages)."""
    import llvmlite
    import llvmlite.binding as llvm

    return f"llvmlite {llvmlite.__version__}, LLVM {'.'.join(map(str, llvm.llvm_version_info))}"


#: kernels in a batch from which `expect_batch` starts worker processes (their start costs a fraction of a second)
WORKERS_MIN_BATCH = 16


def _process_limit() -> int:
    """$LLVM_COMPILE_PROCESSES: at most this many worker processes (0 or 1: compile in this process)."""
    text = os.environ.get("LLVM_COMPILE_PROCESSES", "").strip()
    if not text:
        return COMPILE_WORKERS
    try:
        return max(0, int(text))
    except ValueError:
        raise ValueError(f"LLVM_COMPILE_PROCESSES={text!r} is not a number: set it to how many compile processes "
                         f"to use (0 compiles in this process), or unset it to use one per core") from None


class LLVMCompiler(Compiler):
    # in process, compiles run one at a time (llvmlite locks every call into LLVM); the kernels of a batch compile
    # in worker processes (llvm_workers.py), as many as there are cores, while this process renders the next ones
    parallel = True

    def __init__(self) -> None:
        self.llvm = llvm = llvmlite_binding()
        self.target_machine = host_target_machine(llvm)
        self._lock = threading.Lock()
        self._workers: CompileWorkers | None = None
        #: worker processes a batch asked for, started by the batch's first compile (0: none wanted)
        self._workers_wanted = 0
        self._start_lock = threading.Lock()
        #: why there are no workers (for tests and DEBUG): a start that failed, or none wanted
        self.workers_note = "no batch yet"
        self.cache_key = (f"cpu-llvm|{llvm_description()}|{llvm.get_process_triple()}|{llvm.get_host_cpu_name()}|"
                          f"{host_features(llvm)}|{PIPELINE}|{' '.join(LLVM_OPTIONS)}")

    def _optimized(self, src: str):  # type: ignore[no-untyped-def]
        """The IR parsed, checked and through the O2 pipeline for this host (call with the lock held)."""
        try:
            return optimized_module(self.llvm, self.target_machine, src)
        except InvalidIR as e:
            raise CompileError(str(e)) from e

    def expect_batch(self, kernels: int) -> None:
        # the workers start at the batch's first compile, not here: a batch whose kernels are all in the compile
        # cache (a second run) compiles nothing, and starting processes would be its only cost
        workers = min(kernels, COMPILE_WORKERS, _process_limit())
        if self._workers is not None or kernels < WORKERS_MIN_BATCH or workers < 2:
            return
        self._workers_wanted = workers
        self.workers_note = f"{workers} worker processes, started by the batch's first compile"

    def end_batch(self) -> None:
        with self._start_lock:
            if self._workers_wanted:  # every kernel was in the cache: a later lone kernel compiles in process
                self._workers_wanted = 0
                self.workers_note = "no worker processes: the last batch compiled nothing"

    def _start_workers(self) -> None:
        # the batch's compile threads arrive here together: one starts the workers, the others wait for them
        with self._start_lock:
            workers = self._workers_wanted
            if workers and self._workers is None:
                try:
                    self._workers = CompileWorkers(workers)
                    self.workers_note = f"{workers} worker processes"
                except OSError as e:  # no fork or exec here (a sandbox, a process limit): compile in process
                    self.workers_note = f"worker processes could not start ({e}); compiling in process"
            self._workers_wanted = 0

    def compile(self, src: str) -> bytes:
        if self._workers_wanted:
            self._start_workers()
        if self._workers is not None:
            try:
                status, payload = self._workers.compile(src)
            except WorkerDied as e:
                self.workers_note = f"{e}; compiling in process"
            else:
                if status != OK:
                    raise CompileError(payload.decode(errors="replace"))
                return payload
        with self._lock:
            return bytes(self.target_machine.emit_object(self._optimized(src)))

    def disassemble(self, lib: bytes, src: str) -> str | None:
        # llvmlite has no disassembler for the object: the same pipeline on the same IR, printed as assembly
        # instead, is the same code
        with self._lock:
            return str(self.target_machine.emit_assembly(self._optimized(src)))
