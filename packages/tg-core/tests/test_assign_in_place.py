"""Assigning to a region of a realized tensor (`t[a:b].assign(x)`, a KV cache's `cache[:, :, p:p+1].assign(kv)`)
writes into its buffer in place when nothing else can read the old contents, and keeps the rule of values otherwise.
"""

import numpy as np
import pytest
from tinygrad import Device, GlobalCounters, Tensor, TinyJit, Variable
from tinygrad.engine.schedule import InPlaceWrite


def _storage(t: Tensor):
    return t._buffer().storage


def _tagged_in_place(t: Tensor) -> bool:
    return t.uop.op.name == "CONTIGUOUS" and isinstance(t.uop.arg, InPlaceWrite)


@pytest.mark.parametrize("shape, index", [((4, 6), (slice(1, 3),)), ((7,), (slice(2, 5),)), ((3, 5, 2), (1,)),
                                          ((3, 5, 2), (slice(None), slice(4, 5))), ((1, 3), (0, slice(1, 2)))])
def test_region_assign_writes_in_place_and_matches_numpy(shape, index):
    ref = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    t = Tensor(ref.copy()).contiguous().realize()
    memory = _storage(t)
    region_shape = ref[index].shape
    value = np.full(region_shape, -7.5, np.float32)
    t[index].assign(Tensor(value))
    assert _tagged_in_place(t)
    t.realize()
    ref[index] = value
    np.testing.assert_array_equal(t.numpy(), ref)
    assert _storage(t) is memory


def test_the_kernel_touches_the_region_only():
    t = Tensor.zeros(1024, 64).contiguous().realize()
    row = Tensor.ones(1, 64).contiguous().realize()
    GlobalCounters.reset()
    t[5:6].assign(row)
    t.realize()
    assert GlobalCounters.kernel_count == 1
    assert GlobalCounters.global_mem <= 2 * 64 * 4  # one row read and written, not the 256 KiB of the whole buffer
    assert t[5].tolist() == [1.0] * 64 and t.sum().item() == 64.0


def test_readers_made_before_keep_the_old_value():
    t = Tensor.zeros(4, 3).contiguous().realize()
    lazy = t * 1  # a graph over the old buffer, not realized yet
    held_view = t[0]  # a view of the base taken before the assign
    t[0].assign(Tensor.ones(3))
    assert not _tagged_in_place(t)  # someone still reads the old contents: functional
    t.realize()
    assert lazy.sum().item() == 0.0 and held_view.tolist() == [0.0, 0.0, 0.0]
    assert t.tolist()[0] == [1.0, 1.0, 1.0]


def test_a_realized_reader_keeps_its_value_and_does_not_block():
    t = Tensor.zeros(3).contiguous().realize()
    before = (t + 1).realize()
    t[1:2].assign(Tensor([5.0]))
    assert _tagged_in_place(t)
    t.realize()
    assert before.tolist() == [1.0, 1.0, 1.0] and t.tolist() == [0.0, 5.0, 0.0]


def test_a_value_that_reads_the_buffer_is_not_written_in_place():
    # a shift: an in-place kernel would read what it has already overwritten
    v = np.arange(8, dtype=np.float32)
    t = Tensor(v.copy()).contiguous().realize()
    t[1:].assign(t[:-1])
    assert not _tagged_in_place(t)
    v[1:] = v[:-1].copy()
    assert t.tolist() == v.tolist()


def test_two_assigns_before_a_realize():
    t = Tensor.zeros(5).contiguous().realize()
    t[0:1].assign(Tensor([1.0]))
    t[3:5].assign(Tensor([2.0, 3.0]))
    assert t.tolist() == [1.0, 0.0, 0.0, 2.0, 3.0]
    t[2:3].assign(Tensor([9.0])).realize()
    assert t.tolist() == [1.0, 0.0, 9.0, 2.0, 3.0]


def test_gradients_through_an_in_place_write():
    w = Tensor([1.0, 2.0], requires_grad=True)
    buf = Tensor.zeros(4).contiguous().realize()
    buf[1:3].assign(w * 3)
    buf.sum().backward()
    assert w.grad is not None and w.grad.tolist() == [3.0, 3.0]
    assert buf.tolist() == [0.0, 3.0, 6.0, 0.0]


def _kv_decode(device: str, steps: int = 6) -> None:
    cache = Tensor.zeros(2, 8, 4, device=device).contiguous().realize()
    memory = _storage(cache)

    @TinyJit
    def step(x: Tensor, p) -> Tensor:  # type: ignore[no-untyped-def]
        cache[:, p:p + 1].assign(x.reshape(2, 1, 4))
        cache.realize()
        return cache[:, 0:p + 1].sum(axis=1).realize()

    pos = Variable("pos", 0, 7)
    ref = np.zeros((2, 8, 4), np.float32)
    for i in range(steps):
        x = Tensor.full((2, 4), float(i + 1), device=device).contiguous().realize()
        out = step(x, pos.bind(i))
        ref[:, i] = i + 1
        np.testing.assert_allclose(out.numpy(), ref[:, :i + 1].sum(axis=1), rtol=1e-6)
    np.testing.assert_array_equal(cache.numpy(), ref)
    assert _storage(cache) is memory  # every replay wrote the same memory
    x = Tensor.full((2, 4), 9.0, device=device).contiguous().realize()
    GlobalCounters.reset()
    step(x, pos.bind(steps))
    # the replay writes the new rows (32 bytes, reading x's 32) and reads the cache once for the sum (256 bytes
    # estimated, 32 written): no whole-cache write or copy back, which would add 512 bytes or more
    assert GlobalCounters.kernel_count == 2
    assert GlobalCounters.global_mem <= 32 + 32 + 256 + 32


def test_kv_cache_decode_in_tinyjit_on_cpu():
    _kv_decode("CPU")


@pytest.mark.parametrize("device", ["CL", "WEBGPU"])
def test_kv_cache_decode_in_tinyjit_on_other_devices(device):
    try:
        Device[device]
    except Exception as e:
        pytest.skip(f"{device} is not usable here: {e}")
    _kv_decode(device)


def test_large_region_through_expand_stays_small_in_memory():
    # a region of a big buffer filled from a broadcast constant: the kernel writes the region only
    t = Tensor.zeros(4096, 1024).contiguous().realize()
    GlobalCounters.reset()
    t[4095:4096].assign(Tensor.full((1, 1), 2.0).expand(1, 1024))
    t.realize()
    assert GlobalCounters.kernel_count == 1 and GlobalCounters.global_mem <= 1024 * 4
    assert t[4095].sum().item() == 2048.0 and t[0:4095].sum().item() == 0.0


def test_repeated_eager_writes_through_the_schedule_cache():
    # the second write's graph equals the first's: the schedule cache must not replay it into fresh memory (the
    # base is by then another name for the first buffer's memory)
    t = Tensor.zeros(6, 2).contiguous().realize()
    memory = _storage(t)
    pos = Variable("row", 0, 5)
    for i in range(6):
        p = pos.bind(i)  # one graph for every step, as a decode loop's
        t[p:p + 1].assign(Tensor.full((1, 2), float(i + 1)).contiguous())
        t.realize()
        assert _storage(t) is memory
    assert t.numpy()[:, 0].tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
