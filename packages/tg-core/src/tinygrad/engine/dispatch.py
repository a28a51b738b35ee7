"""The eager fast path: one elementwise op over realized buffers, launched without scheduling.

An eager loop (`x = (x + 1).realize()`) realizes the same operation over new buffers again and again. Its graph is one
node whose sources are buffers (or views that reshape one) and constants, and its schedule is one kernel. The first
time, the scheduler runs as usual; the kernel it made is remembered under a key built from that one node: the op,
its dtype and arg, and for each source either the buffer's dtype, size, device and reshape (and which earlier source
is the same buffer), or, for a subgraph of constants, the node itself (equal constants are one node). Later
realizes with an equal key allocate the output and launch the remembered kernel on the new buffers: no graph walk,
no schedule, no ScheduleItem.

Anything else takes the scheduler's path: deeper graphs, reductions, copies, movement ops over buffers, symbolic
variables, several outputs, multi-device values, a TinyJit capture (it records schedule items), and DEBUG,
PROFILE or VIZ runs (they report per item).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tinygrad.device import Allocator, Buffer, Device, shared_buffers
from tinygrad.dtype import DType
from tinygrad.engine.jit_state import check_not_overwritten, overwritten
from tinygrad.engine.realize import capture_hooks
from tinygrad.engine.schedule_item import ScheduleItem
from tinygrad.helpers import DEBUG, PROFILE, VIZ, ContextVar, GlobalCounters
from tinygrad.uop.ops import GroupOp, Ops, UOp, _arg_key, _make_uop, new_node, post_order

#: ops a subgraph of constants may hold and still be computed inside the kernel that reads it. It must be the
#: scheduler's notion of constants (a graph with no buffer or copy under it, which it never reads from a buffer it
#: was realized into): a source this path keyed by its realized buffer while the scheduler computed it in the kernel
#: would make a kernel with that value built in, and the next graph with an equal key would get the old value.
_CONSTANT_OPS = frozenset({Ops.CONST, Ops.ARANGE, Ops.REDUCE_AXIS, Ops.DETACH, Ops.CONTIGUOUS, Ops.LAYOUT}) | \
    GroupOp.Elementwise | GroupOp.Movement
#: what puts a source on a device: the scheduler reads such a graph from the buffer it was realized into
_DEVICE_OPS = frozenset({Ops.BUFFER, Ops.COPY, Ops.MULTI})
_ROOT_OPS = GroupOp.Elementwise
#: read for every eager op: `Ops.X` is an attribute lookup through the enum's metaclass, several times a global's cost
_RESHAPE, _BUFFER = Ops.RESHAPE, Ops.BUFFER
MAX_ENTRIES = 1024

#: set EAGER_DISPATCH=0 to send every realize through the scheduler
EAGER_DISPATCH = ContextVar("EAGER_DISPATCH", 1)


@dataclass(frozen=True, slots=True)
class _Entry:
    call: Callable[[list[Buffer]], Any]  # launches the kernel on its buffers (output first)
    allocator: Allocator
    ops: int  # the runner's estimates, for GlobalCounters
    mem: int
    size: int  # output elements
    dtype: DType
    device: str
    flat: tuple[int]  # (size,): the output BUFFER node's shape
    reshape: tuple[int, ...] | None  # the root's shape (its sources' are part of the key), if the view reshapes
    inputs: tuple[int, ...] | None  # per kernel input (PARAM 1..): which of the key's source buffers it reads; None:
    # each in the key's order


_constant_graphs: dict[UOp, bool] = {}  # subgraphs of constants only, seen before
entries: dict[tuple, _Entry] = {}


def _is_constant_graph(node: UOp) -> bool | None:
    """True when `node` computes from constants only; False when a buffer or copy is under it (its realized buffer
    holds its value); None for anything else (a variable, an op this path does not know): not for this path."""
    known = _constant_graphs.get(node)
    if known is not None:
        return known
    # the walk does not enter a node that is not a constant op
    foreign: list[UOp] = []

    def children(u: UOp) -> tuple[UOp, ...]:
        if u.op in _CONSTANT_OPS:
            return u.src
        foreign.append(u)
        return ()
    post_order((node,), children=children)
    if foreign:
        # not remembered: the entry would keep the node, and the buffers under it, alive
        return False if any(u.op in _DEVICE_OPS for u in foreign) else None
    if len(_constant_graphs) >= MAX_ENTRIES:
        _constant_graphs.clear()
    _constant_graphs[node] = True  # keeps the node alive while it is cached: constants are small, the cache bounded
    return True


def eager_key(root: UOp, device: str) -> tuple[tuple, list[Buffer]] | None:
    """The dispatch key of a one-node graph over buffers and constants, with its source buffers in order; None for
    any other graph, and whenever the run must see schedule items (a TinyJit capture, DEBUG, PROFILE, VIZ)."""
    if root.op not in _ROOT_OPS or root._realized is not None or capture_hooks or not EAGER_DISPATCH.value \
            or DEBUG.value or PROFILE.value or VIZ.value:
        return None
    arg = root.arg
    parts: list[Any] = [root.op, root.dtype, None if arg is None else _arg_key(arg), device]
    bufs: list[Buffer] = []
    for s in root.src:
        view = s
        base = view.src[0] if view.op is _RESHAPE else view
        if base.op is not _BUFFER:
            # a graph of constants is computed in the kernel, never read from a buffer it was once realized into
            # (as in the scheduler: that buffer may be an assign's target that holds something else by now)
            constant = _constant_graphs.get(s) or _is_constant_graph(s)
            if constant:
                parts.append(s)
                continue
            if constant is None:
                return None
            if (realized := s._realized) is None or (shared_buffers and _reads_shared(s)):
                return None  # (computed from memory another library may have written since: the scheduler decides)
            view = realized
            base = view.src[0] if view.op is _RESHAPE else view
            if base.op is not _BUFFER:
                return None
        buf = base.arg
        if buf in bufs:  # Buffer compares by identity: the same buffer read twice (`x * x`)
            parts.append(bufs.index(buf))
        else:
            parts.append((buf.dtype, buf.size, buf.device, None if view is base else view.arg))
            bufs.append(buf)
    return tuple(parts), bufs


def _reads_shared(node: UOp) -> bool:
    return any(u.op is _BUFFER and u.arg.shared is not None for u in node.toposort())


def lookup(key: tuple) -> _Entry | None:
    return entries.get(key)


def launch(entry: _Entry, bufs: list[Buffer]) -> UOp:
    """Run a remembered kernel on new source buffers; the view of its new output buffer."""
    if overwritten:  # an output of an earlier TinyJit replay that a later one wrote over is not read
        check_not_overwritten(bufs)
    out = Buffer.allocated(entry.device, entry.size, entry.dtype, entry.allocator)
    if entry.size:  # nothing to compute for an empty output
        inputs = entry.inputs
        entry.call([out, *bufs] if inputs is None else [out, *map(bufs.__getitem__, inputs)])
        GlobalCounters.kernel_count += 1
        GlobalCounters.global_ops += entry.ops
        GlobalCounters.global_mem += entry.mem
    # the output's BUFFER node, made here rather than by buffer_view: the buffer is new, so is its node
    node = new_node(_BUFFER, entry.dtype, (), out)
    node._shape = entry.flat
    out._node = weakref.ref(node)
    if (shape := entry.reshape) is None:
        return node
    # node.reshape(shape), with the shape the root had when learned rather than inferred and checked again
    view = _make_uop(UOp, _RESHAPE, entry.dtype, (node,), shape)
    view._shape = shape
    return view


def learn(key: tuple, bufs: list[Buffer], items: list[ScheduleItem], shape: tuple[int, ...]) -> None:
    """Remember the schedule the scheduler made for a keyed graph, if it is one kernel over the key's buffers."""
    if len(items) != 1:
        return
    si = items[0]
    if si.is_copy or si.var_vals or si.outs != 1 or si.bufs[0].base is not None:
        return
    inputs = []
    for b in si.bufs[1:]:
        at = next((i for i, s in enumerate(bufs) if s is b), None)
        if at is None:  # the scheduler read a buffer the key does not name (a realized constant): not this path's
            return
        inputs.append(at)
    if len(entries) >= MAX_ENTRIES:
        entries.pop(next(iter(entries)))
    device = Device[si.device]
    out, runner = si.bufs[0], device.get_runner(si.ast)
    launcher = getattr(runner, "launcher", None)
    call = launcher() if launcher is not None else lambda bufs: runner(bufs, {})
    entries[key] = _Entry(call, device.allocator, runner.estimated_ops, runner.estimated_bytes, out.size, out.dtype,
                           si.device, (out.size,), None if shape == (out.size,) else shape,
                           None if inputs == list(range(len(bufs))) else tuple(inputs))


def clear() -> None:
    entries.clear()
    _constant_graphs.clear()
