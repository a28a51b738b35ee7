"""The CPU backend's plugin module: light on purpose (no compiler lookup, no ctypes) - discovery
imports it, and the device itself is built in `tg_backend_cpu.device` when first opened."""

from __future__ import annotations

import os

from tinygrad.device import BackendInfo, hookimpl

__version__ = "0.1.0"
#: the device contract this backend implements; core refuses it if its major version differs
DEVICE_CONTRACT = "1.0"


def _open(index: int):  # type: ignore[no-untyped-def]
    from tg_backend_cpu.device import CPUDevice

    return CPUDevice(index)


def _check() -> str | None:
    from tg_backend_cpu.compiler import compiler_choice, find_c_compiler
    from tg_backend_cpu.thread_count import thread_count

    try:
        thread_count()
        if compiler_choice() == "llvm":
            from tg_backend_cpu.llvm_compiler import llvmlite_binding

            llvmlite_binding()
            return None  # a C compiler is optional there: without one, kernels run on one thread
    except (ValueError, RuntimeError) as e:
        return str(e)
    return find_c_compiler()[1]


def _note() -> str | None:
    # only an explicit setting is shown: the default listing stays a plain "available"
    from tg_backend_cpu.compiler import COMPILER_ENV, compiler_choice, find_c_compiler
    from tg_backend_cpu.thread_count import THREADS_ENV, thread_count

    notes = []
    choice = compiler_choice()
    if choice == "llvm":
        from tg_backend_cpu.llvm_compiler import llvm_description

        notes.append(f"compiler: llvm ({llvm_description()})")
        if find_c_compiler()[0] is None:
            notes.append("threads: 1 (no C compiler for the thread pool)")
    elif choice is not None:
        notes.append(f"compiler: {find_c_compiler()[0]} from {COMPILER_ENV}")
    if os.environ.get(THREADS_ENV, "").strip() and len(notes) < 2:
        n = thread_count()
        notes.append(f"{n} thread{'s' if n != 1 else ''} from {THREADS_ENV}")
    return ", ".join(notes) or None


@hookimpl
def tinygrad_backends() -> list[BackendInfo]:
    return [BackendInfo(name="CPU", contract_version=DEVICE_CONTRACT, open=_open, check=_check, priority=1000,
                        description="C kernels compiled by clang or gcc (or LLVM IR by llvmlite), run on host memory",
                        note=_note)]
