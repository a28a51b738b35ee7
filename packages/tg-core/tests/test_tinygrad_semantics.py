"""Where tinygrad and PyTorch differ, tinygrad's semantics win: requires_grad is tri-state (None by default, True
once in an optimizer), backward() fills the .grad of every float tensor the loss depends on, index results are
int32, and shape/dtype errors are catchable as both libraries' exception types."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tinygrad import BroadcastError, ConcatError, Context, DTypeError, ShapeError, Tensor, dtypes
from tinygrad.mixin.common import index_dtype
from tinygrad.uop.ops import Ops

RNG = np.random.default_rng(13)


def randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


class ReadmeNet:
    """tinygrad's README network: weights from Tensor.kaiming_uniform, no requires_grad anywhere."""

    def __init__(self) -> None:
        self.l1 = Tensor.kaiming_uniform(784, 128)
        self.l2 = Tensor.kaiming_uniform(128, 10)

    def __call__(self, x: Tensor) -> Tensor:
        return x.flatten(1).dot(self.l1).relu().dot(self.l2)


# ---- requires_grad is tri-state ----

def test_requires_grad_defaults_to_none_and_derives_tri_state() -> None:
    a, t, f = Tensor([1.0]), Tensor([1.0], requires_grad=True), Tensor([1.0], requires_grad=False)
    assert a.requires_grad is None and t.requires_grad is True and f.requires_grad is False
    assert Tensor.kaiming_uniform(3, 4).requires_grad is None and Tensor.glorot_uniform(3, 4).requires_grad is None
    assert Tensor.uniform(3, requires_grad=False).requires_grad is False
    assert (a + f).requires_grad is None and (a * t).requires_grad is True and (f * 2).requires_grad is False
    assert a.is_param and not f.is_param and f.is_param_(True) is f and f.requires_grad is None
    assert a.requires_grad_() is a and a.requires_grad is True


def test_readme_network_trains_with_adam() -> None:
    from tinygrad.nn.optim import Adam

    model = ReadmeNet()
    opt = Adam([model.l1, model.l2], lr=0.001)
    assert model.l1.requires_grad is True and model.l2.requires_grad is True  # the optimizer made them parameters
    before = model.l1.numpy().copy()
    x, y = Tensor(RNG.random((4, 1, 28, 28), dtype=np.float32)), Tensor([2, 4, 3, 7])
    losses = []
    with Context(TRAINING=1):
        for _ in range(10):
            opt.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y).backward()
            opt.step()
            losses.append(loss.item())
    assert losses[-1] < losses[0] * 0.9, losses
    assert not np.allclose(model.l1.numpy(), before)


def test_readme_network_sgd_step_matches_torch(torch: Any) -> None:
    from tinygrad.nn.optim import SGD

    w1, w2, xs = randn(784, 16) * 0.05, randn(16, 10) * 0.1, RNG.random((4, 1, 28, 28), dtype=np.float32)
    labels = np.array([2, 4, 3, 7])
    model = ReadmeNet()
    model.l1, model.l2 = Tensor(w1), Tensor(w2)  # plain tensors: requires_grad None
    opt = SGD([model.l1, model.l2], lr=0.1)
    with Context(TRAINING=1):
        opt.zero_grad()
        model(Tensor(xs)).sparse_categorical_crossentropy(Tensor(labels)).backward()
        opt.step()
    tw1, tw2 = torch.tensor(w1, requires_grad=True), torch.tensor(w2, requires_grad=True)
    topt = torch.optim.SGD([tw1, tw2], lr=0.1)
    logits = torch.tensor(xs).flatten(1).mm(tw1).relu().mm(tw2)
    torch.nn.functional.cross_entropy(logits, torch.tensor(labels)).backward()
    topt.step()
    np.testing.assert_allclose(model.l1.numpy(), tw1.detach().numpy(), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(model.l2.numpy(), tw2.detach().numpy(), atol=1e-5, rtol=1e-5)


def test_optimizer_keeps_requires_grad_false_and_int_tensors_as_buffers() -> None:
    from tinygrad.nn import BatchNorm
    from tinygrad.nn.optim import SGD
    from tinygrad.nn.state import get_parameters

    bn = BatchNorm(3)
    opt = SGD(get_parameters(bn), lr=0.1)
    stats = {id(bn.running_mean), id(bn.running_var), id(bn.num_batches_tracked)}
    assert {id(p) for p in opt.params} == {id(bn.weight), id(bn.bias)}
    assert {id(b) for b in opt.buffers} == stats
    assert bn.running_mean.requires_grad is False and bn.running_var.requires_grad is False


# ---- backward() fills every float tensor in the graph ----

def test_backward_fills_leaves_without_requires_grad_and_intermediates(torch: Any) -> None:
    a, b = randn(3, 4), randn(4, 2)
    x, w = Tensor(a), Tensor(b)
    h = x @ w
    loss = (h.tanh() * h).sum()
    loss.backward()
    px, pw = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    ph = px @ pw
    ph.retain_grad()
    (ph.tanh() * ph).sum().backward()
    for got, want in ((x, px), (w, pw), (h, ph)):
        np.testing.assert_allclose(got.grad.numpy(), want.grad.numpy(), atol=1e-5, rtol=1e-5)
    assert loss.grad is not None and loss.grad.item() == 1.0  # tinygrad fills the loss itself too


def test_every_tensor_accumulates_its_gradient() -> None:
    # tinygrad's rule (PyTorch's for its leaves): each backward adds into .grad, parameters or not
    data = Tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    w = Tensor([[1.0], [1.0]], requires_grad=True)
    for row in (0, 2, 2):
        (data[row:row + 1] @ w).sum().backward()
    assert data.grad.tolist() == [[1.0, 1.0], [0.0, 0.0], [2.0, 2.0]]
    assert w.grad.tolist() == [[11.0], [14.0]]  # rows 0 + 2 + 2, accumulated until zero_grad


def test_an_unread_gradient_sum_is_realized_now_and_then() -> None:
    # a float tensor read by every eager step grows a lazy sum of every step's gradient; after MAX_LAZY_GRAD_SUMS
    # unread sums it is realized (memory stays bounded), with the same value
    from tinygrad.tensor import MAX_LAZY_GRAD_SUMS
    data = Tensor([[1.0, 2.0], [3.0, 4.0]])
    for step in range(3 * MAX_LAZY_GRAD_SUMS + 1):
        (data[step % 2] * 2).sum().backward()
        assert data.grad is not None
        depth, node = 0, data.grad.uop
        while node.op is Ops.ADD:
            depth, node = depth + 1, node.src[0]
        assert depth < MAX_LAZY_GRAD_SUMS
    n = 3 * MAX_LAZY_GRAD_SUMS + 1
    assert data.grad.tolist() == [[2.0 * ((n + 1) // 2)] * 2, [2.0 * (n // 2)] * 2]


def test_backward_after_item_with_parameters() -> None:
    # the PyTorch idiom: print(loss.item()); loss.backward()
    w = Tensor([[1.0, -2.0], [0.5, 1.0]], requires_grad=True)
    x = Tensor([[1.0, 2.0], [3.0, 4.0]])
    loss = ((x @ w).relu() * 2).sum()
    assert loss.item() == 14.0
    loss.backward()
    assert w.grad.tolist() == [[8.0, 0.0], [12.0, 0.0]]


def test_requires_grad_false_and_detach_stop_gradients(torch: Any) -> None:
    a, c = randn(3), randn(3)
    x, frozen = Tensor(a), Tensor(c, requires_grad=False)
    d = x.detach()
    (x * frozen + d.exp()).sum().backward()
    assert frozen.grad is None
    np.testing.assert_allclose(x.grad.numpy(), c, rtol=1e-6)  # nothing through the detached path
    np.testing.assert_allclose(d.grad.numpy(), np.exp(a), rtol=1e-5)  # the detached tensor itself is a leaf
    with pytest.raises(RuntimeError, match="requires_grad=False"):
        (frozen * 2).sum().backward()
    with pytest.raises(RuntimeError, match="int"):
        Tensor([1, 2]).sum().backward()


def test_gradient_still_returns_without_storing() -> None:
    x = Tensor([1.0, 2.0, 3.0])
    (g,) = (x * x).sum().gradient(x)
    assert g.tolist() == [2.0, 4.0, 6.0] and x.grad is None


# ---- index results are int32 ----

def test_index_results_are_int32() -> None:
    x = Tensor([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]])
    assert x.argmax().dtype == dtypes.int32 and x.argmin(1).dtype == dtypes.int32
    assert x.argmax(1).tolist() == [0, 1] and x.argmin().item() == 3
    assert x.sort()[1].dtype == dtypes.int32 and x.argsort(0).dtype == dtypes.int32
    assert x.topk(2)[1].dtype == dtypes.int32 and x.topk(2)[1].tolist() == [[0, 2], [1, 2]]
    assert x.cummax(1)[1].dtype == dtypes.int32 and x.cummin(0)[1].dtype == dtypes.int32
    assert x.nonzero().dtype == dtypes.int32 and x.nonzero().tolist() == np.argwhere(x.numpy()).tolist()
    assert x.reshape(1, 1, 2, 3).max_pool2d(2, 1, return_indices=True)[1].dtype == dtypes.int32


def test_index_dtype_widens_only_past_int32() -> None:
    # a tensor that long along one axis does not fit this machine; the choice is made from the static size
    assert index_dtype(2**31) == dtypes.int32  # indices 0 .. 2**31 - 1 all fit
    assert index_dtype(2**31 + 1) == dtypes.int64 and index_dtype(0) == dtypes.int32


# ---- exception classes catchable as both libraries' types ----

@pytest.mark.parametrize("fn, cls, message", [
    (lambda: Tensor.ones(2, 3) + Tensor.ones(4, 5), BroadcastError, r"shapes \(2, 3\) and \(4, 5\) cannot be"),
    (lambda: Tensor.ones(2, 3).reshape(4, 2), ShapeError, r"cannot reshape a tensor of shape \(2, 3\)"),
    (lambda: Tensor.ones(2, 3).permute(0, 0), ShapeError, r"permute order \(0, 0\) is not a permutation"),
    (lambda: Tensor.ones(2, 3) @ Tensor.ones(4, 5), ShapeError, r"matmul of shapes \(2, 3\) and \(4, 5\)"),
    (lambda: Tensor.ones(2, 3).expand(4, 3), ShapeError, r"cannot expand shape \(2, 3\)"),
    (lambda: Tensor.ones(2, 3).cat(Tensor.ones(4, 5)), ConcatError, r"cat along dimension 0"),
    (lambda: Tensor.stack(Tensor.ones(2), Tensor.ones(3)), ConcatError, r"stack needs tensors of one shape"),
])
def test_shape_errors_are_value_and_runtime_errors(fn: Any, cls: type, message: str) -> None:
    for caught in (ValueError, RuntimeError, cls):
        with pytest.raises(caught, match=message):
            fn()


def test_broadcast_and_cat_errors_are_also_tinygrads_types() -> None:
    with pytest.raises(IndexError):  # tinygrad's type for shapes that do not broadcast
        Tensor.ones(2, 3) * Tensor.ones(3, 2)
    with pytest.raises(AssertionError):  # tinygrad asserts on mismatched cat inputs
        Tensor.ones(2, 3).cat(Tensor.ones(2, 4))


def test_bad_axis_stays_index_error() -> None:
    with pytest.raises(IndexError, match="axis 5 is out of range"):
        Tensor.ones(2, 3).sum(5)


@pytest.mark.parametrize("fn, message", [
    (lambda: Tensor.ones(2, 3).bitcast(dtypes.int64), r"bitcast from dtypes.float32 \(4 bytes\)"),
    (lambda: Tensor.ones(2, 3).gather(0, Tensor([[0.0]])), "gather index must be an integer tensor"),
    (lambda: -Tensor([True]), "negation of a bool tensor"),
])
def test_dtype_errors_are_type_and_runtime_errors(fn: Any, message: str) -> None:
    for caught in (TypeError, RuntimeError, DTypeError):
        with pytest.raises(caught, match=message):
            fn()


def test_movement_ops_take_tinygrads_keywords() -> None:
    # tinygrad's examples write reshape(shape=...), permute(order=...), expand(shape=...), flip(axis=...)
    t = Tensor(np.arange(6, dtype=np.float32))
    np.testing.assert_array_equal(t.reshape(shape=(2, 3)).numpy(), np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(t.reshape(shape=[3, -1]).numpy(), np.arange(6).reshape(3, 2))
    np.testing.assert_array_equal(t.reshape(2, 3).permute(order=(1, 0)).numpy(), np.arange(6).reshape(2, 3).T)
    np.testing.assert_array_equal(Tensor([[1], [2]]).expand(shape=(2, 3)).numpy(), [[1, 1, 1], [2, 2, 2]])
    np.testing.assert_array_equal(t.flip(axis=0).numpy(), np.arange(6)[::-1])
    np.testing.assert_array_equal(t.reshape(2, 3).flip(axis=(0, 1)).numpy(), np.arange(6).reshape(2, 3)[::-1, ::-1])
    with pytest.raises(TypeError, match=r"reshape\(\) got its shape both as arguments \(2,\) and as shape="):
        t.reshape(2, shape=(3, 2))
