"""The linearizer: order a lowered kernel graph into a straight-line program with explicit loops.

Output ranges are opened first (outermost is the first axis). Each REDUCE becomes an accumulator:

    DEFINE_ACC(identity); RANGE r ... ; ASSIGN(acc, acc <op> value); END r

and whatever its value needs that does not depend on its loop ranges is emitted before the loop
(loop-invariant code motion). Every UOp is emitted once, after its sources.

REDUCEs over the same ranges (the copies an UPCAST or UNROLL made, see `opt/expand.py`) share one loop:
one accumulator each, their loads emitted once. A GROUP range (GROUP opt) is a work-item id and is opened
with the output ranges.
"""

from __future__ import annotations

from collections.abc import Sequence

from tinygrad.dtype import dtypes
from tinygrad.uop.ops import AxisKind, Ops, UOp, post_order
from tinygrad.uop.reduce_identity import reduce_identity


class _Linearizer:
    def __init__(self) -> None:
        self.program: list[UOp] = []
        self.emitted: dict[UOp, UOp] = {}
        self.deps: dict[UOp, frozenset[UOp]] = {}
        self.acc_count = 0
        #: REDUCEs of the nest being emitted, by the ranges they close (candidates to share a loop)
        self.siblings: dict[tuple[UOp, ...], list[UOp]] = {}
        self.open: set[UOp] = set()
        #: per node, the RANGEs and REDUCEs of its toposort, in toposort order (see `index`)
        self.marks: dict[UOp, tuple[UOp, ...]] = {}
        self._marks_set: dict[UOp, frozenset[UOp]] = {}

    def index(self, roots: tuple[UOp, ...]) -> None:
        """Fill `marks` for everything under roots, sources first: a toposort per store or per pair of reductions
        (what they answer) copies the whole graph each time, and kernels have many of both after an UPCAST. A node's
        toposort lists its first source's toposort, then what the next source's adds, then the node, so its marks
        are its sources' marks in that order without repeats, then itself if it is one. The same walk fills
        `range_deps`'s memo: the hoisting and the loop closing ask it of nearly every node."""
        marks, deps = self.marks, self.deps
        for node in post_order(roots, skip=marks.__contains__):
            src = node.src
            out: tuple[UOp, ...] = marks[src[0]] if src else ()
            dep = deps[src[0]] if src else _NO_RANGES
            for s in src[1:]:
                more = marks[s]
                if more and more is not out:
                    out = more if not out else tuple(dict.fromkeys(out + more))
                if (other := deps[s]) and other is not dep:
                    dep = dep | other if dep else other
            if node.op is Ops.REDUCE or node.op is Ops.RANGE:
                out = (*out, node)
            marks[node] = out
            # range_deps: a RANGE depends on itself, a REDUCE not on the ranges it closes
            if node.op is Ops.RANGE:
                dep = frozenset((node,))
            elif node.op is Ops.REDUCE:
                dep = dep - frozenset(src[1:])
            deps.setdefault(node, dep)

    def reduces_in(self, u: UOp) -> frozenset[UOp]:
        """The REDUCEs of u's toposort (u included)."""
        if (hit := self._marks_set.get(u)) is None:
            hit = self._marks_set[u] = frozenset(m for m in self.marks[u] if m.op is Ops.REDUCE)
        return hit

    def range_deps(self, u: UOp) -> frozenset[UOp]:
        """The loop ranges u's value depends on (a REDUCE does not depend on the ranges it closes)."""
        deps = self.deps
        if (hit := deps.get(u)) is not None:
            return hit
        # stops at nodes already known: a toposort per node would make this quadratic in the length of a chain
        for node in (u,) if all(s in deps for s in u.src) else post_order((u,), skip=deps.__contains__):
            if node.op is Ops.RANGE:
                out = frozenset((node,))
            else:
                out = frozenset().union(*(deps[s] for s in node.src)) if node.src else frozenset()
                if node.op is Ops.REDUCE:
                    out = out - frozenset(node.src[1:])
            deps[node] = out
        return deps[u]

    def push(self, u: UOp) -> UOp:
        self.program.append(u)
        return u

    def emit(self, u: UOp) -> UOp:
        """Emit u after its sources. A REDUCE is emitted whole where the walk meets it (its loop nest opens there), so
        the walk does not enter it."""
        emitted = self.emitted
        if (done := emitted.get(u)) is not None:
            return done
        if u.op is not Ops.REDUCE and u.op is not Ops.RANGE and all(s in emitted for s in u.src):
            # the walk below would list u alone: its sources are out already (constants, loop bounds, values)
            new_src = tuple([emitted[s] for s in u.src])
            done = emitted[u] = self.push(u if new_src == u.src else u.replace(src=new_src))
            return done
        for node in post_order((u,), children=lambda n: () if n.op in (Ops.REDUCE, Ops.RANGE) else n.src,
                               skip=self.emitted.__contains__):
            if node in self.emitted:  # emitted by a REDUCE's nest met earlier in this walk
                continue
            if node.op is Ops.REDUCE:
                # nests only as deep as the reductions do
                self.emitted[node] = self.emit_reduce(node)
            elif node.op is Ops.RANGE:
                raise RuntimeError(f"range {node.arg} used outside of its loop")
            else:
                new_src = tuple(self.emitted[s] if s in self.emitted else self.emit(s) for s in node.src)
                self.emitted[node] = self.push(node if new_src == node.src else node.replace(src=new_src))
        return self.emitted[u]

    def hoist(self, u: UOp, ranges: frozenset[UOp], walked: dict[UOp, None]) -> None:
        """Emit every maximal subexpression of u that does not depend on `ranges`. `walked` collects the nodes below
        that do depend on them: the reductions of one loop share most of their index arithmetic, and what lies under
        a node walked for an earlier one is emitted already, so their hoists skip it."""

        def depends(node: UOp) -> Sequence[UOp]:
            # below a node that depends on none of the ranges there is nothing left to look for; the last source
            # first, so that hoisted values come in the order the kernels have always listed them
            return node.src[::-1] if node.op is not Ops.RANGE and not self.range_deps(node) <= self.open else ()

        emitted = self.emitted
        for node in post_order((u,), children=depends, skip=lambda n: n in emitted or n in walked):
            # hoisted only where every loop it depends on is open: not past `ranges`, nor out of the loops of a
            # reduction nested in this one (which open later, inside)
            if self.range_deps(node) <= self.open:
                if node.op not in (Ops.RANGE, Ops.CONST):
                    self.emit(node)
            else:
                walked[node] = None

    def emit_reduce(self, u: UOp) -> UOp:
        ranges = u.src[1:]
        group = [u] + [x for x in self.siblings.get(ranges, []) if x is not u and x not in self.emitted and
                       self.range_deps(x) <= self.open and x not in self.reduces_in(u.src[0]) and
                       u not in self.reduces_in(x.src[0])]
        walked: dict[UOp, None] = {}
        for x in group:
            self.hoist(x.src[0], frozenset(ranges), walked)
        accs = []
        for x in group:
            accs.append(self.push(UOp(Ops.DEFINE_ACC, x.dtype, (self.emit(reduce_identity(x.arg, x.dtype)),),
                                      self.acc_count)))
            self.acc_count += 1
        for r in ranges:
            self.emitted[r] = self.push(r.replace(src=(self.emit(r.src[0]),)))
            self.open.add(r)
        values = [self.emit(x.src[0]) for x in group]
        for x, acc, v in zip(group, accs, values):
            self.push(UOp(Ops.ASSIGN, x.dtype, (acc, self.push(UOp(x.arg, x.dtype, (acc, v))))))
        for r in reversed(ranges):
            self.push(UOp(Ops.END, dtypes.void, (self.emitted[r],)))
            # values computed inside the loop are gone once it closes
            deps, range_deps = self.deps, self.range_deps
            for k in [k for k in self.emitted if r in (deps.get(k) or range_deps(k)) and k is not r]:
                del self.emitted[k]
            del self.emitted[r]
            self.open.discard(r)
        for x, acc in zip(group, accs):
            self.emitted[x] = acc
        return accs[0]


def linearize(sink: UOp) -> list[UOp]:
    lin = _Linearizer()
    # stores over the same output loops share one loop nest; stores of another shape get their own, in order
    nests: dict[tuple[UOp, ...], list[UOp]] = {}
    lin.index(sink.src)
    for store in sink.src:
        nest_kinds = (AxisKind.GLOBAL, AxisKind.GROUP)
        loops = tuple(sorted((r for r in lin.marks[store] if r.op is Ops.RANGE and r.arg.kind in nest_kinds),
                             key=lambda r: r.arg.axis))
        nests.setdefault(loops, []).append(store)
    for loops, stores in nests.items():
        start = len(lin.program)
        lin.siblings = {}
        for store in stores:
            for u in (m for m in lin.marks[store] if m.op is Ops.REDUCE):
                lin.siblings.setdefault(u.src[1:], []).append(u)
        for r in loops:
            lin.emitted[r] = lin.push(r.replace(src=(lin.emit(r.src[0]),)))
            lin.open.add(r)
        for store in stores:
            lin.emit(store)
        for r in reversed(loops):
            lin.push(UOp(Ops.END, dtypes.void, (lin.emitted[r],)))
            lin.open.discard(r)
        if len(nests) > 1:
            # whatever was computed inside this nest is out of scope in the next one, loop-invariant or not
            # (a renderer declares it inside the loop body); only names that are not declarations survive
            inside = set(lin.program[start:])
            for k in [k for k, e in lin.emitted.items() if e in inside and e.op not in GLOBAL_NAMES]:
                del lin.emitted[k]
    return lin.program


_NO_RANGES: frozenset[UOp] = frozenset()

#: UOps a renderer refers to by a name that is valid everywhere in the kernel (not a declared local)
GLOBAL_NAMES = frozenset({Ops.PARAM, Ops.CONST, Ops.DEFINE_VAR})
