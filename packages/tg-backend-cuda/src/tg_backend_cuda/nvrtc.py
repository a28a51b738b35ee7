"""A small ctypes binding of NVRTC (CUDA C++ -> PTX or SASS in process) and a way to run `ptxas`.

Both come from NVIDIA's pip wheels, so nothing here needs a CUDA toolkit: `nvidia-cuda-nvrtc-cu12` ships
`nvidia/cuda_nvrtc/lib/libnvrtc.so.12`, `nvidia-cuda-nvcc-cu12` ships `nvidia/cuda_nvcc/bin/ptxas`. Where the wheels
are missing, a system toolkit's copies are used (the dynamic loader's search path, `ptxas` on PATH).

NVRTC has no include path of its own here: neither wheel ships `cuda_fp16.h`/`cuda_bf16.h` (they are in the CUDA
runtime wheel or a toolkit), so the renderer writes kernels that need no header at all.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

NVRTC_SONAME = "libnvrtc.so.12"
NVRTC_WHEEL = "nvidia-cuda-nvrtc-cu12==12.9.86"
NVCC_WHEEL = "nvidia-cuda-nvcc-cu12==12.9.86"


class NVRTCError(RuntimeError):
    """NVRTC could not be loaded, or one of its calls failed for a reason other than the source's errors."""


def _wheel_dir(package: str) -> Path | None:
    """The folder of a namespace package of NVIDIA's wheels (`nvidia.cuda_nvrtc`), or None when not installed."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def nvrtc_library_path() -> str | None:
    """libnvrtc from the wheel if installed; None: leave the search to the dynamic loader (a system toolkit)."""
    folder = _wheel_dir("nvidia.cuda_nvrtc")
    if folder is not None and (lib := folder / "lib" / NVRTC_SONAME).exists():
        return str(lib)
    return None


def ptxas_path() -> str | None:
    """ptxas from the nvcc wheel, else from PATH; None when neither has it."""
    folder = _wheel_dir("nvidia.cuda_nvcc")
    if folder is not None and (exe := folder / "bin" / "ptxas").exists() and os.access(exe, os.X_OK):
        return str(exe)
    return shutil.which("ptxas")


@dataclass(frozen=True)
class CompileResult:
    ok: bool
    log: str
    output: bytes  # PTX text (NUL-free) or a cubin; b"" when not ok


class NVRTC:
    """The functions of libnvrtc this backend calls. One instance per process (`load_nvrtc`)."""

    def __init__(self, path: str | None = None):
        target = path or nvrtc_library_path() or NVRTC_SONAME
        try:
            self.lib = ctypes.CDLL(target)
        except OSError as e:
            raise NVRTCError(f"cannot load NVRTC ({target}: {e}); `pip install {NVRTC_WHEEL}`") from None
        self.path = target
        lib = self.lib
        prog_p = ctypes.POINTER(ctypes.c_void_p)
        size_p = ctypes.POINTER(ctypes.c_size_t)
        int_p = ctypes.POINTER(ctypes.c_int)
        signatures: dict[str, list] = {
            "nvrtcVersion": [int_p, int_p],
            "nvrtcCreateProgram": [prog_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int,
                                   ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p)],
            "nvrtcDestroyProgram": [prog_p],
            "nvrtcCompileProgram": [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
            "nvrtcGetProgramLogSize": [ctypes.c_void_p, size_p],
            "nvrtcGetProgramLog": [ctypes.c_void_p, ctypes.c_char_p],
            "nvrtcGetPTXSize": [ctypes.c_void_p, size_p],
            "nvrtcGetPTX": [ctypes.c_void_p, ctypes.c_char_p],
            "nvrtcGetCUBINSize": [ctypes.c_void_p, size_p],
            "nvrtcGetCUBIN": [ctypes.c_void_p, ctypes.c_char_p],
            "nvrtcGetNumSupportedArchs": [int_p],
            "nvrtcGetSupportedArchs": [int_p],
        }
        for name, args in signatures.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
        lib.nvrtcGetErrorString.argtypes, lib.nvrtcGetErrorString.restype = [ctypes.c_int], ctypes.c_char_p

    def _check(self, status: int, what: str) -> None:
        if status != 0:
            raise NVRTCError(f"{what} failed: {self.lib.nvrtcGetErrorString(status).decode()} ({status})")

    @functools.cached_property
    def version(self) -> tuple[int, int]:
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
        return major.value, minor.value

    @functools.cached_property
    def supported_archs(self) -> tuple[int, ...]:
        """Compute capabilities as numbers (80 for sm_80) this NVRTC compiles for."""
        n = ctypes.c_int()
        self._check(self.lib.nvrtcGetNumSupportedArchs(ctypes.byref(n)), "nvrtcGetNumSupportedArchs")
        archs = (ctypes.c_int * n.value)()
        self._check(self.lib.nvrtcGetSupportedArchs(archs), "nvrtcGetSupportedArchs")
        return tuple(archs)

    def compile(self, src: str, options: list[str], cubin: bool = False, name: str = "kernel.cu") -> CompileResult:
        """Compile `src`; the source's own errors come back in the result (ok=False with the log), failures of
        NVRTC itself (out of memory, a bad option) raise NVRTCError."""
        prog = ctypes.c_void_p()
        self._check(self.lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), name.encode(), 0, None, None),
                    "nvrtcCreateProgram")
        try:
            opts = (ctypes.c_char_p * len(options))(*(o.encode() for o in options))
            status = self.lib.nvrtcCompileProgram(prog, len(options), opts)
            log = self._log(prog)
            if status == 6:  # NVRTC_ERROR_COMPILATION: the source is wrong, the log says where
                return CompileResult(False, log, b"")
            self._check(status, f"nvrtcCompileProgram with {' '.join(options)}")
            get_size, get = (self.lib.nvrtcGetCUBINSize, self.lib.nvrtcGetCUBIN) if cubin else \
                (self.lib.nvrtcGetPTXSize, self.lib.nvrtcGetPTX)
            size = ctypes.c_size_t()
            self._check(get_size(prog, ctypes.byref(size)), "reading the output's size")
            out = ctypes.create_string_buffer(size.value)
            self._check(get(prog, out), "reading the output")
            # the PTX ends with a NUL that is not part of the text; a cubin is binary and kept whole
            return CompileResult(True, log, out.raw.rstrip(b"\0") if not cubin else out.raw)
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(prog))

    def _log(self, prog: ctypes.c_void_p) -> str:
        size = ctypes.c_size_t()
        if self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)) != 0 or size.value <= 1:
            return ""
        buf = ctypes.create_string_buffer(size.value)
        self.lib.nvrtcGetProgramLog(prog, buf)
        return buf.value.decode(errors="replace")


@functools.cache
def load_nvrtc() -> NVRTC:
    return NVRTC()


def nvrtc_unavailable() -> str | None:
    """Why NVRTC cannot be loaded here, with the fix; None when it can."""
    try:
        load_nvrtc()
    except NVRTCError as e:
        return str(e)
    return None


def assemble_ptx(ptx: bytes, arch: str, ptxas: str | None = None) -> tuple[bool, str]:
    """Assemble PTX to SASS for `arch` (sm_90) with ptxas, discarding the result: (ok, ptxas's messages). A check
    that the PTX NVRTC made is valid for the target, where no GPU is at hand."""
    exe = ptxas or ptxas_path()
    if exe is None:
        raise FileNotFoundError(f"ptxas not found; `pip install {NVCC_WHEEL}` or put a CUDA toolkit's bin on PATH")
    with tempfile.NamedTemporaryFile(suffix=".ptx") as f:
        f.write(ptx)
        f.flush()
        proc = subprocess.run([exe, f"-arch={arch}", f.name, "-o", os.devnull], capture_output=True, text=True)
    return proc.returncode == 0, (proc.stdout + proc.stderr).strip()


__all__ = ["NVRTC", "CompileResult", "NVRTCError", "assemble_ptx", "load_nvrtc", "nvrtc_library_path",
           "nvrtc_unavailable", "ptxas_path"]
