"""Where a value of the logical graph lives (tinygrad/multi.py explains multi-device tensors): the device specs, the
nodes that place values (MULTI, COPY to several devices, SHARD) and `device_of`.

These build UOps and read graphs only. Autograd (tinygrad/gradient.py) and the Tensor layer use them without
loading the lowering of multi-device graphs in tinygrad/multi.py, which builds on the scheduler.
"""

from __future__ import annotations

from collections.abc import Sequence

from tinygrad.uop.ops import Ops, UOp, post_order

DeviceSpec = str | tuple[str, ...]  # where a tensor lives: a device, or a tuple of them
DeviceLike = str | Sequence[str] | None  # what `device=` takes: None is the default device


def joined_shape(shard: tuple[int, ...], axis: int | None, n: int) -> tuple[int, ...]:
    return shard if axis is None else shard[:axis] + (shard[axis] * n,) + shard[axis + 1:]


def first_device(device: DeviceSpec) -> str:
    """The device whose properties (knobs, dtypes) decide for a tensor: its own, or the first of several."""
    return device if isinstance(device, str) else device[0]


def device_names(device: DeviceSpec) -> tuple[str, ...]:
    """The devices a tensor lives on, as a tuple (one for a tensor on one device)."""
    return (device,) if isinstance(device, str) else device


def check_even(shape: tuple[int, ...], axis: int, n: int) -> None:
    size = shape[axis]
    if not isinstance(size, int) or size % n:
        raise RuntimeError(f"multi axis uneven: axis {axis} of shape {shape} has size {size}, which {n} devices cannot "
                           f"split evenly (tinygrad splits evenly); pad the tensor, or shard another axis")


# ---- nodes of the logical graph ----

def multi_node(shards: Sequence[UOp], axis: int | None) -> UOp:
    return UOp(Ops.MULTI, shards[0].dtype, tuple(shards), axis)


def replicate_node(value: UOp, devices: tuple[str, ...]) -> UOp:
    return UOp(Ops.COPY, value.dtype, (value,), devices)


def shard_node(value: UOp, axis: int | None) -> UOp:
    return UOp(Ops.SHARD, value.dtype, (value,), axis)


def shard_like_node(value: UOp, like: UOp) -> UOp:
    return UOp(Ops.SHARD, value.dtype, (value, like), "like")


def device_of(root: UOp) -> DeviceSpec | None:
    """Where a node of a (logical) graph lives: a device, a tuple of devices, or None for constants."""
    found: dict[UOp, DeviceSpec | None] = {}
    for node in post_order((root,)):
        if node.op is Ops.BUFFER:
            found[node] = node.arg.device
        elif node.op is Ops.COPY:
            found[node] = node.arg
        elif node.op is Ops.MULTI:
            found[node] = tuple(single_device(found[s]) for s in node.src)
        else:
            found[node] = next((d for s in node.src if (d := found[s]) is not None), None)
    return found[root]


def single_device(device: DeviceSpec | None) -> str:
    """The one device of a shard (`device_of` of it); a shard on several devices or none is an error."""
    if not isinstance(device, str):
        raise RuntimeError(f"a shard of a multi-device value must live on one device, this one is on {device}")
    return device
