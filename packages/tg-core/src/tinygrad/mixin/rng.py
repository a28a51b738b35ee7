"""The random number generator: counter-based, computed inside kernels, its state a tensor on each device.

Value i of a draw is a hash of (key, counter + i), written with uint32 tensor ops, so it is part of the graph
like any other op: a TinyJit replay computes new numbers instead of repeating the captured ones. Each device keeps
a uint32[4] state tensor (key1, key2, counter low, counter high). A draw of n values

  1. computes the advanced state `C = state + n`, lazily, and assigns it to the state (an assign, as any model
     state's: inside a TinyJit function the state is written back on every replay, and a draw made before keeps
     the state it read);
  2. returns the lazy hash of (key, C - n + i) for i < n.

Nothing runs until a value is needed, so a whole training can be built before anything is computed (tinygrad's
one-shot style). Draws nobody realizes chain their advances: after MAX_PENDING_DRAWS of them the state is realized
(one tiny kernel) to keep its graph small. The keys come from the seed (host arithmetic, once per `manual_seed`),
so one seed gives the same numbers on every device.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from tinygrad.dtype import DType, dtypes, significand_bits

if TYPE_CHECKING:
    from tinygrad.multi import DeviceSpec
    from tinygrad.tensor import Tensor

MASK32 = 0xFFFFFFFF
#: one draw takes at most this many values: the per-element index is 32 bits
MAX_DRAW = 1 << 32
#: a state is realized after this many draws nobody realized it through (each adds a few nodes to its graph)
MAX_PENDING_DRAWS = 32


def _mix_host(x: int) -> int:
    """The 32-bit integer hash below, on a Python int (for deriving the keys from the seed)."""
    x ^= x >> 16
    x = (x * 0x7FEB352D) & MASK32
    x ^= x >> 15
    x = (x * 0x846CA68B) & MASK32
    return x ^ (x >> 16)


def _mix(x: Tensor) -> Tensor:
    # a bijective 32-bit hash: xor-shift / multiply rounds (uint32 arithmetic wraps)
    x = x ^ (x >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x846CA68B
    return x ^ (x >> 16)


def seed_keys(seed: int) -> tuple[int, int]:
    """Two 32-bit keys from a seed of any size; nearby seeds give unrelated keys."""
    s = seed % (1 << 64)
    k1 = _mix_host((s & MASK32) ^ 0x243F6A88) ^ _mix_host(((s >> 32) + 0x85A308D3) & MASK32)
    return k1, _mix_host(k1 ^ 0x13198A2E)


class DeviceRNG:
    """The generator's state per device. `Tensor.manual_seed` resets it. The draws take the tensor class that
    builds the state on a device's first draw (tensor.py imports this module, so it cannot name Tensor)."""

    seed = 0
    states: dict[str, Tensor] = {}
    pending: dict[str, int] = {}  # draws since a device's state was last realized
    _iota: dict[tuple[str, int], Tensor] = {}  # index vectors by (device, length), reused between draws

    @classmethod
    def manual_seed(cls, seed: int) -> None:
        cls.seed = int(seed)
        k1, k2 = seed_keys(cls.seed)
        for device, state in cls.states.items():
            # an assign, as a draw's: draws made before keep their numbers, and a TinyJit function that draws takes
            # the new state at its next replay
            state.assign(type(state)(np.array([k1, k2, 0, 0], dtype=np.uint32), device=device))
            cls.pending[device] = 0

    @classmethod
    def state(cls, tensor_type: type[Tensor], device: str) -> Tensor:
        if device not in cls.states:
            k1, k2 = seed_keys(cls.seed)
            cls.states[device] = tensor_type(np.array([k1, k2, 0, 0], dtype=np.uint32), device=device)
        return cls.states[device]

    @classmethod
    def iota(cls, tensor_type: type[Tensor], device: str, n: int) -> Tensor:
        key = (device, n)
        if key not in cls._iota:
            if len(cls._iota) > 32:
                cls._iota.pop(next(iter(cls._iota)))
            cls._iota[key] = tensor_type(np.arange(n, dtype=np.uint32), device=device)
        return cls._iota[key]

    @classmethod
    def bits(cls, tensor_type: type[Tensor], n: int, device: DeviceSpec) -> Tensor:
        """n uniformly random uint32 values on `device` (lazy), advancing the device's counter by n."""
        if isinstance(device, tuple):  # drawn on the first device, so that every device holds the same values
            return cls.bits(tensor_type, n, device[0]).to(device)
        if n >= MAX_DRAW:
            raise ValueError(f"one random draw can take at most {MAX_DRAW - 1} values, asked for {n}; draw in parts")
        state = cls.state(tensor_type, device)
        after = _advance(state, n)
        state.assign(after)  # lazy; inside a TinyJit function the state is written back on every replay
        cls.pending[device] = cls.pending.get(device, 0) + 1
        if cls.pending[device] >= MAX_PENDING_DRAWS:  # bound the chain of unrealized advances a state may hold
            state.realize()
            cls.pending[device] = 0
        if n == 0:
            return tensor_type.empty(0, dtype=dtypes.uint32, device=device)
        k1, k2, lo, hi = (after[i:i + 1] for i in range(4))
        start_lo = lo - n  # the counter before the draw: C - n, with a borrow into the high word
        start_hi = hi - (lo < n).cast(dtypes.uint32)
        idx_lo = start_lo + cls.iota(tensor_type, device, n)
        idx_hi = start_hi + (idx_lo < start_lo).cast(dtypes.uint32)
        x = _mix(idx_lo + _mix(idx_hi ^ k2))
        return _mix(_mix(x ^ k1) + k2)


def _advance(state: Tensor, n: int) -> Tensor:
    lo, hi = state[2:3], state[3:4]
    new_lo = lo + n
    carry = (new_lo < lo).cast(dtypes.uint32)
    return state[0:2].cat(new_lo, hi + carry)


# ---- distributions built on the bits ----

def uniform_bits(tensor_type: type[Tensor], n: int, dtype: DType, device: DeviceSpec) -> Tensor:
    """n values in [0, 1), each exactly representable in `dtype` (so that casting never rounds up to 1)."""
    if dtype == dtypes.float64:
        raw = DeviceRNG.bits(tensor_type, 2 * n, device)
        hi, lo = raw[:n], raw[n:]
        return (hi >> 11).cast(dtypes.float64) * (2.0 ** -21) + lo.cast(dtypes.float64) * (2.0 ** -53)
    mantissa = min(significand_bits(dtype), 24) if dtype.is_float else 24
    u = (DeviceRNG.bits(tensor_type, n, device) >> (32 - mantissa)).cast(dtypes.float32) * (2.0 ** -mantissa)
    return u.cast(dtype)


def normal_bits(tensor_type: type[Tensor], n: int, dtype: DType, device: DeviceSpec) -> Tensor:
    """n standard normal values (Box-Muller on two uniform draws), computed in float32 (float64 for float64)."""
    work = dtypes.float64 if dtype == dtypes.float64 else dtypes.float32
    u = uniform_bits(tensor_type, 2 * n, work, device)
    u1, u2 = u[:n], u[n:]
    r = ((1 - u1).log() * -2).sqrt()  # 1 - u1 is in (0, 1]: the log is finite
    return (r * (u2 * (2 * math.pi)).cos()).cast(dtype)


def bits64(tensor_type: type[Tensor], n: int, device: DeviceSpec) -> Tensor:
    raw = DeviceRNG.bits(tensor_type, 2 * n, device).cast(dtypes.uint64)
    return (raw[:n] << 32) | raw[n:]
