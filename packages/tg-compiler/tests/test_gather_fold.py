"""The gather fold (codegen/gather_fold.py): integer-tensor indexing lowers to a direct load, not a loop.

Structure: every kernel of `x[idx]`, `gather` and `nn.Embedding` is lowered and must have no RANGE over the indexed
axis. Semantics: results against numpy for negative, out-of-range, int64, unsigned, 0-sized, multi-dimensional and
two index tensors, float, int and bool values, and big axes. The rule must not fire where another term of the
reduced value depends on the loop (then the loop stays, and the numbers are still right).
"""

from __future__ import annotations

import numpy as np
import pytest
from tinygrad import Tensor, nn
from tinygrad.codegen.gather_fold import fold_gather
from tinygrad.codegen.lowerer import lower_kernel
from tinygrad.dtype import dtypes
from tinygrad.uop.ops import AxisKind, Ops, RangeArg, UOp


def lowered_kernels(t: Tensor) -> list[UOp]:
    return [lower_kernel(si.ast) for si in t.schedule() if si.ast.op is Ops.SINK]


def loop_sizes(t: Tensor, kind: AxisKind = AxisKind.REDUCE) -> list[int]:
    """The sizes of the loops of one kind in every kernel that computes t."""
    return [int(r.src[0].arg) for k in lowered_kernels(t) for r in k.toposort()
            if r.op is Ops.RANGE and r.arg.kind is kind]


def np_take(x: np.ndarray, idx: np.ndarray, axis: int = 0) -> np.ndarray:
    """numpy's take with this project's rule for index tensors: negatives wrap, out-of-range values read 0."""
    n = x.shape[axis]
    wrapped = np.where(idx < 0, idx + n, idx)
    ok = (wrapped >= 0) & (wrapped < n)
    picked = np.take(x, np.where(ok, wrapped, 0), axis=axis)
    mask = ok.reshape(ok.shape + (1,) * (x.ndim - 1 - axis)) if axis == 0 else ok
    return np.where(mask, picked, np.zeros((), x.dtype))


ROWS = 37


@pytest.mark.parametrize("index", [
    np.array([3, -1, 7, 36, 0], np.int32),  # negative wraps
    np.array([40, -38, 5], np.int32),  # out of range both ways reads 0
    np.array([[1, 2], [-3, 4], [5, 6]], np.int64),  # multi-dimensional, int64
    np.array([200, 3, 36], np.uint8),  # unsigned: nothing to wrap
    np.zeros((0,), np.int32),  # 0-sized
], ids=["negative", "out-of-range", "2d-int64", "uint8", "empty"])
def test_take_is_a_direct_load(index: np.ndarray) -> None:
    x_np = np.random.default_rng(0).standard_normal((ROWS, 5)).astype(np.float32)
    y = Tensor(x_np)[Tensor(index)]
    if index.size:
        assert ROWS not in loop_sizes(y), "a loop over the indexed axis is left"
        assert loop_sizes(y) == []
    np.testing.assert_array_equal(y.numpy(), np_take(x_np, index))


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int8, np.bool_])
def test_take_of_every_value_dtype(dtype: type) -> None:
    x_np = (np.random.default_rng(1).integers(-50, 50, (ROWS, 3)) % 3 == 0 if dtype is np.bool_ else
            np.random.default_rng(1).integers(-50, 50, (ROWS, 3)).astype(dtype))
    index = np.array([0, -2, 36, 50, 11], np.int32)
    y = Tensor(x_np)[Tensor(index)]
    assert loop_sizes(y) == []
    np.testing.assert_array_equal(y.numpy(), np_take(x_np, index))


def test_the_picked_value_may_be_an_expression_of_the_row() -> None:
    x_np = np.random.default_rng(2).standard_normal((ROWS, 4)).astype(np.float32)
    index = np.array([5, -1, 99], np.int32)
    x = Tensor(x_np)
    y = ((x * 3 + 1).cast(dtypes.int32).cast(dtypes.float32) - x.exp())[Tensor(index)]
    assert loop_sizes(y) == []
    want = (x_np * 3 + 1).astype(np.int32).astype(np.float32) - np.exp(x_np)
    np.testing.assert_allclose(y.numpy(), np_take(want, index), rtol=1e-5, atol=1e-6)  # exp is not numpy's


def test_two_index_tensors_lose_both_loops() -> None:
    x_np = np.arange(6 * 7, dtype=np.float32).reshape(6, 7)
    i, j = np.array([[0, 5], [-1, 2]], np.int32), np.array([6, -7], np.int64)
    y = Tensor(x_np)[Tensor(i), Tensor(j)]
    assert loop_sizes(y) == []
    np.testing.assert_array_equal(y.numpy(), x_np[i, j])
    # one index out of range: the element reads 0
    y = Tensor(x_np)[Tensor(np.array([1, 6], np.int32)), Tensor(np.array([2, 2], np.int32))]
    np.testing.assert_array_equal(y.numpy(), [x_np[1, 2], 0])


def test_index_in_the_middle_with_a_basic_slice() -> None:
    x_np = np.arange(4 * 9 * 3, dtype=np.float32).reshape(4, 9, 3)
    index = np.array([8, 0, -9], np.int32)
    y = Tensor(x_np)[1:3, Tensor(index)]
    assert 9 not in loop_sizes(y)
    np.testing.assert_array_equal(y.numpy(), x_np[1:3, index])


@pytest.mark.parametrize("dim", [0, 1])
def test_gather(dim: int) -> None:
    x_np = np.random.default_rng(3).standard_normal((6, 8)).astype(np.float32)
    index = np.array([[0, 7, 2], [5, 1, 1], [3, 3, 9], [-1, 4, 0]], np.int64)  # 9 and -1 read 0 (no wrap here)
    y = Tensor(x_np).gather(dim, Tensor(index))
    assert loop_sizes(y) == []
    ok = (index >= 0) & (index < x_np.shape[dim])
    src = x_np[:index.shape[0], :] if dim == 1 else x_np[:, :index.shape[1]]
    want = np.where(ok, np.take_along_axis(src, np.where(ok, index, 0), axis=dim), 0)
    np.testing.assert_array_equal(y.numpy(), want)


def test_embedding() -> None:
    emb = nn.Embedding(50, 8)
    index = np.array([[1, 49, 3], [-1, 0, 50]], np.int64)  # -1 and 50 read zeros, as tinygrad's Embedding
    y = emb(Tensor(index))
    assert loop_sizes(y) == []
    w = emb.weight.numpy()
    want = np.where(((index >= 0) & (index < 50))[..., None], w[np.clip(index, 0, 49)], 0)
    np.testing.assert_array_equal(y.numpy(), want)


def test_big_axis_through_expand() -> None:
    # 300000 rows (a broadcast row plus a per-row column): the reduction is long enough for the scheduler to split
    n = 300_000
    col = np.arange(n, dtype=np.float32) * 0.5
    x = Tensor(col).reshape(n, 1) + Tensor(np.array([1.0, 2.0, 3.0], np.float32)).reshape(1, 3).expand(n, 3)
    index = np.array([0, n - 1, -2, n, 123_457], np.int64)
    y = x[Tensor(index)]
    assert all(s < 2**15 for s in loop_sizes(y)), "the loop over the big axis is left"
    np.testing.assert_array_equal(y.numpy(), np_take(col[:, None] + np.array([1.0, 2.0, 3.0], np.float32), index))


def test_device_sampled_batch_in_a_jit() -> None:
    """The MNIST step's pattern: samples drawn on the device inside TinyJit index the dataset."""
    from tinygrad import TinyJit
    x_np = np.random.default_rng(4).standard_normal((1000, 3)).astype(np.float32)
    x = Tensor(x_np).realize()
    picked: list[np.ndarray] = []

    @TinyJit
    def step() -> tuple[Tensor, Tensor]:
        samples = Tensor.randint(16, high=x.shape[0])
        return samples.realize(), x[samples].realize()
    for _ in range(4):
        samples, got = step()
        np.testing.assert_array_equal(got.numpy(), x_np[samples.numpy()])
        picked.append(samples.numpy())
    assert len({p.tobytes() for p in picked}) > 1, "every call drew the same samples"


# ---- where the rule must not fire ----

def one_hot(index: Tensor, size: int) -> Tensor:
    positions = Tensor(UOp(Ops.ARANGE, dtypes.int32, (), size))
    return index.unsqueeze(-1) == positions


@pytest.mark.parametrize("name", ["another-term", "another-factor", "else-not-identity", "max-with-zero"])
def test_no_fold_when_the_loop_does_more_than_pick(name: str) -> None:
    rng = np.random.default_rng(5)
    x_np, y_np = rng.standard_normal((2, 12)).astype(np.float32)
    index = np.array([3, -1, 11, 20], np.int32)
    hot = one_hot(Tensor(index), 12)  # (4, 12)
    hot_np = index[:, None] == np.arange(12)
    x, y = Tensor(x_np), Tensor(y_np)
    if name == "another-term":  # sum_r where(i == r, x[r], 0) + y[r]
        out, want = (hot.where(x, 0.0) + y).sum(-1), np.where(hot_np, x_np, 0).sum(-1) + y_np.sum()
    elif name == "another-factor":  # sum_r where(i == r, x[r], 0) * y[r]: still one term, but y's r is not pinned
        out, want = (hot.where(x, 0.0) * y).sum(-1), (np.where(hot_np, x_np, 0) * y_np).sum(-1)
    elif name == "else-not-identity":  # the other r add 1 each
        out, want = hot.where(x, 1.0).sum(-1), np.where(hot_np, x_np, 1).sum(-1)
    else:  # a max over where(..., 0): the other r give 0, which wins over a negative pick
        out, want = hot.where(x, 0.0).max(-1), np.where(hot_np, x_np, 0).max(-1)
    assert 12 in loop_sizes(out), "folded a loop that does more than pick one element"
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6, atol=1e-6)


def test_rule_refuses_a_compare_that_depends_on_the_loop() -> None:
    """`e == r` with e reading at r (x[r] == r) selects many r, not one: no fold."""
    x = UOp(Ops.PARAM, dtypes.int32, (), (1, 8))
    r = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, 8),), RangeArg(0, AxisKind.REDUCE))
    load = UOp(Ops.LOAD, dtypes.int32, (UOp(Ops.INDEX, dtypes.int32, (x, r)),))
    body = load.eq(r.cast(dtypes.int32)).where(UOp.const(dtypes.int32, 1), UOp.const(dtypes.int32, 0))
    assert fold_gather(UOp(Ops.REDUCE, dtypes.int32, (body, r), Ops.ADD)) is None
    # a cast that wraps positions (r up to 299 into int8) could make two r equal: no fold either
    r300 = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, 300),), RangeArg(1, AxisKind.REDUCE))
    e = UOp(Ops.LOAD, dtypes.int8, (UOp(Ops.INDEX, dtypes.int8, (UOp(Ops.PARAM, dtypes.int8, (), (2, 1)),
                                                                  UOp.const(dtypes.index, 0))),))
    body = e.eq(r300.cast(dtypes.int8)).where(UOp.const(dtypes.int32, 1), UOp.const(dtypes.int32, 0))
    assert fold_gather(UOp(Ops.REDUCE, dtypes.int32, (body, r300), Ops.ADD)) is None
    # the same with a position type that holds every r folds
    body = e.cast(dtypes.int32).eq(r300.cast(dtypes.int32)).where(UOp.const(dtypes.int32, 1),
                                                                   UOp.const(dtypes.int32, 0))
    assert fold_gather(UOp(Ops.REDUCE, dtypes.int32, (body, r300), Ops.ADD)) is not None
