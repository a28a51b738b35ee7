"""Reverse-mode autodiff over the tensor-level UOp graph.

Each rule takes the gradient flowing into a node and returns one gradient per source (None where
a source gets no gradient). `compute_gradient` walks the graph from the root back to the targets.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable

from tinygrad.uop.ops import GroupOp, Ops, UOp, inverse_permutation
from tinygrad.uop.placement import device_of, replicate_node, shard_like_node

GradRule = Callable[[UOp, UOp], tuple[UOp | None, ...]]
#: a gradient a Tensor function defines for the node it returns: (its inputs, other nodes its rule reads, the rule
#: `rule(g, *inputs, *reads)` -> one gradient per input)
CustomGradient = tuple[tuple[UOp, ...], tuple[UOp, ...], Callable[..., tuple[UOp | None, ...]]]

#: Nodes whose gradient replaces the chain rule through the ops they are built from. A convolution registers
#: one: the chain rule through its sliding-window view would scatter the gradient through an intermediate of
#: batch x channels x positions x kernel taps, where the gradient for its input is one transposed convolution.
#: Weak keys: an entry lives as long as the graph that holds its node. UOps are hash-consed, so a graph built the
#: same way anywhere else is the same node with the same (mathematically equal) gradient.
CUSTOM_GRADIENTS: weakref.WeakKeyDictionary[UOp, CustomGradient] = weakref.WeakKeyDictionary()


def define_gradient(node: UOp, inputs: tuple[UOp, ...], rule: Callable[..., tuple[UOp | None, ...]],
                    reads: tuple[UOp, ...] = ()) -> None:
    """Backpropagate through `node` by `rule(g, *inputs, *reads)` (one gradient per input) instead of through its
    sources. The inputs must lie in node's graph; every node between them and `node` then gets no gradient from it.
    `reads`: other nodes of the graph the rule uses. The rule gets its nodes as arguments rather than holding
    them, so that it still applies when the graph is rebuilt over other nodes (`substitute_keeping_gradients`)."""
    CUSTOM_GRADIENTS[node] = (inputs, reads, rule)


def substitute_keeping_gradients(roots: tuple[UOp, ...], mapping: dict[UOp, UOp]) -> tuple[UOp, ...]:
    """The roots with the nodes of `mapping` replaced (`UOp.substitute`), where every rebuilt node that had a defined
    gradient keeps it, over the rebuilt inputs and reads. `@function` rebuilds its traced graph over each call's
    arguments this way: without the rules, a convolution in it would backpropagate by the chain rule."""
    rebuilt: dict[UOp, UOp] = {}
    for node in UOp(Ops.SINK, src=roots).toposort():
        if node in mapping:
            rebuilt[node] = mapping[node]
        else:
            new_src = tuple(rebuilt[s] for s in node.src)
            rebuilt[node] = node if new_src == node.src else node.replace(src=new_src)
    for old, new in rebuilt.items():
        if new is not old and (custom := CUSTOM_GRADIENTS.get(old)) is not None:
            inputs, reads, rule = custom
            # an input or read outside the roots' graph (a rule may read any node) is rebuilt on its own
            moved = tuple(rebuilt[u] if u in rebuilt else u.substitute(mapping) for u in inputs + reads)
            CUSTOM_GRADIENTS[new] = (moved[:len(inputs)], moved[len(inputs):], rule)
    return tuple(rebuilt[r] for r in roots)


def _cos(x: UOp) -> UOp:
    # cos(x) = 1 - 2 sin^2(x/2): halving is exact, while x + pi/2 would round away pi/2 for large |x|
    s = (x * x.const_like(0.5)).alu(Ops.SIN)
    return x.const_like(1.0) - x.const_like(2.0) * s * s


def _copy_back(g: UOp, src: UOp) -> UOp:
    """The gradient of a device copy is a copy back to where the source lives: its device, or its devices, placed
    as the source is (the gradient of a gather is sharded like the tensor gathered)."""
    device = device_of(src)
    if device is None:
        return g  # a source made of constants has no device of its own
    if isinstance(device, tuple):
        return shard_like_node(replicate_node(g, device), src)
    return UOp(Ops.COPY, g.dtype, (g,), device)


def _max_grad(g: UOp, node: UOp) -> tuple[UOp | None, ...]:
    a, b = node.src
    # ties split the gradient evenly, as PyTorch's maximum does
    a_wins = b.alu(Ops.CMPLT, a).cast(g.dtype)
    tie = a.eq(b).cast(g.dtype) * g.const_like(0.5)
    return (g * (a_wins + tie), g * ((a_wins.const_like(1.0) - a_wins) - tie))


def _reduce_grad(g: UOp, node: UOp) -> tuple[UOp | None, ...]:
    op, axes = node.arg
    x = node.src[0]
    if op is Ops.ADD:
        return (g.expand(x.shape),)
    if op is Ops.MAX:
        # the gradient is shared evenly among the positions that hold the maximum
        mask = x.eq(node.expand(x.shape)).cast(g.dtype)
        count = mask.reduce_axis(Ops.ADD, axes)
        return ((mask * (g.alu(Ops.FDIV, count)).expand(x.shape)),)
    if op is Ops.MUL:
        # d(prod)/dx_i is the product of the others. node/x_i is that only where x_i != 0; at a zero it is the
        # product of the nonzero elements if x_i is the only zero, else 0
        is_zero = x.eq(x.const_like(0))
        n_zeros = is_zero.cast(x.dtype).reduce_axis(Ops.ADD, axes).expand(x.shape)
        prod_nonzero = is_zero.where(x.const_like(1), x).reduce_axis(Ops.MUL, axes).expand(x.shape)
        at_zero = n_zeros.eq(n_zeros.const_like(1)).where(prod_nonzero, x.const_like(0))
        others = is_zero.where(at_zero, node.expand(x.shape).alu(Ops.FDIV, x))
        return (g.expand(x.shape) * others,)
    raise NotImplementedError(f"no gradient for REDUCE_AXIS {op}")


def _expand_grad(g: UOp, node: UOp) -> tuple[UOp | None, ...]:
    src_shape = node.src[0].shape
    axes = tuple(i for i, (s, o) in enumerate(zip(src_shape, node.shape)) if s != o)
    return (g.reduce_axis(Ops.ADD, axes).reshape(src_shape),)


def _pad_grad(g: UOp, node: UOp) -> tuple[UOp | None, ...]:
    return (g.shrink(tuple((b, b + s) for (b, _), s in zip(node.arg, node.src[0].shape))),)


def _shrink_grad(g: UOp, node: UOp) -> tuple[UOp | None, ...]:
    return (g.pad(tuple((b, s - e) for (b, e), s in zip(node.arg, node.src[0].shape))),)


def _cast_grad(g: UOp, node: UOp) -> tuple[UOp | None, ...]:
    return (g.cast(node.src[0].dtype),) if node.src[0].dtype.is_float else (None,)


LN2 = math.log(2)

GRAD_RULES: dict[Ops, GradRule] = {
    Ops.ADD: lambda g, n: (g, g),
    Ops.SUB: lambda g, n: (g, -g),
    Ops.MUL: lambda g, n: (g * n.src[1], g * n.src[0]),
    Ops.FDIV: lambda g, n: (g.alu(Ops.FDIV, n.src[1]), -(g * n.src[0]).alu(Ops.FDIV, n.src[1] * n.src[1])),
    Ops.NEG: lambda g, n: (-g,),
    Ops.RECIPROCAL: lambda g, n: (-(g * n * n),),
    Ops.SQRT: lambda g, n: (g.alu(Ops.FDIV, n * n.const_like(2.0)),),
    Ops.EXP2: lambda g, n: (g * n * n.const_like(LN2),),
    Ops.LOG2: lambda g, n: (g.alu(Ops.FDIV, n.src[0] * n.const_like(LN2)),),
    Ops.SIN: lambda g, n: (g * _cos(n.src[0]),),
    Ops.MAX: _max_grad,
    Ops.WHERE: lambda g, n: (None, n.src[0].where(g, g.const_like(0.0)), n.src[0].where(g.const_like(0.0), g)),
    Ops.CAST: _cast_grad,
    Ops.REDUCE_AXIS: _reduce_grad,
    Ops.RESHAPE: lambda g, n: (g.reshape(n.src[0].shape),),
    Ops.PERMUTE: lambda g, n: (g.permute(inverse_permutation(n.arg)),),
    Ops.EXPAND: _expand_grad,
    Ops.PAD: _pad_grad,
    Ops.SHRINK: _shrink_grad,
    Ops.FLIP: lambda g, n: (g.flip(n.arg),),
    Ops.CONTIGUOUS: lambda g, n: (g,),
    Ops.LAYOUT: lambda g, n: (g,),
    Ops.COPY: lambda g, n: (_copy_back(g, n.src[0]),),
    # where a value lives does not change it: the gradient goes through placement unchanged (lowering places it),
    # and a SHARD's second source only says where
    Ops.SHARD: lambda g, n: (g, None)[:len(n.src)],
    Ops.MULTI: lambda g, n: (None,) * len(n.src),  # a MULTI holds buffers: the realized shards of a tensor
    Ops.DETACH: lambda g, n: (None,),
}
# ops with no gradient (piecewise constant or integer-valued)
NO_GRAD = GroupOp.Comparison | {Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.TRUNC, Ops.BITCAST}


def compute_gradient(root: UOp, root_grad: UOp, targets: set[UOp]) -> dict[UOp, UOp]:
    """Gradients of `root` (seeded with `root_grad`) for every node in `targets` that `root` depends on."""
    topo = list(root.toposort())
    # only nodes with a target below them need a gradient
    leads_to_target: set[UOp] = set()
    for node in topo:
        if node in targets or any(s in leads_to_target for s in node.src):
            leads_to_target.add(node)
    grads: dict[UOp, UOp] = {root: root_grad}
    for node in reversed(topo):
        g = grads.get(node)
        if g is None or (node in targets and not any(s in leads_to_target for s in node.src)):
            continue
        if (custom := CUSTOM_GRADIENTS.get(node)) is not None:
            srcs, reads, custom_rule = custom
            src_grads = custom_rule(g, *srcs, *reads)
        elif node.op in NO_GRAD or not node.src:
            continue
        elif (rule := GRAD_RULES.get(node.op)) is None:
            raise NotImplementedError(f"no gradient rule for {node.op}")
        else:
            srcs, src_grads = node.src, rule(g, node)
        for src, sg in zip(srcs, src_grads):
            if sg is None or src not in leads_to_target:
                continue
            grads[src] = grads[src] + sg if src in grads else sg
    return {t: grads[t] for t in targets if t in grads}
