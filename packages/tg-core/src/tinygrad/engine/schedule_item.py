"""What the scheduler hands to the engine: one kernel (or copy) with its buffers."""

from __future__ import annotations

from collections.abc import Callable
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

    @property
    def src(self) -> tuple[UOp, ...]:
        """tinygrad's view of a scheduled call: its kernel (a SINK) or copy first, then the buffers it takes."""
        return (self.ast, *(buffer_node(b) for b in self.bufs))

    def __repr__(self) -> str:
        kind = "copy" if self.is_copy else "kernel"
        return f"<ScheduleItem {kind} on {self.device}: {[repr(b) for b in self.bufs]}>"


@dataclass(eq=False)
class Linear:
    """What `Tensor.linear_with_vars` returns: the calls that realize tensors, in launch order (`src`, tinygrad's
    name), not yet run. `run_linear` (tinygrad.engine.realize) runs them, then the tensors read the buffers they
    filled; until then the tensors keep their graphs, so a linear that is never run changes nothing."""

    src: tuple[ScheduleItem, ...]
    #: called once the calls have run: points the scheduled tensors at their buffers (as realize() does)
    adopt: Callable[[], None] = field(repr=False, default=lambda: None)
    ran: bool = False



def buffer_view(buf: Buffer, shape: tuple[int, ...]) -> UOp:
    node = buffer_node(buf)
    return node if shape == (buf.size,) else node.reshape(shape)
