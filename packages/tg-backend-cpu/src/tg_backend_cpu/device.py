"""The CPU device: host memory, C source, a shared object loaded with ctypes."""

from __future__ import annotations

import ctypes
import os
import tempfile
import time
from typing import Any

import numpy as np
from tinygrad.codegen.compiled import Compiled
from tinygrad.device import Allocator
from tinygrad.renderer.cstyle import CStyleRenderer

from tg_backend_cpu.compiler import CCompiler

ALIGN = 64  # a cache line, and what AVX-512 loads like


class HostAllocator(Allocator):
    """Buffers are aligned numpy byte arrays; the opaque handle is (array, address)."""

    def alloc(self, nbytes: int) -> tuple[np.ndarray, int]:
        raw = np.empty(nbytes + ALIGN, dtype=np.uint8)
        offset = (-raw.ctypes.data) % ALIGN
        view = raw[offset:offset + nbytes]
        return view, view.ctypes.data

    def free(self, opaque: Any, nbytes: int) -> None:
        pass  # numpy frees the memory with the array

    def copyin(self, dest: tuple[np.ndarray, int], src: memoryview) -> None:
        dest[0][:] = np.frombuffer(src, dtype=np.uint8)

    def copyout(self, dest: memoryview, src: tuple[np.ndarray, int]) -> None:
        np.frombuffer(dest, dtype=np.uint8)[:] = src[0][:dest.nbytes]


class CPURenderer(CStyleRenderer):
    device = "CPU"


class CPUProgram:
    """A kernel function in a shared object. The library is loaded from a private temporary file."""

    def __init__(self, name: str, lib: bytes):
        fd, path = tempfile.mkstemp(suffix=".so", prefix="tg-kernel-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(lib)
            self.lib = ctypes.CDLL(path)
        finally:
            os.unlink(path)  # the mapping outlives the file
        self.fn = getattr(self.lib, name)
        self.fn.restype = None

    def __call__(self, *bufs: Any, global_size: tuple[int, ...] | None = None,
                 local_size: tuple[int, ...] | None = None, vals: tuple[int, ...] = (),
                 wait: bool = False) -> float | None:
        args = [ctypes.c_void_p(b[1]) for b in bufs] + [ctypes.c_int(v) for v in vals]
        st = time.perf_counter()
        self.fn(*args)
        return time.perf_counter() - st if wait else None


class CPUDevice(Compiled):
    def __init__(self, index: int = 0):
        super().__init__("CPU" if index == 0 else f"CPU:{index}", HostAllocator(), CPURenderer(), CCompiler(),
                         CPUProgram)
