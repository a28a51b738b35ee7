"""dtype promotion (`least_upper_dtype`) against PyTorch's `promote_types`, for every pair of the 13 dtypes.

PyTorch 2.x refuses to promote uint16/uint32/uint64 with any other dtype except floats ("Promotion for
uint16, uint32, uint64 types is not supported"). For those pairs numpy's `promote_types` is the reference:
it agrees with PyTorch's rules where both define them (bool < integer < float; a signed/unsigned mix goes
to the smallest signed type holding both). Deliberate differences, each pinned by a test below:

* uint64 with a signed integer is float64 (numpy's answer; no integer type holds both, torch refuses).
* float16 with bfloat16 is float32 (torch's answer; numpy has no bfloat16).
* integer with float16/bfloat16 is that float (torch's "category wins" rule; numpy widens to float64
  for int64 + float16).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from tinygrad.dtype import DType, dtypes, from_numpy, least_upper_dtype, to_numpy

try:
    import torch
except ImportError:
    torch = None

ALL = dtypes.all()
UNSUPPORTED_BY_TORCH = {dtypes.uint16, dtypes.uint32, dtypes.uint64}


def test_there_are_seventeen_dtypes() -> None:
    assert [d.name for d in ALL] == ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
                                     "uint64", "float16", "bfloat16", "float32", "float64", "fp8e4m3", "fp8e5m2",
                                     "fp8e4m3fnuz", "fp8e5m2fnuz"]


TORCH_NAMES = {"fp8e4m3": "float8_e4m3fn", "fp8e5m2": "float8_e5m2", "fp8e4m3fnuz": "float8_e4m3fnuz",
               "fp8e5m2fnuz": "float8_e5m2fnuz"}


def _torch_promote(a: DType, b: DType) -> str | None:
    try:
        ta, tb = (getattr(torch, TORCH_NAMES.get(d.name, d.name)) for d in (a, b))
        out = str(torch.promote_types(ta, tb)).removeprefix("torch.")
        return {v: k for k, v in TORCH_NAMES.items()}.get(out, out)
    except RuntimeError as e:
        assert "not supported" in str(e)
        return None


PAIRS = list(itertools.product(ALL, ALL))


@pytest.mark.skipif(torch is None, reason="PyTorch's promote_types is the reference and it is not installed")
@pytest.mark.parametrize("a,b", PAIRS, ids=[f"{a.name}-{b.name}" for a, b in PAIRS])
def test_promotion_matches_torch(a: DType, b: DType) -> None:
    want = _torch_promote(a, b)
    if want is None and {a, b} & set(dtypes.fp8s):
        pytest.skip(f"torch does not promote {a.name} with {b.name} (8-bit floats); test_fp8.py checks tinygrad's")
    if want is None:
        assert {a, b} & UNSUPPORTED_BY_TORCH
        pytest.skip(f"torch does not promote {a.name} with {b.name} (uint16/32/64); numpy is checked instead")
    assert least_upper_dtype(a, b).name == want


NUMPY_PAIRS = [(a, b) for a, b in PAIRS if {a, b} & UNSUPPORTED_BY_TORCH and not (a.is_float or b.is_float)]


@pytest.mark.parametrize("a,b", NUMPY_PAIRS, ids=[f"{a.name}-{b.name}" for a, b in NUMPY_PAIRS])
def test_promotion_of_wide_unsigned_matches_numpy(a: DType, b: DType) -> None:
    assert least_upper_dtype(a, b) == from_numpy(np.promote_types(to_numpy(a), to_numpy(b)))


def test_deliberate_differences() -> None:
    for signed in (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64):
        assert least_upper_dtype(signed, dtypes.uint64) == dtypes.float64
    assert least_upper_dtype(dtypes.float16, dtypes.bfloat16) == dtypes.float32
    assert least_upper_dtype(dtypes.int64, dtypes.float16) == dtypes.float16  # numpy: float64
    assert least_upper_dtype(dtypes.uint64, dtypes.bfloat16) == dtypes.bfloat16


@pytest.mark.parametrize("a,b", PAIRS, ids=[f"{a.name}-{b.name}" for a, b in PAIRS])
def test_promotion_is_commutative_and_an_upper_bound(a: DType, b: DType) -> None:
    out = least_upper_dtype(a, b)
    assert out == least_upper_dtype(b, a)
    assert least_upper_dtype(a, a) == a
    # the result is at least as high as each operand: promoting it again with either operand changes nothing
    assert least_upper_dtype(out, a) == out and least_upper_dtype(out, b) == out


def test_promotion_of_many_does_not_depend_on_order() -> None:
    # n-ary promotion looks at the highest category first, so operand order never matters. (Folding pairwise
    # cannot promise that: int64 with uint64 is float64, which then outranks a later float16.)
    bad = [(a, b, c) for a, b, c in itertools.product(ALL, ALL, ALL)
           if len({least_upper_dtype(*p) for p in itertools.permutations((a, b, c))}) != 1]
    assert not bad, f"{len(bad)} triples, e.g. {bad[:3]}"


def test_many_operands_follow_the_highest_category() -> None:
    assert least_upper_dtype(dtypes.int64, dtypes.uint64, dtypes.float16) == dtypes.float16
    assert least_upper_dtype(dtypes.bool, dtypes.uint8, dtypes.int8) == dtypes.int16


def test_least_upper_dtype_needs_an_argument() -> None:
    with pytest.raises(ValueError):
        least_upper_dtype()


def test_dtype_properties() -> None:
    for d in ALL:
        assert d.bits == 8 * d.itemsize
        if d.is_int:
            info = np.iinfo(to_numpy(d))
            assert (d.min, d.max) == (int(info.min), int(info.max))
        assert to_numpy(d).itemsize == d.itemsize
        if d not in (dtypes.bfloat16, *dtypes.fp8s):
            assert from_numpy(to_numpy(d)) == d
    assert to_numpy(dtypes.bfloat16) == np.uint16  # carried as raw bits
    assert to_numpy(dtypes.fp8e4m3) == to_numpy(dtypes.fp8e5m2) == np.uint8
    assert dtypes.float32.vec(4).scalar == dtypes.float32 and dtypes.float32.vec(4).itemsize == 16


def test_dtypes_are_interned() -> None:
    import copy
    import pickle

    f4 = dtypes.float32.vec(4)
    assert DType("float32", 4, "float", "f") is dtypes.float32
    assert dtypes.float32.vec(4) is f4 and f4.scalar is dtypes.float32
    assert pickle.loads(pickle.dumps(f4)) is f4 and copy.deepcopy(dtypes.int8) is dtypes.int8
    assert dtypes.float32 == DType("float32", 4, "float", "f") and dtypes.float32 != dtypes.int32
    assert len({dtypes.float32, DType("float32", 4, "float", "f"), dtypes.float}) == 1
