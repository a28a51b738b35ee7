"""openpilot's compile-and-ship flow: `compile_onnx` / `python -m tinygrad.onnx compile` capture a model into one file,
and another process loads and runs it with neither the model, the onnx package nor a compile step, giving the
runner's outputs bit for bit. Damaged, truncated, foreign and hostile files are refused with errors that say why."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from tinygrad import Device, Tensor  # noqa: E402
from tinygrad.onnx import (  # noqa: E402
    CompiledFileError,
    OnnxError,
    OnnxRunner,
    compile_onnx,
    load_compiled,
)
from tinygrad.onnx._compiled import _producers  # noqa: E402
from tinygrad.onnx._program_file import FORMAT_VERSION, MAGIC, read_header, write_program  # noqa: E402

_RNG = np.random.default_rng(0)


def _model(nodes: list, inputs: list, outputs: list, inits: list) -> Any:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def conv_relu_gemm() -> Any:
    """Conv -> Relu -> Flatten -> Gemm, with a symbolic batch."""
    w = _RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = _RNG.standard_normal(4).astype(np.float32)
    g = _RNG.standard_normal((4 * 6 * 6, 5)).astype(np.float32)
    c = _RNG.standard_normal(5).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("Gemm", ["f", "G", "C"], ["y"])]
    inits = [numpy_helper.from_array(a, n) for a, n in ((w, "W"), (b, "B"), (g, "G"), (c, "C"))]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 6, 6])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 5])], inits)


def two_in_two_out() -> Any:
    """Two inputs (float and int64), outputs computed from each, one known on the host (a shape) and a large weight
    returned as it is (memory no kernel of the program writes)."""
    w = _RNG.standard_normal((4, 5)).astype(np.float32)
    table = _RNG.standard_normal((10, 2)).astype(np.float32)
    big = _RNG.standard_normal((300, 300)).astype(np.float32)  # larger than the runner keeps on the host
    nodes = [helper.make_node("MatMul", ["a", "W"], ["m"]),
             helper.make_node("Sigmoid", ["m"], ["y"]),
             helper.make_node("Gather", ["T", "idx"], ["g"], axis=0),
             helper.make_node("Shape", ["a"], ["shape"]),
             helper.make_node("Identity", ["BIG"], ["big"])]
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(table, "T"), numpy_helper.from_array(big, "BIG")]
    return _model(nodes, [helper.make_tensor_value_info("a", TensorProto.FLOAT, [3, 4]),
                          helper.make_tensor_value_info("idx", TensorProto.INT64, [3])],
                  [helper.make_tensor_value_info(n, t, None) for n, t in
                   (("y", TensorProto.FLOAT), ("g", TensorProto.FLOAT), ("shape", TensorProto.INT64),
                    ("big", TensorProto.FLOAT))], inits)


def _inputs() -> dict[str, dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    return {"conv": {"x": rng.standard_normal((2, 3, 6, 6)).astype(np.float32)},
            "two": {"a": rng.standard_normal((3, 4)).astype(np.float32), "idx": np.array([7, 0, 3], np.int64)}}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Both models compiled (with other data than the one they are run on), and the runner's outputs for that data."""
    folder = tmp_path_factory.mktemp("compiled")
    models = {"conv": conv_relu_gemm(), "two": two_in_two_out()}
    shapes = {"conv": {"x": (2, 3, 6, 6)}, "two": {}}
    results = {k: compile_onnx(m, folder / f"{k}.tgprog", shapes[k], seed=5) for k, m in models.items()}
    runner_out = {k: {n: v.numpy() for n, v in OnnxRunner(m)(_inputs()[k]).items()} for k, m in models.items()}
    return {"folder": folder, "models": models, "results": results, "runner_out": runner_out}


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


# The loading process: `onnx` cannot be imported, and every entry point that renders or compiles a kernel raises.
# One exception is let through and reported: the CPU backend's thread-pool helper, fixed code of the backend that
# every program shares (not the model's), which it builds on first use and keeps in the compile cache.
_LOADER = textwrap.dedent("""
    import sys
    import traceback
    sys.modules["onnx"] = None  # any import of onnx raises ImportError
    import numpy as np
    from tinygrad import Device
    import tinygrad.codegen as codegen
    import tinygrad.runtime.beam_timing as beam_timing
    import tinygrad.runtime.device as runtime_device
    from tinygrad.runtime.compiler import Compiler

    def refuse(*args, **kwargs):
        raise AssertionError("a kernel was rendered or compiled while loading or running a compiled program")

    def guard(original):
        def compile(self, src):
            if any(frame.name.endswith("pool_library") for frame in traceback.extract_stack()):
                print("built the backend's thread-pool helper", file=sys.stderr)
                return original(self, src)
            refuse()
        return compile

    runtime_device.Compiled._program = runtime_device.Compiled._compile = refuse
    codegen.get_program = runtime_device.get_program = beam_timing.get_program = refuse
    for kind in {type(Device[Device.DEFAULT].compiler), Compiler}:
        kind.compile, kind.compile_cached = guard(kind.compile), guard(kind.compile_cached)

    from tinygrad.onnx import load_compiled

    folder = sys.argv[1]
    for name in sys.argv[2:]:
        inputs = dict(np.load(f"{folder}/{name}.in.npz"))
        program = load_compiled(f"{folder}/{name}.tgprog")
        for _ in range(3):  # the first call, and replays with their launches built
            out = {k: v.numpy() for k, v in program(inputs).items()}
        np.savez(f"{folder}/{name}.out.npz", **out)
    assert sys.modules["onnx"] is None and not any(m.startswith("onnx.") for m in sys.modules)
""")


def _run_loader(folder: Path, names: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    script = folder / "loader.py"
    script.write_text(_LOADER)
    # the cache of compiled kernels is empty in the loading process: a hit could hide a compile
    environ = {**os.environ, "DEV": Device.DEFAULT, "TINYGRAD_CACHE_DIR": str(folder / "empty-cache"), **(env or {})}
    return subprocess.run([sys.executable, str(script), str(folder), *names], env=environ, capture_output=True,
                          text=True, timeout=300, cwd=folder)


def test_a_second_process_without_onnx_or_compiling_gives_the_runner_s_bits(compiled: dict[str, Any]) -> None:
    folder = compiled["folder"]
    for name, inputs in _inputs().items():
        np.savez(folder / f"{name}.in.npz", **inputs)
    done = _run_loader(folder, ["conv", "two"])
    assert done.returncode == 0, done.stderr[-4000:]
    for name in ("conv", "two"):
        there = dict(np.load(folder / f"{name}.out.npz"))
        want = compiled["runner_out"][name]
        assert list(there) == list(want)
        for k in want:
            assert _same_bits(there[k], want[k]), (name, k)


def test_the_result_and_header_describe_the_program(compiled: dict[str, Any]) -> None:
    res = compiled["results"]["two"]
    assert res.verified and res.device == Device.DEFAULT and res.launches >= 2
    assert res.nbytes == os.path.getsize(res.path)
    assert list(res.outputs) == ["y", "g", "shape", "big"]
    head = read_header(res.path)
    assert head["device"] == Device.DEFAULT
    assert head["inputs"] == [{"name": "a", "shape": [3, 4], "dtype": "float32"},
                              {"name": "idx", "shape": [3], "dtype": "int64"}]
    assert [o["name"] for o in head["outputs"]] == ["y", "g", "shape", "big"]
    program = load_compiled(res.path)
    assert program.input_names == ["a", "idx"] and program.output_names == ["y", "g", "shape", "big"]
    assert program.input_spec() == {"a": ((3, 4), np.dtype(np.float32)), "idx": ((3,), np.dtype(np.int64))}


def test_the_loaded_program_takes_tensors_and_keywords_and_checks_inputs(compiled: dict[str, Any]) -> None:
    program = load_compiled(compiled["results"]["conv"].path)
    x = _inputs()["conv"]["x"]
    want = compiled["runner_out"]["conv"]["y"]
    assert _same_bits(program(x=Tensor(x)).popitem()[1].numpy(), want)
    assert _same_bits(program({"x": x.tolist()})["y"].numpy(), want)
    with pytest.raises(OnnxError, match=r"input 'x' must be an array of float32 and shape \(2, 3, 6, 6\).*compile the"):
        program({"x": x[:1]})
    with pytest.raises(OnnxError, match=r"float32.*got float64"):
        program({"x": x.astype(np.float64)})
    with pytest.raises(OnnxError, match=r"must be a float32 tensor of shape \(2, 3, 6, 6\)"):
        program({"x": Tensor(x[:1])})
    with pytest.raises(OnnxError, match=r"missing: \['x'\]"):
        program({})
    with pytest.raises(OnnxError, match=r"unknown: \['z'\]"):
        program({"x": x, "z": x})


def test_the_command_line_compiles_and_runs_without_onnx(compiled: dict[str, Any], tmp_path: Path) -> None:
    onnx.save(compiled["models"]["conv"], str(tmp_path / "m.onnx"))
    x = _inputs()["conv"]["x"]
    np.save(tmp_path / "x.npy", x)
    env = {**os.environ, "DEV": Device.DEFAULT}
    done = subprocess.run([sys.executable, "-m", "tinygrad.onnx", "compile", str(tmp_path / "m.onnx"),
                           str(tmp_path / "m.tgprog"), "--input", "x=2,3,6,6"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "output y: shape (2, 5) float32" in done.stdout and "checked bit for bit" in done.stdout
    run = textwrap.dedent("""
        import sys
        sys.modules["onnx"] = None
        from tinygrad.onnx.__main__ import main
        sys.exit(main(sys.argv[1:]))
    """)
    done = subprocess.run([sys.executable, "-c", run, "run", str(tmp_path / "m.tgprog"), "--input",
                           f"x={tmp_path / 'x.npy'}", "--runs", "2", "--save", str(tmp_path / "out")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "median of 2 calls" in done.stdout and "random" not in done.stdout
    assert _same_bits(np.load(tmp_path / "out" / "y.npy"), compiled["runner_out"]["conv"]["y"])
    done = subprocess.run([sys.executable, "-c", run, "run", str(tmp_path / "x.npy")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "is not a compiled ONNX program" in done.stderr


def test_symbolic_dimensions_need_a_size(tmp_path: Path) -> None:
    model = conv_relu_gemm()
    with pytest.raises(OnnxError, match=r"symbolic dimension 'n'.*--dim n=SIZE"):
        compile_onnx(model, tmp_path / "m.tgprog")
    res = compile_onnx(model, tmp_path / "m.tgprog", dims={"n": 1})
    assert res.outputs["y"].shape == (1, 5)
    assert load_compiled(res.path).input_spec()["x"][0] == (1, 3, 6, 6)


def test_a_model_reading_device_data_on_the_host_is_refused_and_the_old_file_kept(tmp_path: Path) -> None:
    nodes = [helper.make_node("NonZero", ["x"], ["nz"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                   [helper.make_tensor_value_info("nz", TensorProto.INT64, None)], [])
    target = tmp_path / "m.tgprog"
    target.write_bytes(b"the old file")
    with pytest.raises(OnnxError, match="cannot repeat"):
        compile_onnx(model, target)
    assert target.read_bytes() == b"the old file"
    assert os.listdir(tmp_path) == ["m.tgprog"]


def test_random_ops_keep_drawing_and_emulated_input_types_take_float32(tmp_path: Path) -> None:
    def one_node(op: str, ins: list[str], et: int, **attrs: Any) -> Any:
        return _model([helper.make_node(op, ins, ["r"], **attrs), helper.make_node("Add", ["x", "r"], ["y"])],
                      [helper.make_tensor_value_info("x", et, [4])], [helper.make_tensor_value_info("y", et, [4])], [])
    x = np.array([1.5, 2, 3, -1], np.float32)
    # a seeded op draws the same numbers on every call, as the runner's; an unseeded one new ones, from generator
    # state that travels in the file. Neither is checked against the eager call after writing
    for attrs in ({"seed": 3.0}, {}):
        model = one_node("RandomUniformLike", ["x"], TensorProto.FLOAT, **attrs)
        res = compile_onnx(model, tmp_path / "r.tgprog")
        assert not res.verified
        program = load_compiled(res.path)
        first, second = (program({"x": x})["y"].numpy() for _ in range(2))
        if attrs:
            assert _same_bits(first, second) and _same_bits(first, OnnxRunner(model)({"x": x})["y"].numpy())
        else:
            assert not np.array_equal(first, second) and ((first >= x) & (first < x + 1)).all()
    # bfloat16, which numpy lacks, is given as float32 and cast in the compiled program, as OnnxRunner does
    model = one_node("Mul", ["x", "x"], TensorProto.BFLOAT16)
    res = compile_onnx(model, tmp_path / "bf.tgprog", {"x": x})
    program = load_compiled(res.path)
    assert res.verified and program.input_spec() == {"x": ((4,), np.dtype(np.float32))}
    assert _same_bits(program({"x": x})["y"].numpy(), OnnxRunner(model)({"x": x})["y"].numpy())
    with pytest.raises(OnnxError, match=r"input 'x' must be an array of float32 for this model, got float64"):
        compile_onnx(model, tmp_path / "bf.tgprog", {"x": x.astype(np.float64)})


# ---- damaged and foreign files ----

def _variant(src: str, dst: Path, edit: Any) -> Path:
    dst.write_bytes(edit(bytearray(Path(src).read_bytes())))
    return dst


_DAMAGE = {
    "truncated": (lambda b: b[:len(b) // 2], "truncated"),
    "truncated in the header": (lambda b: b[:40], "truncated"),
    "empty": (lambda b: b[:0], "not a compiled ONNX program"),
    "one byte short": (lambda b: b[:-1], "truncated"),
    "padded": (lambda b: b + b"\0", "longer than it should be"),
    # a byte of the last weight (the 32 bytes after it are the checksum)
    "a weight byte flipped": (lambda b: b[:-100] + bytes([b[-100] ^ 1]) + b[-99:], "checksum does not match"),
    "something else": (lambda b: bytearray(b"PK\3\4") + b, "not a compiled ONNX program"),
}


@pytest.mark.parametrize("damage", list(_DAMAGE))
def test_damaged_files_are_refused(compiled: dict[str, Any], tmp_path: Path, damage: str) -> None:
    edit, message = _DAMAGE[damage]
    path = _variant(compiled["results"]["conv"].path, tmp_path / "bad.tgprog", edit)
    with pytest.raises(CompiledFileError, match=message):
        load_compiled(path)


def test_another_format_version_is_refused_before_anything_else(compiled: dict[str, Any], tmp_path: Path) -> None:
    def bump(b: bytearray) -> bytearray:
        b[len(MAGIC):len(MAGIC) + 4] = struct.pack("<I", FORMAT_VERSION + 1)
        return b
    path = _variant(compiled["results"]["conv"].path, tmp_path / "v2.tgprog", bump)
    with pytest.raises(CompiledFileError, match=f"format version {FORMAT_VERSION + 1}.*reads version "
                                                f"{FORMAT_VERSION}; compile the model again"):
        load_compiled(path)


def _rewritten(src: str, dst: Path, **changes: Any) -> Path:
    """The program of `src` with header fields changed, written as a valid file (checksum and all)."""
    from tinygrad.onnx._program_file import read_program, unpickle_program

    program = read_program(src)
    header = {k: v for k, v in program.header.items() if k != "sections"}
    write_program(dst, {**header, **changes}, unpickle_program(program))
    return dst


def test_a_program_for_another_device_or_build_is_refused(compiled: dict[str, Any], tmp_path: Path) -> None:
    src = compiled["results"]["conv"].path
    with pytest.raises(CompiledFileError, match=f"compiled for device {Device.DEFAULT} .* cannot run on NOSUCHDEV"):
        load_compiled(src, device="NOSUCHDEV")
    path = _rewritten(src, tmp_path / "dev.tgprog", device="NOSUCHDEV")
    with pytest.raises(CompiledFileError, match="compiled for device NOSUCHDEV, which cannot be opened here"):
        load_compiled(path)
    head = read_header(src)
    path = _rewritten(src, tmp_path / "ver.tgprog", producers={**head["producers"], "tg-core": "0.0.1"})
    with pytest.raises(CompiledFileError, match="loaded only by the versions that wrote it"):
        load_compiled(path)


def test_a_program_whose_compiler_differs_here_is_refused(compiled: dict[str, Any],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # another compiler version, flags or CPU features: the key of the compile cache differs, and the binaries
    # may not run here
    compiler = Device[Device.DEFAULT].compiler
    other = "another compiler, or this one for another CPU"
    if isinstance(getattr(type(compiler), "cache_key", None), property):
        monkeypatch.setattr(type(compiler), "cache_key", property(lambda self: other))
    else:
        monkeypatch.setattr(compiler, "cache_key", other)
    with pytest.raises(CompiledFileError, match=r"ProgramMismatchError.*compile the model again on this machine"):
        load_compiled(compiled["results"]["conv"].path)


def test_a_file_naming_code_outside_tinygrad_does_not_run_it(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Hostile:
        def __reduce__(self) -> tuple:
            return os.system, (f"touch {marker}",)

    header = {"kind": "tinygrad onnx program", "device": Device.DEFAULT, "inputs": [], "outputs": [],
              "launches": 0, "producers": _producers()}
    write_program(tmp_path / "evil.tgprog", header, {"jit": Hostile()})
    with pytest.raises(CompiledFileError, match=r"names (posix|os|nt)\.system"):
        load_compiled(tmp_path / "evil.tgprog")
    assert not marker.exists()


def test_a_damaged_header_is_refused(compiled: dict[str, Any], tmp_path: Path) -> None:
    src = compiled["results"]["conv"].path

    def garble(b: bytearray) -> bytearray:
        start = len(MAGIC) + 8
        b[start:start + 1] = b"]"
        return b
    with pytest.raises(CompiledFileError, match="header is not valid JSON"):
        load_compiled(_variant(src, tmp_path / "h.tgprog", garble))
    head_len = struct.unpack_from("<I", Path(src).read_bytes(), len(MAGIC) + 4)[0]
    assert json.loads(Path(src).read_bytes()[len(MAGIC) + 8:len(MAGIC) + 8 + head_len])["sections"]
