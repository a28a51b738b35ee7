"""The UOp IR: hash-consing, graph walking, substitution, shapes of movement ops, bounds, printing."""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest
from tinygrad.dtype import dtypes
from tinygrad.uop.ops import AxisKind, Ops, RangeArg, UOp, UOpMeta, VarArg

I32, F32 = dtypes.int32, dtypes.float32


def var(name: str, lo: int, hi: int) -> UOp:
    return UOp(Ops.DEFINE_VAR, I32, (), (name, lo, hi))


def rng(n: int, axis: int = 0) -> UOp:
    return UOp(Ops.RANGE, I32, (UOp.const(I32, n),), RangeArg(axis, AxisKind.GLOBAL))


# ---------------------------------------------------------------------------------------------------------------------
# hash-consing

def test_equal_structure_is_the_same_object() -> None:
    a, b = var("a", 0, 9), var("b", 0, 9)
    assert var("a", 0, 9) is a
    assert UOp(Ops.ADD, I32, (a, b)) is UOp(Ops.ADD, I32, (a, b))
    assert (a + b) * 3 is (a + b) * 3
    assert UOp(Ops.ADD, I32, (a, b)) is not UOp(Ops.ADD, I32, (b, a))  # source order is structure
    assert UOp(Ops.ADD, I32, (a, b)) is not UOp(Ops.ADD, dtypes.int64, (a, b))
    assert UOp(Ops.ADD, I32, (a, b)) is not UOp(Ops.SUB, I32, (a, b))
    assert var("a", 0, 9) is not var("a", 0, 10)


def test_range_args_compare_by_value() -> None:
    # hash-consing keys on the arg: two RangeArgs with the same fields must make one RANGE, any field apart two
    end = UOp.const(I32, 4)
    r = UOp(Ops.RANGE, I32, (end,), RangeArg(0, AxisKind.REDUCE))
    assert UOp(Ops.RANGE, I32, (end,), RangeArg(0, AxisKind.REDUCE)) is r
    assert UOp(Ops.RANGE, I32, (end,), RangeArg(1, AxisKind.REDUCE)) is not r
    assert UOp(Ops.RANGE, I32, (end,), RangeArg(0, AxisKind.GLOBAL)) is not r
    assert r.arg.axis == 0 and r.arg.kind is AxisKind.REDUCE
    assert repr(r.arg) == "RangeArg(0, AxisKind.REDUCE)" and str(AxisKind.REDUCE) == "reduce"


def test_range_arg_refuses_a_kind_spelled_as_a_string() -> None:
    # the old positional arg spelled kinds as strings; one left over would silently match no kind
    with pytest.raises(TypeError, match=r"AxisKind\.GLOBAL"):
        RangeArg(0, "global")  # type: ignore[arg-type]


def test_signed_zero_constants_are_distinct() -> None:
    pos, neg = UOp.const(F32, 0.0), UOp.const(F32, -0.0)
    assert pos is not neg
    assert math.copysign(1.0, pos.arg) == 1.0 and math.copysign(1.0, neg.arg) == -1.0
    assert UOp.const(F32, -0.0) is neg


def test_nan_constants_are_reused() -> None:
    # NaN != NaN, so a cache keyed on == would never hit: one NaN constant must still be one node
    assert UOp.const(F32, math.nan) is UOp.const(F32, math.nan)
    assert UOp.const(F32, float("nan")) is UOp.const(F32, math.nan)
    assert UOp.const(dtypes.float64, math.nan) is not UOp.const(F32, math.nan)


def test_constants_of_different_types_are_distinct() -> None:
    assert UOp.const(I32, 1) is not UOp.const(dtypes.bool, True)
    assert UOp.const(I32, 1) is not UOp.const(F32, 1)
    assert UOp(Ops.CONST, I32, (), 1) is not UOp(Ops.CONST, I32, (), True)  # 1 == True in Python
    assert UOp.const(I32, 1).arg == 1 and type(UOp.const(F32, 1).arg) is float


def test_const_truncates_to_the_dtype() -> None:
    assert UOp.const(dtypes.uint8, 257).arg == 1
    assert UOp.const(dtypes.int8, 128).arg == -128
    assert UOp.const(dtypes.float16, 1 + 2**-12).arg == 1.0
    assert UOp.const(dtypes.float16, 1e6).arg == math.inf


def test_unreferenced_nodes_leave_the_cache() -> None:
    gc.collect()  # garbage left by earlier tests must not be collected in the middle of the count
    before = len(UOpMeta.cache)
    nodes = [var(f"tmp{i}", 0, i) for i in range(1000)]
    assert len(UOpMeta.cache) >= before + 1000
    del nodes
    gc.collect()
    assert len(UOpMeta.cache) < before + 1000


def test_a_node_made_again_after_its_twin_died_is_cached_again() -> None:
    key = (Ops.DEFINE_VAR, I32, (), (VarArg, VarArg("again", 0, 3)))
    first = var("again", 0, 3)
    assert UOpMeta.cache[key]() is first
    del first
    assert key not in UOpMeta.cache  # the dead node's reference removed its entry
    second = var("again", 0, 3)
    assert UOpMeta.cache[key]() is second and var("again", 0, 3) is second
    del second
    assert key not in UOpMeta.cache


def test_a_stale_reference_never_removes_a_newer_entry() -> None:
    from tinygrad.uop.ops import _forget_node, _NodeRef

    node = var("stale", 0, 1)
    key = (Ops.DEFINE_VAR, I32, (), (VarArg, VarArg("stale", 0, 1)))
    stale = _NodeRef(node)
    stale.key = key
    _forget_node(stale)  # as a dead twin's reference would, arriving late
    assert UOpMeta.cache[key]() is node


def test_realized_views_live_as_long_as_their_node() -> None:
    from tinygrad.engine.schedule import realized_views

    node = var("realized", 0, 1) + 1
    view = var("view", 0, 1)
    gc.collect()
    before = len(realized_views)
    assert node not in realized_views and realized_views.get(node) is None
    realized_views[node] = view
    assert realized_views[node] is view and node in realized_views and len(realized_views) == before + 1
    del node
    gc.collect()
    assert len(realized_views) == before and (var("realized", 0, 1) + 1) not in realized_views


# ---------------------------------------------------------------------------------------------------------------------
# graph walking

def test_toposort_puts_sources_first_once_each() -> None:
    a, b = var("a", 0, 9), var("b", 0, 9)
    s = a + b
    root = (s * s) - a
    order = list(root.toposort())
    assert order[-1] is root
    assert len(order) == len(set(order))
    pos = {u: i for i, u in enumerate(order)}
    for u in order:
        for src in u.src:
            assert pos[src] < pos[u]
    assert set(order) == {a, b, s, s * s, root, *(c for c in order if c.op is Ops.CONST)}
    # deterministic, left source first
    assert pos[a] < pos[b]


def test_toposort_of_a_deep_chain_does_not_recurse() -> None:
    x = var("a", 0, 9)
    for _ in range(10_000):
        x = x + 1
    assert len(x.toposort()) == 10_002  # the 10000 adds, the var and the constant 1


def test_substitute_replaces_and_shares() -> None:
    a, b, c = var("a", 0, 9), var("b", 0, 9), var("c", 0, 9)
    shared = a * 2
    root = (shared + b) - shared
    out = root.substitute({a: c})
    assert out is (c * 2 + b) - c * 2
    assert root.substitute({}) is root
    assert root.substitute({b: b}) is root
    # an interior node can be replaced as a whole
    assert root.substitute({shared: b}) is (b + b) - b
    # nodes that do not depend on the replaced one stay the same objects
    other = (b + 1) * a
    assert other.substitute({a: c}).src[0] is b + 1


def test_replace_keeps_unnamed_fields() -> None:
    a = var("a", 0, 9)
    u = a + 1
    assert u.replace(op=Ops.SUB) is a - 1
    assert u.replace(dtype=dtypes.int64).dtype == dtypes.int64
    assert u.replace(src=(a, a)) is a + a


# ---------------------------------------------------------------------------------------------------------------------
# shapes of movement ops, against numpy

def buf(shape: tuple[int, ...]) -> tuple[UOp, np.ndarray]:
    size = int(np.prod(shape))
    return UOp(Ops.PARAM, F32, (), (1, size)).reshape(shape), np.zeros(shape)


@pytest.mark.parametrize("shape,new", [((2, 3, 4), (6, 4)), ((2, 3, 4), (24,)), ((24,), (2, 1, 12)), ((1,), ())])
def test_reshape_shape(shape, new) -> None:
    u, a = buf(shape)
    assert u.reshape(new).shape == a.reshape(new).shape


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 0, 1), (1, 2, 0), (2, 1, 0)])
def test_permute_shape(order) -> None:
    u, a = buf((2, 3, 4))
    assert u.permute(order).shape == np.transpose(a, order).shape


def test_expand_pad_shrink_flip_shapes() -> None:
    u, a = buf((2, 1, 4))
    assert u.expand((2, 5, 4)).shape == np.broadcast_to(a, (2, 5, 4)).shape
    pads = ((1, 2), (0, 0), (3, 0))
    assert u.pad(pads).shape == np.pad(a, pads).shape
    bounds = ((1, 2), (0, 1), (1, 3))
    assert u.shrink(bounds).shape == a[1:2, 0:1, 1:3].shape
    assert u.flip((True, False, True)).shape == np.flip(a, (0, 2)).shape
    assert u.reduce_axis(Ops.ADD, (0, 2)).shape == a.sum(axis=(0, 2), keepdims=True).shape


def test_noop_movement_returns_self() -> None:
    u, _ = buf((2, 3))
    assert u.reshape((2, 3)) is u
    assert u.permute((0, 1)) is u
    assert u.expand((2, 3)) is u
    assert u.pad(((0, 0), (0, 0))) is u
    assert u.shrink(((0, 2), (0, 3))) is u
    assert u.flip((False, False)) is u
    assert u.reduce_axis(Ops.ADD, ()) is u


def test_elementwise_and_const_shapes() -> None:
    u, _ = buf((2, 3))
    assert (u + u).shape == (2, 3)
    assert UOp.const(F32, 1.0).shape == ()
    assert u.const_like(2.0).shape == (2, 3)
    assert (u + 1.0).shape == (2, 3)
    assert u.lt(0.0).dtype == dtypes.bool and u.lt(0.0).shape == (2, 3)
    assert not rng(4).has_shape
    with pytest.raises(ValueError, match="RANGE"):
        _ = rng(4).shape


def test_shape_of_a_deep_chain_does_not_recurse() -> None:
    u, _ = buf((3,))
    for _ in range(5000):
        u = UOp(Ops.ADD, F32, (u, u))
    assert u.shape == (3,)


# ---------------------------------------------------------------------------------------------------------------------
# value bounds, against brute force

def _values(u: UOp, env: dict[UOp, int]) -> int:
    from tinygrad.uop.alu import exec_alu

    vals: dict[UOp, int] = {}
    for n in u.toposort():
        if n.op is Ops.CONST:
            vals[n] = n.arg
        elif n.op in (Ops.RANGE, Ops.DEFINE_VAR):
            vals[n] = env[n]
        else:
            vals[n] = exec_alu(n.op, n.dtype, tuple(vals[s] for s in n.src), n.src[-1].dtype)
    return vals[u]


@pytest.mark.parametrize("build", [
    lambda r, v: r * 3 + v, lambda r, v: r // 4, lambda r, v: (r + 5) % 4, lambda r, v: r - v,
    lambda r, v: r.maximum(v), lambda r, v: v * v, lambda r, v: r.lt(3).where(r, v), lambda r, v: v % 3,
], ids=["mul-add", "div", "mod", "sub", "max", "square", "where", "neg-mod"])
def test_bounds_contain_every_value(build) -> None:
    r, v = rng(10), var("v", -4, 6)
    e = build(r, v)
    seen = [_values(e, {r: i, v: j}) for i in range(10) for j in range(-4, 7)]
    assert e.vmin <= min(seen) and max(seen) <= e.vmax
    assert (rng(10).vmin, rng(10).vmax) == (0, 9)
    assert (v.vmin, v.vmax) == (-4, 6)


def test_bounds_of_possibly_wrapping_arithmetic_are_the_whole_range() -> None:
    v = var("v", 0, 2**31 - 1)
    assert ((v + 1).vmin, (v + 1).vmax) == (I32.min, I32.max)
    assert ((v * 2).vmin, (v * 2).vmax) == (I32.min, I32.max)
    u = UOp(Ops.DEFINE_VAR, dtypes.uint32, (), ("u", 0, 3))
    assert ((u - UOp.const(dtypes.uint32, 1)).vmin, (u - UOp.const(dtypes.uint32, 1)).vmax) == (0, 2**32 - 1)


def test_bounds_of_a_deep_chain_do_not_recurse() -> None:
    r = rng(16)
    x = r
    for _ in range(5000):
        x = x + r
    assert (x.vmin, x.vmax) == (0, 15 * 5001)


# ---------------------------------------------------------------------------------------------------------------------
# printing

def test_pretty_prints_shared_nodes_once_and_deep_graphs() -> None:
    a = var("a", 0, 9)
    s = a + 1
    text = repr(s * s)
    assert text.count("DEFINE_VAR") == 1 and "<ADD ...>" in text
    x = a
    for _ in range(3000):
        x = x + a
    assert repr(x).count("\n") > 3000
