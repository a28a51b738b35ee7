"""Shared by the language-model, speech, detection and diffusion drivers (not a driver: its name starts with "_").

Weights come from numpy with a fixed seed, keyed by the state-dict name, so both tinygrads load the same values
whatever their own random generators do. A third-party package an example imports at module level but that
neither side needs for the part a driver runs (a tokenizer, an image or audio library) is stood in for by a
module holding only what the driver supplies.
"""

from __future__ import annotations

import sys
import time
import types
from collections.abc import Callable
from typing import Any

import numpy as np


def stub_module(name: str, **attrs: Any) -> None:
    """Make `import name` give a module with `attrs`, unless the package is installed."""
    try:
        __import__(name)
    except ImportError:
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        sys.modules[name] = mod


def numpy_weights(model: Any, seed: int = 0, scale: float = 1.0) -> dict[str, Any]:
    """A state dict for `model` (only its float tensors) drawn from numpy: matrices ~ N(0, 1/fan_in) * scale,
    vectors named *weight (norm gains) ~ 1 + N(0, 0.1^2), running variances ~ 1 + |N(0, 0.1^2)|, other vectors
    (biases, running means) ~ N(0, 0.1^2)."""
    from tinygrad import Tensor, dtypes
    from tinygrad.nn.state import get_state_dict
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {}
    state = get_state_dict(model)
    for key in sorted(state):
        t = state[key]
        if not dtypes.is_float(t.dtype):
            continue
        shape = tuple(int(s) for s in t.shape)
        if len(shape) >= 2:
            w = rng.standard_normal(shape) * (scale / np.sqrt(max(1, int(np.prod(shape[1:])))))
        elif key.endswith("running_var"):  # a variance: positive
            w = 1.0 + 0.1 * np.abs(rng.standard_normal(shape))
        elif key.endswith("weight"):
            w = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            w = 0.1 * rng.standard_normal(shape)
        out[key] = Tensor(w.astype(np.float32)).cast(t.dtype)
    return out


def load_numpy_weights(model: Any, seed: int = 0, scale: float = 1.0) -> None:
    from tinygrad.nn.state import load_state_dict
    load_state_dict(model, numpy_weights(model, seed, scale), strict=False, verbose=False)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """fn() twice: the first warms up (compiles, captures the JIT), the second is timed."""
    fn()
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def save(out: str, seconds: float, **arrays: Any) -> None:
    np.savez(out, seconds=np.float64(seconds), **{k: np.asarray(v) for k, v in arrays.items()})
