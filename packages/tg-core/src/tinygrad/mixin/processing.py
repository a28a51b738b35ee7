"""Linear algebra and the processing ops built on it (convolutions, pooling, ...)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinygrad.dtype import least_upper_dtype
from tinygrad.mixin.common import broadcast_shape

if TYPE_CHECKING:
    from tinygrad.tensor import Tensor
else:
    Tensor = None  # bound to the real class by tinygrad.tensor once it is defined (the modules import each other)


class ProcessingMixin:
    __slots__ = ()

    def dot(self: Tensor, w: Tensor) -> Tensor:
        return self.matmul(w)

    def matmul(self: Tensor, w: Tensor) -> Tensor:
        if not isinstance(w, Tensor):
            raise TypeError(f"matmul needs a Tensor, got {type(w).__name__}")
        if self.ndim == 0 or w.ndim == 0:
            raise ValueError(f"matmul needs tensors with at least one dimension, got {self.shape} and {w.shape}")
        x = self.unsqueeze(0) if self.ndim == 1 else self
        y = w.unsqueeze(-1) if w.ndim == 1 else w
        if x.shape[-1] != y.shape[-2]:
            raise ValueError(f"matmul of shapes {self.shape} and {w.shape}: the inner sizes {x.shape[-1]} and "
                             f"{y.shape[-2]} differ; transpose or reshape one operand")
        try:
            batch = broadcast_shape(x.shape[:-2], y.shape[:-2])
        except ValueError:
            raise ValueError(f"matmul of shapes {self.shape} and {w.shape}: the batch dimensions {x.shape[:-2]} and "
                             f"{y.shape[:-2]} cannot be broadcast together") from None
        n, k, m = x.shape[-2], x.shape[-1], y.shape[-1]
        xb = x.expand(batch + (n, k)).reshape(batch + (n, 1, k))
        yb = y.expand(batch + (k, m)).transpose(-1, -2).reshape(batch + (1, m, k))
        out_dtype = least_upper_dtype(x.dtype, y.dtype)
        out = (xb * yb).sum(-1, dtype=out_dtype)  # integer products stay in their dtype, as in PyTorch
        if self.ndim == 1:
            out = out.squeeze(-2)
        if w.ndim == 1:
            out = out.squeeze(-1)
        return out
