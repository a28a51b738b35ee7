"""One capture of a TinyJit function: the kernels one call launched, and their replay on new inputs.

A replay must compute what running the function would, or refuse. Before launching it therefore:
  * copies the new value of model state assigned outside the function into the buffer its kernels read (StateSlot),
    and likewise for any tensor the kernels read that was assigned since (a tensor followed from its `assign`);
  * checks that the closure variables, globals and object attributes the function read its tensors from still name
    those tensors (jit_reads), else raises;
  * gives an input whose memory the replay also writes (an output fed back as the next input) a private copy, so
    that no kernel reads memory it writes;
and after launching, marks the previous replay's outputs as overwritten: their memory now holds this call's values,
and reading them raises (jit_state.overwritten).
"""

from __future__ import annotations

import functools
import sys
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tinygrad.device import Buffer, Device, Runner
from tinygrad.engine import jit_state, profile
from tinygrad.engine import realize as engine_realize
from tinygrad.engine.jit_args import Arguments
from tinygrad.engine.jit_io import (
    OutputSlot,
    StateSlot,
    axis_of,
    buffers_of,
    copy_into,
    fill,
    fresh_view,
    old_buffers,
    template_of,
)
from tinygrad.engine.jit_reads import Location, find_reads
from tinygrad.engine.jit_state import JitError
from tinygrad.engine.schedule import ScheduleItem
from tinygrad.engine.schedule_item import Linear
from tinygrad.helpers import DEBUG, PROFILE, GlobalCounters
from tinygrad.tensor import Tensor
from tinygrad.uop.ops import Ops, UOp


@dataclass(eq=False)
class Recorded:
    """One launch of the capture, and the input buffers it takes (positions in bufs -> input number)."""

    item: ScheduleItem
    runner: Runner | None  # None: a host copy
    input_slots: list[tuple[int, int]]
    takes_vars: bool


@dataclass(frozen=True)
class Signature:
    inputs: tuple[tuple[tuple[Any, ...], Any, str | tuple[str, ...]], ...]  # (shape, variables unbound; dtype; device)

    def describe(self) -> str:
        return ", ".join(f"{tuple(_dim_name(d) for d in shape)} {dtype.name} on {dev}"
                         for shape, dtype, dev in self.inputs) or "no tensors"


def _dim_name(d: Any) -> Any:
    return d if isinstance(d, int) else next((u.arg.name for u in d.toposort() if u.op is Ops.DEFINE_VAR), "?")


@dataclass(eq=False)
class _Followed:
    """A tensor that held memory the kernels read and was assigned since the capture: its new value is copied into
    that memory before a replay, whenever it has changed (`node`: its graph when last copied, held weakly as
    StateSlot's)."""

    tensor: weakref.ref[Tensor]
    buffers: list[Buffer]  # the memory the kernels read, one per device
    node: weakref.ref[UOp] | None = None


#: memory read by captured kernels -> the captures reading it, to be told of assigns to tensors that held it
_readers: weakref.WeakKeyDictionary[Buffer, weakref.WeakSet[Capture]] = weakref.WeakKeyDictionary()


def _assigned(t: Tensor, old: UOp) -> None:
    """jit_state.on_assign: an assign to a tensor whose memory some capture reads makes that capture follow it."""
    bufs = old_buffers(old)
    if bufs is None:
        return
    for cap in {c for b in bufs for c in _readers.get(b.storage, ())}:
        if id(t) not in cap.followed:
            cap.followed[id(t)] = _Followed(weakref.ref(t), bufs)


@dataclass(eq=False)
class Capture:
    name: str
    signature: Signature
    key: Arguments  # the capturing call's key, with where each value was found (for error messages)
    recorded: list[Recorded] = field(default_factory=list)
    launches: list[Callable[[], Any]] = field(default_factory=list)
    #: what a replay calls: the launches, with runs of consecutive ones that their backend can run from one native
    #: call (`run_together`) replaced by that call; placed says where launch i went (its run, and its position in the
    #: run, None when it is called on its own)
    runs: list[Callable[[], Any]] = field(default_factory=list)
    placed: list[tuple[int, int | None]] = field(default_factory=list)
    dynamic: list[int] = field(default_factory=list)  # launches taking inputs or variables: rebuilt when those change
    readers_of: dict[int, list[int]] = field(default_factory=dict)  # the launches taking each input
    #: what the dynamic launches were last built for: weak references to the memory of the input buffers (their
    #: storage: an assign gives a buffer a new name over the same memory) and the values. A replay with the same
    #: memory and values, such as a caller that refills its inputs in place, reuses the launches
    built_for: tuple[list[weakref.ref], dict[str, int]] | None = None
    outputs: Any = None  # the structure returned, with OutputSlot in place of each tensor
    var_vals: dict[str, int] = field(default_factory=dict)
    state: list[StateSlot] = field(default_factory=list)  # the tensors the function assigns
    replay_ops: int = 0  # estimated FLOPs and bytes of one replay (GlobalCounters)
    replay_mem: int = 0
    written: set[int] = field(default_factory=set)  # ids of the memory a replay writes, inputs excepted
    staging: dict[int, Buffer] = field(default_factory=dict)  # private copies of inputs that alias `written`
    followed: dict[int, _Followed] = field(default_factory=dict)
    locations: list[Location] = field(default_factory=list)
    lost: str | None = None  # a read tensor found in an object was dropped: the replays would read a stale one
    handed: list[weakref.ref[Buffer]] = field(default_factory=list)  # the last call's outputs that a replay rewrites
    #: prune=True: the launches that read neither inputs, variables nor memory the capture writes, run once at the
    #: capture and left out of replays; they run again when memory they read is assigned a new value
    pruned: list[Recorded] = field(default_factory=list)
    pruned_reads: set[int] = field(default_factory=set)  # ids of the memory the pruned launches read
    freed: bool = False  # free_intermediates() dropped the memory between launches: the next replay reallocates it

    @property
    def linear(self) -> Linear:
        """tinygrad's view of a capture: the calls a replay makes, in launch order (`src`; each call's `src[0]` is
        its kernel's SINK or the COPY), the launches a prune took out of replays left out. A record of what replays,
        not work to run: `run_linear` refuses it, as a linear that has run (call the jit to replay)."""
        return Linear(tuple(r.item for r in self.recorded), ran=True)

    def __reduce__(self) -> tuple:
        from tinygrad.engine.jit_pickle import pickled_capture  # loaded by the first pickle, not by `import tinygrad`

        return _capture_from_pickle, pickled_capture(self)

    # ---- capture ----
    def finish(self, fn: Callable[..., Any], records: list[tuple[ScheduleItem, Runner | None]], inputs: list[Buffer],
               var_vals: dict[str, int], out: Any, prune: bool = False) -> Any:
        """Turn the launches of the capturing call into a replayable capture; returns the call's outputs as a replay
        returns them."""
        slot_of = {id(b.storage): i for i, b in enumerate(inputs)}
        self.recorded = []
        read: dict[int, Buffer] = {}  # memory the kernels read that held a value before the call
        for si, runner in records:
            slots = [(pos, slot_of[id(b.storage)]) for pos, b in enumerate(si.bufs) if id(b.storage) in slot_of]
            self.recorded.append(Recorded(si, runner, slots, bool(si.var_vals)))
            for b in si.bufs[si.outs:]:
                if id(b.storage) not in slot_of and id(b.storage) not in self.written:
                    read.setdefault(id(b.storage), b.storage)
            given = {pos for pos, _ in slots}
            self.written.update(id(b.storage) for pos, b in enumerate(si.bufs[:si.outs]) if pos not in given)
        self.var_vals = dict(var_vals)
        state_memory = {id(b.storage) for held in self.state for b in held.buffers}
        if prune:
            self._prune(state_memory)
        self.outputs = template_of(out, slot_of, self.written - state_memory)
        self.launches = [_prepare(r, r.item.bufs, r.item.var_vals) for r in self.recorded]
        self.runs, self.placed = _run_together(self.launches)
        self.dynamic = [i for i, r in enumerate(self.recorded) if r.input_slots or r.takes_vars]
        self.readers_of = {slot: [] for slot in range(len(inputs))}
        for i, r in enumerate(self.recorded):
            for slot in dict.fromkeys(slot for _, slot in r.input_slots):
                self.readers_of[slot].append(i)
        runners = [r.runner for r in self.recorded if r.runner is not None]
        self.replay_ops = sum(r.estimated_ops for r in runners)
        self.replay_mem = sum(r.estimated_bytes for r in runners)
        for storage in (b for i, b in read.items() if i not in state_memory):
            _readers.setdefault(storage, weakref.WeakSet()).add(self)
        jit_state.on_assign = _assigned
        self.locations = find_reads(fn, set(read), self._lose)
        if DEBUG >= 1:
            print(f"TinyJit {self.name}: captured {len(self.recorded)} launches "
                  f"({len(self.dynamic)} take inputs or variables)", file=sys.stderr)
        return self._outputs_for(inputs, self.var_vals)

    def _lose(self, where: str) -> None:
        self.lost = where

    def _prune(self, state_memory: set[int]) -> None:
        """Move the launches whose results are the same on every call into `pruned`: those reading no input and no
        variable, whose reads are memory that no kept launch writes, and whose output memory only they write."""
        writers: dict[int, list[int]] = {}
        for i, r in enumerate(self.recorded):
            for b in r.item.bufs[:r.item.outs]:
                writers.setdefault(id(b.storage), []).append(i)
        fixed: set[int] = set()
        grew = True
        while grew:  # a launch reading only what fixed launches wrote before it is fixed too
            grew = False
            for i, r in enumerate(self.recorded):
                outs = [id(b.storage) for b in r.item.bufs[:r.item.outs]]
                if i in fixed or r.input_slots or r.takes_vars or any(o in state_memory for o in outs):
                    continue
                if any(w != i for o in outs for w in writers[o]):
                    continue
                if all(all(w in fixed and w < i for w in writers.get(id(b.storage), ()))
                       for b in r.item.bufs[r.item.outs:]):
                    fixed.add(i)
                    grew = True
        self.pruned = [r for i, r in enumerate(self.recorded) if i in fixed]
        self.recorded = [r for i, r in enumerate(self.recorded) if i not in fixed]
        self.pruned_reads = {id(b.storage) for r in self.pruned for b in r.item.bufs[r.item.outs:]}
        if DEBUG >= 1 and self.pruned:
            print(f"TinyJit {self.name}: pruned {len(self.pruned)} launches that do not depend on the inputs",
                  file=sys.stderr)

    def _rerun_pruned(self) -> None:
        for r in self.pruned:
            _prepare(r, r.item.bufs, r.item.var_vals)()

    def free_intermediates(self) -> int:
        """Free the memory that only lives between this capture's launches (and the outputs of the last call, which
        the next replay writes anew): a captured function kept for later uses no memory for them meanwhile. The
        next replay allocates it again. Reading an output of an earlier call afterwards raises. Returns the bytes
        freed."""
        kept = {id(b.storage) for held in self.state for b in held.buffers} | self.pruned_reads
        kept |= {id(b.storage) for r in self.pruned for b in r.item.bufs}
        for r in self.recorded:  # inputs given at the capture are the caller's memory, not the capture's
            kept |= {id(r.item.bufs[pos].storage) for pos, _ in r.input_slots}
        for ref in self.handed:
            if (b := ref()) is not None:
                jit_state.mark_overwritten(b, f"this output of TinyJit function {self.name} was freed by "
                                              f"free_intermediates(); keep a result with .clone().realize() or "
                                              f".numpy() before freeing")
        targets: dict[int, Buffer] = {}
        for r in self.recorded:
            for out in r.item.bufs[:r.item.outs]:
                storage = out.storage
                if id(storage) in self.written and id(storage) not in kept and storage.is_allocated:
                    targets[id(storage)] = storage
        freed = sum(b.deallocate() for b in targets.values())
        if targets:
            for r in self.recorded:  # views of the freed memory forget its address too
                for b in r.item.bufs:
                    if b.base is not None and id(b.base) in targets:
                        b.forget_memory()
            self.freed = True
        return freed

    # ---- replay ----
    def check_signature(self, signature: Signature) -> None:
        if signature != self.signature:
            raise JitError(f"TinyJit function {self.name} was captured for inputs [{self.signature.describe()}] "
                           f"and now gets [{signature.describe()}]; a replay runs the captured kernels, which only "
                           f"fit the captured shapes and dtypes. Call .reset() to capture again, or use a separate "
                           f"TinyJit for each shape (or a symbolic Variable for a changing dimension)")

    def _check_reads(self) -> None:
        if self.lost is not None:
            raise JitError(f"TinyJit function {self.name} read the tensor {self.lost} when it was captured, and that "
                           f"tensor is gone (the attribute or entry was bound to another tensor); a replay would "
                           f"read the old one. Update it in place with .assign(new), or call .reset() to capture again")
        for loc in self.locations:
            if loc.get is not None and loc.get() is not loc.tensor():
                raise JitError(f"TinyJit function {self.name} read the tensor in {loc.name} when it was captured, "
                               f"and {loc.name} now names another value; a replay reads the captured tensor. Update "
                               f"it in place with .assign(new), pass it as an argument, or call .reset() to capture "
                               f"again")

    def _bring_in_assigned(self) -> None:
        """Copy the new values of tensors assigned since the capture into the memory the kernels read."""
        for held in self.state:
            if (t := held.tensor()) is not None and t.uop is not held.node():
                # assigned a new value outside the function (a checkpoint loaded, say): the kernels read the state
                # from the captured buffer, so the new value goes there, unless it was written there in place
                for old, new in zip(held.buffers, buffers_of(t)):
                    if new.storage is not old.storage:
                        copy_into(old, new, old.device)
        stale = False
        for followed in list(self.followed.values()):
            t = followed.tensor()
            if t is None or (followed.node is not None and t.uop is followed.node()):
                continue
            news = buffers_of(t)
            for old, new in zip(followed.buffers, news):
                if new.storage is not old.storage:
                    copy_into(old, new, old.device)
                    stale = stale or id(old.storage) in self.pruned_reads
            followed.node = weakref.ref(t.uop)
        if stale:  # a pruned launch read the old value: its result must follow
            self._rerun_pruned()

    def _stage(self, inputs: list[Buffer], slots: Iterable[int]) -> list[Buffer]:
        """The inputs the kernels read: one (of `slots`) whose memory the replay writes (an earlier output passed back
        in) is copied into memory of its own first, so that no kernel reads what it writes."""
        written = self.written
        aliased = [i for i in slots if id(inputs[i].storage) in written]
        if not aliased:
            return inputs
        staged = list(inputs)
        for i in aliased:
            b = inputs[i]
            private = self.staging.get(i)
            if private is None:
                private = self.staging[i] = Buffer(b.device, b.size, b.dtype).ensure_allocated()
            copy_into(private, b, b.device)
            staged[i] = private
        return staged

    def replay(self, inputs: list[Buffer], var_vals: dict[str, int], changed: set[int] | None = None) -> Any:
        """Launch the captured kernels on `inputs`. `changed`: when the last call was a replay of this capture with
        the same variables, the inputs that may differ from its (the launches were built for the others); None: any
        may."""
        self._check_reads()
        jit_state.check_not_overwritten(inputs)
        self._bring_in_assigned()
        if self.freed:  # memory was given back: allocate it again and rebuild every launch
            self.freed, self.built_for = False, None
            self.launches = [_prepare(r, r.item.bufs, r.item.var_vals) for r in self.recorded]
            self.runs, self.placed = _run_together(self.launches)
        values = {**self.var_vals, **var_vals} if var_vals else self.var_vals
        launched_on = self._stage(inputs, range(len(inputs)) if changed is None else changed)
        launches = self.launches
        if self.dynamic and (changed is None or changed) and not self._built_for_these(launched_on, values, changed):
            self._rebuild(launched_on, values, changed)
        if DEBUG >= 1:
            print(f"TinyJit {self.name}: replaying {len(launches)} launches", file=sys.stderr)
        if PROFILE:
            self._replay_profiled(launches)
        elif DEBUG >= 2:  # per-launch wall time (including the Python call), as run_schedule prints it
            for rec, launch in zip(self.recorded, launches):
                st = time.perf_counter()
                launch()
                name = rec.runner.display_name if rec.runner is not None else "copy"
                print(f"  {rec.item.device} {name:<40} {(time.perf_counter() - st) * 1e6:9.2f} us  (replay)",
                      file=sys.stderr)
        else:
            for run in self.runs:
                run()
        GlobalCounters.count_launches(len(launches), self.replay_ops, self.replay_mem)
        for held in self.state:
            if (t := held.tensor()) is not None:  # a new name for the new contents, as realize() gives
                t.uop = fresh_view(held.buffers, t, held.axis)
                held.node = weakref.ref(t.uop)
        return self._outputs_for(inputs, values)

    def _outputs_for(self, inputs: list[Buffer], values: dict[str, int]) -> Any:
        """This call's outputs; the last call's, whose memory this call wrote, are marked overwritten."""
        if self.handed:
            why = (f"this output of TinyJit function {self.name} was overwritten by a later call (replays write their "
                   f"outputs into the same memory, as tinygrad's do); keep a result past the next call with "
                   f".clone().realize() or .numpy()")
            for ref in self.handed:
                if (b := ref()) is not None:
                    jit_state.mark_overwritten(b, why)
        handed: list[Buffer] = []
        out = fill(self.outputs, inputs, values, handed)
        self.handed = [weakref.ref(b) for b in handed]
        return out

    def _built_for_these(self, inputs: list[Buffer], values: dict[str, int], only: set[int] | None) -> bool:
        """Whether the launches were last built for these inputs' memory (those numbered in `only`, when given) and
        these values."""
        if self.built_for is None:
            return False
        refs, built_values = self.built_for
        if only is not None:
            return all(refs[i]() is inputs[i].storage for i in only)
        return len(refs) == len(inputs) and all(r() is b.storage for r, b in zip(refs, inputs)) \
            and built_values == values

    def _rebuild(self, inputs: list[Buffer], values: dict[str, int], only: set[int] | None) -> None:
        """Rebuild the launches that take inputs or variables for these: those whose inputs or variables changed
        since the last build (a model's weights passed as inputs stay; a new batch changes one or two launches).
        `only`: the inputs that may have changed (the values have not)."""
        regroup = False
        changed: set[int] | None = None  # the inputs whose memory changed; None: rebuild every dynamic launch
        values_changed = True
        if self.built_for is not None and len(self.built_for[0]) == len(inputs):
            refs, built_values = self.built_for
            candidates = range(len(inputs)) if only is None else only
            changed = {i for i in candidates if refs[i]() is not inputs[i].storage}
            values_changed = only is None and built_values != values
        if changed is None:
            rebuilt: Iterable[int] = self.dynamic
        else:
            picked = {i for slot in changed for i in self.readers_of[slot]}
            if values_changed:
                picked.update(i for i in self.dynamic if self.recorded[i].takes_vars)
            rebuilt = sorted(picked)
        for i in rebuilt:
            rec = self.recorded[i]
            bufs = list(rec.item.bufs)
            for pos, slot in rec.input_slots:
                bufs[pos] = inputs[slot]
            self.launches[i] = _prepare(rec, bufs, {name: values[name] for name in rec.item.var_vals})
            at, within = self.placed[i]
            if within is None and getattr(self.launches[i], "run_together", None) is None:
                self.runs[at] = self.launches[i]
            elif within is None or not self.runs[at].replace(within, self.launches[i]):  # type: ignore[attr-defined]
                regroup = True
        if regroup:
            self.runs, self.placed = _run_together(self.launches)
        if changed is not None and self.built_for is not None:
            refs = self.built_for[0]
            for i in changed:
                refs[i] = weakref.ref(inputs[i].storage)
            self.built_for = (refs, values)
        else:
            self.built_for = ([weakref.ref(b.storage) for b in inputs], values)

    def _replay_profiled(self, launches: list[Callable[[], Any]]) -> None:
        """PROFILE=1: each launch recorded. A prepared launch has no device timer, so each is timed by the wall
        clock up to its device's synchronize."""
        for rec, launch in zip(self.recorded, launches):
            st = time.perf_counter()
            launch()
            Device[rec.item.device].synchronize()
            elapsed = time.perf_counter() - st
            if rec.runner is None:
                dest, src = rec.item.bufs[0], rec.item.bufs[1]
                profile.record_copy(src.device, dest.device, dest.nbytes, st, elapsed)
            else:
                profile.record_launch(rec.item.device, rec.runner, st, elapsed, "wall", jit=self.name)


def make_state_slots(tensors: list[tuple[Tensor, list[Buffer]]]) -> list[StateSlot]:
    return [StateSlot(weakref.ref(t), bufs, axis_of(t), weakref.ref(t.uop)) for t, bufs in tensors]


def _prepare(rec: Recorded, bufs: list[Buffer], var_vals: dict[str, int]) -> Callable[[], Any]:
    if rec.runner is None:
        return functools.partial(engine_realize.copy_between, bufs[0], bufs[1])
    for b in bufs:
        b.ensure_allocated()
    prepare = getattr(rec.runner, "prepare", None)
    if prepare is not None:
        return prepare(bufs, var_vals)  # type: ignore[no-any-return]
    return functools.partial(rec.runner, bufs, var_vals)


def _run_together(launches: list[Callable[[], Any]]) -> tuple[list[Callable[[], Any]], list[tuple[int, int | None]]]:
    """The callables a replay makes, and where each launch went. A backend's prepared launch may carry
    `run_together(launches) -> callable | None`: consecutive launches with the same such function become the one
    callable it returns (the CPU's runs them from one native loop), which also offers `replace(position, launch)`
    for a launch rebuilt with new buffers (True when it took it). Others, and runs of one, are called alone."""
    runs: list[Callable[[], Any]] = []
    placed: list[tuple[int, int | None]] = []
    i = 0
    while i < len(launches):
        together = getattr(launches[i], "run_together", None)
        j = i + 1
        while together is not None and j < len(launches) and getattr(launches[j], "run_together", None) == together:
            j += 1
        run = together(launches[i:j]) if together is not None and j - i > 1 else None
        if run is None:  # each called alone
            placed.extend((len(runs) + k, None) for k in range(j - i))
            runs.extend(launches[i:j])
        else:
            placed.extend((len(runs), k) for k in range(j - i))
            runs.append(run)
        i = j
    return runs, placed


def _capture_from_pickle(name: str, signature: Any, key: Arguments, inputs: int, entries: list[Any],
                         launches: list[tuple], outputs: Any, var_vals: dict[str, int], replay_ops: int,
                         replay_mem: int) -> Capture:
    """Capture.__reduce__'s inverse: a capture from the fields jit_pickle.pickled_capture took."""
    from tinygrad.engine.jit_pickle import PickledSlot, loaded_buffers, map_outputs

    buffer = loaded_buffers(entries)
    cap = Capture(name, signature, key)
    for ast, refs, device, vals, outs, runner, input_slots, takes_vars in launches:
        item = ScheduleItem(ast, [buffer(ref) for ref in refs], device, var_vals=vals, outs=outs)
        cap.recorded.append(Recorded(item, runner, [tuple(s) for s in input_slots], takes_vars))
    cap.var_vals = var_vals
    cap.replay_ops, cap.replay_mem = replay_ops, replay_mem

    def slot(s: PickledSlot) -> OutputSlot:
        return OutputSlot(tuple(None if ref is None else buffer(ref) for ref in s.buffers), s.input_indices, s.shape,
                          s.dtype, s.device, s.requires_grad, s.axis, s.overwritten)

    cap.outputs = map_outputs(outputs, slot, PickledSlot)
    cap.readers_of = {i: [] for i in range(inputs)}
    for i, r in enumerate(cap.recorded):
        given = {pos for pos, _ in r.input_slots}
        cap.written.update(id(b.storage) for pos, b in enumerate(r.item.bufs[:r.item.outs]) if pos not in given)
        for s in dict.fromkeys(s for _, s in r.input_slots):
            cap.readers_of[s].append(i)
    cap.dynamic = [i for i, r in enumerate(cap.recorded) if r.input_slots or r.takes_vars]
    cap.launches = [_prepare(r, r.item.bufs, r.item.var_vals) for r in cap.recorded]
    cap.runs, cap.placed = _run_together(cap.launches)
    return cap
