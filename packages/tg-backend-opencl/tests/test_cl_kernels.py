"""Kernels through the Tensor API and raw ASTs on CL: work-item launches and their guards, symbolic sizes,
kernels with several loop nests, copies in and out (0-byte and odd sizes)."""

from __future__ import annotations

import numpy as np
import pytest
from tinygrad.device import Buffer
from tinygrad.dtype import dtypes
from tinygrad.helpers import Context
from tinygrad.uop.ops import Ops, UOp


@pytest.fixture
def Tensor(cl_device):  # type: ignore[no-untyped-def]
    from tinygrad import Tensor

    return Tensor


@pytest.mark.parametrize("n", [1, 7, 1000, 100_003])
def test_elementwise_at_sizes_that_are_not_multiples_of_anything(Tensor, n: int) -> None:  # type: ignore[no-untyped-def]
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    got = (Tensor(x, device="CL") * 2 + 1).numpy()
    np.testing.assert_allclose(got, x * 2 + 1, rtol=1e-6)


def test_reduction_and_matmul(Tensor) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((33, 17)).astype(np.float32), rng.standard_normal((17, 9)).astype(np.float32)
    np.testing.assert_allclose((Tensor(a, device="CL") @ Tensor(b, device="CL")).numpy(), a @ b, rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(Tensor(a, device="CL").sum(axis=0).numpy(), a.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(Tensor(a, device="CL").max().numpy(), a.max())


def test_launch_dimensions_are_the_output_loops_innermost_first(cl_device) -> None:  # type: ignore[no-untyped-def]
    out = UOp(Ops.PARAM, dtypes.int32, (), (0, 6 * 5)).reshape((6, 5))
    src = UOp(Ops.PARAM, dtypes.int32, (), (1, 6 * 5)).reshape((6, 5))
    ast = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, src + src)),))
    with Context(NOOPT=1):
        runner = cl_device.get_runner(ast)
    assert runner.global_size == (5, 6) and runner.local_size is None
    bufs = [Buffer("CL", 30, dtypes.int32), Buffer("CL", 30, dtypes.int32)]
    bufs[1].copyin(memoryview(np.arange(30, dtype=np.int32)).cast("B"))
    elapsed = runner(bufs, {}, wait=True)
    assert isinstance(elapsed, float) and elapsed >= 0
    np.testing.assert_array_equal(bufs[0].numpy(), np.arange(30) * 2)


def test_stores_of_two_shapes_run_as_one_work_item(cl_device) -> None:  # type: ignore[no-untyped-def]
    a = UOp(Ops.PARAM, dtypes.float32, (), (0, 4)).reshape((4,))
    b = UOp(Ops.PARAM, dtypes.float32, (), (1, 6)).reshape((2, 3))
    x = UOp(Ops.PARAM, dtypes.float32, (), (2, 4)).reshape((4,))
    y = UOp(Ops.PARAM, dtypes.float32, (), (3, 6)).reshape((2, 3))
    ast = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (a, x + x)),
                                      UOp(Ops.STORE, dtypes.void, (b, y * y))))
    runner = cl_device.get_runner(ast)
    assert runner.global_size == ()
    xs, ys = np.arange(4, dtype=np.float32), np.arange(6, dtype=np.float32) - 2
    bufs = [Buffer("CL", 4, dtypes.float32), Buffer("CL", 6, dtypes.float32), Buffer("CL", 4, dtypes.float32),
            Buffer("CL", 6, dtypes.float32)]
    bufs[2].copyin(memoryview(xs).cast("B"))
    bufs[3].copyin(memoryview(ys).cast("B"))
    runner(bufs, {})
    np.testing.assert_array_equal(bufs[0].numpy(), xs + xs)
    np.testing.assert_array_equal(bufs[1].numpy(), ys * ys)


def test_symbolic_size_launches_its_largest_value_and_guards(Tensor, cl_device) -> None:  # type: ignore[no-untyped-def]
    from tinygrad import Variable

    x_np = np.random.default_rng(0).standard_normal((16, 5)).astype(np.float32)
    x = Tensor(x_np, device="CL")
    n = Variable("n", 1, 16)
    before = None
    for value in (3, 16, 1, 7):
        got = (x[:n.bind(value)] * 3 + 1).sum(axis=1).numpy()
        np.testing.assert_allclose(got, (x_np[:value] * 3 + 1).sum(axis=1), rtol=1e-5, atol=1e-5)
        if before is None:
            before = len(cl_device._runners)
    assert len(cl_device._runners) == before, "a new value of the Variable compiled a new kernel"


def test_copies_of_zero_bytes_and_odd_sizes(cl_device) -> None:  # type: ignore[no-untyped-def]
    empty = Buffer("CL", 0, dtypes.float32)
    empty.copyin(memoryview(b""))
    assert empty.numpy().shape == (0,)
    for n in (1, 3, 13, 4097):
        data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
        buf = Buffer("CL", n, dtypes.uint8).copyin(memoryview(data))
        np.testing.assert_array_equal(buf.numpy(), data)


def test_allocator_handles_zero_bytes_directly(cl_device) -> None:  # type: ignore[no-untyped-def]
    alloc = cl_device.allocator
    handle = alloc.alloc(0)
    alloc.copyin(handle, memoryview(b""))
    alloc.copyout(memoryview(bytearray()), handle)
    alloc.free(handle, 0)


def test_empty_tensor_ops(Tensor) -> None:  # type: ignore[no-untyped-def]
    t = Tensor(np.zeros((0, 3), dtype=np.float32), device="CL")
    assert (t + 1).numpy().shape == (0, 3)
    np.testing.assert_array_equal(t.sum(axis=0).numpy(), np.zeros(3, dtype=np.float32))


def test_int64_wraps_and_bool_buffers(Tensor) -> None:  # type: ignore[no-untyped-def]
    big = np.array([2**63 - 1, -(2**63), 5], dtype=np.int64)
    np.testing.assert_array_equal((Tensor(big, device="CL") + 1).numpy(), big + 1)
    mask = np.array([True, False, True, True])
    got = (Tensor(mask, device="CL") & Tensor(~mask, device="CL")).numpy()
    np.testing.assert_array_equal(got, np.zeros(4, dtype=bool))
    np.testing.assert_array_equal(Tensor(mask, device="CL").numpy(), mask)


def test_float64_and_bfloat16(Tensor, cl_device) -> None:  # type: ignore[no-untyped-def]
    if not cl_device.supports_dtype(dtypes.float64):
        pytest.skip("this OpenCL device has no cl_khr_fp64")
    x = np.array([1e300, 1 / 3, -2.5], dtype=np.float64)
    np.testing.assert_array_equal((Tensor(x, device="CL") * 2).numpy(), x * 2)
    b = Tensor([1.0, 3.0, 1 / 3], device="CL").cast(dtypes.bfloat16)
    np.testing.assert_array_equal((b * 3).cast(dtypes.float32).numpy(), np.array([3.0, 9.0, 1.0], np.float32))


def test_float16_rounds_after_every_op_in_a_fused_expression(Tensor) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    a, b, c = (rng.uniform(-8, 8, 512).astype(np.float16) for _ in range(3))
    ta, tb, tc = (Tensor(x, device="CL") for x in (a, b, c))
    got = [((ta * tb) + tc).numpy(), (((ta + tb) * tc) - ta).numpy(), (ta * ta).sqrt().numpy()]
    want = [(a * b) + c, ((a + b) * c) - a, np.sqrt(a * a)]  # numpy rounds each step to float16
    for g, w in zip(got, want):
        assert g.dtype == np.float16
        np.testing.assert_array_equal(g.view(np.uint16), w.view(np.uint16))


def test_tensors_move_between_devices_and_gradients_come_back(cl_device) -> None:  # type: ignore[no-untyped-def]
    import numpy as np
    from tinygrad import Tensor

    x_np, w_np = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), np.array([[1.0, 0.5], [2.0, 1.0]], np.float32)
    moved = (Tensor(x_np, device="CPU").to("CL") * 2).to("CPU") + 1
    assert moved.device == "CPU"
    np.testing.assert_array_equal(moved.numpy(), x_np * 2 + 1)
    x = Tensor(x_np, device="CL", requires_grad=True)
    (x.to("CPU") * Tensor(w_np, device="CPU")).sum().backward()
    assert x.grad is not None and x.grad.device == "CL"
    # the gradient lives on CL: it combines with CL tensors without a device mismatch
    np.testing.assert_array_equal((x.grad + x.detach()).numpy(), w_np + x_np)
