"""Gating loads: a load whose address may leave its buffer is made conditional on the check that keeps it inside.

A WHERE that discards a value does not stop the load under it from running: the address is computed and read
whether or not the value is used, and an address past the buffer's end can fault (PoCL runs kernels in the
process, so that is a segfault of the program). Rules that let an index run past its axis (the padded lanes of a
GROUP, a gather's index before its bounds check) AND their condition into the gate of every load below them.
"""

from __future__ import annotations

from tinygrad.uop.ops import Ops, UOp


def gate_loads(u: UOp, moving: UOp, gate: UOp) -> UOp:
    """`u` with every load whose address depends on `moving` (a loop range) also gated by `gate`."""
    mapping: dict[UOp, UOp] = {}
    for node in u.toposort():
        if node.op is Ops.LOAD and moving in node.src[0].toposort():
            index = node.src[0]
            valid = gate if len(index.src) < 3 else index.src[2].logical_and(gate)
            mapping[node] = node.replace(src=(index.replace(src=(index.src[0], index.src[1], valid)),))
    return u.substitute(mapping) if mapping else u


__all__ = ["gate_loads"]
