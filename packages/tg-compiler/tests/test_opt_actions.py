"""Unit tests of the optimisation actions: how each one rewrites RANGEs, what it refuses, what the
linearizer and renderers make of the result."""

from __future__ import annotations

import pytest
from opt_helpers import elementwise_ast, matmul_ast, param, reduce_ast
from tinygrad.codegen import get_program
from tinygrad.codegen.linearize import linearize
from tinygrad.codegen.lowerer import lower_kernel
from tinygrad.codegen.opt import Opt, OptError, OptOps, OptState, apply_opt, expand_kernel, optimize
from tinygrad.dtype import dtypes
from tinygrad.helpers import Context
from tinygrad.renderer.cstyle import CStyleRenderer
from tinygrad.uop.ops import AxisKind, Ops, UOp


class GPURenderer(CStyleRenderer):
    """A has_local C-style target for tests that only look at the IR and launch sizes."""

    has_local = True
    local_max = (64, 64, 64)
    max_work_group_size = 128
    local_mem_max = 4096


def state_of(ast: object, *opts: Opt, renderer: CStyleRenderer | None = None) -> OptState:
    state = OptState.from_lowered(lower_kernel(ast))  # type: ignore[arg-type]
    for o in opts:
        state = apply_opt(state, o, renderer or CStyleRenderer())
    return state


def sizes(state: OptState, kind: AxisKind) -> list[int]:
    return [int(r.src[0].arg) for r in state.ranges(kind)]


def test_upcast_splits_a_global_axis_into_outer_and_upcast_ranges() -> None:
    s = state_of(matmul_ast(8, 16, 12), Opt(OptOps.UPCAST, 1, 4))
    assert sizes(s, AxisKind.GLOBAL) == [8, 3] and sizes(s, AxisKind.UPCAST) == [4]
    assert s.applied == (Opt(OptOps.UPCAST, 1, 4),)


def test_an_axis_keeps_its_number_after_a_split() -> None:
    s = state_of(matmul_ast(8, 16, 12), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 1, 3))
    assert sizes(s, AxisKind.GLOBAL) == [8] and sizes(s, AxisKind.UPCAST) == [4, 3]


def test_upcast_of_the_whole_axis_leaves_no_outer_loop_and_later_axes_move_down() -> None:
    s = state_of(matmul_ast(8, 16, 4), Opt(OptOps.UPCAST, 1, 4))
    assert sizes(s, AxisKind.GLOBAL) == [8]
    s = state_of(matmul_ast(2, 16, 4), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UNROLL, 1, 4))
    assert sizes(s, AxisKind.GLOBAL) == [4] and sizes(s, AxisKind.UNROLL) == [4]


def test_unroll_splits_a_reduce_axis() -> None:
    s = state_of(reduce_ast(3, 64), Opt(OptOps.UNROLL, 1, 8))
    assert sizes(s, AxisKind.REDUCE) == [8] and sizes(s, AxisKind.UNROLL) == [8]


@pytest.mark.parametrize("opt, message", [
    (Opt(OptOps.UPCAST, 1, 5), "does not divide"),
    (Opt(OptOps.UPCAST, 2, 4), "applies to global"),
    (Opt(OptOps.UNROLL, 0, 2), "applies to reduce"),
    (Opt(OptOps.UPCAST, 7, 2), "has 3 axes"),
    (Opt(OptOps.UPCAST, 0, 1), "at least 2"),
    (Opt(OptOps.LOCAL, 0, 2), "no work-groups"),
    (Opt(OptOps.GROUP, 2, 4), "no work-groups"),
    (Opt(OptOps.SWAP, 0, 2), "two global axes"),
])
def test_opts_that_do_not_apply_say_why(opt: Opt, message: str) -> None:
    with pytest.raises(OptError, match=message):
        state_of(matmul_ast(8, 16, 12), opt)


def test_too_much_upcasting_is_refused() -> None:
    with pytest.raises(OptError, match="values per work-item"):
        state_of(matmul_ast(64, 8, 64), Opt(OptOps.UPCAST, 0, 32), Opt(OptOps.UPCAST, 1, 32))


def test_group_needs_local_memory_and_fits_the_work_group() -> None:
    class NoLocalMemory(GPURenderer):
        local_mem_max = 0

    with pytest.raises(OptError, match="no local memory"):
        state_of(reduce_ast(2, 1000), Opt(OptOps.GROUP, 1, 16), renderer=NoLocalMemory())
    with pytest.raises(OptError, match="exceeds"):
        state_of(reduce_ast(2, 1000), Opt(OptOps.GROUP, 1, 256), renderer=GPURenderer())


def test_group_is_refused_with_upcast_outputs_or_an_unrolled_reduction() -> None:
    with pytest.raises(OptError, match="upcast"):
        state_of(reduce_ast(8, 1000), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.GROUP, 1, 16), renderer=GPURenderer())
    with pytest.raises(OptError, match="unrolled"):
        state_of(reduce_ast(1, 4096), Opt(OptOps.UNROLL, 0, 4), Opt(OptOps.GROUP, 0, 256), renderer=GPURenderer())


def test_swap_exchanges_the_loop_order() -> None:
    s = state_of(matmul_ast(8, 16, 12), Opt(OptOps.SWAP, 0, 1))
    program = linearize(expand_kernel(s))
    loops = [int(u.src[0].arg) for u in program if u.op is Ops.RANGE]
    assert loops == [12, 8, 16]  # the n loop now runs outside the m loop, the reduce stays innermost


def test_tile_splits_a_global_axis_into_two_loops_and_swap_moves_the_outer_one_out() -> None:
    s = state_of(matmul_ast(8, 16, 12), Opt(OptOps.TILE, 1, 4))
    assert sizes(s, AxisKind.GLOBAL) == [8, 3, 4] and not s.ranges(AxisKind.UPCAST)
    loops = [int(u.src[0].arg) for u in linearize(expand_kernel(s)) if u.op is Ops.RANGE]
    assert loops == [8, 3, 4, 16]  # the inner part opens inside every other global loop, the reduce stays inside
    s = state_of(matmul_ast(8, 16, 12), Opt(OptOps.TILE, 1, 4), Opt(OptOps.SWAP, 0, 1))
    assert [int(u.src[0].arg) for u in linearize(expand_kernel(s)) if u.op is Ops.RANGE] == [3, 8, 4, 16]


@pytest.mark.parametrize("opt, renderer, message", [
    (Opt(OptOps.TILE, 1, 5), CStyleRenderer(), "must divide"),
    (Opt(OptOps.TILE, 1, 12), CStyleRenderer(), "leave an outer loop"),
    (Opt(OptOps.TILE, 2, 4), CStyleRenderer(), "applies to global"),
    (Opt(OptOps.TILE, 1, 4), GPURenderer(), "loop targets"),
])
def test_tile_that_does_not_apply_says_why(opt: Opt, renderer: CStyleRenderer, message: str) -> None:
    with pytest.raises(OptError, match=message):
        state_of(matmul_ast(8, 16, 12), opt, renderer=renderer)


def test_cpu_heuristics_block_a_big_matmul_for_l2_and_leave_a_small_one() -> None:
    big = optimize(lower_kernel(matmul_ast(1024, 1024, 1024)), CStyleRenderer())
    assert [o.op for o in big.applied] == [OptOps.UPCAST, OptOps.UPCAST, OptOps.TILE, OptOps.SWAP]
    # the outermost loop now walks blocks of column tiles; a strip of B per tile is 1024 * 32 floats (128 KiB)
    assert sizes(big, AxisKind.GLOBAL) == [8, 128, 4]
    small = optimize(lower_kernel(matmul_ast(64, 64, 64)), CStyleRenderer())
    assert OptOps.TILE not in [o.op for o in small.applied] and small.applied


def test_upcast_copies_stores_and_their_reductions_share_one_loop() -> None:
    s = state_of(matmul_ast(8, 16, 12), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 2))
    program = linearize(expand_kernel(s))
    assert sum(u.op is Ops.STORE for u in program) == 8
    assert sum(u.op is Ops.DEFINE_ACC for u in program) == 8
    reduce_loops = [u for u in program if u.op is Ops.RANGE and u.arg.kind is AxisKind.REDUCE]
    assert len(reduce_loops) == 1  # eight accumulators, one loop over k
    # the loads are shared: 2 rows of a and 4 columns of b per k, not 8 of each
    assert sum(u.op is Ops.LOAD for u in program) == 6


def test_upcast_copies_are_the_store_with_each_value_substituted() -> None:
    # expand_upcasts rebuilds only what depends on the upcast ranges: each copy must be exactly the whole-graph
    # substitution, in the same (row-major) order, and a store that reads none of the ranges is kept as it is
    from tinygrad.codegen.opt.expand import _substitute_each, _values

    s = state_of(matmul_ast(8, 16, 12), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 2))
    (st,) = s.sink.src
    upcast = sorted((r for r in st.toposort() if r.op is Ops.RANGE and r.arg.kind is AxisKind.UPCAST),
                    key=lambda r: -r.arg.axis)
    assert len(upcast) == 2
    copies = _substitute_each(st, upcast)
    assert copies == [st.substitute(m) for m in _values(upcast)] and len(set(copies)) == 8
    other = elementwise_ast((4, 4)).src[0]
    assert _substitute_each(other, upcast) == [other] * 8


def test_unroll_gives_independent_accumulators_in_one_loop() -> None:
    program = linearize(expand_kernel(state_of(reduce_ast(1, 64), Opt(OptOps.UNROLL, 0, 4))))
    assert sum(u.op is Ops.DEFINE_ACC for u in program) == 4
    assert [int(u.src[0].arg) for u in program if u.op is Ops.RANGE] == [16]


def test_local_sets_the_work_group_and_rounds_the_launch_up() -> None:
    spec = get_program(elementwise_ast((5, 37)), GPURenderer(), (Opt(OptOps.LOCAL, 1, 8),))
    assert spec.local_size == (8, 1) and spec.global_size == (40, 5)
    assert "if ((gidx0<37)) {" in spec.src  # the tail of the last work-group is guarded


def test_group_renders_local_memory_a_barrier_and_a_gated_store() -> None:
    class CLike(GPURenderer):
        def render_define_local(self, name: str, d: object, size: int) -> str:
            return f"__local float {name}[{size}];"

        def render_barrier(self) -> str:
            return "barrier();"

    spec = get_program(reduce_ast(2, 1000), CLike(), (Opt(OptOps.GROUP, 1, 32),))
    assert spec.global_size == (32, 2) and spec.local_size == (32, 1)
    assert "__local float temp0[32];" in spec.src and "barrier();" in spec.src and "if (" in spec.src
    assert "<1000" in spec.src  # 1000 is not a multiple of 32: lanes past the end add the identity


def test_group_lanes_past_the_axis_read_nothing() -> None:
    # 128 lanes over a reduce axis of 100: lanes 100..127 add the identity, and their loads must not run either
    # (PoCL ran them, reading far past the buffer, and the process crashed in the MNIST step's BatchNorm kernel)
    s = state_of(reduce_ast(2, 100), Opt(OptOps.GROUP, 1, 128), renderer=GPURenderer())
    lane = s.ranges(AxisKind.GROUP)[0]
    loads = [u for u in s.sink.toposort() if u.op is Ops.LOAD and lane in u.src[0].toposort()]
    assert loads and all(len(u.src[0].src) == 3 for u in loads), "a lane's load is not gated by the lane's check"


def test_renderers_without_local_memory_refuse_to_render_it() -> None:
    with pytest.raises(NotImplementedError, match="no local memory"):
        get_program(reduce_ast(2, 1000), GPURenderer(), (Opt(OptOps.GROUP, 1, 32),))


def test_noopt_applies_nothing_and_debug_3_names_the_opts(capsys: pytest.CaptureFixture[str]) -> None:
    ast = matmul_ast(64, 64, 64)
    with Context(NOOPT=1):
        assert optimize(lower_kernel(ast), CStyleRenderer()).applied == ()
    with Context(DEBUG=3):
        spec = get_program(ast, CStyleRenderer())
    err = capsys.readouterr().err
    assert spec.applied_opts and all(o in err for o in spec.applied_opts)
    assert "UPCAST" in err


def test_heuristics_tile_a_cpu_matmul_and_group_a_gpu_sum() -> None:
    cpu = optimize(lower_kernel(matmul_ast(64, 64, 64)), CStyleRenderer()).applied
    assert [o.op for o in cpu] == [OptOps.UPCAST, OptOps.UPCAST]
    assert cpu[0] == Opt(OptOps.UPCAST, 1, 32)  # the columns: contiguous in b and in the output
    gpu = optimize(lower_kernel(reduce_ast(1, 100_000)), GPURenderer()).applied
    assert [o.op for o in gpu] == [OptOps.GROUP]


def test_heuristics_keep_the_outermost_loop_for_a_threaded_cpu_backend() -> None:
    s = optimize(lower_kernel(matmul_ast(256, 64, 256)), CStyleRenderer())
    outer = s.ranges(AxisKind.GLOBAL)[0]
    assert outer.arg.axis == 0 and int(outer.src[0].arg) > 1


def test_kernels_with_symbolic_sizes_get_no_opts() -> None:
    n = UOp(Ops.DEFINE_VAR, dtypes.index, (), ("n", 1, 64))
    x = param(1, 64 * 64).reshape((64, 64)).shrink(((0, n), (0, 64)))
    ast = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (param(0, 64).reshape((n, 1)),
                                                                    x.reduce_axis(Ops.ADD, (1,)))),))
    assert optimize(lower_kernel(ast), CStyleRenderer()).applied == ()
    with pytest.raises(OptError, match="symbolic"):
        state_of(ast, Opt(OptOps.UPCAST, 0, 2))


def test_upcast_copies_differ_only_in_a_trailing_constant_and_address_math_is_64_bit_in_c() -> None:
    src = get_program(matmul_ast(8, 16, 12), CStyleRenderer(), (Opt(OptOps.UPCAST, 1, 4),)).src
    # b[k*12 + j0*4 + c]: one shared base, then +1, +2, +3 - what a C compiler needs to see neighbours
    assert all(f"+{c})]" in src for c in (1, 2, 3))
    assert "long long alu" in src  # under -fwrapv only 64-bit index math keeps neighbours provably adjacent


def test_gpu_renderers_keep_32_bit_address_math() -> None:
    cl = pytest.importorskip("tg_backend_opencl.renderer", reason="the OpenCL backend is not installed")
    src = get_program(matmul_ast(8, 16, 12), cl.OpenCLRenderer(), (Opt(OptOps.UPCAST, 1, 4),)).src
    assert "long alu" not in src and "int alu" in src


def last_kernel_opts(t: object) -> tuple[Opt, ...]:
    """The opts the CPU heuristics give the last kernel of a tensor's schedule."""
    return optimize(lower_kernel(t.schedule()[-1].ast), CStyleRenderer()).applied  # type: ignore[attr-defined]


def _heaviest_kernel(t: object) -> object:
    """The schedule item of t with the most estimated operations (a gradient also schedules small copies)."""
    items = t.schedule()  # type: ignore[attr-defined]
    return max(items, key=lambda si: get_program(si.ast, CStyleRenderer()).estimated_ops).ast


def test_cpu_heuristics_tile_convolutions_by_whole_rows_and_a_second_reuse_axis() -> None:
    from tinygrad import Tensor
    # the shapes of the MNIST example's second convolution (the batch does not change the choice)
    x, w = Tensor.empty(8, 32, 24, 24, requires_grad=True), Tensor.empty(32, 32, 5, 5, requires_grad=True)
    out = x.conv2d(w)
    fwd = optimize(lower_kernel(out.schedule()[-1].ast), CStyleRenderer())
    # a whole output row (20, not a multiple of a vector: 2 registers) as the SIMD axis, 4 output channels reusing
    # each load, and 4 output rows (axis 2), whose input rows the kernel rows share: 32 registers of accumulators
    assert fwd.applied == (Opt(OptOps.UPCAST, 3, 20), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 2, 4))
    (grad_w,) = (out * Tensor.empty(8, 32, 20, 20)).sum().gradient(w)
    wgrad = optimize(lower_kernel(_heaviest_kernel(grad_w)), CStyleRenderer())  # type: ignore[arg-type]
    # partial sums over chunks of 4 images (axis 0) of windows read from a channels-last copy: the 32 input
    # channels (axis 2) are the SIMD axis, contiguous in the loads of the loop though not in the store; 8 output
    # channels (axis 1) reuse each vector
    assert wgrad.applied == (Opt(OptOps.UPCAST, 2, 32), Opt(OptOps.UPCAST, 1, 8))


def test_cpu_heuristics_grow_a_small_convolutions_tile_along_its_output_rows() -> None:
    from tinygrad import Tensor
    # the MNIST example's last convolution: rows of 8 are short vectors; 8 output channels times 8 columns is a
    # small tile, and it grows along the output rows (axis 2), whose input rows the 3 kernel rows share, not
    # along the batch
    ast = Tensor.empty(8, 64, 10, 10).conv2d(Tensor.empty(64, 64, 3, 3)).schedule()[-1].ast
    assert optimize(lower_kernel(ast), CStyleRenderer()).applied == (
        Opt(OptOps.UPCAST, 3, 8), Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 2, 4))
    # a 6-wide row fills under half a register: the weight is read channels-last instead (next test)


def test_cpu_heuristics_tile_short_rows_by_output_channels_and_images(monkeypatch: pytest.MonkeyPatch) -> None:
    from tinygrad import Device, Tensor
    # padded convolutions that test their border themselves (a device whose knobs ask for a copy with the border
    # written out, conv_border_copy, reads that copy instead and leaves rows of 8 in the usual layout)
    monkeypatch.setattr(Device[Device.DEFAULT].renderer, "conv_border_copy", False)
    # output rows under half a register (ResNet's 4x4 layers, the MNIST example's 6x6 one): the weight is read
    # from a copy with the output channels innermost, which become the SIMD axis (32: two registers), and the
    # images the reuse axis, not the padded output rows, which would test the border in every lane
    items = Tensor.empty(32, 64, 4, 4).conv2d(Tensor.empty(64, 64, 3, 3), padding=1).schedule()
    assert len(items) == 2, "the weight's copy, then the convolution"
    assert optimize(lower_kernel(items[-1].ast), CStyleRenderer()).applied == (
        Opt(OptOps.UPCAST, 1, 32), Opt(OptOps.UPCAST, 0, 8))
    # a batch of 8 stays a loop of several iterations (threads split it): the channels grow the tile instead
    items = Tensor.empty(8, 64, 8, 8).conv2d(Tensor.empty(64, 64, 3, 3)).schedule()
    applied = optimize(lower_kernel(items[-1].ast), CStyleRenderer()).applied
    assert len(items) == 2 and applied[0] == Opt(OptOps.UPCAST, 1, 32) and all(o.axis < 2 for o in applied)
    # a padded row of 8 (half a register, and a border test in every lane) reads the channels-last weight too; its
    # 32 output channels, a whole axis that the input is broadcast to, are tiled by 16 (the whole 32 ran slower)
    items = Tensor.empty(32, 32, 8, 8).conv2d(Tensor.empty(32, 32, 3, 3), padding=1).schedule()
    assert len(items) == 2 and optimize(lower_kernel(items[-1].ast), CStyleRenderer()).applied == (
        Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 0, 8))
    # strided, the input does not slide along the output row as along the kernel row: all 32 channels
    items = Tensor.empty(32, 16, 16, 16).conv2d(Tensor.empty(32, 16, 3, 3), padding=1, stride=2).schedule()
    assert len(items) == 2 and optimize(lower_kernel(items[-1].ast), CStyleRenderer()).applied == (
        Opt(OptOps.UPCAST, 1, 32), Opt(OptOps.UPCAST, 0, 8))
    # rows of 8 or more, a batch under 4, output channels that are not whole registers: the usual layout
    for x, w in [((8, 64, 10, 10), (64, 64, 3, 3)), ((2, 64, 6, 6), (64, 64, 3, 3)), ((8, 64, 6, 6), (48, 64, 3, 3))]:
        assert len(Tensor.empty(*x).conv2d(Tensor.empty(*w)).schedule()) == 1


def test_cpu_heuristics_grow_the_tile_of_a_batch_one_convolution_but_not_of_a_small_matmul(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np
    from tinygrad import Device, Tensor
    # A 4x4 layer of a small ResNet at batch 1 (0.6M multiply-adds, under CPU_SMALL_WORK) reading the padded copy
    # of its input: its tile grows from 8 channels x a row of 4 to the whole 4x4 outputs of 8 channels (it ran
    # twice as fast), and on to 16 channels: half the registers (max_tile), as BEAM picks for such a layer. A window
    # kernel grows from CPU_SMALL_WINDOW_WORK; a matmul keeps the CPU_SMALL_WORK floor.
    monkeypatch.setattr(Device[Device.DEFAULT].renderer, "conv_border_copy", True)
    rng = np.random.default_rng(0)
    xs, ws = rng.standard_normal((1, 64, 4, 4), np.float32), rng.standard_normal((64, 64, 3, 3), np.float32)
    out = Tensor(xs).conv2d(Tensor(ws), padding=1)
    items = out.schedule()
    assert len(items) == 2, "the padded copy, then the convolution"
    conv = optimize(lower_kernel(items[-1].ast), CStyleRenderer())
    assert conv.applied == (Opt(OptOps.UPCAST, 2, 4), Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 4),
                            Opt(OptOps.UPCAST, 0, 2))
    padded = np.pad(xs, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.einsum("ncyxij,kcij->nkyx", np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3)), ws)
    np.testing.assert_allclose(Tensor(xs).conv2d(Tensor(ws), padding=1).numpy(), want, rtol=1e-4, atol=1e-4)
    # the MNIST example's 10x576 weight gradient (3M multiply-adds): no growth, whose unrolled body cost more compile
    # time than the kernel saved
    small = optimize(lower_kernel(matmul_ast(10, 512, 576)), CStyleRenderer())
    assert small.upcast_size() == 32


def test_cpu_heuristics_plan_an_uneven_rows_tile_in_registers() -> None:
    from tinygrad import Tensor
    # 10-wide rows (one register of 16 lanes each): 4 channels times 5 of the 10 output rows, 20 registers; the
    # whole 10 rows would be 40, past the 32 registers
    ast = Tensor.empty(8, 64, 12, 12).conv2d(Tensor.empty(32, 64, 3, 3)).schedule()[-1].ast
    assert optimize(lower_kernel(ast), CStyleRenderer()).applied == (
        Opt(OptOps.UPCAST, 3, 10), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 2, 5))
    # little work (3 input channels of 3x3): the even rows' tile of 8 channels, no rows
    ast = Tensor.empty(8, 3, 32, 32).conv2d(Tensor.empty(16, 3, 3, 3)).schedule()[-1].ast
    assert optimize(lower_kernel(ast), CStyleRenderer()).applied == (
        Opt(OptOps.UPCAST, 3, 30), Opt(OptOps.UPCAST, 1, 8))
    # no sliding axis (a matmul 20 columns wide): 8 rows, as for even rows
    ast = (Tensor.empty(256, 512) @ Tensor.empty(512, 20)).schedule()[-1].ast
    assert optimize(lower_kernel(ast), CStyleRenderer()).applied == (
        Opt(OptOps.UPCAST, 1, 20), Opt(OptOps.UPCAST, 0, 8))


def test_gpu_heuristics_give_a_flat_launch_big_work_groups() -> None:
    class Flat32(GPURenderer):
        flat_work_group = 32

    flat = get_program(elementwise_ast((4096,)), GPURenderer())
    assert flat.local_size == (64,)  # the renderer's 256 capped by its limit of 64 in dimension 0
    assert get_program(elementwise_ast((4096,)), Flat32()).local_size == (32,)
    assert get_program(elementwise_ast((64, 64)), GPURenderer()).local_size == (16, 8)  # 2-D: 16 per dim


def test_cpu_heuristics_ignore_loads_outside_the_reduce_loop_when_choosing_the_simd_axis() -> None:
    from tinygrad import Tensor
    from tinygrad.codegen.opt.heuristics import _accesses_in_the_loop, access_strides
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
    in_loop = _accesses_in_the_loop(state)
    # the bias: contiguous along the channels and outside the loop; the windows and g: inside it
    assert [(s, inside) for s, inside in zip(along, in_loop) if s == 1] == [(1, False)]
    assert in_loop.count(True) >= 3  # the store, the windows, g
    applied = optimize(lower_kernel(_heaviest_kernel(grad_w)), CStyleRenderer()).applied  # type: ignore[arg-type]
    # the SIMD direction (the first UPCAST) is the output channels (axis 0), not the input channels (axis 1)
    assert applied[0] == Opt(OptOps.UPCAST, 0, 32) and state.axes.index(channels) == 1


def test_cpu_heuristics_unroll_a_short_reduce_row_whole_for_few_outputs() -> None:
    from tinygrad import Tensor
    # a BatchNorm's statistics: 32 outputs, each a sum over the batch and 20x20 positions. The row of 20 is
    # unrolled whole (the C compiler makes vectors of it) and two rows at a time
    ast = Tensor.empty(8, 32, 20, 20).sum((0, 2, 3)).schedule()[-1].ast
    applied = optimize(lower_kernel(ast), CStyleRenderer()).applied
    assert applied == (Opt(OptOps.UNROLL, 3, 20), Opt(OptOps.UNROLL, 2, 2))
    # a long vector's sum (its one output has no axis): 16 accumulators, one AVX-512 register of floats
    assert optimize(lower_kernel(reduce_ast(1, 4096)), CStyleRenderer()).applied == (Opt(OptOps.UNROLL, 0, 16),)


def test_cpu_heuristics_compute_the_partial_sums_of_a_split_reduction_side_by_side() -> None:
    from tinygrad import Tensor
    # a BatchNorm's statistics over a batch big enough to split: 32 channels times 4 partial sums over chunks of
    # the batch. The 4 sums are computed side by side (their own accumulators and streams of loads), the row
    # unrolled by 4; the channels stay the outer loop, which threads split
    x = Tensor.empty(512, 32, 20, 20)
    kernels = [si.ast for si in x.sum((0, 2, 3)).schedule()]
    partial = next(ast for ast in kernels if len(OptState.from_lowered(lower_kernel(ast)).axes) == 5)
    sizes = [int(r.src[0].arg) for r in OptState.from_lowered(lower_kernel(partial)).axes]
    assert sizes == [32, 4, 128, 20, 20]
    assert optimize(lower_kernel(partial), CStyleRenderer()).applied == (
        Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 3, 4))
    # an output axis that is the outermost stays a loop: no partial sums side by side, the row unrolled whole
    assert last_kernel_opts(Tensor.empty(8, 4, 20, 20).sum((0, 2, 3))) == (
        Opt(OptOps.UNROLL, 3, 20), Opt(OptOps.UNROLL, 2, 2))


def test_cpu_heuristics_move_a_big_transpose_in_4x4_blocks() -> None:
    from tinygrad import Tensor
    from tinygrad.codegen.opt.heuristics import CPU_TRANSPOSE_MIN

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


def test_cpu_heuristics_compute_a_small_windows_outputs_for_8_images_side_by_side() -> None:
    from tinygrad import Tensor

    # a 2x2 max pool over a batch: 8 images side by side, the window a loop
    assert last_kernel_opts(Tensor.empty(64, 32, 20, 20).max_pool2d(2)) == (Opt(OptOps.UPCAST, 0, 8),)
    # an outermost axis too short to keep a loop after that, or rows of whole registers (16 wide), or a window of
    # one axis (a matmul's short K): unrolled whole, as before
    unrolled = (Opt(OptOps.UNROLL, 5, 2), Opt(OptOps.UNROLL, 4, 2))
    assert last_kernel_opts(Tensor.empty(8, 32, 20, 20).max_pool2d(2)) == unrolled
    assert last_kernel_opts(Tensor.empty(64, 16, 32, 32).max_pool2d(2)) == unrolled
    assert last_kernel_opts(Tensor.empty(512, 10) @ Tensor.empty(10, 576)) != (Opt(OptOps.UPCAST, 0, 8),)
