"""lower_kernel and linearize on small kernel ASTs.

Semantics are checked without a C compiler: a small interpreter runs the *lowered* graph (scalar index
arithmetic over loop RANGEs, gated LOADs, REDUCEs) with the reference ALU, and the result must equal numpy
applying the same movement ops and reductions. Structure is checked on the linearized program: which loops
exist, in which order, where accumulators and loop-invariant loads go.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest
from tinygrad.codegen import get_program
from tinygrad.codegen.linearize import linearize
from tinygrad.codegen.lowerer import lower_kernel
from tinygrad.dtype import dtypes
from tinygrad.renderer.cstyle import CStyleRenderer
from tinygrad.uop.alu import exec_alu, exec_cast
from tinygrad.uop.ops import AxisKind, GroupOp, Ops, UOp

F32 = dtypes.float32


def param(i: int, shape: tuple[int, ...], dtype=F32) -> UOp:
    return UOp(Ops.PARAM, dtype, (), (i, int(np.prod(shape)))).reshape(shape)


def kernel(value: UOp, out_shape: tuple[int, ...] | None = None) -> UOp:
    shape = value.shape if out_shape is None else out_shape
    out = UOp(Ops.PARAM, value.dtype, (), (0, int(np.prod(shape)))).reshape(shape)
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, value.reshape(shape))),))


# ---------------------------------------------------------------------------------------------------------------------
# an interpreter for lowered kernels

class OutOfBounds(AssertionError):
    pass


def run_lowered(sink: UOp, inputs: dict[int, np.ndarray], out_sizes: dict[int, int]) -> dict[int, np.ndarray]:
    outs = {i: np.zeros(n, dtype=np.float64) for i, n in out_sizes.items()}

    def ev(u: UOp, env: dict[UOp, int], memo: dict[UOp, object]) -> object:
        if u in memo:
            return memo[u]
        if u.op is Ops.CONST:
            v = u.arg
        elif u.op is Ops.RANGE:
            v = env[u]
        elif u.op is Ops.LOAD:
            idx = u.src[0]
            if len(idx.src) > 2 and not ev(idx.src[2], env, memo):
                v = 0.0
            else:
                i = ev(idx.src[1], env, memo)
                data = inputs[idx.src[0].arg[0]]
                if not 0 <= i < len(data):
                    raise OutOfBounds(f"load of element {i} of a buffer of {len(data)}")
                v = data[i].item()
        elif u.op is Ops.REDUCE:
            ranges = u.src[1:]
            acc = None
            for point in itertools.product(*(range(r.src[0].arg) for r in ranges)):
                inner = ev(u.src[0], env | dict(zip(ranges, point, strict=True)), {})
                acc = inner if acc is None else exec_alu(u.arg, u.dtype, (acc, inner), u.dtype)
            v = acc
        elif u.op is Ops.CAST:
            v = exec_cast(ev(u.src[0], env, memo), u.dtype)
        elif u.op in GroupOp.ALU:
            od = u.src[-1].dtype if u.op is Ops.WHERE else u.src[0].dtype
            v = exec_alu(u.op, u.dtype, tuple(ev(s, env, memo) for s in u.src), od)
        else:
            raise NotImplementedError(u.op)
        memo[u] = v
        return v

    for store in sink.src:
        index, value = store.src
        loops = sorted({r for r in store.toposort() if r.op is Ops.RANGE and r.arg.kind is AxisKind.GLOBAL},
                       key=lambda r: r.arg.axis)
        for point in itertools.product(*(range(r.src[0].arg) for r in loops)):
            env = dict(zip(loops, point, strict=True))
            memo: dict[UOp, object] = {}
            where = ev(index.src[1], env, memo)
            outs[index.src[0].arg[0]][where] = ev(value, env, memo)
    return outs


def check_lowering(build: Callable[[UOp], UOp], np_build: Callable[[np.ndarray], np.ndarray],
                   in_shape: tuple[int, ...]) -> UOp:
    src = np.arange(1, int(np.prod(in_shape)) + 1, dtype=np.float64)  # 0 is what padding reads
    value = build(param(1, in_shape))
    want = np_build(src.reshape(in_shape))
    assert value.shape == want.shape
    lowered = lower_kernel(kernel(value))
    got = run_lowered(lowered, {1: src}, {0: want.size})[0]
    np.testing.assert_array_equal(got, want.reshape(-1))
    return lowered


MOVEMENT_CASES = {
    "permute": ((2, 3, 4), lambda u: u.permute((2, 0, 1)), lambda a: a.transpose(2, 0, 1)),
    "flip-one": ((3, 4), lambda u: u.flip((True, False)), lambda a: a[::-1]),
    "flip-all": ((3, 4), lambda u: u.flip((True, True)), lambda a: a[::-1, ::-1]),
    "shrink": ((5, 6), lambda u: u.shrink(((1, 4), (2, 5))), lambda a: a[1:4, 2:5]),
    "pad": ((3, 4), lambda u: u.pad(((1, 2), (0, 1))), lambda a: np.pad(a, ((1, 2), (0, 1)))),
    "expand": ((3, 1), lambda u: u.expand((3, 4)), lambda a: np.broadcast_to(a, (3, 4))),
    "reshape-split": ((24,), lambda u: u.reshape((2, 3, 4)), lambda a: a.reshape(2, 3, 4)),
    "reshape-regroup": ((4, 6), lambda u: u.reshape((8, 3)), lambda a: a.reshape(8, 3)),
    "reshape-of-permute": ((4, 6), lambda u: u.permute((1, 0)).reshape((3, 8)), lambda a: a.T.reshape(3, 8)),
    "chain": ((6, 4), lambda u: u.reshape((4, 6)).permute((1, 0)).pad(((1, 1), (2, 0))).shrink(((0, 7), (1, 6)))
              .flip((False, True)),
              lambda a: np.pad(a.reshape(4, 6).T, ((1, 1), (2, 0)))[0:7, 1:6][:, ::-1]),
    "pad-then-reshape": ((2, 3), lambda u: u.pad(((0, 0), (1, 1))).reshape((10,)),
                         lambda a: np.pad(a, ((0, 0), (1, 1))).reshape(10)),
}


def _cat_of_slices(u: UOp) -> UOp:
    """u's rows 0:2, then row 2 plus 10, then row 3 plus 20: tinygrad's `cat` (wheres over pads of the parts)."""
    parts = [u.shrink(((0, 2), (0, 3))), u.shrink(((2, 3), (0, 3))) + 10.0, u.shrink(((3, 4), (0, 3))) + 20.0]
    out = None
    offset = 0
    for p in parts:
        pairs = ((offset, 4 - offset - p.shape[0]), (0, 0))
        placed = p.pad(pairs)
        mask = UOp.const(dtypes.bool, True).reshape((1, 1)).expand(p.shape).pad(pairs)
        out = placed if out is None else mask.alu(Ops.WHERE, placed, out)
        offset += p.shape[0]
    assert out is not None
    return out


def _np_cat_of_slices(a: np.ndarray) -> np.ndarray:
    return np.concatenate([a[0:2], a[2:3] + 10, a[3:4] + 20])


FOLDED_SLICE_CASES = {
    "slice-of-slice": ((6, 5), lambda u: u.shrink(((1, 5), (0, 5))).shrink(((1, 3), (2, 4))), lambda a: a[2:4, 2:4]),
    "slice-inside-pad": ((3, 4), lambda u: u.pad(((2, 1), (0, 0))).shrink(((2, 4), (1, 3))), lambda a: a[0:2, 1:3]),
    "slice-in-padding": ((3, 4), lambda u: u.pad(((2, 1), (0, 0))).shrink(((0, 2), (0, 4))) + 1.0,
                         lambda a: np.ones((2, 4))),
    "slice-across-pad-edge": ((3, 4), lambda u: u.pad(((2, 1), (0, 0))).shrink(((1, 3), (0, 4))),
                              lambda a: np.pad(a, ((2, 1), (0, 0)))[1:3]),
    "slice-of-cat-part": ((4, 3), lambda u: _cat_of_slices(u).shrink(((2, 3), (0, 3))), lambda a: a[2:3] + 10),
    "slice-across-cat-parts": ((4, 3), lambda u: _cat_of_slices(u).shrink(((1, 4), (1, 3))),
                               lambda a: _np_cat_of_slices(a)[1:4, 1:3]),
}


@pytest.mark.parametrize("name", list(FOLDED_SLICE_CASES))
def test_slices_of_pads_and_cats_fold_to_the_part_they_read(name: str) -> None:
    shape, build, np_build = FOLDED_SLICE_CASES[name]
    check_lowering(build, np_build, shape)


def test_a_chain_of_cats_of_slices_lowers_to_a_graph_linear_in_its_length() -> None:
    # each link reads the previous cat three times through slices; read without folding, the paths double per link
    def chain(u: UOp, links: int) -> UOp:
        for _ in range(links):
            u = _cat_of_slices(u)
        return u

    for links in (8, 40):  # 8 first: unfolded, its graph has some 50000 nodes, and 40 would not finish
        want = np.arange(1, 13, dtype=np.float64).reshape(4, 3)
        for _ in range(links):
            want = _np_cat_of_slices(want)
        lowered = check_lowering(lambda u: chain(u, links), lambda a: want, (4, 3))  # noqa: B023
        assert len(list(lowered.toposort())) < links * 60


@pytest.mark.parametrize("name", list(MOVEMENT_CASES))
def test_movement_ops_lower_to_the_right_indices(name: str) -> None:
    shape, build, np_build = MOVEMENT_CASES[name]
    check_lowering(build, np_build, shape)


REDUCE_CASES = {
    "sum-last": ((3, 4), lambda u: u.reduce_axis(Ops.ADD, (1,)), lambda a: a.sum(1, keepdims=True)),
    "sum-first": ((3, 4), lambda u: u.reduce_axis(Ops.ADD, (0,)), lambda a: a.sum(0, keepdims=True)),
    "max-all": ((3, 4), lambda u: u.reduce_axis(Ops.MAX, (0, 1)), lambda a: a.max(keepdims=True)),
    "sum-of-permuted": ((2, 3, 4), lambda u: u.permute((2, 0, 1)).reduce_axis(Ops.ADD, (0, 2)),
                        lambda a: a.transpose(2, 0, 1).sum((0, 2), keepdims=True)),
    "mul-of-padded": ((2, 3), lambda u: u.pad(((1, 0), (0, 0))).reduce_axis(Ops.MUL, (1,)),
                      lambda a: np.pad(a, ((1, 0), (0, 0))).prod(1, keepdims=True)),
    "sum-then-elementwise": ((3, 4), lambda u: u.reduce_axis(Ops.ADD, (1,)).expand((3, 4)) * u,
                             lambda a: a.sum(1, keepdims=True) * a),
}


@pytest.mark.parametrize("name", list(REDUCE_CASES))
def test_reductions_lower_to_the_right_values(name: str) -> None:
    shape, build, np_build = REDUCE_CASES[name]
    check_lowering(build, np_build, shape)


def test_index_arithmetic_is_simplified() -> None:
    # an identity reshape round trip must not leave any division or modulo in the kernel
    lowered = check_lowering(lambda u: u.reshape((12,)).reshape((3, 4)).permute((1, 0)).permute((1, 0)),
                             lambda a: a, (3, 4))
    assert not [u for u in lowered.toposort() if u.op in (Ops.IDIV, Ops.MOD)]
    # (4,4) read as (2,8): r0*4 + r1 split by 8 is r0//2 and (r0%2)*4 + r1 - no division of the full index
    lowered = check_lowering(lambda u: u.reshape((2, 8)), lambda a: a.reshape(2, 8), (4, 4))
    divs = [u for u in lowered.toposort() if u.op is Ops.IDIV]
    assert all(d.src[1].arg <= 8 for d in divs)


def test_schedule_ast_from_tensor_lowers_correctly() -> None:
    from tinygrad import Tensor

    a_np = np.arange(12, dtype=np.float32).reshape(3, 4)
    b_np = np.array([1.0, -2.0, 0.5, 3.0], dtype=np.float32)
    a, b = Tensor(a_np), Tensor(b_np)
    schedule = (a.T * b.reshape(4, 1)).sum(1).schedule()
    si = schedule[-1]
    inputs = {}
    for u in si.ast.toposort():
        if u.op is Ops.PARAM and u.arg[0] != 0:
            inputs[u.arg[0]] = si.bufs[u.arg[0]].numpy().astype(np.float64)
    got = run_lowered(lower_kernel(si.ast), inputs, {0: 4})[0]
    np.testing.assert_allclose(got, (a_np.T * b_np.reshape(4, 1)).sum(1), rtol=1e-6)


# ---------------------------------------------------------------------------------------------------------------------
# the linearized program

def ops_of(program: list[UOp]) -> list[Ops]:
    return [u.op for u in program]


def check_well_formed(program: list[UOp]) -> None:
    """Read in order, every source is in scope where it is used: emitted earlier, and not inside a loop that
    has closed since. Loops close innermost first. (A value may be emitted again in a later loop nest.)"""
    open_loops: list[UOp] = []
    scope_of: dict[UOp, int] = {}  # value -> loop depth it was emitted at (0: kernel-wide)
    for u in program:
        for s in u.src:
            assert s in scope_of, f"{u.op} uses {s.op} outside the loop that computed it, or before it exists"
        if u.op is Ops.END:
            assert open_loops and open_loops[-1] is u.src[0], "loops must close innermost first"
            open_loops.pop()
            scope_of = {v: d for v, d in scope_of.items() if d <= len(open_loops)}
            continue
        # kernel arguments and constants are named, not declared: valid everywhere
        scope_of[u] = 0 if u.op in (Ops.PARAM, Ops.CONST, Ops.DEFINE_VAR) else len(open_loops) + (u.op is Ops.RANGE)
        if u.op is Ops.RANGE:
            open_loops.append(u)
    assert not open_loops


def test_elementwise_kernel_structure() -> None:
    program = linearize(lower_kernel(kernel(param(1, (3, 4)) + param(2, (3, 4)))))
    check_well_formed(program)
    ranges = [u for u in program if u.op is Ops.RANGE]
    assert [(r.src[0].arg, r.arg.kind) for r in ranges] == [(3, AxisKind.GLOBAL), (4, AxisKind.GLOBAL)]
    assert Ops.DEFINE_ACC not in ops_of(program)
    assert ops_of(program)[-2:] == [Ops.END, Ops.END]
    assert sum(1 for u in program if u.op is Ops.STORE) == 1


def test_reduce_kernel_structure() -> None:
    program = linearize(lower_kernel(kernel(param(1, (3, 4)).reduce_axis(Ops.ADD, (1,)))))
    check_well_formed(program)
    kinds = [(u.op, u.arg.kind if u.op is Ops.RANGE else None) for u in program
             if u.op in (Ops.RANGE, Ops.DEFINE_ACC, Ops.ASSIGN, Ops.END, Ops.STORE)]
    assert kinds == [(Ops.RANGE, AxisKind.GLOBAL), (Ops.DEFINE_ACC, None), (Ops.RANGE, AxisKind.REDUCE),
                     (Ops.ASSIGN, None), (Ops.END, None), (Ops.STORE, None), (Ops.END, None)]
    acc = next(u for u in program if u.op is Ops.DEFINE_ACC)
    assert acc.src[0].arg == 0.0  # the identity of ADD


def test_max_reduce_starts_at_minus_infinity() -> None:
    program = linearize(lower_kernel(kernel(param(1, (3, 4)).reduce_axis(Ops.MAX, (1,)))))
    acc = next(u for u in program if u.op is Ops.DEFINE_ACC)
    assert acc.src[0].arg == -np.inf


def test_loop_invariant_load_is_hoisted_out_of_the_reduce_loop() -> None:
    x = param(1, (3, 1)).expand((3, 4))
    y = param(2, (1, 4)).expand((3, 4))
    program = linearize(lower_kernel(kernel((x * y).reduce_axis(Ops.ADD, (1,)))))
    check_well_formed(program)
    reduce_loop = next(i for i, u in enumerate(program) if u.op is Ops.RANGE and u.arg.kind is AxisKind.REDUCE)
    loads = {u.src[0].src[0].arg[0]: i for i, u in enumerate(program) if u.op is Ops.LOAD}
    assert loads[1] < reduce_loop < loads[2]


def test_full_reduction_nests_its_loops() -> None:
    program = linearize(lower_kernel(kernel(param(1, (3, 4)).reduce_axis(Ops.ADD, (0, 1)), (1,))))
    check_well_formed(program)
    assert [u.src[0].arg for u in program if u.op is Ops.RANGE] == [3, 4]
    assert all(u.arg.kind is AxisKind.REDUCE for u in program if u.op is Ops.RANGE)


def test_stores_of_one_shape_share_their_loops() -> None:
    a = param(2, (8,))
    stores = tuple(UOp(Ops.STORE, dtypes.void, (param(i, (8,)), a * float(i + 1))) for i in range(2))
    sink = UOp(Ops.SINK, dtypes.void, stores)
    program = linearize(lower_kernel(sink))
    check_well_formed(program)
    assert sum(1 for u in program if u.op is Ops.RANGE) == 1
    got = run_lowered(lower_kernel(sink), {2: np.arange(8.0)}, {0: 8, 1: 8})
    np.testing.assert_array_equal(got[0], np.arange(8.0))
    np.testing.assert_array_equal(got[1], 2 * np.arange(8.0))


def test_stores_of_different_shapes_get_separate_loops() -> None:
    a = param(2, (6,))
    sink = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (param(0, (6,)), a + 1.0)),
                                       UOp(Ops.STORE, dtypes.void, (param(1, (2, 3)), a.reshape((2, 3)) * 2.0))))
    program = linearize(lower_kernel(sink))
    check_well_formed(program)
    depth, deepest = 0, 0
    for u in program:
        depth += (u.op is Ops.RANGE) - (u.op is Ops.END)
        deepest = max(deepest, depth)
    assert deepest == 2  # the (2,3) nest, not 6 x 2 x 3
    got = run_lowered(lower_kernel(sink), {2: np.arange(6.0)}, {0: 6, 1: 6})
    np.testing.assert_array_equal(got[0], np.arange(6.0) + 1)
    np.testing.assert_array_equal(got[1], np.arange(6.0) * 2)


def test_loop_invariant_value_is_not_shared_between_loop_nests() -> None:
    # data2[0] does not depend on any loop, but it is computed inside the first nest: the second must recompute it
    first = param(2, (1,)).expand((6,)) * 2.0
    sink = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (param(0, (6,)), first)),
                                       UOp(Ops.STORE, dtypes.void, (param(1, (2, 3)), first.reshape((2, 3)) + 1.0))))
    program = linearize(lower_kernel(sink))
    check_well_formed(program)
    got = run_lowered(lower_kernel(sink), {2: np.array([5.0])}, {0: 6, 1: 6})
    np.testing.assert_array_equal(got[1], np.full(6, 11.0))


def test_scalar_output_has_no_loops() -> None:
    program = linearize(lower_kernel(kernel(param(1, (1,)) + 1.0)))
    assert Ops.RANGE not in ops_of(program)
    assert Ops.STORE in ops_of(program)


def test_deep_elementwise_chain_lowers_and_renders() -> None:
    value = param(1, (4,))
    for i in range(5000):
        value = value + float(i % 7)
    spec = get_program(kernel(value), CStyleRenderer())
    assert spec.src.count("data1[") == 1
    assert max(len(line) for line in spec.src.splitlines()) < 5000  # long expressions get variables


def test_lowering_rejects_a_non_kernel() -> None:
    with pytest.raises(ValueError, match="SINK"):
        lower_kernel(param(1, (4,)))
