"""The eager fast path (engine/dispatch.py): a repeated one-op graph over buffers launches its remembered kernel
without scheduling, and gives what the scheduler's path gives."""

import numpy as np
import pytest
from tinygrad import Context, GlobalCounters, Tensor, TinyJit
from tinygrad.dtype import dtypes
from tinygrad.engine import dispatch


@pytest.fixture(autouse=True)
def fresh_cache():
    dispatch.clear()
    yield
    dispatch.clear()


def _hits_after_learning(make) -> int:
    """Realize make() three times (each over new buffers: an equal graph over the same buffer is the same node, realized
    once); the number of the last two that took the fast path."""
    make().realize()
    before = len(dispatch.entries)
    assert before >= 1, "the first realize of a one-op graph is remembered"
    launched = 0
    for _ in range(2):
        t = make()
        key = dispatch.eager_key(t.uop, t.device)
        launched += key is not None and dispatch.lookup(key[0]) is not None
        t.realize()
    return launched


def test_eager_loop_takes_the_fast_path_and_counts_kernels():
    x = Tensor.ones(16).contiguous().realize()
    x = (x + 1).realize()
    assert len(dispatch.entries) == 1
    GlobalCounters.reset()
    for _ in range(10):
        x = (x + 1).realize()
    assert GlobalCounters.kernel_count == 10
    assert len(dispatch.entries) == 1
    np.testing.assert_equal(x.numpy(), np.full(16, 12, np.float32))


def test_fast_path_equals_the_scheduler_path():
    rng = np.random.default_rng(0)
    a_np, b_np = rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal((5, 7)).astype(np.float32)
    results = []
    for flag in (0, 1, 1):
        with Context(EAGER_DISPATCH=flag):
            a, b = Tensor(a_np), Tensor(b_np)
            results.append([(a * b).numpy(), (a - 2.5).numpy(), (a < b).numpy(), a.maximum(b).numpy(),
                            (a * a).numpy(), (a / b).numpy(), Tensor.where(a < 0, a, b).numpy()])
    for slow, fast in zip(results[0], results[2]):
        np.testing.assert_array_equal(slow, fast)
    np.testing.assert_allclose(results[2][0], a_np * b_np, rtol=1e-6)


def test_the_same_buffer_twice_is_not_two_buffers():
    # `x * x` reads one buffer through two sources; a kernel learned from it must not serve `x * y`
    x = Tensor([1.0, 2.0, 3.0]).realize()
    y = Tensor([10.0, 20.0, 30.0]).realize()
    assert (x * x).tolist() == [1.0, 4.0, 9.0]
    assert (x * y).tolist() == [10.0, 40.0, 90.0]
    assert (y * y).tolist() == [100.0, 400.0, 900.0]
    assert (y * x).tolist() == [10.0, 40.0, 90.0]


def test_keys_tell_constants_dtypes_shapes_and_devices_apart():
    x = Tensor([1, 2, 3, 4]).realize()
    assert (x + 2).tolist() == [3, 4, 5, 6]
    assert (x + 3).tolist() == [4, 5, 6, 7]
    f = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
    assert (f + 2).tolist() == [3.0, 4.0, 5.0, 6.0]
    m = Tensor([[1.0, 2.0], [3.0, 4.0]]).realize()
    assert (m + 2).tolist() == [[3.0, 4.0], [5.0, 6.0]]
    assert (m.reshape(4) + 2).tolist() == [3.0, 4.0, 5.0, 6.0]
    h = Tensor([1.0, 2.0, 3.0, 4.0], dtype=dtypes.float16).realize()
    assert (h + 2).dtype == dtypes.float16 and (h + 2).tolist() == [3.0, 4.0, 5.0, 6.0]
    other = Tensor([1.0, 2.0, 3.0, 4.0], device="CPU:1").realize()
    out = (other + 2).realize()
    assert out.device == "CPU:1" and out.tolist() == [3.0, 4.0, 5.0, 6.0]


def test_a_realized_reduction_of_constants_is_computed_again_not_read_from_its_buffer():
    # The scheduler computes a reduction of constants in the kernel that reads it; a key naming the buffer it was
    # realized into would serve that kernel, with the old sum built in, to a different sum realized into the same
    # kind of buffer (backward()'s bias gradient accumulating after a smaller model's did).
    for size in (2000, 20000):
        acc = Tensor.ones(size, 10).sum(0).realize()  # the constants' sum, realized into a buffer
        for step in range(2, 4):
            acc = (acc + Tensor.ones(size, 10).sum(0)).realize()
            assert acc.tolist() == [size * step] * 10


def test_a_sum_over_a_variable_length_follows_the_bound_value():
    from tinygrad import Variable
    x = Tensor([1.0, 2.0]).realize()
    for n in (3, 7, 3, 5):
        v = Variable("n", 1, 10).bind(n)
        assert (x + Tensor.ones(10)[:v].sum()).tolist() == [1.0 + n, 2.0 + n]


@pytest.mark.parametrize("n", [1, 3, 1000, 4099])
def test_odd_sizes_hit_and_match_numpy(n):
    v = np.arange(n, dtype=np.float32)
    assert _hits_after_learning(lambda: Tensor(v).realize() * 3) == 2
    np.testing.assert_array_equal((Tensor(v).realize() * 3).numpy(), v * 3)


def test_empty_tensors():
    x = Tensor.empty(0).realize()
    for _ in range(3):
        y = (x + 1).realize()
        assert y.shape == (0,) and y.numpy().shape == (0,)


def test_gradients_flow_through_fast_path_results():
    w = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    for _ in range(3):
        y = (w * 2).realize()  # realized, but keeps its graph for backward
        y.sum().backward()
    assert w.grad is not None and w.grad.tolist() == [6.0, 6.0, 6.0]


def test_a_realized_node_is_not_recomputed():
    x = Tensor([1.0, 2.0]).realize()
    (Tensor([5.0, 6.0]).realize() + 1).realize()  # learned
    pending = x + 1
    y = (x + 1).realize()  # the same node as pending's (hash-consing), realized on the fast path
    GlobalCounters.reset()
    assert pending.realize().tolist() == y.tolist() == [2.0, 3.0]
    assert GlobalCounters.kernel_count == 0


def test_tinyjit_captures_kernels_the_fast_path_would_skip():
    @TinyJit
    def step(x: Tensor) -> Tensor:
        return (x + 1).realize() * 2

    for i in range(4):
        x = Tensor([float(i), 1.0]).realize()
        (x + 1).realize()  # teach the fast path the same op outside the function
        assert step(x).tolist() == [(i + 1) * 2.0, 4.0]


def test_debug_and_switch_off_take_the_scheduler_path():
    (Tensor([5.0]).realize() + 1).realize()
    y = Tensor([1.0]).realize() + 1
    with Context(DEBUG=2):
        assert dispatch.eager_key(y.uop, y.device) is None
    with Context(EAGER_DISPATCH=0):
        assert dispatch.eager_key(y.uop, y.device) is None
    assert dispatch.eager_key(y.uop, y.device) is not None


def test_deeper_graphs_and_movement_ops_are_not_keyed():
    x = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
    assert dispatch.eager_key((x + 1 + 2).uop, "CPU") is None  # two ops: the scheduler fuses them
    assert dispatch.eager_key((x[1:] + 1).uop, "CPU") is None  # a shrink over the buffer
    assert dispatch.eager_key(x.sum().uop, "CPU") is None  # a reduction
    assert (x[1:] + 1).tolist() == [3.0, 4.0, 5.0]


def test_broadcast_large_through_expand():
    # a constant expanded past 2**31 elements is a graph of constants; the op over it stays unrealized here, and
    # a small op over a real buffer next to it still takes the fast path
    big = Tensor.full((1,), 2.0).reshape(1, 1).expand(2**16, 2**16)
    assert dispatch.eager_key((big + 1).uop, "CPU") is not None
    assert _hits_after_learning(lambda: Tensor.arange(6).reshape(2, 3).contiguous().realize() * 2) == 2
    x = Tensor.arange(6).reshape(2, 3).contiguous().realize()
    assert (x * 2).tolist() == [[0, 2, 4], [6, 8, 10]]


def test_the_caches_keep_no_buffer_alive():
    import gc
    import weakref

    x = Tensor([1.0, 2.0, 3.0]).realize()
    memory = weakref.ref(x._buffer())
    (x.flip(0) + 1).realize()  # a source that is neither a buffer nor constants: not keyed, and not remembered
    for _ in range(3):
        (x + 1).realize()
    del x
    gc.collect()
    assert memory() is None


def _both_paths(scenario):
    """scenario() run on the scheduler's path and then twice on the fast path (the first run teaches it every
    kernel): the three results must be equal, in dtype, shape and every bit."""
    with Context(EAGER_DISPATCH=0):
        want = scenario()
    got = [scenario(), scenario()]
    for g in got:
        assert len(g) == len(want)
        for a, b in zip(g, want):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))  # bits: -0.0 and NaN too
    return want


def _values(*tensors: Tensor) -> list[np.ndarray]:
    # realize() first: numpy() alone shapes the values by the graph's shape from before the realize, where a wrong
    # view from the fast path would not show
    return [t.realize().numpy() for t in tensors]


def test_scalar_constants_of_equal_value_and_other_type_or_sign_are_not_shared():
    def scenario():
        i = Tensor([1, 2, 3], dtype=dtypes.int32).realize()
        f = Tensor([1.0, -2.0, 0.0], dtype=dtypes.float32).realize()
        b = Tensor([True, False, True]).realize()
        return _values(i + 1, i + 1.0, i + True, f * 0.0, f * -0.0, f + float("nan"), f + 2, f + 2.5, b + True,
                       b * False, 1 - f, 2 * f, f < 0)

    r = _both_paths(scenario)
    assert r[0].dtype == np.int32 and r[1].dtype == np.float32 and r[1].tolist() == [2.0, 3.0, 4.0]
    assert np.signbit(r[3]).tolist() == [False, True, False] and np.signbit(r[4]).tolist() == [True, False, True]


def test_shapes_views_and_dtypes_never_reuse_a_kernel_for_another():
    def scenario():
        out = []
        for shape in [(4,), (2, 2), (4, 1), (1, 4), (3,), (5,)]:
            n = int(np.prod(shape))
            view = Tensor(np.arange(n, dtype=np.float32) - 1.5).realize().reshape(shape)
            out += _values(view + 1, view * view)
        for dt in [dtypes.float32, dtypes.float16, dtypes.int32, dtypes.int8, dtypes.uint8, dtypes.float64]:
            t = Tensor([1, 2, 3, 4], dtype=dt).realize()
            out += _values(t + 3, t * 2, t.cast(dtypes.float32), t < 3)
        f = Tensor([1.5, -2.5, 3.0, 250.0]).realize()  # one input, casts to several dtypes: the key's root dtype
        casts = [dtypes.int32, dtypes.float16, dtypes.uint8, dtypes.float64, dtypes.bool]
        out += _values(*(f.cast(dt) for dt in casts), f.bitcast(dtypes.int32))
        a = Tensor([[1.0, 2.0], [3.0, 4.0]]).realize()
        b = Tensor([10.0, 20.0, 30.0, 40.0]).realize()
        return out + _values(a + b.reshape(2, 2), b.reshape(2, 2) + a, a.reshape(4) - b)

    _both_paths(scenario)


def test_other_elementwise_ops_and_two_inputs():
    rng = np.random.default_rng(1)
    xs, ys = rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)

    def scenario():
        x, y = Tensor(xs).realize(), Tensor(ys).realize()
        return _values(x * 2 + y, x.relu(), -x, x.maximum(y), x - y, x / y, x.exp2(), x == y, Tensor.where(x < y, x, y))

    r = _both_paths(scenario)
    np.testing.assert_allclose(r[0], xs * 2 + ys, rtol=1e-6)
    np.testing.assert_array_equal(r[1], np.maximum(xs, 0))


def test_an_input_buffer_written_by_assign_is_read_at_realize():
    def scenario():
        x = Tensor([1.0, 2.0, 3.0]).realize()
        before = (x + 1).realize()  # realized before the write: keeps the old values
        pending = x * 2  # not realized before the write
        x.assign(Tensor([10.0, 20.0, 30.0])).realize()
        after = (x + 1).realize()
        x += 1  # in place, through assign
        x.realize()
        again = (x + 1).realize()
        return _values(before, pending, after, x, again)

    r = _both_paths(scenario)
    assert r[0].tolist() == [2.0, 3.0, 4.0]
    assert r[2].tolist() == [11.0, 21.0, 31.0] and r[3].tolist() == [11.0, 21.0, 31.0]
    assert r[4].tolist() == [12.0, 22.0, 32.0]


def test_assign_through_a_view_then_the_fast_path():
    def scenario():
        x = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
        first = (x + 1).realize()
        x[1:3].assign(Tensor([20.0, 30.0])).realize()
        m = Tensor([[1.0, 2.0], [3.0, 4.0]]).realize()
        m.reshape(4).assign(Tensor([5.0, 6.0, 7.0, 8.0])).realize()
        return _values(first, x + 1, x, m + 1, m.reshape(4) * 2)

    r = _both_paths(scenario)
    assert r[1].tolist() == [2.0, 21.0, 31.0, 5.0] and r[3].tolist() == [[6.0, 7.0], [8.0, 9.0]]


def test_results_never_share_memory_with_live_tensors():
    # outputs come from recycled memory: each live result must keep its own values while others are made and dropped
    x = Tensor.zeros(16).contiguous().realize()
    kept = []
    for i in range(50):
        x = (x + 1).realize()
        if i % 7 == 0:
            kept.append((i + 1, x))
        (x * 100).realize()  # a temporary that dies at once
    for value, t in kept:
        np.testing.assert_array_equal(t.realize().numpy(), np.full(16, value, np.float32))
    assert len({id(t._buffer()) for _, t in kept}) == len(kept)


def test_unallocated_input_buffers_are_allocated_on_launch():
    (Tensor.empty(8).realize() + 1).realize()  # learned over an empty tensor's buffer
    for _ in range(2):
        e = Tensor.empty(8)
        assert not e.uop.arg.is_allocated
        y = (e * 0 + 3).realize()  # reads the never-written buffer: the values are not checked, only that it runs
        assert y.shape == (8,)
        z = (e * 0).realize()  # one op over an unallocated buffer: the fast path allocates it
        assert z.shape == (8,) and e.uop.arg.is_allocated


def test_realizing_a_realized_tensor_launches_nothing():
    x = Tensor([1.0, 2.0]).realize()
    node = x.uop
    GlobalCounters.reset()
    assert x.realize() is x and x.uop is node and GlobalCounters.kernel_count == 0
    view = x.reshape(2, 1)  # a view realizes through the scheduler (it may write through to its base): same value
    assert view.realize().tolist() == [[1.0], [2.0]]


@pytest.mark.parametrize("shape", [(2, 3), (1, 3, 32, 32), (0, 4), (5, 1)])
def test_an_uploaded_array_is_realized_already(shape, monkeypatch):
    # Tensor(ndarray) of more than one dimension is a reshaped buffer: realize must not schedule anything for it
    import tinygrad.tensor as tensor_module

    arr = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    t = Tensor(arr)
    monkeypatch.setattr(tensor_module, "create_schedule", lambda *a, **k: pytest.fail("scheduled an upload"))
    assert t.realize() is t
    monkeypatch.undo()
    np.testing.assert_array_equal(t.numpy(), arr)
    if shape[0] > 1:  # writing through a slice of it still works, and the upload is not changed behind its back
        t[1:2].assign(Tensor.full((1, *shape[1:]), -1.0)).realize()
        want = arr.copy()
        want[1:2] = -1.0
        np.testing.assert_array_equal(t.numpy(), want)
        np.testing.assert_array_equal(arr, np.arange(arr.size, dtype=np.float32).reshape(shape))
    assert (t + 1).numpy().shape == shape
