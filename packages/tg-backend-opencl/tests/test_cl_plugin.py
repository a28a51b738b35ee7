"""Discovery, availability reasons, device selection, the renderer's output and the compiler's errors."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

import pytest

tg_backend_opencl = pytest.importorskip("tg_backend_opencl", reason="tg-backend-opencl is not installed")

from tinygrad.device import Device  # noqa: E402
from tinygrad.dtype import dtypes  # noqa: E402
from tinygrad.uop.ops import Ops, UOp  # noqa: E402


def test_plugin_module_does_not_import_pyopencl() -> None:
    code = "import sys, tg_backend_opencl; print('pyopencl' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


def test_states_its_contract_and_registers_cl() -> None:
    assert tg_backend_opencl.DEVICE_CONTRACT == "2.0"
    (info,) = tg_backend_opencl.tinygrad_backends()
    assert info.name == "CL" and info.contract_version == "2.0"


def test_check_names_missing_pyopencl(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyopencl", None)  # makes `import pyopencl` raise ImportError
    reason = tg_backend_opencl._check.__wrapped__()
    assert reason is not None and "pyopencl is not installed" in reason


def test_check_names_missing_platform(monkeypatch: pytest.MonkeyPatch) -> None:
    cl = pytest.importorskip("pyopencl")

    def no_platforms():  # type: ignore[no-untyped-def]
        raise cl.LogicError("clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR")

    monkeypatch.setattr(cl, "get_platforms", no_platforms)
    reason = tg_backend_opencl._check.__wrapped__()
    assert reason is not None and "no OpenCL platform found" in reason and "pocl-opencl-icd" in reason


def test_device_number_out_of_range_lists_the_devices(cl_device) -> None:  # type: ignore[no-untyped-def]
    from tg_backend_opencl.device import CLDevice, all_devices

    n = len(all_devices())
    with pytest.raises(RuntimeError, match=r"no OpenCL device number .*CL:0 = "):
        CLDevice(n)
    with pytest.raises(RuntimeError, match="no OpenCL device number"):
        Device[f"CL:{n}"]


def test_device_index_selects_that_device(cl_device) -> None:  # type: ignore[no-untyped-def]
    from tg_backend_opencl.device import CLDevice, all_devices

    last = len(all_devices()) - 1
    dev = CLDevice(last)
    assert dev.device.int_ptr == all_devices()[last].int_ptr
    assert dev.name == ("CL" if last == 0 else f"CL:{last}")


@dataclass
class FakePlatform:
    name: str
    vendor: str


@dataclass
class FakeDevice:
    type: int
    name: str
    platform: FakePlatform


POCL = FakePlatform("Portable Computing Language", "The pocl project")


def test_cpu_devices_are_software_and_say_what_they_are() -> None:
    cl = pytest.importorskip("pyopencl")
    cpu, gpu = int(cl.device_type.CPU), int(cl.device_type.GPU)
    assert tg_backend_opencl.software_device(FakeDevice(cpu, "pthread-znver4", POCL)) == \
        "PoCL, OpenCL on the host CPU: pthread-znver4"
    intel = FakePlatform("Intel(R) OpenCL", "Intel(R) Corporation")
    assert tg_backend_opencl.software_device(FakeDevice(cpu | int(cl.device_type.DEFAULT), "Xeon", intel)) == \
        "Xeon, an OpenCL CPU device of Intel(R) OpenCL"
    nvidia = FakePlatform("NVIDIA CUDA", "NVIDIA Corporation")
    assert tg_backend_opencl.software_device(FakeDevice(gpu, "NVIDIA H100", nvidia)) is None
    # a GPU is hardware even under a platform that also has CPU devices
    assert tg_backend_opencl.software_device(FakeDevice(gpu, "some GPU", POCL)) is None


def _first_device_or_skip():  # type: ignore[no-untyped-def]
    pytest.importorskip("pyopencl")
    if (reason := tg_backend_opencl._check()) is not None:
        pytest.skip(f"no usable OpenCL device: {reason}")
    return tg_backend_opencl.first_device()


def test_pocl_here_is_detected_as_software() -> None:
    first = _first_device_or_skip()
    if "portable computing language" not in first.platform.name.lower():
        pytest.skip(f"CL:0 is {first.name} on {first.platform.name}, not PoCL")
    from tg_backend_opencl.device import all_devices

    assert first.int_ptr == all_devices()[0].int_ptr  # the device CL opens
    assert tg_backend_opencl._software.__wrapped__() == f"PoCL, OpenCL on the host CPU: {first.name.strip()}"


def _default_in_subprocess(**env: str) -> list[str]:
    code = "from tinygrad import Device; print(Device.DEFAULT, *Device.ranking())"
    base = {k: v for k, v in os.environ.items() if k != "DEV"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**base, **env}).stdout
    return out.split()


def test_a_cpu_device_ranks_after_cpu_and_dev_still_picks_it() -> None:
    first = _first_device_or_skip()
    if tg_backend_opencl.software_device(first) is None:
        pytest.skip(f"CL:0 is {first.name}, hardware: it ranks by its priority")
    if "CPU" not in Device.backends or Device.availability("CPU") is not None:
        pytest.skip("the CPU backend is not usable here")
    default, *ranking = _default_in_subprocess()
    assert default != "CL" and ranking.index("CPU") < ranking.index("CL"), ranking
    code = ("from tinygrad import Device, Tensor; t = Tensor([1.0, 2.0]) * 3\n"
            "print(Device.DEFAULT, t.device, t.tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "DEV": "CL"}).stdout.strip()
    assert out == "CL CL [3.0, 6.0]"


def _elementwise_ast(n: int, reduce: int = 0) -> UOp:
    out = UOp(Ops.PARAM, dtypes.float32, (), (0, n)).reshape((n,))
    if reduce:
        src = UOp(Ops.PARAM, dtypes.float32, (), (1, n * reduce)).reshape((n, reduce))
        value = src.reduce_axis(Ops.ADD, (1,)).reshape((n,))
    else:
        src = UOp(Ops.PARAM, dtypes.float32, (), (1, n)).reshape((n,))
        value = UOp(Ops.SQRT, dtypes.float32, (src,)) * src
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, value)),))


def test_renderer_writes_opencl_c() -> None:
    from tg_backend_opencl.renderer import OpenCLRenderer
    from tinygrad.codegen import get_program

    spec = get_program(_elementwise_ast(37), OpenCLRenderer(frozenset({"cl_khr_fp64"})))
    src = spec.src
    assert "__kernel void" in src and "__global float* restrict data0" in src
    assert "__global const float* restrict data1" in src
    assert "int gidx0 = (int)get_global_id(0);" in src and "if ((gidx0<37)) {" in src and "for (" not in src
    assert "sqrt(" in src and "sqrtf" not in src
    assert "#pragma OPENCL EXTENSION cl_khr_fp64 : enable" in src
    # the heuristics launch work-groups of 16: the launch rounds 37 up to whole groups, the guard masks the rest
    assert spec.local_size == (16,) and spec.global_size == (48,)


def test_reduction_loop_stays_a_loop_inside_the_work_item() -> None:
    from tg_backend_opencl.renderer import OpenCLRenderer
    from tinygrad.codegen import get_program

    spec = get_program(_elementwise_ast(5, reduce=7), OpenCLRenderer())
    assert "get_global_id(0)" in spec.src and spec.src.count("for (") == 1 and spec.global_size == (5,)
    assert "if (" not in spec.src  # the driver picks a work-group size that divides 5: no work-item past the bound


def test_renderer_dtypes_follow_the_extensions() -> None:
    from tg_backend_opencl.renderer import OpenCLRenderer

    assert not OpenCLRenderer(frozenset()).supports_dtype(dtypes.float64)
    assert OpenCLRenderer(frozenset({"cl_khr_fp64"})).supports_dtype(dtypes.float64)
    assert OpenCLRenderer(frozenset()).supports_dtype(dtypes.bfloat16)
    # float16: native with cl_khr_fp16, else emulated through vload_half/vstore_half
    emulated, native = OpenCLRenderer(frozenset()), OpenCLRenderer(frozenset({"cl_khr_fp16"}))
    assert emulated.supports_dtype(dtypes.float16) and native.supports_dtype(dtypes.float16)
    n = 8
    out = UOp(Ops.PARAM, dtypes.float16, (), (0, n)).reshape((n,))
    src = UOp(Ops.PARAM, dtypes.float16, (), (1, n)).reshape((n,))
    ast = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, src * src)),))
    from tinygrad.codegen import get_program

    emulated_src = get_program(ast, emulated).src
    assert "vload_half(" in emulated_src and "vstore_half_rte(" in emulated_src and "tg_round_f16(" in emulated_src
    native_src = get_program(ast, native).src
    assert "vload_half" not in native_src and "__global half*" in native_src and "cl_khr_fp16 : enable" in native_src


def test_renderer_64_bit_literals_are_long() -> None:
    from tg_backend_opencl.renderer import OpenCLRenderer

    r = OpenCLRenderer()
    assert r.render_const(5, dtypes.int64) == "5L"
    assert r.render_const(5, dtypes.uint64) == "5UL"
    assert r.render_const(dtypes.int64.min, dtypes.int64) == f"({dtypes.int64.min + 1}L-1)"
    assert "long long" not in "".join(r.type_names.values())


def test_build_error_shows_build_log_and_source(cl_device) -> None:  # type: ignore[no-untyped-def]
    from tinygrad.errors import CompileError

    src = "__kernel void broken(__global float* x) { x[0] = undefined_name_here; }"
    with pytest.raises(CompileError) as info:
        cl_device.compiler.compile(src)
    msg = str(info.value)
    assert "build log" in msg and "undefined_name_here" in msg and src in msg
    assert cl_device.device.name in msg


def test_cache_key_names_device_and_driver(cl_device) -> None:  # type: ignore[no-untyped-def]
    key = cl_device.compiler.cache_key
    assert cl_device.device.name in key and cl_device.device.driver_version in key


def test_unsupported_dtype_error_names_dtype_device_and_alternatives(cl_device) -> None:  # type: ignore[no-untyped-def]
    from tinygrad import Tensor

    renderer = type(cl_device.renderer)
    saved = renderer.supported_dtypes
    try:  # pretend the device lacks float32
        renderer.supported_dtypes = frozenset(d for d in dtypes.all() if d != dtypes.float32)
        with pytest.raises(TypeError, match=r"device CL cannot hold float32; it supports \[.*int32"):
            Tensor([1.0, 2.0], dtype=dtypes.float32, device="CL")
    finally:
        renderer.supported_dtypes = saved


def test_disassembly_is_the_binary_where_it_is_text_else_says_what_it_is(cl_device) -> None:  # type: ignore[no-untyped-def]
    compiler = cl_device.compiler
    ptx = b".version 7.0\n.target sm_80\n.entry E_4()\n{\n\tret;\n}\n\0"  # NVIDIA's binary: PTX text
    assert compiler.disassemble(ptx, "") == ptx.rstrip(b"\0").decode()
    src = "__kernel void twice(__global float* a) { a[get_global_id(0)] *= 2.0f; }"
    lib = compiler.compile(src)
    asm = compiler.disassemble(lib, src)
    assert asm is not None and asm.strip()
    if "gives no assembly" in asm:
        assert f"{len(lib)} bytes" in asm
