"""Byte dot products (`tg_backend_cpu.byte_dot`): the shifts and masks of four byte products in an int32 sum are
recognised in the LLVM path's vector tiles and written as one `vpdpbusd` where the host has AVX512-VNNI, else as
vector shifts and masks; either way the kernel computes the integers numpy does, for every byte value (0..255 under
the mask, -128..127 signed), with other terms in the sum, and in a float reduction that reads the integer sum."""

from __future__ import annotations

import re

import numpy as np
import pytest
from tinygrad import Tensor, dtypes
from tinygrad.codegen import get_program

pytest.importorskip("llvmlite")

from tg_backend_cpu import byte_dot, llvm_tiles
from tg_backend_cpu.llvm_renderer import LLVMRenderer


def dot4(u: Tensor, v: Tensor, mask: int = 0xFF) -> Tensor:
    terms = [((u >> (8 * i)) & mask) * ((v << (24 - 8 * i)) >> 24) for i in range(4)]
    return (terms[0] + terms[1]) + (terms[2] + terms[3])


def reference(u: np.ndarray, v: np.ndarray, mask: int = 0xFF) -> np.ndarray:
    """The byte dots of int32 words, (..., words) each, summed over the last axis, in int64."""
    ub = np.ascontiguousarray(u).view(np.uint8).reshape(*u.shape, 4).astype(np.int64) & mask
    vb = np.ascontiguousarray(v).view(np.int8).reshape(*v.shape, 4).astype(np.int64)
    return (ub * vb).sum((-1, -2))


def words(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Random int32 words whose bytes cover the extremes (0, 127, 128, 255) as well as random values."""
    b = rng.integers(0, 256, (*shape, 4), dtype=np.uint8)
    b.reshape(-1)[:8] = [0, 127, 128, 255, 255, 128, 127, 0]
    return b.view(np.int32)[..., 0]


@pytest.fixture(params=["vnni", "shifts"])
def path(request, monkeypatch) -> str:
    """Both ways of writing a byte dot: the host's instruction (skipped without AVX512-VNNI) and vector shifts."""
    if request.param == "vnni":
        if not byte_dot.host_has_byte_dot(16):
            pytest.skip("this CPU has no AVX512-VNNI (vpdpbusd): the shifts path is tested instead")
    else:
        monkeypatch.setattr(llvm_tiles, "host_has_byte_dot", lambda width: False)
    return str(request.param)


def _source(out: Tensor) -> str:
    (si,) = [s for s in out.schedule() if not s.is_copy]
    return get_program(si.ast, LLVMRenderer()).src


@pytest.mark.parametrize("mask", [0xFF, 0x0F])
def test_matrix_vector_byte_dots(path, mask):
    rng = np.random.default_rng(mask)
    w, x = words(rng, (64, 33, 16)), words(rng, (33,))  # (tiles, words, rows of a tile): rows side by side
    y = dot4(Tensor(w), Tensor(x).reshape(1, -1, 1), mask).sum(1)
    src = _source(y)
    assert ("vpdpbusd" in src) == (path == "vnni"), "the byte dots were not written as the path says"
    assert "<16 x i32>" in src, "the rows were not one vector tile"
    np.testing.assert_array_equal(y.numpy(), reference(np.moveaxis(w, 1, -1), x[None, None], mask))


def test_byte_dots_among_other_terms_feed_a_float_reduction(path):
    """Two dots per word pair and another term in the same sum, converted to float and scaled per step of the
    reduction (a quantized block's integer sum times its scales)."""
    rng = np.random.default_rng(3)
    w, x = words(rng, (8, 40, 16)), words(rng, (40, 2))
    s = rng.standard_normal((40, 16)).astype(np.float32)
    off = rng.integers(-1000, 1000, (40,)).astype(np.int32)
    tw, tx = Tensor(w), Tensor(x).reshape(1, 40, 2, 1)
    isum = dot4(tw & 0x0F0F0F0F, tx[:, :, 0]) + dot4((tw >> 4) & 0x0F0F0F0F, tx[:, :, 1]) + \
        Tensor(off).reshape(1, 40, 1)
    y = (isum.cast(dtypes.float32) * Tensor(s)).sum(1)
    assert ("vpdpbusd" in _source(y)) == (path == "vnni")
    lo, hi = w & 0x0F0F0F0F, (w >> 4) & 0x0F0F0F0F
    want = reference(lo[..., None], x[None, :, None, 0:1]) + reference(hi[..., None], x[None, :, None, 1:2]) + \
        off[None, :, None]
    # float32 sums of integer-sized terms: their rounding is relative to the terms, not to the (smaller) total
    np.testing.assert_allclose(y.numpy(), (want * s[None]).sum(1), rtol=1e-5, atol=1e-5 * np.abs(want * s).max())


def test_sums_that_are_not_byte_dots_stay_as_written():
    """Three of the four products, or a byte picked by a shift that does not match its partner's, are no byte dot:
    nothing is recognised, and the kernel computes what it says."""
    rng = np.random.default_rng(5)
    w, x = words(rng, (4, 9, 16)), words(rng, (9,))
    tw, tx = Tensor(w), Tensor(x).reshape(1, -1, 1)
    three = sum(((tw >> (8 * i)) & 0xFF) * ((tx << (24 - 8 * i)) >> 24) for i in range(3))
    crossed = ((tw & 0xFF) * ((tx << 16) >> 24)) + ((tw >> 8) & 0xFF) * ((tx << 24) >> 24) + \
        ((tw >> 16) & 0xFF) * ((tx << 8) >> 24) + ((tw >> 24) & 0xFF) * (tx >> 24)
    for expr in (three, crossed):
        assert isinstance(expr, Tensor)
        y = expr.sum(1)
        assert "vpdpbusd" not in _source(y)
        ub = w.view(np.uint8).reshape(4, 9, 16, 4).astype(np.int64)
        vb = x.view(np.int8).reshape(9, 4).astype(np.int64)[None, :, None]
        if expr is three:
            want = (ub[..., :3] * vb[..., :3]).sum((1, 3))
        else:
            want = (ub * vb[..., [1, 0, 2, 3]]).sum((1, 3))
        np.testing.assert_array_equal(y.numpy(), want)


def test_float16_bits_and_constant_shifts_are_vector_lanes():
    """A block's float16 scale read as bits (uint16) and converted, and shifts by constants, are computed on vectors
    in a tile (no lane gathered from scalar code), with the scalar code's values."""
    rng = np.random.default_rng(7)
    bits = rng.standard_normal((64, 256)).astype(np.float16).view(np.uint16)
    q = rng.integers(-(2**31), 2**31, (64, 256), dtype=np.int64).astype(np.int32)
    x = rng.standard_normal(64).astype(np.float32)
    d = Tensor(bits).bitcast(dtypes.float16).cast(dtypes.float32)
    y = (d * ((Tensor(q) >> 4) & 0xF).cast(dtypes.float32) * Tensor(x).reshape(64, 1)).sum(0)
    src = _source(y)
    assert "fpext <16 x half>" in src and "ashr <16 x i32>" in src
    assert not re.search(r"insertelement <[^>]*> %\w+, [^,]+, i64 [1-9]", src), "lanes were gathered from scalars"
    want = (bits.view(np.float16).astype(np.float64) * ((q >> 4) & 0xF) * x[:, None]).sum(0)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)
