"""The schedule cache: a graph whose structure was scheduled before reuses that schedule with its own buffers."""

from __future__ import annotations

import numpy as np
from tinygrad import Context, Tensor, Variable
from tinygrad.engine.schedule_cache import schedule_cache


def hits(fn) -> int:  # type: ignore[no-untyped-def]
    before = schedule_cache.hits
    fn()
    return schedule_cache.hits - before


def test_an_eager_loop_schedules_once_and_computes_right() -> None:
    x = Tensor.zeros(16).contiguous().realize()
    x = (x + 1).realize()

    def loop() -> None:
        nonlocal x
        for _ in range(20):
            x = (x + 1).realize()

    assert hits(loop) == 20
    assert x.tolist() == [21.0] * 16


def test_same_structure_over_other_buffers_reads_those_buffers() -> None:
    def f(a: Tensor, b: Tensor) -> Tensor:
        m = (a * b).sum(axis=1, keepdim=True)
        return (a - m).contiguous() * 2

    rng = np.random.default_rng(0)
    for i in range(4):
        na, nb = rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)
        ta, tb = Tensor(na), Tensor(nb)
        if i:
            assert hits(lambda: f(ta, tb).realize()) == 1  # noqa: B023 (called at once)
        out = f(Tensor(na), Tensor(nb)).numpy()
        np.testing.assert_allclose(out, (na - (na * nb).sum(axis=1, keepdims=True)) * 2, rtol=1e-5, atol=1e-6)


def test_different_constants_shapes_and_dtypes_are_different_graphs() -> None:
    x = Tensor.arange(8).float().realize()
    assert (x + 1).tolist() == list(np.arange(8) + 1.0)
    assert (x + 2).tolist() == list(np.arange(8) + 2.0)
    assert (x + -0.0).tolist() == list(np.arange(8) + 0.0)
    y = Tensor.arange(6).float().reshape(2, 3).realize()
    assert (y + 1).tolist() == (np.arange(6).reshape(2, 3) + 1.0).tolist()
    z = Tensor.arange(8).realize()
    assert (z + 1).tolist() == list(range(1, 9))


def test_bound_variables_take_their_values() -> None:
    v = Variable("k", 1, 8)
    base = Tensor(np.arange(8, dtype=np.float32))
    for k in (3, 5, 3):
        out = (base.shrink(((0, v.bind(k)),)) * 2).contiguous()  # type: ignore[attr-defined]
        np.testing.assert_array_equal(out.numpy(), np.arange(k) * 2.0)


def test_cached_and_uncached_schedules_agree() -> None:
    a = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))

    def graph() -> Tensor:
        return ((a.exp() + 1).contiguous().sum(axis=0) / 3).relu()

    first = graph().numpy()
    cached = graph().numpy()
    with Context(SCHEDULE_CACHE=0):
        fresh = graph()
        plain = fresh.numpy()
    np.testing.assert_array_equal(first, cached)
    np.testing.assert_array_equal(first, plain)
