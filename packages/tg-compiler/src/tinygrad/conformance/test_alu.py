"""Every ALU op on every dtype the device claims, over all pairs of edge values, against `tinygrad.uop.alu`.

One kernel per dtype computes all of that dtype's ops (compiles are the slow part on most devices); each
(op, dtype) is still its own test. Inputs: NaN, +-inf, -0.0, subnormals, 1/3, MIN/MAX, zero divisors, shift
amounts below, at and past the width. Tolerances are in `tinygrad.conformance.tolerances`.
"""

from __future__ import annotations

import numpy as np
import pytest
from tinygrad.conformance.alu_cases import arity, ops_for, reference, result_dtype
from tinygrad.conformance.claims import DeviceClaims
from tinygrad.conformance.compare import assert_matches
from tinygrad.conformance.kernels import ExprBuilder, run_elementwise
from tinygrad.conformance.memo import memoized
from tinygrad.conformance.skips import require_claimed
from tinygrad.conformance.tolerances import allowed_ulps
from tinygrad.conformance.values import Scalar, edge_values, flush_subnormal
from tinygrad.dtype import DType, dtypes
from tinygrad.uop.ops import Ops, UOp

Operands = tuple[list[Scalar], list[Scalar], list[bool]]


def alu_operands(d: DType) -> Operands:
    vals = edge_values(d)
    a = [x for x in vals for _ in vals]
    b = [y for _ in vals for y in vals]
    cond = [(i * 7 + i // len(vals)) % 3 == 0 for i in range(len(a))]  # WHERE's condition, mixed across pairs
    return a, b, cond


def _build(op: Ops, d: DType) -> ExprBuilder:
    rd = result_dtype(op, d)
    if arity(op) == 3:
        return lambda p: UOp(op, rd, (p[2], p[0], p[1]))
    return lambda p: UOp(op, rd, (p[0], p[1]) if arity(op) == 2 else (p[0],))


def _alu_kernel(device: str, d: DType) -> dict[Ops, np.ndarray]:
    a, b, cond = alu_operands(d)
    ops = ops_for(d)
    got = run_elementwise(device, [(d, a), (d, b), (dtypes.bool, cond)], [(result_dtype(op, d), _build(op, d))
                                                                           for op in ops])
    return dict(zip(ops, got, strict=True))


def _operands(op: Ops, a: Scalar, b: Scalar, c: bool) -> tuple[Scalar, ...]:
    return (c, a, b) if arity(op) == 3 else (a, b) if arity(op) == 2 else (a,)


CASES = [pytest.param(op, d, id=f"{op.name}-{d.name}") for d in dtypes.all() for op in ops_for(d)]


@pytest.mark.parametrize("op,d", CASES)
def test_alu(tg_device: str, tg_claims: DeviceClaims, op: Ops, d: DType) -> None:
    require_claimed(tg_claims, d)
    got = memoized(("alu", tg_device, d), lambda: _alu_kernel(tg_device, d))[op]
    a, b, cond = alu_operands(d)
    rd = result_dtype(op, d)
    expected = [reference(op, d, _operands(op, x, y, c)) for x, y, c in zip(a, b, cond, strict=True)]
    also_accept = []
    if d in tg_claims.flushes_denormals:
        # a flush-to-zero device may read subnormal inputs as zero and write subnormal results as zero
        flushed_in = [reference(op, d, _operands(op, flush_subnormal(x, d), flush_subnormal(y, d), c))
                      for x, y, c in zip(a, b, cond, strict=True)]
        also_accept = [[flush_subnormal(v, rd) for v in flushed_in], [flush_subnormal(v, rd) for v in expected]]
    assert_matches(got, expected, rd, lambda i: f"{op.name}{_operands(op, a[i], b[i], cond[i])!r}",
                   ulps=allowed_ulps(op) if d.is_float else 0, also_accept=also_accept)
