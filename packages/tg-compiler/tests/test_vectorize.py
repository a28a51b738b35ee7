"""Vector loads and stores: only for renderers that declare `vector_widths`, only where provably aligned."""

from __future__ import annotations

import pytest
from opt_helpers import elementwise_ast, matmul_ast, param, store
from tinygrad.codegen import get_program
from tinygrad.codegen.lowerer import IDX
from tinygrad.codegen.opt import Opt, OptOps
from tinygrad.dtype import DType, dtypes
from tinygrad.renderer.cstyle import CKernel, CStyleRenderer
from tinygrad.renderer.vectorize import multiple_of, split_index
from tinygrad.uop.ops import AxisKind, Ops, RangeArg, UOp


class VecRenderer(CStyleRenderer):
    """A C target with 4-wide vectors written as calls, so that tests can find them in the source."""

    vector_widths = (4,)

    def vector_type(self, d: DType, width: int) -> str:
        return f"vec{width}"

    def render_vector_load(self, k: CKernel, buf: str, idx: str, width: int, d: DType) -> str:
        return f"VLOAD{width}({buf}, {idx})"

    def render_vector_lane(self, vec: str, lane: int) -> str:
        return f"{vec}[{lane}]"

    def render_vector_store(self, buf: str, idx: str, values: list[str], d: DType) -> str:
        return f"VSTORE{len(values)}({buf}, {idx}, {', '.join(values)});"


def test_index_sums_split_into_terms_and_a_constant() -> None:
    r = UOp(Ops.RANGE, IDX, (UOp.const(IDX, 8),), RangeArg(0, AxisKind.GLOBAL))
    terms, const = split_index((r * UOp.const(IDX, 4) + UOp.const(IDX, 3)) + UOp.const(IDX, 2))
    assert const == 5 and len(terms) == 1
    assert multiple_of(r * UOp.const(IDX, 8), 4) and not multiple_of(r * UOp.const(IDX, 6), 4)
    assert not multiple_of(r, 2) and multiple_of(UOp.const(IDX, 12), 4)


def test_a_contiguous_upcast_becomes_vector_loads_and_stores() -> None:
    src = get_program(matmul_ast(8, 16, 12), VecRenderer(), (Opt(OptOps.UPCAST, 1, 4),)).src
    assert "VLOAD4(data2" in src  # the 4 columns of b
    assert "VSTORE4(data0" in src
    assert "VLOAD4(data1" not in src  # a is read along k, one value per row: scalar


def test_an_upcast_that_is_not_a_multiple_of_the_width_stays_scalar() -> None:
    src = get_program(matmul_ast(8, 16, 12), VecRenderer(), (Opt(OptOps.UPCAST, 1, 3),)).src
    assert "VLOAD" not in src and "VSTORE" not in src


def test_unaligned_offsets_stay_scalar() -> None:
    # out[i, j] = x[i*6 + j + 1] for j < 4: the row stride 6 is not a multiple of 4
    x = param(1, 64).reshape((64,)).shrink(((1, 61),)).reshape((10, 6)).shrink(((0, 10), (0, 4)))
    src = get_program(store((10, 4), x), VecRenderer(), (Opt(OptOps.UPCAST, 1, 4),)).src
    assert "VLOAD" not in src
    assert "VSTORE4(data0" in src  # the output rows are 4 wide: aligned


def test_renderers_without_vector_widths_never_vectorise() -> None:
    src = get_program(elementwise_ast((4, 4, 8)), CStyleRenderer(), (Opt(OptOps.UPCAST, 2, 8),)).src
    assert "VLOAD" not in src and "vload" not in src


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bool])
def test_dtypes_the_target_does_not_vectorise_stay_scalar(dtype: DType) -> None:
    x = param(1, 32, dtype).reshape((8, 4))
    src = get_program(store((8, 4), x, dtype), VecRenderer(), (Opt(OptOps.UPCAST, 1, 4),)).src
    assert "VLOAD" not in src and "VSTORE" not in src
