"""What goes in and out of a TinyJit replay: the model state a function assigns (written back into the buffers its
kernels read), the buffers of its inputs, and the template its outputs are rebuilt from after each replay."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

from tinygrad.device import Buffer, Device, Runner
from tinygrad.engine import realize as engine_realize
from tinygrad.engine.jit_in_place import write_in_place
from tinygrad.engine.jit_state import JitError, RunningJit
from tinygrad.engine.schedule import ScheduleItem, buffer_view, copy_kernel_ast, realized_views
from tinygrad.helpers import PROFILE, GlobalCounters
from tinygrad.multi import realized_buffers, view_of_buffers
from tinygrad.tensor import Tensor
from tinygrad.uop.ops import Ops, UOp, buffer_node, unbind

# ---- model state ----

@dataclass(eq=False)
class StateSlot:
    """A tensor the function assigns, the buffer its kernels read it from, and the node a replay last gave it
    (another node means it was assigned outside the function since: load_state_dict, a manual assign). The node is
    held weakly: a strong reference would count as a reader of the buffer's graph, and an assign to a region of the
    tensor between replays (a KV cache's prefill) would then compute a whole new value instead of writing the
    region in place (mixin/views.py)."""
    tensor: weakref.ref[Tensor]
    buffers: list[Buffer]  # one per device for a tensor on several devices
    axis: int | None  # and the axis it is split along
    node: weakref.ref[UOp]


def held_buffers(u: UOp) -> list[Buffer] | None:
    """The buffers a tensor's node holds (None: it is not realized); a buffer or a reshape of one, the usual case,
    without the general lookup."""
    if u.op is Ops.BUFFER:
        return [u.arg]
    if u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER:
        return [u.src[0].arg]
    return old_buffers(u)


def old_buffers(old: UOp) -> list[Buffer] | None:
    view = realized_views.get(old)
    return realized_buffers(view if view is not None else old)


def state_tensors(state: RunningJit) -> list[tuple[Tensor, list[Buffer]]]:
    """Tensors assigned during the call that held a buffer (one per device) before: model state, now written back
    into it."""
    out = []
    for t, old in state.assigned.values():
        bufs = old_buffers(old)
        if bufs is not None and all(b.dtype == t.dtype for b in bufs) and \
                (isinstance(t.device, tuple) or bufs[0].size == t.numel()):
            out.append((t, bufs))
    return out


def write_back_state(state: RunningJit, records: list[tuple[ScheduleItem, Runner | None]],
                     outputs: list[Tensor]) -> list[tuple[ScheduleItem, Runner | None]]:
    """Copy each state tensor's new value into the buffer it held before the call, and point the tensor there.
    Replays read the state from those buffers, so they must hold the newest value after every replay: the kernel that
    computes a new value is rewritten in `records` to store it there where it safely can (jit_in_place.py); the
    copies the replays still need are returned."""
    moved: list[tuple[Tensor, list[Buffer], list[Buffer]]] = []
    for t, olds in state_tensors(state):
        news = buffers_of(t)
        if [b.size for b in news] != [b.size for b in olds]:
            raise JitError(f"TinyJit function {state.name} gave a tensor on {t.device} a new placement (its shards "
                           f"changed size); a replay writes the new value into the old buffers, so keep the sharding")
        if any(new.storage is not old.storage for new, old in zip(news, olds)):
            moved.append((t, olds, news))
    states = {id(t) for t, _, _ in moved}
    held = {id(u.arg.storage) for out in outputs if id(out) not in states for u in out.uop.toposort()
            if u.op is Ops.BUFFER}
    pairs = [(old, new) for _, olds, news in moved for old, new in zip(olds, news) if new.storage is not old.storage]
    in_place = write_in_place(records, pairs, held)
    copies: list[tuple[ScheduleItem, Runner | None]] = []
    for t, olds, news in moved:
        for old, new in zip(olds, news):
            if new.storage is not old.storage:
                copy = copy_into(old, new, old.device)  # run now: this call ran the kernels that wrote `new`
                if id(new.storage) not in in_place:
                    copies.append(copy)
        t.uop = fresh_view(olds, t, axis_of(t))
    return copies


def axis_of(t: Tensor) -> int | None:
    """The axis a realized tensor on several devices is split along (None: replicated, or on one device)."""
    view = realized_views.get(t.uop)
    node = view if view is not None else t.uop
    return node.arg if node.op is Ops.MULTI else None


def fresh_view(bufs: list[Buffer], t: Tensor, axis: int | None) -> UOp:
    """t's value over new Buffer objects naming the memory of `bufs` (one per device for a multi-device t)."""
    fresh = [Buffer(b.device, b.size, b.dtype, base=b) for b in bufs]
    return view_of_buffers(fresh, t.shape, axis, isinstance(t.device, tuple))


def copy_into(dst: Buffer, src: Buffer, device: str) -> tuple[ScheduleItem, Runner]:
    """Copy src into dst now, with a copy kernel; returns it, for a capture to replay."""
    si = ScheduleItem(copy_kernel_ast(dst.dtype, dst.size), [dst, src], device)
    runner = Device[device].get_runner(si.ast)
    if PROFILE:
        engine_realize.timed_launch(device, runner, si.bufs, {}, record=True)
    else:
        runner(si.bufs, {})
    GlobalCounters.count_launches(1, runner.estimated_ops, runner.estimated_bytes)
    return si, runner


# ---- inputs and outputs ----

def buffers_of(t: Tensor) -> list[Buffer]:
    """The buffer holding t's value, realized first if need be; one per device for a tensor on several devices."""
    for _ in range(2):
        view = realized_views.get(t.uop)
        if (bufs := realized_buffers(view if view is not None else t.uop)) is not None:
            return bufs
        t.realize()
    raise JitError(f"a tensor of shape {t.shape} on {t.device} did not realize into whole buffers")


def unbound(d: Any) -> Any:
    return d if isinstance(d, int) else unbind(d)[0]


def collect_outputs(out: Any) -> list[Tensor]:
    if isinstance(out, Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in collect_outputs(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in collect_outputs(o)]
    return []


@dataclass(frozen=True)
class OutputSlot:
    # per device (one for a tensor on one device): the recorded buffer a replay writes the output into, or the
    # number of the input it is, returned as it is
    buffers: tuple[Buffer | None, ...]
    input_indices: tuple[int | None, ...]
    shape: tuple[Any, ...]
    dtype: Any
    device: str | tuple[str, ...]
    requires_grad: bool | None
    axis: int | None  # the axis a tensor on several devices is split along
    overwritten: bool  # the next replay writes over this output (it is not an input, nor model state)

    #: one device and a shape of ints (no Variable): fill's quick path; flat: that shape is the buffer's own
    static: bool = field(init=False)
    flat: bool = field(init=False)

    def __post_init__(self) -> None:
        static = not isinstance(self.device, tuple) and all(isinstance(d, int) for d in self.shape)
        first = self.buffers[0]
        object.__setattr__(self, "static", static)
        object.__setattr__(self, "flat", static and first is not None and self.shape == (first.size,))


def template_of(out: Any, slot_of: dict[int, int], rewritten: set[int]) -> Any:
    """`out` with an OutputSlot for each tensor. `slot_of`: input numbers by id of their memory; `rewritten`: ids of
    the memory a replay writes that is not model state."""
    if isinstance(out, Tensor):
        bufs = buffers_of(out)
        inps = tuple(slot_of.get(id(b.storage)) for b in bufs)
        shape = tuple(d if isinstance(d, int) else unbound(d) for d in out.shape)
        return OutputSlot(tuple(None if i is not None else b for b, i in zip(bufs, inps)), inps, shape, out.dtype,
                          out.device, out.requires_grad, axis_of(out), any(id(b.storage) in rewritten for b in bufs))
    if isinstance(out, (tuple, list)):
        return type(out)(template_of(o, slot_of, rewritten) for o in out)
    if isinstance(out, dict):
        return {k: template_of(v, slot_of, rewritten) for k, v in out.items()}
    return out


def returns_inputs(template: Any) -> bool:
    if isinstance(template, OutputSlot):
        return any(i is not None for i in template.input_indices)
    if isinstance(template, (tuple, list)):
        return any(returns_inputs(o) for o in template)
    if isinstance(template, dict):
        return any(returns_inputs(o) for o in template.values())
    return False


def fill(template: Any, inputs: list[Buffer], values: dict[str, int], handed: list[Buffer]) -> Any:
    """The outputs of a replay, as tensors over new Buffer objects; those a later replay writes over are appended to
    `handed`, so that reading them after that raises instead of giving the later call's values."""
    if type(template) is OutputSlot:
        # a new Buffer object over the recorded memory for each replay: expressions built on an earlier replay's
        # result (and the values remembered for them) belong to the earlier contents
        if template.static:  # one device, a shape of ints: made on every replay, so without the general path's work
            b = template.buffers[0]
            if b is None:
                b = inputs[template.input_indices[0]]  # type: ignore[index]
            out = Buffer(b.device, b.size, b.dtype, base=b)
            if template.overwritten:
                handed.append(out)
            node = buffer_node(out)
            if template.flat:
                uop = node
            else:
                uop = node.reshape(template.shape)
                if uop._shape is False:  # a new node over a new buffer: its shape is known, no need to infer it
                    uop._shape = template.shape
            return Tensor._over(uop, template.device, template.requires_grad)
        bufs = [inputs[i] if i is not None else b for b, i in zip(template.buffers, template.input_indices)]
        shape = tuple(d if isinstance(d, int) else _rebind(d, values) for d in template.shape)
        fresh = [Buffer(b.device, b.size, b.dtype, base=b) for b in bufs if b is not None]
        if template.overwritten:
            handed.extend(fresh)
        if isinstance(template.device, tuple):
            uop = view_of_buffers(fresh, shape, template.axis, multi=True)
        else:
            flat = buffer_view(fresh[0], (fresh[0].size,))
            uop = flat if shape == (fresh[0].size,) else _shaped(flat, shape)
        return Tensor._over(uop, template.device, template.requires_grad)
    if isinstance(template, (tuple, list)):
        return type(template)(fill(o, inputs, values, handed) for o in template)
    if isinstance(template, dict):
        return {k: fill(v, inputs, values, handed) for k, v in template.items()}
    return template


def _shaped(flat: UOp, shape: tuple[Any, ...]) -> UOp:
    if all(isinstance(d, int) for d in shape):
        return flat.reshape(shape)
    # a symbolic output: its buffer is sized for the largest value; show the bound prefix
    from tinygrad.uop.ops import sym_prod

    return flat.shrink(((0, sym_prod(shape)),)).reshape(shape)


def _rebind(d: UOp, values: dict[str, int]) -> UOp:
    return d.substitute({v: v.bind(values[v.arg.name]) for v in d.toposort()  # type: ignore[attr-defined]
                         if v.op is Ops.DEFINE_VAR and v.arg.name in values})
