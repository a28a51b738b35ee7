"""Right at every size: index products past 2**31 and 2**32, loops past int32, a buffer of more than 2**31 bytes,
and the refusals where a size cannot be held.

Big index spaces cost no memory here: expands, reshapes and shrinks of small buffers make the flattened index pass
2**31 while a test allocates a few MB. One test allocates a real buffer past 2**31 bytes (2 GiB of RAM) on a device
that can hold it. Run on `Device.DEFAULT` (the CPU in CI's tests session).
"""

from __future__ import annotations

import numpy as np
import pytest
from tinygrad import Device, Tensor, dtypes, nn
from tinygrad.uop.ops import Variable

INT32_MAX = 2**31 - 1


def _has_wide_indices(device: str) -> bool:
    renderer = getattr(Device[device], "renderer", None)
    return renderer is None or getattr(renderer, "index_wide_dtype", 1) is not None


@pytest.fixture
def wide(device: str) -> str:
    if not _has_wide_indices(device):
        pytest.skip(f"{device} has no 64-bit integers (it refuses these kernels; the conformance kit checks that)")
    return device


# ---- the reported examples ----

def test_max_past_int32_elements(wide: str) -> None:
    assert Tensor.ones(2**31 + 8).max().item() == 1.0


def test_sum_of_rows_past_int32(wide: str) -> None:
    # 2**31 + 1 is not a float32: the sum rounds to 2**31, as numpy's and PyTorch's do
    assert Tensor.ones(3, 2**31 + 1).sum(axis=1).tolist() == [float(np.float32(2**31 + 1))] * 3


def test_sum_past_int32_elements(wide: str) -> None:
    assert Tensor.ones(4294967299).sum().item() == float(np.float32(4294967299))


def test_int64_sum_past_int32_is_exact(wide: str) -> None:
    assert Tensor.ones(2**33, dtype=dtypes.int64).sum().item() == 2**33
    # not a constant the compiler can fold: a loaded value times the count
    x = Tensor([3], dtype=dtypes.int64).reshape(1, 1).expand(2**17, 2**17)
    assert x.sum().item() == 3 * 2**34


def test_mean_of_ten_billion(wide: str) -> None:
    assert Tensor.ones(10**10).mean().item() == 1.0


def test_float_sum_past_two_to_the_24() -> None:
    assert Tensor.ones(33554433).sum().item() == 33554432.0
    assert Tensor.ones(1, 1).expand(65536, 65536).sum().item() == 4294967296.0


# ---- reads and writes past 2**31 ----

def test_conv_over_a_batch_whose_flat_index_passes_int32(wide: str) -> None:
    """Three real images repeated through an expand into 120,000: the input's flat index (image * 18432 + ...)
    passes 2**31. Only two outputs are computed at each end, and they must be those of the images themselves."""
    Tensor.manual_seed(0)
    conv = nn.Conv2d(32, 32, 5)
    images = Tensor.randn(3, 32, 24, 24).realize()
    repeat = 40_000
    batch = images.reshape(3, 1, 32, 24, 24).expand(3, repeat, 32, 24, 24).reshape(3 * repeat, 32, 24, 24)
    assert batch.shape[0] * 32 * 24 * 24 > 2**31
    want = conv(images).numpy()
    np.testing.assert_allclose(conv(batch)[-2:].numpy(), want[[2, 2]], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(conv(batch)[repeat - 1:repeat + 1].numpy(), want[[0, 1]], rtol=1e-5, atol=1e-5)


def test_a_buffer_past_two_gib(wide: str) -> None:
    n = 2**31 + 5  # uint8: more than 2**31 bytes, and element indices past int32
    limit = Device[wide].allocator.max_buffer_bytes
    if limit is not None and limit < 2 * n:
        pytest.skip(f"{wide} holds buffers up to {limit} bytes")
    x = Tensor.full((n,), 3, dtype=dtypes.uint8).contiguous().realize()
    x[n - 4:n - 2] = Tensor([7, 9], dtype=dtypes.uint8)  # (`x[a:b].assign(...)` through a view: issue 13)
    assert x[n - 5:].tolist() == [3, 7, 9, 3, 3]
    assert x[2**31 - 1:2**31 + 1].tolist() == [3, 3]
    assert x.sum().item() == 3 * n + 4 + 6
    del x


def test_a_symbolic_size_past_int32(wide: str) -> None:
    big = Tensor.ones(1, 1).expand(3, 2**31 + 8).reshape(-1)
    n = Variable("n", 1, INT32_MAX)
    assert big[2**31:2**31 + n.bind(100)].sum().item() == 100.0  # the offset passes int32, the Variable does not
    # Variables are 32-bit kernel arguments: one whose range passes int32 is refused, naming it
    m = Variable("m", 1, 3 * (2**31 + 8))
    with pytest.raises(ValueError, match=r"Variable m ranges over \[1, 6442450968\], past the int32"):
        big[:m.bind(2**31 + 3)].sum().item()


# ---- what cannot be held is refused before any kernel runs ----

def test_a_buffer_larger_than_the_device_is_refused(device: str) -> None:
    limit = Device[device].allocator.max_buffer_bytes
    if limit is None:
        pytest.skip(f"{device} declares no buffer limit")
    with pytest.raises(MemoryError, match=r"elements \(.* does not fit on .*largest buffer is"):
        Tensor.empty(limit // 4 + 1024, dtype=dtypes.float32)
    with pytest.raises(MemoryError, match="does not fit"):
        (Tensor.ones(limit // 2 + 1024, dtype=dtypes.float32) + 1).realize()


def test_a_variable_as_a_value_is_an_int_tensor() -> None:
    v = Variable("k", 0, 100).bind(42)
    t = Tensor(v)
    assert t.dtype == dtypes.int32 and t.item() == 42
    assert Tensor(Variable("m", 0, INT32_MAX + 10).bind(7)).dtype == dtypes.int64
