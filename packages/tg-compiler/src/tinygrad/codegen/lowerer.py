"""Lowering: turn a kernel AST (tensor-level ops over PARAM leaves) into scalar index arithmetic.

Each output dimension becomes a loop RANGE; the value is computed by pushing the index tuple down
through the AST. Movement ops never copy - each one only rewrites the indices:

    PERMUTE  reorders them          EXPAND   sends broadcast dims to 0
    SHRINK   adds the start offset  FLIP     mirrors: (size-1) - i
    PAD      subtracts the padding, and adds a validity condition that gates loads and zeroes the value
    RESHAPE  flattens to a linear index and splits it again for the source shape

A REDUCE_AXIS opens new RANGEs for its reduced dims. PARAM leaves become gated LOADs.
Symbolic simplification then folds the index arithmetic back down.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tinygrad.codegen.gather_fold import gather_fold
from tinygrad.dtype import dtypes
from tinygrad.uop.ops import AxisKind, GroupOp, Ops, RangeArg, UOp, fold_shrink, post_order, sint, sym_prod
from tinygrad.uop.rewrite import graph_rewrite
from tinygrad.uop.symbolic import symbolic

IDX = dtypes.index


def idx_const(v: sint) -> UOp:
    """An index-arithmetic value: a constant, or a symbolic size (an expression over Variables) as it is."""
    return v if isinstance(v, UOp) else UOp.const(IDX, v)


def _ge(x: UOp, b: int) -> UOp:
    return x.lt(idx_const(b)).ne(UOp.const(dtypes.bool, True))


def _and(a: UOp | None, b: UOp | None) -> UOp | None:
    if a is None:
        return b
    if b is None:
        return a
    return a.alu(Ops.AND, b)


def flat_index(idxs: tuple[UOp, ...], shape: tuple[sint, ...]) -> UOp:
    acc: UOp = idx_const(0)
    stride: sint = 1
    for i, s in reversed(list(zip(idxs, shape))):
        if s != 1:
            acc = acc + i * idx_const(stride) if stride != 1 else acc + i
        stride *= s
    return acc


def reshape_indices(idxs: tuple[UOp, ...], new_shape: tuple[sint, ...],
                    src_shape: tuple[sint, ...]) -> tuple[UOp, ...]:
    """Indices into `src_shape` that address the same element as `idxs` into `new_shape`."""
    squeezed_new = [(i, s) for i, s in zip(idxs, new_shape) if s != 1]
    if [s for _, s in squeezed_new] == [s for s in src_shape if s != 1]:
        # only size-1 dims were added or removed: indices carry over one to one
        it = iter(i for i, _ in squeezed_new)
        return tuple(next(it) if s != 1 else idx_const(0) for s in src_shape)
    flat = flat_index(idxs, new_shape)
    if len(src_shape) == 1:
        return (flat,)  # a flat buffer: the flat index is the index (no modulo needed, it is in range)
    # split the flat index by the source's strides; a symbolic size (a Variable the kernel takes as an argument)
    # gives symbolic strides, which are computed in the kernel like any other index arithmetic
    out: list[UOp] = []
    stride: sint = 1
    for s in reversed(src_shape):
        if isinstance(s, int) and s == 1:
            out.append(idx_const(0))
            continue
        v = flat // idx_const(stride) if not (isinstance(stride, int) and stride == 1) else flat
        out.append(v % idx_const(s))
        stride = sym_prod((stride, s))
    return tuple(reversed(out))


@dataclass
class _Lowering:
    next_axis: int = 0
    memo: dict[tuple, UOp] = field(default_factory=dict)

    def new_range(self, size: sint, kind: AxisKind) -> UOp:
        r = UOp(Ops.RANGE, IDX, (idx_const(size),), RangeArg(self.next_axis, kind))
        self.next_axis += 1
        return r

    def lower(self, node: UOp, idxs: tuple[UOp, ...], valid: UOp | None) -> UOp:
        key = (node, idxs, valid)
        if (hit := self.memo.get(key)) is not None:
            return hit
        if node.op in GroupOp.Elementwise:
            # lower the elementwise operands first, deepest first: a long chain (x+1+1+...) would otherwise
            # recurse once per op and hit Python's recursion limit
            for sub in self._elementwise_postorder(node, idxs, valid)[:-1]:
                self.memo[(sub, idxs, valid)] = self._lower(sub, idxs, valid)
        out = self._lower(node, idxs, valid)
        self.memo[key] = out
        return out

    def _elementwise_postorder(self, root: UOp, idxs: tuple[UOp, ...], valid: UOp | None) -> list[UOp]:
        return post_order((root,), children=lambda n: [s for s in n.src if s.op in GroupOp.Elementwise],
                          skip=lambda n: (n, idxs, valid) in self.memo)

    def _lower(self, node: UOp, idxs: tuple[UOp, ...], valid: UOp | None) -> UOp:
        rule = LOWERING_RULES.get(node.op) or (_lower_elementwise if node.op in GroupOp.Elementwise else None)
        if rule is None:
            raise NotImplementedError(f"cannot lower {node.op} inside a kernel")
        return rule(self, node, idxs, valid)


# ---- the lowering rules: one per op, each gets the node, the indices it is read at and the validity so far ----

Indices = tuple[UOp, ...]
LoweringRule = Callable[[_Lowering, UOp, Indices, UOp | None], UOp]


def _lower_param(state: _Lowering, node: UOp, idxs: Indices, valid: UOp | None) -> UOp:
    index_src = (node, idxs[0]) if valid is None else (node, idxs[0], valid)
    return UOp(Ops.LOAD, node.dtype, (UOp(Ops.INDEX, node.dtype, index_src),))


def _lower_scalar(state: _Lowering, node: UOp, idxs: Indices, valid: UOp | None) -> UOp:
    return node  # a constant, or a Variable's value: a scalar kernel argument


def _lower_arange(state: _Lowering, node: UOp, idxs: Indices, valid: UOp | None) -> UOp:
    return idxs[0].cast(node.dtype)  # position i holds i: the index itself, so no buffer is read


def _lower_elementwise(state: _Lowering, node: UOp, idxs: Indices, valid: UOp | None) -> UOp:
    return UOp(node.op, node.dtype, tuple(state.lower(s, idxs, valid) for s in node.src), node.arg)


def _lower_reshape(state: _Lowering, node: UOp, idxs: Indices, valid: UOp | None) -> UOp:
    src = node.src[0]
    return state.lower(src, reshape_indices(idxs, node.shape, src.shape), valid)


def _lower_permute(state: _Lowering, node: UOp, idxs: Indices, valid: UOp | None) -> UOp:
    new: list[UOp] = [idx_const(0)] * len(idxs)
    for pos, axis in enumerate(node.arg):
        new[axis] = idxs[pos]
    return state.lower(node.src[0], tuple(new), valid)


def _lower_expand(state: _Lowering, node: UOp, idxs: Indices, valid: UOp | None) -> UOp:
    src = node.src[0]
    new = tuple(idx_const(0) if s == 1 and o != 1 else i for i, s, o in zip(idxs, src.shape, node.shape))
    return state.lower(src, new, valid)


def _lower_shrink(state: _Lowering, node: UOp, idxs: Indices, valid: UOp | None) -> UOp:
    if (folded := fold_shrink(node.src[0], node.arg)) is not None:  # a slice of a cat reads the one part it needs
        return state.lower(folded, idxs, valid)
    return state.lower(node.src[0], tuple(i + idx_const(b) if b else i for i, (b, _) in zip(idxs, node.arg)), valid)


def _lower_flip(state: _Lowering, node: UOp, idxs: Indices, valid: UOp | None) -> UOp:
    new = tuple(idx_const(s - 1) - i if f else i for i, f, s in zip(idxs, node.arg, node.shape))
    return state.lower(node.src[0], new, valid)


def _lower_pad(state: _Lowering, node: UOp, idxs: Indices, valid: UOp | None) -> UOp:
    # a read inside the source's extent is valid there and shifted into it; outside it, the padding reads 0
    src = node.src[0]
    cond: UOp | None = None
    new: list[UOp] = []
    for i, (b, after), s in zip(idxs, node.arg, src.shape):
        if b == 0 and after == 0:
            new.append(i)
            continue
        cond = _and(cond, _and(_ge(i, b), i.lt(idx_const(b + s))))
        new.append(i - idx_const(b) if b else i)
    inner = state.lower(src, tuple(new), _and(valid, cond))
    return inner if cond is None else cond.where(inner, UOp.const(node.dtype, 0))


def _lower_reduce_axis(state: _Lowering, node: UOp, idxs: Indices, valid: UOp | None) -> UOp:
    # each reduced axis of more than one element becomes a REDUCE range; a reduction over none is its value
    src = node.src[0]
    ranges = []
    new = list(idxs)
    for a in node.arg.axes:
        if src.shape[a] == 1:
            new[a] = idx_const(0)
            continue
        r = state.new_range(src.shape[a], AxisKind.REDUCE)
        ranges.append(r)
        new[a] = r
    value = state.lower(src, tuple(new), valid)
    return value if not ranges else UOp(Ops.REDUCE, node.dtype, (value, *ranges), node.arg.op)


#: how each op of a kernel's AST becomes index arithmetic and loads; elementwise ops keep their op
LOWERING_RULES: dict[Ops, LoweringRule] = {
    Ops.PARAM: _lower_param, Ops.CONST: _lower_scalar, Ops.DEFINE_VAR: _lower_scalar, Ops.ARANGE: _lower_arange,
    Ops.RESHAPE: _lower_reshape, Ops.PERMUTE: _lower_permute, Ops.EXPAND: _lower_expand, Ops.SHRINK: _lower_shrink,
    Ops.FLIP: _lower_flip, Ops.PAD: _lower_pad, Ops.REDUCE_AXIS: _lower_reduce_axis,
}


def lower_kernel(ast: UOp) -> UOp:
    """SINK(STORE(PARAM.reshape(shape), value)) -> SINK(STORE(INDEX(PARAM, idx), scalar value))."""
    if ast.op is not Ops.SINK:
        raise ValueError(f"a kernel AST starts with SINK, got {ast.op}")
    state = _Lowering()
    stores = []
    loops_for_shape: dict[tuple[int, ...], tuple[UOp, ...]] = {}
    for store in ast.src:
        target, value = store.src
        shape = target.shape
        # stores of one shape share their loops; separate ranges would nest, running each store N times over
        if shape not in loops_for_shape:
            loops_for_shape[shape] = tuple(state.new_range(s, AxisKind.GLOBAL) if s != 1 else idx_const(0)
                                           for s in shape)
        idxs = loops_for_shape[shape]
        param = target
        while param.op is Ops.RESHAPE:
            param = param.src[0]
        if param.op is Ops.PARAM:  # the usual output: the whole buffer, row-major
            index = UOp(Ops.INDEX, param.dtype, (param, flat_index(idxs, shape)))
        else:  # a region of the buffer (an in-place write through a view): its indices as a load would read them
            load = state.lower(target, idxs, None)
            if load.op is not Ops.LOAD or len(load.src[0].src) != 2:
                raise ValueError(f"a kernel can store through reshapes, permutes, shrinks and flips of its output, "
                                 f"not through {[u.op.name for u in target.toposort() if u.op is not Ops.PARAM]}")
            index = load.src[0]
        stores.append(UOp(Ops.STORE, dtypes.void, (index, state.lower(value, idxs, None))))
    lowered = graph_rewrite(UOp(Ops.SINK, dtypes.void, tuple(stores)), symbolic)
    # integer-tensor indexing lowers to a one-hot compare-and-sum; fold it into a direct load, then simplify the
    # index arithmetic that puts in. Every node of `lowered` is a fixed point of symbolic, so that pass changes
    # nothing unless the fold applies to one of its REDUCEs as they are: most kernels skip it
    nodes = lowered.toposort()
    if any(u.op is Ops.REDUCE and gather_fold.rewrite(u) is not None for u in nodes):
        lowered = graph_rewrite(lowered, gather_fold + symbolic)
        nodes = lowered.toposort()
    # a buffer seen through a symbolic shape has a symbolic size; below the AST only its largest value matters
    sized = {u: u.replace(arg=u.arg._replace(size=int(u.arg.size.vmax))) for u in nodes
             if u.op is Ops.PARAM and isinstance(u.arg.size, UOp)}
    return lowered.substitute(sized) if sized else lowered
