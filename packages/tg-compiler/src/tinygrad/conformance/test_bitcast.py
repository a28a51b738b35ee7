"""BITCAST between every two claimed dtypes of one size: the bits must survive exactly.

Float NaNs are left out of the sources: the Python reference cannot hold a NaN's payload. Integer patterns that
are NaNs as floats are kept (any NaN matches any NaN).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from tinygrad.conformance.claims import DeviceClaims
from tinygrad.conformance.compare import assert_matches
from tinygrad.conformance.kernels import run_elementwise
from tinygrad.conformance.memo import memoized
from tinygrad.conformance.skips import require_claimed
from tinygrad.conformance.values import Scalar, edge_values
from tinygrad.dtype import DType, dtypes
from tinygrad.uop.alu import exec_bitcast
from tinygrad.uop.ops import Ops, UOp


def bitcast_inputs(frm: DType) -> list[Scalar]:
    return [v for v in edge_values(frm) if not (isinstance(v, float) and math.isnan(v))]


def _bitcast_to(to: DType, params: list[UOp]) -> UOp:
    return UOp(Ops.BITCAST, to, (params[0],))


def _bitcast_kernel(device: str, frm: DType, targets: tuple[DType, ...]) -> dict[DType, np.ndarray]:
    vals = bitcast_inputs(frm)
    got = run_elementwise(device, [(frm, vals)], [(to, functools.partial(_bitcast_to, to)) for to in targets])
    return dict(zip(targets, got, strict=True))


def _same_size(frm: DType) -> list[DType]:
    return [t for t in dtypes.all() if t != frm and t.itemsize == frm.itemsize and not t.is_bool]


PAIRS = [pytest.param(frm, to, id=f"{frm.name}-{to.name}") for frm in dtypes.all() if not frm.is_bool
         for to in _same_size(frm)]


@pytest.mark.parametrize("frm,to", PAIRS)
def test_bitcast(tg_device: str, tg_claims: DeviceClaims, frm: DType, to: DType) -> None:
    require_claimed(tg_claims, frm, to)
    targets = tuple(t for t in _same_size(frm) if tg_claims.claims(t))
    got = memoized(("bitcast", tg_device, frm), lambda: _bitcast_kernel(tg_device, frm, targets))[to]
    vals = bitcast_inputs(frm)
    assert_matches(got, [exec_bitcast(v, frm, to) for v in vals], to,
                   lambda i: f"BITCAST({vals[i]!r}: {frm.name} -> {to.name})")
