"""The op-info table for the functional nn ops: linear, sequential, layernorm, batchnorm, one_hot,
scaled_dot_product_attention and the losses, against numpy (values) and PyTorch (dtypes, gradients); then
dropout, index checks and bad input. See opinfo.py for how a case is written and checked."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from opinfo import (
    BOOL,
    F16,
    F32,
    F64,
    I32,
    I64,
    F,
    M,
    OpCase,
    P,
    S,
    Spec,
    integral,
    table_tests,
    torch_module,
)
from tinygrad import Context, Tensor, dtypes
from tinygrad.dtype import DType

_torch = torch_module()
TF = _torch.nn.functional if _torch is not None else None
C = 4  # classes in the loss cases
EPS = 1e-5
PROB = (0.02, 0.98)


def _targets(lo: int, hi: int, ignore: int | None = None) -> Any:
    """Class indices in [lo, hi], about one in five replaced by `ignore`."""
    def gen(rng: np.random.Generator, shape: tuple[int, ...], nd: np.dtype) -> np.ndarray:
        t = rng.integers(lo, hi, size=shape, endpoint=True)
        if ignore is not None:
            t = np.where(rng.random(shape) < 0.2, ignore, t)
        return t.astype(nd)
    return gen


def _with_int_targets(d: DType) -> tuple[DType, ...]:
    return (d, I64)


def _f64(t: np.ndarray) -> np.ndarray:
    return t.astype(np.float64)


# ---- numpy references ----

def _np_layernorm(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    z = _f64(x)
    c = z - z.mean(axes, keepdims=True)
    return (c / np.sqrt((c * c).mean(axes, keepdims=True) + EPS)).astype(x.dtype)


def _np_log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    z = _f64(x)
    if z.size == 0:
        return z
    s = z - z.max(axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis, keepdims=True))


def _np_reduce(loss: np.ndarray, reduction: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        out = loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.mean()
    return np.asarray(out).astype(np.float32)


def _np_bce(p: np.ndarray, y: np.ndarray, reduction: str = "mean") -> np.ndarray:
    lp, lq = np.maximum(np.log(_f64(p)), -100), np.maximum(np.log(1 - _f64(p)), -100)
    return _np_reduce(-(y * lp + (1 - y) * lq), reduction)


def _np_bce_logits(x: np.ndarray, y: np.ndarray, pw: np.ndarray | None = None, reduction: str = "mean") -> np.ndarray:
    z = _f64(x)
    log_sig, log_one_minus = -np.logaddexp(0, -z), -np.logaddexp(0, z)
    return _np_reduce(-((pw if pw is not None else 1) * y * log_sig + (1 - y) * log_one_minus), reduction)


def _np_index_loss(logp: np.ndarray, y: np.ndarray, axis: int, weight: np.ndarray | None, ignore: int,
                   smoothing: float, reduction: str) -> np.ndarray:
    """PyTorch's nll/cross-entropy on log-probabilities with class-index targets, element by element."""
    lp = np.moveaxis(_f64(logp), axis, -1)  # (..., C) with y of shape (...)
    n_cls = lp.shape[-1]
    w = _f64(weight) if weight is not None else np.ones(n_cls)
    kept = y != ignore
    safe = np.where(kept, y, 0)
    picked = np.take_along_axis(lp, safe[..., None], -1)[..., 0]
    nll = np.where(kept, -w[safe] * picked, 0.0)
    smooth = np.where(kept, -(lp * w).sum(-1), 0.0)
    loss = (1 - smoothing) * nll + smoothing / n_cls * smooth
    if reduction != "mean":
        return _np_reduce(loss, reduction)
    with np.errstate(all="ignore"):
        return np.asarray(loss.sum() / np.where(kept, w[safe], 0.0).sum()).astype(np.float32)


def _np_ce_probs(x: np.ndarray, p: np.ndarray, smoothing: float = 0.0, reduction: str = "mean") -> np.ndarray:
    axis = 0 if x.ndim == 1 else 1
    q = _f64(p) * (1 - smoothing) + smoothing / x.shape[axis]
    return _np_reduce(-(q * _np_log_softmax(x, axis)).sum(axis), reduction)


def _np_sdpa(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None, causal: bool = False,
             scale: float | None = None) -> np.ndarray:
    s = (_f64(q) @ np.swapaxes(_f64(k), -1, -2)) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if causal:
        mask = np.tril(np.ones(s.shape[-2:], bool))
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    if s.shape[-1] == 0:
        return np.zeros(s.shape[:-1] + v.shape[-1:], np.float32)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - np.where(np.isinf(m), 0, m))
    total = e.sum(-1, keepdims=True)
    return ((e / np.where(total == 0, 1, total)) @ _f64(v)).astype(np.float32)


def _np_one_hot(y: np.ndarray, n: int) -> np.ndarray:
    return (y[..., None] == np.arange(n)).astype(np.int64)


# ---- the table ----

LINEAR: list[tuple[Spec, ...]] = [((3, 4), (4, 5), (5,)), ((2, 3, 4), (4, 2), (2,)), ((0, 4), (4, 3), (3,)),
                                  ((1, 1), (1, 1), (1,)), ((3, 4), (4, 2), (1,)), (P(3, 4), S(4, 2), F(2,))]

LAYER_CASES = [
    OpCase("linear", lambda x, w, b: x.linear(w, b), lambda x, w, b: x @ w + b, LINEAR, (F32, F16),
           torch_fn=lambda x, w, b: TF.linear(x, w.T, b), rtol=1e-4, atol=1e-5),
    OpCase("linear_no_bias", lambda x, w: x.linear(w), lambda x, w: x @ w, [((3, 4), (4, 5)), (M(2, 3), P(3, 2))],
           torch_fn=lambda x, w: TF.linear(x, w.T), rtol=1e-4),
    OpCase("linear_1d_weight_scales", lambda x, w, b: x.linear(w, b), lambda x, w, b: x * w + b,
           [((3, 4), (4,), (4,)), ((2, 4), (1,), (4,))], torch_fn=lambda x, w, b: x * w + b),
    OpCase("sequential", lambda x, w: x.sequential([lambda t: t.matmul(w), lambda t: t.relu(), lambda t: t * 2]),
           lambda x, w: np.maximum(x @ w, 0) * 2, [((3, 4), (4, 2)), ((0, 4), (4, 2))],
           torch_fn=lambda x, w: (x @ w).relu() * 2, rtol=1e-4),
    OpCase("layernorm", lambda x: x.layernorm(), lambda x: _np_layernorm(x, (-1,)),
           [((3, 5),), ((2, 3, 4),), ((3, 1),), ((0, 4),), (M(3, 4),)], (F32, F64),
           torch_fn=lambda x: TF.layer_norm(x, x.shape[-1:]), rtol=1e-4, atol=1e-4),
    OpCase("layernorm_two_axes_eps", lambda x: x.layernorm((-2, -1), eps=1e-3),
           lambda x: _np_layernorm_eps(x, (-2, -1), 1e-3), [((2, 3, 4),), (P(2, 3, 4),)],
           torch_fn=lambda x: TF.layer_norm(x, x.shape[-2:], eps=1e-3), rtol=1e-4, atol=1e-4),
    # the statistics as float64 arguments: PyTorch cannot differentiate its running statistics
    OpCase("batchnorm", lambda x, w, b, m, v: x.batchnorm(w, b, m.float(), (v.float() + EPS).rsqrt()),
           lambda x, w, b, m, v: _np_batchnorm(x, w, b, m, v, 1),
           [((2, 3, 4), (3,), (3,), (3,), (3,)), ((4, 3), (3,), (3,), (3,), (3,)), ((0, 3, 2), (3,), (3,), (3,), (3,)),
            ((2, 1, 3), (1,), (1,), (1,), (1,)), (P(2, 3, 2), (3,), S(3,), (3,), (3,))],
           domain=((-3.0, 3.0), (-2.0, 2.0), (-1.0, 1.0), (-1.0, 1.0), (0.2, 2.0)),
           arg_dtypes=lambda d: (d, d, d, F64, F64),
           torch_fn=lambda x, w, b, m, v: TF.batch_norm(x, m.float(), v.float(), w, b, eps=EPS), rtol=1e-4,
           atol=1e-5),
    OpCase("batchnorm_no_affine_axis_last", lambda x, m, v: x.batchnorm(None, None, m, v, axis=-1),
           lambda x, m, v: (x - m) * v, [((3, 4), (4,), (4,)), ((2, 3, 4), (4,), (4,))],
           torch_fn=lambda x, m, v: (x - m) * v),
]


def _np_layernorm_eps(x: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    z = _f64(x)
    c = z - z.mean(axes, keepdims=True)
    return (c / np.sqrt((c * c).mean(axes, keepdims=True) + eps)).astype(np.float32)


def _np_batchnorm(x: np.ndarray, w: np.ndarray, b: np.ndarray, m: np.ndarray, v: np.ndarray, axis: int) -> np.ndarray:
    shape = [1] * x.ndim
    shape[axis] = -1
    out = (_f64(x) - m.reshape(shape)) / np.sqrt(v.reshape(shape) + EPS) * w.reshape(shape) + b.reshape(shape)
    return out.astype(np.float32)


SDPA3 = ((2, 3, 4), (2, 5, 4), (2, 5, 6))
ATTENTION_CASES = [
    OpCase("sdpa", lambda q, k, v: q.scaled_dot_product_attention(k, v), _np_sdpa,
           [SDPA3, ((1, 2, 3, 4), (1, 2, 3, 4), (1, 2, 3, 4)), ((2, 3, 4), (1, 5, 4), (1, 5, 4)),
            ((3, 2), (0, 2), (0, 3)), ((1, 1), (1, 1), (1, 1)), (P(2, 3, 4), S(2, 5, 4), M(2, 5, 3))],
           torch_fn=lambda q, k, v: TF.scaled_dot_product_attention(q, k, v), rtol=1e-4, atol=1e-5),
    OpCase("sdpa_bool_mask", lambda q, k, v, m: q.scaled_dot_product_attention(k, v, attn_mask=m),
           lambda q, k, v, m: _np_sdpa(q, k, v, m), [SDPA3 + ((3, 5),), SDPA3 + ((2, 3, 5),), SDPA3 + ((1, 5),)],
           arg_dtypes=lambda d: (d, d, d, BOOL),
           torch_fn=lambda q, k, v, m: TF.scaled_dot_product_attention(q, k, v, attn_mask=m), rtol=1e-4, atol=1e-5),
    OpCase("sdpa_float_mask", lambda q, k, v, m: q.scaled_dot_product_attention(k, v, attn_mask=m),
           lambda q, k, v, m: _np_sdpa(q, k, v, m), [SDPA3 + ((3, 5),), SDPA3 + ((5,),)],
           torch_fn=lambda q, k, v, m: TF.scaled_dot_product_attention(q, k, v, attn_mask=m), rtol=1e-4, atol=1e-5),
    OpCase("sdpa_causal", lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
           lambda q, k, v: _np_sdpa(q, k, v, causal=True), [SDPA3, ((2, 4, 3), (2, 4, 3), (2, 4, 3))],
           torch_fn=lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, is_causal=True), rtol=1e-4, atol=1e-5),
    OpCase("sdpa_scale", lambda q, k, v: q.scaled_dot_product_attention(k, v, scale=0.3),
           lambda q, k, v: _np_sdpa(q, k, v, scale=0.3), [SDPA3],
           torch_fn=lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, scale=0.3), rtol=1e-4, atol=1e-5),
    OpCase("sdpa_gqa", lambda q, k, v: q.scaled_dot_product_attention(k, v, enable_gqa=True),
           lambda q, k, v: _np_sdpa(q, np.repeat(k, 2, -3), np.repeat(v, 2, -3)),
           [((1, 4, 3, 2), (1, 2, 5, 2), (1, 2, 5, 3))],
           torch_fn=lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, enable_gqa=True), rtol=1e-4, atol=1e-5),
]

LOSS_CASES = [
    OpCase("one_hot", lambda y: y.one_hot(C), lambda y: _np_one_hot(y, C), [((5,),), ((2, 3),), ((0,),), ((),),
           (P(2, 3),)], (I64, I32), grad=False, domain=integral(0, C - 1), torch_fn=lambda y: TF.one_hot(y.long(), C),
           out_dtype=lambda d: I32),  # tinygrad's int32 (PyTorch's is int64)
    OpCase("one_hot_inferred", lambda y: y.one_hot(), lambda y: _np_one_hot(y, int(y.max()) + 1), [((6,),)], (I64,),
           grad=False, domain=integral(0, 5), torch_fn=lambda y: TF.one_hot(y), out_dtype=lambda d: I32),
    OpCase("binary_crossentropy", lambda p, y: p.binary_crossentropy(y), _np_bce,
           [((3, 4), (3, 4)), ((5,), (5,)), ((0,), (0,)), ((1,), (1,)), (P(3, 4), S(3, 4))], domain=(PROB, (0.0, 1.0)),
           torch_fn=lambda p, y: TF.binary_cross_entropy(p, y), rtol=1e-5),
    OpCase("binary_crossentropy_sum", lambda p, y: p.binary_crossentropy(y, "sum"), lambda p, y: _np_bce(p, y, "sum"),
           [((3, 4), (3, 4))], domain=(PROB, (0.0, 1.0)),
           torch_fn=lambda p, y: TF.binary_cross_entropy(p, y, reduction="sum"), rtol=1e-5),
    OpCase("binary_crossentropy_none", lambda p, y: p.binary_crossentropy(y, reduction="none"),
           lambda p, y: _np_bce(p, y, "none"), [((3, 4), (3, 4)), (F(2, 3), M(2, 3))], domain=(PROB, (0.0, 1.0)),
           torch_fn=lambda p, y: TF.binary_cross_entropy(p, y, reduction="none"), rtol=1e-5),
    OpCase("binary_crossentropy_logits", lambda x, y: x.binary_crossentropy_logits(y), _np_bce_logits,
           [((3, 4), (3, 4)), ((5,), (5,)), ((0, 2), (0, 2)), (S(3, 4), P(3, 4))], domain=((-30.0, 30.0), (0.0, 1.0)),
           torch_fn=lambda x, y: TF.binary_cross_entropy_with_logits(x, y), rtol=1e-5),
    # pos_weight as a float64 argument: PyTorch cannot differentiate it
    OpCase("binary_crossentropy_logits_pos_weight",
           lambda x, y, w: x.binary_crossentropy_logits(y, "none", w.float()),
           lambda x, y, w: _np_bce_logits(x, y, w, "none"), [((3, 4), (3, 4), (4,)), ((2, 3), (2, 3), (1,))],
           domain=((-5.0, 5.0), (0.0, 1.0), (0.5, 3.0)), arg_dtypes=lambda d: (d, d, F64),
           torch_fn=lambda x, y, w: TF.binary_cross_entropy_with_logits(x, y, pos_weight=w.float(), reduction="none"),
           rtol=1e-5),
    OpCase("sparse_categorical_crossentropy", lambda x, y: x.sparse_categorical_crossentropy(y),
           lambda x, y: _np_index_loss(_np_log_softmax(x, -1), y, -1, None, -1, 0.0, "mean"),
           [((5, C), (5,)), ((2, 3, C), (2, 3)), ((0, C), (0,)), (P(3, C), (3,))],
           domain=((-3.0, 3.0), _targets(0, C - 1, ignore=-1)), arg_dtypes=_with_int_targets,
           torch_fn=lambda x, y: TF.cross_entropy(x.reshape(-1, C), y.reshape(-1), ignore_index=-1), rtol=1e-5),
    OpCase("sparse_categorical_crossentropy_smoothing_sum",
           lambda x, y: x.sparse_categorical_crossentropy(y, ignore_index=2, label_smoothing=0.2, reduction="sum"),
           lambda x, y: _np_index_loss(_np_log_softmax(x, -1), y, -1, None, 2, 0.2, "sum"), [((6, C), (6,))],
           domain=((-3.0, 3.0), _targets(0, C - 1)), arg_dtypes=_with_int_targets,
           torch_fn=lambda x, y: TF.cross_entropy(x, y, ignore_index=2, label_smoothing=0.2, reduction="sum")),
    OpCase("cross_entropy", lambda x, y: x.cross_entropy(y),
           lambda x, y: _np_index_loss(_np_log_softmax(x, 0 if x.ndim == 1 else 1), y, 0 if x.ndim == 1 else 1, None,
                                       -100, 0.0, "mean"),
           [((5, C), (5,)), ((C,), ()), ((2, C, 3), (2, 3)), ((0, C), (0,)), (M(3, C), (3,))],
           domain=((-3.0, 3.0), _targets(0, C - 1)), arg_dtypes=_with_int_targets,
           torch_fn=lambda x, y: TF.cross_entropy(x, y), rtol=1e-5),
    OpCase("cross_entropy_one_class", lambda x, y: x.cross_entropy(y, label_smoothing=0.5),
           lambda x, y: _np_index_loss(_np_log_softmax(x, 1), y, 1, None, -100, 0.5, "mean"), [((3, 1), (3,))],
           domain=((-3.0, 3.0), _targets(0, 0)), arg_dtypes=_with_int_targets,
           torch_fn=lambda x, y: TF.cross_entropy(x, y, label_smoothing=0.5)),
    OpCase("cross_entropy_smoothing_ignore", lambda x, y: x.cross_entropy(y, label_smoothing=0.3),
           lambda x, y: _np_index_loss(_np_log_softmax(x, 1), y, 1, None, -100, 0.3, "mean"),
           [((6, C), (6,)), ((2, C, 3), (2, 3))], domain=((-3.0, 3.0), _targets(0, C - 1, ignore=-100)),
           arg_dtypes=_with_int_targets, torch_fn=lambda x, y: TF.cross_entropy(x, y, label_smoothing=0.3), rtol=1e-5),
    OpCase("cross_entropy_weighted_smoothing_none",
           lambda x, y, w: x.cross_entropy(y, "none", 0.1, weight=w.float(), ignore_index=1),
           lambda x, y, w: _np_index_loss(_np_log_softmax(x, 1), y, 1, w, 1, 0.1, "none"),
           [((6, C), (6,), (C,)), ((2, C, 3), (2, 3), (C,))], domain=((-3.0, 3.0), _targets(0, C - 1), (0.2, 2.0)),
           arg_dtypes=lambda d: (d, I64, F64),
           torch_fn=lambda x, y, w: TF.cross_entropy(x, y, w.float(), ignore_index=1, reduction="none",
                                                     label_smoothing=0.1), rtol=1e-5),
    OpCase("cross_entropy_weighted_mean", lambda x, y, w: x.cross_entropy(y, label_smoothing=0.2, weight=w.float()),
           lambda x, y, w: _np_index_loss(_np_log_softmax(x, 1), y, 1, w, -100, 0.2, "mean"),
           [((6, C), (6,), (C,))], domain=((-3.0, 3.0), _targets(0, C - 1, ignore=-100), (0.2, 2.0)),
           arg_dtypes=lambda d: (d, I64, F64),
           torch_fn=lambda x, y, w: TF.cross_entropy(x, y, w.float(), label_smoothing=0.2), rtol=1e-5),
    OpCase("cross_entropy_probabilities", lambda x, p: x.cross_entropy(p, label_smoothing=0.1),
           lambda x, p: _np_ce_probs(x, p, 0.1), [((5, C), (5, C)), ((C,), (C,)), ((2, C, 3), (2, C, 3)),
                                                  (S(3, C), F(3, C))],
           domain=((-3.0, 3.0), (0.0, 1.0)), torch_fn=lambda x, p: TF.cross_entropy(x, p, label_smoothing=0.1),
           rtol=1e-5),
    OpCase("cross_entropy_probabilities_sum", lambda x, p: x.cross_entropy(p, reduction="sum"),
           lambda x, p: _np_ce_probs(x, p, 0.0, "sum"), [((5, C), (5, C))], domain=((-3.0, 3.0), (0.0, 1.0)),
           torch_fn=lambda x, p: TF.cross_entropy(x, p, reduction="sum"), rtol=1e-5),
    OpCase("nll_loss", lambda x, y: x.nll_loss(y),
           lambda x, y: _np_index_loss(x, y, 0 if x.ndim == 1 else 1, None, -100, 0.0, "mean"),
           [((5, C), (5,)), ((C,), ()), ((2, C, 3), (2, 3)), ((0, C), (0,)), (P(3, C), (3,))],
           domain=((-3.0, 0.0), _targets(0, C - 1, ignore=-100)), arg_dtypes=_with_int_targets,
           torch_fn=lambda x, y: TF.nll_loss(x, y)),
    OpCase("nll_loss_weighted", lambda x, y, w: x.nll_loss(y, w.float(), ignore_index=0, reduction="sum"),
           lambda x, y, w: _np_index_loss(x, y, 1, w, 0, 0.0, "sum"), [((6, C), (6,), (C,))],
           domain=((-3.0, 0.0), _targets(0, C - 1), (0.2, 2.0)), arg_dtypes=lambda d: (d, I64, F64),
           torch_fn=lambda x, y, w: TF.nll_loss(x, y, w.float(), ignore_index=0, reduction="sum")),
    OpCase("nll_loss_weighted_mean_none", lambda x, y, w: x.nll_loss(y, w.float()) + x.nll_loss(y, reduction="none"),
           lambda x, y, w: _np_index_loss(x, y, 1, w, -100, 0.0, "mean")
           + _np_index_loss(x, y, 1, None, -100, 0.0, "none"), [((6, C), (6,), (C,))],
           domain=((-3.0, 0.0), _targets(0, C - 1), (0.2, 2.0)), arg_dtypes=lambda d: (d, I32, F64),
           torch_fn=lambda x, y, w: TF.nll_loss(x, y.long(), w.float()) + TF.nll_loss(x, y.long(), reduction="none")),
]

CASES = LAYER_CASES + ATTENTION_CASES + LOSS_CASES


# the forward test (values vs numpy, dtype vs PyTorch) and backward test (gradients vs PyTorch) of the table
test_forward, test_backward = table_tests(CASES)


# ---- behaviour outside the table ----

def test_linear_follows_tinygrads_weight_layout() -> None:
    x, w = Tensor([[1.0, 2.0]]), Tensor([[1.0, 0.0, 2.0], [0.0, 1.0, 3.0]])  # (in=2, out=3)
    assert x.linear(w, Tensor([0.5, 0.5, 0.5])).tolist() == [[1.5, 2.5, 8.5]]


def test_sdpa_rows_with_every_key_masked_give_zero_like_pytorch(torch: Any) -> None:
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (5, 4), (5, 2)))
    mask = np.ones((3, 5), bool)
    mask[1] = False
    leaves = [Tensor(a, requires_grad=True) for a in (q, k, v)]
    out = leaves[0].scaled_dot_product_attention(leaves[1], leaves[2], attn_mask=Tensor(mask))
    tl = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    ref = torch.nn.functional.scaled_dot_product_attention(*tl, attn_mask=torch.tensor(mask))
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=1e-6)
    assert out.numpy()[1].tolist() == [0.0, 0.0]
    out.sum().backward()
    ref.sum().backward()
    for ours, theirs in zip(leaves, tl):
        assert ours.grad is not None
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), atol=1e-5)


def test_sdpa_dropout_drops_and_rescales() -> None:
    q = Tensor.ones(1, 64, 4)
    v = Tensor(np.arange(64, dtype=np.float32).reshape(1, 64, 1))
    plain = q.scaled_dot_product_attention(q, v, dropout_p=0.0).numpy()
    np.testing.assert_allclose(plain, np.full((1, 64, 1), 31.5), rtol=1e-6)  # uniform attention: the mean of v
    # outside training, dropout_p changes nothing (tinygrad's rule: a model passes its rate and evaluates)
    np.testing.assert_allclose(q.scaled_dot_product_attention(q, v, dropout_p=0.5).numpy(), plain)
    Tensor.manual_seed(7)
    with Tensor.train():
        dropped = q.scaled_dot_product_attention(q, Tensor.ones(1, 64, 1), dropout_p=0.25).numpy()
        all_dropped = q.scaled_dot_product_attention(q, v, dropout_p=1.0).numpy()
    # each output sums 64 weights of 1/64, each kept (scaled by 4/3) with probability 3/4: about 1 on average
    assert 0.8 < dropped.mean() < 1.2 and dropped.std() > 0.01
    kept_counts = np.round(dropped * 64 * 0.75).astype(int)
    np.testing.assert_allclose(dropped, kept_counts / 64 / 0.75, atol=1e-5)  # only whole multiples of 1/48
    assert (all_dropped == 0).all()


def test_one_hot_is_the_default_int_with_a_trailing_class_axis() -> None:
    out = Tensor([[0, 2], [1, 1]]).one_hot(3)
    assert out.dtype == dtypes.int32 == dtypes.default_int and out.shape == (2, 2, 3)  # tinygrad's; torch: int64
    assert out.tolist() == [[[1, 0, 0], [0, 0, 1]], [[0, 1, 0], [0, 1, 0]]]


# ---- bad input ----

def test_one_hot_rejects_bad_classes() -> None:
    with pytest.raises(IndexError, match="target -1 is out of bounds"):
        Tensor([0, -1, 2]).one_hot(3)
    with pytest.raises(IndexError, match=r"target 3 is out of bounds.*\[0, 3\)"):
        Tensor([0, 3]).one_hot(3)
    with pytest.raises(TypeError, match="integer"):
        Tensor([0.0, 1.0]).one_hot(2)
    with pytest.raises(RuntimeError, match="empty"):
        Tensor.ones(0, dtype=dtypes.int32).one_hot()
    with pytest.raises(ValueError, match="num_classes"):
        Tensor([0]).one_hot(-3)


@pytest.mark.parametrize("call", [
    lambda x, y: x.cross_entropy(y), lambda x, y: x.nll_loss(y), lambda x, y: x.sparse_categorical_crossentropy(y),
], ids=["cross_entropy", "nll_loss", "sparse_categorical_crossentropy"])
def test_losses_reject_targets_out_of_range(call: Any) -> None:
    x = Tensor.ones(3, C)
    with pytest.raises(IndexError, match=f"target {C} is out of bounds"):
        call(x, Tensor([0, C, 1]))
    with pytest.raises(IndexError, match="target -5 is out of bounds"):
        call(x, Tensor([0, -5, 1]))


@pytest.mark.parametrize("call", [
    lambda x, y: x.cross_entropy(y), lambda x, y: x.nll_loss(y, reduction="sum"),
    lambda x, y: x.sparse_categorical_crossentropy(y, reduction="none"),
], ids=["cross_entropy", "nll_loss_sum", "sparse_categorical_crossentropy_none"])
def test_lazy_targets_are_not_computed_early_and_out_of_range_ones_make_the_loss_nan(call: Any) -> None:
    from tinygrad import GlobalCounters

    labels = Tensor([2, 0, 1, C - 1, 3]).realize()
    x = Tensor.arange(3 * C, dtype=dtypes.float32).reshape(3, C).realize() / 7
    before = GlobalCounters.kernel_count
    good = call(x, labels[Tensor([0, 1, 3])])  # a gather: a graph, not yet computed
    assert GlobalCounters.kernel_count == before, "nothing runs until the loss is needed"
    np.testing.assert_allclose(good.numpy(), call(x, Tensor([2, 0, C - 1])).numpy(), rtol=1e-6)
    bad = call(x, (labels + C - 2)[Tensor([0, 1, 3])])  # C, C - 2 and 2C - 3: the first and last are out of range
    assert np.isnan(bad.numpy()).all()


def test_index_checks_can_be_switched_off_for_lazy_graphs() -> None:
    x = Tensor.zeros(2, C)
    with Context(CHECK_INDICES=0):
        assert x.nll_loss(Tensor([0, 9]), reduction="none").tolist() == [0.0, 0.0]  # an unknown class reads nothing
        assert Tensor([5]).one_hot(3).tolist() == [[0, 0, 0]]


def test_losses_reject_mismatched_shapes() -> None:
    x = Tensor.ones(4, C)
    with pytest.raises(ValueError, match=r"targets of shape \(3,\).*\(4,\)"):
        x.cross_entropy(Tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="probability targets of shape"):
        x.cross_entropy(Tensor.ones(4, C + 1))
    with pytest.raises(ValueError, match=r"\(4, 1\)"):
        x.nll_loss(Tensor([[0], [1], [2], [3]]))
    with pytest.raises(TypeError, match="integers"):
        x.nll_loss(Tensor([0.0, 1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match=r"targets of shape \(4, 2\).*last \(class\) dimension"):
        x.sparse_categorical_crossentropy(Tensor.zeros(4, 2, dtype=dtypes.int32))
    with pytest.raises(ValueError, match="differ from the input's shape"):
        Tensor.full((3,), 0.5).binary_crossentropy(Tensor.ones(3, 1))
    with pytest.raises(ValueError, match="differ from the input's shape"):
        Tensor.ones(3).binary_crossentropy_logits(Tensor.ones(4))
    with pytest.raises(ValueError, match=r"class weight must have shape \(4,\)"):
        x.cross_entropy(Tensor([0, 1, 2, 3]), weight=Tensor.ones(3))
    with pytest.raises(ValueError, match="0-d"):
        Tensor(1.0).cross_entropy(Tensor(0))


def test_losses_reject_bad_options() -> None:
    x, y = Tensor.ones(2, C), Tensor([0, 1])
    with pytest.raises(ValueError, match="reduction='avg' is not valid"):
        x.cross_entropy(y, reduction="avg")
    with pytest.raises(ValueError, match="reduction="):
        x.sigmoid().binary_crossentropy(Tensor.ones(2, C), reduction="mean ")
    with pytest.raises(ValueError, match="label_smoothing"):
        x.cross_entropy(y, label_smoothing=1.5)
    with pytest.raises(ValueError, match="ignore_index"):
        x.cross_entropy(Tensor.ones(2, C), ignore_index=0)


def test_sdpa_rejects_bad_shapes_and_options() -> None:
    q, k = Tensor.ones(2, 3, 4), Tensor.ones(2, 5, 4)
    with pytest.raises(ValueError, match="embedding size"):
        q.scaled_dot_product_attention(Tensor.ones(2, 5, 3), k)
    with pytest.raises(ValueError, match="same sequence length"):
        q.scaled_dot_product_attention(k, Tensor.ones(2, 4, 4))
    with pytest.raises(ValueError, match="not both"):
        q.scaled_dot_product_attention(k, k, attn_mask=Tensor.ones(3, 5, dtype=dtypes.bool), is_causal=True)
    with pytest.raises(ValueError, match="dropout_p"):
        q.scaled_dot_product_attention(k, k, dropout_p=1.5)
    with pytest.raises(ValueError, match="multiple"):
        Tensor.ones(1, 3, 2, 4).scaled_dot_product_attention(Tensor.ones(1, 2, 2, 4), Tensor.ones(1, 2, 2, 4),
                                                             enable_gqa=True)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        Tensor.ones(4).scaled_dot_product_attention(Tensor.ones(4), Tensor.ones(4))


def test_batchnorm_rejects_statistics_of_the_wrong_size() -> None:
    with pytest.raises(ValueError, match="mean of shape"):
        Tensor.ones(2, 3, 4).batchnorm(None, None, Tensor.ones(4), Tensor.ones(3))


def test_layer_ops_reject_invalid_axes() -> None:
    with pytest.raises(IndexError, match="out of range"):
        Tensor.ones(2, 3).layernorm(2)
    with pytest.raises(IndexError, match="out of range"):
        Tensor.ones(2, 3).batchnorm(None, None, Tensor.ones(3), Tensor.ones(3), axis=3)

