"""OpenCL C on top of the C-style base: `__kernel`/`__global`, OpenCL's type names, overloaded math
functions (no f suffix), `as_<type>` for bit casts, work-item ids from `get_global_id` (up to three launch
dimensions, see `tinygrad.codegen.work_items`), `__local` scratch arrays and barriers for GROUP reductions.

Which dtypes exist depends on the device: float64 needs `cl_khr_fp64`. float16 without `cl_khr_fp16` (PoCL
here) is emulated: buffers hold half, read and written with vload_half/vstore_half_rte, and values are
computed in float and rounded to half after every op.
bfloat16 and the 8-bit floats (fp8e4m3, fp8e5m2) are emulated as in the C renderer (16- and 8-bit patterns in
memory, float arithmetic rounded back).
bool cannot be a `__global` buffer element in OpenCL C, so bool buffers hold uchar 0/1.
"""

from __future__ import annotations

from tinygrad.dtype import DType, dtypes, is_emulated_float
from tinygrad.renderer.cstyle import C_CODE_FOR_OP, CKernel, CStyleRenderer, c_cast, cast_entry, line, local_array
from tinygrad.uop.ops import Ops, UOp

CL_BF16_PRELUDE = """inline float tg_bf16_to_f32(ushort b) { return as_float(((uint)b) << 16); }
inline ushort tg_f32_to_bf16(float f) {
  uint u = as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)0x7fc0;  /* NaN stays a quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);  /* round to nearest even */
  return (ushort)(u >> 16);
}
inline float tg_round_bf16(float f) { return tg_bf16_to_f32(tg_f32_to_bf16(f)); }
"""

#: float16 without cl_khr_fp16: half is a storage format only, values live in float and are rounded to half
#: after every op (float holds every sum, product and quotient of halves before that one rounding)
HALF_PRELUDE = """inline ushort tg_f16_bits(float f) {
  if (isnan(f)) return signbit(f) ? (ushort)0xfe00 : (ushort)0x7e00;  /* the quiet NaN, whatever the payload */
  ushort h; vstore_half_rte(f, 0, (half*)&h); return h;
}
inline float tg_f16_from_bits(ushort h) { return vload_half(0, (half*)&h); }
inline float tg_round_f16(float f) { return tg_f16_from_bits(tg_f16_bits(f)); }
"""
CL_FLOAT_BITS_PRELUDE = """inline uint tg_f32_bits(float f) { return as_uint(f); }
inline float tg_bits_f32(uint u) { return as_float(u); }
"""
HALF_FROM_DOUBLE = """inline float tg_f64_to_f16(double d) {
  ushort h; vstore_half_rte(d, 0, (half*)&h); return tg_f16_from_bits(h);
}
"""

CL_TYPES: dict[DType, str] = {
    dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.int16: "short",
    dtypes.uint16: "ushort", dtypes.int32: "int", dtypes.uint32: "uint", dtypes.int64: "long",
    dtypes.uint64: "ulong", dtypes.float16: "half", dtypes.bfloat16: "float", dtypes.float32: "float",
    dtypes.float64: "double", dtypes.fp8e4m3: "float", dtypes.fp8e5m2: "float", dtypes.fp8e4m3fnuz: "float",
    dtypes.fp8e5m2fnuz: "float",
}


def _idiv(r: OpenCLRenderer, d: DType, src: tuple[UOp, ...], a: str, b: str) -> str:
    if r.emulate_half and src[0].dtype.scalar == dtypes.float16:  # truncate the quotient as rounded to half
        return f"trunc(tg_round_f16({a}/{b}))"
    return C_CODE_FOR_OP[Ops.IDIV](r, d, src, a, b)


def _cast(r: OpenCLRenderer, x: str, frm: DType, to: DType) -> str:
    if r._half(to):
        if frm.scalar == dtypes.float64:  # one rounding, not double -> float -> half
            return f"tg_f64_to_f16({x})"
        return f"tg_round_f16((float)({x}))"
    return c_cast(r, x, frm, to)

def _bitcast(r: OpenCLRenderer, x: str, frm: DType, to: DType) -> str:
    # `as_<type>` needs an operand of exactly the size: C's integer promotion makes `c ? short : short` an int
    own = x if frm.scalar.itemsize >= 4 or frm.scalar == dtypes.bool or is_emulated_float(frm) or r._half(frm) \
        else f"(({r.value_type(frm)})({x}))"
    if r._half(frm):
        bits = f"tg_f16_bits({x})"
        return f"tg_bf16_to_f32({bits})" if to.scalar == dtypes.bfloat16 else f"as_{r.value_type(to)}({bits})"
    if r._half(to):
        bits = f"tg_f32_to_bf16({x})" if frm.scalar == dtypes.bfloat16 else f"as_ushort({own})"
        return f"tg_f16_from_bits({bits})"
    if is_emulated_float(frm) and is_emulated_float(to):
        return f"{r.decoder(to)}({r.encoder(frm)}({x}))"
    if is_emulated_float(frm):
        return f"as_{r.value_type(to)}({r.encoder(frm)}({x}))"
    if is_emulated_float(to):
        return f"{r.decoder(to)}(as_{r.memory_type(to)}({own}))"
    if frm.scalar == dtypes.bool or to.scalar == dtypes.bool:
        return f"(({r.value_type(to)})({x}))"  # bool has no defined size in OpenCL C: 0/1 either way
    return f"as_{r.value_type(to)}({own})"


class OpenCLRenderer(CStyleRenderer):
    device = "CL"
    has_local = True
    kernel_prefix = "__kernel "
    buffer_prefix = "__global "
    restrict = "restrict"
    bf16_prelude = CL_BF16_PRELUDE
    float_bits_prelude = CL_FLOAT_BITS_PRELUDE
    helper_qualifier = "inline"
    type_names = CL_TYPES
    address_var_type = None  # 32-bit index math: 64-bit integers are slow on GPUs
    code_for_op = {**CStyleRenderer.code_for_op, Ops.IDIV: _idiv, Ops.CAST: cast_entry(_cast),
                   Ops.BITCAST: cast_entry(_bitcast)}
    # GROUP reductions' scratch arrays and barriers (work-item ids are the base's get_global_id)
    render_rules = {**CStyleRenderer.render_rules, Ops.DEFINE_LOCAL: local_array("__local"),
                    Ops.BARRIER: line("barrier(CLK_LOCAL_MEM_FENCE);")}

    def __init__(self, extensions: frozenset[str] = frozenset(), local_max: tuple[int, ...] = (256, 256, 256),
                 max_work_group_size: int = 256, local_mem_max: int = 16384):
        """The defaults are OpenCL 1.2's guaranteed minimums; the device passes its own limits."""
        self.extensions = extensions
        self.local_max, self.max_work_group_size, self.local_mem_max = local_max, max_work_group_size, local_mem_max
        #: without cl_khr_fp16, float16 is stored as half (vload_half/vstore_half) and computed in float
        self.emulate_half = "cl_khr_fp16" not in extensions
        self.lacks = frozenset() if "cl_khr_fp64" in extensions else frozenset({dtypes.float64})
        pragmas = [f"#pragma OPENCL EXTENSION {ext} : enable\n" for ext in ("cl_khr_fp16", "cl_khr_fp64")
                   if ext in extensions]
        self.prelude = "".join(pragmas)

    def supports_dtype(self, dtype: DType) -> bool:
        # the class's supported_dtypes still applies (a subclass or a test may narrow it); the device's
        # extensions narrow it further
        return super().supports_dtype(dtype) and dtype.scalar not in self.lacks

    def value_type(self, d: DType) -> str:
        return "float" if d.scalar == dtypes.float16 and self.emulate_half else super().value_type(d)

    def render(self, name: str, program: list[UOp]) -> str:
        src = super().render(name, program)
        if self.emulate_half and any(u.dtype.scalar == dtypes.float16 for u in program):
            helpers = HALF_PRELUDE + (HALF_FROM_DOUBLE if "cl_khr_fp64" in self.extensions else "")
            src = self.prelude + helpers + src[len(self.prelude):]
        return src

    # ---- types and constants ----
    def memory_type(self, d: DType) -> str:
        if d.scalar == dtypes.bool:
            return "uchar"
        if d.scalar == dtypes.float16:
            return "half"
        return super().memory_type(d)

    def _half(self, d: DType) -> bool:
        return self.emulate_half and d.scalar == dtypes.float16

    def render_load(self, k: CKernel, buf: str, idx: str, gate: str | None, d: DType) -> str:
        if not self._half(d):
            return super().render_load(k, buf, idx, gate, d)
        val = f"vload_half({idx}, {buf})"
        return val if gate is None else f"({gate}?{val}:0.0f)"

    def render_store(self, buf: str, idx: str, value: str, d: DType) -> str:
        if not self._half(d):
            return super().render_store(buf, idx, value, d)
        return f"vstore_half_rte({value}, {idx}, {buf});"

    def render_alu(self, op: Ops, d: DType, srcs: list[str], src_uops: tuple[UOp, ...]) -> str:
        expr = super().render_alu(op, d, srcs, src_uops)
        if self._half(d) and op not in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.WHERE):
            expr = f"tg_round_f16({expr})"
        return expr

    def render_const(self, value: float | int | bool, d: DType) -> str:
        if d.is_int and d.itemsize == 8:  # OpenCL's 64-bit literals are L/UL (there is no long long)
            iv = int(value)
            if d.is_unsigned:
                return f"{iv}UL"
            return f"({iv + 1}L-1)" if iv == d.min else f"{iv}L" if iv >= 0 else f"({iv}L)"  # not `a--8L`
        return super().render_const(value, d)

    def math_fn(self, op: Ops, d: DType) -> str:
        return self.math_fns[op]  # OpenCL overloads the math functions by argument type

    # ---- vector loads and stores: vloadn/vstoren need only element alignment; offsets are multiples of 4 ----
    vector_widths = (4,)

    def vector_type(self, d: DType, width: int) -> str:
        return f"{self.value_type(d)}{width}"

    def render_vector_load(self, k: CKernel, buf: str, idx: str, width: int, d: DType) -> str:
        return f"vload{width}(0, {buf}+{idx})"

    def render_vector_lane(self, vec: str, lane: int) -> str:
        return f"{vec}.s{lane:x}"

    def render_vector_store(self, buf: str, idx: str, values: list[str], d: DType) -> str:
        vec = f"({self.vector_type(d, len(values))})({', '.join(values)})"
        return f"vstore{len(values)}({vec}, 0, {buf}+{idx});"
