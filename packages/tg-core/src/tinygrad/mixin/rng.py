"""The random number generator: tinygrad 0.14's Threefry-2x32 stream, computed in kernels from a state per device.

The stream is the one tinygrad 0.14.0 draws, so `Tensor.manual_seed(s)` followed by the same draws gives the same
numbers in both (rand bit for bit). Its pieces:

* **Threefry-2x32** (20 rounds, Salmon et al., "Parallel random numbers: as easy as 1, 2, 3") maps a 64-bit key and a
  pair of 32-bit counter words to a pair of 32-bit words. It is written here with uint32 tensor ops, so it is part
  of the graph like any other op: a TinyJit replay computes new numbers instead of repeating the captured ones.
* **Keys.** Each device has a key of two words: the low 32 bits of SHA-256 of its number (as 4 big-endian bytes),
  and the seed's low 32 bits. A device's number is its place in the order in which devices first drew since the
  last `manual_seed` (the first device to draw is 0), so two devices draw different streams.
* **Counter.** Each device counts the 32-bit words drawn from it (64 bits). A draw of n words starting at count c
  first derives a key of its own, Threefry(device key, (c low, c high)), and then word j < h = ceil(n / 2) of the
  draw is the first output word of Threefry(draw key, (j, j + h)), word h + j the second one.
* **State.** Each device keeps a uint32[4] state tensor (key word 0, key word 1, count low, count high). A draw
  assigns the advanced state to it lazily (as any model state: inside a TinyJit function the state is written back
  on every replay) and reads its words from the advanced value, so a draw made before keeps what it read. The
  advanced value is a node of its own, computed by a tiny kernel into a buffer, so the kernel of a draw is the same
  whatever came before it. Draws nobody realizes chain their advances: after MAX_PENDING_DRAWS of them the state
  is realized.
* **Floats.** A float of d bytes with m explicit mantissa bits takes the d bytes of the word stream in order (a
  float16 takes half a word: the low half first; a float64 two words: the low word first) and keeps the top m bits
  of them as the fraction f: the value is f / 2**m, exactly what `bitcast(f | bits of 1.0) - 1` gives. It is
  computed without the bitcast (casts of integers that float32 or float64 holds exactly), so every device that
  has the float dtype can draw it.

Draws of more than MAX_DRAW words are split into chunks of MAX_DRAW words, each with the key of its own first count.
"""

from __future__ import annotations

import hashlib
import math
import time
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from tinygrad.dtype import DType, dtypes
from tinygrad.mixin.common import TensorT
from tinygrad.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from tinygrad.uop.placement import DeviceSpec

MASK32 = 0xFFFFFFFF
#: the words of one draw are numbered with 32 bits: a larger draw is split into chunks of this many words
MAX_DRAW = MASK32
#: a state is realized after this many draws nobody realized it through (each adds a few nodes to its graph)
MAX_PENDING_DRAWS = 32
#: Threefry-2x32's rotation distances, the first four rounds of each eight, then the next four
ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
#: the constant xor-ed into the third word of Threefry's key schedule
KEY_PARITY = 0x1BD11BDA

W = TypeVar("W")  # a uint32 Tensor or a numpy uint32 array: the same arithmetic runs on both


def _rotl(x: Any, r: int) -> Any:
    return (x << r) | (x >> (32 - r))


def threefry2x32(k0: W, k1: W, x0: W, x1: W) -> tuple[W, W]:
    """Threefry-2x32 with 20 rounds of the counter words (x0, x1) under the key (k0, k1): uint32 tensors or numpy
    arrays, broadcast together, uint32 arithmetic wrapping."""
    a: Any = k0
    b: Any = k1
    ks = (a, b, a ^ b ^ KEY_PARITY)
    y0: Any = x0 + ks[0]
    y1: Any = x1 + ks[1]
    for block in range(5):  # five blocks of four rounds, each followed by a key injection
        for r in ROTATIONS[block % 2]:
            y0 = y0 + y1
            y1 = _rotl(y1, r) ^ y0
        y0 = y0 + ks[(block + 1) % 3]
        y1 = y1 + ks[(block + 2) % 3] + (block + 1)
    return y0, y1


def device_key(number: int) -> int:
    """Key word 0 of the device that drew `number`-th (from 0) since the seed."""
    return int.from_bytes(hashlib.sha256(number.to_bytes(4, "big")).digest(), "big") & MASK32


def draw_words_host(key: tuple[int, int], start: int, n: int) -> np.ndarray:
    """The n words that a draw starting at count `start` under the device key `key` gives, computed with numpy (the
    reference the kernels are checked against)."""
    out = []
    for first in range(0, n, MAX_DRAW):
        size = min(n - first, MAX_DRAW)
        count = (start + first) % (1 << 64)
        k = threefry2x32(*(np.array([w], np.uint32) for w in (*key, count & MASK32, count >> 32)))
        half = (size + 1) // 2
        j = np.arange(half, dtype=np.uint32)
        y0, y1 = threefry2x32(k[0], k[1], j, j + np.uint32(half))
        out.append(np.concatenate([y0, y1])[:size])
    return np.concatenate(out) if out else np.zeros(0, np.uint32)


class DeviceRNG:
    """The generator's state per device. `Tensor.manual_seed` sets the seed. The draws take the tensor class that
    builds the state on a device's first draw (tensor.py imports this module, so it cannot name Tensor)."""

    #: tinygrad's default: the time of import in seconds, so runs that do not seed draw differently
    seed = int(time.time())
    states: dict[str, Any] = {}  # device -> its state tensor
    #: devices in the order of their first draw since the seed: a device's key comes from its place here
    order: list[str] = []
    #: the place each existing state's key was made for at the last `manual_seed` (before the order was known)
    keyed_for: dict[str, int] = {}
    pending: dict[str, int] = {}  # draws since a device's state was last realized

    @classmethod
    def manual_seed(cls, seed: int) -> None:
        cls.seed = int(seed)
        before = cls.order + [d for d in cls.states if d not in cls.order]
        cls.order, cls.keyed_for = [], {}
        for number, device in enumerate(before):
            # An assign, as a draw's: draws made before keep their numbers, and a TinyJit function that draws takes
            # the new state at its next replay. The key is made for the device's place in the last order; the first
            # eager draw fixes it if the devices now draw in another order.
            state = cls.states[device]
            state.assign(_fresh_state(type(state), device, number, cls.seed))
            cls.keyed_for[device] = number
            cls.pending[device] = 0

    @classmethod
    def state(cls, tensor_type: type[TensorT], device: str) -> TensorT:
        """The state tensor of `device`, keyed for the device's place in the order of first draws since the seed."""
        if device not in cls.order:
            number = len(cls.order)
            cls.order.append(device)
            if device not in cls.states:
                cls.states[device] = _fresh_state(tensor_type, device, number, cls.seed)
            elif cls.keyed_for.get(device) != number:
                # another key for the device's place in the new order; the count is kept, so that the words a
                # TinyJit replay drew under the old key since the seed are never drawn again under the new one
                state = cls.states[device]
                key = tensor_type(np.array([device_key(number), cls.seed & MASK32], dtype=np.uint32), device=device)
                state.assign(key.cat(state[2:4]))
            cls.keyed_for[device] = number
        return cls.states[device]

    @classmethod
    def bits(cls, tensor_type: type[TensorT], n: int, device: DeviceSpec) -> TensorT:
        """The next n words (uint32, lazy) of `device`'s stream, advancing its count by n."""
        if isinstance(device, tuple):  # drawn on the first device, so that every device holds the same values
            return cls.bits(tensor_type, n, device[0]).to(device)
        state = cls.state(tensor_type, device)
        # The advanced state is a node of its own (a tagged CONTIGUOUS, remembered once realized): a draw's kernel
        # reads it from a buffer, so every draw of a size is one kernel, whatever chain of draws came before.
        advanced = _advance(state, n)
        after = tensor_type(UOp(Ops.CONTIGUOUS, advanced.dtype, (advanced.uop,), ("random state",)), device=device)
        state.assign(after)  # lazy; inside a TinyJit function the state is written back on every replay
        cls.pending[device] = cls.pending.get(device, 0) + 1
        if cls.pending[device] >= MAX_PENDING_DRAWS:  # bound the chain of unrealized advances a state may hold
            state.realize()
            cls.pending[device] = 0
        if n == 0:
            return tensor_type.empty(0, dtype=dtypes.uint32, device=device)
        # the count before the draw: the advanced count minus n, with a borrow into the high word
        lo, hi = after[2:3], after[3:4]
        start_lo = lo - (n & MASK32)
        start_hi = hi - (n >> 32) - (lo < (n & MASK32)).cast(dtypes.uint32)
        chunks = []
        for first in range(0, n, MAX_DRAW):
            c_lo = start_lo + (first & MASK32)
            c_hi = start_hi + (first >> 32) + (c_lo < start_lo).cast(dtypes.uint32)
            k0, k1 = threefry2x32(after[0:1], after[1:2], c_lo, c_hi)
            chunks.append(_chunk(tensor_type, k0, k1, min(n - first, MAX_DRAW), device))
        return chunks[0].cat(*chunks[1:]) if len(chunks) > 1 else chunks[0]


def _fresh_state(tensor_type: type[TensorT], device: str, number: int, seed: int) -> TensorT:
    # uploaded from the host: a buffer of its own, never a constant that equal states would share
    return tensor_type(np.array([device_key(number), seed & MASK32, 0, 0], dtype=np.uint32), device=device)


def _chunk(tensor_type: type[TensorT], k0: TensorT, k1: TensorT, size: int, device: str) -> TensorT:
    """Words 0..size-1 of a chunk with the key (k0, k1): word j < h = ceil(size / 2) is Threefry's first output for
    the counter (j, j + h), word h + j its second. Each word computes its own pair (one Threefry per word, no
    concatenation of two halves that would compute both)."""
    half = (size + 1) // 2
    j = tensor_type(UOp(Ops.ARANGE, dtypes.uint32, (), size), device=device)  # the loop index itself, no buffer
    second = j >= half
    pair = second.where(j - half, j)
    y0, y1 = threefry2x32(k0, k1, pair, pair + half)
    return second.where(y1, y0)


def _advance(state: TensorT, n: int) -> TensorT:
    lo, hi = state[2:3], state[3:4]
    new_lo = lo + (n & MASK32)
    carry = (new_lo < lo).cast(dtypes.uint32)
    return state[0:2].cat(new_lo, hi + (n >> 32) + carry)


# ---- distributions built on the words ----

def words_for(n: int, dtype: DType) -> int:
    """How many words a draw of n values of `dtype` takes (a float16 takes half a word, a float64 two)."""
    return math.ceil(n * dtype.itemsize / 4)


def stream_bytes(words: TensorT, n: int, size: int) -> TensorT:
    """The first n values of `size` bytes (1, 2, 4 or 8) in the byte stream of `words` (little-endian: the low part
    of a word first), as uint32 pieces: shape (n,) for sizes up to 4, (n, 2) (low word, high word) for 8."""
    if size == 4:
        return words[:n]
    if size == 8:
        return words.reshape(n, 2)
    per_word = 4 // size
    mask = (1 << (8 * size)) - 1
    pieces = [(words >> (8 * size * i)) & mask for i in range(per_word)]
    return pieces[0].stack(*pieces[1:], dim=1).reshape(words.shape[0] * per_word)[:n]


def uniform_bits(tensor_type: type[TensorT], n: int, dtype: DType, device: DeviceSpec) -> TensorT:
    """n values in [0, 1) of the float `dtype`, lazily: each is f / 2**m with f the top m bits (m: the explicit
    mantissa bits of `dtype`) of its bytes of the stream, tinygrad's `bitcast(f | bits of 1.0) - 1`."""
    mant = dtypes.finfo(dtype)[1]
    size = dtype.itemsize
    words = DeviceRNG.bits(tensor_type, words_for(n, dtype), device)
    if n == 0:
        return tensor_type.empty(0, dtype=dtype, device=device)
    if size == 8:  # 52 bits: the high word's 32 and the low word's top 20, summed exactly in float64
        pairs = stream_bytes(words, n, 8)
        lo, hi = pairs[:, 0], pairs[:, 1]
        return (hi.cast(dtypes.float64) * 2.0 ** -32 + (lo >> (32 - (mant - 32))).cast(dtypes.float64) * 2.0 ** -mant
                ).cast(dtype)
    fraction = stream_bytes(words, n, size) >> (8 * size - mant)  # < 2**23: float32 holds it exactly
    return (fraction.cast(dtypes.float32) * 2.0 ** -mant).cast(dtype)


def normal_bits(tensor_type: type[TensorT], n: int, device: DeviceSpec) -> TensorT:
    """n standard normal float32 values: Box-Muller, cos(2 pi u) * sqrt(-2 log(1 - v)), on the first n and the next n
    float32 values of one draw of 2n (as tinygrad: its randn draws rand of shape (2, n) in float32)."""
    u = uniform_bits(tensor_type, 2 * n, dtypes.float32, device)
    first, second = u[:n], u[n:]
    return (first * (2 * math.pi)).cos() * ((1 - second).log() * -2).sqrt()  # 1 - second is in (0, 1]


def bits64(tensor_type: type[TensorT], n: int, device: DeviceSpec) -> TensorT:
    """n uint64 values, each two words of the stream (the low word first)."""
    pairs = stream_bytes(DeviceRNG.bits(tensor_type, 2 * n, device), n, 8).cast(dtypes.uint64)
    return pairs[:, 0] | (pairs[:, 1] << 32)
