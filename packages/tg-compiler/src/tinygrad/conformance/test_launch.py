"""Launch shapes: output sizes 1, 2**k - 1, 2**k + 1 and past 65535 * 256 elements, 2-D and 3-D outputs with a
long axis in each position, and the limits the renderer declares (global_max, local_max) and one past them.

Each output element is computed from its own index on the device, so an element written twice, at the wrong
place or not at all (a tail the launch did not cover) shows up as a wrong value. int32 only: every device claims
it, and every value here is exact in it.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from tinygrad import Tensor
from tinygrad.conformance.claims import DeviceClaims
from tinygrad.conformance.compare import assert_matches
from tinygrad.conformance.skips import require_size
from tinygrad.dtype import dtypes

#: a typical GPU's limit on one launch dimension (65535 blocks) times a common block size
GRID_LIMIT = 65535 * 256
SIZES_1D = (1, 2, 3, 255, 257, 1023, 1025, 65535, 65537, 2**20 - 1, 2**20 + 1, GRID_LIMIT + 1)
SHAPES_ND = ((1, 1), (2, 3), (3, 5, 7), (257, 255), (255, 257, 3), (65537, 3), (3, 65537), (2, 3, 65537),
             (65537, 2, 3), (4099, 4097), (2, 2, GRID_LIMIT // 4 + 1))
#: declared limits are probed only up to this many elements (a limit of 2**31 work-items is not launched here)
LIMIT_PROBE_CAP = 1 << 26


def indexed(shape: tuple[int, ...], device: str) -> Tensor:
    """A tensor whose element at (i0, i1, ...) is its flat index, computed on the device from per-axis ranges."""
    out: Tensor | None = None
    stride = math.prod(shape)
    for axis, size in enumerate(shape):
        stride //= size
        ramp = Tensor(np.arange(size, dtype=np.int32), device=device)
        term = ramp.reshape(tuple(size if a == axis else 1 for a in range(len(shape)))) * stride
        out = term if out is None else out + term
    assert out is not None
    return out


def check_flat(n: int, device: str) -> None:
    x = Tensor(np.arange(n, dtype=np.int32), device=device)
    got = (x * 3 + 1).numpy()
    want = np.arange(n, dtype=np.int64) * 3 + 1
    assert_matches(got, want, dtypes.int32, lambda i: f"element {i} of a launch of {n}")


@pytest.mark.parametrize("n", SIZES_1D)
def test_flat_launch(tg_device: str, tg_size_limit: int | None, n: int) -> None:
    require_size(n, tg_size_limit)
    check_flat(n, tg_device)


@pytest.mark.parametrize("shape", SHAPES_ND, ids=lambda s: "x".join(map(str, s)))
def test_nd_launch(tg_device: str, tg_size_limit: int | None, shape: tuple[int, ...]) -> None:
    n = math.prod(shape)
    require_size(n, tg_size_limit)
    got = indexed(shape, tg_device).numpy().reshape(-1)
    assert_matches(got, np.arange(n), dtypes.int32,
                   lambda i: f"element {np.unravel_index(i, shape)} of shape {shape}")


def _declared_sizes(claims: DeviceClaims) -> list[int]:
    sizes: set[int] = set()
    for name in ("global_max", "local_max"):
        limit = claims.limits.get(name)
        for value in limit if isinstance(limit, (tuple, list)) else () if limit is None else (limit,):
            sizes.update(v for v in (int(value) - 1, int(value), int(value) + 1) if 0 < v <= LIMIT_PROBE_CAP)
    return sorted(sizes)


def _describe_flat(n: int, i: int) -> str:
    return f"element {i} of a launch of {n}"


def _describe_2d(n: int, i: int) -> str:
    return f"element {i} of shape ({n}, 2)"


def test_declared_limits(tg_device: str, tg_claims: DeviceClaims, tg_size_limit: int | None) -> None:
    """Launches at and one past each limit the renderer declares: the compiler must split or loop, not fail."""
    sizes = _declared_sizes(tg_claims)
    if not sizes:
        pytest.skip(f"the renderer of {tg_device} declares no global_max/local_max under {LIMIT_PROBE_CAP} elements")
    sizes = [n for n in sizes if tg_size_limit is None or n <= tg_size_limit]
    if not sizes:
        pytest.skip(f"more than {tg_size_limit} elements (--tg-quick)")
    flat = [(n, Tensor(np.arange(n, dtype=np.int32), device=tg_device) * 3 + 1) for n in sizes]
    tall = [(n, indexed((n, 2), tg_device)) for n in sizes if 2 * n <= LIMIT_PROBE_CAP]
    Tensor.realize(*(t for _, t in flat + tall))  # every launch is built before the first result is read
    for n, t in flat:
        assert_matches(t.numpy(), np.arange(n, dtype=np.int64) * 3 + 1, dtypes.int32,
                       functools.partial(_describe_flat, n))
    for n, t in tall:
        assert_matches(t.numpy().reshape(-1), np.arange(2 * n), dtypes.int32, functools.partial(_describe_2d, n))
