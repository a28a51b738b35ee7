"""Index arithmetic past 2**31 and 2**32, on little memory: views of small buffers (expands, reshapes, shrinks) whose
flattened index passes int32's range, read at a few places near and past the boundaries.

A device whose renderer has 64-bit integers must compute these exactly; one without them (`index_wide_dtype` is
None: WGSL) must refuse with an `IndexRangeError` that names the value and the limit, never wrap silently.
"""

from __future__ import annotations

import numpy as np
import pytest
from tinygrad import Device, Tensor
from tinygrad.codegen.index_dtype import IndexRangeError
from tinygrad.conformance.compare import assert_matches
from tinygrad.dtype import dtypes

WINDOW = 100
ROWS = 70_001  # rows of the expanded (ROWS, ROWS) view: ROWS**2 passes 2**32
#: starts of the windows read: just below and past 2**31, around 2**32, and the view's last elements
STARTS = (2**31 - 3, 2**32 - 2, 4_000_000_000, ROWS * ROWS - WINDOW)


def _refuses_wide(device: str) -> bool:
    renderer = getattr(Device[device], "renderer", None)  # a Compiled device's; others run whatever they are given
    return renderer is not None and renderer.index_wide_dtype is None


def _row_numbers(device: str) -> Tensor:
    """A (ROWS*ROWS,) view whose element k is k // ROWS: a column of row numbers broadcast along the rows and
    flattened. Reading element k divides a 64-bit flat index."""
    rows = Tensor(np.arange(ROWS, dtype=np.int32), device=device)
    return rows.reshape(ROWS, 1).expand(ROWS, ROWS).reshape(-1)


@pytest.mark.parametrize("start", STARTS, ids=lambda s: f"at{s}")
def test_flat_index_of_an_expanded_view(tg_device: str, start: int) -> None:
    window = _row_numbers(tg_device)[start:start + WINDOW]
    want = np.arange(start, start + WINDOW, dtype=np.int64) // ROWS
    if _refuses_wide(tg_device):
        with pytest.raises(IndexRangeError, match="past the 32-bit integers"):
            window.numpy()
        return
    assert_matches(window.numpy(), want, dtypes.int32, lambda i: f"element {start + i} of the expanded view")


def test_strided_rows_past_int32(tg_device: str) -> None:
    """Row r of a (2, 2**31 + 11) view of the row numbers starts at r * (2**31 + 11): the product leaves int32."""
    n = 2**31 + 11
    view = _row_numbers(tg_device)[: 2 * n].reshape(2, n)[:, n - 6:]  # the last 6 elements of each row
    want = (np.arange(2)[:, None] * n + np.arange(n - 6, n)[None, :]) // ROWS
    if _refuses_wide(tg_device):
        with pytest.raises(IndexRangeError):
            view.numpy()
        return
    assert_matches(view.numpy().reshape(-1), want.reshape(-1), dtypes.int32,
                   lambda i: f"element {divmod(i, 6)} of the last columns")


def test_indices_that_fit_stay_32_bit(tg_device: str) -> None:
    """The same view read below 2**31 compiles with no 64-bit arithmetic on any device, WGSL included."""
    window = _row_numbers(tg_device)[2**30:2**30 + WINDOW]
    want = np.arange(2**30, 2**30 + WINDOW, dtype=np.int64) // ROWS
    assert_matches(window.numpy(), want, dtypes.int32, lambda i: f"element {2**30 + i} of the expanded view")
