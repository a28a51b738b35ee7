"""Schedules of graphs already seen, keyed by the graph's structure with its buffers abstracted.

An eager loop (`x = (x + 1).realize()`) builds the same graph over a new buffer on every iteration. The scheduler's
answer depends only on the structure (ops, dtypes, args, and each input buffer's size, dtype and device), so it is
remembered as a template: the kernel ASTs, which buffers each kernel reads (input number k, or new buffer j), how the
memory planner grouped the new buffers, and which graph nodes become which buffers. A later graph with the same key
gets fresh buffers poured into the template instead of being scheduled again.

A hit is the whole cost of an eager op's realize() besides the launch, so it is kept to one walk over the graph
(`graph_key`, which builds no UOps) and one pass over the template (`Template.instantiate`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tinygrad.device import Buffer
from tinygrad.dtype import DType, dtypes
from tinygrad.engine.memory import MEMORY_PLANNER
from tinygrad.engine.schedule_item import ScheduleItem, buffer_view
from tinygrad.helpers import ContextVar
from tinygrad.uop.ops import Ops, UOp, _arg_key, post_order

#: set SCHEDULE_CACHE=0 to schedule every graph from scratch
SCHEDULE_CACHE = ContextVar("SCHEDULE_CACHE", 1)
MAX_ENTRIES = 4096


def graph_key(outputs: list[UOp], devices: list[str], stop_at_realized: bool = False
              ) -> tuple[tuple, list[UOp], list[Buffer]] | None:
    """The structure of the graph under `outputs`, its nodes (sources before users) and its input buffers in order
    of appearance. With `stop_at_realized`, None if a node was realized before (its value should be read, not
    recomputed: the caller substitutes its buffer and asks again).

    In the key every node is (op, dtype, arg, positions of its sources), a buffer (dtype, size, device, input number)
    instead of its identity. One walk that builds no UOps: on an eager step it is most of what a cache hit costs."""
    index: dict[UOp, int] = {}
    topo: list[UOp] = []
    inputs: list[Buffer] = []
    parts: list[Any] = [tuple(devices), MEMORY_PLANNER.value]
    position = index.__getitem__
    for node in post_order(outputs):
        if src := node.src:
            if stop_at_realized and node._realized is not None:
                return None
            arg = None if node.arg is None else _arg_key(node.arg)
            parts.append((node.op, node.dtype, arg, tuple(map(position, src))))
        elif node.op is Ops.BUFFER:
            buf = node.arg
            parts.append((Ops.BUFFER, node.dtype, buf.size, buf.device, len(inputs)))
            inputs.append(buf)
        else:
            parts.append((node.op, node.dtype, None if node.arg is None else _arg_key(node.arg), ()))
        index[node] = len(topo)
        topo.append(node)
    parts.append(tuple(map(position, outputs)))  # which nodes are the outputs, in order
    return tuple(parts), topo, inputs


class _NotCached(Exception):
    """A schedule that a template cannot reproduce."""


@dataclass(frozen=True)
class _NewBuffer:
    device: str
    size: int
    dtype: DType
    slot: int | None  # the memory planner's slot it aliases, else None


@dataclass(frozen=True)
class Template:
    slots: tuple[tuple[str, int], ...]  # (device, bytes) of each planner slot
    new: tuple[_NewBuffer, ...]
    # (ast, buffer refs: k >= 0 new, -1-k input; device, topo positions of its outputs, var_vals, outs)
    items: tuple[tuple[UOp, tuple[int, ...], str, tuple[int, ...], dict[str, int], int], ...]
    views: tuple[tuple[int, int, tuple], ...]  # (topo position, new buffer, shape) of each realized node remembered
    outputs: tuple[tuple[bool, int], ...]  # per output: (is a new view, topo position or new buffer)

    @staticmethod
    def record(topo: list[UOp], inputs: list[Buffer], items: list[ScheduleItem], views: dict[UOp, UOp],
               out_views: list[UOp]) -> Template | None:
        position = {node: i for i, node in enumerate(topo)}
        input_of = {id(b): i for i, b in enumerate(inputs)}
        # the memory the inputs own (an input may itself be another name for memory: an earlier in-place write's)
        input_storage = {id(b.storage) for b in inputs}
        new_of: dict[int, int] = {}
        new: list[_NewBuffer] = []
        slot_of: dict[int, int] = {}
        slots: list[tuple[str, int]] = []

        def ref(b: Buffer) -> int:
            if id(b) in input_of:
                return -1 - input_of[id(b)]
            if id(b) not in new_of:
                slot = None
                if b.base is not None and id(b.base) in input_storage:
                    raise _NotCached  # an in-place write into an input's memory: its buffer is not made here
                if b.base is not None:
                    if id(b.base) not in slot_of:
                        slot_of[id(b.base)] = len(slots)
                        slots.append((b.device, b.base.nbytes))
                    slot = slot_of[id(b.base)]
                new_of[id(b)] = len(new)
                new.append(_NewBuffer(b.device, b.size, b.dtype, slot))
            return new_of[id(b)]

        rec_items = []
        for si in items:
            try:
                refs = tuple(ref(b) for b in si.bufs)
            except _NotCached:
                return None
            rec_items.append((si.ast, refs, si.device, tuple(position[o] for o in si.outputs), dict(si.var_vals),
                              si.outs))
        rec_views = []
        for node, view in views.items():
            base = view
            while base.op is Ops.RESHAPE:
                base = base.src[0]
            if id(base.arg) not in new_of:
                return None  # a view of something this template does not make: do not cache
            rec_views.append((position[node], new_of[id(base.arg)], node.shape))
        view_of = {v: n for n, v in views.items()}
        rec_outputs = []
        for o in out_views:
            if o in view_of:
                rec_outputs.append((True, position[view_of[o]]))
            elif o in position:
                rec_outputs.append((False, position[o]))
            else:
                return None
        return Template(tuple(slots), tuple(new), tuple(rec_items), tuple(rec_views), tuple(rec_outputs))

    def instantiate(self, topo: list[UOp], inputs: list[Buffer]) -> tuple[list[ScheduleItem], dict[UOp, UOp],
                                                                          list[UOp]]:
        # loops and map() over bound lookups instead of comprehensions, which are function calls on Python 3.11: an
        # eager step runs this once per op
        slots = [Buffer(dev, nbytes, dtypes.uint8) for dev, nbytes in self.slots] if self.slots else []
        new = []
        for n in self.new:
            new.append(Buffer(n.device, n.size, n.dtype, base=slots[n.slot] if n.slot is not None else None))
        # one list that buffer references index directly: ref k >= 0 is new[k], ref -1-k counts from the end, where
        # the inputs are in reverse order, so it lands on inputs[k]
        buffer, node = (new + inputs[::-1]).__getitem__, topo.__getitem__
        items = []
        for ast, refs, dev, outs, var_vals, n_out in self.items:
            items.append(ScheduleItem(ast, list(map(buffer, refs)), dev, list(map(node, outs)), dict(var_vals), n_out))
        views = {}
        for p, j, shape in self.views:
            views[topo[p]] = buffer_view(new[j], shape)
        outputs = []
        for is_view, p in self.outputs:
            outputs.append(views[topo[p]] if is_view else topo[p])
        return items, views, outputs


class ScheduleCache:
    def __init__(self) -> None:
        self.entries: dict[tuple, Template | None] = {}
        self.hits = self.misses = 0

    def get(self, key: tuple) -> Template | None:
        hit = self.entries.get(key)
        if hit is not None:
            self.hits += 1
        else:
            self.misses += 1
        return hit

    def put(self, key: tuple, template: Template | None) -> None:
        if template is None:
            return
        if len(self.entries) >= MAX_ENTRIES:
            self.entries.pop(next(iter(self.entries)))
        self.entries[key] = template


schedule_cache = ScheduleCache()
