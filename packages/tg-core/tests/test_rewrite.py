"""The rewrite engine: UPat matching, PatternMatcher order, graph_rewrite to a fixed point."""

from __future__ import annotations

import pytest
from tinygrad.dtype import dtypes
from tinygrad.uop.ops import Ops, UOp
from tinygrad.uop.rewrite import PatternMatcher, UPat, graph_rewrite

I32, F32 = dtypes.int32, dtypes.float32


def var(name: str, dtype=I32) -> UOp:
    return UOp(Ops.DEFINE_VAR, dtype, (), (name, 0, 100))


def matches(pat: UPat, u: UOp) -> list[dict[str, UOp]]:
    return list(pat.match(u, {}))


a, b = var("a"), var("b")
fa = var("fa", F32)


# ---------------------------------------------------------------------------------------------------------------------
# UPat

def test_match_by_op_and_op_set() -> None:
    assert matches(UPat(Ops.ADD), a + b)
    assert not matches(UPat(Ops.MUL), a + b)
    assert matches(UPat((Ops.MUL, Ops.ADD)), a + b)
    assert matches(UPat({Ops.MUL, Ops.ADD}), a * b)
    assert matches(UPat(), a + b)  # no op: anything


def test_match_by_dtype() -> None:
    assert matches(UPat(dtype=I32), a)
    assert not matches(UPat(dtype=F32), a)
    assert matches(UPat(dtype=(F32, I32)), a)
    vec = UOp(Ops.DEFINE_VAR, F32.vec(4), (), ("v", 0, 1))
    assert matches(UPat(dtype=F32), vec)  # a vector matches its scalar dtype


def test_match_by_arg_compares_type_too() -> None:
    one, true = UOp.const(I32, 1), UOp.const(dtypes.bool, True)
    assert matches(UPat.cvar(value=1), one)
    assert not matches(UPat.cvar(value=1), true)  # True == 1 in Python, but it is another constant
    assert not matches(UPat.cvar(value=1), UOp.const(F32, 1.0))
    assert not matches(UPat.cvar(value=2), one)
    assert matches(UPat(Ops.DEFINE_VAR, arg=("a", 0, 100)), a)


def test_names_bind_nodes() -> None:
    pat = UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c")))
    (bound,) = matches(pat, a + 3)
    assert bound["x"] is a and bound["c"] is UOp.const(I32, 3)
    (whole,) = matches(UPat(Ops.ADD, name="n"), a + b)
    assert whole["n"] is a + b


def test_src_tuple_matches_in_order_only() -> None:
    pat = UPat(Ops.ADD, src=(UPat.cvar("c"), UPat.var("x")))
    assert not matches(pat, a + 3)
    assert matches(pat, UOp(Ops.ADD, I32, (UOp.const(I32, 3), a)))
    assert not matches(UPat(Ops.ADD, src=(UPat.var("x"),)), a + b)  # wrong arity


def test_src_list_is_commutative() -> None:
    pat = UPat(Ops.ADD, src=[UPat.cvar("c"), UPat.var("x")])
    for u in (a + 3, UOp(Ops.ADD, I32, (UOp.const(I32, 3), a))):
        bound = matches(pat, u)
        assert bound and bound[0]["x"] is a and bound[0]["c"].arg == 3


def test_repeated_name_must_bind_the_same_node() -> None:
    pat = UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x")))
    assert matches(pat, a + a)
    assert not matches(pat, a + b)
    nested = UPat(Ops.MUL, src=(UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("y"))), UPat.var("x")))
    assert matches(nested, (a + b) * a)
    assert not matches(nested, (a + b) * b)
    # in a commutative list the second order is tried when the first binds inconsistently
    comm = UPat(Ops.MUL, src=[UPat.var("x"), UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("y")))])
    assert matches(comm, (a + b) * a)
    assert matches(comm, a * (a + b))


def test_one_pattern_for_every_source() -> None:
    pat = UPat(Ops.ADD, src=UPat(Ops.CONST))
    assert matches(pat, UOp(Ops.ADD, I32, (UOp.const(I32, 1), UOp.const(I32, 2))))
    assert not matches(pat, a + 1)


# ---------------------------------------------------------------------------------------------------------------------
# PatternMatcher

def test_first_matching_pattern_wins() -> None:
    pm = PatternMatcher([(UPat(Ops.ADD), lambda: UOp.const(I32, 1)), (UPat(Ops.ADD), lambda: UOp.const(I32, 2))])
    assert pm.rewrite(a + b).arg == 1


def test_order_holds_between_op_less_and_op_patterns() -> None:
    # an earlier pattern without an op must win over a later one that names the op
    pm = PatternMatcher([(UPat(name="x"), lambda x: UOp.const(I32, 1) if x.op is Ops.ADD else None),
                         (UPat(Ops.ADD), lambda: UOp.const(I32, 2))])
    assert pm.rewrite(a + b).arg == 1
    pm2 = PatternMatcher([(UPat(Ops.ADD), lambda: UOp.const(I32, 2)), (UPat(name="x"), lambda x: UOp.const(I32, 1))])
    assert pm2.rewrite(a + b).arg == 2
    assert pm2.rewrite(a * b).arg == 1  # ops without their own patterns still see the op-less ones


def test_none_and_self_fall_through() -> None:
    pm = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: None),
                         (UPat(Ops.ADD, name="x"), lambda x: x),
                         (UPat(Ops.ADD), lambda: UOp.const(I32, 7))])
    assert pm.rewrite(a + b).arg == 7
    assert PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: x)]).rewrite(a + b) is None
    assert PatternMatcher([]).rewrite(a) is None


def test_ctx_is_passed_to_functions_that_ask() -> None:
    seen = []
    pm = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda ctx, x: seen.append(ctx))])
    pm.rewrite(a + b, ctx="context")
    assert seen == ["context"]


def test_matchers_add_in_order() -> None:
    pm = PatternMatcher([(UPat(Ops.ADD), lambda: UOp.const(I32, 1))]) + \
        PatternMatcher([(UPat(Ops.ADD), lambda: UOp.const(I32, 2)), (UPat(Ops.MUL), lambda: UOp.const(I32, 3))])
    assert pm.rewrite(a + b).arg == 1
    assert pm.rewrite(a * b).arg == 3


# ---------------------------------------------------------------------------------------------------------------------
# graph_rewrite

add_zero = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar(value=0))), lambda x: x)])


def test_rewrite_applies_everywhere() -> None:
    e = ((a + 0) * (b + 0)) + 0
    assert graph_rewrite(e, add_zero) is a * b


def test_rewrite_reaches_a_fixed_point() -> None:
    # each rewrite creates the next match: 3 -> 2 -> 1 -> 0, and a parent whose sources change is revisited
    down = PatternMatcher([(UPat.cvar("c", dtype=I32), lambda c: UOp.const(I32, c.arg - 1) if c.arg > 0 else None)])
    assert graph_rewrite(UOp.const(I32, 3), down) is UOp.const(I32, 0)
    assert graph_rewrite(a + 3, down + add_zero) is a
    # a rewrite whose result matches another pattern: (x*1) -> x + 0 -> x
    mul_one = PatternMatcher([(UPat(Ops.MUL, src=(UPat.var("x"), UPat.cvar(value=1))), lambda x: x + 0)])
    out = graph_rewrite((a * 1) * 1, mul_one + add_zero)
    assert out is a
    assert graph_rewrite(out, mul_one + add_zero) is out  # and it is a fixed point


def test_rewrite_result_sources_are_rewritten() -> None:
    # the replacement contains a new x+0 that must be rewritten too
    wrap = PatternMatcher([(UPat(Ops.MUL, src=(UPat.var("x"), UPat.cvar(value=2))), lambda x: (x + 0) + (x + 0))])
    assert graph_rewrite(a * 2, wrap + add_zero) is a + a


def test_shared_subgraphs_are_rewritten_once() -> None:
    calls = []

    def count(x: UOp) -> None:
        calls.append(x)

    shared = a + b
    e = (shared * shared) + shared
    graph_rewrite(e, PatternMatcher([(UPat(Ops.ADD, name="x"), count)]))
    assert calls.count(shared) == 1


def test_deep_chain_does_not_recurse() -> None:
    x = a
    for _ in range(5000):
        x = x + 0
    assert graph_rewrite(x, add_zero) is a
    y = a
    for i in range(5000):
        y = y + UOp.const(I32, i % 3 + 1)
    sub_to_var = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), lambda v: b if v is a else None)])
    out = graph_rewrite(y, sub_to_var)
    assert out.op is Ops.ADD and a not in out.toposort() and b in out.toposort()


def test_a_cycle_is_reported() -> None:
    flip = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("y"))), lambda x, y: UOp(Ops.ADD, I32, (y, x)))])
    with pytest.raises(RuntimeError, match="fixed point"):
        graph_rewrite(a + b, flip, max_steps=1000)


def _first_match_reference(pm: PatternMatcher, u: UOp) -> UOp | None:
    """PatternMatcher.rewrite spelled out: the table in order, every binding `UPat.match` enumerates."""
    for pat, fn in pm.patterns:
        for bound in pat.match(u, {}):
            out = fn(**bound)
            if out is not None and out is not u:
                return out
    return None


def test_dispatch_agrees_with_matching_in_table_order() -> None:
    # the matcher runs patterns without choices compiled and skips those whose source ops cannot fit; on the
    # simplifier's table and every node of some index expressions it must pick what the plain walk picks
    from tinygrad.uop.symbolic import symbolic

    r = UOp(Ops.DEFINE_VAR, I32, (), ("r", 0, 15))
    c = UOp.const
    exprs = [(r * 4 + 3) // 4, (r + 7) % 4, (a % 8) + (a // 8) * 8, ((a + 3) + 5) * 2, c(I32, 3) + a,
             UOp(Ops.MAX, I32, (r, r)), (r * 0) + (b * 1), UOp(Ops.WHERE, I32, (r.lt(20), a, b)),
             UOp(Ops.ADD, I32, (c(I32, 2), c(I32, 5))), r.lt(16), (fa * 1.0) + 0.0]
    comm = PatternMatcher([(UPat(Ops.ADD, src=[UPat.cvar("k"), UPat.var("x")]), lambda k, x: x if k.arg == 3 else None),
                           *symbolic.patterns])
    for pm in (symbolic, comm):
        for e in exprs:
            for u in e.toposort():
                assert pm.rewrite(u) is _first_match_reference(pm, u), u


def test_a_joined_matcher_is_built_once() -> None:
    first = PatternMatcher([(UPat(Ops.ADD), lambda: UOp.const(I32, 1))])
    second = PatternMatcher([(UPat(Ops.MUL), lambda: UOp.const(I32, 3))])
    assert first + second is first + second
    assert (first + second).rewrite(a * b).arg == 3


def test_compiled_patterns_agree_with_upat_match_where_they_cannot_be_written_out() -> None:
    # a name that is not a Python identifier, and a named pattern repeated over the sources, take the nested form;
    # every form must bind what UPat.match binds and hand it to the function
    seen: list[dict[str, UOp]] = []

    def keep(**kw: UOp) -> None:
        seen.append(kw)

    odd = UPat(Ops.ADD, src=(UPat.var("not-an-identifier"), UPat.var("y")))
    every = UPat(Ops.ADD, src=UPat.var("x"))
    plain = UPat(Ops.ADD, src=(UPat.var("x"), UPat(Ops.MUL, src=(UPat.var("x"), UPat.cvar("c", dtype=I32)))))
    for pat, node in [(odd, a + b), (every, a + a), (every, a + b), (plain, a + a * 3), (plain, a + b * 3)]:
        seen.clear()
        assert PatternMatcher([(pat, keep)]).rewrite(node) is None
        assert seen == matches(pat, node), (pat, node)


def test_a_rewriter_shares_its_memo_and_agrees_with_graph_rewrite() -> None:
    from tinygrad.uop.rewrite import Rewriter
    from tinygrad.uop.symbolic import symbolic

    calls: list[UOp] = []
    counting = PatternMatcher([(UPat(Ops.ADD, name="u"), lambda u: calls.append(u))]) + symbolic
    shared = (a * 4 + 3) // 4
    graphs = [shared + b, shared * b, (shared + b) + 0, UOp.const(I32, 2) + UOp.const(I32, 5)]
    rw = Rewriter(counting)
    for g in graphs:
        assert rw.rewrite(g) is graph_rewrite(g, symbolic)
    calls.clear()
    for g in graphs:  # everything is in the memo now: no pattern runs again
        rw.rewrite(g)
    assert calls == []
    # a node built from rewritten sources (the fast path) becomes what graph_rewrite makes of it, rewrites included
    built = UOp(Ops.ADD, I32, (rw.rewrite(shared), UOp.const(I32, 0)))
    assert rw.rewrite(built) is graph_rewrite(built, symbolic) is rw.rewrite(shared)


def test_a_rewriter_reports_a_cycle() -> None:
    from tinygrad.uop.rewrite import Rewriter

    flip = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("y"))), lambda x, y: y + x)])
    with pytest.raises(RuntimeError, match="fixed point"):
        Rewriter(flip, max_steps=1000).rewrite(a + b)
