"""The CPU device's host allocator: aligned buffers, and freed ones reused by size."""

from __future__ import annotations

import os

import numpy as np
import pytest
from tg_backend_cpu import device as cpu_device
from tinygrad import Tensor


def test_freed_host_buffers_are_reused_by_size() -> None:
    allocator = cpu_device.HostAllocator()
    a = allocator.alloc(4096)
    allocator.free(a, 4096)
    b = allocator.alloc(4096)
    assert b[1] == a[1] and b[1] % cpu_device.ALIGN == 0  # the same memory again, still aligned
    assert allocator.alloc(4096)[1] != b[1]  # nothing of that size is kept any more: fresh memory
    assert allocator.alloc(4000)[1] % cpu_device.ALIGN == 0
    allocator.copyin(b, memoryview(bytes(range(16)) * 256))
    out = bytearray(4096)
    allocator.copyout(memoryview(out), b)
    assert bytes(out) == bytes(range(16)) * 256


def test_host_view_is_the_buffer_memory_in_place() -> None:
    allocator = cpu_device.HostAllocator()
    a = allocator.alloc(4096)
    view = allocator.host_view(a, 100)
    assert view.nbytes == 100 and not view.readonly
    view[:4] = b"\x01\x02\x03\x04"
    out = bytearray(4096)
    allocator.copyout(memoryview(out), a)
    assert out[:4] == b"\x01\x02\x03\x04"


def test_kept_buffers_stay_under_the_limit_and_can_be_released(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_device, "REUSE_LIMIT", 8192)
    allocator = cpu_device.HostAllocator()
    small, big = allocator.alloc(4096), allocator.alloc(16384)
    allocator.free(big, 16384)  # over the limit: left to numpy to free, not kept
    allocator.free(small, 4096)
    assert allocator._free_bytes == 4096 and list(allocator._free) == [4096]
    allocator.release()
    assert allocator._free_bytes == 0 and not allocator._free


def test_results_are_right_in_reused_memory() -> None:
    rng = np.random.default_rng(0)
    for _ in range(3):  # each round's result is freed and its memory serves the next one
        a, b = rng.standard_normal(70000).astype(np.float32), rng.standard_normal(70000).astype(np.float32)
        np.testing.assert_allclose((Tensor(a, device="CPU") * Tensor(b, device="CPU") + 1).numpy(), a * b + 1,
                                   rtol=1e-5, atol=1e-6)


def _mapping_permissions(address: int) -> str:
    """The permissions of the mapping holding `address`, as /proc/self/maps writes them ("rw-p": private)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            span, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in span.split("-"))
            if lo <= address < hi:
                return perms
    raise AssertionError(f"no mapping holds {address:#x}")


def test_big_buffers_are_private_mappings(monkeypatch: pytest.MonkeyPatch) -> None:
    # a buffer from MAPPED_MIN on is its own mapping, private (a shared one, Python's default, faults more slowly),
    # without numpy's advice to use huge pages; smaller ones come from numpy. All are cache-line aligned, hold data,
    # reuse and free like any other
    monkeypatch.setattr(cpu_device, "MAPPED_MIN", 1 << 20)
    allocator = cpu_device.HostAllocator()
    n = (1 << 20) + 12345  # not a multiple of any page size
    big = allocator.alloc(n)
    assert big[0].nbytes == n and big[1] % cpu_device.ALIGN == 0
    if hasattr(cpu_device.mmap, "MAP_PRIVATE") and os.path.exists("/proc/self/maps"):
        assert _mapping_permissions(big[1]).endswith("p"), _mapping_permissions(big[1])
    assert allocator.alloc(4096)[1] % cpu_device.ALIGN == 0
    data = np.random.default_rng(0).integers(0, 256, n, dtype=np.uint8)
    allocator.copyin(big, memoryview(data))
    out = bytearray(n)
    allocator.copyout(memoryview(out), big)
    assert bytes(out) == data.tobytes()
    allocator.free(big, n)
    assert allocator.alloc(n)[1] == big[1]
    rng = np.random.default_rng(1)
    a = rng.standard_normal(300_000).astype(np.float32)  # 1.2 MB: above the lowered limit
    np.testing.assert_allclose((Tensor(a, device="CPU") * 2 + 1).numpy(), a * 2 + 1, rtol=1e-6)
