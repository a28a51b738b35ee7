"""What the example drivers share (example_drivers/*.py, run by run_examples.py on both sides).

Everything random comes from numpy with a fixed seed: the weights (`init_weights`), the data (`mnist_arrays`,
`patch_mnist`) and the random tensors an example asks for (`patch_random`), because tinygrad 0.14.0's random
generator and this project's give different numbers for one seed.
"""

from __future__ import annotations

import gzip
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import standins  # noqa: F401  (the stand-ins for tinygrad internals, before the example imports them)
from tinygrad import Tensor, dtypes
from tinygrad.nn.state import get_state_dict

FASHION = Path("/usr/share/datasets/fashion-mnist")
_ONES = ("running_var", "weight", "scale", "gamma", "g")  # 1-D tensors with these names start near 1


def np_dtype(dtype: Any) -> Any:
    return {dtypes.float16: np.float16, dtypes.float32: np.float32, dtypes.float64: np.float64}.get(dtype)


def init_weights(model: Any, seed: int = 0, scale: float = 1.0, skip: Callable[[str], bool] | None = None) -> int:
    """Give every float tensor of the model's state dict numpy-made values (in key order: the same on both sides);
    integer tensors keep theirs. Matrices get N(0, scale/fan_in), 1-D norm weights and variances 1 + small noise,
    other 1-D tensors small noise. Returns how many tensors were set."""
    rng = np.random.default_rng(seed)
    count = 0
    for name, t in sorted(get_state_dict(model).items()):
        target = np_dtype(t.dtype)
        if target is None or (skip is not None and skip(name)):
            continue
        shape = tuple(int(s) for s in t.shape)
        noise = rng.standard_normal(shape)
        if len(shape) >= 2:
            value = noise * scale / np.sqrt(max(1, int(np.prod(shape[1:]))))
        elif name.rsplit(".", 1)[-1] in _ONES:
            value = 1.0 + 0.1 * np.abs(noise) if name.endswith("var") else 1.0 + 0.1 * noise
        else:
            value = 0.1 * noise
        new = Tensor(value.astype(target), device=t.device, dtype=t.dtype)
        t.replace(new)  # no kernel runs (an example may count them)
        count += 1
    return count


def mnist_arrays(n_train: int, n_test: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    """The first n_train / n_test Fashion-MNIST images and labels (uint8, N x 1 x 28 x 28) where Debian's
    dataset-fashion-mnist is installed, else numpy-made stand-ins of the same shapes and dtypes."""
    def idx(name: str, offset: int, n: int, item: int) -> np.ndarray:
        with gzip.open(FASHION / name) as f:
            return np.frombuffer(f.read(offset + n * item), dtype=np.uint8)[offset:]
    if (FASHION / "train-images-idx3-ubyte.gz").exists():
        return (idx("train-images-idx3-ubyte.gz", 16, n_train, 784).reshape(-1, 1, 28, 28),
                idx("train-labels-idx1-ubyte.gz", 8, n_train, 1).copy(),
                idx("t10k-images-idx3-ubyte.gz", 16, n_test, 784).reshape(-1, 1, 28, 28),
                idx("t10k-labels-idx1-ubyte.gz", 8, n_test, 1).copy())
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (n_train, 1, 28, 28), dtype=np.uint8), rng.integers(0, 10, n_train, dtype=np.uint8),
            rng.integers(0, 256, (n_test, 1, 28, 28), dtype=np.uint8), rng.integers(0, 10, n_test, dtype=np.uint8))


def patch_mnist(n_train: int, n_test: int) -> None:
    """`tinygrad.nn.datasets.mnist` returns a small slice of the data (the examples' default would be 60000 images,
    far too slow for a comparison run); set before the example imports it."""
    import tinygrad.nn.datasets as datasets

    arrays = mnist_arrays(n_train, n_test)

    def mnist(device: Any = None, fashion: bool = False) -> tuple[Tensor, ...]:
        return tuple(Tensor(a, device=device) for a in arrays)
    datasets.mnist = mnist  # type: ignore[assignment]


def patch_random(seed: int = 0) -> Callable[[], None]:
    """Tensor.randint/rand/randn/randn_like/rand_like/uniform/multinomial draw from numpy (multinomial takes the most
    likely class), so both tinygrads see the same numbers; the initialisers (kaiming_uniform, ...) too, so that
    building a model launches no kernel on either side. Inside a TinyJit these become constants of the capture,
    the same on both sides. Returns `reseed`, which restarts the numbers: call it once the model is built, since the
    two tinygrads' layers draw their initial weights differently (and `init_weights` replaces them anyway)."""
    rng = np.random.default_rng(seed)

    def shape_of(shape: tuple) -> tuple[int, ...]:
        return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)

    def randint(*shape: Any, low: int = 0, high: int = 10, dtype: Any = dtypes.int32, **kw: Any) -> Tensor:
        return Tensor(rng.integers(low, high, shape_of(shape)).astype(np.int32), dtype=dtype, device=kw.get("device"))

    def rand(*shape: Any, dtype: Any = None, **kw: Any) -> Tensor:
        return Tensor(rng.random(shape_of(shape)).astype(np.float32), dtype=dtype or dtypes.float32,
                      device=kw.get("device"))

    def randn(*shape: Any, dtype: Any = None, **kw: Any) -> Tensor:
        return Tensor(rng.standard_normal(shape_of(shape)).astype(np.float32), dtype=dtype or dtypes.float32,
                      device=kw.get("device"))

    def uniform(*shape: Any, low: float = 0.0, high: float = 1.0, dtype: Any = None, **kw: Any) -> Tensor:
        return Tensor(rng.uniform(low, high, shape_of(shape)).astype(np.float32), dtype=dtype or dtypes.float32,
                      device=kw.get("device"))

    def multinomial(self: Tensor, num_samples: int = 1, replacement: bool = False) -> Tensor:
        return self.argmax(-1, keepdim=True).expand(*self.shape[:-1], num_samples) if self.ndim > 1 else \
            self.argmax().reshape(1).expand(num_samples)

    def scaled(*shape: Any, a: float = 0.01, **kw: Any) -> Tensor:  # the layers' initial weights: replaced anyway
        return uniform(*shape, low=-0.1, high=0.1, dtype=kw.get("dtype"), device=kw.get("device"))

    for name in ("kaiming_uniform", "kaiming_normal", "glorot_uniform", "scaled_uniform", "normal"):
        setattr(Tensor, name, staticmethod(scaled))
    Tensor.randint = staticmethod(randint)  # type: ignore[assignment]
    Tensor.rand = staticmethod(rand)  # type: ignore[assignment]
    Tensor.randn = staticmethod(randn)  # type: ignore[assignment]
    Tensor.uniform = staticmethod(uniform)  # type: ignore[assignment]
    Tensor.randn_like = lambda self, **kw: randn(*self.shape, device=self.device)  # type: ignore[assignment]
    Tensor.rand_like = lambda self, **kw: rand(*self.shape, device=self.device)  # type: ignore[assignment]
    Tensor.multinomial = multinomial  # type: ignore[assignment]

    def reseed() -> None:
        nonlocal rng
        rng = np.random.default_rng(seed)
    return reseed


def after_init(cls: type, hook: Callable[[Any], None]) -> None:
    """Run hook(instance) after each cls(...) (to set the weights of a model that an example's main builds)."""
    original = cls.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        hook(self)
    cls.__init__ = init  # type: ignore[misc]


def init_layers(seed: int = 0, reseed: Callable[[], None] | None = None) -> None:
    """Give every nn layer made from now on numpy-made weights (`init_weights`, seeded by the order the layers are
    made, the same on both sides), then call `reseed` (so the numbers of `patch_random` start over once the model
    is built): for examples whose main builds the model."""
    from tinygrad import nn

    made = [0]

    def hook(layer: Any) -> None:
        init_weights(layer, seed=seed * 100003 + made[0])
        made[0] += 1
        if reseed is not None:
            reseed()
    for cls in {nn.Linear, nn.Conv2d, nn.BatchNorm, nn.LayerNorm, nn.GroupNorm, nn.Embedding}:
        after_init(cls, hook)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def save(seconds: float, **outputs: Any) -> None:
    """Write the outputs (tensors, arrays, numbers) and `seconds` into the .npz named by the command line."""
    arrays = {k: v.numpy() if isinstance(v, Tensor) else np.asarray(v) for k, v in outputs.items()}
    np.savez(sys.argv[1], seconds=seconds, **arrays)
