"""Skips the kit's tests share; each states its reason, as the report lists them."""

from __future__ import annotations

import pytest
from tinygrad.conformance.claims import DeviceClaims
from tinygrad.dtype import DType


def require_claimed(claims: DeviceClaims, *needed: DType) -> None:
    """Skip unless the device claims every dtype in `needed`."""
    for d in needed:
        if not claims.claims(d):
            pytest.skip(f"device {claims.device} does not claim {d.name}")


def require_size(n: int, limit: int | None) -> None:
    """Skip a check on `n` elements when --tg-quick limits the size."""
    if limit is not None and n > limit:
        pytest.skip(f"more than {limit} elements (--tg-quick)")
