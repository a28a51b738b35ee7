"""Reductions whose loads run along the reduce axis and along no output axis (a row sum, a matrix-vector product
against a row-major matrix, the decode step of a language model): the CPU heuristics vectorise along the reduction
(the innermost reduce axis unrolled by a vector's lanes, a few outputs side by side), not along the outputs, whose
lanes would each gather from another row. Results stay numpy's."""

from __future__ import annotations

import numpy as np
import pytest
from tg_backend_cpu.renderer import CPURenderer
from tinygrad import Tensor
from tinygrad.codegen import get_program
from tinygrad.dtype import dtypes

LANES = CPURenderer().knobs.simd_lanes(dtypes.float32)


def _opts(t: Tensor) -> list[str]:
    return [str(o) for o in get_program(t.schedule()[-1].ast, CPURenderer()).applied_opts]


@pytest.mark.parametrize("rows", [1, 4])
def test_a_matrix_vector_product_vectorises_along_the_reduction(rows: int) -> None:
    rng = np.random.default_rng(0)
    xn, wn = rng.standard_normal((rows, 256)).astype(np.float32), rng.standard_normal((1024, 256)).astype(np.float32)
    x, w = Tensor(xn).realize(), Tensor(wn).realize()
    opts = _opts(x @ w.T)
    assert opts[0] == f"UNROLL({1 if rows == 1 else 2},{LANES})", opts
    assert all(not o.startswith("UPCAST") or o.endswith(",4)") for o in opts), opts  # no 32-lane gathers
    np.testing.assert_allclose((x @ w.T).numpy(), xn @ wn.T, rtol=1e-4, atol=1e-4)


def test_a_row_sum_vectorises_along_the_row() -> None:
    wn = np.random.default_rng(1).standard_normal((512, 96)).astype(np.float32)
    w = Tensor(wn).realize()
    assert _opts(w.sum(1))[0] == f"UNROLL(1,{LANES})"
    np.testing.assert_allclose(w.sum(1).numpy(), wn.sum(1), rtol=1e-5, atol=1e-4)


def test_a_product_with_a_column_major_operand_keeps_its_register_tile() -> None:
    # x @ w with w (k, m) row-major: w is contiguous along the outputs, the tile stays along them
    x, w = Tensor.randn(64, 256).realize(), Tensor.randn(256, 512).realize()
    assert not any(o.startswith("UNROLL") for o in _opts(x @ w))
