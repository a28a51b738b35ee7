"""WGSL from the linearized program: one compute entry point per kernel. The walk is the C-style base's
(`tinygrad.renderer.cstyle`); this module fills in WGSL's entries of the op table and its hooks: `let`/`var`
declarations, storage buffers bound with @group/@binding, loops, the work-item entry point and helpers.

Types. WGSL computes in bool, i32, u32, f32 and (with the `shader-f16` feature) f16, with no 64-bit and no
8/16-bit integer types. So int8/int16 values live sign-extended in i32 and uint8/uint16 in u32, wrapped back
after every op; bfloat16 values live in f32 and are rounded back after every op. Storage has 32-bit words
only (f16 aside): buffers of bool, int8, uint8, int16, uint16 and bfloat16 hold their elements packed,
loads extract them, and stores change only their own bits with atomicAnd/atomicOr, so that work-items
writing neighbouring elements of one word do not race. int64/uint64 need wgpu-native's `shader-int64`.

Work-items. The output loops of a kernel with one loop nest (and the lane of a GROUP reduction) run as
work-items: the SPECIALs of `tinygrad.codegen.work_items`, launch dimension 0 first. A launch is a flat list of
workgroups, each a flat block of invocations: the kernel takes its workgroup's linear id apart into one block
coordinate per dimension and its `local_invocation_index` into one local coordinate per dimension, and a
range's index is block * local size + local. The local sizes are pipeline-overridable constants
(`tg_local_<d>`, and `tg_workgroup_size` their product): the runtime sets them from the ProgramSpec's local
size (LOCAL/GROUP opts) or picks them itself, so one shader serves any workgroup shape, and a launch of any
size fits in up to three dimensions of at most 65535 workgroups. Where the runtime picks the shape, the last
block of a dimension may be partial (`launch_rounds_up`): the work-item mapping guards each index against its
loop's bound. A GROUP reduction combines its lanes' partials in a `var<workgroup>` array after a
`workgroupBarrier()`; its workgroups are always full (the GROUP opt requires it), so it has no per-index guards:
a barrier must be reached in uniform control flow.

Loop cap. lavapipe stops an invocation after 65535 loop iterations, all loops together. A kernel that would
run more has its innermost loops unrolled in the source (2 to 32 copies of the body per iteration, in order,
so the accumulation and its result are the plain loop's; each copy past the first is guarded unless the factor
divides a constant trip count); one that still needs more raises LoopLimitError.
Symbolic sizes (DEFINE_VAR) come in a uniform buffer bound after the data buffers.

State. What the hooks need to know about the whole kernel (bindings, the buffers it writes, its launch, its
unrolled loops) is its plan (`WGSLRenderer.plan`, a `WGSLPlan`), made before the walk and read from the kernel
being rendered; the helpers a shader gets are the ones its text calls. The renderer keeps no per-kernel state, so
threads may share one.
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass

from tinygrad.codegen.work_items import global_size
from tinygrad.dtype import DType, dtypes
from tinygrad.renderer.cstyle import C_RENDER_RULES, CKernel, CStyleRenderer, OpFn, cast_entry, line, work_item_id
from tinygrad.uop.ops import GroupOp, Ops, UOp

from tg_backend_webgpu.wgsl_lib import HELPERS, helper_source

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

#: the most loop iterations one call of the exact float fmod helper runs (277 exponent steps of 8 bits)
FMOD_MAX_ITERATIONS = 35
#: dtypes whose buffers hold several elements per 32-bit word
PACKED = frozenset({dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.bfloat16})
SIGNED_SMALL = frozenset({dtypes.int8, dtypes.int16})
UNSIGNED_SMALL = frozenset({dtypes.uint8, dtypes.uint16})

VALUE_TYPES: dict[DType, str] = {
    dtypes.bool: "bool", dtypes.int8: "i32", dtypes.int16: "i32", dtypes.int32: "i32", dtypes.uint8: "u32",
    dtypes.uint16: "u32", dtypes.uint32: "u32", dtypes.float16: "f16", dtypes.bfloat16: "f32", dtypes.float32: "f32",
    dtypes.int64: "i64", dtypes.uint64: "u64",
}
#: dtypes that need a device feature (wgpu-native's `shader-int64` is not part of WebGPU; browsers lack it)
FEATURE_DTYPES = {dtypes.float16: "shader-f16", dtypes.int64: "shader-int64", dtypes.uint64: "shader-int64"}
#: float ops whose result the shader compiler may fold for equal operands without changing it (x+x, x*x, max)
SAFE_SAME = frozenset({Ops.ADD, Ops.MUL, Ops.MAX})


class LoopLimitError(RuntimeError):
    pass


def _cancels(op: Ops, a: UOp, b: UOp) -> bool:
    """Whether the shader compiler would fold `a op b` as if a and b were finite: x-x, x/x, x!=x, x+(-x)."""
    if a is b:
        return op not in SAFE_SAME
    return op is Ops.ADD and ((b.op is Ops.NEG and b.src[0] is a) or (a.op is Ops.NEG and a.src[0] is b))


def _mask(d: DType) -> str:
    return f"0x{(1 << d.bits) - 1:x}u"


#: bool values compute in bool, so its arithmetic is logic
_BOOL_SYMS = {Ops.ADD: "|", Ops.SUB: "!=", Ops.MUL: "&", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "!="}


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
        return f"{r.math_fns[op]}({a})"  # WGSL's builtins are overloaded by argument type: no f suffix
    return fn


def _neg(r: WGSLRenderer, d: DType, src: tuple[UOp, ...], a: str) -> str:
    if d.scalar == dtypes.bool:
        return f"(!{a})"
    return f"({r.render_const(0, d)} - {a})" if r.value_type(d)[0] == "u" else f"(-{a})"


def _max(r: WGSLRenderer, d: DType, src: tuple[UOp, ...], a: str, b: str) -> str:
    d = d.scalar
    if d == dtypes.bool:
        return f"({a} | {b})"
    if d.is_float:
        return f"{r.helper('tg_max_f16' if d == dtypes.float16 else 'tg_max_f32')}({a}, {b})"
    t = r.value_type(d)
    return f"{r.helper('tg_max_' + t)}({a}, {b})" if t in ("i64", "u64") else f"max({a}, {b})"


def _divmod(op: Ops) -> OpFn:
    def fn(r: WGSLRenderer, _: DType, src: tuple[UOp, ...], a: str, b: str) -> str:
        d, divisor = src[0].dtype.scalar, src[1]
        if d.is_float and op is Ops.IDIV:  # truncate the quotient as rounded to the dtype
            quotient = f"({a} / {b})"
            return f"trunc({r.helper('tg_round_bf16')}{quotient})" if d == dtypes.bfloat16 else f"trunc({quotient})"
        if d.is_float:  # fmod of the exact values; its result is representable in the operands' dtype
            fmod = r.helper("tg_fmod_f32")
            return f"f16({fmod}(f32({a}), f32({b})))" if d == dtypes.float16 else f"{fmod}({a}, {b})"
        if divisor.op is Ops.CONST and int(divisor.arg) > 0:
            return f"({a} {'/' if op is Ops.IDIV else '%'} {b})"
        return f"{r.helper(('tg_idiv_' if op is Ops.IDIV else 'tg_mod_') + r.value_type(d))}({a}, {b})"
    return fn


def _shift(op: Ops) -> OpFn:
    def fn(r: WGSLRenderer, _: DType, src: tuple[UOp, ...], a: str, b: str) -> str:
        d = src[0].dtype
        if op is Ops.SHL:  # the helper needs the dtype's width: small ints live in 32 bits
            return f"{r.helper('tg_shl_' + r.value_type(d))}({a}, {b}, {d.bits}u)"
        return f"{r.helper('tg_shr_' + r.value_type(d))}({a}, {b})"
    return fn


#: the C table with WGSL's entries where the text differs (LOAD goes through render_load/render_local_load)
WGSL_CODE_FOR_OP: dict[Ops, OpFn] = {
    **CStyleRenderer.code_for_op,
    Ops.CONST: lambda r, d, src, value: r.render_kernel_const(value, d),
    **{op: _compare(op, sym) for op, sym in ((Ops.CMPLT, "<"), (Ops.CMPNE, "!="), (Ops.CMPEQ, "=="))},
    Ops.WHERE: lambda r, d, src, c, a, b: f"select({b}, {a}, {c})",
    **{op: _math(op) for op in (Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC)},
    Ops.NEG: _neg,
    Ops.MAX: _max, Ops.IDIV: _divmod(Ops.IDIV), Ops.MOD: _divmod(Ops.MOD), Ops.SHL: _shift(Ops.SHL),
    Ops.SHR: _shift(Ops.SHR),
    Ops.RECIPROCAL: lambda r, d, src, a: f"({r.render_const(1.0, d)} / {a})",
    **{op: _infix(op, sym) for op, sym in ((Ops.ADD, "+"), (Ops.SUB, "-"), (Ops.MUL, "*"), (Ops.FDIV, "/"),
                                            (Ops.AND, "&"), (Ops.OR, "|"), (Ops.XOR, "^"))},
}


#: an identifier that may name a helper of `wgsl_lib.HELPERS`
_HELPER_NAME = re.compile(r"\btg_\w+")


@dataclass(frozen=True)
class WGSLPlan:
    """What the hooks need to know about the whole kernel being rendered: its plan (`WGSLRenderer.plan`), which
    they read from the kernel's record (`CKernel.plan`)."""

    #: buffer slot -> binding: buffers are bound in slot order, the uniform of symbolic variables after them
    bindings: dict[int, int]
    #: symbolic variable -> its field in the uniform (by name, as ProgramSpec.var_names orders the values)
    variables: dict[str, int]
    #: the buffers the kernel stores to: packed ones are atomic words, so their loads are atomic too
    written: frozenset[str]
    #: the launch's global size per dimension (the sizes of the kernel's SPECIALs); () for one invocation
    launch: tuple[int, ...]
    #: the innermost loops written `unroll` copies of the body per iteration (see the END entry, `_end`)
    unrolled: frozenset[UOp]
    unroll: int


def _plan(k: CKernel) -> WGSLPlan:
    if not isinstance(k.plan, WGSLPlan):
        raise TypeError(f"kernel {k.name} was not planned by a WGSLRenderer (its plan is {type(k.plan).__name__})")
    return k.plan


def _loop(r: WGSLRenderer, k: CKernel, u: UOp) -> None:
    k.names[u] = name = k.fresh("ridx")
    k.open_loop(u, f"for (var {name}: i32 = 0i; {name} < {k.names[u.src[0]]}; {name}++) {{")


def _end(r: WGSLRenderer, k: CKernel, u: UOp) -> None:
    """An unrolled loop (see `WGSLRenderer.unroll_factor`) runs `unroll` copies of the body per iteration, in order,
    so that the accumulation order (and so the result) is that of the plain loop. Each copy is a block that binds the
    loop's index name, so the body's text serves every copy; copies past the first are guarded against the bound,
    unless the factor divides a constant trip count."""
    rng, plan = u.src[0], _plan(k)
    if rng not in plan.unrolled:
        C_RENDER_RULES[Ops.END](r, k, u)
        return
    lines, pad, name, bound = k.loop_lines(), k.pad(u), k.names[rng], k.names[rng.src[0]]
    unroll = plan.unroll
    whole = rng.src[0].op is Ops.CONST and int(rng.src[0].arg) % unroll == 0
    first = f"{name}_first"  # the index of the iteration's first copy
    out = [f"{pad}for (var {first}: i32 = 0i; {first} < {bound}; {first} += {unroll}i) {{"]
    for copy in range(unroll):
        at = f"{first} + {copy}i" if copy else first
        guard = f"if ({at} < {bound}) " if copy and not whole else ""  # the loop condition covers copy 0
        out += [f"{pad}  {guard}{{ let {name}: i32 = {at};", *lines[1:], f"{pad}  }}"]
    k.body.extend([*out, pad + "}"])


def _workgroup_array(r: WGSLRenderer, k: CKernel, u: UOp) -> None:
    """The GROUP scratch: computed values (value types, no packing: no other work-item shares a word)."""
    k.names[u] = name = k.fresh("temp")
    k.local_decls.append(f"var<workgroup> {name}: array<{r.value_type(u.dtype)}, {int(u.arg.size)}>;")


def _work_item_id(r: WGSLRenderer, name: str, dim: int, dtype: DType) -> str:
    # the coordinates `_work_item_ids` takes apart from the linear ids
    return f"let {name}: i32 = i32(tg_b{dim} * tg_local_{dim} + tg_l{dim});"


#: WGSL's entries of the walk (see the module docstring): its loops (unrolled under a loop cap), work-item ids,
#: workgroup scratch and barrier
WGSL_RENDER_RULES = {**C_RENDER_RULES, Ops.RANGE: _loop, Ops.END: _end, Ops.SPECIAL: work_item_id(_work_item_id),
                     Ops.DEFINE_LOCAL: _workgroup_array, Ops.BARRIER: line("workgroupBarrier();")}


def _cast(r: WGSLRenderer, x: str, frm: DType, to: DType) -> str:
    frm, to = frm.scalar, to.scalar
    if to == dtypes.bool:
        # !(x == 0) rather than x != 0: the float != is an ordered comparison here, and NaN is true
        return f"(!({x} == {r.render_const(0, frm)}))"
    if frm == dtypes.bool:
        expr = f"{r.value_type(to)}({x})"
        return expr
    if to.is_float:
        if to == dtypes.bfloat16:
            return f"{r.helper('tg_round_bf16')}(f32({x}))"
        return f"{r.value_type(to)}({x})"
    tf, tt = r.value_type(frm), r.value_type(to)
    if tt in ("i64", "u64"):
        if frm.is_float:
            if tt == "u64":  # as with u32: negatives wrap through i64, values past i64's range convert directly
                return f"{r.helper('tg_f32_to_u64')}(f32({x}))"
            return f"i64({x})"
        # from a 32-bit value: widen with the source's signedness, then reinterpret
        wide = {"i32": "i64", "u32": "u64"}.get(tf, tf)
        expr = f"{wide}({x})" if wide != tf else x
        return expr if wide == tt else f"bitcast<{tt}>({expr})"
    if tf in ("i64", "u64"):  # narrowing keeps the low 32 bits (then wraps small ints)
        low = f"u32({x} & {r.render_const(0xffffffff, frm)})"
        return r.wrap(low if tt == "u32" else f"bitcast<i32>({low})", to)
    if tt == "i32":
        if frm.is_float:
            expr = f"i32({x})"
        elif tf == "u32":
            expr = f"bitcast<i32>({x})"
        else:
            expr = x
        return r.wrap(expr, to)
    # to an unsigned dtype
    if frm.is_float:
        expr = f"{r.helper('tg_f32_to_u32')}(f32({x}))" if to == dtypes.uint32 else f"bitcast<u32>(i32({x}))"
    elif tf == "i32":
        expr = f"bitcast<u32>({x})"
    else:
        expr = x
    return r.wrap(expr, to)

def _bits16(r: WGSLRenderer, x: str, d: DType) -> str:
    if d == dtypes.float16:
        return f"pack2x16float(vec2f(f32({x}), 0.0f))"
    if d == dtypes.bfloat16:
        return f"{r.helper('tg_f32_to_bf16')}({x})"
    return f"(bitcast<u32>({x}) & 0xffffu)"

def _from_bits16(r: WGSLRenderer, bits: str, d: DType) -> str:
    if d == dtypes.float16:
        return f"f16(unpack2x16float({bits}).x)"
    if d == dtypes.bfloat16:
        return f"bitcast<f32>({bits} << 16u)"
    if d == dtypes.int16:
        return f"(bitcast<i32>({bits} << 16u) >> 16u)"
    return bits

def _bitcast(r: WGSLRenderer, x: str, frm: DType, to: DType) -> str:
    frm, to = frm.scalar, to.scalar
    if frm.itemsize in (4, 8):
        return f"bitcast<{r.value_type(to)}>({x})"
    if frm.itemsize == 2:
        return _from_bits16(r, _bits16(r, x, frm), to)
    # int8 <-> uint8: reinterpret the low byte
    return r.wrap(f"bitcast<{r.value_type(to)}>({x})", to)


class WGSLRenderer(CStyleRenderer):
    device = "WEBGPU"
    has_local = True
    # not the 8-bit floats (fp8e4m3, fp8e5m2): they are refused with the device's dtype error rather than emulated
    supported_dtypes = frozenset(VALUE_TYPES)
    type_names = VALUE_TYPES
    #: index arithmetic stays i32: WGSL has no wider integer that arrays can be indexed with
    address_var_type = None
    #: a flat launch in workgroups of 64: faster than groups of 256 on lavapipe (the measurement is in the CHANGELOG)
    flat_work_group = 64
    #: a kernel that leaves the work-group shape to the runtime gets `default_local_size`'s, in whole workgroups
    launch_rounds_up = True
    #: WGSL indexes arrays with i32/u32 and its loops count in i32 (64-bit integers are an optional native feature
    #: that arrays cannot be indexed with): a kernel whose index arithmetic leaves int32's range is refused with an
    #: IndexRangeError naming the value and the limit, instead of wrapping
    index_wide_dtype = None
    #: the WGSL text of each value op (see WGSL_CODE_FOR_OP)
    code_for_op: dict[Ops, OpFn] = {**WGSL_CODE_FOR_OP, Ops.CAST: cast_entry(_cast), Ops.BITCAST: cast_entry(_bitcast)}
    render_rules = WGSL_RENDER_RULES

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

    def supports_dtype(self, dtype: DType) -> bool:
        need = FEATURE_DTYPES.get(dtype.scalar)
        return super().supports_dtype(dtype) and (need is None or need in self.features)

    @staticmethod
    def helper(name: str) -> str:
        """The name of the library function `name` (`wgsl_lib.HELPERS`) for an expression to call. A shader gets the
        source of each helper its text calls (`render_source` looks for them), so nothing is recorded here."""
        if name not in HELPERS:
            raise KeyError(f"{name} is not a WGSL helper (wgsl_lib.HELPERS has {sorted(HELPERS)})")
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
                if body.startswith("-"):  # `a - -8.0f` must not print as `a--8.0f` (WGSL's decrement)
                    body = f"({body})"
            return f"f16({body})" if d == dtypes.float16 else body
        iv = int(value)
        if self.value_type(d) == "u32":
            return f"{iv & 0xffffffff}u"
        if self.value_type(d) == "u64":
            return f"{iv & 0xffffffffffffffff}lu"
        if self.value_type(d) == "i64":
            return f"({iv + 1}li - 1li)" if iv == -(2**63) else f"{iv}li" if iv >= 0 else f"({iv}li)"
        return f"i32({iv})" if iv == -(2**31) else f"{iv}i" if iv >= 0 else f"({iv}i)"  # 2147483648i does not parse

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

    # ---- memory ----
    def render_param(self, k: CKernel, index: int, d: DType, is_output: bool) -> str:
        # a packed buffer the kernel writes is atomic words (see render_store)
        if d.scalar in PACKED:
            elem = "atomic<u32>" if is_output else "u32"
        else:
            elem = self.value_type(d)
        binding = _plan(k).bindings[index]
        return f"@group(0) @binding({binding}) var<storage, read_write> data{index}: array<{elem}>;"

    def render_var_param(self, k: CKernel, name: str, d: DType) -> str:
        # a field of the uniform struct TgVars (render_source); the runtime writes the values as int32
        return f"v{_plan(k).variables[name]}: i32"

    def render_var_ref(self, k: CKernel, name: str) -> str:
        return f"tg_vars.v{_plan(k).variables[name]}"

    def render_load(self, k: CKernel, buf: str, idx: str, gate: str | None, d: DType) -> str:
        d = d.scalar
        if d not in PACKED:
            val = f"{buf}[{idx}]"
        else:
            per_word = 4 // d.itemsize
            word_idx = f"{buf}[{idx} >> {per_word.bit_length() - 1}u]"
            word = f"atomicLoad(&{word_idx})" if buf in _plan(k).written else word_idx
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

    def render_local_load(self, k: CKernel, buf: str, idx: str, gate: str | None, d: DType) -> str:
        val = f"{buf}[{idx}]"
        return val if gate is None else f"select({self.render_const(0, d)}, {val}, {gate})"

    def render_local_store(self, buf: str, idx: str, value: str, d: DType) -> str:
        return f"{buf}[{idx}] = {value};"

    def repeats_operands(self, u: UOp) -> bool:
        """A packed element's index is used twice (its word and its place in the word): it gets a `let`. MAX,
        the shifts, IDIV and MOD, which C writes with repeated operands, are helper calls here."""
        return u.op is Ops.INDEX and u.src[0].op is Ops.PARAM and u.src[0].dtype.scalar in PACKED

    def render_declaration(self, name: str, type_name: str, expr: str, mutable: bool = False) -> str:
        return f"{'var' if mutable else 'let'} {name}: {type_name} = {expr};"

    # ---- ALU ----
    def render_alu(self, op: Ops, d: DType, srcs: list[str], src_uops: tuple[UOp, ...]) -> str:
        """Look the op up in `code_for_op`, then bring the result back into its dtype: bfloat16 computes in f32,
        small ints in 32 bits. Float operands the shader compiler would fold wrongly are hidden from it first."""
        d = d.scalar
        if len(src_uops) == 2 and src_uops[0].dtype.is_float and _cancels(op, *src_uops):
            srcs = [srcs[0], self.opaque_copy(srcs[1], src_uops[1].dtype)]
        if op in (Ops.ADD, Ops.SUB) and d in (dtypes.float32, dtypes.float16):
            # a*b+c must round twice, as the reference does: hide the product from the compiler, which would
            # otherwise fuse it into an fma (naga asks for no NoContraction)
            srcs = [self.opaque_copy(n, s.dtype) if s.op is Ops.MUL else n for n, s in zip(srcs, src_uops)]
        expr = self.code_for_op[op](self, d, src_uops, *srcs)
        if op in GroupOp.Comparison or op is Ops.WHERE or d == dtypes.bool:
            return expr
        if d.is_float:
            return f"{self.helper('tg_round_bf16')}({expr})" if d == dtypes.bfloat16 and op is not Ops.TRUNC else expr
        return self.wrap(expr, d)

    # ---- work-items and loops ----
    # the work-items are `tinygrad.codegen.work_items`'s SPECIALs: the GROUP lane, then the output loops innermost
    # first, as many as `local_max` has dimensions (MAX_WORK_ITEM_DIMS); a kernel with several loop nests runs as
    # one invocation

    @staticmethod
    def innermost_loops(program: list[UOp]) -> set[int]:
        """Positions of the RANGEs of the loops with no loop inside them: the ones that unrolling shortens."""
        innermost: set[int] = set()
        opened: list[int] = []
        outer: set[int] = set()
        for i, u in enumerate(program):
            if u.op is Ops.RANGE:
                if opened:
                    outer.add(opened[-1])
                opened.append(i)
            elif u.op is Ops.END:
                start = opened.pop()
                if start not in outer:
                    innermost.add(start)
        return innermost

    def loop_iterations(self, program: list[UOp], unroll: int = 1) -> int:
        """The most loop iterations one invocation runs (each loop's trip count times the number of times its
        body is entered), with the innermost loops unrolled `unroll` times."""
        innermost = self.innermost_loops(program) if unroll > 1 else set()
        total, runs = 0, [1]  # runs: how often the enclosing loop body runs
        for i, u in enumerate(program):
            if u.op is Ops.RANGE:
                trips = max(int(u.src[0].vmax), 0)
                total += runs[-1] * (-(-trips // unroll) if i in innermost else trips)
                runs.append(runs[-1] * trips)
            elif u.op is Ops.END:
                runs.pop()
            elif u.op is Ops.MOD and u.dtype.is_float:  # tg_fmod_f32 loops too, once per element
                total += runs[-1] * FMOD_MAX_ITERATIONS
        return total

    def unroll_factor(self, program: list[UOp]) -> int | None:
        """1 where the kernel stays under the device's loop cap, else the smallest unroll factor that brings it
        under; None where none does (`render` refuses the kernel)."""
        limit = self.max_loop_iterations
        if limit is None or self.loop_iterations(program) <= limit:
            return 1
        return next((factor for factor in UNROLL_FACTORS if self.loop_iterations(program, factor) <= limit), None)

    def loop_limit_error(self, name: str, program: list[UOp]) -> LoopLimitError:
        """The error for kernel `name`, which no unroll factor brings under the device's loop cap."""
        iterations, most = self.loop_iterations(program), UNROLL_FACTORS[-1]
        return LoopLimitError(
            f"kernel {name} runs {iterations} loop iterations per invocation "
            f"({self.loop_iterations(program, most)} with its innermost loops unrolled {most} times), but this "
            f"device ({self.max_loop_iterations_reason}) stops every invocation after {self.max_loop_iterations}: its "
            f"results would be wrong. Reduce in steps (for example sum over one axis of a reshape at a time), or use "
            f"another device")

    # ---- the kernel: the base's walk, with this kernel's plan for the hooks ----
    def render(self, name: str, program: list[UOp]) -> str:
        """The base's walk, after refusing (with the kernel's name) what this device cannot run."""
        # a GROUP reduction's barrier must be reached in uniform control flow: no guard that depends on the
        # invocation may enclose it (the work-item mapping guards a launch past its bounds: a symbolic one)
        if any(u.op is Ops.BARRIER for u in program) and any(u.op is Ops.IF for u in program):
            raise NotImplementedError(f"kernel {name}: a GROUP reduction over a symbolic launch size")
        if self.unroll_factor(program) is None:
            raise self.loop_limit_error(name, program)
        return super().render(name, program)

    def plan(self, program: list[UOp]) -> WGSLPlan:
        unroll = self.unroll_factor(program) or 1  # None is refused by `render` before the walk plans
        unrolled = self.innermost_loops(program) if unroll > 1 else set()
        slots = sorted(u.arg.slot for u in program if u.op is Ops.PARAM)
        variables = sorted({u.arg.name for u in program if u.op is Ops.DEFINE_VAR})
        written = {f"data{u.src[0].src[0].arg.slot}" for u in program
                   if u.op is Ops.STORE and u.src[0].src[0].op is Ops.PARAM}
        return WGSLPlan({slot: i for i, slot in enumerate(slots)}, {v: i for i, v in enumerate(variables)},
                        frozenset(written), global_size(program), frozenset(program[i] for i in unrolled), unroll)

    def render_source(self, k: CKernel, params: list[str], var_params: list[str]) -> str:
        name, program, body = k.name, k.program, k.body
        decls = list(params)
        if var_params:
            decls.append(f"struct TgVars {{ {', '.join(var_params)} }}")
            decls.append(f"@group(0) @binding({len(params)}) var<uniform> tg_vars: TgVars;")
        decls += k.local_decls  # workgroup variables live at module scope
        uses_f16 = any(u.dtype.scalar == dtypes.float16 for u in program)
        called = {name for name in _HELPER_NAME.findall("\n".join(body)) if name in HELPERS}
        head = ("enable f16;\n" if uses_f16 else "") + "\n".join(decls) + "\n" + helper_source(called)
        # 0 at run time (a launch has far fewer than 2^31 workgroups), unknown to the shader compiler
        opaque = "  let tg_opaque: u32 = tg_nwg.x >> 31u;\n"
        launch = _plan(k).launch
        if not launch:
            entry = f"@compute @workgroup_size(1)\nfn {name}(@builtin(num_workgroups) tg_nwg: vec3<u32>) {{\n"
            return head + entry + opaque + "\n".join(body) + "\n}\n"
        return head + self._work_item_entry(name, launch) + opaque + self._work_item_ids(launch) + \
            "\n".join(body) + "\n}\n"

    @staticmethod
    def _work_item_entry(name: str, launch: tuple[int, ...]) -> str:
        overrides = "".join(f"override tg_local_{d}: u32 = 1u;\n" for d in range(len(launch)))
        return (f"{overrides}override tg_workgroup_size: u32 = 1u;\n"
                f"@compute @workgroup_size(tg_workgroup_size)\nfn {name}(@builtin(workgroup_id) tg_wid: vec3<u32>, "
                f"@builtin(local_invocation_index) tg_lid: u32, @builtin(num_workgroups) tg_nwg: vec3<u32>) {{\n")

    @staticmethod
    def _work_item_ids(launch: tuple[int, ...]) -> str:
        """The block (tg_b<d>) and local (tg_l<d>) coordinate of this invocation in every launch dimension,
        dimension 0 varying fastest in both, from the linear workgroup id and the local invocation index."""
        dims = range(len(launch))
        lines = ["  let tg_group: u32 = tg_wid.x + tg_nwg.x * (tg_wid.y + tg_nwg.y * tg_wid.z);"]
        lines += [f"  let tg_nb{d}: u32 = ({size}u + tg_local_{d} - 1u) / tg_local_{d};"
                  for d, size in enumerate(launch)]
        # the grid is rounded up to whole rows and planes of workgroups: the spare ones have nothing to do (the
        # condition is the same for the whole workgroup, so a GROUP barrier after it stays in uniform control flow)
        lines.append(f"  if (tg_group >= {' * '.join(f'tg_nb{d}' for d in dims)}) {{ return; }}")
        for d in dims:
            blocks_before = " * ".join(f"tg_nb{e}" for e in range(d))
            locals_before = " * ".join(f"tg_local_{e}" for e in range(d))
            block = f"(tg_group / ({blocks_before}))" if d else "tg_group"
            local = f"(tg_lid / ({locals_before}))" if d else "tg_lid"
            last = d == len(launch) - 1  # below the product of all sizes: no modulo needed
            lines.append(f"  let tg_b{d}: u32 = {block if last else f'{block} % tg_nb{d}'};")
            lines.append(f"  let tg_l{d}: u32 = {local if last else f'{local} % tg_local_{d}'};")
        return "\n".join(lines) + "\n"
