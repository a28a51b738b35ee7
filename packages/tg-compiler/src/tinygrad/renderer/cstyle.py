"""The C-style base renderer. A C-like target (C, OpenCL C, CUDA, Metal, ...) subclasses it and fills
in the tables - type names (`type_names`), the text of each op (`code_for_op`, from op to a small function of
the rendered operands) - and the few hooks that differ (kernel prefix, parameters, vector types, barriers); the
walk over the program (declare, look the op up, emit) is shared.

Semantics that C leaves undefined are pinned down here to match `tinygrad.uop.alu` (integer division
by zero and shifts past the width give 0; signed overflow wraps, so compile with -fwrapv or the
target's equivalent). bfloat16 and the OCP 8-bit floats (fp8e4m3, fp8e5m2) are emulated: stored as their
16- and 8-bit patterns, computed in float and rounded back after every op by helper functions that a kernel
gets only when it uses the dtype (`BF16_PRELUDE`, `fp8_prelude`). float16 (`_Float16`) is rounded back after
every op too: compilers evaluate it in float and may keep that excess precision across an inlined expression,
and libm's f-functions return float.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable

from tinygrad.dtype import EMULATED_FLOATS, FP8_FORMATS, DType, FP8Format, dtypes, is_emulated_float
from tinygrad.renderer import Renderer, loop_depths_and_users
from tinygrad.renderer.tensor_core import TensorCore
from tinygrad.renderer.vectorize import VectorAccess, find_vector_accesses
from tinygrad.uop.ops import GroupOp, Ops, UOp, post_order

BF16_PRELUDE = """static inline float tg_bf16_to_f32(unsigned short b) {
  unsigned int u = ((unsigned int)b) << 16; float f; __builtin_memcpy(&f, &u, 4); return f;
}
static inline unsigned short tg_f32_to_bf16(float f) {
  unsigned int u; __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  /* NaN stays a quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);  /* round to nearest even */
  return (unsigned short)(u >> 16);
}
static inline float tg_round_bf16(float f) { return tg_bf16_to_f32(tg_f32_to_bf16(f)); }
"""

#: float <-> its 32 bits, which the 8-bit float helpers are written with (OpenCL spells them as_uint/as_float)
FLOAT_BITS_PRELUDE = """static inline unsigned int tg_f32_bits(float f) {
  unsigned int u; __builtin_memcpy(&u, &f, 4); return u;
}
static inline float tg_bits_f32(unsigned int u) { float f; __builtin_memcpy(&f, &u, 4); return f; }
"""

#: a double rounded to float toward zero, with the last bit set when inexact ("round to odd"): rounding that float
#: again to a format of at most 22 bits gives what rounding the double directly would, so a float64 -> 8-bit float
#: cast rounds once
F64_TO_F32_ODD = """{q} float tg_f64_to_f32_odd(double d) {{
  float f = (float)d;
  if (d != d || (double)f == d) return f;
  unsigned int u = tg_f32_bits(f);
  if (d > 0.0 ? (double)f > d : (double)f < d) u -= 1u;  /* rounded away from zero: step back toward it */
  return tg_bits_f32(u | 1u);
}}
"""

_FP8_HELPERS = """{q} float tg_{n}_to_f32(unsigned char b) {{
  unsigned int sign = ((unsigned int)b & 0x80u) << 24;
  unsigned int e = ((unsigned int)b >> {m}) & {emask}u, m = (unsigned int)b & {mmask}u;
  if ({fnuz}u && b == 0x80u) return tg_bits_f32(0x7fc00000u);  /* fnuz: the negative-zero pattern is NaN */
  if (((unsigned int)b & 0x7fu) > {max_code}u) return tg_bits_f32(sign | {special});
  if (e == 0u) {{ float v = (float)m * {subnormal_step}f; return sign ? -v : v; }}  /* subnormal */
  return tg_bits_f32(sign | ((e + {rebias}u) << 23) | (m << {shift}));
}}
{q} unsigned char tg_f32_to_{n}(float f) {{
  unsigned int u = tg_f32_bits(f), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (unsigned char)(sign | {nan_code}u);  /* NaN keeps its sign */
  if (a == 0x7f800000u) return (unsigned char)(sign | {inf_code}u);
  unsigned int zero = {fnuz}u ? 0u : sign;  /* fnuz has no negative zero: that pattern is its NaN */
  if (a < 0x00800000u) return (unsigned char)zero;  /* zero, and float32 subnormals: far below the smallest step */
  int e = (int)(a >> 23) - 127, sub = e < {min_exp};
  unsigned int m = (a & 0x7fffffu) | 0x800000u;
  int drop = {shift} + (sub ? {min_exp} - e : 0);  /* significand bits below this binade's step */
  if (drop > 24) return (unsigned char)zero;
  unsigned int q = m >> drop, rest = m & ((1u << drop) - 1u), halfway = 1u << (drop - 1);
  if (rest > halfway || (rest == halfway && (q & 1u))) q++;  /* round to nearest, ties to even */
  unsigned int code = sub ? q : ((unsigned int)(e + {bias_m1}) << {m}) + q;  /* a carry moves up one binade */
  if (code == 0u) return (unsigned char)zero;
  return (unsigned char)(sign | (code > {max_code}u ? {max_code}u : code));  /* finite values saturate */
}}
{q} float tg_round_{n}(float f) {{ return tg_{n}_to_f32(tg_f32_to_{n}(f)); }}
"""


def fp8_prelude(d: DType, qualifier: str = "static inline") -> str:
    """C helpers of one 8-bit float: decode a pattern to float, encode a float (ties to even; finite values past
    the largest saturate to it, as `tinygrad.dtype.fp8_encode`), and round a float to the format. They use
    `tg_f32_bits`/`tg_bits_f32` (FLOAT_BITS_PRELUDE or the target's own)."""
    fmt: FP8Format = FP8_FORMATS[d.scalar]
    m = fmt.mantissa_bits
    # codes above the largest finite one: NaN, or (E5M2) infinity for the first of them
    special = f"(((unsigned int)b & 0x7fu) == {fmt.inf_code}u ? 0x7f800000u : 0x7fc00000u)" if fmt.has_inf \
        else "0x7fc00000u"
    return _FP8_HELPERS.format(
        q=qualifier, n=d.scalar.name, m=m, emask=(1 << fmt.exponent_bits) - 1, mmask=(1 << m) - 1,
        max_code=fmt.max_code, special=special, subnormal_step=repr(2.0 ** (1 - fmt.bias - m)),
        rebias=127 - fmt.bias, shift=23 - m, nan_code=fmt.nan_code, inf_code=fmt.inf_code, min_exp=1 - fmt.bias,
        bias_m1=fmt.bias - 1, fnuz=int(fmt.fnuz))


#: longer expressions get a variable, so that a long elementwise chain does not become one enormous line
MAX_INLINE_CHARS = 1000


#: an entry of `CStyleRenderer.code_for_op`: (renderer, result dtype, source UOps, *rendered operands) -> C text.
#: The operands are the sources' names (a LOAD's: its INDEX's buffer, index and gate; a CONST's: its value).
OpFn = Callable[..., str]


def _infix(sym: str) -> OpFn:
    return lambda r, d, src, a, b: f"({a}{sym}{b})"


def _math(op: Ops) -> OpFn:
    return lambda r, d, src, a: f"{r.math_fn(op, d)}({a})"


def _divmod(op: Ops) -> OpFn:
    return lambda r, d, src, a, b: r.render_divmod(op, a, b, src[0].dtype, src[1])


def _shift(op: Ops) -> OpFn:
    return lambda r, d, src, a, b: r.render_shift(op, a, b, src[0].dtype)


def _load(r: CStyleRenderer, d: DType, src: tuple[UOp, ...], buf: str, idx: str, gate: str | None = None) -> str:
    # src[0] is the INDEX, whose first source is the memory: a buffer parameter or the work-group's scratch
    local = src[0].src[0].op is Ops.DEFINE_LOCAL
    return (r.render_local_load if local else r.render_load)(buf, idx, gate, d)


#: how C spells each op the renderer can write. A target overrides entries (or the render_* hooks they call)
#: with `code_for_op = {**CStyleRenderer.code_for_op, Ops.X: ...}`; the walk in `render` only looks ops up here.
C_CODE_FOR_OP: dict[Ops, OpFn] = {
    Ops.CONST: lambda r, d, src, value: r.render_const(value, d),
    Ops.LOAD: _load,
    Ops.CAST: lambda r, d, src, x: r.render_cast(x, src[0].dtype, d),
    Ops.BITCAST: lambda r, d, src, x: r.render_bitcast(x, src[0].dtype, d),
    **{op: _math(op) for op in (Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC)},
    Ops.RECIPROCAL: lambda r, d, src, a: f"({r.render_const(1.0, d)}/{a})",
    Ops.NEG: lambda r, d, src, a: f"(!{a})" if d.is_bool else f"(-{a})",
    Ops.MAX: lambda r, d, src, a, b: r.render_max(a, b, d),
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
    #: the C text of each op (see C_CODE_FOR_OP); a subclass overrides entries, not the walk
    code_for_op: dict[Ops, OpFn] = C_CODE_FOR_OP

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

    def render_cast(self, x: str, frm: DType, to: DType) -> str:
        if to.scalar in FP8_FORMATS and frm.scalar == dtypes.float64:  # one rounding, not double -> float -> 8 bits
            return f"{self.rounder(to)}(tg_f64_to_f32_odd({x}))"
        if is_emulated_float(to):
            return f"{self.rounder(to)}((float)({x}))"
        return f"(({self.value_type(to)})({x}))"

    def render_bitcast(self, x: str, frm: DType, to: DType) -> str:
        # bfloat16 and 8-bit float values live in floats: go through their bit patterns, reinterpreted (not converted)
        if is_emulated_float(frm) and is_emulated_float(to):
            return f"{self.decoder(to)}({self.encoder(frm)}({x}))"
        if is_emulated_float(frm):
            return self._pun(f"{self.encoder(frm)}({x})", self.memory_type(frm), self.value_type(to))
        if is_emulated_float(to):
            return f"{self.decoder(to)}({self._pun(x, self.value_type(frm), self.memory_type(to))})"
        return self._pun(x, self.value_type(frm), self.value_type(to))

    @staticmethod
    def _pun(x: str, frm_type: str, to_type: str) -> str:
        # type punning through a union is defined C (gcc has no __builtin_bit_cast in C, only in C++)
        return f"((union {{ {frm_type} f; {to_type} t; }}){{.f = ({x})}}).t"

    def render_load(self, buf: str, idx: str, gate: str | None, d: DType) -> str:
        raw = f"{buf}[{idx}]"
        val = f"{self.decoder(d)}({raw})" if is_emulated_float(d) else raw
        return val if gate is None else f"({gate}?{val}:{self.render_const(0, d)})"

    def render_store(self, buf: str, idx: str, value: str, d: DType) -> str:
        v = f"{self.encoder(d)}({value})" if is_emulated_float(d) else value
        return f"{buf}[{idx}] = {v};"

    def render_local_load(self, buf: str, idx: str, gate: str | None, d: DType) -> str:
        """A load from the work-group's scratch array (DEFINE_LOCAL). C reads it like a buffer; a target whose
        buffers hold a storage format (packed words) keeps the scratch in value types instead."""
        return self.render_load(buf, idx, gate, d)

    def render_local_store(self, buf: str, idx: str, value: str, d: DType) -> str:
        return self.render_store(buf, idx, value, d)

    def render_param(self, index: int, d: DType, is_output: bool) -> str:
        const = "" if is_output else "const "
        return f"{self.buffer_prefix}{const}{self.memory_type(d)}* {self.restrict} data{index}"

    def render_range(self, name: str, bound: str, dtype: DType = dtypes.int32) -> str:
        """Open a loop over [0, bound) with a counter of type `dtype` (int32, or int64 for a bound past int32's
        range); `render_loop` closes it at its END."""
        return f"for ({self.value_type(dtype)} {name} = 0; {name} < {bound}; {name}++) {{"

    # ---- work-items (`has_local` targets: the SPECIAL, IF and ENDIF of `tinygrad.codegen.work_items`) ----
    def render_special(self, name: str, dim: int, dtype: DType) -> str:
        """Declare `name`, of type `dtype`, as this work-item's global id in launch dimension `dim`. Spelled as
        OpenCL C does; a target with other builtins (CUDA's blockIdx/threadIdx, WGSL's) overrides it."""
        t = self.value_type(dtype)
        return f"{t} {name} = ({t})get_global_id({dim});"

    def render_if(self, cond: str) -> str:
        """Open a block that runs when `cond` holds (a work-item id within its bound); ENDIF closes it."""
        return f"if ({cond}) {{"

    def render_endif(self) -> str:
        return "}"

    def render_define_local(self, name: str, d: DType, size: int) -> str:
        """Declare a work-group's shared scratch array (GROUP reductions). Only targets with `local_mem_max`
        get DEFINE_LOCAL; `render_source` places the declaration (C: at the top of the kernel body)."""
        raise NotImplementedError(f"{type(self).__name__} has no local memory (set local_mem_max and override "
                                  f"render_define_local and render_barrier)")

    def render_barrier(self) -> str:
        raise NotImplementedError(f"{type(self).__name__} has no work-group barrier")

    # ---- vector accesses (only for targets with `vector_widths`; see renderer/vectorize.py) ----
    #: element dtypes the target loads and stores as vectors
    vector_dtypes: frozenset[DType] = frozenset({dtypes.float32, dtypes.int32, dtypes.uint32})

    def vector_type(self, d: DType, width: int) -> str:
        raise NotImplementedError(f"{type(self).__name__} declares vector_widths but no vector_type")

    def render_vector_load(self, buf: str, idx: str, width: int, d: DType) -> str:
        raise NotImplementedError(f"{type(self).__name__} declares vector_widths but no render_vector_load")

    def render_vector_lane(self, vec: str, lane: int) -> str:
        raise NotImplementedError(f"{type(self).__name__} declares vector_widths but no render_vector_lane")

    def render_vector_store(self, buf: str, idx: str, values: list[str], d: DType) -> str:
        raise NotImplementedError(f"{type(self).__name__} declares vector_widths but no render_vector_store")

    def render_var_param(self, name: str, d: DType) -> str:
        return f"const {self.value_type(d)} {name}"

    def render_var_ref(self, name: str) -> str:
        """How the body reads the symbolic variable `name`: in C, by the parameter of that name."""
        return name

    def render_declaration(self, name: str, type_name: str, expr: str, mutable: bool = False) -> str:
        """A body variable named `name` of type `type_name`, initialised to `expr`. `mutable`: an accumulator,
        which ASSIGNs update; C declares both kinds alike (a target like WGSL tells `let` from `var`)."""
        return f"{type_name} {name} = {expr};"

    def render_loop(self, lines: list[str], rng: UOp, name: str, bound: str, pad: str) -> list[str]:
        """The whole loop of `rng` (counter `name`, bound `bound`), once its END is reached: `lines` are its
        opening line (`render_range`'s) and its body, `pad` the indentation of its closing line. C closes it with
        a brace; a target can rewrite it (WGSL unrolls loops for drivers that cap their iterations)."""
        return [*lines, pad + "}"]

    def render_source(self, name: str, program: list[UOp], params: list[str], var_params: list[str],
                      local_decls: list[str], body: list[str]) -> str:
        """The kernel's whole source from its parts: the buffer parameters (by slot) and the symbolic variable
        ones (by name), the scratch arrays' declarations and the body lines. C: one function, the scratch
        arrays at the top of its body, after the preludes and helpers the kernel uses."""
        lines = ["  " + decl for decl in local_decls] + body
        uses_bf16 = any(u.dtype.scalar == dtypes.bfloat16 for u in program)
        if helpers := self.fp8_helpers(program):
            return self.render_kernel(name, params + var_params, lines, uses_bf16, helpers)
        # without helpers, the call a renderer written before `helpers` existed overrides (CPURenderer did)
        return self.render_kernel(name, params + var_params, lines, uses_bf16)

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

    def render_max(self, a: str, b: str, d: DType) -> str:
        # NaN wins; on a tie +0.0 beats -0.0 whatever the order (the reference's IEEE maximum)
        if d.is_float:
            # `|` and `&`, not `||` and `&&`: no short-circuit, so the compiler selects instead of branching
            return f"(((({a})>({b}))|(({a})!=({a}))|((({a})==({b}))&!signbit({a})))?({a}):({b}))"
        return f"((({a})>({b}))?({a}):({b}))"

    def render_divmod(self, op: Ops, a: str, b: str, d: DType, divisor: UOp) -> str:
        """a/b (IDIV: truncated) or a%b (MOD: the sign of a) of dtype `d`, with x/0 = x%0 = 0."""
        sym = "/" if op is Ops.IDIV else "%"
        if d.is_float:
            if op is Ops.MOD:
                return f"{self.math_fn(Ops.MOD, d)}({a},{b})"
            # truncate the quotient as rounded to the dtype, not the wider float the division ran in
            quotient = f"({a}/{b})"
            if is_emulated_float(d):
                quotient = f"{self.rounder(d)}{quotient}"
            elif d.scalar == dtypes.float16:
                quotient = f"(({self.value_type(d)}){quotient})"
            return f"{self.math_fn(Ops.TRUNC, d)}({quotient})"
        if divisor.op is Ops.CONST and int(divisor.arg) > 0:
            return f"({a}{sym}{b})"
        zero = self.render_const(0, d)
        if d.is_unsigned:
            return f"(({b})==0?{zero}:({a}){sym}({b}))"
        # x/0 is 0, and MIN/-1 would trap on x86: -x wraps to MIN under -fwrapv
        if op is Ops.IDIV:
            return f"(({b})==0?{zero}:(({b})==-1?(-({a})):({a})/({b})))"
        return f"((({b})==0||({b})==-1)?{zero}:({a})%({b}))"

    def render_shift(self, op: Ops, a: str, b: str, d: DType) -> str:
        """a<<b / a>>b with shifts past the width (or negative) giving 0 (-1 for a negative a>>b)."""
        out_of_range = f"(({b})<0||({b})>={d.bits})"
        if op is Ops.SHL:
            # shift the unsigned pattern: a signed left shift that overflows is undefined in C
            utype = self.value_type(dtypes.uint64 if d.itemsize == 8 else dtypes.uint32)
            return f"({out_of_range}?{self.render_const(0, d)}:(({self.value_type(d)})(({utype})({a})<<({b}))))"
        fill = f"(({a})<0?{self.render_const(-1, d)}:{self.render_const(0, d)})" if not d.is_unsigned else \
            self.render_const(0, d)
        return f"({out_of_range}?{fill}:(({a})>>({b})))"

    # ---- tensor cores (the TC opt; `tinygrad.renderer.tensor_core`) ----
    def render_wmma(self, tc: TensorCore, lane: str, a: list[str], b: list[str], out: list[str]) -> list[str]:
        """The lines that run tensor core `tc` on this lane's elements of A (`a`) and B (`b`), with zero as C, and
        assign this lane's elements of the product to the (declared) variables `out`."""
        raise NotImplementedError(f"{type(self).__name__} lists no tensor cores to render")

    def render_wmma_scratch(self, tc: TensorCore) -> list[str]:
        """Declarations at the kernel's top a tensor core's lines need (none on hardware that has it)."""
        return []

    def repeats_operands(self, u: UOp) -> bool:
        """Whether u's C text names an operand more than once. Its operands then get variables: inlined they
        would be evaluated several times, and a chain (x.maximum(y).maximum(z)...) would grow exponentially."""
        if u.op in (Ops.MAX, Ops.SHL, Ops.SHR):
            return True
        if u.op in (Ops.IDIV, Ops.MOD):
            divisor = u.src[1]
            return not (u.src[0].dtype.is_float or (divisor.op is Ops.CONST and int(divisor.arg) > 0))
        return False

    def render_packed(self, u: UOp, names: dict[UOp, str]) -> list[str] | None:
        """The lines that replace u's own, for a target that renders some UOps itself (the CPU's C path computes
        a register tile's accumulators as vectors); it may name u in `names`. None: the walk renders u as usual."""
        return None

    # ---- the shared walk over the program ----
    def render(self, name: str, program: list[UOp]) -> str:
        depth_of, users = loop_depths_and_users(program)

        # inlined expressions that read memory: C evaluates only the taken arm of `c ? a : b`, so a load inside an
        # arm is a load the compiler must guard by a branch (it cannot prove the address valid either way); such
        # expressions get a variable before the WHERE, which then becomes a branch-free select
        reads_memory: set[UOp] = set()

        def inlinable(u: UOp) -> bool:
            us = users[u]
            if not ((u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST, Ops.LOAD)) and len(us) == 1
                    and depth_of[us[0]] == depth_of[u] and us[0].op is not Ops.DEFINE_ACC
                    and not self.repeats_operands(us[0]) and len(pending[u]) <= MAX_INLINE_CHARS):
                return False
            loads = u.op is Ops.LOAD or any(s in reads_memory for s in u.src)
            if loads and us[0].op is Ops.WHERE and u is not us[0].src[0]:
                return False
            if u.op is Ops.LOAD and any(s is not u and _gated_load(s) for s in us[0].src):
                # next to a gated load (a branch in C): read first, so that the load does not follow the branch's
                # merge, which kept clang 19 from vectorising a padded copy of a sum (CHANGELOG)
                return False
            if loads:
                reads_memory.add(u)
            return True

        names: dict[UOp, str] = {}
        body: list[str] = []
        params: dict[int, UOp] = {}
        counters: dict[str, int] = defaultdict(int)
        stored: set[int] = set()

        def fresh(prefix: str) -> str:
            n = counters[prefix]
            counters[prefix] += 1
            return f"{prefix}{n}"

        pending: dict[UOp, str] = {}
        local_decls: list[str] = []
        scratch_for: set[TensorCore] = set()  # tensor cores whose scratch (`render_wmma_scratch`) is declared

        address_math = _address_math(program) if self.address_var_type else set()

        def emit(u: UOp, expr: str, prefix: str) -> None:
            pending[u] = expr
            if inlinable(u):
                names[u] = expr
            else:
                names[u] = fresh(prefix)
                vtype = self.value_type(u.dtype)
                if u in address_math and self.address_var_type is not None:
                    vtype = self.address_var_type
                body.append("  " * depth_of[u] + self.render_declaration(names[u], vtype, expr))

        # where each open loop's lines start in `body` (render_loop gets them back at its END)
        loop_starts: list[int] = []

        vectors = find_vector_accesses(program, self.vector_widths, self.vector_dtypes, depth_of)
        position = {u: i for i, u in enumerate(program)} if vectors else {}
        vector_names: dict[VectorAccess, str] = {}

        def vector_index(access: VectorAccess) -> str:
            return "+".join([names[t] for t in access.terms] + [str(access.offset)])

        for u in program:
            pad = "  " * depth_of[u]
            op = u.op
            if (packed := self.render_packed(u, names)) is not None:
                body.extend(pad + line for line in packed)
                continue
            if (access := vectors.get(u)) is not None:
                buf = names[u.src[0].src[0]]
                if op is Ops.LOAD and access not in vector_names:
                    vector_names[access] = vname = fresh("vec")
                    load = self.render_vector_load(buf, vector_index(access), access.width, u.dtype)
                    body.append(pad + self.render_declaration(vname, self.vector_type(u.dtype, access.width), load))
                    for lane, m in enumerate(access.members):
                        names[m] = self.render_vector_lane(vname, lane)
                elif op is Ops.STORE:
                    stored.add(u.src[0].src[0].arg.slot)
                    if u is max(access.members, key=position.__getitem__):  # every value exists by the last
                        values = [names[m.src[1]] for m in access.members]
                        body.append(pad + self.render_vector_store(buf, vector_index(access), values, u.src[0].dtype))
                continue
            if op is Ops.PARAM:
                params[u.arg.slot] = u
                names[u] = f"data{u.arg.slot}"
            elif op is Ops.DEFINE_VAR:
                names[u] = self.render_var_ref(u.arg.name)
            elif op is Ops.RANGE:
                names[u] = fresh("ridx")
                loop = (names[u], names[u.src[0]])
                loop_starts.append(len(body))
                # an int32 counter is the default: renderers written before 64-bit loops take two arguments
                body.append(pad + (self.render_range(*loop) if u.dtype == dtypes.int32 else
                                   self.render_range(*loop, u.dtype)))
            elif op is Ops.SPECIAL:
                names[u] = u.arg.name
                body.append(pad + self.render_special(u.arg.name, u.arg.dim, u.dtype))
            elif op is Ops.IF:
                body.append(pad + self.render_if(names[u.src[0]]))
            elif op is Ops.ENDIF:
                body.append(pad + self.render_endif())
            elif op is Ops.END:
                rng = u.src[0]
                start = loop_starts.pop()
                body[start:] = self.render_loop(body[start:], rng, names[rng], names[rng.src[0]], pad)
            elif op is Ops.INDEX:
                names[u] = ""  # rendered by its LOAD or STORE
            elif op is Ops.STORE:
                idx = u.src[0]
                if idx.src[0].op is Ops.PARAM:
                    stored.add(idx.src[0].arg.slot)
                store = self.render_local_store if idx.src[0].op is Ops.DEFINE_LOCAL else self.render_store
                line = store(names[idx.src[0]], names[idx.src[1]], names[u.src[1]], idx.dtype)
                # a third source gates the store (only lane 0 of a GROUP writes the result)
                body.append(pad + (f"if ({names[u.src[2]]}) {{ {line} }}" if len(u.src) > 2 else line))
            elif op is Ops.DEFINE_LOCAL:
                names[u] = fresh("temp")
                local_decls.append(self.render_define_local(names[u], u.dtype, u.arg.size))
            elif op is Ops.BARRIER:
                body.append(pad + self.render_barrier())
            elif op is Ops.DEFINE_ACC:
                names[u] = fresh("acc")
                body.append(pad + self.render_declaration(names[u], self.value_type(u.dtype), names[u.src[0]], True))
            elif op is Ops.ASSIGN:
                body.append(f"{pad}{names[u.src[0]]} = {names[u.src[1]]};")
            elif op is Ops.WMMA:
                tc = u.arg
                names[u] = fresh("wmma")
                if tc not in scratch_for:
                    scratch_for.add(tc)
                    local_decls.extend(self.render_wmma_scratch(tc))
                values = [names[s] for s in u.src[1:]]
                outputs = [f"{names[u]}_{i}" for i in range(tc.elements[2])]
                body.append(pad + f"{self.value_type(u.dtype)} {', '.join(outputs)};")
                body.extend(pad + line for line in self.render_wmma(
                    tc, names[u.src[0]], values[:tc.elements[0]], values[tc.elements[0]:], outputs))
            elif op is Ops.GEP:
                names[u] = f"{names[u.src[0]]}_{u.arg}"
            elif (fn := self.code_for_op.get(op)) is not None:  # a value: its C text from the table
                sources = u.src[0].src if op is Ops.LOAD else u.src  # a LOAD's operands are its INDEX's
                operands = [u.arg] if op is Ops.CONST else [names[s] for s in sources]
                # ALU results also get rounded back to their dtype (render_alu)
                expr = self.render_alu(op, u.dtype, operands, u.src) if op in GroupOp.ALU else \
                    fn(self, u.dtype, u.src, *operands)
                if op is Ops.CONST:
                    names[u] = expr  # constants are always inlined
                else:
                    emit(u, expr, VAR_PREFIX.get(op, "alu"))
            else:
                raise NotImplementedError(f"{type(self).__name__} cannot render {op}")
        param_decls = [self.render_param(i, params[i].dtype, i in stored) for i in sorted(params)]
        # symbolic variables follow the buffers, sorted by name (ProgramSpec.var_names is the same order)
        variables = sorted({u.arg.name: u for u in program if u.op is Ops.DEFINE_VAR}.items())
        var_decls = [self.render_var_param(name, u.dtype) for name, u in variables]
        return self.render_source(name, program, param_decls, var_decls, local_decls, body)


def _gated_load(u: UOp) -> bool:
    return u.op is Ops.LOAD and len(u.src[0].src) > 2


def _address_math(program: list[UOp]) -> set[UOp]:
    """The int32 ALU nodes an INDEX's index is computed from."""
    indices = [u.src[1] for u in program if u.op is Ops.INDEX]
    return set(post_order(indices, skip=lambda u: u.op not in GroupOp.ALU or u.dtype != dtypes.int32))


RenderFn = Callable[..., str]
