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
    from tg_backend_cpu.compiler import find_c_compiler
    from tg_backend_cpu.thread_count import thread_count

    try:
        thread_count()
    except ValueError as e:
        return str(e)
    return find_c_compiler()[1]


def _note() -> str | None:
    # only an explicit setting is shown: the default listing stays a plain "available"
    from tg_backend_cpu.thread_count import THREADS_ENV, thread_count

    if not os.environ.get(THREADS_ENV, "").strip():
        return None
    n = thread_count()
    return f"{n} thread{'s' if n != 1 else ''} from {THREADS_ENV}"


@hookimpl
def tinygrad_backends() -> list[BackendInfo]:
    return [BackendInfo(name="CPU", contract_version=DEVICE_CONTRACT, open=_open, check=_check, priority=1000,
                        description="C kernels compiled by clang or gcc, run on host memory", note=_note)]
