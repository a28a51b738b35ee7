"""The minimal op set of docs/device-contract.md, section 2: the ALU ops a renderer must write itself.

Every other ALU op is made from these by the decomposition pass (`tinygrad/codegen/decompose.py`). The kit checks
that claim on a renderer that declares exactly this set (integration-tests/test_conformance.py, device MINREF):
every required op on every claimed dtype must still match the reference.
"""

from __future__ import annotations

from tinygrad.uop.ops import Ops

MINIMAL_OPS: frozenset[Ops] = frozenset({
    Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.NEG, Ops.RECIPROCAL,
    Ops.CMPLT, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR,
    Ops.SQRT, Ops.SIN, Ops.TRUNC, Ops.WHERE,
})

__all__ = ["MINIMAL_OPS"]
