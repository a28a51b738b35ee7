"""tinygrad.function: values of the plain call, one trace per signature, implicit inputs, gradients, TinyJit."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest
from tinygrad import Tensor, TinyJit, function

RNG = np.random.default_rng(13)


def data(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def test_values_match_the_plain_call() -> None:
    @function
    def f(x: Tensor, w: Tensor) -> Tensor:
        return (x @ w).relu()

    x, w = data(3, 4), data(4, 5)
    np.testing.assert_allclose(f(Tensor(x), Tensor(w)).numpy(), np.maximum(x @ w, 0), rtol=1e-5, atol=1e-6)


def test_tuple_return_and_kwargs() -> None:
    @function()
    def f(x: Tensor, *, scale: float, bias: Tensor) -> tuple[Tensor, Tensor]:
        return x * scale + bias, (x - bias).exp()

    x, b = data(2, 3), data(3)
    out = f(Tensor(x), scale=3.0, bias=Tensor(b))
    assert isinstance(out, tuple) and len(out) == 2
    np.testing.assert_allclose(out[0].numpy(), x * 3.0 + b, rtol=1e-5)
    np.testing.assert_allclose(out[1].numpy(), np.exp(x - b), rtol=1e-5)
    # the non-tensor keyword is part of the signature: a new scale is a new trace, not the old one's value
    np.testing.assert_allclose(f(Tensor(x), scale=-2.0, bias=Tensor(b))[0].numpy(), x * -2.0 + b, rtol=1e-5)


def test_nested_tensors_in_lists_and_dicts() -> None:
    @function
    def f(xs: list[Tensor], d: dict[str, tuple[Tensor, Tensor]]) -> Tensor:
        return xs[0] + xs[1] * d["pair"][0] - d["pair"][1]

    a, b, c, e = data(4), data(4), data(4), data(4)
    for _ in range(2):  # a trace, then its reuse with new tensors of the same signature
        a, b, c, e = a + 1, b * 2, c - 1, e / 2
        out = f([Tensor(a), Tensor(b)], {"pair": (Tensor(c), Tensor(e))})
        np.testing.assert_allclose(out.numpy(), a + b * c - e, rtol=1e-5)


class Affine:
    def __init__(self, w: np.ndarray, b: np.ndarray):
        self.w, self.b, self.calls = Tensor(w), Tensor(b), 0

    @function
    def __call__(self, x: Tensor) -> Tensor:
        return x @ self.w + self.b


def test_method_reads_each_instances_own_weights() -> None:
    w1, b1, w2, b2, x = data(3, 2), data(2), data(3, 2), data(2), data(4, 3)
    m1, m2 = Affine(w1, b1), Affine(w2, b2)
    # the weights are arguments (attributes of self), so the second instance reuses the trace with its own weights
    np.testing.assert_allclose(m1(Tensor(x)).numpy(), x @ w1 + b1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m2(Tensor(x)).numpy(), x @ w2 + b2, rtol=1e-5, atol=1e-6)
    assert len(Affine.__call__.traces) == 1


def test_the_body_runs_once_per_signature() -> None:
    runs = []

    @function
    def f(x: Tensor, y: Tensor) -> Tensor:
        runs.append(x.shape)
        return (x * y + 1).sum(axis=0)

    x1, y1, x2, y2 = data(3, 4), data(3, 4), data(3, 4), data(3, 4)
    np.testing.assert_allclose(f(Tensor(x1), Tensor(y1)).numpy(), (x1 * y1 + 1).sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(f(Tensor(x2), Tensor(y2)).numpy(), (x2 * y2 + 1).sum(axis=0), rtol=1e-5)
    assert len(runs) == 1, "a second call of one signature substitutes its inputs into the trace"
    x3, y3 = data(2, 5), data(2, 5)
    np.testing.assert_allclose(f(Tensor(x3), Tensor(y3)).numpy(), (x3 * y3 + 1).sum(axis=0), rtol=1e-5)
    assert runs == [(3, 4), (2, 5)]
    f(Tensor(x1), Tensor(y1).cast("float16"))  # another dtype is another signature
    assert len(runs) == 3


def test_traces_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    # tinygrad.function, the attribute, is the decorator (as in tinygrad); the module is in sys.modules
    monkeypatch.setattr(sys.modules["tinygrad.function"], "MAX_TRACES", 3)
    runs = []

    @function
    def f(x: Tensor) -> Tensor:
        runs.append(x.shape)
        return x + 1

    for n in (1, 2, 3, 4):
        f(Tensor.ones(n))
    assert len(f.traces) == 3  # the oldest signature, (1,), was dropped
    f(Tensor.ones(4))
    f(Tensor.ones(1))
    assert runs == [(1,), (2,), (3,), (4,), (1,)]


def test_one_tensor_passed_twice_is_its_own_signature() -> None:
    @function
    def f(x: Tensor, y: Tensor) -> Tensor:
        return x * 2 - y

    a, b = data(5), data(5)
    t = Tensor(a)
    np.testing.assert_allclose(f(t, t).numpy(), a, rtol=1e-6)
    np.testing.assert_allclose(f(Tensor(a), Tensor(b)).numpy(), a * 2 - b, rtol=1e-6)


def test_arguments_built_from_each_other_stay_apart() -> None:
    # y's graph is x + 1: a body computing x + 1 itself must still read the new x, not the new y, on reuse
    @function
    def f(x: Tensor, y: Tensor) -> Tensor:
        return y * 10 + (x + 1)

    a = Tensor(data(4))
    f(a, a + 1)
    b, c = data(4), data(4)
    np.testing.assert_allclose(f(Tensor(b), Tensor(c)).numpy(), c * 10 + b + 1, rtol=1e-5)


def test_implicit_buffers_are_refused_by_default() -> None:
    w = Tensor(data(4)).realize()

    @function
    def f(x: Tensor) -> Tensor:
        return x * w + Tensor.ones(4)  # the constant is no buffer; w is

    with pytest.raises(RuntimeError, match=r"1 realized buffer(.|\n)*dtype=dtypes.float32, size=4, device="):
        f(Tensor(data(4)))


def test_implicit_inputs_allowed_and_kept_as_they_are() -> None:
    wv = data(4)
    w = Tensor(wv).realize()
    runs = []

    @function(allow_implicit=True)
    def g(x: Tensor) -> Tensor:
        runs.append(1)
        return x * w

    for _ in range(2):
        x = data(4)
        np.testing.assert_allclose(g(Tensor(x)).numpy(), x * wv, rtol=1e-6)
    assert len(runs) == 1
    # a new value for the implicit input (as an optimizer step assigns it) makes the trace stale: traced again
    w.assign(w * 3).realize()
    x = data(4)
    np.testing.assert_allclose(g(Tensor(x)).numpy(), x * wv * 3, rtol=1e-5)
    assert len(runs) == 2


def test_host_read_inside_is_refused() -> None:
    @function
    def f(x: Tensor) -> Tensor:
        if x.sum().item() > 0:
            return x
        return -x

    with pytest.raises(RuntimeError, match=r"function .*f reads a tensor's value on the host"):
        f(Tensor(data(3)))
    # the refusal ends with the call
    assert Tensor([1.0, 2.0]).sum().item() == 3.0


def test_bad_return_type() -> None:
    @function
    def f(x: Tensor) -> list[Tensor]:
        return [x]

    with pytest.raises(RuntimeError, match="returned list"):
        f(Tensor(data(3)))
    x = Tensor(data(2))
    with pytest.raises(RuntimeError, match="returned tuple"):
        function(lambda t: (t, 1))(x)
    np.testing.assert_allclose(x.numpy() + 0, x.numpy())  # the argument got its own graph back


def test_gradients_match_torch(torch: Any) -> None:
    @function
    def f(x: Tensor, w: Tensor) -> Tensor:
        return (x @ w).tanh() * 2

    xv, wv, w2v = data(3, 4), data(4, 2), data(2)
    for _ in range(2):  # the traced call, then the reused trace
        x, w, w2 = Tensor(xv, requires_grad=True), Tensor(wv, requires_grad=True), Tensor(w2v, requires_grad=True)
        loss = (f(x, w) * w2).sum()
        loss.backward()
        tx, tw, tw2 = (torch.tensor(v, requires_grad=True) for v in (xv, wv, w2v))
        ((tx @ tw).tanh() * 2 * tw2).sum().backward()
        for ours, theirs in ((x, tx), (w, tw), (w2, tw2)):
            assert ours.grad is not None and theirs.grad is not None
            np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-5)
        xv, wv = xv + 0.5, wv * 0.5


def test_gradient_reaches_implicit_parameters(torch: Any) -> None:
    wv, xv = data(4), data(4)
    w = Tensor(wv, requires_grad=True)

    @function(allow_implicit=True)
    def f(x: Tensor) -> Tensor:
        return (x * w).exp()

    x = Tensor(xv, requires_grad=True)
    f(x).sum().backward()
    tw, tx = torch.tensor(wv, requires_grad=True), torch.tensor(xv, requires_grad=True)
    (tx * tw).exp().sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-5)  # type: ignore[union-attr]
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5)  # type: ignore[union-attr]


def test_grad_fxn_straight_through_estimator_matches_torch(torch: Any) -> None:
    def identity_grad(g: Tensor, x: Tensor, s: Tensor) -> tuple[Tensor | None, ...]:
        return g * s, None  # d/dx round(x * s) taken as s (straight through); no gradient for s

    @function(grad_fxn=identity_grad)
    def quantize(x: Tensor, s: Tensor) -> Tensor:
        return (x * s).round()

    class STE(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, s):  # type: ignore[no-untyped-def]
            ctx.save_for_backward(s)
            return (x * s).round()

        @staticmethod
        def backward(ctx, g):  # type: ignore[no-untyped-def]
            (s,) = ctx.saved_tensors
            return g * s, None

    sv = np.array([3.0, 0.5, 2.0], dtype=np.float32)
    for _ in range(2):
        xv, wv = data(3) * 3, data(3)
        x = Tensor(xv, requires_grad=True)
        y = quantize(x, Tensor(sv))
        (y * Tensor(wv)).sum().backward()
        tx = torch.tensor(xv, requires_grad=True)
        ty = STE.apply(tx, torch.tensor(sv))
        (ty * torch.tensor(wv)).sum().backward()
        np.testing.assert_allclose(y.numpy(), ty.detach().numpy())
        assert x.grad is not None and tx.grad is not None
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)
        assert np.abs(x.grad.numpy()).sum() > 0, "round() alone would give zero gradients"


def test_inside_tinyjit_capture_and_replay() -> None:
    w = Tensor(data(4, 3)).realize()

    @function
    def layer(x: Tensor, w: Tensor) -> Tensor:
        return (x @ w).relu() + 1

    @TinyJit
    def step(x: Tensor) -> Tensor:
        return (layer(x, w) * 2).sum(axis=1).contiguous()

    wv = w.numpy()
    for _ in range(5):  # eager, capture, then replays with new data
        xv = data(2, 4)
        np.testing.assert_allclose(step(Tensor(xv)).numpy(), ((np.maximum(xv @ wv, 0) + 1) * 2).sum(axis=1),
                                   rtol=1e-5, atol=1e-5)
    assert len(layer.traces) == 1


def test_precompile_flags_are_accepted_and_methods_unbound() -> None:
    @function(precompile=True, precompile_backward=True, allow_implicit=True)
    def f(x: Tensor) -> Tensor:
        return x + 1

    assert f.__name__ == "f"
    np.testing.assert_allclose(f(Tensor([1.0, 2.0])).numpy(), [2.0, 3.0])
    assert Affine.__call__.__get__(None, Affine) is Affine.__call__


def test_debug_line(capsys: pytest.CaptureFixture[str]) -> None:
    from tinygrad import Context

    @function
    def named(x: Tensor) -> Tensor:
        return x * 2

    with Context(DEBUG=2):
        named(Tensor([1.0]))
    assert "function test_debug_line.<locals>.named in" in capsys.readouterr().out


def test_random_draws_inside_are_fresh_each_call() -> None:
    @function(allow_implicit=True)
    def noisy(x: Tensor) -> Tensor:
        return x + Tensor.rand(64)

    x = Tensor.zeros(64).contiguous().realize()
    a, b = noisy(x).numpy(), noisy(x).numpy()
    assert ((a >= 0) & (a < 1)).all() and not np.array_equal(a, b), "a trace that drew random numbers is not reused"
