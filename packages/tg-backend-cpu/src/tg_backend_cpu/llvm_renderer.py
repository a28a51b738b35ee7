"""LLVM IR for the CPU: the same kernels and entry points as the C path (renderer.py), for `LLVMCompiler`.

The kernel is one function `{name}(buffers..., variables..., tg_start, tg_end, tg_total)` whose sliced loops run
the part [tg_start, tg_end) of [0, tg_total) of their range, as `plan_split` decides and as the C path does; next to
it `{name}_tg_slice`, `{name}_tg_run`, `{name}_tg_outer` and `{name}_tg_nargs` have the C path's signatures and
meanings, so `CPUProgram` and the thread pool drive both paths alike.

Loops are basic blocks whose counters, like accumulators, live in stack slots (allocas): the optimisation pipeline
promotes them to registers, which spares the walk from placing phi nodes. Every UOp is computed at its place in
the program; a read of an accumulator is a load there.

Semantics follow `tinygrad.uop.alu` as the C path does: integer division and shifts are guarded where LLVM would
give poison (x/0 = 0, MIN/-1 wraps, shifts past the width give 0 or -1), MAX is `llvm.maximum` (NaN wins, +0.0
beats -0.0), float -> int conversions saturate instead of giving poison (only in-range values are defined by the
reference). bfloat16 and the 8-bit floats are held as their bit patterns and computed in float, rounded after
every op by helper functions defined in the module; float16 is LLVM's `half`, which rounds after every op by
itself. No instruction carries a fast-math flag but `contract` (NaN and infinity are tested), and that only on
the multiply and add of a pair that the contraction rule of `llvm_tiles` fuses (`CPU_FMA=contract`: on all float
arithmetic, leaving the choice to LLVM); a vector tile writes its fused pairs as `llvm.fmuladd` (float32 and float64
only: a fused half multiply-add would round once where the reference rounds twice). A register tile is written as
LLVM vectors (`llvm_tiles`; CPU_VECTOR_TILES=0: as scalars).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

from tinygrad.dtype import FP8_FORMATS, DType, dtypes, is_emulated_float
from tinygrad.renderer import Renderer
from tinygrad.uop.ops import GroupOp, Ops, UOp, post_order

from tg_backend_cpu import vector_math
from tg_backend_cpu.llvm_tiles import (
    FMA_RULES,
    PURE_OPS,
    FusingTileBuilder,
    TileWriter,
    fused_adds,
    rendered_uops,
)
from tg_backend_cpu.llvm_types import float_suffix, literal, memory_type, value_type
from tg_backend_cpu.opt_rules import cpu_opt_rules
from tg_backend_cpu.renderer import CPURenderer, SplitPlan, VectorTile, plan_split, plan_vector_tiles

#: LLVM intrinsics of the unary math ops (llvm.<name>.f16/f32/f64); sin and float64's exp2 and log2 become libm
#: calls, which the loader resolves in this process (exp2 and log2 of float32 and float16 are arithmetic:
#: `tg_backend_cpu.vector_math`)
MATH_INTRINSICS = {Ops.SQRT: "sqrt", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.TRUNC: "trunc"}

#: the bfloat16 helpers (the C path's BF16_PRELUDE): decode a pattern, encode a float to nearest even (NaN stays a
#: quiet NaN), round a float to bfloat16
BF16_HELPERS = """
define internal float @tg_bf16_to_f32(i16 %b) alwaysinline nounwind {
  %u = zext i16 %b to i32
  %s = shl i32 %u, 16
  %f = bitcast i32 %s to float
  ret float %f
}
define internal i16 @tg_f32_to_bf16(float %f) alwaysinline nounwind {
  %u = bitcast float %f to i32
  %a = and i32 %u, 2147483647
  %nan = icmp ugt i32 %a, 2139095040
  %h = lshr i32 %u, 16
  %lsb = and i32 %h, 1
  %bias = add i32 %lsb, 32767
  %r = add i32 %u, %bias
  %t = lshr i32 %r, 16
  %t16 = trunc i32 %t to i16
  %o = select i1 %nan, i16 32704, i16 %t16
  ret i16 %o
}
define internal float @tg_round_bf16(float %f) alwaysinline nounwind {
  %b = call i16 @tg_f32_to_bf16(float %f)
  %r = call float @tg_bf16_to_f32(i16 %b)
  ret float %r
}
"""

#: a double rounded to float toward zero with the last bit set when inexact ("round to odd"): rounding that float
#: again to half or bfloat16 gives what rounding the double directly would (x86 has no double -> half instruction
#: before AVX512-FP16, and LLVM's fallback is a libgcc routine this process may not have loaded)
F64_TO_F32_ODD = """
define internal float @tg_f64_to_f32_odd(double %d) alwaysinline nounwind {
  %f = fptrunc double %d to float
  %back = fpext float %f to double
  %exact = fcmp ueq double %back, %d
  %u = bitcast float %f to i32
  %pos = fcmp ogt double %d, 0.0
  %above = fcmp ogt double %back, %d
  %below = fcmp olt double %back, %d
  %away = select i1 %pos, i1 %above, i1 %below
  %step = zext i1 %away to i32
  %toward = sub i32 %u, %step
  %oddbits = or i32 %toward, 1
  %odd = bitcast i32 %oddbits to float
  %r = select i1 %exact, float %f, float %odd
  ret float %r
}
"""


_FP8_HELPERS = """
define internal float @tg_{n}_to_f32(i8 %b) alwaysinline nounwind {{
  %w = zext i8 %b to i32
  %signbit = and i32 %w, 128
  %sign = shl i32 %signbit, 24
  %eraw = lshr i32 %w, {m}
  %e = and i32 %eraw, {emask}
  %mm = and i32 %w, {mmask}
  %mag = and i32 %w, 127
  %special = icmp ugt i32 %mag, {max_code}
  %isinf = icmp eq i32 %mag, {inf_code}
  %specialbits = select i1 %isinf, i32 {special_inf}, i32 2143289344
  %specialsigned = or i32 %sign, %specialbits
  %specialf = bitcast i32 %specialsigned to float
  %issub = icmp eq i32 %e, 0
  %mf = uitofp i32 %mm to float
  %subabs = fmul float %mf, {subnormal_step}
  %subneg = fneg float %subabs
  %negative = icmp ne i32 %signbit, 0
  %subf = select i1 %negative, float %subneg, float %subabs
  %ebiased = add i32 %e, {rebias}
  %eb = shl i32 %ebiased, 23
  %mb = shl i32 %mm, {shift}
  %nb0 = or i32 %sign, %eb
  %nb = or i32 %nb0, %mb
  %normalf = bitcast i32 %nb to float
  %finite = select i1 %issub, float %subf, float %normalf
  %r0 = select i1 %special, float %specialf, float %finite
  %isnegzero = icmp eq i32 %w, 128
  %fnuznan = and i1 %isnegzero, {fnuz}
  %r = select i1 %fnuznan, float 0x7FF8000000000000, float %r0
  ret float %r
}}
define internal i8 @tg_f32_to_{n}(float %f) alwaysinline nounwind {{
  %u = bitcast float %f to i32
  %sraw = lshr i32 %u, 24
  %sign = and i32 %sraw, 128
  %a = and i32 %u, 2147483647
  %isnan = icmp ugt i32 %a, 2139095040
  %isinf = icmp eq i32 %a, 2139095040
  %tiny = icmp ult i32 %a, 8388608
  %ebits = lshr i32 %a, 23
  %e = sub i32 %ebits, 127
  %sub = icmp slt i32 %e, {min_exp}
  %mlow = and i32 %a, 8388607
  %mant = or i32 %mlow, 8388608
  %below = sub i32 {min_exp}, %e
  %extra = select i1 %sub, i32 %below, i32 0
  %drop = add i32 %extra, {shift}
  %toosmall = icmp sgt i32 %drop, 24
  %dropc = select i1 %toosmall, i32 24, i32 %drop
  %q = lshr i32 %mant, %dropc
  %one = shl i32 1, %dropc
  %restmask = sub i32 %one, 1
  %rest = and i32 %mant, %restmask
  %halfway = lshr i32 %one, 1
  %above = icmp ugt i32 %rest, %halfway
  %tie = icmp eq i32 %rest, %halfway
  %qodd = trunc i32 %q to i1
  %tieup = and i1 %tie, %qodd
  %up = or i1 %above, %tieup
  %upbit = zext i1 %up to i32
  %qr = add i32 %q, %upbit
  %ecode = add i32 %e, {bias_m1}
  %eshift = shl i32 %ecode, {m}
  %normal = add i32 %eshift, %qr
  %code = select i1 %sub, i32 %qr, i32 %normal
  %over = icmp ugt i32 %code, {max_code}
  %sat = select i1 %over, i32 {max_code}, i32 %code
  %zsign = select i1 {fnuz}, i32 0, i32 %sign
  %satzero = icmp eq i32 %sat, 0
  %fsign = select i1 %satzero, i32 %zsign, i32 %sign
  %finite = or i32 %fsign, %sat
  %zero = or i1 %tiny, %toosmall
  %r0 = select i1 %zero, i32 %zsign, i32 %finite
  %infcode = or i32 %sign, {inf_code}
  %r1 = select i1 %isinf, i32 %infcode, i32 %r0
  %nancode = or i32 %sign, {nan_code}
  %r2 = select i1 %isnan, i32 %nancode, i32 %r1
  %r = trunc i32 %r2 to i8
  ret i8 %r
}}
define internal float @tg_round_{n}(float %f) alwaysinline nounwind {{
  %b = call i8 @tg_f32_to_{n}(float %f)
  %r = call float @tg_{n}_to_f32(i8 %b)
  ret float %r
}}
"""


def fp8_helpers(d: DType) -> str:
    """The helpers of one 8-bit float (the C path's fp8_prelude): decode, encode to nearest even with finite values
    past the largest saturating to it (`tinygrad.dtype.fp8_encode`), round a float to the format."""
    fmt = FP8_FORMATS[d.scalar]
    m = fmt.mantissa_bits
    return _FP8_HELPERS.format(
        n=d.scalar.name, m=m, emask=(1 << fmt.exponent_bits) - 1, mmask=(1 << m) - 1, max_code=fmt.max_code,
        inf_code=fmt.inf_code, special_inf=0x7F800000 if fmt.has_inf else 0x7FC00000,
        subnormal_step=literal(2.0 ** (1 - fmt.bias - m), dtypes.float32), rebias=127 - fmt.bias, shift=23 - m,
        min_exp=1 - fmt.bias, bias_m1=fmt.bias - 1, nan_code=fmt.nan_code, fnuz="true" if fmt.fnuz else "false")


def helper_name(d: DType, what: str) -> str:
    """The helper of emulated float `d` that does `what`: "decode" (pattern -> float), "encode" or "round"."""
    n = "bf16" if d.scalar == dtypes.bfloat16 else d.scalar.name
    return {"decode": f"tg_{n}_to_f32", "encode": f"tg_f32_to_{n}", "round": f"tg_round_{n}"}[what]


def address_math(program: list[UOp]) -> set[UOp]:
    """The int32 ALU nodes an INDEX's index is computed from."""
    indices = [u.src[1] for u in program if u.op is Ops.INDEX]
    return set(post_order(indices, skip=lambda u: u.op not in GroupOp.ALU or u.dtype != dtypes.int32))


def neighbour_addresses(program: list[UOp], no_wrap: set[UOp]) -> dict[UOp, tuple[UOp, int]]:
    """The INDEXes written as an offset from the address of another one (INDEX -> (that INDEX, offset in elements)):
    those of one buffer whose indices differ by a constant (`X + c`: an UPCAST's neighbours, a register tile's row,
    the outputs of its epilogue), each from the first one written in a scope (loop) that is still open where it
    stands. The address is the same either way, but an address computed from the buffer's start gives LLVM's
    induction variable and scalar evolution passes one more expression over the loop counters to analyse per
    neighbour, and a tile's hundreds of them cost more compile time than the rest of the kernel (the CHANGELOG's
    measurements); offsets from a neighbour are constants. Gated INDEXes keep their own address (the index may be
    out of bounds where the gate is false), and so does an index whose sum may wrap (not `no_wrap`)."""
    out: dict[UOp, tuple[UOp, int]] = {}
    first: dict[tuple[UOp, UOp, object], tuple[UOp, int, tuple[int, ...]]] = {}
    scopes: list[int] = []
    for i, u in enumerate(program):
        if u.op in (Ops.RANGE, Ops.IF):
            scopes.append(i)
        elif u.op in (Ops.END, Ops.ENDIF):
            scopes.pop()
        if u.op is not Ops.INDEX or len(u.src) != 2:
            continue
        idx = u.src[1]
        if idx.op is Ops.ADD and idx in no_wrap and idx.src[1].op is Ops.CONST:
            term, offset = idx.src[0], int(idx.src[1].arg)
        else:
            term, offset = idx, 0
        key = (u.src[0], term, u.dtype)
        seen = first.get(key)
        if seen is not None and tuple(scopes[:len(seen[2])]) == seen[2]:
            out[u] = (seen[0], offset - seen[1])
        else:
            first[key] = (u, offset, tuple(scopes))
    return out


#: loop metadata that keeps LLVM from vectorising or unrolling a loop (`gathering_loops`)
SCALAR_LOOP = 900
SCALAR_LOOP_METADATA = (f"\n!{SCALAR_LOOP} = distinct !{{!{SCALAR_LOOP}, !{SCALAR_LOOP + 1}, !{SCALAR_LOOP + 2}}}\n"
                        f'!{SCALAR_LOOP + 1} = !{{!"llvm.loop.vectorize.enable", i1 false}}\n'
                        f'!{SCALAR_LOOP + 2} = !{{!"llvm.loop.unroll.disable"}}\n')


def stride_along(expr: UOp, r: UOp) -> int | None:
    """How much integer expression `expr` moves when loop counter r moves by one (None: not an affine function of
    r)."""
    strides: dict[UOp, int | None] = {}
    for u in post_order([expr]):
        srcs = [strides[s] for s in u.src]
        st: int | None = None
        if u is r:
            st = 1
        elif u.op in (Ops.CONST, Ops.DEFINE_VAR, Ops.RANGE, Ops.PARAM) or all(x == 0 for x in srcs):
            st = 0
        elif u.op is Ops.CAST:
            st = srcs[0]
        elif len(srcs) == 2 and (a := srcs[0]) is not None and (b := srcs[1]) is not None:
            if u.op is Ops.ADD:
                st = a + b
            elif u.op is Ops.SUB:
                st = a - b
            elif u.op is Ops.MUL and u.src[1].op is Ops.CONST:
                st = a * int(u.src[1].arg)
            elif u.op is Ops.MUL and u.src[0].op is Ops.CONST:
                st = b * int(u.src[0].arg)
        strides[u] = st
    return strides[expr]


def gathering_loops(program: list[UOp]) -> set[UOp]:
    """The innermost loops of a kernel without accumulators (a copy, an elementwise op) that store one value per
    iteration from one load that moves through memory by more than one element per iteration (a transpose's read;
    loads that do not move are read once). LLVM's loop vectoriser builds each vector of such loads from single ones
    and shuffles (gathers are off: `X86_TUNING`), which runs no faster than the scalar loop and made these small
    kernels several times slower to compile than any other of their size (the CHANGELOG's measurements): their
    loops are marked to stay scalar. A big transpose is tiled in blocks by the heuristics instead (several stores
    per iteration) and keeps its loops, as does a loop that reads a row of neighbours per iteration (a short
    reduction unrolled)."""
    if any(u.op is Ops.DEFINE_ACC for u in program):
        return set()
    open_ranges: list[UOp] = []
    loads: dict[UOp, list[UOp]] = {}
    stores: dict[UOp, int] = {}
    nested: set[UOp] = set()
    for u in program:
        if u.op is Ops.RANGE:
            if open_ranges:
                nested.add(open_ranges[-1])
            open_ranges.append(u)
        elif u.op is Ops.END:
            open_ranges.pop()
        elif u.op in (Ops.LOAD, Ops.STORE) and open_ranges:
            if u.op is Ops.LOAD:
                loads.setdefault(open_ranges[-1], []).append(u)
            else:
                stores[open_ranges[-1]] = stores.get(open_ranges[-1], 0) + 1
    out = set()
    for r, inner_loads in loads.items():
        if r in nested or stores.get(r, 0) != 1:  # a tile of stores (an UPCAST) is the SLP vectoriser's to build
            continue
        moving = [st for ld in inner_loads if (st := stride_along(ld.src[0].src[1], r)) != 0]
        if len(moving) == 1 and moving[0] != 1:
            out.add(r)
    return out




#: the values of CPU_VECTOR_TILES (`LLVMRenderer.vector_tiles`)
VECTOR_TILE_MODES = ("1", "full", "0")


def vector_tiles_mode() -> str:
    """CPU_VECTOR_TILES: "1" (the default) every register tile as LLVM vectors, "full" only in kernels whose tiles all
    fill a SIMD register, "0" none."""
    mode = os.environ.get("CPU_VECTOR_TILES", "").strip().lower() or "1"
    if mode not in VECTOR_TILE_MODES:
        raise ValueError(f"CPU_VECTOR_TILES={mode!r} is not a mode: set it to 1 (every register tile as LLVM vectors, "
                         f"the default), full (only kernels whose tiles fill a SIMD register) or 0 (none)")
    return mode


def fma_rule() -> str:
    """The contraction rule of the LLVM path (`llvm_tiles`), from CPU_FMA: by default "accumulate", a product fused
    into a reduction's accumulator and no other, so an elementwise value is the same whether its product is computed
    in the kernel that adds it or stored by another kernel first (tinygrad's `test_batchnorm_axis` compares two such
    kernels bit for bit); "contract" LLVM's choice (the `contract` flag on float32/float64 arithmetic: a product is
    fused into its single use, so the same expression can round differently in two kernels), "all" every
    float32/float64 product that feeds an add, "none" none."""
    rule = os.environ.get("CPU_FMA", "").strip().lower() or "accumulate"
    if rule not in FMA_RULES:
        raise ValueError(f"CPU_FMA={rule!r} is not a contraction rule: set it to one of {', '.join(FMA_RULES)} "
                         "(or leave it unset for 'accumulate')")
    return rule


class LLVMRenderer(Renderer):
    device = "CPU"
    supported_dtypes = frozenset(dtypes.all())
    # the C path's device knobs: the heuristics choose the same opts on both paths
    l2_cache_bytes = CPURenderer.l2_cache_bytes
    simd_bytes = CPURenderer.simd_bytes
    vector_registers = CPURenderer.vector_registers
    channels_last_min = CPURenderer.channels_last_min
    fma_chains = CPURenderer.fma_chains
    opt_rules = cpu_opt_rules  # the C path's tuning rules
    # a padded convolution tests the border in every lane of its rows, and LLVM 22 builds each such row from scalar
    # loads and shuffles (the ResNet's padded 16x16 layers three times slower than over a copy with the border
    # written out); the copy's own border tests it vectorises with masked loads (the measurements are in the
    # CHANGELOG; the C path decides by its compiler, in device.py)
    conv_border_copy = True
    # a convolution (with a window) whose rows are 10, 12 or 14 floats wide ran several times faster as output
    # channels read from a channels-last weight times images, in LLVM's hands; clang's code for that tile was
    # slower than for its rows (the measurements are in the CHANGELOG), so the C path keeps the default
    uneven_rows_channels_last = True

    # a register tile's accumulators as LLVM vectors (`llvm_tiles`): explicit vector code that needs no SLP
    # vectoriser, in less than half the compile time of the scalar tile and with the same bits. CPU_VECTOR_TILES=1 or
    # unset: every tile the plan finds; "full": only kernels whose tiles all fill a SIMD register; 0: none (the SLP
    # vectoriser's code from scalar tiles)
    vector_tiles = vector_tiles_mode() != "0"
    full_vector_tiles_only = vector_tiles_mode() == "full"
    # the contraction rule (`llvm_tiles`, CPU_FMA): which float32/float64 multiplies are fused with the add they feed
    fma = fma_rule()

    def render(self, name: str, program: list[UOp]) -> str:
        fused = fused_adds(program, self.fma)
        builder = functools.partial(FusingTileBuilder, fused=fused)
        accs = (dtypes.float32, dtypes.float64, dtypes.int32)
        # integer accumulators are tiles only for their byte dots (`byte_dot`): the others stay the scalar code they
        # were measured as
        tiles = plan_vector_tiles(program, self.simd_bytes, builder, parts=True, acc_dtypes=accs,
                                  keep=lambda t: t.accs[0].dtype.is_float or t.update.count("dot4") > 0,
                                  nested=True) if self.vector_tiles else []
        if self.full_vector_tiles_only and any(len(t.accs) * t.accs[0].dtype.itemsize < self.simd_bytes for t in tiles):
            tiles = []
        return _Kernel(name, program, plan_split(program), tiles, fused, self.fma == "contract").render()


class _Kernel:
    """The IR of one kernel, written by one walk over its linearized program."""

    def __init__(self, name: str, program: list[UOp], plan: SplitPlan, tiles: list[VectorTile],
                 fused: dict[UOp, int], contract: bool):
        self.name, self.program, self.plan, self.fused = name, program, plan, fused
        # float32/float64 arithmetic's flag under the "contract" rule (LLVM fuses a product into its single use)
        self.contract = " contract" if contract else ""
        self.body: list[str] = []
        self.allocas: list[str] = []
        self.declarations: set[str] = set()
        self.ref: dict[UOp, str] = {}
        self.counter = 0
        self.block = "start"
        # int32 index arithmetic is marked nsw: the C path computes it in 64 bits for the same reason (a compiler
        # that must allow wrapping cannot see that buf[x] and buf[x+1] are neighbours, and does not vectorise)
        self.no_wrap = address_math(program)
        # and its adds and multiplies are computed in 64 bits, as the C path's `long long`: with 32-bit ones the
        # address is sext(a + k), which LLVM's SLP vectoriser does not see as sext(a) + k, and neighbouring loads of
        # an upcast stay scalar
        self.wide = {u for u in self.no_wrap if u.op in (Ops.ADD, Ops.SUB, Ops.MUL)}
        self.loops: list[tuple[str, str, str, str, str]] = []
        self.helper_ops: set[Ops] = set()
        self.scalar_loops = gathering_loops(program)
        self.tiles = TileWriter(self, tiles, self.contract)
        # an address a constant number of elements from a neighbour's is written as that offset from it
        self.rebased = neighbour_addresses(program, self.no_wrap)
        self.rendered = rendered_uops(program, tiles, fused, self.rebased)

    # ---- emitting ----
    def fresh(self, prefix: str = "t") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def ins(self, text: str) -> str:
        """Emit an instruction with a result; returns the result's name."""
        name = "%" + self.fresh()
        self.body.append(f"  {name} = {text}")
        return name

    def do(self, text: str) -> None:
        self.body.append(f"  {text}")

    def label(self, name: str) -> None:
        self.body.append(f"{name}:")
        self.block = name

    def intrinsic(self, name: str, ret: str, args: list[tuple[str, str]]) -> str:
        self.declarations.add(f"declare {ret} @{name}({', '.join(t for t, _ in args)})")
        return self.ins(f"call {ret} @{name}({', '.join(f'{t} {v}' for t, v in args)})")

    def val(self, u: UOp) -> str:
        """The value of `u` at this point of the program (an accumulator's current value)."""
        if u.op is Ops.DEFINE_ACC:
            if self.tiles.owns(u):
                return self.tiles.read(u)
            return self.ins(f"load {value_type(u.dtype)}, ptr {self.ref[u]}")
        if u in self.wide:  # 64-bit address arithmetic, also read as the int32 it is (a gate's comparison)
            return self.ins(f"trunc i64 {self.ref[u]} to i32")
        return self.ref[u]

    def val64(self, u: UOp) -> str:
        """An int32 operand of 64-bit address arithmetic, sign-extended."""
        if u in self.wide:
            return self.ref[u]
        if u.op is Ops.CONST:
            return literal(u.arg, dtypes.int64)
        return self.ins(f"sext i32 {self.val(u)} to i64")

    # ---- the walk ----
    def render(self) -> str:
        params = sorted({u.arg.slot: u for u in self.program if u.op is Ops.PARAM}.items())
        variables = sorted({u.arg.name: u for u in self.program if u.op is Ops.DEFINE_VAR}.items())
        var_refs = {name: f"%var{i}" for i, (name, _) in enumerate(variables)}
        stored = {u.src[0].src[0].arg.slot for u in self.program if u.op is Ops.STORE}
        ranges = 0
        for u in self.program:
            op = u.op
            if op in PURE_OPS and u not in self.rendered:  # read by nothing the kernel writes
                continue
            if op is Ops.PARAM:
                self.ref[u] = f"%data{u.arg.slot}"
            elif op is Ops.DEFINE_VAR:
                self.ref[u] = var_refs[u.arg.name]
            elif op is Ops.CONST:
                self.ref[u] = literal(u.arg, u.dtype)
            elif op is Ops.RANGE:
                self.open_loop(u, self.plan.sliced[ranges])
                ranges += 1
            elif op is Ops.END:
                self.close_loop(u)
            elif op is Ops.INDEX and u in self.rebased:
                base, delta = self.rebased[u]
                self.ref[u] = self.ins(f"getelementptr inbounds {memory_type(u.dtype)}, ptr {self.ref[base]}, "
                                       f"i64 {delta}")
            elif op is Ops.INDEX:
                gated = len(u.src) > 2
                offset = f"i64 {self.ref[u.src[1]]}" if u.src[1] in self.wide else \
                    f"{value_type(u.src[1].dtype)} {self.val(u.src[1])}"
                self.ref[u] = self.ins(f"getelementptr {'' if gated else 'inbounds '}{memory_type(u.dtype)}, "
                                       f"ptr {self.ref[u.src[0]]}, {offset}")
            elif op is Ops.LOAD:
                self.ref[u] = self.load(u)
            elif op is Ops.STORE:
                self.store(u)
            elif op is Ops.DEFINE_ACC and self.tiles.owns(u):
                self.tiles.define(u)
            elif op is Ops.ASSIGN and self.tiles.owns(u):
                self.tiles.assign(u)
            elif op is Ops.DEFINE_ACC:
                self.ref[u] = slot = "%" + self.fresh("acc")
                self.allocas.append(f"  {slot} = alloca {value_type(u.dtype)}")
                self.do(f"store {value_type(u.dtype)} {self.val(u.src[0])}, ptr {slot}")
            elif op is Ops.ASSIGN:
                acc, value = u.src
                self.do(f"store {value_type(acc.dtype)} {self.val(value)}, ptr {self.ref[acc]}")
            elif op is Ops.CAST:
                self.ref[u] = self.cast(self.val(u.src[0]), u.src[0].dtype, u.dtype)
            elif op is Ops.BITCAST:
                self.ref[u] = self.bitcast(self.val(u.src[0]), u.src[0].dtype, u.dtype)
            elif op in GroupOp.ALU:
                self.ref[u] = self.alu(u)
            else:
                raise NotImplementedError(f"LLVMRenderer cannot render {op}")
        buffer_params = [f"ptr noalias {'' if u.arg.slot in stored else 'readonly '}%data{slot}" for slot, u in params]
        var_params = [f"{value_type(u.dtype)} {var_refs[name]}" for name, u in variables]
        signature = ", ".join([*buffer_params, *var_params, "i64 %tg_start", "i64 %tg_end", "i64 %tg_total"])
        emulated = {u.dtype.scalar for u in self.program if is_emulated_float(u.dtype)}
        helpers = BF16_HELPERS if dtypes.bfloat16 in emulated else ""
        helpers += "".join(fp8_helpers(d) for d in sorted(emulated - {dtypes.bfloat16}, key=lambda d: d.name))
        if any(u.op is Ops.CAST and u.src[0].dtype.scalar == dtypes.float64 and u.dtype.scalar.itemsize <= 2
               for u in self.program):
            helpers += F64_TO_F32_ODD
        f32, f64 = functools.partial(literal, d=dtypes.float32), functools.partial(literal, d=dtypes.float64)
        helpers += "".join(vector_math.HELPERS[op].llvm_source(f32, f64)
                           for op in sorted(self.helper_ops, key=lambda o: o.value))
        # the kernel is called by both entry points: noinline keeps one copy of its loops
        kernel = (f'define void @"{self.name}"({signature}) noinline nounwind "prefer-vector-width"="512" {{\n'
                  "entry:\n" + "".join(a + "\n" for a in self.allocas) + "  br label %start\nstart:\n" +
                  "\n".join(self.body) + "\n  ret void\n}\n")
        metadata = SCALAR_LOOP_METADATA if self.scalar_loops else ""
        return helpers + "\n".join(sorted(self.declarations)) + "\n" + kernel + \
            self.entry_points([u for _, u in params], [u for _, u in variables]) + metadata

    def entry_points(self, params: list[UOp], variables: list[UOp]) -> str:
        """`{name}_tg_slice(args, start, end, total)` and `{name}_tg_run(args)`, which unpack the argument array (buffer
        addresses, then the variables' values), and the two constants `CPUProgram` reads."""
        lines, args = [], []
        for i, u in enumerate([*params, *variables]):
            lines += [f"  %p{i} = getelementptr i64, ptr %args, i64 {i}", f"  %a{i} = load i64, ptr %p{i}"]
            if u.op is Ops.PARAM:
                lines.append(f"  %x{i} = inttoptr i64 %a{i} to ptr")
                args.append(f"ptr %x{i}")
            elif (t := value_type(u.dtype)) == "i64":
                args.append(f"i64 %a{i}")
            else:
                lines.append(f"  %x{i} = trunc i64 %a{i} to {t}")
                args.append(f"{t} %x{i}")
        unpack = "\n".join(lines)
        call = ", ".join(args)
        sep = ", " if call else ""
        n = self.name
        return (f'\ndefine void @"{n}_tg_slice"(ptr %args, i64 %start, i64 %end, i64 %total) nounwind {{\n'
                f"{unpack}\n  call void @\"{n}\"({call}{sep}i64 %start, i64 %end, i64 %total)\n  ret void\n}}\n"
                f'define void @"{n}_tg_run"(ptr %args) nounwind {{\n'
                f"{unpack}\n  call void @\"{n}\"({call}{sep}i64 0, i64 1, i64 1)\n  ret void\n}}\n"
                f'@"{n}_tg_outer" = constant i64 {self.plan.outer_max}\n'
                f'@"{n}_tg_nargs" = constant i64 {len(params) + len(variables)}\n')

    # ---- loops ----
    def open_loop(self, u: UOp, sliced: bool) -> None:
        t = value_type(u.dtype)
        if t == "i32":
            # an int32 counter is counted in 64 bits, as the address arithmetic that reads it (`wide`): with a 32-bit
            # one every address is built from sext(counter), which LLVM's induction variable pass then widens
            # itself, one use at a time, and a register tile has thousands of uses; the counter stays within
            # [0, bound) of an int32 bound, so its int32 reads are exact truncations
            t = "i64"
            self.wide.add(u)
        bound = self.int_resize(self.val(u.src[0]), value_type(u.src[0].dtype), t, u.src[0].dtype)
        lo, hi = "0", bound
        if sliced:  # this thread's part of [0, bound): bound*tg_start/tg_total .. bound*tg_end/tg_total, in 64 bits
            wide = self.int_resize(bound, t, "i64", u.dtype)
            ends = []
            for param in ("%tg_start", "%tg_end"):
                part = self.ins(f"sdiv i64 {self.ins(f'mul i64 {wide}, {param}')}, %tg_total")
                ends.append(self.int_resize(part, "i64", t, u.dtype))
            lo, hi = ends
        k = self.fresh("loop")
        counter = f"%{k}.i"
        self.allocas.append(f"  {counter} = alloca {t}")
        self.do(f"store {t} {lo}, ptr {counter}")
        self.do(f"br label %{k}.head")
        self.label(f"{k}.head")
        i = self.ins(f"load {t}, ptr {counter}")
        self.do(f"br i1 {self.ins(f'icmp slt {t} {i}, {hi}')}, label %{k}.body, label %{k}.exit")
        self.label(f"{k}.body")
        self.ref[u] = i
        self.loops.append((k, counter, i, t, hi))

    def close_loop(self, u: UOp) -> None:
        k, counter, i, t, _ = self.loops.pop()
        # the counter stays below its bound, so the increment never wraps
        self.do(f"store {t} {self.ins(f'add nsw {t} {i}, 1')}, ptr {counter}")
        scalar = f", !llvm.loop !{SCALAR_LOOP}" if u.src[0] in self.scalar_loops else ""
        self.do(f"br label %{k}.head{scalar}")
        self.label(f"{k}.exit")

    # ---- memory ----
    def guarded(self, gate: str, emit: Callable[[], str], default: tuple[str, str] | None = None) -> str:
        """Run `emit` only where `gate` holds; with `default` (type, value), a phi of its result and the default."""
        k = self.fresh("gate")
        before = self.block
        self.do(f"br i1 {gate}, label %{k}.then, label %{k}.join")
        self.label(f"{k}.then")
        result = emit()
        then_end = self.block
        self.do(f"br label %{k}.join")
        self.label(f"{k}.join")
        if default is None:
            return ""
        t, value = default
        return self.ins(f"phi {t} [{result}, %{then_end}], [{value}, %{before}]")

    def load(self, u: UOp) -> str:
        index = u.src[0]
        ptr, d = self.ref[index], u.dtype

        def read() -> str:
            raw = self.ins(f"load {memory_type(d)}, ptr {ptr}")
            return self.decode(raw, d)
        if len(index.src) > 2:  # a gated load reads nothing where the gate is false (the index may be out of bounds)
            return self.guarded(self.val(index.src[2]), read, (value_type(d), literal(0, d)))
        return read()

    def store(self, u: UOp) -> None:
        index, value = u.src[0], u.src[1]
        d = index.dtype

        def write() -> str:
            self.do(f"store {memory_type(d)} {self.encode(self.val(value), d)}, ptr {self.ref[index]}")
            return ""
        if len(u.src) > 2:
            self.guarded(self.val(u.src[2]), write)
        else:
            write()

    def decode(self, raw: str, d: DType) -> str:
        if d.scalar.is_bool:
            return self.ins(f"icmp ne i8 {raw}, 0")
        if is_emulated_float(d):
            return self.ins(f"call float @{helper_name(d, 'decode')}({memory_type(d)} {raw})")
        return raw

    def encode(self, v: str, d: DType) -> str:
        if d.scalar.is_bool:
            return self.ins(f"zext i1 {v} to i8")
        if is_emulated_float(d):
            return self.ins(f"call {memory_type(d)} @{helper_name(d, 'encode')}(float {v})")
        return v

    # ---- values ----
    def int_resize(self, v: str, frm: str, to: str, d: DType) -> str:
        """An integer value of type `frm` as type `to` (sign-extended unless `d` is unsigned)."""
        if frm == to:
            return v
        if int(frm[1:]) > int(to[1:]):
            return self.ins(f"trunc {frm} {v} to {to}")
        return self.ins(f"{'zext' if d.is_unsigned or d.is_bool else 'sext'} {frm} {v} to {to}")

    def round_emulated(self, v: str, d: DType) -> str:
        return self.ins(f"call float @{helper_name(d, 'round')}(float {v})") if is_emulated_float(d) else v

    def alu(self, u: UOp) -> str:
        op, d = u.op, u.dtype
        if u in self.wide:
            a, b = (self.val64(s) for s in u.src)
            return self.ins(f"{ {Ops.ADD: 'add', Ops.SUB: 'sub', Ops.MUL: 'mul'}[op]} nsw i64 {a}, {b}")
        if (side := self.fused.get(u)) is not None:
            return self.fused_multiply_add(u, side)
        srcs = [self.val(s) for s in u.src]
        if op is Ops.WHERE:
            return self.ins(f"select i1 {srcs[0]}, {value_type(d)} {srcs[1]}, {value_type(d)} {srcs[2]}")
        sd = u.src[0].dtype  # the operands' dtype (not the result's, for comparisons)
        t = value_type(sd)
        if op in GroupOp.Comparison:
            return self.compare(op, sd, t, srcs[0], srcs[1])
        if sd.is_float:
            result = self.float_alu(op, d, t, srcs)
            return result if op is Ops.MAX else self.round_emulated(result, d)
        return self.int_alu(u, t, srcs)

    def compare(self, op: Ops, d: DType, t: str, a: str, b: str) -> str:
        if d.is_float:  # ordered less/equal, unordered not-equal: NaN compares like C
            pred = {Ops.CMPLT: "olt", Ops.CMPNE: "une", Ops.CMPEQ: "oeq"}[op]
            return self.ins(f"fcmp {pred} {t} {a}, {b}")
        lt = "ult" if d.is_unsigned or d.is_bool else "slt"
        pred = {Ops.CMPLT: lt, Ops.CMPNE: "ne", Ops.CMPEQ: "eq"}[op]
        return self.ins(f"icmp {pred} {t} {a}, {b}")

    def fused_multiply_add(self, u: UOp, side: int) -> str:
        """`a*b + c`, `a*b - c` or `c - a*b` fused (the contraction rule of `llvm_tiles`): a multiply and an add or
        subtract that carry the `contract` flag, where the product has no other use, so the code generator makes them
        one FMA as a vector tile's `llvm.fmuladd` is, and the SLP vectoriser still takes them (it leaves a tile of
        `llvm.fmuladd` calls scalar); no other instruction carries the flag."""
        product, other = u.src[side], u.src[1 - side]
        t = value_type(u.dtype)
        a, b, c = self.val(product.src[0]), self.val(product.src[1]), self.val(other)
        p = self.ins(f"fmul contract {t} {a}, {b}")
        if u.op is Ops.ADD:
            return self.ins(f"fadd contract {t} {p}, {c}" if side == 0 else f"fadd contract {t} {c}, {p}")
        return self.ins(f"fsub contract {t} {p}, {c}" if side == 0 else f"fsub contract {t} {c}, {p}")

    def float_alu(self, op: Ops, d: DType, t: str, srcs: list[str]) -> str:
        # a multiply and an add are fused only where `fused_multiply_add` writes them as one, or, under the "contract"
        # rule, where LLVM chooses (float32 and float64 only: a fused half multiply-add would skip a rounding)
        flag = self.contract if d.scalar in (dtypes.float32, dtypes.float64) else ""
        if vector_math.computes(op, d):  # float16 through float: one more rounding
            helper = vector_math.HELPERS[op]
            self.declarations.update(helper.llvm_declarations)
            self.helper_ops.add(op)
            x = srcs[0] if t == "float" else self.ins(f"fpext half {srcs[0]} to float")
            y = self.ins(f"call float @{helper.llvm_name}(float {x})")
            return y if t == "float" else self.ins(f"fptrunc float {y} to half")
        if op in MATH_INTRINSICS:
            return self.intrinsic(f"llvm.{MATH_INTRINSICS[op]}.{float_suffix(t)}", t, [(t, srcs[0])])
        if op is Ops.NEG:
            return self.ins(f"fneg {t} {srcs[0]}")
        if op is Ops.RECIPROCAL:
            return self.ins(f"fdiv {t} {literal(1.0, d)}, {srcs[0]}")
        if op is Ops.MAX:
            return self.intrinsic(f"llvm.maximum.{float_suffix(t)}", t, [(t, srcs[0]), (t, srcs[1])])
        a, b = srcs
        if op is Ops.IDIV:  # trunc of the quotient as rounded to the dtype
            quotient = self.round_emulated(self.ins(f"fdiv {t} {a}, {b}"), d)
            return self.intrinsic(f"llvm.trunc.{float_suffix(t)}", t, [(t, quotient)])
        instr = {Ops.ADD: "fadd" + flag, Ops.SUB: "fsub" + flag, Ops.MUL: "fmul" + flag, Ops.FDIV: "fdiv",
                 Ops.MOD: "frem"}.get(op)
        if instr is None:
            raise NotImplementedError(f"LLVMRenderer cannot render {op} of {d}")
        return self.ins(f"{instr} {t} {a}, {b}")

    def int_alu(self, u: UOp, t: str, srcs: list[str]) -> str:
        op, d = u.op, u.src[0].dtype
        if op is Ops.NEG:
            return self.ins(f"xor i1 {srcs[0]}, true" if d.is_bool else f"sub {t} 0, {srcs[0]}")
        a, b = srcs
        if d.is_bool:  # bool arithmetic, truncated back to a bool: + and max are or, * is and, - is xor
            instr = {Ops.ADD: "or", Ops.MAX: "or", Ops.MUL: "and", Ops.SUB: "xor", Ops.AND: "and", Ops.OR: "or",
                     Ops.XOR: "xor"}.get(op)
            if instr is None:
                raise NotImplementedError(f"LLVMRenderer cannot render {op} of bool")
            return self.ins(f"{instr} i1 {a}, {b}")
        if op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.AND, Ops.OR, Ops.XOR):
            nsw = " nsw" if u in self.no_wrap and op in (Ops.ADD, Ops.SUB, Ops.MUL) else ""
            instr = {Ops.ADD: "add", Ops.SUB: "sub", Ops.MUL: "mul", Ops.AND: "and", Ops.OR: "or", Ops.XOR: "xor"}[op]
            return self.ins(f"{instr}{nsw} {t} {a}, {b}")
        if op is Ops.MAX:
            greater = self.ins(f"icmp {'ugt' if d.is_unsigned else 'sgt'} {t} {a}, {b}")
            return self.ins(f"select i1 {greater}, {t} {a}, {t} {b}")
        if op in (Ops.IDIV, Ops.MOD):
            return self.divmod(op, d, t, a, b, u.src[1])
        if op in (Ops.SHL, Ops.SHR):
            return self.shift(op, d, t, a, b, u.src[1].dtype)
        raise NotImplementedError(f"LLVMRenderer cannot render {op} of {d}")

    def divmod(self, op: Ops, d: DType, t: str, a: str, b: str, divisor: UOp) -> str:
        """Truncated division and remainder, with x/0 = x%0 = 0 and MIN/-1 = MIN (LLVM: undefined behaviour)."""
        signed = not d.is_unsigned
        instr = ("sdiv" if signed else "udiv") if op is Ops.IDIV else ("srem" if signed else "urem")
        if divisor.op is Ops.CONST and int(divisor.arg) > 0:
            return self.ins(f"{instr} {t} {a}, {b}")
        zero = self.ins(f"icmp eq {t} {b}, 0")
        bad = self.ins(f"or i1 {zero}, {self.ins(f'icmp eq {t} {b}, -1')}") if signed else zero
        result = self.ins(f"{instr} {t} {a}, {self.ins(f'select i1 {bad}, {t} 1, {t} {b}')}")
        if op is Ops.MOD or not signed:  # x%-1 = 0 like x%0
            return self.ins(f"select i1 {bad}, {t} 0, {t} {result}")
        negated = self.ins(f"select i1 {zero}, {t} 0, {t} {self.ins(f'sub {t} 0, {a}')}")
        return self.ins(f"select i1 {bad}, {t} {negated}, {t} {result}")

    def shift(self, op: Ops, d: DType, t: str, a: str, b: str, amount_dtype: DType) -> str:
        """a<<b, a>>b; a shift by a negative amount or by the width or more gives 0 (-1 for a negative a>>b)."""
        bt = value_type(amount_dtype)
        # unsigned compare: a negative amount is out of range too
        out = self.ins(f"icmp uge {bt} {b}, {d.bits}")
        amount = self.int_resize(b, bt, t, dtypes.uint64)
        if op is Ops.SHR and not d.is_unsigned:  # shifting by width-1 gives the fill: 0 or -1
            return self.ins(f"ashr {t} {a}, {self.ins(f'select i1 {out}, {t} {d.bits - 1}, {t} {amount}')}")
        instr = "shl" if op is Ops.SHL else "lshr"
        shifted = self.ins(f"{instr} {t} {a}, {self.ins(f'select i1 {out}, {t} 0, {t} {amount}')}")
        return self.ins(f"select i1 {out}, {t} 0, {t} {shifted}")

    def cast(self, x: str, frm: DType, to: DType) -> str:
        ft, tt = value_type(frm), value_type(to)
        if to.scalar.is_bool:
            return self.ins(f"fcmp une {ft} {x}, {literal(0, frm)}" if frm.is_float else f"icmp ne {ft} {x}, 0")
        if not frm.is_float and not to.is_float:
            return self.int_resize(x, ft, tt, frm)
        if frm.scalar.is_bool:
            # a select of 1 and 0 rather than uitofp i1: LLVM's vectorisers left the latter scalar in the MNIST
            # example's fused max-pool and BatchNorm backward kernels (a mask of equal maxima times the gradient),
            # which then ran 2-3x slower than the C path's (CHANGELOG)
            return self.round_emulated(self.ins(f"select i1 {x}, {tt} {literal(1, to)}, {tt} {literal(0, to)}"), to)
        if not frm.is_float:  # int -> float
            convert = "uitofp" if frm.is_unsigned else "sitofp"
            return self.round_emulated(self.ins(f"{convert} {ft} {x} to {tt}"), to)
        if not to.is_float:
            # saturating: LLVM's plain conversion is poison out of range; narrow ints wrap from the 64-bit value
            # as the reference does
            if to.scalar == dtypes.uint64:
                return self.intrinsic(f"llvm.fptoui.sat.i64.{float_suffix(ft)}", "i64", [(ft, x)])
            wide = self.intrinsic(f"llvm.fptosi.sat.i64.{float_suffix(ft)}", "i64", [(ft, x)])
            return self.int_resize(wide, "i64", tt, to)
        if frm.scalar == dtypes.float64 and to.scalar.itemsize <= 2:  # one rounding, through round-to-odd float
            x, ft = self.ins(f"call float @tg_f64_to_f32_odd(double {x})"), "float"
        if ft != tt:
            size = {"half": 16, "float": 32, "double": 64}
            x = self.ins(f"{'fpext' if size[tt] > size[ft] else 'fptrunc'} {ft} {x} to {tt}")
        return self.round_emulated(x, to)

    def bitcast(self, x: str, frm: DType, to: DType) -> str:
        ft, tt = memory_type(frm), memory_type(to)
        raw = self.encode(x, frm) if is_emulated_float(frm) else x
        if ft != tt:
            raw = self.ins(f"bitcast {ft} {raw} to {tt}")
        return self.decode(raw, to) if is_emulated_float(to) else raw
