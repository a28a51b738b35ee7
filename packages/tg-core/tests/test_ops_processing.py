"""The op-info table for the processing ops: convolutions, pooling, interpolation, einsum, matmul, newton_schulz.
Values are checked against PyTorch run in float64 (these ops have no numpy counterpart), gradients against
PyTorch in float32; see opinfo.py for how a case is written and checked. Shapes stay tiny: every distinct one
is a kernel to compile (and, under DEV=PYREF, to interpret)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from opinfo import (
    F16,
    F32,
    F64,
    I32,
    F,
    M,
    OpCase,
    P,
    S,
    Spec,
    integral,
    same,
    table_tests,
    torch_module,
)
from tinygrad import Device, Tensor, dtypes
from tinygrad.dtype import DType
from tinygrad.helpers import prod

_torch = torch_module()


def _fn(name: str) -> Callable[..., Any]:
    """torch.nn.functional.<name>, looked up when called (the module imports without torch)."""
    return lambda *a, **kw: getattr(_torch.nn.functional, name)(*a, **kw)


def ref(torch_fn: Callable[..., Any]) -> Callable[..., np.ndarray]:
    """A numpy-in, numpy-out reference: the PyTorch op in float64 (integer arrays keep their dtype)."""
    def run(*arrays: np.ndarray) -> np.ndarray:
        torch = pytest.importorskip("torch")
        args = [torch.from_numpy(np.array(a, dtype=np.float64 if a.dtype.kind == "f" else a.dtype, order="C"))
                for a in arrays]
        return torch_fn(*args).numpy()
    return run


def _index(d: DType) -> DType:
    return dtypes.int32  # max_pool2d's indices are tinygrad's int32 (PyTorch: int64)


def case(name: str, fn: Callable[..., Any], torch_fn: Callable[..., Any], shapes: list[tuple[Spec, ...]],
         dts: tuple[DType, ...] = (F32,), **kw: Any) -> OpCase:
    return OpCase(name, fn, ref(torch_fn), shapes, dts, torch_fn=torch_fn, **{"atol": 1e-4, "rtol": 1e-4, **kw})


# ---------------------------------------------------------------------------------------------------------------------
# convolution

X4, W4 = (1, 2, 5, 5), (3, 2, 3, 3)
CONV_SHAPES: list[tuple[Spec, ...]] = [
    (X4, W4), ((2, 1, 4, 3), (1, 1, 1, 1)), ((0, 2, 4, 4), (3, 2, 3, 3)), ((1, 2, 3, 3), (2, 2, 3, 3)),
    (P(1, 2, 5, 4), S(3, 2, 2, 3)), (M(1, 2, 4, 4), F(2, 2, 3, 2)),
    # 8 input channels and more: the weight gradient reads channels-last copies of the input and of g
    ((3, 8, 6, 5), (4, 8, 3, 2)), (P(2, 9, 4, 4), (3, 9, 2, 2)), ((0, 8, 4, 4), (3, 8, 3, 3)),
]

CONV_CASES = [
    case("conv2d", lambda x, w: x.conv2d(w), lambda x, w: _fn("conv2d")(x, w), CONV_SHAPES, (F32, F16, F64),
         out_dtype=same),
    case("conv2d_bias_stride_padding", lambda x, w, b: x.conv2d(w, b, stride=2, padding=1),
         lambda x, w, b: _fn("conv2d")(x, w, b, stride=2, padding=1),
         [(X4, W4, (3,)), ((1, 1, 4, 5), (2, 1, 2, 3), (2,)), (S(1, 2, 4, 4), P(3, 2, 2, 2), F(3,))], (F32, F16)),
    case("conv2d_groups_dilation", lambda x, w: x.conv2d(w, groups=2, dilation=(2, 1), stride=(1, 2)),
         lambda x, w: _fn("conv2d")(x, w, groups=2, dilation=(2, 1), stride=(1, 2)),
         [((1, 4, 5, 5), (4, 2, 2, 3)), ((2, 2, 5, 4), (2, 1, 2, 2)), (F(1, 4, 5, 5), M(4, 2, 2, 2))]),
    case("conv2d_depthwise", lambda x, w: x.conv2d(w, groups=3, padding=1),
         lambda x, w: _fn("conv2d")(x, w, groups=3, padding=1), [((1, 3, 4, 4), (6, 1, 3, 3))]),
    # output rows shorter than half a SIMD register, a batch and whole registers of output channels: on the CPU
    # the weight is read from a copy with the output channels innermost (an odd batch, a strided input)
    case("conv2d_short_rows", lambda x, w, b: x.conv2d(w, b, padding=1),
         lambda x, w, b: _fn("conv2d")(x, w, b, padding=1),
         [((5, 3, 4, 4), (32, 3, 3, 3), (32,)), (S(4, 2, 6, 3), (64, 2, 3, 3), (64,)),
          ((4, 3, 9, 8), (32, 3, 3, 3), (32,))], (F32, F16)),  # the last: a padded row of 8
    case("conv2d_padding_per_dim", lambda x, w: x.conv2d(w, padding=(2, 0)),
         lambda x, w: _fn("conv2d")(x, w, padding=(2, 0)), [(X4, W4)]),
    # tinygrad's 2*ndim form lists (before, after) pairs from the last dim, as F.pad does
    case("conv2d_padding_asymmetric", lambda x, w: x.conv2d(w, padding=(1, 0, 2, 1)),
         lambda x, w: _fn("conv2d")(_fn("pad")(x, (1, 0, 2, 1)), w), [(X4, W4), ((1, 2, 2, 3), (1, 2, 3, 3))]),
    case("conv2d_padding_same", lambda x, w: x.conv2d(w, padding="same", dilation=(1, 2)),
         lambda x, w: _fn("conv2d")(x, w, padding="same", dilation=(1, 2)), [(X4, W4), ((1, 2, 4, 5), (2, 2, 2, 2))]),
    case("conv2d_padding_valid", lambda x, w: x.conv2d(w, padding="valid"),
         lambda x, w: _fn("conv2d")(x, w, padding="valid"), [(X4, W4)]),
    case("conv2d_unbatched", lambda x, w: x.conv2d(w, padding=1), lambda x, w: _fn("conv2d")(x, w, padding=1),
         [((2, 4, 4), W4)]),
    case("conv1d", lambda x, w, b: x.conv2d(w, b, stride=2, padding=1, dilation=2),
         lambda x, w, b: _fn("conv1d")(x, w, b, stride=2, padding=1, dilation=2),
         [((2, 3, 9), (4, 3, 3), (4,)), ((1, 1, 3), (2, 1, 1), (2,)), (P(1, 3, 8), F(4, 3, 2), (4,))]),
    case("conv3d", lambda x, w: x.conv2d(w, padding=(1, 0, 1)), lambda x, w: _fn("conv3d")(x, w, padding=(1, 0, 1)),
         [((1, 2, 3, 4, 3), (2, 2, 2, 3, 2)), (S(1, 1, 3, 3, 2), (1, 1, 2, 2, 2)),
          ((4, 2, 3, 4, 2), (32, 2, 2, 3, 1))]),  # short rows (see conv2d_short_rows)
    case("image_conv2d", lambda x, w, b: x.image_conv2d(w, b, padding=1),
         lambda x, w, b: _fn("conv2d")(x, w, b, padding=1), [(X4, W4, (3,))]),
    case("conv_transpose2d", lambda x, w: x.conv_transpose2d(w), lambda x, w: _fn("conv_transpose2d")(x, w),
         [((1, 2, 3, 4), (2, 3, 3, 2)), ((2, 1, 1, 1), (1, 1, 1, 1)), ((0, 2, 2, 2), (2, 3, 2, 2)),
          (P(1, 2, 3, 3), M(2, 2, 2, 2))], (F32, F64), out_dtype=same),
    case("conv_transpose2d_stride_padding", lambda x, w, b: x.conv_transpose2d(w, b, stride=2, padding=1,
                                                                            output_padding=1),
         lambda x, w, b: _fn("conv_transpose2d")(x, w, b, stride=2, padding=1, output_padding=1),
         [((1, 2, 3, 3), (2, 3, 3, 3), (3,)), (F(1, 2, 2, 3), S(2, 1, 2, 2), (1,))]),
    case("conv_transpose2d_groups_dilation", lambda x, w: x.conv_transpose2d(w, groups=2, stride=(3, 2), dilation=2,
                                                                            padding=(2, 1), output_padding=(1, 0)),
         lambda x, w: _fn("conv_transpose2d")(x, w, groups=2, stride=(3, 2), dilation=2, padding=(2, 1),
                                              output_padding=(1, 0)),
         [((1, 4, 2, 3), (4, 1, 3, 2)), ((1, 2, 3, 2), (2, 2, 2, 2))]),
    case("conv_transpose1d", lambda x, w: x.conv_transpose2d(w, stride=3, padding=1),
         lambda x, w: _fn("conv_transpose1d")(x, w, stride=3, padding=1), [((2, 2, 4), (2, 3, 3))]),
    case("conv_transpose3d", lambda x, w: x.conv_transpose2d(w, stride=(1, 2, 1)),
         lambda x, w: _fn("conv_transpose3d")(x, w, stride=(1, 2, 1)), [((1, 2, 2, 2, 3), (2, 1, 2, 2, 2))]),
]

# ---------------------------------------------------------------------------------------------------------------------
# pooling

POOL_SHAPES: list[tuple[Spec, ...]] = [
    ((1, 2, 5, 5),), ((2, 1, 4, 6),), ((0, 2, 4, 4),), ((3, 4, 4),), (M(1, 2, 5, 4),), (P(1, 1, 4, 5),),
]


def _unpool_tg(x: Tensor, **kw: Any) -> Tensor:
    out, idx = x.max_pool2d(return_indices=True, **kw)
    return out.max_unpool2d(idx, output_size=x.shape, **kw)


def _unpool_torch(x: Any, **kw: Any) -> Any:
    out, idx = _fn("max_pool2d")(x, return_indices=True, **kw)
    return _fn("max_unpool2d")(out, idx, output_size=x.shape[-2:], **kw)


def _distinct_indices(rng: np.random.Generator, shape: tuple[int, ...], nd: np.dtype) -> np.ndarray:
    """Per plane, distinct positions in the 4x4 output of unpooling a 2x2 input with kernel 2."""
    planes = prod(shape[:-2])
    return np.stack([rng.permutation(16)[:4] for _ in range(planes)]).reshape(shape).astype(nd)


POOL_CASES = [
    case("max_pool2d", lambda x: x.max_pool2d(), lambda x: _fn("max_pool2d")(x, 2), POOL_SHAPES, (F32, F16, F64),
         out_dtype=same),
    case("max_pool2d_int", lambda x: x.max_pool2d(3, 1, padding=1), lambda x: _fn("max_pool2d")(x, 3, 1, padding=1),
         [((1, 2, 4, 5),)], (I32,), grad=False, domain=integral(-5, 5), out_dtype=same),
    case("max_pool2d_stride_padding", lambda x: x.max_pool2d(3, 2, padding=1),
         lambda x: _fn("max_pool2d")(x, 3, 2, padding=1), POOL_SHAPES[:2] + POOL_SHAPES[4:5]),
    case("max_pool2d_dilation_ceil", lambda x: x.max_pool2d((2, 3), stride=(2, 1), dilation=(1, 2), ceil_mode=True),
         lambda x: _fn("max_pool2d")(x, (2, 3), stride=(2, 1), dilation=(1, 2), ceil_mode=True),
         [((1, 2, 5, 6),), (S(1, 1, 4, 5),)]),
    case("max_pool2d_ceil_padding", lambda x: x.max_pool2d(3, 2, padding=1, ceil_mode=True),
         lambda x: _fn("max_pool2d")(x, 3, 2, padding=1, ceil_mode=True), [((1, 1, 6, 5),)]),
    # ceil_mode drops a last window that would start in the right padding (the 5-long dim here)
    case("max_pool2d_ceil_last_window", lambda x: x.max_pool2d(2, 2, padding=1, ceil_mode=True),
         lambda x: _fn("max_pool2d")(x, 2, 2, padding=1, ceil_mode=True), [((1, 2, 5, 4),)]),
    case("max_pool1d", lambda x: x.max_pool2d((3,), stride=(2,), padding=1),
         lambda x: _fn("max_pool1d")(x, 3, 2, padding=1), [((2, 2, 7),)]),
    case("max_pool3d", lambda x: x.max_pool2d((2, 2, 2), stride=(1, 2, 1)),
         lambda x: _fn("max_pool3d")(x, 2, (1, 2, 1)), [((1, 1, 3, 4, 3),)]),
    case("max_pool2d_indices", lambda x: x.max_pool2d(3, 2, padding=1, return_indices=True)[1],
         lambda x: _fn("max_pool2d")(x, 3, 2, padding=1, return_indices=True)[1], [((1, 2, 5, 5),), (F(1, 1, 4, 6),)],
         grad=False, out_dtype=_index),
    # whole numbers make ties: PyTorch reports the first maximum in scan order
    case("max_pool2d_indices_ties", lambda x: x.max_pool2d(2, 1, ceil_mode=True, return_indices=True)[1],
         lambda x: _fn("max_pool2d")(x, 2, 1, ceil_mode=True, return_indices=True)[1], [((1, 2, 4, 5),)],
         grad=False, domain=integral(-1, 1), out_dtype=_index),
    case("max_pool2d_indices_dilation", lambda x: x.max_pool2d(2, 1, dilation=2, return_indices=True)[1],
         lambda x: _fn("max_pool2d")(x, 2, 1, dilation=2, return_indices=True)[1], [((1, 1, 5, 4),)], grad=False,
         out_dtype=_index),
    case("max_unpool2d", lambda x: _unpool_tg(x, kernel_size=2), lambda x: _unpool_torch(x, kernel_size=2),
         [((1, 2, 4, 4),), ((1, 1, 5, 3),), (P(1, 1, 4, 4),)]),
    # overlapping windows pick some positions twice
    case("max_unpool2d_overlapping", lambda x: _unpool_tg(x, kernel_size=3, stride=2, padding=1),
         lambda x: _unpool_torch(x, kernel_size=3, stride=2, padding=1), [((1, 2, 5, 5),)]),
    case("max_unpool2d_default_size", lambda x, i: x.max_unpool2d(i, 2),
         lambda x, i: _fn("max_unpool2d")(x, i, 2), [((1, 2, 2, 2), (1, 2, 2, 2))],
         arg_dtypes=lambda d: (d, dtypes.int64), domain=((-3.0, 3.0), _distinct_indices)),
    case("avg_pool2d", lambda x: x.avg_pool2d(), lambda x: _fn("avg_pool2d")(x, 2), POOL_SHAPES, (F32, F16, F64),
         out_dtype=same),
    case("avg_pool2d_padding", lambda x: x.avg_pool2d(3, 2, padding=1), lambda x: _fn("avg_pool2d")(x, 3, 2, padding=1),
         POOL_SHAPES[:2] + POOL_SHAPES[5:]),
    case("avg_pool2d_exclude_pad", lambda x: x.avg_pool2d(3, 2, padding=1, count_include_pad=False),
         lambda x: _fn("avg_pool2d")(x, 3, 2, padding=1, count_include_pad=False), [((1, 2, 5, 5),), (F(1, 1, 4, 5),)]),
    case("avg_pool2d_ceil", lambda x: x.avg_pool2d((2, 3), stride=2, padding=(1, 1), ceil_mode=True),
         lambda x: _fn("avg_pool2d")(x, (2, 3), stride=2, padding=(1, 1), ceil_mode=True), [((1, 2, 4, 6),)]),
    case("avg_pool2d_ceil_exclude_pad", lambda x: x.avg_pool2d(3, 2, padding=1, ceil_mode=True,
                                                               count_include_pad=False),
         lambda x: _fn("avg_pool2d")(x, 3, 2, padding=1, ceil_mode=True, count_include_pad=False), [((1, 1, 6, 5),)]),
    case("avg_pool2d_ceil_last_window", lambda x: x.avg_pool2d(2, 2, padding=1, ceil_mode=True),
         lambda x: _fn("avg_pool2d")(x, 2, 2, padding=1, ceil_mode=True), [((1, 2, 5, 4),)]),
    case("avg_pool2d_int_input", lambda x: x.avg_pool2d(), lambda x: _fn("avg_pool2d")(x.double(), 2),
         [((1, 1, 4, 4),)], (I32,), grad=False, out_dtype=lambda d: F32),
    case("avg_pool1d", lambda x: x.avg_pool2d((3,), stride=(1,)), lambda x: _fn("avg_pool1d")(x, 3, 1), [((1, 2, 6),)]),
]

# ---------------------------------------------------------------------------------------------------------------------
# interpolation


def _interp(size: tuple[int, ...] | None, mode: str, align_corners: bool | None = None,
            scale: Any = None) -> tuple[Callable[..., Any], Callable[..., Any]]:
    def tg(x: Tensor) -> Tensor:
        return x.interpolate(size, mode=mode, align_corners=bool(align_corners), scale_factor=scale)

    def th(x: Any) -> Any:
        return _fn("interpolate")(x, size=size, mode=mode, align_corners=align_corners, scale_factor=scale)
    return tg, th


INTERP_2D: list[tuple[Spec, ...]] = [((1, 2, 3, 4),), ((2, 1, 1, 5),), ((0, 1, 3, 3),), (M(1, 1, 4, 3),)]
INTERP_CASES = [
    case("interpolate_nearest", *_interp((5, 7), "nearest"), INTERP_2D, (F32, F16, F64), out_dtype=same),
    case("interpolate_nearest_int", *_interp((5, 2), "nearest"), [((1, 1, 3, 4),)], (dtypes.uint8,), grad=False,
         domain=(0, 255), out_dtype=same),
    case("interpolate_nearest_down_up", *_interp((2, 8), "nearest"), [((1, 2, 6, 4),), (P(1, 1, 5, 4),)]),
    case("interpolate_nearest_exact", *_interp((5, 3), "nearest-exact"), INTERP_2D[:2] + INTERP_2D[3:]),
    case("interpolate_nearest_scale", *_interp(None, "nearest", scale=(1.7, 0.6)), [((1, 2, 5, 5),)]),
    case("interpolate_bilinear", *_interp((5, 7), "bilinear", False), INTERP_2D, (F32, F64)),
    case("interpolate_bilinear_align_corners", *_interp((2, 7), "bilinear", True), INTERP_2D[:2] + INTERP_2D[3:]),
    case("interpolate_bilinear_scale", *_interp(None, "bilinear", False, scale=2.5), [((1, 1, 3, 2),)]),
    case("interpolate_linear", *_interp((7,), "linear", False), [((2, 2, 4),), (S(1, 2, 5),)]),
    case("interpolate_linear_align_corners", *_interp((3,), "linear", True), [((1, 2, 6),)]),
    case("interpolate_trilinear", *_interp((3, 4, 2), "trilinear", False), [((1, 1, 2, 3, 3),)]),
    case("interpolate_trilinear_align_corners", *_interp((3, 2, 4), "trilinear", True), [((1, 1, 2, 3, 3),)]),
    case("interpolate_bicubic", *_interp((6, 3), "bicubic", False), INTERP_2D[:2] + INTERP_2D[3:]),
    case("interpolate_bicubic_align_corners", *_interp((5, 7), "bicubic", True), [((1, 1, 4, 3),)]),
    case("interpolate_nearest_3d", *_interp((3, 5, 2), "nearest"), [((1, 1, 2, 3, 4),)]),
]

# ---------------------------------------------------------------------------------------------------------------------
# einsum, matmul, newton_schulz


def _einsum(formula: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    return (lambda *xs: Tensor.einsum(formula, *xs)), (lambda *xs: _torch.einsum(formula, *xs))


EINSUM_CASES = [
    case("einsum_matmul", *_einsum("ij,jk->ik"), [((2, 3), (3, 4)), ((1, 3), (3, 1)), ((0, 3), (3, 2)),
                                                   (P(2, 3), S(3, 4))], (F32, F64), out_dtype=same),
    case("einsum_implicit", *_einsum("bj,ja"), [((2, 3), (3, 4)), (F(2, 3), (3, 4))]),
    case("einsum_trace", *_einsum("ii"), [((3, 3),), (M(3, 3),)]),
    case("einsum_diagonal", *_einsum("ii->i"), [((3, 3),), ((0, 0),)]),
    case("einsum_diagonal_3", *_einsum("iji->ij"), [((3, 2, 3),)]),
    case("einsum_batch_contract_all", *_einsum("bij,bjk->"), [((2, 3, 4), (2, 4, 2))]),
    case("einsum_three_operands", *_einsum("ij,bjk,kl->bil"), [((2, 3), (2, 3, 4), (4, 2))]),
    case("einsum_outer", *_einsum("i,j->ji"), [((3,), (4,)), ((1,), (2,))]),
    case("einsum_ellipsis", *_einsum("...ij,...jk->...ik"), [((2, 2, 3), (3, 4)), ((2, 1, 2, 3), (3, 3, 2))]),
    case("einsum_ellipsis_implicit", *_einsum("...j,jk"), [((2, 3, 4), (4, 2))]),
    case("einsum_ellipsis_summed", *_einsum("b...->b"), [((2, 3, 4),)]),
    case("einsum_broadcast_label", *_einsum("ij,ij->i"), [((3, 1), (1, 4))]),
    case("einsum_spaces_uppercase", *_einsum("Ba , aB -> B"), [((2, 3), (3, 2))]),
    case("einsum_permute", *_einsum("abc->cab"), [((2, 3, 4),)]),
    case("einsum_scalar", *_einsum(",i->i"), [((), (3,))]),
]


def _np_newton_schulz(x: np.ndarray, steps: int, params: tuple[float, ...], eps: float = 1e-7) -> np.ndarray:
    """The iteration written out in numpy (float64)."""
    if x.shape[-2] > x.shape[-1]:
        return np.swapaxes(_np_newton_schulz(np.swapaxes(x, -1, -2), steps, params, eps), -1, -2)
    g = x / (np.sqrt((x * x).sum(axis=(-2, -1), keepdims=True)) + eps)
    for _ in range(steps):
        a = g @ np.swapaxes(g, -1, -2)
        g = sum(p * np.linalg.matrix_power(a, i) @ g for i, p in enumerate(params))
    return g


def _torch_newton_schulz(x: Any, steps: int, params: tuple[float, ...], eps: float = 1e-7) -> Any:
    if x.shape[-2] > x.shape[-1]:
        return _torch_newton_schulz(x.transpose(-1, -2), steps, params, eps).transpose(-1, -2)
    g = x / (x.square().sum(dim=(-2, -1), keepdim=True).sqrt() + eps)
    for _ in range(steps):
        a = g @ g.transpose(-1, -2)
        g = sum(p * _torch.linalg.matrix_power(a, i) @ g for i, p in enumerate(params))
    return g


MUON = (3.4445, -4.7750, 2.0315)

PRODUCT_CASES = [
    case("matmul_broadcast", lambda x, y: x @ y, lambda x, y: x @ y,
         [((3,), (2, 3, 4)), ((2, 1, 2, 3), (3,)), ((1, 2, 3), (4, 1, 3, 2)), ((2, 3), (0, 3, 2)),
          (M(2, 3, 4), (4,)), ((1,), (1,))], (F32, F64, F16), out_dtype=same),
    case("matmul_int", lambda x, y: x @ y, lambda x, y: x @ y, [((2, 3), (3, 2))], (I32,), grad=False,
         out_dtype=same),
    case("matmul_reverse", lambda x, y: x.matmul(y, reverse=True), lambda x, y: y @ x, [((3, 2), (2, 3))]),
    case("matmul_dtype", lambda x, y: x.matmul(y, dtype=dtypes.float32), lambda x, y: (x.float() @ y.float()),
         [((2, 3), (3, 2))], (F16,), grad=False, out_dtype=lambda d: F32),
    case("image_dot", lambda x, y: x.image_dot(y), lambda x, y: x @ y, [((2, 3), (3, 4)), ((3,), (3,))]),
    case("newton_schulz_muon", lambda x: x.newton_schulz(2, MUON), lambda x: _torch_newton_schulz(x, 2, MUON),
         [((3, 4),), (P(4, 3),), ((2, 2, 3),)], rtol=1e-3, atol=1e-4),
    case("newton_schulz_cubic", lambda x: x.newton_schulz(3, (1.5, -0.5), eps=1e-3),
         lambda x: _torch_newton_schulz(x, 3, (1.5, -0.5), 1e-3), [((2, 3),)], grad=False, rtol=1e-3, atol=1e-4),
]

CASES = CONV_CASES + POOL_CASES + INTERP_CASES + EINSUM_CASES + PRODUCT_CASES


# the forward test (values vs numpy, dtype vs PyTorch) and backward test (gradients vs PyTorch) of the table
test_forward, test_backward = table_tests(CASES)


# ---------------------------------------------------------------------------------------------------------------------
# kernels: a convolution is one fused reduce


def _realized(*shape: int) -> Tensor:
    return Tensor(np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32))


@pytest.mark.parametrize("kw", [{}, {"stride": 2, "padding": 1}, {"dilation": 2, "groups": 2}], ids=str)
def test_conv2d_bias_relu_is_one_kernel(kw: dict[str, Any]) -> None:
    x, w, b = _realized(1, 2, 6, 6), _realized(4, 2 // kw.get("groups", 1), 3, 3), _realized(4)
    # a device that reads padded inputs from a copy with the border written out makes that copy first
    copies = int(bool(kw.get("padding")) and Device[x.device].knobs.conv_border_copy)
    assert len(x.conv2d(w, **kw).schedule()) == 1 + copies
    out = x.conv2d(w, b, **kw).relu()
    assert len(out.schedule()) == 1 + copies  # the bias and relu ride in the reduce kernel's epilogue


def test_pools_are_one_kernel_each() -> None:
    x = _realized(1, 2, 5, 5)
    assert len(x.max_pool2d(3, 1, padding=1).schedule()) == 1
    assert len(x.avg_pool2d(3, 2, padding=1, ceil_mode=True, count_include_pad=False).schedule()) == 1
    assert len(x.conv_transpose2d(_realized(2, 3, 3, 3), stride=2).schedule()) == 1


# ---------------------------------------------------------------------------------------------------------------------
# properties that a table row cannot express


def test_newton_schulz_converges_to_the_polar_factor() -> None:
    # singular values 3, 2 and 1.5 (a rotation on each side): the cubic iteration reaches them all in a few steps
    q1, _ = np.linalg.qr(np.random.default_rng(3).standard_normal((3, 3)))
    q2, _ = np.linalg.qr(np.random.default_rng(4).standard_normal((4, 4)))
    a = q1 @ np.diag([3.0, 2.0, 1.5]) @ q2[:3]
    got = Tensor(a.astype(np.float32)).newton_schulz(8, (1.5, -0.5)).numpy()
    np.testing.assert_allclose(got, q1 @ q2[:3], atol=1e-4)
    np.testing.assert_allclose(got, _np_newton_schulz(a, 8, (1.5, -0.5)), atol=1e-4)
    # Muon's quintic only drives the singular values into a band around 1, quickly
    s = np.linalg.svd(Tensor(a.astype(np.float32)).newton_schulz(3, MUON).numpy(), compute_uv=False)
    assert np.all((s > 0.6) & (s < 1.25)), s


def test_newton_schulz_matches_numpy() -> None:
    a = np.random.default_rng(4).standard_normal((2, 4, 3)).astype(np.float32)
    np.testing.assert_allclose(Tensor(a).newton_schulz(3, MUON).numpy(), _np_newton_schulz(a.astype(np.float64), 3,
                               MUON), rtol=1e-3, atol=1e-4)


def test_einsum_takes_a_list_of_operands() -> None:
    a, b = np.arange(6.0, dtype=np.float32).reshape(2, 3), np.arange(12.0, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(Tensor.einsum("ij,jk->ik", [Tensor(a), Tensor(b)]).numpy(), a @ b)
    assert Tensor.einsum("i,i", Tensor([1, 2]), Tensor([3, 4])).item() == 11  # integers stay integers
    assert Tensor.einsum("ij->", Tensor([[1.0, 2.0]]), dtype=dtypes.float64).dtype == dtypes.float64


def test_conv2d_int_and_dtype_argument() -> None:
    x = np.arange(2 * 4 * 4, dtype=np.int32).reshape(1, 2, 4, 4) % 5
    w = np.ones((1, 2, 2, 2), dtype=np.int32)
    got = Tensor(x).conv2d(Tensor(w))
    assert got.dtype == dtypes.int32
    ref = sum(x[:, :, i:i + 3, j:j + 3] for i in range(2) for j in range(2)).sum(1, keepdims=True)
    np.testing.assert_array_equal(got.numpy(), ref)
    half = Tensor(x.astype(np.float16)).conv2d(Tensor(w.astype(np.float16)), dtype=dtypes.float32)
    assert half.dtype == dtypes.float32


def test_max_unpool2d_gradient_reaches_every_copy(torch: Any) -> None:
    """An index that appears twice sends the output gradient to both copies, as PyTorch's gather does."""
    x = np.array([[[[1.0, 5.0], [5.0, 2.0]]]], dtype=np.float32)
    idx = np.array([[[[3, 1], [1, 0]]]], dtype=np.int64)
    up = np.array([[[[1.0, 2.0], [3.0, 4.0]]]], dtype=np.float32)
    tx = Tensor(x, requires_grad=True)
    out = tx.max_unpool2d(Tensor(idx), 1, 1)
    (out * Tensor(up)).sum().backward()
    hx = torch.tensor(x, requires_grad=True)
    hout = torch.nn.functional.max_unpool2d(hx, torch.tensor(idx), 1, 1)
    (hout * torch.tensor(up)).sum().backward()
    np.testing.assert_array_equal(out.numpy(), hout.detach().numpy())
    np.testing.assert_array_equal(tx.grad.numpy(), hx.grad.numpy())


def test_interpolate_size_int_and_scale_forms(torch: Any) -> None:
    x = np.random.default_rng(5).standard_normal((1, 1, 3, 4)).astype(np.float32)
    fn = torch.nn.functional.interpolate
    np.testing.assert_allclose(Tensor(x).interpolate(5, mode="bilinear").numpy(),
                               fn(torch.tensor(x), size=5, mode="bilinear").numpy(), atol=1e-5)
    np.testing.assert_allclose(Tensor(x).interpolate(scale_factor=1.5, mode="bilinear",
                                                     recompute_scale_factor=True).numpy(),
                               fn(torch.tensor(x), scale_factor=1.5, mode="bilinear",
                                  recompute_scale_factor=True).numpy(), atol=1e-5)
    # tinygrad resizes the last len(size) dims of a tensor with any number of leading dims
    assert Tensor(x[0, 0]).interpolate((6,), mode="linear").shape == (3, 6)


# ---------------------------------------------------------------------------------------------------------------------
# bad input


def test_conv2d_channel_mismatch_names_shapes_and_groups() -> None:
    x, w = Tensor.zeros(1, 2, 5, 5), Tensor.zeros(4, 3, 3, 3)
    with pytest.raises(ValueError, match=r"groups=1.*\(4, 3, 3, 3\).*3 channels.*\(1, 2, 5, 5\) has 2"):
        x.conv2d(w)
    with pytest.raises(ValueError, match=r"groups=2.*\(4, 2, 3, 3\).*4 channels.*has 2"):
        x.conv2d(Tensor.zeros(4, 2, 3, 3), groups=2)


def test_conv_bad_arguments() -> None:
    x = Tensor.zeros(1, 4, 5, 5)
    with pytest.raises(ValueError, match="groups=3 must divide the 4"):
        x.conv2d(Tensor.zeros(4, 2, 3, 3), groups=3)
    with pytest.raises(ValueError, match="groups=3 must divide"):
        x.conv_transpose2d(Tensor.zeros(4, 1, 3, 3), groups=3)
    with pytest.raises(ValueError, match="kernel cannot be larger than the padded input"):
        x.conv2d(Tensor.zeros(1, 4, 6, 3))
    with pytest.raises(ValueError, match="kernel cannot be larger"):
        x.conv2d(Tensor.zeros(1, 4, 3, 3), dilation=3)
    with pytest.raises(ValueError, match="bias must have shape \\(2,\\)"):
        x.conv2d(Tensor.zeros(2, 4, 1, 1), Tensor.zeros(3))
    with pytest.raises(ValueError, match="needs an input of 4 dimensions"):
        Tensor.zeros(5, 5).conv2d(Tensor.zeros(1, 4, 1, 1))
    with pytest.raises(ValueError, match="'same' is not supported for strided"):
        x.conv2d(Tensor.zeros(1, 4, 3, 3), stride=2, padding="same")
    with pytest.raises(ValueError, match="padding must be an int"):
        x.conv2d(Tensor.zeros(1, 4, 3, 3), padding="full")
    with pytest.raises(ValueError, match="stride must be >= 1"):
        x.conv2d(Tensor.zeros(1, 4, 3, 3), stride=0)
    with pytest.raises(ValueError, match="needs 1, 2 or 4 entries"):
        x.conv2d(Tensor.zeros(1, 4, 3, 3), padding=(1, 1, 1))
    with pytest.raises(ValueError, match="expects an input with 4 channels"):
        Tensor.zeros(1, 3, 2, 2).conv_transpose2d(Tensor.zeros(4, 1, 3, 3))
    with pytest.raises(ValueError, match=r"output_padding .* must be smaller than either stride"):
        x.conv_transpose2d(Tensor.zeros(4, 1, 3, 3), stride=2, output_padding=2)


def test_pool_bad_arguments() -> None:
    x = Tensor.zeros(1, 1, 4, 4)
    with pytest.raises(ValueError, match="between 0 and half the effective kernel"):
        x.max_pool2d(3, padding=2)
    with pytest.raises(ValueError, match="larger than the padded input"):
        x.avg_pool2d(5)
    with pytest.raises(ValueError, match="at least 3 dimensions"):
        Tensor.zeros(4, 4).max_pool2d((2, 2, 2))
    with pytest.raises(ValueError, match="indices must be a Tensor of the input's shape"):
        x.max_unpool2d(Tensor.zeros(1, 1, 2, 2, dtype=dtypes.int64))


def test_interpolate_bad_arguments() -> None:
    x = Tensor.zeros(1, 1, 3, 3)
    with pytest.raises(ValueError, match=r"unknown mode 'area2'.*nearest.*bicubic"):
        x.interpolate((4, 4), mode="area2")
    with pytest.raises(ValueError, match="align_corners can only be set with the interpolating modes"):
        x.interpolate((4, 4), mode="nearest", align_corners=True)
    with pytest.raises(ValueError, match="exactly one of size and scale_factor"):
        x.interpolate(mode="nearest")
    with pytest.raises(ValueError, match="cannot resize 5 dims"):
        x.interpolate((2, 2, 2, 2, 2))


@pytest.mark.parametrize("formula,shapes,message", [
    ("ij,jk", [(2, 3)], "subscripts for 2 operand"),
    ("ij->k", [(2, 3)], "output subscript 'k' does not appear"),
    ("ij->ii", [(2, 3)], "repeat a label"),
    ("ijk", [(2, 3)], "name 3 dimension"),
    ("i1", [(2, 3)], "invalid subscript '1'"),
    ("i..j", [(2, 3)], "'...' once"),
    ("...i...", [(2, 3)], "'...' once"),
    ("ij->i->j", [(2, 3)], "at most one '->'"),
    ("ii", [(2, 3)], "subscript i is repeated for operand 0 but the sizes differ, 2 != 3"),
    ("ij,jk", [(2, 3), (4, 2)], "subscript j has size 4 for operand 1, which does not broadcast with the size 3"),
])
def test_einsum_malformed(formula: str, shapes: list[tuple[int, ...]], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Tensor.einsum(formula, *[Tensor.zeros(*s) for s in shapes])


def test_matmul_and_newton_schulz_bad_input() -> None:
    with pytest.raises(ValueError, match="inner sizes 3 and 4 differ"):
        Tensor.zeros(2, 3) @ Tensor.zeros(4, 2)
    with pytest.raises(ValueError, match="batch dimensions"):
        Tensor.zeros(2, 2, 3) @ Tensor.zeros(3, 3, 2)
    with pytest.raises(ValueError, match="needs a matrix"):
        Tensor.zeros(3).newton_schulz(1, MUON)


def _laid_out(t: Tensor) -> Any:
    """t's graph as the scheduler's layout pass lowers it for t's device: the copies the device's knobs ask for."""
    from tinygrad.engine.layout import lower_layouts
    lowered, _ = lower_layouts([t.uop], lambda sink: dict.fromkeys(sink.toposort(), t.device))
    return lowered[0]


@pytest.mark.parametrize("shapes,transposed", [
    (((40, 256), (256, 1024)), False),      # a right operand of 1 MiB: read from a panel-packed copy
    (((2, 37, 64), (2, 64, 4096)), False),  # batched
    (((40, 512), (512, 512)), True),        # a transposed (non-contiguous) right operand
    (((40, 256), (256, 1000)), False),      # 1000 columns are not whole panels: not packed
    (((1, 256), (256, 1024)), False),       # one row (a decode step): the copy would cost as much as the product
    (((6, 64), (64, 4096)), False),         # six rows: not packed either
])
def test_matmul_with_a_panel_packed_right_operand(shapes: tuple[tuple[int, ...], ...], transposed: bool) -> None:
    from tinygrad.device import Device
    from tinygrad.dtype import dtypes
    from tinygrad.uop.ops import Ops
    knobs = Device[Device.DEFAULT].knobs
    PANEL, PACK_MIN_BYTES = 2 * knobs.simd_lanes(dtypes.float32), knobs.l2_cache_bytes  # 32 and 1 MiB on CPU
    rng = np.random.default_rng(0)
    an = rng.standard_normal(shapes[0]).astype(np.float32)
    bn = rng.standard_normal(shapes[1][:-2] + shapes[1][-2:][::-1] if transposed else shapes[1]).astype(np.float32)
    a, b = Tensor(an, requires_grad=True), Tensor(bn, requires_grad=True)
    rhs, rhs_n = (b.transpose(-1, -2), bn.swapaxes(-1, -2)) if transposed else (b, bn)
    rows = int(np.prod(shapes[0][:-1])) // int(np.prod(shapes[1][:-2]))  # rows of a reading each matrix of b
    packed = rhs.shape[-1] % PANEL == 0 and rhs.numel() * 4 >= PACK_MIN_BYTES and rows >= PANEL
    out = a @ rhs
    assert (sum(1 for u in _laid_out(out).toposort() if u.op is Ops.CONTIGUOUS) >= 1) == packed
    g = rng.standard_normal(out.shape).astype(np.float32)
    (out * Tensor(g)).sum().backward()
    np.testing.assert_allclose(out.numpy(), an @ rhs_n, rtol=1e-4, atol=1e-3)
    grad_a = g @ rhs_n.swapaxes(-1, -2)
    grad_rhs = (an.swapaxes(-1, -2) @ g)
    grad_b = grad_rhs.swapaxes(-1, -2) if transposed else grad_rhs
    assert a.grad is not None and b.grad is not None
    np.testing.assert_allclose(a.grad.numpy(), grad_a, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(b.grad.numpy(), grad_b.reshape(bn.shape), rtol=1e-4, atol=1e-3)


def test_a_half_right_operand_is_packed_as_half() -> None:
    """The panel copy of a float16 B keeps B's dtype (half the bytes; the product casts as it reads, the form
    tensor cores take), and the product is numpy's."""
    from tinygrad.dtype import dtypes
    from tinygrad.uop.ops import Ops
    rng = np.random.default_rng(1)
    an, bn = rng.standard_normal((40, 256)).astype(np.float16), rng.standard_normal((256, 2048)).astype(np.float16)
    out = Tensor(an) @ Tensor(bn)
    copies = [u for u in _laid_out(out).toposort() if u.op is Ops.CONTIGUOUS]
    assert copies and all(u.dtype == dtypes.float16 for u in copies)
    ref = an.astype(np.float32) @ bn.astype(np.float32)
    np.testing.assert_allclose(out.numpy().astype(np.float32), ref, rtol=2e-3, atol=2e-2)


def test_a_private_elementwise_right_operand_is_packed_from_its_computation() -> None:
    """A right operand that is a `contiguous()` of an elementwise computation only the product reads (a weight
    dequantized for a prefill) is packed straight from the computation: one kernel fewer, the same bits. A
    contiguous that a tensor holds, that something else reads too, or that holds a reduction keeps its kernel."""
    from tinygrad.device import Device
    from tinygrad.dtype import dtypes
    knobs = Device[Device.DEFAULT].knobs
    if not knobs.l2_cache_bytes or 256 * 1024 * 4 < knobs.l2_cache_bytes or 40 < 2 * knobs.simd_lanes(dtypes.float32):
        pytest.skip(f"{Device.DEFAULT} packs no right operand of 1 MiB read by 40 rows")
    rng = np.random.default_rng(2)
    an = rng.standard_normal((40, 256)).astype(np.float32)
    qn = rng.integers(-8, 8, (1024, 256)).astype(np.int8)
    sn = rng.standard_normal((1024, 1)).astype(np.float32)
    a, q, s = Tensor(an).realize(), Tensor(qn).realize(), Tensor(sn).realize()

    def weight() -> Tensor:
        return q.cast(dtypes.float32) * s  # (1024, 256), elementwise in two buffers

    def kernels(t: Tensor) -> int:
        return len(t.schedule())

    private = a @ weight().contiguous().T
    assert kernels(private) == 2  # the packed copy computed from q and s, the product
    private_value = private.numpy()
    held_weight = weight().contiguous()  # the same node as private's (equal graphs are one node), held now
    held = a @ held_weight.T
    assert kernels(held) == 3  # the held weight, its packed copy, the product
    np.testing.assert_array_equal(private_value, held.numpy())
    np.testing.assert_allclose(private_value, an @ (qn.astype(np.float32) * sn).T, rtol=1e-5, atol=1e-4)
    del held_weight

    def read_twice(keep: bool) -> Tensor:
        w = weight().contiguous()
        out = (a @ w.T) + w.sum()
        return out if not keep else out.cat(w[:1, :40].T, dim=1)  # the held weight is read a third time

    shared, shared_held = read_twice(False), read_twice(True)
    assert kernels(shared) == kernels(shared_held) - 1  # the weight keeps its kernel; the cat is one kernel more
    np.testing.assert_allclose(shared.numpy(), an @ (qn.astype(np.float32) * sn).T + (qn * sn).sum(),
                               rtol=1e-4, atol=1e-2)

    def with_a_reduction() -> Tensor:  # 0 * a reduction + the weight: the weight, after a reduction in its kernel
        return ((a.T @ a)[:, :1].expand(256, 1024) * 0 + weight().T).contiguous()

    reduced = a @ with_a_reduction()
    held_reduced = with_a_reduction()
    assert kernels(reduced) == kernels(a @ held_reduced) == 4  # a.T @ a, the weight, its packed copy, the product
    np.testing.assert_allclose(reduced.numpy(), an @ (qn.astype(np.float32) * sn).T, rtol=1e-5, atol=1e-4)


def test_batch_chunk_of_a_weight_gradient_divides_the_batch_and_fits_the_budget() -> None:
    from tinygrad.engine import layout
    budget = 512 * 1024  # half of the 1 MiB L2 the CPU renderer declares
    assert layout.batch_chunk(512, 125_000, budget) == 4  # the MNIST example's second layer: 500 KB per chunk
    assert layout.batch_chunk(512, 1, budget) == 512  # all of it fits: one sum
    assert layout.batch_chunk(7, budget // 3, budget) == 7  # a prime batch: only single images would divide it
    assert layout.batch_chunk(0, 1000, budget) == 0
    for bs, per_image in ((512, 70_000), (96, 40_000), (64, budget)):
        chunk = layout.batch_chunk(bs, per_image, budget)
        assert bs % chunk == 0 and (chunk == bs or chunk * per_image <= budget)


def test_conv2d_weight_gradient_summed_in_batch_chunks_matches_torch(torch: Any, monkeypatch: Any) -> None:
    """With a small L2 (the device's knob; chunks take half of it) the weight gradient is summed per chunk of
    images, then over the chunks."""
    from tinygrad.device import Device
    from tinygrad.engine import layout
    monkeypatch.setattr(Device[Device.DEFAULT].renderer, "l2_cache_bytes", 16000)
    assert layout.batch_chunk(6, (8 * 81 + 5 * 49) * 4, 8000) == 2  # the shapes below: three chunks of two
    rng = np.random.default_rng(7)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((6, 8, 7, 7), (5, 8, 3, 3), (5,)))
    up = rng.standard_normal((6, 5, 7, 7)).astype(np.float32)
    tx, tw, tb = (Tensor(a, requires_grad=True) for a in (x, w, b))
    (tx.conv2d(tw, tb, padding=1).relu() * Tensor(up)).sum().backward()
    hx, hw, hb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    (torch.nn.functional.conv2d(hx, hw, hb, padding=1).relu() * torch.tensor(up)).sum().backward()
    for ours, theirs in ((tx, hx), (tw, hw), (tb, hb)):
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-4)
