"""Compare a device's output buffer with reference values, and fail the test with the first differences."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest
from tinygrad.conformance.values import Scalar, from_buffer_array, to_buffer_array
from tinygrad.dtype import DType, decode_floats, is_emulated_float

#: differences listed in a failure message; the count of all of them is always given
SHOWN = 12


def _ordered_bits(bits: np.ndarray) -> np.ndarray:
    """Float bit patterns as integers whose differences count ulps (-0.0 and +0.0 are one apart)."""
    signed = bits.astype(np.int64) if bits.dtype.itemsize < 8 else bits.view(np.int64)
    width = bits.dtype.itemsize * 8
    magnitude = signed & ((1 << (width - 1)) - 1) if width < 64 else signed & np.int64(0x7FFFFFFFFFFFFFFF)
    negative = (signed >> (width - 1)) & 1 if width < 64 else signed < 0
    return np.where(negative.astype(bool), -magnitude - 1, magnitude)


def _as_float64(arr: np.ndarray, d: DType) -> np.ndarray:
    if is_emulated_float(d):
        return decode_floats(arr, d).astype(np.float64)
    return arr.astype(np.float64)


def mismatches(got: np.ndarray, expected: Sequence[Scalar] | np.ndarray, d: DType, ulps: int = 0) -> np.ndarray:
    """A bool mask: where `got` (a buffer array of dtype d) is not `expected` within `ulps`.

    `expected` holds Python numbers as the reference returns them, or an array of them (integers only)."""
    exp = to_buffer_array(expected, d)
    if got.shape != exp.shape:
        raise AssertionError(f"the device returned {got.shape[0]} values of {d.name}, expected {exp.shape[0]}")
    if not d.is_float:
        return np.asarray(got != exp)
    bits_dtype = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[d.itemsize]
    g_bits, e_bits = got.view(bits_dtype), exp.view(bits_dtype)
    with np.errstate(all="ignore"):
        g_val, e_val = _as_float64(got, d), _as_float64(exp, d)
    both_nan = np.isnan(g_val) & np.isnan(e_val)
    if ulps == 0:
        return ~both_nan & (g_bits != e_bits)
    # finite results within `ulps`; infinities, NaN and zeros where the reference has them must match exactly
    dist = np.abs(_ordered_bits(g_bits) - _ordered_bits(e_bits))
    special = ~np.isfinite(g_val) | ~np.isfinite(e_val) | (e_val == 0)
    return ~both_nan & ((dist > ulps) | (special & (g_bits != e_bits)))


def assert_matches(got: np.ndarray, expected: Sequence[Scalar] | np.ndarray, d: DType, describe: Callable[[int], str],
                   ulps: int = 0, also_accept: Sequence[Sequence[Scalar]] = ()) -> None:
    """Fail unless every element of `got` matches `expected` (or one of the `also_accept` lists) within `ulps`."""
    bad = mismatches(got, expected, d, ulps)
    for alternative in also_accept:
        bad &= mismatches(got, alternative, d, ulps)
    idx = np.nonzero(bad)[0]
    if len(idx):
        got_vals = from_buffer_array(got[idx[:SHOWN]], d)
        want_vals = from_buffer_array(to_buffer_array([expected[i] for i in idx[:SHOWN]], d), d)
        tol = f" (allowed: {ulps} ulp)" if ulps else " (must be exact)"
        lines = [f"  {describe(int(i))}: got {g!r}, expected {w!r}" for i, g, w in zip(idx, got_vals, want_vals)]
        pytest.fail(f"{len(idx)} of {len(got)} results differ from the reference semantics of tinygrad.uop.alu "
                    f"for {d.name}{tol}:\n" + "\n".join(lines), pytrace=False)
