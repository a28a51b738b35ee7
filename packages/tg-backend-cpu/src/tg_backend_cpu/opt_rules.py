"""The CPU's tuning rules: the opts a kernel gets on the CPU without BEAM (`Renderer.opt_rules` of both CPU
renderers), built on the access-stride helpers of `tinygrad.codegen.opt.heuristics`.

The kernel is a loop nest that the C compiler or LLVM vectorises; the rules choose what it cannot see:

* a reduction with outputs to tile (matmul, conv): UPCAST the axis that is contiguous in the most loads of the
  reduce loop (the SIMD direction, by two of the renderer's SIMD registers of floats, 32 for AVX-512; the store
  breaks ties) and a second axis along which some input is reused (8 rows). The tile of 8x32 accumulators stays in
  registers over the whole reduce loop, and each loaded value is used 8 or 32 times: a register-tiled matmul. A
  tile still small grows along one more axis (in a kernel of little work only when it has a window: a
  convolution), first one whose loads slide along a reduce axis (a small convolution's output rows, which share
  input rows with the kernel rows). A SIMD row that does not fill whole registers (a convolution's output row of
  20) is planned in registers instead: 4 rows of the reuse axis times as many output rows as the vector registers
  hold. A tile whose strips of the vector operand outgrow L2 is cache-blocked (`_block_for_l2`).
* a reduction whose loads run along the reduction (a row sum, a matrix-vector product against a row-major
  matrix): vectors along the reduce axis, a few outputs side by side.
* a reduction to few outputs (sum of a big vector): UNROLL the reduce axis, independent accumulators in one loop,
  which the compiler keeps in one SIMD register; a short inner output axis (partial sums over chunks of a batch)
  is UPCAST whole first, and the reduce axis unrolled by 4.
* a small window (a pool): several images side by side, or the window unrolled whole.
* elementwise kernels: nothing, the C compiler vectorises the innermost loop already; except a big transpose
  (stored along one axis, loaded along another), which moves 4x4 blocks, and a big kernel whose loads along the
  stored innermost axis go through a division (a source in groups along it: weight blocks packed in tiles of rows),
  which is UPCAST by a vector of lanes, where the compiler's loop vectoriser sees through no division; and a big
  kernel stored along its innermost axis that reads a value shared by a group of another axis's positions (a
  quantized block's scale, unpacked into a matmul's panels): a few positions of that axis computed together.

The outermost global axis always stays a plain loop, so that the thread pool can split it. The thresholds and
tile shapes were chosen by timing kernels (with BEAM's choices as a guide); the numbers are in this package's
CHANGELOG.
"""

from __future__ import annotations

from tinygrad.codegen.opt.actions import Opt, OptOps, OptState, const_size
from tinygrad.codegen.opt.heuristics import (
    access_strides,
    accesses,
    accesses_in_the_loop,
    axis_index,
    gated_ranges,
    largest_divisor,
    stores,
    tile_axes,
    try_opt,
    window_strides,
    work_sizes,
)
from tinygrad.dtype import dtypes
from tinygrad.renderer import Renderer
from tinygrad.uop.ops import AxisKind, Ops, UOp

#: register tile: rows along the reuse axis (the SIMD axis's amounts come from the renderer's knobs, `_Cpu`)
CPU_REUSE = (8, 6, 4, 3, 2)
#: the same for an uneven SIMD row, whose tile then grows along a sliding axis (`_row_tile`)
CPU_REUSE_UNEVEN = (4, 3, 2)
#: multiply-adds below which a kernel's register tile does not grow past its SIMD and reuse axes
CPU_SMALL_WORK = 1 << 23
#: the same for a kernel with a window (several reduce axes: a convolution's channels and kernel rows and columns),
#: whose grown tile reuses each loaded input row across the window
CPU_SMALL_WINDOW_WORK = 1 << 18
#: a reduce axis up to this long is unrolled whole in a reduction to few outputs
CPU_REDUCE_WHOLE = 32
#: in a reduction to few outputs, an inner output axis up to this long is computed side by side (`_partial_sums`)
CPU_PARTIAL_SUMS = 8
#: a small window's outputs computed side by side along the outermost axis (`_small_window`)
CPU_POOL_SIDE_BY_SIDE = 8
#: outputs side by side per output axis in a reduction whose loads run along the reduce axis
CPU_ROWS_ALONG_THE_REDUCTION = (4, 2)
#: a transposing elementwise kernel (`_transpose_tile`) of at least this many outputs moves blocks of this size
CPU_TRANSPOSE_MIN = 1 << 16
CPU_TRANSPOSE_BLOCK = 4
#: positions of an axis computed together where they share a group's loads (`_shared_group_values`)
CPU_GROUP_SHARED = 4
#: FMA chains (`_Cpu.fma_chains`) of a renderer that does not say: one 512-bit multiply-add per cycle, 4 cycles
DEFAULT_FMA_CHAINS = 4


class _Cpu:
    """The CPU tuning the renderer's knobs (`Renderer.knobs`) give, planned in float32 lanes."""

    def __init__(self, renderer: Renderer):
        knobs = renderer.knobs
        lanes = knobs.simd_lanes(dtypes.float32)
        #: amounts of the SIMD axis: two registers, one, half of one (32, 16, 8 with AVX-512)
        self.simd = (2 * lanes, lanes, max(1, lanes // 2))
        #: register tiles smaller than min_tile accumulators grow along more reuse axes, up to max_tile: a quarter
        #: and a half of the registers (128 and 256 floats with 32 AVX-512 registers)
        self.min_tile = knobs.vector_registers // 4 * lanes
        self.max_tile = knobs.vector_registers // 2 * lanes
        #: bytes of the vector operand a cache-blocked kernel keeps in L2: half of it (the other half holds A's rows
        #: and the output tiles)
        self.l2_budget = knobs.l2_cache_bytes // 2
        self.lanes, self.registers = lanes, knobs.vector_registers
        #: vector multiply-adds in flight that keep the FMA units busy (latency times units): the renderer's
        #: `fma_chains` (tg_backend_cpu.compiler.host_fma_chains), 4 where it has none
        self.fma_chains: int = getattr(renderer, "fma_chains", DEFAULT_FMA_CHAINS)

    def uneven_row(self, simd_amt: int) -> bool:
        """A SIMD row longer than half a register that does not fill whole registers (a convolution's output row
        of 10, 20 or 24 floats with 16 lanes): each of its registers but one is full, and the tile is planned in
        registers rather than floats (`_row_tile`)."""
        return simd_amt > self.lanes // 2 and simd_amt % self.lanes != 0

    def row_registers(self, simd_amt: int) -> int:
        return -(-simd_amt // self.lanes)

    def simd_amount(self, n: int) -> int | None:
        """Lanes along the SIMD axis: a short axis (a 20- or 24-wide row of a convolution's output) whole, which
        the C compiler splits into vectors and a rest (and whose edge conditions of padding then fold away), rather
        than cut into rows of 4 or 8 that each leave a loop of their own; a longer one in a whole number of
        vectors."""
        if 4 <= n <= max(self.simd):
            return n
        return largest_divisor(n, self.simd) or largest_divisor(n, (4,))


def cpu_opt_rules(renderer: Renderer, state: OptState) -> OptState:
    """The opts of a kernel of constant shape on a CPU renderer (the module's docstring lists the rules)."""
    globals_, reduces = state.ranges(AxisKind.GLOBAL), state.ranges(AxisKind.REDUCE)
    out_size, red_size = work_sizes(state)
    if not reduces:
        for rule in (_transpose_tile, _grouped_loads, _shared_group_values):
            if (ruled := rule(state, renderer, globals_, out_size)) is not state:
                return ruled
        return state
    cpu = _Cpu(renderer)
    if red_size < 16:
        return _small_window(state, renderer, cpu, globals_, reduces)
    if out_size >= 256 and (const_size(reduces[-1]) or 1) % cpu.lanes == 0 and \
            _reads_along_the_reduction(state, globals_, reduces):
        return _vectors_along_the_reduction(state, renderer, cpu, globals_)
    if out_size >= 256 and (gemv := _one_output_axis(state, renderer, cpu, globals_)) is not None:
        return gemv
    if out_size >= 256 and (tiled := _register_tile(state, renderer, cpu, out_size, red_size)) is not None:
        return tiled
    return _few_outputs(state, renderer, globals_, out_size)


def _one_output_axis(state: OptState, renderer: Renderer, cpu: _Cpu, globals_: list[UOp]) -> OptState | None:
    """A reduction whose loads are contiguous along its innermost output axis and reused along no other (a
    matrix-vector product against a matrix stored output-major, or a quantized one's blocks packed in tiles of rows,
    (tiles, tile)): with nothing to reuse, the register tile is rows of that axis only, `min_tile` of them (8
    accumulators with AVX-512), which leaves the other registers to what each row's loads are combined with (the
    scales of a dequantizing product, live across the values of a block), and reads whole tiles in order. The SIMD
    and reuse upcasts would make it 256 rows, or rows from several tiles at once, whose scales spill. None where the
    kernel is not of this shape."""
    inner = globals_[-1]
    counted, stored = accesses_in_the_loop(state), stores(state)
    loads = [c and not st for c, st in zip(counted, stored)]
    along = access_strides(state, inner)
    if (n := const_size(inner)) is None or not any(s == 1 and ld for s, ld in zip(along, loads)):
        return None
    moving = [ld and s != 0 for s, ld in zip(along, loads)]
    if any(any(m and s == 0 for s, m in zip(access_strides(state, g), moving)) for g in globals_[:-1]):
        return None  # a load reused along another output axis: a register tile's
    if any(any(m and s == 1 for s, m in zip(access_strides(state, r), moving)) for r in state.ranges(AxisKind.REDUCE)):
        return None  # a window sliding along the reduction (a cumsum's): the outputs share its loads
    # the outermost axis stays a loop of two iterations or more for the threads
    amt = largest_divisor(n, tuple(a for a in (cpu.min_tile, cpu.min_tile // 2, cpu.lanes)
                                   if len(globals_) > 1 or n // a >= 2))
    return try_opt(state, Opt(OptOps.UPCAST, len(globals_) - 1, amt), renderer) if amt is not None else None


def _small_window(state: OptState, renderer: Renderer, cpu: _Cpu, globals_: list[UOp], reduces: list[UOp]) -> OptState:
    """A small window (fewer than 16 elements per output: a 2x2 pool). Over a big batch, with output rows that do
    not fill whole registers (10 or 3 wide): 8 images side by side, the window a loop (8 accumulators and 8 streams
    of loads in flight; unrolling the window as well made the body too big to pay). Otherwise the window unrolled
    whole: straight-line code per output instead of a loop of 2, which vectorises along a row of whole registers."""
    outer = const_size(globals_[0]) if globals_ else None
    row = (const_size(globals_[-1]) or 1) if globals_ else 1
    if len(reduces) >= 2 and row % cpu.lanes != 0 and outer is not None and \
            outer % CPU_POOL_SIDE_BY_SIDE == 0 and outer >= 2 * CPU_POOL_SIDE_BY_SIDE:
        images = try_opt(state, Opt(OptOps.UPCAST, 0, CPU_POOL_SIDE_BY_SIDE), renderer)
        if images is not state:
            return images
    while state.ranges(AxisKind.REDUCE) and (n := const_size(state.axes[-1])) is not None and n > 1:
        unrolled = try_opt(state, Opt(OptOps.UNROLL, len(state.axes) - 1, n), renderer)
        if unrolled is state:
            break
        state = unrolled
    return state


def _register_tile(state: OptState, renderer: Renderer, cpu: _Cpu, out_size: int, red_size: int) -> OptState | None:
    """The register tile of a reduction with outputs to tile, cache-blocked for L2 where its strips outgrow it; None
    where no opt applies (the kernel is then treated as one of few outputs)."""
    globals_ = state.ranges(AxisKind.GLOBAL)
    simd, reuse = tile_axes(state, cpu.simd, CPU_REUSE, cpu.simd_amount, renderer.knobs.uneven_rows_channels_last)
    simd_id = state.axes[simd].arg.axis if simd is not None else None
    reuse_id = state.axes[reuse].arg.axis if reuse is not None else None
    state, simd_amt = _simd_upcast(state, renderer, cpu, globals_, simd)
    # an uneven row in a big convolution: 4 channels, then output rows (`_row_tile`)
    sliding = _sliding_axes(state, (globals_[0].arg.axis, reuse_id))
    uneven = simd_amt > 1 and cpu.uneven_row(simd_amt) and out_size * red_size >= CPU_SMALL_WORK and bool(sliding)
    state = _reuse_upcast(state, renderer, globals_, reuse_id, uneven)
    if uneven:
        state = _row_tile(state, renderer, cpu, simd_amt, sliding)
    state = _grow(state, renderer, cpu, globals_[0].arg.axis, reuse_id, out_size, red_size)
    if not state.applied:
        return None
    return _block_for_l2(state, renderer, cpu.l2_budget, simd_id, simd_amt, red_size)


def _simd_upcast(state: OptState, renderer: Renderer, cpu: _Cpu, globals_: list[UOp],
                 simd: int | None) -> tuple[OptState, int]:
    """The SIMD axis UPCAST by `_Cpu.simd_amount`, and the amount (1: none)."""
    if simd is None:
        return state, 1
    r = state.axes[simd]
    # keep the outermost global axis a loop of more than one iteration: the thread pool splits it
    n = const_size(r) or 1
    amt = cpu.simd_amount(n) if r is not globals_[0] or n >= 64 else None
    if amt == n and n >= 2 * cpu.lanes and _broadcasts_a_window(state, r):
        # output channels of a convolution read from a channels-last weight: half of the axis in registers, the
        # whole of it leaves too few registers for the broadcast input rows (where half is too few accumulators for
        # the CPU's FMA chains, `_grow` takes the other half back)
        amt = largest_divisor(n, tuple(a for a in cpu.simd if a <= n // 2))
    if amt is None:
        return state, 1
    return try_opt(state, Opt(OptOps.UPCAST, simd, amt), renderer), amt


def _reuse_upcast(state: OptState, renderer: Renderer, globals_: list[UOp], reuse_id: int | None,
                  uneven: bool) -> OptState:
    """The reuse axis UPCAST by `CPU_REUSE` (`CPU_REUSE_UNEVEN` beside an uneven row). As the outermost axis (a batch
    of one: the output channels) it keeps two iterations or more; without a reuse axis, each load of a small
    convolution would serve one multiply-add."""
    if (ax := axis_index(state, reuse_id)) is None:
        return state
    r = state.axes[ax]
    n = const_size(r) or 1
    amounts = CPU_REUSE_UNEVEN if uneven else CPU_REUSE
    amt = largest_divisor(n, amounts) if r is not globals_[0] or n >= 2 * max(CPU_REUSE) else None
    return try_opt(state, Opt(OptOps.UPCAST, ax, amt), renderer) if amt is not None else state


def _grow(state: OptState, renderer: Renderer, cpu: _Cpu, outer_id: int, reuse_id: int | None, out_size: int,
          red_size: int) -> OptState:
    """A small tile grown along more reuse axes (`_grow_tile`) while one fits. Not for little work, where the
    bigger unrolled body costs more compile time than it saves, unless the kernel has a window: a small
    convolution gains from each input row reused across its window, up to a tile of half the registers. A big
    convolution's tile grows to twice the CPU's FMA chains (`_Cpu.fma_chains`) where `min_tile` is less: its reduce
    loop is a nest of short loops (a 3x3 window), and with no more accumulators than chains each multiply-add waits
    for the one before it in its chain whenever a load or a loop exit is late."""
    windowed = len(state.ranges(AxisKind.REDUCE)) > 1
    grow_from = CPU_SMALL_WINDOW_WORK if windowed else CPU_SMALL_WORK
    target = cpu.max_tile if windowed and out_size * red_size < CPU_SMALL_WORK else \
        max(cpu.min_tile, 2 * cpu.fma_chains * cpu.lanes) if windowed else cpu.min_tile
    while state.upcast_size() < target and out_size * red_size >= grow_from:
        grown = _grow_tile(state, renderer, cpu.max_tile, outer_id, reuse_id)
        if grown is state:
            break
        state = grown
    return state


def _few_outputs(state: OptState, renderer: Renderer, globals_: list[UOp], out_size: int) -> OptState:
    """Few outputs (or nothing to tile): the partial sums of a split reduction side by side (`_partial_sums`); then
    independent accumulators for the innermost reduce axis: a short one (a row of 20 or 24 of a BatchNorm's
    statistics) whole, which the C compiler turns into vectors, and then two of the next axis's rows (two streams
    of loads); beside the partial sums, 4 of it."""
    state, side_by_side = _partial_sums(state, renderer, globals_) if out_size < 256 else (state, False)
    last = len(state.axes) - 1
    n = const_size(state.axes[last]) or 1
    if side_by_side:
        amt = largest_divisor(n, (4, 2))
        return try_opt(state, Opt(OptOps.UNROLL, last, amt), renderer) if amt else state
    amt = n if 2 <= n <= CPU_REDUCE_WHOLE else largest_divisor(n, (16, 8, 4, 2))
    if not amt:
        return state
    unrolled = try_opt(state, Opt(OptOps.UNROLL, last, amt), renderer)
    if unrolled is not state and amt == n and unrolled.ranges(AxisKind.REDUCE):
        nxt = len(unrolled.axes) - 1
        if (const_size(unrolled.axes[nxt]) or 1) % 2 == 0:
            unrolled = try_opt(unrolled, Opt(OptOps.UNROLL, nxt, 2), renderer)
    return unrolled


def _reads_along_the_reduction(state: OptState, globals_: list[UOp], reduces: list[UOp]) -> bool:
    """Whether the loads in the reduce loop run contiguously along the innermost reduce axis and along no output axis
    (a row sum, a matrix-vector product against a row-major matrix): vectors along an output axis would gather each
    lane from another row."""
    counted, stored = accesses_in_the_loop(state), stores(state)
    loads = [c and not st for c, st in zip(counted, stored)]
    along_reduce = any(s == 1 and ld for s, ld in zip(access_strides(state, reduces[-1]), loads))
    return along_reduce and not any(s == 1 and ld for g in globals_ for s, ld in zip(access_strides(state, g), loads))


def _vectors_along_the_reduction(state: OptState, renderer: Renderer, cpu: _Cpu, globals_: list[UOp]) -> OptState:
    """For `_reads_along_the_reduction` (with an innermost reduce axis of whole vectors): that axis unrolled by a
    vector's lanes (one vector accumulator, contiguous vector loads), and a few outputs of each output axis side by
    side, so that a load along the reduction that an output axis does not move (the vector of a matrix-vector
    product) serves each of them. The outermost axis stays a loop of many iterations for the threads to split, or
    goes whole (a few rows of a batch) when the next one is such a loop."""
    last = len(state.axes) - 1
    state = try_opt(state, Opt(OptOps.UNROLL, last, cpu.lanes), renderer)
    for i, g in enumerate(globals_):
        n = const_size(g) or 1
        rows = largest_divisor(n, CPU_ROWS_ALONG_THE_REDUCTION)
        if rows is None or (ax := axis_index(state, g.arg.axis)) is None:
            continue
        if i == 0 and n // rows < 64 and not (rows == n and len(globals_) > 1 and (const_size(globals_[1]) or 1) >= 64):
            continue
        state = try_opt(state, Opt(OptOps.UPCAST, ax, rows), renderer)
    return state


def _transpose_tile(state: OptState, renderer: Renderer, globals_: list[UOp], out_size: int) -> OptState:
    """An elementwise kernel that transposes (a channels-last copy: stored contiguously along the innermost axis,
    loaded contiguously along another one and with a stride along the innermost): 4x4 blocks, UPCAST along both
    axes, so that each load and each store covers 4 neighbours, which the compiler turns into a few vector loads,
    shuffles and vector stores instead of a gather of single floats per vector stored. Not for small kernels, whose
    compile time it would only add to."""
    if out_size < CPU_TRANSPOSE_MIN or len(globals_) < 2:
        return state
    stored = stores(state)
    inner = globals_[-1]
    along_inner = access_strides(state, inner)
    if sum(stored) != 1 or along_inner[stored.index(True)] != 1:
        return state
    for r in reversed(globals_[:-1]):
        along = access_strides(state, r)
        # a load contiguous along r and strided along the innermost axis
        if any(not st and s == 1 and si not in (0, 1, None) for s, si, st in zip(along, along_inner, stored)):
            n = const_size(r) or 1
            # the outermost axis stays a loop of many iterations for the threads to split
            if (const_size(inner) or 1) % CPU_TRANSPOSE_BLOCK or n % CPU_TRANSPOSE_BLOCK or \
                    (r is globals_[0] and n < 64):
                return state
            tiled = try_opt(state, Opt(OptOps.UPCAST, state.axes.index(inner), CPU_TRANSPOSE_BLOCK), renderer)
            if tiled is state or (ax := axis_index(tiled, r.arg.axis)) is None:
                return state
            return try_opt(tiled, Opt(OptOps.UPCAST, ax, CPU_TRANSPOSE_BLOCK), renderer)
    return state


def _grouped_loads(state: OptState, renderer: Renderer, globals_: list[UOp], out_size: int) -> OptState:
    """An elementwise kernel stored contiguously along its innermost axis with a load whose index along that axis is
    not affine (divided or taken modulo: its source lies in groups along the axis, such as a weight's blocks packed
    in tiles of 16 rows, copied into panels of 32): that axis UPCAST by a vector of float32 lanes, so that each
    lane's index is explicit and a group's loads are neighbours the compiler joins into vector loads. Not for small
    kernels, whose compile time it would only add to."""
    if out_size < CPU_TRANSPOSE_MIN or not globals_:
        return state
    inner = globals_[-1]
    along = access_strides(state, inner)
    stored = stores(state)
    if sum(stored) != 1 or along[stored.index(True)] != 1:
        return state
    if not any(node.op in (Ops.IDIV, Ops.MOD) and inner in node.toposort()
               for u, st in zip(accesses(state), stored) if not st for node in u.src[1].toposort()):
        return state
    lanes = renderer.knobs.simd_lanes(dtypes.float32)
    amount = largest_divisor(const_size(inner) or 1, (lanes, lanes // 2))
    if amount is None or (inner is globals_[0] and (const_size(inner) or 1) // amount < 64):
        return state  # the outermost axis stays a loop of many iterations for the threads to split
    return try_opt(state, Opt(OptOps.UPCAST, state.axes.index(inner), amount), renderer)


def _shared_group_values(state: OptState, renderer: Renderer, globals_: list[UOp], out_size: int) -> OptState:
    """An elementwise kernel stored contiguously along its innermost axis with a load whose index along another
    axis goes through a division (a value shared by a group of that axis's positions: the scale of a quantized
    weight's block or sub-block, read for each of its values as the weight is unpacked into a matmul's panels):
    that axis UPCAST by CPU_GROUP_SHARED, so that positions of one group are computed together and their shared
    loads and arithmetic once (the division of the upcast index folds to one value), and the innermost axis by two
    vectors of float32 lanes (or one) for whole vector stores. Not for small kernels."""
    if out_size < CPU_TRANSPOSE_MIN or len(globals_) < 2:
        return state
    inner, stored = globals_[-1], stores(state)
    if sum(stored) != 1 or access_strides(state, inner)[stored.index(True)] != 1:
        return state
    lanes = renderer.knobs.simd_lanes(dtypes.float32)
    vector = largest_divisor(const_size(inner) or 1, (2 * lanes, lanes))
    if vector is None:
        return state
    loaded = [node for u, st in zip(accesses(state), stored) if not st for node in u.src[1].toposort()]
    for g in globals_[1:-1]:  # the outermost axis stays a plain loop for the threads
        group = largest_divisor(const_size(g) or 1, (CPU_GROUP_SHARED,))
        if group is None or not any(node.op is Ops.IDIV and g in node.toposort() for node in loaded):
            continue
        tiled = try_opt(state, Opt(OptOps.UPCAST, state.axes.index(inner), vector), renderer)
        if tiled is state or (ax := axis_index(tiled, g.arg.axis)) is None:
            return state
        return try_opt(tiled, Opt(OptOps.UPCAST, ax, group), renderer)
    return state


def _partial_sums(state: OptState, renderer: Renderer, globals_: list[UOp]) -> tuple[OptState, bool]:
    """A reduction to few outputs with a short output axis inside the outermost one (the 4 partial sums over chunks
    of the batch that `split_large_reductions` makes of a BatchNorm's statistics, per channel): that axis whole as
    an UPCAST, whether it was. Each partial sum then has its own accumulator and reads its own images: several
    streams of loads and chains of adds in flight instead of one. The outermost axis stays a loop for the threads
    to split."""
    for r in globals_[1:]:
        n = const_size(r)
        if n is not None and 2 <= n <= CPU_PARTIAL_SUMS and (ax := axis_index(state, r.arg.axis)) is not None:
            upcast = try_opt(state, Opt(OptOps.UPCAST, ax, n), renderer)
            if upcast is not state:
                return upcast, True
    return state, False


def _broadcasts_a_window(state: OptState, r: UOp) -> bool:
    """Whether `r` is the output channels of a convolution whose weight has them innermost: the loads contiguous
    along r are a weight (they move along no other output axis, and do not slide), and a load that stays put along
    r (the input, broadcast to the channels) slides along a reduce axis (`window_strides`). A weight gradient read
    channels-last is not: its contiguous load moves along the batch chunks."""
    sliding_strides = window_strides(state)
    others = [access_strides(state, g) for g in state.ranges(AxisKind.GLOBAL) if g is not r]
    sliding = [any(col[i] in ws for col in others) for i, ws in enumerate(sliding_strides)]
    strides = access_strides(state, r)
    weights = [s == 1 and all(col[i] == 0 for col in others) for i, s in enumerate(strides)]
    contiguous = [i for i, s in enumerate(strides) if s == 1]
    return bool(contiguous) and all(weights[i] and not sliding[i] for i in contiguous) \
        and any(sl for s, sl in zip(strides, sliding) if s == 0)


def _sliding_axes(state: OptState, skip: tuple[int | None, ...]) -> list[int]:
    """The ids of the global axes (not in `skip`, not tested by a gate) along which some load slides as along a reduce
    axis: a convolution's output rows, whose input rows the kernel rows share."""
    sliding_strides, gated = window_strides(state), gated_ranges(state)
    return [g.arg.axis for g in state.ranges(AxisKind.GLOBAL)
            if g.arg.axis not in skip and g not in gated and (const_size(g) or 1) >= 2
            and any(st in ws for st, ws in zip(access_strides(state, g), sliding_strides))]


def _row_tile(state: OptState, renderer: Renderer, cpu: _Cpu, simd_amt: int, sliding: list[int]) -> OptState:
    """The register tile of an uneven SIMD row (`_Cpu.uneven_row`): 4 rows of the reuse axis (`CPU_REUSE_UNEVEN`)
    times the most rows of a sliding axis (`_sliding_axes`) that keep the accumulators within the vector
    registers. Eight channels of one output row, the even rows' tile, load a row's 2 registers and 8 broadcasts
    for 16 multiply-adds; 4 channels of 4 rows load 8 and 4 for 32."""
    rows = state.upcast_size() // simd_amt
    for axis_id in sliding:
        if (ax := axis_index(state, axis_id)) is None:
            continue
        n = const_size(state.axes[ax]) or 1
        fits = [d for d in range(2, n + 1) if n % d == 0 and cpu.row_registers(simd_amt) * rows * d <= cpu.registers]
        if fits:
            return try_opt(state, Opt(OptOps.UPCAST, ax, max(fits)), renderer)
    return state


def _grow_tile(state: OptState, renderer: Renderer, max_tile: int, outer_id: int, reuse_id: int | None) -> OptState:
    """A small register tile (a 5-wide kernel row times 8 channels in a convolution's weight gradient) grows
    along one more axis, one along which the loads that the first reuse axis does not reuse stay put: then
    every load of the reduce loop serves several accumulators (`_growth_rank` orders the candidates). With no
    sliding axis and none short enough to take whole: twice the rows of the reuse axis (16 output channels instead
    of 8), whose loads are the vector loads the tile already makes, rather than a new axis that adds loads of its
    own."""
    tile = state.upcast_size()
    globals_ = state.ranges(AxisKind.GLOBAL)
    first = next((g for g in globals_ if g.arg.axis == reuse_id), None)
    not_reused = [s != 0 for s in access_strides(state, first)] if first is not None else None
    sliding_strides, gated = window_strides(state), gated_ranges(state)
    best: tuple[tuple[bool, int, bool, int], int, UOp] | None = None
    for g in globals_:
        n = const_size(g) or 1
        if g is first or (g.arg.axis == outer_id and n < 32):
            continue
        ranked = _growth_rank(n, access_strides(state, g), not_reused, sliding_strides, g in gated, tile, max_tile)
        if ranked is not None and (best is None or ranked[0] > best[0]):
            best = (ranked[0], ranked[1], g)
    if (best is None or not (best[0][0] or best[0][2])) and first is not None and (const_size(first) or 1) % 2 == 0 \
            and tile * 2 <= max_tile:
        return try_opt(state, Opt(OptOps.UPCAST, state.axes.index(first), 2), renderer)
    if best is None:
        return state
    return try_opt(state, Opt(OptOps.UPCAST, state.axes.index(best[2]), best[1]), renderer)


def _growth_rank(n: int, strides: list[int | None], not_reused: list[bool] | None, sliding_strides: list[set[int]],
                 gated: bool, tile: int, max_tile: int) -> tuple[tuple[bool, int, bool, int], int] | None:
    """For `_grow_tile`: (rank, amount) of growing the tile along an axis of size n whose accesses move by
    `strides`, None where it cannot. First an axis along which the loads slide over the same rows (a small
    convolution's output rows, whose rows of input the kernel rows share), then the most loads reused, then a short
    axis taken whole (a convolution's kernel rows, whose loads overlap from one output row to the next), then the
    larger amount. `not_reused`: per access, whether the first reuse axis moves it (None: no reuse axis)."""
    # the loads that stay put along g (among those the first reuse axis does not reuse)
    reused = sum(1 for i, st in enumerate(strides) if st == 0 and (not_reused is None or not_reused[i]))
    if reused == 0:
        return None
    slides = any(st in ws for st, ws in zip(strides, sliding_strides))
    # a short axis whole (the 5 rows of a 5x5 kernel) where it fits, else by a divisor
    amounts = ((n,) if n <= max(CPU_REUSE) else ()) + CPU_REUSE
    amt = next((c for c in amounts if n % c == 0 and c <= n and tile * c <= max_tile), None)
    if amt is None or (gated and amt < n):
        # a gated axis only whole: cut into parts, each copy of the tile tests its rows' gates at run time
        return None
    return (slides, reused, amt == n, amt), amt


def _block_for_l2(state: OptState, renderer: Renderer, l2_budget: int, simd_id: int | None, simd_amt: int,
                  red_size: int) -> OptState:
    """Cache blocking of a register-tiled kernel: when the strips of the vector operand that one pass over the
    SIMD axis reads (a tile's columns of B, over the whole reduction) outgrow the L2 budget, TILE the SIMD axis
    into blocks whose strips fit and SWAP the block loop outermost. Each block of B then stays in L2 while
    every row tile of A passes it, and A (read by broadcasts, a quarter of the bytes per FMA) streams from
    farther away instead of B. Where not even two strips fit, the SIMD axis itself goes outermost."""
    globals_ = state.ranges(AxisKind.GLOBAL)
    outer = next((g for g in globals_ if g.arg.axis == simd_id), None)
    if outer is None or outer is globals_[0] or (tiles := const_size(outer)) is None:
        return state
    strip = red_size * simd_amt * 4
    if l2_budget // strip < 2:
        # no two strips fit: no block to TILE, but with the SIMD axis outermost each strip is read from memory once,
        # and again from the caches by the other row tiles, where a loop over row tiles outside would stream all of
        # B from memory for each (a long reduction over few rows: a prefill's projections)
        return try_opt(state, Opt(OptOps.SWAP, 0, state.axes.index(outer)), renderer) if tiles >= 8 else state
    # at least 8 blocks where there are tiles enough: the block loop is the one a threaded backend splits
    per_block = max(1, min(l2_budget // strip, tiles // 8))
    if per_block >= tiles:
        return state
    block = max((d for d in range(1, per_block + 1) if tiles % d == 0), default=1)
    if block == 1 or block == tiles:
        return state  # one strip per block: nothing to reuse across a TILE; or no outer loop would be left
    axis = state.axes.index(outer)
    tiled = try_opt(state, Opt(OptOps.TILE, axis, block), renderer)
    if tiled is state:
        return state
    blocks = axis_index(tiled, simd_id)
    assert blocks is not None  # TILE keeps the outer part's id
    return try_opt(tiled, Opt(OptOps.SWAP, 0, blocks), renderer)


__all__ = ["CPU_TRANSPOSE_MIN", "cpu_opt_rules"]
