"""The OCP 8-bit floats (OFP8): fp8e4m3 and fp8e5m2, against a decoder written here from the spec's formula.

All 256 patterns of each format are decoded by the spec formula below (exact rationals), then checked against the
reference conversion (`tinygrad.dtype`) and against kernels on `Device.DEFAULT` (run the file with DEV=CPU and
DEV=CL): decoding, encoding every representable value back to its pattern, ties to even at every midpoint,
saturation of finite values past the largest, NaN and infinities, from float32, float64, float16 and int sources.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from tinygrad import Device, Tensor, dtypes
from tinygrad.dtype import DType, float_to_fp8_bits, fp8_bits_to_float, least_upper_dtype, to_dtype, to_numpy, truncate
from tinygrad.uop.alu import exec_alu
from tinygrad.uop.ops import Ops

try:
    import torch
except ImportError:
    torch = None

FP8 = (dtypes.fp8e4m3, dtypes.fp8e5m2)
#: (exponent bits, mantissa bits, bias) of each format, as the OCP OFP8 spec defines them
SPEC = {dtypes.fp8e4m3: (4, 3, 7), dtypes.fp8e5m2: (5, 2, 15)}
LARGEST = {dtypes.fp8e4m3: 448.0, dtypes.fp8e5m2: 57344.0}


# ---- the spec, written out independently of tinygrad.dtype ----

def spec_decode(bits: int, d: DType) -> Fraction | float:
    """S.E.M -> (-1)^S * 2^(E - bias) * (1 + M / 2^m), or 2^(1 - bias) * (M / 2^m) when E == 0. E4M3 uses its top
    exponent for numbers, except S.1111.111 (NaN); E5M2 keeps IEEE's: infinity at M == 0, NaN above it."""
    e_bits, m_bits, bias = SPEC[d]
    sign = -1 if bits & 0x80 else 1
    e, m = (bits >> m_bits) & ((1 << e_bits) - 1), bits & ((1 << m_bits) - 1)
    top = (1 << e_bits) - 1
    if d == dtypes.fp8e4m3 and e == top and m == (1 << m_bits) - 1:
        return math.nan
    if d == dtypes.fp8e5m2 and e == top:
        return sign * math.inf if m == 0 else math.nan
    if e == 0:
        if m == 0:
            return math.copysign(0.0, sign)  # a Fraction has no -0
        return sign * Fraction(2) ** (1 - bias) * Fraction(m, 1 << m_bits)
    return sign * Fraction(2) ** (e - bias) * (1 + Fraction(m, 1 << m_bits))


def finite_patterns(d: DType) -> list[int]:
    return [b for b in range(256) if math.isfinite(spec_decode(b, d))]


def same(got: float, want: float | Fraction) -> bool:
    """Equal values, with the sign of zero, and NaN equal to NaN."""
    if isinstance(want, float) and math.isnan(want):
        return math.isnan(got)
    return got == want and math.copysign(1, got) == math.copysign(1, float(want))


def ties(d: DType) -> list[tuple[Fraction, int]]:
    """Every value exactly halfway between two neighbouring non-negative finite values, with the pattern that
    rounding to nearest, ties to even, gives it (the neighbour whose pattern is even)."""
    ladder = sorted((Fraction(spec_decode(b, d)), b) for b in finite_patterns(d) if not b & 0x80)
    return [((lo + hi) / 2, blo if blo % 2 == 0 else bhi) for (lo, blo), (hi, bhi) in itertools.pairwise(ladder)]


# ---- the reference conversion ----

def test_the_formats_are_one_byte_and_named_like_torch_and_tinygrad() -> None:
    for d in FP8:
        assert d.itemsize == 1 and d.is_float and d in dtypes.all() and to_numpy(d) == np.uint8
    assert dtypes.fp8_ocp == FP8 and dtypes.fp8s == FP8 + dtypes.fp8_fnuz
    assert to_dtype("fp8e4m3") is dtypes.fp8e4m3 and to_dtype("float8_e4m3fn") is dtypes.fp8e4m3
    assert to_dtype("float8_e5m2") is dtypes.fp8e5m2
    assert (dtypes.fp8e4m3.max, dtypes.fp8e4m3.min) == (448.0, -448.0)  # no infinity: max reductions start at -448
    assert (dtypes.fp8e5m2.max, dtypes.fp8e5m2.min) == (math.inf, -math.inf)


def test_spec_landmarks() -> None:
    # E4M3: 1.0 = 0.0111.000, largest 0.1111.110 = 448, smallest subnormal 2^-9, NaN only at S.1111.111
    assert spec_decode(0x38, dtypes.fp8e4m3) == 1 and spec_decode(0x7E, dtypes.fp8e4m3) == 448
    assert spec_decode(0x01, dtypes.fp8e4m3) == Fraction(1, 512)  # and the smallest normal, 2^-6:
    assert spec_decode(0x08, dtypes.fp8e4m3) == Fraction(1, 64)
    assert [b for b in range(256) if math.isnan(float(spec_decode(b, dtypes.fp8e4m3)))] == [0x7F, 0xFF]
    # E5M2: 1.0 = 0.01111.00, largest 0.11110.11 = 57344, infinity 0.11111.00, smallest subnormal 2^-16
    assert spec_decode(0x3C, dtypes.fp8e5m2) == 1 and spec_decode(0x7B, dtypes.fp8e5m2) == 57344
    assert spec_decode(0x7C, dtypes.fp8e5m2) == math.inf and spec_decode(0xFC, dtypes.fp8e5m2) == -math.inf
    assert spec_decode(0x01, dtypes.fp8e5m2) == Fraction(1, 65536)
    assert len([b for b in range(256) if math.isnan(float(spec_decode(b, dtypes.fp8e5m2)))]) == 6


@pytest.mark.parametrize("d", FP8, ids=lambda d: d.name)
def test_reference_decodes_all_256_patterns_as_the_spec(d: DType) -> None:
    bad = [(hex(b), fp8_bits_to_float(b, d), spec_decode(b, d)) for b in range(256)
           if not same(fp8_bits_to_float(b, d), spec_decode(b, d))]
    assert not bad, bad


@pytest.mark.parametrize("d", FP8, ids=lambda d: d.name)
def test_reference_encodes_every_value_to_its_pattern(d: DType) -> None:
    bad = [hex(b) for b in finite_patterns(d) if float_to_fp8_bits(float(spec_decode(b, d)), d) != b]
    assert not bad, bad
    for b in range(256):  # infinities keep theirs (E5M2); every NaN pattern becomes a NaN
        value = float(spec_decode(b, d))
        assert same(fp8_bits_to_float(float_to_fp8_bits(value, d), d), value), hex(b)


@pytest.mark.parametrize("d", FP8, ids=lambda d: d.name)
def test_reference_rounds_ties_to_even_and_others_to_nearest(d: DType) -> None:
    for mid, even in ties(d):
        assert float_to_fp8_bits(float(mid), d) == even, (float(mid), hex(even))
        assert float_to_fp8_bits(-float(mid), d) == even | 0x80
        # a hair off the midpoint goes to the nearer neighbour, whatever its parity
        above, below = float(mid * (1 + Fraction(1, 2**40))), float(mid * (1 - Fraction(1, 2**40)))
        assert spec_decode(float_to_fp8_bits(above, d), d) > mid > spec_decode(float_to_fp8_bits(below, d), d)


@pytest.mark.parametrize("d", FP8, ids=lambda d: d.name)
def test_reference_saturates_finite_values_and_keeps_nan(d: DType) -> None:
    big = LARGEST[d]
    for v in (1e6, 1e30, 1.7e308, big * 1.04, big * 1.125, big * 1.5):
        assert truncate(v, d) == big and truncate(-v, d) == -big, v
    assert truncate(2**200, d) == big  # Python ints too
    assert math.isnan(truncate(math.nan, d))
    assert same(truncate(-0.0, d), -0.0)
    if d == dtypes.fp8e5m2:
        assert truncate(math.inf, d) == math.inf and truncate(-math.inf, d) == -math.inf
    else:  # E4M3 has no infinity: it becomes NaN, as in tinygrad and PyTorch
        assert math.isnan(truncate(math.inf, d)) and math.isnan(truncate(-math.inf, d))


@pytest.mark.skipif(torch is None, reason="PyTorch's float8 casts are an extra reference and it is not installed")
@pytest.mark.parametrize("d", FP8, ids=lambda d: d.name)
def test_reference_agrees_with_torch_inside_the_range(d: DType) -> None:
    # torch does not saturate (448.5 -> NaN in E4M3), so compare where no rounding leaves the finite range
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(4000) * 10.0 ** rng.integers(-6, 4, 4000),
                        [float(m) for m, _ in ties(d)]]).astype(np.float32)
    x = x[np.abs(x) <= LARGEST[d]]
    tdt = torch.float8_e4m3fn if d == dtypes.fp8e4m3 else torch.float8_e5m2
    want = torch.from_numpy(x).to(tdt).view(torch.uint8).numpy()
    got = np.array([float_to_fp8_bits(float(v), d) for v in x], dtype=np.uint8)
    assert (got == want).all(), x[got != want][:10]


def test_promotion() -> None:
    e4, e5 = dtypes.fp8e4m3, dtypes.fp8e5m2
    assert least_upper_dtype(e4, e5) == dtypes.float16  # tinygrad's answer (PyTorch refuses)
    assert least_upper_dtype(e4, dtypes.int64) == e4 and least_upper_dtype(e5, dtypes.bool) == e5
    assert least_upper_dtype(e4, dtypes.bfloat16) == dtypes.bfloat16
    assert least_upper_dtype(e4, e5, dtypes.bfloat16) == least_upper_dtype(dtypes.bfloat16, e5, e4) == dtypes.bfloat16
    assert least_upper_dtype(e5, dtypes.float32) == dtypes.float32


# ---- kernels on Device.DEFAULT ----

@pytest.fixture(scope="module", autouse=False)
def device() -> str:
    if not Device[Device.DEFAULT].supports_dtype(dtypes.fp8e4m3):
        pytest.skip(f"{Device.DEFAULT} does not support the 8-bit floats")
    return Device.DEFAULT


def patterns_as(d: DType, bits: list[int]) -> Tensor:
    return Tensor(np.array(bits, dtype=np.uint8)).bitcast(d)


@pytest.mark.parametrize("d", FP8, ids=lambda d: d.name)
def test_device_decodes_all_256_patterns(device: str, d: DType) -> None:
    got = patterns_as(d, list(range(256))).cast(dtypes.float32).numpy().tolist()
    bad = [(hex(b), g) for b, g in enumerate(got) if not same(g, spec_decode(b, d))]
    assert not bad, bad
    loaded = patterns_as(d, list(range(256))).numpy()  # .numpy() of an fp8 tensor gives float32 values
    assert loaded.dtype == np.float32
    assert all(same(float(v), spec_decode(b, d)) for b, v in enumerate(loaded))


@pytest.mark.parametrize("src", [dtypes.float32, dtypes.float64, dtypes.float16], ids=lambda d: d.name)
@pytest.mark.parametrize("d", FP8, ids=lambda d: d.name)
def test_device_encodes_every_value_to_its_pattern(device: str, d: DType, src: DType) -> None:
    if not Device[device].supports_dtype(src):
        pytest.skip(f"{device} does not support {src.name}")
    pats = [b for b in finite_patterns(d) if src != dtypes.float16 or abs(spec_decode(b, d)) <= 65504]
    values = np.array([float(spec_decode(b, d)) for b in pats], dtype=to_numpy(src))
    got = Tensor(values, dtype=src).cast(d).bitcast(dtypes.uint8).numpy().tolist()
    assert got == pats, [(hex(b), hex(g)) for b, g in zip(pats, got, strict=True) if b != g]


@pytest.mark.parametrize("src", [dtypes.float32, dtypes.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("d", FP8, ids=lambda d: d.name)
def test_device_rounds_ties_to_even(device: str, d: DType, src: DType) -> None:
    if not Device[device].supports_dtype(src):
        pytest.skip(f"{device} does not support {src.name}")
    mids = [float(m) for m, _ in ties(d)]  # exact in float32: at most 5 significant bits
    want = [even for _, even in ties(d)]
    values = np.array(mids + [-m for m in mids], dtype=to_numpy(src))
    got = Tensor(values, dtype=src).cast(d).bitcast(dtypes.uint8).numpy().tolist()
    assert got == want + [w | 0x80 for w in want]


@pytest.mark.parametrize("d", FP8, ids=lambda d: d.name)
def test_device_rounds_float64_once(device: str, d: DType) -> None:
    """Just above a midpoint by less than half a float32 step: float64 -> float32 -> 8 bits would land on the
    midpoint and round to even; one rounding goes up."""
    if not Device[device].supports_dtype(dtypes.float64):
        pytest.skip(f"{device} does not support float64")
    cases = [(m * (1 + Fraction(1, 2**30)), m) for m, _ in ties(d) if m > 0]
    values = np.array([float(v) for v, _ in cases] + [-float(v) for v, _ in cases], dtype=np.float64)
    got = Tensor(values).cast(d).cast(dtypes.float64).numpy().tolist()
    assert all(abs(g) > m for g, (_, m) in zip(got, cases + cases, strict=True))
    assert got == [truncate(float(v), d) for v in values]


@pytest.mark.parametrize("d", FP8, ids=lambda d: d.name)
def test_device_saturates_and_keeps_nan(device: str, d: DType) -> None:
    big = LARGEST[d]
    values = [1e6, -1e6, big * 1.04, -big * 1.125, 3e38, math.nan, math.inf, -math.inf, -0.0]
    got = Tensor(np.array(values, dtype=np.float32)).cast(d).numpy().tolist()
    assert got[:5] == [big, -big, big, -big, big]
    assert math.isnan(got[5]) and same(got[8], -0.0)
    if d == dtypes.fp8e5m2:
        assert got[6:8] == [math.inf, -math.inf]
    else:
        assert math.isnan(got[6]) and math.isnan(got[7])
    ints = Tensor([1000000, -70000, 3], dtype=dtypes.int32).cast(d).numpy().tolist()
    assert ints == [big, -big, 3.0]


def test_tensor_api(device: str) -> None:
    t = Tensor([1.0, 0.3, -2.5, 1e6], dtype=dtypes.fp8e4m3)
    assert t.dtype == dtypes.fp8e4m3
    assert t.tolist() == [1.0, 0.3125, -2.5, 448.0] and all(type(v) is float for v in t.tolist())
    assert t[1].item() == 0.3125 and type(t[1].item()) is float
    assert t.cast(dtypes.fp8e5m2).tolist() == [1.0, 0.3125, -2.5, 448.0]
    assert Tensor([0.3]).cast(dtypes.fp8e5m2).item() == 0.3125
    assert Tensor.zeros(2, 3, dtype=dtypes.fp8e5m2).numpy().dtype == np.float32
    assert Tensor.arange(4, dtype=dtypes.fp8e4m3).tolist() == [0.0, 1.0, 2.0, 3.0]
    assert Tensor([], dtype=dtypes.fp8e4m3).numpy().dtype == np.float32
    assert t.bitcast(dtypes.uint8).tolist() == [0x38, 0x2A, 0xC2, 0x7E]
    assert Tensor.rand(1000, dtype=dtypes.fp8e4m3).numpy().max() < 1.0  # never rounds up to 1


@pytest.mark.parametrize("d", FP8, ids=lambda d: d.name)
def test_arithmetic_rounds_after_every_op(device: str, d: DType) -> None:
    ops = {Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b, Ops.MUL: lambda a, b: a * b,
           Ops.FDIV: lambda a, b: a / b, Ops.MAX: lambda a, b: a.maximum(b)}
    vals = [float(spec_decode(b, d)) for b in finite_patterns(d)][::7]
    xs, ys = [x for x in vals for _ in vals], [y for _ in vals for y in vals]
    a, b = Tensor(xs, dtype=d), Tensor(ys, dtype=d)
    for op, fn in ops.items():
        out = fn(a, b)
        assert out.dtype == d
        want = [exec_alu(op, d, (x, y)) for x, y in zip(xs, ys, strict=True)]
        bad = [(x, y, g, w) for x, y, g, w in zip(xs, ys, out.tolist(), want, strict=True) if not same(g, w)]
        assert not bad, (op, bad[:5])


@pytest.mark.parametrize("d", FP8, ids=lambda d: d.name)
def test_max_of_negative_values(device: str, d: DType) -> None:
    data = [-LARGEST[d], -3.0, -0.5, -1.0]
    assert Tensor(data, dtype=d).max().item() == -0.5
    assert Tensor([-LARGEST[d]] * 5, dtype=d).max().item() == -LARGEST[d]  # the identity is not above the data
