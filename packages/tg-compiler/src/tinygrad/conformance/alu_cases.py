"""Which ALU ops the kit checks on which dtypes, and the reference result of each.

The device contract's required ALU ops (docs/device-contract.md, section 2) are the ops of
`tinygrad.uop.alu.REFERENCE_OPS`, of which a renderer writes the minimal set (`tinygrad.conformance.minimal`) and
the decomposition pass makes the rest. Float dtypes take the arithmetic and transcendental ops, integers the
arithmetic and bit ops, bool the logic ops; every dtype takes WHERE. Comparisons produce bool.
"""

from __future__ import annotations

from collections.abc import Sequence

from tinygrad.conformance.values import Scalar
from tinygrad.dtype import DType, dtypes
from tinygrad.uop.alu import REFERENCE_OPS, exec_alu
from tinygrad.uop.ops import Ops

COMPARISONS = (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)
BINARY: dict[str, tuple[Ops, ...]] = {
    "float": (Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, *COMPARISONS),
    "int": (Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, *COMPARISONS, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL,
            Ops.SHR),
    "bool": (Ops.AND, Ops.OR, Ops.XOR, Ops.MAX, *COMPARISONS),
}
UNARY: dict[str, tuple[Ops, ...]] = {
    "float": (Ops.NEG, Ops.RECIPROCAL, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC),
    "int": (Ops.NEG,),
    "bool": (Ops.NEG,),
}
TERNARY = (Ops.WHERE,)


def kind(d: DType) -> str:
    return "float" if d.is_float else "int" if d.is_int else "bool"


def ops_for(d: DType) -> tuple[Ops, ...]:
    return (*BINARY[kind(d)], *UNARY[kind(d)], *TERNARY)


def arity(op: Ops) -> int:
    return 3 if op in TERNARY else 1 if op in UNARY["float"] else 2


def result_dtype(op: Ops, d: DType) -> DType:
    return dtypes.bool if op in COMPARISONS else d


def reference(op: Ops, d: DType, operands: Sequence[Scalar]) -> Scalar:
    """What the contract says `op` computes on operands of dtype d (WHERE's condition comes first, a bool)."""
    return exec_alu(op, result_dtype(op, d), tuple(operands), d)


def covered_ops() -> frozenset[Ops]:
    return frozenset(op for k in BINARY for op in (*BINARY[k], *UNARY[k])) | frozenset(TERNARY)


# the kit must check every op the reference defines; a new op in alu.py needs a row here
if covered_ops() != REFERENCE_OPS:
    raise ImportError(f"the conformance kit's op table is out of date with tinygrad.uop.alu: it misses "
                      f"{sorted(o.name for o in REFERENCE_OPS - covered_ops())} and has extra "
                      f"{sorted(o.name for o in covered_ops() - REFERENCE_OPS)}")
