"""Models exported by torch.onnx.export (the TorchScript exporter, dynamo=False: the dynamo exporter needs
onnxscript, which is not a test dependency) run through tinygrad.onnx and onnxruntime on the same inputs; outputs
agree within 1e-4. Random weights, with the batch norm statistics randomized too so that they matter."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from tinygrad.onnx import OnnxRunner  # noqa: E402

TOL = 1e-4


class _Block(torch.nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        nn = torch.nn
        self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)) \
            if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x: Any) -> Any:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.down(x))


class SmallResNet(torch.nn.Module):
    """A ResNet in miniature: stem, three residual stages (two downsampling), global pool, classifier."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.MaxPool2d(2))
        self.stages = nn.Sequential(_Block(16, 16, 1), _Block(16, 32, 2), _Block(32, 64, 2))
        self.fc = nn.Linear(64, 10)

    def forward(self, x: Any) -> Any:
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def make_resnet() -> Any:
    torch.manual_seed(0)
    m = SmallResNet().eval()
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 1.5)
            mod.weight.data.uniform_(0.5, 1.5)
            mod.bias.data.uniform_(-0.2, 0.2)
    return m


def make_encoder() -> Any:
    torch.manual_seed(1)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    return torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()


def make_lstm() -> Any:
    torch.manual_seed(2)
    return torch.nn.LSTM(8, 16, num_layers=2, batch_first=True).eval()


def export(model: Any, example: Any, path: Path, inputs: list[str], outputs: list[str],
           dynamic: dict[str, dict[int, str]] | None = None) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (example,), str(path), input_names=inputs, output_names=outputs,
                          dynamic_axes=dynamic, dynamo=False, opset_version=17)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str, tuple[int, ...]]]:
    d = tmp_path_factory.mktemp("exported")
    batch = {"input": {0: "batch"}, "logits": {0: "batch"}}
    return {
        "resnet": (export(make_resnet(), torch.randn(2, 3, 32, 32), d / "resnet.onnx", ["input"], ["logits"], batch),
                   "input", (2, 3, 32, 32)),
        "encoder": (export(make_encoder(), torch.randn(2, 10, 64), d / "encoder.onnx", ["x"], ["y"],
                           {"x": {0: "batch"}, "y": {0: "batch"}}), "x", (2, 10, 64)),
        "lstm": (export(make_lstm(), torch.randn(3, 5, 8), d / "lstm.onnx", ["x"], ["y", "h", "c"]), "x", (3, 5, 8)),
    }


def _compare(path: Path, feed: dict[str, np.ndarray], runner: OnnxRunner) -> None:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = sess.run(None, feed)
    got = runner(feed)
    assert list(got) == [o.name for o in sess.get_outputs()]
    for (name, g), w in zip(got.items(), want):
        np.testing.assert_allclose(g.numpy(), w, rtol=TOL, atol=TOL, err_msg=name)


@pytest.mark.parametrize("name", ["resnet", "encoder", "lstm"])
def test_matches_onnxruntime(models: dict, name: str) -> None:
    path, input_name, shape = models[name]
    rng = np.random.default_rng(0)
    runner = OnnxRunner(path)
    _compare(path, {input_name: rng.standard_normal(shape).astype(np.float32)}, runner)


@pytest.mark.parametrize("name", ["resnet", "encoder"])
def test_jit_replays_and_new_batch_sizes(models: dict, name: str) -> None:
    """With jit=True, repeated calls are TinyJit replays (no host reads: the shape arithmetic of the exported
    encoder runs on the host) and give onnxruntime's answers for fresh inputs; another batch size is another
    capture."""
    path, input_name, shape = models[name]
    rng = np.random.default_rng(1)
    runner = OnnxRunner(path, jit=True)
    for batch in (shape[0], shape[0], shape[0], 1, 1, 1):
        x = rng.standard_normal((batch,) + shape[1:]).astype(np.float32)
        _compare(path, {input_name: x}, runner)
    assert all(j is not None and j.captured_kernels > 0 for j in runner._jits.values())
