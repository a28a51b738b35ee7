"""HIP-style C++ -> an amdgcn code object (.hsaco) with Debian's clang-19 and ld.lld-19, no ROCm needed to compile.

Three steps, each a subprocess: clang compiles the kernel in HIP device mode to amdgcn assembly (`-S`; the same
text `disassemble` shows), clang assembles it into a relocatable object, and ld.lld makes the shared object the
HIP runtime loads (hipModuleLoadData takes exactly that ELF). Splitting them keeps the linker explicit (clang's
own device link would look for a plain `ld.lld`/`lld` and wrap the result in an offload bundle).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from tinygrad.errors import CompileError
from tinygrad.runtime.compiler import Compiler

CLANG_ENV, LLD_ENV = "TG_AMD_CLANG", "TG_AMD_LLD"
CLANG, LLD = "clang-19", "ld.lld-19"
#: Debian's packages for the tools
TOOLS_FIX = "install clang-19 and lld-19 (`apt-get install clang-19 lld-19`), or point TG_AMD_CLANG/TG_AMD_LLD at them"

#: Fixed for every kernel. -fwrapv: signed overflow wraps, as the reference table says. IEEE float32 division and
#: square root and denormals kept: results must match the reference (HIP's defaults, written out because they are
#: choices). -ffp-contract=fast: multiply-adds may fuse, as on CUDA and the CPU backend. -nogpuinc/-nogpulib: no
#: ROCm headers or device libraries; the kernels declare what they use.
CLANG_OPTIONS = ("-x", "hip", "--cuda-device-only", "-nogpulib", "-nogpuinc", "-O3", "-fwrapv", "-std=c++17",
                 "-ffp-contract=fast", "-fhip-fp32-correctly-rounded-divide-sqrt",
                 "-fno-gpu-flush-denormals-to-zero", "-Wno-parentheses-equality")


def tool(name: str, env: str) -> str | None:
    """The path of clang-19 or ld.lld-19 (or what the environment variable names); None if neither is found."""
    return shutil.which(os.environ.get(env) or name)


def tools_unavailable() -> str | None:
    missing = [name for name, env in ((CLANG, CLANG_ENV), (LLD, LLD_ENV)) if tool(name, env) is None]
    return f"{' and '.join(missing)} not found; {TOOLS_FIX}" if missing else None


def check_arch(arch: str) -> str:
    if re.fullmatch(r"gfx[0-9]{2,4}[a-f]?", arch) is None:
        raise CompileError(f"not an AMD GPU target: {arch!r}; write it as gfx942, gfx1100, ...")
    return arch


#: gfx targets of clang-19's amdgcn backend, listed as valid where clang itself cannot be asked
CLANG_19_TARGETS = ("gfx600", "gfx601", "gfx602", "gfx700", "gfx701", "gfx702", "gfx703", "gfx704", "gfx705",
                    "gfx801", "gfx802", "gfx803", "gfx805", "gfx810", "gfx900", "gfx902", "gfx904", "gfx906",
                    "gfx908", "gfx909", "gfx90a", "gfx90c", "gfx940", "gfx941", "gfx942", "gfx1010", "gfx1011",
                    "gfx1012", "gfx1013", "gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035",
                    "gfx1036", "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152",
                    "gfx1200", "gfx1201")


@functools.cache
def supported_targets() -> tuple[str, ...]:
    """The gfx targets clang's amdgcn backend knows (`--print-supported-cpus`), numbered ones only."""
    clang = tool(CLANG, CLANG_ENV)
    if clang is None:
        return CLANG_19_TARGETS
    proc = subprocess.run([clang, "--target=amdgcn-amd-amdhsa", "-nogpulib", "--print-supported-cpus"],
                          capture_output=True, text=True)
    found = re.findall(r"^\s*(gfx[0-9]{2,4}[a-f]?)\s*$", proc.stdout + proc.stderr, flags=re.MULTILINE)
    return tuple(sorted(set(found), key=lambda t: (len(t), t))) or CLANG_19_TARGETS


def check_code_object(lib: bytes, arch: str) -> str | None:
    """None if `lib` is an amdgcn code object for `arch` (an ELF shared object of machine EM_AMDGPU whose metadata
    names the target), else what is wrong."""
    if lib[:4] != b"\x7fELF" or int.from_bytes(lib[18:20], "little") != 224 or lib[16] != 3:
        return "not an amdgcn shared object (ELF, EM_AMDGPU, ET_DYN)"
    if f"amdgcn-amd-amdhsa--{arch}".encode() not in lib:
        return f"the code object does not name the target amdgcn-amd-amdhsa--{arch}"
    return None


def _run(cmd: list[str], what: str, src: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise CompileError(f"{what} failed ({' '.join(cmd)})\n--- log ---\n{proc.stderr.strip()}\n"
                           f"--- source ---\n{src}")


class AMDCompiler(Compiler):
    #: each compile is its own subprocesses in its own temporary folder
    parallel = True

    def __init__(self, arch: str = "gfx942"):
        self.arch = check_arch(arch)
        clang, lld = tool(CLANG, CLANG_ENV), tool(LLD, LLD_ENV)
        if clang is None or lld is None:
            raise CompileError(tools_unavailable() or "")
        self.clang, self.lld = clang, lld
        self.options = [*CLANG_OPTIONS, f"--offload-arch={arch}"]
        version = subprocess.run([clang, "--version"], capture_output=True, text=True).stdout.splitlines()
        # the output changes with clang's version, the target and the options
        self.cache_key = f"amd|{version[0] if version else clang}|{' '.join(self.options)}"

    def assembly(self, src: str) -> str:
        """The kernel's amdgcn assembly."""
        with tempfile.TemporaryDirectory(prefix="tg-amd-") as tmp:
            return self._assemble(src, Path(tmp))[1]

    def _assemble(self, src: str, tmp: Path) -> tuple[Path, str]:
        (tmp / "k.hip").write_text(src)
        _run([self.clang, *self.options, "-S", str(tmp / "k.hip"), "-o", str(tmp / "k.s")],
             f"clang could not compile the kernel for {self.arch}", src)
        return tmp / "k.s", (tmp / "k.s").read_text()

    def compile(self, src: str) -> bytes:
        with tempfile.TemporaryDirectory(prefix="tg-amd-") as tmp_name:
            tmp = Path(tmp_name)
            asm, _ = self._assemble(src, tmp)
            _run([self.clang, "--target=amdgcn-amd-amdhsa", f"-mcpu={self.arch}", "-c", str(asm), "-o",
                  str(tmp / "k.o")], f"clang could not assemble the kernel for {self.arch}", src)
            _run([self.lld, "-shared", str(tmp / "k.o"), "-o", str(tmp / "k.hsaco")],
                 f"ld.lld could not link the kernel for {self.arch}", src)
            lib = (tmp / "k.hsaco").read_bytes()
        if (problem := check_code_object(lib, self.arch)) is not None:
            raise CompileError(f"ld.lld's output for {self.arch} is unusable: {problem}\n--- source ---\n{src}")
        return lib

    def disassemble(self, lib: bytes, src: str) -> str | None:
        return self.assembly(src)


__all__ = ["CLANG_OPTIONS", "AMDCompiler", "check_arch", "check_code_object", "supported_targets",
           "tools_unavailable"]
