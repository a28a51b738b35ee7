"""The op-info table for movement and indexing: padding modes, joining and splitting, windows, diagonals, advanced
indexing, setitem, gather and scatter, masks. Values are checked against numpy, result dtypes and gradients against
PyTorch (see opinfo.py). Setting is written `y = x.clone(); y[i] = v`, which both libraries run as it stands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from opinfo import (
    BOOL,
    F16,
    F32,
    I32,
    I64,
    U8,
    F,
    M,
    OpCase,
    P,
    S,
    integral,
    table_tests,
    torch_module,
)
from tinygrad import Tensor
from tinygrad.dtype import DType

_torch = torch_module()

NP_PAD_MODE = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _np_pad(x: np.ndarray, pairs: list[tuple[int, int]], mode: str) -> np.ndarray:
    return np.pad(x, pairs, mode=NP_PAD_MODE[mode])  # type: ignore[call-overload]


def _torch_pad(x: Any, flat: tuple[int, ...], mode: str) -> Any:
    # PyTorch pads only the last 1-3 dimensions in these modes and wants a batch dimension in front
    return _torch.nn.functional.pad(x.unsqueeze(0), flat, mode=mode).squeeze(0)


def _index_for(lib: Any, value: Any) -> Any:
    """The same index in tinygrad or torch: lists of ints become tensors of that library."""
    if isinstance(value, tuple):
        return tuple(_index_for(lib, v) for v in value)
    if isinstance(value, np.ndarray):
        return lib.tensor(value) if lib is _torch else Tensor(value)
    return value


def _is_torch(x: Any) -> bool:
    return _torch is not None and isinstance(x, _torch.Tensor)


def _lib(x: Any) -> Any:
    return _torch if _is_torch(x) else Tensor


def getitem(index: Any) -> Callable[[Any], Any]:
    """x[index], with numpy arrays in the index turned into tensors of x's library (tensor indices)."""
    return lambda x: x[_index_for(_lib(x), index)]


def setitem(index: Any) -> Callable[[Any, Any], Any]:
    def fn(x: Any, v: Any) -> Any:
        y = x.clone()
        y[_index_for(_lib(x), index)] = v
        return y
    return fn


def np_setitem(index: Any) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    def fn(x: np.ndarray, v: np.ndarray) -> np.ndarray:
        y = x.copy()
        y[index] = v
        return y
    return fn


def with_index(index: list[Any], fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn(x, index_tensor, *rest) for ops that take an index tensor built from fixed values (no duplicates where
    the op's gradient would differ on them)."""
    arr = np.array(index)
    return lambda x, *rest: fn(x, (_torch.tensor(arr) if _is_torch(x) else Tensor(arr)), *rest)


def _set_tensor(x: Any, i: Any, v: Any) -> Any:
    y = x.clone()
    y[i] = v
    return y


def np_take_along(x: np.ndarray, idx: np.ndarray, dim: int) -> np.ndarray:
    return np.take_along_axis(x[tuple(slice(0, n) if k != dim else slice(None) for k, n in enumerate(idx.shape))],
                              idx.astype(np.int64), dim)


def np_scatter(x: np.ndarray, dim: int, idx: np.ndarray, src: Any, reduce: str | None = None,
               include_self: bool = True) -> np.ndarray:
    """A loop over every index position: the plain definition of scatter and scatter_reduce."""
    out = x.copy()
    groups: dict[tuple[int, ...], list[Any]] = {}
    for pos in np.ndindex(*idx.shape):
        target = pos[:dim] + (int(idx[pos]),) + pos[dim + 1:]
        value = src[pos] if isinstance(src, np.ndarray) else src
        groups.setdefault(target, []).append(value)
    for target, values in groups.items():
        old = [out[target]] if include_self and reduce not in (None,) else []
        vals = np.array(old + values, dtype=x.dtype)
        if reduce is None:
            out[target] = vals[-1]
        elif reduce in ("sum", "add"):
            out[target] = vals.sum(dtype=x.dtype)
        elif reduce in ("prod", "multiply"):
            out[target] = vals.prod(dtype=x.dtype)
        elif reduce == "mean":
            out[target] = vals.sum() / len(vals) if x.dtype.kind == "f" else vals.sum() // len(vals)
        elif reduce == "amax":
            out[target] = vals.max()
        else:
            out[target] = vals.min()
    return out


def np_rearrange_bchw(x: np.ndarray) -> np.ndarray:
    b, c, hw = x.shape
    return x.reshape(b, c, 2, hw // 2).reshape(b, c * 2, hw // 2)


def t_stack(*xs: Any) -> Any:
    return _torch.stack(xs) if _is_torch(xs[0]) else Tensor.stack(*xs)


def t_cat(xs: Any, dim: int) -> Any:
    return _torch.cat(list(xs), dim) if _is_torch(xs[0]) else Tensor.cat(*xs, dim=dim)


IDX = integral(-3, 2)  # valid indices, negative ones included, for a dimension of size 3
IN3 = integral(0, 2)  # valid gather/scatter indices for a dimension of size 3
BOOLS = integral(0, 1)


def idx_args(d: DType) -> tuple[DType, ...]:
    return (d, I32)


def idx2_args(d: DType) -> tuple[DType, ...]:
    return (d, I32, I64)


def mask_args(d: DType) -> tuple[DType, ...]:
    return (d, BOOL)


def f32_second(d: DType) -> tuple[DType, ...]:
    return (d, d)


PAD_CASES = [
    OpCase(f"pad_{mode}", lambda x, m=mode: x.pad((1, 2, 2, 1), mode=m),
           lambda x, m=mode: _np_pad(x, [(2, 1), (1, 2)], m), [((3, 4),), (S(3, 3),), (F(4, 3),), (P(3, 4),)],
           (F32, I32, F16), torch_fn=lambda x, m=mode: _torch_pad(x, (1, 2, 2, 1), m))
    for mode in ("reflect", "replicate", "circular")
] + [
    OpCase("pad_reflect_pairs_3d", lambda x: x.pad(((0, 0), (1, 1), (2, 0)), mode="reflect"),
           lambda x: _np_pad(x, [(0, 0), (1, 1), (2, 0)], "reflect"), [((2, 3, 4),), (M(2, 3, 3),)],
           torch_fn=lambda x: _torch.nn.functional.pad(x, (2, 0, 1, 1), mode="reflect")),
    OpCase("pad_replicate_one_element", lambda x: x.pad((2, 1), mode="replicate"),
           lambda x: _np_pad(x, [(0, 0), (2, 1)], "replicate"), [((2, 1),), ((1, 1),)],
           torch_fn=lambda x: _torch_pad(x, (2, 1), "replicate")),
    OpCase("pad_circular_whole", lambda x: x.pad((3, 3), mode="circular"),
           lambda x: _np_pad(x, [(0, 0), (3, 3)], "circular"), [((2, 3),)],
           torch_fn=lambda x: _torch_pad(x, (3, 3), "circular")),
    OpCase("pad_reflect_negative", lambda x: x.pad((-1, 2), mode="reflect"),
           lambda x: _np_pad(x[:, 1:], [(0, 0), (0, 2)], "reflect"), [((2, 5),)],
           torch_fn=lambda x: _torch_pad(x, (-1, 2), "reflect")),
    OpCase("pad_to", lambda x: x.pad_to(4, None, 5), lambda x: np.pad(x, [(0, 4 - x.shape[0]), (0, 0), (0, 1)]),
           [((2, 3, 4),), ((0, 1, 4),), (P(2, 1, 4),)], (F32, BOOL),
           torch_fn=lambda x: _torch.nn.functional.pad(x, (0, 1, 0, 0, 0, 4 - x.shape[0]))),
    OpCase("shrink_to", lambda x: x.shrink_to(None, 2), lambda x: x[:, :2], [((3, 4),), (F(2, 3),)],
           torch_fn=lambda x: x[:, :2]),
]

JOIN_CASES = [
    OpCase("cat", lambda x, y: x.cat(y), lambda x, y: np.concatenate([x, y]),
           [((2, 3), (4, 3)), ((0, 3), (2, 3)), ((1,), (3,)), (P(2, 3), S(1, 3)), (F(2, 2), M(3, 2))],
           (F32, I32, BOOL, F16), torch_fn=lambda x, y: _torch.cat([x, y])),
    OpCase("cat_dim1_three", lambda x, y: Tensor.cat(x, y, x, dim=1), lambda x, y: np.concatenate([x, y, x], 1),
           [((2, 3), (2, 1)), ((2, 0), (2, 2)), (S(2, 2), F(2, 3))], (F32, U8),
           torch_fn=lambda x, y: _torch.cat([x, y, x], 1)),
    OpCase("cat_list_neg_dim", lambda x, y: Tensor.cat([x, y], dim=-1), lambda x, y: np.concatenate([x, y], -1),
           [((2, 1, 3), (2, 1, 2))], torch_fn=lambda x, y: _torch.cat([x, y], -1)),
    OpCase("cat_promotes", lambda x, y: x.cat(y), lambda x, y: np.concatenate([x, y]), [((2, 3), (1, 3))],
           (F32, F16), arg_dtypes=lambda d: (d, I32), torch_fn=lambda x, y: _torch.cat([x, y])),
    # the skipped empty tensor is not in the graph: its .grad stays None (PyTorch gives an empty gradient)
    OpCase("cat_legacy_empty", lambda x, y: x.cat(y), lambda x, y: x, [((2, 3), (0,))], grad=False,
           torch_fn=lambda x, y: _torch.cat([x, y])),
    OpCase("stack", lambda x, y: x.stack(y), lambda x, y: np.stack([x, y]), [((2, 3), (2, 3)), ((), ()),
           ((0, 2), (0, 2)), (P(2, 3), F(2, 3))], (F32, I32, BOOL), torch_fn=lambda x, y: _torch.stack([x, y])),
    OpCase("stack_dim_last", lambda x, y: Tensor.stack(x, y, x, dim=-1), lambda x, y: np.stack([x, y, x], -1),
           [((2, 3), (2, 3)), (S(2, 2), M(2, 2))], torch_fn=lambda x, y: _torch.stack([x, y, x], -1)),
    OpCase("split_sizes_last", lambda x: x.split([1, 3], dim=1)[1], lambda x: x[:, 1:4], [((2, 4),), (P(2, 4),)],
           (F32, I32)),
    OpCase("split_int_each", lambda x: t_cat([p * (i + 1) for i, p in enumerate(x.split(2, -1))], -1),
           lambda x: x * np.repeat([1, 2, 3], 2)[:5], [((3, 5),), (F(2, 5),)]),
    OpCase("chunk_uneven", lambda x: t_cat([p * (i + 1) for i, p in enumerate(x.chunk(3, 0))], 0),
           lambda x: x * np.array([1, 1, 2, 2, 3]).reshape(5, 1), [((5, 2),), (S(5, 2),)]),
    OpCase("repeat", lambda x: x.repeat(2, 1, 3), lambda x: np.tile(x, (2, 1, 3)), [((2, 3),), ((1, 0),), ((),),
           (M(2, 3),)], (F32, I32, BOOL), torch_fn=lambda x: x.repeat(2, 1, 3)),
    OpCase("repeat_zero", lambda x: x.repeat(0, 2), lambda x: np.tile(x, (0, 2)), [((2, 3),)]),
    OpCase("repeat_interleave", lambda x: x.repeat_interleave(2, dim=1), lambda x: np.repeat(x, 2, 1),
           [((2, 3),), ((2, 0),), (P(2, 3),)], (F32, I32)),
    OpCase("repeat_interleave_flat", lambda x: x.repeat_interleave(3), lambda x: np.repeat(x, 3), [((2, 2),), ((),)]),
    OpCase("repeat_interleave_counts", lambda x: x.repeat_interleave(_lib(x).tensor([2, 0, 1]) if _is_torch(x)
           else [2, 0, 1], dim=0), lambda x: np.repeat(x, [2, 0, 1], 0), [((3, 2),), (F(3, 2),)]),
    OpCase("meshgrid_ij", lambda x, y: t_stack(*_lib(x).meshgrid(x, y, indexing="ij")),
           lambda x, y: np.stack(np.meshgrid(x, y, indexing="ij")), [((3,), (2,)), ((0,), (2,)), ((), (2,))]),
    OpCase("meshgrid_xy", lambda x, y: t_stack(*_lib(x).meshgrid(x, y, x, indexing="xy")),
           lambda x, y: np.stack(np.meshgrid(x, y, x, indexing="xy")), [((3,), (2,)), (F(3,), S(2,))], (F32, I32)),
]

WINDOW_CASES = [
    OpCase("unfold", lambda x: x.unfold(1, 3, 2), lambda x: np.lib.stride_tricks.sliding_window_view(x, 3, 1)[:, ::2],
           [((2, 7),), ((2, 3),), (P(2, 6),), (M(3, 5),)], (F32, I32, BOOL)),
    OpCase("unfold_dim0_overlap", lambda x: x.unfold(0, 2, 1),
           lambda x: np.lib.stride_tricks.sliding_window_view(x, 2, 0), [((5,),), ((4, 2),)]),
    OpCase("unfold_empty_window", lambda x: x.unfold(0, 0, 2),
           lambda x: np.zeros((x.shape[0] // 2 + 1, 0), x.dtype), [((5,),)]),
    OpCase("roll", lambda x: x.roll(1, 0), lambda x: np.roll(x, 1, 0), [((3, 4),), ((0, 2),), (S(3, 2),)],
           (F32, I32, BOOL)),
    OpCase("roll_multi", lambda x: x.roll((-1, 5), (1, -1)), lambda x: np.roll(x, (-1, 5), (1, -1)),
           [((2, 3, 4),), (M(2, 3, 2),)]),
    OpCase("roll_flat", lambda x: x.roll(-7), lambda x: np.roll(x, -7), [((3, 4),), ((),)]),
    OpCase("diag_vector", lambda x: x.diag(), np.diag, [((3,),), ((1,),), ((0,),), (F(4,),)], (F32, I32, BOOL)),
    OpCase("diag_vector_offset", lambda x: x.diag(2), lambda x: np.diag(x, 2), [((3,),)]),
    OpCase("diag_vector_neg_offset", lambda x: x.diag(-1), lambda x: np.diag(x, -1), [((3,),), (S(2,),)]),
    OpCase("diag_matrix", lambda x: x.diag(1), lambda x: np.diag(x, 1), [((3, 4),), ((4, 2),), (P(3, 4),)]),
    OpCase("diagonal", lambda x: x.diagonal(), np.diagonal, [((3, 4),), ((2, 3, 4),), ((0, 3),), (M(3, 3),)],
           (F32, I32)),
    OpCase("diagonal_offset_dims", lambda x: x.diagonal(-1, 2, 0), lambda x: np.diagonal(x, -1, 2, 0),
           [((3, 2, 4),), (F(3, 2, 3),)]),
    OpCase("diagonal_offset_past_end", lambda x: x.diagonal(5), lambda x: np.diagonal(x, 5), [((3, 4),)]),
    OpCase("triu", lambda x: x.triu(), np.triu, [((3, 4),), ((2, 3, 3),), ((0, 2),), (P(4, 3),)], (F32, I32, BOOL)),
    OpCase("triu_offset", lambda x: x.triu(1), lambda x: np.triu(x, 1), [((4, 4),), (S(3, 2),)]),
    OpCase("tril_neg_offset", lambda x: x.tril(-1), lambda x: np.tril(x, -1), [((3, 4),), ((2, 4, 3),)], (F32, I32)),
    OpCase("tril", lambda x: x.tril(), np.tril, [((4, 3),), (F(3, 3),)]),
    OpCase("unflatten", lambda x: x.unflatten(1, (2, -1)), lambda x: x.reshape(x.shape[0], 2, -1, *x.shape[2:]),
           [((3, 4),), ((2, 6, 1),), (P(3, 4),)], (F32, I32)),
    OpCase("rearrange_merge_split", lambda x: x.rearrange("b c (h w) -> b (c h) w", h=2), np_rearrange_bchw,
           [((2, 3, 4),), (M(2, 3, 4),)], (F32, I32),
           torch_fn=lambda x: x.reshape(x.shape[0], x.shape[1], 2, -1).reshape(x.shape[0], x.shape[1] * 2, -1)),
    OpCase("rearrange_ellipsis_transpose", lambda x: x.rearrange("a ... d -> d ... a 1"),
           lambda x: np.moveaxis(x, (0, -1), (-1, 0))[..., None], [((2, 3, 4),), ((2, 4),)],
           torch_fn=lambda x: x.movedim((0, -1), (-1, 0)).unsqueeze(-1)),
    OpCase("view_alias", lambda x: x.view(-1, 2), lambda x: x.reshape(-1, 2), [((3, 4),)]),
]

GETITEM_CASES = [
    OpCase("getitem_list", getitem([0, 2, 0]), lambda x: x[[0, 2, 0]], [((3, 4),), ((3,),), (P(3, 2),), (M(3, 2),)],
           (F32, I32, BOOL, F16)),
    # a nested list is one array index (numpy; PyTorch 2.13 still reads it as a tuple, deprecated since 2.9)
    OpCase("getitem_list_negative_2d", getitem([[-1, 0], [1, -3]]), lambda x: x[np.array([[-1, 0], [1, -3]])],
           [((3, 2),), (F(3, 4),)], torch_fn=lambda x: x[_torch.tensor([[-1, 0], [1, -3]])]),
    OpCase("getitem_two_lists", getitem(([0, 2, 2], [1, 0, 1])), lambda x: x[[0, 2, 2], [1, 0, 1]],
           [((3, 2),), ((3, 2, 2),), (S(3, 2),)], (F32, I32)),
    OpCase("getitem_lists_broadcast", getitem((np.array([[0], [2]]), np.array([1, 0, 1]))),
           lambda x: x[np.array([[0], [2]]), np.array([1, 0, 1])], [((3, 2),), ((3, 2, 4),)]),
    OpCase("getitem_slice_then_list", getitem((slice(None), [1, 0, 1])), lambda x: x[:, [1, 0, 1]],
           [((2, 3),), ((2, 2, 3),), (P(2, 3),)]),
    OpCase("getitem_lists_apart", getitem(([0, 1], slice(None), [1, 0])), lambda x: x[[0, 1], :, [1, 0]],
           [((2, 3, 2),), (M(2, 3, 2),)]),
    OpCase("getitem_int_then_list", getitem((0, slice(None), [1, 2])), lambda x: x[0][:, [1, 2]],
           [((2, 3, 4),)]),
    OpCase("getitem_list_int_adjacent", getitem((slice(None), [1, 0], 1)), lambda x: x[:, [1, 0], 1],
           [((2, 3, 4),)]),
    OpCase("getitem_stepped_and_list", getitem((slice(1, None), [2, 0], slice(None, None, 2))),
           lambda x: x[1:, [2, 0], ::2], [((3, 3, 5),), (F(3, 3, 4),)]),
    OpCase("getitem_none_between_lists", getitem(([0, 1], None, [1, 1])), lambda x: x[[0, 1], None, [1, 1]],
           [((2, 3, 4),)]),
    OpCase("getitem_ellipsis_list", getitem((Ellipsis, [0, 1])), lambda x: x[..., [0, 1]], [((2, 3, 2),)]),
    OpCase("getitem_empty_list", getitem([]), lambda x: x[np.array([], np.int64)], [((3, 2),)]),
    OpCase("getitem_tensor", lambda x, i: x[i], lambda x, i: x[i], [((3, 4), (5,)), ((3,), (2, 2)), ((3, 2), ()),
           (P(3, 4), (3,)), (S(3, 2), (1,)), ((3, 0), (2,))], (F32, I32, BOOL), domain=((-3.0, 3.0), IDX),
           arg_dtypes=idx_args),
    OpCase("getitem_tensor_dim1", lambda x, i: x[:, i], lambda x, i: x[:, i], [((2, 3), (4,)), (F(2, 3), (2, 2))],
           domain=((-3.0, 3.0), IDX), arg_dtypes=idx_args),
    OpCase("getitem_two_tensors", lambda x, i, j: x[i, j], lambda x, i, j: x[i, j],
           [((3, 3), (2, 1), (4,)), ((3, 3, 2), (3,), (3,)), (M(3, 3), (), (2,))], (F32, I32),
           domain=((-3.0, 3.0), IDX, IDX), arg_dtypes=idx2_args),
    OpCase("getitem_mask_expression", lambda x: x[x > 0], lambda x: x[x > 0], [((3, 4),), ((0, 3),), (M(2, 3),)],
           (F32, I32)),
    OpCase("getitem_mask_tensor", lambda x, m: x[m], lambda x, m: x[m], [((3, 4), (3, 4)), ((3, 4), (3,)),
           ((2, 3), ()), (P(3, 2), (3, 2))], (F32, I64, BOOL), domain=((-3.0, 3.0), BOOLS), arg_dtypes=mask_args),
    OpCase("getitem_mask_list_then_int", getitem(([True, False, True], 1)), lambda x: x[[True, False, True], 1],
           [((3, 2),)]),
    OpCase("getitem_mask_and_list", getitem((np.array([True, False, True]), [1, 0])),
           lambda x: x[[True, False, True], [1, 0]], [((3, 2),), ((3, 2, 2),)]),
    OpCase("getitem_python_bools", getitem((None, True, Ellipsis, False)), lambda x: x[None, True, ..., False],
           [((2, 3),)]),
]

SETITEM_CASES = [
    OpCase("setitem_int", setitem(1), np_setitem(1), [((3, 4), (4,)), ((3, 4), ()), (P(3, 4), (1,))],
           (F32, I32, BOOL)),
    OpCase("setitem_slices_steps", setitem((slice(None, None, 2), slice(1, None, 2))),
           np_setitem((slice(None, None, 2), slice(1, None, 2))), [((3, 4), (2, 2)), ((5, 5), (1, 2)),
           (S(3, 5), (2,))], (F32, I32)),
    OpCase("setitem_ellipsis_none", setitem((Ellipsis, None, 0)), np_setitem((Ellipsis, None, 0)),
           [((2, 3), (1,)), ((2, 3), (2, 1))]),
    OpCase("setitem_list", setitem([2, 0]), np_setitem([2, 0]), [((3, 2), (2, 2)), ((3, 2), (2,)), ((3, 2), ())],
           (F32, I32)),
    OpCase("setitem_two_lists", setitem(([0, 2], slice(None), [1, 0])), np_setitem(([0, 2], slice(None), [1, 0])),
           [((3, 2, 2), (2, 2)), ((3, 2, 2), (2, 1))]),
    OpCase("setitem_mask", setitem(np.array([[True, False], [False, True], [True, True]])),
           np_setitem(np.array([[True, False], [False, True], [True, True]])), [((3, 2), ()), ((3, 2), (4,))]),
    OpCase("setitem_mask_rows", setitem(np.array([False, True, True])), np_setitem(np.array([False, True, True])),
           [((3, 2), (2,)), ((3, 2), (2, 2))], (F32, I32)),
    OpCase("setitem_tensor_index", with_index([2, -3], _set_tensor), lambda x, v: np_setitem([2, -3])(x, v),
           [((3, 2), (2, 2)), ((3, 2), ()), (F(3, 2), (2, 1))], (F32, I32)),
]


GATHER_CASES = [
    OpCase("gather_dim1", lambda x, i: x.gather(1, i), lambda x, i: np_take_along(x, i, 1),
           [((3, 3), (3, 2)), ((3, 3), (2, 5)), ((2, 3), (0, 2)), (P(3, 3), (1, 4)), (M(2, 3), (2, 3))],
           (F32, I32, BOOL, F16), domain=((-3.0, 3.0), IN3), arg_dtypes=lambda d: (d, I64)),
    OpCase("gather_dim0", lambda x, i: x.gather(0, i), lambda x, i: np_take_along(x, i, 0),
           [((3, 4), (5, 2)), ((3,), (4,)), (F(3, 2), (2, 2))], domain=((-3.0, 3.0), IN3), arg_dtypes=idx_args),
    # PyTorch's scatter gradients fail for a src larger than the index: those shapes are checked forward only
    OpCase("scatter", with_index([[2, 0], [1, 2]], lambda x, i, s: x.scatter(1, i, s)),
           lambda x, s: np_scatter(x, 1, np.array([[2, 0], [1, 2]]), s), [((2, 3), (2, 2)), ((3, 3), (2, 2)),
           (P(2, 3), S(2, 2))], (F32, I32, BOOL)),
    OpCase("scatter_larger_src", with_index([[2, 0], [1, 2]], lambda x, i, s: x.scatter(1, i, s)),
           lambda x, s: np_scatter(x, 1, np.array([[2, 0], [1, 2]]), s), [((3, 3), (2, 4)), (F(2, 3), P(3, 3))],
           grad=False),
    OpCase("scatter_scalar", with_index([[1], [0], [1]], lambda x, i: x.scatter(0, i, 2.5)),
           lambda x: np_scatter(x, 0, np.array([[1], [0], [1]]), np.float32(2.5)), [((2, 3),)], grad=False),
    # scatter's reduce takes a scalar src, as in tinygrad (a tensor src goes to scatter_reduce)
    OpCase("scatter_add", with_index([[0, 0, 1, 0]], lambda x, i: x.scatter(1, i, 2.0, reduce="add")),
           lambda x: np_scatter(x, 1, np.array([[0, 0, 1, 0]]), 2.0, "add"), [((2, 2),)], (F32, I32),
           torch_fn=with_index([[0, 0, 1, 0]], lambda x, i: x.scatter_reduce(1, i, _torch.full(i.shape, 2,
                                                                                             dtype=x.dtype), "sum"))),
    OpCase("scatter_multiply", with_index([[0, 1], [0, 0]], lambda x, i: x.scatter(0, i, 1.5, reduce="multiply")),
           lambda x: np_scatter(x, 0, np.array([[0, 1], [0, 0]]), 1.5, "multiply"), [((2, 3),)],
           torch_fn=with_index([[0, 1], [0, 0]], lambda x, i: x.scatter_reduce(0, i, _torch.full(i.shape, 1.5,
                                                                                             dtype=x.dtype), "prod"))),
] + [
    OpCase(f"scatter_reduce_{red}{'' if inc else '_exclude_self'}",
           with_index([[0, 2, 0], [2, 2, 1]], lambda x, i, s, r=red, n=inc: x.scatter_reduce(1, i, s, r,
                                                                                             include_self=n)),
           lambda x, s, r=red, n=inc: np_scatter(x, 1, np.array([[0, 2, 0], [2, 2, 1]]), s, r, n),
           [((2, 3), (2, 3)), (F(3, 4), P(2, 3))], (F32, I32) if red != "prod" and inc else (F32,),
           domain=(0.5, 1.5) if red == "prod" else (-3.0, 3.0), rtol=1e-4)
    for red in ("sum", "prod", "mean", "amax", "amin") for inc in (True, False)
]

MASK_CASES = [
    OpCase("masked_fill", lambda x, m: x.masked_fill(m, -1.5), lambda x, m: np.where(m, np.float32(-1.5), x),
           [((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 4), ()), ((0, 2), (1, 2)), (M(2, 3), F(2, 3))], (F32, F16),
           domain=((-3.0, 3.0), BOOLS), arg_dtypes=mask_args),
    OpCase("masked_fill_int", lambda x, m: x.masked_fill(m, 7), lambda x, m: np.where(m, 7, x).astype(x.dtype),
           [((3, 4), (3, 1))], (I32, U8, BOOL), domain=((0, 3), BOOLS), arg_dtypes=mask_args),
    OpCase("masked_select", lambda x, m: x.masked_select(m), lambda x, m: np.broadcast_to(x, np.broadcast_shapes(
           x.shape, m.shape))[np.broadcast_to(m, np.broadcast_shapes(x.shape, m.shape))],
           [((3, 4), (3, 4)), ((3, 4), (4,)), ((4,), (2, 4)), (P(3, 2), (3, 2))], (F32, I32),
           domain=((-3.0, 3.0), BOOLS), arg_dtypes=mask_args),
    OpCase("nonzero", lambda x: x.nonzero(), np.argwhere, [((3, 4),), ((5,),), ((0, 2),), ((),), (F(2, 3),)],
           (F32, I32, BOOL), grad=False, domain=integral(-1, 1), out_dtype=lambda d: I32),  # tinygrad's int32
    OpCase("nonzero_as_tuple_rows", lambda x: x.nonzero(as_tuple=True)[1], lambda x: np.nonzero(x)[1], [((3, 4),)],
           grad=False, domain=integral(-1, 1), out_dtype=lambda d: I32),
]

CASES = PAD_CASES + JOIN_CASES + WINDOW_CASES + GETITEM_CASES + SETITEM_CASES + GATHER_CASES + MASK_CASES


# the forward test (values vs numpy, dtype vs PyTorch) and backward test (gradients vs PyTorch) of the table
test_forward, test_backward = table_tests(CASES)
