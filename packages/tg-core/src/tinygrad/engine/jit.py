"""`TinyJit`: capture the kernels a function launches once, then replay them without running Python.

    @TinyJit
    def step(x: Tensor) -> Tensor:
        ...

Call 1 runs the function eagerly (it compiles every kernel). Call 2 runs it again while recording each launched
kernel with its buffers. From call 3 on, the function body does not run: the recorded kernels are launched again
with the buffers of the new input tensors in place of the recorded ones, and the outputs come back as tensors over
the recorded output buffers.

What this asks of the function (the usual tinygrad rules):
  * Inputs are the Tensor arguments (positional and keyword); they are realized before the call. Other arguments
    are baked into the capture. Every call must pass inputs of the same shapes, dtypes and devices as call 2 (a
    change raises JitError; `reset()` starts over, or use one TinyJit per shape). Symbolic dimensions bound to new
    values, and Variables passed as arguments, are fine: their values travel with each replay.
  * Outputs are the tensors it returns (alone, or in a tuple, list or dict). They are realized at the end of each
    call; replays write into the same memory, so a result that must outlive the next call should be copied
    (`.numpy()` or `.clone().realize()`).
  * State updates use `assign` (optimizers do): the new value is written into the tensor's buffer in place, and
    assigns made inside the function are realized with its outputs. State the function assigns may also be
    assigned outside it between calls (load_state_dict of a checkpoint): the next replay copies the new value into
    the buffer its kernels read. A tensor the function only reads (a learning rate, a frozen weight) is read from
    the buffer it had at capture: change it in place (`tinygrad.nn.training.write_in_place`, which the
    learning-rate schedules use), not by assign, which gives it a new buffer the replays do not see.
  * No reading of values on the host (`.numpy()`, `.item()`, `.tolist()`) inside it: a replay could not repeat
    that. Random numbers are fine: the generator's state lives in device buffers that the replay advances.
  * One capture at a time: calling a TinyJit function while another capture is in progress raises JitError.

JIT=0 (the environment, or `Context(JIT=0)`) turns capture off: every call runs the function eagerly, as call 1
does, which helps when debugging a jitted step. Calls made that way do not count towards the capture.
"""

from __future__ import annotations

import functools
import sys
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from tinygrad.device import Buffer, Device, Runner
from tinygrad.engine import profile
from tinygrad.engine import realize as engine_realize
from tinygrad.engine.jit_state import JitError, RunningJit, running
from tinygrad.engine.schedule import ScheduleItem, base_buffer, buffer_view, copy_kernel_ast, realized_views
from tinygrad.engine.schedule_item import buffer_node
from tinygrad.helpers import DEBUG, JIT, PROFILE, GlobalCounters
from tinygrad.multi import realized_buffers, view_of_buffers
from tinygrad.tensor import Tensor
from tinygrad.uop.ops import Ops, UOp, unbind

R = TypeVar("R")

__all__ = ["JitError", "TinyJit"]


@dataclass(eq=False)
class _Recorded:
    """One launch of the capture, and the input buffers it takes (positions in bufs -> input number)."""

    item: ScheduleItem
    runner: Runner | None  # None: a host copy
    input_slots: list[tuple[int, int]]
    takes_vars: bool


@dataclass(frozen=True)
class _Signature:
    inputs: tuple[tuple[tuple[Any, ...], Any, str | tuple[str, ...]], ...]  # (shape, variables unbound; dtype; device)

    def describe(self) -> str:
        return ", ".join(f"{tuple(_dim_name(d) for d in shape)} {dtype.name} on {dev}"
                         for shape, dtype, dev in self.inputs) or "no tensors"


def _dim_name(d: Any) -> Any:
    return d if isinstance(d, int) else next((u.arg.name for u in d.toposort() if u.op is Ops.DEFINE_VAR), "?")


class TinyJit(Generic[R]):
    """Decorate a function whose work is tensor operations; see the module docstring for the rules."""

    def __init__(self, fn: Callable[..., R]):
        self.fn = fn
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]
        self.reset()

    def reset(self) -> None:
        """Forget the capture: the next call runs eagerly again, the one after that captures."""
        self.cnt = 0
        self._signature: _Signature | None = None
        self._recorded: list[_Recorded] = []
        self._launches: list[Callable[[], Any]] = []
        #: what a replay calls: the launches, with runs of consecutive ones that their backend can run from one
        #: native call (`_run_together`) replaced by that call; _placed says where launch i went (its run, and its
        #: position in the run, None when it is called on its own)
        self._runs: list[Callable[[], Any]] = []
        self._placed: list[tuple[int, int | None]] = []
        self._dynamic: list[int] = []  # launches rebuilt on every replay: they take inputs or variables
        #: what the dynamic launches were last built for: weak references to the memory of the input buffers (their
        #: storage: an assign gives a buffer a new name over the same memory) and the values. A replay with the same
        #: memory and values, such as a caller that refills its inputs in place, reuses the launches
        self._built_for: tuple[list[weakref.ref], dict[str, int]] | None = None
        #: the last replay's arguments when they were realized tensors and nothing else: weak references to their
        #: nodes and to their buffers. The same tensors again, unchanged, replay without the per-call checks
        self._repeat: tuple[list[weakref.ref], list[weakref.ref]] | None = None
        self._outputs: Any = None  # the structure returned, with _OutputSlot in place of each tensor
        self._var_vals: dict[str, int] = {}
        self._state: list[_StateSlot] = []  # the tensors the function assigns
        self._replay_ops = self._replay_mem = 0  # estimated FLOPs and bytes of one replay (GlobalCounters)

    @property
    def captured_kernels(self) -> int:
        """How many launches a replay makes (kernels and copies)."""
        return len(self._recorded)

    @property
    def returns_inputs(self) -> bool:
        """Whether a replay returns one of its inputs as an output (the input's own memory, not a copy)."""
        return _returns_inputs(self._outputs)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        # as a method decorator: bind the instance like a function would
        return self if obj is None else functools.partial(self.__call__, obj)

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        if self._repeat is not None and not running and not kwargs and (buffers := self._repeated(args)) is not None:
            return self._replay(buffers, {}, repeated=True)
        if running and running[-1].capturing:
            raise JitError(f"TinyJit function {self._name} was called while {running[-1].name} is being captured; a "
                           f"replay of the outer function could not repeat the inner one. Call it outside, or drop "
                           f"one of the two TinyJit decorators")
        if any(r.owner is self for r in running):
            raise JitError(f"TinyJit function {self._name} called itself; a capture records one call's kernels and "
                           f"cannot contain itself. Recurse in an undecorated helper and decorate the outer call")
        inputs = [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]
        if inputs:
            Tensor.realize(*inputs)
        buffers = [b for t in inputs for b in _buffers_of(t)]  # a tensor on several devices: one per device
        var_vals = _bound_values(args, kwargs, inputs)
        signature = _Signature(tuple((tuple(_unbound(d) for d in t.shape), t.dtype, t.device) for t in inputs))
        if not JIT:
            return self._run(args, kwargs, buffers, var_vals, capturing=False)  # eager; the count stays
        if self.cnt >= 2:
            self._check_signature(signature)
            self._repeat = None
            out = self._replay(buffers, var_vals)
            # set once the replay is done: a repeat skips rebuilding launches, which that replay built for these
            if not kwargs and not var_vals and all(type(a) is Tensor and base_buffer(a.uop) is not None for a in args):
                self._repeat = ([weakref.ref(a.uop) for a in args], [weakref.ref(b) for b in buffers])
            return out
        capturing = self.cnt == 1
        if capturing:
            if len({id(b.storage) for b in buffers}) != len(buffers):
                raise JitError(f"TinyJit function {self._name} got one tensor's memory as two inputs; a replay "
                               f"swaps each input separately. Pass distinct tensors (use .clone() for a copy)")
            self._signature = signature
        out = self._run(args, kwargs, buffers, var_vals, capturing)
        self.cnt += 1
        return out

    def _run(self, args: tuple, kwargs: dict, buffers: list[Buffer], var_vals: dict[str, int], capturing: bool) -> R:
        """Run the function: its outputs and the tensors it assigned are realized, and when `capturing`, the
        launches are recorded."""
        records: list[tuple[ScheduleItem, Runner | None]] = []
        state = RunningJit(self._name, capturing, self)
        running.append(state)
        if capturing:
            engine_realize.capture_hooks.append(lambda si, runner: records.append((si, runner)))
        try:
            out = self.fn(*args, **kwargs)
            out_tensors = _collect_outputs(out)
            pending = [t for t, _ in state.assigned.values() if base_buffer(t.uop) is None]
            if out_tensors or pending:
                Tensor.realize(*out_tensors, *pending)
        finally:
            running.pop()
            if capturing:
                engine_realize.capture_hooks.pop()
        if capturing:
            records += _write_back_state(state)
            self._state = [_StateSlot(weakref.ref(t), bufs, _axis(t), t.uop) for t, bufs in _state_tensors(state)]
            self._finish_capture(records, buffers, var_vals, out)
        return out

    @property
    def _name(self) -> str:
        return getattr(self.fn, "__qualname__", repr(self.fn))

    def _check_signature(self, signature: _Signature) -> None:
        if signature != self._signature:
            assert self._signature is not None
            raise JitError(f"TinyJit function {self._name} was captured for inputs [{self._signature.describe()}] "
                           f"and now gets [{signature.describe()}]; a replay runs the captured kernels, which only "
                           f"fit the captured shapes and dtypes. Call .reset() to capture again, or use a separate "
                           f"TinyJit for each shape (or a symbolic Variable for a changing dimension)")

    # ---- capture ----
    def _finish_capture(self, records: list[tuple[ScheduleItem, Runner | None]], inputs: list[Buffer],
                        var_vals: dict[str, int], out: Any) -> None:
        slot_of = {id(b.storage): i for i, b in enumerate(inputs)}
        self._recorded = []
        for si, runner in records:
            slots = [(pos, slot_of[id(b.storage)]) for pos, b in enumerate(si.bufs) if id(b.storage) in slot_of]
            self._recorded.append(_Recorded(si, runner, slots, bool(si.var_vals)))
        self._var_vals = dict(var_vals)
        self._outputs = _template(out, slot_of)
        self._launches = [self._prepare(r, r.item.bufs, r.item.var_vals) for r in self._recorded]
        self._runs, self._placed = _run_together(self._launches)
        self._dynamic = [i for i, r in enumerate(self._recorded) if r.input_slots or r.takes_vars]
        runners = [r.runner for r in self._recorded if r.runner is not None]
        self._replay_ops = sum(r.estimated_ops for r in runners)
        self._replay_mem = sum(r.estimated_bytes for r in runners)
        if DEBUG >= 1:
            print(f"TinyJit {self._name}: captured {len(self._recorded)} launches "
                  f"({len(self._dynamic)} take inputs or variables)", file=sys.stderr)

    @staticmethod
    def _prepare(rec: _Recorded, bufs: list[Buffer], var_vals: dict[str, int]) -> Callable[[], Any]:
        if rec.runner is None:
            return functools.partial(engine_realize.copy_between, bufs[0], bufs[1])
        for b in bufs:
            b.ensure_allocated()
        prepare = getattr(rec.runner, "prepare", None)
        if prepare is not None:
            return prepare(bufs, var_vals)
        return functools.partial(rec.runner, bufs, var_vals)

    # ---- replay ----
    def _replay_profiled(self, launches: list[Callable[[], Any]]) -> None:
        """PROFILE=1: each launch recorded. A prepared launch has no device timer, so each is timed by the wall
        clock up to its device's synchronize."""
        for rec, launch in zip(self._recorded, launches):
            st = time.perf_counter()
            launch()
            Device[rec.item.device].synchronize()
            elapsed = time.perf_counter() - st
            if rec.runner is None:
                dest, src = rec.item.bufs[0], rec.item.bufs[1]
                profile.record_copy(src.device, dest.device, dest.nbytes, st, elapsed)
            else:
                profile.record_launch(rec.item.device, rec.runner, st, elapsed, "wall", jit=self._name)

    def _repeated(self, args: tuple) -> list[Buffer] | None:
        """The input buffers when `args` are the tensors of the last replay, each still the same realized node (its
        buffer, under the same name: no assign since); else None. Those passed the checks of a call then."""
        assert self._repeat is not None
        nodes, buffers = self._repeat
        if len(args) != len(nodes) or not all(type(a) is Tensor and a.uop is r() for a, r in zip(args, nodes)):
            return None
        out = [b for r in buffers if (b := r()) is not None]
        return out if JIT and len(out) == len(buffers) else None

    def _built_for_these(self, inputs: list[Buffer], values: dict[str, int]) -> bool:
        """Whether the dynamic launches were last built for the memory of these input buffers (the same storage
        objects, alive) and these variable values."""
        if self._built_for is None:
            return False
        refs, built_values = self._built_for
        return len(refs) == len(inputs) and all(r() is b.storage for r, b in zip(refs, inputs)) \
            and built_values == values

    def _replay(self, inputs: list[Buffer], var_vals: dict[str, int], repeated: bool = False) -> R:
        """Launch the captured kernels on `inputs`. `repeated`: they are the last replay's, so the launches were
        built for them (the last replay built them, and any other call since would have ended the repeat)."""
        for held in self._state:
            if (t := held.tensor()) is not None and t.uop is not held.node:
                # assigned a new value outside the function (a checkpoint loaded, say): the kernels read the state
                # from the captured buffer, so the new value goes there
                for old, new in zip(held.buffers, _buffers_of(t)):
                    _copy_into(old, new, old.device)
        values = {**self._var_vals, **var_vals}
        launches = self._launches
        if self._dynamic and not repeated and not self._built_for_these(inputs, values):
            regroup = False
            for i in self._dynamic:
                rec = self._recorded[i]
                bufs = list(rec.item.bufs)
                for pos, slot in rec.input_slots:
                    bufs[pos] = inputs[slot]
                launches[i] = self._prepare(rec, bufs, {name: values[name] for name in rec.item.var_vals})
                at, within = self._placed[i]
                if within is None and getattr(launches[i], "run_together", None) is None:
                    self._runs[at] = launches[i]
                elif within is None or not self._runs[at].replace(within, launches[i]):  # type: ignore[attr-defined]
                    regroup = True
            if regroup:
                self._runs, self._placed = _run_together(launches)
            self._built_for = ([weakref.ref(b.storage) for b in inputs], values)
        if DEBUG >= 1:
            print(f"TinyJit {self._name}: replaying {len(launches)} launches", file=sys.stderr)
        if PROFILE:
            self._replay_profiled(launches)
        elif DEBUG >= 2:  # per-launch wall time (including the Python call), as run_schedule prints it
            for rec, launch in zip(self._recorded, launches):
                st = time.perf_counter()
                launch()
                name = rec.runner.display_name if rec.runner is not None else "copy"
                print(f"  {rec.item.device} {name:<40} {(time.perf_counter() - st) * 1e6:9.2f} us  (replay)",
                      file=sys.stderr)
        else:
            for run in self._runs:
                run()
        GlobalCounters.count_launches(len(launches), self._replay_ops, self._replay_mem)
        for held in self._state:
            if (t := held.tensor()) is not None:  # a new name for the new contents, as realize() gives
                t.uop = held.node = _fresh_view(held.buffers, t, held.axis)
        return _fill(self._outputs, inputs, values)  # type: ignore[no-any-return]


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


# ---- model state ----

@dataclass(eq=False)
class _StateSlot:
    """A tensor the function assigns, the buffer its kernels read it from, and the node a replay last gave it
    (another node means it was assigned outside the function since: load_state_dict, a manual assign)."""
    tensor: weakref.ref[Tensor]
    buffers: list[Buffer]  # one per device for a tensor on several devices
    axis: int | None  # and the axis it is split along
    node: UOp


def _old_buffers(old: UOp) -> list[Buffer] | None:
    view = realized_views.get(old)
    return realized_buffers(view if view is not None else old)


def _state_tensors(state: RunningJit) -> list[tuple[Tensor, list[Buffer]]]:
    """Tensors assigned during the call that held a buffer (one per device) before: model state, now written back
    into it."""
    out = []
    for t, old in state.assigned.values():
        bufs = _old_buffers(old)
        if bufs is not None and all(b.dtype == t.dtype for b in bufs) and \
                (isinstance(t.device, tuple) or bufs[0].size == t.numel()):
            out.append((t, bufs))
    return out


def _write_back_state(state: RunningJit) -> list[tuple[ScheduleItem, Runner | None]]:
    """Copy each state tensor's new value into the buffer it held before the call, and point the tensor there.
    Replays read the state from those buffers, so they must hold the newest value after every replay."""
    records: list[tuple[ScheduleItem, Runner | None]] = []
    for t, olds in _state_tensors(state):
        news = _buffers_of(t)
        if [b.size for b in news] != [b.size for b in olds]:
            raise JitError(f"TinyJit function {state.name} gave a tensor on {t.device} a new placement (its shards "
                           f"changed size); a replay writes the new value into the old buffers, so keep the sharding")
        if all(new.storage is old.storage for new, old in zip(news, olds)):
            continue
        records += [_copy_into(old, new, old.device) for old, new in zip(olds, news) if new.storage is not old.storage]
        t.uop = _fresh_view(olds, t, _axis(t))
    return records


def _axis(t: Tensor) -> int | None:
    """The axis a realized tensor on several devices is split along (None: replicated, or on one device)."""
    view = realized_views.get(t.uop)
    node = view if view is not None else t.uop
    return node.arg if node.op is Ops.MULTI else None


def _fresh_view(bufs: list[Buffer], t: Tensor, axis: int | None) -> UOp:
    """t's value over new Buffer objects naming the memory of `bufs` (one per device for a multi-device t)."""
    fresh = [Buffer(b.device, b.size, b.dtype, base=b) for b in bufs]
    return view_of_buffers(fresh, t.shape, axis, isinstance(t.device, tuple))


def _copy_into(dst: Buffer, src: Buffer, device: str) -> tuple[ScheduleItem, Runner]:
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

def _buffers_of(t: Tensor) -> list[Buffer]:
    """The buffer holding t's value, realized first if need be; one per device for a tensor on several devices."""
    for _ in range(2):
        view = realized_views.get(t.uop)
        if (bufs := realized_buffers(view if view is not None else t.uop)) is not None:
            return bufs
        t.realize()
    raise JitError(f"a tensor of shape {t.shape} on {t.device} did not realize into whole buffers")


def _unbound(d: Any) -> Any:
    return d if isinstance(d, int) else unbind(d)[0]


def _bound_values(args: tuple, kwargs: dict, inputs: list[Tensor]) -> dict[str, int]:
    """Values of the Variables bound in the arguments and in the inputs' symbolic shapes."""
    out: dict[str, int] = {}
    roots: list[UOp] = [a for a in (*args, *kwargs.values()) if isinstance(a, UOp)]
    dims: list[Any] = [d for t in inputs for d in t.shape]
    roots += [d for d in dims if isinstance(d, UOp)]
    for root in roots:
        for var, value in unbind(root)[1].items():
            out[var.arg.name] = value
    return out


def _collect_outputs(out: Any) -> list[Tensor]:
    if isinstance(out, Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _collect_outputs(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in _collect_outputs(o)]
    return []


@dataclass(frozen=True)
class _OutputSlot:
    # per device (one for a tensor on one device): the recorded buffer a replay writes the output into, or the
    # number of the input it is, returned as it is
    buffers: tuple[Buffer | None, ...]
    input_indices: tuple[int | None, ...]
    shape: tuple[Any, ...]
    dtype: Any
    device: str | tuple[str, ...]
    requires_grad: bool | None
    axis: int | None  # the axis a tensor on several devices is split along

    #: one device and a shape of ints (no Variable): _fill's quick path; flat: that shape is the buffer's own
    static: bool = field(init=False)
    flat: bool = field(init=False)

    def __post_init__(self) -> None:
        static = not isinstance(self.device, tuple) and all(isinstance(d, int) for d in self.shape)
        first = self.buffers[0]
        object.__setattr__(self, "static", static)
        object.__setattr__(self, "flat", static and first is not None and self.shape == (first.size,))


def _template(out: Any, slot_of: dict[int, int]) -> Any:
    if isinstance(out, Tensor):
        bufs = _buffers_of(out)
        inps = tuple(slot_of.get(id(b.storage)) for b in bufs)
        shape = tuple(d if isinstance(d, int) else _unbound(d) for d in out.shape)
        return _OutputSlot(tuple(None if i is not None else b for b, i in zip(bufs, inps)), inps, shape, out.dtype,
                           out.device, out.requires_grad, _axis(out))
    if isinstance(out, (tuple, list)):
        return type(out)(_template(o, slot_of) for o in out)
    if isinstance(out, dict):
        return {k: _template(v, slot_of) for k, v in out.items()}
    return out


def _returns_inputs(template: Any) -> bool:
    if isinstance(template, _OutputSlot):
        return any(i is not None for i in template.input_indices)
    if isinstance(template, (tuple, list)):
        return any(_returns_inputs(o) for o in template)
    if isinstance(template, dict):
        return any(_returns_inputs(o) for o in template.values())
    return False


def _fill(template: Any, inputs: list[Buffer], values: dict[str, int]) -> Any:
    if type(template) is _OutputSlot:
        # a new Buffer object over the recorded memory for each replay: expressions built on an earlier replay's
        # result (and the values remembered for them) belong to the earlier contents
        if template.static:  # one device, a shape of ints: made on every replay, so without the general path's work
            b = template.buffers[0]
            if b is None:
                b = inputs[template.input_indices[0]]  # type: ignore[index]
            node = buffer_node(Buffer(b.device, b.size, b.dtype, base=b))
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
        if isinstance(template.device, tuple):
            uop = view_of_buffers(fresh, shape, template.axis, multi=True)
        else:
            flat = buffer_view(fresh[0], (fresh[0].size,))
            uop = flat if shape == (fresh[0].size,) else _shaped(flat, shape)
        return Tensor._over(uop, template.device, template.requires_grad)
    if isinstance(template, (tuple, list)):
        return type(template)(_fill(o, inputs, values) for o in template)
    if isinstance(template, dict):
        return {k: _fill(v, inputs, values) for k, v in template.items()}
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
