"""The GPU-style workloads of `bench/gpu.py`: one fused elementwise kernel, one reduction, and the
device's own buffer-to-buffer copy as the bandwidth reference, on one device (DEV=CL, DEV=WEBGPU).

Runs inside a worker process; the device comes from the worker's DEV environment variable. The
copy goes through the backend's own objects (pyopencl's queue, the wgpu device) so that it measures
the device, not this project's code.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from cpu_workloads import TinygradApi, _check, _inputs
from cpu_workloads import info as cpu_info
from worker_api import NotAvailable, Result, per_call


class Numpy:
    """The host CPU, for scale: what the same work costs without a device."""

    def elementwise(self, n: int) -> Callable[[], Result]:
        a, b, c = _inputs(n, 3)
        out = np.empty_like(a)

        def step() -> None:
            np.multiply(a, b, out=out)
            np.add(out, c, out=out)
        return lambda: per_call(step, 1)

    def reduce(self, n: int) -> Callable[[], Result]:
        a = _inputs(n, 1)[0]
        return lambda: per_call(lambda: a.sum(), 1)

    def devcopy(self, n: int) -> Callable[[], Result]:
        src, dst = _inputs(n, 1)[0], np.empty(n, np.float32)
        return lambda: per_call(lambda: np.copyto(dst, src), 1)

    def firstlaunch(self, n: int) -> Callable[[], Result]:
        raise NotAvailable("numpy compiles nothing")


class OnDevice(TinygradApi):
    """This project and tinygrad 0.14.0 on the device named by DEV."""

    def __init__(self, framework: str) -> None:
        try:
            super().__init__()
        except Exception as err:  # the device failed to open: say why in the table
            first_line = (str(err).splitlines() or [type(err).__name__])[0][:160]
            raise NotAvailable(f"{os.environ.get('DEV')} does not open: {first_line}") from err
        self.framework = framework

    def probe(self) -> Callable[[], Result]:
        return lambda: {"seconds": 0.0}

    def reduce(self, n: int) -> Callable[[], Result]:
        array = _inputs(n, 1)[0]
        _check(self._fresh([array])[0].sum().numpy(), np.asarray(np.sum(array, dtype=np.float64)), "sum", tol=1e-2)

        def measure() -> Result:
            x = self._fresh([array])[0]
            start = time.perf_counter()
            x.sum().realize()
            self.sync()
            return {"seconds": time.perf_counter() - start}
        return measure

    def devcopy(self, n: int) -> Callable[[], Result]:
        if self.framework != "ours":  # only this project's backend objects are known here
            raise NotAvailable("the device copy row is measured in this project's worker")
        copy = _device_copy(self.device, 4 * n)
        return lambda: per_call(copy, 1, self.sync)

    def firstlaunch(self, n: int) -> Callable[[], Result]:
        a, b, c = self._fresh(_inputs(n, 3))

        def measure() -> Result:
            start = time.perf_counter()
            (a * b + c).realize()
            self.sync()
            return {"seconds": time.perf_counter() - start}
        return measure


def _device_copy(device: Any, nbytes: int) -> Callable[[], None]:
    """A buffer-to-buffer copy of `nbytes` on the device, through the backend's own runtime objects."""
    src, dst = device.allocator.alloc(nbytes), device.allocator.alloc(nbytes)
    device.allocator.copyin(src, np.ones(nbytes // 4, np.float32).data.cast("B"))
    if hasattr(device, "queue") and type(device.queue).__module__.startswith("pyopencl"):
        import pyopencl as cl

        def cl_copy() -> None:
            cl.enqueue_copy(device.queue, dst, src, byte_count=nbytes)
        return cl_copy
    if type(getattr(device, "device", None)).__module__.startswith("wgpu"):
        gpu = device.device

        def wgpu_copy() -> None:
            encoder = gpu.create_command_encoder()
            encoder.copy_buffer_to_buffer(src, 0, dst, 0, nbytes)
            gpu.queue.submit([encoder.finish()])
        return wgpu_copy
    raise NotAvailable(f"no native copy known for {type(device).__name__}")


def make(framework: str, workload: str, params: dict[str, Any]) -> Callable[[], Result]:
    implementation = Numpy() if framework == "numpy" else OnDevice(framework)
    method = getattr(implementation, workload, None)
    if method is None:
        raise NotAvailable(f"{workload} is not written for {framework}")
    result: Callable[[], Result] = method(**params)
    return result


def info(framework: str) -> dict[str, Any]:
    try:
        found = cpu_info(framework)
    except Exception as err:  # a device that does not open is reported by the tables, not here
        return {"device": f"does not open ({type(err).__name__})"}
    found.pop("TinyJit", None)
    return found
