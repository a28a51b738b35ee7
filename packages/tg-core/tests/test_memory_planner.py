"""The memory planner: values private to a schedule share memory when their lifetimes do not overlap; buffers the
user can see never do."""

from __future__ import annotations

import numpy as np
from tinygrad import Context, Tensor
from tinygrad.engine.memory import footprint, size_class


def chain(a: Tensor, n: int) -> Tensor:
    x = a
    for i in range(n):
        x = (x * 1.5 + i).contiguous()  # each step a kernel of its own, read only by the next one
    return x.sum()


def chain_ref(a: np.ndarray, n: int) -> np.float32:
    x = a.astype(np.float64)
    for i in range(n):
        x = x * 1.5 + i
    return np.float32(x.sum())


def test_size_classes_are_powers_of_two() -> None:
    assert [size_class(n) for n in (0, 1, 64, 65, 1000, 1024, 1025)] == [64, 64, 64, 128, 1024, 1024, 2048]


def test_a_long_chain_needs_two_slots_instead_of_a_buffer_per_step() -> None:
    a = Tensor(np.linspace(-1, 1, 1000, dtype=np.float32))
    out = chain(a, 30)
    with Context(MEMORY_PLANNER=0):
        unplanned = footprint(out.schedule())
    planned = footprint(out.schedule())
    step = 1000 * 4
    assert unplanned >= 30 * step
    assert planned <= 4 * size_class(step), (planned, unplanned)
    np.testing.assert_allclose(out.item(), chain_ref(a.numpy(), 30), rtol=1e-5)


def test_outputs_and_inputs_are_never_shared() -> None:
    a = Tensor(np.arange(256, dtype=np.float32))
    m = (a + 1).contiguous()
    outs = [(m * k).contiguous() + 1 for k in range(4)]
    items = outs[0].schedule(*outs[1:])
    out_storages = [si.bufs[0].storage for si in items if any(o.uop in si.outputs for o in outs)]
    assert len(out_storages) == 4 and len({id(b) for b in out_storages}) == 4
    assert all(si.bufs[0].storage is not a._buffer() for si in items)
    Tensor.realize(*outs)
    for k, o in enumerate(outs):
        np.testing.assert_array_equal(o.numpy(), (np.arange(256) + 1) * k + 1)


def test_a_planned_intermediate_is_computed_again_when_asked_for() -> None:
    a = Tensor(np.arange(64, dtype=np.float32))
    m = (a * 2).contiguous()
    x = chain(m, 5)  # m's memory goes to later intermediates of this schedule
    x.realize()
    np.testing.assert_array_equal(m.numpy(), np.arange(64) * 2)
    np.testing.assert_allclose(x.item(), chain_ref(np.arange(64) * 2.0, 5), rtol=1e-5)


def test_gradients_through_planned_intermediates_are_right(torch) -> None:  # type: ignore[no-untyped-def]
    w0 = np.random.default_rng(3).standard_normal((8, 8)).astype(np.float32)
    w = Tensor(w0, requires_grad=True)
    h = w
    for _ in range(4):
        h = (h @ w).tanh().contiguous()
    h.sum().backward()
    tw = torch.tensor(w0, requires_grad=True)
    th = tw
    for _ in range(4):
        th = torch.tanh(th @ tw)
    th.sum().backward()
    assert w.grad is not None
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-5)
