"""`TinyJit`: capture the kernels a function launches once, then replay them without running Python.

    @TinyJit
    def step(x: Tensor) -> Tensor:
        ...

Call 1 runs the function eagerly (it compiles every kernel). Call 2 runs it again while recording each launched
kernel with its buffers. From call 3 on, the function body does not run: the recorded kernels are launched again
with the buffers of the new input tensors in place of the recorded ones, and the outputs come back as tensors over
the recorded output buffers. A replay gives what running the function would, or raises JitError
(docs/jit.md lists each case):

  * Inputs are the tensors in the arguments, wherever they sit: given directly, in lists, tuples and dicts, or as
    attributes of objects (dataclasses, modules). They are realized before the call. Every call must pass inputs of
    the same shapes, dtypes and devices as the capture (a change raises JitError; `reset()` starts over, or use one
    TinyJit per shape). Symbolic dimensions bound to new values, and Variables passed as arguments, are fine: their
    values travel with each replay.
  * Everything else in the arguments (numbers, strings, flags, None, the length of a list) is the capture's key: a
    call with another key is captured anew, up to MAX_CAPTURES keys; past that the call raises, naming the argument
    that keeps changing (pass it as a Tensor or a Variable instead).
  * Outputs are the tensors it returns (alone, or in a tuple, list or dict). They are realized at the end of each
    call; replays write into the same memory, as tinygrad's do, so reading an output after a later call raises
    JitError: keep a result past the next call with `.clone().realize()` or `.numpy()`. An output passed back as
    an input is copied aside first, so no kernel reads what it writes.
  * State updates use `assign` (optimizers do): the new value is written into the tensor's buffer in place, and
    assigns made inside the function are realized with its outputs. A tensor the function reads or assigns may also
    be assigned outside it between calls (a learning rate, load_state_dict of a checkpoint): the next replay copies
    the new value into the buffer its kernels read. A closure variable, global or object attribute that the
    function read a tensor from and that now names another tensor (`w = Tensor(...)`) raises at the next replay:
    use `w.assign(...)`.
  * No reading of values on the host (`.numpy()`, `.item()`, `.tolist()`) inside it: a replay could not repeat
    that. Random numbers are fine: the generator's state lives in device buffers that the replay advances.
  * One capture at a time: calling a TinyJit function while another capture is in progress raises JitError.

JIT=0 (the environment, or `Context(JIT=0)`) turns capture off: every call runs the function eagerly, as call 1
does, which helps when debugging a jitted step. Calls made that way do not count towards the capture.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from tinygrad.device import Buffer, Runner
from tinygrad.engine import realize as engine_realize
from tinygrad.engine.jit_args import Arguments, describe_change, named_key, take_apart
from tinygrad.engine.jit_capture import Capture, Signature, make_state_slots
from tinygrad.engine.jit_io import (
    buffers_of,
    collect_outputs,
    held_buffers,
    returns_inputs,
    state_tensors,
    unbound,
    write_back_state,
)
from tinygrad.engine.jit_memo import LastCall
from tinygrad.engine.jit_reads import unrealized_reads
from tinygrad.engine.jit_state import JitError, RunningJit, check_not_overwritten, overwritten, running
from tinygrad.engine.schedule import ScheduleItem, base_buffer
from tinygrad.helpers import JIT
from tinygrad.tensor import Tensor
from tinygrad.uop.ops import UOp, unbind

R = TypeVar("R")

__all__ = ["JitError", "TinyJit", "graph_class"]

#: how many keys (values of the non-tensor arguments) one TinyJit captures before a new one raises
MAX_CAPTURES = 8


class TinyJit(Generic[R]):
    """Decorate a function whose work is tensor operations; see the module docstring for the rules."""

    def __init__(self, fn: Callable[..., R], prune: bool = False, optimize: bool = False):
        """`prune=True`: kernels that read neither the inputs nor anything the function writes (work on constant
        weights, say) run once at the capture and are left out of replays; they run again if memory they read is
        assigned a new value. `optimize` is tinygrad's switch for batching a replay's launches, which replays
        here always do where the backend can (run_together); it is accepted and changes nothing."""
        self.fn: Callable[..., R] | None = fn  # None: loaded from a pickle (jit_pickle)
        self.prune = prune
        self.optimize = optimize
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]
        self.reset()

    def reset(self) -> None:
        """Forget the captures: the next call runs eagerly again, the one after that captures."""
        self.cnt = 0
        self._captures: dict[tuple, Capture] = {}
        self._current: Capture | None = None  # the capture of the last call
        self._last: LastCall | None = None  # the last call, when it was a replay (jit_memo)

    @property
    def captured(self) -> Capture | None:
        """The capture the last call replayed or made (None before the capture): its `free_intermediates()` gives
        back the memory that only lives between its launches."""
        return self._current

    @property
    def captured_kernels(self) -> int:
        """How many launches a replay of the last call's capture makes (kernels and copies)."""
        return len(self._current.recorded) if self._current is not None else 0

    @property
    def returns_inputs(self) -> bool:
        """Whether a replay returns one of its inputs as an output (the input's own memory, not a copy)."""
        return self._current is not None and returns_inputs(self._current.outputs)

    def __reduce__(self) -> tuple:
        """pickle: the captures (kernels, the memory they start from, launch order), without the function; see
        docs/jit.md. Load only files you trust: unpickling runs code."""
        from tinygrad.engine.jit_pickle import pickled_jit  # loaded by the first pickle, not by `import tinygrad`

        return _jit_from_pickle, pickled_jit(self)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        # as a method decorator: bind the instance like a function would
        return self if obj is None else functools.partial(self.__call__, obj)

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        last, self._last = self._last, None
        if last is not None and not kwargs and not running and JIT and (same := last.matches(args)) is not None:
            buffers, changed = same
            out = last.capture.replay(buffers, {}, changed)
            last.adopt(args, buffers, changed)
            self._last = last
            return out  # type: ignore[no-any-return]
        if running and running[-1].capturing:
            raise JitError(f"TinyJit function {self._name} was called while {running[-1].name} is being captured; a "
                           f"replay of the outer function could not repeat the inner one. Call it outside, or drop "
                           f"one of the two TinyJit decorators")
        if any(r.owner is self for r in running):
            raise JitError(f"TinyJit function {self._name} called itself; a capture records one call's kernels and "
                           f"cannot contain itself. Recurse in an undecorated helper and decorate the outer call")
        found = take_apart(args, kwargs)
        buffers, memory_pattern, signature = _inputs(found.tensors, found.variables)
        if not JIT:
            return self._run(args, kwargs, found, buffers, None)  # eager; the count stays
        key = (tuple(found.key), memory_pattern)
        if self.cnt >= 2:
            cap = self._captures.get(key)
            if cap is None:
                self._refuse_new_key(args, kwargs)
                return self._run(args, kwargs, found, buffers, self._new_capture(signature, args, kwargs), key)
            cap.check_signature(signature)
            self._current = cap
            out = cap.replay(buffers, found.variables)
            if not kwargs and not found.variables:
                self._last = LastCall.of(cap, args, found, buffers, memory_pattern)
            return out  # type: ignore[no-any-return]
        capture = self._new_capture(signature, args, kwargs) if self.cnt == 1 else None
        out = self._run(args, kwargs, found, buffers, capture, key)
        self.cnt += 1
        return out

    def _new_capture(self, signature: Signature, args: tuple, kwargs: dict) -> Capture:
        return Capture(self._name, signature, named_key(args, kwargs))

    def _refuse_new_key(self, args: tuple, kwargs: dict) -> None:
        if len(self._captures) < MAX_CAPTURES:
            return
        last = self._current.key if self._current is not None else Arguments()
        changed = describe_change(last, named_key(args, kwargs))
        raise JitError(f"TinyJit function {self._name} was called with {len(self._captures) + 1} different values of "
                       f"its non-tensor arguments (now changed: {changed}); each value is "
                       f"baked into a capture of its own, and {MAX_CAPTURES} is the most one TinyJit keeps. Pass a "
                       f"value that changes on every call as a Tensor, or as a Variable "
                       f"(UOp.variable(name, lo, hi).bind(value))")

    def _run(self, args: tuple, kwargs: dict, found: Arguments, buffers: list[Buffer], capture: Capture | None,
             key: tuple | None = None) -> R:
        """Run the function: its outputs and the tensors it assigned are realized, and when `capture` is given, the
        launches are recorded into it."""
        if self.fn is None:
            captured = "; ".join(f"[{c.signature.describe()}]" for c in self._captures.values()) or "none left"
            why = "with JIT=0" if not JIT else "with inputs or non-tensor arguments no capture was made for"
            raise JitError(f"TinyJit function {self._name} was loaded from a pickle, which holds its captured kernels "
                           f"but not the function, and was called {why}; it replays calls like the captured ones "
                           f"(inputs {captured}, the same non-tensor arguments). Pickle it again after capturing "
                           f"this call")
        records: list[tuple[ScheduleItem, Runner | None]] = []
        if capture is not None and (lazy := unrealized_reads(self.fn)):
            Tensor.realize(*lazy)
        state = RunningJit(self._name, capture is not None, self, inputs=frozenset(id(b.storage) for b in buffers))
        running.append(state)
        if capture is not None:
            engine_realize.capture_hooks.append(lambda si, runner: records.append((si, runner)))
        try:
            out = self.fn(*args, **kwargs)
            out_tensors = collect_outputs(out)
            pending = [t for t, _ in state.assigned.values() if base_buffer(t.uop) is None]
            if out_tensors or pending:
                Tensor.realize(*out_tensors, *pending)
        finally:
            running.pop()
            if capture is not None:
                engine_realize.capture_hooks.pop()
        if capture is None:
            return out  # type: ignore[no-any-return]
        assert key is not None
        records += write_back_state(state, records, out_tensors)
        capture.state = make_state_slots(state_tensors(state))
        out = capture.finish(self.fn, records, buffers, found.variables, out, prune=self.prune)
        self._captures[key] = self._current = capture
        return out  # type: ignore[no-any-return]

    @property
    def _name(self) -> str:
        return getattr(self.fn if self.fn is not None else self, "__qualname__", repr(self.fn))


def graph_class(device: Any) -> type | None:
    """tinygrad's: the graph-runner class that a device batches a replay's launches with (the device's `graph`).
    None on every device here: a replay runs consecutive launches of a backend from one native call through the
    backend's `run_together` (docs/jit.md), and no class stands for that."""
    return getattr(device, "graph", None)


def _jit_from_pickle(name: str, prune: bool, captures: list[tuple[tuple, tuple, Capture]],
                     current: int | None) -> TinyJit:
    """TinyJit.__reduce__'s inverse: a jit that only replays, from the fields jit_pickle.pickled_jit took."""
    jit: TinyJit = TinyJit.__new__(TinyJit)
    jit.fn, jit.prune, jit.optimize = None, prune, False  # type: ignore[assignment]
    jit.__qualname__ = jit.__name__ = name  # type: ignore[attr-defined]  # functools.update_wrapper's, for _name
    jit.reset()
    jit._captures = {(key, pattern): cap for key, pattern, cap in captures}
    jit._current = captures[current][2] if current is not None else None
    jit.cnt = 2 if captures else 0
    return jit


def _inputs(tensors: list[Tensor], variables: dict[str, int]) -> tuple[list[Buffer], tuple[tuple[int, ...], ...],
                                                                      Signature]:
    """Realize the inputs; the memory they are read from, each once (two views of one buffer are one input); for each
    tensor which of those its buffers are (one per device: a replay with another pattern needs a capture of its
    own); and their shapes (unbound), dtypes and devices. The values of Variables bound in their shapes go into
    `variables`. An input a later replay wrote over raises."""
    held = [held_buffers(t.uop) for t in tensors]
    if lazy := [t for t, bufs in zip(tensors, held) if bufs is None]:
        Tensor.realize(*lazy)
        held = [bufs if bufs is not None else buffers_of(t) for t, bufs in zip(tensors, held)]
    buffers: list[Buffer] = []
    index: dict[int, int] = {}
    pattern = []
    shapes = []
    for t, bufs in zip(tensors, held):
        assert bufs is not None
        if overwritten:
            check_not_overwritten(bufs)
        slots = []
        for b in bufs:
            storage = b.base if b.base is not None else b
            i = index.get(id(storage))
            if i is None:
                i = index[id(storage)] = len(buffers)
                buffers.append(b)
            slots.append(i)
        pattern.append(tuple(slots))
        shape = t.shape
        if not all(type(d) is int for d in shape):  # symbolic: the Variables' values travel with the replay
            for d in shape:
                if isinstance(d, UOp):
                    variables.update({var.arg.name: val for var, val in unbind(d)[1].items()})
            shape = tuple(map(unbound, shape))
        shapes.append((shape, t.dtype, t.device))
    return buffers, tuple(pattern), Signature(tuple(shapes))
