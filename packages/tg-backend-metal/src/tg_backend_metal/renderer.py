"""Metal Shading Language on top of the C-style base: `kernel void` functions whose buffers are `device T*` at
`[[buffer(n)]]`, symbolic variables `constant int&` at the next indices, work-items from the threadgroup position,
size and thread position, GROUP scratch arrays in `threadgroup` memory with `threadgroup_barrier`.

Metal has no float64, so the renderer does not claim it (the compiler refuses such kernels with a clear error).
float16 is `half`, rounded back after every op by the base; bfloat16 and the 8-bit floats are emulated as in the
base, with the bit helpers written with `as_type` (MSL has no memcpy). Math uses the `precise::` functions, since
Metal's default fast math would not meet the reference's accuracy.

Matrix multiply hardware: float16 (accumulated in float32) and float32 matmul-shaped reductions use
`simdgroup_matrix` 8x8 through the compiler's TC optimisation. Where a lane's elements sit inside those matrices is
not documented, so each simdgroup goes through threadgroup memory: its lanes write their fragments into an 8x8
tile there (a layout of this renderer's choosing, `tensor_core.simdgroup_8x8`), `simdgroup_load` reads the tiles,
`simdgroup_multiply_accumulate` multiplies them and `simdgroup_store` writes the product back for the lanes to read.
"""

from __future__ import annotations

from tinygrad.dtype import DType, dtypes
from tinygrad.renderer.c_helpers import BF16_PRELUDE
from tinygrad.renderer.cstyle import CKernel, CStyleRenderer, line, local_array, tensor_core, work_item_id
from tinygrad.renderer.tensor_core import TensorCore, simdgroup_8x8, tile_offset
from tinygrad.uop.ops import Ops, UOp

PRELUDE = "#include <metal_stdlib>\nusing namespace metal;\n"
_MEMCPY_TO_U = "unsigned int u; __builtin_memcpy(&u, &f, 4);"
BF16_HELPERS = (BF16_PRELUDE
                .replace("unsigned int u = ((unsigned int)b) << 16; float f; __builtin_memcpy(&f, &u, 4); return f;",
                         "return as_type<float>(((unsigned int)b) << 16);")
                .replace(_MEMCPY_TO_U, "unsigned int u = as_type<unsigned int>(f);"))
FLOAT_BITS_HELPERS = """static inline unsigned int tg_f32_bits(float f) { return as_type<unsigned int>(f); }
static inline float tg_bits_f32(unsigned int u) { return as_type<float>(u); }
"""
METAL_TYPES: dict[DType, str] = {**CStyleRenderer.type_names, dtypes.float16: "half", dtypes.int64: "long",
                                 dtypes.uint64: "ulong", dtypes.int8: "char", dtypes.uint8: "uchar",
                                 dtypes.uint16: "ushort", dtypes.uint32: "uint"}
del METAL_TYPES[dtypes.float64]
_MATH = {Ops.SQRT: "precise::sqrt", Ops.EXP2: "precise::exp2", Ops.LOG2: "precise::log2", Ops.SIN: "precise::sin",
         Ops.TRUNC: "trunc", Ops.MOD: "precise::fmod"}
_AXES = "xyz"


def _tiles(r: MetalRenderer, tc: TensorCore) -> tuple[str, str, str, int]:
    """The threadgroup arrays of each simdgroup's A, B and C tiles, and how many simdgroups a group may have."""
    i = r.tensor_cores.index(tc)
    return f"tc_a{i}", f"tc_b{i}", f"tc_c{i}", r.max_work_group_size // tc.threads


def _simdgroup_lines(r: MetalRenderer, tc: TensorCore, lane: str, a: list[str], b: list[str],
                     out: list[str]) -> list[str]:
    ta, tb, tc_, _ = _tiles(r, tc)
    t = r.value_type(tc.dtype_in)
    group = "(tg_lid.y+tg_size.y*tg_lid.z)*64"  # the lanes are launch dimension 0, 32 of them: one simdgroup
    barrier = "  simdgroup_barrier(mem_flags::mem_threadgroup);"
    return ["{", f"  threadgroup {t}* ta = {ta}+{group};", f"  threadgroup {t}* tb = {tb}+{group};",
            f"  threadgroup float* tc = {tc_}+{group};",
            *(f"  ta[{tile_offset(tc.layout_a, lane, i, 8)}] = {v};" for i, v in enumerate(a)),
            *(f"  tb[{tile_offset(tc.layout_b, lane, i, 8)}] = {v};" for i, v in enumerate(b)),
            barrier,
            f"  simdgroup_matrix<{t}, 8, 8> ma, mb;",
            "  simdgroup_float8x8 mc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);",
            "  simdgroup_load(ma, ta, 8); simdgroup_load(mb, tb, 8);",
            "  simdgroup_multiply_accumulate(mc, ma, mb, mc);",
            "  simdgroup_store(mc, tc, 8);",
            barrier,
            *(f"  {o} = tc[{tile_offset(tc.layout_c, lane, i, 8)}];" for i, o in enumerate(out)),
            "}"]


def _simdgroup_matrix(r: MetalRenderer, k: CKernel, u: UOp) -> None:
    """A WMMA through threadgroup tiles (see the module docstring), whose arrays the first use declares."""
    tc: TensorCore = u.arg
    if tc not in k.seen:
        k.seen.add(tc)
        a, b, c, groups = _tiles(r, tc)
        t = r.value_type(tc.dtype_in)
        k.local_decls.extend([f"threadgroup {t} {a}[{groups * 64}];", f"threadgroup {t} {b}[{groups * 64}];",
                              f"threadgroup float {c}[{groups * 64}];"])
    tensor_core(_simdgroup_lines)(r, k, u)


def _thread_id(r: MetalRenderer, name: str, dim: int, dtype: DType) -> str:
    t, a = r.value_type(dtype), _AXES[dim]
    group = f"(({t})tg_group.{a})" if dtype.itemsize == 8 else f"tg_group.{a}"
    return f"{t} {name} = ({t})({group}*tg_size.{a}+tg_lid.{a});"


class MetalRenderer(CStyleRenderer):
    device = "METAL"
    has_local = True
    launch_rounds_up = True
    supported_dtypes = frozenset(d for d in dtypes.all() if d != dtypes.float64)
    kernel_prefix = "kernel "
    buffer_prefix = "device "
    restrict = ""
    prelude = PRELUDE
    bf16_prelude = BF16_HELPERS
    float_bits_prelude = FLOAT_BITS_HELPERS
    infinity, nan = "INFINITY", "NAN"
    type_names = METAL_TYPES
    address_var_type = None
    # Apple GPUs: 1024 threads per threadgroup, 32 KiB of threadgroup memory
    global_max = (2**31 - 1, 2**31 - 1, 2**31 - 1)
    local_max = (1024, 1024, 1024)
    max_work_group_size = 1024
    local_mem_max = 32 * 1024

    tensor_cores = (simdgroup_8x8(dtypes.float16), simdgroup_8x8(dtypes.float32))
    render_rules = {**CStyleRenderer.render_rules, Ops.SPECIAL: work_item_id(_thread_id),
                    Ops.DEFINE_LOCAL: local_array("threadgroup"),
                    Ops.BARRIER: line("threadgroup_barrier(mem_flags::mem_threadgroup);"), Ops.WMMA: _simdgroup_matrix}

    def math_fn(self, op: Ops, d: DType) -> str:
        return _MATH[op]

    @staticmethod
    def pun(x: str, frm_type: str, to_type: str) -> str:
        return f"as_type<{to_type}>(({frm_type})({x}))"

    def render_param(self, k: CKernel, index: int, d: DType, is_output: bool) -> str:
        const = "" if is_output else "const "
        return f"device {const}{self.memory_type(d)}* data{index} [[buffer({index})]]"

    def render_local_load(self, k: CKernel, buf: str, idx: str, gate: str | None, d: DType) -> str:
        raw = f"{buf}[{idx}]"
        return raw if gate is None else f"({gate}?{raw}:{self.render_const(0, d)})"

    def render_local_store(self, buf: str, idx: str, value: str, d: DType) -> str:
        return f"{buf}[{idx}] = {value};"

    def render_source(self, k: CKernel, params: list[str], var_params: list[str]) -> str:
        # symbolic variables are bound as small constant buffers after the data buffers, in the same order
        var_decls = []
        for i, p in enumerate(var_params):
            type_name, var = p.removeprefix("const ").rsplit(" ", 1)
            var_decls.append(f"constant {type_name}& {var} [[buffer({len(params) + i})]]")
        builtins = ["uint3 tg_group [[threadgroup_position_in_grid]]", "uint3 tg_size [[threads_per_threadgroup]]",
                    "uint3 tg_lid [[thread_position_in_threadgroup]]"]
        lines = ["  " + decl for decl in k.local_decls] + k.body
        uses_bf16 = any(u.dtype.scalar == dtypes.bfloat16 for u in k.program)
        return self.render_kernel(k.name, params + var_decls + builtins, lines, uses_bf16, self.fp8_helpers(k.program))


__all__ = ["METAL_TYPES", "MetalRenderer"]
