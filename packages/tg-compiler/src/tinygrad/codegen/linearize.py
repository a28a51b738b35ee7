"""The linearizer: order a lowered kernel graph into a straight-line program with explicit loops.

Output ranges are opened first (outermost is the first axis). Each REDUCE becomes an accumulator:

    DEFINE_ACC(identity); RANGE r ... ; ASSIGN(acc, acc <op> value); END r

and whatever its value needs that does not depend on its loop ranges is emitted before the loop
(loop-invariant code motion). Every UOp is emitted once, after its sources.
"""

from __future__ import annotations

from tinygrad.codegen.lowerer import reduce_identity
from tinygrad.dtype import dtypes
from tinygrad.uop.ops import Ops, UOp


class _Linearizer:
    def __init__(self) -> None:
        self.program: list[UOp] = []
        self.emitted: dict[UOp, UOp] = {}
        self.deps: dict[UOp, frozenset[UOp]] = {}
        self.acc_count = 0

    def range_deps(self, u: UOp) -> frozenset[UOp]:
        """The loop ranges u's value depends on (a REDUCE does not depend on the ranges it closes)."""
        if (hit := self.deps.get(u)) is not None:
            return hit
        # iterative post-order so long chains do not recurse deeply
        for node in u.toposort():
            if node in self.deps:
                continue
            if node.op is Ops.RANGE:
                out = frozenset((node,))
            else:
                out = frozenset().union(*(self.deps[s] for s in node.src)) if node.src else frozenset()
                if node.op is Ops.REDUCE:
                    out = out - frozenset(node.src[1:])
            self.deps[node] = out
        return self.deps[u]

    def push(self, u: UOp) -> UOp:
        self.program.append(u)
        return u

    def emit(self, u: UOp) -> UOp:
        if (hit := self.emitted.get(u)) is not None:
            return hit
        if u.op is Ops.REDUCE:
            out = self.emit_reduce(u)
        elif u.op is Ops.RANGE:
            raise RuntimeError(f"range {u.arg} used outside of its loop")
        else:
            new_src = tuple(self.emit(s) for s in u.src)
            out = self.push(u if new_src == u.src else u.replace(src=new_src))
        self.emitted[u] = out
        return out

    def hoist(self, u: UOp, ranges: frozenset[UOp]) -> None:
        """Emit every maximal subexpression of u that does not depend on `ranges`."""
        stack = [u]
        seen: set[UOp] = set()
        while stack:
            node = stack.pop()
            if node in seen or node in self.emitted:
                continue
            seen.add(node)
            if node.op is Ops.RANGE:
                continue
            if not (self.range_deps(node) & ranges):
                if node.op is not Ops.CONST:
                    self.emit(node)
            else:
                stack.extend(node.src)

    def emit_reduce(self, u: UOp) -> UOp:
        value, ranges = u.src[0], u.src[1:]
        self.hoist(value, frozenset(ranges))
        acc = self.push(UOp(Ops.DEFINE_ACC, u.dtype, (self.emit(reduce_identity(u.arg, u.dtype)),), self.acc_count))
        self.acc_count += 1
        for r in ranges:
            self.emitted[r] = self.push(r.replace(src=(self.emit(r.src[0]),)))
        v = self.emit(value)
        self.push(UOp(Ops.ASSIGN, u.dtype, (acc, self.push(UOp(u.arg, u.dtype, (acc, v))))))
        for r in reversed(ranges):
            self.push(UOp(Ops.END, dtypes.void, (self.emitted[r],)))
            # values computed inside the loop are gone once it closes
            for k in [k for k, e in self.emitted.items() if r in self.range_deps(k) and k is not r]:
                del self.emitted[k]
            del self.emitted[r]
        return acc


def linearize(sink: UOp) -> list[UOp]:
    lin = _Linearizer()
    global_ranges = sorted({r for r in sink.toposort() if r.op is Ops.RANGE and r.arg[1] == "global"},
                           key=lambda r: r.arg[0])
    for r in global_ranges:
        lin.emitted[r] = lin.push(r.replace(src=(lin.emit(r.src[0]),)))
    for store in sink.src:
        lin.emit(store)
    for r in reversed(global_ranges):
        lin.push(UOp(Ops.END, dtypes.void, (lin.emitted[r],)))
    return lin.program
