"""The QCOM renderer without a device: which parameters become image views, how they are read, the image
argument list the compiler packs into the library, and native float16 (syntax-checked with clang's OpenCL
front end, since PoCL has no cl_khr_fp16)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("tg_backend_qcom", reason="tg-backend-qcom is not installed")

from cl_helpers import cl_alu
from tg_backend_qcom.renderer import IMAGE_ARGS_MARK, Images, QCOMRenderer, image_args, texels_for
from tinygrad.codegen import get_program
from tinygrad.conformance.render_threads import recorded_render, renders_on_threads
from tinygrad.dtype import DType, dtypes
from tinygrad.renderer.cstyle import CKernel
from tinygrad.uop.ops import Ops, UOp

FP16 = frozenset({"cl_khr_fp16", "cl_khr_fp64"})
IMAGES = frozenset({dtypes.float32, dtypes.float16})


def renderer(extensions: frozenset[str] = frozenset(), images: frozenset[DType] = IMAGES,
             max_texels: int = 1 << 20) -> QCOMRenderer:
    return QCOMRenderer(extensions, images, max_texels)


def param(i: int, d: DType, n: int) -> UOp:
    return UOp(Ops.PARAM, d, (), (i, n)).reshape((n,))


def kernel(*stores: tuple[UOp, UOp]) -> UOp:
    return UOp(Ops.SINK, dtypes.void, tuple(UOp(Ops.STORE, dtypes.void, s) for s in stores))


def src_of(ast: UOp, r: QCOMRenderer) -> str:
    return get_program(ast, r).src


def test_read_only_float_buffers_become_images_and_the_rest_stay_buffers() -> None:
    n = 10
    value = (param(1, dtypes.float32, n) * param(2, dtypes.float32, n)) + param(3, dtypes.int32, n).cast(dtypes.float32)
    src = src_of(kernel((param(0, dtypes.float32, n), value)), renderer())
    assert "read_only image1d_buffer_t data1" in src and "read_only image1d_buffer_t data2" in src
    assert "__global float* restrict data0" in src and "__global const int* restrict data3" in src
    assert "tg_image_f32(data1, " in src and "read_imagef(img, i >> 2)" in src
    assert image_args(src) == {1: "FLOAT", 2: "FLOAT"}


def test_argument_positions_follow_the_kernel_signature_not_the_param_numbers() -> None:
    n = 4  # params 0 (output), 2 (int), 5 (float): the float one is the third kernel argument
    value = param(2, dtypes.int32, n).cast(dtypes.float32) + param(5, dtypes.float32, n)
    src = src_of(kernel((param(0, dtypes.float32, n), value)), renderer())
    assert image_args(src) == {2: "FLOAT"}


def test_a_buffer_that_is_also_written_stays_a_buffer() -> None:
    n = 6
    src = src_of(kernel((param(0, dtypes.float32, n), param(0, dtypes.float32, n) + param(1, dtypes.float32, n))),
                 renderer())
    assert "__global float* restrict data0" in src and "read_only image1d_buffer_t data1" in src
    assert image_args(src) == {1: "FLOAT"}


def test_images_off_renders_the_opencl_kernel() -> None:
    n = 6
    ast = kernel((param(0, dtypes.float32, n), param(1, dtypes.float32, n) * 2.0))
    src = src_of(ast, renderer(images=frozenset()))
    assert "image1d_buffer_t" not in src and IMAGE_ARGS_MARK not in src and image_args(src) == {}
    assert "__global const float* restrict data1" in src


def test_a_buffer_wider_than_the_image_limit_stays_a_buffer() -> None:
    for n, as_image in ((8, True), (9, False)):  # 2 texels allowed: 8 elements fit, 9 need a third texel
        src = src_of(kernel((param(0, dtypes.float32, n), param(1, dtypes.float32, n) * 2.0)),
                     renderer(max_texels=2))
        assert ("image1d_buffer_t data1" in src) is as_image, n
    assert [texels_for(n) for n in (1, 4, 5, 8, 9)] == [1, 1, 2, 2, 3]


def test_gated_reads_of_an_image_give_zero_outside() -> None:
    n = 5
    padded = UOp(Ops.PARAM, dtypes.float32, (), (1, n)).reshape((n,)).pad(((2, 1),))
    src = src_of(kernel((param(0, dtypes.float32, n + 3), padded)), renderer())
    assert "?tg_image_f32(data1, " in src and ":0.0f)" in src


def test_float16_images_emulated_and_native() -> None:
    n = 7
    ast = kernel((param(0, dtypes.float16, n), param(1, dtypes.float16, n) * param(1, dtypes.float16, n)))
    emulated = src_of(ast, renderer())
    assert "inline float tg_image_f16" in emulated and "read_imagef(img" in emulated
    assert "vstore_half_rte(" in emulated and image_args(emulated) == {1: "HALF_FLOAT"}
    native = src_of(ast, renderer(FP16))
    assert "inline half tg_image_f16" in native and "half4 t = read_imageh(img" in native
    assert "#pragma OPENCL EXTENSION cl_khr_fp16 : enable" in native and "vstore_half" not in native
    assert "__global half* restrict data0" in native and image_args(native) == {1: "HALF_FLOAT"}


def test_only_the_dtypes_the_device_supports_become_images() -> None:
    n = 4
    ast = kernel((param(0, dtypes.float32, n), param(1, dtypes.float32, n) + param(2, dtypes.float16, n).cast(
        dtypes.float32)))
    src = src_of(ast, renderer(images=frozenset({dtypes.float32})))
    assert image_args(src) == {1: "FLOAT"} and "vload_half(" in src


def test_library_carries_the_image_arguments() -> None:
    pytest.importorskip("pyopencl")
    from tg_backend_qcom.compiler import QCOMLibrary

    lib = QCOMLibrary(b"\x00binary\nwith newlines\x7f", {1: "FLOAT", 3: "HALF_FLOAT"})
    assert QCOMLibrary.unpack(lib.pack()) == lib
    with pytest.raises(ValueError, match="not a QCOM library"):
        QCOMLibrary.unpack(b"\x7fELF...")


# ---- native float16: what Adreno compiles, checked here with clang's OpenCL C front end ----

CLANG = shutil.which("clang-19") or shutil.which("clang")


def clang_syntax_check(src: str, tmp_path: Path) -> None:
    if CLANG is None:
        pytest.skip("no clang to syntax-check OpenCL C (apt-get install clang-19)")
    path = tmp_path / "kernel.cl"
    path.write_text(src)
    # spir64 has every OpenCL extension (cl_khr_fp16 included) and the full OpenCL C 1.2 builtin set
    proc = subprocess.run([CLANG, "-x", "cl", "-cl-std=CL1.2", "-Xclang", "-finclude-default-header", "--target=spir64",
                           "-fsyntax-only", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, f"{proc.stderr}\n--- source ---\n{src}"


@pytest.mark.parametrize("d", [dtypes.float16, dtypes.float32], ids=lambda d: d.name)
def test_native_half_kernels_of_every_alu_op_are_valid_opencl_c(tmp_path: Path, d: DType) -> None:
    helpers = cl_alu()
    ops = helpers.BINARY["float"] + helpers.UNARY["float"]
    n = 16
    x, y = UOp(Ops.PARAM, d, (), (len(ops), n)), UOp(Ops.PARAM, d, (), (len(ops) + 1, n))
    stores = []
    for i, op in enumerate(ops):
        out_d = dtypes.bool if op in helpers.COMPARE else d
        stores.append((UOp(Ops.PARAM, out_d, (), (i, n)).reshape((n,)),
                       UOp(op, out_d, (x, y) if op in helpers.BINARY["float"] else (x,)).reshape((n,))))
    src = src_of(kernel(*stores), renderer(FP16))
    assert image_args(src) == {len(ops): "FLOAT" if d == dtypes.float32 else "HALF_FLOAT",
                               len(ops) + 1: "FLOAT" if d == dtypes.float32 else "HALF_FLOAT"}
    clang_syntax_check(src, tmp_path)


def test_native_half_casts_and_bitcasts_are_valid_opencl_c(tmp_path: Path) -> None:
    n = 8
    h = UOp(Ops.PARAM, dtypes.float16, (), (10, n))
    outs = [(dtypes.float32, h.cast(dtypes.float32)), (dtypes.float64, h.cast(dtypes.float64)),
            (dtypes.int8, h.cast(dtypes.int8)), (dtypes.uint16, h.bitcast(dtypes.uint16)),
            (dtypes.int16, h.bitcast(dtypes.int16)), (dtypes.bfloat16, h.cast(dtypes.bfloat16)),
            (dtypes.float16, UOp(Ops.PARAM, dtypes.float64, (), (11, n)).cast(dtypes.float16)),
            (dtypes.float16, UOp(Ops.PARAM, dtypes.uint16, (), (12, n)).bitcast(dtypes.float16))]
    stores = [(UOp(Ops.PARAM, d, (), (i, n)).reshape((n,)), e.reshape((n,))) for i, (d, e) in enumerate(outs)]
    src = src_of(kernel(*stores), renderer(FP16))
    assert "read_imageh" in src
    clang_syntax_check(src, tmp_path)


def test_aligned_vector_loads_of_an_image_read_whole_texels(tmp_path: Path) -> None:
    r = renderer(FP16)
    # the hooks read which buffers are images from the kernel being rendered: one planned with these two
    k = replace(CKernel.start(r, "k", []), plan=Images.of({1: dtypes.float32, 2: dtypes.float16}))
    assert r.render_vector_load(k, "data1", "x+4", 4, dtypes.float32) == "read_imagef(data1, (((int)(x+4))>>2)+0)"
    assert r.render_vector_load(k, "data2", "x", 4, dtypes.float16) == "read_imageh(data2, (((int)(x))>>2)+0)"
    eight = r.render_vector_load(k, "data1", "x", 8, dtypes.float32)
    assert eight == "((float8)(read_imagef(data1, (((int)(x))>>2)+0), read_imagef(data1, (((int)(x))>>2)+1)))"
    two = r.render_vector_load(k, "data1", "x", 2, dtypes.float32)
    assert two == "((float2)(tg_image_f32(data1, ((int)(x))+0), tg_image_f32(data1, ((int)(x))+1)))"
    assert r.render_vector_load(k, "data3", "x", 4, dtypes.float32) == "vload4(0, data3+x)"
    with pytest.raises(TypeError, match="not planned by a QCOMRenderer"):
        r.render_vector_load(replace(k, plan=None), "data1", "x", 4, dtypes.float32)


def test_a_vectorised_matmul_reads_texels(tmp_path: Path) -> None:
    n = 64
    a = UOp(Ops.PARAM, dtypes.float32, (), (1, n * n)).reshape((n, n, 1)).expand((n, n, n))
    b = UOp(Ops.PARAM, dtypes.float32, (), (2, n * n)).reshape((1, n, n)).expand((n, n, n))
    value = (a * b).reduce_axis(Ops.ADD, (1,)).reshape((n, n))
    ast = kernel((UOp(Ops.PARAM, dtypes.float32, (), (0, n * n)).reshape((n, n)), value))
    plain = src_of(ast, renderer(images=frozenset()))
    if "vload4(" not in plain:
        pytest.skip("the compiler did not vectorise this matmul's loads (no UPCAST chosen or no vector support)")
    src = src_of(ast, renderer())
    assert "vload4(0, data1" not in src and "vload4(0, data2" not in src and "= read_imagef(data" in src
    clang_syntax_check(src, tmp_path)


# ---- one renderer on several threads: which buffers are images is each kernel's plan, not renderer state ----

def _linear(ast: UOp, r: QCOMRenderer) -> tuple[str, list[UOp], str]:
    """(kernel name, the linearized program the renderer walks, its source) for `ast`."""
    return recorded_render(r, lambda: src_of(ast, r))


def test_one_renderer_renders_two_kernels_on_two_threads_at_once() -> None:
    r = renderer(FP16)
    n = 16
    # images: the float32 buffers 1 and 2 in one kernel, the float16 buffer 4 in the other (whose float32 buffer 3
    # is also written, so it stays a buffer)
    a = kernel((param(0, dtypes.float32, n), param(1, dtypes.float32, n) * param(2, dtypes.float32, n)))
    b = kernel((param(3, dtypes.float32, n), param(3, dtypes.float32, n) + param(4, dtypes.float16, n).cast(
        dtypes.float32)))
    jobs = [_linear(a, r), _linear(b, r)]
    assert image_args(jobs[0][2]) == {1: "FLOAT", 2: "FLOAT"} and image_args(jobs[1][2]) == {1: "HALF_FLOAT"}

    wrong = renders_on_threads(r, jobs)
    assert not wrong, wrong
