"""How far a device's result may be from the reference, per op, in units in the last place of the result dtype.

Everything not listed here must match the reference bit for bit (NaN matches any NaN):

* ADD SUB MUL FDIV RECIPROCAL SQRT: IEEE 754 requires correctly rounded results, and the reference rounds
  once to the result dtype. A device whose division or square root is approximate fails here on purpose:
  `//` of floats (IDIV, the truncated quotient) and every mean or normalisation inherit that error.
* NEG TRUNC MAX MOD (fmod is exact) CMPLT CMPNE CMPEQ WHERE, integer ops: exact by definition.
* CAST and BITCAST: exact (round to nearest even for float narrowing, truncation toward zero for float -> int).
* EXP2 LOG2 SIN: no mainstream math library rounds these correctly. The limit is 4 ulp, what OpenCL 1.2 allows
  for its full-precision exp2/log2/sin (C libraries are within 1-2). Special values must still be exact:
  infinities, NaN, zeros (EXP2 of -inf is +0.0, LOG2 of 0 is -inf).
"""

from __future__ import annotations

from tinygrad.uop.ops import Ops

TRANSCENDENTAL_ULPS = 4
ULPS: dict[Ops, int] = {Ops.EXP2: TRANSCENDENTAL_ULPS, Ops.LOG2: TRANSCENDENTAL_ULPS, Ops.SIN: TRANSCENDENTAL_ULPS}


def allowed_ulps(op: Ops) -> int:
    return ULPS.get(op, 0)
