"""Moving exact values into and out of Tensors of any dtype (bfloat16 and the 8-bit floats included) for the
Tensor-level checks."""

from __future__ import annotations

import numpy as np
from tinygrad import Tensor
from tinygrad.dtype import DType, encode_floats, is_emulated_float, to_numpy


def tensor_of(values: np.ndarray, d: DType, device: str) -> Tensor:
    """A tensor of dtype d on `device` holding `values` (numbers that d represents, or rounds to d on upload)."""
    if is_emulated_float(d):  # uploads round float values to the dtype's bits
        return Tensor(np.asarray(values, dtype=np.float64), dtype=d, device=device)
    return Tensor(np.asarray(values).astype(to_numpy(d)), dtype=d, device=device)


def result_of(t: Tensor) -> np.ndarray:
    """A realized tensor, flat, as the raw array `compare` expects (bfloat16 and the 8-bit floats as their bits)."""
    out = t.numpy().reshape(-1)
    # numpy() decoded them to float32, which holds every value exactly: encoding gives the stored bits back
    return encode_floats(out, t.dtype) if is_emulated_float(t.dtype) else out
