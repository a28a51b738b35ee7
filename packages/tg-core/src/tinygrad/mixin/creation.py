"""Creating tensors: constants, ranges, and random numbers from a seeded counter-based generator."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from tinygrad.device import Buffer, Device
from tinygrad.dtype import DTypeLike, dtypes, to_dtype, to_numpy
from tinygrad.engine.schedule import buffer_view
from tinygrad.helpers import prod
from tinygrad.mixin.common import Scalar, ShapeArg, shape_args
from tinygrad.uop.ops import UOp

if TYPE_CHECKING:
    from tinygrad.tensor import Tensor
else:
    Tensor = None  # bound to the real class by tinygrad.tensor once it is defined (the modules import each other)


class _RNG:
    """A counter-based generator: value i of a draw is a hash of (seed, counter + i), computed on the host
    with numpy so that every device gets the same numbers for a seed."""

    seed = 0
    counter = 0

    @staticmethod
    def _mix(x: np.ndarray) -> np.ndarray:
        x = x ^ (x >> np.uint32(16))
        x = x * np.uint32(0x7FEB352D)
        x = x ^ (x >> np.uint32(15))
        x = x * np.uint32(0x846CA68B)
        return x ^ (x >> np.uint32(16))

    @classmethod
    def bits(cls, n: int) -> np.ndarray:
        idx = np.arange(cls.counter, cls.counter + n, dtype=np.uint64)
        cls.counter += n
        lo = (idx & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        hi = (idx >> np.uint64(32)).astype(np.uint32)
        key = np.uint32(cls.seed & 0xFFFFFFFF)
        with np.errstate(over="ignore"):
            return cls._mix(cls._mix(lo ^ key) + cls._mix(hi + np.uint32(0x9E3779B9) * (key | np.uint32(1))))

    @classmethod
    def uniform(cls, n: int) -> np.ndarray:
        return (cls.bits(n) >> np.uint32(8)).astype(np.float32) * np.float32(1.0 / (1 << 24))



class CreationMixin:
    __slots__ = ()

    @classmethod
    def empty(cls: type[Tensor], *shape: Any, device: str | None = None, dtype: DTypeLike | None = None,
              **kwargs: Any) -> Tensor:
        sh = shape_args(shape)
        d = to_dtype(dtype) if dtype is not None else dtypes.default_float
        dev = Device.canonicalize(device)
        return cls(buffer_view(Buffer(dev, prod(sh), d), sh), device=dev, **kwargs)

    @classmethod
    def full(cls: type[Tensor], shape: ShapeArg, fill_value: Scalar, device: str | None = None,
             dtype: DTypeLike | None = None, **kwargs: Any) -> Tensor:
        sh = shape_args((shape,) if isinstance(shape, int) else tuple(shape))
        d = to_dtype(dtype) if dtype is not None else dtypes.from_py(fill_value)
        c = UOp.const(d, fill_value)
        return cls(c.reshape((1,) * len(sh)).expand(sh), device=device, **kwargs)

    @classmethod
    def zeros(cls: type[Tensor], *shape: Any, **kwargs: Any) -> Tensor:
        return cls.full(shape_args(shape), 0.0, **{"dtype": dtypes.default_float, **kwargs})

    @classmethod
    def ones(cls: type[Tensor], *shape: Any, **kwargs: Any) -> Tensor:
        return cls.full(shape_args(shape), 1.0, **{"dtype": dtypes.default_float, **kwargs})

    def full_like(self: Tensor, fill_value: Scalar, **kwargs: Any) -> Tensor:
        return type(self).full(self.shape, fill_value, **{"dtype": self.dtype, "device": self.device, **kwargs})

    def zeros_like(self: Tensor, **kwargs: Any) -> Tensor:
        return self.full_like(0, **kwargs)

    def ones_like(self: Tensor, **kwargs: Any) -> Tensor:
        return self.full_like(1, **kwargs)

    @classmethod
    def arange(cls: type[Tensor], start: Scalar, stop: Scalar | None = None, step: Scalar = 1,
               device: str | None = None, dtype: DTypeLike | None = None, **kwargs: Any) -> Tensor:
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ValueError("arange step must not be zero")
        d = to_dtype(dtype) if dtype is not None else dtypes.from_py([start, stop, step])
        n = max(0, math.ceil((stop - start) / step))
        steps: np.ndarray = np.arange(n, dtype=np.float64 if d.is_float else np.int64)
        values = steps * step + start
        return cls(values.astype(to_numpy(d)) if d != dtypes.bfloat16 else values, device=device, dtype=d, **kwargs)

    @classmethod
    def manual_seed(cls: type[Tensor], seed: int = 0) -> None:
        _RNG.seed, _RNG.counter = int(seed), 0

    @classmethod
    def rand(cls: type[Tensor], *shape: Any, device: str | None = None, dtype: DTypeLike | None = None,
             **kwargs: Any) -> Tensor:
        sh = shape_args(shape)
        d = to_dtype(dtype) if dtype is not None else dtypes.default_float
        return cls(_RNG.uniform(prod(sh)).reshape(sh), device=device, dtype=d, **kwargs)

    @classmethod
    def randn(cls: type[Tensor], *shape: Any, device: str | None = None, dtype: DTypeLike | None = None,
              **kwargs: Any) -> Tensor:
        sh = shape_args(shape)
        n = prod(sh)
        u1, u2 = _RNG.uniform(n).astype(np.float64), _RNG.uniform(n).astype(np.float64)
        z = np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2)  # Box-Muller; 1-u1 is never 0
        d = to_dtype(dtype) if dtype is not None else dtypes.default_float
        return cls(z.astype(np.float32).reshape(sh), device=device, dtype=d, **kwargs)

    @classmethod
    def uniform(cls: type[Tensor], *shape: Any, low: float = 0.0, high: float = 1.0, **kwargs: Any) -> Tensor:
        requires_grad = kwargs.pop("requires_grad", None)
        out = (Tensor.rand(*shape, **kwargs) * (high - low) + low).realize()
        return out.requires_grad_(True) if requires_grad else out
