"""The optimisation actions and how each one rewrites a lowered kernel's loop RANGEs.

A lowered kernel (see `lowerer.py`) is a SINK of STOREs whose indices and values are arithmetic over
RANGE nodes: one per output dimension (kind GLOBAL) and one per reduced dimension (kind REDUCE).
An optimisation never changes *what* is computed, only how the iteration space is cut up:

* ``UPCAST axis k``  split a global axis r (size n, k must divide n) into an outer global range of n/k and an
  inner range of kind UPCAST of size k: ``r = outer*k + inner``. Upcast ranges are unrolled into k copies of
  the computation per work-item (k outputs held in registers), so neighbouring outputs share their loads.
* ``UNROLL axis k``  the same for a reduce axis; the inner range has kind UNROLL. Each unrolled index gets its
  own accumulator in the same loop, combined after it: more independent work per iteration.
* ``LOCAL axis k``   (GPU only) the global axis runs in work-groups of k work-items along its launch dimension.
  The range is not split: the work-item id *is* the index, and the launch rounds the global size up to a
  multiple of k; the guard every work-item range already has (``if (idx < n)``) masks the tail.
* ``GROUP axis k``   (GPU with local memory only) split a reduce axis r of size n across k work-items of a
  group: ``r = inner*k + lane`` with a GROUP range ``lane`` (a work-item id) and a reduce loop ``inner`` over
  ceil(n/k) (indices past n contribute the reduction's identity). Each work-item reduces its share, writes the
  partial result to local memory, waits at a barrier, and reads all k partials back to combine them.

* ``TILE axis k``    (loop targets only) split a global axis r (size n, k divides n) into two loops: the outer
  one (n/k, keeps r's axis id and place) and an inner global loop of k that opens inside every other global
  loop. With SWAP this blocks a loop nest for the caches: TILE the column-tile axis of a big matmul, then SWAP
  its outer part outermost, and one block of B's columns is reused from L2 by every row of A.
* ``TC axis i``      (targets with tensor cores only; the first opt) compute a matmul-shaped reduction with tensor
  core i of the renderer, a warp per output tile: a new output axis of the warp's lanes, run as one work-group, the
  `axis`-th choice of (m, n, k) axes split by the tile. See `tensor_cores.py`.
* ``SWAP axis b``    exchange the loop order of global axes `axis` and `b` (`amount` names the other axis). Loops
  open in axis-id order, so this swaps the two ranges' ids. For a big matmul it puts the loop over column
  tiles outside the loop over row tiles: one strip of B then stays in cache while all of A streams past.

`axis` counts the kernel's splittable axes in order: the global axes (outermost first), then the reduce axes.
An axis keeps its number when it is split (the outer part keeps the RANGE's axis id); only an axis split by
its whole size (UPCAST 3 of a size-3 axis) leaves no outer part, and the axes after it move down by one. Opt
lists are therefore read in order, each against the kernel as the opts before it left it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from tinygrad.codegen.gates import gate_loads
from tinygrad.codegen.lowerer import IDX
from tinygrad.codegen.work_items import work_item_ranges as choose_work_items
from tinygrad.dtype import dtypes, is_emulated_float
from tinygrad.renderer import Renderer
from tinygrad.uop.ops import AxisKind, Ops, RangeArg, UOp
from tinygrad.uop.reduce_identity import reduce_identity
from tinygrad.uop.rewrite import PatternMatcher, Rewriter, UPat, graph_rewrite
from tinygrad.uop.symbolic import symbolic


class OptOps(enum.Enum):
    UPCAST = enum.auto()
    UNROLL = enum.auto()
    LOCAL = enum.auto()
    GROUP = enum.auto()
    SWAP = enum.auto()
    TILE = enum.auto()
    TC = enum.auto()


@dataclass(frozen=True)
class Opt:
    op: OptOps
    axis: int
    amount: int

    def __str__(self) -> str:
        return f"{self.op.name}({self.axis},{self.amount})"


class OptError(ValueError):
    """An opt that does not apply to this kernel (wrong axis kind, amount does not divide, target lacks it)."""


#: most accumulators/outputs one work-item may hold after upcasting and unrolling; beyond this the expanded
#: program spills registers and compiles slowly
MAX_UPCAST = 512


@dataclass(frozen=True)
class OptState:
    """A lowered kernel with the opts applied so far.

    `local_sizes` maps the axis id of a global RANGE to its work-group size (LOCAL); `group` is the
    axis id of the GROUP lane range, if any, and `group_size` its size; `tc_lane` the axis id of the lanes of a
    TC opt's warp (-1: none), which no later opt may split or move."""

    sink: UOp
    applied: tuple[Opt, ...] = ()
    local_sizes: tuple[tuple[int, int], ...] = ()
    group_size: int = 0
    next_id: int = field(default=0)
    tc_lane: int = -1

    @staticmethod
    def from_lowered(sink: UOp) -> OptState:
        ids = [r.arg.axis for r in sink.toposort() if r.op is Ops.RANGE]
        return OptState(sink, next_id=max(ids, default=-1) + 1)

    def ranges(self, *kinds: AxisKind) -> list[UOp]:
        return sorted((u for u in self.sink.toposort() if u.op is Ops.RANGE and u.arg.kind in kinds),
                      key=lambda r: r.arg.axis)

    @property
    def axes(self) -> list[UOp]:
        """The splittable axes in Opt numbering: global ranges, then reduce ranges."""
        return self.ranges(AxisKind.GLOBAL) + self.ranges(AxisKind.REDUCE)

    def upcast_size(self) -> int:
        size = 1
        for r in self.ranges(AxisKind.UPCAST, AxisKind.UNROLL):
            size *= int(r.src[0].arg)
        return size

    def local_size_of(self, r: UOp) -> int:
        return dict(self.local_sizes).get(r.arg.axis, 1)

    def work_group_size(self) -> int:
        size = max(self.group_size, 1)
        for _, ls in self.local_sizes:
            size *= ls
        return size


def const_size(r: UOp) -> int | None:
    """r's size where it is a constant (None: symbolic)."""
    return int(r.src[0].arg) if r.src[0].op is Ops.CONST else None


def _single_nest(sink: UOp) -> bool:
    """Opts need one loop nest: every store over the same global ranges (stores of different shapes each get
    their own nest, and a work-group launch has one shape)."""
    shapes = {tuple(r for r in st.toposort() if r.op is Ops.RANGE and r.arg.kind is AxisKind.GLOBAL) for st in sink.src}
    return len(shapes) == 1


def split_range(state: OptState, r: UOp, amount: int, inner_kind: AxisKind) -> tuple[OptState, UOp, UOp | None]:
    """Replace r (size n, amount divides n) by outer*amount + inner; returns (state, inner, outer or None when
    the outer range would have size 1)."""
    n = const_size(r)
    assert n is not None and n % amount == 0
    inner = UOp(Ops.RANGE, IDX, (UOp.const(IDX, amount),), RangeArg(state.next_id, inner_kind))
    outer = r.replace(src=(UOp.const(IDX, n // amount),)) if n != amount else None
    new_index = outer * UOp.const(IDX, amount) + inner if outer is not None else inner
    sink = _substitute_range(state.sink, r, new_index, (outer, inner) if outer is not None else (inner,))
    return replace(state, sink=sink, next_id=state.next_id + 1), inner, outer


def _substitute_range(sink: UOp, r: UOp, value: UOp, reduce_ranges: tuple[UOp, ...]) -> UOp:
    """Substitute r by `value` everywhere; a REDUCE that closed r closes `reduce_ranges` instead."""
    out: dict[UOp, UOp] = {}
    for node in sink.toposort():
        if node is r:
            out[node] = value
            continue
        if node.op is Ops.REDUCE and r in node.src[1:]:
            new_ranges: list[UOp] = []
            for s in node.src[1:]:
                new_ranges.extend(reduce_ranges if s is r else (out[s],))
            out[node] = node.replace(src=(out[node.src[0]], *new_ranges))
            continue
        new_src = tuple(out[s] for s in node.src)
        out[node] = node if new_src == node.src else node.replace(src=new_src)
    return out[sink]


#: how an opt rewrites a kernel, or raises OptError saying why it does not apply
OptRule = Callable[[OptState, Opt, Renderer], OptState]


def apply_opt(state: OptState, opt: Opt, renderer: Renderer) -> OptState:
    """One opt applied to a kernel (its rule in `OPT_RULES`), or OptError saying why it does not apply."""
    if not _single_nest(state.sink):
        raise OptError("kernels with stores of different shapes are not optimised")
    if (rule := OPT_RULES.get(opt.op)) is None:
        raise OptError(f"{opt}: no rule for {opt.op.name} is registered (TC's is registered by importing "
                       "tinygrad.codegen.opt.tensor_cores, which tinygrad.codegen.opt does)")
    return rule(state, opt, renderer)


def register_opt_rule(op: OptOps, rule: OptRule) -> None:
    """Make `rule` the one `apply_opt` uses for `op` (tensor_cores.py registers TC's this way)."""
    OPT_RULES[op] = rule


def _axis(state: OptState, opt: Opt) -> tuple[UOp, int]:
    """The axis an opt splits or moves, with its (constant) size; OptError where it cannot be."""
    axes = state.axes
    if not 0 <= opt.axis < len(axes):
        raise OptError(f"{opt}: the kernel has {len(axes)} axes")
    r = axes[opt.axis]
    n = const_size(r)
    if n is None:
        raise OptError(f"{opt}: axis {opt.axis} has a symbolic size")
    if r.arg.axis == state.tc_lane or (opt.op is OptOps.SWAP and axes[opt.amount:opt.amount + 1] and \
            axes[opt.amount].arg.axis == state.tc_lane):
        raise OptError(f"{opt}: axis {opt.axis} holds the lanes of a tensor core's warp")
    if opt.op is not OptOps.SWAP and opt.amount < 2:
        raise OptError(f"{opt}: the amount must be at least 2")
    return r, n


def _upcast_or_unroll(state: OptState, opt: Opt, renderer: Renderer) -> OptState:
    r, n = _axis(state, opt)
    want = AxisKind.GLOBAL if opt.op is OptOps.UPCAST else AxisKind.REDUCE
    if r.arg.kind is not want:
        raise OptError(f"{opt}: {opt.op.name} applies to {want} axes, axis {opt.axis} is {r.arg.kind}")
    if n % opt.amount:
        raise OptError(f"{opt}: {opt.amount} does not divide the axis size {n}")
    if state.group_size:
        raise OptError(f"{opt}: upcasting a grouped reduction is not supported")
    if state.upcast_size() * opt.amount > MAX_UPCAST:
        raise OptError(f"{opt}: more than {MAX_UPCAST} values per work-item")
    if opt.op is OptOps.UPCAST and state.local_size_of(r) > 1:
        raise OptError(f"{opt}: axis {opt.axis} already runs in work-groups; upcast before LOCAL")
    new, _, _ = split_range(state, r, opt.amount, AxisKind.UPCAST if opt.op is OptOps.UPCAST else AxisKind.UNROLL)
    return replace(new, applied=(*state.applied, opt))


def _needs_work_groups(opt: Opt, renderer: Renderer) -> None:
    if not renderer.has_local:
        raise OptError(f"{opt}: {type(renderer).__name__} has no work-groups")


def _local(state: OptState, opt: Opt, renderer: Renderer) -> OptState:
    r, n = _axis(state, opt)
    _needs_work_groups(opt, renderer)
    if r.arg.kind is not AxisKind.GLOBAL:
        raise OptError(f"{opt}: LOCAL applies to global axes")
    if state.local_size_of(r) > 1:
        raise OptError(f"{opt}: axis {opt.axis} already has a work-group size")
    if r not in work_item_ranges(state, renderer):
        raise OptError(f"{opt}: axis {opt.axis} runs as a loop, not as work-items")
    if state.group_size and n % opt.amount:
        raise OptError(f"{opt}: with GROUP every work-group must be full; {opt.amount} must divide {n}")
    _check_group_limits(state, renderer, opt, state.work_group_size() * opt.amount, r_dim_size=opt.amount, r=r)
    return replace(state, local_sizes=(*state.local_sizes, (r.arg.axis, opt.amount)), applied=(*state.applied, opt))


def _check_group(state: OptState, opt: Opt, r: UOp, renderer: Renderer) -> UOp:
    """OptError unless GROUP applies to axis r of this kernel; returns the kernel's REDUCE."""
    if r.arg.kind is not AxisKind.REDUCE:
        raise OptError(f"{opt}: GROUP applies to reduce axes")
    if not renderer.local_mem_max:
        raise OptError(f"{opt}: {type(renderer).__name__} has no local memory")
    if state.group_size:
        raise OptError(f"{opt}: only one GROUP per kernel")
    if state.ranges(AxisKind.UPCAST):
        raise OptError(f"{opt}: GROUP with upcast outputs is not supported")
    if state.ranges(AxisKind.UNROLL):
        # the partials of unrolled accumulators would be combined before the group's, which is not implemented
        # (it summed wrongly when tried)
        raise OptError(f"{opt}: GROUP of an unrolled reduction is not supported")
    reduces = [u for u in state.sink.toposort() if u.op is Ops.REDUCE]
    if len(reduces) != 1 or len(state.sink.src) != 1:
        raise OptError(f"{opt}: GROUP needs a kernel with one store and one reduction")
    for g in state.ranges(AxisKind.GLOBAL):
        size = const_size(g)
        if size is None or size % state.local_size_of(g):
            raise OptError(f"{opt}: with GROUP every work-group must be full (symbolic or partial work-groups)")
    if len(work_item_ranges(state, renderer)) + 1 > len(renderer.local_max or (0, 0, 0)) or \
            len(work_item_ranges(state, renderer)) != len(state.ranges(AxisKind.GLOBAL)):
        raise OptError(f"{opt}: no launch dimension left for the group")
    if reduces[0].dtype.scalar in (dtypes.float16, dtypes.bool) or is_emulated_float(reduces[0].dtype):
        # these are storage formats on some targets (emulated); the scratch array holds computed values only
        raise OptError(f"{opt}: GROUP does not reduce {reduces[0].dtype.scalar.name}")
    wg = state.work_group_size() * opt.amount
    _check_group_limits(state, renderer, opt, wg, r_dim_size=opt.amount, r=None)
    if wg * reduces[0].dtype.itemsize > renderer.local_mem_max:
        raise OptError(f"{opt}: {wg} partial results do not fit in {renderer.local_mem_max} bytes of local memory")
    return reduces[0]


def _group(state: OptState, opt: Opt, renderer: Renderer) -> OptState:
    r, n = _axis(state, opt)
    _needs_work_groups(opt, renderer)
    _check_group(state, opt, r, renderer)
    lane = UOp(Ops.RANGE, IDX, (UOp.const(IDX, opt.amount),), RangeArg(state.next_id, AxisKind.GROUP))
    steps = -(-n // opt.amount)
    inner = r.replace(src=(UOp.const(IDX, steps),))
    index = inner * UOp.const(IDX, opt.amount) + lane
    sink = _substitute_range(state.sink, r, index, (inner,) if steps > 1 else ())
    if steps == 1:  # no loop left: the lane is the index
        sink = sink.substitute({inner: UOp.const(IDX, 0)})
    if n % opt.amount:
        # past the end of the axis, a lane contributes the identity of the reduction
        red = next(u for u in sink.toposort() if u.op is Ops.REDUCE)
        guarded = index.substitute({inner: UOp.const(IDX, 0)} if steps == 1 else {}).lt(UOp.const(IDX, n))
        # the loads of those lanes would read past the axis (a fault on devices that check): gate them too
        value = guarded.where(gate_loads(red.src[0], lane, guarded), reduce_identity(red.arg, red.dtype))
        sink = sink.substitute({red: red.replace(src=(value, *red.src[1:]))})
    return replace(state, sink=sink, group_size=opt.amount, next_id=state.next_id + 1,
                   applied=(*state.applied, opt))


def _swap(state: OptState, opt: Opt, renderer: Renderer) -> OptState:
    _axis(state, opt)
    axes = state.axes
    if not 0 <= opt.amount < len(axes) or opt.amount == opt.axis:
        raise OptError(f"{opt}: the other axis must be another of the kernel's {len(axes)} axes")
    a, b = axes[opt.axis], axes[opt.amount]
    if a.arg.kind is not AxisKind.GLOBAL or b.arg.kind is not AxisKind.GLOBAL:
        raise OptError(f"{opt}: SWAP exchanges two global axes")
    if state.local_sizes or state.group_size:
        raise OptError(f"{opt}: swap loops before choosing work-groups")
    sink = state.sink.substitute({a: a.replace(arg=RangeArg(b.arg.axis, AxisKind.GLOBAL)),
                                  b: b.replace(arg=RangeArg(a.arg.axis, AxisKind.GLOBAL))})
    return replace(state, sink=sink, applied=(*state.applied, opt))


def _tile(state: OptState, opt: Opt, renderer: Renderer) -> OptState:
    r, n = _axis(state, opt)
    if renderer.has_local:
        raise OptError(f"{opt}: TILE is for loop targets; on {type(renderer).__name__} global axes are work-items")
    if r.arg.kind is not AxisKind.GLOBAL:
        raise OptError(f"{opt}: TILE applies to global axes")
    if n % opt.amount or not 1 < opt.amount < n:
        raise OptError(f"{opt}: {opt.amount} must divide the axis size {n} and leave an outer loop")
    new, _, _ = split_range(state, r, opt.amount, AxisKind.GLOBAL)
    return replace(new, applied=(*state.applied, opt))


def _check_group_limits(state: OptState, renderer: Renderer, opt: Opt, wg: int, r_dim_size: int,
                        r: UOp | None) -> None:
    if renderer.max_work_group_size and wg > renderer.max_work_group_size:
        raise OptError(f"{opt}: a work-group of {wg} exceeds the device's {renderer.max_work_group_size}")
    if renderer.local_max and r is not None:
        dim = work_item_ranges(state, renderer).index(r)
        if r_dim_size > renderer.local_max[dim]:
            raise OptError(f"{opt}: {r_dim_size} exceeds the device's work-group size {renderer.local_max[dim]} "
                           f"in dimension {dim}")


def work_item_ranges(state: OptState, renderer: Renderer) -> list[UOp]:
    """The ranges the work-item mapping (`codegen/work_items.py`) will run as work-items (launch dimension 0
    first), chosen among the kernel's output and group ranges in loop order, as the linearizer will open them."""
    return choose_work_items(state.ranges(AxisKind.GLOBAL, AxisKind.GROUP), renderer)


def _is_index(x: UOp) -> bool:
    return x.dtype.is_int


# Constants outermost in index sums: (x+c)+y -> (x+y)+c. Copies of an access made by an UPCAST then share
# x+y and differ in the last constant only, which C compilers under -fwrapv need to see that the addresses
# are neighbours (they cannot reassociate wrapping arithmetic themselves) and to emit vector loads.
constants_last = PatternMatcher([
    (UPat(Ops.ADD, src=(UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c"))), UPat.var("y"))),
     lambda x, c, y: (x + y) + c if _is_index(x) and y.op is not Ops.CONST else None),
    (UPat(Ops.ADD, src=(UPat.var("y"), UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c"))))),
     lambda x, c, y: (y + x) + c if _is_index(x) and y.op is not Ops.CONST else None),
])


def simplify_kernel(sink: UOp, rewriter: Rewriter | None = None) -> UOp:
    """The kernel simplified; with a `kernel_simplifier()`, through its memo (what it simplified already is reused)."""
    return graph_rewrite(sink, symbolic + constants_last) if rewriter is None else rewriter.rewrite(sink)


def kernel_simplifier() -> Rewriter:
    """A memo of `simplify_kernel`'s rewrite, for a pass that simplifies the parts of a kernel as it builds them."""
    return Rewriter(symbolic + constants_last)


#: the rule of each opt (`apply_opt`); TC's is registered by tensor_cores.py, which builds on this module
OPT_RULES: dict[OptOps, OptRule] = {
    OptOps.UPCAST: _upcast_or_unroll, OptOps.UNROLL: _upcast_or_unroll, OptOps.LOCAL: _local, OptOps.GROUP: _group,
    OptOps.SWAP: _swap, OptOps.TILE: _tile,
}


__all__ = ["MAX_UPCAST", "OPT_RULES", "Opt", "OptError", "OptOps", "OptRule", "OptState", "apply_opt", "const_size",
           "kernel_simplifier", "register_opt_rule", "simplify_kernel", "work_item_ranges"]
