"""Moving exact values into and out of Tensors of any dtype (bfloat16 included) for the Tensor-level checks."""

from __future__ import annotations

import numpy as np
from tinygrad import Tensor
from tinygrad.dtype import DType, dtypes, to_numpy


def tensor_of(values: np.ndarray, d: DType, device: str) -> Tensor:
    """A tensor of dtype d on `device` holding `values` (numbers that d represents, or rounds to d on upload)."""
    if d == dtypes.bfloat16:  # uploads round float32 values to bfloat16 bits
        return Tensor(np.asarray(values, dtype=np.float32), dtype=d, device=device)
    return Tensor(np.asarray(values).astype(to_numpy(d)), dtype=d, device=device)


def result_of(t: Tensor) -> np.ndarray:
    """A realized tensor, flat, as the raw array `compare` expects (bfloat16 as its 16-bit patterns)."""
    out = t.numpy().reshape(-1)
    return (out.view(np.uint32) >> 16).astype(np.uint16) if t.dtype == dtypes.bfloat16 else out
