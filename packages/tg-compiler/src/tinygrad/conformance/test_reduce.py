"""Reductions of odd sizes through the Tensor API: sum and max over every claimed float and integer dtype.

The data make the exact answer independent of the order a device adds in, so the checks are exact and catch a
dropped or doubled element (a tail past the last full block, a work-group boundary):

* sum, floats: small positive integers whose every partial sum is representable (float32/float64: 1..3;
  float16/bfloat16 and the 8-bit floats: ones at the ends and spread through the middle, zeros elsewhere, fewer
  than 2**(significand bits) of them);
* sum, integers: `sum(dtype=d)` accumulates in d itself, and wrap-around makes any order give the same result;
* max: random values spread over the dtype, all negative for floats (the accumulator must not start at 0),
  with the largest one placed last; and NaN propagation, all -inf, all MIN.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from tinygrad.conformance.claims import DeviceClaims
from tinygrad.conformance.compare import assert_matches
from tinygrad.conformance.skips import require_claimed, require_size
from tinygrad.conformance.tensors import result_of, tensor_of
from tinygrad.conformance.values import Scalar
from tinygrad.dtype import DType, dtypes, truncate

SIZES = (1, 3, 17, 1000, 65537, 1_000_003)
SUM_DTYPES = tuple(d for d in dtypes.all() if d.is_float or d.is_int)
MAX_DTYPES = dtypes.all()
#: the largest integer every partial sum may reach and stay exact, per float dtype (2**(mantissa bits))
_EXACT_UP_TO = {"float16": 2**11, "bfloat16": 2**8, "float32": 2**24, "float64": 2**53, "fp8e4m3": 2**4,
                "fp8e5m2": 2**3, "fp8e4m3fnuz": 2**4, "fp8e5m2fnuz": 2**3}


def sum_data(n: int, d: DType, rng: np.random.Generator) -> np.ndarray:
    if d.is_int:
        return rng.integers(0 if d.is_unsigned else -3, 4, size=n, dtype=np.int64)
    budget = _EXACT_UP_TO[d.name] - 1
    if 3 * n <= budget:
        return rng.integers(1, 4, size=n).astype(np.float64)
    data: np.ndarray = np.zeros(n)
    ones = min(budget, 200)
    data[: ones // 4] = 1.0  # the head
    data[n - ones // 4:] = 1.0  # and the tail
    data[np.linspace(0, n - 1, ones - 2 * (ones // 4), dtype=np.int64)] = 1.0  # and spread through the middle
    return data


def max_data(n: int, d: DType, rng: np.random.Generator) -> np.ndarray:
    if d.is_bool:
        return (np.arange(n) == n - 1).astype(np.int64)  # a single True, last
    if d.is_float:
        floats = -rng.uniform(1.0, 1000.0, size=n)  # rounded to d on upload; all stay below the last one
        floats[-1] = -0.125  # the largest (exact in every float dtype), last
        return floats
    hi = min(int(d.max) // 2, 2**62)
    ints = rng.integers(int(d.min), hi, size=n, dtype=np.int64, endpoint=True)
    ints[-1] = hi + 1
    return ints


def _exact_sum(data: np.ndarray, d: DType) -> Scalar:
    return truncate(int(sum(int(v) for v in data.astype(np.int64))), d)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("d", SUM_DTYPES, ids=lambda d: d.name)
def test_sum(tg_device: str, tg_claims: DeviceClaims, tg_size_limit: int | None, d: DType, n: int) -> None:
    require_claimed(tg_claims, d)
    require_size(n, tg_size_limit)
    data = sum_data(n, d, np.random.default_rng(n))
    got = result_of(tensor_of(data, d, tg_device).sum(dtype=d))
    assert_matches(got, [_exact_sum(data, d)], d, lambda i: f"sum of {n} {d.name}")


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("d", MAX_DTYPES, ids=lambda d: d.name)
def test_max(tg_device: str, tg_claims: DeviceClaims, tg_size_limit: int | None, d: DType, n: int) -> None:
    require_claimed(tg_claims, d)
    require_size(n, tg_size_limit)
    data = max_data(n, d, np.random.default_rng(n))
    got = result_of(tensor_of(data, d, tg_device).max())
    want = bool(data.max()) if d.is_bool else truncate(float(data.max()) if d.is_float else int(data.max()), d)
    assert_matches(got, [want], d, lambda i: f"max of {n} {d.name}")


SPECIAL_N = 1000


@pytest.mark.parametrize("d", [d for d in dtypes.all() if d.is_float], ids=lambda d: d.name)
@pytest.mark.parametrize("case", ["nan-first", "nan-last", "all-neg-inf", "neg-zero-and-zero"])
def test_max_float_specials(tg_device: str, tg_claims: DeviceClaims, d: DType, case: str) -> None:
    """MAX propagates NaN from anywhere, starts below every finite value, and prefers +0.0 over -0.0."""
    require_claimed(tg_claims, d)
    data = -np.arange(1, SPECIAL_N + 1, dtype=np.float64)
    want: float = -1.0
    if case == "nan-first":
        data[0], want = math.nan, math.nan
    elif case == "nan-last":
        data[-1], want = math.nan, math.nan
    elif case == "all-neg-inf":
        data[:], want = -math.inf, -math.inf
    else:
        data[:] = -0.0
        data[SPECIAL_N // 2], want = 0.0, 0.0
    got = result_of(tensor_of(data, d, tg_device).max())
    assert_matches(got, [want], d, lambda i: f"max of {SPECIAL_N} {d.name} ({case})")


@pytest.mark.parametrize("d", [d for d in dtypes.all() if d.is_int], ids=lambda d: d.name)
def test_max_of_all_min(tg_device: str, tg_claims: DeviceClaims, d: DType) -> None:
    """An integer max must start at the dtype's MIN, not at 0 or at MIN of a wider type."""
    require_claimed(tg_claims, d)
    data = np.full(SPECIAL_N, int(d.min), dtype=np.int64)
    got = result_of(tensor_of(data, d, tg_device).max())
    assert_matches(got, [d.min], d, lambda i: f"max of {SPECIAL_N} x {d.name} MIN")


AXIS_CASES = [((17, 1000), 0), ((17, 1000), 1), ((3, 65537), 1), ((65537, 3), 0), ((17, 19, 23), (0, 2)),
              ((5, 7, 11, 13), (1, 3))]


@pytest.mark.parametrize("d", [dtypes.int32, dtypes.float32], ids=lambda d: d.name)
@pytest.mark.parametrize("shape,axis", AXIS_CASES, ids=[f"{'x'.join(map(str, s))}-axis{a}" for s, a in AXIS_CASES])
def test_sum_along_axes(tg_device: str, tg_claims: DeviceClaims, tg_size_limit: int | None, d: DType,
                        shape: tuple[int, ...], axis: int | tuple[int, ...]) -> None:
    require_claimed(tg_claims, d)
    require_size(math.prod(shape), tg_size_limit)
    data = np.random.default_rng(7).integers(-3 if d.is_float else -(2**20), 4, size=shape).astype(np.int64)
    got = result_of(tensor_of(data.astype(np.float64) if d.is_float else data, d, tg_device).sum(axis, dtype=d))
    want = data.sum(axis=axis).reshape(-1)
    assert_matches(got, [truncate(int(v), d) for v in want], d,
                   lambda i: f"sum of shape {shape} over axis {axis}, output element {i}")
