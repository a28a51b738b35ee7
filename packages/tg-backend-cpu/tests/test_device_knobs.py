"""The device knobs (`DeviceKnobs`): the CPU renderer declares them, the heuristics and core's layout pass (the
convolution gradient's chunks and copies) read them (the first through the renderer, the second through
`Device[...]`), and changing one changes what they choose but not what the program computes."""

from __future__ import annotations

import numpy as np
import pytest
from tg_backend_cpu.renderer import CPURenderer
from tinygrad import Device, Tensor
from tinygrad.codegen import get_program
from tinygrad.device import DeviceKnobs
from tinygrad.dtype import dtypes
from tinygrad.engine.layout import lower_layouts
from tinygrad.uop.ops import Ops, UOp


def _matmul_ast(m: int, k: int, n: int) -> UOp:
    a = UOp(Ops.PARAM, dtypes.float32, (), (1, m * k)).reshape((m, 1, k)).expand((m, n, k))
    b = UOp(Ops.PARAM, dtypes.float32, (), (2, k * n)).reshape((k, n)).permute((1, 0)).reshape((1, n, k))
    out = UOp(Ops.PARAM, dtypes.float32, (), (0, m * n)).reshape((m, n, 1))
    value = (a * b.expand((m, n, k))).reduce_axis(Ops.ADD, (2,))
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, value)),))


def test_the_device_exposes_its_renderers_knobs() -> None:
    dev = Device["CPU"]
    assert isinstance(dev.knobs, DeviceKnobs)
    assert dev.knobs == dev.renderer.knobs
    assert dev.knobs.simd_lanes(dtypes.float32) == dev.knobs.simd_bytes // 4
    assert dev.knobs.simd_lanes(dtypes.float16) == dev.knobs.simd_bytes // 2


def test_the_heuristics_tile_by_the_declared_simd_width() -> None:
    class Avx2(CPURenderer):
        simd_bytes = 32

    ast = _matmul_ast(256, 256, 256)
    # two registers of float32 along the SIMD axis: 32 lanes with AVX-512, 16 with AVX2
    assert get_program(ast, CPURenderer()).applied_opts[0] == "UPCAST(1,32)"
    assert get_program(ast, Avx2()).applied_opts[0] == "UPCAST(1,16)"


def _conv_grads(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """dx, dw, the kernels of dw, and whether dw sums partial sums over chunks of 2 images (of the 8)."""
    tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    tx.conv2d(tw).sum().backward()
    assert tx.grad is not None and tw.grad is not None
    # the chunks are the scheduler's layout pass's choice: look at the graph it lowers for the CPU
    lowered, _ = lower_layouts([tw.grad.uop], lambda sink: dict.fromkeys(sink.toposort(), "CPU"))
    chunked = any(u.op is Ops.RESHAPE and tuple(u.arg[:2]) == (4, 2) for u in lowered[0].toposort())
    kernels = len(tw.grad.schedule())
    return tx.grad.numpy(), tw.grad.numpy(), kernels, chunked


@pytest.mark.parametrize("l2, channels_last_min", [(1 << 20, 8), (1 << 15, 8), (1 << 20, 0)])
def test_the_conv_gradient_reads_the_device_knobs(monkeypatch: pytest.MonkeyPatch, l2: int,
                                                   channels_last_min: int) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 8, 10, 10)).astype(np.float32)
    w = rng.standard_normal((4, 8, 3, 3)).astype(np.float32)
    _, _, default_kernels, default_chunked = _conv_grads(x, w)
    renderer = Device["CPU"].renderer
    monkeypatch.setattr(renderer, "l2_cache_bytes", l2)
    monkeypatch.setattr(renderer, "channels_last_min", channels_last_min)
    dx, dw, kernels, chunked = _conv_grads(x, w)

    # the reference gradients come from PyTorch, installed in the tests-3.11 session only
    torch = pytest.importorskip("torch")
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    torch.nn.functional.conv2d(tx, tw).sum().backward()
    assert tx.grad is not None and tw.grad is not None
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dw, tw.grad.numpy(), rtol=1e-4, atol=1e-4)
    # (8*100 + 4*64) * 4 bytes an image: all 8 fit half of 1 MiB, 3 fit half of 32 KiB (chunks of 2, dividing 8)
    assert not default_chunked
    assert chunked == (l2 < 1 << 20)
    # a kernel that sums the chunks' partial sums; none for the channels-last copies of the input and g
    assert kernels == default_kernels + chunked - (2 if channels_last_min == 0 else 0)


@pytest.mark.parametrize("kw", [{"padding": 1}, {"padding": 2, "stride": 2}, {"padding": (1, 2), "dilation": 2},
                                {"padding": 1, "groups": 2}], ids=str)
def test_a_padded_convolution_reads_a_bordered_copy_where_the_knob_asks(monkeypatch: pytest.MonkeyPatch,
                                                                         kw: dict) -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 4, 9, 7)).astype(np.float32)
    w = rng.standard_normal((6, 4 // kw.get("groups", 1), 3, 3)).astype(np.float32)

    def run() -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
        out = tx.conv2d(tw, **kw)
        kernels = len(out.schedule())
        (out * out).sum().backward()
        assert tx.grad is not None and tw.grad is not None
        return kernels, out.numpy(), tx.grad.numpy(), tw.grad.numpy()

    renderer = Device["CPU"].renderer
    monkeypatch.setattr(renderer, "conv_border_copy", False)
    tested_kernels, *tested = run()
    monkeypatch.setattr(renderer, "conv_border_copy", True)
    copied_kernels, *copied = run()
    # one more kernel (the copy), the same forward and backward results
    assert copied_kernels == tested_kernels + 1
    for a, b in zip(copied, tested):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    torch = pytest.importorskip("torch")
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ref = torch.nn.functional.conv2d(tx, tw, **kw)
    (ref * ref).sum().backward()
    assert tx.grad is not None and tw.grad is not None
    for got, want in zip(copied, (ref.detach(), tx.grad, tw.grad)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-3)


def test_the_bordered_copy_leaves_short_rows_and_transposed_convolutions_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Device["CPU"].renderer, "conv_border_copy", True)
    # 4x4 rows (shorter than half a register) keep the channels-last weight and test their border in the kernel:
    # the weight's copy and the convolution
    x, w = Tensor.randn(4, 8, 4, 4).realize(), Tensor.randn(32, 8, 3, 3).realize()
    assert len(x.conv2d(w, padding=1).schedule()) == 2
    # conv_transpose2d's input, spread out with zeros, stays a view: one kernel
    assert len(Tensor.randn(1, 2, 5, 5).realize().conv_transpose2d(Tensor.randn(2, 3, 3, 3).realize(),
                                                                      stride=2, padding=1).schedule()) == 1


def test_a_broadcast_input_is_not_copied_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    # 64 values viewed as 64 x 64 x 512 x 512 (4 GiB of float32 if written out) through a 1-channel convolution: the
    # copy would hold 64 times the output's elements, so the convolution tests its border instead, and a slice of
    # the result is computed from the 64 values
    monkeypatch.setattr(Device["CPU"].renderer, "conv_border_copy", True)
    x = Tensor.arange(64, dtype=dtypes.float32).reshape(1, 64, 1, 1).expand(64, 64, 512, 512)
    out = x.conv2d(Tensor.ones(1, 64, 3, 3), padding=1)
    assert len(out.schedule()) == 1
    corner, middle = out[0, 0, 0, 0].item(), out[3, 0, 100, 200].item()
    assert corner == 4 * sum(range(64)) and middle == 9 * sum(range(64))
    # the usual ratio of channels: copied
    assert len(Tensor.empty(2, 16, 8, 8).conv2d(Tensor.empty(16, 16, 3, 3), padding=1).schedule()) == 2


@pytest.mark.parametrize("size,kernel", [(12, 3), (16, 3), (13, 3), (12, 1)], ids=["rows10", "rows14", "rows11", "1x1"])
def test_uneven_rows_read_a_channels_last_weight_where_the_device_asks(monkeypatch: pytest.MonkeyPatch, size: int,
                                                                       kernel: int) -> None:
    # a convolution with a window whose rows (size - kernel + 1 wide) leave part of a 16-lane register empty: with
    # `uneven_rows_channels_last` its weight is read channels-last (one more kernel) and its forward and input
    # gradient tile output channels times images; a 1x1 convolution keeps its rows. The results stay the same.
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 16, size, size)).astype(np.float32)
    w = rng.standard_normal((32, 16, kernel, kernel)).astype(np.float32)
    g = rng.standard_normal((8, 32, size - kernel + 1, size - kernel + 1)).astype(np.float32)

    def run() -> tuple[int, list[str], np.ndarray, np.ndarray, np.ndarray]:
        tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
        out = tx.conv2d(tw)
        schedule = out.schedule()
        heaviest = max(schedule, key=lambda si: get_program(si.ast, Device["CPU"].renderer).estimated_ops)
        opts = list(get_program(heaviest.ast, Device["CPU"].renderer).applied_opts)
        (out * Tensor(g)).sum().backward()
        assert tx.grad is not None and tw.grad is not None
        return len(schedule), opts, out.numpy(), tx.grad.numpy(), tw.grad.numpy()

    renderer = Device["CPU"].renderer
    monkeypatch.setattr(renderer, "uneven_rows_channels_last", False)
    rows_kernels, rows_opts, *rows = run()
    monkeypatch.setattr(renderer, "uneven_rows_channels_last", True)
    channels_kernels, channels_opts, *channels = run()
    assert rows_opts[0] == f"UPCAST(3,{size - kernel + 1})"  # the SIMD direction along the rows
    if kernel == 1:
        assert (channels_kernels, channels_opts) == (rows_kernels, rows_opts)
    else:
        assert channels_kernels == rows_kernels + 1  # the weight's channels-last copy
        assert channels_opts[0] in ("UPCAST(1,16)", "UPCAST(1,32)")  # the output channels
    for a, b in zip(channels, rows):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    torch = pytest.importorskip("torch")
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ref = torch.nn.functional.conv2d(tx, tw)
    (ref * torch.tensor(g)).sum().backward()
    assert tx.grad is not None and tw.grad is not None
    for got, want in zip(channels, (ref.detach(), tx.grad, tw.grad)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-3)
