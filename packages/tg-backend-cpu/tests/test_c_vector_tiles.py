"""The C path's register tiles as vectors (renderer.py's `plan_vector_tiles`): for gcc, whose SLP vectoriser leaves a
tile held in scalar accumulators scalar, a reduction's accumulators are rendered as vectors of gcc's vector
extensions, and selects as bit operations (`SELECT_PRELUDE`). The kernels here are rendered that way, compiled with
gcc where it is installed, and must compute what numpy does."""

from __future__ import annotations

import shutil
from collections.abc import Callable

import numpy as np
import pytest
from tg_backend_cpu.compiler import CCompiler
from tg_backend_cpu.program import CPUProgram
from tg_backend_cpu.renderer import CPURenderer
from tinygrad import Tensor
from tinygrad.codegen import ProgramSpec, get_program
from tinygrad.engine.realize import run_schedule


def _vector_renderer() -> CPURenderer:
    r = CPURenderer()
    r.vector_tiles = True  # what a gcc machine gets; this test may run where clang is found first
    return r


def _kernel(out: Tensor) -> tuple[ProgramSpec, list[np.ndarray]]:
    """The program of `out`'s last kernel, rendered with vector tiles, and its input buffers' contents (in PARAM
    order, after the output)."""
    *before, last = out.schedule()
    run_schedule(before)  # the inputs, by the default device
    inputs = [np.ascontiguousarray(b.numpy()) for b in last.bufs[1:]]
    return get_program(last.ast, _vector_renderer()), inputs


def _run_with_gcc(spec: ProgramSpec, inputs: list[np.ndarray], out_shape: tuple[int, ...],
                  monkeypatch: pytest.MonkeyPatch, lookup: Callable[[], object]) -> np.ndarray:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed here: vector tiles are the gcc path's")
    monkeypatch.setenv("CC", "gcc")
    lookup()
    program = CPUProgram(spec, CCompiler().compile(spec.src))
    out = np.zeros(out_shape, np.float32)
    program(*[(a, a.ctypes.data) for a in (out, *inputs)])
    return out


def test_an_upcast_convolution_keeps_its_tile_in_vector_registers() -> None:
    x, w = Tensor.randn(4, 8, 12, 12).realize(), Tensor.randn(16, 8, 3, 3).realize()
    spec = get_program(x.conv2d(w).schedule()[-1].ast, _vector_renderer())
    assert any(o.startswith("UPCAST") for o in spec.applied_opts), spec.applied_opts
    # the accumulators are vectors, updated from vector loads of the image row; none is a scalar any more
    assert "vacc0 = (" in spec.src and "(*(const tg_f32x" in spec.src
    assert not any(line.strip().startswith("float acc") for line in spec.src.splitlines())
    # the clang path keeps scalar accumulators: clang's SLP vectoriser builds the vectors itself
    scalar = CPURenderer()
    scalar.vector_tiles = False
    assert "vacc" not in get_program(x.conv2d(w).schedule()[-1].ast, scalar).src


@pytest.mark.parametrize("make, x_shape, w_shape", [
    pytest.param(lambda x, w: x.conv2d(w), (4, 8, 12, 12), (16, 8, 3, 3), id="conv"),
    pytest.param(lambda x, w: x.conv2d(w).relu(), (4, 8, 12, 12), (16, 8, 3, 3), id="conv-relu"),
    pytest.param(lambda x, w: x @ w, (64, 72), (72, 48), id="matmul"),
])
def test_vector_tiles_compute_what_the_default_path_does(
        make: Callable[[Tensor, Tensor], Tensor], x_shape: tuple[int, ...], w_shape: tuple[int, ...],
        fresh_compiler_lookup, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    xn, wn = rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32)
    want = make(Tensor(xn), Tensor(wn)).numpy()
    spec, inputs = _kernel(make(Tensor(xn), Tensor(wn)))
    assert "vacc" in spec.src
    got = _run_with_gcc(spec, inputs, want.shape, monkeypatch, fresh_compiler_lookup)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_a_convolution_of_bytes_converts_its_vector_loads(fresh_compiler_lookup,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # the first layer of an image model reads uint8 pixels: each row is one vector load of bytes, converted
    rng = np.random.default_rng(1)
    xn = rng.integers(0, 256, (2, 1, 20, 20), dtype=np.uint8)
    wn = rng.standard_normal((8, 1, 5, 5)).astype(np.float32)
    spec, inputs = _kernel(Tensor(xn).float().conv2d(Tensor(wn)))
    assert "__builtin_convertvector((*(const tg_u8x" in spec.src
    got = _run_with_gcc(spec, inputs, (2, 8, 16, 16), monkeypatch, fresh_compiler_lookup)
    want = np.zeros((2, 8, 16, 16), np.float32)
    for i in range(5):
        for j in range(5):
            want += np.einsum("bchw,kc->bkhw", xn[:, :, i:i + 16, j:j + 16].astype(np.float32), wn[:, :, i, j])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-2)


def test_selects_and_maxima_in_a_tile_keep_their_semantics(fresh_compiler_lookup,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # sums of ReLUs (a select of zero) and maxima down the columns (NaN wins, +0.0 beats -0.0 whichever comes first):
    # the vector selects must give the scalar path's values, signs of zeros included
    x = np.random.default_rng(2).standard_normal((64, 256)).astype(np.float32)
    x[:, :32] = np.array([np.nan, -0.0, 0.0, 1.0, -2.0, -0.0, 0.0, -1.0])[np.arange(64 * 32) % 7 % 8].reshape(64, 32)
    x[:, 32:40] = -0.0
    x[::2, 40:48], x[1::2, 40:48] = 0.0, -0.0
    x[5, 48:56] = np.nan
    for make in (lambda t: t.relu().sum(axis=0), lambda t: t.max(axis=0), lambda t: (t - 1).relu().max(axis=0)):
        want = make(Tensor(x)).numpy()
        spec, inputs = _kernel(make(Tensor(x)))
        assert "vacc" in spec.src
        got = _run_with_gcc(spec, inputs, want.shape, monkeypatch, fresh_compiler_lookup)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
