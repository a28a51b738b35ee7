"""The thread pool for a machine without a C compiler (the LLVM path): Python threads that each call one slice of
a kernel through ctypes.

ctypes releases the GIL for the length of a foreign call, so the slices run at the same time on different cores;
Python only runs between them (handing a slice to a worker, collecting that it is done), which costs a few
microseconds a launch, where the native pool (thread_pool.c) costs less. Launches only use the pool for kernels big
enough for that not to matter (program.py, MIN_WORK_PER_THREAD). The interface is the native pool's: `size`,
`run`, `close`, `started`.

As in the native pool, workers can be bound one to each CPU (`cpus`), and a launch then leaves out the worker on
the caller's CPU; each slice runs under the caller's floating-point environment (flush-to-zero and the
rounding mode, which a library such as torch may set on the calling thread), copied with libm's fegetenv and
fesetenv; a second caller that finds the pool busy runs its whole job itself.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import queue
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from tg_backend_cpu.thread_count import still_usable

#: `void slice(const long long *args, long long start, long long end, long long total)`
SLICE_FN = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_longlong), ctypes.c_longlong, ctypes.c_longlong,
                            ctypes.c_longlong)

#: bytes kept for a copy of the floating-point environment: more than any libc's fenv_t (glibc x86-64: 32)
FENV_BYTES = 256


@functools.cache
def _libm() -> Any:
    """libm's fegetenv and fesetenv, or None where the C library does not say where they are."""
    name = ctypes.util.find_library("m")
    try:
        lib = ctypes.CDLL(name) if name else ctypes.CDLL(None)
        get_env, set_env = lib.fegetenv, lib.fesetenv
    except (OSError, AttributeError):
        return None
    for fn in (get_env, set_env):
        fn.argtypes, fn.restype = [ctypes.c_void_p], ctypes.c_int
    return lib


class _Job:
    __slots__ = ("args", "end", "fn", "fp_env", "start", "total")

    def __init__(self, fn: Any, args: ctypes.Array, start: int, end: int, total: int, fp_env: Any):
        self.fn, self.args, self.start, self.end, self.total, self.fp_env = fn, args, start, end, total, fp_env


@functools.cache
def _sched_getcpu() -> Any:
    """glibc's sched_getcpu (the CPU the calling thread runs on), or None where the C library has none."""
    try:
        fn = ctypes.CDLL(None).sched_getcpu
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [], ctypes.c_int
    return fn


class PythonThreadPool:
    """`n_threads` threads for kernel slices: the caller of `run` and n_threads - 1 Python workers; with `cpus`
    (one per thread), one worker bound to each CPU, and a launch uses the workers on the other CPUs than the
    caller's."""

    def __init__(self, n_threads: int, cpus: Sequence[int] = ()):
        if n_threads < 1:
            raise ValueError(f"a thread pool needs at least one thread, got {n_threads}")
        if cpus and len(cpus) != n_threads:
            raise ValueError(f"a pinned pool of {n_threads} threads needs {n_threads} CPUs, got {list(cpus)}")
        self.n_threads, self.cpus = n_threads, tuple(cpus)
        self.pinned = False  # set when the workers start and the system binds every one
        self._inboxes: list[queue.SimpleQueue[_Job | None]] = []
        self._done: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._busy = threading.Lock()
        self._slices: dict[int, Any] = {}  # function address -> its ctypes callable
        _pools.add(self)

    @property
    def started(self) -> bool:
        return bool(self._threads)

    def size(self) -> int:
        return self.n_threads

    def _start(self) -> None:
        bind = still_usable(self.cpus)
        pin = len(bind) > 1 and _sched_getcpu() is not None
        for i in range(len(bind) if pin else self.n_threads - 1):
            inbox: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
            thread = threading.Thread(target=_work, args=(inbox, self._done), name=f"tg-cpu-{i + 1}", daemon=True)
            thread.start()
            self._inboxes.append(inbox)
            self._threads.append(thread)
        weakref.finalize(self, _stop, list(self._inboxes))
        self.pinned = pin and _bind(self._threads, bind)

    def _worker_order(self) -> list[int]:
        """The workers a launch hands slices to, in order: pinned, every one but the one on the caller's CPU."""
        if not self.pinned:
            return list(range(len(self._inboxes)))
        cpu = _sched_getcpu()()
        return [i for i, c in enumerate(self.cpus) if c != cpu][:self.n_threads - 1]

    def run(self, fn: int, args: ctypes.Array, total: int, n_parts: int) -> int:
        """Run the C function at address `fn` over [0, total) in up to n_parts slices; returns the slices used."""
        n_parts = max(1, min(n_parts, self.n_threads, total))
        call = self._slices.get(fn)
        if call is None:
            call = self._slices[fn] = SLICE_FN(fn)
        if n_parts == 1 or not self._busy.acquire(blocking=False):
            call(args, 0, total, total)
            return 1
        try:
            if not self._threads:
                self._start()
            fp_env = None
            if (libm := _libm()) is not None:
                fp_env = ctypes.create_string_buffer(FENV_BYTES)
                libm.fegetenv(fp_env)
            workers = self._worker_order()
            for i in range(1, n_parts):
                self._inboxes[workers[i - 1]].put(_Job(call, args, total * i // n_parts, total * (i + 1) // n_parts,
                                                       total, fp_env))
            failure: BaseException | None = None
            try:
                call(args, 0, total // n_parts, total)
            finally:
                for _ in range(n_parts - 1):  # every posted slice finishes before its arguments can go away
                    failure = self._done.get() or failure
            if failure is not None:
                raise failure
        finally:
            self._busy.release()
        return n_parts

    def close(self) -> None:
        """Stop the workers now (they start again on the next run). Must not be called while a run is going."""
        _stop(self._inboxes)
        for thread in self._threads:
            thread.join()
        self._inboxes, self._threads, self.pinned = [], [], False

    def _forget_after_fork(self) -> None:
        # the parent's workers do not exist in a forked child, and a held lock would stay held: start anew
        self._inboxes, self._threads, self._busy, self.pinned = [], [], threading.Lock(), False
        self._done = queue.SimpleQueue()


def _bind(threads: list[threading.Thread], cpus: tuple[int, ...]) -> bool:
    """Bind thread i to cpus[i]; if the system refuses one, every thread may run on all of `cpus` again."""
    ids = [thread.native_id for thread in threads]  # set once a thread runs; never 0 (that would be this thread)
    try:
        for tid, cpu in zip(ids, cpus, strict=True):
            if not tid:
                raise ValueError("a worker without a thread id")
            os.sched_setaffinity(tid, {cpu})
        return True
    except (OSError, ValueError):
        for tid in ids:
            if tid:
                try:
                    os.sched_setaffinity(tid, set(cpus))
                except OSError:
                    pass
        return False


def _work(inbox: queue.SimpleQueue[_Job | None], done: queue.SimpleQueue[BaseException | None]) -> None:
    libm = _libm()
    while (job := inbox.get()) is not None:
        try:
            if job.fp_env is not None and libm is not None:
                libm.fesetenv(job.fp_env)
            job.fn(job.args, job.start, job.end, job.total)
        except BaseException as e:  # reported to the caller, which raises it
            done.put(e)
        else:
            done.put(None)


def _stop(inboxes: list[queue.SimpleQueue[_Job | None]]) -> None:
    for inbox in inboxes:
        inbox.put(None)


_pools: weakref.WeakSet[PythonThreadPool] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for pool in list(_pools):
        pool._forget_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
