"""The op-info table for the skeleton's ops: elementwise math, operators, reductions and movement.
See opinfo.py for how a case is written and checked."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from opinfo import (
    BINARY,
    BOOL,
    F16,
    F32,
    F64,
    I32,
    I64,
    REDUCE,
    TERNARY,
    U8,
    UNARY,
    F,
    OpCase,
    P,
    S,
    cond_first,
    float_of,
    integral,
    nonzero,
    same,
    sum_of,
    table_tests,
    torch_module,
)

_torch = torch_module()

POS = (0.1, 4.0)
NONZERO = nonzero(0.5, 3.0)


def _np_sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x.astype(np.float64)))


def _np_pad(x: np.ndarray, pairs: list[tuple[int, int]], value: float = 0.0) -> np.ndarray:
    # numpy has no negative padding: crop first, then pad
    crop = tuple(slice(max(0, -b), x.shape[i] - max(0, -a)) for i, (b, a) in enumerate(pairs))
    return np.pad(x[crop], [(max(0, b), max(0, a)) for b, a in pairs], constant_values=value)






UNARY_CASES = [
    OpCase("neg", lambda x: -x, lambda x: -x, UNARY, (F32, I32, I64, F16)),
    OpCase("neg_method", lambda x: x.neg(), np.negative, UNARY[:2]),
    OpCase("exp", lambda x: x.exp(), np.exp, UNARY, (F32, F16, F64, I32), rtol=2e-5),
    OpCase("log", lambda x: x.log(), np.log, UNARY, (F32, F16, F64), domain=POS),
    OpCase("exp2", lambda x: x.exp2(), np.exp2, UNARY, (F32, I32)),
    OpCase("log2", lambda x: x.log2(), np.log2, UNARY, (F32, I32), domain=POS),
    OpCase("sqrt", lambda x: x.sqrt(), np.sqrt, UNARY, (F32, F16, I32), domain=POS),
    OpCase("rsqrt", lambda x: x.rsqrt(), lambda x: 1 / np.sqrt(x), UNARY, (F32,), domain=POS),
    OpCase("sin", lambda x: x.sin(), np.sin, UNARY, (F32, F64), domain=(-6.0, 6.0)),
    OpCase("cos", lambda x: x.cos(), np.cos, UNARY, (F32, F64), domain=(-6.0, 6.0)),
    OpCase("tan", lambda x: x.tan(), np.tan, UNARY, (F32,), domain=(-1.3, 1.3), rtol=1e-4),
    OpCase("relu", lambda x: x.relu(), lambda x: np.maximum(x, 0), UNARY, (F32, I32)),
    OpCase("sigmoid", lambda x: x.sigmoid(), _np_sigmoid, UNARY, (F32, F16), domain=(-8.0, 8.0)),
    OpCase("tanh", lambda x: x.tanh(), np.tanh, UNARY, (F32,), domain=(-4.0, 4.0), atol=1e-6),
    OpCase("abs", lambda x: x.abs(), np.abs, UNARY, (F32, I32, F16, U8)),
    OpCase("sign", lambda x: x.sign(), np.sign, UNARY, (F32, I32)),
    OpCase("floor", lambda x: x.floor(), np.floor, UNARY, (F32, I32, F64), domain=(-4.0, 4.0)),
    OpCase("ceil", lambda x: x.ceil(), np.ceil, UNARY, (F32, I32), domain=(-4.0, 4.0)),
    OpCase("trunc", lambda x: x.trunc(), np.trunc, UNARY, (F32, I32), domain=(-4.0, 4.0)),
    OpCase("clip", lambda x: x.clip(-1.0, 1.5), lambda x: np.clip(x, -1.0, 1.5), UNARY, (F32,)),
    OpCase("clip_int", lambda x: x.clip(-1, 2), lambda x: np.clip(x, -1, 2), UNARY[:2], (I32,), grad=False),
    OpCase("clamp_min_only", lambda x: x.clamp(0.5), lambda x: np.maximum(x, 0.5), UNARY[:2]),
    OpCase("reciprocal", lambda x: x.reciprocal(), lambda x: 1 / x, UNARY, (F32, F16), domain=NONZERO),
    OpCase("square", lambda x: x.square(), np.square, UNARY, (F32, I32, F16)),
    OpCase("contiguous", lambda x: x.contiguous(), lambda x: x, UNARY, (F32, I32)),
    # Python scalars on either side of an operator
    OpCase("add_scalar", lambda x: x + 2, lambda x: x + 2, UNARY[:2], (F32, I32, U8)),
    OpCase("radd_scalar", lambda x: 1.5 + x, lambda x: 1.5 + x, UNARY[:2], (F32, I32), out_dtype=float_of),
    OpCase("rsub_scalar", lambda x: 2.5 - x, lambda x: 2.5 - x, UNARY[:2]),
    OpCase("sub_scalar_int", lambda x: x - 3, lambda x: x - 3, UNARY[:2], (I32, I64)),
    OpCase("mul_scalar", lambda x: x * -1.5, lambda x: x * -1.5, UNARY[:2], (F32, I32), out_dtype=float_of),
    OpCase("rmul_scalar", lambda x: 3 * x, lambda x: 3 * x, UNARY[:2], (F32, I32)),
    OpCase("div_scalar", lambda x: x / 4, lambda x: x / 4, UNARY[:2], (F32, I32), out_dtype=float_of),
    OpCase("rdiv_scalar", lambda x: 3 / x, lambda x: 3 / x, UNARY[:2], domain=NONZERO),
    OpCase("floordiv_scalar", lambda x: x // 3, lambda x: x // 3, UNARY[:2], (I32, F32), grad=False,
           domain=(-9, 9)),
    OpCase("floordiv_neg_scalar", lambda x: x // -4, lambda x: x // -4, UNARY[:2], (I32,), grad=False, domain=(-9, 9)),
    OpCase("rfloordiv_scalar", lambda x: 7 // x, lambda x: 7 // x, UNARY[:2], (I32,), grad=False,
           domain=nonzero(1, 4)),
    OpCase("mod_scalar", lambda x: x % 3, lambda x: x % 3, UNARY[:2], (I32, F32), grad=False, domain=(-9, 9)),
    OpCase("mod_neg_scalar", lambda x: x % -3, lambda x: x % -3, UNARY[:2], (I32, F32), grad=False, domain=(-9, 9)),
    OpCase("rmod_scalar", lambda x: 7 % x, lambda x: 7 % x, UNARY[:2], (I32,), grad=False, domain=nonzero(1, 4)),
    OpCase("pow_2", lambda x: x ** 2, lambda x: x ** 2, UNARY[:2], (F32, I32)),
    OpCase("pow_3_negative_base", lambda x: x ** 3, lambda x: x ** 3, UNARY, (F32,), rtol=1e-4),
    OpCase("pow_half", lambda x: x ** 0.5, lambda x: x ** 0.5, UNARY[:2], domain=POS),
    OpCase("pow_neg1", lambda x: x ** -1, lambda x: x ** -1.0, UNARY[:2], domain=NONZERO),
    OpCase("pow_1_5", lambda x: x ** 1.5, lambda x: x ** 1.5, UNARY[:2], domain=POS, rtol=1e-4),
    OpCase("rpow_scalar", lambda x: 2 ** x, lambda x: 2.0 ** x, UNARY[:2], rtol=1e-4),
    OpCase("lshift_scalar", lambda x: x << 2, lambda x: x << 2, UNARY[:2], (I32, U8), grad=False),
    OpCase("rshift_scalar", lambda x: x >> 1, lambda x: x >> 1, UNARY[:2], (I32, U8), grad=False, domain=(-50, 50)),
    OpCase("invert", lambda x: ~x, lambda x: ~x, UNARY[:2], (I32, U8, BOOL), grad=False),
    OpCase("gt_scalar", lambda x: x > 1, lambda x: x > 1, UNARY[:2], (F32, I32), grad=False, domain=integral(-3, 3)),
    OpCase("eq_scalar", lambda x: x == 1, lambda x: x == 1, UNARY[:2], (F32, I32), grad=False, domain=integral(-3, 3)),
    OpCase("le_scalar_float", lambda x: x <= 0.5, lambda x: x <= 0.5, UNARY[:2], (I32,), grad=False),
    OpCase("where_scalars", lambda x: (x > 0).where(x, 0.25), lambda x: np.where(x > 0, x, np.float32(0.25)), UNARY,
           torch_fn=lambda x: _torch.where(x > 0, x, 0.25)),
    OpCase("where_scalar_both", lambda x: (x > 0).where(1.0, -2.0), lambda x: np.where(x > 0, 1.0, -2.0),
           UNARY[:2], grad=False, torch_fn=lambda x: _torch.where(x > 0, 1.0, -2.0)),
]

BINARY_CASES = [
    OpCase("add", lambda x, y: x + y, lambda x, y: x + y, BINARY, (F32, I32, U8, F16, F64, BOOL)),
    OpCase("add_method", lambda x, y: x.add(y), np.add, BINARY[:2]),
    OpCase("sub", lambda x, y: x - y, lambda x, y: x - y, BINARY, (F32, I32, U8, I64)),
    OpCase("mul", lambda x, y: x * y, lambda x, y: x * y, BINARY, (F32, I32, F16, BOOL)),
    OpCase("div", lambda x, y: x / y, lambda x, y: x / y, BINARY, (F32, I32, F16),
           domain=((-3.0, 3.0), NONZERO), out_dtype=float_of, rtol=1e-5),
    OpCase("floordiv_float", lambda x, y: x // y, lambda x, y: x // y, BINARY[:2], (F32,), grad=False,
           domain=((-5.0, 5.0), NONZERO)),
    # integer division by zero gives 0 here (documented in Tensor.floordiv); numpy agrees, PyTorch raises
    OpCase("floordiv_int", lambda x, y: x // y, lambda x, y: x // y, BINARY, (I32, I64, U8), grad=False,
           domain=(-9, 9), out_dtype=same),
    OpCase("mod_float", lambda x, y: x % y, lambda x, y: np.mod(x, y), BINARY[:2], (F32,), grad=False,
           domain=((-5.0, 5.0), NONZERO), atol=1e-5),
    OpCase("mod_int", lambda x, y: x % y, lambda x, y: np.mod(x, y), BINARY, (I32, I64, U8), grad=False,
           domain=(-9, 9), out_dtype=same),
    OpCase("div_trunc", lambda x, y: x.div(y, rounding_mode="trunc"),
           lambda x, y: np.trunc(x / y).astype(np.result_type(x, y)), BINARY[:2], (I32, F32), grad=False,
           domain=((-9, 9), nonzero(1, 4))),
    OpCase("div_floor", lambda x, y: x.div(y, rounding_mode="floor"), lambda x, y: x // y, BINARY[:2], (I32, F32),
           grad=False, domain=((-9, 9), nonzero(1, 4))),
    OpCase("pow", lambda x, y: x ** y, lambda x, y: x ** y, BINARY, (F32,), domain=((0.5, 2.0), (-2.0, 2.0)),
           rtol=1e-4),
    OpCase("pow_int_exponent_negative_base", lambda x, y: x ** y, lambda x, y: x ** y, BINARY[:2], (F32,),
           domain=((-2.0, 2.0), integral(-3, 3)), rtol=1e-4, grad=False),
    OpCase("maximum", lambda x, y: x.maximum(y), np.maximum, BINARY, (F32, I32, U8, BOOL)),
    OpCase("minimum", lambda x, y: x.minimum(y), np.minimum, BINARY, (F32, I32, U8, BOOL)),
    OpCase("lt", lambda x, y: x < y, lambda x, y: x < y, BINARY, (F32, I32, U8, BOOL), grad=False,
           domain=integral(-2, 2)),
    OpCase("gt", lambda x, y: x > y, lambda x, y: x > y, BINARY[:3], (F32, I32), grad=False, domain=integral(-2, 2)),
    OpCase("le", lambda x, y: x <= y, lambda x, y: x <= y, BINARY[:3], (F32, I32), grad=False, domain=integral(-2, 2)),
    OpCase("ge", lambda x, y: x >= y, lambda x, y: x >= y, BINARY[:3], (F32, U8), grad=False, domain=integral(-2, 2)),
    OpCase("eq", lambda x, y: x == y, lambda x, y: x == y, BINARY, (F32, I32, BOOL), grad=False,
           domain=integral(-2, 2)),
    OpCase("ne", lambda x, y: x != y, lambda x, y: x != y, BINARY[:3], (F32, I32, BOOL), grad=False,
           domain=integral(-2, 2)),
    OpCase("bitwise_and", lambda x, y: x & y, lambda x, y: x & y, BINARY, (I32, U8, BOOL, I64), grad=False,
           domain=(-100, 100)),
    OpCase("bitwise_or", lambda x, y: x | y, lambda x, y: x | y, BINARY[:3], (I32, U8, BOOL), grad=False,
           domain=(-100, 100)),
    OpCase("bitwise_xor", lambda x, y: x ^ y, lambda x, y: x ^ y, BINARY[:3], (I32, U8, BOOL), grad=False,
           domain=(-100, 100)),
    OpCase("lshift", lambda x, y: x << y, lambda x, y: x << y, BINARY[:3], (I32, U8, I64), grad=False,
           domain=((-50, 50), (0, 7))),
    OpCase("rshift", lambda x, y: x >> y, lambda x, y: x >> y, BINARY[:3], (I32, U8, I64), grad=False,
           domain=((-200, 200), (0, 7))),
    OpCase("matmul", lambda x, y: x @ y, lambda x, y: x @ y,
           [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4, 5)),
            ((2, 1, 3, 4), (5, 4, 2)), ((0, 4), (4, 3)), ((3, 0), (0, 4)), ((1, 1), (1, 1)),
            (P(3, 4), S(4, 2)), (F(2, 3), P(3, 5))],
           (F32, I32, F16), rtol=1e-4, atol=1e-4),
    OpCase("dot", lambda x, y: x.dot(y), np.dot, [((3, 4), (4, 2)), ((4,), (4,))], torch_fn=lambda x, y: x @ y),
    OpCase("matmul_method", lambda x, y: x.matmul(y), np.matmul, [((2, 3), (3, 2))]),
]

TERNARY_CASES = [
    OpCase("where", lambda c, x, y: c.where(x, y), np.where, TERNARY, (F32, I32, F16),
           torch_fn=lambda c, x, y: _torch.where(c, x, y), arg_dtypes=cond_first),
    OpCase("where_numeric_cond", lambda c, x, y: c.where(x, y), lambda c, x, y: np.where(c != 0, x, y), TERNARY[:2],
           torch_fn=lambda c, x, y: _torch.where(c != 0, x, y), domain=(integral(-1, 1), (-3.0, 3.0), (-3.0, 3.0)),
           arg_dtypes=lambda d: (I32, d, d)),
]


REDUCE_CASES = [
    OpCase("sum", lambda x: x.sum(), np.sum, REDUCE, (F32, I32, U8, BOOL, F16), out_dtype=sum_of, atol=1e-4),
    OpCase("sum_dim1", lambda x: x.sum(dim=1), lambda x: x.sum(axis=1), REDUCE, (F32, I32), out_dtype=sum_of),
    OpCase("sum_axis0_keepdim", lambda x: x.sum(axis=0, keepdim=True), lambda x: x.sum(axis=0, keepdims=True),
           REDUCE, (F32, I64), torch_fn=lambda x: x.sum(dim=0, keepdim=True), out_dtype=sum_of),
    OpCase("sum_axes_tuple", lambda x: x.sum(axis=(0, -1)), lambda x: x.sum(axis=(0, -1)),
           [((2, 3, 4),), ((0, 2, 3),), (P(2, 3, 4),), (S(2, 3, 2),)], torch_fn=lambda x: x.sum(dim=(0, -1)),
           out_dtype=sum_of),
    OpCase("max", lambda x: x.max(), np.max, [((3, 4),), ((),), ((1, 3),), (P(3, 4),), (F(2, 3),)],
           (F32, I32, U8, BOOL, F16), torch_fn=lambda x: x.amax()),
    OpCase("max_dim1", lambda x: x.max(dim=1), lambda x: x.max(axis=1), REDUCE,
           (F32, I32), torch_fn=lambda x: x.amax(dim=1)),
    OpCase("max_axis0_keepdim", lambda x: x.max(axis=0, keepdim=True), lambda x: x.max(axis=0, keepdims=True),
           [((3, 4),), (S(3, 2),)], (F32, U8), torch_fn=lambda x: x.amax(dim=0, keepdim=True)),
    OpCase("min", lambda x: x.min(), np.min, [((3, 4),), ((),), (P(3, 4),)], (F32, I32, U8, BOOL),
           torch_fn=lambda x: x.amin()),
    OpCase("min_axis_neg1", lambda x: x.min(axis=-1), lambda x: x.min(axis=-1), REDUCE[:2] + REDUCE[4:], (F32, U8),
           torch_fn=lambda x: x.amin(dim=-1)),
    OpCase("min_dim0_keepdim", lambda x: x.min(dim=0, keepdim=True), lambda x: x.min(axis=0, keepdims=True),
           [((3, 4),)], (F32, I32), torch_fn=lambda x: x.amin(dim=0, keepdim=True)),
    OpCase("mean", lambda x: x.mean(), np.mean, REDUCE, (F32, I32), out_dtype=float_of, atol=1e-5),
    OpCase("mean_dim1_keepdim", lambda x: x.mean(dim=1, keepdim=True), lambda x: x.mean(axis=1, keepdims=True),
           REDUCE, (F32, I32), out_dtype=float_of),
    OpCase("mean_axis0", lambda x: x.mean(axis=0), lambda x: x.mean(axis=0), REDUCE[:3],
           torch_fn=lambda x: x.mean(dim=0)),
    OpCase("prod", lambda x: x.prod(), np.prod, REDUCE, (F32, I32), domain=(0.5, 1.5), out_dtype=sum_of, rtol=1e-4),
    OpCase("prod_axis1", lambda x: x.prod(axis=1), lambda x: x.prod(axis=1), REDUCE[:4], (F32, I32),
           torch_fn=lambda x: x.prod(dim=1), domain=nonzero(1, 2), out_dtype=sum_of, rtol=1e-4),
    OpCase("any", lambda x: x.any(), np.any, REDUCE, (BOOL, F32, I32), grad=False, domain=integral(0, 1)),
    OpCase("any_axis", lambda x: x.any(axis=1), lambda x: x.any(axis=1), REDUCE[:4], (BOOL, I32), grad=False,
           torch_fn=lambda x: x.any(dim=1), domain=integral(0, 1)),
    OpCase("all", lambda x: x.all(), np.all, REDUCE, (BOOL, F32), grad=False, domain=integral(0, 1)),
    OpCase("all_axis0_keepdim", lambda x: x.all(axis=0, keepdim=True), lambda x: x.all(axis=0, keepdims=True),
           REDUCE[:4], (BOOL, I32), grad=False, torch_fn=lambda x: x.all(dim=0, keepdim=True), domain=integral(0, 1)),
    # a reduction feeding elementwise work and a second reduction
    OpCase("softmax", lambda x: (x - x.max(axis=-1, keepdim=True)).exp() / (x - x.max(axis=-1, keepdim=True)).exp()
           .sum(axis=-1, keepdim=True), lambda x: np.exp(x - x.max(-1, keepdims=True)) /
           np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True), [((3, 4),), ((2, 1, 5),), (P(3, 4),)],
           torch_fn=lambda x: _torch.softmax(x, -1)),
    OpCase("logsumexp_like", lambda x: (x.exp().sum(axis=1) + 1).log(), lambda x: np.log(np.exp(x).sum(axis=1) + 1),
           REDUCE[:2], torch_fn=lambda x: (x.exp().sum(dim=1) + 1).log()),
]


def _pad_torch(x: Any, flat: Sequence[int], value: float = 0.0) -> Any:
    return _torch.nn.functional.pad(x, tuple(flat), value=value)


MOVEMENT_CASES = [
    OpCase("reshape", lambda x: x.reshape(4, 3), lambda x: x.reshape(4, 3), [((3, 4),), (P(3, 4),), (F(3, 4),)],
           (F32, I32)),
    OpCase("reshape_infer", lambda x: x.reshape(2, -1, 2), lambda x: x.reshape(2, -1, 2),
           [((3, 4),), (S(3, 4),), (P(2, 6),)], (F32, BOOL)),
    OpCase("reshape_tuple_flat", lambda x: x.reshape((-1,)), lambda x: x.reshape(-1), [((3, 4),), ((0, 3),), ((),)]),
    OpCase("reshape_zero", lambda x: x.reshape(3, 0, 2), lambda x: x.reshape(3, 0, 2), [((0, 6),)]),
    OpCase("view", lambda x: x.view(6, 2), lambda x: x.reshape(6, 2), [((3, 4),)]),
    OpCase("permute", lambda x: x.permute(2, 0, 1), lambda x: x.transpose(2, 0, 1), [((2, 3, 4),), ((2, 0, 3),),
           (F(2, 3, 4),), (S(2, 1, 3),)], (F32, U8)),
    OpCase("permute_tuple_neg", lambda x: x.permute((-1, 0)), lambda x: x.transpose(1, 0), [((3, 4),), (P(3, 4),)]),
    OpCase("expand", lambda x: x.expand(3, 2, 4), lambda x: np.broadcast_to(x, (3, 2, 4)),
           [((2, 1),), ((1, 4),), ((4,),), (P(2, 1),)], (F32, I32)),
    OpCase("expand_minus1", lambda x: x.expand(-1, 4), lambda x: np.broadcast_to(x, (x.shape[0], 4)),
           [((3, 1),), ((0, 1),)]),
    OpCase("pad", lambda x: x.pad(((1, 2), (0, 1))), lambda x: _np_pad(x, [(1, 2), (0, 1)]),
           [((3, 4),), ((0, 2),), (F(2, 3),), (S(2, 2),)], (F32, I32, BOOL),
           torch_fn=lambda x: _pad_torch(x, (0, 1, 1, 2))),
    OpCase("pad_value", lambda x: x.pad(((1, 0), (2, 1)), value=-1.5), lambda x: _np_pad(x, [(1, 0), (2, 1)], -1.5),
           [((3, 4),), (P(3, 4),)], torch_fn=lambda x: _pad_torch(x, (2, 1, 1, 0), -1.5)),
    OpCase("pad_flat_torch_style", lambda x: x.pad((1, 2)), lambda x: _np_pad(x, [(0, 0), (1, 2)]),
           [((3, 4),), ((2, 0),)], (F32, I32), torch_fn=lambda x: _pad_torch(x, (1, 2))),
    OpCase("pad_flat_two_dims", lambda x: x.pad((0, 1, 2, 0)), lambda x: _np_pad(x, [(2, 0), (0, 1)]),
           [((3, 4),), (S(2, 3),)], torch_fn=lambda x: _pad_torch(x, (0, 1, 2, 0))),
    OpCase("pad_negative_crops", lambda x: x.pad(((-1, 1), (1, -2))), lambda x: _np_pad(x, [(-1, 1), (1, -2)]),
           [((3, 4),)], torch_fn=lambda x: _pad_torch(x, (1, -2, -1, 1))),
    OpCase("pad_none_entry", lambda x: x.pad((None, (1, 1))), lambda x: _np_pad(x, [(0, 0), (1, 1)]), [((2, 3),)],
           torch_fn=lambda x: _pad_torch(x, (1, 1))),
    OpCase("shrink", lambda x: x.shrink(((1, 3), (0, 2))), lambda x: x[1:3, 0:2], [((3, 4),), (P(4, 3),), (F(3, 3),)],
           (F32, I32), torch_fn=lambda x: x[1:3, 0:2]),
    OpCase("shrink_none_empty", lambda x: x.shrink((None, (2, 2))), lambda x: x[:, 2:2], [((3, 4),)],
           torch_fn=lambda x: x[:, 2:2]),
    OpCase("flip", lambda x: x.flip(0), lambda x: np.flip(x, 0), [((3, 4),), ((0, 2),), (P(3, 4),)], (F32, BOOL)),
    OpCase("flip_multi", lambda x: x.flip((0, -1)), lambda x: np.flip(x, (0, -1)), [((2, 3, 4),), (S(2, 2, 3),)]),
    OpCase("transpose", lambda x: x.transpose(0, 1), lambda x: x.swapaxes(0, 1), [((3, 4),), ((2, 3, 4),),
           (F(3, 4),)], (F32, I32)),
    OpCase("transpose_neg", lambda x: x.transpose(-1, -3), lambda x: x.swapaxes(-1, -3), [((2, 3, 4),)]),
    OpCase("T", lambda x: x.T, lambda x: x.T, [((3, 4),), ((0, 3),), (P(3, 4),)]),
    OpCase("flatten", lambda x: x.flatten(), lambda x: x.reshape(-1), [((2, 3, 4),), ((),), (P(3, 4),)], (F32, I32)),
    OpCase("flatten_range", lambda x: x.flatten(1), lambda x: x.reshape(x.shape[0], -1), [((2, 3, 4),), ((2, 0, 3),)]),
    OpCase("flatten_start_end", lambda x: x.flatten(0, 1), lambda x: x.reshape(-1, x.shape[-1]), [((2, 3, 4),)]),
    OpCase("squeeze", lambda x: x.squeeze(), lambda x: x.squeeze(), [((2, 1, 3, 1),), ((1,),), ((1, 0),)]),
    OpCase("squeeze_dim", lambda x: x.squeeze(1), lambda x: x.squeeze(1), [((2, 1, 3),)]),
    OpCase("squeeze_dim_noop", lambda x: x.squeeze(0), lambda x: x, [((2, 1, 3),)]),
    OpCase("unsqueeze", lambda x: x.unsqueeze(0), lambda x: x[None], [((3, 4),), ((),), (S(2, 2),)]),
    OpCase("unsqueeze_neg", lambda x: x.unsqueeze(-1), lambda x: x[..., None], [((3, 4),)]),
    OpCase("getitem_int", lambda x: x[1], lambda x: x[1], [((3, 4),), (P(3, 4),)], (F32, I32)),
    OpCase("getitem_neg_int", lambda x: x[-1, -2], lambda x: x[-1, -2], [((3, 4),), (F(3, 4),)]),
    OpCase("getitem_slice", lambda x: x[1:3], lambda x: x[1:3], [((4, 3),), (S(4, 2),)]),
    OpCase("getitem_step", lambda x: x[::2, 1::3], lambda x: x[::2, 1::3], [((5, 7),), ((4, 3),), (P(5, 4),)],
           (F32, I32)),
    OpCase("getitem_neg_step", lambda x: x[::-1, ::-2], lambda x: x[::-1, ::-2], [((5, 7),), ((4, 0),), (S(3, 4),)],
           (F32, U8), torch_fn=lambda x: x.flip(0, 1)[:, ::2]),
    OpCase("getitem_neg_step_bounds", lambda x: x[3:0:-2, -2::-3], lambda x: x[3:0:-2, -2::-3], [((5, 7),)],
           torch_fn=lambda x: x.flip(0, 1)[x.shape[0] - 4:x.shape[0] - 1:2, 1::3]),
    OpCase("getitem_none_ellipsis", lambda x: x[None, 1, ..., None], lambda x: x[None, 1, ..., None],
           [((3, 2, 4),)]),
    OpCase("getitem_ellipsis_int", lambda x: x[..., 1], lambda x: x[..., 1], [((3, 2, 4),), (F(2, 3, 2),)]),
    OpCase("getitem_out_of_range_slice", lambda x: x[5:10, -10:2], lambda x: x[5:10, -10:2], [((3, 4),)]),
    OpCase("getitem_scalar_result", lambda x: x[2, 1], lambda x: x[2, 1], [((3, 4),)]),
    OpCase("getitem_empty_tuple", lambda x: x[()], lambda x: x[()], [((),), ((2, 3),)]),
]

CASES = UNARY_CASES + BINARY_CASES + TERNARY_CASES + REDUCE_CASES + MOVEMENT_CASES




# the forward test (values vs numpy, dtype vs PyTorch) and backward test (gradients vs PyTorch) of the table
test_forward, test_backward = table_tests(CASES)
