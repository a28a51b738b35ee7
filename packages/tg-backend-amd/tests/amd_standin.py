"""AMDCC, a stand-in device for compile-only checks where there is no AMD GPU.

Every kernel handed to it is rendered by the AMD renderer and compiled (clang-19, then ld.lld-19) into a code object
for each target of `TG_AMDCC_ARCHS` (default gfx942,gfx1100); the code object must be an amdgcn ELF that names the
kernel. Then the kernel runs on the CPU backend, so a suite run on DEV=AMDCC behaves as on CPU and goes on to its
next kernels. The outcome of each kernel and target is appended as a JSON line to a file in the folder
`TG_AMDCC_RECORD` (one file per process, for xdist); without it, a failure raises instead.

Used as a pytest plugin (`-p amd_standin`, with this folder on PYTHONPATH and TG_AMDCC_PLUGIN=1), it registers
the device when pytest starts, before the kit reads `--tg-device`; tests in this folder call `register`.
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

NAME = "AMDCC"
RECORD_ENV = "TG_AMDCC_RECORD"
#: set to 1 in a process whose pytest loads this module as a plugin: it registers AMDCC when imported
PLUGIN_ENV = "TG_AMDCC_PLUGIN"
ARCHS_ENV = "TG_AMDCC_ARCHS"
DEFAULT_ARCHS = ("gfx942", "gfx1100")


def archs() -> tuple[str, ...]:
    return tuple(a for a in os.environ.get(ARCHS_ENV, ",".join(DEFAULT_ARCHS)).split(",") if a)


def check_source(src: str, compilers: dict[str, Any]) -> list[dict[str, str]]:
    """clang and ld.lld on one kernel source for each target: one record per target, with stage "compile" (and
    the compiler's log) or "elf" (the output is not a code object for that target), or stage "ok"."""
    out = []
    for arch, compiler in compilers.items():
        try:
            lib = compiler.compile_cached(src)
        except CompileError as e:
            out.append({"arch": arch, "stage": "compile", "error": str(e)})
            continue
        # ELF, machine EM_AMDGPU (224), a shared object (ET_DYN); the target name is in the metadata note
        ok = lib[:4] == b"\x7fELF" and int.from_bytes(lib[18:20], "little") == 224 and lib[16] == 3 and \
            f"amdgcn-amd-amdhsa--{arch}".encode() in lib
        out.append({"arch": arch, "stage": "ok" if ok else "elf",
                    "error": "" if ok else f"not an amdgcn code object for {arch}\n{src}"})
    return out


class CompileCheckDevice:
    """Runs kernels on the CPU backend after compiling them for AMD (see the module's docstring)."""

    def __init__(self) -> None:
        from tg_backend_amd.compiler import AMDCompiler
        from tg_backend_amd.renderer import AMDRenderer

        self.name = NAME
        self.cpu = Device["CPU"]
        self.allocator = self.cpu.allocator
        self.renderer = AMDRenderer("gfx942")
        self.compilers = {arch: AMDCompiler(arch) for arch in archs()}
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
    from tg_backend_amd.compiler import tools_unavailable

    return tools_unavailable() or Device.availability("CPU")


@hookimpl
def tinygrad_backends() -> list[BackendInfo]:
    return [BackendInfo(name=NAME, contract_version="1.0", open=lambda index: CompileCheckDevice(),  # type: ignore
                        check=_check, priority=20000, description="AMD compile checks, run on the CPU backend")]


def register() -> None:
    Device.register_plugin(sys.modules[__name__], name="amd_standin")


if os.environ.get(PLUGIN_ENV) == "1":
    register()  # as a pytest plugin (-p amd_standin), before the kit resolves --tg-device
