"""The register tiles the CPU heuristics choose for convolutions whose input is a realized buffer: a strided one
tiles output channels (not output rows) against its gathered input lanes, and a padded one does not cut its
output rows into parts (each part would test the padding gates of its rows at run time). Results stay exact.
These are the kernels that test their border themselves: the device's `conv_border_copy` knob is off here (with it,
a padded convolution reads a copy with the border written out, test_device_knobs.py)."""

from __future__ import annotations

import numpy as np
import pytest
from tg_backend_cpu.renderer import CPURenderer
from tinygrad import Device, Tensor
from tinygrad.codegen import get_program


@pytest.fixture(autouse=True)
def _border_tests_in_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Device["CPU"].renderer, "conv_border_copy", False)


def _conv_opts(cin: int, cout: int, size: int, stride: int) -> list[str]:
    x = Tensor.randn(32, cin, size, size).realize()
    w = Tensor.randn(cout, cin, 3, 3).realize()
    ast = x.conv2d(w, padding=1, stride=stride).schedule()[-1].ast
    return [str(o) for o in get_program(ast, CPURenderer()).applied_opts]


@pytest.mark.parametrize("fma_chains", [4, 8])
def test_a_strided_convolution_tiles_output_channels(monkeypatch: pytest.MonkeyPatch, fma_chains: int) -> None:
    # the tiles are chosen for a CPU with this many FMA chains in flight (`host_fma_chains`), not this host's
    monkeypatch.setattr(CPURenderer, "fma_chains", fma_chains)
    # axes: batch, output channels, output rows, output columns. Rows of 16: the columns are the SIMD axis and 8
    # output channels the reuse axis, no tile along output rows; 8 vectors of accumulators, which 8 FMA chains (an
    # Intel core's) need twice over: 16 output channels there
    assert _conv_opts(16, 32, 32, 2) == ["UPCAST(3,16)", "UPCAST(1,8)"] + (["UPCAST(1,2)"] if fma_chains == 8 else [])
    # padded rows of 8: the weight is read channels-last, its 32 output channels are the SIMD axis and 8 images
    # the reuse axis (tg-core's layout pass, `engine/layout.py`)
    assert _conv_opts(16, 32, 16, 2) == ["UPCAST(1,32)", "UPCAST(0,8)"]


def test_a_padded_convolution_takes_its_rows_whole_or_not_at_all() -> None:
    for cin, cout, size in [(32, 32, 8), (64, 64, 4), (16, 16, 8), (16, 16, 16)]:
        opts = _conv_opts(cin, cout, size, 1)
        assert all(not o.startswith("UPCAST(2,") for o in opts) or f"UPCAST(2,{size})" in opts, opts


@pytest.mark.parametrize("size, stride", [(8, 1), (16, 2), (4, 1)])
def test_the_convolutions_compute_the_same(size: int, stride: int) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 16, size, size)).astype(np.float32)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    got = Tensor(x).conv2d(Tensor(w), padding=1, stride=stride).numpy()
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    o = (size + 2 - 3) // stride + 1
    want = np.zeros((4, 32, o, o), np.float32)
    for i in range(3):
        for j in range(3):
            win = xp[:, :, i:i + stride * (o - 1) + 1:stride, j:j + stride * (o - 1) + 1:stride]
            want += np.einsum("bchw,kc->bkhw", win, w[:, :, i, j])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_a_first_layers_weight_gradient_vectorises_its_output_channels() -> None:
    # one input channel (grey images, the MNIST example's first layer): g is read from a copy with its 32 channels
    # innermost, and those (not the 5 kernel columns along which the image is contiguous) are the SIMD axis (axes:
    # batch chunks, output channels, kernel rows, kernel columns); the gradient equals PyTorch's
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((8, 1, 28, 28)).astype(np.float32), rng.standard_normal((32, 1, 5, 5)).astype(np.float32)
    g = rng.standard_normal((8, 32, 24, 24)).astype(np.float32)
    wt = Tensor(w, requires_grad=True)
    (grad,) = (Tensor(x).conv2d(wt) * Tensor(g)).sum().gradient(wt)
    programs = [get_program(si.ast, CPURenderer()) for si in grad.schedule()]
    opts = [str(o) for o in max(programs, key=lambda p: p.estimated_ops).applied_opts]
    assert opts[0] == "UPCAST(1,32)", opts
    tw = torch.tensor(w, requires_grad=True)
    (torch.nn.functional.conv2d(torch.tensor(x), tw) * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-3)


def test_a_batch_of_one_tiles_its_output_channels() -> None:
    # one image: the 16 output channels are the outermost loop, and still the reuse axis (8 rows, two iterations
    # left for the threads), so each vector of the input row serves 8 channels (a small ResNet at batch 1)
    x = Tensor.randn(1, 16, 16, 16).realize()
    w = Tensor.randn(16, 16, 3, 3).realize()
    ast = x.conv2d(w, padding=1).schedule()[-1].ast
    opts = [str(o) for o in get_program(ast, CPURenderer()).applied_opts]
    assert "UPCAST(0,8)" in opts, opts
    got = x.conv2d(w, padding=1).numpy()
    torch = pytest.importorskip("torch")
    want = torch.nn.functional.conv2d(torch.tensor(x.numpy()), torch.tensor(w.numpy()), padding=1).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
