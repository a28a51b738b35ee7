"""Creation and random ops: eye, linspace, from_blob, the *_like constructors, and the seeded random draws.

Random values cannot match PyTorch's, so the draws are checked for what they promise: the same values for a seed,
fresh values on every draw, the range, the moments over ~10k samples (within about 5 standard errors), shapes
and dtypes, and the errors PyTorch raises for bad arguments."""

from __future__ import annotations

import ctypes
import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from tinygrad import Device, Tensor, dtypes
from tinygrad.dtype import DType

N = 10_000


def _torch_dtype(torch: Any, d: DType) -> Any:
    return getattr(torch, d.name)


# ---- deterministic constructors ----

@pytest.mark.parametrize("n,m", [(3, None), (2, 4), (4, 2), (1, None), (0, None), (0, 3), (3, 0)])
def test_eye_matches_torch(n: int, m: int | None, torch: Any) -> None:
    got = Tensor.eye(n, m)
    ref = torch.eye(n, m) if m is not None else torch.eye(n)
    assert got.shape == tuple(ref.shape) and got.dtype == dtypes.float32
    np.testing.assert_array_equal(got.numpy(), ref.numpy())


@pytest.mark.parametrize("d", [dtypes.int32, dtypes.bool, dtypes.float16, dtypes.int64])
def test_eye_dtypes(d: DType, torch: Any) -> None:
    got = Tensor.eye(3, 2, dtype=d)
    assert got.dtype == d
    np.testing.assert_array_equal(got.numpy(), torch.eye(3, 2, dtype=_torch_dtype(torch, d)).numpy())


def test_eye_requires_grad_is_a_leaf() -> None:
    w = Tensor.eye(2, requires_grad=True)
    (w * Tensor([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
    assert w.grad is not None
    np.testing.assert_array_equal(w.grad.numpy(), [[1.0, 2.0], [3.0, 4.0]])


@pytest.mark.parametrize("args", [(0, 1, 5), (-1, 1, 7), (3, 3, 1), (0, 1, 0), (1, 0, 4), (0.5, 100.25, 13),
                                  (-3, 2, 2)])
def test_linspace_matches_torch(args: tuple[float, float, int], torch: Any) -> None:
    got = Tensor.linspace(*args)
    ref = torch.linspace(*args)
    assert got.shape == tuple(ref.shape) and got.dtype == dtypes.float32
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-6, atol=1e-7)
    if args[2] > 0:  # both ends exactly
        assert got.numpy()[0] == np.float32(args[0]) and got.numpy()[-1] == np.float32(args[1])


@pytest.mark.parametrize("d", [dtypes.int32, dtypes.int64, dtypes.float64])
def test_linspace_dtypes(d: DType, torch: Any) -> None:
    got = Tensor.linspace(-10, 7, 6, dtype=d)  # integers truncate toward zero, as PyTorch's
    ref = torch.linspace(-10, 7, 6, dtype=_torch_dtype(torch, d))
    assert got.dtype == d
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-12)


@pytest.mark.parametrize("d", [dtypes.float16, dtypes.bfloat16])
def test_linspace_half_precision_rounds_the_exact_values(d: DType) -> None:
    # PyTorch accumulates in the 16-bit type (its bfloat16 linspace(-10, 7, 6) has 0.1875 for 0.2); here each value
    # is the exact one, rounded once
    got = Tensor.linspace(-10, 7, 6, dtype=d).numpy().astype(np.float64)
    exact = np.linspace(-10, 7, 6)
    np.testing.assert_allclose(got, exact, rtol=2 ** -8 if d == dtypes.bfloat16 else 2 ** -11, atol=0)


@pytest.mark.parametrize("d", [dtypes.float32, dtypes.float64, dtypes.int64, dtypes.uint8, dtypes.float16,
                               dtypes.bool])
def test_from_blob_reads_host_memory_in_place(d: DType) -> None:
    src = (np.arange(12) % 5 - 2).astype({dtypes.bool: np.bool_}.get(d, np.dtype(d.name)))
    t = Tensor.from_blob(src.ctypes.data, (3, 4), dtype=d)
    assert t.shape == (3, 4) and t.dtype == d
    np.testing.assert_array_equal(t.numpy(), src.reshape(3, 4))
    src[...] = 0  # the tensor wraps the memory (tinygrad's from_blob): later writes to it show (test_dlpack.py)
    np.testing.assert_array_equal(t.numpy(), np.zeros((3, 4), dtype=src.dtype))


def test_from_blob_takes_ctypes_objects_and_bfloat16_bits() -> None:
    arr = (ctypes.c_float * 4)(1.5, -2.0, 3.25, 0.0)
    np.testing.assert_array_equal(Tensor.from_blob(arr, (4,)).numpy(), [1.5, -2.0, 3.25, 0.0])
    np.testing.assert_array_equal(Tensor.from_blob(ctypes.cast(arr, ctypes.POINTER(ctypes.c_float)), 2).numpy(),
                                  [1.5, -2.0])
    bits = np.array([0x3FC0, 0xC000], dtype=np.uint16)  # bfloat16 1.5 and -2.0
    t = Tensor.from_blob(bits.ctypes.data, (2,), dtype=dtypes.bfloat16)
    assert t.dtype == dtypes.bfloat16
    np.testing.assert_array_equal(t.numpy(), [1.5, -2.0])
    assert Tensor.from_blob(0, (0, 3)).shape == (0, 3)  # nothing to read: any pointer will do


@pytest.mark.parametrize("make,exc,words", [
    (lambda: Tensor.from_blob(0, (2,)), ValueError, "null pointer"),
    (lambda: Tensor.from_blob("0x10", (2,)), TypeError, "str"),
    (lambda: Tensor.from_blob(1, (-1,)), ValueError, "-1"),
    (lambda: Tensor.eye(-1), ValueError, "-1"),
    (lambda: Tensor.eye(2, -3), ValueError, "-3"),
    (lambda: Tensor.eye(2.5), TypeError, "float"),
    (lambda: Tensor.linspace(0, 1, -2), ValueError, "-2"),
    (lambda: Tensor.linspace(0, 1, 2.0), TypeError, "float"),
], ids=["from_blob_null", "from_blob_str", "from_blob_negative", "eye_negative", "eye_negative_m", "eye_float",
        "linspace_negative", "linspace_float_steps"])
def test_constructor_bad_input(make: Callable[[], Any], exc: type[Exception], words: str) -> None:
    with pytest.raises(exc, match=words):
        make()


def test_like_constructors_follow_the_tensor() -> None:
    x = Tensor([[1, 2, 3]], dtype=dtypes.int16)
    e = x.empty_like()
    assert e.shape == (1, 3) and e.dtype == dtypes.int16 and e.device == x.device
    assert x.empty_like(dtype=dtypes.float64).dtype == dtypes.float64
    c = x.const_like(7)
    assert c.dtype == dtypes.int16 and c.tolist() == [[7, 7, 7]]
    assert Tensor([1.5, 2.5], dtype=dtypes.float16).const_like(0.25).tolist() == [0.25, 0.25]
    h = Tensor.zeros(2, 3, dtype=dtypes.float16)
    assert h.rand_like().dtype == dtypes.float16 and h.rand_like().shape == (2, 3)
    assert h.randn_like(dtype=dtypes.float64).dtype == dtypes.float64
    with pytest.raises(TypeError, match="int16"):
        x.rand_like()
    # tinygrad: randn of an integer dtype draws in float32 and casts
    assert x.randn_like().dtype == dtypes.int16 and x.randn_like().shape == (1, 3)


# ---- random draws ----

DRAWS: dict[str, Callable[[], Tensor]] = {
    "rand": lambda: Tensor.rand(50),
    "randn": lambda: Tensor.randn(50),
    "uniform": lambda: Tensor.uniform(50, low=-2, high=3),
    "normal": lambda: Tensor.normal(50, mean=1.0, std=2.0),
    "randint": lambda: Tensor.randint(50, low=-1000, high=1000),
    "randperm": lambda: Tensor.randperm(50),
    "random_bits": lambda: Tensor.random_bits(50),
    "scaled_uniform": lambda: Tensor.scaled_uniform(5, 10),
    "glorot_uniform": lambda: Tensor.glorot_uniform(5, 10),
    "kaiming_uniform": lambda: Tensor.kaiming_uniform(5, 10),
    "kaiming_normal": lambda: Tensor.kaiming_normal(5, 10),
    "multinomial": lambda: Tensor([1.0, 2.0, 3.0, 4.0] * 10).multinomial(20),
    "multinomial_replacement": lambda: Tensor([1.0, 2.0, 3.0, 4.0]).multinomial(50, replacement=True),
    "rand_like": lambda: Tensor.zeros(50).rand_like(),
    "randn_like": lambda: Tensor.zeros(50).randn_like(),
}


@pytest.mark.parametrize("name", DRAWS)
def test_draws_repeat_per_seed_and_change_between_draws(name: str) -> None:
    draw = DRAWS[name]
    Tensor.manual_seed(1234)
    first, second = draw().numpy(), draw().numpy()
    Tensor.manual_seed(1234)
    np.testing.assert_array_equal(draw().numpy(), first)
    np.testing.assert_array_equal(draw().numpy(), second)
    assert not np.array_equal(first, second), "two draws in a row gave the same values"
    Tensor.manual_seed(1235)
    assert not np.array_equal(draw().numpy(), first), "another seed gave the same values"


def test_consecutive_draws_share_no_positions_of_the_stream() -> None:
    # 64-bit raw draws: a chance collision among 2 * 5000 values has probability ~1e-12
    a, b = Tensor.random_bits(5000, dtype=dtypes.uint64).numpy(), Tensor.random_bits(5000, dtype=dtypes.uint64).numpy()
    assert len(np.unique(np.concatenate([a, b]))) == 10_000
    # interleaving other draws does not replay values either
    Tensor.manual_seed(0)
    c = Tensor.random_bits(100, dtype=dtypes.uint64).numpy()
    Tensor.rand(3)
    d = Tensor.random_bits(100, dtype=dtypes.uint64).numpy()
    assert not set(c.tolist()) & set(d.tolist())


def test_nearby_seeds_give_unrelated_streams() -> None:
    # not the same values in another order (a seed xor-ed into the counter would pair seed 0 with seed 1)
    draws = []
    for seed in (0, 1, 2, 3, 12345):
        Tensor.manual_seed(seed)
        draws.append(Tensor.random_bits(2000, dtype=dtypes.uint64).numpy())
    assert len(np.unique(np.concatenate(draws))) == 2000 * len(draws)
    # the key takes the seed's low 32 bits, as tinygrad's
    Tensor.manual_seed(12345 + (1 << 32))
    np.testing.assert_array_equal(Tensor.random_bits(2000, dtype=dtypes.uint64).numpy(), draws[-1])
    Tensor.manual_seed(0)
    a = Tensor.rand(N).numpy()
    Tensor.manual_seed(1)
    b = Tensor.rand(N).numpy()
    assert abs(np.corrcoef(a, b)[0, 1]) < 5 / math.sqrt(N)
    assert abs(np.corrcoef(a[:-1], a[1:])[0, 1]) < 5 / math.sqrt(N)  # neighbours within a draw too


def test_dropout_draws_are_reproducible() -> None:
    Tensor.training = True
    try:
        Tensor.manual_seed(7)
        a = Tensor.ones(64).dropout(0.5).numpy()
        Tensor.manual_seed(7)
        np.testing.assert_array_equal(Tensor.ones(64).dropout(0.5).numpy(), a)
        assert not np.array_equal(Tensor.ones(64).dropout(0.5).numpy(), a)
    finally:
        Tensor.training = False


@pytest.mark.skipif(bool(os.environ.get("TG_EXPECT_DEVICE")), reason="opens a second device")
def test_same_values_on_every_device() -> None:
    others = [d for d in ("PYREF", "CPU") if d != Device.DEFAULT]
    other = next((d for d in others if _opens(d)), None)
    if other is None:
        pytest.skip(f"no second device besides {Device.DEFAULT}")
    out = []
    for dev in (Device.DEFAULT, other):
        Tensor.manual_seed(99)
        out.append([Tensor.rand(20, device=dev).numpy(), Tensor.randn(20, device=dev).numpy(),
                    Tensor.randint(20, high=1000, device=dev).numpy(), Tensor.uniform(20, device=dev).numpy()])
    for i, (a, b) in enumerate(zip(*out)):
        if i == 1:  # randn: the bits agree, log/cos/sqrt may differ by an ulp between devices' math libraries
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
        else:
            np.testing.assert_array_equal(a, b)


def _opens(dev: str) -> bool:
    try:
        Device[dev]
        return True
    except Exception:
        return False


@pytest.mark.parametrize("d", [dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64])
def test_rand_range_and_moments(d: DType) -> None:
    x = Tensor.rand(N, dtype=d)
    assert x.dtype == d and x.shape == (N,)
    v = x.numpy().astype(np.float64)
    assert v.min() >= 0 and v.max() < 1, "rand must stay in [0, 1) (no rounding up to 1 in 16-bit dtypes)"
    assert abs(v.mean() - 0.5) < 5 * math.sqrt(1 / 12 / N)
    assert abs(v.var() - 1 / 12) < 0.005
    # a float of m mantissa bits takes m random bits (tinygrad's): bfloat16 has 2**7 values, float16 2**10
    assert len(np.unique(v)) >= min(0.9 * 2 ** dtypes.finfo(d)[1], 9000)


@pytest.mark.parametrize("d", [dtypes.float32, dtypes.float16, dtypes.float64])
def test_randn_moments(d: DType) -> None:
    v = Tensor.randn(N, dtype=d).numpy().astype(np.float64)
    assert abs(v.mean()) < 5 / math.sqrt(N) and abs(v.var() - 1) < 5 * math.sqrt(2 / N)
    assert abs((v ** 3).mean()) < 0.08 and abs((v ** 4).mean() - 3) < 0.3  # symmetric, normal tails
    assert 0.6 < (np.abs(v) < 1).mean() < 0.76  # 68.3% within one standard deviation


def test_uniform_normal_and_initializers() -> None:
    u = Tensor.uniform(N, low=-2.0, high=3.0).numpy()
    assert u.min() >= -2 and u.max() < 3 and abs(u.mean() - 0.5) < 5 * math.sqrt(25 / 12 / N)
    g = Tensor.normal(N, mean=3.0, std=0.5).numpy()
    assert abs(g.mean() - 3) < 5 * 0.5 / math.sqrt(N) and abs(g.std() - 0.5) < 0.02
    shape = (100, 4, 5)  # fan_in 20, fan_out 100
    for name, bound in [("scaled_uniform", 1 / math.sqrt(2000)), ("glorot_uniform", math.sqrt(6 / 120)),
                        ("kaiming_uniform", math.sqrt(3) * math.sqrt(2 / (1 + 0.01 ** 2)) / math.sqrt(20))]:
        w = getattr(Tensor, name)(*shape).numpy()
        assert w.shape == shape and np.abs(w).max() <= bound
        assert abs(w.std() - bound / math.sqrt(3)) < 0.03 * bound, name  # uniform on [-b, b]: std b/sqrt(3)
    k = Tensor.kaiming_normal(*shape, a=0.5).numpy()
    assert abs(k.std() - math.sqrt(2 / 1.25) / math.sqrt(20)) < 0.01
    assert Tensor.kaiming_uniform(3, 0).shape == (3, 0) and Tensor.scaled_uniform(0).shape == (0,)


def test_random_leaves_take_requires_grad() -> None:
    for w in (Tensor.uniform(3, requires_grad=True), Tensor.normal(3, requires_grad=True),
              Tensor.kaiming_uniform(3, 2, requires_grad=True), Tensor.glorot_uniform(2, 2, requires_grad=True)):
        assert w.requires_grad
        (w * 2).sum().backward()
        assert w.grad is not None and (w.grad.numpy() == 2).all()


@pytest.mark.parametrize("d", [dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.int8, dtypes.float32])
def test_randint_range_dtype_and_uniformity(d: DType) -> None:
    lo, hi = (0, 256) if d == dtypes.uint8 else (-128, 128) if d == dtypes.int8 else (-3, 7)
    x = Tensor.randint(N, low=lo, high=hi, dtype=d)
    assert x.dtype == d
    v = x.numpy()
    assert v.min() >= lo and v.max() < hi
    counts = np.bincount((v.astype(np.int64) - lo), minlength=hi - lo)
    assert (counts > 0).all(), "every value in the range comes up"
    # chi-square with hi-lo-1 degrees of freedom stays well below its 5-sigma bound
    expected = N / (hi - lo)
    chi2, dof = ((counts - expected) ** 2 / expected).sum(), hi - lo - 1
    assert chi2 < dof + 5 * math.sqrt(2 * dof)


def test_randint_defaults_and_wide_ranges() -> None:
    x = Tensor.randint(2, 3)
    assert x.dtype == dtypes.int32 and x.shape == (2, 3) and 0 <= x.numpy().min() and x.numpy().max() < 10
    big = Tensor.randint(1000, low=-(2 ** 62), high=2 ** 62, dtype=dtypes.int64).numpy()
    assert big.min() < -(2 ** 60) and big.max() > 2 ** 60  # the whole range is reached, not just 32 bits of it


def test_randperm_is_a_permutation() -> None:
    for n in (0, 1, 5, 1000):
        p = Tensor.randperm(n)
        assert p.dtype == dtypes.int32 and p.shape == (n,)
        assert sorted(p.tolist()) == list(range(n))
    assert Tensor.randperm(1000).tolist() != list(range(1000))
    assert Tensor.randperm(4, dtype=dtypes.int64).dtype == dtypes.int64


def test_random_bits_dtypes() -> None:
    for d in (dtypes.uint32, dtypes.uint8, dtypes.int16, dtypes.int64, dtypes.uint64):
        x = Tensor.random_bits(4, 1000, dtype=d)
        assert x.dtype == d and x.shape == (4, 1000)
        v = x.numpy().view(f"u{d.itemsize}").astype(np.uint64)
        for bit in range(d.bits):  # every bit is set about half the time
            assert abs(((v >> np.uint64(bit)) & np.uint64(1)).mean() - 0.5) < 0.05


def test_multinomial_with_replacement_follows_the_weights() -> None:
    w = Tensor([0.0, 1.0, 3.0, 0.0, 6.0])
    s = w.multinomial(N, replacement=True)
    assert s.dtype == dtypes.int32 and s.shape == (N,)
    freq = np.bincount(s.numpy(), minlength=5) / N
    assert freq[0] == 0 and freq[3] == 0, "zero weights are never drawn"
    np.testing.assert_allclose(freq, [0, 0.1, 0.3, 0, 0.6], atol=5 * math.sqrt(0.25 / N))
    rows = Tensor([[1.0, 0.0], [0.0, 2.0]]).multinomial(3, replacement=True)
    assert rows.shape == (2, 3) and rows.tolist() == [[0, 0, 0], [1, 1, 1]]


def test_multinomial_without_replacement() -> None:
    w = Tensor([[1.0, 2.0, 3.0, 4.0, 0.0], [5.0, 0.0, 1.0, 1.0, 1.0]])
    firsts = []
    for _ in range(400):
        s = w.multinomial(4).numpy()
        assert s.shape == (2, 4)
        for row, weights in zip(s, w.numpy()):
            assert len(set(row.tolist())) == 4, "no index twice in a row"
            assert all(weights[i] > 0 for i in row), "a zero weight is never drawn"
        firsts.append(s[0, 0])
    # the first draw follows the weights: P(3) = 0.4, P(0) = 0.1
    freq = np.bincount(firsts, minlength=5) / len(firsts)
    assert abs(freq[3] - 0.4) < 0.1 and abs(freq[0] - 0.1) < 0.06
    assert Tensor([0.0, 1.0, 0.0]).multinomial(1).tolist() == [1]


@pytest.mark.parametrize("p", [0.0, 0.2, 0.5, 0.9, 1.0])
def test_dropout_in_training(p: float) -> None:
    x = Tensor.ones(N)
    Tensor.training = True
    try:
        y = x.dropout(p).numpy()
    finally:
        Tensor.training = False
    if p == 1.0:
        assert (y == 0).all()
        return
    kept = y != 0
    np.testing.assert_allclose(y[kept], 1 / (1 - p), rtol=1e-6)  # survivors are scaled by 1/(1-p)
    assert abs(kept.mean() - (1 - p)) < 5 * math.sqrt(p * (1 - p) / N) + 1e-9


def test_dropout_gradient_and_eval_identity(torch: Any) -> None:
    x = Tensor([[1.0, -2.0, 3.0, 4.0]] * 8, requires_grad=True)
    assert x.dropout(0.5) is x, "outside training dropout is the identity"
    Tensor.training = True
    try:
        y = x.dropout(0.25)
        y.sum().backward()
    finally:
        Tensor.training = False
    assert x.grad is not None
    # the gradient is the mask scaled by 1/(1-p): 0 where dropped, 4/3 where kept
    kept = y.numpy() != 0
    np.testing.assert_allclose(x.grad.numpy(), np.where(kept, 1 / 0.75, 0.0), rtol=1e-6)
    h = Tensor.ones(4, dtype=dtypes.float16)
    Tensor.training = True
    try:
        assert h.dropout(0.5).dtype == dtypes.float16
        with pytest.raises(TypeError, match="int32"):
            Tensor([1, 2]).dropout(0.5)
    finally:
        Tensor.training = False


@pytest.mark.parametrize("make,exc,words", [
    (lambda: Tensor.randint(3, low=5, high=5), RuntimeError, "low=5 >= high=5"),
    (lambda: Tensor.randint(3, low=7, high=2), RuntimeError, "low=7 >= high=2"),
    (lambda: Tensor.randint(3, low=0, high=300, dtype=dtypes.uint8), ValueError, "300"),
    (lambda: Tensor.randint(3, low=0.5, high=3), TypeError, "0.5"),
    (lambda: Tensor.rand(-2), ValueError, "-2"),
    (lambda: Tensor.randn(2, -1), ValueError, "-1"),
    (lambda: Tensor.rand(3, dtype=dtypes.int32), TypeError, "int32"),
    (lambda: Tensor.randperm(-1), ValueError, "-1"),
    (lambda: Tensor.normal(3, std=-1.0), RuntimeError, "-1.0"),
    (lambda: Tensor.random_bits(3, dtype=dtypes.float32), TypeError, "float32"),
    (lambda: Tensor.ones(3).dropout(1.5), ValueError, "1.5"),
    (lambda: Tensor.ones(3).dropout(-0.1), ValueError, "-0.1"),
    (lambda: Tensor([0.5, -0.1]).multinomial(), RuntimeError, "negative"),
    (lambda: Tensor([0.5, math.nan]).multinomial(), RuntimeError, "nan"),
    (lambda: Tensor([0.0, 0.0]).multinomial(), RuntimeError, "sums to 0"),
    (lambda: Tensor([0.5, 0.5]).multinomial(3), RuntimeError, "3 samples"),
    (lambda: Tensor([0.5, 0.0, 0.5]).multinomial(3), RuntimeError, "positive weight"),
    (lambda: Tensor([0.5, 0.5]).multinomial(0), RuntimeError, "num_samples > 0, got 0"),
    (lambda: Tensor.ones(2, 2, 2).multinomial(), RuntimeError, r"\(2, 2, 2\)"),
    (lambda: Tensor.glorot_uniform(), ValueError, "dimension"),
    (lambda: Tensor.uniform(3, low=1.0, high=1.0), ValueError, "low < high"),
    (lambda: Tensor([1, 2]).threefry(3), TypeError, "uint64"),
], ids=["randint_equal", "randint_reversed", "randint_dtype_range", "randint_float", "rand_negative",
        "randn_negative", "rand_int_dtype", "randperm_negative", "normal_negative_std", "random_bits_float",
        "dropout_above_1", "dropout_negative", "multinomial_negative", "multinomial_nan", "multinomial_zero_row",
        "multinomial_too_many", "multinomial_too_few_positive", "multinomial_zero_samples", "multinomial_3d",
        "glorot_scalar", "uniform_empty_range", "threefry_int32"])
def test_random_bad_input(make: Callable[[], Any], exc: type[Exception], words: str) -> None:
    Tensor.training = True
    try:
        with pytest.raises(exc, match=words):
            make()
    finally:
        Tensor.training = False


# ---- the generator runs in kernels, from a state in a device buffer (its stream: test_rng_tinygrad_stream.py) ----

def test_draws_are_lazy_and_the_state_graph_stays_bounded() -> None:
    from tinygrad import GlobalCounters
    from tinygrad.mixin.rng import MAX_PENDING_DRAWS, DeviceRNG

    Tensor.rand(3).realize()
    DeviceRNG.state(Tensor, Device.DEFAULT).realize()
    DeviceRNG.pending[Device.DEFAULT] = 0
    before = GlobalCounters.kernel_count
    x, y = Tensor.rand(1000), Tensor.randn(10)
    assert GlobalCounters.kernel_count == before, "a draw runs nothing until its value is needed"
    leaves = [u for u in x.uop.toposort() if u.op.name == "BUFFER"]
    assert leaves and all(u.dtype == dtypes.uint32 for u in leaves), "no float data comes from the host"
    for _ in range(MAX_PENDING_DRAWS - 3):
        Tensor.rand(2)
    assert GlobalCounters.kernel_count == before
    Tensor.rand(2)  # the draw that would make the chain of unrealized advances too long realizes the state
    # one tiny kernel per advance (each is a node of its own), none for the draws
    assert GlobalCounters.kernel_count == before + MAX_PENDING_DRAWS and DeviceRNG.pending[Device.DEFAULT] == 0
    assert DeviceRNG.state(Tensor, Device.DEFAULT).uop.is_realized and not x.uop.is_realized
    kernels = GlobalCounters.kernel_count
    assert len(x.numpy()) == 1000 and GlobalCounters.kernel_count == kernels + 1, "the draw reads the realized state"
    assert np.isfinite(y.numpy()).all()


def test_a_draw_is_one_kernel_whatever_came_before() -> None:
    from tinygrad import GlobalCounters

    for _ in range(3):
        Tensor.rand(100)  # unrealized draws before
    Tensor.rand(5).realize()
    for _ in range(4):
        before = GlobalCounters.kernel_count
        Tensor.rand(100).realize()
        assert GlobalCounters.kernel_count == before + 2, "the state's advance and the draw, nothing recomputed"


def test_lazy_draws_do_not_depend_on_when_they_are_realized() -> None:
    # (tinygrad 0.14.0 re-reads its counter when an earlier draw is realized after a later one)
    Tensor.manual_seed(3)
    a, b = Tensor.rand(64), Tensor.randn(64)
    b_first, a_second = b.numpy(), a.numpy()
    Tensor.manual_seed(3)
    np.testing.assert_array_equal(Tensor.rand(64).numpy(), a_second)
    np.testing.assert_array_equal(Tensor.randn(64).numpy(), b_first)
