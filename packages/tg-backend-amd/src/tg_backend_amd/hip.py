"""A small ctypes binding of the HIP runtime (`libamdhip64.so`), written against the HIP API reference; only the
calls this backend makes. Every call returns a hipError_t, turned into HIPError with hipGetErrorString's text.

Handles (modules, functions, events, streams) are opaque pointers; device memory is a `void*`. Launches use the
null stream, which orders them with the synchronous hipMemcpy calls.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from typing import Any

#: hipMemcpyKind
HOST_TO_DEVICE, DEVICE_TO_HOST, DEVICE_TO_DEVICE = 1, 2, 3
LIB_ENV = "TG_AMD_HIP_LIB"


class HIPError(RuntimeError):
    pass


@functools.cache
def load_hip() -> ctypes.CDLL:
    """libamdhip64 from TG_AMD_HIP_LIB, the loader's path or ROCm's default prefix; OSError if none loads."""
    candidates = [os.environ.get(LIB_ENV), ctypes.util.find_library("amdhip64"), "libamdhip64.so",
                  "/opt/rocm/lib/libamdhip64.so"]
    errors = []
    for name in filter(None, candidates):
        try:
            lib = ctypes.CDLL(name)
        except OSError as e:
            errors.append(str(e))
            continue
        _declare(lib)
        return lib
    raise OSError("; ".join(dict.fromkeys(errors)) or "libamdhip64 not found")


def _declare(lib: ctypes.CDLL) -> None:
    p, i, u, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_size_t
    pp = ctypes.POINTER(ctypes.c_void_p)
    signatures: dict[str, list[Any]] = {
        "hipGetDeviceCount": [ctypes.POINTER(i)], "hipSetDevice": [i], "hipGetDevice": [ctypes.POINTER(i)],
        "hipDeviceSynchronize": [], "hipDeviceTotalMem": [ctypes.POINTER(sz), i],
        "hipDeviceGetName": [ctypes.c_char_p, i, i],
        "hipMalloc": [pp, sz], "hipFree": [p], "hipMemcpy": [p, p, sz, i],
        "hipModuleLoadData": [pp, p], "hipModuleUnload": [p], "hipModuleGetFunction": [pp, p, ctypes.c_char_p],
        # f, grid x/y/z, block x/y/z, dynamic shared bytes, stream, kernelParams, extra
        "hipModuleLaunchKernel": [p, u, u, u, u, u, u, u, p, pp, pp],
        "hipEventCreate": [pp], "hipEventRecord": [p, p], "hipEventSynchronize": [p],
        "hipEventElapsedTime": [ctypes.POINTER(ctypes.c_float), p, p], "hipEventDestroy": [p],
    }
    for name, args in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, ctypes.c_int
    lib.hipGetErrorString.argtypes, lib.hipGetErrorString.restype = [ctypes.c_int], ctypes.c_char_p


def check(status: int, call: str) -> None:
    if status != 0:
        text = load_hip().hipGetErrorString(status)
        raise HIPError(f"{call} failed: {text.decode() if text else ''} (hipError_t {status})")


def call(name: str, *args: Any) -> None:
    check(getattr(load_hip(), name)(*args), name)


def device_count() -> int:
    n = ctypes.c_int(0)
    call("hipGetDeviceCount", ctypes.byref(n))
    return n.value


def device_name(index: int) -> str:
    buf = ctypes.create_string_buffer(256)
    call("hipDeviceGetName", buf, 256, index)
    return buf.value.decode(errors="replace")


__all__ = ["DEVICE_TO_HOST", "HOST_TO_DEVICE", "HIPError", "call", "device_count", "device_name", "load_hip"]
