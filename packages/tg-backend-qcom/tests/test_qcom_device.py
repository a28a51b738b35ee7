"""QCOM on its device (PoCL as the stand-in here): the texture path gives bit-identical results to the buffer
path, at sizes that are not multiples of 4 and with edge values; image views live and die with their
buffers; launches respect the work-group limits; tensors move between QCOM, CPU and CL."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest
from tinygrad.device import Buffer
from tinygrad.dtype import dtypes
from tinygrad.uop.ops import Ops, UOp

SIZES = [1, 3, 5, 7, 8, 1001, 4099]


@pytest.fixture
def Tensor(qcom_device):  # type: ignore[no-untyped-def]
    from tinygrad import Tensor

    return Tensor


def both_paths(images, fn):  # type: ignore[no-untyped-def]
    """fn() with the texture path on, then off: (on, off)."""
    images(True)
    on = fn()
    images(False)
    return on, fn()


def assert_same_bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a.view(f"u{a.dtype.itemsize}"), b.view(f"u{b.dtype.itemsize}"))


def edge_values(n: int, dtype: type) -> np.ndarray:
    info = np.finfo(dtype)
    edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, info.max, -info.max, info.tiny, info.smallest_subnormal,
                      -info.smallest_subnormal, 1.0, -1.5, 1 / 3], dtype=dtype)
    rng = np.random.default_rng(n)
    return np.concatenate([edges, rng.standard_normal(max(n - len(edges), 0)).astype(dtype)])[:n]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("np_dtype", [np.float32, np.float16], ids=["float32", "float16"])
def test_reads_through_images_are_bit_exact_at_odd_sizes(Tensor, qcom_device, images, n: int,  # type: ignore[no-untyped-def]
                                                         np_dtype: type) -> None:
    x = edge_values(n, np_dtype)
    # flip: a pure read, so each value (NaN, -0.0, subnormals) must come back with its bits
    on, off = both_paths(images, lambda: Tensor(x, device="QCOM").flip(0).contiguous().numpy())
    assert_same_bits(on, off)
    want = x[::-1].copy()
    # NaN stays NaN; its payload is the OpenCL backend's business (PoCL's vstore_half writes 0x7fff for any NaN)
    nan = np.isnan(want)
    assert np.isnan(on[nan]).all()
    assert_same_bits(on[~nan], want[~nan])


@pytest.mark.parametrize("n", SIZES)
def test_elementwise_and_reductions_agree_on_both_paths(Tensor, images, n: int) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)

    def run():  # type: ignore[no-untyped-def]
        ta, tb = Tensor(a, device="QCOM"), Tensor(b, device="QCOM")
        return [(ta * tb + 1).numpy(), ta.sum().numpy(), tb.max().numpy(), (ta.exp2() - tb.sqrt()).numpy(),
                ta.pad(((2, 3),)).numpy()]

    for on, off in zip(*both_paths(images, run)):
        assert_same_bits(on, off)
    on = run()
    # a few ulps: OpenCL C contracts a*b+1 into one fma by default (FP_CONTRACT), as the CPU backend does
    np.testing.assert_allclose(on[0], a * b + 1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(on[1], a.sum(), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(on[4], np.pad(a, (2, 3)))


@pytest.mark.parametrize("shape", [(1, 1, 1), (5, 3, 7), (33, 17, 9), (64, 64, 64)])
def test_matmul_with_image_weights(Tensor, qcom_device, images, shape) -> None:  # type: ignore[no-untyped-def]
    m, k, n = shape
    rng = np.random.default_rng(m * k * n)
    a, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    on, off = both_paths(images, lambda: (Tensor(a, device="QCOM") @ Tensor(w, device="QCOM")).numpy())
    assert_same_bits(on, off)
    np.testing.assert_allclose(on, a @ w, rtol=1e-4, atol=1e-4)


def test_float16_arithmetic_through_images_matches_numpy(Tensor, images) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    a, b = (rng.uniform(-8, 8, 513).astype(np.float16) for _ in range(2))
    on, off = both_paths(images, lambda: ((Tensor(a, device="QCOM") * Tensor(b, device="QCOM")) + Tensor(
        a, device="QCOM")).numpy())
    assert_same_bits(on, off)
    assert_same_bits(on, (a * b) + a)  # numpy rounds each step to float16, as the emulation and native half do


def test_kernels_take_read_only_floats_as_images(qcom_device, images) -> None:  # type: ignore[no-untyped-def]
    n = 10
    out, w = UOp(Ops.PARAM, dtypes.float32, (), (0, n)).reshape((n,)), UOp(Ops.PARAM, dtypes.float32, (), (1, n))
    idx = UOp(Ops.PARAM, dtypes.int32, (), (2, n)).reshape((n,))
    ast = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, w.reshape((n,)) * idx.cast(dtypes.float32))),))
    images(True)
    runner = qcom_device.get_runner(ast)
    assert "read_only image1d_buffer_t data1" in runner.spec.src and "__global const int*" in runner.spec.src
    assert runner.program.image_args == {1: "FLOAT"}
    bufs = [Buffer("QCOM", n, dtypes.float32), Buffer("QCOM", n, dtypes.float32), Buffer("QCOM", n, dtypes.int32)]
    bufs[1].copyin(memoryview(np.full(n, 0.5, np.float32)).cast("B"))
    bufs[2].copyin(memoryview(np.arange(n, dtype=np.int32)).cast("B"))
    runner(bufs, {})
    np.testing.assert_array_equal(bufs[0].numpy(), np.arange(n) * 0.5)
    images(False)
    runner = qcom_device.get_runner(ast)
    assert "image1d_buffer_t" not in runner.spec.src and runner.program.image_args == {}


def test_image_views_are_made_once_and_freed_with_their_buffer(qcom_device, images) -> None:  # type: ignore[no-untyped-def]
    images(True)
    alloc = qcom_device.allocator
    buf = alloc.alloc(7 * 4)
    assert buf.size % 16 == 0 and buf.size >= 28  # whole RGBA float texels
    view = alloc.image_view(buf, "FLOAT")
    assert alloc.image_view(buf, "FLOAT") is view and view.width == 2
    half_view = alloc.image_view(buf, "HALF_FLOAT")
    assert half_view.width == 4
    alloc.free(buf, 7 * 4)
    assert not any(key[0] == buf.int_ptr for key in alloc._views)
    qcom_device.synchronize()
    assert not alloc._retired


def test_views_and_snapshots_outlive_the_kernels_queued_on_them(Tensor, qcom_device, images) -> None:  # type: ignore[no-untyped-def]
    """PoCL reads an image argument when the kernel runs, not when it is queued: a view released in between
    (its tensor freed, a snapshot dropped) crashed its worker threads. Hold the queue with a user event, queue
    kernels on views, free their tensors, and check that nothing was released until the queue ran."""
    import pyopencl as cl

    images(True)
    alloc = qcom_device.allocator
    x = Tensor(np.arange(9, dtype=np.float32), device="QCOM").realize()
    qcom_device.synchronize()
    gate = cl.UserEvent(qcom_device.context)
    cl.enqueue_barrier(qcom_device.queue, wait_for=[gate])  # nothing queued after this runs until the gate opens
    # should a step below wait for the queue after all, the gate opens by itself and the check fails, not hangs
    timer = threading.Timer(10.0, gate.set_status, (cl.command_execution_status.COMPLETE,))
    timer.start()
    try:
        y = (x.flip(0) * 2).realize()  # x is read through an image view
        x.assign(x.flip(0) + 1).realize()  # in place: x read from a snapshot while it is written
        del x
        gc.collect()
        assert gate.command_execution_status != cl.command_execution_status.COMPLETE, "a step waited for the queue"
        held = [obj for _, objs in alloc._retired for obj in objs]
        assert any(isinstance(obj, cl.Image) for obj in held), "a view was released while its kernel was queued"
    finally:
        timer.cancel()
        if gate.command_execution_status != cl.command_execution_status.COMPLETE:
            gate.set_status(cl.command_execution_status.COMPLETE)
    np.testing.assert_array_equal(y.numpy(), np.arange(9, dtype=np.float32)[::-1] * 2)
    qcom_device.synchronize()
    assert not alloc._retired


def test_a_buffer_read_as_an_image_and_written_in_one_launch_is_read_from_a_snapshot(qcom_device, images) -> None:  # type: ignore[no-untyped-def]
    images(True)
    n = 9
    out, x = UOp(Ops.PARAM, dtypes.float32, (), (0, n)), UOp(Ops.PARAM, dtypes.float32, (), (1, n))
    # reversed, so that in place every work-item reads an element another one writes
    value = x.reshape((n,)).flip((True,)) * 2.0
    runner = qcom_device.get_runner(UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out.reshape((n,)),
                                                                                              value)),)))
    assert runner.program.image_args == {1: "FLOAT"}
    data = np.arange(n, dtype=np.float32)
    buf = Buffer("QCOM", n, dtypes.float32).copyin(memoryview(data).cast("B"))
    before = qcom_device.allocator.snapshots
    runner.program(buf.opaque, buf.opaque, global_size=runner.global_size, local_size=runner.local_size)
    assert qcom_device.allocator.snapshots == before + 1
    np.testing.assert_array_equal(buf.numpy(), data[::-1] * 2)


def test_views_of_tensor_buffers_go_away_when_the_tensor_does(Tensor, qcom_device, images) -> None:  # type: ignore[no-untyped-def]
    images(True)
    gc.collect()
    before = len(qcom_device.allocator._views)
    w = Tensor(np.ones(12, np.float32), device="QCOM")
    (w * 2).numpy()
    assert len(qcom_device.allocator._views) > before
    del w
    gc.collect()
    assert len(qcom_device.allocator._views) == before


def test_renderer_carries_the_device_work_group_limits(qcom_device) -> None:  # type: ignore[no-untyped-def]
    r, dev = qcom_device.renderer, qcom_device.device
    assert r.max_work_group_size == dev.max_work_group_size and r.local_mem_max == dev.local_mem_size
    assert r.local_max == tuple(min(s, dev.max_work_group_size) for s in dev.max_work_item_sizes)


def _copy_kernel(qcom_device, n: int):  # type: ignore[no-untyped-def]
    out, src = UOp(Ops.PARAM, dtypes.int32, (), (0, n)).reshape((n,)), UOp(Ops.PARAM, dtypes.int32, (), (1, n))
    sink = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, src.reshape((n,)) + 1)),))
    runner = qcom_device.get_runner(sink)
    bufs = [Buffer("QCOM", n, dtypes.int32), Buffer("QCOM", n, dtypes.int32)]
    bufs[1].copyin(memoryview(np.arange(n, dtype=np.int32)).cast("B"))
    return runner, bufs


def test_an_oversized_local_size_is_only_a_hint_for_kernels_without_local_memory(qcom_device) -> None:  # type: ignore[no-untyped-def]
    n = 64
    runner, bufs = _copy_kernel(qcom_device, n)
    program = runner.program
    assert 0 < program.max_work_group_size <= qcom_device.device.max_work_group_size
    assert not program.uses_local_memory
    args = [b.opaque for b in bufs]
    # each dimension within the device's per-dimension limits, the product over the kernel's limit
    local = (min(program.max_work_group_size, qcom_device.device.max_work_item_sizes[0]), 2)
    # a kernel as long as that launch's first dimension: its ids are guarded only where its own launch would pass
    # its bound, and this one's does not (the second dimension writes the same elements again)
    wide, wide_bufs = _copy_kernel(qcom_device, local[0])
    wide.program(*[b.opaque for b in wide_bufs], global_size=local, local_size=local)  # the driver picks instead
    np.testing.assert_array_equal(wide_bufs[0].numpy(), np.arange(local[0]) + 1)
    program(*args, global_size=(n,), local_size=(16,))  # within every limit: as asked
    np.testing.assert_array_equal(bufs[0].numpy(), np.arange(n) + 1)


LOCAL_SUM = """__kernel void local_sum(__global float* restrict out, __global const float* restrict x) {
  __local float part[64];
  int i = get_local_id(0);
  part[i] = x[get_global_id(0)];
  barrier(CLK_LOCAL_MEM_FENCE);
  if (i == 0) { float s = 0.0f; for (int j = 0; j < 64; j++) s += part[j]; out[get_group_id(0)] = s; }
}"""


def test_launches_over_the_limits_of_a_kernel_with_local_memory_are_refused(qcom_device) -> None:  # type: ignore[no-untyped-def]
    from tg_backend_qcom.device import QCOMProgram, WorkGroupTooLarge
    from tinygrad.codegen import ProgramSpec

    spec = ProgramSpec("local_sum", LOCAL_SUM, (0, 1), (128,), (64,), estimated_ops=128, estimated_bytes=520)
    program = QCOMProgram(qcom_device, spec, qcom_device.compiler.compile(LOCAL_SUM))
    assert program.uses_local_memory and program.image_args == {}
    out, x = Buffer("QCOM", 2, dtypes.float32), Buffer("QCOM", 128, dtypes.float32)
    x.copyin(memoryview(np.arange(128, dtype=np.float32)).cast("B"))
    program(out.opaque, x.opaque, global_size=(128,), local_size=(64,))
    np.testing.assert_array_equal(out.numpy(), [np.arange(64).sum(), np.arange(64, 128).sum()])
    local = (min(program.max_work_group_size, qcom_device.device.max_work_item_sizes[0]), 2)
    with pytest.raises(WorkGroupTooLarge, match=r"over this kernel's limit of .*CL_KERNEL_WORK_GROUP_SIZE"):
        program(out.opaque, x.opaque, global_size=local, local_size=local)
    per_dim = qcom_device.device.max_work_item_sizes
    with pytest.raises(WorkGroupTooLarge, match="CL_DEVICE_MAX_WORK_ITEM_SIZES"):
        program(out.opaque, x.opaque, global_size=(1,) * (len(per_dim) + 1), local_size=(1,) * (len(per_dim) + 1))


def test_check_local_size_limits() -> None:
    pytest.importorskip("tg_backend_qcom", reason="tg-backend-qcom is not installed")
    from tg_backend_qcom.device import WorkGroupTooLarge, check_local_size

    check_local_size((1024,), (1024, 1024, 1024), 1024, 1024, "k")
    check_local_size((16, 16, 4), (1024, 1024, 64), 1024, 1024, "k")
    with pytest.raises(WorkGroupTooLarge, match=r"1024 work-items, over this kernel's limit of 512"):
        check_local_size((32, 32), (1024, 1024, 1024), 1024, 512, "k")  # Adreno: registers cut the kernel's limit
    with pytest.raises(WorkGroupTooLarge, match=r"per-dimension limits \(1024, 1024, 64\)"):
        check_local_size((1, 1, 128), (1024, 1024, 64), 1024, 1024, "k")


def test_tensors_move_between_qcom_cpu_and_cl(Tensor) -> None:  # type: ignore[no-untyped-def]
    from tinygrad.device import Device

    x = np.arange(13, dtype=np.float32) / 3
    t = Tensor(x, device="CPU").to("QCOM") * 2
    assert t.device == "QCOM"
    back = t.to("CPU") + 1
    np.testing.assert_array_equal(back.numpy(), x * 2 + 1)
    if "CL" in Device.backends and Device.availability("CL") is None:
        via_cl = (t.to("CL") - 1).to("QCOM") * 3
        assert via_cl.device == "QCOM"
        np.testing.assert_array_equal(via_cl.numpy(), (x * 2 - 1) * 3)
    h = Tensor(x.astype(np.float16), device="QCOM").to("CPU")
    assert_same_bits(h.numpy(), x.astype(np.float16))


def test_gradients_flow_through_image_reads(Tensor, images) -> None:  # type: ignore[no-untyped-def]
    import torch

    a_np = np.random.default_rng(3).standard_normal((6, 5)).astype(np.float32)
    w_np = np.random.default_rng(4).standard_normal((5, 3)).astype(np.float32)
    images(True)
    a, w = Tensor(a_np, device="QCOM", requires_grad=True), Tensor(w_np, device="QCOM", requires_grad=True)
    (a @ w).relu().sum().backward()
    ta, tw = torch.tensor(a_np, requires_grad=True), torch.tensor(w_np, requires_grad=True)
    (ta @ tw).relu().sum().backward()
    assert a.grad is not None and w.grad is not None
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_jit_replays_bind_images_on_every_launch(Tensor, qcom_device, images) -> None:  # type: ignore[no-untyped-def]
    try:
        from tinygrad import TinyJit
    except ImportError:
        pytest.skip("this tinygrad has no TinyJit")
    images(True)
    w_np = np.arange(10, dtype=np.float32) / 4
    w = Tensor(w_np, device="QCOM").realize()

    @TinyJit
    def step(x):  # type: ignore[no-untyped-def]
        return (x * w + 1).realize()

    for i in range(4):
        x_np = np.full(10, float(i), np.float32)
        np.testing.assert_array_equal(step(Tensor(x_np, device="QCOM")).numpy(), x_np * w_np + 1)
