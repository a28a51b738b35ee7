"""OpenCL C -> device binary with pyopencl's program build; the binary is what the compile cache stores."""

from __future__ import annotations

from typing import cast

import pyopencl as cl
from tinygrad.errors import CompileError
from tinygrad.runtime.compiler import Compiler

#: no fast-math: results must match the reference semantics (NaN, inf and signed zeros included). -w: the
#: generated code trips style warnings (constant operands of ||) that pyopencl would raise as CompilerWarning;
#: errors still come with the build log
BUILD_OPTIONS = ("-cl-fp32-correctly-rounded-divide-sqrt", "-w")


class CLCompiler(Compiler):
    def __init__(self, context: cl.Context, device: cl.Device):
        self.context, self.device = context, device
        self.options = list(BUILD_OPTIONS)
        # the binary depends on the device and its driver: both are part of the key
        self.cache_key = (f"opencl|{device.platform.name}|{device.name}|{device.driver_version}|"
                          f"{device.version}|{' '.join(self.options)}")

    def compile(self, src: str) -> bytes:
        program = cl.Program(self.context, src)
        try:
            program.build(options=self.options, devices=[self.device])
        except cl.Error as e:
            try:
                log = program.get_build_info(self.device, cl.program_build_info.LOG)
            except cl.Error:
                log = ""
            raise CompileError(f"OpenCL build failed on {self.device.name} ({self.device.platform.name}): "
                               f"{type(e).__name__}\n--- build log ---\n{log or e}\n--- source ---\n{src}") from None
        binaries = cast(list, program.get_info(cl.program_info.BINARIES))  # one per device built for
        return bytes(binaries[0])

    def disassemble(self, lib: bytes, src: str) -> str | None:
        """The program binary where the driver's is text (NVIDIA's is PTX assembly); other drivers give containers
        of machine code or LLVM IR (PoCL, AMD) that only their own tools read, and that is said instead."""
        try:
            text = lib.rstrip(b"\0").decode("ascii")
        except UnicodeDecodeError:
            text = None
        if text is not None and all(c.isprintable() or c.isspace() for c in text):
            return text
        kinds = {b"\x7fELF": "an ELF object", b"BC\xc0\xde": "LLVM bitcode", b"poclbin": "a PoCL program"}
        kind = next((k for magic, k in kinds.items() if lib.startswith(magic)), "binary")
        return (f"; {self.device.name} ({self.device.platform.name}) gives no assembly: its program binary is "
                f"{kind}, {len(lib)} bytes")
