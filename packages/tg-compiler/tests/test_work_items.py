"""The work-item mapping (`tinygrad.codegen.work_items`): which loops of a linearized program become SPECIAL
work-item ids, where an IF guards them, and the launch sizes read back from them."""

from __future__ import annotations

from opt_helpers import elementwise_ast, param, reduce_ast
from tinygrad.codegen import get_program
from tinygrad.codegen.decompose import decompose
from tinygrad.codegen.linearize import linearize
from tinygrad.codegen.lowerer import lower_kernel
from tinygrad.codegen.opt import Opt, OptOps, expand_kernel, optimize
from tinygrad.codegen.work_items import global_size, map_work_items
from tinygrad.dtype import dtypes
from tinygrad.renderer.cstyle import CStyleRenderer, line, local_array
from tinygrad.uop.ops import AxisKind, Ops, UOp, Variable


class GPURenderer(CStyleRenderer):
    has_local = True
    local_max = (64, 64, 64)
    max_work_group_size = 128
    local_mem_max = 4096

    render_rules = {**CStyleRenderer.render_rules, Ops.DEFINE_LOCAL: local_array("__local"),
                    Ops.BARRIER: line("barrier();")}


class RoundingRenderer(GPURenderer):
    """A target whose runtime picks the work-group size and launches whole work-groups (WGSL's)."""

    launch_rounds_up = True


def mapped(ast: UOp, renderer: GPURenderer, *opts: Opt) -> tuple[list[UOp], tuple[int, ...] | None]:
    state = optimize(lower_kernel(ast), renderer, opts)
    return map_work_items(linearize(decompose(expand_kernel(state), renderer)), renderer, dict(state.local_sizes))


def specials(program: list[UOp]) -> list[UOp]:
    return sorted((u for u in program if u.op is Ops.SPECIAL), key=lambda u: u.arg.dim)


def guarded_bounds(program: list[UOp]) -> dict[str, int | str]:
    """SPECIAL name -> the bound its IF compares it with (a constant, or a variable's name)."""
    out: dict[str, int | str] = {}
    for u in program:
        if u.op is Ops.IF:
            special, bound = u.src[0].src
            out[special.arg.name] = int(bound.arg) if bound.op is Ops.CONST else bound.arg.name
    return out


def test_the_innermost_output_ranges_become_specials_and_outer_ones_stay_loops() -> None:
    program, lsize = mapped(elementwise_ast((2, 3, 4, 5)), GPURenderer())
    assert [(s.arg.name, s.arg.size) for s in specials(program)] == [("gidx0", 5), ("gidx1", 4), ("gidx2", 3)]
    loops = [u for u in program if u.op is Ops.RANGE]
    assert [int(r.src[0].arg) for r in loops] == [2] and sum(u.op is Ops.END for u in program) == 1
    assert lsize is None and global_size(program) == (5, 4, 3)


def test_a_launch_that_fits_its_bounds_has_no_guard() -> None:
    program, _ = mapped(elementwise_ast((5, 37)), GPURenderer())
    assert not any(u.op in (Ops.IF, Ops.ENDIF) for u in program)


def test_a_launch_rounded_up_to_whole_work_groups_guards_that_dimension_only() -> None:
    program, lsize = mapped(elementwise_ast((5, 37)), GPURenderer(), Opt(OptOps.LOCAL, 1, 8))
    assert lsize == (8, 1) and global_size(program) == (40, 5)
    assert guarded_bounds(program) == {"gidx0": 37}
    assert sum(u.op is Ops.IF for u in program) == sum(u.op is Ops.ENDIF for u in program) == 1


def test_a_runtime_that_rounds_the_launch_guards_every_dimension() -> None:
    program, lsize = mapped(elementwise_ast((5, 37)), RoundingRenderer())
    assert lsize is None and guarded_bounds(program) == {"gidx0": 37, "gidx1": 5}
    # a work-group size of the kernel's own: the runtime launches exactly that
    program, _ = mapped(elementwise_ast((5, 32)), RoundingRenderer(), Opt(OptOps.LOCAL, 1, 8))
    assert guarded_bounds(program) == {}


def test_launch_sizes_of_the_program_spec_are_the_specials() -> None:
    spec = get_program(elementwise_ast((5, 37)), GPURenderer(), (Opt(OptOps.LOCAL, 1, 8),))
    assert spec.global_size == (40, 5) and spec.local_size == (8, 1)
    assert "int gidx0 = (int)get_global_id(0);" in spec.src and "if ((gidx0<37)) {" in spec.src


def test_a_symbolic_bound_launches_its_largest_value_and_is_guarded() -> None:
    n = Variable("n", 1, 16)
    out = param(0, 16).reshape((16,)).shrink(((0, n),))
    x = param(1, 16).reshape((16,)).shrink(((0, n),))
    ast = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, x * 2.0)),))
    program, _ = mapped(ast, GPURenderer())
    assert global_size(program) == (16,) and guarded_bounds(program) == {"gidx0": "n"}


def test_several_loop_nests_run_as_one_work_item() -> None:
    a, b, x = param(0, 4).reshape((4,)), param(1, 8).reshape((8,)), param(2, 8).reshape((8,))
    ast = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (a, x.shrink(((0, 4),)) * 2.0)),
                                      UOp(Ops.STORE, dtypes.void, (b, x + 1.0))))
    program, lsize = mapped(ast, GPURenderer())
    assert not specials(program) and global_size(program) == () and lsize is None
    assert sum(u.op is Ops.RANGE for u in program) == 2


def test_a_group_lane_is_dimension_0_and_its_full_work_group_needs_no_guard() -> None:
    program, lsize = mapped(reduce_ast(2, 1000), GPURenderer(), Opt(OptOps.GROUP, 1, 32))
    assert [(s.arg.name, s.arg.size) for s in specials(program)] == [("gidx0", 32), ("gidx1", 2)]
    assert lsize == (32, 1) and guarded_bounds(program) == {}
    # the lane's reduction loop and the combine of the partials stay loops
    assert all(r.arg.kind is AxisKind.REDUCE for r in program if r.op is Ops.RANGE)
