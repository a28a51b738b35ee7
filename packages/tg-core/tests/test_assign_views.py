"""assign through views: a tensor made by movement ops writes into its base, eagerly and under TinyJit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from tinygrad import Device, Tensor, TinyJit, Variable

RNG = np.random.default_rng(11)


def data(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# (name, the view taken of a (4, 6) base, the same on a numpy array: a numpy view, written with [...] =)
VIEWS: list[tuple[str, Callable[[Any], Any]]] = [
    ("slice", lambda x: x[1:3, 2:5]),
    ("int index", lambda x: x[1]),
    ("int and slice", lambda x: x[2, 1:4]),
    ("step slice", lambda x: x[::2, 1::3]),
    ("negative step", lambda x: x[::-1, 4:0:-2]),
    ("shrink", lambda x: x.shrink(((1, 4), (0, 2))) if isinstance(x, Tensor) else x[1:4, 0:2]),
    ("permute", lambda x: x.permute(1, 0) if isinstance(x, Tensor) else x.transpose(1, 0)),
    (".T", lambda x: x.T),
    ("reshape", lambda x: x.reshape(3, 8)),
    ("flip", lambda x: x.flip(1) if isinstance(x, Tensor) else x[:, ::-1]),
    ("view of a view", lambda x: x.reshape(2, 2, 6)[1].T[1:5]),
    ("slice of a transpose", lambda x: x.T[2:4, ::-1]),
    ("None and ellipsis", lambda x: x[None, ..., 3]),
]


@pytest.mark.parametrize("name,view", VIEWS, ids=[v[0] for v in VIEWS])
def test_assign_through_a_view_writes_the_base(name: str, view: Callable[[Any], Any]) -> None:
    base_np = data(4, 6)
    expected = base_np.copy()
    target = view(expected)
    value = data(*target.shape)
    target[...] = value
    base = Tensor(base_np)
    v = view(base)
    assert v.assign(Tensor(value)) is v
    np.testing.assert_array_equal(base.numpy(), expected)
    np.testing.assert_array_equal(v.numpy(), value)
    np.testing.assert_array_equal(view(base).numpy(), value)  # a view made after reads the new value


def test_assign_writes_a_realized_base_and_the_view_is_lazy_until_realized() -> None:
    c = Tensor.zeros(2, 3).contiguous().realize()
    c[:, 1:2].assign(Tensor.ones(2, 1)).realize()
    np.testing.assert_array_equal(c.numpy(), [[0, 1, 0], [0, 1, 0]])


def test_a_scalar_value_fills_the_view() -> None:
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    t = Tensor(x)
    t[1:, 2].assign(-7)
    x[1:, 2] = -7
    np.testing.assert_array_equal(t.numpy(), x)


def test_writes_into_the_padding_are_dropped() -> None:
    x = data(3, 4)
    t = Tensor(x)
    v = t.pad(((1, 2), (0, 1)))
    value = data(6, 5)
    v.assign(Tensor(value))
    np.testing.assert_array_equal(t.numpy(), value[1:4, 0:4])
    expected = np.pad(value[1:4, 0:4], ((1, 2), (0, 1)))  # the view reads the base again: zeros in the padding
    np.testing.assert_array_equal(v.numpy(), expected)


def test_an_expanded_view_cannot_be_assigned() -> None:
    t = Tensor(data(1, 4))
    with pytest.raises(ValueError, match="expanded"):
        t.expand(3, 4).assign(Tensor.ones(3, 4))
    with pytest.raises(ValueError, match="expanded"):
        t.expand(3, 4)[1:].assign(Tensor.ones(2, 4))


def test_shape_dtype_and_device_errors_are_those_of_assign() -> None:
    t = Tensor(data(4, 6))
    with pytest.raises(ValueError, match="assign of shape"):
        t[1:3].assign(Tensor.ones(3, 6))
    with pytest.raises(TypeError, match="cast it first"):
        t[1:3].assign(Tensor.ones(2, 6).cast("int32"))


def test_successive_writes_through_views_and_the_base_all_land() -> None:
    x = data(4, 6)
    t = Tensor(x)
    row = t[0]  # taken before the base's assign: writes into the base's current value (views alias the base)
    a, b, c = data(4, 6), data(6), data(2, 6)
    t.assign(Tensor(a))
    row.assign(Tensor(b))
    t[2:].assign(Tensor(c))
    expected = a.copy()
    expected[0] = b
    expected[2:] = c
    np.testing.assert_array_equal(t.numpy(), expected)
    np.testing.assert_array_equal(row.numpy(), b)


def test_reads_before_the_assign_keep_their_value() -> None:
    x = data(4, 6)
    t = Tensor(x)
    before_realized = (t[1] * 2).realize()
    before_lazy = t[1] * 3
    old_view = t[1:3]
    t[1:3].assign(Tensor.zeros(2, 6))
    np.testing.assert_array_equal(before_realized.numpy(), x[1] * 2)
    np.testing.assert_array_equal(before_lazy.numpy(), x[1] * 3)
    np.testing.assert_array_equal(old_view.numpy(), x[1:3])  # a view taken before keeps the old value too
    np.testing.assert_array_equal(t[1:3].numpy(), np.zeros((2, 6)))


def test_a_realized_view_still_writes_its_base() -> None:
    x = data(4, 6)
    t = Tensor(x)
    v = t[1:3, ::2].realize()  # realize() caches the value, it does not change what assign means
    value = data(2, 3)
    v.assign(Tensor(value))
    x[1:3, ::2] = value
    np.testing.assert_array_equal(t.numpy(), x)
    np.testing.assert_array_equal(v.reshape(6).numpy(), value.reshape(6))  # a view of the realized view


def test_setitem_through_a_view_reaches_the_base() -> None:
    x = data(4, 6)
    t = Tensor(x)
    t[1][2:4] = 9.0
    t.T[0] = Tensor(np.arange(4, dtype=np.float32))
    x[1][2:4] = 9.0
    x.T[0] = np.arange(4)
    np.testing.assert_array_equal(t.numpy(), x)


def test_leaf_that_requires_grad_refuses_writes_through_views() -> None:
    x = Tensor(data(4, 6), requires_grad=True)
    with pytest.raises(RuntimeError, match="requires grad"):
        x[1:3].assign(Tensor.zeros(2, 6))


def test_gradients_through_a_view_assign_match_torch(torch: Any) -> None:
    x_np, w_np, g_np = data(5, 3), data(2, 3), data(5, 3)
    x = Tensor(x_np, requires_grad=True)
    w = Tensor(w_np, requires_grad=True)
    y = x * 1
    y[1:3].assign(w * 2)
    assert y.requires_grad
    (y * Tensor(g_np)).sum().backward()

    tx = torch.tensor(x_np, requires_grad=True)
    tw = torch.tensor(w_np, requires_grad=True)
    ty = tx * 1
    ty[1:3] = tw * 2
    (ty * torch.tensor(g_np)).sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-6)
    assert x.grad is not None and w.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-6)


# ---- TinyJit ----

@pytest.mark.parametrize("name,view", VIEWS, ids=[v[0] for v in VIEWS])
def test_view_assign_in_tinyjit_writes_the_base_on_every_replay(name: str, view: Callable[[Any], Any]) -> None:
    base_np = data(4, 6)
    base = Tensor(base_np).contiguous().realize()
    shape = view(base_np).shape

    runs = []

    @TinyJit
    def step(x: Tensor) -> Tensor:
        runs.append(1)
        v = view(base)
        v.assign(v * 0.5 + x)
        return base.sum(axis=0).contiguous()

    expected = base_np.copy()
    for _ in range(4):  # eager, capture, two replays
        x = data(*shape)
        target = view(expected)
        target[...] = target * 0.5 + x
        out = step(Tensor(x))
        np.testing.assert_allclose(base.numpy(), expected, rtol=1e-6)
        np.testing.assert_allclose(out.numpy(), expected.sum(axis=0), rtol=1e-5, atol=1e-6)
    assert len(runs) == 2, "the body runs eagerly, then to capture; the replays do not run it"


def _compiled_kernels() -> int:
    runners = getattr(Device[Device.DEFAULT], "_runners", None)
    if runners is None:
        pytest.skip(f"{Device.DEFAULT} does not expose its compiled kernels")
    return len(runners)


def test_kv_cache_decode_loop_with_a_symbolic_start_pos_under_tinyjit() -> None:
    max_len = 8
    cache_np = np.zeros((2, 1, max_len + 1, 2, 8), np.float32)
    cache = Tensor(cache_np).contiguous().realize()
    start = Variable("start_pos", 1, max_len)

    runs = []

    @TinyJit
    def step(x: Tensor, start_pos: Any) -> Tensor:
        runs.append(1)
        cache[:, :, start_pos:start_pos + 1].assign(x).realize()
        keys = cache[:, :, 0:start_pos + 1]  # every position written so far
        return (keys * 2).sum(axis=2).contiguous()

    compiled = None
    for i in range(1, 8):
        x = data(2, 1, 1, 2, 8)
        out = step(Tensor(x), start.bind(i))
        cache_np[:, :, i:i + 1] = x
        np.testing.assert_allclose(cache.numpy(), cache_np, rtol=1e-6)
        np.testing.assert_allclose(out.numpy(), (cache_np[:, :, :i + 1] * 2).sum(axis=2), rtol=1e-5, atol=1e-6)
        if i == 2:  # captured: from here on the replays run what was compiled
            compiled = _compiled_kernels()
    assert len(runs) == 2, "captured once: the replays take each new start_pos without running the body"
    assert _compiled_kernels() == compiled, "a new start_pos compiled a new kernel"


def test_kv_cache_eager_with_a_symbolic_start_pos() -> None:
    cache_np = np.zeros((3, 6, 4), np.float32)
    cache = Tensor(cache_np).contiguous().realize()
    start = Variable("pos", 0, 5)
    for i in (0, 3, 5):
        x = data(3, 1, 4)
        sp = start.bind(i)
        cache[:, sp:sp + 1].assign(Tensor(x)).realize()
        cache_np[:, i:i + 1] = x
    np.testing.assert_array_equal(cache.numpy(), cache_np)


def test_a_realized_view_kept_as_state_stays_current_across_replays() -> None:
    x = data(2, 3)
    base = Tensor(x)
    w = base.T.realize()  # model state that is a view (a transposed weight), with a buffer of its own

    @TinyJit
    def step(g: Tensor) -> Tensor:
        w.assign(w - g)
        return (w * 2).sum().contiguous()

    expected = x.T.copy()
    for _ in range(5):
        g = data(3, 2)
        out = step(Tensor(g))
        expected -= g
        np.testing.assert_allclose(w.numpy(), expected, rtol=1e-6)
        np.testing.assert_allclose(base.numpy(), expected.T, rtol=1e-6)
        np.testing.assert_allclose(out.numpy(), expected.sum() * 2, rtol=1e-5, atol=1e-5)


def test_a_view_whose_base_is_gone_takes_the_value_itself() -> None:
    v = Tensor(data(4, 6))[1:3].T  # the base is a temporary: no one else can read it
    value = data(6, 2)
    v.assign(Tensor(value))
    np.testing.assert_array_equal(v.numpy(), value)
    w = v[::2]  # and it is still a view of its own: writes reach it
    w.assign(Tensor.zeros(3, 2))
    value[::2] = 0
    np.testing.assert_array_equal(v.numpy(), value)


def test_a_view_does_not_keep_its_base_alive() -> None:
    import weakref

    base = Tensor(data(4, 6))
    ref = weakref.ref(base)
    view = base[1:3].realize()
    del base
    assert ref() is None
    np.testing.assert_array_equal(view.shape, (2, 6))
