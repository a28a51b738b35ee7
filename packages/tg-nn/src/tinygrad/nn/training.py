"""Whether layers and optimizers run in training mode.

tinygrad has two switches for this: the class attribute `Tensor.training` and the knob `TRAINING`
(`Context(TRAINING=1)` or the environment). Either one being on means training. tg-core does not define the
`TRAINING` knob itself yet, so it is registered here unless some module already did (then that one is reused, so
`Context(TRAINING=1)` always reaches the knob read below).
"""

from __future__ import annotations

from tinygrad import Tensor, dtypes
from tinygrad.dtype import DTypeLike
from tinygrad.helpers import ContextVar

TRAINING: ContextVar = ContextVar.registry.get("TRAINING") or ContextVar("TRAINING", 0)


def is_training() -> bool:
    return bool(Tensor.training) or bool(ContextVar.registry["TRAINING"].value)


def fresh_buffer(value: float, shape: tuple[int, ...], dtype: DTypeLike | None = None,
                 device: str | None = None) -> Tensor:
    """A realized tensor with a buffer of its own, filled with `value`. State tensors (running statistics, moments,
    counters) are updated in place step after step, so they must never share a buffer: `Tensor.zeros(n)` is a
    constant, equal to every other `Tensor.zeros(n)`, and so, realized, is the same buffer everywhere."""
    import numpy as np
    from tinygrad.dtype import to_dtype, to_numpy

    d = to_dtype(dtype) if dtype is not None else dtypes.float32
    return Tensor(np.full(shape, value, dtype=to_numpy(d)), device=device, dtype=d)
