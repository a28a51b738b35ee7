"""CUDACC, a stand-in device for compile-only checks where there is no GPU.

Every kernel handed to it is rendered by the CUDA renderer, compiled by NVRTC to PTX for each architecture of
`TG_CUDACC_ARCHS` (default sm_80,sm_90) and assembled by ptxas; then the kernel runs on the CPU backend, so a test
suite run on DEV=CUDACC behaves as on CPU and goes on to its next kernels. The outcome of each kernel and
architecture is appended as a JSON line to a file in the folder `TG_CUDACC_RECORD` (one file per process, so that
xdist workers do not interleave); without it, a failure raises instead.

The schedule is made for the CUDA renderer (its knobs; it is this device's `renderer`), so the kernels are the
ones a CUDA device would get. Used as a pytest plugin (`-p cuda_standin`, with this folder on PYTHONPATH and
TG_CUDACC_PLUGIN=1), it registers the device when pytest starts, before the kit reads `--tg-device`; tests in this
folder register it for their own use (`register`, `Device.unregister`).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from tinygrad.codegen import get_program
from tinygrad.codegen.compiled import CompileError
from tinygrad.device import BackendInfo, Device, DeviceKnobs, hookimpl
from tinygrad.dtype import DType
from tinygrad.uop.ops import UOp

NAME = "CUDACC"
RECORD_ENV = "TG_CUDACC_RECORD"
#: set to 1 in a process whose pytest loads this module as a plugin: it registers CUDACC when imported
PLUGIN_ENV = "TG_CUDACC_PLUGIN"
ARCHS_ENV = "TG_CUDACC_ARCHS"
DEFAULT_ARCHS = ("sm_80", "sm_90")


def archs() -> tuple[str, ...]:
    return tuple(a for a in os.environ.get(ARCHS_ENV, ",".join(DEFAULT_ARCHS)).split(",") if a)


def check_source(src: str, compilers: dict[str, Any]) -> list[dict[str, str]]:
    """NVRTC and ptxas on one kernel source for each architecture: one record per architecture, with the stage
    that failed ("nvrtc", "ptxas") and its message, or stage "ok"."""
    from tg_backend_cuda.nvrtc import assemble_ptx

    out = []
    for arch, compiler in compilers.items():
        try:
            ptx = compiler.compile_cached(src)
        except CompileError as e:
            out.append({"arch": arch, "stage": "nvrtc", "error": str(e)})
            continue
        ok, msg = assemble_ptx(ptx, arch)
        if f".target {arch}" not in ptx.decode(errors="replace"):
            ok, msg = False, f"the PTX does not target {arch}"
        out.append({"arch": arch, "stage": "ok" if ok else "ptxas", "error": "" if ok else f"{msg}\n{src}"})
    return out


class CompileCheckDevice:
    """Runs kernels on the CPU backend after compiling them for CUDA (see the module's docstring)."""

    def __init__(self) -> None:
        from tg_backend_cuda.compiler import CUDACompiler
        from tg_backend_cuda.renderer import CUDARenderer

        self.name = NAME
        self.cpu = Device["CPU"]
        self.allocator = self.cpu.allocator
        self.renderer = CUDARenderer("sm_90")
        self.compilers = {arch: CUDACompiler(arch) for arch in archs()}
        self.checked: set[str] = set()
        record_dir = os.environ.get(RECORD_ENV)
        self.record = Path(record_dir) / f"{os.getpid()}.jsonl" if record_dir else None

    @property
    def knobs(self) -> DeviceKnobs:
        return self.renderer.knobs

    def supports_dtype(self, dtype: DType) -> bool:
        return self.renderer.supports_dtype(dtype) and self.cpu.supports_dtype(dtype)

    def synchronize(self) -> None:
        self.cpu.synchronize()

    def get_runner(self, ast: UOp) -> Any:
        self.check(ast)
        return self.cpu.get_runner(ast)

    def check(self, ast: UOp) -> None:
        try:
            spec = get_program(ast, self.renderer)
        except Exception as e:  # the renderer refused the kernel: a finding, recorded like a compile error
            self._report([{"arch": arch, "stage": "render", "error": "".join(traceback.format_exception(e))}
                          for arch in self.compilers], "?", ast.pretty() if hasattr(ast, "pretty") else str(ast))
            return
        key = hashlib.sha256(spec.src.encode()).hexdigest()
        if key in self.checked:
            return
        self.checked.add(key)
        self._report(check_source(spec.src, self.compilers), spec.name, key)

    def _report(self, results: list[dict[str, str]], kernel: str, key: str) -> None:
        if self.record is None:
            bad = [r for r in results if r["stage"] != "ok"]
            if bad:
                raise CompileError(f"{kernel}: {bad[0]['stage']} failed for {bad[0]['arch']}:\n{bad[0]['error']}")
            return
        with self.record.open("a") as f:
            for r in results:
                f.write(json.dumps({"kernel": kernel, "key": key, **r}) + "\n")


def _check() -> str | None:
    from tg_backend_cuda.nvrtc import nvrtc_unavailable, ptxas_path

    if (reason := nvrtc_unavailable()) is not None:
        return reason
    if ptxas_path() is None:
        return "ptxas not found: `pip install nvidia-cuda-nvcc-cu12==12.9.86`"
    return Device.availability("CPU")


@hookimpl
def tinygrad_backends() -> list[BackendInfo]:
    return [BackendInfo(name=NAME, contract_version="1.0", open=lambda index: CompileCheckDevice(),  # type: ignore
                        check=_check, priority=20000, description="CUDA compile checks, run on the CPU backend")]


def register() -> None:
    Device.register_plugin(sys.modules[__name__], name="cuda_standin")


if os.environ.get(PLUGIN_ENV) == "1":
    register()  # as a pytest plugin (-p cuda_standin), before the kit resolves --tg-device
