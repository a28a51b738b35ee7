"""The identity element of each reduction op (`tinygrad.uop.reduce_identity`): the one definition the scheduler's
split and empty reductions, the lowerer's accumulators and the gather fold share."""

from __future__ import annotations

import math

import pytest
from tinygrad import Tensor
from tinygrad.dtype import DType, dtypes
from tinygrad.uop.ops import Ops
from tinygrad.uop.reduce_identity import reduce_identity, reduce_identity_value


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float16, dtypes.int32, dtypes.uint8, dtypes.bool])
def test_each_identity_leaves_every_value_of_the_dtype_unchanged(dtype: DType) -> None:
    assert reduce_identity_value(Ops.ADD, dtype) == 0
    assert reduce_identity_value(Ops.MUL, dtype) == 1
    assert reduce_identity_value(Ops.MAX, dtype) == dtype.min


def test_max_starts_from_minus_infinity_for_floats_and_the_lowest_value_otherwise() -> None:
    assert reduce_identity_value(Ops.MAX, dtypes.float32) == -math.inf
    assert reduce_identity_value(Ops.MAX, dtypes.int8) == -128 and reduce_identity_value(Ops.MAX, dtypes.uint32) == 0
    const = reduce_identity(Ops.MAX, dtypes.int16)
    assert const.op is Ops.CONST and const.dtype == dtypes.int16 and const.arg == -(1 << 15)


def test_an_op_that_is_not_a_reduction_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"Ops\.SUB is not a reduction op"):
        reduce_identity_value(Ops.SUB, dtypes.float32)


def test_reductions_of_no_elements_give_the_identity() -> None:
    empty = Tensor.empty(0, 3)
    assert empty.sum(0).tolist() == [0.0] * 3 and empty.prod(0).tolist() == [1.0] * 3
    assert Tensor.empty(0, 2, dtype=dtypes.int32).max(0).tolist() == [-(1 << 31)] * 2
