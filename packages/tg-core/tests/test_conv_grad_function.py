"""Convolution gradients: through `@function` (whose traced graph is rebuilt over each call's arguments, and must keep
the convolution's own gradient rule), and forward and backward against PyTorch over the convolution variants."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tinygrad import Tensor, dtypes, function
from tinygrad.gradient import CUSTOM_GRADIENTS, define_gradient, substitute_keeping_gradients
from tinygrad.uop.ops import Ops, UOp


def _randn(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _window_intermediate_free(gx: Tensor, gw: Tensor, limit: int) -> bool:
    """Whether no kernel of the two gradients stores `limit` or more values (the chain rule through the window view
    stores every window's gradient: batch x channels x positions x taps)."""
    return max(si.bufs[0].size for si in gx.schedule(gw)) < limit


def test_conv_gradient_inside_a_function_is_the_convolution_rule_on_every_call() -> None:
    torch = pytest.importorskip("torch")
    xn, wn = _randn(4, 3, 9, 9), _randn(5, 3, 3, 3, seed=1)

    @function
    def layer(x: Tensor, w: Tensor) -> Tensor:
        return x.conv2d(w, padding=1).relu()

    xt, wt = torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True)
    out_t = torch.nn.functional.conv2d(xt, wt, padding=1).relu()
    (out_t * out_t).sum().backward()
    for _ in range(3):  # the first call traces, later ones rebuild the kept trace
        x, w = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True)
        out = layer(x, w)
        gx, gw = (out * out).sum().gradient(x, w)
        assert _window_intermediate_free(gx, gw, 4 * 3 * 9 * 9 * 3 * 3)
        np.testing.assert_allclose(gx.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(gw.numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-3)


def test_substitution_moves_a_defined_gradient_to_the_rebuilt_node() -> None:
    a_old = Tensor([1.0, 2.0, 3.0]).uop
    a_new = Tensor([4.0, 5.0, 6.0]).uop
    node = a_old * a_old.const_like(2.0)
    # a deliberately untrue rule that reads its input, so that the input it is given is visible in the result
    define_gradient(node, (a_old,), lambda g, a: (g * a,))
    (rebuilt,) = substitute_keeping_gradients((node,), {a_old: a_new})
    assert rebuilt is not node
    inputs, reads, _ = CUSTOM_GRADIENTS[rebuilt]
    assert inputs == (a_new,) and reads == ()
    a = Tensor(a_new, requires_grad=True)
    out = Tensor(rebuilt)
    (ga,) = out.sum().gradient(a)
    np.testing.assert_allclose(ga.numpy(), [4.0, 5.0, 6.0])


def test_substitution_without_defined_gradients_is_plain_substitute() -> None:
    a, b = Tensor([1.0, 2.0]).uop, Tensor([3.0, 4.0]).uop
    root = (a + a).alu(Ops.MAX, a)
    assert substitute_keeping_gradients((root, a), {a: b}) == (root.substitute({a: b}), b)
    assert isinstance(root, UOp)


def test_pow_gradient_inside_a_function_keeps_its_rule() -> None:
    # pow's rule gives 0 for d/dexp at a zero base; the chain rule through its formula would give NaN
    @function
    def power(b: Tensor, e: Tensor) -> Tensor:
        return b ** e

    for _ in range(2):
        b, e = Tensor([0.0, 2.0], requires_grad=True), Tensor([2.0, 3.0], requires_grad=True)
        gb, ge = power(b, e).sum().gradient(b, e)
        np.testing.assert_allclose(gb.numpy(), [0.0, 12.0], rtol=1e-6)
        np.testing.assert_allclose(ge.numpy(), [0.0, 8.0 * np.log(2.0)], rtol=1e-5)


# ---- forward and backward against PyTorch -------------------------------------------------------------------------

CASES: list[tuple[str, tuple[int, ...], tuple[int, ...], dict[str, Any]]] = [
    ("conv2d_odd", (2, 3, 7, 5), (4, 3, 3, 2), {}),
    ("conv2d_stride", (2, 3, 9, 8), (4, 3, 3, 3), {"stride": 2}),
    ("conv2d_stride_over_kernel", (1, 2, 9, 9), (3, 2, 2, 2), {"stride": 3}),
    ("conv2d_dilation", (2, 2, 9, 7), (3, 2, 3, 2), {"dilation": (2, 3)}),
    ("conv2d_padding", (2, 3, 5, 6), (4, 3, 3, 3), {"padding": 2}),
    ("conv2d_padding_asymmetric", (1, 2, 5, 6), (3, 2, 3, 3), {"padding": (1, 0, 2, 1)}),
    ("conv2d_groups", (2, 4, 6, 6), (6, 2, 3, 3), {"groups": 2, "padding": 1}),
    ("conv2d_depthwise_strided", (2, 3, 7, 7), (3, 1, 3, 3), {"groups": 3, "stride": 2, "padding": 1}),
    ("conv1d", (2, 3, 11), (4, 3, 3), {"stride": 2, "padding": 1, "dilation": 2}),
    ("conv3d", (1, 2, 4, 5, 3), (3, 2, 2, 3, 2), {"padding": 1}),
]
TORCH_FN = {1: "conv1d", 2: "conv2d", 3: "conv3d"}


def _torch_pad(kw: dict[str, Any], n: int) -> tuple[dict[str, Any], tuple[int, ...] | None]:
    """PyTorch's conv takes no 2*n padding: that form becomes an F.pad of the input first."""
    pad = kw.get("padding")
    if isinstance(pad, tuple) and len(pad) == 2 * n:
        return {k: v for k, v in kw.items() if k != "padding"}, pad
    return kw, None


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("name,xs,ws,kw", CASES, ids=[c[0] for c in CASES])
def test_conv_forward_and_backward_match_torch(name: str, xs: tuple[int, ...], ws: tuple[int, ...],
                                                kw: dict[str, Any], dtype: str) -> None:
    torch = pytest.importorskip("torch")
    n = len(ws) - 2
    xn, wn, bn = _randn(*xs).astype(dtype), _randn(*ws, seed=1).astype(dtype), _randn(ws[0], seed=2).astype(dtype)
    x, w, b = (Tensor(a, requires_grad=True) for a in (xn, wn, bn))
    out = x.conv2d(w, b, **kw)
    # a gradient of the output that is not all ones, so that a wrong position of it shows
    gn = _randn(*out.shape, seed=3).astype(dtype)
    gx, gw, gb = (out.float() * Tensor(gn.astype(np.float32))).sum().gradient(x, w, b)
    tkw, tpad = _torch_pad(kw, n)
    # float16 on PyTorch's CPU: computed in float32 from the same float16 values (its half conv backward is partial)
    tdt = torch.float32 if dtype == "float16" else getattr(torch, dtype)
    xt, wt, bt = (torch.tensor(a, dtype=tdt, requires_grad=True) for a in (xn, wn, bn))
    xin = torch.nn.functional.pad(xt, tpad) if tpad else xt
    out_t = getattr(torch.nn.functional, TORCH_FN[n])(xin, wt, bt, **tkw)
    (out_t * torch.tensor(gn, dtype=tdt)).sum().backward()
    tol = {"float32": (1e-4, 1e-4), "float64": (1e-10, 1e-10), "float16": (2e-2, 5e-2)}[dtype]
    assert out.dtype == getattr(dtypes, dtype)
    np.testing.assert_allclose(out.numpy().astype(np.float64), out_t.detach().numpy(), *tol)
    for ours, theirs in ((gx, xt), (gw, wt), (gb, bt)):
        assert ours.dtype == getattr(dtypes, dtype)
        np.testing.assert_allclose(ours.numpy().astype(np.float64), theirs.grad.numpy(), *tol)


@pytest.mark.parametrize("kw", [{}, {"stride": 2, "padding": 1, "output_padding": 1},
                                {"groups": 2, "stride": (2, 1), "dilation": 2}])
def test_conv_transpose2d_forward_and_backward_match_torch(kw: dict[str, Any]) -> None:
    torch = pytest.importorskip("torch")
    xn, wn = _randn(2, 4, 5, 4), _randn(4, 3, 3, 2, seed=1)
    x, w = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True)
    out = x.conv_transpose2d(w, **kw)
    gn = _randn(*out.shape, seed=3)
    gx, gw = (out * Tensor(gn)).sum().gradient(x, w)
    xt, wt = torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True)
    out_t = torch.nn.functional.conv_transpose2d(xt, wt, **kw)
    (out_t * torch.tensor(gn)).sum().backward()
    np.testing.assert_allclose(out.numpy(), out_t.detach().numpy(), 1e-4, 1e-4)
    np.testing.assert_allclose(gx.numpy(), xt.grad.numpy(), 1e-4, 1e-4)
    np.testing.assert_allclose(gw.numpy(), wt.grad.numpy(), 1e-4, 1e-4)
