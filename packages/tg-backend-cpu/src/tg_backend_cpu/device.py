"""The CPU device: host memory, LLVM IR compiled and loaded in process (llvm_renderer.py, llvm_compiler.py: the
default), or C source built by clang or gcc into a shared object loaded with ctypes; a thread pool for big
kernels."""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
from tinygrad.codegen import ProgramSpec
from tinygrad.device import Allocator
from tinygrad.helpers import DEBUG
from tinygrad.renderer import Renderer
from tinygrad.runtime.compiler import Compiler
from tinygrad.runtime.device import Compiled
from tinygrad.runtime.runner import CompiledRunner

from tg_backend_cpu.compiler import CCompiler, uses_llvm
from tg_backend_cpu.program import CPUProgram
from tg_backend_cpu.py_thread_pool import PythonThreadPool
from tg_backend_cpu.renderer import CPURenderer
from tg_backend_cpu.thread_count import pinned_cpus, thread_count
from tg_backend_cpu.thread_pool import ThreadPool, native_pool_available, pool_library

__all__ = ["ALIGN", "CPUDevice", "CPUProgram", "CPURenderer", "HostAllocator"]

ALIGN = 64  # a cache line, and what AVX-512 loads like


#: freed buffers kept for reuse, at most this many bytes in all
REUSE_LIMIT = 1 << 30


def physical_memory() -> int | None:
    """Bytes of RAM on this machine (None where the OS does not say): no buffer larger than that can be held."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


#: buffers from this size on are their own private anonymous mappings (`_fresh_memory`)
MAPPED_MIN = 16 << 20


def _fresh_memory(nbytes: int) -> tuple[np.ndarray, int]:
    """Zero-copy bytes for a buffer of `nbytes`, and the alignment to cut it at. A big buffer is its own private
    anonymous mapping in ordinary pages, given back to the OS when freed. Not numpy's memory: numpy advises Linux to
    back a big array with transparent huge pages, whose first touch (a program's first run) may stop to compact
    memory for every 2 MiB page, which costs more than the 4 KiB faults it saves. Not Python's default mapping
    either: that is shared memory, whose faults cost more than private ones (figures in the CHANGELOG)."""
    if nbytes >= MAPPED_MIN and hasattr(mmap, "MAP_PRIVATE"):
        try:
            region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE)
        except OSError as e:
            raise MemoryError(f"cannot map {nbytes} bytes: {e}") from e
        return np.frombuffer(region, dtype=np.uint8), ALIGN
    return np.empty(nbytes + ALIGN, dtype=np.uint8), ALIGN


class HostAllocator(Allocator):
    """Buffers are aligned numpy byte arrays; the opaque handle is (array, address).

    Freed buffers are kept, by size, and handed out again: a big array from the C allocator is fresh memory from
    the kernel, and its first touch page-faults every page (a 64 MB result of an eager `a * b + c` spent as long
    in page faults as in the kernel). Reused memory holds stale bytes, which is what a new buffer may hold."""

    def __init__(self) -> None:
        self._free: dict[int, list[tuple[np.ndarray, int]]] = {}
        self._free_bytes = 0
        self.max_buffer_bytes = physical_memory()

    def alloc(self, nbytes: int) -> tuple[np.ndarray, int]:
        if (kept := self._free.get(nbytes)):
            self._free_bytes -= nbytes
            return kept.pop()
        try:
            raw, align = _fresh_memory(nbytes)
        except MemoryError:
            self.release()  # give back what is kept, then try once more
            raw, align = _fresh_memory(nbytes)
        offset = (-raw.ctypes.data) % align
        view = raw[offset:offset + nbytes]
        return view, view.ctypes.data

    def free(self, opaque: Any, nbytes: int) -> None:
        if self._free_bytes + nbytes <= REUSE_LIMIT:
            self._free.setdefault(nbytes, []).append(opaque)
            self._free_bytes += nbytes
        # else numpy frees the memory with the array

    def release(self) -> None:
        """Return every kept buffer to the C allocator."""
        self._free.clear()
        self._free_bytes = 0

    def copyin(self, dest: tuple[np.ndarray, int], src: memoryview) -> None:
        # the destination may be a larger planner slot than the data: write only the bytes given
        data = np.frombuffer(src, dtype=np.uint8)
        dest[0][:data.nbytes] = data

    def copyout(self, dest: memoryview, src: tuple[np.ndarray, int]) -> None:
        np.frombuffer(dest, dtype=np.uint8)[:] = src[0][:dest.nbytes]

    def wrap_external(self, address: int, nbytes: int) -> tuple[np.ndarray, int]:
        """Host memory at `address` that another owner keeps valid (Tensor.from_blob, DLPack), as a buffer's
        handle, in place: kernels read and write that memory. Core never passes such a handle to `free`, so it
        cannot enter the reuse lists."""
        return np.frombuffer(memoryview((ctypes.c_uint8 * nbytes).from_address(address)), dtype=np.uint8), address

    def host_view(self, opaque: tuple[np.ndarray, int], nbytes: int) -> memoryview:
        """The first `nbytes` of a buffer's memory, in place: it is host memory, so host code (MPI in
        tinygrad.distributed) can read and write it without staging a copy."""
        return opaque[0][:nbytes].data


class CPUDevice(Compiled):
    """Host memory and C kernels; a kernel big enough runs on `threads` threads ($CPU_THREADS, else every core
    this process may use), each taking a slice of its outermost output loop."""

    def __init__(self, index: int = 0, threads: int | None = None):
        renderer: Renderer
        compiler: Compiler
        self._entry_points: Callable[[str, bytes], dict[str, int]] | None
        if uses_llvm():
            from tg_backend_cpu.llvm_compiler import LLVMCompiler
            from tg_backend_cpu.llvm_loader import entry_points
            from tg_backend_cpu.llvm_renderer import LLVMRenderer

            renderer, compiler, self._entry_points = LLVMRenderer(), LLVMCompiler(), entry_points
        else:
            c_compiler = CCompiler()
            renderer, compiler, self._entry_points = CPURenderer(), c_compiler, None
            # a padded convolution over a copy with the border written out pays where the compiler vectorises the
            # copy's border tests: clang does; gcc, whose loop if-conversion is off here, leaves the copy scalar
            renderer.conv_border_copy = c_compiler.is_clang
        self.threads = thread_count() if threads is None else _checked_threads(threads)
        self.pool = _make_pool(self.threads)
        self._programs: weakref.WeakSet[CPUProgram] = weakref.WeakSet()
        super().__init__("CPU" if index == 0 else f"CPU:{index}", HostAllocator(), renderer, compiler,
                         self._make_program)

    def background_builds(self) -> list[Callable[[], Any]]:
        # the pool's library is compiled on its first use: in a new process with a cold cache, next to the
        # first kernels instead of after them (it is a noticeable part of the first realize of a matmul)
        return [pool_library] if isinstance(self.pool, ThreadPool) and pool_library.cache_info().currsize == 0 else []

    def _make_program(self, spec: ProgramSpec, lib: bytes) -> CPUProgram:
        program = CPUProgram(spec, lib, pool=self.pool, entry_points=self._entry_points)
        self._programs.add(program)
        return program

    def runner_from(self, spec: ProgramSpec, lib: bytes) -> CompiledRunner:
        """The runner, whose program planned its threads per launch from the spec; DEBUG>=3 says the plan."""
        runner = super().runner_from(spec, lib)
        program = runner.program
        if DEBUG >= 3 and isinstance(program, CPUProgram):
            print(f"{program.name}: {program.parts} thread{'s' if program.parts != 1 else ''} per launch (outer loop "
                  f"{program.outer_max or 'not split'}, {self.threads} available)", file=sys.stderr)
        return runner

    def set_threads(self, threads: int) -> None:
        """Run kernels on this many threads from now on, compiled ones included (1: on the calling thread).
        The previous pool's workers are joined once no launch uses them."""
        self.threads = _checked_threads(threads)
        self.pool = _make_pool(self.threads)
        for program in list(self._programs):
            program.use_pool(self.pool)


def _make_pool(threads: int) -> ThreadPool | PythonThreadPool | None:
    """The native pool (thread_pool.c built by the C compiler, or its LLVM IR twin on the LLVM path); where neither
    can be built (no POSIX threads for the IR), Python threads calling the slices; None for one thread."""
    if threads <= 1:
        return None
    cpus = pinned_cpus(threads)
    return ThreadPool(threads, cpus=cpus) if native_pool_available() else PythonThreadPool(threads, cpus=cpus)


def _checked_threads(threads: int) -> int:
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads must be a positive int, got {threads!r}; use 1 to run kernels on the calling "
                         f"thread only")
    return threads
