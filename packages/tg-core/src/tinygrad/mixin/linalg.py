"""Matrix decompositions: QR by Householder reflections (lazy Tensor ops, so it is differentiable and runs on
any device) and the singular value decomposition."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tinygrad.dtype import to_numpy

if TYPE_CHECKING:
    from tinygrad.tensor import Tensor
else:
    Tensor = None  # bound to the real class by tinygrad.tensor once it is defined (the modules import each other)


class LinalgMixin:
    __slots__ = ()

    def _check_matrix(self: Tensor, what: str) -> None:
        if self.ndim < 2:
            raise ValueError(f"{what} needs a matrix (or a batch of them), got shape {self.shape}")
        if not self.dtype.is_float:
            raise TypeError(f"{what} needs a floating point tensor, got {self.dtype}")

    def qr(self: Tensor) -> tuple[Tensor, Tensor]:
        """The reduced QR decomposition (PyTorch's `torch.linalg.qr` default): Q (..., m, k) with orthonormal
        columns and upper-triangular R (..., k, n), k = min(m, n), such that Q @ R equals the input."""
        self._check_matrix("qr")
        m, n = self.shape[-2], self.shape[-1]
        batch = self.shape[:-2]
        r = self
        q = Tensor.eye(m, dtype=self.dtype, device=self.device).expand(*batch, m, m)
        for j in range(min(m - 1, n)):
            x = r[..., j:, j]  # the column from the diagonal down
            norm = (x * x).sum(-1, keepdim=True).sqrt()
            x0 = x[..., :1]
            alpha = -(x0 >= 0).where(norm, -norm)  # the sign that avoids cancellation
            e1 = Tensor.eye(m - j, dtype=self.dtype, device=self.device)[0]
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

    def svd(self: Tensor, full_matrices: bool = True) -> tuple[Tensor, Tensor, Tensor]:
        """U, S, Vh with input = U @ diag(S) @ Vh, singular values descending (PyTorch's `torch.linalg.svd`).

        Computed on the host with numpy's LAPACK binding and returned on this tensor's device; unlike the other
        ops it does not build a lazy graph, so it has no gradient."""
        self._check_matrix("svd")
        host = self.numpy().astype(np.float64)
        u, s, vh = np.linalg.svd(host, full_matrices=full_matrices)
        nd = to_numpy(self.dtype)
        return (Tensor(u.astype(nd), device=self.device), Tensor(s.astype(nd), device=self.device),
                Tensor(vh.astype(nd), device=self.device))
