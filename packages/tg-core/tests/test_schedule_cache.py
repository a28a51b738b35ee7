"""The schedule cache: a graph whose structure was scheduled before reuses that schedule with its own buffers."""

from __future__ import annotations

import gc

import numpy as np
from tinygrad import Context, Tensor, Variable
from tinygrad.device import Buffer
from tinygrad.dtype import dtypes
from tinygrad.engine.schedule_cache import graph_key, schedule_cache
from tinygrad.engine.schedule_item import buffer_view
from tinygrad.uop.ops import Ops


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

    with Context(EAGER_DISPATCH=0):  # else the eager fast path (test_eager_dispatch.py) skips the scheduler
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


# ---- the eager fast path: keys, stale entries, buffers ----

def eager_steps(n: int, start: np.ndarray) -> tuple[list[float], np.ndarray]:
    x = Tensor(start).realize()
    seen = []
    for _ in range(n):
        x = (x * 0.5 + 1).realize()
        seen.append(float(x.numpy()[0]))
    return seen, x.numpy()


def test_a_cached_eager_loop_gives_what_an_uncached_one_gives() -> None:
    start = np.linspace(-3, 3, 16, dtype=np.float32)
    eager_steps(1, start)  # the template exists from here on
    before = schedule_cache.hits
    cached = eager_steps(12, start)
    assert schedule_cache.hits - before >= 12
    with Context(SCHEDULE_CACHE=0):
        fresh = eager_steps(12, start)
    assert cached[0] == fresh[0]
    np.testing.assert_array_equal(cached[1], fresh[1])


def test_shape_dtype_and_constant_changes_do_not_hit_another_graphs_entry() -> None:
    def step(x: Tensor) -> list:
        return (x + 1).realize().tolist()

    f16, f17 = Tensor(np.zeros(16, np.float32)).realize(), Tensor(np.zeros(17, np.float32)).realize()
    i16 = Tensor(np.zeros(16, np.int32)).realize()
    for _ in range(2):  # the second round runs from the cache
        assert step(f16) == [1.0] * 16
        assert step(f17) == [1.0] * 17
        assert step(i16) == [1] * 16 and isinstance(step(i16)[0], int)
        assert (f16 * 2 + 1).tolist() == [1.0] * 16
        assert (f16 - 1).tolist() == [-1.0] * 16  # SUB, not the ADD above with another constant


def test_keys_tell_buffers_apart_by_kind_not_by_identity() -> None:
    f32 = dtypes.float32

    def key(a: Buffer, b: Buffer) -> tuple:
        walked = graph_key([buffer_view(a, (a.size,)).alu(Ops.ADD, buffer_view(b, (b.size,)))], ["X"])
        assert walked is not None
        return walked[0]

    one, two = Buffer("X", 8, f32), Buffer("X", 8, f32)  # never allocated: a key only reads what buffers are
    assert key(one, two) == key(Buffer("X", 8, f32), Buffer("X", 8, f32))
    assert key(one, two) != key(one, one)  # x + y is not x + x
    assert key(one, two) != key(one, Buffer("Y", 8, f32))
    assert key(one, two) != key(one, Buffer("X", 8, dtypes.int32))
    assert key(one, two) != key(one, Buffer("X", 9, f32))


def test_the_order_of_the_outputs_is_part_of_the_key() -> None:
    ref = np.arange(6, dtype=np.float32)
    a = Tensor(ref).realize()
    x, y = a + 1, a * 2
    Tensor.realize(x, y)
    b = Tensor(ref).realize()
    y2, x2 = b * 2, b + 1
    Tensor.realize(y2, x2)  # the same graph, asked for in the other order
    for plus, times in ((x, y), (x2, y2)):
        assert plus.tolist() == list(ref + 1) and times.tolist() == list(ref * 2)


def test_a_freed_input_buffer_whose_memory_and_id_are_reused_reads_the_new_values() -> None:
    for i in range(40):  # new buffers (and, after gc, recycled Python ids) under one cached schedule
        x = Tensor(np.full(8, i, np.float32)).realize()
        y = (x * 3 - 1).realize()
        assert y.tolist() == [3.0 * i - 1] * 8
        del x, y
        if i % 10 == 0:
            gc.collect()


def test_every_cache_hit_gets_its_own_memory() -> None:
    # three equal inputs in buffers of their own: the same cache key, but graphs that hash-consing keeps apart (the
    # same graph over the same buffer would be the same node, whose realized value may be reused while it lives)
    a, b, c = (Tensor(np.arange(1000, dtype=np.float32)).realize() for _ in range(3))

    def graph(x: Tensor) -> Tensor:  # private intermediates, so the template carries the memory planner's slots
        return ((((x * 2).contiguous() + 1).contiguous() * 3).contiguous() - 4).sum()

    first = graph(a)
    first.realize()
    second = graph(b)
    assert hits(second.realize) == 1
    assert hits(lambda: graph(c).realize()) == 1
    want = float(((np.arange(1000, dtype=np.float64) * 2 + 1) * 3 - 4).sum())
    np.testing.assert_allclose([first.item(), second.item()], [want, want], rtol=1e-5)
    assert first._buffer() is not second._buffer()


def test_a_value_realized_before_is_read_from_its_buffer_on_the_cached_path() -> None:
    for _ in range(3):  # the second and third rounds hit the cache
        x = Tensor(np.arange(8, dtype=np.float32)).realize()
        y = x + 1
        z = y * 2  # built before y is realized: its graph holds y's node, which then stands for y's buffer
        y.realize()
        items = z.schedule()
        assert len(items) == 1 and any(b is y._buffer() for b in items[0].bufs[1:])
        assert z.tolist() == list((np.arange(8) + 1.0) * 2)


def test_scalar_operands_keep_signed_zero_nan_and_dtypes_apart() -> None:
    x = Tensor(np.array([1.0, -1.0], np.float32)).realize()
    for _ in range(2):
        assert np.signbit((x * 0.0).numpy()).tolist() == [False, True]
        assert np.signbit((x * -0.0).numpy()).tolist() == [True, False]
        assert np.isnan((x + float("nan")).numpy()).all()
        assert (x + True).tolist() == [2.0, 0.0]
        b = Tensor([True, False]).realize()
        assert (b + True).dtype == dtypes.bool and (b + 1).dtype == dtypes.int32
    z = Tensor(np.zeros((2, 3), np.float32))
    assert (z + 1).tolist() == [[1.0] * 3] * 2 and (Tensor(2.0) + 1).item() == 3.0
