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

import threading
from dataclasses import dataclass

from tinygrad.dtype import DType, dtypes
from tinygrad.renderer.cstyle import CStyleRenderer
from tinygrad.uop.ops import AxisKind, GroupOp, Ops, UOp
from tinygrad.uop.rewrite import PatternMatcher, UPat

from tg_backend_cpu import program as launch_plan
from tg_backend_cpu import vector_math

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


#: what kernels use of <math.h>, as the compiler builtins gcc and clang both have: parsing math.h is a large part of
#: a small kernel's compile, which the first step of a training loop pays a hundred times over (CHANGELOG)
BUILTIN_MATH = ("sqrt", "sqrtf", "exp2", "exp2f", "log2", "log2f", "sin", "sinf", "trunc", "truncf", "fmod", "fmodf",
                "signbit")
BUILTIN_MATH_PRELUDE = "".join(f"#define {name} __builtin_{name}\n" for name in BUILTIN_MATH) + \
    "#define INFINITY __builtin_inff()\n#define NAN __builtin_nanf(\"\")\n#include <stdbool.h>\n"


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
    target_rewrites = C_TARGET_REWRITES

    def __init__(self) -> None:
        # the plan of the kernel being rendered (render_range is called once per RANGE, in program order); per
        # thread, so that two threads can render with one renderer
        self._state = threading.local()

    def render_range(self, name: str, bound: str, dtype: DType = dtypes.int32) -> str:
        plan: SplitPlan | None = getattr(self._state, "plan", None)
        k = getattr(self._state, "opened", 0)
        self._state.opened = k + 1
        if plan is None or k >= len(plan.sliced) or not plan.sliced[k]:
            return super().render_range(name, bound, dtype)
        start, end, total = SLICE_PARAMS
        t = self.value_type(dtype)
        # the slice ends are products in 64 bits: bound * tg_end passes 2**63 only past any addressable size
        lo, hi = f"({t})((long long)({bound})*{start}/{total})", f"({t})((long long)({bound})*{end}/{total})"
        return f"for ({t} {name} = {lo}, {name}_end = {hi}; {name} < {name}_end; {name}++) {{"

    def render_kernel(self, name: str, params: list[str], body: list[str], uses_bf16: bool = False,
                      helpers: str = "") -> str:
        slice_params = [f"const long long {p}" for p in SLICE_PARAMS]
        helpers = vector_math.c_helpers(getattr(self._state, "helper_ops", set())) + helpers
        return super().render_kernel(name, [*params, *slice_params], body, uses_bf16, helpers)

    def math_fn(self, op: Ops, d: DType) -> str:
        # exp2 and log2 of float32 (and of float16 and the emulated floats, computed in float) as arithmetic that
        # vectorises (`vector_math`)
        if vector_math.computes(op, d):
            return vector_math.HELPERS[op].c_name
        return super().math_fn(op, d)

    def render(self, name: str, program: list[UOp]) -> str:
        plan = plan_split(program)
        src = self._render_with(name, program, plan)
        if self._state.opened != len(plan.sliced):
            # the base did not open each RANGE through render_range once, in order: the plan cannot be trusted
            plan = SplitPlan.none(len(plan.sliced))
            src = self._render_with(name, program, plan)
        return src + self.render_entry_points(name, program, plan)

    def _render_with(self, name: str, program: list[UOp], plan: SplitPlan) -> str:
        self._state.plan, self._state.opened = plan, 0
        self._state.helper_ops = {u.op for u in program if vector_math.computes(u.op, u.dtype)}
        try:
            return super().render(name, program)
        finally:
            self._state.plan = None

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
