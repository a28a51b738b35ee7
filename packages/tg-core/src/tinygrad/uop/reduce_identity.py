"""The identity element of each reduction op, per dtype: what a reduction of no elements gives, what an
accumulator starts from, and what a padded or extra term leaves unchanged.

The scheduler pads split reductions with it and fills empty ones, the lowerer and linearizer start accumulators
from it, and the gather fold recognises the terms a one-hot compare-and-sum adds for every other index.
"""

from __future__ import annotations

from tinygrad.dtype import DType
from tinygrad.uop.ops import Ops, UOp

#: the reduction ops of REDUCE_AXIS and REDUCE whose identity does not depend on the dtype
_FIXED = {Ops.ADD: 0, Ops.MUL: 1}


def reduce_identity_value(op: Ops, dtype: DType) -> float | int | bool:
    """The identity of `op` over `dtype` as a Python value: 0 for ADD, 1 for MUL, the dtype's lowest value for MAX
    (-inf for floats that have it, so that a NaN still propagates)."""
    if op is Ops.MAX:
        return dtype.min
    if op not in _FIXED:
        raise ValueError(f"{op} is not a reduction op: reductions combine with Ops.ADD, Ops.MUL or Ops.MAX")
    return _FIXED[op]


def reduce_identity(op: Ops, dtype: DType) -> UOp:
    """The identity of `op` over `dtype` as a CONST of that dtype (`reduce_identity_value`)."""
    return UOp.const(dtype, reduce_identity_value(op, dtype))


__all__ = ["reduce_identity", "reduce_identity_value"]
