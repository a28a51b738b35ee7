"""Algebraic simplification as a pattern table: constant folding, identities, and the index
arithmetic rules (`(x*a)//a`, range-bounded `%` and `//`) that keep lowered movement ops small.

Every rule must leave the value of the graph unchanged; `tests/test_symbolic.py` checks that with
hypothesis by evaluating random expressions before and after.
"""

from __future__ import annotations

import math

from tinygrad.dtype import dtypes
from tinygrad.uop.alu import exec_alu, exec_bitcast, exec_cast
from tinygrad.uop.ops import GroupOp, Ops, UOp
from tinygrad.uop.rewrite import PatternMatcher, UPat


def _fold(op: Ops, out: UOp) -> UOp | None:
    if not all(s.op is Ops.CONST for s in out.src) or out.dtype.vcount > 1:
        return None
    # WHERE's operands are its last two sources; every other op computes in the dtype of its first source
    # (a shift's width is that of the shifted value, not of the amount)
    operand_dtype = out.src[-1].dtype if op is Ops.WHERE else out.src[0].dtype
    if op is Ops.CAST:
        return UOp.const(out.dtype, exec_cast(out.src[0].arg, out.dtype))
    if op is Ops.BITCAST:
        return UOp.const(out.dtype, exec_bitcast(out.src[0].arg, out.src[0].dtype, out.dtype))
    return UOp.const(out.dtype, exec_alu(op, out.dtype, tuple(s.arg for s in out.src), operand_dtype))


def _is_int(u: UOp) -> bool:
    return u.dtype.is_int


def _terms(x: UOp) -> list[tuple[UOp | None, int]]:
    """Decompose an integer sum into (term, coefficient) pairs; a constant is (None, value).

    Iterative: index sums can be long chains. The sum of the terms equals x modulo 2**bits; `_no_wrap`
    says when it equals x as a plain integer too.
    """
    out: list[tuple[UOp | None, int]] = []
    stack: list[tuple[UOp, int]] = [(x, 1)]
    while stack:
        node, scale = stack.pop()
        if node.op is Ops.ADD:
            stack.extend(((node.src[1], scale), (node.src[0], scale)))
        elif node.op is Ops.CONST:
            out.append((None, int(node.arg) * scale))
        elif node.op is Ops.MUL and node.src[1].op is Ops.CONST:
            stack.append((node.src[0], scale * int(node.src[1].arg)))
        else:
            out.append((node, scale))
    return out


def _no_wrap(terms: list[tuple[UOp | None, int]], like: UOp) -> bool:
    """True when every term and coefficient is non-negative and the exact integer sum fits `like`'s dtype.

    Then the wrapping arithmetic that computes x never wrapped, and x equals the plain sum of its terms -
    the premise of the div/mod rules. (For unsigned dtypes the bounds of a wrapped sum are the whole range,
    which starts at 0, so vmin >= 0 alone does not say this: (r + 0xFFFFFFFF) // 3 must not become r//3 + ...)
    """
    top: int | float = 0
    for t, cf in terms:
        if cf < 0 or (t is not None and t.vmin < 0):
            return False
        top += cf * (t.vmax if t is not None else 1)
    return top <= like.dtype.max


def _rebuild(terms: list[tuple[UOp | None, int]], like: UOp) -> UOp:
    out: UOp | None = None
    const = 0
    for t, c in terms:
        if t is None:
            const += c
            continue
        term = t if c == 1 else t * UOp.const(like.dtype, c)
        out = term if out is None else out + term
    if out is None:
        return UOp.const(like.dtype, const)
    return out if const == 0 else out + UOp.const(like.dtype, const)


def _split_by_gcd(terms: list[tuple[UOp | None, int]], d: int) -> tuple[int, UOp, UOp | None] | None:
    """Write a non-negative sum as g*big + small with g | d and 0 <= small < g, for the largest such g > 1.

    Then x // d == big // (d/g) and x % d == (big % (d/g))*g + small: what a reshape of (4,4) into (2,8)
    needs, where (r0*4 + r1) // 8 is r0 // 2 because r1 < 4.
    """
    ordered = sorted(terms, key=lambda tc: tc[1])
    best: tuple[int, int] | None = None  # (g, how many of the smallest-coefficient terms form `small`)
    small_max: int | float = 0
    for i in range(len(ordered)):
        g = math.gcd(d, *(cf for _, cf in ordered[i:]))
        if g > 1 and small_max < g and (best is None or g > best[0]):
            best = (g, i)
        t, cf = ordered[i]
        small_max += cf * (t.vmax if t is not None else 1)
    if best is None:
        return None
    g, i = best
    like = next(t for t, _ in terms if t is not None)
    big = _rebuild([(t, cf // g) for t, cf in ordered[i:]], like)
    return g, big, (_rebuild(ordered[:i], like) if i else None)


def _div_by_const(x: UOp, c: UOp) -> UOp | None:
    d = int(c.arg)
    if d <= 0 or x.vmin < 0:
        return None
    if x.vmax < d:
        return UOp.const(x.dtype, 0)
    if x.op is Ops.IDIV and x.src[1].op is Ops.CONST and int(x.src[1].arg) > 0:
        return x.src[0] // UOp.const(x.dtype, int(x.src[1].arg) * d)
    terms = _terms(x)
    if not _no_wrap(terms, x):
        return None
    whole = [(t, cf // d) for t, cf in terms if cf % d == 0]
    rest = [(t, cf) for t, cf in terms if cf % d != 0]
    if not whole:
        if (split := _split_by_gcd(terms, d)) is None:
            return None
        g, big, _ = split
        return big if g == d else big // UOp.const(x.dtype, d // g)
    q = _rebuild(whole, x)
    if not rest:
        return q
    r = _rebuild(rest, x)
    return q + (r // c) if r.vmax >= d else q


def _mod_by_const(x: UOp, c: UOp) -> UOp | None:
    d = int(c.arg)
    if d <= 0 or x.vmin < 0:
        return None
    if d == 1:
        return UOp.const(x.dtype, 0)
    if x.vmax < d:
        return x
    # (y % m) % d -> y % d needs m > 0: y % 0 is 0, not y
    if x.op is Ops.MOD and x.src[1].op is Ops.CONST and int(x.src[1].arg) > 0 and int(x.src[1].arg) % d == 0:
        return x.src[0] % c
    terms = _terms(x)
    if not _no_wrap(terms, x):
        return None
    rest = [(t, cf % d) for t, cf in terms if cf % d != 0]
    if len(rest) == len(terms) and all(cf < d for _, cf in rest):
        if (split := _split_by_gcd(terms, d)) is None or split[0] == d:
            return None
        g, big, small = split
        scaled = (big % UOp.const(x.dtype, d // g)) * UOp.const(x.dtype, g)
        return scaled if small is None else scaled + small
    if not rest:
        return UOp.const(x.dtype, 0)
    r = _rebuild(rest, x)
    return r if r.vmax < d else r % c


def _cmp_bounds(x: UOp, c: UOp) -> UOp | None:
    if not (x.dtype.is_int and c.op is Ops.CONST):
        return None
    if x.vmax < c.arg:
        return UOp.const(dtypes.bool, True)
    if x.vmin >= c.arg:
        return UOp.const(dtypes.bool, False)
    return None


def _same_nonfloat(x: UOp) -> bool:
    return not x.dtype.is_float


x, y, z = UPat.var("x"), UPat.var("y"), UPat.var("z")
c1, c2 = UPat.cvar("c1"), UPat.cvar("c2")
ALU_NODES = tuple(GroupOp.ALU | {Ops.CAST, Ops.BITCAST})

symbolic = PatternMatcher([
    # constant folding, through the reference ALU table
    (UPat(ALU_NODES, src=UPat(Ops.CONST), name="out"), lambda out: _fold(out.op, out)),
    # canonical form: constants on the right of commutative ops
    (UPat(tuple(GroupOp.Commutative), src=(UPat(Ops.CONST, name="c"), UPat.var("v")), name="out"),
     lambda out, c, v: out.replace(src=(v, c)) if v.op is not Ops.CONST else None),
    # identities
    (UPat(Ops.ADD, src=(x, UPat.cvar(value=0))), lambda x: x),
    (UPat(Ops.SUB, src=(x, UPat.cvar(value=0))), lambda x: x),
    (UPat(Ops.MUL, src=(x, UPat.cvar(value=1))), lambda x: x),
    (UPat(Ops.MUL, src=(x, UPat.cvar("c", value=0))), lambda x, c: c if _same_nonfloat(x) else None),
    (UPat(Ops.IDIV, src=(x, UPat.cvar(value=1))), lambda x: x if _is_int(x) else None),
    (UPat(Ops.FDIV, src=(x, UPat.cvar(value=1.0))), lambda x: x),
    (UPat(Ops.AND, src=(x, UPat.cvar(value=True))), lambda x: x if x.dtype.is_bool else None),
    (UPat(Ops.AND, src=(x, UPat.cvar("c", value=False))), lambda x, c: c if x.dtype.is_bool else None),
    (UPat(Ops.OR, src=(x, UPat.cvar(value=False))), lambda x: x if x.dtype.is_bool else None),
    (UPat(Ops.WHERE, src=(UPat.cvar("c"), x, y)), lambda c, x, y: x if c.arg else y),
    (UPat(Ops.WHERE, src=(UPat.var(), x, x)), lambda x: x),
    (UPat(Ops.CAST, src=(x,), name="out"), lambda out, x: x if out.dtype == x.dtype else None),
    # reassociate constants: (x+c1)+c2 -> x+(c1+c2), (x*c1)*c2 -> x*(c1*c2)
    (UPat(Ops.ADD, src=(UPat(Ops.ADD, src=(x, c1)), c2)),
     lambda x, c1, c2: x + UOp.const(x.dtype, c1.arg + c2.arg) if _is_int(x) else None),
    (UPat(Ops.MUL, src=(UPat(Ops.MUL, src=(x, c1)), c2)),
     lambda x, c1, c2: x * UOp.const(x.dtype, c1.arg * c2.arg) if _is_int(x) else None),
    # (x+c)*c2 -> x*c2 + c*c2 keeps index sums flat so div/mod rules see through them
    (UPat(Ops.MUL, src=(UPat(Ops.ADD, src=(x, c1)), c2)),
     lambda x, c1, c2: x * c2 + UOp.const(x.dtype, c1.arg * c2.arg) if _is_int(x) else None),
    # index arithmetic with known bounds
    (UPat(Ops.IDIV, src=(x, UPat.cvar("c"))), lambda x, c: _div_by_const(x, c) if _is_int(x) else None),
    (UPat(Ops.MOD, src=(x, UPat.cvar("c"))), lambda x, c: _mod_by_const(x, c) if _is_int(x) else None),
    (UPat(Ops.CMPLT, src=(x, UPat.cvar("c"))), _cmp_bounds),
    # x%c + (x//c)*c -> x, in either order: a split dimension put back together (a pool's window view read through
    # a reshape). An identity for truncating and for flooring division alike, whatever the sign of x
    (UPat(Ops.ADD, src=(UPat(Ops.MOD, src=(x, c1)), UPat(Ops.MUL, src=(UPat(Ops.IDIV, src=(x, c1)), c1)))),
     lambda x, c1: x if _is_int(x) and c1.arg != 0 else None),
    (UPat(Ops.ADD, src=(UPat(Ops.MUL, src=(UPat(Ops.IDIV, src=(x, c1)), c1)), UPat(Ops.MOD, src=(x, c1)))),
     lambda x, c1: x if _is_int(x) and c1.arg != 0 else None),
    (UPat(Ops.MAX, src=(x, x)), lambda x: x),
    (UPat(Ops.MAX, src=(x, UPat.cvar("c"))), lambda x, c: x if _is_int(x) and x.vmin >= c.arg else None),
])


def simplify(u: UOp) -> UOp:
    from tinygrad.uop.rewrite import graph_rewrite

    return graph_rewrite(u, symbolic)
