"""OnnxRunner's interface: inputs as numpy, Tensors, lists or keywords; TinyJit replays and their fallback to eager
runs when a model reads device data on the host; constant folding; sequences and optionals; the command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from tinygrad import Tensor  # noqa: E402
from tinygrad.onnx import OnnxRunner, supported_ops  # noqa: E402


def make(nodes: list, inputs: list, outputs: list, inits: list | None = None, opset: int = 18) -> Any:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def vi(name: str, et: int, shape: list | None) -> Any:
    return helper.make_tensor_value_info(name, et, shape)


def reshape_by_shape_model() -> Any:
    """Flatten everything after the batch: Shape -> Gather -> Unsqueeze -> Concat -> Reshape, the host arithmetic
    exporters emit, then a matmul with a transposed constant (folded at load)."""
    w = np.arange(24, dtype=np.float32).reshape(2, 12) / 10
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["flat"]),
        helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]),
        helper.make_node("MatMul", ["flat", "Wt"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(np.array([0], np.int64),
             "axes"), numpy_helper.from_array(np.array([-1], np.int64), "minus1"), numpy_helper.from_array(w, "W")]
    return make(nodes, [vi("x", TensorProto.FLOAT, ["n", 3, 4])], [vi("y", TensorProto.FLOAT, ["n", 2])], inits), w


def test_inputs_in_every_form() -> None:
    model, w = reshape_by_shape_model()
    runner = OnnxRunner(model)
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    want = x.reshape(2, 12) @ w.T
    for out in (runner({"x": x}), runner(x=x), runner({"x": Tensor(x)}), runner({"x": x.tolist()})):
        assert list(out) == ["y"] and isinstance(out["y"], Tensor)
        np.testing.assert_allclose(out["y"].numpy(), want, rtol=1e-5, atol=1e-5)
    assert runner.input_names == ["x"] and runner.output_names == ["y"]
    assert runner.input_spec() == {"x": ("FLOAT", ("n", 3, 4))}
    # the transpose of the constant was folded at load: the call runs the rest
    assert [c.op for c, _ in runner.graph.nodes] == ["Shape", "Gather", "Unsqueeze", "Concat", "Reshape", "MatMul"]


def test_tinygrad_spelling_and_a_model_as_a_uint8_tensor(tmp_path: Path) -> None:
    # tinygrad 0.14's programs: `from tinygrad.nn.onnx import OnnxRunner`, the model as a path or a Tensor of bytes
    from tinygrad.nn.onnx import OnnxRunner as TinygradSpelling

    model, w = reshape_by_shape_model()
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    x = np.random.default_rng(1).standard_normal((3, 3, 4)).astype(np.float32)
    want = x.reshape(3, 12) @ w.T
    for source in (str(path), path, Tensor(np.frombuffer(path.read_bytes(), np.uint8))):
        runner = TinygradSpelling(source)
        assert isinstance(runner, OnnxRunner)
        np.testing.assert_allclose(runner({"x": Tensor(x)})["y"].numpy(), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(TypeError, match="uint8 Tensor"):
        OnnxRunner(Tensor([1.0, 2.0]))


def test_jit_replays_shape_arithmetic_on_the_host() -> None:
    model, w = reshape_by_shape_model()
    runner = OnnxRunner(model, jit=True)
    rng = np.random.default_rng(1)
    for batch in (2, 2, 2, 2, 5, 5, 5, 2):
        x = rng.standard_normal((batch, 3, 4)).astype(np.float32)
        np.testing.assert_allclose(runner({"x": x})["y"].numpy(), x.reshape(batch, 12) @ w.T, rtol=1e-5, atol=1e-5)
    assert runner._host_reads == 0
    assert all(j is not None and j.cnt == 2 and j.captured_kernels > 0 for j in runner._jits.values())


def test_numpy_calls_after_the_capture_refill_kept_buffers() -> None:
    # after the capture, numpy inputs are copied into buffers the runner keeps for their signature, and the replay
    # runs on those: every call must see its own data, whatever the layout of the array
    model, w = reshape_by_shape_model()
    runner = OnnxRunner(model, jit=True)
    rng = np.random.default_rng(2)
    for i in range(8):
        x = rng.standard_normal((2, 3, 4)).astype(np.float32)
        if i == 5:
            x = np.asfortranarray(x)  # not C-contiguous
        if i == 6:
            x = rng.standard_normal((2, 3, 8)).astype(np.float32)[:, :, ::2]  # a strided view
        out = runner({"x": x})["y"].numpy()
        np.testing.assert_allclose(out, x.reshape(2, 12) @ w.T, rtol=1e-5, atol=1e-5)
    assert len(runner._staged) == 1
    # Tensors, another dtype or another shape take the usual path; the kept buffers serve again after them
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(runner({"x": Tensor(x)})["y"].numpy(), x.reshape(2, 12) @ w.T, rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match=r"float64|FLOAT"):
        runner({"x": x.astype(np.float64)})
    y = rng.standard_normal((3, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(runner({"x": y})["y"].numpy(), y.reshape(3, 12) @ w.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(runner({"x": x})["y"].numpy(), x.reshape(2, 12) @ w.T, rtol=1e-5, atol=1e-5)


def test_a_model_that_returns_its_input_keeps_no_buffers() -> None:
    # the replay would return the kept buffer itself, which the next call overwrites
    model = make([helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["z"])],
                 [vi("x", TensorProto.FLOAT, [4])], [vi("y", TensorProto.FLOAT, [4]), vi("z", TensorProto.FLOAT, [4])])
    runner = OnnxRunner(model, jit=True)
    results = []
    for i in range(5):
        x = np.full(4, float(i), np.float32)
        out = runner({"x": x})
        results.append(out["y"])
        assert out["z"].numpy().tolist() == [-float(i)] * 4
    assert not runner._staged
    assert results[-1].numpy().tolist() == [4.0] * 4


def test_jit_falls_back_when_the_graph_reads_device_data() -> None:
    """NonZero's output size is data: such a model runs eagerly every call, still correct."""
    model = make([helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Shape", ["nz"], ["s"])],
                 [vi("x", TensorProto.FLOAT, [4])],
                 [vi("nz", TensorProto.INT64, None), vi("s", TensorProto.INT64, [2])])
    runner = OnnxRunner(model, jit=True)
    for x in ([0, 1, 0, 2], [1, 1, 1, 0], [0, 0, 0, 0], [3, 0, 0, 0]):
        arr = np.array(x, np.float32)
        out = runner({"x": arr})
        np.testing.assert_array_equal(out["nz"].numpy(), np.array(np.nonzero(arr)))
        assert out["s"].numpy().tolist() == [1, int(np.count_nonzero(arr))]
    assert list(runner._jits.values()) == [None]


def test_reshape_shape_from_a_device_input() -> None:
    """A shape given as a graph input is read on the host (the eager path)."""
    model = make([helper.make_node("Reshape", ["x", "shape"], ["y"])],
                 [vi("x", TensorProto.FLOAT, [2, 6]), vi("shape", TensorProto.INT64, [2])],
                 [vi("y", TensorProto.FLOAT, None)])
    out = OnnxRunner(model)({"x": np.arange(12, dtype=np.float32).reshape(2, 6), "shape": np.array([3, -1])})
    assert out["y"].shape == (3, 4)


def test_sequences_and_optionals() -> None:
    nodes = [
        helper.make_node("SplitToSequence", ["x"], ["seq"], axis=0, keepdims=0),
        helper.make_node("SequenceLength", ["seq"], ["n"]),
        helper.make_node("ConcatFromSequence", ["seq"], ["back"], axis=0, new_axis=1),
        helper.make_node("Optional", [], ["none"], type=helper.make_tensor_type_proto(TensorProto.FLOAT, [])),
        helper.make_node("OptionalHasElement", ["none"], ["has"]),
    ]
    seq_t = helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, None)
    model = make(nodes, [vi("x", TensorProto.FLOAT, [3, 2])], [seq_t, vi("n", TensorProto.INT64, []),
                 vi("back", TensorProto.FLOAT, [3, 2]), vi("has", TensorProto.BOOL, [])])
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    out = OnnxRunner(model)({"x": x})
    assert isinstance(out["seq"], list) and [t.numpy().tolist() for t in out["seq"]] == x.tolist()
    assert out["n"].item() == 3 and out["has"].item() is False
    np.testing.assert_array_equal(out["back"].numpy(), x)


def test_if_and_loop() -> None:
    then_g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["r"])], "then", [],
                               [vi("r", TensorProto.FLOAT, [2])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["r"])], "else", [], [vi("r", TensorProto.FLOAT, [2])])
    body = helper.make_graph([helper.make_node("Identity", ["cond"], ["cond_out"]),
                              helper.make_node("Mul", ["acc", "x"], ["acc_out"])], "body",
                             [vi("i", TensorProto.INT64, []), vi("cond", TensorProto.BOOL, []),
                              vi("acc", TensorProto.FLOAT, [2])],
                             [vi("cond_out", TensorProto.BOOL, []), vi("acc_out", TensorProto.FLOAT, [2])])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Loop", ["trips", "", "x"], ["p"], body=body)]
    model = make(nodes, [vi("c", TensorProto.BOOL, []), vi("x", TensorProto.FLOAT, [2])],
                 [vi("y", TensorProto.FLOAT, [2]), vi("p", TensorProto.FLOAT, [2])],
                 [numpy_helper.from_array(np.array(3, np.int64), "trips")])
    runner = OnnxRunner(model)
    x = np.array([2.0, -1.5], np.float32)
    out = runner({"c": np.array(True), "x": x})
    np.testing.assert_allclose(out["y"].numpy(), 2 * x)
    np.testing.assert_allclose(out["p"].numpy(), x ** 4)
    np.testing.assert_allclose(runner({"c": np.array(False), "x": x})["y"].numpy(), -x)


def test_model_local_function() -> None:
    fn = helper.make_function("custom", "Scale2", ["a"], ["b"],
                              [helper.make_node("Add", ["a", "a"], ["b"])], [helper.make_opsetid("", 18)])
    graph = helper.make_graph([helper.make_node("Scale2", ["x"], ["y"], domain="custom")], "g",
                              [vi("x", TensorProto.FLOAT, [3])], [vi("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, functions=[fn], opset_imports=[helper.make_opsetid("", 18),
                                                                    helper.make_opsetid("custom", 1)])
    out = OnnxRunner(model)({"x": np.array([1, 2, 3], np.float32)})
    np.testing.assert_allclose(out["y"].numpy(), [2, 4, 6])


def test_supported_ops_cover_the_families() -> None:
    ops = set(supported_ops())
    for name in ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "BatchNormalization",
                 "LayerNormalization", "GroupNormalization", "Gemm", "MatMulInteger", "GatherND", "ScatterND",
                 "Resize", "Einsum", "TopK", "NonZero", "QuantizeLinear", "LSTM", "GRU", "RNN", "Attention",
                 "RandomNormal", "CumSum", "Trilu"):
        assert name in ops, name


def test_command_line(tmp_path: Path) -> None:
    model, _ = reshape_by_shape_model()
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    run = [sys.executable, "-m", "tinygrad.onnx", str(path), "--runs", "2", "--dim", "n=3"]
    out = subprocess.run(run, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "input  x: random FLOAT (3, 3, 4)" in out.stdout and "output y: shape (3, 2)" in out.stdout
    assert "median of 2 calls" in out.stdout
    np.save(tmp_path / "x.npy", np.ones((1, 3, 4), np.float32))
    out = subprocess.run(run[:4] + ["--input", f"x={tmp_path / 'x.npy'}", "--runs", "0"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "output y: shape (1, 2) float32: [ 6.6, 21. ]" in out.stdout and "random" not in out.stdout
