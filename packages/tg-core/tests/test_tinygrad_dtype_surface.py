"""tinygrad's dtype names that its own tests import, checked against numpy and PyTorch: `dtypes.finfo`, the fnuz
8-bit floats, `float_to_fp8`/`fp8_to_float`, `truncate[d]`, `_to_torch_dtype`, `strong_dtype`, the dtype groups,
`EMULATED_DTYPES`, `renderer.supported_dtypes()`, and `Tensor.bitcast` between dtypes of different sizes."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest
from tinygrad import Context, Device, Tensor, dtypes
from tinygrad.dtype import (
    DTYPES_DICT,
    DType,
    _to_torch_dtype,
    float_to_fp8,
    fp8_to_float,
    least_upper_dtype,
    strong_dtype,
    to_dtype,
    truncate,
)
from tinygrad.errors import DTypeError
from tinygrad.helpers import EMULATED_DTYPES

torch = pytest.importorskip("torch", reason="PyTorch is the reference for the 8-bit floats and finfo")

TORCH_FP8 = {dtypes.fp8e4m3: torch.float8_e4m3fn, dtypes.fp8e5m2: torch.float8_e5m2,
             dtypes.fp8e4m3fnuz: torch.float8_e4m3fnuz, dtypes.fp8e5m2fnuz: torch.float8_e5m2fnuz}
FP8_IDS = [d.name for d in TORCH_FP8]


def _torch_decode(d: DType) -> np.ndarray:
    return torch.arange(256, dtype=torch.uint8).view(TORCH_FP8[d]).float().numpy()


def _samples(d: DType) -> np.ndarray:
    """float32 values within the format's finite range: every representable value, random ones across the range and
    tiny ones near and below the smallest subnormal, and both zeros."""
    ref = _torch_decode(d)
    largest = float(np.nanmax(np.abs(ref[np.isfinite(ref)])))
    rng = np.random.default_rng(0)
    xs = np.concatenate([ref[np.isfinite(ref)], rng.uniform(-largest, largest, 4000),
                         rng.standard_normal(4000) * 2.0 ** -9, [0.0, -0.0, 1e-30, -1e-30]]).astype(np.float32)
    return xs[np.abs(xs) <= largest]


def test_finfo_matches_torch() -> None:
    pairs = {dtypes.float16: torch.float16, dtypes.bfloat16: torch.bfloat16, dtypes.float32: torch.float32,
             dtypes.float64: torch.float64}
    for d, t in pairs.items():
        info = torch.finfo(t)
        mantissa = -int(math.log2(info.eps))
        assert dtypes.finfo(d) == (info.bits - 1 - mantissa, mantissa), d
    # torch's eps of the fnuz formats is not 2^-mantissa (their bias moves 1.0), so the 8-bit ones go by their names
    for d, t in TORCH_FP8.items():
        found = re.fullmatch(r"torch\.float8_e(\d)m(\d)\w*", str(t))
        assert found is not None and dtypes.finfo(d) == (int(found[1]), int(found[2])), d
    for d in (dtypes.int32, dtypes.uint8, dtypes.bool):
        with pytest.raises(ValueError):
            dtypes.finfo(d)


def test_fnuz_dtypes_and_groups() -> None:
    assert dtypes.fp8_ocp == (dtypes.fp8e4m3, dtypes.fp8e5m2)
    assert dtypes.fp8_fnuz == (dtypes.fp8e4m3fnuz, dtypes.fp8e5m2fnuz)
    assert dtypes.fp8s == dtypes.fp8_ocp + dtypes.fp8_fnuz
    for d in dtypes.fp8_fnuz:
        assert d.itemsize == 1 and d.is_float and d in dtypes.all() and d in DTYPES_DICT.values()
        assert to_dtype(str(TORCH_FP8[d]).removeprefix("torch.")) is d
    assert (dtypes.fp8e4m3fnuz.max, dtypes.fp8e5m2fnuz.max) == (240.0, 57344.0)
    assert dtypes.ints == dtypes.uints + dtypes.sints and dtypes.int64 in dtypes.sints and dtypes.uint8 in dtypes.uints
    assert set(dtypes.floats) == {d for d in dtypes.all() if d.is_float}
    # DTYPES_DICT holds tensor dtypes only: not the kernels' index type nor void
    assert dtypes.index not in DTYPES_DICT.values() and dtypes.void not in DTYPES_DICT.values()


@pytest.mark.parametrize("d", list(TORCH_FP8), ids=FP8_IDS)
def test_fp8_to_float_matches_torch_on_every_pattern(d: DType) -> None:
    got = np.array([fp8_to_float(b, d) for b in range(256)], dtype=np.float32)
    np.testing.assert_array_equal(got, _torch_decode(d))


@pytest.mark.parametrize("d", list(TORCH_FP8), ids=FP8_IDS)
def test_float_to_fp8_matches_torch(d: DType) -> None:
    xs = _samples(d)
    want = torch.tensor(xs).to(TORCH_FP8[d]).view(torch.uint8).numpy()
    got = np.array([float_to_fp8(float(x), d) for x in xs], dtype=np.uint8)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("d", [dtypes.fp8e5m2, *dtypes.fp8_fnuz], ids=["fp8e5m2", "fp8e4m3fnuz", "fp8e5m2fnuz"])
def test_float_to_fp8_extremes_match_torch(d: DType) -> None:
    # E4M3 is left out: PyTorch saturates its infinities to 448, tinygrad (and this project) makes them NaN
    largest = float(np.nanmax(_torch_decode(d)[np.isfinite(_torch_decode(d))]))
    for x in (largest, largest * 1.01, -largest, -largest * 1.01, math.inf, -math.inf, math.nan, -math.nan, 0.0, -0.0):
        assert float_to_fp8(x, d) == torch.tensor(x, dtype=TORCH_FP8[d]).view(torch.uint8).item(), x


def test_fp8_conversions_refuse_other_dtypes() -> None:
    with pytest.raises(ValueError):
        float_to_fp8(1.0, dtypes.float16)
    with pytest.raises(ValueError):
        fp8_to_float(1, dtypes.bfloat16)


def test_truncate_by_dtype_matches_numpy() -> None:
    rng = np.random.default_rng(1)
    floats = [*rng.uniform(-1e5, 1e5, 50).tolist(), 1e39, -1e39, 65519.0, 65520.0, 0.1]
    for d, np_type in ((dtypes.float16, np.float16), (dtypes.float32, np.float32), (dtypes.float64, np.float64)):
        for x in floats:
            with np.errstate(over="ignore"):
                assert truncate[d](x) == float(np_type(x)), (d, x)
    ints = [0, 1, -1, 127, 128, 255, 256, -129, 2**31, 2**63 - 1, -(2**63), 2**64 - 1, 12345678901]
    for d in dtypes.ints:
        np_type = np.dtype(d.name).type
        for x in ints:
            assert truncate[d](x) == int(np.array(x % 2**64, dtype=np.uint64).astype(np_type)), (d, x)
    bf16 = torch.tensor(floats[:50]).to(torch.bfloat16).float().tolist()
    assert [truncate[dtypes.bfloat16](x) for x in floats[:50]] == bf16
    assert truncate[dtypes.bool](3) is True and truncate(2.5, dtypes.int8) == truncate[dtypes.int8](2.5) == 2
    assert dtypes.fp8e4m3fnuz in truncate and dtypes.void not in truncate
    with pytest.raises(KeyError):
        truncate[dtypes.void]


def test_to_torch_dtype() -> None:
    for d in dtypes.all():
        want = torch.uint8 if d in dtypes.fp8s else getattr(torch, d.name)
        assert _to_torch_dtype(d) == want, d
    assert _to_torch_dtype(dtypes.void) is None


def test_least_upper_dtype_of_the_fnuz_formats() -> None:
    assert least_upper_dtype(dtypes.fp8e4m3fnuz, dtypes.fp8e5m2fnuz) == dtypes.float16
    assert least_upper_dtype(dtypes.fp8e4m3fnuz, dtypes.fp8e4m3) == dtypes.float16
    assert least_upper_dtype(dtypes.fp8e5m2fnuz, dtypes.bfloat16) == dtypes.bfloat16
    assert least_upper_dtype(dtypes.int64, dtypes.fp8e4m3fnuz) == dtypes.fp8e4m3fnuz
    assert least_upper_dtype(dtypes.fp8e4m3fnuz, dtypes.fp8e4m3fnuz) == dtypes.fp8e4m3fnuz


def test_strong_dtype_is_the_identity() -> None:
    for d in dtypes.all():
        assert strong_dtype(d) is d


def test_emulated_dtypes_knob_lists_dtypes() -> None:
    assert EMULATED_DTYPES.tolist() == [] and EMULATED_DTYPES.tolist(dtypes) == []
    with Context(EMULATED_DTYPES="half,long"):
        assert EMULATED_DTYPES.tolist() == ["half", "long"]
        assert EMULATED_DTYPES.tolist(dtypes) == [dtypes.float16, dtypes.int64]
    assert EMULATED_DTYPES.value == ""


def _renderer() -> Any:
    # the renderer belongs to the compiled devices (tg-compiler), not to core's DeviceRuntime contract
    device: Any = Device[Device.DEFAULT]
    return device.renderer


def test_renderer_supported_dtypes_is_also_a_call() -> None:
    renderer = _renderer()
    assert renderer.supported_dtypes() == renderer.supported_dtypes
    assert all(isinstance(d, DType) for d in renderer.supported_dtypes())


def _fnuz_supported() -> bool:
    return all(_renderer().supports_dtype(d) for d in dtypes.fp8_fnuz)


@pytest.mark.parametrize("d", list(TORCH_FP8), ids=FP8_IDS)
def test_fp8_kernels_match_torch(d: DType) -> None:
    if not _renderer().supports_dtype(d):
        pytest.skip(f"{Device.DEFAULT} does not compute {d}")
    decoded = Tensor(np.arange(256, dtype=np.uint8)).bitcast(d).cast(dtypes.float32).numpy()
    np.testing.assert_array_equal(decoded, _torch_decode(d))
    xs = _samples(d)
    encoded = Tensor(xs).cast(d).bitcast(dtypes.uint8).numpy()
    np.testing.assert_array_equal(encoded, torch.tensor(xs).to(TORCH_FP8[d]).view(torch.uint8).numpy())


def test_fnuz_kernels_map_nan_infinity_and_negative_zero_like_torch() -> None:
    if not _fnuz_supported():
        pytest.skip(f"{Device.DEFAULT} does not compute the fnuz 8-bit floats")
    xs = np.array([math.nan, math.inf, -math.inf, -0.0, 0.0, -1e-30], dtype=np.float32)
    for d in dtypes.fp8_fnuz:
        got = Tensor(xs).cast(d).bitcast(dtypes.uint8).tolist()
        assert got == torch.tensor(xs).to(TORCH_FP8[d]).view(torch.uint8).tolist(), d


BITCAST_DTYPES = [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.float16, dtypes.int32,
                  dtypes.uint32, dtypes.float32, dtypes.int64, dtypes.uint64, dtypes.float64]


@pytest.mark.parametrize("src", BITCAST_DTYPES, ids=lambda d: d.name)
def test_bitcast_between_sizes_matches_numpy_view(src: DType) -> None:
    rng = np.random.default_rng(2)
    # bytes below 0x40 keep every float view finite: a device that computes half in float need not keep a NaN's
    # payload, which is not what this checks
    raw = rng.integers(0, 0x40, size=2 * 3 * 16, dtype=np.uint8)
    data = raw.view(np.dtype(src.name)).reshape(2, 3, -1)
    t = Tensor(data)
    for to in BITCAST_DTYPES:
        if to.itemsize == src.itemsize:
            continue
        got = t.bitcast(to)
        want = data.view(np.dtype(to.name))
        assert got.dtype == to and got.shape == want.shape
        np.testing.assert_array_equal(got.numpy().view(np.uint8), want.view(np.uint8), err_msg=f"{src} -> {to}")


def test_bitcast_between_sizes_needs_whole_elements() -> None:
    with pytest.raises(DTypeError):
        Tensor.empty((3,), dtype=dtypes.int8).bitcast(dtypes.float16)
    with pytest.raises(RuntimeError):  # tinygrad's tests expect a RuntimeError
        Tensor.empty((2, 3), dtype=dtypes.int16).bitcast(dtypes.int32)
    with pytest.raises(DTypeError):
        Tensor([True, False]).bitcast(dtypes.int16)
