"""The last call of a TinyJit function, remembered so that the same arguments again replay without being taken apart.

A training or decoding loop calls its step with the same objects every time (the model, the same input tensors
refilled in place). Taking those apart compares every tensor and value the model holds; instead, the last call's
arguments are remembered as they were found: the containers and objects searched, each with the values it held,
and the tensors, each with its node. A call whose arguments are those same objects, every container still holding
the same values and every tensor the same node (no assign since, nothing rebound), replays on the last call's
buffers. Anything else takes the full path.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tinygrad.engine.jit_args import Arguments, snapshot
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


def _same(now: tuple, then: tuple) -> bool:
    """The same objects, one by one (identity: equal values that are other objects take the full path)."""
    return len(now) == len(then) and all(a is b for a, b in zip(now, then))


@dataclass(eq=False)
class LastCall:
    capture: Capture
    args: list[Any]  # a reference to each argument
    containers: list[tuple[Any, tuple]]  # a reference to each container searched, and what it held
    tensors: list[tuple[weakref.ref[Tensor], UOp]]  # each tensor found, and its node
    buffers: list[weakref.ref[Buffer]]

    @staticmethod
    def of(capture: Capture, args: tuple, found: Arguments, buffers: list[Buffer]) -> LastCall:
        return LastCall(capture, [_held(a) for a in args], [(_held(c), snap) for c, snap in found.containers],
                        [(weakref.ref(t), t.uop) for t in found.tensors], [weakref.ref(b) for b in buffers])

    def matches(self, args: tuple) -> list[Buffer] | None:
        """The last call's input buffers when `args` are its arguments, unchanged; else None."""
        if len(args) != len(self.args) or not all(ref() is a for ref, a in zip(self.args, args)):
            return None
        if not all(t is not None and t.uop is node for ref, node in self.tensors if (t := ref()) is not None) or \
                any(ref() is None for ref, _ in self.tensors):
            return None
        for ref, then in self.containers:
            if (c := ref()) is None or not _same(snapshot(c), then):
                return None
        buffers = [b for ref in self.buffers if (b := ref()) is not None]
        return buffers if len(buffers) == len(self.buffers) else None

    def refresh(self) -> None:
        """After a replay: its state tensors have new nodes over the same memory."""
        self.tensors = [(ref, t.uop) for ref, _ in self.tensors if (t := ref()) is not None]
