"""What a TinyJit capture runs, read into a plan that a code generator can write out without tinygrad.

The plan is the capture's launches in order, over a table of memory: each distinct storage the launches touch once,
as an input (the caller's data, copied in before a run), a weight (memory some launch reads before any launch
writes it, or first writes only a region of: model parameters, state the function assigns, a KV cache written in
place, results of launches `prune` left out; its bytes go to the weights file) or scratch (written whole before it
is read). A buffer naming a storage's memory is that storage's start (tinygrad's views of a buffer begin where it
begins), so a launch's argument is always a storage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tinygrad.device import Buffer
from tinygrad.dtype import DType
from tinygrad.engine.jit import TinyJit
from tinygrad.engine.jit_capture import Capture
from tinygrad.engine.jit_io import OutputSlot
from tinygrad.engine.jit_pickle import read_first
from tinygrad.uop.ops import UOp


class ExportError(ValueError):
    """A function this exporter cannot write out; the message says what and what to do instead."""


@dataclass
class Storage:
    index: int
    nbytes: int
    dtype: DType
    kind: str  # "input", "weight" or "scratch"
    input_index: int | None = None
    data: bytes | None = None  # a weight's bytes


@dataclass
class Kernel:
    ast: UOp
    storages: list[int]  # the storage of each of the schedule item's buffers
    var_vals: dict[str, int]


@dataclass
class Copy:
    dest: int
    src: int
    nbytes: int


@dataclass
class Port:
    """An input or output: its storage, shape and dtype."""

    storage: int
    shape: tuple[int, ...]
    dtype: DType

    @property
    def nbytes(self) -> int:
        n = self.dtype.itemsize
        for d in self.shape:
            n *= d
        return n


@dataclass
class Plan:
    name: str
    storages: list[Storage] = field(default_factory=list)
    steps: list[Kernel | Copy] = field(default_factory=list)
    inputs: list[Port] = field(default_factory=list)
    outputs: list[Port] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)
    input_names: list[str] = field(default_factory=list)
    device: str = ""
    #: the symbolic Variables the kernels take, with their values at the capture (the exported program's default)
    variables: dict[str, int] = field(default_factory=dict)


def capture_of(jit: Any) -> Capture:
    """The capture a TinyJit's last call made or replayed; a clear error for anything else."""
    if not isinstance(jit, TinyJit):
        raise ExportError(f"export takes a TinyJit-wrapped function, got {type(jit).__name__}; wrap the function "
                          f"with @TinyJit and call it twice with example inputs (the second call captures)")
    cap = jit.captured
    if cap is None:
        raise ExportError(f"TinyJit function {jit._name} has not captured anything yet (the capture is made by its "
                          f"second call); call it twice with example inputs before exporting")
    return cap


def _outputs(template: Any, path: str, out: list[tuple[str, OutputSlot]]) -> None:
    if type(template) is OutputSlot:
        out.append((path or "output", template))
    elif isinstance(template, (tuple, list)):
        for i, t in enumerate(template):
            _outputs(t, f"{path}[{i}]" if path else str(i), out)
    elif isinstance(template, dict):
        for k, t in template.items():
            _outputs(t, f"{path}[{k!r}]" if path else str(k), out)
    # anything else (a Python value the function returned) is not part of the exported outputs


def flat_outputs(out: Any) -> list[Any]:
    """The tensors of a function's result in the order export lists its outputs (nested tuples, lists and dicts
    walked in order)."""
    from tinygrad.tensor import Tensor

    if isinstance(out, Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flat_outputs(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in flat_outputs(o)]
    return []


def _static_shape(shape: tuple[Any, ...], what: str, name: str) -> tuple[int, ...]:
    if not all(isinstance(d, int) for d in shape):
        raise ExportError(f"TinyJit function {name}: {what} has a symbolic shape {shape}; an exported program's "
                          f"inputs and outputs have fixed sizes (a Variable may only appear inside the computation, "
                          f"like the position of a decode step). Capture with that dimension as a plain int")
    return tuple(int(d) for d in shape)


def make_plan(jit: Any, input_names: list[str] | None = None) -> Plan:
    cap = capture_of(jit)
    name = cap.name
    plan = Plan(name)
    n_inputs = len(cap.signature.inputs)
    if input_names is not None and len(input_names) != n_inputs:
        raise ExportError(f"{len(input_names)} input names given for TinyJit function {name}, which takes "
                          f"{n_inputs} input tensors")
    plan.input_names = list(input_names) if input_names is not None else [f"input{i}" for i in range(n_inputs)]
    devices = {dev for _, _, dev in cap.signature.inputs} | {r.item.device for r in cap.recorded}
    if any(isinstance(d, tuple) for d in devices) or len(devices) > 1:
        raise ExportError(f"TinyJit function {name} runs on several devices ({sorted(map(str, devices))}); export "
                          f"writes a program for one device. Capture it with every tensor on one device")
    plan.device = str(next(iter(devices))) if devices else ""
    # Variables the kernels take are values the exported program is given at run time (C: set_var); inputs and
    # outputs whose shapes depend on one are refused below (their sizes would change from run to run)
    plan.variables = dict(sorted(cap.var_vals.items()))
    index: dict[int, int] = {}

    def storage(b: Buffer, kind: str, input_index: int | None = None) -> int:
        s = b.storage
        i = index.get(id(s))
        if i is None:
            i = index[id(s)] = len(plan.storages)
            plan.storages.append(Storage(i, s.nbytes, s.dtype, kind, input_index))
        return i

    # each input tensor must be memory of its own (the jit numbers memory, not tensors: two views of one buffer
    # are one input to it), so that the exported program can take each as a separate array
    pattern = next((key[1] for key, c in jit._captures.items() if c is cap), None)
    if pattern is not None and tuple(pattern) != tuple((i,) for i in range(n_inputs)):
        raise ExportError(f"TinyJit function {name} was captured with input tensors that share memory (the same "
                          f"tensor twice, or views of one buffer); the exported program takes each input as an "
                          f"array of its own. Pass distinct tensors (x.contiguous().realize() for a view)")
    # the inputs first, in the function's order, from the buffers the launches take them as
    input_buffers: dict[int, Buffer] = {}
    for r in cap.recorded:
        for pos, slot in r.input_slots:
            input_buffers.setdefault(slot, r.item.bufs[pos])
    input_of: dict[int, int] = {}
    for slot, (shape, dtype, _dev) in enumerate(cap.signature.inputs):
        shp = _static_shape(shape, f"input {slot}", name)
        b = input_buffers.get(slot)
        st = len(plan.storages)
        nbytes = dtype.itemsize
        for d in shp:
            nbytes *= d
        plan.storages.append(Storage(st, nbytes, dtype, "input", slot))
        if b is not None:
            if b.storage.nbytes != nbytes:
                raise ExportError(f"TinyJit function {name}: input {slot} ({shp}, {dtype.name}) was read from a "
                                  f"buffer of {b.storage.nbytes} bytes, a view of larger memory; pass a contiguous "
                                  f"tensor (x.contiguous().realize()) when capturing")
            index[id(b.storage)] = st
        input_of[slot] = st
        plan.inputs.append(Port(st, shp, dtype))
    first_read = read_first(cap)
    for i, r in enumerate(cap.recorded):
        given = dict(r.input_slots)
        refs = []
        for pos, b in enumerate(r.item.bufs):
            if pos in given:
                refs.append(input_of[given[pos]])
            else:
                refs.append(storage(b, "weight" if id(b.storage) in first_read else "scratch"))
        if r.runner is None:
            dest, src = refs[0], refs[1]
            plan.steps.append(Copy(dest, src, min(r.item.bufs[0].nbytes, r.item.bufs[1].nbytes)))
        elif hasattr(r.runner, "spec"):  # a compiled kernel (its ProgramSpec): re-rendered from its AST
            plan.steps.append(Kernel(r.item.ast, refs, dict(r.item.var_vals)))
        else:
            raise ExportError(f"TinyJit function {name}: launch {i} runs a {type(r.runner).__name__} on "
                              f"{r.item.device}, which export cannot write out (only compiled kernels and copies)")
    for s in plan.storages:
        if s.kind == "weight":
            b = next(b.storage for r in cap.recorded for b in r.item.bufs if index.get(id(b.storage)) == s.index)
            data = bytearray(b.nbytes)
            b.copyout(memoryview(data))
            s.data = bytes(data)
    slots: list[tuple[str, OutputSlot]] = []
    _outputs(cap.outputs, "", slots)
    if not slots:
        raise ExportError(f"TinyJit function {name} returns no tensor; export needs the function to return the "
                          f"tensor(s) it computes")
    for path, o in slots:
        shp = _static_shape(o.shape, f"output {path}", name)
        if o.input_indices[0] is not None:
            st = input_of[o.input_indices[0]]
        else:
            b = o.buffers[0]
            assert b is not None
            if id(b.storage) not in index:  # an output no launch touches: a weight returned as it is
                st = storage(b, "weight")
                data = bytearray(b.storage.nbytes)
                b.storage.copyout(memoryview(data))
                plan.storages[st].data = bytes(data)
            else:
                st = index[id(b.storage)]
        out = Port(st, shp, o.dtype)
        if out.nbytes > plan.storages[st].nbytes:
            raise ExportError(f"TinyJit function {name}: output {path} ({shp}, {o.dtype.name}) is larger than the "
                              f"memory it is read from; this capture cannot be exported")
        plan.outputs.append(out)
        plan.output_names.append(path)
    return plan


__all__ = ["Copy", "ExportError", "Kernel", "Plan", "Storage", "capture_of", "flat_outputs", "make_plan"]
