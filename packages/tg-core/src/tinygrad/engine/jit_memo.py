"""The last call of a TinyJit function, remembered so that the same arguments again replay without being taken apart.

A training or decoding loop calls its step with the same objects every time (the model, the same input tensors
refilled in place). Taking those apart compares every tensor and value the model holds; instead, the last call's
arguments are remembered as they were found: the containers and objects searched, each with the values it held,
and the tensors, each with its node. A call whose arguments are those same objects, every container still holding
the same values and every tensor the same node (no assign since, nothing rebound), replays on the last call's
buffers. Anything else takes the full path.
"""

from __future__ import annotations

import operator
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tinygrad.engine.jit_args import Arguments, snapshot
from tinygrad.engine.jit_io import held_buffers
from tinygrad.tensor import Tensor

if TYPE_CHECKING:
    from tinygrad.device import Buffer
    from tinygrad.engine.jit_capture import Capture
    from tinygrad.uop.ops import UOp


def _held(v: Any) -> Any:
    """A reference that does not keep `v` alive where it can be weak (tensors, most objects)."""
    try:
        return weakref.ref(v)
    except TypeError:  # ints, strings, lists, dicts: held, and compared by identity
        return lambda: v


def _node_of(ref: weakref.ref[Tensor]) -> UOp | None:
    """The node of a tensor still alive (None, which matches no node, for one gone)."""
    t = ref()
    return t.uop if t is not None else None


@dataclass(eq=False)
class _Given:
    """A tensor given directly as an argument, alone in its input: a call may pass another tensor there, of the same
    shape, dtype and device, in memory of its own (a new batch), and still replay without the full path."""

    position: int  # of the argument
    slot: int  # its input number
    shape: tuple
    dtype: Any
    device: str


@dataclass(eq=False)
class LastCall:
    capture: Capture
    args: list[Any]  # a reference to each argument
    containers: list[Any]  # a reference to each container searched
    dicts: list[dict | None]  # for an object with a __dict__, that dict (compared without a call per object)
    snapshots: list[tuple]  # and what each held
    tensors: list[weakref.ref[Tensor]]  # each other tensor found
    tensor_nodes: list[UOp | None]  # and its node
    buffers: list[weakref.ref[Buffer]]
    given: dict[int, _Given]  # by argument position
    nodes: dict[int, UOp]  # the node of each tensor given directly, by argument position

    @staticmethod
    def of(capture: Capture, args: tuple, found: Arguments, buffers: list[Buffer],
           pattern: tuple[tuple[int, ...], ...]) -> LastCall:
        """`pattern`: the input numbers of each tensor in found.tensors (one per device)."""
        uses: dict[int, int] = {}
        for slots in pattern:
            for slot in slots:
                uses[slot] = uses.get(slot, 0) + 1
        index = {id(t): i for i, t in enumerate(found.tensors)}
        given: list[_Given] = []
        for position, a in enumerate(args):
            if type(a) is Tensor and isinstance(a.device, str) and all(type(d) is int for d in a.shape) and \
                    len(slots := pattern[index[id(a)]]) == 1 and uses[slots[0]] == 1 and \
                    sum(1 for b in args if b is a) == 1:
                given.append(_Given(position, slots[0], a.shape, a.dtype, a.device))
        directly = {id(args[g.position]) for g in given}
        others = [t for t in found.tensors if id(t) not in directly]
        dicts = [d if type(d := getattr(c, "__dict__", None)) is dict and not isinstance(c, dict) else None
                 for c, _ in found.containers]
        return LastCall(capture, [_held(a) for a in args], [_held(c) for c, _ in found.containers], dicts,
                        [snap for _, snap in found.containers], [weakref.ref(t) for t in others],
                        [t.uop for t in others], [weakref.ref(b) for b in buffers], {g.position: g for g in given},
                        {g.position: args[g.position].uop for g in given})

    def matches(self, args: tuple) -> tuple[list[Buffer], set[int]] | None:
        """When `args` are the last call's arguments, unchanged but for other tensors given directly in place of
        tensors given directly: the input buffers, and the numbers of those that changed. Else None."""
        if len(args) != len(self.args):
            return None
        buffers = [b for ref in self.buffers if (b := ref()) is not None]
        if len(buffers) != len(self.buffers):
            return None
        changed: set[int] = set()
        for position, (ref, a) in enumerate(zip(self.args, args)):
            g = self.given.get(position)
            if g is None:
                if ref() is not a:
                    return None
            elif ref() is not a or a.uop is not self.nodes[position]:  # another tensor, or this one assigned
                if type(a) is not Tensor or (b := self._new_input(a, g, buffers)) is None:
                    return None
                buffers[g.slot] = b
                changed.add(g.slot)
        if not all(map(operator.is_, map(_node_of, self.tensors), self.tensor_nodes)):
            return None
        for ref, held, then in zip(self.containers, self.dicts, self.snapshots):
            if held is not None:  # an object's attributes: the same __dict__, holding the same
                if (c := ref()) is None or c.__dict__ is not held:
                    return None
                now = (*held, *held.values())
            elif (c := ref()) is None:
                return None
            else:
                now = snapshot(c)
            if len(now) != len(then) or not all(map(operator.is_, now, then)):
                return None
        return buffers, changed

    @staticmethod
    def _new_input(t: Tensor, g: _Given, buffers: list[Buffer]) -> Buffer | None:
        """The buffer of a tensor given in place of the last call's: realized, of the same kind, and in memory no other
        input uses (else the full path decides)."""
        if t.shape != g.shape or t.dtype != g.dtype or t.device != g.device:
            return None
        held = held_buffers(t.uop)
        if held is None:
            return None
        b = held[0]
        storage = b.base if b.base is not None else b
        if any(i != g.slot and (o.base if o.base is not None else o) is storage for i, o in enumerate(buffers)):
            return None
        return b

    def adopt(self, args: tuple, buffers: list[Buffer], changed: set[int]) -> None:
        """After a replay on `args`: remember the tensors given in place of the last call's, and the new nodes the
        replay gave its state tensors (over the same memory)."""
        for position, g in self.given.items():
            self.args[position] = weakref.ref(args[position])
            self.nodes[position] = args[position].uop
            if g.slot in changed:
                self.buffers[g.slot] = weakref.ref(buffers[g.slot])
        if self.capture.state:
            self.tensor_nodes = [_node_of(ref) for ref in self.tensors]
