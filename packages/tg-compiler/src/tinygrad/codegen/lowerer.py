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

from dataclasses import dataclass, field

from tinygrad.codegen.gather_fold import gather_fold
from tinygrad.dtype import DType, dtypes
from tinygrad.uop.ops import AxisKind, GroupOp, Ops, RangeArg, UOp, post_order, sint, sym_prod
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


REDUCE_IDENTITY = {Ops.ADD: 0, Ops.MUL: 1}


def reduce_identity(op: Ops, dtype: DType) -> UOp:
    if op is Ops.MAX:
        return UOp.const(dtype, dtype.min)
    return UOp.const(dtype, REDUCE_IDENTITY[op])


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
        op = node.op
        if op is Ops.PARAM:
            index_src = (node, idxs[0]) if valid is None else (node, idxs[0], valid)
            return UOp(Ops.LOAD, node.dtype, (UOp(Ops.INDEX, node.dtype, index_src),))
        if op in (Ops.CONST, Ops.DEFINE_VAR):  # a Variable's value is a scalar kernel argument
            return node
        if op is Ops.ARANGE:  # position i holds i: the index itself, so no buffer is read
            return idxs[0].cast(node.dtype)
        if op in GroupOp.Elementwise:
            return UOp(op, node.dtype, tuple(self.lower(s, idxs, valid) for s in node.src), node.arg)
        src = node.src[0] if node.src else None
        if op is Ops.RESHAPE:
            assert src is not None
            return self.lower(src, reshape_indices(idxs, node.shape, src.shape), valid)
        if op is Ops.PERMUTE:
            assert src is not None
            new: list[UOp] = [idx_const(0)] * len(idxs)
            for pos, axis in enumerate(node.arg):
                new[axis] = idxs[pos]
            return self.lower(src, tuple(new), valid)
        if op is Ops.EXPAND:
            assert src is not None
            new_idxs = tuple(idx_const(0) if s == 1 and o != 1 else i for i, s, o in zip(idxs, src.shape, node.shape))
            return self.lower(src, new_idxs, valid)
        if op is Ops.SHRINK:
            assert src is not None
            return self.lower(src, tuple(i + idx_const(b) if b else i for i, (b, _) in zip(idxs, node.arg)), valid)
        if op is Ops.FLIP:
            assert src is not None
            return self.lower(src, tuple(idx_const(s - 1) - i if f else i
                                         for i, f, s in zip(idxs, node.arg, node.shape)), valid)
        if op is Ops.PAD:
            assert src is not None
            cond: UOp | None = None
            new_list: list[UOp] = []
            for i, (b, after), s in zip(idxs, node.arg, src.shape):
                if b == 0 and after == 0:
                    new_list.append(i)
                    continue
                cond = _and(cond, _and(_ge(i, b), i.lt(idx_const(b + s))))
                new_list.append(i - idx_const(b) if b else i)
            inner = self.lower(src, tuple(new_list), _and(valid, cond))
            if cond is None:
                return inner
            return cond.where(inner, UOp.const(node.dtype, 0))
        if op is Ops.REDUCE_AXIS:
            assert src is not None
            rop, axes = node.arg
            ranges = []
            new_list = list(idxs)
            for a in axes:
                size = src.shape[a]
                if size == 1:
                    new_list[a] = idx_const(0)
                    continue
                r = self.new_range(size, AxisKind.REDUCE)
                ranges.append(r)
                new_list[a] = r
            value = self.lower(src, tuple(new_list), valid)
            if not ranges:
                return value
            return UOp(Ops.REDUCE, node.dtype, (value, *ranges), rop)
        raise NotImplementedError(f"cannot lower {op} inside a kernel")


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
        out_idx = flat_index(idxs, shape)
        stores.append(UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, param.dtype, (param, out_idx)),
                                                   state.lower(value, idxs, None))))
    lowered = graph_rewrite(UOp(Ops.SINK, dtypes.void, tuple(stores)), symbolic)
    # integer-tensor indexing lowers to a one-hot compare-and-sum; fold it into a direct load, then simplify the
    # index arithmetic that puts in
    lowered = graph_rewrite(lowered, gather_fold + symbolic)
    # a buffer seen through a symbolic shape has a symbolic size; below the AST only its largest value matters
    sized = {u: u.replace(arg=u.arg._replace(size=int(u.arg.size.vmax))) for u in lowered.toposort()
             if u.op is Ops.PARAM and isinstance(u.arg.size, UOp)}
    return lowered.substitute(sized) if sized else lowered
