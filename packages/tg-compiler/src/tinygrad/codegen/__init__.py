"""From a kernel AST to source code: lower -> linearize -> render.

`get_program(ast, renderer)` is the whole pipeline; DEBUG>=3 prints the chosen optimisations,
>=4 the source, >=5 the AST, >=6 the linearized program.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from tinygrad.codegen.linearize import linearize
from tinygrad.codegen.lowerer import lower_kernel
from tinygrad.helpers import DEBUG, prod
from tinygrad.renderer import Renderer
from tinygrad.uop.ops import GroupOp, Ops, UOp, sint


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
        if r.op is Ops.RANGE and r.arg[1] == "reduce":
            reduce_size *= upper_bound(r.src[0])
    alu = sum(1 for u in lowered.toposort() if u.op in GroupOp.ALU and u.dtype.kind != "bool" and
              not u.dtype.is_int)
    ops = max(alu, 1) * out_size * max(reduce_size, 1)
    nbytes = sum(upper_bound(u.arg[1]) * u.dtype.itemsize for u in ast.toposort() if u.op is Ops.PARAM)
    return ops, nbytes


def upper_bound(size: sint) -> int:
    """A size as an int; a symbolic size by its largest value (estimates only: launches use the bound values)."""
    if isinstance(size, int):
        return size
    return int(size.arg) if size.op is Ops.CONST else int(size.vmax)


def get_program(ast: UOp, renderer: Renderer) -> ProgramSpec:
    if DEBUG >= 5:
        print(ast.pretty(), file=sys.stderr)
    lowered = lower_kernel(ast)
    program = linearize(lowered)
    if DEBUG >= 6:
        for i, u in enumerate(program):
            srcs = [program.index(s) if s in program else "-" for s in u.src]
            print(f"{i:4d} {u.op.name:<12} {u.dtype!s:<20} {srcs!s:<20} {u.arg!r}", file=sys.stderr)
    name = renderer.kernel_name(lowered)
    src = renderer.render(name, program)
    params = tuple(sorted(u.arg[0] for u in program if u.op is Ops.PARAM))
    ops, nbytes = _estimates(ast, lowered)
    global_ranges = [u for u in program if u.op is Ops.RANGE and u.arg[1] == "global"]
    if DEBUG >= 3:
        print(f"{name}: opts applied: none (loops {[upper_bound(r.src[0]) for r in global_ranges]})", file=sys.stderr)
    if DEBUG >= 4:
        print(src, file=sys.stderr)
    # a symbolic size launches its largest value: the kernel guards each work-item id against the bound
    gsize = tuple(upper_bound(r.src[0]) for r in renderer.global_ranges(program)) if renderer.has_local else None
    var_names = tuple(sorted({u.arg[0] for u in program if u.op is Ops.DEFINE_VAR}))
    return ProgramSpec(name, src, params, gsize, None, ops, nbytes, var_names=var_names)


__all__ = ["ProgramSpec", "get_program", "prod"]
