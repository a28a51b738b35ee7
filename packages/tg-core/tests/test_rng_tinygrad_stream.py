"""The random generator draws tinygrad 0.14.0's stream: Threefry-2x32, keyed per device, counted in 32-bit words.

The TINYGRAD_* values below were printed by tinygrad 0.14.0 on its CPU device. To regenerate them, run in a venv
with `pip install tinygrad==0.14.0` (its CPU device compiles with clang: put LLVM's bin folder on PATH), with DEV=CPU:

    from tinygrad import Tensor, dtypes, Context
    Tensor.manual_seed(0)
    print(Tensor.rand(3).tolist(), Tensor.rand(2, 3).tolist(), Tensor.rand(5, dtype=dtypes.float16).tolist(),
          Tensor.rand(3, dtype=dtypes.float64).tolist(), Tensor.randint(6, low=-5, high=17).tolist(),
          Tensor.randperm(10).tolist(), Tensor.randn(4).tolist())
    with Context(TRAINING=1):
        print(Tensor.ones(10).dropout(0.3).tolist())
    print(Tensor([1.0, 0.0, 3.0, 2.0]).multinomial(6, replacement=True).tolist(),
          Tensor([1.0, 0.0, 3.0, 2.0]).multinomial(2).tolist(), Tensor.uniform(3, low=-2.0, high=3.0).tolist(),
          Tensor.kaiming_uniform(2, 3).tolist())
    Tensor.manual_seed(1337); print(Tensor.rand(4).tolist())
    Tensor.manual_seed(5); print(Tensor.rand(3, device="CPU:1").tolist(), Tensor.rand(3, device="CPU").tolist())

(each line of TINYGRAD_SEED0 is one of those draws, in that order). The rest checks what the stream promises on the
device under test: the Threefry known-answer vectors, the device kernels against the host formula (across the 32-bit
counter boundary and across draw chunks), and the properties of the draws.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tinygrad import Context, Device, Tensor, TinyJit, dtypes
from tinygrad.mixin import rng

# tinygrad 0.14.0, Tensor.manual_seed(0), these draws in this order
TINYGRAD_SEED0: list[tuple[str, Any]] = [
    ("rand3", [0.8280726671218872, 0.6228508949279785, 0.5572898387908936]),
    ("rand2x3", [[0.557558536529541, 0.4544949531555176, 0.5733232498168945],
                 [0.8008832931518555, 0.5538884401321411, 0.3078092336654663]]),
    ("rand_f16", [0.8720703125, 0.392578125, 0.1005859375, 0.8759765625, 0.416015625]),
    ("rand_f64", [0.5857174756339727, 0.31106952054547254, 0.7990466246187613]),
    ("randint", [-3, 8, 15, 16, 0, 7]),
    ("randperm", [0, 9, 4, 8, 6, 2, 5, 3, 1, 7]),
    ("randn", [2.1380579471588135, 0.658186674118042, -0.8457381725311279, -0.8958374857902527]),
    ("dropout", [1.4285714626312256, 1.4285714626312256, 0.0, 1.4285714626312256, 0.0, 1.4285714626312256,
                 1.4285714626312256, 1.4285714626312256, 0.0, 0.0]),
    ("multinomial", [3, 2, 2, 3, 2, 3]),
    ("multinomial_norepl", [0, 2]),
    ("uniform", [0.6847630739212036, 2.3086016178131104, 0.8391033411026001]),
    ("kaiming_uniform", [[-1.0897432565689087, 1.0524135828018188, -0.8372002243995667],
                         [-1.355525255203247, -0.39273402094841003, -0.9249948263168335]]),
]
TINYGRAD_SEED1337_RAND4 = [0.892863392829895, 0.4005793333053589, 0.7638740539550781, 0.30793440341949463]
# seed 5: the first device to draw (CPU:1) takes device key 0, the second (CPU) key 1
TINYGRAD_SEED5_SECOND_DEVICE_FIRST = [0.3820037841796875, 0.4123044013977051, 0.4209791421890259]
TINYGRAD_SEED5_FIRST_DEVICE_SECOND = [0.7402219772338867, 0.6731693744659424, 0.315280556678772]


def _supports(dtype: Any) -> bool:
    return Device[Device.DEFAULT].supports_dtype(dtype)


def _draw(name: str) -> Tensor:
    if name == "rand3":
        return Tensor.rand(3)
    if name == "rand2x3":
        return Tensor.rand(2, 3)
    if name == "rand_f16":
        return Tensor.rand(5, dtype=dtypes.float16)
    if name == "rand_f64":
        return Tensor.rand(3, dtype=dtypes.float64)
    if name == "randint":
        return Tensor.randint(6, low=-5, high=17)
    if name == "randperm":
        return Tensor.randperm(10)
    if name == "randn":
        return Tensor.randn(4)
    if name == "dropout":
        with Context(TRAINING=1):
            return Tensor.ones(10).dropout(0.3)
    if name == "multinomial":
        return Tensor([1.0, 0.0, 3.0, 2.0]).multinomial(6, replacement=True)
    if name == "multinomial_norepl":
        return Tensor([1.0, 0.0, 3.0, 2.0]).multinomial(2)
    if name == "uniform":
        return Tensor.uniform(3, low=-2.0, high=3.0)
    assert name == "kaiming_uniform"
    return Tensor.kaiming_uniform(2, 3)


# the words a draw of a dtype the device lacks takes from the stream (5 float16 values: 3 words; 3 float64: 6)
SKIPPED_DRAW_WORDS = {"rand_f16": (dtypes.float16, 3), "rand_f64": (dtypes.float64, 6)}


def test_a_sequence_of_draws_gives_tinygrads_values() -> None:
    Tensor.manual_seed(0)
    for name, want in TINYGRAD_SEED0:
        if name in SKIPPED_DRAW_WORDS and not _supports(SKIPPED_DRAW_WORDS[name][0]):
            Tensor.random_bits(SKIPPED_DRAW_WORDS[name][1]).realize()  # the same advance, so the rest still agrees
            continue
        got = _draw(name).numpy()
        if name == "randn":  # the bits agree; log, cos and sqrt may round differently from tinygrad's by an ulp or so
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, err_msg=name)
        elif name in ("uniform", "kaiming_uniform"):
            # (high - low) * u + low: the same bits, then a multiply and an add that tinygrad's CPU compiler contracts
            # into one fused multiply-add where it sees them in one expression; this CPU path fuses a product only
            # into a reduction's accumulator (so an expression rounds alike in every kernel), and a GPU compiler may
            # fuse or not: an ulp apart at most
            np.testing.assert_allclose(got, want, rtol=2.5e-7, atol=0, err_msg=name)
        else:
            np.testing.assert_array_equal(got, np.array(want, dtype=got.dtype), err_msg=name)


def test_another_seed_and_the_seed_s_low_32_bits() -> None:
    Tensor.manual_seed(1337)
    np.testing.assert_array_equal(Tensor.rand(4).numpy(), np.float32(TINYGRAD_SEED1337_RAND4))
    Tensor.manual_seed(1337 + (7 << 32))  # the key holds the seed's low 32 bits
    np.testing.assert_array_equal(Tensor.rand(4).numpy(), np.float32(TINYGRAD_SEED1337_RAND4))


def _second_device() -> str | None:
    name = f"{Device.DEFAULT.split(':')[0]}:1"
    try:
        Device[name]
    except Exception:
        return None
    return Device.canonicalize(name)


@pytest.mark.skipif(bool(os.environ.get("TG_EXPECT_DEVICE")), reason="opens a second device")
def test_each_device_keys_its_stream_by_the_order_of_first_draws() -> None:
    other = _second_device()
    if other is None:
        pytest.skip(f"{Device.DEFAULT} has no second device {Device.DEFAULT}:1")
    Tensor.manual_seed(5)
    np.testing.assert_array_equal(Tensor.rand(3, device=other).numpy(), np.float32(TINYGRAD_SEED5_SECOND_DEVICE_FIRST))
    np.testing.assert_array_equal(Tensor.rand(3, device=Device.DEFAULT).numpy(),
                                  np.float32(TINYGRAD_SEED5_FIRST_DEVICE_SECOND))
    # after a new seed the order starts again: now the default device draws first and takes key 0
    Tensor.manual_seed(5)
    first = Tensor.rand(3, device=Device.DEFAULT).numpy()
    np.testing.assert_array_equal(first, np.float32(TINYGRAD_SEED5_SECOND_DEVICE_FIRST))
    assert not np.array_equal(Tensor.rand(3, device=other).numpy(), first)


@pytest.mark.skipif(bool(os.environ.get("TG_EXPECT_DEVICE")), reason="opens a second device")
def test_a_sharded_tensor_draws_each_shard_on_its_own_device() -> None:
    other = _second_device()
    if other is None:
        pytest.skip(f"{Device.DEFAULT} has no second device {Device.DEFAULT}:1")
    devices = (Device.DEFAULT, other)
    Tensor.manual_seed(0)
    drawn = Tensor.ones(4, 2).shard(devices, axis=0).rand_like()
    assert drawn.device == devices
    Tensor.manual_seed(0)
    each = [Tensor.rand(2, 2, device=d).numpy() for d in devices]  # tinygrad's: shard i from device i's stream
    np.testing.assert_array_equal(drawn.numpy(), np.concatenate(each))


# ---- Threefry-2x32 itself ----

# Random123's known answers for threefry2x32 with 20 rounds: (counter words, key words) -> output words
THREEFRY_KAT = [
    ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x243F6A88, 0x85A308D3), (0x13198A2E, 0x03707344), (0xC4923A9C, 0x483DF7A0)),
]


def test_threefry_known_answers_on_the_host_and_the_device() -> None:
    for (x0, x1), (k0, k1), want in THREEFRY_KAT:
        host = rng.threefry2x32(*(np.array([v], np.uint32) for v in (k0, k1, x0, x1)))
        assert (int(host[0][0]), int(host[1][0])) == want
        dev = rng.threefry2x32(*(Tensor(np.array([v], np.uint32)) for v in (k0, k1, x0, x1)))
        assert (dev[0].item(), dev[1].item()) == want
    if _supports(dtypes.uint64):  # tinygrad's Tensor.threefry packs the words into uint64s, the low word first
        (x0, x1), (k0, k1), (y0, y1) = THREEFRY_KAT[2]
        out = Tensor([x0 | x1 << 32], dtype=dtypes.uint64).threefry(Tensor([k0 | k1 << 32], dtype=dtypes.uint64))
        assert out.tolist() == [y0 | y1 << 32]


def test_the_device_stream_follows_the_host_formula_across_the_32_bit_counter_boundary() -> None:
    Tensor.manual_seed(42)
    key = (rng.device_key(0), 42)
    np.testing.assert_array_equal(Tensor.random_bits(101).numpy(), rng.draw_words_host(key, 0, 101))
    state = rng.DeviceRNG.state(Tensor, Device.DEFAULT)
    start = (1 << 32) - 10  # the next draw starts in the counter's low word and ends in the high one
    state._buffer().copyin(np.array([*key, start & 0xFFFFFFFF, start >> 32], np.uint32).data.cast("B"))
    np.testing.assert_array_equal(Tensor.random_bits(30).numpy(), rng.draw_words_host(key, start, 30))
    np.testing.assert_array_equal(Tensor.random_bits(5).numpy(), rng.draw_words_host(key, start + 30, 5))


def test_a_draw_larger_than_a_chunk_is_drawn_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    # a chunk is 2**32 - 1 words; with a small chunk the same code splits a small draw
    monkeypatch.setattr(rng, "MAX_DRAW", 7)
    Tensor.manual_seed(11)
    key = (rng.device_key(0), 11)
    np.testing.assert_array_equal(Tensor.random_bits(3).numpy(), rng.draw_words_host(key, 0, 3))
    np.testing.assert_array_equal(Tensor.random_bits(23).numpy(), rng.draw_words_host(key, 3, 23))
    np.testing.assert_array_equal(Tensor.random_bits(4).numpy(), rng.draw_words_host(key, 26, 4))


# ---- what the draws promise ----

def test_rand_gets_a_buffer_of_its_own_when_a_reader_runs() -> None:
    Tensor.rand(3).realize()  # a realized state: the draw below reads it through a buffer the scheduler substitutes
    a = Tensor.rand(16, 16)
    b = a.shrink(((2, 10), None)).clone()
    b.realize()
    assert a.uop.base.buffer is not b.uop.base.buffer
    np.testing.assert_array_equal(b.numpy(), a.numpy()[2:10])  # the reader read the values a holds


def test_a_tagged_value_computed_from_a_realized_one_is_remembered() -> None:
    # what the state's advances and the draws rely on: a clone (or a draw) read by a realized value keeps its buffer,
    # also when its graph reaches a node realized before, which the scheduler replaces by its buffer
    base = Tensor.ones(4).contiguous().realize()
    first = (base + 1).clone()
    (first * 2).contiguous().realize()
    second = (first + 1).clone()
    (second * 2).contiguous().realize()
    assert first.uop.is_realized and second.uop.is_realized


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2 ** 40), st.integers(0, 300))
def test_rand_is_in_the_unit_interval_on_the_float32_grid(seed: int, n: int) -> None:
    Tensor.manual_seed(seed)
    v = Tensor.rand(n).numpy()
    assert v.shape == (n,) and ((v >= 0) & (v < 1)).all()
    assert (v * 2 ** 23 == np.floor(v * 2 ** 23)).all(), "a float32 draw is a multiple of 2**-23"


def test_rand_is_uniform() -> None:
    Tensor.manual_seed(0)
    n, bins = 1 << 17, 64
    v = Tensor.rand(n).numpy()
    counts = np.bincount((v * bins).astype(np.int64), minlength=bins)
    expected = n / bins
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < (bins - 1) + 5 * math.sqrt(2 * (bins - 1))
    assert abs(np.corrcoef(v[:-1], v[1:])[0, 1]) < 5 / math.sqrt(n)  # neighbours are unrelated
    half = n // 2  # word j and word j + n/2 come from one Threefry call: unrelated too
    assert abs(np.corrcoef(v[:half], v[half:])[0, 1]) < 5 / math.sqrt(half)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2 ** 32 - 1), st.integers(0, 70))
def test_randperm_is_a_permutation(seed: int, n: int) -> None:
    Tensor.manual_seed(seed)
    p = Tensor.randperm(n)
    assert p.dtype == dtypes.int32 and sorted(p.tolist()) == list(range(n))


def test_jit_replays_draw_the_eager_sequence() -> None:
    Tensor.manual_seed(3)
    eager = [Tensor.rand(8).numpy() for _ in range(4)]

    @TinyJit
    def step(x: Tensor) -> Tensor:
        return (x + Tensor.rand(8)).realize()

    Tensor.manual_seed(3)
    jitted = [step(Tensor.zeros(8).contiguous().realize()).numpy() for _ in range(4)]
    for a, b in zip(eager, jitted):
        np.testing.assert_array_equal(a, b)
    assert len({tuple(v.tolist()) for v in jitted}) == 4, "every replay draws new numbers"


def test_draws_of_zero_elements() -> None:
    Tensor.manual_seed(0)
    assert Tensor.rand(0).numpy().shape == (0,) and Tensor.rand(2, 0, 3).numpy().shape == (2, 0, 3)
    assert Tensor.randn(0).shape == (0,) and Tensor.randperm(0).tolist() == []
    np.testing.assert_array_equal(Tensor.rand(3).numpy(), np.float32(TINYGRAD_SEED0[0][1]))  # counted no words


def test_randperm_runs_inside_a_jit() -> None:
    @TinyJit
    def shuffle(x: Tensor) -> Tensor:
        return x[Tensor.randperm(16)].realize()

    outs = [shuffle(Tensor.arange(16).contiguous().realize()).tolist() for _ in range(4)]
    assert all(sorted(o) == list(range(16)) for o in outs)
    assert len({tuple(o) for o in outs}) == 4, "every replay draws another permutation"


def test_a_long_randperm_sorted_on_the_host_is_the_device_sort() -> None:
    """Outside a capture a long randperm is sorted on the host (the device's argsort is quadratic): the same
    permutation as sorting the draw on the device, and inside a TinyJit each replay draws a new one."""
    from tinygrad.mixin.creation import HOST_SORT_MIN

    n = HOST_SORT_MIN + 5
    Tensor.manual_seed(5)
    host = Tensor.randperm(n).numpy()
    Tensor.manual_seed(5)
    device = Tensor.rand(n).argsort().numpy()
    np.testing.assert_array_equal(host, device)
    assert host.dtype == np.int32 and sorted(host.tolist()) == list(range(n))
    shuffle = TinyJit(lambda x: Tensor.randperm(n) + x)
    perms = [shuffle(Tensor([0])).numpy() for _ in range(4)]
    assert all(sorted(p.tolist()) == list(range(n)) for p in perms)
    assert not np.array_equal(perms[2], perms[3])
