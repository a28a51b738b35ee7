"""CAST between every two dtypes the device claims, over edge values, against `tinygrad.uop.alu.exec_cast`.

Float -> int is checked only where the truncated value fits the target (C and OpenCL leave the rest undefined,
and so does the contract); everything else, NaN -> bool and float narrowing included, must be exact.
One kernel per source dtype carries the casts to every claimed target.
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
from tinygrad.conformance.values import Scalar, dedup_bits, edge_values, flush_subnormal
from tinygrad.dtype import DType, dtypes, truncate
from tinygrad.uop.alu import exec_cast
from tinygrad.uop.ops import Ops, UOp

#: values that probe rounding: halves at the 8-bit edges, 2**31 - 128 (rounds in float32), huge and negative ones
_FLOAT_EXTRAS = (255.9, -128.5, 127.0, -0.75, 2.0**31 - 128, 2.0**62, 1e19, 65519.0, 65520.0)
#: integers that round differently when converted through float64 first, and the float16 overflow boundary
_INT_EXTRAS = (2**60 + 2**36 + 1, 2**24 + 1, 65519, 65520, 300)


def cast_inputs(frm: DType, to: DType) -> list[Scalar]:
    """Edge values of `frm` whose conversion to `to` the contract defines."""
    vals = edge_values(frm)
    if frm.is_float:
        vals = dedup_bits(vals + [truncate(v, frm) for v in _FLOAT_EXTRAS])
        if to.is_int:
            vals = [v for v in vals if math.isfinite(v) and to.min <= math.trunc(v) <= to.max]
    elif frm.is_int:
        vals = dedup_bits(vals + [truncate(v, frm) for v in _INT_EXTRAS])
    return vals


def _cast_of_input(j: int, to: DType, params: list[UOp]) -> UOp:
    return UOp(Ops.CAST, to, (params[j],))


def _cast_kernel(device: str, frm: DType, targets: tuple[DType, ...]) -> dict[DType, np.ndarray]:
    inputs = {to: cast_inputs(frm, to) for to in targets}
    n = max(len(v) for v in inputs.values())
    padded = [(frm, v + [v[0]] * (n - len(v))) for v in inputs.values()]  # one length for every input
    got = run_elementwise(device, padded, [(to, functools.partial(_cast_of_input, j, to))
                                           for j, to in enumerate(targets)])
    return {to: g[:len(inputs[to])] for to, g in zip(targets, got, strict=True)}


PAIRS = [pytest.param(frm, to, id=f"{frm.name}-{to.name}") for frm in dtypes.all() for to in dtypes.all()
         if frm != to]


@pytest.mark.parametrize("frm,to", PAIRS)
def test_cast(tg_device: str, tg_claims: DeviceClaims, frm: DType, to: DType) -> None:
    require_claimed(tg_claims, frm, to)
    targets = tuple(t for t in dtypes.all() if t != frm and tg_claims.claims(t))
    got = memoized(("cast", tg_device, frm), lambda: _cast_kernel(tg_device, frm, targets))[to]
    vals = cast_inputs(frm, to)
    expected = [exec_cast(v, to) for v in vals]
    also_accept = []
    if frm in tg_claims.flushes_denormals or to in tg_claims.flushes_denormals:
        also_accept = [[flush_subnormal(exec_cast(flush_subnormal(v, frm), to), to) for v in vals]]
    assert_matches(got, expected, to, lambda i: f"CAST({vals[i]!r}: {frm.name} -> {to.name})",
                   also_accept=also_accept)
