"""The LLVM path's register tiles as LLVM vectors (the default; CPU_VECTOR_TILES=0: scalars) and its contraction
rules (llvm_tiles.py, CPU_FMA): a tile's accumulators are `<N x T>` values updated by vector instructions. Under
"accumulate" a product added to a reduction's accumulator is one `llvm.fmuladd` and no other multiply and add are
fused ("all": every product that feeds an add, "none": none). Under each of these, and under "contract" (LLVM's
choice), a kernel computes bit for bit what it computes with scalar tiles, and under "accumulate" (the default) and
"none" an elementwise expression gives the same bits in every kernel."""

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


def test_only_fused_pairs_carry_the_contract_flag() -> None:
    x, w = Tensor.randn(64, 72).realize(), Tensor.randn(72, 48).realize()
    for vector_tiles in (True, False):
        spec, _ = _last_kernel(((x @ w) * 3 + 1).exp(), vector_tiles, "contract")
        assert " contract " in spec.src and "@llvm.fmuladd.f32" not in spec.src
        for fma in ("none", "accumulate", "all"):
            spec, _ = _last_kernel(((x @ w) * 3 + 1).exp(), vector_tiles, fma)
            assert " fast " not in spec.src
            # a fused pair outside a vector tile is a product and an add that both carry `contract` (the product has
            # no other use, so the code generator fuses exactly those); nothing else carries the flag
            flagged = re.findall(r"= (\w+) contract ", spec.src)
            assert flagged.count("fmul") == len(flagged) - flagged.count("fmul"), flagged
            assert set(flagged) <= {"fmul", "fadd", "fsub"}
            fused = bool(flagged) or bool(re.search(r"@llvm\.fmuladd\.v\d+f32", spec.src))
            # the matmul's products are fused unless the rule is "none"; the elementwise `* 3 + 1` only under "all"
            assert fused == (fma != "none")
            elementwise = re.search(r"fmul contract float %t\d+, 0x4008000000000000", spec.src) is not None
            assert elementwise == (fma == "all"), spec.src[-3000:]


def test_accumulate_is_the_default_and_the_knob_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from tg_backend_cpu.llvm_renderer import fma_rule

    monkeypatch.delenv("CPU_FMA", raising=False)
    assert fma_rule() == "accumulate"
    monkeypatch.setenv("CPU_FMA", " Contract ")
    assert fma_rule() == "contract"
    monkeypatch.setenv("CPU_FMA", "fast")
    with pytest.raises(ValueError, match=r"CPU_FMA='fast' is not a contraction rule: set it to one of contract"):
        fma_rule()


def test_an_expression_rounds_alike_in_the_kernel_that_computes_it_and_after_a_store() -> None:
    # tinygrad's test_batchnorm_axis: a batch norm of random numbers, once with the numbers computed inside its kernel
    # (their last product next to `x - mean`) and once read from the buffer another kernel stored them in
    from tinygrad import Device

    if type(Device["CPU"].renderer).__name__ != "LLVMRenderer" or Device["CPU"].renderer.fma != "accumulate":
        pytest.skip("checks the LLVM path's default contraction rule (CPU_COMPILER or CPU_FMA picks another here)")
    Tensor.manual_seed(0)
    x = Tensor.randn(2, 4, 3, 2, 2)
    weight, bias, mean, invstd = (Tensor.randn(2, 3) for _ in range(4))
    fused = x.batchnorm(weight, bias, mean, invstd, axis=(0, 2)).permute(1, 0, 2, 3, 4).reshape(4, 6, 2, 2)
    stored_x = x.permute(1, 0, 2, 3, 4).reshape(4, 6, 2, 2)
    stored = stored_x.batchnorm(weight.flatten(), bias.flatten(), mean.flatten(), invstd.flatten())
    stored_x.realize(), weight.realize(), bias.realize(), mean.realize(), invstd.realize()
    np.testing.assert_array_equal(fused.numpy(), stored.numpy())


def _scalar_accumulators(src: str) -> int:
    """How many accumulators the kernel keeps as scalars (a stack slot of one float each)."""
    return len(re.findall(r"= alloca float\n", src))


@pytest.mark.parametrize("nested", [True, False])
def test_an_outer_reductions_update_reads_the_inner_reductions_tile_whole(
        nested: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A block-scaled matrix-vector product as one kernel (each block's sum over its values is a reduction inside the
    reduction over the blocks, a quantized product's form): the inner sums are a tile, and the outer tile's update
    reads that tile's vector ("tile" lanes), so it is a tile too: no accumulator is left a scalar; the same bits
    as scalar tiles. Without "tile" lanes (`nested=False`) the outer update stays scalar code reading every inner
    lane, with an accumulator per output."""
    import tg_backend_cpu.llvm_renderer as llvm_renderer
    plan = llvm_renderer.plan_vector_tiles
    monkeypatch.setattr(llvm_renderer, "plan_vector_tiles", lambda *a, **k: plan(*a, **{**k, "nested": nested}))
    rng = np.random.default_rng(7)
    rows = 256
    wn, xn = rng.standard_normal((8, 16, rows)).astype(np.float32), rng.standard_normal((8, 16, 1)).astype(np.float32)
    sn = rng.standard_normal((8, 1, rows)).astype(np.float32)

    def make() -> Tensor:
        return (Tensor(sn) * (Tensor(wn) * Tensor(xn)).sum(1, keepdim=True)).sum((0, 1))
    assert len(make().schedule()) == 1
    vector, inputs = _last_kernel(make(), vector_tiles=True)
    scalar, _ = _last_kernel(make(), vector_tiles=False)
    assert (_scalar_accumulators(vector.src) == 0) == nested, vector.src[:3000]
    got = _run(vector, inputs, (rows,))
    np.testing.assert_array_equal(got, _run(scalar, inputs, (rows,)))
    np.testing.assert_allclose(got, (sn * (wn * xn).sum(1, keepdims=True)).sum((0, 1)), rtol=1e-5, atol=1e-4)
