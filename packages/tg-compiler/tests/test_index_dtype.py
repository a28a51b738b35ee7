"""Index typing (`tinygrad.codegen.index_dtype`): int32 where an index fits, int64 where it may not, widened before
the operation.

The property test builds views whose flattened index passes 2**31 and 2**32 (no memory: the kernels are only
lowered and typed, never run), evaluates the typed index expression the way a device does - every node wrapped to
its own dtype - at random points, and compares with numpy's `ravel_multi_index` of the same element.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tinygrad.codegen import get_program
from tinygrad.codegen.index_dtype import IndexRangeError, type_indices
from tinygrad.codegen.lowerer import lower_kernel
from tinygrad.dtype import dtypes, truncate
from tinygrad.renderer.cstyle import CStyleRenderer
from tinygrad.uop.alu import exec_alu
from tinygrad.uop.ops import GroupOp, Ops, UOp, Variable

I32, I64, F32 = dtypes.int32, dtypes.int64, dtypes.float32


def kernel_of(view: UOp) -> UOp:
    """A kernel storing `view` (of a PARAM 1) into a fresh PARAM 0 of its shape."""
    n = math.prod(view.shape)
    out = UOp(Ops.PARAM, view.dtype, (), (0, n)).reshape(view.shape)
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, view)),))


def typed_kernel(view: UOp, wide=I64) -> UOp:
    return type_indices(lower_kernel(kernel_of(view)), wide)


def index_of(sink: UOp, param: int) -> UOp:
    return next(u.src[1] for u in sink.toposort() if u.op is Ops.INDEX and u.src[0].arg[0] == param)


def output_ranges(sink: UOp) -> list[UOp]:
    return sorted((u for u in sink.toposort() if u.op is Ops.RANGE), key=lambda r: r.arg.axis)


def evaluate(expr: UOp, env: dict[UOp, int]) -> int:
    """The value a device computes: every node in its own dtype (int32 nodes wrap at 32 bits)."""
    values: dict[UOp, int] = {}
    for u in expr.toposort():
        if u.op is Ops.CONST:
            values[u] = u.arg
        elif u.op is Ops.RANGE:
            values[u] = env[u]
        elif u.op is Ops.CAST:
            values[u] = truncate(values[u.src[0]], u.dtype)
        else:
            assert u.op in GroupOp.ALU, u.op
            values[u] = exec_alu(u.op, u.dtype, tuple(values[s] for s in u.src), u.src[-1].dtype)
    return int(values[expr])


def no_index_dtype_left(sink: UOp) -> bool:
    return all(u.dtype != dtypes.index for u in sink.toposort())


# ---- the property: a permuted, re-flattened view past 2**31 reads the right element ----

@st.composite
def views(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(shape of the buffer, a permutation, a different factorisation of the element count) near or past 2**31."""
    ndim = draw(st.integers(2, 4))
    target = draw(st.sampled_from([2**31 - 1, 2**31 + 1, 2**32 - 1, 2**32 + 3, 3 * 2**32 + 7, 2**35]))
    dims = [draw(st.integers(2, 1 << 12)) for _ in range(ndim - 1)]
    last = max(1, target // math.prod(dims))
    shape = (*dims, last)
    perm = tuple(draw(st.permutations(range(ndim))))
    n = math.prod(shape)
    # another factorisation: the element count split at a divisor (or kept whole)
    divisors = [d for d in (2, 3, 5, 7, 11, 13, 64, 1000, 4096) if n % d == 0]
    cut = draw(st.sampled_from(divisors)) if divisors else 1
    regroup = (cut, n // cut) if cut > 1 else (n,)
    return shape, perm, regroup


@given(views(), st.randoms(use_true_random=False))
@settings(max_examples=60, deadline=None)
def test_typed_index_matches_ravel_multi_index(view: tuple, rng) -> None:
    shape, perm, regroup = view
    src = UOp(Ops.PARAM, F32, (), (1, math.prod(shape))).reshape(shape)
    permuted_shape = tuple(shape[p] for p in perm)
    graph = src.permute(perm).reshape(regroup)
    sink = typed_kernel(graph)
    assert no_index_dtype_left(sink)
    ranges = output_ranges(sink)
    sized = [s for s in regroup if s != 1]
    assert len(ranges) == len(sized)
    load_index = index_of(sink, 1)
    n = math.prod(regroup)
    points = {0, n - 1, min(n - 1, 2**31 - 1), min(n - 1, 2**31), min(n - 1, 2**32)} | \
        {rng.randrange(n) for _ in range(20)}
    for flat in sorted(points):
        out_pos = np.unravel_index(flat, sized)
        env = {r: int(i) for r, i in zip(ranges, out_pos)}
        # the element: flat position in the permuted view -> multi-index there -> the source's multi-index
        at_permuted = np.unravel_index(flat, permuted_shape)
        at_source = [0] * len(shape)
        for k, p in enumerate(perm):
            at_source[p] = int(at_permuted[k])
        want = int(np.ravel_multi_index(at_source, shape))
        assert evaluate(load_index, env) == want, (shape, perm, regroup, flat)


# ---- what gets which type ----

def test_indices_that_fit_are_int32_with_no_casts() -> None:
    src = UOp(Ops.PARAM, F32, (), (1, 6 * 1000 * 70)).reshape((6, 1000, 70))
    sink = typed_kernel(src.permute((2, 0, 1)))
    ints = [u for u in sink.toposort() if u.dtype.is_int]
    assert ints and all(u.dtype == I32 for u in ints)
    assert not any(u.op is Ops.CAST for u in sink.toposort())


def test_a_product_past_int32_is_formed_in_64_bits() -> None:
    # reading the last column of a (3, 2**31 + 1) view: row * (2**31 + 1) needs 64 bits
    n = 2**31 + 1
    src = UOp(Ops.PARAM, F32, (), (1, 3 * n)).reshape((3, n))
    sink = typed_kernel(src.shrink(((0, 3), (n - 1, n))))
    idx = index_of(sink, 1)
    assert idx.dtype == I64
    for u in idx.toposort():
        if u.op is Ops.MUL:
            assert u.dtype == I64 and all(s.dtype == I64 for s in u.src), "widened before the multiply"
    (r,) = output_ranges(sink)
    assert r.dtype == I32, "the loop itself fits"
    assert evaluate(idx, {r: 2}) == 2 * n + n - 1


def test_a_loop_past_int32_counts_in_64_bits() -> None:
    # a bound of exactly 2**31: the last index fits int32, but an int32 counter's last ++ would wrap
    src = UOp(Ops.PARAM, F32, (), (1, 2**31)).reshape((2**31,))
    sink = typed_kernel(src)
    (r,) = output_ranges(sink)
    assert r.dtype == I64 and r.src[0].dtype == I64


def test_a_comparison_takes_the_wider_operand() -> None:
    # padding past 2**31 gates the load with i < 2**31 + 5: a comparison of a 64-bit index
    n = 2**31 + 5
    src = UOp(Ops.PARAM, F32, (), (1, n)).reshape((n,))
    sink = typed_kernel(src.pad(((0, 3),)))
    for u in sink.toposort():
        if u.op in GroupOp.Comparison:
            assert u.src[0].dtype == u.src[1].dtype


def test_a_target_without_64_bit_integers_refuses_with_the_value() -> None:
    n = 2**31 + 1
    src = UOp(Ops.PARAM, F32, (), (1, 3 * n)).reshape((3, n))
    with pytest.raises(IndexRangeError, match=r"reaches \d+, past the 32-bit integers of WGSL \(largest 2147483647\)"):
        type_indices(lower_kernel(kernel_of(src.shrink(((0, 3), (n - 1, n))))), None, "WGSL")


def test_a_variable_past_int32_is_refused() -> None:
    v = Variable("n", 1, 2**32)
    src = UOp(Ops.PARAM, F32, (), (1, 2**32)).reshape((2**32,))
    with pytest.raises(IndexRangeError, match="Variable n ranges over"):
        typed_kernel(src.shrink(((0, v),)))


def test_rendered_c_declares_64_bit_where_needed() -> None:
    n = 2**31 + 1
    src = UOp(Ops.PARAM, F32, (), (1, 3 * n)).reshape((3, n))
    code = get_program(kernel_of(src.shrink(((0, 3), (n - 1, n)))), CStyleRenderer()).src
    assert "(long long)" in code or "ll" in code
    small = UOp(Ops.PARAM, F32, (), (1, 12)).reshape((3, 4))
    assert "long long" not in get_program(kernel_of(small.permute((1, 0))), CStyleRenderer()).src.replace(
        "long long alu", "")  # address variables may be long long; the arithmetic stays int
