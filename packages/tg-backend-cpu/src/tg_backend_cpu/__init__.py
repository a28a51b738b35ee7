"""The CPU backend's plugin module: light on purpose (no compiler lookup, no ctypes) - discovery
imports it, and the device itself is built in `tg_backend_cpu.device` when first opened."""

from __future__ import annotations

import os

from tinygrad.device import BackendInfo, hookimpl

__version__ = "0.1.0"
#: the device contract this backend implements; core refuses it if its major version differs
DEVICE_CONTRACT = "2.0"


def _open(index: int):  # type: ignore[no-untyped-def]
    from tg_backend_cpu.device import CPUDevice

    return CPUDevice(index)


def _check() -> str | None:
    from tg_backend_cpu.compiler import find_c_compiler, llvmlite_problem, uses_llvm
    from tg_backend_cpu.thread_count import thread_count

    try:
        thread_count()
        if uses_llvm():
            from tg_backend_cpu.llvm_compiler import llvmlite_binding

            llvmlite_binding()
            return None  # no C compiler needed: the thread pool is LLVM IR too (llvm_pool.py)
    except (ValueError, RuntimeError) as e:
        return str(e)
    reason = find_c_compiler()[1]
    if reason is not None and (problem := llvmlite_problem()) is not None and "CPU_COMPILER" not in reason:
        return f"{problem}; and {reason}"  # neither path: both fixes
    return reason


def _note() -> str | None:
    """What `python -m tinygrad.device` says of a usable CPU: the compiler, the vector width, the threads, and why
    this machine is not on the default (LLVM) path where it is not."""
    from tg_backend_cpu import compiler as cc
    from tg_backend_cpu.thread_count import THREADS_ENV, pinned_cpus, thread_count

    slower = None
    if cc.uses_llvm():
        from tg_backend_cpu.llvm_compiler import llvm_description

        compiler = f"llvm ({llvm_description()})"
    else:
        c_compiler = cc.find_c_compiler()[0]
        assert c_compiler is not None  # _check passed
        compiler = f"{os.path.basename(c_compiler)} {cc.compiler_version(c_compiler)}"
        if cc.compiler_choice() is None and not os.environ.get("CC"):
            slower = f"fallback from the LLVM path: {cc.llvmlite_problem()}"
            if cc.clang_major(c_compiler) is None:
                slower += "; gcc's kernels run several times slower than LLVM's or clang's: install clang >= 15"
    bits = cc.host_vector_bits()
    notes = [f"compiler: {compiler}"] + ([f"{bits}-bit vectors"] if bits else [])
    n = thread_count()
    source = f" from {THREADS_ENV}" if os.environ.get(THREADS_ENV, "").strip() else ""
    bound = ", one bound to each CPU" if pinned_cpus(n) else ""
    notes.append(f"{n} thread{'s' if n != 1 else ''}{source}{bound}")
    return ", ".join(notes) + (f"; {slower}" if slower else "")


@hookimpl
def tinygrad_backends() -> list[BackendInfo]:
    return [BackendInfo(name="CPU", contract_version=DEVICE_CONTRACT, open=_open, check=_check, priority=1000,
                        description="kernels compiled by LLVM in process (or by clang or gcc), run on host memory",
                        note=_note)]
