"""tinygrad.export to C: models exported, built with the system C compiler, run as a separate process and compared
with the Python run; and what the exporter and the exported program refuse."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest
from tinygrad import Tensor, TinyJit
from tinygrad.export import ExportError, export_c

sys.path.insert(0, os.path.dirname(__file__))
from export_models import MODELS, capture, make_mlp, tiny_llama

CC = next((p for c in ("cc", "gcc", "clang") if (p := shutil.which(c)) is not None), None)
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler (cc, gcc or clang) on PATH to build the exported C")
TESTS = pathlib.Path(__file__).parent


def build(out: pathlib.Path, flags: tuple[str, ...] = ("-O2",)) -> pathlib.Path:
    """`cc -O2 -c net.c` (the interface promised), then the driver linked with -lm only."""
    assert CC is not None
    subprocess.run([CC, *flags, "-c", "net.c", "-o", "net.o"], cwd=out, check=True, capture_output=True)
    subprocess.run([CC, *flags, "net_main.c", "net.o", "-lm", "-o", "net"], cwd=out, check=True, capture_output=True)
    return out / "net"


def run_exported(out: pathlib.Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
    manifest = json.loads((out / "net.json").read_text())
    (out / "inputs.raw").write_bytes(b"".join(np.ascontiguousarray(x).tobytes() for x in inputs))
    subprocess.run([str(out / "net"), "net.bin", "inputs.raw", "outputs.raw"], cwd=out, check=True,
                   capture_output=True, timeout=120)
    raw, outs, at = (out / "outputs.raw").read_bytes(), [], 0
    for o in manifest["outputs"]:
        outs.append(np.frombuffer(raw[at:at + o["nbytes"]], dtype=o["dtype"]).reshape(o["shape"]))
        at += o["nbytes"]
    assert at == len(raw)
    return outs


@needs_cc
@pytest.mark.parametrize("name", ["mnist", "resnet", "llama"])
def test_model_in_c_matches_python(name: str, tmp_path: pathlib.Path) -> None:
    """Captured on the default CPU path and re-rendered as C kernels: other kernels than the ones Python ran when
    that path is LLVM, so the outputs agree within float tolerance (bit-identity: the test below)."""
    fn, inputs = MODELS[name]()
    expected = capture(fn, inputs)
    manifest = export_c(fn, str(tmp_path))
    assert [tuple(o["shape"]) for o in manifest["outputs"]] == [e.shape for e in expected]
    build(tmp_path)
    got = run_exported(tmp_path, inputs)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)
    # a second process run on other inputs agrees with Python's on those too (nothing baked from the capture)
    other = [x[::-1].copy() if x.dtype.kind == "f" else (x + 1) % 64 for x in inputs]
    expected2 = capture(fn, other)
    for g, e in zip(run_exported(tmp_path, other), expected2):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from tinygrad import Tensor
from export_models import MODELS
fn, arrays = MODELS[{name!r}]()
model = fn
example_inputs = [Tensor(a) for a in arrays]
"""


@needs_cc
@pytest.mark.parametrize("name", ["mnist", "llama"])
def test_cli_on_c_path_is_bit_identical(name: str, tmp_path: pathlib.Path) -> None:
    """`python -m tinygrad.export` on a script, captured on the CPU's C path: the exported kernels are the ones the
    Python run compiled, and built with the backend's own compiler and flags they give the same bits."""
    from tg_backend_cpu.compiler import CCompiler, find_c_compiler

    path, _ = find_c_compiler()
    if path is None:
        pytest.skip("the CPU backend finds no C compiler for its C path (clang or gcc), so no C-path capture")
    script = tmp_path / "model.py"
    script.write_text(SCRIPT.format(tests=str(TESTS), name=name))
    out = tmp_path / "out"
    env = {**os.environ, "CPU_COMPILER": "clang" if "clang" in os.path.basename(path) else "gcc"}
    env.pop("DEV", None)
    r = subprocess.run([sys.executable, "-m", "tinygrad.export", str(script), "--out", str(out), "--save-io"],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "wrote c export" in r.stdout
    flags = [f for f in CCompiler().flags if f not in ("-shared", "-fPIC", "-x", "c", "-w")]
    subprocess.run([path, *flags, "-c", "net.c", "-o", "net.o"], cwd=out, check=True, capture_output=True)
    subprocess.run([path, *flags, "net_main.c", "net.o", "-lm", "-o", "net"], cwd=out, check=True,
                   capture_output=True)
    subprocess.run(["./net", "net.bin", "net_inputs.raw", "got.raw"], cwd=out, check=True, capture_output=True)
    assert (out / "got.raw").read_bytes() == (out / "net_expected.raw").read_bytes()


def test_refuses_a_jit_that_has_not_captured(tmp_path: pathlib.Path) -> None:
    fn, inputs = make_mlp()
    with pytest.raises(ExportError, match="call it twice"):
        export_c(fn, str(tmp_path))
    fn(Tensor(inputs[0]))  # one call runs eagerly: still nothing captured
    with pytest.raises(ExportError, match="has not captured"):
        export_c(fn, str(tmp_path))
    with pytest.raises(ExportError, match="TinyJit-wrapped"):
        export_c(lambda x: x, str(tmp_path))
    assert not list(tmp_path.iterdir())


@needs_cc
def test_symbolic_variable_is_set_at_run_time(tmp_path: pathlib.Path) -> None:
    """A Variable inside the computation (not in an input's or output's shape) becomes a value the program takes:
    the capture's until `net_set_var` (the driver's NAME=VALUE) sets another in its range."""
    from tinygrad import Variable

    fn = TinyJit(lambda a, n: (a.shrink(((0, n),)) * 2).sum())
    x = np.arange(8, dtype=np.float32)
    v = Variable("n", 1, 8)
    for i in (3, 4, 5):
        fn(Tensor(x), v.bind(i))
    manifest = export_c(fn, str(tmp_path))
    assert manifest["variables"] == [{"name": "n", "min": 1, "max": 8, "captured": 4}]
    build(tmp_path)
    (tmp_path / "in.raw").write_bytes(x.tobytes())
    for args, want in (((), 12.0), (("n=6",), 30.0), (("n=1",), 0.0), (("n=8",), 56.0)):
        subprocess.run(["./net", "net.bin", "in.raw", "out.raw", "1", *args], cwd=tmp_path, check=True)
        assert np.frombuffer((tmp_path / "out.raw").read_bytes(), np.float32).tolist() == [want]
        assert fn(Tensor(x), v.bind(int(args[0][2:]) if args else 4)).item() == want
    for bad in ("n=9", "n=0", "m=3"):
        r = subprocess.run(["./net", "net.bin", "in.raw", "out.raw", bad], cwd=tmp_path, capture_output=True,
                           text=True)
        assert r.returncode == 1 and "no such Variable, or a value out of its range" in r.stderr


def test_refuses_a_symbolic_input_shape(tmp_path: pathlib.Path) -> None:
    from tinygrad import Variable

    fn = TinyJit(lambda a: (a * 2).contiguous())
    v = Variable("n", 1, 8)
    base = Tensor(np.arange(8, dtype=np.float32)).realize()
    for i in (3, 4, 5):
        fn(base.shrink(((0, v.bind(i)),)).contiguous())
    with pytest.raises(ExportError, match="symbolic shape"):
        export_c(fn, str(tmp_path))


DECODE = r"""
#include <stdio.h>
#include <stdlib.h>
#include "net.h"
/* decode: for each (position, token) pair of argv, set start_pos, run, append the logits to the output file */
int main(int argc, char **argv) {
  static float logits[NET_OUTPUT0_NUMEL];
  int token;
  const void *inputs[] = {&token};
  void *outputs[] = {logits};
  if (net_init("net.bin") != NET_OK) return 1;
  FILE *f = fopen("decode.raw", "wb");
  for (int i = 1; i + 1 < argc; i += 2) {
    token = atoi(argv[i + 1]);
    if (net_set_var("start_pos", atoll(argv[i])) != NET_OK || net_run(inputs, outputs) != NET_OK) return 1;
    fwrite(logits, sizeof logits, 1, f);
  }
  fclose(f);
  return 0;
}
"""


@needs_cc
def test_llama_decode_step_with_a_symbolic_position(tmp_path: pathlib.Path) -> None:
    """The tiny LLaMA's one-token decode step, its position a Variable: exported after three steps, the C program
    goes on from the KV cache it holds (state the step assigns) and gives the logits Python gives for the next
    steps."""
    from tinygrad import Variable

    model = tiny_llama()
    step = TinyJit(lambda tok, pos: model(tok, pos))
    pos = Variable("start_pos", 0, 15)
    tokens = [5, 9, 2, 33, 17, 60]
    for i in range(3):
        step(Tensor([[tokens[i]]], dtype="int32"), pos.bind(i))
    export_c(step, str(tmp_path))
    expected = [step(Tensor([[tokens[i]]], dtype="int32"), pos.bind(i)).numpy().ravel() for i in range(3, 6)]
    (tmp_path / "decode.c").write_text(DECODE)
    assert CC is not None
    subprocess.run([CC, "-O2", "decode.c", "net.c", "-lm", "-o", "decode"], cwd=tmp_path, check=True,
                   capture_output=True)
    subprocess.run(["./decode", *(str(a) for i in range(3, 6) for a in (i, tokens[i]))], cwd=tmp_path, check=True)
    got = np.frombuffer((tmp_path / "decode.raw").read_bytes(), np.float32).reshape(3, -1)
    np.testing.assert_allclose(got, np.stack(expected), rtol=1e-4, atol=1e-5)


def test_refuses_a_bad_prefix(tmp_path: pathlib.Path) -> None:
    fn, inputs = make_mlp()
    capture(fn, inputs)
    with pytest.raises(ExportError, match="not a C identifier"):
        export_c(fn, str(tmp_path), prefix="1net")


HOSTILE = r"""
#include <stdio.h>
#include "net.h"
int main(int argc, char **argv) {
  float in[NET_INPUT0_NUMEL] = {0}, out[NET_OUTPUT0_NUMEL];
  const void *inputs[] = {in};
  void *outputs[] = {out};
  printf("%d ", net_run(inputs, outputs));  /* before init */
  for (int i = 1; i < argc; i++) printf("%d ", net_init(argv[i]));
  printf("%d\n", net_run(inputs, outputs));  /* after the last init */
  net_free();
  return 0;
}
"""


@needs_cc
def test_wrong_weights_files_are_refused(tmp_path: pathlib.Path) -> None:
    fn, inputs = make_mlp()
    capture(fn, inputs)
    export_c(fn, str(tmp_path))
    other, other_inputs = MODELS["resnet"]()
    capture(other, other_inputs)
    export_c(other, str(tmp_path / "other"))
    good = (tmp_path / "net.bin").read_bytes()
    cases = {
        "missing.bin": None,
        "truncated.bin": good[:-1],
        "header_only.bin": good[:32],
        "short.bin": good[:5],
        "longer.bin": good + b"\0" * 64,
        "magic.bin": b"NOTWEIGH" + good[8:],
        "version.bin": good[:8] + struct.pack("<I", 99) + good[12:],
        "count.bin": good[:12] + struct.pack("<I", 1000) + good[16:],
        "payload.bin": good[:16] + struct.pack("<Q", 1 << 60) + good[24:],
        "other.bin": (tmp_path / "other" / "net.bin").read_bytes(),
        "empty.bin": b"",
        "good.bin": good,
    }
    for name, data in cases.items():
        if data is not None:
            (tmp_path / name).write_bytes(data)
    (tmp_path / "hostile.c").write_text(HOSTILE)
    assert CC is not None
    # under AddressSanitizer where the compiler has it: no read or write out of bounds on any of the files
    sanitized = subprocess.run([CC, "-O1", "-g", "-fsanitize=address", "hostile.c", "net.c", "-lm", "-o", "hostile"],
                               cwd=tmp_path, capture_output=True)
    if sanitized.returncode != 0:
        subprocess.run([CC, "-O2", "hostile.c", "net.c", "-lm", "-o", "hostile"], cwd=tmp_path, check=True,
                       capture_output=True)
    r = subprocess.run(["./hostile", *cases], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    codes = [int(c) for c in r.stdout.split()]
    h = (tmp_path / "net.h").read_text()
    code = {k: int(v) for k, v in re.findall(r"#define (NET_\w+) \((-?\d+)\)", h)}
    expected = [code["NET_ERR_NOT_INITIALIZED"], code["NET_ERR_OPEN"], code["NET_ERR_SIZE"], code["NET_ERR_SIZE"],
                code["NET_ERR_FORMAT"], code["NET_ERR_SIZE"], code["NET_ERR_FORMAT"], code["NET_ERR_FORMAT"],
                code["NET_ERR_MODEL"], code["NET_ERR_MODEL"], code["NET_ERR_MODEL"], code["NET_ERR_FORMAT"], 0, 0]
    assert codes == expected, dict(zip(["run before init", *cases, "run"], codes))


@needs_cc
def test_two_models_link_into_one_program(tmp_path: pathlib.Path) -> None:
    """Kernels are static and the rest carries the prefix: two exports build into one program."""
    a, ia = make_mlp(0)
    capture(a, ia)
    export_c(a, str(tmp_path), prefix="first")
    b, ib = MODELS["resnet"]()
    capture(b, ib)
    export_c(b, str(tmp_path), prefix="second")
    (tmp_path / "both.c").write_text('#include "first.h"\n#include "second.h"\nint main(void) {\n'
                                     '  return first_init("first.bin") | second_init("second.bin");\n}\n')
    assert CC is not None
    subprocess.run([CC, "-O2", "both.c", "first.c", "second.c", "-lm", "-o", "both"], cwd=tmp_path, check=True,
                   capture_output=True)
    assert subprocess.run(["./both"], cwd=tmp_path).returncode == 0


def _tiny_onnx(path: pathlib.Path) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(rng.standard_normal((4 * 6 * 6, 5)).astype(np.float32), "fc")
    shape = numpy_helper.from_array(np.array([0, -1], dtype=np.int64), "shape")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["f"]), helper.make_node("MatMul", ["f", "fc"], ["m"]),
             helper.make_node("Softmax", ["m"], ["y"], axis=-1)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 5])
    graph = helper.make_graph(nodes, "tiny", [x], [y], [w, fc, shape])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


@needs_cc
def test_cli_on_an_onnx_file(tmp_path: pathlib.Path) -> None:
    """An ONNX file through OnnxRunner under TinyJit, its symbolic batch given with --dim; the C program's outputs
    on the saved inputs equal the Python run's within float tolerance (captured on the default CPU path)."""
    _tiny_onnx(tmp_path / "tiny.onnx")
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "tinygrad.export", str(tmp_path / "tiny.onnx"), "--out", str(out),
                        "--dim", "batch=3", "--save-io"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "input  x float[3, 3, 8, 8]" in r.stdout.replace("float32", "float")
    manifest = json.loads((out / "net.json").read_text())
    assert manifest["inputs"][0]["name"] == "x" and manifest["outputs"][0]["shape"] == [3, 5]
    build(out)
    subprocess.run(["./net", "net.bin", "net_inputs.raw", "got.raw"], cwd=out, check=True, capture_output=True)
    got = np.frombuffer((out / "got.raw").read_bytes(), np.float32)
    np.testing.assert_allclose(got, np.frombuffer((out / "net_expected.raw").read_bytes(), np.float32),
                               rtol=1e-5, atol=1e-6)


def test_cli_explains_a_script_without_the_names(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "empty.py"
    script.write_text("x = 1\n")
    r = subprocess.run([sys.executable, "-m", "tinygrad.export", str(script), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    assert "defines no model and no example_inputs" in r.stderr
    r = subprocess.run([sys.executable, "-m", "tinygrad.export", str(tmp_path / "missing.py")], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 2 and "no such file" in r.stderr


@needs_cc
def test_outputs_state_and_pruned_launches(tmp_path: pathlib.Path) -> None:
    """A dict of outputs (one of them an input returned as it is), state the function assigns (continued from its
    value at the export), and launches `prune` left out of replays (their results go in the weights file)."""
    rng = np.random.default_rng(5)
    w = Tensor(rng.standard_normal((6, 3)).astype(np.float32)).realize()
    counter = Tensor.zeros(1).contiguous().realize()

    def f(x: Tensor) -> dict[str, Tensor]:
        counter.assign(counter + 1)
        unit = w / w.square().sum().sqrt()  # reads no input: pruned, computed once at the capture
        return {"y": (x @ unit).relu(), "count": counter * 1, "x": x}

    fn = TinyJit(f, prune=True)
    x = rng.standard_normal((2, 6)).astype(np.float32)
    capture(fn, [x])
    assert fn.captured is not None and fn.captured.pruned
    manifest = export_c(fn, str(tmp_path))
    assert [o["name"] for o in manifest["outputs"]] == ["y", "count", "x"]
    build(tmp_path)
    y, count, same = run_exported(tmp_path, [x])
    after = fn(Tensor(x))  # the fourth call: the state goes on from the exported value in both
    np.testing.assert_allclose(y, after["y"].numpy(), rtol=1e-5, atol=1e-6)
    assert count.tolist() == after["count"].numpy().tolist() == [4.0]
    np.testing.assert_array_equal(same, x)


def test_refuses_inputs_that_share_memory(tmp_path: pathlib.Path) -> None:
    fn = TinyJit(lambda a, b: (a.flatten() * b).contiguous())
    x = Tensor(np.arange(4, dtype=np.float32)).realize()
    for _ in range(3):
        fn(x.reshape(2, 2), x)  # two tensors over one buffer: one input to the jit
    with pytest.raises(ExportError, match="share memory"):
        export_c(fn, str(tmp_path))


def test_webgpu_export_refuses_variables(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("tg_backend_webgpu.renderer", reason="tg-backend-webgpu (the WGSL renderer) is not installed")
    from tinygrad import Variable
    from tinygrad.export import export_webgpu

    fn = TinyJit(lambda a, n: (a.shrink(((0, n),)) * 2).sum())
    v = Variable("n", 1, 8)
    for i in (3, 4, 5):
        fn(Tensor(np.arange(8, dtype=np.float32)), v.bind(i))
    with pytest.raises(ExportError, match="use export_c"):
        export_webgpu(fn, str(tmp_path))


def test_scratch_memory_is_shared_between_steps() -> None:
    """Scratch buffers whose lives do not meet share memory; those used by one step (a kernel's input and output)
    never do; inputs, weights and outputs keep their own."""
    from tinygrad.dtype import dtypes
    from tinygrad.export.c import layout
    from tinygrad.export.plan import Kernel, Plan, Port, Storage
    from tinygrad.uop.ops import UOp

    kinds = ["input", "weight", "scratch", "scratch", "scratch", "scratch", "scratch"]
    plan = Plan("chain", storages=[Storage(i, 1000, dtypes.float32, k) for i, k in enumerate(kinds)])
    ast = UOp.const(dtypes.float32, 0)  # never rendered: layout reads which storages each step touches
    # 0 -> 2 -> 3 -> 4 -> 5 -> 6, each step reading the weight too; 6 is the output
    plan.steps = [Kernel(ast, [2, 0, 1], {}), Kernel(ast, [3, 2, 1], {}), Kernel(ast, [4, 3, 1], {}),
                  Kernel(ast, [5, 4, 1], {}), Kernel(ast, [6, 5, 1], {})]
    plan.inputs, plan.outputs = [Port(0, (250,), dtypes.float32)], [Port(6, (250,), dtypes.float32)]
    offsets, size = layout(plan)
    own = {offsets[0], offsets[1]}
    assert len(own) == 2 and not own & set(offsets[2:])
    for a, b in ((2, 3), (3, 4), (4, 5), (5, 6)):  # read and written by one step: apart
        assert abs(offsets[a] - offsets[b]) >= 1000
    assert offsets[2] == offsets[4] and offsets[3] == offsets[5]  # lives that do not meet: shared
    assert size == 4 * 1024  # the input, the weight and two scratch buffers (each padded to 64 bytes)
