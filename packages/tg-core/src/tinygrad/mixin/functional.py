"""The functional neural-network ops: linear layers, normalisation, one-hot, attention and the losses.

All are compositions of Tensor ops (lazy and differentiable). The class-index losses pick each target's entry
with a one-hot comparison against the class positions instead of a gather, so they need no host round trip.

Index checks: `one_hot` and the class-index losses check that every target is a valid class, as PyTorch does,
and raise a clear error instead of silently reading nothing. That check reads the targets' min and max back to
the host (one small kernel and a wait). The losses do so only for targets already computed (an uploaded batch);
targets that are still a lazy graph (`Y_train[samples]`) are not computed early for it: an out-of-range one makes
the loss NaN when it is computed. `Context(CHECK_INDICES=0)` (or the environment variable) skips the check, and
it is skipped while a TinyJit captures; out-of-range targets then contribute 0 (one_hot: an all-zero row).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Self

from tinygrad.dtype import dtypes
from tinygrad.errors import ArgumentError, DTypeError, ShapeError
from tinygrad.helpers import ContextVar
from tinygrad.mixin.common import TensorBase, TensorT

CHECK_INDICES = ContextVar("CHECK_INDICES", 1)

REDUCTIONS = ("none", "mean", "sum")


def _reduced(loss: TensorT, reduction: str) -> TensorT:
    _check_reduction(reduction)
    return loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.mean()


def _check_reduction(reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction={reduction!r} is not valid; use one of {', '.join(map(repr, REDUCTIONS))}")


def _check_targets(target: TensorT, num_classes: int, ignore_index: int | None, what: str,
                   lazy: bool = False) -> TensorT | None:
    """Raise (like PyTorch) when a target that is not `ignore_index` lies outside [0, num_classes). With `lazy`, a
    target that is not computed yet is not computed for the check: a lazy bool scalar, true when some target is
    out of range, is returned instead for the caller to fold into its result (a loss takes NaN), so that a
    program that builds its whole training before running it (tinygrad's one-shot style) runs nothing early."""
    # inside a TinyJit capture a host read could not be replayed: the check is skipped there, as with
    # CHECK_INDICES=0 (out-of-range targets then contribute 0)
    if not CHECK_INDICES or target.numel() == 0 or type(target)._runtime.jit_capturing():
        return None
    t = target if ignore_index is None else (target == ignore_index).where(0, target)
    if lazy and not type(target)._runtime.is_computed(target.uop):
        return ((t < 0) | (t >= num_classes)).any()
    lo, hi = t.min(), t.max()
    lo.realize(hi)
    lo_v, hi_v = int(lo.item()), int(hi.item())
    if lo_v < 0 or hi_v >= num_classes:
        bad = lo_v if lo_v < 0 else hi_v
        skip = f" (or the ignore_index {ignore_index})" if ignore_index is not None else ""
        raise IndexError(f"{what}: target {bad} is out of bounds; targets must be class indices in "
                         f"[0, {num_classes}){skip}")
    return None


def _class_mask(target: TensorT, num_classes: int, axis: int, ndim: int) -> TensorT:
    """Bool mask of shape `target` with a class axis of `num_classes` inserted at `axis` (of `ndim` in all):
    True where the class is the target."""
    classes = type(target).arange(num_classes, device=target.device).reshape((num_classes,) + (1,) * (ndim - axis - 1))
    return target.unsqueeze(axis) == classes


def _softplus_neg(x: TensorT) -> TensorT:
    """log(1 + exp(-x)) = -log(sigmoid(x)), without overflow; its gradient is -sigmoid(-x) everywhere, 0 included."""
    neg_abs = (x >= 0).where(-x, x)  # -|x|, with the slope at 0 taken from the x >= 0 side
    return (x < 0).where(-x, 0.0) + (1 + neg_abs.exp()).log()


class FunctionalMixin(TensorBase):
    __slots__ = ()

    # ---- layers ----
    def linear(self, weight: Self, bias: Self | None = None) -> Self:
        """x @ weight + bias, tinygrad's convention: `weight` is (in_features, out_features), the transpose of
        PyTorch's `F.linear` weight (so `x.linear(w.T, b)` is PyTorch's `F.linear(x, w, b)`). A 1-d weight scales
        elementwise.

        Examples:
            >>> x = Tensor([[1.0, 2.0]])
            >>> x.linear(Tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]]), Tensor([0.0, 0.0, 10.0])).tolist()
            [[1.0, 2.0, 13.0]]
        """
        out = self * weight if weight.ndim == 1 else self.matmul(weight)
        return out if bias is None else out + bias

    def sequential(self, ll: Sequence[Callable[[Self], Self]]) -> Self:
        """Apply each callable in turn: `x.sequential([f, g])` is `g(f(x))`.

        Examples:
            >>> Tensor([-1.0, 2.0]).sequential([Tensor.relu, lambda t: t * 10]).tolist()
            [0.0, 20.0]
        """
        return functools.reduce(lambda x, f: f(x), ll, self)

    def layernorm(self, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Self:
        """Normalise to mean 0 and variance 1 (biased) over `axis`; no affine part (see nn.LayerNorm).

        Examples:
            >>> [round(v, 3) for v in Tensor([1.0, 2.0, 3.0]).layernorm().tolist()]
            [-1.225, 0.0, 1.225]
        """
        centered = self - self.mean(axis, keepdim=True)
        return centered * ((centered * centered).mean(axis, keepdim=True) + eps).rsqrt()

    def batchnorm(self, weight: Self | None, bias: Self | None, mean: Self, invstd: Self,
                  axis: int | Sequence[int] = 1) -> Self:
        """(x - mean) * invstd * weight + bias, the statistics laid along `axis` (the channel axis) and broadcast
        over the others (or one value for all). `invstd` is 1/sqrt(var + eps). A weight or bias of None is left out.

        Examples:
            >>> x = Tensor([[1.0, 10.0], [3.0, 20.0]])
            >>> x.batchnorm(None, None, mean=Tensor([2.0, 15.0]), invstd=Tensor([1.0, 0.2])).tolist()
            [[-1.0, -1.0], [1.0, 1.0]]
        """
        axes = {self._axis(a) for a in (axis if isinstance(axis, (tuple, list)) else (axis,))}
        shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))

        def laid(t: Self, name: str) -> Self:
            if t.numel() == 1:  # one value for every channel: broadcast it as it is
                return t.reshape((1,) * self.ndim)
            if t.numel() != math.prod(shape):
                raise ValueError(f"batchnorm: {name} of shape {t.shape} does not fit the channel dimensions "
                                 f"{tuple(self.shape[a] for a in sorted(axes))} of an input of shape {self.shape}")
            return t.reshape(shape)

        out = (self - laid(mean, "mean")) * laid(invstd, "invstd")
        if weight is not None:
            out = out * laid(weight, "weight")
        return out if bias is None else out + laid(bias, "bias")

    def one_hot(self, num_classes: int | None = None) -> Self:
        """One-hot encoding along a new last axis, in the default int dtype (int32) as tinygrad's (PyTorch's
        `F.one_hot` gives int64; cast it where that matters). Without `num_classes` it is inferred from the largest
        value, which reads it back to the host; a negative one raises ValueError, as tinygrad's (PyTorch reads -1 as
        "infer").

        Examples:
            >>> Tensor([0, 2]).one_hot(3).tolist()
            [[1, 0, 0], [0, 0, 1]]
            >>> Tensor([1]).one_hot().tolist()
            [[0, 1]]
        """
        if not self.dtype.is_int:
            raise DTypeError(f"one_hot needs an integer tensor of class indices, got {self.dtype}")
        if num_classes is None:
            if self.numel() == 0:
                raise RuntimeError("one_hot cannot infer the number of classes of an empty tensor; pass num_classes")
            num_classes = int(self.max().item()) + 1
        if not isinstance(num_classes, int) or num_classes < 0:
            raise ValueError(f"num_classes must be a non-negative int (or left out to infer it), got {num_classes!r}")
        _check_targets(self, num_classes, None, "one_hot")
        return _class_mask(self, num_classes, self.ndim, self.ndim + 1).cast(dtypes.default_int)

    # ---- attention ----
    def scaled_dot_product_attention(self, key: Self, value: Self, attn_mask: Self | None = None,
                                     dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                     enable_gqa: bool = False) -> Self:
        """softmax(q @ k^T * scale + mask) @ v, with q = self of shape (..., L, E), key (..., S, E), value
        (..., S, Ev). A bool `attn_mask` keeps the True positions; a float one is added. `is_causal` keeps the
        lower triangle (top-left aligned). A row with every position masked out gives 0, as PyTorch. Dropout
        follows `Tensor.dropout`: only in training mode (tinygrad's rule, so a model that passes its dropout rate
        evaluates without it; PyTorch drops whenever dropout_p > 0). `enable_gqa` lets query heads (dim -3) share
        key/value heads in groups.

        Examples:
            >>> q = k = Tensor.zeros(1, 2, 4)
            >>> v = Tensor([[[1.0, 2.0], [3.0, 4.0]]])
            >>> q.scaled_dot_product_attention(k, v).tolist()
            [[[2.0, 3.0], [2.0, 3.0]]]
            >>> q.scaled_dot_product_attention(k, v, is_causal=True).tolist()
            [[[1.0, 2.0], [2.0, 3.0]]]
        """
        q = self
        for name, t in (("query", q), ("key", key), ("value", value)):
            if t.ndim < 2:
                raise ValueError(f"scaled_dot_product_attention: {name} needs at least 2 dimensions, got {t.shape}")
        if q.shape[-1] != key.shape[-1]:
            raise ValueError(f"scaled_dot_product_attention: query {q.shape} and key {key.shape} must have the same "
                             f"embedding size (last dimension)")
        if key.shape[-2] != value.shape[-2]:
            raise ValueError(f"scaled_dot_product_attention: key {key.shape} and value {value.shape} must have the "
                             f"same sequence length (dimension -2)")
        if enable_gqa and q.ndim >= 3 and key.shape[-3] != q.shape[-3]:
            key, value = _repeat_heads(key, q.shape[-3]), _repeat_heads(value, q.shape[-3])
        if not 0.0 <= dropout_p <= 1.0:
            raise ValueError(f"dropout_p must be in [0, 1], got {dropout_p}")
        L, S = q.shape[-2], key.shape[-2]
        scores = q.matmul(key.transpose(-1, -2)) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
        if is_causal:
            if attn_mask is not None:
                raise ArgumentError("scaled_dot_product_attention: pass attn_mask or is_causal=True, not both")
            attn_mask = type(self).arange(L, device=q.device).unsqueeze(-1) >= type(self).arange(S, device=q.device)
        if attn_mask is not None:
            scores = attn_mask.where(scores, -math.inf) if attn_mask.dtype.is_bool else scores + attn_mask
        if S == 0:  # nothing to attend to: the output is an empty sum, 0
            return scores.matmul(value)
        m = scores.max(-1, keepdim=True).detach()
        e = (scores - (m == -math.inf).where(0.0, m)).exp()
        total = e.sum(-1, keepdim=True)
        weights = e / (total == 0).where(1.0, total)
        return weights.dropout(dropout_p).matmul(value)

    # ---- losses ----
    def binary_crossentropy(self, Y: Self, reduction: str = "mean") -> Self:
        """Binary cross-entropy of probabilities `self` against targets Y of the same shape; each log is clamped
        at -100 as in PyTorch, so a confident wrong answer costs 100, not inf.

        Examples:
            >>> p = Tensor([0.5, 1.0, 0.0])
            >>> [round(v, 4) for v in p.binary_crossentropy(Tensor([1.0, 1.0, 1.0]), reduction="none").tolist()]
            [0.6931, -0.0, 100.0]
        """
        _check_reduction(reduction)
        _same_shape(self, Y, "binary_crossentropy")
        log_p, log_not_p = self.log(), (1 - self).log()
        log_p, log_not_p = (log_p < -100).where(-100.0, log_p), (log_not_p < -100).where(-100.0, log_not_p)
        return _reduced(-(Y * log_p + (1 - Y) * log_not_p), reduction)

    def binary_crossentropy_logits(self, Y: Self, reduction: str = "mean",
                                   pos_weight: Self | None = None) -> Self:
        """Binary cross-entropy of logits `self` (sigmoid included, computed stably) against targets Y of the
        same shape; `pos_weight` scales the positive term (broadcast over the last dimension).

        Examples:
            >>> logits = Tensor([0.0, 100.0])
            >>> [round(v, 4) for v in logits.binary_crossentropy_logits(Tensor([1.0, 0.0]), reduction="none").tolist()]
            [0.6931, 100.0]
        """
        _check_reduction(reduction)
        _same_shape(self, Y, "binary_crossentropy_logits")
        pos = Y * _softplus_neg(self)  # -Y * log(sigmoid(x))
        if pos_weight is not None:
            pos = pos * pos_weight
        return _reduced(pos + (1 - Y) * _softplus_neg(-self), reduction)

    def sparse_categorical_crossentropy(self, Y: Self, ignore_index: int = -1, label_smoothing: float = 0.0,
                                        reduction: str = "mean") -> Self:
        """Cross-entropy of logits `self` (..., C) with the classes on the *last* axis against class indices Y
        (...); targets equal to `ignore_index` are left out, also from the mean.

        Examples:
            >>> logits = Tensor([[0.0, 0.0], [0.0, 0.0]])
            >>> round(logits.sparse_categorical_crossentropy(Tensor([0, 1])).item(), 4)
            0.6931
            >>> round(logits.sparse_categorical_crossentropy(Tensor([0, -1])).item(), 4)
            0.6931
        """
        if self.ndim < 1:
            raise ValueError("sparse_categorical_crossentropy needs logits with a class dimension, got a 0-d tensor")
        if Y.shape != self.shape[:-1]:
            raise ValueError(f"sparse_categorical_crossentropy: targets of shape {Y.shape} do not match logits of "
                             f"shape {self.shape}; the targets need the logits' shape without the last (class) "
                             f"dimension, {self.shape[:-1]}")
        return _index_loss(self.log_softmax(-1), Y, self.ndim - 1, None, ignore_index, label_smoothing, reduction,
                           "sparse_categorical_crossentropy")

    def cross_entropy(self, Y: Self, reduction: str = "mean", label_smoothing: float = 0.0, *,
                      weight: Self | None = None, ignore_index: int = -100) -> Self:
        """PyTorch's `F.cross_entropy`: logits (C,), (N, C) or (N, C, d1, ...) with the classes on axis 1 (0 for a
        1-d input), against class indices (the input's shape without the class axis) or class probabilities
        (the input's shape). `weight` rescales each class; with class indices the mean is weighted by it.

        Examples:
            >>> logits = Tensor([[0.0, 0.0, 0.0, 0.0]])
            >>> round(logits.cross_entropy(Tensor([2])).item(), 4)
            1.3863
            >>> round(logits.cross_entropy(Tensor([[0.0, 0.0, 1.0, 0.0]])).item(), 4)
            1.3863
        """
        if self.ndim < 1:
            raise ValueError("cross_entropy needs logits with a class dimension, got a 0-d tensor")
        axis = 0 if self.ndim == 1 else 1
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
        if Y.dtype.is_float:
            if Y.shape != self.shape:
                raise ShapeError(f"cross_entropy: probability targets of shape {Y.shape} must have the input's shape "
                                 f"{self.shape}; class-index targets must be integers")
            if ignore_index != -100:
                raise ValueError("cross_entropy: ignore_index applies to class-index targets, not probabilities")
            _check_reduction(reduction)
            C = self.shape[axis]
            logp = self.log_softmax(axis)
            if weight is not None:
                logp = logp * _class_weight(weight, C, axis, self.ndim)
            probs = Y * (1 - label_smoothing) + label_smoothing / C if label_smoothing else Y
            return _reduced(-(probs * logp).sum(axis), reduction)
        _check_index_shape(self, Y, axis, "cross_entropy")
        return _index_loss(self.log_softmax(axis), Y, axis, weight, ignore_index, label_smoothing, reduction,
                           "cross_entropy")

    def nll_loss(self, Y: Self, weight: Self | None = None, ignore_index: int = -100,
                 reduction: str = "mean") -> Self:
        """PyTorch's `F.nll_loss`: -self[target] for log-probabilities (C,), (N, C) or (N, C, d1, ...) with the
        classes on axis 1 (0 for 1-d), weighted by `weight[target]`; the mean divides by the summed weights.

        Examples:
            >>> logp = Tensor([[-1.0, -2.0], [-3.0, -4.0]])
            >>> logp.nll_loss(Tensor([1, 0])).item()
            2.5
            >>> logp.nll_loss(Tensor([1, 0]), reduction="none").tolist()
            [2.0, 3.0]
        """
        if self.ndim < 1:
            raise ValueError("nll_loss needs log-probabilities with a class dimension, got a 0-d tensor")
        axis = 0 if self.ndim == 1 else 1
        _check_index_shape(self, Y, axis, "nll_loss")
        return _index_loss(self, Y, axis, weight, ignore_index, 0.0, reduction, "nll_loss")


def _same_shape(x: TensorT, y: TensorT, what: str) -> None:
    if x.shape != y.shape:
        raise ValueError(f"{what}: targets of shape {y.shape} differ from the input's shape {x.shape}; "
                         f"they must be the same")


def _check_index_shape(x: TensorT, y: TensorT, axis: int, what: str) -> None:
    if not y.dtype.is_int:
        raise DTypeError(f"{what}: class-index targets must be integers, got {y.dtype}")
    want = x.shape[:axis] + x.shape[axis + 1:]
    if y.shape != want:
        raise ShapeError(f"{what}: targets of shape {y.shape} do not match the input of shape {x.shape}: class-index "
                         f"targets need the input's shape without the class dimension {axis}, {want}")


def _class_weight(weight: TensorT, num_classes: int, axis: int, ndim: int) -> TensorT:
    if weight.shape != (num_classes,):
        raise ValueError(f"the class weight must have shape ({num_classes},), one entry per class, got {weight.shape}")
    return weight.reshape((num_classes,) + (1,) * (ndim - axis - 1))


def _index_loss(logp: TensorT, Y: TensorT, axis: int, weight: TensorT | None, ignore_index: int | None,
                label_smoothing: float, reduction: str, what: str) -> TensorT:
    """The class-index cross-entropy on log-probabilities, PyTorch's way: per element
    (1 - eps) * w[y] * -logp[y] + eps / C * sum_c w[c] * -logp[c], 0 where y == ignore_index; the mean divides
    by the summed w[y] over the kept elements."""
    _check_reduction(reduction)
    C = logp.shape[axis]
    out_of_range = _check_targets(Y, C, ignore_index, what, lazy=True)
    kept = Y != ignore_index if ignore_index is not None else Y == Y
    hit = _class_mask(Y, C, axis, logp.ndim) & kept.unsqueeze(axis)
    w = _class_weight(weight, C, axis, logp.ndim) if weight is not None else None
    weighted = logp * w if w is not None else logp
    loss = -hit.where(weighted, 0.0).sum(axis)
    if label_smoothing:
        smooth = -weighted.sum(axis) * kept
        loss = loss * (1 - label_smoothing) + smooth * (label_smoothing / C)
    if reduction == "sum":
        loss = loss.sum()
    elif reduction == "mean":
        loss = loss.sum() / (hit.where(w, 0.0).sum() if w is not None else kept.sum())
    # a target out of range, found without computing the targets early, makes the loss NaN (see _check_targets)
    return loss if out_of_range is None else out_of_range.where(math.nan, loss)


def _repeat_heads(t: TensorT, heads: int) -> TensorT:
    """(..., H, S, E) -> (..., heads, S, E), each of the H heads repeated heads/H times in place."""
    h = t.shape[-3]
    if heads % h:
        raise ValueError(f"scaled_dot_product_attention with enable_gqa: {heads} query heads cannot share {h} "
                         f"key/value heads; the query heads must be a multiple")
    lead, rest = t.shape[:-3], t.shape[-2:]
    return t.unsqueeze(-3).expand(lead + (h, heads // h) + rest).reshape(lead + (heads,) + rest)
