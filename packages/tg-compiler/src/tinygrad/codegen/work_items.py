"""The work-item mapping: which loops of a linearized program a `has_local` target runs as work-items.

`map_work_items` rewrites the chosen RANGEs of the program into work-item ids:

    RANGE(bound) ... END          ->  SPECIAL gidx<d> ... (nothing to close)
    RANGE(bound) ... END          ->  SPECIAL gidx<d>; IF(gidx<d> < bound) ... ENDIF   (launch past the bound)

Dimension d's SPECIAL has the launch's global size in that dimension as its size, so the launch is read back
from the program (`global_size`) and renderers only print what they get. A launch is larger than the bound
when the bound is symbolic (it launches its largest value), when the work-group size does not divide it, or
when the runtime picks the work-group size itself and launches whole work-groups (`Renderer.launch_rounds_up`):
only then is the id guarded. A GROUP reduction's barrier must be reached by every work-item of a work-group,
and the GROUP opt only makes full work-groups, so its kernels get no guard.
"""

from __future__ import annotations

from tinygrad.dtype import dtypes
from tinygrad.renderer import Renderer
from tinygrad.uop.ops import AxisKind, Ops, UOp

#: name prefix of the SPECIAL holding the global work-item id of a launch dimension (`gidx0` is dimension 0)
GLOBAL_ID = "gidx"


def work_item_ranges(program: list[UOp], renderer: Renderer) -> list[UOp]:
    """The loop RANGEs a `has_local` target runs as work-items, launch dimension 0 first. With one loop nest:
    the GROUP lane if any, then the innermost output ranges, as many as the target has launch dimensions (3
    unless `local_max` says otherwise); outer output ranges stay loops. A program with several loop nests
    (stores of different shapes) runs as a single work-item: it has no ranges here. `program` may also be just
    the kernel's output and group ranges in the order the linearizer opens them (the opts ask before
    linearizing)."""
    ranges = [u for u in program if u.op is Ops.RANGE and u.arg.kind in (AxisKind.GLOBAL, AxisKind.GROUP)]
    first_end = next((i for i, u in enumerate(program) if u.op is Ops.END), len(program))
    if any(program.index(r) > first_end for r in ranges):
        return []
    dims = len(renderer.local_max) if renderer.local_max else 3
    group = [r for r in ranges if r.arg.kind is AxisKind.GROUP]
    outputs = [r for r in ranges if r.arg.kind is AxisKind.GLOBAL]
    return (group + list(reversed(outputs)))[:dims]


def global_size(program: list[UOp]) -> tuple[int, ...]:
    """The launch's global size per dimension (dimension 0 first), as the SPECIALs of the program hold it."""
    return tuple(s.arg.size for s in sorted((u for u in program if u.op is Ops.SPECIAL), key=lambda u: u.arg.dim))


def map_work_items(program: list[UOp], renderer: Renderer,
                   local_sizes: dict[int, int]) -> tuple[list[UOp], tuple[int, ...] | None]:
    """Rewrite the ranges `work_item_ranges` picks into SPECIALs (guarded by an IF where the launch passes the
    bound); returns the new program and the work-group size per launch dimension. `local_sizes` maps the axis
    of an output range to its work-group size (LOCAL opts); a GROUP lane's work-group is the whole lane. The
    work-group size is None, left to the runtime, when no opt asked for one."""
    chosen = work_item_ranges(program, renderer)
    lsize = tuple(int(r.src[0].vmax) if r.arg.kind is AxisKind.GROUP else local_sizes.get(r.arg.axis, 1)
                  for r in chosen)
    fixed = any(ls > 1 for ls in lsize)
    runtime_rounds = renderer.launch_rounds_up and not fixed
    # the launch size of each range's dimension, and the guard of the ranges whose launch passes the bound
    specials: dict[UOp, UOp] = {}
    guards: dict[UOp, bool] = {}
    for dim, (r, ls) in enumerate(zip(chosen, lsize)):
        bound = r.src[0]
        size = -(-int(bound.vmax) // ls) * ls  # a symbolic bound launches its largest value
        specials[r] = UOp(Ops.SPECIAL, r.dtype, (), (f"{GLOBAL_ID}{dim}", size))
        guards[r] = runtime_rounds or bound.op is not Ops.CONST or size != int(bound.arg)

    out: list[UOp] = []
    new: dict[UOp, UOp] = {}  # old UOp -> its rewritten copy (its sources rewritten)
    opened: dict[UOp, UOp] = {}  # guarded range -> its IF
    for u in program:
        if u in specials:
            new[u] = special = specials[u]
            out.append(special)
            if guards[u]:
                cond = UOp(Ops.CMPLT, dtypes.bool, (special, new.get(u.src[0], u.src[0])))
                opened[u] = UOp(Ops.IF, dtypes.void, (cond,))
                out += [cond, opened[u]]
            continue
        if u.op is Ops.END and u.src[0] in specials:
            if u.src[0] in opened:
                out.append(UOp(Ops.ENDIF, dtypes.void, (opened[u.src[0]],)))
            continue
        src = tuple(new.get(s, s) for s in u.src)
        new[u] = u if src == u.src else u.replace(src=src)
        out.append(new[u])
    return out, (lsize if fixed else None)


__all__ = ["GLOBAL_ID", "global_size", "map_work_items", "work_item_ranges"]
