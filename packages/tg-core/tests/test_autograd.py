"""Autograd as PyTorch users write it: requires_grad, backward() filling (and accumulating) .grad,
gradient(*targets), detach, and gradients that survive realize(). PyTorch is the reference."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest
from tinygrad import Tensor, dtypes

RNG = np.random.default_rng(1234)


def randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def assert_close(a: Any, b: Any, tol: float = 1e-5) -> None:
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=tol, rtol=tol)


# ---- requires_grad spellings ----------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda a: Tensor(a, requires_grad=True),
    lambda a: Tensor(a).requires_grad_(),
    lambda a: Tensor(a).requires_grad_(True),
    lambda a: _set_attr(Tensor(a)),
    lambda a: (Tensor.zeros(*a.shape) + Tensor(a)).contiguous().realize().requires_grad_(),
], ids=["ctor", "method", "method_true", "attribute", "computed"])
def test_requires_grad_spellings(make: Any, torch: Any) -> None:
    a = randn(3, 2)
    x = make(a)
    assert x.requires_grad and x.grad is None
    (x * x).sum().backward()
    assert x.grad is not None and x.grad.shape == (3, 2) and x.grad.dtype == dtypes.float32
    assert_close(x.grad.numpy(), 2 * a)


def _set_attr(t: Tensor) -> Tensor:
    t.requires_grad = True
    return t


def test_requires_grad_on_created_tensors() -> None:
    for t in (Tensor.zeros(2, 3, requires_grad=True), Tensor.ones(2, 3, requires_grad=True),
              Tensor.full((2, 3), 2.0, requires_grad=True), Tensor.rand(2, 3, requires_grad=True),
              Tensor.randn(2, 3, requires_grad=True), Tensor.arange(6.0, requires_grad=True).reshape(2, 3)):
        assert t.requires_grad
    a, b = Tensor.ones(3, requires_grad=True), Tensor.ones(3, requires_grad=True)
    (a * 2 + b * 3).sum().backward()  # equal lazy leaves are still distinct targets
    assert a.grad.tolist() == [2, 2, 2] and b.grad.tolist() == [3, 3, 3]


def test_requires_grad_propagates_and_turns_off() -> None:
    x = Tensor([1.0, 2.0], requires_grad=True)
    c = Tensor([3.0, 4.0], requires_grad=False)
    assert (x * c).requires_grad and (c * x).requires_grad and x.sum().requires_grad and x.T.requires_grad
    assert not (c * 2).requires_grad and not x.detach().requires_grad
    assert x.requires_grad_(False) is x and not x.requires_grad
    y = (x * c).sum()
    assert not y.requires_grad
    with pytest.raises(RuntimeError, match="requires_grad"):
        y.backward()


# ---- backward() and .grad -----------------------------------------------------------------------------------

def test_mlp_backward_matches_torch(torch: Any) -> None:
    xs, w1, b1, w2, labels = randn(5, 4), randn(4, 6), randn(6), randn(6, 3), RNG.integers(0, 3, 5)
    onehot = np.eye(3, dtype=np.float32)[labels]

    tw1, tb1, tw2 = (Tensor(v, requires_grad=True) for v in (w1, b1, w2))
    h = (Tensor(xs) @ tw1 + tb1).relu()
    logits = h @ tw2
    z = logits - logits.max(axis=1, keepdim=True)
    logp = z - z.exp().sum(axis=1, keepdim=True).log()
    loss = -(logp * Tensor(onehot)).sum(axis=1).mean()
    loss.backward()

    pw1, pb1, pw2 = (torch.tensor(v, requires_grad=True) for v in (w1, b1, w2))
    plogits = (torch.tensor(xs) @ pw1 + pb1).relu() @ pw2
    ploss = torch.nn.functional.cross_entropy(plogits, torch.tensor(labels))
    ploss.backward()

    assert_close(loss.item(), ploss.item())
    for t, p in ((tw1, pw1), (tb1, pb1), (tw2, pw2)):
        assert t.grad is not None and t.grad.shape == tuple(p.shape)
        assert_close(t.grad.numpy(), p.grad.numpy())


def test_grad_accumulates_like_torch(torch: Any) -> None:
    a = randn(4)
    x, px = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    loss = (x * x).sum()
    loss.backward()
    loss.backward()  # the same graph twice
    (x.exp()).sum().backward()  # then another graph
    ploss = (px * px).sum()
    ploss.backward(retain_graph=True)
    ploss.backward()
    px.exp().sum().backward()
    assert_close(x.grad.numpy(), px.grad.numpy())
    x.grad = None  # zeroing the way PyTorch users do
    (x * 3).sum().backward()
    assert x.grad.tolist() == [3.0] * 4


def test_requires_grad_false_tensors_get_no_grad() -> None:
    # tinygrad: every float tensor takes a gradient (requires_grad None) unless requires_grad=False
    x, c = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0, 4.0], requires_grad=False)
    (x * c).sum().backward()
    assert c.grad is None and x.grad.tolist() == [3.0, 4.0]


def test_backward_of_non_scalar(torch: Any) -> None:
    a, up = randn(2, 3), randn(2, 3)
    x = Tensor(a, requires_grad=True)
    y = x.sin() * 2
    with pytest.raises(RuntimeError, match=r"\(2, 3\)"):
        y.backward()
    with pytest.raises(ValueError, match=r"\(3,\).*\(2, 3\)"):
        y.backward(gradient=Tensor.ones(3))
    y.backward(gradient=Tensor(up))
    px = torch.tensor(a, requires_grad=True)
    (px.sin() * 2).backward(torch.tensor(up))
    assert_close(x.grad.numpy(), px.grad.numpy())


def test_backward_returns_self_and_needs_a_leaf() -> None:
    x = Tensor([2.0], requires_grad=True)
    loss = (x * x).sum()
    assert loss.backward() is loss
    with pytest.raises(RuntimeError, match="requires_grad=False"):
        (Tensor([1.0], requires_grad=False) * 2).sum().backward()


def test_reused_values_sum_their_paths(torch: Any) -> None:
    a = randn(3, 3)

    def f(x: Any) -> Any:
        y = x * x + x.exp() * x
        return (y @ y.T + y.sum(0)).tanh().sum()

    x, px = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    f(x).backward()
    f(px).backward()
    assert_close(x.grad.numpy(), px.grad.numpy(), 1e-4)


def test_detach_stops_gradient() -> None:
    a = randn(3)
    x = Tensor(a, requires_grad=True)
    (x * x.detach()).sum().backward()
    assert_close(x.grad.numpy(), a)
    d = x.detach()
    assert not d.requires_grad and d.grad is None
    np.testing.assert_array_equal(d.numpy(), a)


def test_grad_dtypes() -> None:
    h = Tensor([1.0, 2.0], dtype=dtypes.float16, requires_grad=True)
    (h * h).sum().backward()
    assert h.grad.dtype == dtypes.float16 and h.grad.tolist() == [2.0, 4.0]
    d = Tensor([1.0, 2.0], dtype=dtypes.float64, requires_grad=True)
    (d * 3).sum().backward()
    assert d.grad.dtype == dtypes.float64
    x = Tensor([1.0, 2.0], requires_grad=True)
    (x.half() * x.half()).float().sum().backward()  # float casts pass the gradient, cast back
    assert x.grad.dtype == dtypes.float32 and x.grad.tolist() == [2.0, 4.0]
    y = Tensor([1.5, 2.5], requires_grad=True)
    (y.int().float() * 2 + y).sum().backward()  # an integer cast passes nothing
    assert y.grad.tolist() == [1.0, 1.0]


# ---- gradient(*targets) ---------------------------------------------------------------------------------------

def test_gradient_returns_without_storing(torch: Any) -> None:
    a, b = randn(2, 3), randn(3)
    x, w = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    unrelated = Tensor([1.0, 2.0], requires_grad=True)
    loss = (x * w).sigmoid().sum()
    gx, gw, gu = loss.gradient(x, w, unrelated)
    assert x.grad is None and w.grad is None
    px, pw = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (px * pw).sigmoid().sum().backward()
    assert_close(gx.numpy(), px.grad.numpy())
    assert_close(gw.numpy(), pw.grad.numpy())
    assert gu.shape == (2,) and gu.tolist() == [0.0, 0.0]


def test_gradient_to_intermediate_and_without_requires_grad() -> None:
    x = Tensor([1.0, 2.0, 3.0])  # gradient() needs no requires_grad
    h = x * 2
    loss = (h * h).sum()
    gx, gh = loss.gradient(x, h)
    assert gx.tolist() == [8.0, 16.0, 24.0] and gh.tolist() == [4.0, 8.0, 12.0]
    (g2,) = loss.gradient(x, gradient=Tensor(3.0))
    assert g2.tolist() == [24.0, 48.0, 72.0]


# ---- gradients at the points where a rule needs care -----------------------------------------------------------

EDGE_CASES: list[tuple] = [  # name, function, values[, the function for PyTorch where it is spelled differently]
    ("prod_with_zero", lambda x: x.prod(), [0.0, 2.0, 3.0]),
    ("prod_two_zeros", lambda x: x.reshape(2, 2).prod(1).sum(), [0.0, 0.0, 2.0, 3.0]),
    ("pow3_at_zero", lambda x: (x ** 3).sum(), [0.0, -2.0, 1.5]),
    ("pow_tensor_at_zero", lambda x: (x ** (x * 0 + 2.5)).sum(), [0.0, 2.0]),
    ("abs_at_zero", lambda x: x.abs().sum(), [0.0, -2.0, 3.0]),
    ("relu_at_zero", lambda x: x.relu().sum(), [0.0, -2.0, 3.0]),
    ("clip_at_bounds", lambda x: x.clip(-1.0, 1.0).sum(), [-1.0, 0.5, 1.0, 3.0]),
    ("max_ties", lambda x: x.max(), [1.0, 3.0, 3.0]),
    ("max_axis_ties", lambda x: (x.reshape(2, 2).max(1) * x.reshape(2, 2)[:, 0]).sum(), [2.0, 2.0, 1.0, 5.0],
     lambda x: (x.reshape(2, 2).amax(1) * x.reshape(2, 2)[:, 0]).sum()),
    ("maximum_ties", lambda x: x.maximum(x.flip(0)).sum(), [1.0, 3.0, 1.0]),
    ("sqrt_positive", lambda x: x.sqrt().sum(), [4.0, 0.25]),
    ("sign_everywhere", lambda x: (x.sign() * x).sum(), [0.0, -2.0, 3.0]),
    ("div_by_self", lambda x: (x / x.detach().sum()).sum(), [1.0, 3.0]),
]


@pytest.mark.parametrize("fn,values,torch_fn", [pytest.param(c[1], c[2], c[3] if len(c) > 3 else c[1], id=c[0])
                                                for c in EDGE_CASES])
def test_gradient_at_edges(fn: Any, values: list, torch_fn: Any, torch: Any) -> None:
    x = Tensor(values, requires_grad=True)
    fn(x).backward()
    px = torch.tensor(values, requires_grad=True)
    torch_fn(px).backward()
    assert np.isfinite(x.grad.numpy()).all()
    assert_close(x.grad.numpy(), px.grad.numpy())


# ---- gradients survive realize() -------------------------------------------------------------------------------

def test_loss_item_before_backward(torch: Any) -> None:
    a = randn(4)
    x = Tensor(a, requires_grad=True)
    loss = (x * x).sum()
    assert_close(loss.item(), (a * a).sum())  # realizes loss
    loss.backward()
    assert x.grad is not None
    assert_close(x.grad.numpy(), 2 * a)


def test_leaf_realized_between_forward_and_backward() -> None:
    w = Tensor.zeros(3, requires_grad=True)  # a lazy leaf
    loss = (w * Tensor([1.0, 2.0, 3.0])).sum()
    assert w.tolist() == [0.0, 0.0, 0.0]  # realizes w
    loss.backward()
    assert w.grad is not None and w.grad.tolist() == [1.0, 2.0, 3.0]


def test_realized_intermediate_keeps_its_history() -> None:
    x = Tensor([1.0, 2.0], requires_grad=True)
    h = (x * 3).realize()
    loss = (h * h).sum()
    loss.backward()
    assert x.grad.tolist() == [18.0, 36.0]
    gh, gx = loss.gradient(h, x)
    assert gh.tolist() == [6.0, 12.0] and gx.tolist() == [18.0, 36.0]


def test_sgd_steps_match_torch_and_history_stays_bounded(torch: Any) -> None:
    from tinygrad.engine.schedule import realized_views

    xs, ys, w0 = randn(8, 3), randn(8, 1), randn(3, 1)
    w, pw = Tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    losses, remembered = [], []
    for step in range(8):
        if step in (3, 7):
            gc.collect()
            remembered.append(len(realized_views))
        loss = ((Tensor(xs) @ w - Tensor(ys)) ** 2).mean()
        losses.append(loss.item())
        loss.backward()
        w.assign(w.detach() - 0.1 * w.grad).realize()
        w.grad = None
        ploss = ((torch.tensor(xs) @ pw - torch.tensor(ys)) ** 2).mean()
        ploss.backward()
        with torch.no_grad():
            pw -= 0.1 * pw.grad
        pw.grad = None
        assert_close(losses[-1], ploss.item(), 1e-4)
    assert losses[-1] < losses[0]
    assert_close(w.numpy(), pw.detach().numpy(), 1e-4)
    assert w.requires_grad and len(w.uop.toposort()) <= 3, "a parameter is a buffer after its update"
    # four more steps realize several values each; a small slack absorbs garbage from other tests in this worker
    assert remembered[1] <= remembered[0] + 2, "realized values must not keep every earlier step's graph alive"


# ---- gradients defined by a function --------------------------------------------------------------------------

def test_a_defined_gradient_replaces_the_chain_rule_through_the_node() -> None:
    from tinygrad.gradient import define_gradient
    a = Tensor(randn(3), requires_grad=True)
    b = a * 2
    define_gradient(b.uop, (a.uop,), lambda g, _a: (g * g.const_like(5.0),))  # deliberately not the true 2
    (b * 3).sum().backward()
    assert a.grad is not None
    assert_close(a.grad.numpy(), np.full(3, 15.0, np.float32))


def test_conv_backward_runs_as_convolutions_without_the_window_intermediate() -> None:
    torch = pytest.importorskip("torch")
    xn, wn, gn = randn(4, 3, 9, 9), randn(5, 3, 3, 3), randn(4, 5, 9, 9)
    x, w = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True)
    out = x.conv2d(w, padding=1)
    gx, gw = (out * Tensor(gn)).sum().gradient(x, w)
    schedule = gx.schedule(gw)
    # the chain rule through the window view would store every window's gradient (4*3*9*9*3*3 values) first
    assert max(si.bufs[0].size for si in schedule) < 4 * 3 * 9 * 9 * 3 * 3
    xt, wt = torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True)
    (torch.nn.functional.conv2d(xt, wt, padding=1) * torch.tensor(gn)).sum().backward()
    assert_close(gx.numpy(), xt.grad.numpy(), 1e-4)
    assert_close(gw.numpy(), wt.grad.numpy(), 1e-4)
