"""Shared fixtures for the tg-core tests.

Every test runs on `Device.DEFAULT` (chosen by `DEV=...`), so the same files check any backend.
"""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest
from tinygrad import Device, Tensor


@pytest.fixture(scope="session")
def device() -> str:
    return Device.DEFAULT


@pytest.fixture(scope="session", autouse=True)
def _only_the_expected_device():
    """With TG_EXPECT_DEVICE=NAME (the integration tests set it), fail unless every test ran on NAME alone."""
    want = os.environ.get("TG_EXPECT_DEVICE")
    if want:
        assert Device.DEFAULT == want, f"TG_EXPECT_DEVICE={want} but the default device is {Device.DEFAULT}"
    yield
    if want:
        opened = {name.split(":")[0] for name in Device._state.opened}
        assert opened <= {want}, f"TG_EXPECT_DEVICE={want} but these devices were opened: {sorted(opened)}"


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
