"""CUDA C++ on top of the C-style base: `extern "C" __global__` kernels with `__launch_bounds__`, work-item ids
from blockIdx/blockDim/threadIdx, `__shared__` scratch arrays and `__syncthreads()` for GROUP reductions,
float4/int4/uint4 vector loads and stores, and CUDA's math functions (sqrtf, exp2f, ...; IEEE-exact where the
compile options make them so, see `compiler.NVRTC_OPTIONS`).

Kernels include no header: NVRTC declares the math functions, vector types and intrinsics itself, and the headers
of the half types (`cuda_fp16.h`, `cuda_bf16.h`) are in neither of the wheels this backend compiles with. So:

* float16 is held in memory as its 16 bits (`unsigned short`), converted with PTX's `cvt` (one instruction each
  way) and computed in float, rounded back to half after every op: float holds every sum, product, quotient and
  square root of halves exactly enough that this one rounding gives the correctly rounded half result, which is
  also what the GPU's half instructions compute.
* bfloat16 and the 8-bit floats are emulated as in the C-style base (bit patterns in memory, float arithmetic
  rounded back); on sm_80 and newer the bfloat16 rounding is PTX's `cvt.rn.bf16.f32`.

Tensor cores: on sm_80 and newer the renderer lists `mma.sync.aligned.m16n8k16` for float16 and bfloat16 inputs with
float32 accumulation (`tinygrad.renderer.tensor_core`), which the TC opt uses for matmul-shaped reductions; each
lane packs its fragment values into the instruction's 32-bit registers (two 16-bit values each, the lower-numbered
element in the low half) and the instruction is written as inline PTX.
"""

from __future__ import annotations

from tinygrad.dtype import DType, dtypes, is_emulated_float
from tinygrad.renderer.cstyle import (
    C_CODE_FOR_OP,
    CKernel,
    CStyleRenderer,
    c_cast,
    cast_entry,
    line,
    local_array,
    tensor_core,
    work_item_id,
)
from tinygrad.renderer.tensor_core import TensorCore, mma_m16n8k16
from tinygrad.uop.ops import GroupOp, Ops, UOp

from tg_backend_cuda.launch import BLOCK_MAX, GRID_MAX, MAX_THREADS_PER_BLOCK, flat_grid

#: qualifier of the helper functions a kernel calls
DEVICE_FN = "static __device__ __forceinline__"

#: float16 <-> float through PTX's conversions; non-volatile asm, so the compiler may reuse a result
HALF_HELPERS = f"""{DEVICE_FN} unsigned short tg_f32_to_f16(float f) {{
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}}
{DEVICE_FN} unsigned short tg_f64_to_f16(double d) {{  /* one rounding, not double -> float -> half */
  unsigned short h; asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(d)); return h;
}}
{DEVICE_FN} float tg_f16_to_f32(unsigned short h) {{
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}}
{DEVICE_FN} float tg_round_f16(float f) {{ return tg_f16_to_f32(tg_f32_to_f16(f)); }}
"""

_BF16_DECODE = f"""{DEVICE_FN} float tg_bf16_to_f32(unsigned short b) {{
  return __uint_as_float(((unsigned int)b) << 16);
}}
"""
#: bfloat16 rounding in integer arithmetic: any architecture
BF16_HELPERS_PORTABLE = _BF16_DECODE + f"""{DEVICE_FN} unsigned short tg_f32_to_bf16(float f) {{
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)0x7fc0;  /* NaN stays a quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);  /* round to nearest even */
  return (unsigned short)(u >> 16);
}}
{DEVICE_FN} float tg_round_bf16(float f) {{ return tg_bf16_to_f32(tg_f32_to_bf16(f)); }}
"""
#: bfloat16 rounding by one instruction, which sm_80 introduced
BF16_HELPERS_SM80 = _BF16_DECODE + f"""{DEVICE_FN} unsigned short tg_f32_to_bf16(float f) {{
  unsigned short h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}}
{DEVICE_FN} float tg_round_bf16(float f) {{ return tg_bf16_to_f32(tg_f32_to_bf16(f)); }}
"""
FLOAT_BITS_HELPERS = f"""{DEVICE_FN} unsigned int tg_f32_bits(float f) {{ return __float_as_uint(f); }}
{DEVICE_FN} float tg_bits_f32(unsigned int u) {{ return __uint_as_float(u); }}
"""

CUDA_TYPES: dict[DType, str] = {
    dtypes.bool: "bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
    dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int", dtypes.int64: "long long",
    dtypes.uint64: "unsigned long long", dtypes.float16: "float", dtypes.bfloat16: "float", dtypes.float32: "float",
    dtypes.float64: "double", dtypes.fp8e4m3: "float", dtypes.fp8e5m2: "float", dtypes.fp8e4m3fnuz: "float",
    dtypes.fp8e5m2fnuz: "float",
}
#: the unsigned integer type of each size, for bit casts
_UNSIGNED = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
#: CUDA's built-in vector types of 4 lanes, by element dtype
_VECTOR4 = {dtypes.float32: "float4", dtypes.int32: "int4", dtypes.uint32: "uint4"}
_AXES = "xyz"


def _is_half(d: DType) -> bool:
    return d.scalar == dtypes.float16


def thread_id(r: CUDARenderer, name: str, dim: int, dtype: DType) -> str:
    t, axis = r.value_type(dtype), _AXES[dim]
    # a 64-bit id is multiplied in 64 bits: blockIdx*blockDim is an unsigned int product
    block = f"(({t})blockIdx.{axis})" if dtype.itemsize == 8 else f"blockIdx.{axis}"
    return f"{t} {name} = ({t})({block}*blockDim.{axis}+threadIdx.{axis});"


def _mma_sync(r: CUDARenderer, tc: TensorCore, lane: str, a: list[str], b: list[str], out: list[str]) -> list[str]:
    # the fragment values are floats here (half and bfloat16 are computed in float); their 16 bits are exact
    to_bits, ptx_type = ("tg_f32_to_f16", "f16") if _is_half(tc.dtype_in) else ("tg_f32_to_bf16", "bf16")

    def pack(values: list[str]) -> list[str]:
        return [f"((unsigned int){to_bits}({lo})|((unsigned int){to_bits}({hi})<<16))"
                for lo, hi in zip(values[::2], values[1::2])]

    regs_a, regs_b = pack(a), pack(b)
    n_out, n_a, n_b = len(out), len(regs_a), len(regs_b)
    operands = iter(range(2 * n_out + n_a + n_b))

    def group(count: int) -> str:
        return "{" + ",".join(f"%{next(operands)}" for _ in range(count)) + "}"

    m, n, k = tc.dims
    instruction = (f"mma.sync.aligned.m{m}n{n}k{k}.row.col.f32.{ptx_type}.{ptx_type}.f32 "
                   f"{group(n_out)}, {group(n_a)}, {group(n_b)}, {group(n_out)};")
    outputs = ", ".join(f'"=f"({o})' for o in out)
    inputs = ", ".join([f'"r"({reg})' for reg in regs_a + regs_b] + ['"f"(0.0f)'] * n_out)
    return [f'asm volatile("{instruction}" : {outputs} : {inputs});']


def _idiv(r: CUDARenderer, d: DType, src: tuple[UOp, ...], a: str, b: str) -> str:
    if _is_half(src[0].dtype):  # truncate the quotient as rounded to half, not the float one
        return f"truncf(tg_round_f16({a}/{b}))"
    return C_CODE_FOR_OP[Ops.IDIV](r, d, src, a, b)


def _cast(r: CUDARenderer, x: str, frm: DType, to: DType) -> str:
    if _is_half(to):
        if frm.scalar == dtypes.float64:
            return f"tg_f16_to_f32(tg_f64_to_f16({x}))"
        return f"tg_round_f16((float)({x}))"
    return c_cast(r, x, frm, to)

def _to_bits(r: CUDARenderer, x: str, d: DType) -> str:
    s = d.scalar
    if s == dtypes.float32:
        return f"__float_as_uint({x})"
    if s == dtypes.float64:
        return f"((unsigned long long)__double_as_longlong({x}))"
    if s == dtypes.float16:
        return f"tg_f32_to_f16({x})"
    if is_emulated_float(s):
        return f"{r.encoder(s)}({x})"
    return f"(({_UNSIGNED[s.itemsize]})({x}))"

def _from_bits(r: CUDARenderer, bits: str, d: DType) -> str:
    s = d.scalar
    if s == dtypes.float32:
        return f"__uint_as_float((unsigned int)({bits}))"
    if s == dtypes.float64:
        return f"__longlong_as_double((long long)({bits}))"
    if s == dtypes.float16:
        return f"tg_f16_to_f32((unsigned short)({bits}))"
    if is_emulated_float(s):
        return f"{r.decoder(s)}(({r.memory_type(s)})({bits}))"
    return f"(({r.value_type(s)})({bits}))"

def bit_cast(r: CUDARenderer, x: str, frm: DType, to: DType) -> str:
    return _from_bits(r, _to_bits(r, x, frm), to)


class CUDARenderer(CStyleRenderer):
    device = "CUDA"
    has_local = True
    #: a kernel that leaves its block size open gets the runtime's (`launch.default_block`) in whole blocks
    launch_rounds_up = True
    kernel_prefix = 'extern "C" __global__ '
    buffer_prefix = ""
    restrict = "__restrict__"
    prelude = ""  # NVRTC needs no header for what the kernels use
    float_bits_prelude = FLOAT_BITS_HELPERS
    helper_qualifier = DEVICE_FN
    # no INFINITY/NAN macros without <math.h>; the bit patterns as floats (a double context converts them exactly)
    infinity, nan = "__int_as_float(0x7f800000)", "__int_as_float(0x7fc00000)"
    type_names = CUDA_TYPES
    address_var_type = None  # 32-bit index math: 64-bit integer arithmetic is several instructions on a GPU
    vector_widths = (4,)
    #: work-items per launch dimension: the range of an int32 id (the index typing widens ids past it); CUDA's grid
    #: limits are met by `launch.flat_grid`, its block limits by `local_max`
    global_max = (2**31 - 1, 2**31 - 1, 2**31 - 1)
    code_for_op = {**CStyleRenderer.code_for_op, Ops.IDIV: _idiv, Ops.CAST: cast_entry(_cast),
                   Ops.BITCAST: cast_entry(bit_cast)}
    render_rules = {**CStyleRenderer.render_rules, Ops.SPECIAL: work_item_id(thread_id),
                    Ops.DEFINE_LOCAL: local_array("__shared__"), Ops.BARRIER: line("__syncthreads();"),
                    Ops.WMMA: tensor_core(_mma_sync)}

    def __init__(self, arch: str | int = "sm_90", local_max: tuple[int, int, int] = BLOCK_MAX,
                 max_work_group_size: int = MAX_THREADS_PER_BLOCK, local_mem_max: int = 48 * 1024):
        """The defaults hold for every GPU since compute capability 2.0 (48 KiB is the static `__shared__` limit);
        the device passes the limits it reports."""
        from tg_backend_cuda.compiler import parse_arch  # the compiler module loads NVRTC only when instantiated

        self.cc = parse_arch(arch)
        self.arch = f"sm_{self.cc}"
        self.local_max, self.max_work_group_size, self.local_mem_max = local_max, max_work_group_size, local_mem_max
        self.bf16_prelude = BF16_HELPERS_SM80 if self.cc >= 80 else BF16_HELPERS_PORTABLE
        self.tensor_cores = (mma_m16n8k16(dtypes.float16), mma_m16n8k16(dtypes.bfloat16)) if self.cc >= 80 else ()

    # ---- types, constants and memory ----
    def memory_type(self, d: DType) -> str:
        return "unsigned short" if _is_half(d) else super().memory_type(d)

    def render_load(self, k: CKernel, buf: str, idx: str, gate: str | None, d: DType) -> str:
        if not _is_half(d):
            return super().render_load(k, buf, idx, gate, d)
        val = f"tg_f16_to_f32({buf}[{idx}])"
        return val if gate is None else f"({gate}?{val}:0.0f)"

    def render_store(self, buf: str, idx: str, value: str, d: DType) -> str:
        if not _is_half(d):
            return super().render_store(buf, idx, value, d)
        return f"{buf}[{idx}] = tg_f32_to_f16({value});"

    # the scratch arrays of GROUP reductions hold computed values (floats for the emulated dtypes), not bit patterns
    def render_local_load(self, k: CKernel, buf: str, idx: str, gate: str | None, d: DType) -> str:
        raw = f"{buf}[{idx}]"
        return raw if gate is None else f"({gate}?{raw}:{self.render_const(0, d)})"

    def render_local_store(self, buf: str, idx: str, value: str, d: DType) -> str:
        return f"{buf}[{idx}] = {value};"

    # ---- bit casts: through the unsigned integer of the same size (C++ has no union punning of C's kind) ----
    # ---- ALU ----
    def render_alu(self, op: Ops, d: DType, srcs: list[str], src_uops: tuple[UOp, ...]) -> str:
        expr = super().render_alu(op, d, srcs, src_uops)
        if _is_half(d) and op not in GroupOp.Comparison and op is not Ops.WHERE:
            expr = f"tg_round_f16({expr})"
        return expr

    # ---- vector accesses: CUDA's float4/int4/uint4 need 16-byte alignment, which `find_vector_accesses` proves
    # for the index and cudaMalloc gives the buffers (256 bytes; buffers never start inside another one) ----
    vector_dtypes = frozenset(_VECTOR4)

    def vector_type(self, d: DType, width: int) -> str:
        return _VECTOR4[d.scalar]

    def render_vector_load(self, k: CKernel, buf: str, idx: str, width: int, d: DType) -> str:
        return f"(*((const {self.vector_type(d, width)}*)({buf}+{idx})))"

    def render_vector_lane(self, vec: str, lane: int) -> str:
        return f"{vec}.{'xyzw'[lane]}"

    def render_vector_store(self, buf: str, idx: str, values: list[str], d: DType) -> str:
        vtype = self.vector_type(d, len(values))
        return f"*(({vtype}*)({buf}+{idx})) = make_{vtype}({', '.join(values)});"

    def flat_grid_lines(self, program: list[UOp]) -> list[str]:
        """For a launch that runs all its blocks along grid x (`launch.flat_grid`): the lines that take blockIdx.x
        apart into the block's coordinates `tg_block_x/y/z`, which the ids then read instead of blockIdx."""
        specials = {u.arg.dim: u for u in program if u.op is Ops.SPECIAL}
        sizes = [specials[d].arg.size if d in specials else 1 for d in range(3)]
        t = "unsigned long long" if any(u.dtype.itemsize == 8 for u in specials.values()) else "unsigned int"
        count = [f"(({t}){sizes[d]}+blockDim.{a}-1)/blockDim.{a}" for d, a in enumerate("xy")]
        return [f"  const {t} tg_blocks_x = {count[0]}, tg_blocks_y = {count[1]};",
                f"  const {t} tg_block_x = blockIdx.x%tg_blocks_x, tg_block_y = blockIdx.x/tg_blocks_x%tg_blocks_y,"
                f" tg_block_z = blockIdx.x/tg_blocks_x/tg_blocks_y;"]

    # ---- the kernel ----
    def render_source(self, k: CKernel, params: list[str], var_params: list[str]) -> str:
        sizes = [u.arg.size for u in sorted((u for u in k.program if u.op is Ops.SPECIAL), key=lambda u: u.arg.dim)]
        body = k.body
        if flat_grid(sizes):
            body = self.flat_grid_lines(k.program) + [
                text.replace("blockIdx.x", "tg_block_x").replace("blockIdx.y", "tg_block_y")
                .replace("blockIdx.z", "tg_block_z") for text in body]
        lines = ["  " + decl for decl in k.local_decls] + body
        helpers = (HALF_HELPERS if any(_is_half(u.dtype) for u in k.program) else "") + self.fp8_helpers(k.program)
        uses_bf16 = any(u.dtype.scalar == dtypes.bfloat16 for u in k.program)
        return self.render_kernel(k.name, params + var_params, lines, uses_bf16, helpers)

    def render_kernel(self, name: str, params: list[str], body: list[str], uses_bf16: bool = False,
                      helpers: str = "") -> str:
        # the block size is chosen after rendering (by the opts or the runtime) and never exceeds the device's
        # maximum, so that is the bound the register allocation must allow
        head = f"{self.kernel_prefix}void __launch_bounds__({self.max_work_group_size}) {name}({', '.join(params)}) {{"
        return self.prelude + (self.bf16_prelude if uses_bf16 else "") + helpers + head + "\n" + \
            "\n".join(body) + "\n}\n"


__all__ = ["CUDA_TYPES", "GRID_MAX", "HALF_HELPERS", "CUDARenderer"]
