"""The TC optimisation: a matmul-shaped reduction computed by the target's tensor cores, one warp per tile.

A kernel qualifies when its one reduction is a sum of products `sum_k cast(A(m, k)) * cast(B(k, n))`, where A and
B are expressions of the tensor core's input dtype (float16 or bfloat16 loads, usually) cast to its accumulator
dtype (float32; no casts for a tensor core whose input is its accumulator's dtype), m and n are output axes that
only A, respectively only B, depends on, and the sizes of m, n, k divide the tile's M, N, K. (Other axes, batch
dimensions or further reduce axes such as a convolution's kernel window, stay what they were.) `TC(axis, amount)`
uses tensor core `amount` of `Renderer.tensor_cores` for the `axis`-th such choice of (m, n, k), innermost axes
first. It rewrites, with a new output axis `lane` of the warp's size whose work-group is the warp (launch
dimension 0):

    m = m_o*M + row_c(lane, i), n = n_o*N + col_c(lane, i)                     for each element i this lane holds
    out(m, n) = epilogue(sum_{k_o} GEP(WMMA(lane, A(m_o*M + row_a(lane, j), k_o*K + col_a(lane, j)) for each j,
                                             B(k_o*K + row_b(lane, j), n_o*N + col_b(lane, j)) for each j), i))

so every lane loads exactly its fragments (`TensorCore.layout_*`), the renderer turns WMMA into the instruction,
and the lane's results are stored where the layout of C puts them. The products are computed by the hardware
exactly and added in float32 (their order differs from the loop's: results match to float32 rounding).

TC is the first opt of a kernel: later opts may UPCAST or LOCAL the other output axes or UNROLL k_o (more tiles
per warp, more warps per work-group, more instructions in flight); the lane axis itself is fixed.
"""

from __future__ import annotations

from dataclasses import replace

from tinygrad.codegen.lowerer import IDX
from tinygrad.codegen.opt.actions import (
    Opt,
    OptError,
    OptOps,
    OptState,
    const_size,
    register_opt_rule,
    simplify_kernel,
    work_item_ranges,
)
from tinygrad.renderer import Renderer
from tinygrad.renderer.tensor_core import TensorCore
from tinygrad.uop.ops import AxisKind, Ops, RangeArg, UOp


def _ranges_in(u: UOp) -> set[UOp]:
    return {r for r in u.toposort() if r.op is Ops.RANGE}


def _operand(x: UOp, tc: TensorCore) -> UOp | None:
    """x as the tensor core's input: `cast(v)` with v of the input dtype gives v; a tensor core that takes its
    accumulator's dtype (float32 on Apple's) takes x itself."""
    if x.op is Ops.CAST and x.dtype == tc.dtype_acc and x.src[0].dtype == tc.dtype_in:
        return x.src[0]
    return x if x.dtype == tc.dtype_in == tc.dtype_acc else None


def _splits(r: UOp, tile: int) -> bool:
    """Whether r has a constant size that whole tiles of `tile` cover."""
    size = const_size(r)
    return size is not None and size % tile == 0


def tc_choices(state: OptState, tc: TensorCore) -> list[tuple[UOp, UOp, UOp, UOp, UOp]]:
    """Every (m, n, k, A, B) the tensor core can compute for this kernel, innermost axes first."""
    if len(state.sink.src) != 1:
        return []
    reduces = [u for u in state.sink.toposort() if u.op is Ops.REDUCE]
    if len(reduces) != 1 or reduces[0].arg is not Ops.ADD or reduces[0].dtype != tc.dtype_acc:
        return []
    red = reduces[0]
    if red.src[0].op is not Ops.MUL:
        return []
    operands = [_operand(x, tc) for x in red.src[0].src]
    if operands[0] is None or operands[1] is None:
        return []
    tm, tn, tk = tc.dims
    globals_ = state.ranges(AxisKind.GLOBAL)
    out = []
    for a, b in ((operands[0], operands[1]), (operands[1], operands[0])):
        in_a, in_b = _ranges_in(a), _ranges_in(b)
        ks = [k for k in red.src[1:] if k in in_a and k in in_b and _splits(k, tk)]
        ms = [m for m in globals_ if m in in_a and m not in in_b and _splits(m, tm)]
        ns = [n for n in globals_ if n in in_b and n not in in_a and _splits(n, tn)]
        out += [(m, n, k, a, b) for m in reversed(ms) for n in reversed(ns) for k in reversed(ks)]
    return out


def _chosen_tensor_core(state: OptState, opt: Opt,
                        renderer: Renderer) -> tuple[TensorCore, tuple[UOp, UOp, UOp, UOp, UOp]]:
    """The tensor core and the (m, n, k, A, B) that TC(axis, amount) names; OptError where the kernel or the
    target does not qualify."""
    if not renderer.tensor_cores:
        raise OptError(f"{opt}: {type(renderer).__name__} has no tensor cores")
    if not 0 <= opt.amount < len(renderer.tensor_cores):
        raise OptError(f"{opt}: the target has {len(renderer.tensor_cores)} tensor cores")
    if state.applied:
        raise OptError(f"{opt}: TC must be a kernel's first opt")
    tc = renderer.tensor_cores[opt.amount]
    choices = tc_choices(state, tc)
    if not 0 <= opt.axis < len(choices):
        raise OptError(f"{opt}: the kernel is not a sum of {tc.dtype_in.name} products that {tc} can compute "
                       f"({len(choices)} choices of axes)")
    if (renderer.local_max and renderer.local_max[0] < tc.threads) or \
            (renderer.max_work_group_size and renderer.max_work_group_size < tc.threads):
        raise OptError(f"{opt}: a work-group of {tc.threads} lanes exceeds the device's limits")
    return tc, choices[opt.axis]


def apply_tensor_core(state: OptState, opt: Opt, renderer: Renderer) -> OptState:
    """TC(axis, amount): see the module docstring. OptError says why a kernel does not qualify."""
    tc, (m, n, k, a, b) = _chosen_tensor_core(state, opt, renderer)
    (store,) = state.sink.src
    red = next(u for u in state.sink.toposort() if u.op is Ops.REDUCE)
    tm, tn, tk = tc.dims
    lane = UOp(Ops.RANGE, IDX, (UOp.const(IDX, tc.threads),), RangeArg(state.next_id, AxisKind.GLOBAL))

    def outer(r: UOp, tile: int) -> UOp | None:  # the loop over tiles, None when one tile covers the axis
        size = const_size(r)
        assert size is not None
        return r.replace(src=(UOp.const(IDX, size // tile),)) if size > tile else None

    def at(r: UOp, tile: int, inner: UOp | int) -> UOp:  # a layout's coordinate may be a plain int
        within = inner if isinstance(inner, UOp) else UOp.const(IDX, inner)
        o = outer(r, tile)
        return within if o is None else o * tile + within

    k_outer = outer(k, tk)
    frag_a = [a.substitute({m: at(m, tm, row), k: at(k, tk, col)})
              for row, col in (tc.layout_a(lane, i) for i in range(tc.elements[0]))]
    frag_b = [b.substitute({k: at(k, tk, row), n: at(n, tn, col)})
              for row, col in (tc.layout_b(lane, i) for i in range(tc.elements[1]))]
    wmma = UOp(Ops.WMMA, tc.dtype_acc, (lane, *frag_a, *frag_b), tc)
    loops = tuple(r for r in (k_outer if s is k else s for s in red.src[1:]) if r is not None)
    stores = []
    for i in range(tc.elements[2]):
        part = UOp(Ops.GEP, tc.dtype_acc, (wmma,), i)
        total = UOp(Ops.REDUCE, red.dtype, (part, *loops), red.arg) if loops else part
        row, col = tc.layout_c(lane, i)
        stores.append(store.substitute({red: total}).substitute({m: at(m, tm, row), n: at(n, tn, col)}))
    new = replace(state, sink=simplify_kernel(state.sink.replace(src=tuple(stores))), next_id=state.next_id + 1,
                  local_sizes=((lane.arg.axis, tc.threads),), tc_lane=lane.arg.axis, applied=(opt,))
    if work_item_ranges(new, renderer)[:1] != [lane]:
        raise OptError(f"{opt}: the lanes must be launch dimension 0")
    return new


register_opt_rule(OptOps.TC, apply_tensor_core)

__all__ = ["apply_tensor_core", "tc_choices"]
