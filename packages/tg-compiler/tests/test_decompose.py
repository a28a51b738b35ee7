"""The decomposition pass (tinygrad/codegen/decompose.py), checked against the reference ALU without a device.

Each decomposed op is evaluated node by node with the reference semantics (`exec_alu`, `exec_cast`,
`exec_bitcast`) on the conformance kit's edge values and compared with the reference result of the op itself,
under the kit's tolerances. The end-to-end proof, a renderer declaring only the minimal ops passing the whole kit,
is integration-tests/test_conformance.py (device MINREF).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from tinygrad.codegen.decompose import decompose, decompose_program, decompositions
from tinygrad.conformance.alu_cases import arity, ops_for, reference, result_dtype
from tinygrad.conformance.compare import mismatches
from tinygrad.conformance.minimal import MINIMAL_OPS
from tinygrad.conformance.tolerances import allowed_ulps
from tinygrad.conformance.values import edge_values, to_buffer_array
from tinygrad.dtype import DType, dtypes
from tinygrad.renderer import Renderer
from tinygrad.uop.alu import exec_alu, exec_bitcast, exec_cast
from tinygrad.uop.ops import GroupOp, Ops, UOp
from tinygrad.uop.rewrite import graph_rewrite


class MinimalRenderer(Renderer):
    device = "MINIMAL"
    supported_ops = MINIMAL_OPS


DECOMPOSED = sorted(GroupOp.ALU - MINIMAL_OPS, key=lambda o: o.name)
DTYPES = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.int64, dtypes.uint64, dtypes.float16,
          dtypes.bfloat16, dtypes.float32, dtypes.float64, dtypes.fp8e4m3]
CASES = [(op, d) for d in DTYPES for op in ops_for(d) if op in DECOMPOSED]


def _evaluate(root: UOp, env: dict[UOp, object]) -> object:
    values = dict(env)
    for u in root.toposort():
        if u in values:
            continue
        if u.op is Ops.CONST:
            values[u] = u.arg
        elif u.op is Ops.CAST:
            values[u] = exec_cast(values[u.src[0]], u.dtype)  # type: ignore[arg-type]
        elif u.op is Ops.BITCAST:
            values[u] = exec_bitcast(values[u.src[0]], u.src[0].dtype, u.dtype)  # type: ignore[arg-type]
        else:
            assert u.op in MINIMAL_OPS, f"the decomposition left {u.op}"
            operand = u.src[-1].dtype if u.op is Ops.WHERE else u.src[0].dtype
            values[u] = exec_alu(u.op, u.dtype, tuple(values[s] for s in u.src), operand)  # type: ignore[misc]
    return values[root]


def test_every_op_outside_the_minimal_set_has_a_rule() -> None:
    assert DECOMPOSED == sorted({Ops.CMPNE, Ops.MAX, Ops.FDIV, Ops.SHL, Ops.SHR, Ops.EXP2, Ops.LOG2},
                                key=lambda o: o.name)


@pytest.mark.parametrize("op,d", CASES, ids=[f"{op.name}-{d.name}" for op, d in CASES])
def test_decomposition_matches_the_reference(op: Ops, d: DType) -> None:
    n = arity(op)
    leaves = [UOp(Ops.DEFINE_VAR, d, (), (f"x{i}", 0, 0)) for i in range(n)]
    root = graph_rewrite(UOp(op, result_dtype(op, d), tuple(leaves)), decompositions, ctx=MinimalRenderer())
    assert not any(u.op in GroupOp.ALU and u.op not in MINIMAL_OPS for u in root.toposort())
    values = edge_values(d)
    pairs = list(itertools.product(values, repeat=n))
    got = [_evaluate(root, dict(zip(leaves, operands))) for operands in pairs]
    want = [reference(op, d, operands) for operands in pairs]
    out = result_dtype(op, d)
    ulps = allowed_ulps(op)
    wrong = mismatches(to_buffer_array(got, out), want, out, ulps=ulps) if out.is_float else \
        np.array([g != w for g, w in zip(got, want)])
    bad = [f"{op.name}{pairs[i]}: got {got[i]!r}, expected {want[i]!r}" for i in np.flatnonzero(wrong)[:8]]
    assert not bad, "\n".join(bad)


def test_a_renderer_with_every_op_is_left_alone() -> None:
    x = UOp(Ops.DEFINE_VAR, dtypes.float32, (), ("x", 0, 0))
    sink = UOp(Ops.SINK, dtypes.void, (x.alu(Ops.FDIV, x),))
    assert decompose(sink, Renderer()) is sink
    program = [x, sink.src[0]]
    assert decompose_program(program, Renderer()) is program


def test_an_op_without_a_rule_is_refused_by_name() -> None:
    class NoTrunc(Renderer):
        device = "NOTRUNC"
        supported_ops = MINIMAL_OPS - {Ops.TRUNC}

    x = UOp(Ops.DEFINE_VAR, dtypes.float32, (), ("x", 0, 0))
    with pytest.raises(NotImplementedError, match="renderer NOTRUNC does not declare TRUNC"):
        decompose(UOp(Ops.SINK, dtypes.void, (x.alu(Ops.TRUNC),)), NoTrunc())


def test_a_transcendental_needs_float64_to_be_decomposed() -> None:
    class NoFloat64(MinimalRenderer):
        supported_dtypes = frozenset(d for d in dtypes.all() if d != dtypes.float64)

    x = UOp(Ops.DEFINE_VAR, dtypes.float32, (), ("x", 0, 0))
    with pytest.raises(NotImplementedError, match="lacks EXP2 and float64"):
        decompose(UOp(Ops.SINK, dtypes.void, (x.alu(Ops.EXP2),)), NoFloat64())


def test_an_accumulate_the_linearizer_writes_is_decomposed() -> None:
    """A max reduction's `MAX(acc, x)` exists only in the linearized program: it is replaced there, in place."""
    acc = UOp(Ops.DEFINE_ACC, dtypes.int32, (UOp.const(dtypes.int32, -(2 ** 31)),))
    x = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("x", 0, 0))
    combine = acc.alu(Ops.MAX, x)
    assign = UOp(Ops.ASSIGN, dtypes.int32, (acc, combine))
    out = decompose_program([acc.src[0], acc, x, combine, assign], MinimalRenderer())
    assert not any(u.op is Ops.MAX for u in out)
    new_assign = out[-1]
    assert new_assign.op is Ops.ASSIGN and new_assign.src[1] in out[:-1]
    for a, b in [(3, 5), (5, 3), (-7, -7)]:
        assert _evaluate(new_assign.src[1], {acc: a, x: b}) == max(a, b)
