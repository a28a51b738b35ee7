"""C for the CPU: the C-style base's kernel, with its outermost output loops split into slices for the thread pool.

Every kernel takes three extra arguments, `tg_start, tg_end, tg_total`, and runs the part of its outermost global
loop that [tg_start, tg_end) is of [0, tg_total): `for (i = B*tg_start/tg_total; i < B*tg_end/tg_total; i++)` for a
loop bound B. Scaling the slice (instead of passing loop indices) keeps one launch valid for a symbolic bound,
whose value only the kernel knows; slices that tile [0, tg_total) still tile [0, B) exactly, so every output
element is written by one thread, and reductions (inner loops) stay inside one thread.

Next to the kernel the source defines, for `tg_backend_cpu.program`:
- `<name>_tg_slice(const long long *args, start, end, total)`: a fixed signature the pool calls; `args` holds the
  buffer addresses, then the symbolic variables' values, in the kernel's parameter order.
- `<name>_tg_run(const long long *args)`: the whole kernel on the calling thread (one ctypes argument to convert
  instead of four: launches of small kernels are mostly that overhead).
- `<name>_tg_outer`: the largest value of the outer loop bound (0: the kernel cannot be split), and
  `<name>_tg_nargs`: how many entries `args` must have.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from tinygrad.dtype import DType, dtypes
from tinygrad.renderer.cstyle import C_CODE_FOR_OP, C_RENDER_RULES, CKernel, CStyleRenderer, c_cast, cast_entry
from tinygrad.renderer.vectorize import split_index
from tinygrad.uop.ops import AxisKind, GroupOp, Ops, UOp, post_order
from tinygrad.uop.rewrite import PatternMatcher, UPat

from tg_backend_cpu import program as launch_plan
from tg_backend_cpu import vector_math
from tg_backend_cpu.byte_dot import byte_dots
from tg_backend_cpu.compiler import BYTE_DOT_MARKER, clang_major, find_c_compiler, host_fma_chains
from tg_backend_cpu.opt_rules import cpu_opt_rules

SLICE_PARAMS = ("tg_start", "tg_end", "tg_total")


def is_global_range(u: UOp) -> bool:
    """A RANGE over output elements (kind GLOBAL); loops of every other kind are not split."""
    return u.arg.kind is AxisKind.GLOBAL


@dataclass(frozen=True)
class SplitPlan:
    """Which RANGEs (by position among the program's RANGEs) run sliced, and the largest outer trip count."""

    sliced: tuple[bool, ...]
    outer_max: int  # 0 when nothing is sliced: the pool then runs the kernel on one thread

    @staticmethod
    def none(n_ranges: int) -> SplitPlan:
        return SplitPlan((False,) * n_ranges, 0)


def program_work(program: list[UOp]) -> float:
    """The operations one launch runs: each ALU, load and store times the trip counts of the loops around it
    (a symbolic bound at its largest value; an unbounded one makes the work infinite)."""
    work, volume = 0.0, 1.0
    enclosing: list[float] = []  # the volume outside each open loop
    for u in program:
        if u.op is Ops.RANGE:
            enclosing.append(volume)
            try:
                volume *= max(int(u.src[0].vmax), 0)
            except (TypeError, ValueError, OverflowError):
                return float("inf")
        elif u.op is Ops.END:
            volume = enclosing.pop()
        elif u.op in GroupOp.ALU or u.op in (Ops.LOAD, Ops.STORE):
            work += volume
    return work


def plan_split(program: list[UOp]) -> SplitPlan:
    """Slice the top-level loops when all of them are global, every STORE sits inside one, and the kernel does
    enough work for two threads (`program.MIN_WORK_PER_THREAD` each).

    A store outside the loops would be done by every thread, and a top-level loop of another kind (a reduction
    whose result the output loops read) would be recomputed by every thread: such kernels run on one thread.
    Kernels store only to their outputs and read only inputs, so sibling top-level loops split independently.
    """
    ranges = [u for u in program if u.op is Ops.RANGE]
    sliced: list[bool] = []
    depth = 0
    splittable = True
    for u in program:
        if u.op is Ops.RANGE:
            top = depth == 0
            if top and not is_global_range(u):
                splittable = False
            sliced.append(top and is_global_range(u))
            depth += 1
        elif u.op is Ops.END:
            depth -= 1
        elif u.op is Ops.STORE and depth == 0:
            splittable = False
    # a kernel with less work than two threads' minimum never runs split: its loops keep their constant bounds,
    # which LLVM and clang compile in a fraction of the time (no vector loop with a remainder for an unknown count)
    if not splittable or not any(sliced) or program_work(program) < 2 * launch_plan.MIN_WORK_PER_THREAD:
        return SplitPlan.none(len(ranges))
    try:
        outer_max = max(int(r.src[0].vmax) for r, s in zip(ranges, sliced, strict=True) if s)
    except (TypeError, ValueError, OverflowError):  # an unbounded symbolic size: no slicing
        return SplitPlan.none(len(ranges))
    return SplitPlan(tuple(sliced), max(outer_max, 0))


def _lower_bound(u: UOp) -> tuple[UOp, int] | None:
    """(x, a) when u is `(x < a) != True`, that is a <= x, for an integer x and a constant a."""
    if u.op is not Ops.CMPNE or u.src[1].op is not Ops.CONST or u.src[1].arg is not True:
        return None
    lt = u.src[0]
    if lt.op is not Ops.CMPLT or lt.src[1].op is not Ops.CONST or lt.src[0].dtype not in _UNSIGNED_OF:
        return None
    return lt.src[0], int(lt.src[1].arg)


def _upper_bound(u: UOp) -> tuple[UOp, int] | None:
    """(x, b) when u is `x < b` for an integer x and a constant b."""
    if u.op is not Ops.CMPLT or u.src[1].op is not Ops.CONST or u.src[0].dtype not in _UNSIGNED_OF:
        return None
    return u.src[0], int(u.src[1].arg)


_UNSIGNED_OF = {dtypes.int32: dtypes.uint32, dtypes.int64: dtypes.uint64}


def _one_range_check(x: UOp) -> UOp | None:
    """`a <= i & i < b` for a loop counter i as `(unsigned)i - a < b - a`, which is the same for every i (unsigned
    arithmetic wraps in C): a padding gate's two tests of one loop's counter. From the two, clang 19's CFG
    simplification makes a switch over the counter of a short loop (i != 0 and i != 17 for a loop of 18), and its
    loop vectoriser leaves a loop with a switch scalar: a padded copy ran ten times slower than the LLVM path's
    (CHANGELOG). Only loop counters: where the index is a sum (an upcast lane of a convolution's window), the two
    tests fold per lane and the unsigned form made the convolution twice as slow."""
    for lo_side, hi_side in ((x.src[0], x.src[1]), (x.src[1], x.src[0])):
        lo, hi = _lower_bound(lo_side), _upper_bound(hi_side)
        if lo is None or hi is None or lo[0] is not hi[0] or lo[0].op is not Ops.RANGE or lo[1] >= hi[1]:
            continue
        (index, a), b = lo, hi[1]
        unsigned = _UNSIGNED_OF[index.dtype]
        bits = unsigned.itemsize * 8
        shifted = index.cast(unsigned) - UOp.const(unsigned, a % (1 << bits))
        return shifted.lt(UOp.const(unsigned, b - a))
    return None


def _ungated_in_bounds(x: UOp) -> UOp | None:
    """A gated load whose address is inside its buffer for every value of the index, as an ordinary load under a
    select: `gate ? buf[i] : 0` either way, but the load no longer waits on the gate. A bias read per channel inside a
    padded copy's gate was such a load, and clang's loop vectoriser, which would have had to mask it, left the copy
    scalar (CHANGELOG)."""
    index = x.src[0]
    if len(index.src) < 3 or index.src[0].op is not Ops.PARAM or not isinstance(index.src[0].arg.size, int):
        return None
    i = index.src[1]
    if not (isinstance(i.vmin, int) and isinstance(i.vmax, int) and 0 <= i.vmin and i.vmax < index.src[0].arg.size):
        return None
    load = x.replace(src=(index.replace(src=index.src[:2]), *x.src[1:]))
    return index.src[2].where(load, UOp.const(x.dtype, 0))


def _inner_selects_decided(x: UOp) -> UOp | None:
    """`g ? f(g ? a : b) : c` as `g ? f(a) : c`: the value of the inner select matters only where g holds. A padded
    copy of a sum tests its padding once per operand (the bias of a convolution, padded, is `g ? bias : 0`) and once
    around the whole, and the inner selects cost clang's loop vectoriser the copy (CHANGELOG). Addresses and load
    gates are left as they are: a load that runs whether or not g holds must keep the address (and a gated one the
    gate) its select gave it."""
    g, value, other = x.src
    addresses = {u for idx in value.toposort() if idx.op is Ops.INDEX for s in idx.src[1:] for u in s.toposort()}
    decided = {u: u.src[1] for u in value.toposort()
               if u.op is Ops.WHERE and u.src[0] is g and u not in addresses}
    return g.where(value.substitute(decided), other) if decided else None


#: the C path's rewrites of the kernel graph (`Renderer.target_rewrites`)
C_TARGET_REWRITES = PatternMatcher([
    (UPat(Ops.AND, dtypes.bool, name="x"), lambda ctx, x: _one_range_check(x)),
    (UPat(Ops.LOAD, name="x"), lambda ctx, x: _ungated_in_bounds(x)),
    (UPat(Ops.WHERE, name="x"), lambda ctx, x: _inner_selects_decided(x)),
])


#: the arithmetic a register tile's vectors are computed with (gcc's and clang's vector extensions write it with the
#: scalar operators, a scalar operand standing for every lane); comparisons give masks (every bit of a lane set where
#: it holds), which the logic ops combine and WHERE and MAX select with
_VECTOR_INFIX = {Ops.ADD: "+", Ops.MUL: "*", Ops.SUB: "-", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "==",
                 Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^"}
_COMPARISONS = (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)
#: the element types of vectors (C names), the accumulators' among them: float32 and float64
_VECTOR_ELEMENTS = {dtypes.float32: "f32", dtypes.float64: "f64", dtypes.int8: "i8", dtypes.uint8: "u8",
                    dtypes.int16: "i16", dtypes.uint16: "u16", dtypes.int32: "i32", dtypes.uint32: "u32",
                    dtypes.int64: "i64", dtypes.uint64: "u64"}
_ACC_ELEMENTS = (dtypes.float32, dtypes.float64)
#: a tile without a vector load is computed as vectors from this many vector operations per gathered operand (gathering
#: the lanes costs about as much as computing the lanes one by one, a few operations)
GATHER_OPS = 4
#: a mask's lanes for values of each size
_MASK_OF = {4: dtypes.int32, 8: dtypes.int64}


@dataclass(frozen=True)
class Lanes:
    """One value of a vector tile, lane by lane: how it is computed, as a vector of `dtype` (a mask: int32 or int64
    lanes, all bits set where true). `kind` is "acc" (the tile's accumulators), "splat" (one scalar in every lane:
    `uops[0]`), "load" (consecutive elements of a read-only buffer, lane 0's INDEX is `uops[0]`), "alu" (`op` of the
    `args`, lane by lane; CAST converts), "parts" (the `args`, each a "load" or a "splat" of `sizes[i]` lanes, side
    by side: the ends of two rows of a tile in one vector), "gather" (each lane's scalar, `uops`), "dot4" (int32:
    `args[0]` plus the byte dots of `args[1 + 2j]` and `args[2 + 2j]` under `masks[j]`, `tg_backend_cpu.byte_dot`),
    "f16_bits" (float32 from the float16 bits of `args[0]`), "zero" or "tile" (the accumulators `uops` of another
    tile whose reduction has ended: an inner reduction's sums, read by the outer one's update); the last four are the
    LLVM path's."""

    kind: str
    dtype: DType
    uops: tuple[UOp, ...] = ()
    op: Ops | None = None
    args: tuple[Lanes, ...] = ()
    sizes: tuple[int, ...] = ()
    masks: tuple[int, ...] = ()

    def count(self, kind: str) -> int:
        return (self.kind == kind) + sum(a.count(kind) for a in self.args)


@dataclass(frozen=True)
class VectorTile:
    """Accumulators (`accs`, in lane order) that a reduction updates alike, computed as one vector of their dtype:
    `update` is the new value of every lane, written where the last of the `assigns` stands (`last`)."""

    accs: tuple[UOp, ...]
    assigns: tuple[UOp, ...]
    update: Lanes
    last: UOp  # the last of the assigns in program order


def _contiguous(loads: tuple[UOp, ...], read_only: set[UOp]) -> bool:
    """Whether the LOADs read consecutive elements of one buffer that the kernel does not write, ungated."""
    indices = [u.src[0] for u in loads]
    if any(i.op is not Ops.INDEX or len(i.src) != 2 or i.src[0] is not indices[0].src[0] for i in indices) or \
            indices[0].src[0] not in read_only:
        return False
    splits = [_split(i.src[1]) for i in indices]
    return all(t == splits[0][0] and c == splits[0][1] + lane for lane, (t, c) in enumerate(splits))


@functools.lru_cache(maxsize=1 << 14)
def _split(idx: UOp) -> tuple[tuple[UOp, ...], int]:
    """`split_index`, once per index (a tile's plan asks about each load's index for every run it tries)."""
    return split_index(idx)


#: at most this many parts in a vector of a tile's "parts" (`TileBuilder.parts`), each of at least this many lanes
#: (lanes of single scalars side by side are a gather: a quantized product's per-row scales)
MAX_PARTS, MIN_PART_LANES = 2, 2


class TileBuilder:
    """`lanes`: how to compute a tuple of values (one per lane) as a vector, or None where it cannot. With
    `parts_allowed` (a renderer that writes "parts"), lanes that are two runs of consecutive elements or of one
    scalar (the end of one row of a tile and the start of the next) are one vector of two parts."""

    parts_allowed = False

    def __init__(self, accs: tuple[UOp, ...], read_only: set[UOp], has_acc: dict[UOp, bool], mask: DType):
        self.accs, self.read_only, self.has_acc, self.mask = accs, read_only, has_acc, mask
        #: the accumulators of tiles whose reductions end before this tile's update, in lane order ("tile" lanes:
        #: `plan_vector_tiles` with `nested`)
        self.finished: set[tuple[UOp, ...]] = set()

    def lanes(self, values: tuple[UOp, ...]) -> Lanes | None:
        # a lane may read only its own accumulator: another's is the vector of a tile whose update is not ordered
        # against this one's
        first = values[0]
        d = self.mask if first.dtype == dtypes.bool else first.dtype
        if d not in _VECTOR_ELEMENTS or (first.dtype == dtypes.bool and first.op not in _COMPARISONS and
                                         first.op not in (Ops.AND, Ops.OR, Ops.XOR)):
            return None
        if values == self.accs:
            return Lanes("acc", d)
        if values in self.finished:
            return Lanes("tile", d, values)
        if all(v is first for v in values):
            return None if self.has_acc[first] else Lanes("splat", d, (first,))
        same = all(v.op is first.op and v.dtype == first.dtype and v.arg == first.arg and len(v.src) == len(first.src)
                   for v in values)
        if same and first.op is Ops.LOAD and first.dtype != dtypes.bool and _contiguous(values, self.read_only):
            return None if self.has_acc[first] else Lanes("load", d, (first.src[0],))
        if same and (first.op in _VECTOR_INFIX or first.op in (Ops.WHERE, Ops.MAX, Ops.CAST)):
            args = [self.lanes(tuple(v.src[k] for v in values)) for k in range(len(first.src))]
            if all(a is not None for a in args) and self._fits(first, d, [a for a in args if a is not None]):
                return Lanes("alu", d, op=first.op, args=tuple(a for a in args if a is not None))
        if first.dtype == dtypes.bool or any(self.has_acc[v] for v in values):
            return None
        return (self.parts(values) if self.parts_allowed else None) or Lanes("gather", d, values)

    def parts(self, values: tuple[UOp, ...]) -> Lanes | None:
        """The lanes as up to `MAX_PARTS` runs, each one scalar or consecutive elements of a read-only buffer (a
        vector load of its own), or None. A register tile whose rows are not a whole number of vectors (24 floats
        with 16 lanes) has vectors that hold the end of one row and the start of the next: the SLP vectoriser builds
        the same from two half-width loads."""
        cuts = [j for j in range(1, len(values)) if not self._continues(values[j - 1], values[j])]
        if not 0 < len(cuts) < MAX_PARTS:
            return None
        runs = [values[a:b] for a, b in zip([0, *cuts], [*cuts, len(values)])]
        if any(len(run) < MIN_PART_LANES for run in runs):
            return None
        parts = [self.lanes(run) for run in runs]  # each checked whole: one scalar, or one load of a row
        if any(p is None or p.kind not in ("load", "splat") for p in parts):
            return None
        return Lanes("parts", values[0].dtype, args=tuple(p for p in parts if p is not None),
                     sizes=tuple(len(r) for r in runs))

    def _continues(self, a: UOp, b: UOp) -> bool:
        """Whether lane value `b` continues the run of `a`: the same scalar, or the next element of its row."""
        return b is a or (a.op is Ops.LOAD and b.op is Ops.LOAD and _contiguous((a, b), self.read_only))

    def _fits(self, u: UOp, d: DType, args: list[Lanes]) -> bool:
        """Whether the operands' vectors have the lanes `u`'s vector needs."""
        if u.op is Ops.CAST:  # to floats only: the C conversion of a float to an integer is not the reference's
            return d.is_float and u.src[0].dtype != dtypes.bool
        if u.op in _COMPARISONS:  # of masks only != and ==: a true lane's mask (-1) is below a false one's (0)
            if u.src[0].dtype == dtypes.bool and u.op is Ops.CMPLT:
                return False
            return args[0].dtype == args[1].dtype and args[0].dtype.itemsize == self.mask.itemsize
        if u.op is Ops.WHERE:
            return args[0].dtype == self.mask and d.itemsize == self.mask.itemsize
        if u.op is Ops.MAX:
            return d.is_float and d.itemsize == self.mask.itemsize
        return True


#: makes the builder of a tile's lanes from its accumulators, the read-only buffers, which values read an accumulator
#: and the dtype of a mask
TileBuilderFactory = Callable[[tuple[UOp, ...], set[UOp], dict[UOp, bool], DType], TileBuilder]


def _tile(branches: list[int], run: tuple[UOp, ...], assigns: tuple[UOp, ...], loop_of: dict[UOp, UOp | None],
          position: dict[UOp, int], reads: dict[UOp, list[UOp]], read_only: set[UOp],
          has_acc: dict[UOp, bool], builder: TileBuilderFactory, done: list[VectorTile]) -> VectorTile | None:
    first = run[0]
    if any(a.src[0].op is not Ops.CONST for a in run) or any(a.dtype != first.dtype or loop_of[a] is not loop_of[first]
                                                             for a in run) or \
            any(loop_of[s] is not loop_of[assigns[0]] or loop_of[s] is None for s in assigns):
        return None
    # between the first update and the last, a lane's accumulator is the vector's: nothing else may read it there,
    # and the last update sees every lane's operands (no block of their own in between)
    lo, hi = min(position[s] for s in assigns), max(position[s] for s in assigns)
    if branches[hi] != branches[lo]:  # an IF or ENDIF in [lo, hi)
        return None
    values = tuple(s.src[1] for s in assigns)
    for acc, value in zip(run, values, strict=True):
        # (the update itself reads the accumulator: acc + a*b)
        between = [r for r in reads.get(acc, []) if lo <= position[r] <= hi and r is not value]
        if between and any(r not in value.toposort() for r in between):
            return None
    lanes = builder(run, read_only, has_acc, _MASK_OF[first.dtype.itemsize])
    # another tile's accumulators may be read whole where its reduction ended before this update (its loop is not
    # this one, and its updates all stand before this one's): the inner sums of a nested reduction
    lanes.finished = {t.accs for t in done if loop_of[t.last] is not loop_of[assigns[0]] and position[t.last] < lo}
    update = lanes.lanes(values)
    # worth it where a row of the tile is one vector load, or where the vector operations are many for each lane
    # gathered from scalars (a max-pool over a batch of strided images: a dozen operations per element)
    if update is None or update.dtype != first.dtype or \
            (update.count("load") == 0 and update.count("alu") < GATHER_OPS * max(update.count("gather"), 1)):
        return None
    return VectorTile(run, assigns, update, max(assigns, key=position.__getitem__))


def _by_shared_operands(accs: list[UOp], assign_of: dict[UOp, UOp | None], lanes: int) -> list[UOp]:
    """The accumulators reordered so that those that read the same broadcast operand are side by side (a stable sort
    by the loads that at least a vector's worth of accumulators read: a convolution's weight, one per output
    channel, read by every output of the channel's rows). A tile whose program order runs along its rows first and
    then its channels (rows of 24: [row][channel][24]) would otherwise put two channels in one vector, with two
    broadcasts side by side in it; in this order each vector holds the ends of two rows of one channel, under one
    broadcast, as the SLP vectoriser groups them."""
    loads: dict[UOp, list[UOp]] = {}
    readers: dict[UOp, int] = {}
    below: dict[UOp, tuple[UOp, ...]] = {}

    def loads_of(u: UOp) -> tuple[UOp, ...]:  # the LOADs an update reads (not those its addresses are computed from)
        if u not in below:
            below[u] = (u,) if u.op is Ops.LOAD else tuple(dict.fromkeys(x for s in u.src for x in loads_of(s)))
        return below[u]
    for acc in accs:
        assign = assign_of[acc]
        assert assign is not None
        loads[acc] = list(loads_of(assign.src[1]))
        for u in loads[acc]:
            readers[u] = readers.get(u, 0) + 1
    order = {u: i for i, u in enumerate(readers)}
    return sorted(accs, key=lambda a: [order[u] for u in loads[a] if readers[u] >= lanes])


class _ReadsAnAccumulator(dict[UOp, bool]):
    """Whether a value reads an accumulator, found when first asked (a tile's plan asks about its operands only)."""

    def __missing__(self, u: UOp) -> bool:
        for node in post_order((u,), skip=self.__contains__):  # sources first; what is known is not entered
            self[node] = node.op is Ops.DEFINE_ACC or any(self[s] for s in node.src)
        return self[u]


def plan_vector_tiles(program: list[UOp], simd_bytes: int, builder: TileBuilderFactory = TileBuilder,
                      parts: bool = False, acc_dtypes: tuple[DType, ...] = _ACC_ELEMENTS,
                      keep: Callable[[VectorTile], bool] = lambda tile: True,
                      nested: bool = False) -> list[VectorTile]:
    """The register tile's accumulators as vectors, for compilers that do not vectorise a tile held in scalars
    (gcc's SLP vectoriser does not start from a loop's accumulators: a convolution's tile ran one lane at a time).

    Accumulators are taken in program order (an UPCAST's lanes, its last axis the fastest), as many at a time as a
    SIMD register holds, else the largest power of two that fits: a run becomes a vector when every accumulator is
    updated once in the same loop by the same operations, and one of their operands is consecutive elements of an
    input (a row of the tile, one vector load); a lane may read only its own accumulator. Arithmetic, comparisons,
    selects, maxima and conversions to floats are computed on vectors; anything else (a division, a math function)
    is taken as lanes gathered from the scalar code, or where it reads an accumulator, makes no tile. `builder` reads
    the lanes (the LLVM path's also fuses multiply-adds). With `parts` (a builder that makes vectors of two parts),
    the accumulators are taken in the order of their broadcast operands (`_by_shared_operands`). `acc_dtypes`: the
    accumulators' dtypes that may be tiles; `keep`: which tiles found are kept. With `nested` (a writer of "tile"
    lanes), the accumulators left are tried again once the others are tiles: an outer reduction whose update reads
    an inner one's sums (a quantized product's sums per sub-block, scaled) reads them as that tile's vectors."""
    if not any(u.op is Ops.ASSIGN for u in program):
        return []
    position: dict[UOp, int] = {}
    branches = [0]  # branches[i]: the IFs and ENDIFs before program[i]
    loop_of: dict[UOp, UOp | None] = {}
    open_loops: list[UOp] = []
    assign_of: dict[UOp, UOp | None] = {}
    reads: dict[UOp, list[UOp]] = {}
    stored: set[UOp] = set()
    for i, u in enumerate(program):
        op = u.op
        position[u] = i
        branches.append(branches[-1] + (op is Ops.IF or op is Ops.ENDIF))
        if op is Ops.END:
            open_loops.pop()
        loop_of[u] = open_loops[-1] if open_loops else None
        if op is Ops.RANGE:
            open_loops.append(u)
        elif op is Ops.ASSIGN:
            # an accumulator assigned twice is not one the tile's single update can replace
            assign_of[u.src[0]] = u if u.src[0] not in assign_of else None
        elif op is Ops.STORE and u.src[0].op is Ops.INDEX:
            stored.add(u.src[0].src[0])
        if op is not Ops.ASSIGN:
            for src in u.src:
                if src.op is Ops.DEFINE_ACC:
                    reads.setdefault(src, []).append(u)
    has_acc = _ReadsAnAccumulator()
    read_only = {u for u in program if u.op is Ops.PARAM} - stored
    accs = [u for u in program if u.op is Ops.DEFINE_ACC and u.dtype in acc_dtypes and assign_of.get(u)]
    if parts and accs:
        accs = _by_shared_operands(accs, assign_of, simd_bytes // accs[0].dtype.itemsize)
    tiles: list[VectorTile] = []

    def plan(candidates: list[UOp]) -> None:
        i = 0
        while i < len(candidates):
            widest = simd_bytes // candidates[i].dtype.itemsize
            for width in (w for w in (64, 32, 16, 8, 4, 2) if w <= widest and i + w <= len(candidates)):
                run = tuple(candidates[i:i + width])
                assigns = tuple(a for a in (assign_of[acc] for acc in run) if a is not None)
                tile = _tile(branches, run, assigns, loop_of, position, reads, read_only, has_acc, builder, tiles)
                if tile is not None and keep(tile):
                    tiles.append(tile)
                    i += width
                    break
            else:
                i += 1
    plan(accs)
    if nested and tiles:
        tiled = {a for t in tiles for a in t.accs}
        plan([a for a in accs if a not in tiled])
    return tiles



#: what kernels use of <math.h>, as the compiler builtins gcc and clang both have: parsing math.h is a large part of
#: a small kernel's compile, which the first step of a training loop pays a hundred times over (CHANGELOG)
BUILTIN_MATH = ("sqrt", "sqrtf", "exp2", "exp2f", "log2", "log2f", "sin", "sinf", "trunc", "truncf", "fmod", "fmodf",
                "signbit")
BUILTIN_MATH_PRELUDE = "".join(f"#define {name} __builtin_{name}\n" for name in BUILTIN_MATH) + \
    "#define INFINITY __builtin_inff()\n#define NAN __builtin_nanf(\"\")\n#include <stdbool.h>\n"


#: selects as bit operations, for gcc: C's `c ? a : b` is a branch, which gcc's loop vectoriser takes only after its
#: loop if-conversion, and that is off on the C path (a miscompile, see compiler.py), so every loop with a select (a
#: ReLU, a max-pool's max) stayed scalar. Both operands are computed either way, as the select they stand for does.
SELECT_PRELUDE = """static inline float tg_where_f32(bool c, float a, float b) {
  union { float f; unsigned int u; } x = {a}, y = {b}, r;
  unsigned int m = -(unsigned int)c;
  r.u = (x.u & m) | (y.u & ~m);
  return r.f;
}
static inline double tg_where_f64(bool c, double a, double b) {
  union { double f; unsigned long long u; } x = {a}, y = {b}, r;
  unsigned long long m = -(unsigned long long)c;
  r.u = (x.u & m) | (y.u & ~m);
  return r.f;
}
static inline unsigned int tg_where_b32(bool c, unsigned int a, unsigned int b) {
  unsigned int m = -(unsigned int)c;
  return (a & m) | (b & ~m);
}
static inline unsigned long long tg_where_b64(bool c, unsigned long long a, unsigned long long b) {
  unsigned long long m = -(unsigned long long)c;
  return (a & m) | (b & ~m);
}
"""
#: the select function of each dtype (integers through their bits: the conversions back are exact)
_SELECT_FNS = {dtypes.float32: "tg_where_f32", dtypes.float64: "tg_where_f64", dtypes.int32: "tg_where_b32",
               dtypes.uint32: "tg_where_b32", dtypes.int64: "tg_where_b64", dtypes.uint64: "tg_where_b64"}


def _branch_free_where(r: CStyleRenderer, d: DType, src: tuple[UOp, ...], c: str, a: str, b: str) -> str:
    if (fn := _SELECT_FNS.get(d)) is None:
        return f"({c}?{a}:{b})"
    # an integer result is converted back from the bits' unsigned type (exact: the same width)
    return f"{fn}({c},{a},{b})" if d.is_float else f"(({r.value_type(d)}){fn}({c},{a},{b}))"


@dataclass
class CPUMarks:
    """What the C path marks in a kernel before its one walk (`CPURenderer.plan`): the loops it slices for the
    thread pool, the register tiles computed as vectors, the vector-math helpers it calls; and what the walk adds
    (the tiles' vector names and the vector types they use), which the kernel's source then declares."""

    split: SplitPlan
    sliced: frozenset[UOp]
    tile_of: dict[UOp, VectorTile]
    helper_ops: frozenset[Ops]
    tile_names: dict[VectorTile, str] = field(default_factory=dict)
    vector_types: set[tuple[DType, int]] = field(default_factory=set)


def _vector_name(d: DType, width: int) -> str:
    return f"tg_{_VECTOR_ELEMENTS[d]}x{width}"


def _sliced_range(r: CPURenderer, k: CKernel, u: UOp) -> None:
    """A loop the plan slices runs the part [tg_start, tg_end) of [0, tg_total) of its range (module docstring)."""
    marks: CPUMarks = k.plan  # type: ignore[assignment]
    if u not in marks.sliced:
        C_RENDER_RULES[Ops.RANGE](r, k, u)
        return
    k.names[u] = name = k.fresh("ridx")
    bound, (start, end, total), t = k.names[u.src[0]], SLICE_PARAMS, r.value_type(u.dtype)
    # the slice ends are products in 64 bits: bound * tg_end passes 2**63 only past any addressable size
    lo, hi = f"({t})((long long)({bound})*{start}/{total})", f"({t})((long long)({bound})*{end}/{total})"
    k.open_loop(u, f"for ({t} {name} = {lo}, {name}_end = {hi}; {name} < {name}_end; {name}++) {{")


class _TileText:
    """The C of one vector tile's update (`VectorTile.update`), written with gcc's and clang's vector extensions."""

    def __init__(self, r: CPURenderer, k: CKernel, tile: VectorTile):
        self.r, self.names = r, k.names
        self.marks: CPUMarks = k.plan  # type: ignore[assignment]
        self.width, self.vname = len(tile.accs), self.marks.tile_names[tile]
        self.lines: list[str] = []
        self.temps: dict[Lanes, str] = {}

    def vector(self, d: DType) -> str:
        self.marks.vector_types.add((d, self.width))
        return _vector_name(d, self.width)

    def temp(self, lanes: Lanes, text: str) -> str:
        """An operand that a select names more than once gets a variable (and a shared one is computed once)."""
        if lanes.kind == "acc":
            return text
        if lanes not in self.temps:
            self.temps[lanes] = f"{self.vname}_t{len(self.temps)}"
            if lanes.kind == "splat" and lanes.uops[0].dtype != dtypes.bool:  # a scalar in every lane
                text = f"(({self.vector(lanes.dtype)}){{{', '.join([text] * self.width)}}})"
            self.lines.append(f"{self.vector(lanes.dtype)} {self.temps[lanes]} = {text};")
        return self.temps[lanes]

    def select(self, mask: str, a: str, b: str, d: DType) -> str:
        m = self.vector(_MASK_OF[d.itemsize])
        return f"(({self.vector(d)})((({m})({a})&{mask})|(({m})({b})&~{mask})))"

    def leaf(self, lanes: Lanes) -> str:
        """An operand that is not computed lane by lane: the accumulators, a scalar, a vector load, gathered lanes."""
        vt = self.vector(lanes.dtype)
        if lanes.kind == "acc":
            return self.vname
        if lanes.kind == "splat":
            scalar = self.names[lanes.uops[0]]
            if lanes.uops[0].dtype == dtypes.bool:  # a mask: 0 - 1 sets every bit
                return f"(({vt}){{0}}-({self.r.value_type(lanes.dtype)})({scalar}))"
            return f"({scalar})"
        if lanes.kind == "load":
            index = lanes.uops[0]
            return f"(*(const {vt}u*)({self.names[index.src[0]]}+({self.names[index.src[1]]})))"
        return f"(({vt}){{{', '.join(self.names[v] for v in lanes.uops)}}})"  # gathered

    def expr(self, lanes: Lanes) -> str:
        vt = self.vector(lanes.dtype)
        if lanes.kind != "alu":
            return self.leaf(lanes)
        args = [self.expr(a) for a in lanes.args]
        if lanes.op is Ops.CAST:
            return f"__builtin_convertvector({args[0]},{vt})"
        if lanes.op is Ops.WHERE:
            mask, a, b = (self.temp(x, t) for x, t in zip(lanes.args, args, strict=True))
            return self.select(mask, a, b, lanes.dtype)
        if lanes.op is Ops.MAX:
            # the scalar path's test: NaN wins, and +0.0 beats -0.0 (the sign bit clear: as an integer, >= 0)
            a, b = (self.temp(x, t) for x, t in zip(lanes.args, args, strict=True))
            m = self.vector(_MASK_OF[lanes.dtype.itemsize])
            mask = self.temp(Lanes("alu", _MASK_OF[lanes.dtype.itemsize], op=Ops.MAX, args=lanes.args),
                             f"(({a}>{b})|({a}!={a})|(({a}=={b})&(({m})({a})>=0)))")
            return self.select(mask, a, b, lanes.dtype)
        assert lanes.op is not None
        return "(" + _VECTOR_INFIX[lanes.op].join(args) + ")"


def _tile_acc(r: CPURenderer, k: CKernel, u: UOp) -> None:
    """A register tile's accumulators are one vector, which the first declares (DEFINE_ACCs precede their loop);
    reads after the loop take their lane."""
    marks: CPUMarks = k.plan  # type: ignore[assignment]
    if (tile := marks.tile_of.get(u)) is None:
        C_RENDER_RULES[Ops.DEFINE_ACC](r, k, u)
        return
    if u is not tile.accs[0]:
        return
    d, width = tile.accs[0].dtype, len(tile.accs)
    marks.vector_types.add((d, width))
    marks.tile_names[tile] = vname = f"vacc{len(marks.tile_names)}"
    for lane, acc in enumerate(tile.accs):
        k.names[acc] = f"{vname}[{lane}]"
    inits = ", ".join(r.render_const(a.src[0].arg, d) for a in tile.accs)
    vtype = _vector_name(d, width)
    k.line(u, f"{vtype} {vname} = ({vtype}){{{inits}}};")


def _tile_assign(r: CPURenderer, k: CKernel, u: UOp) -> None:
    """Every lane of a tile is updated at its last ASSIGN, when all its operands exist."""
    marks: CPUMarks = k.plan  # type: ignore[assignment]
    if (tile := marks.tile_of.get(u)) is None:
        C_RENDER_RULES[Ops.ASSIGN](r, k, u)
        return
    if u is not tile.last:
        return
    text = _TileText(r, k, tile)
    update = text.expr(tile.update)
    for line in [*text.lines, f"{text.vname} = {update};"]:
        k.line(u, line)


#: the C path's entries of the walk: sliced loops and register tiles as vectors
CPU_RENDER_RULES = {**C_RENDER_RULES, Ops.RANGE: _sliced_range, Ops.DEFINE_ACC: _tile_acc, Ops.ASSIGN: _tile_assign}


def _branch_free_max(r: CStyleRenderer, d: DType, src: tuple[UOp, ...], a: str, b: str) -> str:
    if d not in (dtypes.float32, dtypes.float64):
        return C_CODE_FOR_OP[Ops.MAX](r, d, src, a, b)
    # the base's test (NaN wins, +0.0 beats -0.0), as a select without a branch
    return f"{_SELECT_FNS[d]}((({a})>({b}))|(({a})!=({a}))|((({a})==({b}))&!signbit({a})),{a},{b})"


def _branch_free_cast(r: CPURenderer, x: str, frm: DType, to: DType) -> str:
    if r.branch_free_selects and frm == dtypes.bool and to in (dtypes.float32, dtypes.float64):
        # gcc converts a bool to a float with a branch (1.0 or 0.0), which leaves the loop scalar
        return f"{_SELECT_FNS[to]}({x},{r.render_const(1.0, to)},{r.render_const(0.0, to)})"
    return c_cast(r, x, frm, to)


class CPURenderer(CStyleRenderer):
    device = "CPU"
    prelude = BUILTIN_MATH_PRELUDE
    # device knobs: the values the CPU heuristics, the conv gradient's batch chunks and the matmul's B panels were
    # measured with (the CHANGELOG's measurements, a Zen 4 core). Not read from the host: a larger L2 (2 MiB on
    # Sapphire Rapids) would change the chosen opts, which wants its own measurement first.
    l2_cache_bytes = 1 << 20
    simd_bytes = 64  # AVX-512
    vector_registers = 32
    channels_last_min = 8
    # read from the host, unlike the knobs above: the register tile a convolution needs to keep the FMA units busy
    # (`opt_rules._Cpu.fma_chains`), where Intel's two 512-bit units and AMD's split ones differ
    fma_chains = host_fma_chains()
    target_rewrites = C_TARGET_REWRITES
    opt_rules = cpu_opt_rules  # the CPU's tuning rules (`tg_backend_cpu.opt_rules`)
    render_rules = CPU_RENDER_RULES

    def __init__(self) -> None:
        # whether a register tile's accumulators are rendered as vectors (`plan_vector_tiles`): for gcc (and any
        # C compiler but clang), whose SLP vectoriser leaves a tile held in scalar accumulators scalar. clang's
        # vectorises the scalar tile itself, into better code than it makes of the vector source (a row of the
        # tile that is not a power of two long stays in one register there, not in a vector and a remainder)
        path, _ = find_c_compiler()
        self.vector_tiles = path is None or clang_major(path) is None
        # selects as bit operations (SELECT_PRELUDE) for the same compilers: clang's vectorisers take C's selects
        self.branch_free_selects = self.vector_tiles
        # a convolution whose rows leave part of a register empty tiles its output channels against a channels-last
        # weight, as on the LLVM path: from vector tiles gcc makes of that tile what LLVM does (clang does not)
        self.uneven_rows_channels_last = self.vector_tiles
        if self.branch_free_selects:
            self.prelude = BUILTIN_MATH_PRELUDE + SELECT_PRELUDE
            self.code_for_op = {**self.code_for_op, Ops.WHERE: _branch_free_where, Ops.MAX: _branch_free_max,
                                Ops.CAST: cast_entry(_branch_free_cast)}

    def math_fn(self, op: Ops, d: DType) -> str:
        # exp2 and log2 of float32 (and of float16 and the emulated floats, computed in float) as arithmetic that
        # vectorises (`vector_math`)
        if vector_math.computes(op, d):
            return vector_math.HELPERS[op].c_name
        return super().math_fn(op, d)

    def plan(self, program: list[UOp]) -> CPUMarks:
        """The marks of the walk: which loops are sliced (`plan_split`), which accumulators are vector tiles."""
        split = plan_split(program)
        ranges = [u for u in program if u.op is Ops.RANGE]
        tiles = plan_vector_tiles(program, self.simd_bytes) if self.vector_tiles else []
        return CPUMarks(split, frozenset(r for r, s in zip(ranges, split.sliced, strict=True) if s),
                        {u: t for t in tiles for u in (*t.accs, *t.assigns)},
                        frozenset(u.op for u in program if vector_math.computes(u.op, u.dtype)))

    def render_source(self, k: CKernel, params: list[str], var_params: list[str]) -> str:
        marks: CPUMarks = k.plan  # type: ignore[assignment]
        helpers = vector_math.c_helpers(set(marks.helper_ops)) + self.fp8_helpers(k.program)
        # in a fixed order (a DType hashes by identity, so a set's order varies between processes): the same kernel
        # is the same source, which the compile cache is keyed by
        for d, width in sorted(marks.vector_types, key=lambda t: (t[0].itemsize, t[1], t[0].name)):
            # the `u` type reads a vector at any element's address, whatever else the memory is read as
            vtype, scalar, size = _vector_name(d, width), self.value_type(d), d.itemsize * width
            helpers += (f"typedef {scalar} {vtype} __attribute__((vector_size({size})));\n"
                        f"typedef {scalar} {vtype}u __attribute__((vector_size({size}), aligned({d.itemsize}), "
                        f"__may_alias__));\n")
        lines = ["  " + decl for decl in k.local_decls] + k.body
        if any(u.op is Ops.ADD and u.dtype == dtypes.int32 and byte_dots(u) is not None for u in k.program):
            helpers = BYTE_DOT_MARKER + helpers  # the compiler's flags for it (compiler.py `_flags_for`)
        uses_bf16 = any(u.dtype.scalar == dtypes.bfloat16 for u in k.program)
        slice_params = [f"const long long {p}" for p in SLICE_PARAMS]
        return self.render_kernel(k.name, [*params, *var_params, *slice_params], lines, uses_bf16, helpers) + \
            self.render_entry_points(k.name, k.program, marks.split)

    def render_entry_points(self, name: str, program: list[UOp], plan: SplitPlan) -> str:
        # the kernel's parameters as the base orders them: buffers by index, then variables by name
        buffers = sorted({u.arg.slot: u for u in program if u.op is Ops.PARAM}.items())
        variables = sorted({u.arg.name: u for u in program if u.op is Ops.DEFINE_VAR}.items())
        args = [f"({self.memory_type(u.dtype)}*)(__INTPTR_TYPE__)args[{i}]" for i, (_, u) in enumerate(buffers)]
        args += [f"({self.value_type(u.dtype)})args[{len(buffers) + i}]" for i, (_, u) in enumerate(variables)]
        call = ", ".join([*args, "start", "end", "total"])
        whole = ", ".join([*args, "0", "1", "1"])
        return (f"\nvoid {name}_tg_slice(const long long *args, long long start, long long end, long long total) {{\n"
                f"  {name}({call});\n}}\n"
                f"void {name}_tg_run(const long long *args) {{\n  {name}({whole});\n}}\n"
                f"const long long {name}_tg_outer = {plan.outer_max};\n"
                f"const long long {name}_tg_nargs = {len(buffers) + len(variables)};\n")
