"""What the Tensor methods need to know about a TinyJit function that is running (kept apart from jit.py, which
imports Tensor): whether it is being captured, and which tensors it assigned to."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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


running: list[RunningJit] = []


def check_host_read(what: str) -> None:
    """Refuse to read device data on the host while a capture is in progress: a replay skips the Python code,
    so it would return the value read during the capture forever."""
    if running and running[-1].capturing:
        raise JitError(f"{what} inside the TinyJit function {running[-1].name} reads a tensor's value on the host "
                       f"during capture; replays do not run Python code and would keep that value. Return the tensor "
                       f"from the function and read it outside")


def note_assign(t: Tensor) -> None:
    if running and id(t) not in running[-1].assigned:
        running[-1].assigned[id(t)] = (t, t.uop)
