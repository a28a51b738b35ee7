"""CUDA C++ -> PTX (or SASS) with NVRTC, in process; what the compile cache stores is the PTX or the cubin."""

from __future__ import annotations

import re

from tinygrad.errors import CompileError
from tinygrad.runtime.compiler import Compiler

from tg_backend_cuda.nvrtc import NVRTCError, load_nvrtc

#: Options fixed for every kernel. IEEE division and square root and no flush of subnormals: results must match the
#: reference semantics (correctly rounded, subnormals kept). Multiply-adds may fuse (--fmad=true, NVRTC's default,
#: written out because it is a choice): the CPU backend compiles with -ffp-contract=fast and OpenCL contracts by
#: default too, every required op alone is still correctly rounded, and a matmul needs its FMAs.
NVRTC_OPTIONS = ("--fmad=true", "--ftz=false", "--prec-div=true", "--prec-sqrt=true", "--std=c++17")


def parse_arch(arch: str | int) -> int:
    """The compute capability as a number (90) from "sm_90", "compute_90", "90" or 90."""
    if isinstance(arch, int):
        return arch
    m = re.fullmatch(r"(?:sm_|compute_)?(\d+)[a-z]?", arch.strip())
    if m is None:
        raise ValueError(f"not a CUDA architecture: {arch!r}; write it as sm_80, sm_90, ...")
    return int(m.group(1))


class CUDACompiler(Compiler):
    """`cubin=False`: PTX for the virtual architecture compute_XX, which any GPU of that capability or newer runs
    (the driver compiles it when the module is loaded), and which `ptxas` can check where there is no GPU.
    `cubin=True`: SASS for exactly sm_XX, which also loads on a driver older than this NVRTC (a driver refuses PTX
    of an ISA version newer than it knows)."""

    #: NVRTC compiles independent programs concurrently (only nvrtcGetTypeName is documented as not thread-safe),
    #: and ctypes releases the GIL during the call
    parallel = True

    def __init__(self, arch: str | int = "sm_90", cubin: bool = False):
        self.cc = parse_arch(arch)
        self.arch, self.cubin = f"sm_{self.cc}", cubin
        try:
            self.nvrtc = load_nvrtc()
        except NVRTCError as e:
            raise CompileError(str(e)) from None
        if self.cc not in self.nvrtc.supported_archs:
            known = ", ".join(f"sm_{a}" for a in self.nvrtc.supported_archs)
            raise CompileError(f"NVRTC {self.nvrtc.version[0]}.{self.nvrtc.version[1]} cannot compile for "
                               f"{self.arch}; it knows {known}")
        target = f"--gpu-architecture={'sm' if cubin else 'compute'}_{self.cc}"
        self.options = [target, *NVRTC_OPTIONS]
        major, minor = self.nvrtc.version
        self.cache_key = f"cuda|nvrtc {major}.{minor}|{'cubin' if cubin else 'ptx'}|{' '.join(self.options)}"

    def _compile(self, src: str, cubin: bool, options: list[str]) -> bytes:
        try:
            result = self.nvrtc.compile(src, options, cubin=cubin)
        except NVRTCError as e:
            raise CompileError(f"NVRTC failed for {self.arch}: {e}\n--- source ---\n{src}") from None
        if not result.ok:
            raise CompileError(f"NVRTC could not compile the kernel for {self.arch}\n--- NVRTC log ---\n"
                               f"{result.log.strip()}\n--- source ---\n{src}")
        return result.output

    def compile(self, src: str) -> bytes:
        return self._compile(src, self.cubin, self.options)

    def disassemble(self, lib: bytes, src: str) -> str | None:
        """The PTX: the output itself, or for a cubin the same source compiled to PTX (there is no SASS
        disassembler in the wheels; `cuobjdump -sass` of a toolkit shows the machine code)."""
        if not self.cubin:
            return lib.decode(errors="replace")
        ptx_options = [f"--gpu-architecture=compute_{self.cc}", *NVRTC_OPTIONS]
        return self._compile(src, False, ptx_options).decode(errors="replace")


__all__ = ["NVRTC_OPTIONS", "CUDACompiler", "parse_arch"]
