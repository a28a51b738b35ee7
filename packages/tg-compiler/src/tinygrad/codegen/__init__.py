"""From a kernel AST to source code: lower -> linearize -> render.

`get_program(ast, renderer)` is the whole pipeline (lowering, optimisation in `codegen/opt/`, typing the index
arithmetic in `codegen/index_dtype.py`, rewriting the ops the renderer lacks in `codegen/decompose.py`,
linearizing, mapping loops to work-items for GPU-style targets in `codegen/work_items.py`, rendering);
DEBUG>=3 prints the chosen optimisations, >=4 the source, >=5 the AST, >=6 the linearized program (and >=7 the
compiled kernel's assembly, in `tinygrad/runtime/runner.py`).
"""

from __future__ import annotations

import gc
import sys
from dataclasses import dataclass

from tinygrad.codegen.decompose import decompose, decompose_program
from tinygrad.codegen.index_dtype import type_indices
from tinygrad.codegen.linearize import linearize
from tinygrad.codegen.lowerer import lower_kernel
from tinygrad.codegen.opt import Opt, expand_kernel, optimize
from tinygrad.codegen.work_items import global_size, map_work_items
from tinygrad.helpers import DEBUG, VIZ, prod
from tinygrad.renderer import Renderer
from tinygrad.uop.ops import AxisKind, GroupOp, Ops, UOp, sint
from tinygrad.uop.rewrite import graph_rewrite


@dataclass(frozen=True)
class ProgramSpec:
    name: str
    src: str
    param_indices: tuple[int, ...]  # which of the schedule item's buffers the kernel takes, in order
    global_size: tuple[int, ...] | None
    local_size: tuple[int, ...] | None
    estimated_ops: int
    estimated_bytes: int
    applied_opts: tuple[str, ...] = ()
    var_names: tuple[str, ...] = ()  # symbolic variables the kernel takes after its buffers, in this order


def _estimates(ast: UOp, lowered: UOp) -> tuple[int, int]:
    """FLOPs and bytes moved, counting each ALU op once per loop iteration it sits in."""
    store = ast.src[0]
    out_size = upper_bound(store.src[0].size)
    reduce_size = 1
    for r in lowered.toposort():
        if r.op is Ops.RANGE and r.arg.kind is AxisKind.REDUCE:
            reduce_size *= upper_bound(r.src[0])
    # a reduction's accumulate is an op per term too: a matmul is a multiply and an add per term, 2*M*N*K
    alu = sum(1 for u in lowered.toposort() if u.op in (*GroupOp.ALU, Ops.REDUCE) and u.dtype.kind != "bool" and
              not u.dtype.is_int)
    ops = max(alu, 1) * out_size * max(reduce_size, 1)
    # the output counts what the store writes (a region of the buffer, for an in-place write), the inputs whole
    nbytes = out_size * store.src[0].dtype.itemsize + sum(upper_bound(u.arg.size) * u.dtype.itemsize
                                                          for u in ast.toposort() if u.op is Ops.PARAM and u.arg.slot)
    return ops, nbytes


def upper_bound(size: sint) -> int:
    """A size as an int; a symbolic size by its largest value (estimates only: launches use the bound values)."""
    if isinstance(size, int):
        return size
    return int(size.arg) if size.op is Ops.CONST else int(size.vmax)


def get_program(ast: UOp, renderer: Renderer, opts: tuple[Opt, ...] | None = None) -> ProgramSpec:
    """The whole pipeline for one kernel. `opts` applies exactly those optimisations (BEAM search does);
    None lets the heuristics choose (none with NOOPT=1)."""
    # The passes make and drop hundreds of thousands of nodes, which reference counting frees (a node refers only to
    # its sources: the graphs have no cycles). Each few hundred of them would otherwise start a cyclic collection,
    # and the older generations' collections walk every object of the process (a training step's whole heap) for
    # nothing: paused here, once per kernel. A thread that finds it paused already leaves it to the one that paused it.
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return _get_program(ast, renderer, opts)
    finally:
        if paused:
            gc.enable()


def _get_program(ast: UOp, renderer: Renderer, opts: tuple[Opt, ...] | None) -> ProgramSpec:
    if DEBUG >= 5:
        print(ast.pretty(), file=sys.stderr)
    lowered = lower_kernel(ast)
    state = optimize(lowered, renderer, opts)
    expanded = expand_kernel(state)
    typed = type_indices(expanded, renderer.index_wide_dtype, renderer.device or type(renderer).__name__)
    decomposed = decompose(typed, renderer)
    if renderer.target_rewrites is not None:
        decomposed = graph_rewrite(decomposed, renderer.target_rewrites, ctx=renderer)
    linear = linearize(decomposed)
    program = linear_program = decompose_program(linear, renderer)
    # (global size, work-group size) per launch dimension; (None, None) for a target that loops
    gsize: tuple[int, ...] | None = None
    lsize: tuple[int, ...] | None = None
    if renderer.has_local:
        program, lsize = map_work_items(program, renderer, dict(state.local_sizes))
        gsize = global_size(program)
    if DEBUG >= 6:
        for i, u in enumerate(program):
            srcs = [program.index(s) if s in program else "-" for s in u.src]
            print(f"{i:4d} {u.op.name:<12} {u.dtype!s:<20} {srcs!s:<20} {u.arg!r}", file=sys.stderr)
    name = renderer.kernel_name(lowered)
    src = renderer.render(name, program)
    params = tuple(sorted(u.arg.slot for u in program if u.op is Ops.PARAM))
    ops, nbytes = _estimates(ast, lowered)
    if DEBUG >= 3:
        applied = ", ".join(str(o) for o in state.applied) or "none"
        print(f"{name}: opts applied: {applied} (global {gsize}, local {lsize})", file=sys.stderr)
    if DEBUG >= 4:
        print(src, file=sys.stderr)
    var_names = tuple(sorted({u.arg.name for u in program if u.op is Ops.DEFINE_VAR}))
    spec = ProgramSpec(name, src, params, gsize, lsize, ops, nbytes, tuple(str(o) for o in state.applied),
                       var_names=var_names)
    if VIZ.value:  # tinygrad/viz snapshots each pass's result (as data: these UOps may be freed after this)
        from tinygrad.viz.record import record_kernel
        record_kernel(spec, renderer.device or type(renderer).__name__, [
            ("ast", ast), ("lowered", lowered), ("optimized", state.sink), ("expanded", expanded),
            ("typed indices", typed), ("decomposed", decomposed), ("linearized", linear),
            ("decomposed program", linear_program), *([("work items", program)] if renderer.has_local else [])])
    return spec


__all__ = ["ProgramSpec", "get_program", "prod"]
