"""Hand-coded choice of opts: what a kernel gets when BEAM search is off.

The questions asked of a kernel are about its memory access: for each axis and each buffer access, the
stride of the index along that axis (0: the buffer is reused along the axis, 1: contiguous). Then:

* CPU-style targets (loops, SIMD by the C compiler):
  - a reduction with outputs to tile (matmul, conv): UPCAST the axis that is contiguous in the most loads
    of the reduce loop (the SIMD direction, by two of the renderer's SIMD registers of floats, 32 for AVX-512;
    the store breaks ties) and a second axis along which some input is reused (8 rows). The tile of 8x32
    accumulators stays in registers over the whole reduce loop, and each loaded value is used 8 or 32 times: a
    register-tiled matmul. A tile still small grows along one more axis (in a kernel of little work only when it
    has a window: a convolution), first one whose loads slide along a reduce axis (a small
    convolution's output rows, which share input rows with the kernel rows). A SIMD row that does not fill whole
    registers (a convolution's output row of 20) is planned in registers instead: 4 rows of the reuse axis times
    as many output rows as the vector registers hold.
  - a reduction to few outputs (sum of a big vector): UNROLL the reduce axis by 8, eight accumulators in one
    loop, which the compiler keeps in one SIMD register; a short inner output axis (partial sums over chunks of
    a batch) is UPCAST whole first, and the reduce axis unrolled by 4.
  - elementwise kernels: nothing, the C compiler vectorises the innermost loop already; except a big transpose
    (stored along one axis, loaded along another), which moves 4x4 blocks.
  The outermost global axis always stays a plain loop, so a multi-core CPU backend can split it.
* GPU-style targets (`has_local`):
  - a big reduction to few outputs: GROUP it over up to 256 work-items that combine in local memory.
  - otherwise: work-groups (LOCAL) of up to 16x16 work-items over the two innermost launch dimensions (a launch
    of one dimension gets groups of the renderer's `flat_work_group`, 256 by default), and for matmul-like
    kernels a 4x4 UPCAST per work-item.
"""

from __future__ import annotations

from collections.abc import Callable

from tinygrad.codegen.lowerer import IDX
from tinygrad.codegen.opt.actions import Opt, OptError, OptOps, OptState, apply_opt, work_item_ranges
from tinygrad.dtype import dtypes
from tinygrad.renderer import Renderer
from tinygrad.uop.ops import AxisKind, Ops, UOp
from tinygrad.uop.symbolic import simplify

#: CPU register tile: rows along the reuse axis (the SIMD axis's amounts come from the renderer's knobs, `_Cpu`)
CPU_REUSE = (8, 6, 4, 3, 2)
#: the same for an uneven SIMD row, whose tile then grows along a sliding axis (`_row_tile`)
CPU_REUSE_UNEVEN = (4, 3, 2)
#: multiply-adds below which a kernel's register tile does not grow past its SIMD and reuse axes
CPU_SMALL_WORK = 1 << 23
#: the same for a kernel with a window (several reduce axes: a convolution's channels and kernel rows and columns),
#: whose grown tile reuses each loaded input row across the window: the layers of a small ResNet at batch 1
CPU_SMALL_WINDOW_WORK = 1 << 18
#: a reduce axis up to this long is unrolled whole in a reduction to few outputs
CPU_REDUCE_WHOLE = 32
#: in a reduction to few outputs, an inner output axis up to this long is computed side by side (`_partial_sums`)
CPU_PARTIAL_SUMS = 8
#: a small window's outputs computed side by side along the outermost axis (`_cpu_opts`)
CPU_POOL_SIDE_BY_SIDE = 8
#: a transposing elementwise kernel (`_transpose_tile`) of at least this many outputs moves blocks of this size
#: outputs side by side per output axis in a reduction whose loads run along the reduce axis
CPU_ROWS_ALONG_THE_REDUCTION = (4, 2)
CPU_TRANSPOSE_MIN = 1 << 16
CPU_TRANSPOSE_BLOCK = 4


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

    def uneven_row(self, simd_amt: int) -> bool:
        """A SIMD row longer than half a register that does not fill whole registers (a convolution's output row
        of 10, 20 or 24 floats with 16 lanes): each of its registers but one is full, and the tile is planned in
        registers rather than floats (`_row_tile`)."""
        return simd_amt > self.lanes // 2 and simd_amt % self.lanes != 0

    def row_registers(self, simd_amt: int) -> int:
        return -(-simd_amt // self.lanes)

    def simd_amount(self, n: int) -> int | None:
        """Lanes along the SIMD axis: a short axis (a 20- or 24-wide row of a convolution's output) whole, which
        the C compiler splits into vectors and a rest (and whose edge conditions of padding then fold away); a
        longer one in a whole number of vectors: on the MNIST example's convolutions whole rows of 20 and 24 ran
        much faster than rows cut into 4 or 8 (CHANGELOG, "Measurements behind the heuristics")."""
        if 4 <= n <= max(self.simd):
            return n
        return _largest_divisor(n, self.simd) or _largest_divisor(n, (4,))


def _const(r: UOp) -> int | None:
    return int(r.src[0].arg) if r.src[0].op is Ops.CONST else None


def _accesses(state: OptState) -> list[UOp]:
    """The kernel's buffer accesses (INDEX of a PARAM, loads and stores), in the order every per-access list of
    this module follows."""
    return [u for u in state.sink.toposort() if u.op is Ops.INDEX and u.src[0].op is Ops.PARAM]


def access_strides(state: OptState, r: UOp) -> list[int | None]:
    """For every load of a buffer, the stride of its index along range r (None: not affine/unknown)."""
    out: list[int | None] = []
    others = {u: UOp.const(IDX, 0) for u in state.sink.toposort() if u.op is Ops.RANGE and u is not r}
    for u in _accesses(state):
        idx = u.src[1]
        if r not in idx.toposort():
            out.append(0)
            continue
        base = idx.substitute(others)
        at0, at1 = simplify(base.substitute({r: UOp.const(IDX, 0)})), simplify(base.substitute({r: UOp.const(IDX, 1)}))
        out.append(int(at1.arg) - int(at0.arg) if at0.op is Ops.CONST and at1.op is Ops.CONST else None)
    return out


def _accesses_in_the_loop(state: OptState) -> list[bool]:
    """For every access `access_strides` lists: whether its layout matters to the reduce loop. A load that no reduce
    range moves (a convolution's bias, fused into its input) is read once per output, outside the loop; that it is
    contiguous along some output axis must not make that axis the SIMD direction. Stores always count."""
    reduce_ranges = set(state.ranges(AxisKind.REDUCE))
    return [st or not reduce_ranges or any(r in reduce_ranges for r in u.src[1].toposort())
            for u, st in zip(_accesses(state), _stores(state))]


def _stores(state: OptState) -> list[bool]:
    """For every access `access_strides` lists: whether it is the index of a STORE."""
    stored = {u.src[0] for u in state.sink.toposort() if u.op is Ops.STORE}
    return [u in stored for u in _accesses(state)]


def _largest_divisor(n: int, choices: tuple[int, ...]) -> int | None:
    return next((c for c in choices if n % c == 0 and c <= n), None)


def _try(state: OptState, opt: Opt, renderer: Renderer) -> OptState:
    try:
        return apply_opt(state, opt, renderer)
    except OptError:
        return state


def hand_coded_opts(state: OptState, renderer: Renderer) -> OptState:
    globals_, reduces = state.ranges(AxisKind.GLOBAL), state.ranges(AxisKind.REDUCE)
    if any(_const(r) is None for r in globals_ + reduces) or len({tuple(r for r in st.toposort()
           if r.op is Ops.RANGE and r.arg.kind is AxisKind.GLOBAL) for st in state.sink.src}) != 1:
        return state  # symbolic shapes and multi-shape kernels run as lowered
    out_size = 1
    for g in globals_:
        out_size *= _const(g) or 1
    red_size = 1
    for r in reduces:
        red_size *= _const(r) or 1
    if renderer.has_local:
        return _gpu_opts(state, renderer, globals_, reduces, out_size, red_size)
    return _cpu_opts(state, renderer, globals_, reduces, out_size, red_size)


def _tile_axes(state: OptState, globals_: list[UOp], simd_amounts: tuple[int, ...],
               reuse_amounts: tuple[int, ...], simd_amount: Callable[[int], int | None] | None = None,
               uneven_rows_lose: bool = False) -> tuple[int | None, int | None]:
    """(the SIMD axis, the reuse axis) as Opt axis numbers, among axes whose size one of the amounts divides.

    The SIMD axis is contiguous (stride 1) in the most accesses. The reuse axis is the one along which the
    accesses that move along the SIMD axis do not move (b in a matmul, the image in a convolution), so that each
    vector load serves a whole row of the tile; then the one along which the most accesses do not move. Ties go
    inner."""
    axes = state.axes
    strides = {g: access_strides(state, g) for g in globals_}
    counted = _accesses_in_the_loop(state)
    stored = _stores(state)

    def fits(g: UOp, amounts: tuple[int, ...]) -> bool:
        return _largest_divisor(_const(g) or 1, amounts) is not None

    def contiguous(g: UOp) -> tuple[int, int]:
        # loads in the reduce loop first: the store happens once per output, after the loop (it breaks ties)
        return (sum(1 for s, c, st in zip(strides[g], counted, stored) if s == 1 and c and not st),
                sum(1 for s, st in zip(strides[g], stored) if s == 1 and st))

    def simd_fits(g: UOp) -> bool:
        return simd_amount(_const(g) or 1) is not None if simd_amount is not None else fits(g, simd_amounts)

    def fills_vectors(g: UOp) -> bool:
        # lanes for at least half of a register of the smallest SIMD amount: a weight gradient's 5 kernel columns,
        # along which the image is contiguous, lose to its output channels, along which the gradient is (a copy with
        # channels innermost, for a first layer of few input channels). With `uneven_rows_lose` (the renderer's
        # `uneven_rows_channels_last`), in a kernel with a window, a row shorter than a register that leaves part
        # of its last half empty (10 of 16 lanes) does not either: a convolution's 10-wide output rows lose to its
        # output channels read from a channels-last weight (`_short_rows_conv` in tg-core), as BEAM found; a 1x1
        # convolution keeps its rows
        n = _const(g) or 1
        amount = simd_amount(n) if simd_amount is not None else _largest_divisor(n, simd_amounts)
        half = min(simd_amounts)
        uneven = amount is not None and amount < 2 * half and amount % half != 0
        return amount is not None and amount >= half and not (uneven and uneven_rows_lose and windowed)

    # among axes contiguous in as many loads, one whose lanes no gate tests (a padded row tests the border in every
    # lane, the output channels of a convolution read from a channels-last weight do not)
    window_strides, gated = _window_strides(state), _gated_ranges(state)
    windowed = len(state.ranges(AxisKind.REDUCE)) > 1
    simd = max((g for g in globals_ if sum(contiguous(g)) > 0 and simd_fits(g)),
               key=lambda g: (contiguous(g)[0], fills_vectors(g), g not in gated, contiguous(g)[1], g.arg.axis),
               default=None)

    def independent_rows(g: UOp) -> bool:
        # an axis no gate tests and along which no load slides like a window (the batch, not an output row of a
        # convolution): each tile row reads rows of its own, without per-lane padding tests (with the output
        # channels as the SIMD axis, a padded row as the reuse axis ran several times slower than the batch)
        return g not in gated and not any(st in ws for st, ws in zip(strides[g], window_strides))

    def reuse_score(g: UOp) -> tuple[int, bool, int, int]:
        # the accesses that move along the SIMD axis, at any stride: a strided convolution's input moves by 2 there
        # (its lanes are gathered, not loaded as one vector), and still wants the output channels as the reuse axis,
        # along which it stays put, rather than an output row, along which only the weights do
        vector_reuse = sum(1 for s, v in zip(strides[g], strides[simd]) if s == 0 and v not in (0, None)) \
            if simd is not None else 0
        return vector_reuse, independent_rows(g), sum(1 for s in strides[g] if s == 0), g.arg.axis

    reuse = max((g for g in globals_ if g is not simd and any(s == 0 for s in strides[g]) and
                 fits(g, reuse_amounts)), key=reuse_score, default=None)
    return (axes.index(simd) if simd is not None else None), (axes.index(reuse) if reuse is not None else None)




def _axis_index(state: OptState, axis_id: int | None) -> int | None:
    """The Opt number of the axis with this RANGE id now (opts before may have moved or used up the axis)."""
    return next((i for i, r in enumerate(state.axes) if r.arg.axis == axis_id), None)


def _cpu_opts(state: OptState, renderer: Renderer, globals_: list[UOp], reduces: list[UOp], out_size: int,
              red_size: int) -> OptState:
    if not reduces:
        return _transpose_tile(state, renderer, globals_, out_size)
    if red_size < 16:
        # a small 2-D window (a 2x2 pool) over a big batch, with output rows that do not fill whole registers (10
        # or 3 wide): 8 images side by side, the window a loop (8 accumulators and 8 streams of loads in flight);
        # unrolling the window too was several times slower, as was the window alone unrolled (as BEAM found).
        # Rows of whole registers (a ResNet's 16x16 pool) vectorise along the row: the window unrolled (CHANGELOG)
        outer = _const(globals_[0]) if globals_ else None
        row = (_const(globals_[-1]) or 1) if globals_ else 1
        if len(reduces) >= 2 and row % _Cpu(renderer).lanes != 0 and outer is not None and \
                outer % CPU_POOL_SIDE_BY_SIDE == 0 and outer >= 2 * CPU_POOL_SIDE_BY_SIDE:
            images = _try(state, Opt(OptOps.UPCAST, 0, CPU_POOL_SIDE_BY_SIDE), renderer)
            if images is not state:
                return images
        # otherwise unrolled whole: straight-line code per output instead of a loop of 2
        while state.ranges(AxisKind.REDUCE) and (n := _const(state.axes[-1])) is not None and n > 1:
            unrolled = _try(state, Opt(OptOps.UNROLL, len(state.axes) - 1, n), renderer)
            if unrolled is state:
                break
            state = unrolled
        return state
    if out_size >= 256 and (_const(reduces[-1]) or 1) % _Cpu(renderer).lanes == 0 and \
            _reads_along_the_reduction(state, globals_, reduces):
        return _vectors_along_the_reduction(state, renderer, globals_)
    if out_size >= 256:
        cpu = _Cpu(renderer)
        simd, reuse = _tile_axes(state, globals_, cpu.simd, CPU_REUSE, cpu.simd_amount,
                                 renderer.knobs.uneven_rows_channels_last)
        simd_id = state.axes[simd].arg.axis if simd is not None else None
        reuse_id = state.axes[reuse].arg.axis if reuse is not None else None
        simd_amt = 1
        if simd is not None:
            r = state.axes[simd]
            # keep the outermost global axis a loop of more than one iteration: a threaded backend splits it
            n = _const(r) or 1
            amt = cpu.simd_amount(n) if r is not globals_[0] or n >= 64 else None
            if amt == n and n >= 2 * cpu.lanes and _broadcasts_a_window(state, r):
                # output channels of a convolution read from a channels-last weight: the whole axis in registers ran
                # slower than half of it (CHANGELOG)
                amt = _largest_divisor(n, tuple(a for a in cpu.simd if a <= n // 2))
            if amt is not None:
                state, simd_amt = _try(state, Opt(OptOps.UPCAST, simd, amt), renderer), amt
        # an uneven row in a big convolution: 4 channels, then output rows (`_row_tile`)
        sliding = _sliding_axes(state, (globals_[0].arg.axis, reuse_id))
        uneven = simd_amt > 1 and cpu.uneven_row(simd_amt) and out_size * red_size >= CPU_SMALL_WORK and bool(sliding)
        if (ax := _axis_index(state, reuse_id)) is not None:
            r = state.axes[ax]
            n = _const(r) or 1
            # as the outermost axis (a batch of one: the output channels), it keeps two iterations or more: without a
            # reuse axis, each load of a small convolution served one multiply-add
            amounts = CPU_REUSE_UNEVEN if uneven else CPU_REUSE
            amt = _largest_divisor(n, amounts) if r is not globals_[0] or n >= 2 * max(CPU_REUSE) else None
            if amt is not None:
                state = _try(state, Opt(OptOps.UPCAST, ax, amt), renderer)
        if uneven:
            state = _row_tile(state, renderer, cpu, simd_amt, sliding)
        # grow a small tile along more reuse axes while one fits; not for little work, where the bigger unrolled body
        # costs more compile time than it saves (as for the MNIST example's 10x576 weight gradient, CHANGELOG),
        # unless the kernel has a window: a convolution at batch 1 (4x4 and 8x8 outputs) ran up to twice as fast,
        # and faster again with a tile of half the registers (max_tile), as BEAM picks for such layers
        windowed = len(reduces) > 1
        grow_from = CPU_SMALL_WINDOW_WORK if windowed else CPU_SMALL_WORK
        target = cpu.max_tile if windowed and out_size * red_size < CPU_SMALL_WORK else cpu.min_tile
        while state.upcast_size() < target and out_size * red_size >= grow_from:
            grown = _grow_tile(state, renderer, cpu.max_tile, globals_[0].arg.axis, reuse_id)
            if grown is state:
                break
            state = grown
        if state.applied:
            return _block_for_l2(state, renderer, cpu.l2_budget, simd_id, simd_amt, red_size)
    # few outputs (or nothing to tile): the partial sums of a split reduction side by side (`_partial_sums`); then
    # independent accumulators for the innermost reduce axis: a short one (a row of 20 or 24 in a BatchNorm's
    # statistics) whole, which the C compiler turns into vectors, and then two of the next axis's rows (faster on
    # the MNIST example's BatchNorm statistics, CHANGELOG); beside the partial sums, 4 of it
    state, side_by_side = _partial_sums(state, renderer, globals_) if out_size < 256 else (state, False)
    last = len(state.axes) - 1
    n = _const(state.axes[last]) or 1
    if side_by_side:
        amt = _largest_divisor(n, (4, 2))
        return _try(state, Opt(OptOps.UNROLL, last, amt), renderer) if amt else state
    amt = n if 2 <= n <= CPU_REDUCE_WHOLE else _largest_divisor(n, (16, 8, 4, 2))
    if not amt:
        return state
    unrolled = _try(state, Opt(OptOps.UNROLL, last, amt), renderer)
    if unrolled is not state and amt == n and unrolled.ranges(AxisKind.REDUCE):
        nxt = len(unrolled.axes) - 1
        if (_const(unrolled.axes[nxt]) or 1) % 2 == 0:
            unrolled = _try(unrolled, Opt(OptOps.UNROLL, nxt, 2), renderer)
    return unrolled


def _reads_along_the_reduction(state: OptState, globals_: list[UOp], reduces: list[UOp]) -> bool:
    """Whether the loads in the reduce loop run contiguously along the innermost reduce axis and along no output axis
    (a row sum, a matrix-vector product against a row-major matrix): vectors along an output axis would gather each
    lane from another row."""
    counted, stored = _accesses_in_the_loop(state), _stores(state)
    loads = [c and not st for c, st in zip(counted, stored)]
    along_reduce = any(s == 1 and ld for s, ld in zip(access_strides(state, reduces[-1]), loads))
    return along_reduce and not any(s == 1 and ld for g in globals_ for s, ld in zip(access_strides(state, g), loads))


def _vectors_along_the_reduction(state: OptState, renderer: Renderer, globals_: list[UOp]) -> OptState:
    """For `_reads_along_the_reduction` (with an innermost reduce axis of whole vectors): that axis unrolled by a
    vector's lanes (one vector accumulator, contiguous vector loads), and a few outputs of each output axis side by
    side, so that a load along the reduction that an output axis does not move (the vector of a matrix-vector
    product) serves each of them. The outermost axis stays a loop of many iterations for the threads to split, or
    goes whole (a few rows of a batch) when the next one is such a loop."""
    cpu = _Cpu(renderer)
    last = len(state.axes) - 1
    state = _try(state, Opt(OptOps.UNROLL, last, cpu.lanes), renderer)
    for i, g in enumerate(globals_):
        n = _const(g) or 1
        rows = _largest_divisor(n, CPU_ROWS_ALONG_THE_REDUCTION)
        if rows is None or (ax := _axis_index(state, g.arg.axis)) is None:
            continue
        if i == 0 and n // rows < 64 and not (rows == n and len(globals_) > 1 and (_const(globals_[1]) or 1) >= 64):
            continue
        state = _try(state, Opt(OptOps.UPCAST, ax, rows), renderer)
    return state


def _transpose_tile(state: OptState, renderer: Renderer, globals_: list[UOp], out_size: int) -> OptState:
    """An elementwise kernel that transposes (a channels-last copy: stored contiguously along the innermost axis,
    loaded contiguously along another one and with a stride along the innermost): 4x4 blocks, UPCAST along both
    axes, so that each load and each store covers 4 neighbours, which the compiler turns into a few vector loads,
    shuffles and vector stores instead of a gather of single floats per vector stored (faster on the MNIST example's
    channels-last copies, as BEAM found; CHANGELOG). Not for small kernels, whose compile time it would only add to."""
    if out_size < CPU_TRANSPOSE_MIN or len(globals_) < 2:
        return state
    stores = _stores(state)
    inner = globals_[-1]
    along_inner = access_strides(state, inner)
    if sum(stores) != 1 or along_inner[stores.index(True)] != 1:
        return state
    for r in reversed(globals_[:-1]):
        along = access_strides(state, r)
        # a load contiguous along r and strided along the innermost axis
        if any(not st and s == 1 and si not in (0, 1, None) for s, si, st in zip(along, along_inner, stores)):
            n = _const(r) or 1
            # the outermost axis stays a loop of many iterations for the threads to split
            if (_const(inner) or 1) % CPU_TRANSPOSE_BLOCK or n % CPU_TRANSPOSE_BLOCK or (r is globals_[0] and n < 64):
                return state
            tiled = _try(state, Opt(OptOps.UPCAST, state.axes.index(inner), CPU_TRANSPOSE_BLOCK), renderer)
            if tiled is state or (ax := _axis_index(tiled, r.arg.axis)) is None:
                return state
            return _try(tiled, Opt(OptOps.UPCAST, ax, CPU_TRANSPOSE_BLOCK), renderer)
    return state


def _partial_sums(state: OptState, renderer: Renderer, globals_: list[UOp]) -> tuple[OptState, bool]:
    """A reduction to few outputs with a short output axis inside the outermost one (the 4 partial sums over chunks
    of the batch that `split_large_reductions` makes of a BatchNorm's statistics, per channel): that axis whole as
    an UPCAST, whether it was. Each partial sum then has its own accumulator and reads its own images: several
    streams of loads and chains of adds in flight instead of one (faster on the MNIST example's BatchNorm statistics
    and their gradients, as BEAM found; CHANGELOG). The outermost axis stays a loop for the threads to split."""
    for r in globals_[1:]:
        n = _const(r)
        if n is not None and 2 <= n <= CPU_PARTIAL_SUMS and (ax := _axis_index(state, r.arg.axis)) is not None:
            upcast = _try(state, Opt(OptOps.UPCAST, ax, n), renderer)
            if upcast is not state:
                return upcast, True
    return state, False


def _broadcasts_a_window(state: OptState, r: UOp) -> bool:
    """Whether `r` is the output channels of a convolution whose weight has them innermost: the loads contiguous
    along r are a weight (they move along no other output axis, and do not slide), and a load that stays put along
    r (the input, broadcast to the channels) slides along a reduce axis (`_window_strides`). A weight gradient read
    channels-last is not: its contiguous load moves along the batch chunks."""
    window_strides = _window_strides(state)
    others = [access_strides(state, g) for g in state.ranges(AxisKind.GLOBAL) if g is not r]
    sliding = [any(col[i] in ws for col in others) for i, ws in enumerate(window_strides)]
    strides = access_strides(state, r)
    weights = [s == 1 and all(col[i] == 0 for col in others) for i, s in enumerate(strides)]
    contiguous = [i for i, s in enumerate(strides) if s == 1]
    return bool(contiguous) and all(weights[i] and not sliding[i] for i in contiguous) \
        and any(sl for s, sl in zip(strides, sliding) if s == 0)


def _window_strides(state: OptState) -> list[set[int]]:
    """Per access, its strides along the reduce axes: a load that moves along an output axis exactly as along a
    reduce axis is a sliding window (a convolution's input along the output rows and the kernel rows)."""
    return [set(col) - {0, None} for col in zip(*(access_strides(state, r) for r in state.ranges(AxisKind.REDUCE)))]


def _gated_ranges(state: OptState) -> set[UOp]:
    """The axes that some access's gate depends on: a padded convolution's output rows and columns, where the edge
    rows read zeros instead of memory."""
    return {r for u in _accesses(state) if len(u.src) > 2 for r in u.src[2].toposort() if r.op is Ops.RANGE}


def _sliding_axes(state: OptState, skip: tuple[int | None, ...]) -> list[int]:
    """The ids of the global axes (not in `skip`, not tested by a gate) along which some load slides as along a reduce
    axis: a convolution's output rows, whose input rows the kernel rows share."""
    window_strides, gated = _window_strides(state), _gated_ranges(state)
    return [g.arg.axis for g in state.ranges(AxisKind.GLOBAL)
            if g.arg.axis not in skip and g not in gated and (_const(g) or 1) >= 2
            and any(st in ws for st, ws in zip(access_strides(state, g), window_strides))]


def _row_tile(state: OptState, renderer: Renderer, cpu: _Cpu, simd_amt: int, sliding: list[int]) -> OptState:
    """The register tile of an uneven SIMD row (`_Cpu.uneven_row`): 4 rows of the reuse axis (`CPU_REUSE_UNEVEN`)
    times the most rows of a sliding axis (`_sliding_axes`) that keep the accumulators within the vector
    registers. Eight channels of one output row, the even rows' tile, load a row's 2 registers and 8 broadcasts
    for 16 multiply-adds; 4 channels of 4 rows load 8 and 4 for 32 (the MNIST example's 20- and 24-wide
    convolutions 20-30% faster, its 10-wide one 27%, CHANGELOG)."""
    rows = state.upcast_size() // simd_amt
    for axis_id in sliding:
        if (ax := _axis_index(state, axis_id)) is None:
            continue
        n = _const(state.axes[ax]) or 1
        fits = [d for d in range(2, n + 1) if n % d == 0 and cpu.row_registers(simd_amt) * rows * d <= cpu.registers]
        if fits:
            return _try(state, Opt(OptOps.UPCAST, ax, max(fits)), renderer)
    return state


def _grow_tile(state: OptState, renderer: Renderer, max_tile: int, outer_id: int, reuse_id: int | None) -> OptState:
    """A small register tile (a 5-wide kernel row times 8 channels in a convolution's weight gradient) grows
    along one more axis, one along which the loads that the first reuse axis does not reuse stay put: then
    every load of the reduce loop serves several accumulators."""
    tile = state.upcast_size()
    globals_ = state.ranges(AxisKind.GLOBAL)
    first = next((g for g in globals_ if g.arg.axis == reuse_id), None)
    not_reused = [s != 0 for s in access_strides(state, first)] if first is not None else None

    window_strides, gated = _window_strides(state), _gated_ranges(state)

    best: tuple[tuple[bool, int, bool, int], int, UOp] | None = None
    for g in globals_:
        n = _const(g) or 1
        if g is first or (g.arg.axis == outer_id and n < 32):
            continue
        strides = access_strides(state, g)
        # the loads that stay put along g (among those the first reuse axis does not reuse)
        reused = sum(1 for i, st in enumerate(strides) if st == 0 and (not_reused is None or not_reused[i]))
        if reused == 0:
            continue
        slides = any(st in ws for st, ws in zip(strides, window_strides))
        # a short axis whole (the 5 rows of a 5x5 kernel) where it fits, else by a divisor
        amounts = ((n,) if n <= max(CPU_REUSE) else ()) + CPU_REUSE
        amt = next((c for c in amounts if n % c == 0 and c <= n and tile * c <= max_tile), None)
        if amt is None or (g in gated and amt < n):
            # a gated axis only whole: cut into parts, each copy of the tile tests its rows' gates at run time and
            # the padded convolutions of a small ResNet ran several times slower (CHANGELOG)
            continue
        # first an axis along which the loads slide over the same rows: output rows of a small convolution, whose
        # rows of input the kernel rows share (faster than tiles grown along the batch on the MNIST example's 8x8
        # and 6x6 layers). Then ties go to a short axis taken whole: a convolution's kernel rows, whose loads
        # overlap from one output row to the next (faster weight gradients than tiles grown along the channels;
        # both measurements are in the CHANGELOG)
        rank = (slides, reused, amt == n, amt)
        if best is None or rank > best[0]:
            best = (rank, amt, g)
    if (best is None or not (best[0][0] or best[0][2])) and first is not None and (_const(first) or 1) % 2 == 0 \
            and tile * 2 <= max_tile:
        # no sliding axis, and none short enough to take whole: twice the rows of the reuse axis (16 output channels
        # instead of 8), whose loads are the vector loads the tile already makes, rather than a new axis that adds
        # loads of its own (faster on the padded and strided convolutions of a small ResNet, CHANGELOG)
        return _try(state, Opt(OptOps.UPCAST, state.axes.index(first), 2), renderer)
    if best is None:
        return state
    return _try(state, Opt(OptOps.UPCAST, state.axes.index(best[2]), best[1]), renderer)


def _block_for_l2(state: OptState, renderer: Renderer, l2_budget: int, simd_id: int | None, simd_amt: int,
                  red_size: int) -> OptState:
    """Cache blocking of a register-tiled kernel: when the strips of the vector operand that one pass over the
    SIMD axis reads (a tile's columns of B, over the whole reduction) outgrow the L2 budget, TILE the SIMD axis
    into blocks whose strips fit and SWAP the block loop outermost. Each block of B then stays in L2 while
    every row tile of A passes it, and A (read by broadcasts, a quarter of the bytes per FMA) streams from
    farther away instead of B."""
    globals_ = state.ranges(AxisKind.GLOBAL)
    outer = next((g for g in globals_ if g.arg.axis == simd_id), None)
    if outer is None or outer is globals_[0] or (tiles := _const(outer)) is None:
        return state
    strip = red_size * simd_amt * 4
    # at least 8 blocks where there are tiles enough: the block loop is the one a threaded backend splits
    per_block = max(1, min(l2_budget // strip, tiles // 8))
    if per_block >= tiles:
        return state
    block = max((d for d in range(1, per_block + 1) if tiles % d == 0), default=1)
    if block == 1 or block == tiles:
        return state  # one strip per block: nothing to reuse across a TILE; or no outer loop would be left
    axis = state.axes.index(outer)
    tiled = _try(state, Opt(OptOps.TILE, axis, block), renderer)
    if tiled is state:
        return state
    blocks = _axis_index(tiled, simd_id)
    assert blocks is not None  # TILE keeps the outer part's id
    return _try(tiled, Opt(OptOps.SWAP, 0, blocks), renderer)


def _tensor_core_opts(state: OptState, renderer: Renderer) -> OptState | None:
    """A matmul-shaped kernel on a target with tensor cores: the first tensor core that fits, each warp computing
    a block of its tiles, 4x4 where there are at least 64 tiles along an axis, else 2x2 (each lane's A fragment then
    serves four or two tiles, and its B fragment as many: the tiles are read from memory, not staged, so this reuse
    is what keeps the tensor cores fed), in work-groups of up to four warps. None when no tensor core fits."""
    for i in range(len(renderer.tensor_cores)):
        tc = _try(state, Opt(OptOps.TC, 0, i), renderer)
        if tc is state:
            continue
        for r in work_item_ranges(tc, renderer)[1:3]:
            tiles = _const(r) or 1
            tc = _try(tc, Opt(OptOps.UPCAST, tc.axes.index(r), 4 if tiles % 4 == 0 and tiles >= 64 else 2), renderer)
        # whole work-groups only: a guarded one would leave warps out of the barriers a target may need
        for r in work_item_ranges(tc, renderer)[1:3]:
            if (_const(r) or 1) % 2 == 0:
                tc = _try(tc, Opt(OptOps.LOCAL, tc.axes.index(r), 2), renderer)
        return tc
    return None


def _gpu_opts(state: OptState, renderer: Renderer, globals_: list[UOp], reduces: list[UOp], out_size: int,
              red_size: int) -> OptState:
    if reduces and renderer.tensor_cores and (tc := _tensor_core_opts(state, renderer)) is not None:
        return tc
    axes = state.axes
    if reduces and out_size <= 64 and red_size >= 2048 and renderer.local_mem_max:
        big = max(reduces, key=lambda r: _const(r) or 0)
        for lanes in (256, 128, 64, 32, 16):
            grouped = _try(state, Opt(OptOps.GROUP, axes.index(big), lanes), renderer)
            if grouped is not state:
                return grouped
    if reduces and red_size >= 16 and out_size >= 1024:
        simd, reuse = _tile_axes(state, globals_, (4,), (4,))
        for ax in (simd, reuse):
            if ax is not None and (_const(state.axes[ax]) or 1) % 4 == 0 and (_const(state.axes[ax]) or 0) >= 16:
                state = _try(state, Opt(OptOps.UPCAST, ax, 4), renderer)
    # work-groups: up to 16 work-items in each of the two innermost launch dimensions (dividing sizes first), or
    # up to 256 along a launch of one dimension (faster than groups of 16 on PoCL, see the CHANGELOG; a GPU wants
    # more than a warp per group as well)
    budget = renderer.max_work_group_size or 256
    ranges = work_item_ranges(state, renderer)
    one_dim = len(ranges) == 1
    for r in ranges[:2]:
        if r.arg.kind is not AxisKind.GLOBAL:
            continue
        n = _const(r) or 1
        # a size with no small divisor still gets work-groups of 16: the last one is partial and guarded
        sizes = tuple(x for x in (256, 128, 64, 32) if x <= renderer.flat_work_group) + (16, 8, 4, 2) if one_dim \
            else (16, 8, 4, 2)
        fitting = [x for x in sizes if x <= budget and n % x == 0] or ([16] if n > 16 and budget >= 16 else [])
        for size in fitting:  # the largest the device's per-dimension limit (local_max) accepts
            new = _try(state, Opt(OptOps.LOCAL, state.axes.index(r), size), renderer)
            if new is not state:
                budget //= size
                state = new
                break
    return state


__all__ = ["access_strides", "hand_coded_opts"]
