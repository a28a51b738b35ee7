"""What the CUDA renderer writes for simple kernels (elementwise, reduction, a GROUP reduction in shared memory,
half and bfloat16, vector accesses, a launch past the grid's y limit), and what NVRTC makes of it: PTX for the
requested architecture, errors that carry NVRTC's log and the source, SASS in cubin mode."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("tg_backend_cuda", reason="tg-backend-cuda is not installed")

from tg_backend_cuda.renderer import CUDARenderer, bit_cast, thread_id
from tinygrad import Tensor
from tinygrad.codegen import ProgramSpec, get_program
from tinygrad.dtype import DType, dtypes
from tinygrad.errors import CompileError

R = CUDARenderer("sm_90")


def programs(*outs: Tensor, renderer: CUDARenderer = R) -> list[ProgramSpec]:
    """The kernels of a Tensor expression as the CUDA renderer writes them. Scheduled on the CPU device, which only
    holds the (never filled) inputs: the kernels of these expressions do not depend on the device."""
    return [get_program(si.ast, renderer) for si in Tensor.schedule(*outs) if not si.is_copy]


def one_program(*outs: Tensor, renderer: CUDARenderer = R) -> ProgramSpec:
    (spec,) = programs(*outs, renderer=renderer)
    return spec


def cpu(*shape: int, dtype=dtypes.float32) -> Tensor:  # type: ignore[no-untyped-def]
    return Tensor.empty(*shape, dtype=dtype, device="CPU")


def test_elementwise_add_is_a_global_kernel_over_work_items() -> None:
    spec = one_program(cpu(1000) + cpu(1000))
    src = spec.src
    assert f'extern "C" __global__ void __launch_bounds__(1024) {spec.name}(' in src
    assert "float* __restrict__ data0, const float* __restrict__ data1, const float* __restrict__ data2" in src
    assert "int gidx0 = (int)(blockIdx.x*blockDim.x+threadIdx.x);" in src
    assert "data0[gidx0] = (data1[gidx0]+data2[gidx0]);" in src.replace("data2[gidx0]+data1[gidx0]",
                                                                          "data1[gidx0]+data2[gidx0]")
    assert "#include" not in src  # NVRTC needs no header for what kernels use
    assert spec.global_size is not None and math.prod(spec.global_size) >= 1000


def test_reduction_accumulates_in_a_loop() -> None:
    spec = one_program(cpu(16, 100).sum(1))
    assert "float acc0 = 0.0f;" in spec.src
    assert "for (int ridx0 = 0; ridx0 < 100; ridx0++) {" in spec.src
    assert "acc0 = (acc0+" in spec.src


def test_grouped_reduction_uses_shared_memory_and_a_barrier() -> None:
    spec = one_program(cpu(8, 8192).sum(1))  # few outputs over a long axis: the heuristics GROUP it
    assert spec.local_size is not None and spec.local_size[0] > 1, spec.applied_opts
    assert f"__shared__ float temp0[{spec.local_size[0]}];" in spec.src
    assert "__syncthreads();" in spec.src
    assert "if ((gidx0==0)) { data0[" in spec.src  # one lane stores the work-group's result


def test_float16_is_stored_as_bits_and_rounded_after_every_op() -> None:
    src = one_program(cpu(64, dtype=dtypes.float16) * cpu(64, dtype=dtypes.float16) + 1).src
    assert "unsigned short* __restrict__ data0" in src
    assert 'asm("cvt.rn.f16.f32 %0, %1;"' in src and 'asm("cvt.f32.f16 %0, %1;"' in src
    assert "tg_round_f16(" in src and "tg_f16_to_f32(data1[" in src and "= tg_f32_to_f16(" in src
    assert "cuda_fp16.h" not in src


def test_bfloat16_rounds_with_one_instruction_from_sm80() -> None:
    x = cpu(64, dtype=dtypes.bfloat16).exp()
    assert 'asm("cvt.rn.bf16.f32' in one_program(x, renderer=CUDARenderer("sm_80")).src
    old = one_program(x, renderer=CUDARenderer("sm_75")).src
    assert "cvt.rn.bf16" not in old and "round to nearest even" in old


def test_matmul_loads_and_stores_float4() -> None:
    (spec,) = [p for p in programs(cpu(64, 64) @ cpu(64, 64)) if p.name.startswith("r_")]
    assert "float4 vec0 = (*((const float4*)(data" in spec.src
    assert "make_float4(" in spec.src and ".w" in spec.src


def test_a_launch_past_65535_along_y_runs_its_blocks_along_x() -> None:
    spec = one_program(cpu(3, 70000, 2) + 1)
    assert spec.global_size == (2, 70000, 3)
    assert "tg_block_y = blockIdx.x/tg_blocks_x%tg_blocks_y" in spec.src
    assert "blockIdx.y" not in spec.src and "blockIdx.z" not in spec.src
    assert "tg_block_x" not in one_program(cpu(3, 600, 2) + 1).src


def test_64_bit_work_item_ids_multiply_in_64_bits() -> None:
    line = thread_id(R, "gidx0", 0, dtypes.int64)
    assert line == "long long gidx0 = (long long)(((long long)blockIdx.x)*blockDim.x+threadIdx.x);"


def test_constants_and_bit_casts_need_no_libm_macros() -> None:
    assert R.render_const(math.inf, dtypes.float32) == "__int_as_float(0x7f800000)"
    assert R.render_const(-math.inf, dtypes.float64) == "(-__int_as_float(0x7f800000))"
    assert R.render_const(math.nan, dtypes.float32) == "__int_as_float(0x7fc00000)"
    assert bit_cast(R, "x", dtypes.float32, dtypes.int32) == "((int)(__float_as_uint(x)))"
    assert bit_cast(R, "x", dtypes.int64, dtypes.float64) == \
        "__longlong_as_double((long long)(((unsigned long long)(x))))"


def test_limits_are_declared_for_the_compiler() -> None:
    r = CUDARenderer("sm_90", local_max=(1024, 1024, 64), max_work_group_size=1024, local_mem_max=49152)
    assert r.has_local and r.launch_rounds_up
    assert (r.local_max, r.max_work_group_size, r.local_mem_max) == ((1024, 1024, 64), 1024, 49152)
    assert r.global_max == (2**31 - 1,) * 3
    assert all(r.supports_dtype(d) for d in dtypes.all())


# ---- NVRTC ----

def test_ptx_targets_the_requested_architecture(nvrtc_tools: str) -> None:
    from tg_backend_cuda.compiler import CUDACompiler
    from tg_backend_cuda.nvrtc import assemble_ptx

    src = one_program(cpu(1000) * 2).src
    for arch in ("sm_80", "sm_90"):
        ptx = CUDACompiler(arch).compile(src).decode()
        assert f".target {arch}" in ptx and ".visible .entry E_1000(" in ptx
        ok, msg = assemble_ptx(ptx.encode(), arch, nvrtc_tools)
        assert ok, msg
    assert CUDACompiler("sm_80").cache_key != CUDACompiler("sm_90").cache_key


def test_a_kernel_that_does_not_compile_raises_with_the_log_and_the_source(nvrtc_tools: str) -> None:
    from tg_backend_cuda.compiler import CUDACompiler

    src = 'extern "C" __global__ void broken(float* x) { x[0] = undefined_name; }'
    with pytest.raises(CompileError, match="undefined_name") as info:
        CUDACompiler("sm_90").compile(src)
    assert "--- NVRTC log ---" in str(info.value) and "--- source ---" in str(info.value)
    assert "identifier \"undefined_name\" is undefined" in str(info.value)


def test_cubin_mode_gives_sass_and_shows_ptx(nvrtc_tools: str) -> None:
    from tg_backend_cuda.compiler import CUDACompiler

    src = one_program(cpu(10) + 1).src
    compiler = CUDACompiler(90, cubin=True)
    lib = compiler.compile(src)
    assert lib.startswith(b"\x7fELF")
    asm = compiler.disassemble(lib, src)
    assert asm is not None and ".target sm_90" in asm


def test_architectures_are_parsed_and_checked(nvrtc_tools: str) -> None:
    from tg_backend_cuda.compiler import CUDACompiler, parse_arch

    assert parse_arch("sm_90") == parse_arch("compute_90") == parse_arch("90a") == parse_arch(90) == 90
    with pytest.raises(ValueError, match="not a CUDA architecture"):
        parse_arch("hopper")
    with pytest.raises(CompileError, match="cannot compile for sm_11"):
        CUDACompiler("sm_11")


# ---- tensor cores: the TC opt's kernels through NVRTC and ptxas (whether they compute right: on a GPU, and on an
# emulation of the same layouts in tg-backend-opencl's test_tensor_core_emulation.py) ----

def _tc_kernels(dtype: DType) -> list[Tensor]:
    a, b = Tensor.empty(128, 64, dtype=dtype), Tensor.empty(64, 96, dtype=dtype)
    x, w = Tensor.empty(2, 32, 18, 18, dtype=dtype), Tensor.empty(16, 32, 3, 3, dtype=dtype)
    return [a.dot(b, dtype=dtypes.float32), a @ b, (Tensor.empty(4, 32, 48, dtype=dtype) @
                                                  Tensor.empty(4, 48, 16, dtype=dtype)).relu(),
            x.conv2d(w, dtype=dtypes.float32),
            # a B past the L2 knob is packed into panels first (mixin/linalg.py): in its own dtype, so still TC
            Tensor.empty(64, 512, dtype=dtype) @ Tensor.empty(512, 2048, dtype=dtype)]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16], ids=["f16", "bf16"])
def test_tensor_core_kernels_assemble(nvrtc_tools: str, arch: str, dtype: DType) -> None:
    """Matmuls, a batched one with an epilogue and a convolution of float16/bfloat16 get the TC opt from the
    heuristics on sm_80 and newer; their PTX has the mma instruction and assembles, and NVRTC builds the cubin."""
    from tg_backend_cuda.compiler import CUDACompiler
    from tg_backend_cuda.nvrtc import assemble_ptx

    renderer = CUDARenderer(arch)
    ptx_type = "f16" if dtype == dtypes.float16 else "bf16"
    for out in _tc_kernels(dtype):
        si = out.schedule()[-1]  # the product (after the panel copy, where there is one)
        spec = get_program(si.ast, renderer)
        assert spec.applied_opts[0] == f"TC(0,{0 if dtype == dtypes.float16 else 1})", spec.applied_opts
        assert spec.local_size is not None and spec.local_size[0] == 32  # a warp's lanes are launch dimension 0
        ptx = CUDACompiler(arch).compile(spec.src).decode()
        assert f"mma.sync.aligned.m16n8k16.row.col.f32.{ptx_type}.{ptx_type}.f32" in ptx
        ok, msg = assemble_ptx(ptx.encode(), arch, nvrtc_tools)
        assert ok, msg
        CUDACompiler(arch, cubin=True).compile(spec.src)


def test_no_tensor_cores_before_sm_80() -> None:
    """mma.m16n8k16 is sm_80's: older targets list no tensor core, and their float16 matmuls are plain loops."""
    renderer = CUDARenderer("sm_75")
    assert renderer.tensor_cores == ()
    (si,) = _tc_kernels(dtypes.float16)[0].schedule()
    assert not any(o.startswith("TC") for o in get_program(si.ast, renderer).applied_opts)
