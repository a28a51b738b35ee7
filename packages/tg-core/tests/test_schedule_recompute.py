"""Realize points that keep a kernel from computing a value many times (engine/schedule.py): a reduction read along
two index maps or through padding, a costly op under a broadcast, and a reduction's epilogue under a broadcast."""

import numpy as np
from tinygrad import Tensor
from tinygrad.uop.ops import Ops


def _kernels(t: Tensor) -> list:
    return [si for si in t.schedule() if not si.is_copy]


def _reductions_in(si) -> int:  # type: ignore[no-untyped-def]
    return sum(1 for u in si.ast.toposort() if u.op is Ops.REDUCE_AXIS)


rng = np.random.default_rng(0)
X = rng.standard_normal((5, 8)).astype(np.float32)
W = rng.standard_normal((8, 6)).astype(np.float32)
W2 = rng.standard_normal((6, 3)).astype(np.float32)


def test_a_projection_read_at_two_index_maps_is_computed_once():
    # the rotate-half of a rotary embedding: k at i and at its partner in the other half
    x, w = Tensor(X), Tensor(W)
    k = x @ w
    rotated = Tensor.cat(-k[:, 3:], k[:, :3], dim=1)
    out = k * 0.5 + rotated * 2.0
    kernels = _kernels(out)
    assert len(kernels) == 2 and all(_reductions_in(si) <= 1 for si in kernels)
    kn = X @ W
    np.testing.assert_allclose(out.numpy(), kn * 0.5 + np.concatenate([-kn[:, 3:], kn[:, :3]], 1) * 2.0, rtol=1e-5)


def test_stacked_matmuls_are_their_own_kernels():
    x, w = Tensor(X), Tensor(W)
    out = Tensor.stack(x @ w, x @ (w * 2))
    kernels = _kernels(out)
    assert len(kernels) == 3 and all(_reductions_in(si) <= 1 for si in kernels)
    np.testing.assert_allclose(out.numpy(), np.stack([X @ W, X @ (W * 2)]), rtol=1e-5)


def test_an_activation_under_the_next_matmul_is_computed_once():
    # silu(x) broadcast over the next matmul's output columns: realized, not recomputed per column
    x, w = Tensor(X), Tensor(W)
    out = x.silu() @ w
    matmul = [si for si in _kernels(out) if _reductions_in(si)]
    assert len(matmul) == 1
    costly = {Ops.EXP2, Ops.LOG2, Ops.RECIPROCAL, Ops.FDIV}
    assert not any(u.op in costly for u in matmul[0].ast.toposort())  # the activation is read, not recomputed
    ref = (X / (1 + np.exp(-X))) @ W
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-6)


def test_a_layer_epilogue_runs_in_its_matmul_kernel():
    # relu(x @ w + b) @ w2: the bias and ReLU run once, in the first matmul's kernel
    x, w, b, w2 = Tensor(X), Tensor(W), Tensor(np.arange(6, dtype=np.float32)), Tensor(W2)
    out = (x @ w + b).relu() @ w2
    kernels = _kernels(out)
    assert len(kernels) == 2
    first, second = (set(u.op for u in si.ast.toposort()) for si in kernels)
    assert Ops.REDUCE_AXIS in first and Ops.WHERE in first  # the bias and ReLU run with the first matmul
    assert Ops.WHERE not in second and Ops.ADD not in second
    ref = np.maximum(X @ W + np.arange(6), 0) @ W2
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-5)


def test_cheap_ops_under_a_broadcast_stay_fused():
    x, w = Tensor(X), Tensor(W)
    out = (x * 2 + 1) @ w
    assert len(_kernels(out)) == 1
    np.testing.assert_allclose(out.numpy(), (X * 2 + 1) @ W, rtol=1e-5)
