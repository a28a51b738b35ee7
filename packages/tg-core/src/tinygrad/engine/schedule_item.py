"""What the scheduler hands to the engine: one kernel (or copy) with its buffers."""

from __future__ import annotations

from dataclasses import dataclass, field

from tinygrad.device import Buffer
from tinygrad.uop.ops import Ops, UOp, buffer_node


@dataclass(eq=False, slots=True)
class ScheduleItem:
    ast: UOp  # SINK(STORE(...), ...) for a kernel, or COPY(PARAM 0, PARAM 1) for a transfer
    bufs: list[Buffer]  # the `outs` outputs first, then inputs, in PARAM order
    device: str
    outputs: list[UOp] = field(default_factory=list)  # the graph node(s) this item realizes
    var_vals: dict[str, int] = field(default_factory=dict)  # values of the symbolic variables the kernel takes
    outs: int = 1  # how many of `bufs` the item writes: a kernel may store several values (schedule.py)

    @property
    def is_copy(self) -> bool:
        return self.ast.op is Ops.COPY

    def __repr__(self) -> str:
        kind = "copy" if self.is_copy else "kernel"
        return f"<ScheduleItem {kind} on {self.device}: {[repr(b) for b in self.bufs]}>"



def buffer_view(buf: Buffer, shape: tuple[int, ...]) -> UOp:
    node = buffer_node(buf)
    return node if shape == (buf.size,) else node.reshape(shape)
