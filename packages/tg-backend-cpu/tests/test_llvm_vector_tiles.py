"""The LLVM path's register tiles as LLVM vectors (the default; CPU_VECTOR_TILES=0: scalars) and its contraction
rules (llvm_tiles.py, CPU_FMA): a tile's accumulators are `<N x T>` values updated by vector instructions. Under
"accumulate" a product added to a reduction's accumulator is one `llvm.fmuladd` and no other multiply and add are
fused ("all": every product that feeds an add, "none": none). Under each of these, and under the default
"contract", a kernel computes bit for bit what it computes with scalar tiles, and under "accumulate" and "none" an
elementwise expression gives the same bits in every kernel."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest
from tinygrad import Tensor
from tinygrad.codegen import ProgramSpec, get_program
from tinygrad.engine.realize import run_schedule
from tinygrad.uop.ops import UOp

pytest.importorskip("llvmlite")

from tg_backend_cpu.llvm_compiler import LLVMCompiler
from tg_backend_cpu.llvm_loader import entry_points
from tg_backend_cpu.llvm_renderer import LLVMRenderer
from tg_backend_cpu.program import CPUProgram


def _renderer(vector_tiles: bool, fma: str) -> LLVMRenderer:
    r = LLVMRenderer()
    r.vector_tiles, r.fma = vector_tiles, fma
    return r


def _last_kernel(out: Tensor, vector_tiles: bool, fma: str = "accumulate") -> tuple[ProgramSpec, list[np.ndarray]]:
    """`out`'s last kernel rendered with or without vector tiles and fused multiply-adds, and its inputs' contents
    (in PARAM order)."""
    *before, last = out.schedule()
    run_schedule(before)
    inputs = [np.ascontiguousarray(b.numpy()) for b in last.bufs[1:]]
    return get_program(last.ast, _renderer(vector_tiles, fma)), inputs


def _run(spec: ProgramSpec, inputs: list[np.ndarray], shape: tuple[int, ...] | list[int]) -> np.ndarray:
    program = CPUProgram(spec, LLVMCompiler().compile(spec.src), entry_points=entry_points)
    out = np.zeros(shape, np.float32)
    program(*[(a, a.ctypes.data) for a in (out, *inputs)])
    return out


CASES = [
    pytest.param(lambda x, w: x @ w, (64, 72), (72, 48), id="matmul"),
    pytest.param(lambda x, w: x.conv2d(w), (4, 8, 12, 12), (16, 8, 3, 3), id="conv"),
    pytest.param(lambda x, w: x.conv2d(w).relu(), (4, 8, 12, 12), (16, 8, 3, 3), id="conv-relu"),
    pytest.param(lambda x, w: (x - 0.5 * w.sum()).relu().sum(axis=0), (64, 256), (4,), id="relu-sums"),
    pytest.param(lambda x, w: (x * w.sum()).max(axis=0), (64, 256), (4,), id="maxima"),
    # output rows that are not a whole number of vectors: vectors of two parts (the end of one row, the start of the
    # next: `TileBuilder.parts`)
    pytest.param(lambda x, w: x.conv2d(w), (2, 4, 28, 28), (8, 4, 5, 5), id="conv-rows-of-24"),
    pytest.param(lambda x, w: x.conv2d(w), (2, 4, 24, 24), (8, 4, 5, 5), id="conv-rows-of-20"),
    pytest.param(lambda x, w: x.conv2d(w), (2, 8, 10, 10), (16, 8, 3, 3), id="conv-rows-of-8"),
    # per lane a value the tile cannot compute as a vector (a square root of a strided load): gathered lanes
    pytest.param(lambda x, w: (x * (x * x + w.sum()).sqrt()).sum(axis=0), (64, 256), (4,), id="gathered"),
]


@pytest.mark.parametrize("fma", ["contract", "none", "accumulate", "all"])
@pytest.mark.parametrize("make, x_shape, w_shape", CASES)
def test_vector_tiles_compute_bit_for_bit_what_scalar_tiles_do(
        make: Callable[[Tensor, Tensor], Tensor], x_shape: tuple[int, ...], w_shape: tuple[int, ...],
        fma: str) -> None:
    rng = np.random.default_rng(0)
    xn, wn = rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32)
    vector, inputs = _last_kernel(make(Tensor(xn), Tensor(wn)), vector_tiles=True, fma=fma)
    scalar, _ = _last_kernel(make(Tensor(xn), Tensor(wn)), vector_tiles=False, fma=fma)
    assert " = alloca <" in vector.src, vector.src[:3000]  # a vector accumulator
    assert " = alloca <" not in scalar.src
    want = make(Tensor(xn), Tensor(wn)).numpy()
    got = _run(vector, inputs, want.shape)
    np.testing.assert_array_equal(got, _run(scalar, inputs, want.shape))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    assert "<1 x" not in vector.src  # a part of one lane is a gathered lane, not a vector


@pytest.mark.parametrize("x_shape, w_shape", [((2, 4, 28, 28), (8, 4, 5, 5)), ((2, 8, 10, 10), (16, 8, 3, 3))],
                         ids=["rows-of-24", "rows-of-8"])
def test_rows_that_do_not_fill_vectors_share_them(x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> None:
    # the tile's accumulators fill whole vectors: a row of 24 is not a vector of 16 and one of 8 (which left the
    # register file short and ran slower than the SLP vectoriser's code), the vector that holds its last 8 lanes
    # holds the next row's first 8, loaded in two halves and joined
    spec, _ = _last_kernel(Tensor.empty(*x_shape).conv2d(Tensor.empty(*w_shape)), vector_tiles=True)
    widths = {int(n) for n in re.findall(r"%vacc\d+ = alloca <(\d+) x float>", spec.src)}
    assert widths == {16}, (widths, spec.src[:3000])
    assert re.search(r"shufflevector <16 x float> %t\d+, <16 x float> %t\d+", spec.src), spec.src[:3000]


def test_lanes_of_single_scalars_are_not_parts() -> None:
    # a quantized product's per-row scales (each built from two bytes, not a vector operation): two lanes of different
    # scalars are gathered, not two parts of one lane, which made tiles of 2 lanes that ran 4x slower than scalars
    from tg_backend_cpu.llvm_tiles import FusingTileBuilder
    from tinygrad.dtype import dtypes

    a, b = UOp.const(dtypes.float32, 1.5), UOp.const(dtypes.float32, 2.5)
    builder = FusingTileBuilder((), set(), {a: False, b: False}, dtypes.int32, {})
    assert builder.parts((a, b)) is None
    halves = builder.parts((a, a, b, b))  # two scalars, each broadcast to half of the vector
    assert halves is not None and halves.kind == "parts" and halves.sizes == (2, 2)


def test_vector_tiles_are_the_default_and_the_knob_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from tg_backend_cpu.llvm_renderer import vector_tiles_mode

    monkeypatch.delenv("CPU_VECTOR_TILES", raising=False)
    assert vector_tiles_mode() == "1"
    for mode in ("1", "full", "0", " FULL "):
        monkeypatch.setenv("CPU_VECTOR_TILES", mode)
        assert vector_tiles_mode() == mode.strip().lower()
    monkeypatch.setenv("CPU_VECTOR_TILES", "yes")
    with pytest.raises(ValueError, match=r"CPU_VECTOR_TILES='yes' is not a mode: set it to 1"):
        vector_tiles_mode()


def test_a_tiles_scalar_arithmetic_is_not_written() -> None:
    x, w = Tensor.randn(64, 72).realize(), Tensor.randn(72, 48).realize()
    spec, _ = _last_kernel(x @ w, vector_tiles=True)
    # the reduction's body is vector loads, splats and fused multiply-adds: no scalar multiply or add of floats
    assert "@llvm.fmuladd.v16f32" in spec.src
    assert not any(f"{op} float" in spec.src for op in ("fmul", "fadd")), spec.src[:3000]


def test_only_the_contract_rule_sets_a_fast_math_flag() -> None:
    x, w = Tensor.randn(64, 72).realize(), Tensor.randn(72, 48).realize()
    for vector_tiles in (True, False):
        spec, _ = _last_kernel(((x @ w) * 3 + 1).exp(), vector_tiles, "contract")
        assert " contract " in spec.src and "@llvm.fmuladd.f32" not in spec.src
        for fma in ("none", "accumulate", "all"):
            spec, _ = _last_kernel(((x @ w) * 3 + 1).exp(), vector_tiles, fma)
            assert " contract " not in spec.src and " fast " not in spec.src
            # the matmul's products are fused unless the rule is "none"; the elementwise `* 3 + 1` only under "all"
            assert bool(re.search(r"@llvm\.fmuladd\.(v\d+)?f32", spec.src)) == (fma != "none")
            assert ("float 0x4008000000000000, float 0x3FF0000000000000)" in spec.src) == (fma == "all")


def _has_fma() -> bool:
    from tg_backend_cpu.llvm_compiler import llvmlite_binding
    return "+fma" in llvmlite_binding().get_host_cpu_features().flatten().split(",")


def test_an_elementwise_multiply_add_is_fused_in_every_kernel_or_in_none() -> None:
    if not _has_fma():
        pytest.skip("this CPU has no FMA instructions: llvm.fmuladd is then a multiply and an add, never fused")
    # (1 + 2**-12)**2 - (1 + 2**-11) is 2**-24 when fused, 0 when the product is rounded first
    a = Tensor(np.full((4, 6, 2, 2), 1 + 2.0 ** -12, np.float32)).realize()
    c = Tensor(np.full((4, 6, 2, 2), -(1 + 2.0 ** -11), np.float32)).realize()
    at, ct = a.permute(1, 0, 3, 2), c.permute(1, 0, 3, 2)
    for fma, want in (("all", 2.0 ** -24), ("accumulate", 0.0), ("none", 0.0)):
        # a*b + c in two layouts, a*b - c and c - a*b (negating an operand is exact: the same magnitude)
        for expr, sign in ((a * a + c, 1), (at * at + ct, 1), (a * a - (-c), 1), ((-c) - a * a, -1)):
            spec, inputs = _last_kernel(expr, vector_tiles=False, fma=fma)
            got = _run(spec, inputs, [int(s) for s in expr.shape])
            assert (got == np.float32(sign * want)).all(), (fma, spec.src)


def test_full_mode_keeps_only_kernels_whose_tiles_fill_a_register() -> None:
    full = _renderer(vector_tiles=True, fma="accumulate")
    full.full_vector_tiles_only = True
    x, w = Tensor.randn(64, 72).realize(), Tensor.randn(72, 48).realize()
    assert " = alloca <16 x float>" in get_program((x @ w).schedule()[-1].ast, full).src
    # rows of 10 outputs are tiles of 8 + 2 lanes: the kernel keeps its scalar tile
    image, weight = Tensor.randn(4, 8, 12, 12).realize(), Tensor.randn(16, 8, 3, 3).realize()
    assert " = alloca <" not in get_program(image.conv2d(weight).schedule()[-1].ast, full).src
