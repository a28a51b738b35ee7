"""The memory planner: buffers private to a schedule share memory when their lifetimes do not overlap.

A schedule realizes some values only because a later kernel in it needs them (a reduction read by every
element of its consumer, a `contiguous()` in the middle of an expression). Nobody reads them after the
schedule, so once their last reader has run their memory can hold the next such value. This module assigns
each private buffer a slot in a pool, first-fit over the kernels in execution order, so a long chain of
intermediates needs two slots instead of one buffer each. Buffers anyone can see after the schedule (outputs,
in-place assign targets, inputs) are never touched.

Slots are grouped by device and size class (bytes rounded up to a power of two), so a slot fits every buffer of
its class whatever the dtype; each private buffer then becomes an alias (`Buffer(base=slot)`) of its slot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinygrad.device import Buffer
from tinygrad.dtype import dtypes
from tinygrad.helpers import ContextVar

if TYPE_CHECKING:
    from tinygrad.engine.schedule_item import ScheduleItem

#: set MEMORY_PLANNER=0 (or `Context(MEMORY_PLANNER=0)`) to give every realized value its own memory
MEMORY_PLANNER = ContextVar("MEMORY_PLANNER", 1)


def size_class(nbytes: int) -> int:
    """Buffers of one class share slots: a power of two, at least 64 bytes (a cache line)."""
    return max(64, 1 << max(nbytes - 1, 0).bit_length())


def plan_memory(items: list[ScheduleItem], private: set[Buffer]) -> dict[Buffer, Buffer]:
    """Rewrite `items` in place so that the `private` buffers (written by one item, read only by later items of
    this schedule) share memory where their lifetimes do not overlap. Returns private buffer -> its alias."""
    if not MEMORY_PLANNER or len(private) < 2:
        return {}
    first: dict[Buffer, int] = {}
    last: dict[Buffer, int] = {}
    for i, si in enumerate(items):
        for b in si.bufs:
            if b in private:
                first.setdefault(b, i)
                last[b] = i
    # slots[(device, class)] = list of (slot buffer, index of the item after which it is free)
    slots: dict[tuple[str, int], list[list]] = {}
    replace: dict[Buffer, Buffer] = {}
    for b in sorted(first, key=first.__getitem__):
        if b.is_allocated:
            continue  # memory someone already handed out stays where it is
        key = (b.device, size_class(b.nbytes))
        pool = slots.setdefault(key, [])
        slot = next((s for s in pool if s[1] < first[b]), None)
        if slot is None:
            slot = [Buffer(b.device, key[1] // dtypes.uint8.itemsize, dtypes.uint8), -1]
            pool.append(slot)
        slot[1] = last[b]
        replace[b] = Buffer(b.device, b.size, b.dtype, base=slot[0])
    for si in items:
        si.bufs = [replace.get(b, b) for b in si.bufs]
    return replace


def footprint(items: list[ScheduleItem]) -> int:
    """Bytes of distinct memory the buffers of a schedule occupy (aliases count once, with their base)."""
    seen: dict[int, int] = {}
    for si in items:
        for b in si.bufs:
            seen[id(b.storage)] = b.storage.nbytes
    return sum(seen.values())
