"""Gather folding: a one-hot compare-and-sum over a reduce loop becomes one direct, gated load.

Integer-tensor indexing (`x[idx]`, `gather`, `nn.Embedding`) is built in the tensor graph as a sum over every
position r of the indexed axis of `where(idx == r, x[r], 0)` (tg-core's mixin/indexing.py; the positions are a lazy
ARANGE, which lowers to the loop index). Lowered, that is

    REDUCE(op, WHERE(c, v(r), z), ..., r, ...)      (nested WHEREs with the same z count as one, their conditions
                                                      AND-ed: a split reduction pads the axis with a WHERE)

where one conjunct of the condition c is `e == r` (or `e == r + k`, r possibly cast to an integer type that holds
every value it takes) and e and k do not depend on r. At most one r in [0, N) passes it, r = e - k; every other r
contributes z. When z is the identity of the reduction (0 for a sum, the lowest value for a max, 1 for a product),
the loop over r is therefore exactly its one term:

    where(0 <= e - k < N and c'(e - k), v(e - k), z)      c' = c without the equality

Out-of-range indices keep their meaning (no r matches: the identity; the bounds check gives the same), and every
load that now reads at e - k is gated by the bounds check, so it never reads outside its buffer. Anything else in
the reduced value that depends on r (a sum of the where and another term, a product with another load) makes the
value something other than a single WHERE, and the rule does not fire. The reduce keeps its other loops; a
reduction over several one-hot axes (`x[i, j]`) loses one loop per rewrite.
"""

from __future__ import annotations

import math

from tinygrad.codegen.gates import gate_loads
from tinygrad.dtype import dtypes
from tinygrad.uop.ops import Ops, UOp
from tinygrad.uop.reduce_identity import reduce_identity_value
from tinygrad.uop.rewrite import PatternMatcher, UPat

IDX = dtypes.index


def _conjuncts(c: UOp) -> list[UOp]:
    """The terms of an AND chain of bools, in order."""
    if c.op is Ops.AND and c.dtype == dtypes.bool:
        return _conjuncts(c.src[0]) + _conjuncts(c.src[1])
    return [c]


def _and_all(terms: list[UOp]) -> UOp:
    out = terms[0]
    for t in terms[1:]:
        out = out.logical_and(t)
    return out


def _offset_of(side: UOp, r: UOp) -> UOp | None:
    """k when `side` is r + k (k free of r; 0 for r itself), seen through casts to integer types that hold every
    value r + k takes (so no cast merges two positions: int32 positions compared with an int64 index are cast
    twice); None otherwise."""
    while side.op is Ops.CAST:
        inner = side.src[0]
        if not (side.dtype.is_int and (inner.dtype.is_int or inner.dtype == IDX) and side.dtype.min <= inner.vmin
                and inner.vmax <= side.dtype.max):
            return None
        side = inner
    if side is r:
        return UOp.const(IDX, 0)
    if side.op is Ops.ADD and side.dtype == IDX:
        for a, b in (side.src, side.src[::-1]):
            if a is r and r not in b.toposort():
                return b
    return None


def _without_implied_gates(e: UOp, r: UOp, known: list[UOp]) -> UOp:
    """e with the gates that depend on r dropped from its loads, where the where's condition `known` already holds
    them and the load's address depends on no loop those gates do.

    A split reduction pads the reduced axis, and the padding gates every load below it, the index tensor's too,
    with `r + k < size`, a condition on r. Under the where, that condition holds. The gate is only there to keep the
    address in bounds, and an address that does not move with the gate's loops is one that is also read where the
    gate passes: it is in bounds, and the load gives the same value with the gate or without."""
    mapping: dict[UOp, UOp] = {}
    for node in e.toposort():
        if node.op is not Ops.LOAD or len(node.src[0].src) < 3:
            continue
        index = node.src[0]
        gate = _conjuncts(index.src[2])
        dropped = [g for g in gate if r in g.toposort()]
        if not dropped or not all(g in known for g in dropped):
            continue
        loops = {u for g in dropped for u in g.toposort() if u.op is Ops.RANGE}
        if any(u in loops for u in index.src[1].toposort()):
            continue
        kept = [g for g in gate if g not in dropped]
        new_index = index.replace(src=(index.src[0], index.src[1], _and_all(kept)) if kept else index.src[:2])
        mapping[node] = node.replace(src=(new_index,))
    return e.substitute(mapping) if mapping else e


def _match_position(term: UOp, r: UOp, known: list[UOp]) -> UOp | None:
    """The index e - k (in dtypes.index) that `term`, an `e == r + k`, pins r to; None if it is not one. `known`
    are the other conditions that hold wherever `term` is looked at."""
    if term.op is not Ops.CMPEQ or not term.src[0].dtype.is_int:
        return None
    for side, other in (term.src, term.src[::-1]):
        k = _offset_of(side, r)
        if k is not None:
            other = _without_implied_gates(other, r, known)
        if k is not None and r not in other.toposort():
            e = other if other.dtype == IDX else _narrowed(other, k, r.src[0]).cast(IDX)
            return e if k.op is Ops.CONST and k.arg == 0 else e - k
    return None


def _narrowed(value: UOp, k: UOp, n: UOp) -> UOp:
    """An index value (loaded from an index tensor: any int32 or int64) limited to [k - 1, k + n], in its own dtype,
    before it becomes index arithmetic. Every value outside stays outside [k, k + n), so the bounds check passes
    where it did, and the index arithmetic stays in the range of the positions: a device without 64-bit integers
    (WebGPU) could not hold an int64 index tensor's whole range there."""
    lo, hi = int(k.vmin) - 1, int(k.vmax) + int(n.vmax)
    if value.vmin < lo:
        value = value.maximum(lo)
    if value.vmax > hi:
        # min(value, hi) as -max(-value, -hi) where the dtype is signed: bounds follow MAX and NEG, not a WHERE
        value = -((-value).maximum(-hi)) if value.dtype.min < 0 else value.lt(hi).where(value, value.const_like(hi))
    return value


def _clamped(e: UOp, n: UOp) -> UOp:
    """e limited to [0, n-1]: equal to e wherever the bounds check passes, and with bounds that say so, so that the
    index arithmetic built on it is typed as narrowly as the loop's was (an int32 index tensor would otherwise make
    `e * row_size` a 64-bit product)."""
    if e.vmin >= 0 and e.vmax <= n.vmin - 1:
        return e
    return -((-(e.maximum(0))).maximum(-(n - 1)))


def fold_gather(red: UOp) -> UOp | None:
    value, ranges = red.src[0], red.src[1:]
    if value.op is not Ops.WHERE:
        return None
    cond, v, z = value.src
    identity = reduce_identity_value(red.arg, red.dtype)

    def is_identity(u: UOp) -> bool:
        # -0.0 is not: a sum of them is +0.0, where the fold would give -0.0
        return u.op is Ops.CONST and u.arg == identity and not (isinstance(u.arg, float) and
                                                                math.copysign(1.0, u.arg) < 0)

    if not is_identity(z):
        return None
    terms = _conjuncts(cond)
    while v.op is Ops.WHERE and is_identity(v.src[2]):  # where(a, where(b, v, z), z) is where(a and b, v, z)
        terms += _conjuncts(v.src[0])
        v = v.src[1]
    for r in ranges:
        for i, term in enumerate(terms):
            rest = terms[:i] + terms[i + 1:]
            pos = _match_position(term, r, rest)
            if pos is None:
                continue
            n = r.src[0]
            in_range = pos.lt(0).ne(True).logical_and(pos.lt(n))
            gated = gate_loads(_and_all([in_range, *rest]).where(v, z), r, in_range)
            folded = gated.substitute({r: _clamped(pos, n)})
            others = tuple(o for o in ranges if o is not r)
            return UOp(Ops.REDUCE, red.dtype, (folded, *others), red.arg) if others else folded
    return None


#: the rewrite table: one rule, on every REDUCE (run with the index simplifier, see lowerer.lower_kernel)
gather_fold = PatternMatcher([
    (UPat(Ops.REDUCE, name="red"), fold_gather),
])

__all__ = ["fold_gather", "gather_fold"]
