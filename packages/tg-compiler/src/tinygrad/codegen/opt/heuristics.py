"""Hand-coded choice of opts: what a kernel gets when BEAM search is off.

The questions asked of a kernel are about its memory access: for each axis and each buffer access, the
stride of the index along that axis (0: the buffer is reused along the axis, 1: contiguous). The helpers that
answer them are public here, for the rules of every target.

A kernel of symbolic shape, or with stores of several shapes, runs as lowered. Every other kernel goes first to
its target's own tuning rules (`Renderer.opt_rules`, kept in the backend's package: the CPU's register tiles and
cache blocking are in tg-backend-cpu). A target without rules of its own gets the generic ones:

* GPU-style targets (`has_local`):
  - a matmul-shaped kernel on a target with tensor cores: the TC opt, a block of tiles per warp.
  - a big reduction to few outputs: GROUP it over up to 256 work-items that combine in local memory.
  - otherwise: work-groups (LOCAL) of up to 16x16 work-items over the two innermost launch dimensions (a launch
    of one dimension gets groups of the renderer's `flat_work_group`, 256 by default), and for matmul-like
    kernels a 4x4 UPCAST per work-item.
* loop targets: none; the kernel runs as lowered (an interpreter gains nothing from bigger loop bodies, and what
  a compiled loop target gains depends on its vector units, which its own rules describe).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from tinygrad.codegen.lowerer import IDX
from tinygrad.codegen.opt.actions import Opt, OptError, OptOps, OptState, apply_opt, const_size, work_item_ranges
from tinygrad.renderer import Renderer
from tinygrad.uop.ops import AxisKind, Ops, UOp
from tinygrad.uop.rewrite import Rewriter
from tinygrad.uop.symbolic import symbolic


def accesses(state: OptState) -> list[UOp]:
    """The kernel's buffer accesses (INDEX of a PARAM, loads and stores), in the order every per-access list of
    this module follows."""
    return [u for u in state.sink.toposort() if u.op is Ops.INDEX and u.src[0].op is Ops.PARAM]


def access_strides(state: OptState, r: UOp) -> list[int | None]:
    """For every access (`accesses`), the stride of its index along range r (None: not affine/unknown)."""
    return list(_access_strides(state.sink, r))


class _StrideMemo:
    """What the strides of one kernel share: a simplifier's memo (its accesses share most of their index arithmetic,
    and a simplified node depends on the node alone), and each index with every range at 0 (the same for every
    axis asked about)."""

    def __init__(self, sink: UOp):
        zero = UOp.const(IDX, 0)
        self.zeros = {u: zero for u in sink.toposort() if u.op is Ops.RANGE}
        self.simplify = Rewriter(symbolic).rewrite
        self.at_origin: dict[UOp, UOp] = {}

    def origin(self, idx: UOp) -> UOp:
        if (hit := self.at_origin.get(idx)) is None:
            hit = self.at_origin[idx] = self.simplify(idx.substitute(self.zeros))
        return hit


@functools.lru_cache(maxsize=4)
def _stride_memo(sink: UOp) -> _StrideMemo:
    return _StrideMemo(sink)


# the rules of a target ask the same kernel for the same axis's strides several times while they choose (the SIMD
# axis, the reuse axis, sliding windows); a stride is a function of the graph alone, and graphs are hash-consed
@functools.lru_cache(maxsize=64)
def _access_strides(sink: UOp, r: UOp) -> tuple[int | None, ...]:
    out: list[int | None] = []
    memo = _stride_memo(sink)
    # r at 1, every other range at 0: one substitution (the values are constants, so it is the same graph as
    # substituting the others first and r after)
    unit = {**memo.zeros, r: UOp.const(IDX, 1)}
    for u in (u for u in sink.toposort() if u.op is Ops.INDEX and u.src[0].op is Ops.PARAM):
        idx = u.src[1]
        if r not in idx.toposort():
            out.append(0)
            continue
        at0, at1 = memo.origin(idx), memo.simplify(idx.substitute(unit))
        out.append(int(at1.arg) - int(at0.arg) if at0.op is Ops.CONST and at1.op is Ops.CONST else None)
    return tuple(out)


def accesses_in_the_loop(state: OptState) -> list[bool]:
    """For every access: whether its layout matters to the reduce loop. A load that no reduce range moves (a
    convolution's bias, fused into its input) is read once per output, outside the loop; that it is contiguous
    along some output axis must not make that axis the SIMD direction. Stores always count."""
    reduce_ranges = set(state.ranges(AxisKind.REDUCE))
    return [st or not reduce_ranges or any(r in reduce_ranges for r in u.src[1].toposort())
            for u, st in zip(accesses(state), stores(state))]


def stores(state: OptState) -> list[bool]:
    """For every access: whether it is the index of a STORE."""
    stored = {u.src[0] for u in state.sink.toposort() if u.op is Ops.STORE}
    return [u in stored for u in accesses(state)]


def window_strides(state: OptState) -> list[set[int]]:
    """Per access, its strides along the reduce axes: a load that moves along an output axis exactly as along a
    reduce axis is a sliding window (a convolution's input along the output rows and the kernel rows)."""
    return [set(col) - {0, None} for col in zip(*(access_strides(state, r) for r in state.ranges(AxisKind.REDUCE)))]


def gated_ranges(state: OptState) -> set[UOp]:
    """The axes that some access's gate depends on: a padded convolution's output rows and columns, where the edge
    rows read zeros instead of memory."""
    return {r for u in accesses(state) if len(u.src) > 2 for r in u.src[2].toposort() if r.op is Ops.RANGE}


def largest_divisor(n: int, choices: tuple[int, ...]) -> int | None:
    """The first of `choices` (largest first) that divides n and is at most n."""
    return next((c for c in choices if n % c == 0 and c <= n), None)


def axis_index(state: OptState, axis_id: int | None) -> int | None:
    """The Opt number of the axis with this RANGE id now (opts before may have moved or used up the axis)."""
    return next((i for i, r in enumerate(state.axes) if r.arg.axis == axis_id), None)


def try_opt(state: OptState, opt: Opt, renderer: Renderer) -> OptState:
    """`opt` applied, or `state` as it is where the opt does not apply."""
    try:
        return apply_opt(state, opt, renderer)
    except OptError:
        return state


def work_sizes(state: OptState) -> tuple[int, int]:
    """(outputs, reduced elements per output) of a kernel of constant shape."""
    out_size = red_size = 1
    for g in state.ranges(AxisKind.GLOBAL):
        out_size *= const_size(g) or 1
    for r in state.ranges(AxisKind.REDUCE):
        red_size *= const_size(r) or 1
    return out_size, red_size


def hand_coded_opts(state: OptState, renderer: Renderer) -> OptState:
    """The opts a kernel gets without BEAM: its target's own rules (`Renderer.opt_rules`), else the generic ones."""
    globals_, reduces = state.ranges(AxisKind.GLOBAL), state.ranges(AxisKind.REDUCE)
    if any(const_size(r) is None for r in globals_ + reduces) or len({tuple(r for r in st.toposort()
           if r.op is Ops.RANGE and r.arg.kind is AxisKind.GLOBAL) for st in state.sink.src}) != 1:
        return state  # symbolic shapes and multi-shape kernels run as lowered
    if (own := renderer.opt_rules(state)) is not None:
        return own
    return _gpu_opts(state, renderer) if renderer.has_local else state


def tile_axes(state: OptState, simd_amounts: tuple[int, ...], reuse_amounts: tuple[int, ...],
              simd_amount: Callable[[int], int | None] | None = None,
              uneven_rows_lose: bool = False) -> tuple[int | None, int | None]:
    """(the SIMD axis, the reuse axis) of a register tile, as Opt axis numbers, among the global axes whose size
    one of the amounts divides (for the SIMD axis: that `simd_amount` accepts, where given).

    The SIMD axis is contiguous (stride 1) in the most accesses. The reuse axis is the one along which the
    accesses that move along the SIMD axis do not move (b in a matmul, the image in a convolution), so that each
    vector load serves a whole row of the tile; then the one along which the most accesses do not move. Ties go
    inner. `uneven_rows_lose`: the renderer's `uneven_rows_channels_last` (`_fills_vectors`)."""
    globals_ = state.ranges(AxisKind.GLOBAL)
    strides = {g: access_strides(state, g) for g in globals_}
    simd = _simd_axis(state, strides, simd_amounts, simd_amount, uneven_rows_lose)
    reuse = _reuse_axis(state, strides, simd, reuse_amounts)
    axes = state.axes
    return (axes.index(simd) if simd is not None else None), (axes.index(reuse) if reuse is not None else None)


def _simd_axis(state: OptState, strides: dict[UOp, list[int | None]], simd_amounts: tuple[int, ...],
               simd_amount: Callable[[int], int | None] | None, uneven_rows_lose: bool) -> UOp | None:
    """`tile_axes`'s SIMD axis: contiguous in the most loads of the reduce loop (the store, once per output after the
    loop, breaks ties), then one that fills vectors, then one whose lanes no gate tests (a padded row tests the
    border in every lane, the output channels of a convolution read from a channels-last weight do not)."""
    counted, stored = accesses_in_the_loop(state), stores(state)
    gated, windowed = gated_ranges(state), len(state.ranges(AxisKind.REDUCE)) > 1

    def amount(g: UOp) -> int | None:
        n = const_size(g) or 1
        return simd_amount(n) if simd_amount is not None else largest_divisor(n, simd_amounts)

    def contiguous(g: UOp) -> tuple[int, int]:
        return (sum(1 for s, c, st in zip(strides[g], counted, stored) if s == 1 and c and not st),
                sum(1 for s, st in zip(strides[g], stored) if s == 1 and st))

    def fills_vectors(g: UOp) -> bool:
        # lanes for at least half of a register of the smallest SIMD amount: a weight gradient's 5 kernel columns,
        # along which the image is contiguous, lose to its output channels, along which the gradient is (a copy with
        # channels innermost, for a first layer of few input channels). With `uneven_rows_lose`, in a kernel with a
        # window, a row shorter than two registers that leaves part of its last one empty (10 of 16 lanes) does not
        # either: the output channels, read from a channels-last weight, vectorise without a partial register; a
        # 1x1 convolution keeps its rows
        a, half = amount(g), min(simd_amounts)
        uneven = a is not None and a < 2 * half and a % half != 0
        return a is not None and a >= half and not (uneven and uneven_rows_lose and windowed)

    return max((g for g in strides if sum(contiguous(g)) > 0 and amount(g) is not None),
               key=lambda g: (contiguous(g)[0], fills_vectors(g), g not in gated, contiguous(g)[1], g.arg.axis),
               default=None)


def _reuse_axis(state: OptState, strides: dict[UOp, list[int | None]], simd: UOp | None,
                reuse_amounts: tuple[int, ...]) -> UOp | None:
    """`tile_axes`'s reuse axis: one along which some access stays put, first the most of the accesses that move
    along the SIMD axis (at any stride: a strided convolution's input moves by 2 there, its lanes gathered, and
    still wants the output channels, along which it stays put, rather than an output row, along which only the
    weights do), then an axis of independent rows, then the most accesses that stay put."""
    sliding, gated = window_strides(state), gated_ranges(state)

    def independent_rows(g: UOp) -> bool:
        # no gate tests it and no load slides along it like a window (the batch, not an output row of a
        # convolution): each tile row reads rows of its own, without per-lane padding tests
        return g not in gated and not any(st in ws for st, ws in zip(strides[g], sliding))

    def score(g: UOp) -> tuple[int, bool, int, int]:
        vector_reuse = sum(1 for s, v in zip(strides[g], strides[simd]) if s == 0 and v not in (0, None)) \
            if simd is not None else 0
        return vector_reuse, independent_rows(g), sum(1 for s in strides[g] if s == 0), g.arg.axis

    return max((g for g in strides if g is not simd and any(s == 0 for s in strides[g]) and
                largest_divisor(const_size(g) or 1, reuse_amounts) is not None), key=score, default=None)


def _tensor_core_opts(state: OptState, renderer: Renderer) -> OptState | None:
    """A matmul-shaped kernel on a target with tensor cores: the first tensor core that fits, each warp computing
    a block of its tiles, 4x4 where there are at least 64 tiles along an axis, else 2x2 (each lane's A fragment then
    serves four or two tiles, and its B fragment as many: the tiles are read from memory, not staged, so this reuse
    is what keeps the tensor cores fed), in work-groups of up to four warps. None when no tensor core fits."""
    for i in range(len(renderer.tensor_cores)):
        tc = try_opt(state, Opt(OptOps.TC, 0, i), renderer)
        if tc is state:
            continue
        for r in work_item_ranges(tc, renderer)[1:3]:
            tiles = const_size(r) or 1
            tc = try_opt(tc, Opt(OptOps.UPCAST, tc.axes.index(r), 4 if tiles % 4 == 0 and tiles >= 64 else 2), renderer)
        # whole work-groups only: a guarded one would leave warps out of the barriers a target may need
        for r in work_item_ranges(tc, renderer)[1:3]:
            if (const_size(r) or 1) % 2 == 0:
                tc = try_opt(tc, Opt(OptOps.LOCAL, tc.axes.index(r), 2), renderer)
        return tc
    return None


def _gpu_opts(state: OptState, renderer: Renderer) -> OptState:
    reduces = state.ranges(AxisKind.REDUCE)
    out_size, red_size = work_sizes(state)
    if reduces and renderer.tensor_cores and (tc := _tensor_core_opts(state, renderer)) is not None:
        return tc
    if reduces and out_size <= 64 and red_size >= 2048 and renderer.local_mem_max:
        big = max(reduces, key=lambda r: const_size(r) or 0)
        for lanes in (256, 128, 64, 32, 16):
            grouped = try_opt(state, Opt(OptOps.GROUP, state.axes.index(big), lanes), renderer)
            if grouped is not state:
                return grouped
    if reduces and red_size >= 16 and out_size >= 1024:
        simd, reuse = tile_axes(state, (4,), (4,))
        for ax in (simd, reuse):
            n = const_size(state.axes[ax]) if ax is not None else None
            if ax is not None and n is not None and n % 4 == 0 and n >= 16:
                state = try_opt(state, Opt(OptOps.UPCAST, ax, 4), renderer)
    return _work_groups(state, renderer)


def _work_groups(state: OptState, renderer: Renderer) -> OptState:
    """Up to 16 work-items in each of the two innermost launch dimensions (dividing sizes first), or up to the
    renderer's `flat_work_group` along a launch of one dimension: more than a warp per group, and fewer groups for
    the runtime to schedule."""
    budget = renderer.max_work_group_size or 256
    ranges = work_item_ranges(state, renderer)
    one_dim = len(ranges) == 1
    for r in ranges[:2]:
        if r.arg.kind is not AxisKind.GLOBAL:
            continue
        n = const_size(r) or 1
        # a size with no small divisor still gets work-groups of 16: the last one is partial and guarded
        sizes = tuple(x for x in (256, 128, 64, 32) if x <= renderer.flat_work_group) + (16, 8, 4, 2) if one_dim \
            else (16, 8, 4, 2)
        fitting = [x for x in sizes if x <= budget and n % x == 0] or ([16] if n > 16 and budget >= 16 else [])
        for size in fitting:  # the largest the device's per-dimension limit (local_max) accepts
            new = try_opt(state, Opt(OptOps.LOCAL, state.axes.index(r), size), renderer)
            if new is not state:
                budget //= size
                state = new
                break
    return state


__all__ = ["access_strides", "accesses", "accesses_in_the_loop", "axis_index", "gated_ranges", "hand_coded_opts",
           "largest_divisor", "stores", "tile_axes", "try_opt", "window_strides", "work_sizes"]
