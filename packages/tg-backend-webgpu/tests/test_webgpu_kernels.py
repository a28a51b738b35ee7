"""Kernels through the Tensor API and raw ASTs on WEBGPU: launches past 65535 workgroups and their guards,
symbolic sizes, packed sub-word buffers written by neighbouring work-items, copies in and out (0-byte and odd
sizes), timing, and the dtypes the device refuses."""

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


def _double_ast(n: int, dtype=dtypes.int32) -> UOp:  # type: ignore[no-untyped-def]
    out = UOp(Ops.PARAM, dtype, (), (0, n)).reshape((n,))
    src = UOp(Ops.PARAM, dtype, (), (1, n)).reshape((n,))
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, src + src)),))


def _sum_ast(n: int, dtype=dtypes.float32) -> UOp:  # type: ignore[no-untyped-def]
    out = UOp(Ops.PARAM, dtype, (), (0, 1)).reshape((1,))
    x = UOp(Ops.PARAM, dtype, (), (1, n)).reshape((1, n))
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, x.reduce_axis(Ops.ADD, (1,)).reshape((1,)))),))


def _fmod_sum_ast(n: int) -> UOp:
    """sum(fmod(x, y)) over n elements, in one invocation."""
    out = UOp(Ops.PARAM, dtypes.float32, (), (0, 1)).reshape((1,))
    x = UOp(Ops.PARAM, dtypes.float32, (), (1, n)).reshape((1, n))
    y = UOp(Ops.PARAM, dtypes.float32, (), (2, n)).reshape((1, n))
    value = UOp(Ops.MOD, dtypes.float32, (x, y)).reduce_axis(Ops.ADD, (1,)).reshape((1,))
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, value)),))


@pytest.mark.parametrize("n", [1, 7, 63, 65, 1000, 100_003])
def test_elementwise_at_sizes_that_are_not_multiples_of_anything(Tensor, n: int) -> None:  # type: ignore[no-untyped-def]
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    np.testing.assert_allclose((Tensor(x, device="WEBGPU") * 2 + 1).numpy(), x * 2 + 1, rtol=1e-6)


def test_launch_past_65535_workgroups_uses_more_dimensions(webgpu_device) -> None:  # type: ignore[no-untyped-def]
    from tg_backend_webgpu.device import launch_grid
    from tg_backend_webgpu.renderer import DEFAULT_WORKGROUP_SIZE

    n = 65535 * DEFAULT_WORKGROUP_SIZE + 4097  # one workgroup dimension cannot hold it
    groups = -(-n // DEFAULT_WORKGROUP_SIZE)
    x, y, z = launch_grid(groups, webgpu_device.max_workgroups)
    assert y > 1 and x <= webgpu_device.max_workgroups and x * y * z >= groups
    runner = webgpu_device.get_runner(_double_ast(n))
    bufs = [Buffer("WEBGPU", n, dtypes.int32), Buffer("WEBGPU", n, dtypes.int32)]
    data = np.arange(n, dtype=np.int32)
    bufs[1].copyin(memoryview(data).cast("B"))
    runner(bufs, {})
    got = bufs[0].numpy()
    np.testing.assert_array_equal(got, data * 2)  # every element, the tail past the last full row included


def test_launch_grid_covers_and_stays_within_the_limit() -> None:
    pytest.importorskip("wgpu")
    from tg_backend_webgpu.device import launch_grid

    for groups in (1, 64, 65535, 65536, 65535 * 7 + 1, 10**9):
        x, y, z = launch_grid(groups, 65535)
        assert max(x, y, z) <= 65535 and groups <= x * y * z < groups + x * y  # covers it, at most one spare plane
    with pytest.raises(ValueError, match="workgroups"):
        launch_grid(65536**3, 65535)


def test_every_output_loop_runs_as_work_items(webgpu_device) -> None:  # type: ignore[no-untyped-def]
    out = UOp(Ops.PARAM, dtypes.int32, (), (0, 6 * 5)).reshape((6, 5))
    src = UOp(Ops.PARAM, dtypes.int32, (), (1, 6 * 5)).reshape((6, 5))
    ast = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, src + src)),))
    runner = webgpu_device.get_runner(ast)
    assert runner.global_size is not None and np.prod(runner.global_size) >= 30
    assert "for (" not in runner.spec.src
    bufs = [Buffer("WEBGPU", 30, dtypes.int32), Buffer("WEBGPU", 30, dtypes.int32)]
    bufs[1].copyin(memoryview(np.arange(30, dtype=np.int32)).cast("B"))
    elapsed = runner(bufs, {}, wait=True)
    assert isinstance(elapsed, float) and elapsed >= 0
    np.testing.assert_array_equal(bufs[0].numpy(), np.arange(30) * 2)


def test_stores_of_two_shapes_run_as_one_invocation(webgpu_device) -> None:  # type: ignore[no-untyped-def]
    a = UOp(Ops.PARAM, dtypes.float32, (), (0, 4)).reshape((4,))
    b = UOp(Ops.PARAM, dtypes.float32, (), (1, 6)).reshape((2, 3))
    x = UOp(Ops.PARAM, dtypes.float32, (), (2, 4)).reshape((4,))
    y = UOp(Ops.PARAM, dtypes.float32, (), (3, 6)).reshape((2, 3))
    ast = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (a, x + x)), UOp(Ops.STORE, dtypes.void, (b, y * y))))
    runner = webgpu_device.get_runner(ast)
    assert "@workgroup_size(1)" in runner.spec.src
    xs, ys = np.arange(4, dtype=np.float32), np.arange(6, dtype=np.float32) - 2
    bufs = [Buffer("WEBGPU", 4, dtypes.float32), Buffer("WEBGPU", 6, dtypes.float32),
            Buffer("WEBGPU", 4, dtypes.float32), Buffer("WEBGPU", 6, dtypes.float32)]
    bufs[2].copyin(memoryview(xs).cast("B"))
    bufs[3].copyin(memoryview(ys).cast("B"))
    runner(bufs, {})
    np.testing.assert_array_equal(bufs[0].numpy(), xs + xs)
    np.testing.assert_array_equal(bufs[1].numpy(), ys * ys)


def test_reduction_and_matmul(Tensor) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((33, 17)).astype(np.float32), rng.standard_normal((17, 9)).astype(np.float32)
    np.testing.assert_allclose((Tensor(a, device="WEBGPU") @ Tensor(b, device="WEBGPU")).numpy(), a @ b, rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(Tensor(a, device="WEBGPU").sum(axis=0).numpy(), a.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(Tensor(a, device="WEBGPU").max().numpy(), a.max())


def test_symbolic_size_reuses_one_kernel(Tensor, webgpu_device) -> None:  # type: ignore[no-untyped-def]
    from tinygrad import Variable

    x_np = np.random.default_rng(0).standard_normal((16, 5)).astype(np.float32)
    x = Tensor(x_np, device="WEBGPU")
    n = Variable("n", 1, 16)
    before = None
    for value in (3, 16, 1, 7):
        got = (x[:n.bind(value)] * 3 + 1).sum(axis=1).numpy()
        np.testing.assert_allclose(got, (x_np[:value] * 3 + 1).sum(axis=1), rtol=1e-5, atol=1e-5)
        if before is None:
            before = len(webgpu_device._runners)
    assert len(webgpu_device._runners) == before, "a new value of the Variable compiled a new kernel"


@pytest.mark.parametrize("dtype", [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16,
                                   dtypes.bfloat16, dtypes.float16])
def test_packed_buffers_survive_neighbouring_writes(Tensor, webgpu_device, dtype) -> None:  # type: ignore[no-untyped-def]
    """Sub-word elements share 32-bit words; every work-item writes its own element at the same time."""
    from tinygrad.dtype import to_numpy

    if not webgpu_device.supports_dtype(dtype):  # float16 needs shader-f16
        pytest.skip(f"WEBGPU ({webgpu_device.adapter_name}) does not claim {dtype.name}")

    n = 4099
    rng = np.random.default_rng(3)
    if dtype == dtypes.bool:
        x = rng.integers(0, 2, n).astype(bool)
        want = ~x
        got = Tensor(x, device="WEBGPU").logical_not().numpy()
    elif dtype.is_float:
        x = rng.uniform(-100, 100, n).astype(np.float32)
        t = Tensor(x, device="WEBGPU").cast(dtype)
        got = (t + t).cast(dtypes.float32).numpy()
        ref = Tensor(x, device="WEBGPU").cast(dtype).cast(dtypes.float32).numpy()
        want = ref + ref
    else:
        info = np.iinfo(to_numpy(dtype))
        x = rng.integers(info.min, info.max + 1, n).astype(to_numpy(dtype))
        want = (x.astype(np.int64) * 3 + 1).astype(to_numpy(dtype))  # wraps like the dtype
        got = (Tensor(x, device="WEBGPU") * 3 + 1).numpy()
    np.testing.assert_array_equal(got, want)


def test_copies_of_zero_bytes_and_odd_sizes(webgpu_device) -> None:  # type: ignore[no-untyped-def]
    empty = Buffer("WEBGPU", 0, dtypes.float32)
    empty.copyin(memoryview(b""))
    assert empty.numpy().shape == (0,)
    for n in (1, 2, 3, 5, 13, 4097):
        data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
        buf = Buffer("WEBGPU", n, dtypes.uint8).copyin(memoryview(data))
        np.testing.assert_array_equal(buf.numpy(), data)


def test_allocator_rounds_sizes_and_handles_zero_bytes(webgpu_device) -> None:  # type: ignore[no-untyped-def]
    alloc = webgpu_device.allocator
    handle = alloc.alloc(0)
    assert handle.size == 4  # wgpu wants sizes that are multiples of 4 and > 0
    alloc.copyin(handle, memoryview(b""))
    alloc.copyout(memoryview(bytearray()), handle)
    alloc.free(handle, 0)
    odd = alloc.alloc(7)
    assert odd.size == 8
    alloc.copyin(odd, memoryview(b"abcdefg"))
    out = bytearray(7)
    alloc.copyout(memoryview(out), odd)
    assert bytes(out) == b"abcdefg"
    alloc.free(odd, 7)


def test_empty_tensor_ops(Tensor) -> None:  # type: ignore[no-untyped-def]
    t = Tensor(np.zeros((0, 3), dtype=np.float32), device="WEBGPU")
    assert (t + 1).numpy().shape == (0, 3)
    np.testing.assert_array_equal(t.sum(axis=0).numpy(), np.zeros(3, dtype=np.float32))


def test_int64_when_the_adapter_has_shader_int64(Tensor, webgpu_device) -> None:  # type: ignore[no-untyped-def]
    if not webgpu_device.supports_dtype(dtypes.int64):
        pytest.skip("this adapter has no shader-int64 feature")
    big = np.array([2**63 - 1, -(2**63), 5, -7], dtype=np.int64)
    np.testing.assert_array_equal((Tensor(big, device="WEBGPU") + 1).numpy(), big + 1)
    ints = np.arange(-50, 50, dtype=np.int64) * 2**40
    got = Tensor(ints, device="WEBGPU").sum()  # an int64 sum stays int64 (tinygrad: int32 for narrower ones)
    assert got.dtype == dtypes.int64 and got.item() == int(ints.sum())
    assert Tensor(ints, device="WEBGPU").cumsum().numpy().tolist() == np.cumsum(ints).tolist()


def test_float64_is_refused_with_a_clear_message(Tensor, webgpu_device) -> None:  # type: ignore[no-untyped-def]
    assert not webgpu_device.supports_dtype(dtypes.float64)
    with pytest.raises(TypeError, match=r"device WEBGPU cannot hold float64; it supports \[.*float32.*\]\. Cast"):
        Tensor(np.array([1.0, 2.0]), device="WEBGPU")
    x = Tensor([1.0, 2.0], device="WEBGPU")
    with pytest.raises(TypeError, match=r"device WEBGPU cannot compute with float64; it supports \[.*float32"):
        x.cast(dtypes.float64).realize()


def test_nan_inf_and_signed_zero_survive_the_shader_compiler(Tensor) -> None:  # type: ignore[no-untyped-def]
    """lavapipe folds x/0.0, inf*0, x-x and x+(-x) as if floats were finite; the renderer hides those from it."""
    x = Tensor([1.0, 0.0, -1.0, float("inf"), float("nan")], device="WEBGPU")
    with np.errstate(all="ignore"):
        ref = np.array([1.0, 0.0, -1.0, np.inf, np.nan], dtype=np.float32)
        np.testing.assert_array_equal((x / 0.0).numpy(), ref / np.float32(0))
        np.testing.assert_array_equal((x * 0.0).numpy(), ref * np.float32(0))
        np.testing.assert_array_equal((x - x).numpy(), ref - ref)
        np.testing.assert_array_equal((x + (-x)).numpy(), ref + (-ref))
    assert np.isnan(Tensor([1.0], device="WEBGPU").var().item())
    zero = (Tensor([-0.0], device="WEBGPU") + 0.0).numpy()
    assert zero[0] == 0 and not np.signbit(zero[0])


def test_long_loops_raise_instead_of_returning_wrong_results(Tensor, webgpu_device) -> None:  # type: ignore[no-untyped-def]
    from tg_backend_webgpu.renderer import UNROLL_FACTORS, LoopLimitError
    from tinygrad.codegen import get_program

    limit = webgpu_device.renderer.max_loop_iterations
    if limit is None:
        pytest.skip(f"{webgpu_device.adapter_name} does not cap loop iterations")
    # one invocation (no opts: not grouped) past the cap even with its loop unrolled as far as the renderer goes
    n = limit * UNROLL_FACTORS[-1] + 10
    with pytest.raises(LoopLimitError, match=f"runs {n} loop iterations per invocation"):
        get_program(_sum_ast(n), webgpu_device.renderer, opts=())

    # the exact float fmod loops too (up to 35 steps a call, whatever the unrolling): its iterations count
    from tg_backend_webgpu.renderer import FMOD_MAX_ITERATIONS

    m = limit // FMOD_MAX_ITERATIONS + 10
    x = Tensor.full((m,), 7.5, device="WEBGPU").contiguous()
    with pytest.raises(LoopLimitError, match="loop iterations per invocation"):
        webgpu_device.get_runner(_fmod_sum_ast(m))
    assert (x % 2.0).sum().item() == m * 1.5  # Tensor % is not the raw fmod: it stays under the cap


def test_shader_compile_error_shows_message_and_source(webgpu_device) -> None:  # type: ignore[no-untyped-def]
    from tinygrad.errors import CompileError

    src = "@compute @workgroup_size(1) fn broken() { let x = undefined_name_here; }"
    with pytest.raises(CompileError) as info:
        webgpu_device.compiler.compile(src)
    msg = str(info.value)
    assert "undefined_name_here" in msg and "compiler message" in msg and src in msg
    assert webgpu_device.adapter_name in msg


def test_tensors_move_between_devices_and_gradients_come_back(webgpu_device) -> None:  # type: ignore[no-untyped-def]
    from tinygrad import Tensor

    x_np, w_np = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), np.array([[1.0, 0.5], [2.0, 1.0]], np.float32)
    moved = (Tensor(x_np, device="CPU").to("WEBGPU") * 2).to("CPU") + 1
    assert moved.device == "CPU"
    np.testing.assert_array_equal(moved.numpy(), x_np * 2 + 1)
    x = Tensor(x_np, device="WEBGPU", requires_grad=True)
    (x.to("CPU") * Tensor(w_np, device="CPU")).sum().backward()
    assert x.grad is not None and x.grad.device == "WEBGPU"
    np.testing.assert_array_equal((x.grad + x.detach()).numpy(), w_np + x_np)


def test_debug_7_says_why_there_is_no_assembly(Tensor, capsys):  # type: ignore[no-untyped-def]
    from tinygrad import Context

    with Context(DEBUG=7):
        # a constant no other test uses: a kernel compiled here, so its runner is made (and prints) now
        (Tensor([1.0, 2.0], device="WEBGPU") * 1234.5678).realize()
    err = capsys.readouterr().err
    assert "no assembly: WEBGPU's compiler (WGSLCompiler) gives none" in err and "naga" in err
