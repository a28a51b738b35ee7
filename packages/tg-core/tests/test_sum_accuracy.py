"""How exact float sums and means are, against math.fsum (the exactly rounded sum) and numpy's float32 sum
(pairwise): a float32 sum of n terms should stay within a few ulps of the exact one at every n, as numpy's does,
not drift away like one running accumulator (whose sum stops growing at 2**24). Half and bfloat16 sums add up in
float32 and round once.

The bound for positive data is |ours - exact| <= 4 |numpy - exact| + 2 ulps of the exact sum: numpy's own error
can be almost 0 by luck, hence the ulps. It holds for every sum of split_reduce.MIN_SHORT_REDUCED terms or more
(the scheduler splits them); a shorter sum is one kernel, as exact as the device's code for it. Signed data
cancels, so its sums are measured against the sum of magnitudes: the size of the terms sets what rounding can lose,
not the (small) result.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import tinygrad.engine.split_reduce as split_reduce
from opinfo import skip_unless_device_has
from tinygrad import Device, Tensor, dtypes

PYREF = Device.DEFAULT == "PYREF"
SIZES = [10**3, 10**4, 30000, 10**5, 10**6, 10**7]
needs_compiled = pytest.mark.skipif(PYREF, reason="PYREF interprets kernels in Python: these sizes take minutes")


def ulp(x: float) -> float:
    return float(abs(np.spacing(np.float32(x))))


def uniform(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random(n, dtype=np.float32)


def within_numpy(got: float, exact: float, numpy_result: float, n: int, magnitudes: float) -> None:
    err, numpy_err = abs(got - exact), abs(float(numpy_result) - exact)
    if n >= split_reduce.MIN_SHORT_REDUCED:
        assert err <= 4 * numpy_err + 2 * ulp(exact), f"error {err:.4g}: numpy's {numpy_err:.4g}, ulp {ulp(exact):.4g}"
    else:
        # one kernel: as exact as the device's code for it (16 accumulators on the CPU, one on PoCL), within what
        # any order of n float32 additions guarantees
        assert err <= (n - 1) * 2.0**-24 * magnitudes


@pytest.mark.parametrize("n", SIZES)
def test_sum_of_positive_data(n: int) -> None:
    if PYREF and n > 10**5:
        pytest.skip("PYREF interprets kernels in Python")
    a = uniform(n, seed=n)
    exact = math.fsum(a.astype(np.float64))
    within_numpy(Tensor(a).sum().item(), exact, a.sum(), n, exact)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("n", [100, 255, 256, 300, 1000, 4097, 30000])
def test_short_sums_across_seeds(n: int, seed: int) -> None:
    # one accumulator over a few hundred terms (a GPU-style kernel's whole sum of one output) falls several ulps
    # behind numpy's pairwise sum on about one seed in five: the split of short sums must hold for every seed
    a = uniform(n, seed=1000 * seed + n)
    exact = math.fsum(a.astype(np.float64))
    within_numpy(Tensor(a).sum().item(), exact, a.sum(), n, exact)


@pytest.mark.parametrize("n", SIZES)
def test_mean_of_positive_data(n: int) -> None:
    if PYREF and n > 10**5:
        pytest.skip("PYREF interprets kernels in Python")
    a = uniform(n, seed=n + 1)
    exact = math.fsum(a.astype(np.float64)) / n
    within_numpy(Tensor(a).mean().item(), exact, a.mean(), n, exact)


@pytest.mark.parametrize("n", [10**5, 10**6])
def test_sum_of_signed_data(n: int) -> None:
    if PYREF and n > 10**5:
        pytest.skip("PYREF interprets kernels in Python")
    a = np.random.default_rng(n).standard_normal(n, dtype=np.float32)
    exact = math.fsum(a.astype(np.float64))
    scale = math.fsum(np.abs(a).astype(np.float64))
    err, numpy_err = abs(Tensor(a).sum().item() - exact), abs(float(a.sum()) - exact)
    assert err <= 4 * numpy_err + 2 * ulp(scale)


@needs_compiled
def test_a_hundred_million_terms() -> None:
    # 9973 random values repeated 10027 times (both prime, so that no chunk lines up with the repeats): an expanded
    # view, so neither side holds 10**8 floats. numpy would need them all (400 MB); its error on such data is 0.2 to
    # 0.7 ulp (seeds 0-3), so 4 ulps stands for 4x numpy's error + 2 ulps.
    block = uniform(9973, seed=0)
    exact = math.fsum(block.astype(np.float64)) * 10027
    got = Tensor(block).reshape(1, 9973).expand(10027, 9973).reshape(9973 * 10027).sum().item()
    assert abs(got - exact) <= 4 * ulp(exact)


@needs_compiled
def test_sums_past_2_24() -> None:
    assert Tensor.ones(33554433).sum().item() == 33554432.0  # 2**25 + 1 rounds to 2**25
    assert Tensor.ones(1, 1).expand(65536, 65536).sum().item() == 4294967296.0
    assert Tensor.ones(1, 1).expand(65536, 65536).mean().item() == 1.0


def test_half_sums_accumulate_in_float32() -> None:
    skip_unless_device_has([dtypes.float16], "half sums")
    ones = Tensor.ones(70000, dtype=dtypes.float16)
    assert ones.mean().dtype == dtypes.float16 and ones.mean().item() == 1.0  # divided before the rounding to half
    assert ones.sum().dtype == dtypes.float16 and ones.sum().item() == np.inf  # 70000 is past half's 65504
    tenths = np.full(4096, 0.1, np.float16)
    expected = np.float16(tenths.astype(np.float32).sum())  # 409.6 rounds to 409.5; in half, 256 + 0.1 is 256
    assert Tensor(tenths).sum().item() == expected
    a = np.random.default_rng(0).random(3000).astype(np.float16)
    assert Tensor(a).sum(0).item() == np.float16(a.astype(np.float64).sum())
    assert Tensor(a).sum(dtype=dtypes.float32).item() == pytest.approx(a.astype(np.float64).sum(), rel=1e-6)


def test_bfloat16_sums_accumulate_in_float32() -> None:
    skip_unless_device_has([dtypes.bfloat16], "bfloat16 sums")
    ones = Tensor.ones(3000, dtype=dtypes.bfloat16)
    assert ones.sum().dtype == dtypes.bfloat16
    assert ones.sum().item() == 3008.0  # 3000 rounded to bfloat16's 8 bits; a bfloat16 accumulator stops at 256
    assert ones.mean().item() == 1.0


def test_integer_sums_accumulate_in_tinygrads_dtype_or_64_bits_when_asked() -> None:
    big = Tensor.full((8,), 2**30, dtype=dtypes.int32)
    assert big.sum().dtype == dtypes.int32
    skip_unless_device_has([dtypes.int64], "int64 sums")
    assert big.sum(dtype=dtypes.int64).item() == 2**33
    assert Tensor.ones(5, dtype=dtypes.uint8).sum().dtype == dtypes.uint32
