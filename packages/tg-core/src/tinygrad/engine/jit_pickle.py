"""A TinyJit and its captures through pickle: what a loaded one needs to replay, and nothing of the function.

What goes in, for each capture: the launches in order (each kernel's AST, its compiled program and launch sizes, the
buffers it takes, its variables), the shapes, dtypes and devices of the inputs, the key of the non-tensor
arguments, and the template the outputs are rebuilt from. Memory goes in as a table: the buffers a replay reads
before it writes them (model weights, state the function assigns, results of launches left out by `prune`) and the
outputs it returns without writing them, with their bytes, out of band under protocol 5 with a `buffer_callback`;
inputs, outputs and scratch as their sizes.
The function itself does not go in: a loaded jit replays calls like the captured ones and refuses any other.
This module takes a capture or a jit apart (`pickled_capture`, `pickled_jit`); the loaders that build one again sit
beside the classes they build (jit_capture.py, jit.py), which import this module when they pickle or load.

A compiled program loads only where the same compiler with the same cache key would have made it
(tinygrad.runtime.runner: ProgramMismatchError); nothing is compiled on load.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tinygrad.device import Buffer
from tinygrad.engine.jit_args import Arguments
from tinygrad.engine.jit_io import OutputSlot
from tinygrad.uop.ops import Ops

if TYPE_CHECKING:
    from tinygrad.dtype import DType
    from tinygrad.engine.jit import TinyJit
    from tinygrad.engine.jit_capture import Capture


# ---- keys ----

@dataclass(frozen=True, eq=False)
class Unmatched:
    """A key value that was compared by identity (an object too large to take apart, a function): no object of a
    loading process is that one, so a call with it never replays this capture."""

    what: str

    def __repr__(self) -> str:
        return f"<{self.what} of the pickling process>"


def portable_key(key: Any) -> tuple:
    """The key entries as they can be compared after loading. An entry keyed by identity, or holding a type that
    cannot be pickled by name (a class defined in a function), becomes Unmatched."""
    out = []
    for entry in key:
        if type(entry) is tuple and entry and entry[0] in ("object", "cycle") and isinstance(entry[-1], int):
            out.append(Unmatched(f"{getattr(entry[1], '__qualname__', entry[1])} object"))
            continue
        try:
            pickle.dumps(entry)
        except Exception:  # whatever a value's own pickling raises: this key can only be lost, not wrong
            out.append(Unmatched(repr(entry)))
            continue
        out.append(entry)
    return tuple(out)


# ---- memory ----

#: a buffer in the table: a storage's number, or (number, size, dtype) for a buffer naming the start of its memory
Ref = int | tuple[int, int, "DType"]


class MemoryTable:
    """The storages a capture's launches take, each once. Those in `carried` go as the Buffer (with its bytes), the
    rest as (device, size, dtype)."""

    def __init__(self, carried: set[int]):
        self.carried = carried
        self.index: dict[int, int] = {}
        self.entries: list[Buffer | tuple[str, int, DType]] = []

    def ref(self, b: Buffer) -> Ref:
        storage = b.storage
        i = self.index.get(id(storage))
        if i is None:
            i = self.index[id(storage)] = len(self.entries)
            self.entries.append(storage if id(storage) in self.carried else
                                (storage.device, storage.size, storage.dtype))
        return i if b.base is None else (i, b.size, b.dtype)


def loaded_buffers(entries: list[Any]) -> Callable[[Ref], Buffer]:
    storages = [e if isinstance(e, Buffer) else Buffer(*e) for e in entries]
    views: dict[tuple, Buffer] = {}

    def buffer(ref: Ref) -> Buffer:
        if isinstance(ref, int):
            return storages[ref]
        view = views.get(ref)
        if view is None:
            base = storages[ref[0]]
            view = views[ref] = Buffer(base.device, ref[1], ref[2], base=base)
        return view

    return buffer


def _region_stores(ast: Any) -> set[int]:
    """The output PARAMs a kernel stores into through a region (a SHRINK of the buffer), not as a whole."""
    out: set[int] = set()
    for store in ast.src if ast.op is Ops.SINK else ():
        if store.op is not Ops.STORE:
            continue
        target = store.src[0].toposort()
        if any(u.op is Ops.SHRINK for u in target):
            out.update(u.arg.slot for u in target if u.op is Ops.PARAM)
    return out


def _outputs_read(ast: Any) -> set[int]:
    """The PARAMs a kernel's stored values read: for an output, a kernel that updates its output in place (a state
    update a capture made in-place, engine/jit_in_place.py) reads the value it overwrites."""
    return {u.arg.slot for store in (ast.src if ast.op is Ops.SINK else ()) if store.op is Ops.STORE
            for u in store.src[1].toposort() if u.op is Ops.PARAM}


def read_first(cap: Capture) -> set[int]:
    """Ids of the memory a replay starts from, inputs excepted: what some launch reads before any launch writes it,
    and what a launch first writes only a region of (an in-place region assign, as a KV cache's step: the rest of
    the memory keeps what it held) or reads as it writes it (a state updated in place). These are the values a
    loaded capture must start from."""
    written: set[int] = set()
    read: set[int] = set()
    for r in cap.recorded:
        given = {pos for pos, _ in r.input_slots}
        bufs, outs = r.item.bufs, r.item.outs
        read.update(id(b.storage) for pos, b in enumerate(bufs[outs:], outs)
                    if pos not in given and id(b.storage) not in written)
        regions = _region_stores(r.item.ast) | _outputs_read(r.item.ast) if r.runner is not None else set()
        read.update(id(b.storage) for pos, b in enumerate(bufs[:outs])
                    if pos in regions and pos not in given and id(b.storage) not in written)
        written.update(id(b.storage) for pos, b in enumerate(bufs[:outs]) if pos not in given)
    return read


def held_outputs(cap: Capture) -> set[int]:
    """Ids of the memory of outputs that no replayed launch writes: a tensor the function returns as it found it (a
    weight), or the result of a launch `prune` left out. A replay hands that memory back as it is, so a loaded
    capture must start from its value too."""
    written = {id(b.storage) for r in cap.recorded for b in r.item.bufs[:r.item.outs]}
    held: set[int] = set()

    def visit(s: OutputSlot) -> OutputSlot:
        held.update(id(b.storage) for b in s.buffers if b is not None and id(b.storage) not in written)
        return s

    map_outputs(cap.outputs, visit, OutputSlot)
    return held


# ---- outputs ----

@dataclass(frozen=True)
class PickledSlot:
    buffers: tuple[Ref | None, ...]
    input_indices: tuple[int | None, ...]
    shape: tuple[Any, ...]
    dtype: Any
    device: str | tuple[str, ...]
    requires_grad: bool | None
    axis: int | None
    overwritten: bool


def map_outputs(template: Any, slot: Callable[[Any], Any], kind: type) -> Any:
    if type(template) is kind:
        return slot(template)
    if isinstance(template, (tuple, list)):
        return type(template)(map_outputs(o, slot, kind) for o in template)
    if isinstance(template, dict):
        return {k: map_outputs(v, slot, kind) for k, v in template.items()}
    return template


# ---- captures ----

def pickled_capture(cap: Capture) -> tuple:
    """What a capture pickles as: the arguments of its loader (jit_capture's `_capture_from_pickle`)."""
    for i, r in enumerate(cap.recorded):
        if r.runner is not None and getattr(type(r.runner), "__reduce__", None) is object.__reduce__:
            raise pickle.PicklingError(f"TinyJit function {cap.name}: launch {i} runs a {type(r.runner).__name__} "
                                       f"on {r.item.device}, which has no pickled form; only compiled kernels "
                                       f"and copies can be pickled")
    table = MemoryTable(read_first(cap) | held_outputs(cap))
    launches = [(r.item.ast, [table.ref(b) for b in r.item.bufs], r.item.device, dict(r.item.var_vals), r.item.outs,
                 r.runner, list(r.input_slots), r.takes_vars) for r in cap.recorded]

    def slot(s: OutputSlot) -> PickledSlot:
        return PickledSlot(tuple(None if b is None else table.ref(b) for b in s.buffers), s.input_indices, s.shape,
                           s.dtype, s.device, s.requires_grad, s.axis, s.overwritten)

    outputs = map_outputs(cap.outputs, slot, OutputSlot)
    key = Arguments(key=list(portable_key(cap.key.key)), where=list(cap.key.where))
    return (cap.name, cap.signature, key, len(cap.readers_of), table.entries, launches, outputs, dict(cap.var_vals),
            cap.replay_ops, cap.replay_mem)


# ---- TinyJit ----

def pickled_jit(jit: TinyJit) -> tuple:
    """What a TinyJit pickles as: the arguments of its loader (jit's `_jit_from_pickle`)."""
    if not jit._captures:
        raise pickle.PicklingError(f"TinyJit function {jit._name} has not captured anything yet (the capture is made "
                                   f"by its second call); a pickle of it would hold no kernels. Call it twice first")
    captures = [(portable_key(key[0]), key[1], cap) for key, cap in jit._captures.items()]
    current = next((i for i, (_, _, cap) in enumerate(captures) if cap is jit._current), None)
    return jit._name, jit.prune, captures, current


__all__ = ["Unmatched", "pickled_capture", "pickled_jit", "portable_key"]
