"""Small models for the export tests (test_export_c.py, test_export_webgpu.py): each `make_*` returns (the TinyJit
function, example inputs as numpy arrays); weights are drawn from a seeded numpy generator, so a script that builds
a model in another process gets the same one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from tinygrad import Tensor, TinyJit, nn
from tinygrad.export.plan import flat_outputs
from tinygrad.nn.state import get_state_dict


def _seeded(model: Any, seed: int, scale: float = 0.2) -> None:
    """Give every tensor of `model` values from a seeded generator (BatchNorm's running variance positive)."""
    rng = np.random.default_rng(seed)
    for name, t in sorted(get_state_dict(model).items()):
        if not t.dtype.is_float:
            continue
        values = rng.standard_normal(t.shape).astype(np.float32) * scale
        if name.endswith("running_var"):
            values = np.abs(values) + 0.5
        t.replace(Tensor(values.astype(np.float32), dtype=t.dtype)).realize()


class MnistNet:
    """The layers of examples/beautiful_mnist.py's Model."""

    def __init__(self) -> None:
        self.layers: list[Callable[[Tensor], Tensor]] = [
            nn.Conv2d(1, 32, 5), Tensor.relu, nn.Conv2d(32, 32, 5), Tensor.relu,
            nn.BatchNorm(32), Tensor.max_pool2d,  # type: ignore[list-item]
            nn.Conv2d(32, 64, 3), Tensor.relu, nn.Conv2d(64, 64, 3), Tensor.relu,
            nn.BatchNorm(64), Tensor.max_pool2d,  # type: ignore[list-item]
            lambda x: x.flatten(1), nn.Linear(576, 10)]

    def __call__(self, x: Tensor) -> Tensor:
        return x.sequential(self.layers)


class ResNetBlock:
    """A small ResNet: a stem, one basic block (two 3x3 convolutions with BatchNorm and the skip connection), global
    average pooling and a classifier."""

    def __init__(self, c: int = 8) -> None:
        self.stem, self.bn0 = nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm(c)
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm(c)
        self.fc = nn.Linear(c, 5)

    def __call__(self, x: Tensor) -> Tensor:
        # the skip is kept (contiguous): fused into the sum, the stem and its BatchNorm would be recomputed there,
        # in a kernel binding 11 buffers, past the 10 that Chromium's WebGPU allows one kernel
        x = self.bn0(self.stem(x)).relu().contiguous()
        h = self.bn2(self.conv2(self.bn1(self.conv1(x)).relu()))
        return self.fc((h + x).relu().mean((2, 3))).log_softmax()


def make_mlp(seed: int = 0) -> tuple[TinyJit, list[np.ndarray]]:
    l1, l2 = nn.Linear(16, 32), nn.Linear(32, 4)
    _seeded([l1, l2], seed)

    @TinyJit
    def mlp(x: Tensor) -> Tensor:
        return l2(l1(x).relu()).softmax()

    return mlp, [np.random.default_rng(seed + 1).standard_normal((2, 16)).astype(np.float32)]


def make_mnist(seed: int = 0, batch: int = 2) -> tuple[TinyJit, list[np.ndarray]]:
    Tensor.training = False
    model = MnistNet()
    _seeded(model, seed, 0.1)
    fn = TinyJit(lambda x: model(x))
    return fn, [np.random.default_rng(seed + 1).random((batch, 1, 28, 28)).astype(np.float32)]


def make_resnet(seed: int = 0) -> tuple[TinyJit, list[np.ndarray]]:
    Tensor.training = False
    model = ResNetBlock()
    _seeded(model, seed)
    fn = TinyJit(lambda x: model(x))
    return fn, [np.random.default_rng(seed + 1).standard_normal((2, 3, 16, 16)).astype(np.float32)]


def tiny_llama(seed: int = 0) -> Any:
    """A 2-layer LLaMA (grouped-query attention, 64 tokens, 16 positions) with seeded weights."""
    from tinygrad.nn.transformer import Llama, LlamaConfig

    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=16)
    model = Llama(cfg)
    _seeded(model, seed, 0.3)
    return model


def make_llama(seed: int = 0) -> tuple[TinyJit, list[np.ndarray]]:
    """The tiny LLaMA's step: the logits of 4 tokens from position 0, which writes the KV cache as it goes (state
    the step assigns)."""
    model = tiny_llama(seed)
    fn = TinyJit(lambda tokens: model(tokens, 0))
    return fn, [np.random.default_rng(seed + 1).integers(0, 64, (1, 4)).astype(np.int32)]


MODELS = {"mlp": make_mlp, "mnist": make_mnist, "resnet": make_resnet, "llama": make_llama}


def capture(fn: TinyJit, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Call `fn` three times (eager, capture, replay) and return the replay's outputs."""
    ts = [Tensor(x).realize() for x in inputs]
    for _ in range(2):
        fn(*ts)
    out = fn(*ts)
    return [t.numpy() for t in flat_outputs(out)]
