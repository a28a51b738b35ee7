"""Copies: host <-> device buffers of 0, 1 and unaligned (3, 5, 7) bytes and more, every claimed dtype's bits
(NaN, -0.0, subnormals) through a round trip, device <-> CPU with `Tensor.to`, copies of views at odd offsets,
and device <-> device when a second device of the same backend exists.
"""

from __future__ import annotations

import numpy as np
import pytest
from tinygrad import Tensor
from tinygrad.conformance.claims import DeviceClaims
from tinygrad.conformance.skips import require_claimed
from tinygrad.conformance.tensors import result_of, tensor_of
from tinygrad.conformance.values import edge_values, to_buffer_array
from tinygrad.device import Buffer, Device
from tinygrad.dtype import DType, dtypes

BYTE_SIZES = (0, 1, 3, 5, 7, 8, 13, 4096 + 3, 1_000_003)


def pattern(nbytes: int) -> np.ndarray:
    """Bytes that differ from their neighbours and from zero-filled memory."""
    return ((np.arange(nbytes, dtype=np.int64) * 37 + 11) % 251 + 1).astype(np.uint8)


@pytest.mark.parametrize("nbytes", BYTE_SIZES)
def test_buffer_round_trip(tg_device: str, nbytes: int) -> None:
    data = pattern(nbytes)
    buf = Buffer(tg_device, nbytes, dtypes.uint8).copyin(data.data.cast("B"))
    out = np.full(nbytes, 0xEE, dtype=np.uint8)
    buf.copyout(out.data.cast("B"))
    np.testing.assert_array_equal(out, data, err_msg=f"{nbytes} bytes through {tg_device} and back")


@pytest.mark.parametrize("d", dtypes.all(), ids=lambda d: d.name)
def test_dtype_bits_round_trip(tg_device: str, tg_claims: DeviceClaims, d: DType) -> None:
    """Copies move bits: NaN, -0.0 and subnormals come back unchanged (no conversion on the way)."""
    require_claimed(tg_claims, d)
    data = to_buffer_array(edge_values(d), d)
    buf = Buffer(tg_device, len(data), d).copyin(data.data.cast("B"))
    out = buf.numpy()
    assert out.tobytes() == data.tobytes(), f"{d.name} bits changed on the way through {tg_device}: {out} vs {data}"


@pytest.mark.parametrize("nbytes", BYTE_SIZES)
@pytest.mark.parametrize("direction", ["to-cpu", "from-cpu"])
def test_tensor_to_cpu(tg_device: str, nbytes: int, direction: str) -> None:
    data = pattern(nbytes)
    src, dst = (tg_device, "CPU") if direction == "to-cpu" else ("CPU", tg_device)
    moved = Tensor(data, device=src).to(dst)
    assert moved.device == Device.canonicalize(dst)
    np.testing.assert_array_equal(moved.numpy(), data, err_msg=f"{nbytes} bytes {src} -> {dst}")


@pytest.mark.parametrize("d", dtypes.all(), ids=lambda d: d.name)
def test_tensor_to_cpu_keeps_dtype_bits(tg_device: str, tg_claims: DeviceClaims, d: DType) -> None:
    require_claimed(tg_claims, d)
    if not Device["CPU"].supports_dtype(d):
        pytest.skip(f"the CPU device does not claim {d.name}")
    values = edge_values(d)
    back = tensor_of(np.array(values, dtype=np.float64 if d.is_float else object), d, tg_device).to("CPU")
    back = back.to(tg_device).to("CPU")
    assert result_of(back).tobytes() == to_buffer_array(values, d).tobytes(), \
        f"{d.name} bits changed going {tg_device} -> CPU -> {tg_device} -> CPU"


@pytest.mark.parametrize("start,stop", [(0, 1), (1, 4), (3, 10), (5, 12), (7, 4096 + 7)])
def test_copy_of_a_view_at_an_odd_offset(tg_device: str, start: int, stop: int) -> None:
    data = pattern(4096 + 16)
    t = Tensor(data, device=tg_device)
    np.testing.assert_array_equal(t[start:stop].to("CPU").numpy(), data[start:stop],
                                  err_msg=f"bytes [{start}:{stop}] of a {tg_device} tensor copied to CPU")
    back = Tensor(data, device="CPU")[start:stop].to(tg_device)
    np.testing.assert_array_equal(back.numpy(), data[start:stop],
                                  err_msg=f"bytes [{start}:{stop}] of a CPU tensor copied to {tg_device}")


def _second_device(device: str) -> str:
    base = device.split(":")[0]
    second = f"{base}:1" if device == base else base
    try:
        Device[second]
    except Exception as e:  # no second device of this backend here: say why
        pytest.skip(f"no second {base} device to copy between ({type(e).__name__}: {e})")
    return second


@pytest.mark.parametrize("nbytes", (0, 1, 7, 4096 + 3))
def test_copy_between_two_devices_of_the_backend(tg_device: str, nbytes: int) -> None:
    other = _second_device(tg_device)
    data = pattern(nbytes)
    there = Tensor(data, device=tg_device).to(other)
    np.testing.assert_array_equal(there.numpy(), data, err_msg=f"{nbytes} bytes {tg_device} -> {other}")
    np.testing.assert_array_equal(there.to(tg_device).numpy(), data, err_msg=f"{nbytes} bytes {other} -> {tg_device}")
