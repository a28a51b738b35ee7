"""A `.contiguous()` that a live tensor holds is computed once, by the first realize that reaches it (as tinygrad's
realize turns every live tensor it computed into its buffer); one no tensor holds stays a private intermediate."""

import gc
import weakref

import numpy as np
from tinygrad import Tensor, TinyJit
from tinygrad.engine.schedule import is_held


def kernel_count(t: Tensor) -> int:
    return sum(1 for si in t.schedule() if not si.is_copy)


def test_held_value_is_not_computed_again():
    a, b = Tensor.rand(16, 16).realize(), Tensor.rand(16, 16).realize()
    h = (a @ b).contiguous()
    first = (h + 1).realize()
    assert kernel_count(h * 2) == 1  # reads h's buffer: the matmul does not run again
    second = (h * 2).realize()
    expect = a.numpy() @ b.numpy()
    np.testing.assert_allclose(first.numpy(), expect + 1, rtol=1e-5)
    np.testing.assert_allclose(second.numpy(), expect * 2, rtol=1e-5)
    np.testing.assert_allclose(h.numpy(), expect, rtol=1e-5)


def test_a_value_no_tensor_holds_is_an_intermediate():
    a = Tensor([1.0, 2.0]).realize()
    node = (a + 1).contiguous().uop  # the tensor is gone: only the node is left
    gc.collect()
    assert not is_held(node)
    out = Tensor(node * 2).realize()
    np.testing.assert_allclose(out.numpy(), [4.0, 6.0])
    assert node._realized is None  # not remembered: its memory was the planner's to reuse


def test_held_until_the_tensor_dies():
    a = Tensor([3.0]).realize()
    h = (a * 5).contiguous()
    node = h.uop
    assert is_held(node)
    del h
    gc.collect()
    assert not is_held(node)


def test_the_table_keeps_nothing_alive():
    a = Tensor([3.0]).realize()
    h = (a * 7).contiguous()
    node = weakref.ref(h.uop)
    h.realize()  # h now holds its buffer; the CONTIGUOUS node has no holder left
    gc.collect()
    assert node() is None
    assert h.item() == 21.0


def test_assign_after_a_held_read_keeps_values():
    w = Tensor([1.0, 2.0]).contiguous().realize()
    h = (w * 10).contiguous()
    (h + 1).realize()
    w.assign(Tensor([5.0, 6.0])).realize()
    # h was computed from the old w and keeps that value; a new expression reads the new w
    np.testing.assert_allclose(h.numpy(), [10.0, 20.0])
    np.testing.assert_allclose((w * 10).numpy(), [50.0, 60.0])


def test_held_values_inside_tinyjit():
    @TinyJit
    def step(x: Tensor) -> tuple[Tensor, Tensor]:
        h = (x * 3).contiguous()
        return (h + 1).realize(), (h * 2).realize()

    for i in range(5):
        p, q = step(Tensor([float(i), 1.0]).realize())
        np.testing.assert_allclose(p.numpy(), [3.0 * i + 1, 4.0])
        np.testing.assert_allclose(q.numpy(), [6.0 * i, 6.0])


def test_a_held_fill_is_read_from_its_buffer():
    # tinygrad's embedding idiom: a weight that is a contiguous() of zeros, read by one graph after another
    w = Tensor.zeros(20, 30).contiguous()
    idx = Tensor([1, 5, 9])
    assert kernel_count(w[idx]) == 2  # the fill, then the gather
    w[idx].realize()
    assert kernel_count(w[idx] + 1) == 1  # the fill is not run again: w reads the buffer it was filled into
    np.testing.assert_equal((w[idx] + 1).numpy(), np.ones((3, 30), np.float32))


def test_a_fill_written_twice_is_two_values():
    # the same constants made contiguous twice are one node (hash-consing): each tensor keeps a value of its own
    a, b = Tensor.zeros(4).contiguous(), Tensor.zeros(4).contiguous()
    (a + 1).realize()
    before = b + 1  # built before a's assign: the rule of values says it sees zeros
    a.assign(Tensor.ones(4)).realize()
    np.testing.assert_equal(before.numpy(), [1, 1, 1, 1])
    np.testing.assert_equal(b.numpy(), [0, 0, 0, 0])
    np.testing.assert_equal(a.numpy(), [1, 1, 1, 1])


def test_a_fill_held_on_one_device_is_not_read_on_another():
    # CPU:1 is a device of its own (numbered devices are separate), with buffers apart from CPU's
    here, there = Tensor.zeros(4, device="CPU").contiguous(), Tensor.zeros(4, device="CPU:1").contiguous()
    assert here.uop is there.uop  # one node for both devices
    (there + 1).realize()  # filled on the other device: here must not take that buffer
    assert (here + 2).device == "CPU" and here.tolist() == [0, 0, 0, 0]
    np.testing.assert_equal((here + 2).numpy(), [2, 2, 2, 2])
    np.testing.assert_equal((there + 2).numpy(), [2, 2, 2, 2])
    assert (there + 2).device == "CPU:1"
