"""Work-groups on WEBGPU: GROUP reductions through workgroup memory past lavapipe's loop cap, the work-group
shape a launch uses (the kernel's own, or the runtime's pick) and the device limits it respects, innermost
loops unrolled in the source where a reduction cannot be grouped, and float -> uint64 casts past 2^63."""

from __future__ import annotations

import numpy as np
import pytest
from tinygrad.device import Buffer
from tinygrad.dtype import dtypes
from tinygrad.uop.ops import Ops, UOp


@pytest.fixture
def Tensor(webgpu_device):  # type: ignore[no-untyped-def]
    from tinygrad import Tensor

    return Tensor


@pytest.fixture
def whole_reductions():  # type: ignore[no-untyped-def]
    """The scheduler splits big reductions to few outputs into chunks (tinygrad/engine/split_reduce.py); these tests
    check what the WGSL target does with a reduction that still runs long in one kernel (GROUP, unrolled loops), so
    they reduce whole."""
    from tinygrad.helpers import Context

    with Context(SPLIT_REDUCE=0):
        yield


def _new_runners(device, before: set):  # type: ignore[no-untyped-def]
    return [r for ast, r in device._runners.items() if ast not in before]


def _sum_rows_ast(rows: int, n: int, dtype=dtypes.float32) -> UOp:  # type: ignore[no-untyped-def]
    out = UOp(Ops.PARAM, dtype, (), (0, rows)).reshape((rows,))
    x = UOp(Ops.PARAM, dtype, (), (1, rows * n)).reshape((rows, n))
    total = x.reduce_axis(Ops.ADD, (1,)).reshape((rows,))
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, total)),))


def test_a_big_reduction_to_few_outputs_is_grouped_and_exact(Tensor, webgpu_device, whole_reductions) -> None:  # type: ignore[no-untyped-def]
    n = 1_000_003  # 15x lavapipe's loop cap in one invocation; prime, so the last lane's share is partial
    data = np.random.default_rng(0).integers(-3, 4, n).astype(np.float32)
    before = set(webgpu_device._runners)
    got = Tensor(data, device="WEBGPU").sum().item()
    assert got == float(data.astype(np.int64).sum())  # small integers: exact in any order
    (runner,) = _new_runners(webgpu_device, before)
    assert any(o.startswith("GROUP") for o in runner.spec.applied_opts)
    src = runner.spec.src
    assert "var<workgroup> temp0: array<f32, 256>;" in src and "workgroupBarrier();" in src
    # the barrier is reached in uniform control flow: no guard on the invocation's index encloses it
    assert "if ((gidx0 <" not in src


@pytest.mark.parametrize("shape,axis", [((3, 65537), 1), ((65537, 3), 0), ((2, 3, 70001), 2)])
def test_grouped_sums_along_an_axis_match_numpy(Tensor, webgpu_device, shape, axis, whole_reductions) -> None:  # type: ignore[no-untyped-def]
    data = np.random.default_rng(1).integers(-1000, 1000, shape).astype(np.int32)
    before = set(webgpu_device._runners)
    # an int32 sum (not PyTorch's int64 default): it runs on adapters without shader-int64 too (wgpu's OpenGL)
    got = Tensor(data, device="WEBGPU").sum(axis, dtype=dtypes.int32).numpy()
    np.testing.assert_array_equal(got, data.sum(axis, dtype=np.int32))
    assert any(any(o.startswith("GROUP") for o in r.spec.applied_opts) for r in _new_runners(webgpu_device, before))
    floats = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(Tensor(floats, device="WEBGPU").max(axis).numpy(), floats.max(axis))


def test_a_grouped_launch_uses_the_kernels_work_group_size(webgpu_device) -> None:  # type: ignore[no-untyped-def]
    runner = webgpu_device.get_runner(_sum_rows_ast(2, 100_000))
    assert runner.spec.applied_opts == ("GROUP(1,256)",)  # axis 1: the reduce axis
    # dimension 0 is the group's lane (256 invocations), dimension 1 the two outputs: one workgroup each
    assert runner.local_size == (256, 1) and runner.global_size == (256, 2)
    data = np.random.default_rng(3).integers(0, 5, 200_000).astype(np.float32)
    bufs = [Buffer("WEBGPU", 2, dtypes.float32), Buffer("WEBGPU", 200_000, dtypes.float32)]
    bufs[1].copyin(memoryview(data).cast("B"))
    runner(bufs, {})
    np.testing.assert_array_equal(bufs[0].numpy(), data.reshape(2, -1).astype(np.int64).sum(1))
    # the pipeline was made for that shape: its override constants set the workgroup size
    assert [key[2] for key in runner.program._pipelines] == [(256, 1)]


def test_local_opts_set_the_work_group_shape(webgpu_device) -> None:  # type: ignore[no-untyped-def]
    from tinygrad.codegen import get_program
    from tinygrad.codegen.opt import Opt, OptOps
    from tinygrad.runtime.runner import CompiledRunner

    rows, cols = 37, 1000  # neither a multiple of its local size: partial workgroups at both edges
    out = UOp(Ops.PARAM, dtypes.int32, (), (0, rows * cols)).reshape((rows, cols))
    src = UOp(Ops.PARAM, dtypes.int32, (), (1, rows * cols)).reshape((rows, cols))
    ast = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, src * 3 + 1)),))
    spec = get_program(ast, webgpu_device.renderer, (Opt(OptOps.LOCAL, 1, 32), Opt(OptOps.LOCAL, 0, 4)))
    assert spec.local_size == (32, 4) and spec.global_size == (1024, 40)
    runner = CompiledRunner(webgpu_device, spec, webgpu_device.compiler.compile(spec.src))
    data = np.arange(rows * cols, dtype=np.int32)
    bufs = [Buffer("WEBGPU", rows * cols, dtypes.int32), Buffer("WEBGPU", rows * cols, dtypes.int32)]
    bufs[1].copyin(memoryview(data).cast("B"))
    runner(bufs, {})
    np.testing.assert_array_equal(bufs[0].numpy(), data * 3 + 1)
    assert [key[2] for key in runner.program._pipelines] == [(32, 4)]


def test_a_grouped_reduction_of_a_packed_dtype_keeps_its_scratch_unpacked(webgpu_device) -> None:  # type: ignore[no-untyped-def]
    """int16 buffers hold two elements per word; the GROUP scratch holds i32 values, read and written directly."""
    from tinygrad.codegen import get_program
    from tinygrad.codegen.opt import Opt, OptOps
    from tinygrad.runtime.runner import CompiledRunner

    rows, n = 3, 1000
    spec = get_program(_sum_rows_ast(rows, n, dtypes.int16), webgpu_device.renderer, (Opt(OptOps.GROUP, 1, 16),))
    assert "var<workgroup> temp0: array<i32, 16>;" in spec.src and "atomicOr(&data0[" in spec.src
    runner = CompiledRunner(webgpu_device, spec, webgpu_device.compiler.compile(spec.src))
    data = np.random.default_rng(5).integers(-2**15, 2**15, rows * n).astype(np.int16)
    bufs = [Buffer("WEBGPU", rows, dtypes.int16), Buffer("WEBGPU", rows * n, dtypes.int16)]
    bufs[1].copyin(memoryview(data).cast("B"))
    runner(bufs, {})
    # the sums wrap to int16, as the reference's
    np.testing.assert_array_equal(bufs[0].numpy(), data.reshape(rows, n).sum(1, dtype=np.int16))


def test_the_runtime_picks_a_shape_when_the_kernel_leaves_it(webgpu_device) -> None:  # type: ignore[no-untyped-def]
    from tg_backend_webgpu.device import default_local_size
    from tg_backend_webgpu.renderer import DEFAULT_WORKGROUP_SIZE

    assert default_local_size((100_000,)) == (DEFAULT_WORKGROUP_SIZE,)
    assert default_local_size((3, 100_000)) == (3, 21)  # a short inner axis leaves the rest to the next one
    assert default_local_size((1, 5)) == (1, 5)
    assert webgpu_device.work_group((3, 100_000), None, "k") == (3, 21)


def test_work_groups_respect_the_device_limits(webgpu_device) -> None:  # type: ignore[no-untyped-def]
    limits = webgpu_device.device.limits
    most = min(limits["max-compute-invocations-per-workgroup"], limits["max-compute-workgroup-size-x"])
    renderer = webgpu_device.renderer
    assert renderer.max_work_group_size == most and set(renderer.local_max) == {most}
    assert renderer.local_mem_max == limits["max-compute-workgroup-storage-size"]
    with pytest.raises(RuntimeError, match=f"exceeds this device's {most}"):
        webgpu_device.work_group((2 * most,), (2 * most,), "too_big")
    assert webgpu_device.work_group((2 * most,), (most,), "fits") == (most,)


def test_group_sizes_follow_the_renderers_limits() -> None:
    pytest.importorskip("wgpu")
    from tg_backend_webgpu.renderer import WGSLRenderer
    from tinygrad.codegen import get_program

    # 512 bytes of workgroup storage hold 128 float partials: the heuristics fall back to 128 lanes
    small = get_program(_sum_rows_ast(1, 100_000), WGSLRenderer(workgroup_storage=512))
    assert small.applied_opts == ("GROUP(0,128)",) and "array<f32, 128>" in small.src
    # 64 invocations per workgroup at most
    narrow = get_program(_sum_rows_ast(1, 100_000), WGSLRenderer(max_workgroup_invocations=64))
    assert narrow.applied_opts == ("GROUP(0,64)",) and narrow.local_size == (64,)  # one output: no axis for it


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
def test_reductions_that_cannot_be_grouped_are_unrolled_under_the_cap(  # type: ignore[no-untyped-def]
        Tensor, webgpu_device, dtype, whole_reductions) -> None:
    """GROUP does not reduce float16/bfloat16/bool: one invocation runs the whole loop, unrolled in the source."""
    if webgpu_device.renderer.max_loop_iterations is None:
        pytest.skip(f"{webgpu_device.adapter_name} does not cap loop iterations")
    if not webgpu_device.supports_dtype(dtype):
        pytest.skip(f"{webgpu_device.adapter_name} has no {dtype.name}")
    n = 1_000_003
    data = np.zeros(n, dtype=np.float32)
    data[::9973] = 1.0  # 101 ones, the first and some near the end among them: exact in both dtypes
    before = set(webgpu_device._runners)
    assert Tensor(data, device="WEBGPU").cast(dtype).sum(dtype=dtype).item() == float(data.sum())
    (runner,) = [r for r in _new_runners(webgpu_device, before) if r.spec.name.startswith("r_")]
    assert not runner.spec.applied_opts and "+= 16i)" in runner.spec.src
    flags = np.zeros(n, dtype=bool)
    flags[-1] = True
    assert Tensor(flags, device="WEBGPU").max().item() is True  # bool max, the only True last


def test_unrolling_keeps_the_order_of_the_accumulation(Tensor, webgpu_device, whole_reductions) -> None:  # type: ignore[no-untyped-def]
    from tinygrad.helpers import Context

    if webgpu_device.renderer.max_loop_iterations is None:
        pytest.skip(f"{webgpu_device.adapter_name} does not cap loop iterations")
    n = 200_003  # over the cap: unrolled 4 times, with a partial last iteration
    data = np.random.default_rng(4).standard_normal(n).astype(np.float32)
    with Context(NOOPT=1):  # no GROUP: one invocation adds in order
        got = Tensor(data, device="WEBGPU").sum().item()
    assert np.float32(got) == np.add.accumulate(data, dtype=np.float32)[-1]  # the sequential float32 sum, exactly


def test_unrolled_source_under_a_small_cap() -> None:
    pytest.importorskip("wgpu")
    from tg_backend_webgpu.renderer import LoopLimitError, WGSLRenderer
    from tinygrad.codegen import get_program

    renderer = WGSLRenderer(max_loop_iterations=100, max_loop_iterations_reason="a test cap")
    src = get_program(_sum_rows_ast(4, 350), renderer, opts=()).src
    # 88 iterations of 4 copies, 3 of them guarded; each copy binds the loop index for the body's one text
    assert "ridx0_first += 4i" in src and src.count("if (ridx0_first + ") == 3
    assert src.count("let ridx0: i32 = ridx0_first") == 4
    assert get_program(_sum_rows_ast(4, 100), renderer, opts=()).src.count("for (") == 1  # under the cap: as is
    with pytest.raises(LoopLimitError, match=r"runs 3201 loop iterations per invocation \(101 with its innermost "
                                             r"loops unrolled 32 times\), but this device \(a test cap\)"):
        get_program(_sum_rows_ast(1, 3201), renderer, opts=())


def test_float_to_uint64_past_two_to_the_63(Tensor, webgpu_device) -> None:  # type: ignore[no-untyped-def]
    if not webgpu_device.supports_dtype(dtypes.uint64):
        pytest.skip("this adapter has no shader-int64 feature")
    values = np.array([2.0**63, 1e19, 2.0**64 - 2.0**40, 2.0**63 - 2.0**39, 3.5, -1.0, -(2.0**40)], dtype=np.float32)
    want = [2**63, int(np.float32(1e19)), 2**64 - 2**40, 2**63 - 2**39, 3, 2**64 - 1, 2**64 - 2**40]
    assert Tensor(values, device="WEBGPU").cast(dtypes.uint64).tolist() == want  # negatives wrap, as the reference
    got = Tensor(values[:2], device="WEBGPU").cast(dtypes.bfloat16).cast(dtypes.uint64).tolist()
    assert got == [2**63, 10_016_005_571_271_983_104]  # bfloat16 rounds 1e19 first (to 8 significant bits)
