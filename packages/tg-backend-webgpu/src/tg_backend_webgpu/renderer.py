"""WGSL from the linearized program: one compute entry point per kernel.

Types. WGSL computes in bool, i32, u32, f32 and (with the `shader-f16` feature) f16, with no 64-bit and no
8/16-bit integer types. So int8/int16 values live sign-extended in i32 and uint8/uint16 in u32, wrapped back
after every op; bfloat16 values live in f32 and are rounded back after every op. Storage has 32-bit words
only (f16 aside): buffers of bool, int8, uint8, int16, uint16 and bfloat16 hold their elements packed,
loads extract them, and stores change only their own bits with atomicAnd/atomicOr, so that work-items
writing neighbouring elements of one word do not race. int64/uint64 need wgpu-native's `shader-int64`.

Work-items. The output loops of a kernel with one loop nest (and the lane of a GROUP reduction) run as
work-items, launch dimension 0 first as `Renderer.global_ranges` orders them. A launch is a flat list of
workgroups, each a flat block of invocations: the kernel takes its workgroup's linear id apart into one block
coordinate per dimension and its `local_invocation_index` into one local coordinate per dimension, and a
range's index is block * local size + local. The local sizes are pipeline-overridable constants
(`tg_local_<d>`, and `tg_workgroup_size` their product): the runtime sets them from the ProgramSpec's local
size (LOCAL/GROUP opts) or picks them itself, so one shader serves any workgroup shape, and a launch of any
size fits in up to three dimensions of at most 65535 workgroups. Each index is guarded against its loop's
bound, since the last block of a dimension may be partial. A GROUP reduction combines its lanes' partials
in a `var<workgroup>` array after a `workgroupBarrier()`; its workgroups are always full (the GROUP opt
requires it), so it has no per-index guards: a barrier must be reached in uniform control flow.

Loop cap. lavapipe stops an invocation after 65535 loop iterations, all loops together. A kernel that would
run more has its innermost loops unrolled in the source (2 to 32 copies of the body per iteration, in order,
so the accumulation and its result are the plain loop's; each copy past the first is guarded unless the factor
divides a constant trip count); one that still needs more raises LoopLimitError.
Symbolic sizes (DEFINE_VAR) come in a uniform buffer bound after the data buffers.
"""

from __future__ import annotations

import math
import struct
from collections import defaultdict
from collections.abc import Callable

from tinygrad.dtype import DType, dtypes
from tinygrad.renderer import Renderer, loop_depths_and_users
from tinygrad.uop.ops import GroupOp, Ops, UOp

from tg_backend_webgpu.wgsl_lib import helper_source

#: invocations per workgroup the runtime aims for when a kernel leaves the work-group size to it (no LOCAL or
#: GROUP opt): enough SIMD rows for lavapipe, few enough that a small output does not run mostly idle lanes
DEFAULT_WORKGROUP_SIZE = 64
#: launch dimensions a kernel may run as work-items. WGSL's are virtual (indices are taken apart from linear
#: ids, see the module docstring), so this only bounds how many output loops stay loops in a many-axis kernel
MAX_WORK_ITEM_DIMS = 8
#: WebGPU's default limits, used when no device passes its own
DEFAULT_MAX_INVOCATIONS, DEFAULT_WORKGROUP_STORAGE = 256, 16384
#: unroll factors tried, smallest first, to bring a kernel's loop iterations under a driver's cap
UNROLL_FACTORS = (2, 4, 8, 16, 32)
#: longer expressions get a `let`, so that a long elementwise chain does not become one enormous line
MAX_INLINE_CHARS = 1000

#: the most loop iterations one call of the exact float fmod helper runs (277 exponent steps of 8 bits)
FMOD_MAX_ITERATIONS = 35
#: dtypes whose buffers hold several elements per 32-bit word
PACKED = frozenset({dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.bfloat16})
SIGNED_SMALL = frozenset({dtypes.int8, dtypes.int16})
UNSIGNED_SMALL = frozenset({dtypes.uint8, dtypes.uint16})
F32_VALUED = frozenset({dtypes.float32, dtypes.bfloat16})

VALUE_TYPES: dict[DType, str] = {
    dtypes.bool: "bool", dtypes.int8: "i32", dtypes.int16: "i32", dtypes.int32: "i32", dtypes.uint8: "u32",
    dtypes.uint16: "u32", dtypes.uint32: "u32", dtypes.float16: "f16", dtypes.bfloat16: "f32", dtypes.float32: "f32",
    dtypes.int64: "i64", dtypes.uint64: "u64",
}
#: dtypes that need a device feature (wgpu-native's `shader-int64` is not part of WebGPU; browsers lack it)
FEATURE_DTYPES = {dtypes.float16: "shader-f16", dtypes.int64: "shader-int64", dtypes.uint64: "shader-int64"}
#: float ops whose result the shader compiler may fold for equal operands without changing it (x+x, x*x, max)
SAFE_SAME = frozenset({Ops.ADD, Ops.MUL, Ops.MAX})
MATH_FNS = {Ops.SQRT: "sqrt", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.TRUNC: "trunc"}


class LoopLimitError(RuntimeError):
    pass


def _cancels(op: Ops, a: UOp, b: UOp) -> bool:
    """Whether the shader compiler would fold `a op b` as if a and b were finite: x-x, x/x, x!=x, x+(-x)."""
    if a is b:
        return op not in SAFE_SAME
    return op is Ops.ADD and ((b.op is Ops.NEG and b.src[0] is a) or (a.op is Ops.NEG and a.src[0] is b))


def value_type(d: DType) -> str:
    return VALUE_TYPES[d.scalar]


def _mask(d: DType) -> str:
    return f"0x{(1 << d.bits) - 1:x}u"


#: an entry of `WGSL_CODE_FOR_OP`: (renderer, result dtype, source UOps, *rendered operands) -> WGSL text, the
#: shape of the C-style base's `code_for_op` entries. Bool values compute in bool, so its arithmetic is logic.
OpFn = Callable[..., str]
_BOOL_SYMS = {Ops.ADD: "|", Ops.SUB: "!=", Ops.MUL: "&", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "!=", Ops.MAX: "|"}


def _infix(op: Ops, sym: str) -> OpFn:
    return lambda r, d, src, a, b: f"({a} {_BOOL_SYMS[op] if d.scalar == dtypes.bool else sym} {b})"


def _compare(op: Ops, sym: str) -> OpFn:
    def fn(r: WGSLRenderer, d: DType, src: tuple[UOp, ...], a: str, b: str) -> str:
        sd = src[0].dtype.scalar
        if sd == dtypes.bool and op is Ops.CMPLT:
            return f"((!{a}) & {b})"
        if sd.is_float and op is Ops.CMPNE:
            return f"(!({a} == {b}))"  # NaN != x must be true; lavapipe's != is ordered
        return f"({a} {sym} {b})"
    return fn


def _math(op: Ops) -> OpFn:
    def fn(r: WGSLRenderer, d: DType, src: tuple[UOp, ...], a: str) -> str:
        if op in (Ops.EXP2, Ops.LOG2) and "shader-f64" in r.features:
            call = f"{r.helper('tg_exp2_f64' if op is Ops.EXP2 else 'tg_log2_f64')}(f32({a}))"
            return f"f16({call})" if d.scalar == dtypes.float16 else call
        if op in (Ops.SIN, Ops.LOG2) and d.scalar != dtypes.float16:  # f16's range needs neither fix
            return f"{r.helper('tg_sin_f32' if op is Ops.SIN else 'tg_log2_f32')}({a})"
        return f"{MATH_FNS[op]}({a})"
    return fn


def _neg(r: WGSLRenderer, d: DType, src: tuple[UOp, ...], a: str) -> str:
    if d.scalar == dtypes.bool:
        return f"(!{a})"
    return f"({r.render_const(0, d)} - {a})" if value_type(d)[0] == "u" else f"(-{a})"


def _max(r: WGSLRenderer, d: DType, src: tuple[UOp, ...], a: str, b: str) -> str:
    d = d.scalar
    if d == dtypes.bool:
        return f"({a} | {b})"
    if d.is_float:
        return f"{r.helper('tg_max_f16' if d == dtypes.float16 else 'tg_max_f32')}({a}, {b})"
    t = value_type(d)
    return f"{r.helper('tg_max_' + t)}({a}, {b})" if t in ("i64", "u64") else f"max({a}, {b})"


def _divmod(op: Ops) -> OpFn:
    def fn(r: WGSLRenderer, d: DType, src: tuple[UOp, ...], a: str, b: str) -> str:
        d = d.scalar
        if d.is_float and op is Ops.IDIV:  # truncate the quotient as rounded to the dtype
            quotient = f"({a} / {b})"
            return f"trunc({r.helper('tg_round_bf16')}{quotient})" if d == dtypes.bfloat16 else f"trunc({quotient})"
        if d.is_float:  # fmod of the exact values; its result is representable in the operands' dtype
            fmod = r.helper("tg_fmod_f32")
            return f"f16({fmod}(f32({a}), f32({b})))" if d == dtypes.float16 else f"{fmod}({a}, {b})"
        divisor = src[1]
        if divisor.op is Ops.CONST and int(divisor.arg) > 0:
            return f"({a} {'/' if op is Ops.IDIV else '%'} {b})"
        return f"{r.helper(('tg_idiv_' if op is Ops.IDIV else 'tg_mod_') + value_type(d))}({a}, {b})"
    return fn


#: how WGSL spells each value op (LOAD and STORE depend on the buffer's kind and stay in the walk)
WGSL_CODE_FOR_OP: dict[Ops, OpFn] = {
    Ops.CONST: lambda r, d, src, value: r.render_kernel_const(value, d),
    Ops.CAST: lambda r, d, src, x: r.render_cast(x, src[0].dtype, d),
    Ops.BITCAST: lambda r, d, src, x: r.render_bitcast(x, src[0].dtype, d),
    **{op: _compare(op, sym) for op, sym in ((Ops.CMPLT, "<"), (Ops.CMPNE, "!="), (Ops.CMPEQ, "=="))},
    Ops.WHERE: lambda r, d, src, c, a, b: f"select({b}, {a}, {c})",
    **{op: _math(op) for op in MATH_FNS},
    Ops.NEG: _neg,
    Ops.RECIPROCAL: lambda r, d, src, a: f"({r.render_const(1.0, d)} / {a})",
    Ops.MAX: _max,
    Ops.IDIV: _divmod(Ops.IDIV), Ops.MOD: _divmod(Ops.MOD),
    Ops.SHL: lambda r, d, src, a, b: f"{r.helper('tg_shl_' + value_type(d))}({a}, {b}, {d.bits}u)",
    Ops.SHR: lambda r, d, src, a, b: f"{r.helper('tg_shr_' + value_type(d))}({a}, {b})",
    **{op: _infix(op, sym) for op, sym in ((Ops.ADD, "+"), (Ops.SUB, "-"), (Ops.MUL, "*"), (Ops.FDIV, "/"),
                                            (Ops.AND, "&"), (Ops.OR, "|"), (Ops.XOR, "^"))},
}


class WGSLRenderer(Renderer):
    device = "WEBGPU"
    has_local = True
    # not the 8-bit floats (fp8e4m3, fp8e5m2): they are refused with the device's dtype error rather than emulated
    supported_dtypes = frozenset(VALUE_TYPES)
    #: a flat launch in workgroups of 64: faster than groups of 256 on lavapipe (the measurement is in the CHANGELOG)
    flat_work_group = 64
    #: WGSL indexes arrays with i32/u32 and its loops count in i32 (64-bit integers are an optional native feature
    #: that arrays cannot be indexed with): a kernel whose index arithmetic leaves int32's range is refused with an
    #: IndexRangeError naming the value and the limit, instead of wrapping
    index_wide_dtype = None
    #: the WGSL text of each value op (see WGSL_CODE_FOR_OP)
    code_for_op: dict[Ops, OpFn] = WGSL_CODE_FOR_OP

    def __init__(self, features: frozenset[str] = frozenset({"shader-f16"}), max_loop_iterations: int | None = None,
                 max_loop_iterations_reason: str = "", max_workgroup_invocations: int = DEFAULT_MAX_INVOCATIONS,
                 workgroup_storage: int = DEFAULT_WORKGROUP_STORAGE):
        """`max_workgroup_invocations` is the most invocations of one (flat, one-dimensional) workgroup: the
        smaller of the device's maxComputeInvocationsPerWorkgroup and maxComputeWorkgroupSizeX.
        `workgroup_storage` is its maxComputeWorkgroupStorageSize in bytes."""
        #: the device's features: float16 needs `shader-f16`, int64/uint64 need `shader-int64`
        self.features = features
        #: a driver that stops invocations after this many loop iterations (lavapipe); rendering a kernel that
        #: needs more, even with its innermost loops unrolled, raises LoopLimitError instead of returning wrong
        #: results
        self.max_loop_iterations, self.max_loop_iterations_reason = max_loop_iterations, max_loop_iterations_reason
        # the compiler's view of work-groups: a workgroup is flat, so every dimension may hold all of it
        self.max_work_group_size = max_workgroup_invocations
        self.local_max = (max_workgroup_invocations,) * MAX_WORK_ITEM_DIMS
        self.local_mem_max = workgroup_storage
        self._helpers: set[str] = set()

    def supports_dtype(self, dtype: DType) -> bool:
        need = FEATURE_DTYPES.get(dtype.scalar)
        return super().supports_dtype(dtype) and (need is None or need in self.features)

    def helper(self, name: str) -> str:
        self._helpers.add(name)
        return name

    # ---- constants, casts and bit casts ----
    def render_const(self, value: float | int | bool, d: DType) -> str:
        d = d.scalar
        if d == dtypes.bool:
            return "true" if value else "false"
        if d.is_float:
            v = float(value)
            if math.isnan(v):
                body = "bitcast<f32>(0x7fc00000u)"
            elif math.isinf(v):
                body = f"bitcast<f32>({'0x7f800000u' if v > 0 else '0xff800000u'})"
            else:
                body = repr(v) + "f"
            return f"f16({body})" if d == dtypes.float16 else body
        iv = int(value)
        if value_type(d) == "u32":
            return f"{iv & 0xffffffff}u"
        if value_type(d) == "u64":
            return f"{iv & 0xffffffffffffffff}lu"
        if value_type(d) == "i64":
            return f"({iv + 1}li - 1li)" if iv == -(2**63) else f"{iv}li"
        return f"i32({iv})" if iv == -(2**31) else f"{iv}i"  # 2147483648i does not parse

    def render_kernel_const(self, value: float | int | bool, d: DType) -> str:
        """A constant inside the kernel body. lavapipe's shader compiler assumes no NaN, inf or signed zero
        (naga does not ask for float controls): it folds x/0.0 and inf*0.0 to 0 and -0.0+0.0 to -0.0. So the
        floats 0, inf and NaN are built from a value it cannot see through (`tg_opaque`, 0 at run time)."""
        if not d.is_float or (math.isfinite(float(value)) and float(value) != 0):
            return self.render_const(value, d)
        bits = int.from_bytes(struct.pack("<f", float(value)), "little")
        body = f"bitcast<f32>(0x{bits:08x}u | tg_opaque)"
        return f"f16({body})" if d.scalar == dtypes.float16 else body

    @staticmethod
    def opaque_copy(x: str, d: DType) -> str:
        """x, in a form the shader compiler cannot tell is x: it folds x-x to 0 and x/x to 1 (wrong for inf
        and NaN) when it sees the same value on both sides."""
        bits = f"bitcast<f32>(bitcast<u32>(f32({x})) | tg_opaque)"
        return f"f16({bits})" if d.scalar == dtypes.float16 else bits

    def wrap(self, expr: str, d: DType) -> str:
        """Bring a small int computed in 32 bits back into its dtype's range."""
        if d.scalar in SIGNED_SMALL:
            shift = 32 - d.bits
            return f"(({expr} << {shift}u) >> {shift}u)"
        if d.scalar in UNSIGNED_SMALL:
            return f"({expr} & {_mask(d)})"
        return expr

    def render_cast(self, x: str, frm: DType, to: DType) -> str:
        frm, to = frm.scalar, to.scalar
        if to == dtypes.bool:
            # !(x == 0) rather than x != 0: the float != is an ordered comparison here, and NaN is true
            return f"(!({x} == {self.render_const(0, frm)}))"
        if frm == dtypes.bool:
            expr = f"{value_type(to)}({x})"
            return expr
        if to.is_float:
            if to == dtypes.bfloat16:
                return f"{self.helper('tg_round_bf16')}(f32({x}))"
            return f"{value_type(to)}({x})"
        tf, tt = value_type(frm), value_type(to)
        if tt in ("i64", "u64"):
            if frm.is_float:
                if tt == "u64":  # as with u32: negatives wrap through i64, values past i64's range convert directly
                    return f"{self.helper('tg_f32_to_u64')}(f32({x}))"
                return f"i64({x})"
            # from a 32-bit value: widen with the source's signedness, then reinterpret
            wide = {"i32": "i64", "u32": "u64"}.get(tf, tf)
            expr = f"{wide}({x})" if wide != tf else x
            return expr if wide == tt else f"bitcast<{tt}>({expr})"
        if tf in ("i64", "u64"):  # narrowing keeps the low 32 bits (then wraps small ints)
            low = f"u32({x} & {self.render_const(0xffffffff, frm)})"
            return self.wrap(low if tt == "u32" else f"bitcast<i32>({low})", to)
        if tt == "i32":
            if frm.is_float:
                expr = f"i32({x})"
            elif tf == "u32":
                expr = f"bitcast<i32>({x})"
            else:
                expr = x
            return self.wrap(expr, to)
        # to an unsigned dtype
        if frm.is_float:
            expr = f"{self.helper('tg_f32_to_u32')}(f32({x}))" if to == dtypes.uint32 else f"bitcast<u32>(i32({x}))"
        elif tf == "i32":
            expr = f"bitcast<u32>({x})"
        else:
            expr = x
        return self.wrap(expr, to)

    def _bits16(self, x: str, d: DType) -> str:
        if d == dtypes.float16:
            return f"pack2x16float(vec2f(f32({x}), 0.0f))"
        if d == dtypes.bfloat16:
            return f"{self.helper('tg_f32_to_bf16')}({x})"
        return f"(bitcast<u32>({x}) & 0xffffu)"

    def _from_bits16(self, bits: str, d: DType) -> str:
        if d == dtypes.float16:
            return f"f16(unpack2x16float({bits}).x)"
        if d == dtypes.bfloat16:
            return f"bitcast<f32>({bits} << 16u)"
        if d == dtypes.int16:
            return f"(bitcast<i32>({bits} << 16u) >> 16u)"
        return bits

    def render_bitcast(self, x: str, frm: DType, to: DType) -> str:
        frm, to = frm.scalar, to.scalar
        if frm.itemsize in (4, 8):
            return f"bitcast<{value_type(to)}>({x})"
        if frm.itemsize == 2:
            return self._from_bits16(self._bits16(x, frm), to)
        # int8 <-> uint8: reinterpret the low byte
        return self.wrap(f"bitcast<{value_type(to)}>({x})", to)

    # ---- memory ----
    def render_param(self, binding: int, name: str, d: DType, atomic: bool) -> str:
        if d.scalar in PACKED:
            elem = "atomic<u32>" if atomic else "u32"
        else:
            elem = value_type(d)
        return f"@group(0) @binding({binding}) var<storage, read_write> {name}: array<{elem}>;"

    def render_load(self, buf: str, idx: str, gate: str | None, d: DType, atomic: bool) -> str:
        d = d.scalar
        if d not in PACKED:
            val = f"{buf}[{idx}]"
        else:
            per_word = 4 // d.itemsize
            word_idx = f"{buf}[{idx} >> {per_word.bit_length() - 1}u]"
            word = f"atomicLoad(&{word_idx})" if atomic else word_idx
            bits = d.itemsize * 8
            shift = f"(u32({idx} & {per_word - 1}i) * {bits}u)"
            if d in SIGNED_SMALL:  # the element's top bit to bit 31, then an arithmetic shift back
                val = f"(bitcast<i32>({word} << ({32 - bits}u - {shift})) >> {32 - bits}u)"
            else:
                raw = f"(({word} >> {shift}) & {_mask(d)})"
                val = {dtypes.bool: f"({raw} != 0u)", dtypes.bfloat16: f"bitcast<f32>({raw} << 16u)"}.get(d, raw)
        # a load whose gate is false may index out of bounds: WGSL clamps such accesses, and select drops it
        return val if gate is None else f"select({self.render_const(0, d)}, {val}, {gate})"

    def render_store(self, buf: str, idx: str, value: str, d: DType) -> str:
        d = d.scalar
        if d not in PACKED:
            return f"{buf}[{idx}] = {value};"
        per_word = 4 // d.itemsize
        bits = d.itemsize * 8
        if d == dtypes.bfloat16:
            pattern = f"{self.helper('tg_f32_to_bf16')}({value})"
        elif d == dtypes.bool:
            pattern = f"u32({value})"
        else:
            pattern = f"(bitcast<u32>({value}) & {_mask(d)})"
        word = f"&{buf}[{idx} >> {per_word.bit_length() - 1}u]"
        shift = f"(u32({idx} & {per_word - 1}i) * {bits}u)"
        # clear, then set, only this element's bits: other work-items may be writing the rest of the word
        return (f"atomicAnd({word}, ~({_mask(d)} << {shift})); "
                f"atomicOr({word}, {pattern} << {shift});")

    # ---- ALU ----
    def render_alu(self, op: Ops, d: DType, srcs: list[str], src_uops: tuple[UOp, ...]) -> str:
        """Look the op up in `code_for_op`, then bring the result back into its dtype: bfloat16 computes in f32,
        small ints in 32 bits."""
        d = d.scalar
        expr = self.code_for_op[op](self, d, src_uops, *srcs)
        if op in GroupOp.Comparison or op is Ops.WHERE or d == dtypes.bool:
            return expr
        if d.is_float:
            return f"{self.helper('tg_round_bf16')}({expr})" if d == dtypes.bfloat16 and op is not Ops.TRUNC else expr
        return self.wrap(expr, d)

    # ---- work-items and loops ----
    # `global_ranges` is the base class's: the GROUP lane, then the output loops innermost first, as many as
    # `local_max` has dimensions (MAX_WORK_ITEM_DIMS); a kernel with several loop nests runs as one invocation

    @staticmethod
    def innermost_loops(program: list[UOp], work_items: set[UOp]) -> dict[int, int]:
        """Position of the RANGE -> position of its END, for every loop with no loop inside it: the ones that
        unrolling shortens."""
        ends: dict[int, int] = {}
        opened: list[int] = []
        outer: set[int] = set()
        for i, u in enumerate(program):
            if u.op is Ops.RANGE and u not in work_items:
                if opened:
                    outer.add(opened[-1])
                opened.append(i)
            elif u.op is Ops.END and u.src[0] not in work_items:
                start = opened.pop()
                if start not in outer:
                    ends[start] = i
        return ends

    def loop_iterations(self, program: list[UOp], work_items: set[UOp], unroll: int = 1) -> int:
        """The most loop iterations one invocation runs (each loop's trip count times the number of times its
        body is entered), with the innermost loops unrolled `unroll` times."""
        innermost = self.innermost_loops(program, work_items) if unroll > 1 else {}
        total, runs = 0, [1]  # runs: how often the enclosing loop body runs
        for i, u in enumerate(program):
            if u.op is Ops.RANGE and u not in work_items:
                trips = max(int(u.src[0].vmax), 0)
                total += runs[-1] * (-(-trips // unroll) if i in innermost else trips)
                runs.append(runs[-1] * trips)
            elif u.op is Ops.END and u.src[0] not in work_items:
                runs.pop()
            elif u.op is Ops.MOD and u.dtype.is_float:  # tg_fmod_f32 loops too, once per element
                total += runs[-1] * FMOD_MAX_ITERATIONS
        return total

    def unroll_factor(self, name: str, program: list[UOp], work_items: set[UOp]) -> int:
        """1 where the kernel stays under the device's loop cap, else the smallest unroll factor that brings it
        under; LoopLimitError where none does."""
        limit = self.max_loop_iterations
        if limit is None or (iterations := self.loop_iterations(program, work_items)) <= limit:
            return 1
        for factor in UNROLL_FACTORS:
            if self.loop_iterations(program, work_items, factor) <= limit:
                return factor
        most = UNROLL_FACTORS[-1]
        raise LoopLimitError(
            f"kernel {name} runs {iterations} loop iterations per invocation "
            f"({self.loop_iterations(program, work_items, most)} with its innermost loops unrolled {most} times), "
            f"but this device ({self.max_loop_iterations_reason}) stops every invocation after {limit}: its results "
            f"would be wrong. Reduce in steps (for example sum over one axis of a reshape at a time), or use "
            f"another device")

    # ---- the walk over the program ----
    def render(self, name: str, program: list[UOp]) -> str:
        self._helpers = set()
        depth_of, users = loop_depths_and_users(program)
        stored = {u.src[0].src[0] for u in program if u.op is Ops.STORE}
        # a packed element's index is used twice (word and position in the word): name it once
        packed_indices = {u.src[1] for u in program if u.op is Ops.INDEX and u.src[0].op is Ops.PARAM
                          and u.src[0].dtype.scalar in PACKED}
        work_ranges = self.global_ranges(program)
        dim_of = {r: d for d, r in enumerate(work_ranges)}
        # a GROUP reduction's workgroups are full (the GROUP opt refuses symbolic or partial ones), and its barrier
        # must be reached in uniform control flow: no guard that depends on the invocation may enclose it
        grouped = any(u.op is Ops.BARRIER for u in program)
        if grouped and any(r.src[0].op is not Ops.CONST for r in work_ranges):
            raise NotImplementedError(f"kernel {name}: a GROUP reduction over a symbolic launch size")
        unroll = self.unroll_factor(name, program, set(work_ranges))
        unrolled = self.innermost_loops(program, set(work_ranges)) if unroll > 1 else {}

        names: dict[UOp, str] = {}
        pending: dict[UOp, str] = {}
        body: list[str] = []
        local_decls: list[str] = []
        counters: dict[str, int] = defaultdict(int)

        def fresh(prefix: str) -> str:
            n = counters[prefix]
            counters[prefix] += 1
            return f"{prefix}{n}"

        def inlinable(u: UOp) -> bool:
            us = users[u]
            return (u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST, Ops.LOAD)) and len(us) == 1 \
                and depth_of[us[0]] == depth_of[u] and us[0].op is not Ops.DEFINE_ACC \
                and u not in packed_indices and len(pending[u]) <= MAX_INLINE_CHARS

        def emit(u: UOp, expr: str, prefix: str) -> None:
            pending[u] = expr
            if inlinable(u):
                names[u] = expr
            else:
                names[u] = fresh(prefix)
                body.append("  " * depth_of[u] + f"let {names[u]}: {value_type(u.dtype)} = {expr};")

        params = sorted((u for u in program if u.op is Ops.PARAM), key=lambda u: u.arg[0])
        variables = sorted({u.arg[0]: u for u in program if u.op is Ops.DEFINE_VAR}.items())
        var_field = {var_name: f"tg_vars.v{i}" for i, (var_name, _) in enumerate(variables)}

        def render_uop(u: UOp) -> None:
            pad = "  " * depth_of[u]
            op = u.op
            if op is Ops.PARAM:
                names[u] = f"data{u.arg[0]}"
            elif op is Ops.CONST:
                names[u] = self.code_for_op[op](self, u.dtype, u.src, u.arg)
            elif op is Ops.DEFINE_VAR:
                names[u] = var_field[u.arg[0]]
            elif op is Ops.RANGE:
                names[u] = fresh("ridx")
                bound = names[u.src[0]]
                if (d := dim_of.get(u)) is not None:
                    index = f"let {names[u]}: i32 = i32(tg_b{d} * tg_local_{d} + tg_l{d});"
                    # the last block of a dimension may be partial (and a symbolic size launches its largest
                    # value): guard each index against its bound, except in a GROUP reduction (full blocks)
                    body.append(f"{pad}{index} {{" if grouped else f"{pad}{index} if ({names[u]} < {bound}) {{")
                else:
                    body.append(f"{pad}for (var {names[u]}: i32 = 0i; {names[u]} < {bound}; {names[u]}++) {{")
            elif op is Ops.END:
                body.append(pad + "}")
            elif op is Ops.INDEX:
                names[u] = ""  # rendered by its LOAD or STORE
            elif op is Ops.DEFINE_LOCAL:
                # the GROUP scratch holds computed values (value types; no packing: nothing else shares a word)
                names[u] = fresh("temp")
                local_decls.append(f"var<workgroup> {names[u]}: array<{value_type(u.dtype)}, {int(u.arg[1])}>;")
            elif op is Ops.BARRIER:
                body.append(pad + "workgroupBarrier();")
            elif op is Ops.LOAD:
                idx = u.src[0]
                gate = names[idx.src[2]] if len(idx.src) > 2 else None
                buf, i = names[idx.src[0]], names[idx.src[1]]
                if idx.src[0].op is Ops.DEFINE_LOCAL:
                    val = f"{buf}[{i}]"
                    emit(u, val if gate is None else f"select({self.render_const(0, u.dtype)}, {val}, {gate})", "val")
                else:
                    emit(u, self.render_load(buf, i, gate, u.dtype, idx.src[0] in stored), "val")
            elif op is Ops.STORE:
                idx = u.src[0]
                buf, i, value = names[idx.src[0]], names[idx.src[1]], names[u.src[1]]
                line = f"{buf}[{i}] = {value};" if idx.src[0].op is Ops.DEFINE_LOCAL else \
                    self.render_store(buf, i, value, idx.dtype)
                # a third source gates the store (only lane 0 of a GROUP writes the result)
                body.append(pad + (f"if ({names[u.src[2]]}) {{ {line} }}" if len(u.src) > 2 else line))
            elif op is Ops.DEFINE_ACC:
                names[u] = fresh("acc")
                body.append(f"{pad}var {names[u]}: {value_type(u.dtype)} = {names[u.src[0]]};")
            elif op is Ops.ASSIGN:
                body.append(f"{pad}{names[u.src[0]]} = {names[u.src[1]]};")
            elif op in (Ops.CAST, Ops.BITCAST):
                emit(u, self.code_for_op[op](self, u.dtype, u.src, names[u.src[0]]), "cast")
            elif op in GroupOp.ALU:
                srcs = [names[s] for s in u.src]
                if len(u.src) == 2 and u.src[0].dtype.is_float and _cancels(op, u.src[0], u.src[1]):
                    srcs[1] = self.opaque_copy(srcs[1], u.src[1].dtype)
                if op in (Ops.ADD, Ops.SUB) and u.dtype.scalar in (dtypes.float32, dtypes.float16):
                    # a*b+c must round twice, as the reference does: hide the product from the compiler,
                    # which would otherwise fuse it into an fma (naga asks for no NoContraction)
                    srcs = [self.opaque_copy(n, s.dtype) if s.op is Ops.MUL else n for n, s in zip(srcs, u.src)]
                emit(u, self.render_alu(op, u.dtype, srcs, u.src), "alu")
            else:
                raise NotImplementedError(f"{type(self).__name__} cannot render {op}")

        def walk(start: int, stop: int) -> None:
            i = start
            while i < stop:
                u = program[i]
                if i not in unrolled:
                    render_uop(u)
                    i += 1
                    continue
                # an unrolled loop: `unroll` guarded copies of the body per iteration, in order, so that the
                # accumulation order (and so the result) is that of the plain loop
                end, pad, bound = unrolled[i], "  " * depth_of[u], names[u.src[0]]
                # a constant trip count that the factor divides needs no guards
                whole = u.src[0].op is Ops.CONST and int(u.src[0].arg) % unroll == 0
                loop = fresh("ridx")
                body.append(f"{pad}for (var {loop}: i32 = 0i; {loop} < {bound}; {loop} += {unroll}i) {{")
                for copy in range(unroll):
                    names[u] = fresh("ridx")
                    at = f"{loop} + {copy}i" if copy else loop
                    guard = f"if ({at} < {bound}) " if copy and not whole else ""  # the loop condition covers copy 0
                    body.append(f"{pad}  {guard}{{ let {names[u]}: i32 = {at};")
                    walk(i + 1, end)
                    body.append(f"{pad}  }}")
                body.append(pad + "}")
                i = end + 1

        walk(0, len(program))

        decls = [self.render_param(i, names[p], p.dtype, p in stored) for i, p in enumerate(params)]
        if variables:
            fields = ", ".join(f"v{i}: i32" for i in range(len(variables)))
            decls.append(f"struct TgVars {{ {fields} }}")
            decls.append(f"@group(0) @binding({len(params)}) var<uniform> tg_vars: TgVars;")
        decls += local_decls
        uses_f16 = any(u.dtype.scalar == dtypes.float16 for u in program)
        head = ("enable f16;\n" if uses_f16 else "") + "\n".join(decls) + "\n" + helper_source(self._helpers)
        # 0 at run time (a launch has far fewer than 2^31 workgroups), unknown to the shader compiler
        opaque = "  let tg_opaque: u32 = tg_nwg.x >> 31u;\n"
        if not work_ranges:
            entry = f"@compute @workgroup_size(1)\nfn {name}(@builtin(num_workgroups) tg_nwg: vec3<u32>) {{\n"
            return head + entry + opaque + "\n".join(body) + "\n}\n"
        return head + self._work_item_entry(name, work_ranges) + opaque + self._work_item_ids(work_ranges) + \
            "\n".join(body) + "\n}\n"

    @staticmethod
    def _work_item_entry(name: str, work_ranges: list[UOp]) -> str:
        overrides = "".join(f"override tg_local_{d}: u32 = 1u;\n" for d in range(len(work_ranges)))
        return (f"{overrides}override tg_workgroup_size: u32 = 1u;\n"
                f"@compute @workgroup_size(tg_workgroup_size)\nfn {name}(@builtin(workgroup_id) tg_wid: vec3<u32>, "
                f"@builtin(local_invocation_index) tg_lid: u32, @builtin(num_workgroups) tg_nwg: vec3<u32>) {{\n")

    @staticmethod
    def _work_item_ids(work_ranges: list[UOp]) -> str:
        """The block (tg_b<d>) and local (tg_l<d>) coordinate of this invocation in every launch dimension,
        dimension 0 varying fastest in both, from the linear workgroup id and the local invocation index."""
        dims = range(len(work_ranges))
        lines = ["  let tg_group: u32 = tg_wid.x + tg_nwg.x * (tg_wid.y + tg_nwg.y * tg_wid.z);"]
        lines += [f"  let tg_nb{d}: u32 = ({int(r.src[0].vmax)}u + tg_local_{d} - 1u) / tg_local_{d};"
                  for d, r in enumerate(work_ranges)]
        # the grid is rounded up to whole rows and planes of workgroups: the spare ones have nothing to do (the
        # condition is the same for the whole workgroup, so a GROUP barrier after it stays in uniform control flow)
        lines.append(f"  if (tg_group >= {' * '.join(f'tg_nb{d}' for d in dims)}) {{ return; }}")
        for d in dims:
            blocks_before = " * ".join(f"tg_nb{e}" for e in range(d))
            locals_before = " * ".join(f"tg_local_{e}" for e in range(d))
            block = f"(tg_group / ({blocks_before}))" if d else "tg_group"
            local = f"(tg_lid / ({locals_before}))" if d else "tg_lid"
            last = d == len(work_ranges) - 1  # below the product of all sizes: no modulo needed
            lines.append(f"  let tg_b{d}: u32 = {block if last else f'{block} % tg_nb{d}'};")
            lines.append(f"  let tg_l{d}: u32 = {local if last else f'{local} % tg_local_{d}'};")
        return "\n".join(lines) + "\n"
