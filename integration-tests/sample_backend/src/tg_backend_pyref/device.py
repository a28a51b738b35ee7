"""The PYREF device: the four pieces of the device contract, put together with `Compiled`.

    Renderer   PyRefRenderer   linearized UOps -> JSON text            (renderer.py)
    Compiler   PyRefCompiler   JSON text -> bytes, checked by decoding  (below)
    Allocator  PyRefAllocator  host bytearrays                          (below)
    Program    PyRefProgram    interprets the program on the buffers    (interpreter.py)

This module does the "heavy" imports (the compiler package); the plugin module `tg_backend_pyref`
imports it only when the device is first opened.
"""

from __future__ import annotations

from tinygrad.device import Allocator
from tinygrad.runtime.compiler import Compiler
from tinygrad.runtime.device import Compiled

from tg_backend_pyref.interpreter import PyRefProgram, check_program
from tg_backend_pyref.renderer import PyRefRenderer


class PyRefAllocator(Allocator):
    """Device memory is host memory: one bytearray per buffer, which is also the opaque handle."""

    def alloc(self, nbytes: int) -> bytearray:
        return bytearray(nbytes)

    def free(self, opaque: bytearray, nbytes: int) -> None:
        pass  # the bytearray goes with its last reference

    def copyin(self, dest: bytearray, src: memoryview) -> None:
        data = src.cast("B") if src.format != "B" or src.ndim != 1 else src
        dest[:data.nbytes] = data

    def copyout(self, dest: memoryview, src: bytearray) -> None:
        out = dest.cast("B") if dest.format != "B" or dest.ndim != 1 else dest
        out[:] = memoryview(src)[:out.nbytes]


class PyRefCompiler(Compiler):
    """"Compiling" checks that the program decodes and is well formed, and hands its text on as bytes.

    `cache_key` stays empty on purpose: the shared on-disk compile cache would cost more than this
    compile does. A backend with a real compiler sets it to something that changes with the compiler's
    version and flags.
    """

    cache_key = ""

    def compile(self, src: str) -> bytes:
        check_program(src)  # raises ProgramFormatError (a CompileError) with the reason
        return src.encode("utf-8")


class PyRefDevice(Compiled):
    def __init__(self, index: int = 0):
        super().__init__("PYREF" if index == 0 else f"PYREF:{index}", PyRefAllocator(), PyRefRenderer(),
                         PyRefCompiler(), PyRefProgram)
