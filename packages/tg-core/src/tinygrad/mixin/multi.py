"""Placing a tensor on several devices: `shard`, `shard_`, `shard_like`, and `to` a tuple of devices (replicated).

These only build the logical nodes (COPY to a tuple of devices, SHARD); where each part runs is decided when the
graph is realized (tinygrad/multi.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Self

from tinygrad.mixin.common import TensorBase, TensorT
from tinygrad.multi import canonical_devices
from tinygrad.uop.ops import UOp
from tinygrad.uop.placement import check_even, replicate_node, shard_like_node, shard_node


def _placed(x: TensorT, uop: UOp, devices: tuple[str, ...]) -> TensorT:
    # as `to` does: the same value elsewhere, taking gradients as x does (no new leaf)
    out = type(x)(uop, device=devices)
    out._requires_grad = x._requires_grad
    return out


def _on(x: TensorT, devices: tuple[str, ...]) -> UOp:
    """x's graph on `devices`: itself when it is there already, else replicated onto them."""
    if type(x)._runtime.is_disk(x.device):  # a file's bytes are read once, onto the first device, and go on from there
        x = x.to(devices[0])
    return x.uop if x.device == devices else replicate_node(x.uop, devices)


class MultiDeviceMixin(TensorBase):
    __slots__ = ()

    def shard(self, devices: Sequence[str], axis: int | None = None) -> Self:
        """This tensor split along `axis` over `devices`, each holding one equal part (axis None: each holds all of
        it). Ops on it run on every device; `.device` is the tuple of devices, `.shape` the whole shape. A tensor
        already on several devices is resharded (tinygrad refuses that).

        Examples:
            >>> t = Tensor.arange(8).reshape(4, 2).shard(("CPU:0", "CPU:1"), axis=0)
            >>> t.device, t.shape
            (('CPU', 'CPU:1'), (4, 2))
            >>> (t * 2).sum(0).tolist()
            [24, 32]
        """
        devs = canonical_devices(devices)
        if axis is None:
            return _placed(self, shard_node(self.uop, None) if self.device == devs else _on(self, devs), devs)
        ax = self._axis(axis)
        check_even(self.shape, ax, len(devs))
        return _placed(self, shard_node(_on(self, devs), ax), devs)

    def shard_(self, devices: Sequence[str], axis: int | None = None) -> Self:
        """`shard` in place (a model's parameters: `for p in get_parameters(model): p.shard_(devices)`); returns
        self.

        Examples:
            >>> w = Tensor.ones(2, 3)
            >>> w.shard_(("CPU:0", "CPU:1")).device
            ('CPU', 'CPU:1')
            >>> (Tensor.ones(4, 2).shard(w.device, axis=0) @ w).tolist()
            [[2.0, 2.0, 2.0], [2.0, 2.0, 2.0], [2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]
        """
        moved = self.shard(devices, axis)
        self.uop, self.device = moved.uop, moved.device
        return self

    def shard_like(self, y: Self) -> Self:
        """This tensor placed as `y` is: on y's device, or over y's devices split along the same axis.

        Examples:
            >>> y = Tensor.zeros(4, 2).shard(("CPU:0", "CPU:1"), axis=1)
            >>> g = Tensor.ones(4, 2).shard_like(y)
            >>> g.device, (g + y).sum(0).tolist()
            (('CPU', 'CPU:1'), [4.0, 4.0])
        """
        if isinstance(y.device, str):
            return self.to(y.device)
        return _placed(self, shard_like_node(_on(self, y.device), y.uop), y.device)

    def _to_devices(self, devices: Sequence[str]) -> Self:
        """`to` a tuple of devices: replicated on each, or self if it is on those devices already (sharded or not)."""
        devs = canonical_devices(devices)
        return self if self.device == devs else _placed(self, _on(self, devs), devs)
