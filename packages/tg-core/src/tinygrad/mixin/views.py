"""Views that remember their base, and `assign` through them.

A tensor made by a movement op (reshape, permute, expand, pad, shrink, flip, and so every basic index `t[1:3, 0]`
built from them) records its base (the tensor at the start of the chain that is not itself a view) and the chain
of movements (op, arg, input shape) that leads from it to the view. Assigning to the view then writes into the base,
as tinygrad does for views of a buffer: the movements are undone from the outside in, over the base's *current*
value (a reshape is reshaped back, a permute inverted, a flip flipped again, a pad cut off, and a shrink padded back
to full size and selected over the old value with a mask), the base takes that new value with its own whole-tensor
assign (which TinyJit notes), and the view becomes the chain re-applied to the base's new value.

Assign stays functional: nothing is written until the base is realized, and a tensor computed from the base before
the assign (a view taken earlier included) keeps the value it had then. Realizing a view only caches its value: it
still writes into its base. The base is held weakly: once no one holds it, nothing can read it, and an assign to the
view replaces the view's value alone.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tinygrad.dtype import dtypes
from tinygrad.mixin.common import placed_mask, select
from tinygrad.uop.ops import GroupOp, Ops, UOp, inverse_permutation, post_order, sint

if TYPE_CHECKING:
    from tinygrad.tensor import Tensor

Move = tuple[Ops, Any, tuple[sint, ...]]  # (op, arg, the shape it applies to)
# (the base, weakly: a view must not keep the graph of a base nobody else holds; the moves from the base to the view,
# outermost first; after the view was assigned to, its graph and the base's then: while both still hold them,
# realizing the view realizes the base too)
ViewRecord = tuple[weakref.ref, tuple[Move, ...], tuple[UOp, UOp] | None]


def record_view(out: Tensor, src: Tensor, rec: ViewRecord | None) -> None:
    """Note that `out` was made from `src` (whose record is `rec`) by movement ops only: out.uop is those ops over
    src.uop."""
    node = out.uop
    if node.src and node.src[0] is src.uop:  # one op, the usual case
        moves: tuple[Move, ...] = ((node.op, node.arg, src.uop.shape),)
    else:
        moves = _moves(node, src.uop)
    if rec is None or rec[0]() is None:  # src is a base (or its own base is gone, so that it stands for it)
        out._view = (weakref.ref(src), moves, None)
    else:
        out._view = (rec[0], moves + rec[1], None)


def view_record(t: Tensor) -> ViewRecord | None:
    return getattr(t, "_view", None)


def written_base(t: Tensor) -> Tensor | None:
    """The base a view wrote into, while the view still reads it (realize() realizes it with the view)."""
    rec: ViewRecord | None = getattr(t, "_view", None)
    if rec is None or rec[2] is None or t.uop is not rec[2][0]:
        return None
    base = rec[0]()
    return base if base is not None and base.uop is rec[2][1] else None


def write_through(view: Tensor, rec: ViewRecord, value: Tensor) -> bool:
    """`view.assign(value)` for a view: write `value` into the base and re-derive the view from the base's new value.
    Shapes, dtypes and devices were checked by assign. False when the base is gone (nothing else can read it): the
    caller assigns to the view alone."""
    base, moves = rec[0](), rec[1]
    if base is None:
        view._view = None  # from now on the view is a base of its own
        return False
    if any(op is Ops.EXPAND for op, _, _ in moves):
        raise ValueError(f"cannot assign through an expanded (broadcast) view of shape {view.shape}: several of its "
                         f"elements are one element of the base (shape {base.shape}); assign to a contiguous copy "
                         f"(.contiguous()) instead")
    if moves and base.requires_grad and id(base) in type(base)._grad_tensors:
        raise RuntimeError("a view of a leaf tensor that requires grad cannot be written in place (PyTorch refuses "
                           "too); write into a copy: y = x.clone(); y[...].assign(v)")
    in_place = _region_in_place(view, base, moves, value)
    # the value of each level of the chain, over the base's current value (views alias the base, so a write lands
    # in what the base holds now, not in what it held when the view was made)
    levels = [base.uop]
    for move in reversed(moves):
        levels.append(_apply([move], levels[-1]))
    new = value
    for i, (op, arg, in_shape) in enumerate(moves):  # outermost first
        new = _unapply(op, arg, in_shape, new, base._derive(levels[len(moves) - 1 - i]))
    if in_place is not None:  # the scheduler stores the written region into the base's buffer (engine/schedule.py)
        new = new._derive(type(base)._runtime.in_place_write(new.uop, in_place))
    if type(view)._runtime.in_memory(view.uop):  # a realized view is TinyJit state too: replays keep its buffer current
        type(view)._runtime.note_assign(view)
    base.assign(new)
    if new._requires_grad is True:  # a value with gradient history makes the base part of the graph (as setitem)
        base._requires_grad = view._requires_grad = True
    view.uop = _apply(moves, base.uop)
    view._view = (rec[0], moves, (view.uop, base.uop))
    return True


def _holders(node: UOp) -> int:
    """How many references to `node` exist besides the caller's one local variable (see _calibrate)."""
    return sys.getrefcount(node) - _UNSEEN_REFERENCES


def _calibrate() -> int:
    """What sys.getrefcount adds for the call chain and the caller's variable: measured on a node with one holder."""
    holder = [UOp(Ops.CONST, dtypes.int32, (), -0x7EDC0DE)]  # a node no one else can hold
    node = holder[0]
    return _holders(node) - 1


_UNSEEN_REFERENCES = 0
_UNSEEN_REFERENCES = _calibrate()


def _region_in_place(view: Tensor, base: Tensor, moves: tuple[Move, ...], value: Tensor) -> tuple | None:
    """The SHRINK arg of the region `view` is of its base, when assigning to it may write into the base's buffer in
    place instead of computing a new whole value; else None.

    That is when the view is a region (a shrink of the base, maybe reshaped: `t[a:b]`, `t[i]`, `cache[:, :, p:p+1]`)
    of a realized base on one device, nothing but the base and this view holds the buffer's graph (no other tensor,
    view, lazy graph or realized node could read the old contents later: Python's reference counts of the nodes on
    the chain from the view down to the buffer tell), and the new value does not read the buffer (the kernel would
    read what it is overwriting). Anything else takes the functional path, which is always right."""
    if isinstance(base.device, tuple) or not moves or moves[-1][0] is not Ops.SHRINK or \
            any(op is not Ops.RESHAPE for op, _, _ in moves[:-1]):
        return None
    # the chain from the view's node down to the buffer's, and who may hold each: the node above it (the view for
    # the top), the base too for the base's value, and the toposort memo of every chain node above it
    chain = [view.uop]
    for _ in moves:
        chain.append(chain[-1].src[0])
    if chain[-1] is not base.uop:
        return None
    if chain[-1].op is Ops.RESHAPE:
        chain.append(chain[-1].src[0])
    if chain[-1].op is not Ops.BUFFER:
        return None
    owners = [1] * len(chain)
    owners[len(moves)] = 2  # the base's value
    memos = [u._toposort for u in chain]
    for i in range(len(chain)):
        node = chain[i]
        chain[i] = None  # type: ignore[call-overload]  # counted without the list's reference
        memo_refs = sum(1 for memo in memos[:i] if memo is not None and node in memo)
        if _holders(node) != owners[i] + memo_refs:
            return None
    if any(u is node for u in post_order((value.uop,))):
        return None
    return moves[-1][1]


def _moves(top: UOp, bottom: UOp) -> tuple[Move, ...]:
    """The movement ops that lead from `bottom` up to `top`, outermost first."""
    out: list[Move] = []
    node = top
    while node is not bottom:
        assert node.op in GroupOp.Movement, f"a view's graph is movement ops over its base's, found {node.op}"
        src = node.src[0]
        out.append((node.op, node.arg, src.shape))
        node = src
    return tuple(out)


def _apply(moves: Sequence[Move], x: UOp) -> UOp:
    for op, arg, _ in reversed(moves):
        x = UOp(op, x.dtype, (x,), arg)
    return x


def _unapply(op: Ops, arg: Any, in_shape: tuple[sint, ...], v: Tensor, old: Tensor) -> Tensor:
    """The value of a movement's input after its output was assigned `v`; `old` is the input's current value."""
    if op is Ops.RESHAPE:
        return v._derive(v.uop.reshape(in_shape))
    if op is Ops.PERMUTE:
        return v._derive(v.uop.permute(inverse_permutation(arg)))
    if op is Ops.FLIP:
        return v._derive(v.uop.flip(arg))
    if op is Ops.PAD:  # writes into the padding have nowhere to go: they are dropped
        inside = tuple((b, b + s) for (b, _), s in zip(arg, in_shape))
        return v._derive(v.uop.shrink(inside))
    assert op is Ops.SHRINK, op
    # the written part back at its place, over the old value elsewhere (the mask __setitem__ places too)
    pairs = tuple((b, s - e) for (b, e), s in zip(arg, in_shape))
    return select(placed_mask(old, v.shape, pairs), v._derive(v.uop.pad(pairs)), old)
