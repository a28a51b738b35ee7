"""How accurately a training step's reductions are summed, against float64.

The README's MNIST model trains on raw pixel values (0-255): its BatchNorm statistics and weight gradients are sums
of many thousands of large float32 terms, and BatchNorm's backward subtracts nearly equal ones. Summed in one
running float32 accumulator per output (what tinygrad 0.14.0 does, and this project with `NOOPT=1
SPLIT_REDUCE=0`), the gradients come out about 1e-2 of their size away from float64's; the kernels here sum in
several accumulators and in chunks, and land within float32's own reach of the exact result. Adam's first steps
(sign-like updates) carry such differences into the weights, which is why tinygrad's examples drift from this
project's after a few steps (tools/tinygrad_compat/run_examples.py compares them summed the same way)."""

from __future__ import annotations

import numpy as np
import pytest
from tinygrad import Tensor, nn

torch = pytest.importorskip("torch", reason="float64 PyTorch is the reference (pip install torch==2.13.0)")

#: the largest gradient error allowed, relative to the gradient's largest entry
TOLERANCE = 1e-4


#: the README's MNIST model (examples/beautiful_mnist.py): (kind, sizes...) per layer; a convolution's sizes are its
#: input and output channels and its kernel's side, a linear layer's its input and output features
LAYERS = [("conv", 1, 32, 5), ("relu",), ("conv", 32, 32, 5), ("relu",), ("bn", 32), ("pool",),
          ("conv", 32, 64, 3), ("relu",), ("conv", 64, 64, 3), ("relu",), ("bn", 64), ("pool",), ("flatten",),
          ("fc", 576, 10)]


def _weights(rng: np.random.Generator) -> list[dict[str, np.ndarray]]:
    out: list[dict[str, np.ndarray]] = []
    for kind, *size in LAYERS:
        if kind in ("conv", "fc"):
            shape = (size[1], size[0], size[2], size[2]) if kind == "conv" else (size[1], size[0])
            out.append({"w": (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32),
                        "b": (0.1 * rng.standard_normal(size[1])).astype(np.float32)})
        elif kind == "bn":
            out.append({"w": (1 + 0.1 * rng.standard_normal(size[0])).astype(np.float32),
                        "b": (0.1 * rng.standard_normal(size[0])).astype(np.float32)})
        else:
            out.append({})
    return out


def _ours(x: np.ndarray, y: np.ndarray, weights: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    params: dict[str, Tensor] = {}
    h = Tensor(x)
    with Tensor.train():
        for i, ((kind, *size), w) in enumerate(zip(LAYERS, weights)):
            if kind == "conv":
                layer = nn.Conv2d(size[0], size[1], size[2])
            elif kind == "fc":
                layer = nn.Linear(size[0], size[1])
            elif kind == "bn":
                layer = nn.BatchNorm(size[0])
            if kind in ("conv", "fc", "bn"):
                for name in ("w", "b"):
                    t = layer.weight if name == "w" else layer.bias
                    t.replace(Tensor(w[name]))
                    t.requires_grad = True
                    params[f"{i}.{name}"] = t
                h = layer(h)
            else:
                h = {"relu": Tensor.relu, "pool": Tensor.max_pool2d, "flatten": lambda t: t.flatten(1)}[kind](h)
        loss = h.sparse_categorical_crossentropy(Tensor(y))
        loss.backward()
    return {"loss": loss.numpy(), **{n: t.grad.numpy() for n, t in params.items() if t.grad is not None}}


def _float64(x: np.ndarray, y: np.ndarray, weights: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    F = torch.nn.functional
    params: dict[str, torch.Tensor] = {}
    h = torch.tensor(x, dtype=torch.float64)
    for i, ((kind, *_), w) in enumerate(zip(LAYERS, weights)):
        p = {n: torch.tensor(v, dtype=torch.float64, requires_grad=True) for n, v in w.items()}
        params.update({f"{i}.{n}": t for n, t in p.items()})
        if kind == "conv":
            h = F.conv2d(h, p["w"], p["b"])
        elif kind == "fc":
            h = h @ p["w"].T + p["b"]
        elif kind == "bn":
            mean = h.mean((0, 2, 3), keepdim=True)
            var = ((h - mean) ** 2).mean((0, 2, 3), keepdim=True)  # BatchNorm's biased batch variance
            h = (h - mean) * torch.rsqrt(var + 1e-5) * p["w"].view(1, -1, 1, 1) + p["b"].view(1, -1, 1, 1)
        else:
            h = {"relu": F.relu, "pool": lambda t: F.max_pool2d(t, 2), "flatten": lambda t: t.flatten(1)}[kind](h)
    loss = F.cross_entropy(h, torch.tensor(y, dtype=torch.int64))
    loss.backward()
    return {"loss": loss.detach().numpy(), **{n: t.grad.numpy() for n, t in params.items()}}


def test_a_training_step_on_raw_pixels_has_float64s_gradients_to_float32_accuracy() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (32, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 32).astype(np.int32)
    w = _weights(rng)
    ours, exact = _ours(x, y, w), _float64(x, y, w)
    assert set(ours) == set(exact)
    for name, want in exact.items():
        err = np.abs(ours[name].astype(np.float64) - want).max() / np.abs(want).max()
        assert err < TOLERANCE, f"{name}: {err:.1e} of its largest entry away from float64's"
