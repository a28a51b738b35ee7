"""Error types that code written for tinygrad or for PyTorch catches, and the inputs tinygrad takes that a stricter
reading would refuse (negative conv padding, reflect padding beside a crop, tuples inside an index).

Every mistake below must be caught by the exception types both libraries raise for it, so each case lists all of
them; the values of the accepted inputs are checked against PyTorch or numpy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from tinygrad import Tensor, dtypes
from tinygrad.errors import ArgListError, ArgumentError, ConcatDimError, IndexTypeError, ModeError


def _t(*shape: int) -> Tensor:
    return Tensor(np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape))


def _idx(values: Any) -> Tensor:
    return Tensor(np.array(values, dtype=np.int32))


# (name, the failing call, every type that must catch it, a part of the message)
ERROR_CASES: list[tuple[str, Callable[[], Any], tuple[type[BaseException], ...], str]] = [
    ("cat_0d", lambda: Tensor(3.0).cat(Tensor(3.0)), (IndexError, RuntimeError, ValueError, AssertionError), "0-d"),
    ("stack_list_and_args", lambda: Tensor.stack([Tensor([1, 2]), Tensor([3, 4])], Tensor([5, 6])),
     (ValueError, TypeError), "one list or as separate"),
    ("stack_dim", lambda: Tensor.stack(_t(2, 3), dim=77), (IndexError,), "out of range"),
    ("flip_twice", lambda: _t(3, 4).flip((0, 0)), (RuntimeError, ValueError), "more than once"),
    ("flip_twice_negative", lambda: _t(3, 4).flip((1, -1)), (RuntimeError, ValueError), "more than once"),
    ("squeeze_0d_dim1", lambda: Tensor(1.0).squeeze(1), (IndexError,), "out of range"),
    ("squeeze_0d_dim-2", lambda: Tensor(1.0).squeeze(-2), (IndexError,), "out of range"),
    ("squeeze_dim50", lambda: _t(4, 3).squeeze(50), (IndexError,), "out of range"),
    ("unfold_too_big", lambda: _t(8).unfold(0, 9, 3), (RuntimeError, ValueError), "does not fit"),
    ("unfold_dim", lambda: _t(8).unfold(1, 8, 3), (IndexError,), "out of range"),
    ("unfold_step", lambda: _t(8).unfold(0, 1, -1), (RuntimeError, ValueError), "step must be positive"),
    ("meshgrid_indexing", lambda: _t(3).meshgrid(indexing="bad"), (RuntimeError, ValueError), "'ij' or 'xy'"),
    ("diagonal_same_dim", lambda: _t(3, 3).diagonal(dim1=0, dim2=0), (RuntimeError, ValueError), "different"),
    ("roll_shifts_without_dims", lambda: _t(2, 4).roll((1, 2)), (RuntimeError, ValueError), "one shift"),
    ("roll_one_shift_two_dims", lambda: _t(3, 3).roll(shifts=1, dims=(0, 1)), (RuntimeError, ValueError),
     "one shift per dimension"),
    ("roll_two_shifts_one_dim", lambda: _t(10).roll(shifts=(1, 2), dims=0), (RuntimeError, ValueError),
     "one shift per dimension"),
    ("reshape_two_inferred", lambda: _t(3, 4).reshape((-1, -1, 2)), (RuntimeError, ValueError), "only one"),
    ("pad_mode", lambda: _t(3, 3, 3).pad((3, 0), mode="typo"), (NotImplementedError, ValueError), "'typo'"),
    ("pad_reflect_too_big", lambda: _t(1, 1, 5, 5).pad((3, 5, 0, 0), mode="reflect"), (RuntimeError, ValueError),
     "smaller than its size 5"),
    ("pad_circular_twice", lambda: _t(1, 1, 5, 5).pad((3, 6, 0, 0), mode="circular"), (RuntimeError, ValueError),
     "more than once"),
    ("conv2d_kernel_too_big", lambda: _t(1, 1, 6, 7).conv2d(_t(6, 1, 3, 3), dilation=3), (RuntimeError, ValueError),
     "smaller than the (dilated) kernel"),
    ("conv2d_input_too_small", lambda: _t(2, 16, 2, 2).conv2d(_t(32, 16, 3, 3)), (RuntimeError, ValueError),
     "smaller than the (dilated) kernel"),
    ("conv2d_channels", lambda: _t(1, 3, 4, 4).conv2d(_t(2, 2, 3, 3)), (RuntimeError, ValueError), "channels"),
    ("gather_ndim", lambda: _t(4, 5, 6).gather(0, _idx([1])), (RuntimeError, ValueError), "as many dimensions"),
    ("gather_index_larger", lambda: _t(2, 1, 1).gather(0, _idx(np.zeros((3, 4, 5)))), (RuntimeError, ValueError),
     "larger than the tensor's shape"),
    ("scatter_index_larger", lambda: _t(2, 3, 10).scatter(1, _idx(np.zeros((3, 4, 5))), _t(10, 10, 10)),
     (RuntimeError, ValueError), "larger than the tensor's shape"),
    ("scatter_src_smaller", lambda: _t(10, 3, 10).scatter(1, _idx(np.zeros((3, 4, 5))), _t(10, 3, 10)),
     (RuntimeError, ValueError), "larger than src"),
    ("scatter_src_dtype", lambda: _t(3, 4, 5).half().scatter(1, _idx(np.zeros((3, 4, 5))), _t(3, 4, 5)),
     (RuntimeError, TypeError), "src of dtype dtypes.float32 into a tensor of dtype dtypes.float16"),
    ("scatter_tensor_src_with_reduce",
     lambda: Tensor.ones(4).scatter(dim=1, index=_idx([0]), src=Tensor.ones(4), reduce="add"), (TypeError,),
     "use scatter_reduce"),
    ("scatter_reduce_name", lambda: _t(4, 5, 6).scatter_reduce(0, _idx(np.zeros((3, 4, 5))), _t(4, 5, 6), "INVALID"),
     (RuntimeError, ValueError), "'INVALID'"),
    ("scatter_reduce_dtype",
     lambda: _t(4, 5, 6).half().scatter_reduce(0, _idx(np.zeros((3, 4, 5))), _t(4, 5, 6), "sum"),
     (RuntimeError, TypeError), "src of dtype dtypes.float32 into a tensor of dtype dtypes.float16"),
    ("einsum_two_ellipses", lambda: Tensor.einsum("...ik..., ...jk ->", _t(2, 3, 4), _t(2, 3, 4)),
     (RuntimeError, ValueError), "'...' once"),
    ("sdpa_mask_and_causal", lambda: _t(1, 2, 4, 8).scaled_dot_product_attention(
        _t(1, 2, 4, 8), _t(1, 2, 4, 8), attn_mask=Tensor.ones(4, 4, dtype=dtypes.bool), is_causal=True),
     (RuntimeError, ValueError), "not both"),
    ("slice_tensor_bound", lambda: Tensor.ones(4, 3)[:Tensor([3]), 1], (TypeError, IndexError), "slice bounds"),
    ("slice_0d", lambda: Tensor(2)[:], (IndexError,), "too many indices"),
    ("slice_step_zero", lambda: Tensor.ones(4, 3)[::0, 1], (ValueError,), "step cannot be zero"),
]


@pytest.mark.parametrize("fn, types, match", [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES])
def test_error_is_caught_by_both_libraries_types(fn: Callable[[], Any], types: tuple[type[BaseException], ...],
                                                 match: str) -> None:
    with pytest.raises(Exception) as info:  # the types are checked one by one below
        fn()
    for typ in types:
        assert isinstance(info.value, typ), f"{type(info.value).__name__} is not a {typ.__name__}: {info.value}"
    assert match in str(info.value)


def test_error_classes() -> None:
    # each class is a subclass of every type its docstring names, so `except` of either library's type catches it
    assert issubclass(ArgumentError, ValueError) and issubclass(ArgumentError, RuntimeError)
    assert issubclass(ModeError, ArgumentError) and issubclass(ModeError, NotImplementedError)
    assert issubclass(IndexTypeError, IndexError) and issubclass(IndexTypeError, TypeError)
    assert issubclass(ConcatDimError, IndexError) and issubclass(ConcatDimError, RuntimeError)
    assert issubclass(ArgListError, TypeError) and issubclass(ArgListError, ValueError)


# ---- inputs that are accepted, with their values ----

def test_squeeze_0d_keeps_it() -> None:
    for dim in (0, -1, None):
        out = Tensor(2.5).squeeze(dim)
        assert out.shape == () and out.item() == 2.5


def test_stack_0d() -> None:
    np.testing.assert_allclose(Tensor.stack(Tensor(3.14), Tensor(3.14)).numpy(), np.array([3.14, 3.14],
                                                                                          dtype=np.float32))


def test_flip_distinct_axes_still_work() -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(Tensor(a).flip((0, -1)).numpy(), a[::-1, ::-1])


TUPLE_INDICES: list[tuple[str, Any]] = [
    ("nested_single", (((0,),),)),
    ("nested_tuple_in_tuple", ((((0,),),),)),
    ("tuple_first", ((1, 0, -1), slice(None), 2)),
    ("tuples_broadcast", (slice(None), ((2,), (1,), (0,)), (2, 1, 0))),
    ("tuple_with_int", (1, (2, 1, 0), None, slice(None), (2, 1, 0))),
    ("tuple_and_list", ([1, 0], (1, 1))),
]


@pytest.mark.parametrize("index", [c[1] for c in TUPLE_INDICES], ids=[c[0] for c in TUPLE_INDICES])
def test_tuple_inside_index_is_a_sequence(index: Any) -> None:
    # numpy reads a tuple nested in the index as an array of positions, and so do PyTorch and tinygrad
    a = np.arange(2 * 5 * 6 * 4, dtype=np.float32).reshape(2, 5, 6, 4) - 100
    np.testing.assert_array_equal(Tensor(a)[index].numpy(), a[index])


def test_tuple_inside_index_with_tensor() -> None:
    a = np.arange(2 * 5 * 6, dtype=np.float32).reshape(2, 5, 6)
    i = np.array([[1, 0], [0, 1]])
    np.testing.assert_array_equal(Tensor(a)[(Tensor(i.astype(np.int32)), (1, 3))].numpy(), a[(i, (1, 3))])


def test_conv2d_negative_padding_crops() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 2, 10, 9), dtype=np.float32), rng.standard_normal((3, 2, 3, 3), dtype=np.float32)
    tx, tw = torch.tensor(x), torch.tensor(w)
    for padding in (-1, (-1, 0, -1, 0), (1, -2, -1, 2), (2, -1)):
        # tinygrad's form: one int, one per spatial dim, or F.pad's flat (left, right, top, bottom)
        flat = padding if isinstance(padding, tuple) and len(padding) == 4 else \
            (padding, padding, padding, padding) if isinstance(padding, int) else \
            (padding[1], padding[1], padding[0], padding[0])
        want = torch.nn.functional.conv2d(torch.nn.functional.pad(tx, flat), tw).numpy()
        np.testing.assert_allclose(Tensor(x).conv2d(Tensor(w), padding=padding).numpy(), want, rtol=1e-5, atol=1e-5)


def test_conv2d_negative_padding_gradient() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((1, 1, 6, 6), dtype=np.float32), rng.standard_normal((1, 1, 3, 3), dtype=np.float32)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    torch.nn.functional.conv2d(tx[:, :, 1:-1, 1:-1], tw).sum().backward()
    gx, gw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    Tensor.conv2d(gx, gw, padding=-1).sum().backward()
    assert gx.grad is not None and gw.grad is not None
    np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gw.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-5)


PAD_CASES: list[tuple[tuple[int, ...], tuple[int, ...]]] = [
    ((3, 3, 3, 3), (-1, 2, 2, -1)),
    ((1, 1, 5, 5), (3, -3, 0, -3)),
    ((1, 1, 5, 5), (3, -5, 1, -5)),
    ((1, 1, 5, 5), (0, 0, 0, -5)),
    ((1, 1, 5, 5), (4, 4, 0, 4)),
]


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("shape, padding", PAD_CASES)
def test_pad_mode_beside_a_crop(shape: tuple[int, ...], padding: tuple[int, ...], mode: str) -> None:
    # the mirror and the edge are taken from the uncropped tensor, as PyTorch does
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(2).standard_normal(shape, dtype=np.float32)
    want = torch.nn.functional.pad(torch.tensor(x), padding, mode=mode).numpy()
    np.testing.assert_array_equal(Tensor(x).pad(padding, mode=mode).numpy(), want)


def test_pad_replicate_far_beyond_the_size() -> None:
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(3).standard_normal((1, 1, 5, 5), dtype=np.float32)
    want = torch.nn.functional.pad(torch.tensor(x), (3, 11, 0, 30), mode="replicate").numpy()
    np.testing.assert_array_equal(Tensor(x).pad((3, 11, 0, 30), mode="replicate").numpy(), want)


def test_scatter_reduce_with_scalar_src() -> None:
    # reduce stays available for a scalar src (tinygrad and PyTorch's scatter(..., value, reduce=...))
    out = Tensor.ones(4).scatter(0, _idx([1, 1, 3]), 2.0, reduce="add")
    np.testing.assert_allclose(out.numpy(), np.array([1.0, 5.0, 1.0, 3.0], dtype=np.float32))
    out = Tensor.full((4,), 3.0).scatter(0, _idx([0, 2, 2]), 2.0, reduce="multiply")
    np.testing.assert_allclose(out.numpy(), np.array([6.0, 3.0, 12.0, 3.0], dtype=np.float32))
