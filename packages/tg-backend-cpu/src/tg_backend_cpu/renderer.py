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
from tinygrad.uop.ops import AxisKind, Ops, UOp

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


def plan_split(program: list[UOp]) -> SplitPlan:
    """Slice the top-level loops when all of them are global and every STORE sits inside one.

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
    if not splittable or not any(sliced):
        return SplitPlan.none(len(ranges))
    try:
        outer_max = max(int(r.src[0].vmax) for r, s in zip(ranges, sliced, strict=True) if s)
    except (TypeError, ValueError, OverflowError):  # an unbounded symbolic size: no slicing
        return SplitPlan.none(len(ranges))
    return SplitPlan(tuple(sliced), max(outer_max, 0))


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
