"""Creating tensors: constants, ranges, and random numbers from a seeded counter-based generator.

Random numbers are tinygrad 0.14's: its Threefry-2x32 stream (mixin/rng.py), computed inside kernels from a
per-device state that lives in a device buffer, so a seed gives tinygrad's values, no two draws after one
`manual_seed` share positions, and a TinyJit replay draws new numbers. The distributions use tinygrad's arithmetic
on those draws (rand's bits to floats, Box-Muller, randint's scaling, randperm's sort of rand); everything runs on
the device, randperm and multinomial included.

Bad sizes raise ValueError (a negative dimension, count or step number) or TypeError (a non-integer one), where
PyTorch raises RuntimeError for both; bad random arguments raise what PyTorch raises.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from typing import Any, Self, cast

import numpy as np

from tinygrad.dlpack import import_dlpack
from tinygrad.dtype import DType, DTypeLike, dtypes, is_emulated_float, to_dtype, to_numpy
from tinygrad.errors import DTypeError
from tinygrad.helpers import TRAINING, prod
from tinygrad.mixin.common import Scalar, ShapeArg, TensorBase, TensorT, shape_args
from tinygrad.mixin.rng import DeviceRNG, bits64, normal_bits, stream_bytes, threefry2x32, uniform_bits, words_for
from tinygrad.multi import canonical_device, canonical_devices, sharding
from tinygrad.uop.ops import Ops, UOp, sint, sym_prod
from tinygrad.uop.placement import DeviceLike, device_names, multi_node

#: randperm sorts longer draws on the host outside a TinyJit capture (the device's argsort is quadratic)
HOST_SORT_MIN = 2048


class CreationMixin(TensorBase):
    __slots__ = ()

    @classmethod
    def empty(cls, *shape: Any, device: DeviceLike = None, dtype: DTypeLike | None = None,
              **kwargs: Any) -> Self:
        """An uninitialised tensor of `shape` (as `zeros(2, 3)` or `zeros((2, 3))`): memory is allocated, its
        contents are not defined. `dtype` defaults to `dtypes.default_float`. A size may be a Variable, bound or
        not: the memory is sized for its largest value (`max_shape`), and an unbound one must be bound before the
        tensor is computed with.

        Examples:
            >>> t = Tensor.empty(2, 3)
            >>> t.shape, t.dtype
            ((2, 3), dtypes.float32)
        """
        sh = shape_args(shape, symbolic=True, unbound=True)
        d = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if device is not None and not isinstance(device, str):  # one buffer on each device
            devs = canonical_devices(device)
            return cls(multi_node([cls.empty(*shape, device=d, dtype=dtype).uop for d in devs], None), device=devs,
                       **kwargs)
        dev = cls._runtime.canonical_device(device)
        if all(isinstance(s, int) for s in sh):
            return cls(cls._runtime.new_memory(dev, d, sh), device=dev, **kwargs)
        # a symbolic shape: memory for the Variables' largest values, seen through the bound size
        flat = cls._runtime.new_memory(dev, d, (prod(_max_size(s) for s in sh),))
        return cls(flat.shrink(((0, sym_prod(sh)),)).reshape(sh), device=dev, **kwargs)

    @classmethod
    def full(cls, shape: ShapeArg, fill_value: Scalar, device: DeviceLike = None,
             dtype: DTypeLike | None = None, **kwargs: Any) -> Self:
        """A tensor of `shape` filled with `fill_value`, lazily (a broadcast constant, no memory until realized).
        The dtype is `dtype`, else the Python value's (int32, `default_float` or bool).

        Examples:
            >>> Tensor.full((2, 2), 7).tolist()
            [[7, 7], [7, 7]]
            >>> Tensor.full(3, 0.5).tolist()
            [0.5, 0.5, 0.5]
        """
        sh = shape_args((shape,) if isinstance(shape, (int, UOp)) else tuple(shape), symbolic=True)
        d = to_dtype(dtype) if dtype is not None else dtypes.from_py(fill_value)
        c = UOp.const(d, fill_value)
        return cls(c.reshape((1,) * len(sh)).expand(sh), device=_on_default(cls, device), **kwargs)

    @classmethod
    def zeros(cls, *shape: Any, **kwargs: Any) -> Self:
        """A tensor of zeros of `shape` (`zeros(2, 3)` or `zeros((2, 3))`), float32 unless `dtype=` says otherwise.

        Examples:
            >>> Tensor.zeros(2, 3).tolist()
            [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
            >>> Tensor.zeros(2, dtype=dtypes.int32).tolist()
            [0, 0]
        """
        return cls.full(shape_args(shape, symbolic=True), 0.0, **{"dtype": dtypes.default_float, **kwargs})

    @classmethod
    def ones(cls, *shape: Any, **kwargs: Any) -> Self:
        """A tensor of ones of `shape`, float32 unless `dtype=` says otherwise.

        Examples:
            >>> Tensor.ones(2, 2).tolist()
            [[1.0, 1.0], [1.0, 1.0]]
        """
        return cls.full(shape_args(shape, symbolic=True), 1.0, **{"dtype": dtypes.default_float, **kwargs})

    def full_like(self, fill_value: Scalar, **kwargs: Any) -> Self:
        """A tensor of self's shape, dtype and device filled with `fill_value` (keywords override the dtype or
        device).

        Examples:
            >>> Tensor([[1, 2], [3, 4]]).full_like(9).tolist()
            [[9, 9], [9, 9]]
        """
        return type(self).full(self.shape, fill_value, **{"dtype": self.dtype, "device": self.device, **kwargs})

    def zeros_like(self, **kwargs: Any) -> Self:
        """Zeros of self's shape, dtype and device.

        Examples:
            >>> Tensor([1.5, 2.5]).zeros_like().tolist()
            [0.0, 0.0]
        """
        return self.full_like(0, **kwargs)

    def ones_like(self, **kwargs: Any) -> Self:
        """Ones of self's shape, dtype and device (`dtype=` overrides).

        Examples:
            >>> Tensor([1, 2, 3]).ones_like().tolist()
            [1, 1, 1]
            >>> Tensor([1, 2]).ones_like(dtype=dtypes.float32).tolist()
            [1.0, 1.0]
        """
        return self.full_like(1, **kwargs)

    @classmethod
    def arange(cls, start: Scalar, stop: Scalar | None = None, step: Scalar = 1,
               device: DeviceLike = None, dtype: DTypeLike | None = None, **kwargs: Any) -> Self:
        """Values from `start` up to (not including) `stop` in steps of `step`; `arange(n)` is 0..n-1. The dtype
        follows the arguments (int32 for ints, int64 for ints past int32's range, `default_float` if any is a float)
        unless `dtype=` is given; values outside a given integer dtype raise OverflowError (tinygrad; PyTorch wraps).
        `stop` may be a bound Variable.

        Examples:
            >>> Tensor.arange(5).tolist()
            [0, 1, 2, 3, 4]
            >>> Tensor.arange(1, 2, 0.25).tolist()
            [1.0, 1.25, 1.5, 1.75]
        """
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ValueError("arange step must not be zero")
        if any(isinstance(v, UOp) for v in (start, stop, step)):
            return cls._symbolic_arange(start, stop, step, device, dtype, **kwargs)
        d = to_dtype(dtype) if dtype is not None else dtypes.from_py([start, stop, step])
        n = max(0, math.ceil((stop - start) / step))
        if d.is_int and n:
            ends = (start, start + (n - 1) * step)
            if dtype is None and not all(dtypes.int32.min <= v <= dtypes.int32.max for v in ends):
                d = dtypes.int64  # a range of ints past int32's is int64, as a Python int of that size would be
            elif not all(d.min <= v <= d.max for v in ends):
                raise OverflowError(f"arange({start}, {stop}, {step}): its values run from {ends[0]} to {ends[1]}, "
                                    f"outside the range of {d}")
        steps: np.ndarray = np.arange(n, dtype=np.float64 if d.is_float else np.int64)
        values = steps * step + start
        return cls(values if is_emulated_float(d) else values.astype(to_numpy(d)), device=device, dtype=d, **kwargs)


    @classmethod
    def _symbolic_arange(cls, start: Any, stop: Any, step: Any, device: DeviceLike,
                         dtype: DTypeLike | None, **kwargs: Any) -> Self:
        """arange up to a bound Variable (`Tensor.arange(n.bind(10))`): the values for the Variable's largest value,
        shrunk to the bound length, so one kernel serves every value. tinygrad allows a symbolic stop only."""
        if isinstance(start, UOp) or isinstance(step, UOp):
            raise ValueError(f"arange({start}, {stop}, {step}): only the stop may be symbolic (a bound Variable)")
        if not (isinstance(start, int) and step == 1):
            raise ValueError(f"arange to a symbolic stop {stop} needs an int start and step 1, got start={start!r}, "
                             f"step={step!r}")
        length = shape_args((stop - start,), symbolic=True)[0]
        if isinstance(length, int):  # the Variable cancelled out
            return cls.arange(start, start + length, device=device, dtype=dtype, **kwargs)
        if length.vmin < 0:
            raise ValueError(f"arange({start}, {stop}): the length {length} is negative for small values of the "
                             f"Variable; every value in its range must give a length >= 0")
        whole = cls.arange(start, start + int(length.vmax), device=device, dtype=dtype, **kwargs)
        return whole.shrink(((0, length),))

    @classmethod
    def linspace(cls, start: Scalar | Self, stop: Scalar | Self, steps: int,
                 device: DeviceLike = None, dtype: DTypeLike | None = None, **kwargs: Any) -> Self:
        """`steps` evenly spaced values from start to stop, both included (integer dtypes truncate, as PyTorch).
        `steps` may be a bound Variable: the spacing is then computed from its value at run time.

        Examples:
            >>> Tensor.linspace(0, 1, 5).tolist()
            [0.0, 0.25, 0.5, 0.75, 1.0]
        """
        d = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if d.is_bool:  # evenly spaced values have no meaning in bool (PyTorch and tinygrad refuse it too)
            raise ValueError("linspace does not support dtype bool")
        if isinstance(steps, UOp):
            i = cls.arange(steps, device=device, dtype=dtypes.float32)
            n = cls(steps, device=device).cast(dtypes.float32)
            step = (float(stop) - float(start)) / (n - 1).maximum(1)  # one step: just `start`, as below
            half = (n / 2).floor()
            # as below, each half counted from its own end; the first value is `start` even for one step
            values = ((i < half) | (i == 0)).where(float(start) + i * step, float(stop) - (n - 1 - i) * step)
            return cls(values.cast(d).uop, device=_on_default(cls, device), **kwargs)
        _check_count(steps, "linspace steps")
        if isinstance(start, TensorBase) or isinstance(stop, TensorBase):
            # an endpoint that is a (0-d) tensor, as tinygrad accepts: the values are computed from it in a
            # kernel, with the same two-ended spacing as below, instead of reading it back to the host
            like = start if isinstance(start, TensorBase) else cast(TensorBase, stop)
            dev = device if device is not None else like.device
            at = cls.arange(steps, device=dev, dtype=dtypes.float32)
            lo, hi = (x.to(dev) if isinstance(x, TensorBase) else x for x in (start, stop))
            gap = (hi - lo) / (steps - 1) if steps > 1 else lo * 0.0
            spaced = ((at < steps // 2) | (at == 0)).where(lo + at * gap, hi - (steps - 1 - at) * gap)
            return cls(spaced.cast(d).uop, device=dev, **kwargs)
        i = np.arange(steps, dtype=np.float64)
        step = (float(stop) - float(start)) / (steps - 1) if steps > 1 else 0.0
        # each half is counted from its own end, so that both ends come out exact
        values = np.where((i < steps // 2) | (i == 0), float(start) + i * step, float(stop) - (steps - 1 - i) * step)
        return cls(values if is_emulated_float(d) else values.astype(to_numpy(d)), device=device, dtype=d, **kwargs)

    @classmethod
    def eye(cls, n: int, m: int | None = None, device: DeviceLike = None,
            dtype: DTypeLike | None = None, **kwargs: Any) -> Self:
        """The n x m (default n x n) identity matrix, built lazily from a padded constant (no host upload).

        Examples:
            >>> Tensor.eye(2).tolist()
            [[1.0, 0.0], [0.0, 1.0]]
            >>> Tensor.eye(2, 3, dtype=dtypes.int32).tolist()
            [[1, 0, 0], [0, 1, 0]]
        """
        m = n if m is None else m
        d = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if isinstance(n, UOp) or isinstance(m, UOp):  # symbolic: compare row and column numbers
            rows = cls.arange(n, device=device, dtype=dtypes.int32)
            cols = cls.arange(m, device=device, dtype=dtypes.int32)
            same = (rows.reshape(n, 1) == cols.reshape(1, m)).cast(d)
            return cls(same.uop, device=_on_default(cls, device), **kwargs)
        _check_count(n, "eye n")
        _check_count(m, "eye m")
        k = min(n, m)
        # k rows of (1, 0 x m), read back as k rows of m: row i then holds its 1 at column i
        ones = cls.full((k, 1), 1, dtype=dtypes.int32, device=device).pad(((0, 0), (0, m)))
        diag = ones.reshape(k * (m + 1)).shrink(((0, k * m),)).reshape(k, m).pad(((0, n - k), (0, 0)))
        return cls(diag.cast(d).uop, device=_on_default(cls, device), **kwargs)

    def empty_like(self, **kwargs: Any) -> Self:
        """An uninitialised tensor of self's shape, dtype and device.

        Examples:
            >>> Tensor([[1, 2, 3]]).empty_like().shape
            (1, 3)
        """
        return type(self).empty(self.shape, **{"dtype": self.dtype, "device": self.device, **kwargs})

    def const_like(self, b: Scalar) -> Self:
        """A tensor of self's shape, dtype and device filled with `b`.

        Examples:
            >>> Tensor([1, 2, 3]).const_like(4).tolist()
            [4, 4, 4]
        """
        return self.full_like(b)

    @classmethod
    def from_blob(cls, ptr: Any, shape: ShapeArg, device: str | None = None,
                  dtype: DTypeLike | None = None, **kwargs: Any) -> Self:
        """A tensor over `prod(shape)` elements of `dtype` (float32 by default) in row-major order at `ptr` (an int
        address or a ctypes pointer/array), without a copy, as tinygrad's: the tensor reads and writes that memory,
        and the memory must stay valid for the tensor's life (a ctypes object passed as `ptr` is kept alive with it;
        for an int address that is the caller's duty). The address must be aligned to the element size.

        Reads see the memory as it is when they run (writes made there by other code included), and an assign into
        the tensor writes the memory in place. On a device whose allocator cannot use outside memory in place (no
        `wrap_external`: the GPU backends), `ptr` must be host memory, and it is copied in when the tensor is made.

        Examples:
            >>> a = np.array([1.0, 2.0, 3.0], dtype=np.float32)
            >>> t = Tensor.from_blob(a.ctypes.data, (3,), dtype=dtypes.float32)
            >>> a[0] = 5.0
            >>> t.tolist()
            [5.0, 2.0, 3.0]
        """
        sh = shape_args((shape,) if isinstance(shape, int) else tuple(shape))
        d = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if isinstance(ptr, (bool, str, bytes, float)):
            raise TypeError(f"from_blob needs an int address or a ctypes pointer, got {type(ptr).__name__}")
        keepalive = None
        if not isinstance(ptr, (int, np.integer)):
            try:
                address = ctypes.cast(ptr, ctypes.c_void_p).value
            except (TypeError, ctypes.ArgumentError):
                raise TypeError(f"from_blob needs an int address or a ctypes pointer, got {type(ptr).__name__}") \
                    from None
            keepalive, ptr = ptr, address
        dev = cls._runtime.canonical_device(device)
        cls._runtime.require_dtype(dev, d)
        nbytes = prod(sh) * d.itemsize
        if not nbytes:  # nothing to read: any pointer will do
            return cls(cls._runtime.new_memory(dev, d, sh), device=dev, **kwargs)
        if not ptr:
            raise ValueError(f"from_blob got a null pointer for {nbytes} bytes of shape {sh}")
        return cls(cls._runtime.host_memory(dev, d, sh, int(ptr), keepalive), device=dev, **kwargs)

    @classmethod
    def from_dlpack(cls, x: Any, device: str | None = None, copy: bool | None = None) -> Self:
        """A tensor sharing the memory of `x`, any object with `__dlpack__` (a numpy array, a PyTorch CPU tensor,
        ...) or a DLPack capsule (which it consumes: a capsule is used once), without a copy: writes on either side
        are seen by the other. `x` (and the memory) stays alive while the tensor, or anything over its memory, lives.

        The memory must be host memory. Strides that movement ops express (permutes, slices with positive or negative
        steps, broadcast zero strides) give a view over the producer's memory; others (overlapping windows, strides
        that do not divide each other, an address not aligned to the element size) are copied, as is everything when
        `copy=True` or when `device` (the CPU by default) cannot use host memory in place; `copy=False` raises
        BufferError instead of copying. Reads see the memory as it is when they run, and an assign into the tensor
        (a view of it included) writes the memory in place. dtypes: bool, int8-64, uint8-64, float16/32/64, bfloat16.

        Examples:
            >>> a = np.arange(6, dtype=np.float32).reshape(2, 3)
            >>> t = Tensor.from_dlpack(a)
            >>> a[0, 0] = 9.0
            >>> t.tolist()
            [[9.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
            >>> t[1, 2] = 7.0
            >>> a[1, 2]
            np.float32(7.0)
        """
        return import_dlpack(cls, x, device, copy)

    # ---- random ----

    @classmethod
    def manual_seed(cls, seed: int = 0) -> None:
        """Seed the random number generator (tinygrad 0.14's Threefry stream, mixin/rng.py): after the same seed, the
        same draws give the same values as tinygrad's (rand bit for bit; randn within an ulp or so of log, cos and
        sqrt). Each device draws its own stream, keyed by its place in the order in which devices first draw after
        the seed. Without a seed the generator starts from the time of import, as tinygrad's. The draws are computed
        in kernels from a counter, so no two draws after one seed repeat each other, and a TinyJit replay draws new
        numbers.

        Examples:
            >>> Tensor.manual_seed(42)
            >>> a = Tensor.rand(3).tolist()
            >>> Tensor.manual_seed(42)
            >>> Tensor.rand(3).tolist() == a
            True
        """
        DeviceRNG.manual_seed(seed)

    @classmethod
    def random_bits(cls, *shape: Any, device: DeviceLike = None, dtype: DTypeLike = dtypes.uint32,
                    **kwargs: Any) -> Self:
        """Raw generator output: every bit of every element uniformly random, in any integer dtype (uint32 by
        default). The elements take the bytes of the word stream in order (a uint8 takes a quarter of a word, a
        uint64 two words, the low one first), so they are the stream's words bitcast to `dtype`.

        Examples:
            >>> Tensor.manual_seed(0)
            >>> t = Tensor.random_bits(2, 3, dtype=dtypes.uint8)
            >>> t.shape, t.dtype
            ((2, 3), dtypes.uint8)
        """
        sh, d = shape_args(shape), to_dtype(dtype)
        if not d.is_int:
            raise DTypeError(f"random_bits needs an integer dtype, got {d}")
        dev = canonical_device(device)  # several devices: drawn on the first, replicated
        n = prod(sh)
        if d.itemsize == 8:
            raw = bits64(cls, n, dev)
        else:
            raw = stream_bytes(DeviceRNG.bits(cls, words_for(n, d), dev), n, d.itemsize)
            raw = raw if d.itemsize == 4 else raw.cast(dtypes.uint8 if d.itemsize == 1 else dtypes.uint16)
        out = raw if d == raw.dtype else raw.bitcast(d)
        return cls(out.reshape(sh).uop, device=dev, **kwargs)

    def threefry(self, seed: Self | int) -> Self:
        """tinygrad's Threefry-2x32 primitive (20 rounds), elementwise: each uint64 of self is a counter (its low word
        first) and `seed` (a uint64 tensor, broadcast, or an int) the key; the result packs the two output words
        into a uint64 the same way. It is the generator the random functions draw from (mixin/rng.py).

        Examples:
            >>> Tensor([0], dtype=dtypes.uint64).threefry(0).tolist()
            [11077253088097075545]
        """
        key = seed if isinstance(seed, TensorBase) else type(self).full(self.shape, seed, dtype=dtypes.uint64,
                                                                         device=self.device)
        if self.dtype != dtypes.uint64 or key.dtype != dtypes.uint64:
            raise DTypeError(f"threefry takes uint64 counters and a uint64 key, got {self.dtype} and {key.dtype}; "
                             f"cast them with .cast(dtypes.uint64)")
        y0, y1 = threefry2x32(key.cast(dtypes.uint32), (key >> 32).cast(dtypes.uint32), self.cast(dtypes.uint32),
                              (self >> 32).cast(dtypes.uint32))
        return (y1.cast(dtypes.uint64) << 32) | y0.cast(dtypes.uint64)

    @classmethod
    def rand(cls, *shape: Any, device: DeviceLike = None, dtype: DTypeLike | None = None,
             contiguous: bool = True, **kwargs: Any) -> Self:
        """Uniform values in [0, 1) of `shape`, float32 unless `dtype=` gives another float dtype. As in tinygrad the
        values are written to a buffer of their own when something reads them (`contiguous=False` leaves them to
        be computed inside their readers), and a float of m mantissa bits takes m random bits (float32: multiples
        of 2**-23).

        Examples:
            >>> Tensor.manual_seed(0)
            >>> t = Tensor.rand(2, 3)
            >>> t.shape, bool(((t >= 0) & (t < 1)).all().item())
            ((2, 3), True)
        """
        sh = shape_args(shape)
        d = _float_dtype(dtype, "rand")
        dev = canonical_device(device)  # several devices: drawn on the first, replicated
        out = uniform_bits(cls, prod(sh), d, dev).reshape(sh)
        return cls((_own_buffer(out) if contiguous else out).uop, device=dev, **kwargs)

    @classmethod
    def randn(cls, *shape: Any, device: DeviceLike = None, dtype: DTypeLike | None = None,
              **kwargs: Any) -> Self:
        """Standard normal values of `shape`, `dtype` (float32 by default; any other dtype is drawn in float32 and
        cast, as in tinygrad): Box-Muller on one float32 uniform draw of twice the size.

        Examples:
            >>> Tensor.manual_seed(0)
            >>> t = Tensor.randn(1000)
            >>> t.shape, abs(t.mean().item()) < 0.2, abs(t.std().item() - 1) < 0.2
            ((1000,), True, True)
        """
        sh = shape_args(shape)
        want = to_dtype(dtype) if dtype is not None else dtypes.default_float
        dev = canonical_device(device)  # several devices: drawn on the first, replicated
        return cls(normal_bits(cls, prod(sh), dev).reshape(sh).cast(want).uop, device=dev, **kwargs)

    def _drawn_like(self, draw: Callable[[tuple[int, ...], str | tuple[str, ...]], Self]) -> Self:
        """A draw of self's shape and placement: on a tensor sharded along an axis each device draws its own shard
        from its own stream (tinygrad's rule), otherwise one draw on self's device (the first of several)."""
        if isinstance(self.device, tuple):
            devs, axis = sharding(self.uop)
            if axis is not None and isinstance(devs, tuple):
                sh = tuple(int(s) for s in self.shape)
                part = sh[:axis] + (sh[axis] // len(devs),) + sh[axis + 1:]
                return type(self)(multi_node([draw(part, d).uop for d in devs], axis), device=devs)
        return draw(self.shape, self.device)

    def rand_like(self, **kwargs: Any) -> Self:
        """Uniform values in [0, 1) of self's shape and device; self's dtype, which must be a float (or `dtype=`). A
        tensor sharded along an axis gets a draw per shard, each on its own device.

        Examples:
            >>> Tensor.manual_seed(0)
            >>> Tensor.zeros(2, 2).rand_like().shape
            (2, 2)
        """
        d = self._like_dtype(kwargs, "rand_like")
        if kwargs.get("device") is not None:
            return type(self).rand(self.shape, dtype=d, **kwargs)
        kwargs.pop("device", None)
        contiguous = kwargs.pop("contiguous", True)
        out = self._drawn_like(lambda sh, dev: type(self).rand(sh, dtype=d, device=dev, contiguous=contiguous))
        return type(self)(out.uop, device=out.device, **kwargs) if kwargs else out

    def randn_like(self, **kwargs: Any) -> Self:
        """Standard normal values of self's shape and device, in self's dtype (or `dtype=`); a dtype that is not a
        float is drawn in float32 and cast, as in tinygrad. A tensor sharded along an axis gets a draw per shard.

        Examples:
            >>> Tensor.manual_seed(0)
            >>> Tensor.zeros(3, dtype=dtypes.float16).randn_like().dtype
            dtypes.float16
        """
        d = kwargs.pop("dtype", None) or self.dtype
        if kwargs.get("device") is not None:
            return type(self).randn(self.shape, dtype=d, **kwargs)
        kwargs.pop("device", None)
        out = self._drawn_like(lambda sh, dev: type(self).randn(sh, dtype=d, device=dev))
        return type(self)(out.uop, device=out.device, **kwargs) if kwargs else out

    def _like_dtype(self, kwargs: dict[str, Any], name: str) -> DType:
        d = to_dtype(kwargs.pop("dtype")) if kwargs.get("dtype") is not None else self.dtype
        if not d.is_float:
            raise DTypeError(f"{name} draws floats; the tensor is {d}, pass a floating dtype with dtype=")
        return d

    @classmethod
    def _scaled_rand(cls, shape: tuple[Any, ...], low: float, high: float, dtype: DTypeLike | None,
                     kwargs: dict[str, Any]) -> Self:
        """tinygrad's uniform arithmetic, unrealized: `((high - low) * rand).cast(dtype) + low`, rand in the default
        float whatever `dtype` is (so the values are tinygrad's, and an integer dtype truncates)."""
        if not low < high:
            raise ValueError(f"uniform needs low < high, got low={low}, high={high}")
        d = to_dtype(dtype) if dtype is not None else dtypes.default_float
        return ((high - low) * cls.rand(*shape, **kwargs)).cast(d) + low

    @classmethod
    def uniform(cls, *shape: Any, low: float = 0.0, high: float = 1.0, dtype: DTypeLike | None = None,
                **kwargs: Any) -> Self:
        """Uniform values in [low, high) (`low < high`): `(high - low) * rand + low`, computed in float32 and cast to
        `dtype` before adding `low`, as tinygrad. The result is a realized leaf (requires_grad applies to it).

        Examples:
            >>> Tensor.manual_seed(0)
            >>> t = Tensor.uniform(100, low=-2, high=2)
            >>> bool(((t >= -2) & (t < 2)).all().item())
            True
        """
        requires_grad = kwargs.pop("requires_grad", None)
        out = cls._scaled_rand(shape, low, high, dtype, kwargs).realize()
        return out.requires_grad_(requires_grad)  # None (tinygrad's default), True or False

    @classmethod
    def normal(cls, *shape: Any, mean: float = 0.0, std: float = 1.0, **kwargs: Any) -> Self:
        """Normal values with the given `mean` and `std` (`std` must be >= 0): `std * randn + mean`; the result is a
        realized leaf, so `requires_grad=` applies to it.

        Examples:
            >>> Tensor.manual_seed(0)
            >>> t = Tensor.normal(1000, mean=5.0, std=0.1)
            >>> round(t.mean().item())
            5
        """
        if std < 0:
            raise RuntimeError(f"normal needs std >= 0, got std={std}")
        requires_grad = kwargs.pop("requires_grad", None)
        out = (std * cls.randn(*shape, **kwargs) + mean).realize()
        return out.requires_grad_(requires_grad)  # None (tinygrad's default), True or False

    @classmethod
    def randint(cls, *shape: Any, low: int = 0, high: int = 10, dtype: DTypeLike = dtypes.int32,
                device: DeviceLike = None, **kwargs: Any) -> Self:
        """Integers from [low, high): tinygrad's `low + trunc((high - low) * rand)`, the product in float32, so a
        range wider than 2**23 is covered in steps (the values are tinygrad's). The default dtype is int32
        (tinygrad's; PyTorch's is int64); a float dtype gets the integers as floats.

        Examples:
            >>> Tensor.manual_seed(0)
            >>> t = Tensor.randint(2, 3, low=5, high=8)
            >>> t.shape, t.dtype, bool(((t >= 5) & (t < 8)).all().item())
            ((2, 3), dtypes.int32, True)
        """
        sh, d = shape_args(shape), to_dtype(dtype)
        for name, v in (("low", low), ("high", high)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"randint {name} must be an int, got {type(v).__name__} {v!r}")
        low, high = int(low), int(high)
        if low >= high:
            raise RuntimeError(f"randint needs low < high, got low={low} >= high={high}")
        if not d.is_float and (low < d.min or high - 1 > d.max):
            raise ValueError(f"randint range [{low}, {high}) does not fit in {d} ([{d.min}, {d.max}])")
        span = high - low
        dev = canonical_device(device)  # several devices: drawn on the first, replicated
        # float32(span) * u with u < 1 stays below span (it rounds to at most span - 1 once span passes 2**24), so
        # truncated it is an offset in [0, span); it is added to low in unsigned words of the width the range needs
        # (wrapping), which gives tinygrad's `.cast(dtype) + low` wherever that is defined, 8-bit dtypes included
        offset = span * cls.rand(*sh, device=dev)
        if d.itemsize < 8 and dtypes.int32.min <= low and high - 1 <= dtypes.int32.max:
            values = (offset.cast(dtypes.uint32) + (low % (1 << 32))).bitcast(dtypes.int32)
        else:
            if not all(cls._runtime.supports_dtype(x, dtypes.uint64) for x in device_names(dev)):
                raise ValueError(f"randint range [{low}, {high}) needs 64-bit integers, which device {dev} lacks; "
                                 f"use a range within int32")
            values = (offset.cast(dtypes.uint64) + (low % (1 << 64))).bitcast(dtypes.int64)
        if d.is_unsigned and d.itemsize == values.dtype.itemsize:
            values = values.bitcast(d)
        return cls(values.cast(d).uop, device=dev, **kwargs)

    @classmethod
    def randperm(cls, n: int, device: DeviceLike = None, dtype: DTypeLike = dtypes.int32,
                 **kwargs: Any) -> Self:
        """A random permutation of 0..n-1 (int32 by default, tinygrad's; PyTorch's is int64): the order that sorts
        `rand(n)` (tinygrad's), ties in index order. Inside a TinyJit capture the sort runs on the device (O(n**2)
        work, so a replay draws a new permutation); outside one, a long draw is sorted on the host instead (the same
        permutation, without the quadratic cost: a dataset's shuffle).

        Examples:
            >>> Tensor.manual_seed(0)
            >>> Tensor.randperm(10).tolist()
            [8, 9, 4, 3, 6, 1, 7, 5, 2, 0]
        """
        _check_count(n, "randperm n")
        capturing = cls._runtime.capturing()
        draw = cls.rand(n, device=device)
        if n > HOST_SORT_MIN and not capturing and not isinstance(draw.device, tuple):
            order = np.argsort(draw.numpy(), kind="stable").astype(np.int64)
            return cls(order, device=draw.device, dtype=to_dtype(dtype), **kwargs)
        perm = draw.argsort().cast(to_dtype(dtype))
        return cls(perm.uop, device=perm.device, **kwargs) if kwargs else perm

    @classmethod
    def scaled_uniform(cls, *shape: Any, **kwargs: Any) -> Self:
        """Uniform in [-1, 1) scaled by 1/sqrt(numel) (tinygrad's arithmetic: the scale multiplies the uniform
        values); the result is a leaf, as `uniform`'s.

        Examples:
            >>> Tensor.manual_seed(0)
            >>> t = Tensor.scaled_uniform(4, 4)
            >>> bool((t.abs() <= 0.25).all().item())
            True
        """
        n = prod(shape_args(shape))
        requires_grad, dtype = kwargs.pop("requires_grad", None), kwargs.pop("dtype", None)
        out = (cls._scaled_rand(shape, -1.0, 1.0, dtype, kwargs) * (n ** -0.5 if n else 1.0)).realize()
        return out.requires_grad_(requires_grad)

    @classmethod
    def glorot_uniform(cls, *shape: Any, **kwargs: Any) -> Self:
        """Xavier/Glorot uniform: bound (6 / (fan_out + fan_in)) ** 0.5 with fan_out = shape[0].

        Examples:
            >>> Tensor.manual_seed(0)
            >>> t = Tensor.glorot_uniform(3, 3)
            >>> t.shape, bool((t.abs() <= 1).all().item())
            ((3, 3), True)
        """
        sh = shape_args(shape)
        if not sh:
            raise ValueError("glorot_uniform needs a shape with at least one dimension")
        fans = sh[0] + prod(sh[1:])
        bound = (6 / fans) ** 0.5 if fans else 1.0
        return cls.uniform(*shape, low=-bound, high=bound, **kwargs)

    @classmethod
    def kaiming_uniform(cls, *shape: Any, a: float = 0.01, **kwargs: Any) -> Self:
        """He uniform for a leaky ReLU of slope `a`: bound (6 / (1 + a^2) / fan_in) ** 0.5, fan_in = prod(shape[1:]).

        Examples:
            >>> Tensor.manual_seed(0)
            >>> t = Tensor.kaiming_uniform(4, 6, a=0)
            >>> bool((t.abs() <= 1).all().item())
            True
        """
        fan_in = prod(shape_args(shape)[1:])
        bound = (6 / (1 + a ** 2) / fan_in) ** 0.5 if fan_in else 1.0
        return cls.uniform(*shape, low=-bound, high=bound, **kwargs)

    @classmethod
    def kaiming_normal(cls, *shape: Any, a: float = 0.01, **kwargs: Any) -> Self:
        """He normal for a leaky ReLU of slope `a`: std (2 / (1 + a^2) / fan_in) ** 0.5, fan_in = prod(shape[1:]).

        Examples:
            >>> Tensor.manual_seed(0)
            >>> Tensor.kaiming_normal(8, 16).shape
            (8, 16)
        """
        fan_in = prod(shape_args(shape)[1:])
        std = (2 / (1 + a ** 2) / fan_in) ** 0.5 if fan_in else 1.0
        return cls.normal(*shape, mean=0.0, std=std, **kwargs)

    def multinomial(self, num_samples: int = 1, replacement: bool = False) -> Self:
        """Indices drawn from the categories of each row of `self` (1-D or 2-D non-negative weights, not
        necessarily normalized). Without replacement an index appears at most once per row. Returns int32
        (tinygrad's choice; PyTorch returns int64). tinygrad's draws: with replacement (or one sample) a float32
        rand of shape (num_samples, rows) on the default device against the cumulative weights (summed in float32),
        else the largest log2(rand) / weight per row (Efraimidis-Spirakis). It runs on the device, inside TinyJit
        too; the weights are checked on the host (finite, non-negative, a positive one per row) except while a
        TinyJit captures.

        Examples:
            >>> Tensor.manual_seed(0)
            >>> Tensor([0.0, 1.0, 0.0]).multinomial(3, replacement=True).tolist()
            [1, 1, 1]
            >>> sorted(Tensor([1.0, 1.0, 1.0]).multinomial(3).tolist())
            [0, 1, 2]
        """
        if self.ndim not in (1, 2):
            raise RuntimeError(f"multinomial needs a 1-D or 2-D tensor of weights, got shape {self.shape}")
        if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples <= 0:
            raise RuntimeError(f"multinomial needs num_samples > 0, got {num_samples!r}")
        if self.shape[-1] == 0:
            raise RuntimeError("multinomial needs at least one category")
        if not replacement and num_samples > self.shape[-1]:
            raise RuntimeError(f"cannot draw {num_samples} samples without replacement from {self.shape[-1]} "
                               f"categories")
        cats = self.shape[-1]
        w = self.reshape(-1, cats)
        if not type(self)._runtime.capturing():
            _check_multinomial_weights(w.float().numpy(), num_samples, replacement)  # a replay could not check
        rows = w.shape[0]
        if replacement or num_samples == 1:
            # the index of a draw u is the number of categories whose cumulative share is at or below it; the last
            # share is exactly 1 (a sum divided by itself), above every draw, and a zero weight adds no step
            cum = w.float().cumsum(1)
            cdf = cum / cum[:, cats - 1:]
            u = type(self).rand(num_samples, rows, 1).to(self.device)
            idx = (u >= cdf).sum(2).permute(1, 0)
        else:
            # Efraimidis-Spirakis: the num_samples largest u ** (1 / w), compared through their logarithms
            idx = (w.rand_like(dtype=dtypes.float32).log2() / w.float()).topk(num_samples, dim=1)[1]
        return idx.cast(dtypes.int32).reshape(self.shape[:-1] + (num_samples,))

    def dropout(self, p: float = 0.5) -> Self:
        """In training mode (`Tensor.training`, or `Context(TRAINING=1)`), zero each element with probability p and
        divide the rest by 1 - p; otherwise the identity. The mask is tinygrad's: `rand_like(self) >= p` in the
        default float (a draw per shard on a sharded tensor), written to a buffer of its own.

        Examples:
            >>> Tensor.ones(4).dropout(0.5).tolist()
            [1.0, 1.0, 1.0, 1.0]
            >>> Tensor.manual_seed(0)
            >>> with Tensor.train():
            ...     y = Tensor.ones(8).dropout(0.5)
            >>> set(y.tolist()) <= {0.0, 2.0}
            True
        """
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, got {p}")
        if not (type(self).training or TRAINING) or p == 0:
            return self
        if not self.dtype.is_float:
            raise DTypeError(f"dropout of a {self.dtype} tensor; dropout scales by 1/(1-p) and needs floats")
        if p == 1:
            return self * 0
        keep = _own_buffer(self.rand_like(dtype=dtypes.default_float, contiguous=False) >= p)
        return keep.where(self, 0) / (1.0 - p)

def _own_buffer(t: TensorT) -> TensorT:
    """`t` marked to be written to a buffer of its own when a reader runs, and remembered there (a tagged CONTIGUOUS,
    as a clone's): later readers, and the tensor itself, read that buffer, as tinygrad's contiguous random values."""
    return type(t)(UOp(Ops.CONTIGUOUS, t.dtype, (t.uop,), ("random",)), device=t.device)


def _max_size(s: sint) -> int:
    return s if isinstance(s, int) else int(s.vmax)


def _check_count(n: Any, what: str) -> None:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"{what} must be an int, got {type(n).__name__} {n!r}")
    if n < 0:
        raise ValueError(f"{what} must be non-negative, got {n}")


def _float_dtype(dtype: DTypeLike | None, name: str) -> DType:
    d = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if not d.is_float:
        raise DTypeError(f"{name} draws floats, got dtype={d}; use randint for integers")
    return d


def _check_multinomial_weights(w: np.ndarray, num_samples: int, replacement: bool) -> None:
    if not np.isfinite(w).all() or (w < 0).any():
        raise RuntimeError("multinomial weights must be finite and non-negative (got inf, nan or a negative)")
    if (w.sum(axis=1) <= 0).any():
        raise RuntimeError("multinomial needs a positive weight in every row (a row sums to 0)")
    if not replacement and ((w > 0).sum(axis=1) < num_samples).any():
        raise RuntimeError(f"cannot draw {num_samples} samples without replacement: a row has fewer categories of "
                           f"positive weight")


def _on_default(cls: type[TensorBase], device: DeviceLike) -> DeviceLike:
    """A creation function's device: None is the default device. (A graph of constants given to the Tensor
    constructor with no device stays on none, tinygrad's deviceless tensor; the creation functions place theirs.)"""
    return cls._runtime.canonical_device(None) if device is None else device
