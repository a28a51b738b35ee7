"""Symbolic sizes through every op family: creation, elementwise, reduce, movement, matmul, attention and TinyJit
replays. Each test runs for two bound values of one Variable and compares with numpy at the bound size."""

from __future__ import annotations

import numpy as np
import pytest
from tinygrad import Device, Tensor, TinyJit, Variable

VALUES = (3, 7)
RNG = np.random.default_rng(13)
A_NP = RNG.standard_normal((8, 5)).astype(np.float32)


def _rows(value: int) -> tuple[Tensor, np.ndarray]:
    """A[:n] with n bound to value: a symbolic number of rows."""
    n = Variable("n", 1, 8).bind(value)
    return Tensor(A_NP)[:n], A_NP[:value]


def _close(got: Tensor, want: np.ndarray, tol: float = 1e-5) -> None:
    out = got.numpy()
    assert out.shape == want.shape
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)


# ---- creation ----

@pytest.mark.parametrize("value", VALUES)
def test_constant_creators_take_a_bound_variable(value: int) -> None:
    n = Variable("n", 1, 8).bind(value)
    ones = Tensor.ones(n, 4)
    assert ones.shape[0] is n and ones.shape[1] == 4
    _close(ones, np.ones((value, 4), np.float32))
    _close(Tensor.zeros(n, 2), np.zeros((value, 2), np.float32))
    _close(Tensor.full((2, n), 2.5), np.full((2, value), 2.5, np.float32))
    _close(Tensor.ones(n * 2), np.ones(value * 2, np.float32))
    _close(Tensor.arange(n), np.arange(value))
    _close(Tensor.eye(n), np.eye(value, dtype=np.float32))
    _close(Tensor.eye(n, 5), np.eye(value, 5, dtype=np.float32))
    _close(Tensor.linspace(-1, 3, n), np.linspace(-1, 3, value, dtype=np.float32))
    x, x_np = _rows(value)
    _close(x.zeros_like() + x.ones_like() * 3, np.full_like(x_np, 3))
    empty = Tensor.empty(n, 3)
    assert empty.shape[0] is n
    assert empty.numpy().shape == (value, 3)


def test_linspace_of_one_step_is_its_start_as_in_numpy() -> None:
    _close(Tensor.linspace(-1, 3, 1), np.array([-1.0], np.float32))
    _close(Tensor.linspace(-1, 3, Variable("n", 1, 8).bind(1)), np.array([-1.0], np.float32))


def test_random_creators_refuse_a_symbolic_size_as_tinygrad_does() -> None:
    n = Variable("n", 1, 8).bind(3)
    for make in (lambda: Tensor.rand(n, 2), lambda: Tensor.randn(2, n), lambda: Tensor.randint(n, high=4),
                 lambda: Tensor.uniform(n), lambda: Tensor.ones(n, 2).rand_like()):
        with pytest.raises(ValueError, match="symbolic size"):
            make()


def test_empty_over_an_unbound_variable_is_sized_for_its_largest_value() -> None:
    n = Variable("n", 1, 32)
    t = Tensor.empty(2, n, 4)
    assert t.shape[1] is n and t.max_shape == (2, 32, 4) and t.max_numel() == 256
    with pytest.raises(ValueError, match="bind it"):
        (t + 1).numpy()


def test_bad_variables_raise_clear_errors() -> None:
    n = Variable("n", 1, 8)
    with pytest.raises(ValueError, match="not bound"):
        Tensor.ones(n, 2)
    with pytest.raises(ValueError, match="not bound"):
        Tensor(A_NP)[:n]
    with pytest.raises(ValueError, match=r"\[1, 8\]"):
        n.bind(9)
    with pytest.raises(ValueError, match=r"\[1, 8\]"):
        n.bind(0)
    with pytest.raises(ValueError, match="every value"):
        _rows(3)[0].reshape(3, 5)  # right for n=3 only: one kernel must serve every n


# ---- elementwise and reduce ----

@pytest.mark.parametrize("value", VALUES)
def test_elementwise_ops_on_a_symbolic_tensor(value: int) -> None:
    x, x_np = _rows(value)
    _close((x * 2 + 1).exp2().log2(), x_np * 2 + 1, 1e-4)
    _close(x.relu() - x.sigmoid() * x.tanh(), np.maximum(x_np, 0) - 1 / (1 + np.exp(-x_np)) * np.tanh(x_np), 1e-5)
    _close((x > 0).where(x, -x), np.abs(x_np))
    _close(x + Tensor(np.arange(5, dtype=np.float32)), x_np + np.arange(5, dtype=np.float32))
    _close(x.maximum(x.flip(0)), np.maximum(x_np, x_np[::-1]))


@pytest.mark.parametrize("value", VALUES)
def test_reductions_over_the_symbolic_axis(value: int) -> None:
    x, x_np = _rows(value)
    _close(x.sum(0), x_np.sum(0))
    _close(x.sum(), np.array(x_np.sum(), np.float32), 1e-4)
    _close(x.mean(0), x_np.mean(0))  # divides by the bound value, not the Variable's largest
    _close(x.mean(), np.array(x_np.mean(), np.float32))
    _close(x.max(0), x_np.max(0))
    _close(x.min(0), x_np.min(0))
    _close(x.var(0), x_np.var(0, ddof=1), 1e-4)
    _close(x.std(0, correction=0), x_np.std(0), 1e-4)
    e = np.exp(x_np - x_np.max(0))
    _close(x.softmax(0), e / e.sum(0))
    _close(x.log_softmax(0), np.log(e / e.sum(0)), 1e-4)
    _close(x.logsumexp(0), np.log(np.exp(x_np).sum(0)), 1e-4)
    _close(x.softmax(1).sum(1), np.ones(value, np.float32))


# ---- movement ----

@pytest.mark.parametrize("value", VALUES)
def test_movement_ops_with_a_symbolic_dimension(value: int) -> None:
    n = Variable("n", 1, 8).bind(value)
    x, x_np = _rows(value)
    _close(x.permute(1, 0), x_np.T)
    _close(x.reshape(n * 5), x_np.reshape(-1))
    _close(x.reshape(-1), x_np.reshape(-1))
    _close(x.reshape(n, 1, 5).expand(n, 3, 5), np.broadcast_to(x_np[:, None], (value, 3, 5)))
    _close(x[:, :4].reshape(n, 2, 2), x_np[:, :4].reshape(value, 2, 2))
    _close(x.T.reshape(5, n, 1).squeeze(2), x_np.T)
    _close(x.pad(((1, 2), (0, 1))), np.pad(x_np, ((1, 2), (0, 1))))
    _close(x.shrink(((1, n), (1, 4))), x_np[1:, 1:4])
    _close(x.flip(0), x_np[::-1])
    _close(x.repeat(2, 1), np.tile(x_np, (2, 1)))
    small = Tensor(A_NP[:2])
    _close(small.pad(((0, n), None)), np.pad(A_NP[:2], ((0, value), (0, 0))))  # a symbolic pad amount


@pytest.mark.parametrize("value", VALUES)
def test_cat_along_and_across_the_symbolic_axis(value: int) -> None:
    n = Variable("n", 1, 8).bind(value)
    x, x_np = _rows(value)
    both = x.cat(x * 2, dim=0)
    assert both.shape == Tensor.ones(n * 2, 5).shape  # n + n is the same size as n * 2
    _close(both, np.concatenate([x_np, x_np * 2], 0))
    _close(x.cat(x[:, :2], dim=1), np.concatenate([x_np, x_np[:, :2]], 1))
    _close(Tensor(A_NP[:2]).cat(x, dim=0), np.concatenate([A_NP[:2], x_np], 0))


# ---- matmul and attention ----

@pytest.mark.parametrize("value", VALUES)
def test_matmul_over_a_symbolic_length(value: int) -> None:
    x, x_np = _rows(value)
    _close(x.T @ x, x_np.T @ x_np, 1e-4)  # the symbolic axis is reduced
    _close(x @ x.T, x_np @ x_np.T, 1e-4)  # the symbolic axis is in the output twice
    w = RNG.standard_normal((5, 3)).astype(np.float32)
    _close(x @ Tensor(w), x_np @ w, 1e-4)


def _attention_np(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    s = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("value", VALUES)
def test_decode_attention_over_a_symbolic_cache_length(value: int) -> None:
    rng = np.random.default_rng(value)
    heads, max_len, dim = 2, 8, 4
    q_np = rng.standard_normal((heads, 1, dim)).astype(np.float32)
    k_np = rng.standard_normal((heads, max_len, dim)).astype(np.float32)
    v_np = rng.standard_normal((heads, max_len, dim)).astype(np.float32)
    n = Variable("len", 1, max_len).bind(value)
    q, k, v = Tensor(q_np), Tensor(k_np)[:, :n], Tensor(v_np)[:, :n]
    want = _attention_np(q_np, k_np[:, :value], v_np[:, :value])
    by_hand = (q @ k.transpose(-1, -2) / np.sqrt(dim)).softmax(-1) @ v
    _close(by_hand, want, 1e-5)
    _close(q.scaled_dot_product_attention(k, v), want, 1e-5)


# ---- TinyJit ----

def _compiled_kernels() -> int:
    runners = getattr(Device[Device.DEFAULT], "_runners", None)
    if runners is None:
        pytest.skip(f"{Device.DEFAULT} does not expose its compiled kernels")
    return len(runners)


def test_eager_matmul_and_attention_compile_once_for_every_bound_value() -> None:
    k_np = RNG.standard_normal((16, 4)).astype(np.float32)
    q = Tensor(RNG.standard_normal((1, 4)).astype(np.float32))
    var = Variable("t", 1, 16)

    def run(value: int) -> np.ndarray:
        keys = Tensor(k_np)[:var.bind(value)]
        return (q.scaled_dot_product_attention(keys, keys) + (keys.T @ keys).sum()).numpy()

    run(4)
    compiled = _compiled_kernels()
    for value in (1, 11, 16):
        want = _attention_np(q.numpy(), k_np[:value], k_np[:value]) + (k_np[:value].T @ k_np[:value]).sum()
        np.testing.assert_allclose(run(value), want, rtol=1e-4, atol=1e-4)
    assert _compiled_kernels() == compiled, "a new bound value compiled a new kernel"


def test_tinyjit_replays_new_bound_values_without_recompiling() -> None:
    rng = np.random.default_rng(5)
    k_np = rng.standard_normal((16, 4)).astype(np.float32)
    q_np = rng.standard_normal((1, 4)).astype(np.float32)
    cache, q = Tensor(k_np).realize(), Tensor(q_np).realize()
    var = Variable("pos", 1, 16)

    @TinyJit
    def step(q: Tensor, keys: Tensor) -> Tensor:
        return ((q @ keys.T / 2).softmax(-1) @ keys).realize()  # 2 = sqrt(head dim), as _attention_np scales

    for value in (2, 5):  # call 1 runs eagerly, call 2 captures
        step(q, cache[:var.bind(value)])
    assert step.cnt == 2 and step.captured_kernels > 0
    captured, compiled = step.captured_kernels, _compiled_kernels()
    for value in (9, 1, 16):
        got = step(q, cache[:var.bind(value)]).numpy()
        np.testing.assert_allclose(got, _attention_np(q_np, k_np[:value], k_np[:value]), rtol=1e-5, atol=1e-5)
    assert step.cnt == 2, "a replay ran the function again"
    assert step.captured_kernels == captured
    assert _compiled_kernels() == compiled, "a new bound value compiled a new kernel"


def test_tinyjit_returns_outputs_of_the_new_symbolic_size() -> None:
    x_np = np.arange(24, dtype=np.float32).reshape(12, 2)
    x = Tensor(x_np).realize()
    var = Variable("m", 1, 12)

    @TinyJit
    def double(rows: Tensor) -> Tensor:
        return (rows * 2 + 1).realize()

    for value in (3, 4, 11, 6, 12):
        out = double(x[:var.bind(value)])
        assert out.numpy().shape == (value, 2)
        np.testing.assert_array_equal(out.numpy(), x_np[:value] * 2 + 1)


@pytest.mark.parametrize("value", VALUES)
def test_cumulative_ops_and_int_indices_over_a_symbolic_axis(value: int) -> None:
    x, x_np = _rows(value)
    _close(x.cumsum(0), x_np.cumsum(0))
    _close(x.T.cumsum(1), x_np.T.cumsum(1))
    _close(x.cumprod(0), x_np.cumprod(0), tol=1e-4)
    _close(x[1], x_np[1])  # an int picks a row of the symbolic axis (checked at the bound value)
    _close(x[-1], x_np[-1])
    _close(x[-2, 1:3], x_np[-2, 1:3])
    with pytest.raises(IndexError, match="out of bounds"):
        x[value]
    with pytest.raises(IndexError, match="plain slices"):
        x[::2]  # a step over a symbolic size: refused with the reason, not a TypeError from int()
