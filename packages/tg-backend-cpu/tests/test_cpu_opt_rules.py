"""The CPU's tuning rules (`tg_backend_cpu.opt_rules`): the opts that matmuls, convolutions, reductions, pools and
transposes get on the CPU without BEAM, through the renderers' `opt_rules` hook."""

from __future__ import annotations

import pytest
from tg_backend_cpu.llvm_renderer import LLVMRenderer
from tg_backend_cpu.opt_rules import _Cpu, cpu_opt_rules
from tinygrad.codegen import get_program
from tinygrad.codegen.lowerer import lower_kernel
from tinygrad.codegen.opt import Opt, OptOps, OptState, optimize
from tinygrad.dtype import dtypes
from tinygrad.renderer.cstyle import CStyleRenderer
from tinygrad.uop.ops import AxisKind, Ops, UOp


class CpuRules(CStyleRenderer):
    """The C-style base with the CPU's rules and the base's knobs (the CPU renderer's values), without the C compiler
    that `CPURenderer` looks up."""

    opt_rules = cpu_opt_rules


def param(index: int, size: int) -> UOp:
    return UOp(Ops.PARAM, dtypes.float32, (), (index, size))


def store(out_shape: tuple[int, ...], value: UOp) -> UOp:
    size = 1
    for s in out_shape:
        size *= s
    out = param(0, size).reshape(out_shape)
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, value)),))


def matmul_ast(m: int, k: int, n: int) -> UOp:
    """out[m, n] = sum_k a[m, k] * b[k, n], the way Tensor.matmul builds it: broadcast, multiply, reduce."""
    a = param(1, m * k).reshape((m, 1, k)).expand((m, n, k))
    b = param(2, k * n).reshape((k, n)).permute((1, 0)).reshape((1, n, k)).expand((m, n, k))
    return store((m, n, 1), (a * b).reduce_axis(Ops.ADD, (2,)))


def reduce_ast(rows: int, cols: int) -> UOp:
    return store((rows, 1), param(1, rows * cols).reshape((rows, cols)).reduce_axis(Ops.ADD, (1,)))


def sizes(state: OptState, kind: AxisKind) -> list[int]:
    return [int(r.src[0].arg) for r in state.ranges(kind)]


def test_both_cpu_renderers_choose_by_the_cpu_rules() -> None:
    ast = lower_kernel(matmul_ast(64, 64, 64))
    want = optimize(ast, CpuRules()).applied
    assert want and optimize(ast, LLVMRenderer()).applied == want
    # the C-style base without the rules, a loop target of no tuning of its own, runs the kernel as lowered
    assert optimize(ast, CStyleRenderer()).applied == ()


def test_the_rules_block_a_big_matmul_for_l2_and_leave_a_small_one() -> None:
    big = optimize(lower_kernel(matmul_ast(1024, 1024, 1024)), CpuRules())
    assert [o.op for o in big.applied] == [OptOps.UPCAST, OptOps.UPCAST, OptOps.TILE, OptOps.SWAP]
    # the outermost loop now walks blocks of column tiles; a strip of B per tile is 1024 * 32 floats (128 KiB)
    assert sizes(big, AxisKind.GLOBAL) == [8, 128, 4]
    small = optimize(lower_kernel(matmul_ast(64, 64, 64)), CpuRules())
    assert OptOps.TILE not in [o.op for o in small.applied] and small.applied
    # a long reduction over few rows (a prefill's projection): a strip of 8192 * 32 floats (1 MiB) outgrows the L2
    # budget alone, so no block; the column tiles go outermost, each strip read from memory once
    budget = _Cpu(CpuRules()).l2_budget
    assert 8192 * 32 * 4 > budget
    long = optimize(lower_kernel(matmul_ast(64, 8192, 2048)), CpuRules())
    assert [o.op for o in long.applied] == [OptOps.UPCAST, OptOps.UPCAST, OptOps.SWAP]
    assert sizes(long, AxisKind.GLOBAL) == [2048 // 32, 64 // 8]


def test_the_rules_tile_a_matmul() -> None:
    cpu = optimize(lower_kernel(matmul_ast(64, 64, 64)), CpuRules()).applied
    assert [o.op for o in cpu] == [OptOps.UPCAST, OptOps.UPCAST]
    assert cpu[0] == Opt(OptOps.UPCAST, 1, 32)  # the columns: contiguous in b and in the output


def test_the_rules_keep_the_outermost_loop_for_the_thread_pool() -> None:
    s = optimize(lower_kernel(matmul_ast(256, 64, 256)), CpuRules())
    outer = s.ranges(AxisKind.GLOBAL)[0]
    assert outer.arg.axis == 0 and int(outer.src[0].arg) > 1



def test_the_rules_tile_a_matrix_vector_product_by_rows_of_its_one_output_axis() -> None:
    """x @ W with W stored output-major (a quantized layer's packed blocks are too): one output axis, contiguous in
    W's loads; nothing to reuse along a second axis, so the tile is `min_tile` rows of it and nothing else (the SIMD
    and reuse upcasts would make it 256 rows, whose accumulators and per-row scales spill)."""
    rows = _Cpu(CpuRules()).min_tile
    s = optimize(lower_kernel(matmul_ast(1, 1024, 4096)), CpuRules())
    assert s.applied == (Opt(OptOps.UPCAST, 0, rows),)
    assert sizes(s, AxisKind.GLOBAL) == [4096 // rows]  # the loop the thread pool splits
    # a short axis keeps two iterations for the threads
    short = optimize(lower_kernel(matmul_ast(1, 64, 256)), CpuRules())
    assert short.applied == (Opt(OptOps.UPCAST, 0, min(rows, 128)),) and sizes(short, AxisKind.GLOBAL)[0] >= 2
    # a quantized layer's packing, (tiles, k, tile): the tile axis whole, rows of one tile read in order
    tiles, k, tile = 8, 512, 128
    w = param(1, tiles * k * tile).reshape((tiles, k, tile)).permute((0, 2, 1))
    x = param(2, k).reshape((1, 1, k)).expand((tiles, tile, k))
    packed = optimize(lower_kernel(store((tiles, tile, 1), (w * x).reduce_axis(Ops.ADD, (2,)))), CpuRules())
    assert packed.applied == (Opt(OptOps.UPCAST, 1, min(rows, tile)),)
    # against a row-major matrix (loads along the reduction) the rule does not apply
    along = optimize(lower_kernel(reduce_ast(4096, 1024)), CpuRules()).applied
    assert along and along[0].op is OptOps.UNROLL

def last_kernel_opts(t: object) -> tuple[Opt, ...]:
    """The opts the CPU heuristics give the last kernel of a tensor's schedule."""
    return optimize(lower_kernel(t.schedule()[-1].ast), CpuRules()).applied  # type: ignore[attr-defined]


def _heaviest_kernel(t: object) -> object:
    """The schedule item of t with the most estimated operations (a gradient also schedules small copies)."""
    items = t.schedule()  # type: ignore[attr-defined]
    return max(items, key=lambda si: get_program(si.ast, CpuRules()).estimated_ops).ast


def test_the_rules_tile_convolutions_by_whole_rows_and_a_second_reuse_axis() -> None:
    from tinygrad import Tensor
    # a 5x5 convolution of 32 channels over 24x24 images (the batch does not change the choice)
    x, w = Tensor.empty(8, 32, 24, 24, requires_grad=True), Tensor.empty(32, 32, 5, 5, requires_grad=True)
    out = x.conv2d(w)
    fwd = optimize(lower_kernel(out.schedule()[-1].ast), CpuRules())
    # a whole output row (20, not a multiple of a vector: 2 registers) as the SIMD axis, 4 output channels reusing
    # each load, and 4 output rows (axis 2), whose input rows the kernel rows share: 32 registers of accumulators
    assert fwd.applied == (Opt(OptOps.UPCAST, 3, 20), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 2, 4))
    (grad_w,) = (out * Tensor.empty(8, 32, 20, 20)).sum().gradient(w)
    wgrad = optimize(lower_kernel(_heaviest_kernel(grad_w)), CpuRules())  # type: ignore[arg-type]
    # partial sums over chunks of 4 images (axis 0) of windows read from a channels-last copy: the 32 input
    # channels (axis 2) are the SIMD axis, contiguous in the loads of the loop though not in the store; 8 output
    # channels (axis 1) reuse each vector
    assert wgrad.applied == (Opt(OptOps.UPCAST, 2, 32), Opt(OptOps.UPCAST, 1, 8))


def test_the_rules_grow_a_small_convolutions_tile_along_its_output_rows() -> None:
    from tinygrad import Tensor
    # a 3x3 convolution with rows of 8, short vectors; 8 output channels times 8 columns is a
    # small tile, and it grows along the output rows (axis 2), whose input rows the 3 kernel rows share, not
    # along the batch
    ast = Tensor.empty(8, 64, 10, 10).conv2d(Tensor.empty(64, 64, 3, 3)).schedule()[-1].ast
    assert optimize(lower_kernel(ast), CpuRules()).applied == (
        Opt(OptOps.UPCAST, 3, 8), Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 2, 4))
    # a 6-wide row fills under half a register: the weight is read channels-last instead (next test)


def test_the_rules_tile_short_rows_by_output_channels_and_images(monkeypatch: pytest.MonkeyPatch) -> None:
    from tinygrad import Device, Tensor
    # padded convolutions that test their border themselves (a device whose knobs ask for a copy with the border
    # written out, conv_border_copy, reads that copy instead and leaves rows of 8 in the usual layout)
    monkeypatch.setattr(Device[Device.DEFAULT].renderer, "conv_border_copy", False)
    # output rows under half a register (4x4 or 6x6 layers): the weight is read
    # from a copy with the output channels innermost, which become the SIMD axis (32: two registers), and the
    # images the reuse axis, not the padded output rows, which would test the border in every lane
    items = Tensor.empty(32, 64, 4, 4).conv2d(Tensor.empty(64, 64, 3, 3), padding=1).schedule()
    assert len(items) == 2, "the weight's copy, then the convolution"
    assert optimize(lower_kernel(items[-1].ast), CpuRules()).applied == (
        Opt(OptOps.UPCAST, 1, 32), Opt(OptOps.UPCAST, 0, 8))
    # a batch of 8 stays a loop of several iterations (threads split it): the channels grow the tile instead
    items = Tensor.empty(8, 64, 8, 8).conv2d(Tensor.empty(64, 64, 3, 3)).schedule()
    applied = optimize(lower_kernel(items[-1].ast), CpuRules()).applied
    assert len(items) == 2 and applied[0] == Opt(OptOps.UPCAST, 1, 32) and all(o.axis < 2 for o in applied)
    # a padded row of 8 (half a register, and a border test in every lane) reads the channels-last weight too; its
    # 32 output channels, a whole axis that the input is broadcast to, are tiled by 16 (the whole 32 leaves too few
    # registers for the broadcast input rows)
    items = Tensor.empty(32, 32, 8, 8).conv2d(Tensor.empty(32, 32, 3, 3), padding=1).schedule()
    assert len(items) == 2 and optimize(lower_kernel(items[-1].ast), CpuRules()).applied == (
        Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 0, 8))
    # strided, the input does not slide along the output row as along the kernel row: all 32 channels
    items = Tensor.empty(32, 16, 16, 16).conv2d(Tensor.empty(32, 16, 3, 3), padding=1, stride=2).schedule()
    assert len(items) == 2 and optimize(lower_kernel(items[-1].ast), CpuRules()).applied == (
        Opt(OptOps.UPCAST, 1, 32), Opt(OptOps.UPCAST, 0, 8))
    # rows of 8 or more, a batch under 4, output channels that are not whole registers: the usual layout
    for x, w in [((8, 64, 10, 10), (64, 64, 3, 3)), ((2, 64, 6, 6), (64, 64, 3, 3)), ((8, 64, 6, 6), (48, 64, 3, 3))]:
        assert len(Tensor.empty(*x).conv2d(Tensor.empty(*w)).schedule()) == 1


class IntelCpuRules(CpuRules):
    """The CPU's rules for a core with two 512-bit FMA units of 4 cycles: 8 chains of multiply-adds in flight."""

    fma_chains = 8


def test_the_rules_grow_a_big_convolutions_tile_to_twice_the_fma_chains(monkeypatch: pytest.MonkeyPatch) -> None:
    from tinygrad import Device, Tensor
    monkeypatch.setattr(Device[Device.DEFAULT].renderer, "conv_border_copy", False)
    # a padded row of 8 read against a channels-last weight: 16 output channels times 8 images is 8 vector
    # accumulators, as many as 8 FMA chains; the tile grows to the whole 32 channels (16 vectors), twice the chains.
    # With 4 chains (AMD's Zen 4, the default) 8 vectors are twice the chains already: no growth (the previous test)
    ast = Tensor.empty(32, 32, 8, 8).conv2d(Tensor.empty(32, 32, 3, 3), padding=1).schedule()[-1].ast
    assert optimize(lower_kernel(ast), IntelCpuRules()).applied == (
        Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 2))
    # tiles of 16 vectors or more, and kernels without a window, are as before
    ast = Tensor.empty(8, 32, 24, 24).conv2d(Tensor.empty(32, 32, 5, 5)).schedule()[-1].ast
    assert optimize(lower_kernel(ast), IntelCpuRules()).applied == optimize(lower_kernel(ast), CpuRules()).applied
    big = lower_kernel(matmul_ast(1024, 1024, 1024))
    assert optimize(big, IntelCpuRules()).applied == optimize(big, CpuRules()).applied


@pytest.mark.parametrize("vendor, flags, chains", [
    ("GenuineIntel", "fpu avx2 avx512f avx512bw", 8), ("GenuineIntel", "fpu avx2", 4),
    ("AuthenticAMD", "fpu avx2 avx512f avx512bw", 4), (None, "", 4)])
def test_the_fma_chains_follow_the_hosts_cpu(monkeypatch: pytest.MonkeyPatch, vendor: str | None, flags: str,
                                             chains: int) -> None:
    import io

    from tg_backend_cpu import compiler
    text = f"processor\t: 0\nvendor_id\t: {vendor}\nflags\t\t: {flags}\n" if vendor else "processor\t: 0\n"

    def fake_open(path: str, *args: object, **kwargs: object) -> io.StringIO:
        assert path == "/proc/cpuinfo"
        return io.StringIO(text)
    monkeypatch.setattr(compiler, "open", fake_open, raising=False)
    assert compiler.host_fma_chains.__wrapped__() == chains
    # both CPU renderers read the host's
    assert LLVMRenderer.fma_chains == compiler.host_fma_chains()


def test_the_rules_grow_the_tile_of_a_batch_one_convolution_but_not_of_a_small_matmul(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np
    from tinygrad import Device, Tensor
    # A 4x4 layer at batch 1 (0.6M multiply-adds, under CPU_SMALL_WORK) reading the padded copy
    # of its input: its tile grows from 8 channels x a row of 4 to the whole 4x4 outputs of 8 channels, and on to
    # 16 channels: half the registers (max_tile). A window
    # kernel grows from CPU_SMALL_WINDOW_WORK; a matmul keeps the CPU_SMALL_WORK floor.
    monkeypatch.setattr(Device[Device.DEFAULT].renderer, "conv_border_copy", True)
    rng = np.random.default_rng(0)
    xs, ws = rng.standard_normal((1, 64, 4, 4), np.float32), rng.standard_normal((64, 64, 3, 3), np.float32)
    out = Tensor(xs).conv2d(Tensor(ws), padding=1)
    items = out.schedule()
    assert len(items) == 2, "the padded copy, then the convolution"
    conv = optimize(lower_kernel(items[-1].ast), CpuRules())
    assert conv.applied == (Opt(OptOps.UPCAST, 2, 4), Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 4),
                            Opt(OptOps.UPCAST, 0, 2))
    padded = np.pad(xs, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.einsum("ncyxij,kcij->nkyx", np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3)), ws)
    np.testing.assert_allclose(Tensor(xs).conv2d(Tensor(ws), padding=1).numpy(), want, rtol=1e-4, atol=1e-4)
    # a 10x576 weight gradient (3M multiply-adds): no growth, whose unrolled body cost more compile
    # time than the kernel saved
    small = optimize(lower_kernel(matmul_ast(10, 512, 576)), CpuRules())
    assert small.upcast_size() == 32


def test_the_rules_plan_an_uneven_rows_tile_in_registers() -> None:
    from tinygrad import Tensor
    # 10-wide rows (one register of 16 lanes each): 4 channels times 5 of the 10 output rows, 20 registers; the
    # whole 10 rows would be 40, past the 32 registers
    ast = Tensor.empty(8, 64, 12, 12).conv2d(Tensor.empty(32, 64, 3, 3)).schedule()[-1].ast
    assert optimize(lower_kernel(ast), CpuRules()).applied == (
        Opt(OptOps.UPCAST, 3, 10), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 2, 5))
    # little work (3 input channels of 3x3): the even rows' tile of 8 channels, no rows
    ast = Tensor.empty(8, 3, 32, 32).conv2d(Tensor.empty(16, 3, 3, 3)).schedule()[-1].ast
    assert optimize(lower_kernel(ast), CpuRules()).applied == (
        Opt(OptOps.UPCAST, 3, 30), Opt(OptOps.UPCAST, 1, 8))
    # no sliding axis (a matmul 20 columns wide): 8 rows, as for even rows
    ast = (Tensor.empty(256, 512) @ Tensor.empty(512, 20)).schedule()[-1].ast
    assert optimize(lower_kernel(ast), CpuRules()).applied == (
        Opt(OptOps.UPCAST, 1, 20), Opt(OptOps.UPCAST, 0, 8))


def test_the_rules_ignore_loads_outside_the_reduce_loop_when_choosing_the_simd_axis() -> None:
    from tinygrad import Tensor
    from tinygrad.codegen.opt.heuristics import access_strides, accesses_in_the_loop
    # a convolution's input with the previous layer's bias fused in: the bias is contiguous along the input
    # channels but loaded once per output, outside the reduction, so it must not make them the SIMD direction
    # (4 channels: with 8 or more the weight gradient reads a channels-last copy of the input, where the bias is
    # computed; with fewer, a channels-last copy of g, whose 64 output channels are the SIMD direction)
    raw, bias = Tensor.empty(8, 4, 8, 8), Tensor.empty(4)
    w = Tensor.empty(64, 4, 3, 3, requires_grad=True)
    out = (raw + bias.reshape(1, 4, 1, 1)).relu().conv2d(w)
    (grad_w,) = (out * Tensor.empty(8, 64, 6, 6)).sum().gradient(w)
    state = OptState.from_lowered(lower_kernel(_heaviest_kernel(grad_w)))  # type: ignore[arg-type]
    channels = state.ranges(AxisKind.GLOBAL)[-3]  # (chunks,) out channels, in channels, kernel rows, kernel columns
    along = access_strides(state, channels)
    in_loop = accesses_in_the_loop(state)
    # the bias: contiguous along the channels and outside the loop; the windows and g: inside it
    assert [(s, inside) for s, inside in zip(along, in_loop) if s == 1] == [(1, False)]
    assert in_loop.count(True) >= 3  # the store, the windows, g
    applied = optimize(lower_kernel(_heaviest_kernel(grad_w)), CpuRules()).applied  # type: ignore[arg-type]
    # the SIMD direction (the first UPCAST) is the output channels (axis 0), not the input channels (axis 1)
    assert applied[0] == Opt(OptOps.UPCAST, 0, 32) and state.axes.index(channels) == 1


def test_the_rules_unroll_a_short_reduce_row_whole_for_few_outputs() -> None:
    from tinygrad import Tensor
    # a BatchNorm's statistics: 32 outputs, each a sum over the batch and 20x20 positions. The row of 20 is
    # unrolled whole (the C compiler makes vectors of it) and two rows at a time
    ast = Tensor.empty(8, 32, 20, 20).sum((0, 2, 3)).schedule()[-1].ast
    applied = optimize(lower_kernel(ast), CpuRules()).applied
    assert applied == (Opt(OptOps.UNROLL, 3, 20), Opt(OptOps.UNROLL, 2, 2))
    # a long vector's sum (its one output has no axis): 16 accumulators, one AVX-512 register of floats
    assert optimize(lower_kernel(reduce_ast(1, 4096)), CpuRules()).applied == (Opt(OptOps.UNROLL, 0, 16),)


def test_the_rules_compute_the_partial_sums_of_a_split_reduction_side_by_side() -> None:
    from tinygrad import Tensor
    # a BatchNorm's statistics over a batch big enough to split: 32 channels times 4 partial sums over chunks of
    # the batch. The 4 sums are computed side by side (their own accumulators and streams of loads), the row
    # unrolled by 4; the channels stay the outer loop, which threads split
    x = Tensor.empty(512, 32, 20, 20)
    kernels = [si.ast for si in x.sum((0, 2, 3)).schedule()]
    partial = next(ast for ast in kernels if len(OptState.from_lowered(lower_kernel(ast)).axes) == 5)
    sizes = [int(r.src[0].arg) for r in OptState.from_lowered(lower_kernel(partial)).axes]
    assert sizes == [32, 4, 128, 20, 20]
    assert optimize(lower_kernel(partial), CpuRules()).applied == (
        Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 3, 4))
    # an output axis that is the outermost stays a loop: no partial sums side by side, the row unrolled whole
    assert last_kernel_opts(Tensor.empty(8, 4, 20, 20).sum((0, 2, 3))) == (
        Opt(OptOps.UNROLL, 3, 20), Opt(OptOps.UNROLL, 2, 2))


def test_the_rules_move_a_big_transpose_in_4x4_blocks() -> None:
    from tg_backend_cpu.opt_rules import CPU_TRANSPOSE_MIN
    from tinygrad import Tensor

    # a channels-last copy: stored along the channels, loaded along the rows; the channels and the row by 4
    assert last_kernel_opts(Tensor.empty(64, 32, 24, 24).permute(0, 2, 3, 1).contiguous()) == (
        Opt(OptOps.UPCAST, 3, 4), Opt(OptOps.UPCAST, 2, 4))
    # too small to be worth the bigger body, or no transpose (a plain copy), or a side not a multiple of 4: nothing
    assert 2 * 32 * 24 * 24 < CPU_TRANSPOSE_MIN
    assert last_kernel_opts(Tensor.empty(2, 32, 24, 24).permute(0, 2, 3, 1).contiguous()) == ()
    assert last_kernel_opts(Tensor.empty(64, 32, 24, 24).contiguous() + 1) == ()
    assert last_kernel_opts(Tensor.empty(64, 32, 10, 10).permute(0, 2, 3, 1).contiguous()) == ()
    # a matrix transposed: its rows (the outermost axis, which threads split) by 4 only when there are many
    assert last_kernel_opts(Tensor.empty(512, 256).T.contiguous()) == (
        Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4))
    assert last_kernel_opts(Tensor.empty(16384, 16).T.contiguous()) == ()


def test_the_rules_give_a_copy_of_grouped_rows_explicit_vector_lanes() -> None:
    """A copy whose innermost stored axis reads its source through a division (tiles of 16 rows copied into panels
    of 32, as a dequantized weight is packed for a prefill): that axis UPCAST by a vector of float32 lanes, and
    the values are numpy's. A plain copy, or a small one, gets nothing."""
    import numpy as np
    from tg_backend_cpu.opt_rules import CPU_TRANSPOSE_MIN
    from tinygrad import Tensor

    lanes = _Cpu(CpuRules()).lanes

    def panels(t: Tensor) -> Tensor:  # (n, 2, k, 16) -> (n, k, 32): two tiles of 16 rows side by side
        n, _, k, _ = t.shape
        return t.permute(0, 2, 1, 3).reshape(n, k, 32).contiguous()

    assert last_kernel_opts(panels(Tensor.empty(64, 2, 2048, 16))) == (Opt(OptOps.UPCAST, 2, lanes),)
    assert last_kernel_opts(Tensor.empty(64, 2048, 32).contiguous() + 1) == ()
    assert 2 * 2 * 64 * 16 < CPU_TRANSPOSE_MIN
    assert last_kernel_opts(panels(Tensor.empty(2, 2, 64, 16))) == ()
    src = np.arange(8 * 2 * 512 * 16, dtype=np.float32).reshape(8, 2, 512, 16)
    np.testing.assert_array_equal(panels(Tensor(src)).numpy(), src.transpose(0, 2, 1, 3).reshape(8, 512, 32))


def test_the_rules_unpack_values_sharing_a_groups_scale_a_few_positions_at_a_time() -> None:
    """Values unpacked into panels of 32 with a scale per group of 32 positions of the middle axis (a quantized
    weight's blocks made float for a prefill's matmul): the middle axis UPCAST by CPU_GROUP_SHARED, so that the
    group's scale is read and converted once per few positions, and the stored axis by two vectors; the values are
    numpy's. Without the group (a scale per position), or small, it gets nothing."""
    import numpy as np
    from tg_backend_cpu.opt_rules import CPU_GROUP_SHARED, CPU_TRANSPOSE_MIN
    from tinygrad import Tensor

    lanes = _Cpu(CpuRules()).lanes

    def unpacked(q: Tensor, scale: Tensor) -> Tensor:  # q (n, k, 32), scale (n, k // 32, 32): one per 32 of k
        n, k, w = q.shape
        return (q * scale.reshape(n, k // 32, 1, w).expand(n, k // 32, 32, w).reshape(n, k, w)).contiguous()

    assert last_kernel_opts(unpacked(Tensor.empty(64, 2048, 32), Tensor.empty(64, 64, 32))) == \
        (Opt(OptOps.UPCAST, 2, 2 * lanes), Opt(OptOps.UPCAST, 1, CPU_GROUP_SHARED))
    assert last_kernel_opts((Tensor.empty(64, 2048, 32) * Tensor.empty(64, 2048, 32)).contiguous()) == ()
    assert 2 * 64 * 32 < CPU_TRANSPOSE_MIN
    assert last_kernel_opts(unpacked(Tensor.empty(2, 64, 32), Tensor.empty(2, 2, 32))) == ()
    rng = np.random.default_rng(0)
    q, scale = rng.standard_normal((4, 1024, 32), dtype=np.float32), rng.standard_normal((4, 32, 32), dtype=np.float32)
    np.testing.assert_array_equal(unpacked(Tensor(q), Tensor(scale)).numpy(), q * np.repeat(scale, 32, axis=1))


def test_the_rules_compute_a_small_windows_outputs_for_8_images_side_by_side() -> None:
    from tinygrad import Tensor

    # a 2x2 max pool over a batch: 8 images side by side, the window a loop
    assert last_kernel_opts(Tensor.empty(64, 32, 20, 20).max_pool2d(2)) == (Opt(OptOps.UPCAST, 0, 8),)
    # an outermost axis too short to keep a loop after that, or rows of whole registers (16 wide), or a window of
    # one axis (a matmul's short K): unrolled whole, as before
    unrolled = (Opt(OptOps.UNROLL, 5, 2), Opt(OptOps.UNROLL, 4, 2))
    assert last_kernel_opts(Tensor.empty(8, 32, 20, 20).max_pool2d(2)) == unrolled
    assert last_kernel_opts(Tensor.empty(64, 16, 32, 32).max_pool2d(2)) == unrolled
    assert last_kernel_opts(Tensor.empty(512, 10) @ Tensor.empty(10, 576)) != (Opt(OptOps.UPCAST, 0, 8),)
