"""The C-style base renderer. A C-like target (C, OpenCL C, CUDA, Metal, WGSL, ...) subclasses it and fills in
its tables - type names (`type_names`), the text of each value op (`code_for_op`, from op to a small function of
the rendered operands), the rendering of every other op (`render_rules`: loops, work-item ids, loads, stores,
scratch arrays, barriers, tensor cores; from op to a function of the renderer, the kernel being rendered and the
UOp) - and the formats that differ (kernel prefix, parameters, types, vector accesses). The walk over the program
is shared and one pass: each UOp is looked up in the tables; what a target decides about the whole kernel first
(the CPU: which loops its threads slice; WGSL: buffer bindings; QCOM: which buffers are images) it marks in
`plan`, which the walk hands to the entries and to the hooks that take the kernel in `CKernel.plan`. A renderer
keeps no state of its own while it renders, so one renderer may render kernels on several threads at once.
So "how is a WHERE written for OpenCL" is `OpenCLRenderer.code_for_op[Ops.WHERE]`, "how does a CUDA kernel read
its work-item id" is `CUDARenderer.render_rules[Ops.SPECIAL]`.

Semantics that C leaves undefined are pinned down here to match `tinygrad.uop.alu` (integer division
by zero and shifts past the width give 0; signed overflow wraps, so compile with -fwrapv or the
target's equivalent). bfloat16 and the OCP 8-bit floats (fp8e4m3, fp8e5m2) are emulated: stored as their
16- and 8-bit patterns, computed in float and rounded back after every op by helper functions that a kernel
gets only when it uses the dtype (`tinygrad.renderer.c_helpers`). float16 (`_Float16`) is rounded back after
every op too: compilers evaluate it in float and may keep that excess precision across an inlined expression,
and libm's f-functions return float.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from tinygrad.dtype import EMULATED_FLOATS, FP8_FORMATS, DType, dtypes, is_emulated_float
from tinygrad.renderer import Renderer, loop_depths_and_users
from tinygrad.renderer.c_helpers import BF16_PRELUDE, F64_TO_F32_ODD, FLOAT_BITS_PRELUDE, fp8_prelude
from tinygrad.renderer.tensor_core import TensorCore
from tinygrad.renderer.vectorize import VectorAccess, find_vector_accesses
from tinygrad.uop.ops import GroupOp, Ops, UOp, post_order

#: longer expressions get a variable, so that a long elementwise chain does not become one enormous line
MAX_INLINE_CHARS = 1000


#: an entry of `CStyleRenderer.code_for_op`: (renderer, result dtype, source UOps, *rendered operands) -> C text.
#: The operands are the sources' names (a CONST's: its value).
OpFn = Callable[..., str]


def _infix(sym: str) -> OpFn:
    return lambda r, d, src, a, b: f"({a}{sym}{b})"


def _math(op: Ops) -> OpFn:
    return lambda r, d, src, a: f"{r.math_fn(op, d)}({a})"


def _max(r: CStyleRenderer, d: DType, src: tuple[UOp, ...], a: str, b: str) -> str:
    # NaN wins; on a tie +0.0 beats -0.0 whatever the order (the reference's IEEE maximum)
    if d.is_float:
        # `|` and `&`, not `||` and `&&`: no short-circuit, so the compiler selects instead of branching
        return f"(((({a})>({b}))|(({a})!=({a}))|((({a})==({b}))&!signbit({a})))?({a}):({b}))"
    return f"((({a})>({b}))?({a}):({b}))"


def _float_divmod(r: CStyleRenderer, op: Ops, a: str, b: str, d: DType) -> str:
    if op is Ops.MOD:
        return f"{r.math_fn(Ops.MOD, d)}({a},{b})"
    # truncate the quotient as rounded to the dtype, not the wider float the division ran in
    quotient = f"({a}/{b})"
    if is_emulated_float(d):
        quotient = f"{r.rounder(d)}{quotient}"
    elif d.scalar == dtypes.float16:
        quotient = f"(({r.value_type(d)}){quotient})"
    return f"{r.math_fn(Ops.TRUNC, d)}({quotient})"


def _divmod(op: Ops) -> OpFn:
    """a/b (IDIV: truncated) or a%b (MOD: the sign of a) of the operands' dtype, with x/0 = x%0 = 0."""
    def fn(r: CStyleRenderer, _: DType, src: tuple[UOp, ...], a: str, b: str) -> str:
        d, divisor, sym = src[0].dtype, src[1], "/" if op is Ops.IDIV else "%"
        if d.is_float:
            return _float_divmod(r, op, a, b, d)
        if divisor.op is Ops.CONST and int(divisor.arg) > 0:
            return f"({a}{sym}{b})"
        zero = r.render_const(0, d)
        if d.is_unsigned:
            return f"(({b})==0?{zero}:({a}){sym}({b}))"
        # x/0 is 0, and MIN/-1 would trap on x86: -x wraps to MIN under -fwrapv
        if op is Ops.IDIV:
            return f"(({b})==0?{zero}:(({b})==-1?(-({a})):({a})/({b})))"
        return f"((({b})==0||({b})==-1)?{zero}:({a})%({b}))"
    return fn


def _shift(op: Ops) -> OpFn:
    """a<<b / a>>b with shifts past the width (or negative) giving 0 (-1 for a negative a>>b)."""
    def fn(r: CStyleRenderer, _: DType, src: tuple[UOp, ...], a: str, b: str) -> str:
        d = src[0].dtype
        out_of_range = f"(({b})<0||({b})>={d.bits})"
        if op is Ops.SHL:
            # shift the unsigned pattern: a signed left shift that overflows is undefined in C
            utype = r.value_type(dtypes.uint64 if d.itemsize == 8 else dtypes.uint32)
            return f"({out_of_range}?{r.render_const(0, d)}:(({r.value_type(d)})(({utype})({a})<<({b}))))"
        fill = f"(({a})<0?{r.render_const(-1, d)}:{r.render_const(0, d)})" if not d.is_unsigned else \
            r.render_const(0, d)
        return f"({out_of_range}?{fill}:(({a})>>({b})))"
    return fn


def c_cast(r: CStyleRenderer, x: str, frm: DType, to: DType) -> str:
    if to.scalar in FP8_FORMATS and frm.scalar == dtypes.float64:  # one rounding, not double -> float -> 8 bits
        return f"{r.rounder(to)}(tg_f64_to_f32_odd({x}))"
    if is_emulated_float(to):
        return f"{r.rounder(to)}((float)({x}))"
    return f"(({r.value_type(to)})({x}))"


def c_bitcast(r: CStyleRenderer, x: str, frm: DType, to: DType) -> str:
    # bfloat16 and 8-bit float values live in floats: go through their bit patterns, reinterpreted (not converted)
    if is_emulated_float(frm) and is_emulated_float(to):
        return f"{r.decoder(to)}({r.encoder(frm)}({x}))"
    if is_emulated_float(frm):
        return r.pun(f"{r.encoder(frm)}({x})", r.memory_type(frm), r.value_type(to))
    if is_emulated_float(to):
        return f"{r.decoder(to)}({r.pun(x, r.value_type(frm), r.memory_type(to))})"
    return r.pun(x, r.value_type(frm), r.value_type(to))


def cast_entry(text: Callable[..., str]) -> OpFn:
    """A CAST or BITCAST entry of `code_for_op` from `text(renderer, operand, from dtype, to dtype)`."""
    return lambda r, d, src, x: text(r, x, src[0].dtype, d)


#: how C spells each value op the renderer can write. A target overrides entries (or the formats they call)
#: with `code_for_op = {**CStyleRenderer.code_for_op, Ops.X: ...}`; the walk in `render` only looks ops up here.
#: Loads are not here but in `render_rules`: what a load reads may depend on the whole kernel (which buffers it
#: writes, which it reads as images), which the hooks they call (`render_load`) get from the kernel's record.
C_CODE_FOR_OP: dict[Ops, OpFn] = {
    Ops.CONST: lambda r, d, src, value: r.render_const(value, d),
    Ops.CAST: cast_entry(c_cast), Ops.BITCAST: cast_entry(c_bitcast),
    **{op: _math(op) for op in (Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC)},
    Ops.RECIPROCAL: lambda r, d, src, a: f"({r.render_const(1.0, d)}/{a})",
    Ops.NEG: lambda r, d, src, a: f"(!{a})" if d.is_bool else f"(-{a})",
    Ops.MAX: _max,
    Ops.IDIV: _divmod(Ops.IDIV), Ops.MOD: _divmod(Ops.MOD),
    Ops.SHL: _shift(Ops.SHL), Ops.SHR: _shift(Ops.SHR),
    Ops.WHERE: lambda r, d, src, c, a, b: f"({c}?{a}:{b})",
    **{op: _infix(sym) for op, sym in ((Ops.ADD, "+"), (Ops.SUB, "-"), (Ops.MUL, "*"), (Ops.FDIV, "/"),
                                        (Ops.CMPLT, "<"), (Ops.CMPNE, "!="), (Ops.CMPEQ, "=="), (Ops.AND, "&"),
                                        (Ops.OR, "|"), (Ops.XOR, "^"))},
}
#: name prefixes of the variables that hold values of these ops (others: "alu")
VAR_PREFIX = {Ops.LOAD: "val", Ops.CAST: "cast", Ops.BITCAST: "cast"}


class CStyleRenderer(Renderer):
    kernel_prefix = ""  # e.g. "__kernel " (OpenCL) or 'extern "C" __global__ ' (CUDA)
    buffer_prefix = ""  # e.g. "__global "
    restrict = "restrict"
    prelude = "#include <math.h>\n#include <stdbool.h>\n"
    bf16_prelude = BF16_PRELUDE  # added only to kernels that touch bfloat16
    float_bits_prelude = FLOAT_BITS_PRELUDE  # added with the 8-bit float helpers
    helper_qualifier = "static inline"
    infinity, nan = "INFINITY", "NAN"
    #: scalar C type for values of each dtype (bfloat16 computes in float)
    type_names: dict[DType, str] = {
        dtypes.bool: "bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
        dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int",
        dtypes.int64: "long long", dtypes.uint64: "unsigned long long", dtypes.float16: "_Float16",
        dtypes.bfloat16: "float", dtypes.float32: "float", dtypes.float64: "double",
        dtypes.fp8e4m3: "float", dtypes.fp8e5m2: "float", dtypes.fp8e4m3fnuz: "float", dtypes.fp8e5m2fnuz: "float",
    }
    #: math functions by (op, dtype class): float32 and smaller use the f-suffixed versions
    math_fns = {Ops.SQRT: "sqrt", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.TRUNC: "trunc",
                Ops.MOD: "fmod"}  # MOD: of floats
    #: the C text of each value op (see C_CODE_FOR_OP); a subclass overrides entries, not the walk
    code_for_op: dict[Ops, OpFn] = C_CODE_FOR_OP
    #: how the walk renders every other op (see C_RENDER_RULES, set below the class)
    render_rules: dict[Ops, Callable[..., None]]

    #: C type of variables that hold address arithmetic (int32 ALU results that feed an INDEX). 64-bit on a CPU:
    #: under -fwrapv a compiler cannot prove that int `x+1` sign-extends to `sext(x)+1`, so it cannot see that
    #: buf[x], buf[x+1], ... are neighbours and gives up vectorising them; in 64 bits they are neighbours even
    #: when wrapping. Values are the same wherever the 32-bit index does not overflow (buffers < 2**31 elements).
    #: None keeps the value's own type (GPU targets, where 64-bit integer math is slow).
    address_var_type: str | None = "long long"

    # ---- small formats a subclass may override ----
    def value_type(self, d: DType) -> str:
        return self.type_names[d.scalar]

    def memory_type(self, d: DType) -> str:
        # bfloat16 and the 8-bit floats are held as their bit patterns
        bits = EMULATED_FLOATS.get(d.scalar)
        return self.value_type(bits) if bits is not None else self.value_type(d)

    @staticmethod
    def decoder(d: DType) -> str:
        """The helper turning the bit pattern of an emulated float into its float value."""
        return "tg_bf16_to_f32" if d.scalar == dtypes.bfloat16 else f"tg_{d.scalar.name}_to_f32"

    @staticmethod
    def encoder(d: DType) -> str:
        return "tg_f32_to_bf16" if d.scalar == dtypes.bfloat16 else f"tg_f32_to_{d.scalar.name}"

    @staticmethod
    def rounder(d: DType) -> str:
        """The helper rounding a float to the emulated float `d` (and keeping it a float)."""
        return "tg_round_bf16" if d.scalar == dtypes.bfloat16 else f"tg_round_{d.scalar.name}"

    def math_fn(self, op: Ops, d: DType) -> str:
        base = self.math_fns[op]
        return base if d.scalar == dtypes.float64 else base + "f"

    def render_const(self, value: float | int | bool, d: DType) -> str:
        if d.is_bool:
            return "1" if value else "0"
        if d.is_float:
            v = float(value)
            if math.isnan(v):
                body = self.nan
            elif math.isinf(v):
                body = self.infinity if v > 0 else f"(-{self.infinity})"
            else:
                body = repr(v) + ("" if d.scalar == dtypes.float64 else "f")
                if v < 0 or (v == 0 and math.copysign(1.0, v) < 0):  # `a - -8.0f` must not print as `a--8.0f`
                    body = f"({body})"
            return body if d.scalar in (dtypes.float32, dtypes.float64) or is_emulated_float(d) else \
                f"(({self.value_type(d)}){body})"
        iv = int(value)
        suffix = {8: "ll", 4: ""}.get(d.itemsize, "")
        if d.is_unsigned:
            suffix = "ull" if d.itemsize == 8 else "u"
            return f"{iv}{suffix}"
        if iv == d.min:  # the most negative literal cannot be written directly in C
            return f"({iv + 1}{suffix}-1)"
        lit = f"{iv}{suffix}" if iv >= 0 else f"({iv}{suffix})"  # `a - -8` must not print as `a--8`
        return lit if d.itemsize >= 4 else f"(({self.value_type(d)}){lit})"

    @staticmethod
    def pun(x: str, frm_type: str, to_type: str) -> str:
        # type punning through a union is defined C (gcc has no __builtin_bit_cast in C, only in C++)
        return f"((union {{ {frm_type} f; {to_type} t; }}){{.f = ({x})}}).t"

    # the hooks that take `k` (the kernel being rendered) are those whose text may depend on the whole kernel: a target
    # reads what it decided about the kernel before the walk in `k.plan` (see `plan`), never from the renderer
    def render_load(self, k: CKernel, buf: str, idx: str, gate: str | None, d: DType) -> str:
        raw = f"{buf}[{idx}]"
        val = f"{self.decoder(d)}({raw})" if is_emulated_float(d) else raw
        return val if gate is None else f"({gate}?{val}:{self.render_const(0, d)})"

    def render_store(self, buf: str, idx: str, value: str, d: DType) -> str:
        v = f"{self.encoder(d)}({value})" if is_emulated_float(d) else value
        return f"{buf}[{idx}] = {v};"

    def render_local_load(self, k: CKernel, buf: str, idx: str, gate: str | None, d: DType) -> str:
        """A load from the work-group's scratch array (DEFINE_LOCAL). C reads it like a buffer; a target whose
        buffers hold a storage format (packed words) keeps the scratch in value types instead."""
        return self.render_load(k, buf, idx, gate, d)

    def render_local_store(self, buf: str, idx: str, value: str, d: DType) -> str:
        return self.render_store(buf, idx, value, d)

    def render_param(self, k: CKernel, index: int, d: DType, is_output: bool) -> str:
        const = "" if is_output else "const "
        return f"{self.buffer_prefix}{const}{self.memory_type(d)}* {self.restrict} data{index}"

    # ---- vector accesses (only for targets with `vector_widths`; see renderer/vectorize.py) ----
    #: element dtypes the target loads and stores as vectors
    vector_dtypes: frozenset[DType] = frozenset({dtypes.float32, dtypes.int32, dtypes.uint32})

    def vector_type(self, d: DType, width: int) -> str:
        raise NotImplementedError(f"{type(self).__name__} declares vector_widths but no vector_type")

    def render_vector_load(self, k: CKernel, buf: str, idx: str, width: int, d: DType) -> str:
        raise NotImplementedError(f"{type(self).__name__} declares vector_widths but no render_vector_load")

    def render_vector_lane(self, vec: str, lane: int) -> str:
        raise NotImplementedError(f"{type(self).__name__} declares vector_widths but no render_vector_lane")

    def render_vector_store(self, buf: str, idx: str, values: list[str], d: DType) -> str:
        raise NotImplementedError(f"{type(self).__name__} declares vector_widths but no render_vector_store")

    def render_var_param(self, k: CKernel, name: str, d: DType) -> str:
        return f"const {self.value_type(d)} {name}"

    def render_var_ref(self, k: CKernel, name: str) -> str:
        """How the body reads the symbolic variable `name`: in C, by the parameter of that name."""
        return name

    def render_declaration(self, name: str, type_name: str, expr: str, mutable: bool = False) -> str:
        """A body variable named `name` of type `type_name`, initialised to `expr`. `mutable`: an accumulator,
        which ASSIGNs update; C declares both kinds alike (a target like WGSL tells `let` from `var`)."""
        return f"{type_name} {name} = {expr};"

    def render_source(self, k: CKernel, params: list[str], var_params: list[str]) -> str:
        """The kernel's whole source from its parts: the buffer parameters (by slot) and the symbolic variable
        ones (by name), and what the walk wrote into `k` (the scratch arrays' declarations, the body lines). C: one
        function, the scratch arrays at the top of its body, after the preludes and helpers the kernel uses."""
        lines = ["  " + decl for decl in k.local_decls] + k.body
        uses_bf16 = any(u.dtype.scalar == dtypes.bfloat16 for u in k.program)
        return self.render_kernel(k.name, params + var_params, lines, uses_bf16, self.fp8_helpers(k.program))

    def render_kernel(self, name: str, params: list[str], body: list[str], uses_bf16: bool = False,
                      helpers: str = "") -> str:
        """`helpers`: more functions the body calls (the 8-bit float conversions), placed after the prelude."""
        head = f"\n{self.kernel_prefix}void {name}({', '.join(params)}) {{\n"
        return self.prelude + (self.bf16_prelude if uses_bf16 else "") + helpers + head + "\n".join(body) + "\n}\n"

    def fp8_helpers(self, program: list[UOp]) -> str:
        """The helper functions of the 8-bit floats `program` touches ("" when none)."""
        used = sorted({u.dtype.scalar for u in program if u.dtype.scalar in FP8_FORMATS}, key=lambda d: d.name)
        if not used:
            return ""
        from_f64 = any(u.op is Ops.CAST and u.dtype.scalar in FP8_FORMATS and u.src[0].dtype.scalar == dtypes.float64
                       for u in program)
        q = self.helper_qualifier
        return self.float_bits_prelude + (F64_TO_F32_ODD.format(q=q) if from_f64 else "") + \
            "".join(fp8_prelude(d, q) for d in used)

    def render_alu(self, op: Ops, d: DType, srcs: list[str], src_uops: tuple[UOp, ...]) -> str:
        """Look the op up in `code_for_op`, then round the result back to its dtype where C computes wider."""
        expr = self.code_for_op[op](self, d, src_uops, *srcs)
        if is_emulated_float(d) and op not in GroupOp.Comparison:
            expr = f"{self.rounder(d)}({expr})"
        if d.scalar == dtypes.float16 and op not in GroupOp.Comparison and op is not Ops.WHERE:
            expr = f"(({self.value_type(d)}){expr})"  # round the float result back to half after every op
        if d.is_int and d.itemsize < 4 and op not in GroupOp.Comparison:
            expr = f"(({self.value_type(d)}){expr})"  # C promotes small ints to int; wrap back
        if d.is_bool and op not in GroupOp.Comparison and op is not Ops.WHERE:
            expr = f"((bool){expr})"  # true+true is 2 in C: inlined into a comparison it must be 1 again
        return expr

    def repeats_operands(self, u: UOp) -> bool:
        """Whether u's C text names an operand more than once. Its operands then get variables: inlined they
        would be evaluated several times, and a chain (x.maximum(y).maximum(z)...) would grow exponentially."""
        if u.op in (Ops.MAX, Ops.SHL, Ops.SHR):
            return True
        if u.op in (Ops.IDIV, Ops.MOD):
            divisor = u.src[1]
            return not (u.src[0].dtype.is_float or (divisor.op is Ops.CONST and int(divisor.arg) > 0))
        return False

    def plan(self, program: list[UOp]) -> object:
        """What this target marks in a program before the walk renders it (`CKernel.plan`, read by its table's
        entries and by the hooks that take `k`), so that rendering is one pass and the renderer keeps no per-kernel
        state; the CPU marks the loops it slices for its threads. None here."""
        return None

    # ---- the shared walk over the program ----
    def render(self, name: str, program: list[UOp]) -> str:
        k = CKernel.start(self, name, program)
        for u in program:
            rule = self.render_rules.get(u.op) or (_value if u.op in self.code_for_op else None)
            if rule is None:
                raise NotImplementedError(f"{type(self).__name__} cannot render {u.op}")
            rule(self, k, u)
        param_decls = [self.render_param(k, i, k.params[i].dtype, i in k.stored) for i in sorted(k.params)]
        # symbolic variables follow the buffers, sorted by name (ProgramSpec.var_names is the same order)
        variables = sorted({u.arg.name: u for u in program if u.op is Ops.DEFINE_VAR}.items())
        var_decls = [self.render_var_param(k, name, u.dtype) for name, u in variables]
        return self.render_source(k, param_decls, var_decls)


@dataclass(eq=False)
class CKernel:
    """One render in progress: the program's facts the table's entries read (nesting depth, users, vector
    accesses, the target's `plan`) and what they write (each UOp's name or inlined text, the body lines, the
    declarations). Made anew for every kernel, so the walk keeps no state on the renderer."""

    r: CStyleRenderer
    name: str
    program: list[UOp]
    plan: object
    depth_of: dict[UOp, int]
    users: dict[UOp, list[UOp]]
    vectors: dict[UOp, VectorAccess]
    address_math: set[UOp]
    #: each UOp's place in the program (only where there are vector accesses, whose last store writes the vector)
    position: dict[UOp, int]
    names: dict[UOp, str] = field(default_factory=dict)
    body: list[str] = field(default_factory=list)
    params: dict[int, UOp] = field(default_factory=dict)
    stored: set[int] = field(default_factory=set)
    local_decls: list[str] = field(default_factory=list)
    #: where each open loop's lines start in `body` (its END entry takes them back: `loop_lines`)
    loop_starts: list[int] = field(default_factory=list)
    #: each value's text before the choice to inline it or declare a variable
    pending: dict[UOp, str] = field(default_factory=dict)
    #: inlined expressions that read memory (see `inlinable`)
    reads_memory: set[UOp] = field(default_factory=set)
    vector_names: dict[VectorAccess, str] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    #: what a target's entries remember for the rest of the walk (Metal: the tensor cores whose scratch exists)
    seen: set[object] = field(default_factory=set)

    @staticmethod
    def start(r: CStyleRenderer, name: str, program: list[UOp]) -> CKernel:
        depth_of, users = loop_depths_and_users(program)
        vectors = find_vector_accesses(program, r.vector_widths, r.vector_dtypes, depth_of)
        address_math = _address_math(program) if r.address_var_type else set()
        position = {u: i for i, u in enumerate(program)} if vectors else {}
        return CKernel(r, name, program, r.plan(program), depth_of, users, vectors, address_math, position)

    def fresh(self, prefix: str) -> str:
        n = self.counters[prefix]
        self.counters[prefix] += 1
        return f"{prefix}{n}"

    def pad(self, u: UOp) -> str:
        return "  " * self.depth_of[u]

    def line(self, u: UOp, text: str) -> None:
        """A line at u's nesting depth."""
        self.body.append(self.pad(u) + text)

    def open_loop(self, u: UOp, header: str) -> None:
        """RANGE u's opening line; its END's entry gets the loop's lines back (`loop_lines`)."""
        self.loop_starts.append(len(self.body))
        self.line(u, header)

    def loop_lines(self) -> list[str]:
        """The lines of the innermost open loop (its header and body), taken out of the body."""
        start = self.loop_starts.pop()
        lines = self.body[start:]
        del self.body[start:]
        return lines

    def emit(self, u: UOp, expr: str, prefix: str) -> None:
        """Value u is `expr`: inlined into its user where it can be, else a variable declared here."""
        self.pending[u] = expr
        if self.inlinable(u):
            self.names[u] = expr
            return
        self.names[u] = self.fresh(prefix)
        vtype = self.r.value_type(u.dtype)
        if u in self.address_math and self.r.address_var_type is not None:
            vtype = self.r.address_var_type
        self.line(u, self.r.render_declaration(self.names[u], vtype, expr))

    def inlinable(self, u: UOp) -> bool:
        us = self.users[u]
        if not ((u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST, Ops.LOAD)) and len(us) == 1
                and self.depth_of[us[0]] == self.depth_of[u] and us[0].op is not Ops.DEFINE_ACC
                and not self.r.repeats_operands(us[0]) and len(self.pending[u]) <= MAX_INLINE_CHARS):
            return False
        # C evaluates only the taken arm of `c ? a : b`, so a load inside an arm is a load the compiler must guard by
        # a branch (it cannot prove the address valid either way); such expressions get a variable before the
        # WHERE, which then becomes a branch-free select
        loads = u.op is Ops.LOAD or any(s in self.reads_memory for s in u.src)
        if loads and us[0].op is Ops.WHERE and u is not us[0].src[0]:
            return False
        if u.op is Ops.LOAD and any(s is not u and _gated_load(s) for s in us[0].src):
            # next to a gated load (a branch in C): read first, so that the load does not follow the branch's
            # merge, which kept clang 19 from vectorising a padded copy of a sum (CHANGELOG)
            return False
        if loads:
            self.reads_memory.add(u)
        return True


# ---- the table's entries: (renderer, kernel, uop) -> None; each names its UOp or writes its lines ----
#: an entry of `CStyleRenderer.render_rules`; a target's entry may take its own renderer class as `r`
RenderRule = Callable[..., None]


def _value(r: CStyleRenderer, k: CKernel, u: UOp) -> None:
    """A value: its text from `code_for_op` (ALU results also rounded back to their dtype: `render_alu`)."""
    op = u.op
    operands = [u.arg] if op is Ops.CONST else [k.names[s] for s in u.src]
    expr = r.render_alu(op, u.dtype, operands, u.src) if op in GroupOp.ALU else \
        r.code_for_op[op](r, u.dtype, u.src, *operands)
    if op is Ops.CONST:
        k.names[u] = expr  # constants are always inlined
    else:
        k.emit(u, expr, VAR_PREFIX.get(op, "alu"))


def _vector_index(k: CKernel, access: VectorAccess) -> str:
    return "+".join([k.names[t] for t in access.terms] + [str(access.offset)])


def _load(r: CStyleRenderer, k: CKernel, u: UOp) -> None:
    """A LOAD of one element through its INDEX: the memory (a buffer parameter or the work-group's scratch), the
    index and, where the INDEX has a third source, the gate (a load whose gate is false gives zero)."""
    index = u.src[0]
    buf, idx = k.names[index.src[0]], k.names[index.src[1]]
    gate = k.names[index.src[2]] if len(index.src) > 2 else None
    read = r.render_local_load if index.src[0].op is Ops.DEFINE_LOCAL else r.render_load
    k.emit(u, read(k, buf, idx, gate, u.dtype), VAR_PREFIX[Ops.LOAD])


def _load_lane(r: CStyleRenderer, k: CKernel, u: UOp) -> None:
    """A LOAD: one element (`_load`), or its lane of a vector access whose first lane reads it all."""
    if (access := k.vectors.get(u)) is None:
        return _load(r, k, u)
    if access not in k.vector_names:  # the first lane reads the whole vector
        k.vector_names[access] = vname = k.fresh("vec")
        load = r.render_vector_load(k, k.names[u.src[0].src[0]], _vector_index(k, access), access.width, u.dtype)
        k.line(u, r.render_declaration(vname, r.vector_type(u.dtype, access.width), load))
        for lane, m in enumerate(access.members):
            k.names[m] = r.render_vector_lane(vname, lane)
    return None


def _store(r: CStyleRenderer, k: CKernel, u: UOp) -> None:
    idx = u.src[0]
    if idx.src[0].op is Ops.PARAM:
        k.stored.add(idx.src[0].arg.slot)
    if (access := k.vectors.get(u)) is not None:
        if u is max(access.members, key=k.position.__getitem__):  # every value exists by the last
            values = [k.names[m.src[1]] for m in access.members]
            k.line(u, r.render_vector_store(k.names[idx.src[0]], _vector_index(k, access), values, idx.dtype))
        return
    store = r.render_local_store if idx.src[0].op is Ops.DEFINE_LOCAL else r.render_store
    text = store(k.names[idx.src[0]], k.names[idx.src[1]], k.names[u.src[1]], idx.dtype)
    # a third source gates the store (only lane 0 of a GROUP writes the result)
    k.line(u, f"if ({k.names[u.src[2]]}) {{ {text} }}" if len(u.src) > 2 else text)


def _param(r: CStyleRenderer, k: CKernel, u: UOp) -> None:
    k.params[u.arg.slot] = u
    k.names[u] = f"data{u.arg.slot}"


def _range(r: CStyleRenderer, k: CKernel, u: UOp) -> None:
    """A loop over [0, bound) with a counter of the RANGE's dtype (int32, or int64 for a bound past int32's range)."""
    k.names[u] = name = k.fresh("ridx")
    k.open_loop(u, f"for ({r.value_type(u.dtype)} {name} = 0; {name} < {k.names[u.src[0]]}; {name}++) {{")


def _end(r: CStyleRenderer, k: CKernel, u: UOp) -> None:
    k.body.extend([*k.loop_lines(), k.pad(u) + "}"])


def _global_id(r: CStyleRenderer, name: str, dim: int, dtype: DType) -> str:
    """This work-item's global id in launch dimension `dim`, spelled as OpenCL C does."""
    t = r.value_type(dtype)
    return f"{t} {name} = ({t})get_global_id({dim});"


def _define_acc(r: CStyleRenderer, k: CKernel, u: UOp) -> None:
    k.names[u] = k.fresh("acc")
    k.line(u, r.render_declaration(k.names[u], r.value_type(u.dtype), k.names[u.src[0]], True))


def _no_local_memory(r: CStyleRenderer, k: CKernel, u: UOp) -> None:
    raise NotImplementedError(f"{type(r).__name__} has no local memory and no work-group barrier (set local_mem_max "
                              "and give DEFINE_LOCAL and BARRIER entries in render_rules)")


def _no_tensor_cores(r: CStyleRenderer, k: CKernel, u: UOp) -> None:
    raise NotImplementedError(f"{type(r).__name__} lists no tensor cores to render")


def wmma_operands(k: CKernel, u: UOp) -> tuple[str, list[str], list[str], list[str]]:
    """For a WMMA entry: the lane's name, its elements of A and B, and the variables (declared here) to which the
    entry's lines assign this lane's elements of the product (tensor core `u.arg`, with zero as C)."""
    tc: TensorCore = u.arg
    k.names[u] = k.fresh("wmma")
    values = [k.names[s] for s in u.src[1:]]
    outputs = [f"{k.names[u]}_{i}" for i in range(tc.elements[2])]
    k.line(u, f"{k.r.value_type(u.dtype)} {', '.join(outputs)};")
    return k.names[u.src[0]], values[:tc.elements[0]], values[tc.elements[0]:], outputs


def _set_name(text: Callable[[CStyleRenderer, CKernel, UOp], str]) -> RenderRule:
    """An entry that only names its UOp (the text its users read)."""
    return lambda r, k, u: k.names.__setitem__(u, text(r, k, u))




def _gated_load(u: UOp) -> bool:
    return u.op is Ops.LOAD and len(u.src[0].src) > 2


def _address_math(program: list[UOp]) -> set[UOp]:
    """The int32 ALU nodes an INDEX's index is computed from."""
    indices = [u.src[1] for u in program if u.op is Ops.INDEX]
    return set(post_order(indices, skip=lambda u: u.op not in GroupOp.ALU or u.dtype != dtypes.int32))



# ---- entries a target builds its own from ----
def local_array(qualifier: str) -> RenderRule:
    """A DEFINE_LOCAL entry: the work-group's scratch array, `qualifier T tempN[size];` at the kernel's top."""
    def rule(r: CStyleRenderer, k: CKernel, u: UOp) -> None:
        k.names[u] = name = k.fresh("temp")
        k.local_decls.append(f"{qualifier} {r.value_type(u.dtype)} {name}[{u.arg.size}];")
    return rule


def line(text: str) -> RenderRule:
    """An entry that writes one fixed line (a barrier)."""
    return lambda r, k, u: k.line(u, text)


def work_item_id(text: Callable[..., str]) -> RenderRule:
    """A SPECIAL entry from `text(renderer, name, launch dimension, dtype)`, the line that declares the id."""
    def rule(r: CStyleRenderer, k: CKernel, u: UOp) -> None:
        k.names[u] = u.arg.name
        k.line(u, text(r, u.arg.name, u.arg.dim, u.dtype))
    return rule


def tensor_core(lines: Callable[..., list[str]]) -> RenderRule:
    """A WMMA entry from `lines(renderer, tensor core, lane, a, b, out)`: the lines that run the tensor core on this
    lane's elements of A and B (with zero as C) and assign its elements of the product to the variables `out`."""
    def rule(r: CStyleRenderer, k: CKernel, u: UOp) -> None:
        lane, a, b, out = wmma_operands(k, u)
        k.body.extend(k.pad(u) + text for text in lines(r, u.arg, lane, a, b, out))
    return rule


#: how the walk renders each op that is not a plain value (those are `code_for_op`'s). A target extends it with
#: `render_rules = {**CStyleRenderer.render_rules, Ops.X: ...}`
C_RENDER_RULES: dict[Ops, RenderRule] = {
    Ops.PARAM: _param,
    Ops.DEFINE_VAR: _set_name(lambda r, k, u: r.render_var_ref(k, u.arg.name)),
    Ops.RANGE: _range, Ops.END: _end,
    Ops.SPECIAL: work_item_id(_global_id),
    # work-item guards (`tinygrad.codegen.work_items`): a block that runs where the id is within its bound
    Ops.IF: lambda r, k, u: k.line(u, f"if ({k.names[u.src[0]]}) {{"),
    Ops.ENDIF: lambda r, k, u: k.line(u, "}"),
    Ops.INDEX: _set_name(lambda r, k, u: ""),  # rendered by its LOAD or STORE
    Ops.LOAD: _load_lane, Ops.STORE: _store,
    # a work-group's shared scratch array (GROUP reductions) and its barrier: targets with `local_mem_max`
    Ops.DEFINE_LOCAL: _no_local_memory, Ops.BARRIER: _no_local_memory,
    Ops.DEFINE_ACC: _define_acc,
    Ops.ASSIGN: lambda r, k, u: k.line(u, f"{k.names[u.src[0]]} = {k.names[u.src[1]]};"),
    Ops.WMMA: _no_tensor_cores,  # tensor cores (the TC opt; `tinygrad.renderer.tensor_core`)
    Ops.GEP: _set_name(lambda r, k, u: f"{k.names[u.src[0]]}_{u.arg}"),
}
CStyleRenderer.render_rules = C_RENDER_RULES
