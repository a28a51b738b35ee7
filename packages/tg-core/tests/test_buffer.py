"""Buffer memory: allocated on first use, freed when the Buffer dies (aliases never free), the rest at exit."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from tinygrad import Device
from tinygrad.device import Allocator, Buffer
from tinygrad.dtype import dtypes


class CountingAllocator(Allocator):
    """The device's allocator, with a record of what was freed."""

    def __init__(self, inner: Allocator):
        self.inner = inner
        self.freed: list[int] = []

    def alloc(self, nbytes: int) -> Any:
        return self.inner.alloc(nbytes)

    def free(self, opaque: Any, nbytes: int) -> None:
        self.freed.append(nbytes)
        self.inner.free(opaque, nbytes)

    def copyin(self, dest: Any, src: memoryview) -> None:
        self.inner.copyin(dest, src)

    def copyout(self, dest: memoryview, src: Any) -> None:
        self.inner.copyout(dest, src)


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> CountingAllocator:
    dev = Device[Device.DEFAULT]
    alloc = CountingAllocator(dev.allocator)
    monkeypatch.setattr(dev, "allocator", alloc)
    return alloc


def test_memory_is_freed_once_when_its_buffer_dies(counting: CountingAllocator) -> None:
    buf = Buffer(Device.DEFAULT, 10, dtypes.float32).ensure_allocated()
    alias = Buffer(Device.DEFAULT, 4, dtypes.float32, base=buf).ensure_allocated()
    del buf
    gc.collect()
    assert counting.freed == []  # the alias keeps its base alive
    del alias
    gc.collect()
    assert counting.freed == [40]


def test_a_buffer_never_allocated_frees_nothing(counting: CountingAllocator) -> None:
    Buffer(Device.DEFAULT, 10, dtypes.float32)
    gc.collect()
    assert counting.freed == []


def test_memory_still_held_at_exit_is_freed_then() -> None:
    code = textwrap.dedent("""\
        from tinygrad import Device, Tensor
        dev = Device[Device.DEFAULT]
        free = dev.allocator.free
        def loud_free(opaque, nbytes):
            print("freed", nbytes, flush=True)
            free(opaque, nbytes)
        dev.allocator.free = loud_free
        kept = Tensor([1.0, 2.0, 3.0]).realize()
        """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "freed 12" in out.stdout
