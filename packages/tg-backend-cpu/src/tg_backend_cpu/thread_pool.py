"""The CPU backend's thread pool, written in C (thread_pool.c) and driven with one ctypes call per launch; on the
LLVM path the same pool written in LLVM IR (llvm_pool.py), so that no C compiler is needed.

The source is compiled once per machine by the path's compiler (the C compiler, or llvmlite) and kept in the
compile cache like a kernel. The pool's threads start on the first launch that wants them, sleep when idle, and are
joined when the pool is garbage collected. After `os.fork()` the child has none of the parent's threads: its pools
start anew.
"""

from __future__ import annotations

import ctypes
import functools
import os
import weakref
from collections.abc import Sequence
from importlib import resources
from typing import Any

from tg_backend_cpu.loader import load_library
from tg_backend_cpu.thread_count import still_usable

#: how long an idle worker (and a caller waiting for workers) spins before sleeping: long enough to catch the next
#: launch of a run of kernels without a sleep/wake round trip, short enough that an idle pool costs no CPU
SPIN_NS = 50_000


def pool_source() -> str:
    return resources.files("tg_backend_cpu").joinpath("thread_pool.c").read_text()


def native_pool_available() -> bool:
    """Whether this machine can build the native pool: on the LLVM path wherever POSIX threads exist, on the C path
    with its C compiler (without one the device runs slices on Python threads: py_thread_pool.py)."""
    from tg_backend_cpu.compiler import find_c_compiler, uses_llvm

    if uses_llvm():
        from tg_backend_cpu.llvm_pool import available

        return available()
    return find_c_compiler()[0] is not None


@functools.cache
def pool_library() -> Any:
    """The pool's functions (ctypes callables named as in thread_pool.c), built by the path's compiler."""
    from tg_backend_cpu.compiler import uses_llvm

    if uses_llvm():
        from tg_backend_cpu.llvm_pool import llvm_pool_library

        return llvm_pool_library()
    return c_pool_library()


@functools.cache
def c_pool_library() -> ctypes.CDLL:
    """thread_pool.c built by the C compiler."""
    from tg_backend_cpu.compiler import CCompiler

    lib = load_library(CCompiler().compile_cached(pool_source()))
    lib.tg_pool_create.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    lib.tg_pool_create.restype = ctypes.c_void_p
    lib.tg_pool_size.argtypes = [ctypes.c_void_p]
    lib.tg_pool_size.restype = ctypes.c_int
    lib.tg_pool_pinned.argtypes = [ctypes.c_void_p]
    lib.tg_pool_pinned.restype = ctypes.c_int
    lib.tg_pool_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_longlong),
                                ctypes.c_longlong, ctypes.c_int]
    lib.tg_pool_run.restype = ctypes.c_int
    lib.tg_pool_destroy.argtypes = [ctypes.c_void_p]
    lib.tg_pool_destroy.restype = None
    lib.tg_run_all.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong]
    lib.tg_run_all.restype = None
    return lib


class NativeLaunch(ctypes.Structure):
    """thread_pool.c's tg_launch: a kernel's whole and slice entry points, its argument array, its slices."""

    _fields_ = [("run", ctypes.c_void_p), ("slice", ctypes.c_void_p), ("args", ctypes.c_void_p),
                ("parts", ctypes.c_longlong)]


class ThreadPool:
    """`n_threads` threads for kernel slices: the caller of `run` and n_threads - 1 workers. With `cpus` (one per
    thread, see `thread_count.pinned_cpus`) there is one worker bound to each CPU instead, and a launch uses the
    workers on the other CPUs than the caller's. `library`: the pool functions to use (`c_pool_library()` or
    `llvm_pool.llvm_pool_library()`); by default the device's path's (`pool_library()`)."""

    def __init__(self, n_threads: int, spin_ns: int = SPIN_NS, cpus: Sequence[int] = (), library: Any = None):
        if n_threads < 1:
            raise ValueError(f"a thread pool needs at least one thread, got {n_threads}")
        if cpus and len(cpus) != n_threads:
            raise ValueError(f"a pinned pool of {n_threads} threads needs {n_threads} CPUs, got {list(cpus)}")
        self.n_threads, self.spin_ns, self.cpus = n_threads, spin_ns, tuple(cpus)
        self._library = library
        self._handle: int | None = None
        self._run: ctypes._NamedFuncPointer | None = None
        self._finalizer: weakref.finalize | None = None
        _pools.add(self)

    @property
    def started(self) -> bool:
        return self._handle is not None

    @property
    def pinned(self) -> bool:
        """Whether the workers are bound to CPUs (known once the pool started; the system may refuse)."""
        return bool(self.library().tg_pool_pinned(self._handle)) if self._handle is not None else bool(self.cpus)

    def size(self) -> int:
        """Threads a job can use: the requested number, or fewer if the system refused some when they started."""
        return self.library().tg_pool_size(self._handle) if self._handle is not None else self.n_threads

    def library(self) -> Any:
        """The pool functions this pool runs on."""
        return self._library if self._library is not None else pool_library()

    def _start(self) -> int:
        lib = self.library()
        bind = still_usable(self.cpus)
        cpus = (ctypes.c_int * max(1, len(bind)))(*bind)
        handle = lib.tg_pool_create(self.n_threads, self.spin_ns, cpus, len(bind))
        if not handle:
            raise MemoryError(f"could not allocate a CPU thread pool of {self.n_threads} threads")
        self._handle, self._run = handle, lib.tg_pool_run
        self._finalizer = weakref.finalize(self, lib.tg_pool_destroy, handle)
        # at interpreter exit another Python thread could still be inside run(); the OS ends the workers then
        self._finalizer.atexit = False
        return handle

    def handle(self) -> int:
        """The native pool, started if it was not."""
        return self._handle if self._handle is not None else self._start()

    def run(self, fn: int, args: ctypes.Array, total: int, n_parts: int) -> int:
        """Run the C function at address `fn` over [0, total) in up to n_parts slices; returns the slices used."""
        if self._handle is None or self._run is None:
            self._start()
        return self._run(self._handle, fn, args, total, n_parts)  # type: ignore[misc]

    def close(self) -> None:
        """Join the workers now (they start again on the next run). Must not be called while a run is going."""
        if self._finalizer is not None:
            self._finalizer()
        self._handle, self._finalizer = None, None

    def _forget_after_fork(self) -> None:
        if self._finalizer is not None:
            self._finalizer.detach()  # the parent's workers do not exist here; joining them would hang
        self._handle, self._finalizer = None, None


_pools: weakref.WeakSet[ThreadPool] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for pool in list(_pools):
        pool._forget_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
