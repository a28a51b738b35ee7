"""Collectives over per-device values: all-reduce, all-gather, all-to-all, as lazy UOp graphs.

Each function takes one value per device (ordinary single-device UOps, as multi.py lowers a multi-device tensor to)
and returns one value per device. Moving data is a `COPY` to another device, which the scheduler turns into a
transfer through the devices' copy path, so a collective is kernels and copies like any other graph: it is
scheduled with the computation around it and a TinyJit capture replays it.

All-reduce is a ring: a reduce-scatter, in which each of the n chunks of the flat value travels once around the
ring of devices, combined with each device's part as it passes, and ends on one device fully reduced; then an
all-gather, in which each reduced chunk travels around the ring again so that every device receives it. Every
device sends and receives 2 (n - 1) / n of the value, whatever n is. Two devices take no ring: the second sends its
value to the first, which combines both and sends the result back. Each device sends and receives the whole value,
as in a ring of two, but in two copies instead of four, with one kernel instead of two per device: no chunk is cut
out before its copy, and no chunks are joined after.

Order of the combines (it decides the rounding of float sums and products): in the ring, chunk k is combined in
ring order starting from the device after k, `((x[k+1] + x[k+2]) + ...) + x[k]`, indices modulo n, so each chunk
has its own order, and a sum may differ from `x[0] + x[1] + ...` in the last bits; max, integer sums and products
are exact in any order. Two devices, and values of fewer than `RING_MIN_CHUNK` elements per device (not worth
chunking), are combined on the first device in device order, bit-identical to the sequential sum there (for two
devices `x[0] + x[1]`, the sum on one device), and sent from there to the others. Every device then holds the same
bits: each chunk is reduced once and copied.
"""

from __future__ import annotations

from collections.abc import Sequence

from tinygrad.dtype import dtypes
from tinygrad.helpers import prod
from tinygrad.uop.ops import Ops, UOp

#: elements per chunk below which an all-reduce is combined on one device instead of around the ring: a chunk's
#: kernels and copies cost more than they save on a value this small
RING_MIN_CHUNK = 256


def copy_to(value: UOp, value_device: str, device: str) -> UOp:
    """`value` on `device`: itself when it is there already, else a copy."""
    return value if value_device == device else UOp(Ops.COPY, value.dtype, (value,), device)


def concat(parts: Sequence[UOp], axis: int) -> UOp:
    """The parts (all on one device) joined along `axis`. Each part is padded to the full size and selected where it
    has its own elements: a where, not a sum of the padded parts, so that -0.0 and NaN payloads pass unchanged."""
    if len(parts) == 1:
        return parts[0]
    total = sum(p.shape[axis] for p in parts)
    out: UOp | None = None
    offset = 0
    for p in parts:
        n = p.shape[axis]
        pairs = tuple((offset, total - offset - n) if k == axis else (0, 0) for k in range(len(p.shape)))
        placed = p.pad(pairs)
        if out is None:
            out = placed
        else:
            own = UOp.const(dtypes.bool, True).reshape((1,) * len(p.shape)).expand(p.shape).pad(pairs)
            out = own.alu(Ops.WHERE, placed, out)
        offset += n
    assert out is not None
    return out


def ring_gather(pieces: Sequence[UOp], devices: Sequence[str], axis: int) -> list[UOp]:
    """All-gather: piece i lives on devices[i]; every device gets all pieces joined along `axis`. Each piece is
    passed around the ring, device i to i+1 to i+2 ..., one copy per hop."""
    n = len(devices)
    held = [list(pieces) for _ in range(n)]  # held[dev][piece]; entries of other devices' pieces are set below
    for step in range(1, n):
        for i in range(n):
            dest, prev = (i + step) % n, (i + step - 1) % n
            held[dest][i] = UOp(Ops.COPY, pieces[i].dtype, (held[prev][i],), devices[dest])
    return [concat(held[d], axis) for d in range(n)]


def all_reduce(op: Ops, parts: Sequence[UOp], devices: Sequence[str]) -> list[UOp]:
    """Each device's value combined with `op` (ADD, MAX or MUL) over all devices; one result per device, all equal
    (see the module docstring for the order of the combines)."""
    n = len(parts)
    if n == 1:
        return list(parts)
    shape = parts[0].shape
    size = prod(shape)
    if n == 2 or size < n * RING_MIN_CHUNK:
        acc = parts[0]
        for part, dev in zip(parts[1:], devices[1:]):
            acc = acc.alu(op, copy_to(part, dev, devices[0]))
        return [acc] + [UOp(Ops.COPY, acc.dtype, (acc,), d) for d in devices[1:]]
    flat = [p.reshape((size,)) for p in parts]
    bounds = [(k * size // n, (k + 1) * size // n) for k in range(n)]
    # reduce-scatter: chunk k starts on the device after k and ends, fully combined, on device k
    reduced = []
    for k in range(n):
        first = (k + 1) % n
        acc = flat[first].shrink((bounds[k],))
        for step in range(1, n):
            at = (first + step) % n
            acc = UOp(Ops.COPY, acc.dtype, (acc,), devices[at]).alu(op, flat[at].shrink((bounds[k],)))
        reduced.append(acc)
    return [whole.reshape(shape) for whole in ring_gather(reduced, devices, 0)]


def all_to_all(shards: Sequence[UOp], devices: Sequence[str], from_axis: int, to_axis: int) -> list[UOp]:
    """Shards split along `from_axis` re-split along `to_axis`: device j's new shard is, from every device i, the
    part of i's shard that falls in j's range of `to_axis`, joined along `from_axis`. Each device sends each other
    device only what that one keeps."""
    n = len(devices)
    size = shards[0].shape[to_axis] // n

    def part(shard: UOp, j: int) -> UOp:
        return shard.shrink(tuple((j * size, (j + 1) * size) if k == to_axis else (0, s)
                                  for k, s in enumerate(shard.shape)))

    return [concat([copy_to(part(shards[i], j), devices[i], devices[j]) for i in range(n)], from_axis)
            for j in range(n)]
