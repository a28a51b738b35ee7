"""Multi-device tensors: one value held as one shard per device (tinygrad's `Tensor.shard`).

A tensor on several devices (`t.device` is a tuple of names) keeps a *logical* graph: its UOps have the full shapes
and mean what they would on one device. Three nodes say where values live (uop/ops.py):

  * `MULTI(v0, v1, ...; arg=axis)`: one value per device, the pieces of the whole along `axis`, or each all of it
    (axis None: replicated). A realized multi-device tensor is a MULTI of its buffers.
  * `COPY(x; arg=(dev0, dev1, ...))`: x replicated onto those devices. `COPY(multi; arg=dev)` gathers onto one.
  * `SHARD(x; arg=axis)`: the same value, placed split along `axis` (None: replicated); `SHARD(x, like)` places it as
    `like` is placed.

So autograd needs nothing new: the gradient of a value does not depend on where it lives. A replicated weight
read by a batch-sharded input gets the gradient summed over the whole batch, and that sum over the sharded axis
is an all-reduce once lowered: the gradient sync of data-parallel training falls out of the rules below.

Lowering (`create_schedule`, which realize() and schedule() call) turns the logical graph into one ordinary graph per
device, which the unchanged scheduler splits into kernels and copies. Each node becomes a `Placed` value: its
devices, its axis and one shard per device. The rules (tinygrad's, written in docs/multi-device.md):

  * elementwise ops run per shard. The result takes the sharding of the last sharded operand; a replicated or
    constant operand is sliced to each device's part, an operand sharded along another axis is resharded
    (all-to-all). Operands on different device tuples, or a single-device operand, are an error;
  * a reduction over the sharded axis reduces each shard, then all-reduces (engine/collectives.py): the result is
    replicated. Over other axes it stays sharded;
  * permute moves the axis; expand keeps it; reshape keeps it where each device's elements stay its own, and is
    an error where they would move between devices; pad, shrink and flip of the sharded axis gather the value onto
    every device first (replicated result), of other axes they run per shard;
  * a matmul is those rules composed: a batch-sharded input with replicated weights gives a batch-sharded output,
    weights sharded on the output dimension an output sharded on the last axis, a contraction over a sharded axis
    an all-reduce.

Splits are even, as in tinygrad 0.14: a size that the number of devices does not divide raises ("multi axis
uneven"). Constants have no device: a constant placed on a device gets its leaves tagged with it (`DETACH(leaf,
arg=device)`, an identity), else hash-consing would make the per-device graphs share one node and one kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import tinygrad.uop.ops as uop_ops
from tinygrad.device import Buffer, Device
from tinygrad.dtype import DTypeLike
from tinygrad.engine import collectives
from tinygrad.engine.schedule import base_buffer, realized_views
from tinygrad.engine.schedule import create_schedule as schedule_on_devices
from tinygrad.engine.schedule_item import ScheduleItem, buffer_view
from tinygrad.helpers import prod
from tinygrad.uop.ops import GroupOp, Ops, UOp, post_order
from tinygrad.uop.placement import (
    DeviceSpec,
    check_even,
    device_of,
    first_device,
    joined_shape,
    multi_node,
    replicate_node,
    single_device,
)

if TYPE_CHECKING:
    from tinygrad.tensor import Tensor


class Placed(NamedTuple):
    """A lowered multi-device value: one shard per device, split along `axis` (None: each holds all of it)."""

    devices: tuple[str, ...]
    axis: int | None
    shards: tuple[UOp, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return joined_shape(self.shards[0].shape, self.axis, len(self.shards))


# realize() checks graphs for multi-device nodes only once a process has made one
_in_use = False


def canonical_devices(devices: Sequence[str]) -> tuple[str, ...]:
    """Canonical names of a tuple of devices (`("cpu:0", "CPU:1")` -> `("CPU", "CPU:1")`)."""
    global _in_use
    if isinstance(devices, str):
        raise TypeError(f"a tuple of device names is needed here, got the single name {devices!r}")
    out = tuple(Device.canonicalize(d) for d in devices)
    if not out:
        raise ValueError("a tensor on several devices needs at least one device")
    if len(set(out)) != len(out):
        raise ValueError(f"devices {tuple(devices)} name one device twice ({out}); each device holds one shard")
    _in_use = True
    return out


def canonical_device(device: str | Sequence[str] | None) -> DeviceSpec:
    """A device name, or a tuple of them, in canonical form (None: the default device)."""
    return Device.canonicalize(device) if device is None or isinstance(device, str) else canonical_devices(device)


def place_on_devices(tensor_type: type[Tensor], data: object, devices: Sequence[str], dtype: DTypeLike | None
                     ) -> tuple[tuple[str, ...], UOp]:
    """What `Tensor(data, device=(...))` holds: a graph stays as it is, a tensor on one device is replicated, a
    number is a constant, and host data (lists, arrays, bytes) is uploaded to every device."""
    devs = canonical_devices(devices)
    if isinstance(data, UOp):
        return devs, data
    if isinstance(data, tensor_type):
        return devs, data.uop if data.device == devs else replicate_node(data.uop, devs)
    if isinstance(data, (bool, int, float)):
        return devs, tensor_type(data, dtype=dtype).uop
    return devs, multi_node([tensor_type(data, device=d, dtype=dtype).uop for d in devs], None)


# ---- lowering: the logical graph as one graph per device ----

class _Lowering:
    def __init__(self, roots: Sequence[UOp]):
        # whether a node's value lives on devices (else it is constants, which any device computes)
        self.bound: dict[UOp, bool] = {}
        for node in post_order(roots):
            self.bound[node] = node.op in (Ops.BUFFER, Ops.COPY, Ops.MULTI) or any(self.bound[s] for s in node.src)
        self.memo: dict[UOp, Placed | UOp] = {}
        self._placed_consts: dict[tuple[UOp, str], UOp] = {}

    def lower(self, root: UOp) -> Placed | UOp:
        if root not in self.memo:
            for node in post_order((root,), children=lambda n: () if self._view(n) is not None else n.src,
                                   skip=self.memo.__contains__):
                self.memo[node] = self._lower(node)
        return self.memo[root]

    def _view(self, node: UOp) -> UOp | None:
        """The buffers an earlier realize() left for a node. Constants are computed again instead: one constant node
        stands for the constant on every device, and its buffers belong to the devices it was realized on."""
        return realized_views.get(node) if node.src and self.bound.get(node, True) else None

    def _lower(self, node: UOp) -> Placed | UOp:
        if (view := self._view(node)) is not None:
            return _from_view(view)
        op = node.op
        if op is Ops.MULTI:
            shards = tuple(self.memo[s] for s in node.src)
            return Placed(tuple(single_device(device_of(s)) for s in node.src), node.arg, tuple(map(_plain, shards)))
        if not node.src:
            return node
        srcs = [self.memo[s] for s in node.src]
        if op is Ops.COPY:
            if isinstance(node.arg, tuple):
                return self.replicate(srcs[0], node.src[0], node.arg)
            if isinstance(srcs[0], Placed):
                return self.gather(srcs[0], node.arg)
        elif op is Ops.SHARD:
            return self._shard(node, srcs)
        if not any(isinstance(s, Placed) for s in srcs):
            return node if all(a is b for a, b in zip(srcs, node.src)) else node.replace(src=tuple(map(_plain, srcs)))
        if op is Ops.REDUCE_AXIS:
            return self._reduce(node, _placed(srcs[0]))
        if op in GroupOp.Movement:
            return self._move(node, _placed(srcs[0]))
        if op in GroupOp.Elementwise or op in (Ops.CONTIGUOUS, Ops.DETACH, Ops.LAYOUT):
            return self._elementwise(node, srcs)
        raise NotImplementedError(f"{op} of a multi-device tensor is not supported")

    # -- placing values --
    def on_device(self, value: UOp, device: str) -> UOp:
        """A constant made on `device`: its leaves tagged with it, so that no node of it is shared with another
        device's graph (a shared reduction would be one kernel, on one of the devices, read by all)."""
        key = (value, device)
        if (hit := self._placed_consts.get(key)) is None:
            leaves = post_order((value,), children=lambda n: () if n.op is Ops.BIND else n.src)
            tagged = {u: UOp(Ops.DETACH, u.dtype, (u,), device) for u in leaves if not u.src or u.op is Ops.BIND}
            hit = self._placed_consts[key] = value.substitute(tagged)
        return hit

    def replicate(self, value: Placed | UOp, original: UOp, devices: tuple[str, ...]) -> Placed:
        if isinstance(value, Placed):
            if value.devices == devices:
                return value
            return Placed(devices, None, tuple(self.gather(value, d) for d in devices))
        if not self.bound.get(original, True):
            return Placed(devices, None, tuple(self.on_device(value, d) for d in devices))
        here = single_device(device_of(value))
        return Placed(devices, None, tuple(collectives.copy_to(value, here, d) for d in devices))

    def gather(self, value: Placed, device: str) -> UOp:
        """The whole value on one device."""
        if value.axis is None:
            if device in value.devices:
                return value.shards[value.devices.index(device)]
            return UOp(Ops.COPY, value.shards[0].dtype, (value.shards[0],), device)
        parts = [collectives.copy_to(s, d, device) for s, d in zip(value.shards, value.devices)]
        return collectives.concat(parts, value.axis)

    def reshard(self, value: Placed, axis: int | None) -> Placed:
        if value.axis == axis:
            return value
        devices, n = value.devices, len(value.devices)
        if axis is None:
            assert value.axis is not None
            return Placed(devices, None, tuple(collectives.ring_gather(value.shards, devices, value.axis)))
        check_even(value.shape, axis, n)
        if value.axis is None:
            return Placed(devices, axis, tuple(_slice(s, axis, i, n) for i, s in enumerate(value.shards)))
        return Placed(devices, axis, tuple(collectives.all_to_all(value.shards, devices, value.axis, axis)))

    def _align(self, value: Placed | UOp, original: UOp, devices: tuple[str, ...], axis: int | None) -> tuple[UOp, ...]:
        """An operand's shards for an op whose result is placed along `axis` on `devices`."""
        if isinstance(value, Placed):
            if value.devices != devices:
                raise RuntimeError(f"an operation mixes tensors on {devices} and on {value.devices}; move one with "
                                   f".to(devices) or .shard(devices, axis)")
            return self.reshard(value, axis).shards
        if self.bound.get(original, True):
            raise RuntimeError(f"an operation mixes a tensor on {device_of(value)} with tensors on {devices}; move it "
                               f"with .to({devices}) (replicated) or .shard({devices}, axis)")
        return self.reshard(Placed(devices, None, tuple(self.on_device(value, d) for d in devices)), axis).shards

    # -- the ops --
    def _shard(self, node: UOp, srcs: list[Placed | UOp]) -> Placed | UOp:
        value = srcs[0]
        if len(srcs) == 2:
            like = srcs[1]
            if not isinstance(like, Placed):  # placed like a value on one device: there
                dev = device_of(like)
                if isinstance(value, Placed) and dev is not None:
                    return self.gather(value, single_device(dev))
                return value
            devices, axis = like.devices, like.axis
        else:
            if not isinstance(value, Placed):
                raise RuntimeError("SHARD of a value on one device: replicate it first (Tensor.shard does)")
            devices, axis = value.devices, node.arg
        return self.reshard(self.replicate(value, node.src[0], devices), axis)

    def _reduce(self, node: UOp, value: Placed) -> Placed:
        if value.axis is None or value.axis not in node.arg.axes:
            shards = tuple(UOp(Ops.REDUCE_AXIS, node.dtype, (s,), node.arg) for s in value.shards)
            return Placed(value.devices, value.axis, shards)
        shape, n = value.shards[0].shape, len(value.devices)
        if n > 1 and all(isinstance(shape[a], int) and shape[a] == 1 for a in node.arg.axes):
            # each device holds one element along every reduced axis (one row of a batch-sharded value): its value
            # is the shard itself, and the all-reduce reads the shards as they are instead of a kernel's copy of
            # them. The all-reduce's result is always new buffers (n > 1), never the shards' own.
            shards = value.shards
        else:
            shards = tuple(UOp(Ops.REDUCE_AXIS, node.dtype, (s,), node.arg) for s in value.shards)
        return Placed(value.devices, None, tuple(collectives.all_reduce(node.arg.op, shards, value.devices)))

    def _move(self, node: UOp, value: Placed) -> Placed:
        op, arg, a = node.op, node.arg, value.axis
        if a is None:
            return Placed(value.devices, None, tuple(_move_replica(node, s) for s in value.shards))
        n, part = len(value.devices), value.shards[0].shape[a]
        full = node.src[0].shape
        if op is Ops.RESHAPE:
            new_axis, shard_shape = _reshape_axis(full, arg, a, n)
            return Placed(value.devices, new_axis, tuple(s.reshape(shard_shape) for s in value.shards))
        if op is Ops.PERMUTE:
            return Placed(value.devices, arg.index(a), tuple(node.replace(src=(s,)) for s in value.shards))
        if op is Ops.EXPAND:
            shape = tuple(part if k == a else s for k, s in enumerate(arg))
            return Placed(value.devices, a, tuple(s.expand(shape) for s in value.shards))
        if op is Ops.SHRINK and arg[a] == (0, full[a]):
            bounds = tuple((0, part) if k == a else b for k, b in enumerate(arg))
            return Placed(value.devices, a, tuple(s.shrink(bounds) for s in value.shards))
        if (op is Ops.PAD and arg[a] == (0, 0)) or (op is Ops.FLIP and not arg[a]):
            return Placed(value.devices, a, tuple(node.replace(src=(s,)) for s in value.shards))
        # pad, shrink or flip of the sharded axis moves elements between devices: each device gets the whole value
        whole = self.reshard(value, None)
        return Placed(value.devices, None, tuple(node.replace(src=(s,)) for s in whole.shards))

    def _elementwise(self, node: UOp, srcs: list[Placed | UOp]) -> Placed:
        placed = [s for s in srcs if isinstance(s, Placed)]
        devices = placed[0].devices
        axis = next((p.axis for p in reversed(placed) if p.axis is not None), None)
        columns = [self._align(s, original, devices, axis) for s, original in zip(srcs, node.src)]
        return Placed(devices, axis, tuple(node.replace(src=tuple(c[i] for c in columns)) for i in range(len(devices))))


def _placed(value: Placed | UOp) -> Placed:
    assert isinstance(value, Placed)
    return value


def _plain(value: Placed | UOp) -> UOp:
    if isinstance(value, Placed):
        raise RuntimeError(f"a multi-device value (on {value.devices}) where a value on one device is needed; gather "
                           f"it with .to(device)")
    return value


def _from_view(view: UOp) -> Placed | UOp:
    if view.op is not Ops.MULTI:
        return view
    return Placed(tuple(single_device(device_of(s)) for s in view.src), view.arg, view.src)


def _move_replica(node: UOp, replica: UOp) -> UOp:
    """Movement op `node` on one device's replica. A reshape of a copy is made the copy of the reshape (the same
    value): a copy's result is a buffer of its own, and a reshape of it that is realized (the all-reduced result of
    `sum`, which drops the reduced axis) would be one more kernel copying it again."""
    if node.op is Ops.RESHAPE and replica.op is Ops.COPY and isinstance(replica.arg, str):
        return UOp(Ops.COPY, replica.dtype, (replica.src[0].reshape(node.arg),), replica.arg)
    return node.replace(src=(replica,))


def _slice(replica: UOp, axis: int, i: int, n: int) -> UOp:
    """Device i's part of a replica. A replica copied from one device is sliced before the copy, so only the part
    crosses."""
    size = replica.shape[axis] // n
    bounds = tuple((i * size, (i + 1) * size) if k == axis else (0, s) for k, s in enumerate(replica.shape))
    if replica.op is Ops.COPY and isinstance(replica.arg, str):
        return UOp(Ops.COPY, replica.dtype, (replica.src[0].shrink(bounds),), replica.arg)
    return replica.shrink(bounds)


def _reshape_axis(old: tuple[int, ...], new: tuple[int, ...], axis: int, n: int) -> tuple[int, tuple[int, ...]]:
    """The axis a reshape moves the sharded `axis` to, and the shape of each shard after it. The new axis is the
    last one whose leading dimensions hold as many elements as those before the old axis; each device's elements
    then stay its own if its block of the old axis and everything after it is a whole number of rows of the new."""
    def refuse(why: str) -> RuntimeError:
        return RuntimeError(f"reshape of a tensor of shape {old} sharded on axis {axis} over {n} devices to {new}: "
                            f"{why}, which would move elements between devices; reshape before sharding, shard another "
                            f"axis, or gather first with .shard(devices, axis=None)")

    if not all(isinstance(s, int) for s in (*old, *new)):
        raise refuse("symbolic sizes")
    lead = prod(old[:axis])
    candidates = [k for k in range(len(new)) if prod(new[:k]) == lead]
    if not candidates:
        raise refuse(f"the {lead} elements before axis {axis} are not whole leading dimensions of the new shape")
    k = candidates[-1]
    block, rows = old[axis] // n * prod(old[axis + 1:]), prod(new[k + 1:])
    if block % rows:
        raise refuse(f"a device's block of {block} elements is not a whole number of rows of {rows}")
    return k, tuple(block // rows if j == k else s for j, s in enumerate(new))


def _involves_multi(outputs: Sequence[UOp], devices: Sequence[DeviceSpec]) -> bool:
    if any(isinstance(d, tuple) for d in devices):
        return True
    return any(u.op in (Ops.MULTI, Ops.SHARD) or (u.op is Ops.COPY and isinstance(u.arg, tuple))
               for u in post_order(outputs))


def create_schedule(outputs: list[UOp], devices: Sequence[DeviceSpec]) -> tuple[list[ScheduleItem], dict[UOp, UOp],
                                                                                  list[UOp]]:
    """The scheduler's `create_schedule` for graphs that may hold multi-device values: each is lowered to one graph
    per device first. An output on several devices comes back as a MULTI of its shards' buffer views."""
    if not _in_use or not _involves_multi(outputs, devices):
        return schedule_on_devices(outputs, devices)  # type: ignore[arg-type]
    lowering = _Lowering(outputs)
    flat: list[UOp] = []
    flat_devices: list[str] = []
    layout: list[Placed | None] = []
    for root, dev in zip(outputs, devices):
        low = lowering.lower(root)
        if isinstance(dev, tuple):
            placed = low if isinstance(low, Placed) and low.devices == dev else lowering.replicate(low, root, dev)
            layout.append(placed)
            flat += placed.shards
            flat_devices += dev
        else:
            layout.append(None)
            flat.append(lowering.gather(low, dev) if isinstance(low, Placed) else low)
            flat_devices.append(dev)
    items, views, out_views = schedule_on_devices(flat, flat_devices)
    results: list[UOp] = []
    at = 0
    for laid in layout:
        if laid is None:
            results.append(out_views[at])
            at += 1
        else:
            results.append(multi_node(out_views[at:at + len(laid.shards)], laid.axis))
            at += len(laid.shards)
    # A tensor's own value inside the graph (a tagged CONTIGUOUS: a parameter, a clone) is remembered as its shards'
    # buffers, so that graphs built before this realize read them instead of computing the value again.
    for node, low in lowering.memo.items():
        if (node.op is Ops.CONTIGUOUS and node.arg is not None and isinstance(low, Placed) and lowering.bound[node]
                and all(s in views for s in low.shards)):
            views[node] = multi_node([views[s] for s in low.shards], low.axis)
    return items, views, results


# ---- realized multi-device values ----

def sharding(root: UOp) -> tuple[DeviceSpec, int | None]:
    """Where a (lazy or realized) value lives: (device, None) for one device, (devices, axis) for several, as the
    lowering places it."""
    low = _Lowering([root]).lower(root)
    if isinstance(low, Placed):
        return low.devices, low.axis
    dev = device_of(low)
    return (dev if dev is not None else first_device(Device.DEFAULT)), None


def realized_buffers(view: UOp) -> list[Buffer] | None:
    """The buffers of a realized value: one per device for a MULTI of buffer views, one otherwise; None when it is not
    realized into whole buffers."""
    nodes = view.src if view.op is Ops.MULTI else (view,)
    bases = [base_buffer(u) for u in nodes]
    if any(b is None for b in bases):
        return None
    return [b.arg for b in bases]  # type: ignore[union-attr]


def view_of_buffers(buffers: Sequence[Buffer], shape: tuple[Any, ...], axis: int | None, multi: bool) -> UOp:
    """The value held by `buffers`, of (logical) `shape`: a buffer view, or a MULTI of one view per buffer."""
    if not multi:
        return buffer_view(buffers[0], shape)
    n = len(buffers)
    shard = shape if axis is None else shape[:axis] + (shape[axis] // n,) + shape[axis + 1:]
    return multi_node([buffer_view(b, shard) for b in buffers], axis)


def _axis_of(root: UOp) -> int | None:
    return sharding(root)[1]


# `UOp.axis` answers through this layer, which builds on tinygrad.uop and so is registered from here
uop_ops._sharding_axis = _axis_of
