"""Whether layers and optimizers run in training mode.

tinygrad has two switches for this: the class attribute `Tensor.training` (also set by `Tensor.train()`) and the
knob `TRAINING` of tinygrad.helpers (`Context(TRAINING=1)` or the environment). Either one being on means training.
"""

from __future__ import annotations

from typing import Any

from tinygrad import Tensor, dtypes
from tinygrad.dtype import DTypeLike
from tinygrad.helpers import TRAINING


def is_training() -> bool:
    return bool(Tensor.training) or bool(TRAINING.value)


def fresh_buffer(value: float, shape: tuple[int, ...], dtype: DTypeLike | None = None,
                 device: str | tuple[str, ...] | None = None) -> Tensor:
    """A realized tensor with a buffer of its own, filled with `value`. State tensors (running statistics, moments,
    counters) are updated in place step after step, so they must never share a buffer: `Tensor.zeros(n)` is a
    constant, equal to every other `Tensor.zeros(n)`, and so, realized, is the same buffer everywhere."""
    import numpy as np
    from tinygrad.dtype import to_dtype, to_numpy

    d = to_dtype(dtype) if dtype is not None else dtypes.float32
    return Tensor(np.full(shape, value, dtype=to_numpy(d)), device=device, dtype=d)


def write_in_place(t: Tensor, value: Any) -> None:
    """Fill a state tensor (a learning rate, a momentum, a parameter) with `value` (a number or an array of t's
    shape) by writing into the buffer it holds, from the host: no kernel, and a TinyJit step captured earlier reads
    that very buffer. (`t.assign(...)` outside the step also reaches its replays: the next one copies the new value
    into the buffer it reads.) Only for a tensor whose buffer is its own (`fresh_buffer` makes such): a realized
    constant such as `Tensor.zeros(n)` is one buffer shared by every equal constant."""
    import numpy as np
    from tinygrad.dtype import to_numpy
    from tinygrad.multi import realized_buffers, sharding

    data = np.ascontiguousarray(np.broadcast_to(np.asarray(value, dtype=to_numpy(t.dtype)), t.shape))
    if isinstance(t.device, tuple):  # on several devices: each buffer takes its part (all of it when replicated)
        axis = sharding(t.realize().uop)[1]
        bufs = realized_buffers(t.uop)
        if bufs is None:
            raise ValueError(f"write_in_place: the tensor on {t.device} holds no buffers of its own; make it with "
                             f"fresh_buffer")
        parts = [data] * len(bufs) if axis is None else np.split(data, len(bufs), axis)
        for buf, part in zip(bufs, parts):
            buf.copyin(np.ascontiguousarray(part).reshape(-1).data.cast("B"))
        return
    buf = t._buffer()  # the buffer t holds (a lazy t is realized into one first)
    if buf.size != t.numel():
        raise ValueError(f"write_in_place: the tensor of shape {t.shape} is a view into a larger buffer of "
                         f"{buf.size} elements; make it with fresh_buffer so that it has a buffer of its own")
    buf.copyin(data.reshape(-1).data.cast("B"))
