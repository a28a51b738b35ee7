"""What the Tensor methods need to know about a TinyJit function that is running (kept apart from jit.py, which
imports Tensor): whether it is being captured, and which tensors it assigned to."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tinygrad.device import Buffer
    from tinygrad.tensor import Tensor
    from tinygrad.uop.ops import UOp


class JitError(RuntimeError):
    """A TinyJit function did something a replay could not repeat."""


@dataclass(eq=False)
class RunningJit:
    name: str
    capturing: bool
    owner: object  # the TinyJit running
    # tensors assigned to, each with the graph it held before its first assign: they are realized with the outputs,
    # and a capture writes their new value back into the buffer they held (the model state a replay reads)
    assigned: dict[int, tuple[Tensor, UOp]] = field(default_factory=dict)
    #: the memory of the call's input tensors (ids of their storage): while capturing, a node computed from them is
    #: computed again even if an equal node was realized before the call, so that the capture records its kernel
    inputs: frozenset[int] = frozenset()
    #: the buffer views that nodes were realized into during this capture (schedule.realized_views adds them): their
    #: kernels are recorded, so a later realize in the same call reads them instead of computing them again
    realized_here: set[UOp] = field(default_factory=set)


running: list[RunningJit] = []

#: the names of the `tinygrad.function` bodies being traced, innermost last (tinygrad/function.py)
tracing_functions: list[str] = []

#: Graphs that a tensor held before an assign gave it a new one, and a count of such assigns. A cached
#: `tinygrad.function` trace that reads such a graph as an implicit input is stale: it is traced again.
superseded: weakref.WeakSet[UOp] = weakref.WeakSet()
assign_generation = 0


def check_host_read(what: str) -> None:
    """Refuse to read device data on the host while a capture is in progress: a replay skips the Python code,
    so it would return the value read during the capture forever. A `tinygrad.function` body is traced once per
    input signature, so a value read there would be baked into the trace the same way."""
    if tracing_functions:
        raise RuntimeError(f"{what} inside the body of the function {tracing_functions[-1]} reads a tensor's value "
                           f"on the host; the body is traced once and later calls reuse the trace without running "
                           f"Python code. Return the tensor from the function and read it outside")
    if running and running[-1].capturing:
        raise JitError(f"{what} inside the TinyJit function {running[-1].name} reads a tensor's value on the host "
                       f"during capture; replays do not run Python code and would keep that value. Return the tensor "
                       f"from the function and read it outside")


#: Buffer objects a TinyJit replay wrote over, by id, each with a weak reference to it and what reading it now
#: raises: the outputs of an earlier replay (replays reuse their output memory, as tinygrad's do). The engine checks
#: the buffers it reads against it. A plain dict (an entry leaves when its buffer does): the engine's hot paths test
#: whether it is empty on every launch.
overwritten: dict[int, tuple[weakref.ref[Buffer], str]] = {}


def mark_overwritten(buf: Buffer, why: str) -> None:
    key = id(buf)
    overwritten[key] = (weakref.ref(buf, lambda _: overwritten.pop(key, None)), why)


def check_not_overwritten(bufs: Iterable[Buffer]) -> None:
    """Raise JitError if one of `bufs` holds an output that a later replay of its TinyJit wrote over."""
    if overwritten:
        for b in bufs:
            if (entry := overwritten.get(id(b))) is not None and entry[0]() is b:
                raise JitError(entry[1])


#: Called by every assign with the tensor and the graph it held before, while some capture reads memory that a
#: tensor held at capture (the jit registers it): an assign outside the function must reach the replays.
on_assign: Callable[[Tensor, UOp], None] | None = None


def note_assign(t: Tensor) -> None:
    global assign_generation
    superseded.add(t.uop)
    assign_generation += 1
    if running and id(t) not in running[-1].assigned:
        running[-1].assigned[id(t)] = (t, t.uop)
    if on_assign is not None:
        on_assign(t, t.uop)
