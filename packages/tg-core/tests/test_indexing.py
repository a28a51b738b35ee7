"""Indexing and movement beyond the op table (test_ops_movement.py): setitem semantics, laziness (kernel counts),
the documented data-dependent and out-of-range behaviours, and the errors for bad input."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tinygrad import GlobalCounters, Tensor, dtypes


def kernels(t: Tensor) -> int:
    return sum(1 for si in t.schedule() if not si.is_copy)


def launched(fn: Any) -> int:
    before = GlobalCounters.kernel_count
    fn()
    return GlobalCounters.kernel_count - before


A = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 7


# ---- setitem, against numpy ----

SET_INDICES: list[tuple[str, Any, tuple[int, ...]]] = [
    ("int", 1, ()),
    ("negative_steps", (slice(None, None, -1), slice(None, 0, -2), slice(3, None, -3)), (1, 2)),
    ("ellipsis_int", (Ellipsis, 2), (3,)),
    ("none", (None, 0, slice(1, 3)), ()),
    ("list", ([1, 0], 2), (4,)),
    ("lists_apart", ([0, 1, 1], slice(None), [3, 0, 1]), (3, 1)),
    ("mask", A > 3, ()),
    ("mask_rows_vector", (slice(None), np.array([True, False, True])), (4,)),
    ("mask_counted", A[:, :, 0] > -5, (5, 4)),  # a value per selected row: the count is needed
    ("empty_list", [], ()),
]


@pytest.mark.parametrize("index,value_shape", [pytest.param(i, s, id=n) for n, i, s in SET_INDICES])
def test_setitem_matches_numpy(index: Any, value_shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    value = rng.standard_normal(value_shape).astype(np.float32)
    expected = A.copy()
    expected[index] = value
    t = Tensor(A)
    t[Tensor(index) if isinstance(index, np.ndarray) else index] = Tensor(value) if value_shape else float(value)
    np.testing.assert_array_equal(t.numpy(), expected)


def test_setitem_repeated_index_last_write_wins() -> None:
    expected = A[0].copy()
    expected[[0, 2, 0], 1] = [10.0, 20.0, 30.0]  # numpy writes in order: the last one stays
    for index in ([0, 2, 0], Tensor([0, 2, 0]) + 0):  # known on the host, and a lazy tensor
        t = Tensor(A[0])
        t[index, 1] = Tensor([10.0, 20.0, 30.0])
        np.testing.assert_array_equal(t.numpy(), expected)


def test_setitem_casts_scalars_and_values_like_pytorch() -> None:
    t = Tensor([[1, 2], [3, 4]], dtype=dtypes.int32)
    t[0] = 2.7  # truncated into the int tensor
    t[1, 1] = Tensor(9.9)
    assert t.dtype == dtypes.int32
    assert t.tolist() == [[2, 2], [3, 9]]
    b = Tensor([True, False, True])
    b[1] = 1
    assert b.tolist() == [True, True, True]


def test_setitem_in_place_operator() -> None:
    t = Tensor(A)
    t[0, :, 1:3] += 100
    t[1] *= 0
    expected = A.copy()
    expected[0, :, 1:3] += 100
    expected[1] *= 0
    np.testing.assert_array_equal(t.numpy(), expected)


def test_setitem_takes_effect_at_realize_and_is_lazy() -> None:
    t = Tensor(A)
    before = t[0]  # a view taken before the write keeps the old value (tinygrad semantics, unlike PyTorch)
    mask = Tensor(A) > 0  # lazy: the write must not need its count
    ran = launched(lambda: t.__setitem__(mask, 0.0))
    assert ran == 0 and kernels(t) == 1
    np.testing.assert_array_equal(t.numpy(), np.where(A > 0, 0, A))
    np.testing.assert_array_equal(before.numpy(), A[0])


def test_setitem_with_index_tensor_is_lazy() -> None:
    t, v = Tensor(A), Tensor(np.ones((2, 3, 4), np.float32))
    idx = Tensor([1, 0]) * 1  # an unrealized index
    ran = launched(lambda: t.__setitem__(idx, v * 2))
    assert ran == 0
    assert kernels(t) <= 3  # the last-writer ranking, the write; nothing copies the index to the host
    np.testing.assert_array_equal(t.numpy(), np.full((2, 3, 4), 2.0, np.float32))


def test_setitem_gradients_reach_value_and_kept_elements() -> None:
    x = Tensor(A, requires_grad=True)
    v = Tensor(np.ones(4, np.float32), requires_grad=True)
    y = x * 1
    y[1, 2] = v * 3
    (y * Tensor(A + 10)).sum().backward()
    assert x.grad is not None and v.grad is not None
    expected = A + 10
    expected[1, 2] = 0  # overwritten: no gradient back to x there
    np.testing.assert_allclose(x.grad.numpy(), expected)
    np.testing.assert_allclose(v.grad.numpy(), 3 * (A[1, 2] + 10))


def test_setitem_value_with_grad_makes_target_require_grad() -> None:
    t = Tensor.zeros(3)
    v = Tensor([2.0], requires_grad=True)
    t[1:2] = v
    assert t.requires_grad
    t.sum().backward()
    assert v.grad is not None and v.grad.tolist() == [1.0]


def test_setitem_on_leaf_that_requires_grad_is_refused() -> None:
    x = Tensor(A, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf tensor"):
        x[0] = 1.0


def test_setitem_value_shape_mismatch() -> None:
    t = Tensor(A)
    with pytest.raises(ValueError, match=r"\(5,\).*\(3, 4\)"):
        t[0] = Tensor.ones(5)
    with pytest.raises(ValueError, match=r"\(2,\).*\(3, 3, 4\)"):
        t[[0, 1, 1]] = Tensor.ones(2)


# ---- laziness: kernels per op ----

def test_integer_tensor_index_is_one_kernel_and_never_reads_the_index() -> None:
    x = Tensor(A)
    idx = Tensor([[1, 0], [-1, 1]]) + 0  # computed on the device, never copied to the host
    out = x[idx, :, idx[0]]
    assert kernels(out) == 1
    np.testing.assert_array_equal(out.numpy(), A[[[1, 0], [-1, 1]], :, [1, 0]])


@pytest.mark.parametrize("name,fn,ref", [
    ("gather", lambda x: x.gather(2, Tensor(np.full((2, 3, 5), 3))), lambda a: np.take_along_axis(a, np.full(
        (2, 3, 5), 3), 2)),
    ("cat", lambda x: Tensor.cat(x, x * 2, x[:, :1], dim=1), lambda a: np.concatenate([a, a * 2, a[:, :1]], 1)),
    ("pad_reflect", lambda x: x.pad((1, 2, 2, 0), mode="reflect"),
     lambda a: np.pad(a, ((0, 0), (2, 0), (1, 2)), mode="reflect")),
    ("pad_circular", lambda x: x.pad(((1, 1), (0, 0), (3, 0)), mode="circular"),
     lambda a: np.pad(a, ((1, 1), (0, 0), (3, 0)), mode="wrap")),
    ("unfold", lambda x: x.unfold(2, 2, 1), lambda a: np.lib.stride_tricks.sliding_window_view(a, 2, 2)),
    ("roll", lambda x: x.roll(2, 2), lambda a: np.roll(a, 2, 2)),
    ("stack_repeat", lambda x: Tensor.stack(x, x).repeat(1, 2, 1, 1),
     lambda a: np.tile(np.stack([a, a]), (1, 2, 1, 1))),
    ("diagonal_triu", lambda x: x.triu(1).diagonal(1, 1, 2), lambda a: np.diagonal(np.triu(a, 1), 1, 1, 2)),
    ("scatter_scalar", lambda x: x.scatter(1, Tensor([[[2, 0, 1, 1]]]), 5.0),
     lambda a: _np_scatter_dim1(a, [[[2, 0, 1, 1]]], np.full((1, 1, 4), 5.0))),
])
def test_single_kernel(name: str, fn: Any, ref: Any) -> None:
    out = fn(Tensor(A))
    assert kernels(out) == 1, name
    np.testing.assert_array_equal(out.numpy(), ref(A))


def test_scatter_of_a_tensor_ranks_writers_in_a_second_kernel() -> None:
    src = np.arange(8, dtype=np.float32).reshape(1, 2, 4) + 100
    index = [[[2, 0, 1, 1], [2, 2, 2, 0]]]  # targets (2, 0) and (2, 3) are written twice: the later write stays
    out = Tensor(A).scatter(1, Tensor(index), Tensor(src))
    assert kernels(out) == 2
    np.testing.assert_array_equal(out.numpy(), _np_scatter_dim1(A, index, src))


def _np_scatter_dim1(a: np.ndarray, index: list[Any], src: np.ndarray) -> np.ndarray:
    out = a.copy()
    for i, j, k in np.ndindex(*np.shape(index)):
        out[i, index[i][j][k], k] = src[i, j, k]
    return out


def test_boolean_mask_realizes_the_mask_then_gathers_lazily() -> None:
    x = Tensor(A)
    mask = x > 3
    out = x[mask]  # the mask is read on the host to learn the count; the values are not
    assert out.shape == (int((A > 3).sum()),)
    assert kernels(out) == 1
    np.testing.assert_array_equal(out.numpy(), A[A > 3])


# ---- documented behaviours ----

def test_out_of_range_index_tensor_reads_zero() -> None:
    # PyTorch raises; checking would need the indices on the host, so a tensor index that is out of range
    # matches no position (Python ints and lists are checked, see the error tests)
    out = Tensor([1.0, 2.0, 3.0])[Tensor([0, 3, -4, 2])]
    assert out.tolist() == [1.0, 0.0, 0.0, 3.0]


def test_split_and_chunk_pieces_match_pytorch(torch: Any) -> None:
    x, tx = Tensor(A), torch.tensor(A)
    for ours, theirs in [(x.split(3, 2), tx.split(3, 2)), (x.split([1, 0, 2], 1), tx.split([1, 0, 2], 1)),
                         (x.chunk(3, 2), tx.chunk(3, 2)), (x.chunk(5, 1), tx.chunk(5, 1)),
                         (x[:, :0].chunk(2, 1), tx[:, :0].chunk(2, 1))]:
        assert [p.shape for p in ours] == [tuple(p.shape) for p in theirs]
        for p, q in zip(ours, theirs):
            np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_nonzero_as_tuple_and_int32() -> None:
    a = np.array([[0, 1, 0], [2, 0, 3]], np.int32)
    rows, cols = Tensor(a).nonzero(as_tuple=True)
    assert rows.dtype == dtypes.int32 and rows.tolist() == [0, 1, 1] and cols.tolist() == [1, 0, 2]
    assert Tensor(a).nonzero().dtype == dtypes.int32  # tinygrad's (PyTorch: int64)


def test_view_with_a_dtype_reinterprets_bytes() -> None:
    t = Tensor([1.0, -2.0], dtype=dtypes.float32)
    assert t.view(dtypes.int32).tolist() == np.array([1.0, -2.0], np.float32).view(np.int32).tolist()
    assert t.view(2, 1).shape == (2, 1)


@pytest.mark.parametrize("formula,sizes,ref", [
    ("b c h -> b h c", {}, lambda a: a.transpose(0, 2, 1)),
    ("b c h -> (b c h)", {}, lambda a: a.reshape(-1)),
    ("(b1 b2) c h -> b1 (c b2) h", {"b1": 1}, lambda a: a.reshape(1, 2, 3, 4).transpose(0, 2, 1, 3).reshape(1, 6, 4)),
    ("b c (h w) -> w b c h", {"w": 2}, lambda a: a.reshape(2, 3, 2, 2).transpose(3, 0, 1, 2)),
    ("... h -> h ...", {}, lambda a: np.moveaxis(a, -1, 0)),
    ("b ... -> b (...)", {}, lambda a: a.reshape(2, -1)),
    ("b c h -> b () c 1 h", {}, lambda a: a[:, None, :, None]),
    ("b 1 c h -> c b h", {}, None),
])
def test_rearrange_patterns(formula: str, sizes: dict[str, int], ref: Any) -> None:
    if ref is None:  # a unit axis on the left side is removed
        out = Tensor(A[:, None]).rearrange(formula)
        np.testing.assert_array_equal(out.numpy(), A.transpose(1, 0, 2))
        return
    np.testing.assert_array_equal(Tensor(A).rearrange(formula, **sizes).numpy(), ref(A))


# ---- errors ----

ERRORS: list[tuple[str, Any, type[Exception], str]] = [
    ("int_out_of_range", lambda t: t[2], IndexError, r"index 2 is out of bounds for dimension 0 with size 2"),
    ("list_out_of_range", lambda t: t[:, [0, 3]], IndexError, r"index 3 is out of bounds for dimension 1 with size 3"),
    ("negative_list_out_of_range", lambda t: t[[-3]], IndexError, r"index -3 .* size 2"),
    ("too_many_indices", lambda t: t[0, 0, 0, 0], IndexError, r"too many indices .*\(2, 3, 4\)"),
    ("two_ellipses", lambda t: t[..., 0, ...], IndexError, r"single ellipsis"),
    ("float_index", lambda t: t[1.0], IndexError, r"not float"),
    ("float_index_tensor", lambda t: t[Tensor([0.0, 1.0])], IndexError, r"integer or bool tensors, got .*float"),
    ("float_index_list", lambda t: t[[0.5]], IndexError, r"integer or bool"),
    ("string_index", lambda t: t["a"], IndexError, r"invalid index"),
    ("mask_shape", lambda t: t[Tensor([True, False, True])], IndexError,
     r"mask of shape \(3,\) does not match .*\(2,\)"),
    ("index_broadcast", lambda t: t[[0, 1], [0, 1, 2]], IndexError, r"could not be broadcast .*\(2,\).*\(3,\)"),
    ("zero_step", lambda t: t[::0], ValueError, r"step cannot be zero"),
    ("cat_shapes", lambda t: t.cat(Tensor.ones(2, 4, 4)), ValueError, r"\(2, 3, 4\) and \(2, 4, 4\)"),
    ("cat_ndim", lambda t: t.cat(Tensor.ones(3, 4)), ValueError, r"\(2, 3, 4\) and \(3, 4\)"),
    ("cat_scalar", lambda t: Tensor(1.0).cat(Tensor(2.0)), ValueError, r"0-d"),
    ("cat_not_tensor", lambda t: t.cat(A), TypeError, r"argument 1 is ndarray"),
    ("stack_shapes", lambda t: t.stack(t[:, :2]), ValueError, r"\(2, 3, 4\) .*\(2, 2, 4\)"),
    ("gather_float_index", lambda t: t.gather(0, Tensor([[[0.0]]])), TypeError, r"integer tensor, got .*float"),
    ("gather_dims", lambda t: t.gather(1, Tensor([[0, 1]])), ValueError, r"\(1, 2\) must have as many dimensions"),
    ("gather_too_large", lambda t: t.gather(0, Tensor(np.zeros((2, 4, 1), np.int32))), ValueError,
     r"larger than the tensor's shape \(2, 3, 4\) in dimension 1"),
    ("scatter_reduce_name", lambda t: t.scatter_reduce(0, Tensor([[[0]]]), t, "max"), ValueError, r"amax"),
    ("scatter_bad_src_dims", lambda t: t.scatter(0, Tensor([[[0]]]), Tensor.ones(3)), ValueError, r"src of shape"),
    ("split_negative", lambda t: t.split([3, -1], 1), ValueError, r"must not be negative"),
    ("split_sum", lambda t: t.split([1, 1], 1), ValueError, r"sum to 2, not to the size 3"),
    ("split_zero", lambda t: t.split(0), ValueError, r"positive"),
    ("chunk_zero", lambda t: t.chunk(0), ValueError, r"positive number of chunks"),
    ("unfold_too_big", lambda t: t.unfold(1, 4, 1), ValueError, r"size 4 does not fit dimension 1 of size 3"),
    ("unfold_step", lambda t: t.unfold(1, 2, 0), ValueError, r"step must be positive"),
    ("pad_mode", lambda t: t.pad((1, 1), mode="wrap"), ValueError, r"'wrap' is not one of"),
    ("pad_reflect_too_big", lambda t: t.pad((0, 0, 3, 0), mode="reflect"), ValueError,
     r"reflect padding \(3, 0\) of dimension 1 must be smaller than its size 3"),
    ("pad_circular_wraps_twice", lambda t: t.pad((5, 0), mode="circular"), ValueError, r"more than once"),
    ("pad_value_with_mode", lambda t: t.pad((1, 1), mode="replicate", value=2.0), ValueError, r"takes no value"),
    ("pad_odd_flat", lambda t: t.pad((1, 1, 1)), ValueError, r"even number"),
    ("masked_fill_mask_dtype", lambda t: t.masked_fill(t, 0.0), TypeError, r"bool mask"),
    ("masked_fill_mask_shape", lambda t: t.masked_fill(Tensor([True, False]), 0.0), ValueError,
     r"\(2,\) does not broadcast to the tensor's shape \(2, 3, 4\)"),
    ("repeat_short", lambda t: t.repeat(2, 2), ValueError, r"at least one count per dimension"),
    ("repeat_interleave_counts", lambda t: t.repeat_interleave([1, 2], dim=1), ValueError, r"one non-negative count"),
    ("triu_1d", lambda t: t[0, 0].triu(), ValueError, r"at least 2 dimensions"),
    ("diagonal_same_dims", lambda t: t.diagonal(0, 1, -2), ValueError, r"two different dimensions"),
    ("unflatten_sizes", lambda t: t.unflatten(1, (2, 2)), ValueError, r"\(2, 2\) do not multiply to the size 3"),
    ("meshgrid_2d", lambda t: Tensor.meshgrid(t), ValueError, r"0-d or 1-D"),
    ("meshgrid_indexing", lambda t: Tensor.meshgrid(t[0, 0], indexing="yx"), ValueError, r"'ij' or 'xy'"),
    ("pad_to_smaller", lambda t: t.pad_to(1, 3, 4), ValueError, r"use shrink_to"),
    ("shrink_to_larger", lambda t: t.shrink_to(2, 3, 5), ValueError, r"use pad_to"),
    ("rearrange_arrow", lambda t: t.rearrange("a b c"), ValueError, r"exactly one '->'"),
    ("rearrange_names", lambda t: t.rearrange("a b c -> a b d"), ValueError, r"different axes"),
    ("rearrange_rank", lambda t: t.rearrange("a b -> b a"), ValueError, r"2 dimensions, the tensor 3"),
    ("rearrange_infer", lambda t: t.rearrange("a b (c d) -> a b c d"), ValueError, r"cannot infer"),
    ("rearrange_size", lambda t: t.rearrange("a b (c d) -> a b c d", c=3), ValueError, r"do not fit"),
    ("rearrange_parens", lambda t: t.rearrange("a (b c -> a b c"), ValueError, r"parentheses"),
]


@pytest.mark.parametrize("fn,exc,match", [pytest.param(f, e, m, id=n) for n, f, e, m in ERRORS])
def test_bad_input_errors(fn: Any, exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        fn(Tensor(A))
