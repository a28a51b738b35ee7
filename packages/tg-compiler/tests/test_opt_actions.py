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
from tinygrad.renderer.cstyle import CStyleRenderer, line, local_array
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
    # expand_upcasts rebuilds only what depends on the upcast ranges, simplifying as it goes: each copy must be
    # exactly the simplified whole-graph substitution, in the same (row-major) order, and a store that reads none of
    # the ranges is kept as it is
    from tinygrad.codegen.opt.actions import kernel_simplifier, simplify_kernel
    from tinygrad.codegen.opt.expand import _substitute_each, _values

    s = state_of(matmul_ast(8, 16, 12), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 2))
    (st,) = s.sink.src
    upcast = sorted((r for r in st.toposort() if r.op is Ops.RANGE and r.arg.kind is AxisKind.UPCAST),
                    key=lambda r: -r.arg.axis)
    assert len(upcast) == 2
    copies = _substitute_each(st, upcast, kernel_simplifier())
    assert copies == [simplify_kernel(st.substitute(m)) for m in _values(upcast)] and len(set(copies)) == 8
    other = elementwise_ast((4, 4)).src[0]
    assert _substitute_each(other, upcast, kernel_simplifier()) == [other] * 8


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
        render_rules = {**GPURenderer.render_rules, Ops.DEFINE_LOCAL: local_array("__local"),
                        Ops.BARRIER: line("barrier();")}

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
        assert optimize(lower_kernel(ast), GPURenderer()).applied == ()
    with Context(DEBUG=3):
        spec = get_program(ast, GPURenderer())
    err = capsys.readouterr().err
    assert spec.applied_opts and all(o in err for o in spec.applied_opts)
    assert "UPCAST" in err


def test_heuristics_group_a_gpu_sum() -> None:
    gpu = optimize(lower_kernel(reduce_ast(1, 100_000)), GPURenderer()).applied
    assert [o.op for o in gpu] == [OptOps.GROUP]


def test_a_targets_own_rules_come_first_and_none_leaves_the_generic_ones() -> None:
    class OwnRules(GPURenderer):
        def opt_rules(self, state: OptState) -> OptState | None:
            # its own choice for reductions; elementwise kernels to the generic rules
            return apply_opt(state, Opt(OptOps.UPCAST, 0, 2), self) if state.ranges(AxisKind.REDUCE) else None

    assert optimize(lower_kernel(matmul_ast(64, 64, 64)), OwnRules()).applied == (Opt(OptOps.UPCAST, 0, 2),)
    generic = optimize(lower_kernel(elementwise_ast((64, 64))), GPURenderer()).applied
    assert generic and optimize(lower_kernel(elementwise_ast((64, 64))), OwnRules()).applied == generic


def test_a_loop_target_without_rules_of_its_own_runs_kernels_as_lowered() -> None:
    # the CPU's register tiles and cache blocking are the CPU renderers' rules (tg-backend-cpu), not the base's
    for ast in (matmul_ast(256, 64, 256), reduce_ast(1, 4096), elementwise_ast((512, 256))):
        assert optimize(lower_kernel(ast), CStyleRenderer()).applied == ()


def test_kernels_with_symbolic_sizes_get_no_opts() -> None:
    n = UOp(Ops.DEFINE_VAR, dtypes.index, (), ("n", 1, 64))
    x = param(1, 64 * 64).reshape((64, 64)).shrink(((0, n), (0, 64)))
    ast = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (param(0, 64).reshape((n, 1)),
                                                                    x.reduce_axis(Ops.ADD, (1,)))),))
    assert optimize(lower_kernel(ast), GPURenderer()).applied == ()
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


def test_gpu_heuristics_give_a_flat_launch_big_work_groups() -> None:
    class Flat32(GPURenderer):
        flat_work_group = 32

    flat = get_program(elementwise_ast((4096,)), GPURenderer())
    assert flat.local_size == (64,)  # the renderer's 256 capped by its limit of 64 in dimension 0
    assert get_program(elementwise_ast((4096,)), Flat32()).local_size == (32,)
    assert get_program(elementwise_ast((64, 64)), GPURenderer()).local_size == (16, 8)  # 2-D: 16 per dim


def test_each_opt_is_applied_by_its_rule_in_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    from tinygrad.codegen.opt import actions, tensor_cores

    # TC's rule is registered by tensor_cores.py (actions.py does not import it); without it TC says what is missing
    assert actions.OPT_RULES[OptOps.TC] is tensor_cores.apply_tensor_core
    assert set(actions.OPT_RULES) == set(OptOps)
    state = OptState.from_lowered(lower_kernel(matmul_ast(16, 16, 16)))
    monkeypatch.delitem(actions.OPT_RULES, OptOps.TC)
    with pytest.raises(OptError, match="no rule for TC is registered"):
        apply_opt(state, Opt(OptOps.TC, 0, 0), GPURenderer())
    calls: list[Opt] = []
    monkeypatch.setitem(actions.OPT_RULES, OptOps.UPCAST, lambda st, opt, r: calls.append(opt) or st)
    assert apply_opt(state, Opt(OptOps.UPCAST, 0, 4), GPURenderer()) is state and calls == [Opt(OptOps.UPCAST, 0, 4)]


def test_get_program_pauses_the_cyclic_collector_and_restores_it() -> None:
    # the pipeline pauses gc for its duration (its graphs have no cycles); whatever happens, the state it found stays
    import gc

    import tinygrad.codegen as codegen

    seen: list[bool] = []
    real = codegen.lower_kernel

    def spy(ast: UOp) -> UOp:
        seen.append(gc.isenabled())
        return real(ast)

    was = gc.isenabled()
    try:
        codegen.lower_kernel = spy  # type: ignore[assignment]
        gc.enable()
        get_program(elementwise_ast((5, 37)), GPURenderer())
        assert seen == [False] and gc.isenabled()
        with pytest.raises(OptError):  # a failing kernel restores it too
            get_program(elementwise_ast((5, 37)), GPURenderer(), (Opt(OptOps.LOCAL, 7, 8),))
        assert gc.isenabled()
        gc.disable()  # a caller that paused it itself keeps it paused
        get_program(elementwise_ast((5, 37)), GPURenderer())
        assert not gc.isenabled()
    finally:
        codegen.lower_kernel = real  # type: ignore[assignment]
        (gc.enable if was else gc.disable)()
