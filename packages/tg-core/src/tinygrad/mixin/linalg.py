"""Linear algebra: matmul/dot, einsum, the Newton-Schulz orthogonalisation, and matrix decompositions (QR by
Householder reflections in lazy Tensor ops, so it is differentiable and runs on any device; the SVD)."""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any, Self

import numpy as np

from tinygrad.dtype import DTypeLike, least_upper_dtype, to_numpy
from tinygrad.errors import ArgumentError, DTypeError, ShapeError
from tinygrad.mixin.common import TensorBase, TensorT, acc_dtype, broadcast_shape
from tinygrad.uop.layout import PanelPacked
from tinygrad.uop.ops import Ops, UOp

# ---------------------------------------------------------------------------------------------------------------------
# einsum parsing


def _einsum_labels(term: str, where: str) -> tuple[list[Any], int]:
    """The labels of one side's subscripts, '*' standing for '...', and the position of '*' (-1: none)."""
    if term.count("...") > 1 or term.replace("...", "").count("."):
        raise ArgumentError(f"einsum(): {where} subscripts {term!r} may hold '...' once and no other '.'")
    labels: list[Any] = []
    for c in term.replace("...", "*"):
        if c != "*" and not (c.isascii() and c.isalpha()):
            raise ArgumentError(f"einsum(): invalid subscript {c!r} in {where} {term!r}; use letters a-z, A-Z")
        labels.append(c)
    return labels, labels.index("*") if "*" in labels else -1


def _einsum_terms(formula: str, operands: Sequence[TensorT]) -> tuple[list[list[Any]], list[Any]]:
    """Labels of each operand (letters, and ('...', j) for the j-th ellipsis dim counted from the right) and of
    the output."""
    f = "".join(formula.split())
    if f.count("->") > 1 or ("-" in f.replace("->", "")) or (">" in f.replace("->", "")):
        raise ArgumentError(f"einsum(): the formula {formula!r} must have at most one '->'")
    lhs, arrow, rhs = f.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise ArgumentError(f"einsum(): the formula {formula!r} has subscripts for {len(terms)} operand(s), but "
                            f"{len(operands)} were given")
    parse = _einsum_labels
    in_labels: list[list[Any]] = []
    n_ell = 0
    for k, (term, t) in enumerate(zip(terms, operands)):
        labels, at = parse(term, f"operand {k}")
        named = len(labels) - (at >= 0)
        if (at < 0 and named != t.ndim) or (at >= 0 and named > t.ndim):
            raise ShapeError(f"einsum(): subscripts {term!r} name {named} dimension(s), but operand {k} has shape "
                             f"{t.shape} ({t.ndim} dimensions)")
        ell = t.ndim - named
        n_ell = max(n_ell, ell if at >= 0 else 0)
        if at >= 0:
            labels[at:at + 1] = [("...", j) for j in range(ell - 1, -1, -1)]
        in_labels.append(labels)
    ell_labels = [("...", j) for j in range(n_ell - 1, -1, -1)]
    if arrow:
        out, at = parse(rhs, "output")
        if at >= 0:
            out[at:at + 1] = ell_labels
        seen = {lb for labels in in_labels for lb in labels}
        for lb in out:
            if lb not in seen:
                raise ArgumentError(f"einsum(): output subscript {lb!r} does not appear in the inputs of {formula!r}")
        if len(set(out)) != len(out):
            raise ArgumentError(f"einsum(): output subscripts {rhs!r} repeat a label")
        return in_labels, out
    counts: dict[str, int] = {}
    for labels in in_labels:
        for lb in labels:
            if isinstance(lb, str):
                counts[lb] = counts.get(lb, 0) + 1
    return in_labels, ell_labels + sorted(lb for lb, c in counts.items() if c == 1)


def _diagonal(x: TensorT, labels: list[Any], k: int) -> tuple[TensorT, list[Any]]:
    """Collapse every label that an operand repeats onto its diagonal (x[i, i] for 'ii')."""
    while True:
        dup = next((lb for lb in labels if labels.count(lb) > 1), None)
        if dup is None:
            return x, labels
        p = labels.index(dup)
        q = labels.index(dup, p + 1)
        if x.shape[p] != x.shape[q]:
            raise ShapeError(f"einsum(): subscript {dup} is repeated for operand {k} but the sizes differ, "
                             f"{x.shape[p]} != {x.shape[q]}")
        n = x.shape[p]
        keep = [a for a in range(x.ndim) if a not in (p, q)]
        x = x.permute(keep + [p, q]).flatten(-2)
        # the diagonal of an n x n block is every (n+1)-th element of its flat form
        x = x.pad([None] * len(keep) + [(0, n)]).reshape(x.shape[:-1] + (n, n + 1))
        x = x.shrink([None] * (x.ndim - 1) + [(0, 1)]).reshape(x.shape[:-1])
        labels = [labels[a] for a in keep] + [dup]


# ---------------------------------------------------------------------------------------------------------------------


class LinalgMixin(TensorBase):
    __slots__ = ()

    # ---- products ----
    def dot(self, w: Self, dtype: DTypeLike | None = None) -> Self:
        """Matrix product (`self @ w`); `dtype` is the accumulation and result dtype.

        Examples:
            >>> Tensor([[1, 2], [3, 4]]).dot(Tensor([[1], [1]])).tolist()
            [[3], [7]]
        """
        return self.matmul(w, dtype=dtype)

    def matmul(self, x: Self, reverse: bool = False, dtype: DTypeLike | None = None) -> Self:
        """PyTorch's matmul (the `@` operator): 1-D operands are vectors, leading dims broadcast. `reverse`
        computes x @ self; `dtype` is the accumulation and result dtype (half floats accumulate in float32 by default).

        Examples:
            >>> (Tensor([[1, 2], [3, 4]]) @ Tensor([[5, 6], [7, 8]])).tolist()
            [[19, 22], [43, 50]]
            >>> Tensor([1.0, 2.0]).matmul(Tensor([3.0, 4.0])).item()
            11.0
        """
        if not isinstance(x, TensorBase):
            raise TypeError(f"matmul needs a Tensor, got {type(x).__name__}")
        a, b = (x, self) if reverse else (self, x)
        if a.ndim == 0 or b.ndim == 0:
            raise ShapeError(f"matmul needs tensors with at least one dimension, got {a.shape} and {b.shape}")
        xa = a.unsqueeze(0) if a.ndim == 1 else a
        yb = b.unsqueeze(-1) if b.ndim == 1 else b
        if xa.shape[-1] != yb.shape[-2]:
            raise ShapeError(f"matmul of shapes {a.shape} and {b.shape}: the inner sizes {xa.shape[-1]} and "
                             f"{yb.shape[-2]} differ; transpose or reshape one operand")
        try:
            batch = broadcast_shape(xa.shape[:-2], yb.shape[:-2])
        except ValueError:
            raise ShapeError(f"matmul of shapes {a.shape} and {b.shape}: the batch dimensions {xa.shape[:-2]} and "
                             f"{yb.shape[:-2]} cannot be broadcast together") from None
        n, k, m = xa.shape[-2], xa.shape[-1], yb.shape[-1]
        acc, out_dtype = acc_dtype(least_upper_dtype(xa.dtype, yb.dtype), dtype)
        xe = xa.cast(acc).expand(batch + (n, k)).reshape(batch + (n, 1, k))
        # B may be read from a panel-packed copy, where the scheduler's layout pass finds that the target's knobs
        # ask for one (engine/layout.py). The hint sits before the cast: a half B stays half in the copy (half the
        # bytes), and the product reads it through a cast, the sum of half products that tensor cores take
        # rows of `a` that read each matrix of `b` (None: a symbolic size)
        sizes = (n, *batch, *yb.shape[:-2])
        rows = prod(sizes[:len(batch) + 1]) // max(1, prod(yb.shape[:-2])) \
            if all(isinstance(s, int) for s in sizes) else None
        hinted = yb._derive(UOp(Ops.LAYOUT, yb.dtype, (yb.uop,), PanelPacked(rows)))
        ye = hinted.cast(acc).expand(batch + (k, m)).transpose(-1, -2).reshape(batch + (1, m, k))
        out = (xe * ye).sum(-1, dtype=acc).cast(out_dtype)  # integer products stay in their dtype, as in PyTorch
        if a.ndim == 1:
            out = out.squeeze(-2)
        if b.ndim == 1:
            out = out.squeeze(-1)
        return out

    def image_dot(self, w: Self, dtype: DTypeLike | None = None) -> Self:
        """`dot` with tinygrad's name for the variant that, on Qualcomm GPUs, keeps operands in image textures. Here
        it is exactly `dot` (same results on every device); the texture layout is a backend concern.

        Examples:
            >>> Tensor([[1.0, 2.0]]).image_dot(Tensor([[3.0], [4.0]])).tolist()
            [[11.0]]
        """
        return self.dot(w, dtype=dtype)

    @staticmethod
    def einsum(formula: str, *operands: TensorT | Sequence[TensorT], dtype: DTypeLike | None = None) -> TensorT:
        """Einstein summation, as torch.einsum: repeated subscripts in one operand take a diagonal, '...' broadcasts,
        and without '->' the output is the subscripts used once, in alphabetical order, after the '...' dims.

        Examples:
            >>> a, b = Tensor([[1, 2], [3, 4]]), Tensor([[5, 6], [7, 8]])
            >>> Tensor.einsum("ij,jk->ik", a, b).tolist()
            [[19, 22], [43, 50]]
            >>> Tensor.einsum("ii", a).item(), Tensor.einsum("ij->j", a).tolist()
            (5, [4, 6])
        """
        ops: list[TensorT] = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) \
            else list(operands)  # type: ignore[arg-type]
        if not ops or not all(isinstance(t, TensorBase) for t in ops):
            raise TypeError("einsum needs a formula and at least one Tensor operand")
        in_labels, out_labels = _einsum_terms(formula, ops)
        sizes: dict[Any, int] = {}
        reduced: list[TensorT] = []
        label_lists: list[list[Any]] = []
        for k, (t, labels) in enumerate(zip(ops, in_labels)):
            t, labels = _diagonal(t, labels, k)
            for lb, s in zip(labels, t.shape):
                if sizes.get(lb, 1) != 1 and s != 1 and sizes[lb] != s:
                    name = "the '...' dimensions" if isinstance(lb, tuple) else f"subscript {lb}"
                    raise ShapeError(f"einsum(): {name} has size {s} for operand {k}, which does not broadcast with "
                                     f"the size {sizes[lb]} seen before")
                sizes[lb] = s if sizes.get(lb, 1) == 1 else sizes[lb]
            reduced.append(t)
            label_lists.append(labels)
        summed = [lb for lb in sizes if lb not in out_labels]
        order = list(out_labels) + summed
        full = tuple(sizes[lb] for lb in order)
        acc, out_dtype = acc_dtype(least_upper_dtype(*(t.dtype for t in ops)), dtype)
        prod_t: TensorT | None = None
        for t, labels in zip(reduced, label_lists):
            present = sorted(range(len(labels)), key=lambda a: order.index(labels[a]))
            t = t.permute(present) if present else t
            shape = tuple(t.shape[present.index(labels.index(lb))] if lb in labels else 1 for lb in order)
            t = t.cast(acc).reshape(shape).expand(full)
            prod_t = t if prod_t is None else prod_t * t
        assert prod_t is not None
        axes = tuple(range(len(out_labels), len(order)))
        out = prod_t.sum(axes, dtype=acc) if axes else prod_t
        return out.cast(out_dtype)

    # ---- optimisation ----
    def newton_schulz(self, steps: int, params: Sequence[float], eps: float = 1.0e-7) -> Self:
        """Orthogonalise the last two dims by the Newton-Schulz iteration for odd polynomials (the Muon optimizer's
        step): scale to unit Frobenius norm, then `steps` times X <- sum_i params[i] * (X X^T)^i X. With params
        (1.5, -0.5) it converges to U V^T of the SVD; Muon's quintic is (3.4445, -4.7750, 2.0315).

        Examples:
            >>> x = Tensor([[3.0, 0.0], [0.0, 1.0]]).newton_schulz(20, (1.5, -0.5))
            >>> [[round(v, 3) for v in row] for row in x.tolist()]
            [[1.0, 0.0], [0.0, 1.0]]
        """
        if self.ndim < 2:
            raise ValueError(f"newton_schulz needs a matrix (or a batch of them), got shape {self.shape}")
        if not params:
            raise ValueError("newton_schulz needs at least one polynomial coefficient in params")
        if self.shape[-2] > self.shape[-1]:
            # iterate on the wide orientation: X X^T is then the smaller Gram matrix
            return self.transpose(-2, -1).newton_schulz(steps, params, eps).transpose(-2, -1)
        x = self / (self.square().sum((-2, -1), keepdim=True).sqrt() + eps)
        for _ in range(steps):
            gram = x @ x.transpose(-2, -1)
            term, total = x, x * params[0]
            for p in params[1:]:
                term = gram @ term
                total = total + term * p
            x = total
        return x

    def _check_matrix(self, what: str) -> None:
        if self.ndim < 2:
            raise ValueError(f"{what} needs a matrix (or a batch of them), got shape {self.shape}")
        if not self.dtype.is_float:
            raise DTypeError(f"{what} needs a floating point tensor, got {self.dtype}")

    def qr(self) -> tuple[Self, Self]:
        """The reduced QR decomposition (PyTorch's `torch.linalg.qr` default): Q (..., m, k) with orthonormal
        columns and upper-triangular R (..., k, n), k = min(m, n), such that Q @ R equals the input.

        Examples:
            >>> a = Tensor([[3.0, 1.0], [4.0, 2.0]])
            >>> q, r = a.qr()
            >>> q.shape, r.shape, (q @ r).allclose(a, atol=1e-5)
            ((2, 2), (2, 2), True)
            >>> [[round(abs(v), 3) for v in row] for row in r.tolist()]
            [[5.0, 2.2], [0.0, 0.4]]
        """
        self._check_matrix("qr")
        m, n = self.shape[-2], self.shape[-1]
        batch = self.shape[:-2]
        r = self
        q = type(self).eye(m, dtype=self.dtype, device=self.device).expand(*batch, m, m)
        for j in range(min(m - 1, n)):
            x = r[..., j:, j]  # the column from the diagonal down
            norm = (x * x).sum(-1, keepdim=True).sqrt()
            x0 = x[..., :1]
            alpha = -(x0 >= 0).where(norm, -norm)  # the sign that avoids cancellation
            e1 = type(self).eye(m - j, dtype=self.dtype, device=self.device)[0]
            v = x - alpha * e1
            vnorm = (v * v).sum(-1, keepdim=True).sqrt()
            v = (vnorm > 0).where(v / vnorm.maximum(1e-30), 0.0)  # a zero column needs no reflection
            # apply H = I - 2vv^T to the trailing rows of R and the trailing columns of Q
            r_tail = r[..., j:, :]
            r_tail = r_tail - 2 * v.unsqueeze(-1) * (v.unsqueeze(-1) * r_tail).sum(-2, keepdim=True)
            r = r[..., :j, :].cat(r_tail, dim=-2) if j else r_tail
            q_tail = q[..., :, j:]
            q_tail = q_tail - 2 * (q_tail * v.unsqueeze(-2)).sum(-1, keepdim=True) * v.unsqueeze(-2)
            q = q[..., :, :j].cat(q_tail, dim=-1) if j else q_tail
        k = min(m, n)
        return q[..., :, :k], r[..., :k, :].triu()

    def svd(self, full_matrices: bool = True) -> tuple[Self, Self, Self]:
        """U, S, Vh with input = U @ diag(S) @ Vh, singular values descending (PyTorch's `torch.linalg.svd`).

        Computed on the host with numpy's LAPACK binding and returned on this tensor's device; unlike the other
        ops it does not build a lazy graph, so it has no gradient.

        Examples:
            >>> u, s, vh = Tensor([[3.0, 0.0], [0.0, -4.0]]).svd()
            >>> s.tolist()
            [4.0, 3.0]
            >>> (u @ s.diag() @ vh).tolist()
            [[3.0, 0.0], [0.0, -4.0]]
        """
        self._check_matrix("svd")
        host = self.numpy().astype(np.float64)
        u, s, vh = np.linalg.svd(host, full_matrices=full_matrices)
        nd = to_numpy(self.dtype)
        make = type(self)
        return (make(u.astype(nd), device=self.device), make(s.astype(nd), device=self.device),
                make(vh.astype(nd), device=self.device))
