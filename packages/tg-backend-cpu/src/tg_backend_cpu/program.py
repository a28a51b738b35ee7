"""Launching a compiled CPU kernel: one ctypes call, into the kernel's own entry point or into the thread pool."""

from __future__ import annotations

import ctypes
import functools
import time
from collections.abc import Callable
from typing import Any

from tinygrad.codegen import ProgramSpec

from tg_backend_cpu.loader import load_library
from tg_backend_cpu.py_thread_pool import PythonThreadPool
from tg_backend_cpu.thread_pool import NativeLaunch, ThreadPool, pool_library

#: a launch uses another thread only for at least this much estimated work (ProgramSpec.estimated_ops) per thread:
#: waking a worker and waiting for it costs a few microseconds, about what this much work takes on one core
MIN_WORK_PER_THREAD = 1 << 16

#: bumped whenever a program moves to another pool (set_threads), which changes its threads per launch: a
#: LaunchSequence built before then rebuilds its table. Compiling a new program does not: it is in no sequence yet
_plan_generation = [0]

#: `{name}_tg_run(const long long *args)` called through its address
_RUN_FN = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_longlong))


class CPUProgram:
    """A kernel in a shared object rendered by CPURenderer (see renderer.py for its entry points), or in an object
    file that LLVMRenderer and LLVMCompiler made with the same entry points.

    A shared object without them - plain C, `void name(buffers..., values...)` - is called directly, on one thread.
    """

    def __init__(self, spec: ProgramSpec, lib: bytes, pool: ThreadPool | PythonThreadPool | None = None,
                 entry_points: Callable[[str, bytes], dict[str, int]] | None = None):
        """`lib`, compiled from `spec`'s source; the spec's estimate of the work sets the threads per launch.
        `entry_points(name, lib)`: the addresses of the entry points and constants of a kernel that is not a
        shared object (the LLVM path's object files, loaded in memory); None: `lib` is a shared object."""
        name = spec.name
        self.name, self.pool = name, pool
        self.lib: ctypes.CDLL | None = None
        if entry_points is not None:
            addresses = entry_points(name, lib)
            self.run_addr = addresses[f"{name}_tg_run"]
            self.run_fn: Any = _RUN_FN(self.run_addr)
            self.slice_addr = addresses[f"{name}_tg_slice"]
            self.nargs = ctypes.c_longlong.from_address(addresses[f"{name}_tg_nargs"]).value
            self.outer_max = ctypes.c_longlong.from_address(addresses[f"{name}_tg_outer"]).value
            self._args_type = ctypes.c_longlong * self.nargs
        else:
            self.lib = load_library(lib)
            self.run_fn = getattr(self.lib, f"{name}_tg_run", None)
            if self.run_fn is None:
                self.fn = getattr(self.lib, name)
                self.fn.restype = None
                self.nargs, self.outer_max = -1, 0
            else:
                self.run_fn.restype = None
                self.run_addr = ctypes.cast(self.run_fn, ctypes.c_void_p).value or 0
                slice_fn = getattr(self.lib, f"{name}_tg_slice")
                self.slice_addr = ctypes.cast(slice_fn, ctypes.c_void_p).value or 0
                self.nargs = ctypes.c_longlong.in_dll(self.lib, f"{name}_tg_nargs").value
                self.outer_max = ctypes.c_longlong.in_dll(self.lib, f"{name}_tg_outer").value
                self._args_type = ctypes.c_longlong * self.nargs
        self.parts = 1  # threads each launch uses
        self._launch: Callable[[ctypes.Array], Any] | None = self.run_fn
        self.plan_launch(spec.estimated_ops)

    def plan_launch(self, estimated_ops: int) -> int:
        """Choose how many threads each launch uses, from the work a launch does (ProgramSpec.estimated_ops). Small
        kernels stay on the calling thread. Returns the choice."""
        #: the work one launch does, which `use_pool` plans with again
        self.estimated_ops = estimated_ops
        threads = self.pool.size() if self.pool is not None else 1
        self.parts = max(1, min(threads, self.outer_max, estimated_ops // MIN_WORK_PER_THREAD))
        self._launch = self._launch_on_pool if self.parts > 1 else self.run_fn
        return self.parts

    def use_pool(self, pool: ThreadPool | PythonThreadPool | None) -> int:
        """Launch on another pool (None: on the calling thread only); returns the threads a launch now uses."""
        self.pool = pool
        _plan_generation[0] += 1  # the one change to a planned program's launches (a new program is in no sequence)
        return self.plan_launch(self.estimated_ops)

    def _launch_on_pool(self, args: ctypes.Array) -> None:
        assert self.pool is not None
        self.pool.run(self.slice_addr, args, self.parts, self.parts)

    def __call__(self, *bufs: Any, global_size: tuple[int, ...] | None = None,
                 local_size: tuple[int, ...] | None = None, vals: tuple[int, ...] = (),
                 wait: bool = False) -> float | None:
        if self.run_fn is None:
            return self._call_plain(bufs, vals, wait)
        if len(bufs) + len(vals) != self.nargs:
            raise TypeError(f"kernel {self.name} takes {self.nargs} arguments (its buffers, then its variables' "
                            f"values); got {len(bufs)} buffers and {len(vals)} values")
        args = self._args_type(*[b[1] for b in bufs], *vals)
        launch = self._launch
        assert launch is not None  # set whenever run_fn is
        if not wait:
            launch(args)
            return None
        st = time.perf_counter()
        launch(args)
        return time.perf_counter() - st

    def prepare(self, *bufs: Any, global_size: tuple[int, ...] | None = None,
                local_size: tuple[int, ...] | None = None, vals: tuple[int, ...] = ()) -> Callable[[], float | None]:
        """This launch with its argument array built once (TinyJit replays it): a replay is one ctypes call."""
        if self.run_fn is None:
            return functools.partial(self._call_plain, bufs, vals, False)
        if len(bufs) + len(vals) != self.nargs:
            raise TypeError(f"kernel {self.name} takes {self.nargs} arguments (its buffers, then its variables' "
                            f"values); got {len(bufs)} buffers and {len(vals)} values")
        return PreparedLaunch(self, self._args_type(*[b[1] for b in bufs], *vals))

    def launcher(self, global_size: tuple[int, ...] | None = None,
                 local_size: tuple[int, ...] | None = None) -> Callable[[list[Any]], Any]:
        """A launch function taking the buffers (Buffer objects, in parameter order; no symbolic values): the eager
        dispatch path calls it for every op, so it is one argument array and one ctypes call."""
        if self.run_fn is None or self.nargs < 0:
            return lambda bufs: self._call_plain(tuple(b.opaque for b in bufs), (), False)
        args_type = self._args_type

        def addresses(bufs: list[Any]) -> ctypes.Array:
            return args_type(*[b.opaque[1] for b in bufs])  # allocates a buffer that has no memory yet

        # self._launch is read at call time: set_threads may move the program to another pool. The usual arities
        # name each buffer's address: unpacking a generated sequence into the array costs more than the launch. A
        # buffer without memory yet has no handle to index (TypeError): `addresses` allocates it
        if self.nargs == 1:
            def launch(bufs: list[Any]) -> None:
                try:
                    args = args_type(bufs[0]._opaque[1])
                except TypeError:
                    args = addresses(bufs)
                self._launch(args)  # type: ignore[misc]
        elif self.nargs == 2:
            def launch(bufs: list[Any]) -> None:
                try:
                    args = args_type(bufs[0]._opaque[1], bufs[1]._opaque[1])
                except TypeError:
                    args = addresses(bufs)
                self._launch(args)  # type: ignore[misc]
        elif self.nargs == 3:
            def launch(bufs: list[Any]) -> None:
                try:
                    args = args_type(bufs[0]._opaque[1], bufs[1]._opaque[1], bufs[2]._opaque[1])
                except TypeError:
                    args = addresses(bufs)
                self._launch(args)  # type: ignore[misc]
        else:
            def launch(bufs: list[Any]) -> None:
                self._launch(addresses(bufs))  # type: ignore[misc]
        return launch

    def _call_plain(self, bufs: tuple[Any, ...], vals: tuple[int, ...], wait: bool) -> float | None:
        args = [ctypes.c_void_p(b[1]) for b in bufs] + [ctypes.c_int(v) for v in vals]
        st = time.perf_counter()
        self.fn(*args)
        return time.perf_counter() - st if wait else None


class PreparedLaunch:
    """One launch with its argument array built once (TinyJit replays it): a call is one ctypes call. Launches that
    follow one another in a replay run from one native loop instead: TinyJit hands them to `run_together`."""

    __slots__ = ("args", "program")

    def __init__(self, program: CPUProgram, args: ctypes.Array):
        self.program, self.args = program, args

    def __call__(self) -> None:
        # read at call time: set_threads may move the program to another pool after the capture
        self.program._launch(self.args)  # type: ignore[misc]

    @staticmethod
    def run_together(launches: list[PreparedLaunch]) -> LaunchSequence | None:
        """One callable running these launches in order with one ctypes call (None: this machine has no native
        loop, as a C path without a C compiler, where each launch is called on its own)."""
        return LaunchSequence(launches) if _native_run_all() is not None else None


@functools.cache
def _native_run_all() -> Callable[..., None] | None:
    """The pool library's tg_run_all (thread_pool.c, or llvm_pool.py's IR), where this machine can build it (None
    where it cannot: replays then call each launch)."""
    from tg_backend_cpu.thread_pool import native_pool_available

    if not native_pool_available():
        return None
    try:
        return pool_library().tg_run_all  # type: ignore[no-any-return]
    except Exception:  # a compiler that fails on the pool's source: the replay still runs, launch by launch
        return None


class LaunchSequence:
    """Prepared launches run one after the other by thread_pool.c's tg_run_all: a replay of n kernels makes one
    ctypes call instead of n, and the kernels that use several threads run on the pool as they would alone. The
    table of entry points, argument arrays and slices follows the programs' launch plans (set_threads); launches
    on a Python-threads pool or on different pools are called one by one."""

    def __init__(self, launches: list[PreparedLaunch]):
        self.launches = list(launches)
        self._table: ctypes.Array | None = None
        self._pool: ThreadPool | None = None
        self._generation = -1

    def replace(self, index: int, launch: Any) -> bool:
        """Put `launch` (a rebuilt launch of the same kernel, with new buffers) at `index`; False when it cannot be
        part of a sequence."""
        if not isinstance(launch, PreparedLaunch):
            return False
        self.launches[index] = launch
        if self._table is not None:
            self._table[index] = _native_launch(launch)
        return True

    def _build(self) -> None:
        self._generation = _plan_generation[0]
        pools = {id(launch.program.pool) for launch in self.launches}
        pool = self.launches[0].program.pool
        if len(pools) != 1 or not (pool is None or isinstance(pool, ThreadPool)):
            self._table, self._pool = None, None
            return
        self._pool = pool
        self._table = (NativeLaunch * len(self.launches))(*[_native_launch(launch) for launch in self.launches])

    def __call__(self) -> None:
        if self._generation != _plan_generation[0]:
            self._build()
        table = self._table
        if table is None:
            for launch in self.launches:
                launch()
            return
        pool = self._pool
        if pool is not None:  # the loop of the library that made the pool: a handle means nothing to another
            pool.library().tg_run_all(pool.handle(), table, len(table))
            return
        run_all = _native_run_all()
        assert run_all is not None  # a sequence is only made where it is
        run_all(None, table, len(table))


def _native_launch(launch: PreparedLaunch) -> NativeLaunch:
    program = launch.program
    return NativeLaunch(program.run_addr, program.slice_addr, ctypes.addressof(launch.args), program.parts)
