"""Symbolic simplification: folding, identities, index arithmetic - and a property test that no rewrite changes
what a graph computes.

The evaluator below runs a graph on concrete variable values with the reference ALU, so "before" and
"after" are compared by value, not by shape of the expression.
"""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tinygrad.dtype import DType, dtypes
from tinygrad.uop.alu import exec_alu, exec_cast
from tinygrad.uop.ops import AxisKind, GroupOp, Ops, RangeArg, UOp
from tinygrad.uop.symbolic import simplify

I32, U32, F32 = dtypes.int32, dtypes.uint32, dtypes.float32


def rng(n: int, axis: int = 0, dtype: DType = I32) -> UOp:
    return UOp(Ops.RANGE, dtype, (UOp.const(dtype, n),), RangeArg(axis, AxisKind.GLOBAL))


def var(name: str, lo: int, hi: int, dtype: DType = I32) -> UOp:
    return UOp(Ops.DEFINE_VAR, dtype, (), (name, lo, hi))


def c(v: int | float, dtype: DType = I32) -> UOp:
    return UOp.const(dtype, v)


def bounds(u: UOp) -> tuple[int, int]:
    return (0, u.src[0].arg - 1) if u.op is Ops.RANGE else (u.arg[1], u.arg[2])


def evaluate(root: UOp, env: dict[UOp, int | float]) -> int | float | bool:
    vals: dict[UOp, int | float | bool] = {}
    for u in root.toposort():
        if u.op is Ops.CONST:
            vals[u] = u.arg
        elif u.op in (Ops.RANGE, Ops.DEFINE_VAR):
            vals[u] = env[u]
        elif u.op is Ops.CAST:
            vals[u] = exec_cast(vals[u.src[0]], u.dtype)
        else:
            operand_dtype = u.src[-1].dtype if u.op is Ops.WHERE else u.src[0].dtype
            vals[u] = exec_alu(u.op, u.dtype, tuple(vals[s] for s in u.src), operand_dtype)
    return vals[root]


def assert_same_values(before: UOp, after: UOp, variables: list[UOp], samples: int = 400) -> None:
    """Evaluate both graphs on every corner of the variables' ranges plus random points, and compare."""
    r = random.Random(0)
    used = [v for v in variables if v in before.toposort()]
    choices = []
    for v in used:
        lo, hi = bounds(v)
        choices.append(sorted({lo, hi, min(lo + 1, hi), max(hi - 1, lo), r.randint(lo, hi), r.randint(lo, hi)}))
    combos = list(itertools.product(*choices))
    if len(combos) > samples:
        combos = r.sample(combos, samples)
    for combo in combos:
        env = dict(zip(used, combo, strict=True))
        env |= {v: bounds(v)[0] for v in variables if v not in env}  # a rewrite cannot add variables, but be safe
        got, want = evaluate(after, env), evaluate(before, env)
        same = (math.isnan(got) and math.isnan(want)) if isinstance(want, float) and math.isnan(want) else \
            (got == want and (not isinstance(want, float) or math.copysign(1, got) == math.copysign(1, want)))
        assert same, f"at {[(v.arg, x) for v, x in env.items()]}: {want} became {got}\n{before}\n->\n{after}"


# ---------------------------------------------------------------------------------------------------------------------
# constant folding

FOLD_INT = [Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.AND,
            Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR]


@pytest.mark.parametrize("op", FOLD_INT, ids=lambda o: o.name)
def test_fold_int_binary(op: Ops) -> None:
    for x, y in itertools.product([-7, 0, 3, 2**31 - 1, -(2**31)], [-2, 0, 1, 5, 40]):
        out_dtype = dtypes.bool if op in GroupOp.Comparison else I32
        folded = simplify(UOp(op, out_dtype, (c(x), c(y))))
        assert folded is UOp.const(out_dtype, exec_alu(op, out_dtype, (x, y), I32))


def test_fold_matches_python_arithmetic() -> None:
    assert simplify(c(3) + c(4)) is c(7)
    assert simplify(c(7) // c(-2)) is c(-3)  # truncates toward zero, unlike Python's //
    assert simplify(c(-7) % c(2)) is c(-1)
    assert simplify(c(2**31 - 1) + c(1)) is c(-(2**31))  # wraps
    assert simplify(c(1.5, F32) * c(2.0, F32)) is c(3.0, F32)
    assert simplify(UOp(Ops.CAST, dtypes.uint8, (c(300),))) is c(300 % 256, dtypes.uint8)
    assert simplify(UOp(Ops.BITCAST, I32, (c(1.0, F32),))) is c(0x3F800000)


def test_fold_nan_and_signed_zero() -> None:
    nan = simplify(c(math.nan, F32) + c(1.0, F32))
    assert nan.op is Ops.CONST and math.isnan(nan.arg)
    assert simplify(c(-0.0, F32) * c(1.0, F32)) is c(-0.0, F32)
    assert simplify(c(-0.0, F32) + c(0.0, F32)) is c(0.0, F32)


def test_fold_shift_uses_the_width_of_the_shifted_value() -> None:
    shifted = UOp(Ops.SHL, dtypes.int64, (c(1, dtypes.int64), c(40)))  # an int32 amount
    assert simplify(shifted) is c(1 << 40, dtypes.int64)


# ---------------------------------------------------------------------------------------------------------------------
# identities

x = var("x", -50, 50)
fx = UOp(Ops.DEFINE_VAR, F32, (), ("fx", 0, 0))


def test_int_identities() -> None:
    assert simplify(x + 0) is x
    assert simplify(x - 0) is x
    assert simplify(x * 1) is x
    assert simplify(x * 0) is c(0)
    assert simplify(x // 1) is x
    assert simplify(x.maximum(x)) is x
    assert simplify(UOp(Ops.ADD, I32, (c(0), x))) is x  # constants move right first
    assert simplify((x + 3) + 4) is x + 7
    assert simplify((x * 3) * 4) is x * 12
    assert simplify(UOp(Ops.CAST, I32, (x,))) is x


def test_where_identities() -> None:
    y = var("y", 0, 9)
    assert simplify(c(True, dtypes.bool).where(x, y)) is x
    assert simplify(c(False, dtypes.bool).where(x, y)) is y
    assert simplify(x.lt(3).where(y, y)) is y


def test_float_identities_that_would_be_wrong_are_not_applied() -> None:
    # x*0 is NaN for x = NaN or inf, and -0.0 for negative x; x+0.0 is +0.0 for x = -0.0
    assert simplify(fx * c(0.0, F32)) is not c(0.0, F32)
    assert simplify(fx + c(0.0, F32)) is not fx
    assert simplify(UOp(Ops.FDIV, F32, (fx, c(1.0, F32)))) is fx  # exact for every float


def test_bool_identities() -> None:
    p = x.lt(3)
    t, f = c(True, dtypes.bool), c(False, dtypes.bool)
    assert simplify(p.alu(Ops.AND, t)) is p
    assert simplify(p.alu(Ops.AND, f)) is f
    assert simplify(p.alu(Ops.OR, f)) is p


# ---------------------------------------------------------------------------------------------------------------------
# index arithmetic

def test_range_bounded_mod_and_div() -> None:
    r = rng(16)
    assert simplify(r % 16) is r
    assert simplify(r // 16) is c(0)
    assert simplify(r % 32) is r
    assert simplify(r % 1) is c(0)
    assert simplify(r.lt(16)) is c(True, dtypes.bool)
    assert simplify(r.lt(0)) is c(False, dtypes.bool)
    assert simplify(r.maximum(0)) is r
    r2 = rng(17)
    assert simplify(r2 % 16) is r2 % 16  # 16 is in range: not the identity


@pytest.mark.parametrize(("a_lo", "a_hi", "b_lo", "b_hi"), [(0, 40, 1, 8), (-40, 40, 3, 5), (-9, -2, 2, 7),
                                                          (0, 5, 6, 9), (7, 7, 1, 1)])
def test_div_and_mod_by_a_variable_are_bounded(a_lo: int, a_hi: int, b_lo: int, b_hi: int) -> None:
    # symbolic strides divide by a Variable: the bounds must hold every value, and stay narrow enough that the index
    # arithmetic of a symbolic reshape fits 32 bits (WebGPU has no 64-bit integers)
    a, b = var("a", a_lo, a_hi), var("b", b_lo, b_hi)
    for node in (a // b, a % b):
        values = [evaluate(node, {a: x, b: y}) for x in range(a_lo, a_hi + 1) for y in range(b_lo, b_hi + 1)]
        assert node.vmin <= min(values) and max(values) <= node.vmax
        assert (node.vmin, node.vmax) != (I32.min, I32.max)


def test_mul_then_div_by_the_same_constant() -> None:
    r = rng(100)
    assert simplify((r * 7) // 7) is r
    assert simplify((r * 12) // 4) is r * 3
    assert simplify((r * 8) % 4) is c(0)
    assert simplify((r * 4 + 3) // 4) is r
    assert simplify((r * 4 + 3) % 4) is c(3)
    assert simplify(r // 4 // 5) is r // 20
    # with a possibly negative x the rule may not fire, but the value must be kept
    assert_same_values((x * 7) // 7, simplify((x * 7) // 7), [x])


def test_reshape_index_patterns_simplify() -> None:
    r0, r1, flat = rng(4, 0), rng(4, 1), rng(16, 2)
    # (4,4) viewed as (16,): one flat index, nothing to simplify
    assert simplify(r1 + r0 * 4) is r1 + r0 * 4
    # (16,) viewed as (4,4) and back: the original loop indices
    idx = r1 + r0 * 4
    assert simplify(idx // 4) is r0
    assert simplify(idx % 4) is r1
    # (16,) as (4,4)
    assert simplify(flat // 4).op is Ops.IDIV and simplify(flat % 4).op is Ops.MOD
    # (4,4) as (2,8): (r0*4 + r1) // 8 is r0 // 2 because r1 < 4, and % 8 keeps r1 untouched
    assert simplify(idx // 8) is r0 // 2
    hi8 = simplify(idx % 8)
    assert hi8 is (r0 % 2) * 4 + r1 or hi8 is r1 + (r0 % 2) * 4
    assert_same_values(idx % 8, hi8, [r0, r1])
    # (4,4) as (2,2,2,2)
    parts = [simplify(e) for e in (idx // 8, (idx // 4) % 2, (idx // 2) % 2, idx % 2)]
    assert parts == [r0 // 2, r0 % 2, r1 // 2, r1 % 2]
    # permuted (4,4) read as (16,): index r0 + r1*4, and back
    t = r0 + r1 * 4
    assert (simplify(t // 4), simplify(t % 4)) == (r1, r0)


def test_unsigned_wrap_is_not_reasoned_away() -> None:
    r = rng(16, dtype=U32)
    minus_one = r + c(2**32 - 1, U32)  # r - 1 in wrapping uint32 arithmetic
    for e in (minus_one // c(3, U32), minus_one % c(3, U32), (r * c(2**31, U32)) // c(2**31, U32)):
        assert_same_values(e, simplify(e), [r])
    y = var("y", 0, 2**32 - 1, U32)
    mod_zero = (y % c(0, U32)) % c(4, U32)  # y % 0 is 0, so this is 0 - not y % 4
    assert_same_values(mod_zero, simplify(mod_zero), [y])


def test_deep_index_chain_does_not_recurse() -> None:
    r = rng(16)
    e = r
    for _ in range(5000):
        e = e + r
    out = simplify(e // 16)
    assert_same_values(e // 16, out, [r], samples=4)


# ---------------------------------------------------------------------------------------------------------------------
# property: random integer expressions keep their value

LARGE = [2**30, 2**31 - 1, 3 * 2**29, 65536, 1 << 20, 2**32 - 1]


@st.composite
def expressions(draw: st.DrawFn, dtype: DType, variables: list[UOp]) -> UOp:
    def const(lo: int, hi: int) -> UOp:
        return UOp.const(dtype, draw(st.integers(lo, hi)))

    def positive() -> UOp:
        return UOp.const(dtype, draw(st.one_of(st.integers(1, 20), st.sampled_from(LARGE))))

    def build(depth: int) -> UOp:
        if depth == 0 or draw(st.integers(0, 3)) == 0:
            return draw(st.sampled_from(variables)) if draw(st.booleans()) else const(-20, 20)
        kind = draw(st.sampled_from(["add", "sub", "addc", "mulc", "mulv", "idiv", "mod", "divneg", "modneg",
                                     "max", "where", "cmpc", "muldiv"]))
        a = build(depth - 1)
        if kind == "add":
            return a + build(depth - 1)
        if kind == "sub":
            return a - build(depth - 1)
        if kind == "addc":
            return a + const(-20, 20)
        if kind == "mulc":
            return a * (positive() if draw(st.booleans()) else const(-5, 5))
        if kind == "mulv":
            return a * build(depth - 1)
        if kind == "idiv":
            return a // positive()
        if kind == "mod":
            return a % positive()
        if kind == "divneg":  # zero and negative divisors are defined too (x // 0 == 0)
            return a // const(-6, 0)
        if kind == "modneg":
            return a % const(-6, 0)
        if kind == "max":
            return a.maximum(build(depth - 1))
        if kind == "where":
            return a.lt(build(depth - 1)).where(build(depth - 1), build(depth - 1))
        if kind == "cmpc":
            return a.lt(const(-20, 40)).where(build(depth - 1), a)
        k = positive()
        return (a * k) // k

    return build(4)


INT_VARS = [rng(16, 0), rng(5, 1), var("v", -8, 8), var("w", 0, 2**31 - 1)]
UINT_VARS = [rng(16, 0, U32), var("u", 0, 7, U32), var("big", 0, 2**32 - 1, U32)]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_simplify_keeps_the_value_int32(data: st.DataObject) -> None:
    e = data.draw(expressions(I32, INT_VARS), label="expression")
    assert_same_values(e, simplify(e), INT_VARS, samples=150)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_simplify_keeps_the_value_uint32(data: st.DataObject) -> None:
    e = data.draw(expressions(U32, UINT_VARS), label="expression")
    assert_same_values(e, simplify(e), UINT_VARS, samples=150)


def test_simplify_is_a_fixed_point() -> None:
    r0, r1 = rng(4, 0), rng(6, 1)
    for e in ((r1 + r0 * 6) // 3, ((r0 * 6 + r1) % 12) // 2, (r0 + 1) * 3 + r1 % 7):
        once = simplify(e)
        assert simplify(once) is once


@pytest.mark.parametrize("lo", [0, -7])
def test_mod_plus_div_times_divisor_is_the_value(lo: int) -> None:
    """x%c + (x//c)*c puts a split dimension back together: x, in either order and for negative x too."""
    x = var("x", lo, 19)
    for e in ((x % c(2)) + (x // c(2)) * c(2), (x // c(3)) * c(3) + (x % c(3))):
        assert simplify(e) is x
        assert_same_values(e, x, [x])
    # inside a longer index: ((x%2 + (x//2)*2) + y*20) is x + y*20
    y = var("y", 0, 9)
    e = ((x % c(2)) + (x // c(2)) * c(2)) + y * c(20)
    assert simplify(e) is simplify(x + y * c(20))
    # not an identity with another divisor: left alone
    e = (x % c(2)) + (x // c(3)) * c(3)
    assert simplify(e) is not x
