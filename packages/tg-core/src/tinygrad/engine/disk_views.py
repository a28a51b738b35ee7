"""Reading and writing DISK tensors (tinygrad/device/disk.py) through their views.

A DISK device runs no kernels, so a graph over a DISK buffer is resolved here before anything is scheduled:

- a view that covers one contiguous byte range of the file (a chain of reshapes, slices that keep the bytes
  contiguous, and same-size bitcasts) is a *region*: a buffer on the same mapping, made without reading a byte;
- `copy_out` moves a DISK view to a compute device: only the region's bytes are read (a slice of a large file
  reads the slice). Like tinygrad's, this DISK computes nothing: a view that is not one range of bytes (a permute,
  a strided slice) or an op on a DISK tensor raises, and is taken after the copy instead;
- `realize_view` turns a DISK tensor that is a region into that region's buffer (tinygrad's disk views);
- `write` copies a tensor's value into a DISK region (an assign).
"""

from __future__ import annotations

from tinygrad.device import Buffer
from tinygrad.device.disk import DiskRegion, is_disk
from tinygrad.dtype import DType
from tinygrad.engine.realize import copy_between
from tinygrad.engine.schedule_item import buffer_view
from tinygrad.helpers import prod
from tinygrad.uop.ops import Ops, UOp, buffer_node

#: a region: (the DISK buffer, its first byte, the view's shape, its dtype)
Region = tuple[Buffer, int, tuple[int, ...], DType]


def _contiguous_start(shape: tuple[int, ...], bounds: tuple[tuple[int, int], ...]) -> int | None:
    """The first element of a slice of a contiguous `shape` if the slice is one contiguous run, else None: the axes
    before some axis k keep one index, axis k any range, the axes after it are whole."""
    k = next((i for i in range(len(shape) - 1, -1, -1) if bounds[i] != (0, shape[i])), None)
    if k is not None and any(e - s != 1 for s, e in bounds[:k]):
        return None
    start, stride = 0, 1
    for (s, _), n in zip(reversed(bounds), reversed(shape)):
        start += s * stride
        stride *= n
    return start


def _regions(root: UOp) -> dict[UOp, Region]:
    """Every node of `root`'s graph that is a region of a DISK buffer."""
    found: dict[UOp, Region] = {}
    for u in root.toposort():
        if u.op is Ops.BUFFER and is_disk(u.arg.device):
            found[u] = (u.arg, 0, (u.arg.size,), u.dtype)
            continue
        if not u.src or (src := found.get(u.src[0])) is None:
            continue
        buf, offset, shape, dtype = src
        if u.op is Ops.RESHAPE and all(isinstance(s, int) for s in u.shape):
            found[u] = (buf, offset, u.shape, dtype)  # type: ignore[assignment]
        elif u.op is Ops.SHRINK and all(isinstance(x, int) for b in u.arg for x in b):
            if (start := _contiguous_start(shape, u.arg)) is not None:
                found[u] = (buf, offset + start * dtype.itemsize, u.shape, dtype)  # type: ignore[assignment]
        elif u.op is Ops.BITCAST and u.dtype.itemsize == dtype.itemsize:
            found[u] = (buf, offset, shape, u.dtype)
    return found


def region(buf: Buffer, offset: int, size: int, dtype: DType) -> Buffer:
    """A buffer of `size` `dtype` elements at byte `offset` of the DISK buffer `buf`: the same mapping, no copy."""
    parent: DiskRegion = buf.ensure_allocated()._opaque
    nbytes = size * dtype.itemsize
    if offset < 0 or offset + nbytes > parent.nbytes:
        raise ValueError(f"bytes {offset}..{offset + nbytes} lie outside {buf} ({parent.nbytes} bytes)")
    out = Buffer(buf.device, size, dtype)
    out._opaque = DiskRegion(parent.mapping, parent.offset + offset, nbytes, parent.path, parent.writable)
    out._allocator = buf._allocator
    return out


def _region_buffer(r: Region) -> Buffer:
    buf, offset, shape, dtype = r
    size = prod(shape)
    if offset == 0 and size == buf.size and dtype == buf.dtype:
        return buf
    return region(buf, offset, size, dtype)


#: what a view of a region that is no region does (a permute, a strided or partial slice...): tinygrad's DISK
#: refuses these, and so does this one rather than read more of the file than the view shows
_NON_CONTIGUOUS = frozenset({Ops.RESHAPE, Ops.SHRINK, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.FLIP})


def _non_contiguous(what: str) -> RuntimeError:
    return RuntimeError(f"non-contiguous view is not supported on DISK ({what}): copy the contiguous tensor to a "
                        f"compute device first (t.to('CPU')) and take the view there")


def copy_out(root: UOp, device: str) -> UOp:
    """`root`, a graph over DISK buffers, as a graph on `device` that reads each region it needs once."""
    regions = _regions(root)
    consumers: dict[UOp, list[UOp]] = {}
    for u in root.toposort():
        for s in u.src:
            consumers.setdefault(s, []).append(u)
            if s in regions and u not in regions:
                if u.op in _NON_CONTIGUOUS:
                    raise _non_contiguous(f"a {u.op.name.lower()} of a DISK tensor")
                raise NotImplementedError(f"DISK runs no kernels, so a {u.op.name.lower()} of a DISK tensor is not "
                                          f"computed: copy it to a compute device first (t.to('CPU')), then compute")
    mapping: dict[UOp, UOp] = {}
    for node, r in regions.items():
        if node is root or any(c not in regions for c in consumers.get(node, [])):
            copied = UOp(Ops.COPY, node.dtype, (buffer_node(_region_buffer(r)),), device)
            mapping[node] = copied if r[2] == (prod(r[2]),) else copied.reshape(r[2])
    return root.substitute(mapping) if mapping else root


def realize_view(root: UOp) -> UOp:
    """A DISK tensor's graph as the buffer view it is, without reading the file; an error for anything but a
    region (a computation, or a view that is not one contiguous byte range)."""
    if (r := _regions(root).get(root)) is None:
        raise _non_contiguous("this DISK tensor is not one contiguous range of its file, and DISK runs no kernels")
    return buffer_view(_region_buffer(r), r[2])


def bitcast_view(root: UOp, dtype: DType) -> UOp:
    """The region `root` read as `dtype` of another size: the last axis rescaled, the same bytes."""
    if (r := _regions(root).get(root)) is None:
        raise _non_contiguous("a bitcast of a DISK view that is not one contiguous range of its file")
    buf, offset, shape, old = r
    last = shape[-1] * old.itemsize if shape else old.itemsize
    if last % dtype.itemsize:
        raise RuntimeError(f"bitcast from {old} to {dtype} needs a last axis whose bytes ({last}) are a multiple of "
                         f"{dtype.itemsize}")
    new_shape = (*shape[:-1], last // dtype.itemsize)
    return buffer_view(_region_buffer((buf, offset, new_shape, dtype)), new_shape)


def write(target: UOp, value: Buffer) -> None:
    """Copy `value` (a realized buffer of as many elements) into the DISK region `target`, now."""
    if (r := _regions(target).get(target)) is None:
        raise _non_contiguous("only a contiguous range of a DISK file can be assigned to")
    buf = _region_buffer(r)
    if buf.nbytes != value.nbytes:
        raise ValueError(f"cannot write {value.nbytes} bytes into {buf.nbytes} bytes of {buf.device}")
    copy_between(buf, value)


def mapped_bytes(root: UOp) -> memoryview | None:
    """The bytes of a DISK region as a view of the mapping (no read, no copy), or None if `root` is no region."""
    if (r := _regions(root).get(root)) is None:
        return None
    buf = _region_buffer(r).ensure_allocated()
    mapped: DiskRegion = buf._opaque
    return mapped.view()
