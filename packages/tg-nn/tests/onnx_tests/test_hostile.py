"""tinygrad.onnx against damaged and hostile models: truncated and mutated protobufs, external data that points
out of the model's folder (`..`, absolute paths, symlinks), dims describing absurd sizes, and wrong or missing
inputs. Each gives a clear error (OnnxError, or NotImplementedError naming an unsupported op), quickly, and no file
outside the model's folder is opened."""

from __future__ import annotations

import builtins
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from tinygrad.onnx import OnnxError, OnnxRunner  # noqa: E402


def small_model(weight: np.ndarray | None = None) -> Any:
    """y = relu(x @ W + b), with a reshape whose shape is computed from x's shape."""
    w = weight if weight is not None else np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"], name="mm"),
        helper.make_node("Add", ["xw", "b"], ["pre"], name="add"),
        helper.make_node("Relu", ["pre"], ["act"], name="relu"),
        helper.make_node("Shape", ["act"], ["shp"], name="shape"),
        helper.make_node("Reshape", ["act", "shp"], ["y"], name="reshape"),
    ]
    graph = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.array([0.1, -0.2, 0.3], np.float32), "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.maximum(x @ w + np.array([0.1, -0.2, 0.3], np.float32), 0)


def test_small_model_runs() -> None:
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    out = OnnxRunner(small_model().SerializeToString())({"x": x})
    np.testing.assert_allclose(out["y"].numpy(), reference(x, np.arange(12, dtype=np.float32).reshape(4, 3) / 10),
                               rtol=1e-5, atol=1e-6)


# ---- damaged protobufs ----
def test_truncated_protobufs_give_clear_errors() -> None:
    data = small_model().SerializeToString()
    x = np.ones((2, 4), np.float32)
    for cut in list(range(0, len(data), max(1, len(data) // 97))) + [len(data) - 1]:
        try:
            runner = OnnxRunner(data[:cut])
        except OnnxError:
            continue
        # a cut at a field boundary can leave a smaller valid model: it runs, or refuses its inputs clearly
        try:
            runner({"x": x})
        except OnnxError:
            pass


def test_truncated_file(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    path.write_bytes(small_model().SerializeToString()[:37])
    with pytest.raises(OnnxError, match=r"m\.onnx"):
        OnnxRunner(path)


def test_mutated_protobufs_fail_cleanly() -> None:
    data = bytearray(small_model().SerializeToString())
    rng = random.Random(0)
    for _ in range(300):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        try:
            OnnxRunner(bytes(mutated))
        except (OnnxError, NotImplementedError):
            pass


def test_not_a_model() -> None:
    with pytest.raises(OnnxError):
        OnnxRunner(b"\xff" * 64)
    with pytest.raises(FileNotFoundError):
        OnnxRunner("/nonexistent/model.onnx")
    with pytest.raises(TypeError):
        OnnxRunner(12345)


# ---- external data ----
def external_model(folder: Path, location: str, offset: int = 0, length: int | None = None,
                   weight: np.ndarray | None = None) -> Path:
    w = weight if weight is not None else np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    model = small_model(w)
    init = model.graph.initializer[0]
    init.ClearField("raw_data")
    init.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": str(offset), "length": str(w.nbytes if length is None else length)}
    for k, v in entries.items():
        e = init.external_data.add()
        e.key, e.value = k, v
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path


class OpenSpy:
    """Records every file builtins.open is asked for while active."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.paths: list[str] = []
        real = builtins.open

        def spy(file: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(file, (str, os.PathLike)):
                self.paths.append(os.path.realpath(os.fspath(file)))
            return real(file, *args, **kwargs)
        monkeypatch.setattr(builtins, "open", spy)

    def outside(self, folder: Path) -> list[str]:
        base = os.path.realpath(folder)
        return [p for p in self.paths if not p.startswith(base + os.sep) and "site-packages" not in p
                and "/tinygrad" not in p and not p.startswith(sys.prefix)]


def test_external_data_inside_folder_loads(tmp_path: Path) -> None:
    w = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "w.bin").write_bytes(b"\0" * 8 + w.tobytes())
    path = external_model(tmp_path, "weights/w.bin", offset=8, weight=w)
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(OnnxRunner(path)({"x": x})["y"].numpy(), reference(x, w), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("location", ["../secret.bin", "sub/../../secret.bin", "..\\secret.bin"])
def test_external_data_parent_paths_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, location: str) -> None:
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    (tmp_path / "secret.bin").write_bytes(b"\1" * 48)
    path = external_model(folder, location)
    spy = OpenSpy(monkeypatch)
    with pytest.raises(OnnxError, match=r"out of the model's folder|outside"):
        OnnxRunner(path)
    assert not [p for p in spy.paths if p.endswith("secret.bin")]


@pytest.mark.parametrize("location", ["/etc/passwd", "ABSOLUTE", "C:\\Windows\\win.ini"])
def test_external_data_absolute_paths_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, location: str) -> None:
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"\1" * 48)
    folder = tmp_path / "model"
    folder.mkdir()
    path = external_model(folder, str(secret) if location == "ABSOLUTE" else location)
    spy = OpenSpy(monkeypatch)
    with pytest.raises(OnnxError, match="absolute"):
        OnnxRunner(path)
    assert not spy.outside(folder) or all(p.endswith("model.onnx") for p in spy.outside(folder))
    assert not [p for p in spy.paths if p.endswith(("secret.bin", "passwd", "win.ini"))]


def test_external_data_symlink_out_of_folder_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "secret.bin").write_bytes(b"\1" * 48)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "w.bin").symlink_to(tmp_path / "secret.bin")
    path = external_model(folder, "w.bin")
    spy = OpenSpy(monkeypatch)
    with pytest.raises(OnnxError, match="outside"):
        OnnxRunner(path)
    assert not [p for p in spy.paths if p.endswith("secret.bin")]


def test_external_data_bad_ranges(tmp_path: Path) -> None:
    (tmp_path / "w.bin").write_bytes(b"\0" * 48)
    with pytest.raises(OnnxError, match="outside"):
        OnnxRunner(external_model(tmp_path, "w.bin", offset=40))
    with pytest.raises(OnnxError, match="length"):
        OnnxRunner(external_model(tmp_path, "w.bin", length=44))
    with pytest.raises(OnnxError, match="does not exist"):
        OnnxRunner(external_model(tmp_path, "missing.bin"))


def test_external_data_needs_a_folder(tmp_path: Path) -> None:
    (tmp_path / "w.bin").write_bytes(b"\0" * 48)
    data = external_model(tmp_path, "w.bin").read_bytes()
    with pytest.raises(OnnxError, match="base_dir"):
        OnnxRunner(data)
    OnnxRunner(data, base_dir=tmp_path)  # the folder given explicitly


# ---- absurd sizes ----
def test_huge_initializer_dims() -> None:
    model = small_model()
    init = model.graph.initializer[0]
    init.dims[:] = [1 << 31, 1 << 31]
    with pytest.raises(OnnxError, match=r"elements|bytes"):
        OnnxRunner(model)
    init.dims[:] = [1 << 20, 4]  # plausible dims, but the data does not hold them
    with pytest.raises(OnnxError, match="raw data holds"):
        OnnxRunner(model)
    init.dims[:] = [-4, 3]
    with pytest.raises(OnnxError, match="negative"):
        OnnxRunner(model)


def _constant_of_shape_model(shape_from_input: bool) -> Any:
    shape_in = helper.make_tensor_value_info("shape", TensorProto.INT64, [2])
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["y"], name="cos")]
    inits = [] if shape_from_input else [numpy_helper.from_array(np.array([1 << 30, 1 << 30], np.int64), "shape")]
    graph = helper.make_graph(nodes, "g", [shape_in] if shape_from_input else [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_huge_shapes_computed_in_the_graph() -> None:
    with pytest.raises(OnnxError, match="max_tensor_bytes"):
        OnnxRunner(_constant_of_shape_model(False))
    runner = OnnxRunner(_constant_of_shape_model(True))
    with pytest.raises(OnnxError, match="max_tensor_bytes"):
        runner({"shape": np.array([1 << 30, 1 << 30], np.int64)})
    with pytest.raises(OnnxError, match="negative"):
        runner({"shape": np.array([-1, 3], np.int64)})
    assert runner({"shape": np.array([2, 3], np.int64)})["y"].shape == (2, 3)


# ---- inputs ----
def test_missing_and_unknown_inputs() -> None:
    runner = OnnxRunner(small_model())
    with pytest.raises(OnnxError, match=r"missing input\(s\): 'x' \(FLOAT \['n', 4\]\)"):
        runner({})
    with pytest.raises(OnnxError, match="unknown input"):
        runner({"x": np.ones((1, 4), np.float32), "z": np.ones(1)})


def test_wrong_inputs() -> None:
    runner = OnnxRunner(small_model())
    with pytest.raises(OnnxError, match="rank 2"):
        runner({"x": np.ones((4,), np.float32)})
    with pytest.raises(OnnxError, match="size 4 in dimension 1"):
        runner({"x": np.ones((2, 5), np.float32)})
    with pytest.raises(OnnxError, match="must be FLOAT"):
        runner({"x": np.ones((2, 4), np.float64)})
    assert runner(x=[[1.0, 2.0, 3.0, 4.0]])["y"].shape == (1, 3)  # Python lists take the declared type


# ---- graph structure ----
def test_undefined_value_and_unsupported_op() -> None:
    model = small_model()
    model.graph.node[1].input[1] = "nowhere"
    with pytest.raises(OnnxError, match="'nowhere' is not produced"):
        OnnxRunner(model)
    model = small_model()
    model.graph.node[2].op_type = "FancyRelu"
    with pytest.raises(NotImplementedError, match=r"FancyRelu \(domain ai.onnx, opset 17\) of node 'relu'"):
        OnnxRunner(model)
    model = small_model()
    model.graph.node[2].domain = "com.example"
    model.opset_import.append(helper.make_opsetid("com.example", 3))
    with pytest.raises(NotImplementedError, match=r"Relu \(domain com.example, opset 3\)"):
        OnnxRunner(model)


def test_opset_newer_than_onnx() -> None:
    model = small_model()
    model.opset_import[0].version = onnx.defs.onnx_opset_version() + 1
    with pytest.raises(OnnxError, match="opsets up to"):
        OnnxRunner(model)


def test_without_the_onnx_package() -> None:
    """`import tinygrad.onnx` works without onnx; loading a model says how to install it."""
    code = ("import sys; sys.modules['onnx'] = None\n"
            "import tinygrad.onnx\n"
            "try:\n    tinygrad.onnx.OnnxRunner(b'')\n"
            "except ImportError as e:\n    print('ERR', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "ERR" in out.stdout and "pip install 'tg-nn[onnx]'" in out.stdout, out.stdout + out.stderr
