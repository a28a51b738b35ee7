"""After the opts: turn the special RANGE kinds into plain IR the linearizer and renderers know.

* UNROLL ranges: a REDUCE over (loops..., u) of size k becomes k REDUCEs over (loops...), one per value
  of u, combined with the reduction's op. The linearizer runs REDUCEs over the same loops in one loop, so
  this is one loop with k independent accumulators (ILP, and SIMD across them).
* UPCAST ranges: every STORE that depends on one is copied once per value (k stores of k neighbouring
  outputs); their reductions share loops and loads the same way.
* a GROUP range (GROUP opt): the reduction is split into a per-work-item partial REDUCE, a store of the
  partial into local memory (DEFINE_LOCAL), a BARRIER, and a REDUCE over the k partials read back; only
  lane 0 stores the result (STORE with a third source, its gate).
"""

from __future__ import annotations

import itertools

from tinygrad.codegen.lowerer import IDX
from tinygrad.codegen.opt.actions import OptState, kernel_simplifier, simplify_kernel
from tinygrad.dtype import dtypes
from tinygrad.uop.ops import AxisKind, Ops, RangeArg, UOp
from tinygrad.uop.rewrite import Rewriter


def _values(ranges: list[UOp]) -> list[dict[UOp, UOp]]:
    """Every assignment of constants to `ranges` (row-major: the last range varies fastest)."""
    values = [[UOp.const(IDX, v) for v in range(int(r.src[0].arg))] for r in ranges]
    return [dict(zip(ranges, combo)) for combo in itertools.product(*values)]


def expand_unrolls(sink: UOp) -> UOp:
    mapping: dict[UOp, UOp] = {}
    for red in sink.toposort():
        if red.op is not Ops.REDUCE:
            continue
        unrolled = [r for r in red.src[1:] if r.arg.kind is AxisKind.UNROLL]
        if not unrolled:
            continue
        loops = tuple(r for r in red.src[1:] if r.arg.kind is not AxisKind.UNROLL)
        parts = [red.src[0].substitute(m) for m in _values(unrolled)]
        if loops:
            parts = [UOp(Ops.REDUCE, red.dtype, (p, *loops), red.arg) for p in parts]
        mapping[red] = _combine(red.arg, parts)
    # nested reductions were expanded from the inside out by the toposort order; substitute applies all at once
    return sink.substitute(mapping) if mapping else sink


def _combine(op: Ops, parts: list[UOp]) -> UOp:
    """A balanced tree of `op` over parts: log depth keeps the combine short and rounding spread evenly."""
    while len(parts) > 1:
        parts = [parts[i].alu(op, parts[i + 1]) if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
    return parts[0]


def expand_upcasts(sink: UOp, simplifier: Rewriter) -> UOp:
    """Each store copied once per value of its UPCAST ranges, every copy simplified (by `simplifier`) as it is made:
    `simplify_kernel` of the whole expanded sink through the same memo then finds the copies done."""
    stores: list[UOp] = []
    for st in sink.src:
        # the first upcast applied (the heuristics' SIMD axis) varies fastest: neighbouring copies are then
        # neighbouring addresses, which is what a C compiler's SLP vectoriser packs into one register
        upcast = sorted((r for r in st.toposort() if r.op is Ops.RANGE and r.arg.kind is AxisKind.UPCAST),
                        key=lambda r: -r.arg.axis)
        if upcast:
            stores.extend(_substitute_each(st, upcast, simplifier))
        else:
            stores.append(st)
    return sink.replace(src=tuple(stores))


def _substitute_each(root: UOp, ranges: list[UOp], simplifier: Rewriter) -> list[UOp]:
    """`simplifier.rewrite(root.substitute(m))` for every m of `_values(ranges)`, rebuilding only the nodes that
    depend on the ranges: a register tile makes hundreds of copies of a store, and a walk of the whole store per copy
    repeats the work on every node that no copy changes. Each rebuilt node is simplified as soon as it is made, from
    simplified sources: the simplifier's result for a node depends on the node alone, so this is the simplified
    substitution, without first making every unsimplified copy."""
    depends: list[UOp] = []  # in topological order
    dependent = set(ranges)
    for node in root.toposort():
        if node not in dependent and any(s in dependent for s in node.src):
            dependent.add(node)
            depends.append(node)
    if root not in dependent:  # a store that does not read the ranges: the same store every time
        return [root] * len(_values(ranges))
    # the fields of each node to rebuild, read once rather than once per copy
    plan = [(node, node.op, node.dtype, node.src, node.arg) for node in depends]
    simplify, simplified = simplifier.walk, simplifier.done.get
    copies = []
    for mapping in _values(ranges):
        new = dict(mapping)
        get = new.get
        for node, op, dtype, src, arg in plan:
            # neighbouring copies often simplify to nodes made already (an index that does not move with this axis)
            copy = UOp(op, dtype, tuple([get(s, s) for s in src]), arg)
            new[node] = simplify(copy) if (hit := simplified(copy)) is None else hit
        copies.append(new[root])
    return copies


def lower_group(state: OptState) -> UOp:
    """The GROUP reduction through local memory (see the module docstring). Needs exactly one STORE and one
    REDUCE; `apply_opt` checked that."""
    sink = state.sink
    lane = next(r for r in sink.toposort() if r.op is Ops.RANGE and r.arg.kind is AxisKind.GROUP)
    red = next(u for u in sink.toposort() if u.op is Ops.REDUCE)
    loops = red.src[1:]
    partial = UOp(Ops.REDUCE, red.dtype, (red.src[0], *loops), red.arg) if loops else red.src[0]
    # the slot of this work-item in the group's scratch: its local id in each LOCAL dimension, then the lane
    local_of = dict(state.local_sizes)
    slot: UOp = UOp.const(IDX, 0)
    for g in sorted((r for r in sink.toposort() if r.op is Ops.RANGE and r.arg.kind is AxisKind.GLOBAL),
                    key=lambda r: r.arg.axis):
        if (ls := local_of.get(g.arg.axis, 1)) > 1:
            slot = slot * UOp.const(IDX, ls) + g % UOp.const(IDX, ls)
    slot = slot * UOp.const(IDX, state.group_size)
    scratch = UOp(Ops.DEFINE_LOCAL, red.dtype, (), (0, state.work_group_size()))
    write = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, red.dtype, (scratch, slot + lane)), partial))
    barrier = UOp(Ops.BARRIER, dtypes.void, (write,))
    other = UOp(Ops.RANGE, IDX, (UOp.const(IDX, state.group_size),), RangeArg(state.next_id, AxisKind.REDUCE))
    read = UOp(Ops.LOAD, red.dtype, (UOp(Ops.INDEX, red.dtype, (scratch, slot + other)), barrier))
    total = UOp(Ops.REDUCE, red.dtype, (read, other), red.arg)
    (store,) = sink.src
    store = store.substitute({red: total})
    gated = store.replace(src=(*store.src[:2], lane.eq(UOp.const(IDX, 0))))
    return sink.replace(src=(gated,))


def expand_kernel(state: OptState) -> UOp:
    """The optimised kernel as a plain lowered kernel: only GLOBAL, GROUP and REDUCE ranges remain."""
    sink = expand_unrolls(state.sink)
    if state.group_size:
        sink = lower_group(OptState(sink, state.applied, state.local_sizes, state.group_size, state.next_id))
    if sink is state.sink and not any(r.op is Ops.RANGE and r.arg.kind is AxisKind.UPCAST for r in sink.toposort()):
        return sink  # nothing to expand: the kernel as it is
    simplifier = kernel_simplifier()
    return simplify_kernel(expand_upcasts(sink, simplifier), simplifier)


__all__ = ["expand_kernel"]
