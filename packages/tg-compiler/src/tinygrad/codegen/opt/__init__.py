"""The optimisation layer, between lowering and linearizing.

    lowered kernel --(opts: heuristics, BEAM search, or none with NOOPT=1)--> OptState --expand--> plain kernel

`actions.py` defines the opts and, in a table (`OPT_RULES`), how each rewrites the kernel's RANGEs; `tensor_cores.py`
registers TC's rule there (imported below for that);
`heuristics.py` picks opts by looking at memory access strides (a target's own rules first, `Renderer.opt_rules`);
`expand.py` turns the result back into plain IR.
BEAM search (BEAM=n), which times candidate opt lists on the device through the whole pipeline and caches the
winner on disk, sits above this layer, beside the device code that runs it: `codegen/beam.py`.
"""

from __future__ import annotations

from tinygrad.codegen.opt import tensor_cores  # noqa: F401  (registers the TC opt's rule)
from tinygrad.codegen.opt.actions import Opt, OptError, OptOps, OptState, apply_opt
from tinygrad.codegen.opt.expand import expand_kernel
from tinygrad.codegen.opt.heuristics import hand_coded_opts
from tinygrad.helpers import NOOPT
from tinygrad.renderer import Renderer
from tinygrad.uop.ops import UOp


def optimize(lowered: UOp, renderer: Renderer, opts: tuple[Opt, ...] | None = None) -> OptState:
    """`opts` exactly (OptError if one does not apply), else the heuristics' choice; none with NOOPT=1."""
    state = OptState.from_lowered(lowered)
    if opts is not None:
        for opt in opts:
            state = apply_opt(state, opt, renderer)
        return state
    if NOOPT:
        return state
    return hand_coded_opts(state, renderer)


__all__ = ["Opt", "OptError", "OptOps", "OptState", "apply_opt", "expand_kernel", "hand_coded_opts", "optimize"]
