"""Shared fixtures for the tg-core tests.

Every test runs on `Device.DEFAULT` (chosen by `DEV=...`), so the same files check any backend.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from tinygrad import Device, Tensor


@pytest.fixture(scope="session")
def device() -> str:
    return Device.DEFAULT


@pytest.fixture
def torch():
    """PyTorch, the reference for gradients; tests that need it are skipped where it is not installed."""
    return pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _fresh_seed():
    # tests that draw random tensors must not depend on what ran before them (xdist reorders tests)
    Tensor.manual_seed(0)
    with np.errstate(all="ignore"):
        yield


@pytest.fixture(autouse=True, scope="module")
def _collect_garbage_between_modules():
    # graphs hold reference cycles (cached toposorts); collect them so that one module's garbage does not
    # land in the next module's measurements (tests that count live UOps, for example)
    gc.collect()
    yield
