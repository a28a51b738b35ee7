"""Compile an ONNX model into one file, and run that file elsewhere without the model, onnx or a compiler.

    from tinygrad.onnx import compile_onnx, load_compiled
    compile_onnx("model.onnx", "model.tgprog", {"x": (1, 3, 224, 224)})   # shapes (random data) or arrays
    program = load_compiled("model.tgprog")                                # another process: no onnx needed
    out = program({"x": x})                                                # {output name: Tensor}

`compile_onnx` runs the model under TinyJit on the given inputs (an eager call, a capturing call and a replay
that must give the eager call's bits), and writes the capture (every kernel's compiled program, the weights and
other memory the kernels start from, the launch order, the input and output names, shapes and dtypes, the device)
with the file format of _program_file.py. Outputs the runner knows on the host (constants, shapes) go in as values.
By default the written file is loaded back and run once more, and must give the same bits again.

`load_compiled` checks the file (format version, checksum, device, the versions that wrote it) before unpickling
anything, then hands each compiled program to the device's runtime: no kernel is rendered or compiled. Where a
device's programs are shader source (WebGPU, Metal), its driver builds them at load, as a compile-cache hit would;
nothing else compiles.

A compiled program replays one fixed set of input shapes and dtypes; a model that reads device data on the host
mid-graph (data-dependent shapes) cannot be compiled, and one with random ops draws new numbers on every call
(which is why its files are not checked against the eager call).
"""

from __future__ import annotations

import importlib.metadata
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from tinygrad import Device, Tensor, TinyJit
from tinygrad.dtype import DType, _to_np_dtype
from tinygrad.onnx._base import RANDOM_OPS, Absent, HostRead
from tinygrad.onnx._program_file import (
    FORMAT_VERSION,
    CompiledFileError,
    read_program,
    unpickle_program,
    write_program,
)
from tinygrad.onnx._proto import OnnxError, host_array
from tinygrad.onnx._runner import _NUMPY_NATIVE, OnnxRunner, _writer

#: the distributions whose code a compiled program's pickle is made of: a file is loaded only by the same versions
_PRODUCERS = ("tg-core", "tg-compiler", "tg-nn")

_RANDOM_FLOATS = {"FLOAT": np.float32, "DOUBLE": np.float64, "FLOAT16": np.float16, "BFLOAT16": np.float32}
_RANDOM_INTS = {"INT8": np.int8, "UINT8": np.uint8, "INT16": np.int16, "UINT16": np.uint16, "INT32": np.int32,
                "UINT32": np.uint32, "INT64": np.int64, "UINT64": np.uint64}


def random_input(elem: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Random data for an input of ONNX element type `elem` (its name, "FLOAT"): normal floats, small integers."""
    if elem in _RANDOM_FLOATS:
        return rng.standard_normal(shape).astype(_RANDOM_FLOATS[elem])
    if elem == "BOOL":
        return rng.integers(0, 2, shape).astype(np.bool_)
    if elem in _RANDOM_INTS:
        return rng.integers(0, 10, shape).astype(_RANDOM_INTS[elem])
    raise OnnxError(f"cannot make a random input of type {elem}; give it as an array (--input name=file.npy)")


def _producers() -> dict[str, str]:
    out = {}
    for dist in _PRODUCERS:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


@dataclass(frozen=True)
class CompileResult:
    """What compile_onnx wrote: the file, its size, the device, the launches one call makes, and the outputs of the
    eager call on the capture's inputs (numpy, by output name)."""

    path: str
    nbytes: int
    device: str
    launches: int
    outputs: dict[str, np.ndarray]
    verified: bool  # the written file was loaded back and gave the eager call's bits


def _resolve_inputs(runner: OnnxRunner, inputs: Mapping[str, Any], dims: Mapping[str, int],
                    rng: np.random.Generator) -> dict[str, np.ndarray]:
    """An array per model input: the given array, random data of a given shape, or random data of the model's own
    shape (its symbolic dimensions from `dims`)."""
    spec = runner.input_spec()
    unknown = sorted(set(inputs) - set(spec))
    if unknown:
        raise OnnxError(f"input(s) {unknown} are not inputs of the model; its inputs are {list(spec)}")
    arrays: dict[str, np.ndarray] = {}
    for name, (elem, shape) in spec.items():
        if name not in runner.graph.tensor_inputs:
            raise OnnxError(f"input {name!r} is a {elem}; a compiled program takes numeric tensor inputs only")
        given = inputs.get(name)
        if isinstance(given, (tuple, list)) and all(isinstance(d, (int, np.integer)) for d in given):
            arrays[name] = random_input(elem, tuple(int(d) for d in given), rng)
        elif given is not None:
            arrays[name] = np.asarray(given)
        else:
            concrete = []
            for i, d in enumerate(shape):
                if isinstance(d, int) and d > 0:
                    concrete.append(d)
                elif str(d) in dims:
                    concrete.append(int(dims[str(d)]))
                else:
                    raise OnnxError(f"input {name!r} has a symbolic dimension {d!r} (dimension {i} of "
                                    f"{list(shape)}); a compiled program has fixed shapes, so give its size "
                                    f"(--dim {d}=SIZE, or the whole shape with --input {name}=D0,D1,...)")
            arrays[name] = random_input(elem, tuple(concrete), rng)
    return arrays


def _input_tensor(runner: OnnxRunner, name: str, arr: np.ndarray) -> Tensor:
    """The tensor a compiled program takes for `arr`: the array's own dtype, which must be what the runner takes for
    that input (types numpy lacks, such as bfloat16, as float32: the cast to the model's type is compiled in)."""
    spec = runner.graph.tensor_inputs[name]
    host = spec.np_type if spec.np_type.name in _NUMPY_NATIVE else np.dtype(np.float32)
    if arr.dtype != host:
        raise OnnxError(f"input {name!r} must be an array of {host.name} for this model, got {arr.dtype.name}; "
                        f"convert it with .astype(np.{host.name})")
    return Tensor(host_array(np.ascontiguousarray(arr)), device=runner.device).realize()


def _model_has_random_ops(runner: OnnxRunner) -> bool:
    return any(ctx.op in RANDOM_OPS for ctx, _ in runner.graph.nodes)


def compile_onnx(model: Any, path: str | os.PathLike[str], inputs: Mapping[str, Any] | None = None, *,
                 device: str | None = None, dims: Mapping[str, int] | None = None, seed: int = 0,
                 verify: bool = True, max_tensor_bytes: int | None = None) -> CompileResult:
    """Run `model` (a path, bytes or ModelProto, as OnnxRunner takes) under TinyJit and write the captured program
    to `path` (through a temporary file renamed over it). `inputs` gives, by name, an array or a shape (random data
    of the input's type); inputs left out take the model's static shape (symbolic dimensions from `dims`).
    `verify=True` loads the file back and checks that it reproduces the eager call's outputs bit for bit (models
    with random ops are not checked: each call draws new numbers)."""
    runner = OnnxRunner(model, device=device, max_tensor_bytes=max_tensor_bytes)
    arrays = _resolve_inputs(runner, dict(inputs or {}), dict(dims or {}), np.random.default_rng(seed))
    names = runner.input_names
    tensors = [_input_tensor(runner, n, arrays[n]) for n in names]
    specs = runner.graph.tensor_inputs
    host_outputs: dict[str, np.ndarray] = {}

    def program(*ts: Tensor) -> dict[str, Tensor]:
        values = {n: t if t.dtype == specs[n].want else t.cast(specs[n].want) for n, t in zip(names, ts)}
        res = runner._execute(runner._prepare(values))
        host_outputs.clear()
        for k, v in res.items():
            if isinstance(v, list) or v is Absent or v is None:
                raise OnnxError(f"output {k!r} is a sequence or an optional; a compiled program returns tensors only")
            if isinstance(v, np.ndarray):
                if v.dtype.kind in "OUS":
                    raise OnnxError(f"output {k!r} is a string tensor; a compiled program returns numbers only")
                host_outputs[k] = v  # known on the host (a constant, a shape): stored as a value
        return {k: v for k, v in res.items() if isinstance(v, Tensor)}

    jit = TinyJit(program, prune=True)
    runner._reading_allowed = False  # a read of device data on the host could not be replayed: refuse it
    try:
        eager = _as_numpy(jit(*tensors), host_outputs, runner.output_names)
        jit(*tensors)  # the capture
        replay = _as_numpy(jit(*tensors), host_outputs, runner.output_names)
    except HostRead as e:
        raise OnnxError(f"{e}: this model computes shapes or control flow from device data, which a compiled "
                        f"program (a fixed list of kernels) cannot repeat; run it with OnnxRunner instead") from e
    finally:
        runner._reading_allowed = True
    captured = jit.captured
    if captured is None:
        raise OnnxError("the model launched nothing to capture; a compiled program of it would be empty")
    draws_random = _model_has_random_ops(runner)
    if not draws_random:
        _check_same(eager, replay, "the TinyJit replay", "nothing was written")
    dev = runner.device
    header = {
        "kind": "tinygrad onnx program",
        "device": dev,
        "inputs": [{"name": n, "shape": list(t.shape), "dtype": t.dtype.name} for n, t in zip(names, tensors)],
        "outputs": [{"name": k, "shape": list(v.shape), "dtype": str(v.dtype)} for k, v in eager.items()],
        "producers": _producers(),
        "launches": len(captured.recorded),
    }
    payload = {"jit": jit, "inputs": [(n, tuple(t.shape), t.dtype) for n, t in zip(names, tensors)],
               "outputs": list(runner.output_names),
               "host_outputs": {k: (v.dtype.str, v.shape, v.tobytes()) for k, v in host_outputs.items()}}
    target = os.fspath(path)
    if not verify or draws_random:
        nbytes = write_program(target, header, payload)
        return CompileResult(target, nbytes, dev, len(captured.recorded), eager, False)
    # checked under a name of its own, then renamed over the target: a file that fails the check never replaces it
    folder, base = os.path.split(target)
    unchecked = os.path.join(folder, f".{base}.{os.urandom(4).hex()}.unchecked")
    try:
        nbytes = write_program(unchecked, header, payload)
        again = {k: v.numpy() for k, v in load_compiled(unchecked)({n: arrays[n] for n in names}).items()}
        _check_same(eager, again, "the program loaded from the file", f"{target} was not written")
        if os.path.exists(target):
            os.chmod(unchecked, os.stat(target).st_mode & 0o7777)
        os.replace(unchecked, target)
    finally:
        if os.path.exists(unchecked):
            os.unlink(unchecked)
    return CompileResult(target, nbytes, dev, len(captured.recorded), eager, True)


def _as_numpy(res: dict[str, Tensor], host: dict[str, np.ndarray], order: list[str]) -> dict[str, np.ndarray]:
    return {k: (res[k].numpy() if k in res else host[k].copy()) for k in order}


def _check_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray], what: str, consequence: str) -> None:
    for k, w in want.items():
        g = got[k]
        if g.shape != w.shape or g.dtype != w.dtype or g.tobytes() != w.tobytes():
            raise OnnxError(f"output {k!r} of {what} differs from the eager run's (a bug in the capture or in "
                            f"pickling it: please report it with the model); {consequence}")


class CompiledOnnx:
    """A compiled ONNX program, loaded: call it with inputs by name (numpy arrays, Tensors, Python lists) of the
    compiled shapes and dtypes; returns {output name: Tensor}. Outputs live in memory the next call writes: keep a
    result past the next call with `.numpy()` or `.clone().realize()` (reading a stale one raises)."""

    def __init__(self, path: str, header: dict[str, Any], payload: dict[str, Any]):
        self.path = path
        self.device: str = header["device"]
        self.launches: int = header["launches"]
        self._jit: TinyJit = payload["jit"]
        self._inputs: list[tuple[str, tuple[int, ...], DType]] = payload["inputs"]
        self.output_names: list[str] = payload["outputs"]
        self._host: dict[str, np.ndarray] = {
            k: np.frombuffer(data, dtype=np.dtype(dt)).reshape(shape).copy()
            for k, (dt, shape, data) in payload["host_outputs"].items()}
        #: one kept tensor per input: numpy inputs are copied into it, so a call makes no tensor (as OnnxRunner's
        #: staged calls), and the replay's launches stay built for its memory
        self._staging: dict[str, Tensor] = {}
        self._writers: dict[str, Any] = {}

    @property
    def input_names(self) -> list[str]:
        return [n for n, _, _ in self._inputs]

    def input_spec(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Each input's shape and the numpy dtype of the arrays it takes."""
        return {n: (shape, np.dtype(_to_np_dtype(dt))) for n, shape, dt in self._inputs}

    def _staged(self, name: str, shape: tuple[int, ...], dt: DType) -> tuple[Tensor, Any]:
        if name not in self._staging:
            t = Tensor.empty(*shape, dtype=dt, device=self.device).realize()
            self._staging[name], self._writers[name] = t, _writer(t)
        return self._staging[name], self._writers[name]

    def __call__(self, inputs: Mapping[str, Any] | None = None, **kw_inputs: Any) -> dict[str, Tensor]:
        given = {**(inputs or {}), **kw_inputs}
        unknown = sorted(set(given) - set(self.input_names))
        missing = [n for n in self.input_names if n not in given]
        if unknown or missing:
            wrong = (f"; unknown: {unknown}" if unknown else "") + (f"; missing: {missing}" if missing else "")
            raise OnnxError(f"the compiled program takes the inputs {self.input_spec_text()}{wrong}")
        args = []
        for name, shape, dt in self._inputs:
            v = given[name]
            if isinstance(v, Tensor):
                if v.shape != shape or v.dtype != dt or v.device != self.device:
                    raise OnnxError(f"input {name!r} must be a {dt.name} tensor of shape {shape} on {self.device} "
                                    f"(the compiled program's), got {v.dtype.name} {v.shape} on {v.device}")
                args.append(v)
                continue
            want = np.dtype(_to_np_dtype(dt))
            arr = np.asarray(v, dtype=want) if isinstance(v, (list, tuple, int, float, bool)) else np.asarray(v)
            if arr.shape != shape or arr.dtype != want:
                raise OnnxError(f"input {name!r} must be an array of {want.name} and shape {shape} (the compiled "
                                f"program's), got {arr.dtype.name} {arr.shape}; compile the model again for other "
                                f"shapes")
            t, write = self._staged(name, shape, dt)
            write(arr)
            args.append(t)
        res = self._jit(*args)
        return {k: res[k] if k in res else Tensor(self._host[k], device=self.device) for k in self.output_names}

    def input_spec_text(self) -> str:
        return ", ".join(f"{n} ({np.dtype(_to_np_dtype(dt)).name} {shape})" for n, shape, dt in self._inputs)

    def __repr__(self) -> str:
        return (f"<CompiledOnnx {self.path!r} on {self.device}: inputs {self.input_spec_text()}; outputs "
                f"{self.output_names}; {self.launches} launches>")


def load_compiled(path: str | os.PathLike[str], device: str | None = None) -> CompiledOnnx:
    """Load a program `compile_onnx` wrote. `device`, when given, must be the device it was compiled for (a compiled
    program holds that device's binaries). Raises CompiledFileError for a file that is not such a program, of
    another format version, damaged or truncated, for a device this process cannot open or whose compiler differs
    from the one that built it, or written by other versions of tinygrad's packages. Load only files you trust."""
    name = os.fspath(path)
    program = read_program(name)
    header = program.header
    dev = header.get("device")
    if header.get("kind") != "tinygrad onnx program" or not isinstance(dev, str):
        raise CompiledFileError(f"{name} is damaged: its header does not describe a compiled ONNX program")
    if device is not None and (asked := _device_name(device)) != dev:
        raise CompiledFileError(f"{name} was compiled for device {dev} and holds its binaries, so it cannot run on "
                                f"{asked}; compile the model again with --device {asked}")
    here, made = _producers(), header.get("producers")
    if made != here:
        raise CompiledFileError(f"{name} was written by {made}, and this process has {here}: a compiled program is "
                                f"loaded only by the versions that wrote it; compile the model again here")
    try:
        Device[dev]
    except Exception as e:  # whatever opening the device raises: it is not usable here
        raise CompiledFileError(f"{name} was compiled for device {dev}, which cannot be opened here "
                                f"({type(e).__name__}: {e}); load it on a machine with that device") from e
    try:
        payload = unpickle_program(program)
    except CompiledFileError:
        raise
    except Exception as e:  # the device refused a binary (another CPU, compiler or driver), or a damaged stream
        raise CompiledFileError(f"{name} could not be loaded: {type(e).__name__}: {e} (for a compiled ONNX "
                                f"program: compile the model again on this machine)") from e
    if not isinstance(payload, dict) or not isinstance(payload.get("jit"), TinyJit):
        raise CompiledFileError(f"{name} is damaged: it does not hold a captured program")
    return CompiledOnnx(name, header, payload)


def _device_name(device: str) -> str:
    try:
        return Device.canonicalize(device)
    except Exception:  # a device unknown here is still not the file's, which is what the caller is told
        return device


def time_calls(program: CompiledOnnx, inputs: Mapping[str, Any], runs: int) -> list[float]:
    """Seconds of each of `runs` calls, each until the device is done."""
    dev = Device[program.device]
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        program(inputs)
        dev.synchronize()
        times.append(time.perf_counter() - t0)
    return times


__all__ = ["FORMAT_VERSION", "CompileResult", "CompiledFileError", "CompiledOnnx", "compile_onnx", "load_compiled",
           "random_input", "time_calls"]
