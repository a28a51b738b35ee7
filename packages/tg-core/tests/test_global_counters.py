"""GlobalCounters, as tinygrad's examples read it: kernels, estimated FLOPs and bytes, device memory held."""

from __future__ import annotations

import gc

import numpy as np
from tinygrad import Context, GlobalCounters, Tensor, TinyJit


def test_a_matmul_counts_its_flops_bytes_and_kernel() -> None:
    a, b = Tensor.rand(64, 32).realize(), Tensor.rand(32, 16).realize()
    GlobalCounters.reset()
    assert (GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem) == (0, 0, 0)
    (a @ b).realize()
    assert GlobalCounters.kernel_count == 1
    assert GlobalCounters.global_ops == 2 * 64 * 32 * 16  # a multiply and an add per term: tinygrad's FLOP count
    assert GlobalCounters.global_mem >= 4 * (64 * 32 + 32 * 16 + 64 * 16)


def test_device_time_is_summed_when_timed() -> None:
    x = Tensor.rand(1000).realize()
    GlobalCounters.reset()
    with Context(DEBUG=2):
        (x * 2).realize()
    assert GlobalCounters.time_sum_s > 0


def test_replays_count_their_kernels_and_ops() -> None:
    @TinyJit
    def step(x: Tensor) -> Tensor:
        return (x * 2 + 1).sum()

    for _ in range(3):  # run, capture, replay
        step(Tensor.rand(256).realize())
    GlobalCounters.reset()
    out = step(Tensor(np.ones(256, np.float32)))
    assert out.item() == 768.0
    assert GlobalCounters.kernel_count == step.captured_kernels and GlobalCounters.global_ops > 0


def test_memory_in_use_follows_allocations() -> None:
    gc.collect()
    before = GlobalCounters.mem_used
    x = Tensor.ones(1 << 20).contiguous().realize()
    assert GlobalCounters.mem_used >= before + 4 * (1 << 20)
    del x
    gc.collect()
    assert GlobalCounters.mem_used <= before
