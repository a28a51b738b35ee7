"""HIP-style C++ on top of the C-style base, compiled by clang in HIP device mode without ROCm's headers or
device libraries (`-nogpuinc -nogpulib`). So the kernels spell out what hip_runtime.h would give them:

* kernels are `extern "C" __attribute__((global))` (HIP's `__global__`) with `amdgpu_flat_work_group_size` of the
  device's largest block, since blocks are chosen after rendering and the register budget must allow it;
* work-item ids come from the amdgcn builtins (workgroup id, workgroup size, workitem id), which is what HIP's
  blockIdx/blockDim/threadIdx expand to;
* GROUP scratch arrays live in LDS (`__attribute__((shared))`), and the barrier is HIP's `__syncthreads()`
  written out: a workgroup release fence, `s_barrier`, an acquire fence (the barrier alone orders no memory);
* helpers are `__attribute__((device))`: in HIP mode an unmarked function is host code a kernel cannot call;
* math goes through clang's builtins (`__builtin_sqrtf`, ...), which lower to LLVM intrinsics the amdgcn
  backend expands itself: without ocml (-nogpulib) a call to `sqrtf` would be an unresolved symbol.

float16 is `_Float16`, native on gfx9 and gfx11, rounded back after every op by the base. bfloat16 and the 8-bit
floats are emulated as in the C-style base, their helpers made device functions.

Tensor cores: RDNA3 (gfx11) lists its wave32 WMMA and CDNA3 (gfx942) its wave64 MFMA, 16x16x16 for float16 and
bfloat16 inputs with float32 accumulation (`tinygrad.renderer.tensor_core`), written as clang's amdgcn builtins on
ext_vector_type operands (bfloat16 as its 16 bits in shorts).
"""

from __future__ import annotations

from tinygrad.dtype import DType, dtypes
from tinygrad.renderer.c_helpers import BF16_PRELUDE, FLOAT_BITS_PRELUDE
from tinygrad.renderer.cstyle import (
    CKernel,
    CStyleRenderer,
    line,
    local_array,
    tensor_core,
    work_item_id,
)
from tinygrad.renderer.tensor_core import TensorCore, cdna3_mfma, rdna3_wmma
from tinygrad.uop.ops import Ops

from tg_backend_amd.launch import BLOCK_MAX, MAX_THREADS_PER_BLOCK

#: qualifier of the helper functions a kernel calls: device code, always inlined (no call overhead on a GPU)
DEVICE_FN = "static __attribute__((device)) __attribute__((always_inline)) inline"

#: the few declarations hip_runtime.h would give: vector types (clang's ext_vector_type, as HIP defines them),
#: signbit for the base's IEEE maximum
PRELUDE = """typedef float float4 __attribute__((ext_vector_type(4)));
typedef int int4 __attribute__((ext_vector_type(4)));
typedef unsigned int uint4 __attribute__((ext_vector_type(4)));
#define signbit(x) __builtin_signbit(x)
"""

#: the gfx targets the tests compile for: CDNA3 (MI300, wave64) and RDNA3 (wave32)
TARGETS = ("gfx942", "gfx1100")

AMD_TYPES: dict[DType, str] = {**CStyleRenderer.type_names}
_VECTOR4 = {dtypes.float32: "float4", dtypes.int32: "int4", dtypes.uint32: "uint4"}
_AXES = "xyz"
#: float ops by their clang builtin (the f-suffixed form for float32 and narrower)
_BUILTINS = {Ops.SQRT: "__builtin_sqrt", Ops.EXP2: "__builtin_exp2", Ops.LOG2: "__builtin_log2",
             Ops.SIN: "__builtin_sin", Ops.TRUNC: "__builtin_trunc", Ops.MOD: "__builtin_fmod"}


def _tensor_cores(arch: str) -> tuple[TensorCore, ...]:
    if arch.startswith("gfx11"):
        return (rdna3_wmma(dtypes.float16), rdna3_wmma(dtypes.bfloat16))
    if arch in ("gfx940", "gfx941", "gfx942", "gfx950"):
        return (cdna3_mfma(dtypes.float16), cdna3_mfma(dtypes.bfloat16))
    return ()


def _work_item_id(r: AMDRenderer, name: str, dim: int, dtype: DType) -> str:
    t, a = r.value_type(dtype), _AXES[dim]
    group = f"__builtin_amdgcn_workgroup_id_{a}()"
    if dtype.itemsize == 8:  # the product can pass 2**32: multiply in 64 bits
        group = f"(({t}){group})"
    return (f"{t} {name} = ({t})({group}*__builtin_amdgcn_workgroup_size_{a}()"
            f"+__builtin_amdgcn_workitem_id_{a}());")


def _wmma_or_mfma(r: AMDRenderer, tc: TensorCore, lane: str, a: list[str], b: list[str], out: list[str]) -> list[str]:
    half = tc.dtype_in == dtypes.float16
    elem, suffix = ("_Float16", "f16") if half else ("short", "bf16")
    # bfloat16 values are floats here: their 16 bits, exact since they came from bfloat16
    frag = (lambda x: f"(_Float16)({x})") if half else (lambda x: f"(short)tg_f32_to_bf16({x})")
    na, nc = len(a), len(out)
    if tc.threads == 32:  # RDNA3's WMMA
        call = f"__builtin_amdgcn_wmma_f32_16x16x16_{suffix}_w32(tc_a, tc_b, tc_c)"
    else:  # CDNA3's MFMA; the bfloat16 form taking four values is the `_1k` one; no broadcast or swizzle
        call = f"__builtin_amdgcn_mfma_f32_16x16x16{suffix}{'' if half else '_1k'}(tc_a, tc_b, tc_c, 0, 0, 0)"
    return ["{",
            f"  typedef {elem} tg_frag __attribute__((ext_vector_type({na})));",
            f"  typedef float tg_acc __attribute__((ext_vector_type({nc})));",
            f"  tg_frag tc_a = {{{', '.join(map(frag, a))}}};",
            f"  tg_frag tc_b = {{{', '.join(map(frag, b))}}};",
            "  tg_acc tc_c = {};",
            f"  tc_c = {call};",
            *(f"  {o} = tc_c[{i}];" for i, o in enumerate(out)),
            "}"]


#: the barrier of a work-group, with the fences that make its LDS writes visible
_BARRIER = ('__builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); __builtin_amdgcn_s_barrier(); '
            '__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");')


class AMDRenderer(CStyleRenderer):
    device = "AMD"
    has_local = True
    launch_rounds_up = True
    kernel_prefix = 'extern "C" __attribute__((global)) '
    buffer_prefix = ""
    restrict = "__restrict__"
    prelude = PRELUDE
    bf16_prelude = BF16_PRELUDE.replace("static inline", DEVICE_FN)
    float_bits_prelude = FLOAT_BITS_PRELUDE.replace("static inline", DEVICE_FN)
    helper_qualifier = DEVICE_FN
    infinity, nan = "__builtin_inff()", "__builtin_nanf(\"\")"
    type_names = AMD_TYPES
    address_var_type = None  # 32-bit index math: 64-bit integer arithmetic takes several instructions
    vector_widths = (4,)
    vector_dtypes = frozenset(_VECTOR4)
    global_max = (2**31 - 1, 2**31 - 1, 2**31 - 1)
    # float64 is not claimed yet: without ROCm's device math library (ocml) clang-19 cannot lower float64 exp2, log2
    # and sin for amdgcn (it stops with "no libcall available", or crashes on fsin)
    supported_dtypes = frozenset(d for d in dtypes.all() if d != dtypes.float64)
    render_rules = {**CStyleRenderer.render_rules, Ops.SPECIAL: work_item_id(_work_item_id),
                    Ops.DEFINE_LOCAL: local_array("__attribute__((shared))"), Ops.BARRIER: line(_BARRIER),
                    Ops.WMMA: tensor_core(_wmma_or_mfma)}

    def __init__(self, arch: str = "gfx942", local_max: tuple[int, int, int] = BLOCK_MAX,
                 max_work_group_size: int = MAX_THREADS_PER_BLOCK, local_mem_max: int = 64 * 1024):
        """64 KiB is the LDS a workgroup may allocate on gfx9 (CDNA) and gfx10/11 (RDNA)."""
        self.arch = arch
        self.tensor_cores = _tensor_cores(arch)
        self.local_max, self.max_work_group_size, self.local_mem_max = local_max, max_work_group_size, local_mem_max

    def math_fn(self, op: Ops, d: DType) -> str:
        base = _BUILTINS[op]
        return base if d.scalar == dtypes.float64 else base + "f"

    @staticmethod
    def pun(x: str, frm_type: str, to_type: str) -> str:
        # C++ has no union compound literals of C's kind; clang's bit cast is the defined way
        return f"__builtin_bit_cast({to_type}, ({frm_type})({x}))"

    # ---- vector accesses: hipMalloc aligns buffers (at least 256 bytes) and `find_vector_accesses` proves the
    # index a multiple of 4, so 16-byte accesses are aligned ----
    def vector_type(self, d: DType, width: int) -> str:
        return _VECTOR4[d.scalar]

    def render_vector_load(self, k: CKernel, buf: str, idx: str, width: int, d: DType) -> str:
        return f"(*((const {self.vector_type(d, width)}*)({buf}+{idx})))"

    def render_vector_lane(self, vec: str, lane: int) -> str:
        return f"{vec}.{'xyzw'[lane]}"

    def render_vector_store(self, buf: str, idx: str, values: list[str], d: DType) -> str:
        vtype = self.vector_type(d, len(values))
        return f"*(({vtype}*)({buf}+{idx})) = {vtype}{{{', '.join(values)}}};"

    # the LDS arrays hold computed values (floats for the emulated dtypes), not bit patterns
    def render_local_load(self, k: CKernel, buf: str, idx: str, gate: str | None, d: DType) -> str:
        raw = f"{buf}[{idx}]"
        return raw if gate is None else f"({gate}?{raw}:{self.render_const(0, d)})"

    def render_local_store(self, buf: str, idx: str, value: str, d: DType) -> str:
        return f"{buf}[{idx}] = {value};"

    def render_kernel(self, name: str, params: list[str], body: list[str], uses_bf16: bool = False,
                      helpers: str = "") -> str:
        head = (f"{self.kernel_prefix}__attribute__((amdgpu_flat_work_group_size(1, {self.max_work_group_size}))) "
                f"void {name}({', '.join(params)}) {{")
        return self.prelude + (self.bf16_prelude if uses_bf16 else "") + helpers + head + "\n" + \
            "\n".join(body) + "\n}\n"


__all__ = ["AMD_TYPES", "DEVICE_FN", "TARGETS", "AMDRenderer"]
