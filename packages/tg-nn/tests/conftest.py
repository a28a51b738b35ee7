"""Shared helpers for the tg-nn tests. They run on `Device.DEFAULT` (`DEV=CPU` picks the CPU); PyTorch, where a
test compares against it, is a test dependency (the CPU wheel torch==2.13.0)."""

from __future__ import annotations

import numpy as np
import pytest
from tinygrad import Tensor


@pytest.fixture(autouse=True)
def _fresh_seed():
    # the generator starts from the time of import (tinygrad's default): each test starts from seed 0, so that it
    # draws the same numbers in every run, whatever ran before it (xdist reorders tests)
    Tensor.manual_seed(0)


@pytest.fixture
def training():
    """Run the test in training mode, restoring the previous mode afterwards."""
    prev = Tensor.training
    Tensor.training = True
    yield
    Tensor.training = prev


def from_torch(t) -> Tensor:
    return Tensor(t.detach().numpy().copy())


def close(a, b, atol: float = 1e-5, rtol: float = 1e-4) -> None:
    a = a.numpy() if isinstance(a, Tensor) else np.asarray(a)
    b = b.detach().numpy() if hasattr(b, "detach") else np.asarray(b)
    np.testing.assert_allclose(a, b, atol=atol, rtol=rtol)
