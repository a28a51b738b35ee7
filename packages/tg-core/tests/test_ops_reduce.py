"""The op-info table for reductions and the ops built on them: var/std, arg-extremes, the softmax family,
cumulative scans, sorting and normalize; then the tuple-returning ops, edge values (NaN, inf, ties) and bad input.
See opinfo.py for how a case is written and checked."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tinygrad.mixin.reduce as reduce_mixin
from opinfo import (
    BOOL,
    F16,
    F32,
    F64,
    I32,
    I64,
    U8,
    F,
    M,
    OpCase,
    P,
    S,
    Spec,
    check_backward,
    check_forward,
    float_of,
    integral,
    sum_of,
    table_tests,
    torch_module,
)
from tinygrad import Device, Tensor, dtypes
from tinygrad.dtype import DType

_torch = torch_module()
TIES = integral(-2, 2)
PYREF = Device.DEFAULT == "PYREF"
# PyTorch warns where var/std divide by zero degrees of freedom; those cases check the inf/NaN it returns
pytestmark = pytest.mark.filterwarnings("ignore:.*degrees of freedom:UserWarning")


def _index(d: DType) -> DType:
    """Index results (argmax, sort and topk indices, cummax positions) are int32, tinygrad's (PyTorch: int64)."""
    return I32


# ---- numpy references (float64 inside, so that they are the accurate side) ----

def _np_var(x: np.ndarray, axis: Any = None, ddof: float = 1, keepdims: bool = False) -> np.ndarray:
    out = np.var(x.astype(np.float64), axis=axis, ddof=ddof, keepdims=keepdims)
    return np.asarray(out).astype(x.dtype if x.dtype.kind == "f" else np.float32)


def _np_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    z = x.astype(np.float64)
    e = np.exp(z - z.max(axis, keepdims=True)) if z.size else z
    return (e / e.sum(axis, keepdims=True)).astype(np.float32)


def _np_log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    z = x.astype(np.float64)
    if not z.size:
        return z.astype(np.float32)
    s = z - z.max(axis, keepdims=True)
    return (s - np.log(np.exp(s).sum(axis, keepdims=True))).astype(np.float32)


def _np_logsumexp(x: np.ndarray, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    z = x.astype(np.float64)
    if z.size == 0:
        return np.log(np.exp(z).sum(axis, keepdims=keepdims)).astype(np.float32)
    m = z.max(axis, keepdims=True)
    out = np.log(np.exp(z - m).sum(axis, keepdims=True)) + m
    return (out if keepdims else np.squeeze(out, axis) if axis is not None else out.reshape(())).astype(np.float32)


def _np_cum_extreme(x: np.ndarray, axis: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    """Running max/min and the index where it was reached (the latest among ties), along `axis`."""
    xs = np.moveaxis(x, axis, -1)
    vals, idx = np.empty_like(xs), np.zeros(xs.shape, np.int64)
    for row in np.ndindex(xs.shape[:-1]):
        best, at = None, 0
        for i, v in enumerate(xs[row]):
            if best is None or (v >= best if largest else v <= best):
                best, at = v, i
            vals[row + (i,)], idx[row + (i,)] = best, at
    return np.moveaxis(vals, -1, axis), np.moveaxis(idx, -1, axis)


def _np_argsort(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    key = x.astype(np.float64)
    return np.argsort(-key if descending else key, axis=axis, kind="stable")


def _np_sort(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    if x.ndim == 0:
        return x
    return np.take_along_axis(x, _np_argsort(x, axis, descending), axis)


def _np_topk_idx(x: np.ndarray, k: int, axis: int, largest: bool) -> np.ndarray:
    return np.take(_np_argsort(x, axis, largest), np.arange(k), axis=axis)


def _np_topk(x: np.ndarray, k: int, axis: int, largest: bool) -> np.ndarray:
    return np.take_along_axis(x, _np_topk_idx(x, k, axis, largest), axis)


def _np_normalize(x: np.ndarray, p: float, axis: int, eps: float = 1e-12) -> np.ndarray:
    z = x.astype(np.float64)
    norm = np.abs(z).max(axis, keepdims=True) if np.isinf(p) else (np.abs(z) ** p).sum(axis, keepdims=True) ** (1 / p)
    return (z / np.maximum(norm, eps)).astype(np.float32)


def _np_logcumsumexp(x: np.ndarray, axis: int) -> np.ndarray:
    return np.logaddexp.accumulate(x.astype(np.float64), axis=axis).astype(np.float32)


ROWS: list[tuple[Spec, ...]] = [((3, 5),), ((2, 3, 4),), ((0, 3),), ((3, 1),), (M(3, 4),)]
FEW: list[tuple[Spec, ...]] = [((3, 5),), ((0, 3),), (M(3, 4),)]
SCAN: list[tuple[Spec, ...]] = [((4, 5),), ((2, 3, 4),), ((0, 3),), ((1, 1),), ((),), (F(2, 5),)]

STATS_CASES = [
    OpCase("var", lambda x: x.var(), lambda x: _np_var(x), [((3, 4),), ((1,),), ((0, 3),), ((),), (M(3, 4),)],
           (F32, F64, F16), rtol=1e-4),
    OpCase("var_dim1", lambda x: x.var(dim=1), lambda x: _np_var(x, 1), ROWS, (F32, I32), out_dtype=float_of,
           torch_fn=lambda x: x.float().var(dim=1), rtol=1e-4),
    OpCase("var_axis0_keepdim_correction0", lambda x: x.var(0, keepdim=True, correction=0),
           lambda x: _np_var(x, 0, 0, True), ROWS, torch_fn=lambda x: x.var(0, keepdim=True, correction=0), rtol=1e-4),
    OpCase("var_axes_tuple_correction2", lambda x: x.var((0, 2), correction=2), lambda x: _np_var(x, (0, 2), 2),
           [((2, 3, 4),), (P(2, 3, 2),)], torch_fn=lambda x: x.var((0, 2), correction=2), rtol=1e-4),
    OpCase("var_unbiased_false", lambda x: x.var(-1, unbiased=False), lambda x: _np_var(x, -1, 0),
           [((3, 4),), (F(2, 3),)], torch_fn=lambda x: x.var(-1, unbiased=False)),
    OpCase("std", lambda x: x.std(), lambda x: np.sqrt(_np_var(x)), [((3, 4),), ((5,),), (S(3, 4),)], (F32, F64),
           rtol=1e-4),
    OpCase("std_dim0_correction0", lambda x: x.std(dim=0, correction=0), lambda x: np.sqrt(_np_var(x, 0, 0)), FEW,
           rtol=1e-4),
    OpCase("std_keepdim", lambda x: x.std(-1, keepdim=True), lambda x: np.sqrt(_np_var(x, -1, 1, True)),
           [((3, 4),), ((2, 1),)], torch_fn=lambda x: x.std(-1, keepdim=True), rtol=1e-4),
    OpCase("var_mean_var", lambda x: x.var_mean(1)[0], lambda x: _np_var(x, 1), ROWS[:1],
           torch_fn=lambda x: _torch.var_mean(x, 1)[0], rtol=1e-4),
    OpCase("var_mean_mean", lambda x: x.var_mean(1, correction=0)[1], lambda x: x.mean(1), ROWS[:1],
           torch_fn=lambda x: _torch.var_mean(x, 1, correction=0)[1]),
    OpCase("std_mean_std", lambda x: x.std_mean(0, keepdim=True)[0], lambda x: np.sqrt(_np_var(x, 0, 1, True)),
           ROWS[:1], torch_fn=lambda x: _torch.std_mean(x, 0, keepdim=True)[0], rtol=1e-4),
    OpCase("std_mean_mean", lambda x: x.std_mean()[1], lambda x: np.mean(x), ROWS[:1],
           torch_fn=lambda x: _torch.std_mean(x)[1]),
]

ARG_CASES = [
    OpCase("argmax", lambda x: x.argmax(), lambda x: np.argmax(x), [((3, 4),), ((),), ((1,),), (P(3, 4),), (F(2, 3),)],
           (F32, I32, U8, BOOL, F16), grad=False, domain=TIES, out_dtype=_index),
    OpCase("argmax_dim1", lambda x: x.argmax(dim=1), lambda x: np.argmax(x, 1), ROWS, (F32, I32), grad=False,
           domain=TIES, out_dtype=_index),
    OpCase("argmax_axis0_keepdim", lambda x: x.argmax(0, keepdim=True), lambda x: np.argmax(x, 0, keepdims=True),
           [((3, 4),), ((1, 3),), (S(3, 3),)], (F32, U8), grad=False, domain=TIES, out_dtype=_index),
    OpCase("argmax_none_keepdim", lambda x: x.argmax(keepdim=True), lambda x: np.argmax(x, keepdims=True),
           [((3, 4),)], grad=False, domain=TIES, out_dtype=_index),
    OpCase("argmin", lambda x: x.argmin(), lambda x: np.argmin(x), [((3, 4),), ((),), (M(3, 4),)],
           (F32, I32, U8, BOOL), grad=False, domain=TIES, out_dtype=_index),
    OpCase("argmin_dim_neg1", lambda x: x.argmin(-1), lambda x: np.argmin(x, -1), FEW, (F32, I64, U8), grad=False,
           domain=TIES, out_dtype=_index),
]

SOFTMAX_CASES = [
    OpCase("softmax", lambda x: x.softmax(), lambda x: _np_softmax(x, -1), ROWS + [((),)], (F32, F16),
           torch_fn=lambda x: x.softmax(-1)),
    OpCase("softmax_dim0", lambda x: x.softmax(dim=0), lambda x: _np_softmax(x, 0), ROWS[:3] + [((2, 0),)],
           torch_fn=lambda x: x.softmax(0)),
    OpCase("softmax_large_inputs", lambda x: x.softmax(1), lambda x: _np_softmax(x, 1), [((3, 5),), (P(4, 3),)],
           domain=(-500.0, 500.0), torch_fn=lambda x: x.softmax(1), atol=1e-6),
    OpCase("softmax_int_input", lambda x: x.softmax(-1), lambda x: _np_softmax(x, -1), [((3, 4),)], (I32,),
           grad=False, out_dtype=float_of),
    OpCase("softmax_dtype", lambda x: x.softmax(-1, dtype=dtypes.float64), lambda x: _np_softmax(x, -1), [((3, 4),)],
           torch_fn=lambda x: x.softmax(-1, dtype=_torch.float64)),
    OpCase("log_softmax", lambda x: x.log_softmax(), lambda x: _np_log_softmax(x, -1), ROWS, (F32, F64),
           torch_fn=lambda x: x.log_softmax(-1)),
    OpCase("log_softmax_large_inputs", lambda x: x.log_softmax(0), lambda x: _np_log_softmax(x, 0),
           [((4, 3),), (F(3, 3),)], domain=(-1000.0, 1000.0), torch_fn=lambda x: x.log_softmax(0), rtol=1e-5,
           atol=1e-3),
    OpCase("softmin", lambda x: x.softmin(1), lambda x: _np_softmax(-x, 1), FEW,
           torch_fn=lambda x: _torch.nn.functional.softmin(x, 1)),
    OpCase("logsumexp", lambda x: x.logsumexp(), lambda x: _np_logsumexp(x), [((3, 4),), ((),), ((0, 2),), (S(2, 3),)],
           torch_fn=lambda x: x.logsumexp(tuple(range(x.ndim)))),
    OpCase("logsumexp_dim1", lambda x: x.logsumexp(dim=1), lambda x: _np_logsumexp(x, 1), ROWS + [((2, 0),)],
           (F32, I32), out_dtype=float_of, torch_fn=lambda x: x.logsumexp(1)),
    OpCase("logsumexp_keepdim_large", lambda x: x.logsumexp(0, keepdim=True), lambda x: _np_logsumexp(x, 0, True),
           [((4, 3),), (M(3, 2),)], domain=(-2000.0, 2000.0), torch_fn=lambda x: x.logsumexp(0, keepdim=True),
           rtol=1e-6),
    OpCase("normalize", lambda x: x.normalize(), lambda x: _np_normalize(x, 2, 1), [((3, 4),), ((2, 3, 2),), ((0, 3),),
           ((3, 1),), (P(3, 4),)], torch_fn=lambda x: _torch.nn.functional.normalize(x)),
    OpCase("normalize_p1_dim0", lambda x: x.normalize(1, 0), lambda x: _np_normalize(x, 1, 0), [((3, 4),), (S(2, 3),)],
           torch_fn=lambda x: _torch.nn.functional.normalize(x, 1, 0)),
    OpCase("normalize_p3", lambda x: x.normalize(3.0, -1), lambda x: _np_normalize(x, 3, -1), [((3, 4),)],
           torch_fn=lambda x: _torch.nn.functional.normalize(x, 3.0, -1), rtol=1e-4),
    OpCase("normalize_inf", lambda x: x.normalize(float("inf"), 1), lambda x: _np_normalize(x, np.inf, 1),
           [((3, 4),)], torch_fn=lambda x: _torch.nn.functional.normalize(x, float("inf"), 1)),
]

SCAN_CASES = [
    OpCase("cumsum", lambda x: x.cumsum(), lambda x: np.cumsum(x, 0) if x.ndim else x, SCAN, (F32, I32, U8, BOOL, F16),
           torch_fn=lambda x: x.cumsum(0), atol=1e-4, out_dtype=sum_of),
    OpCase("cumsum_dim1", lambda x: x.cumsum(dim=1), lambda x: np.cumsum(x, 1), ROWS, (F32, I64),
           torch_fn=lambda x: x.cumsum(1), atol=1e-5),
    OpCase("cumsum_dtype", lambda x: x.cumsum(-1, dtype=dtypes.float64), lambda x: np.cumsum(x, -1), [((3, 4),)],
           (I32,), grad=False, torch_fn=lambda x: x.cumsum(-1, dtype=_torch.float64)),
    OpCase("cumprod", lambda x: x.cumprod(1), lambda x: np.cumprod(x, 1), ROWS, (F32, I32),
           domain=(-1.6, 1.6), torch_fn=lambda x: x.cumprod(1), rtol=1e-4, atol=1e-5, out_dtype=sum_of),
    OpCase("cumprod_with_zeros", lambda x: x.cumprod(0), lambda x: np.cumprod(x, 0), [((5, 3),), (F(4, 2),)],
           domain=integral(-1, 2), torch_fn=lambda x: x.cumprod(0)),
    OpCase("logcumsumexp", lambda x: x.logcumsumexp(), lambda x: _np_logcumsumexp(x, 0) if x.ndim else x, SCAN,
           (F32, F64), torch_fn=lambda x: x.logcumsumexp(0), rtol=1e-5, atol=1e-5),
    OpCase("logcumsumexp_large", lambda x: x.logcumsumexp(1), lambda x: _np_logcumsumexp(x, 1),
           [((3, 6),), (P(3, 4),)], domain=(-500.0, 500.0), torch_fn=lambda x: x.logcumsumexp(1), atol=1e-4),
    OpCase("cummax", lambda x: x.cummax(0)[0], lambda x: _np_cum_extreme(x, 0, True)[0] if x.ndim else x, SCAN,
           (F32, I32, U8, BOOL), domain=TIES, out_dtype=lambda d: d),
    OpCase("cummax_indices", lambda x: x.cummax(dim=1)[1], lambda x: _np_cum_extreme(x, 1, True)[1], ROWS,
           (F32, I32, BOOL), grad=False, domain=TIES, out_dtype=_index),
    OpCase("cummin", lambda x: x.cummin(1)[0], lambda x: _np_cum_extreme(x, 1, False)[0], FEW, (F32, I64, U8),
           domain=TIES),
    OpCase("cummin_indices", lambda x: x.cummin(-1)[1], lambda x: _np_cum_extreme(x, -1, False)[1], FEW,
           (F32, U8), grad=False, domain=TIES, out_dtype=_index),
]

SORT_CASES = [
    OpCase("sort", lambda x: x.sort(stable=True)[0], lambda x: _np_sort(x, -1, False),
           [((3, 5),), ((2, 3, 4),), ((0, 3),), ((3, 1),), ((),), (M(3, 4),)],
           (F32, I32, U8, F16), domain=TIES, torch_fn=lambda x: x.sort(dim=-1, stable=True)[0]),
    OpCase("sort_indices", lambda x: x.sort(dim=0, stable=True)[1], lambda x: _np_argsort(x, 0, False), FEW,
           (F32, I32), grad=False, domain=TIES, out_dtype=_index),
    OpCase("sort_descending", lambda x: x.sort(dim=1, descending=True, stable=True)[0],
           lambda x: _np_sort(x, 1, True), ROWS, (F32, I32), domain=TIES),
    OpCase("sort_descending_indices", lambda x: x.sort(dim=1, descending=True, stable=True)[1],
           lambda x: _np_argsort(x, 1, True), ROWS[:2] + [(P(3, 4),)], (F32, U8), grad=False, domain=TIES,
           out_dtype=_index),
    OpCase("argsort", lambda x: x.argsort(stable=True), lambda x: _np_argsort(x, -1, False), [((3, 5),), (F(3, 4),)],
           (F32, I32), grad=False, domain=TIES, out_dtype=_index),
    OpCase("argsort_descending", lambda x: x.argsort(dim=0, descending=True, stable=True),
           lambda x: _np_argsort(x, 0, True), [((4, 3),)], grad=False, domain=TIES, out_dtype=_index),
    # random floats: which of two equal values PyTorch's topk picks is unspecified, so the gradient cases avoid ties
    OpCase("topk", lambda x: x.topk(2)[0], lambda x: _np_topk(x, 2, -1, True), [((3, 5),), ((2, 3, 4),), ((0, 3),),
           (S(3, 4),)], (F32, I32)),
    OpCase("topk_smallest_dim0", lambda x: x.topk(1, dim=0, largest=False)[0], lambda x: _np_topk(x, 1, 0, False),
           [((3, 4),), (P(3, 4),)]),
    OpCase("topk_k0", lambda x: x.topk(0)[0], lambda x: _np_topk(x, 0, -1, True), [((3, 4),)]),
    OpCase("topk_all", lambda x: x.topk(4, sorted=True)[0], lambda x: _np_topk(x, 4, -1, True), [((3, 4),)]),
    OpCase("topk_indices_ties", lambda x: x.topk(3)[1], lambda x: _np_topk_idx(x, 3, -1, True),
           [((3, 5),), (M(2, 4),)], (F32, I32), grad=False, domain=TIES, out_dtype=_index),
]

CASES = STATS_CASES + ARG_CASES + SOFTMAX_CASES + SCAN_CASES + SORT_CASES


# the forward test (values vs numpy, dtype vs PyTorch) and backward test (gradients vs PyTorch) of the table
test_forward, test_backward = table_tests(CASES)


# ---- the blocked scans: a tiny block reaches the blocked and the recursive path with small inputs ----

BLOCKED = [c for c in SCAN_CASES if c.name in ("cumsum_dim1", "cumprod", "logcumsumexp_large", "cummax", "cummin")]
BLOCKED_SHAPES: list[tuple[Spec, ...]] = [((2, 11),), (P(2, 9),)]


@pytest.fixture
def tiny_scan_block(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reduce_mixin, "SCAN_BLOCK", 3)


@pytest.mark.parametrize("case", BLOCKED, ids=[c.name for c in BLOCKED])
@pytest.mark.parametrize("specs", BLOCKED_SHAPES, ids=["2x11", "P2x9"])
def test_blocked_scan_forward_and_backward(case: OpCase, specs: tuple[Spec, ...], torch: Any,
                                           tiny_scan_block: None) -> None:
    if case.name == "cummax":  # the table's cummax runs along dim 0
        case = OpCase("cummax_blocked", lambda x: x.cummax(1)[0], lambda x: _np_cum_extreme(x, 1, True)[0], [],
                      domain=TIES)
    check_forward(case, specs, F32)
    check_backward(case, specs, torch)


def test_long_axis_scans_match_and_stay_linear_in_memory(torch: Any) -> None:
    n = 100 if PYREF else 1000  # the Python reference backend interprets kernels element by element
    x = np.random.default_rng(1).standard_normal((2, n)).astype(np.float32)
    t = Tensor(x, requires_grad=True)
    outs = {"cumsum": t.cumsum(1), "logcumsumexp": t.logcumsumexp(1), "cummax": t.cummax(1)[0],
            "cumprod": (t * 0.01 + 1).cumprod(1)}
    tx = torch.tensor(x, requires_grad=True)
    refs = {"cumsum": tx.cumsum(1), "logcumsumexp": tx.logcumsumexp(1), "cummax": tx.cummax(1)[0],
            "cumprod": (tx * 0.01 + 1).cumprod(1)}
    for name, out in outs.items():
        # no kernel writes more than a few rows' worth: the n x n windows are views fused into reductions
        assert max(si.bufs[0].size for si in out.schedule()) <= 3 * n, name
        np.testing.assert_allclose(out.numpy(), refs[name].detach().numpy(), rtol=1e-4, atol=1e-3, err_msg=name)
    sum(o.sum() for o in outs.values()).backward()  # type: ignore[union-attr]
    sum(r.sum() for r in refs.values()).backward()
    assert t.grad is not None
    assert max(si.bufs[0].size for si in t.grad.schedule()) <= 3 * n
    np.testing.assert_allclose(t.grad.numpy(), tx.grad.numpy(), rtol=1e-3, atol=1e-3)
    np.testing.assert_array_equal(Tensor(x).cummax(1)[1].numpy(), torch.tensor(x).cummax(1)[1].numpy())


def test_sort_of_a_long_row_needs_no_n_squared_buffer(torch: Any) -> None:
    n = 150 if PYREF else 1000  # the Python reference backend interprets the n*n comparisons one by one
    x = np.random.default_rng(2).integers(0, 50, (2, n)).astype(np.float32)
    values, indices = Tensor(x).sort(1, descending=True)
    assert max(si.bufs[0].size for si in values.schedule()) <= n * 2
    ref = torch.tensor(x).sort(dim=1, descending=True, stable=True)
    np.testing.assert_array_equal(values.numpy(), ref.values.numpy())
    np.testing.assert_array_equal(indices.numpy(), ref.indices.numpy())


# ---- tuple returns ----

def test_tuple_returning_ops_give_values_and_int32_indices() -> None:
    x = Tensor([[3.0, 1.0, 3.0], [0.0, 2.0, -1.0]])
    for pair in (x.cummax(1), x.cummin(0), x.sort(), x.topk(2), x.var_mean(1), x.std_mean()):
        assert isinstance(pair, tuple) and len(pair) == 2
    values, indices = x.cummax(1)
    assert values.tolist() == [[3.0, 3.0, 3.0], [0.0, 2.0, 2.0]] and indices.tolist() == [[0, 0, 2], [0, 1, 1]]
    assert indices.dtype == dtypes.int32 and x.sort()[1].dtype == dtypes.int32 and x.argmax().dtype == dtypes.int32
    values, indices = x.topk(2, dim=1, largest=False)
    assert values.tolist() == [[1.0, 3.0], [-1.0, 0.0]] and indices.tolist() == [[1, 0], [2, 0]]


# ---- edge values ----

NAN, INF = float("nan"), float("inf")


def test_argmax_and_argmin_pick_the_first_tie_and_treat_nan_as_extreme(torch: Any) -> None:
    rows = [[1.0, 3.0, 3.0, 0.0], [NAN, 2.0, NAN, 5.0], [-INF, -INF, -INF, -INF], [2.0, NAN, -1.0, -1.0]]
    x, tx = Tensor(rows), torch.tensor(rows)
    assert x.argmax(1).tolist() == tx.argmax(1).tolist()
    assert x.argmin(1).tolist() == tx.argmin(1).tolist()
    assert x.argmax().item() == tx.argmax().item() and x.argmin().item() == tx.argmin().item()
    big = Tensor([dtypes.int32.min, 0, dtypes.int32.max, dtypes.int32.min], dtype=dtypes.int32)
    assert big.argmin().item() == 0 and big.argmax().item() == 2 and big.min().item() == dtypes.int32.min


def test_argmax_over_a_long_axis_reads_only_its_input(torch: Any) -> None:
    # the positions that score the hits are the reduce loop's own index: no buffer of them is made on the host and
    # read beside x; a NaN anywhere in a long (split) row still wins, the first of several
    schedule = Tensor.empty(2, 5000).argmax(1).schedule()
    outputs = {id(b) for si in schedule for b in si.bufs[:si.outs]}
    assert len({id(b) for si in schedule for b in si.bufs[si.outs:]} - outputs) == 1  # x alone
    a = np.random.default_rng(0).standard_normal((2, 5000)).astype(np.float32)
    a[0, 4321] = a[0, 4400] = NAN
    a[1, 17] = a[1, 4999] = 50
    t, ta = Tensor(a), torch.tensor(a)
    assert t.argmax(1).tolist() == ta.argmax(1).tolist() == [4321, 17]
    assert t.argmin(1).tolist() == ta.argmin(1).tolist()


def test_sort_and_cummax_place_nan_like_pytorch(torch: Any) -> None:
    row = [3.0, NAN, 1.0, -INF, NAN, 1.0]
    x, tx = Tensor(row), torch.tensor(row)
    for desc in (False, True):
        v, i = x.sort(descending=desc)
        ref = tx.sort(descending=desc, stable=True)
        np.testing.assert_array_equal(v.numpy(), ref.values.numpy())
        assert i.tolist() == ref.indices.tolist()
    for ours, theirs in ((x.cummax(0), tx.cummax(0)), (x.cummin(0), tx.cummin(0))):
        np.testing.assert_array_equal(ours[0].numpy(), theirs.values.numpy())
        assert ours[1].tolist() == theirs.indices.tolist()


def test_softmax_family_on_infinities(torch: Any) -> None:
    rows = [[-INF, 0.0, 1.0], [-INF, -INF, -INF], [INF, 0.0, 1.0], [1e30, -1e30, 0.0]]
    x, tx = Tensor(rows), torch.tensor(rows)
    np.testing.assert_allclose(x.softmax(1).numpy(), tx.softmax(1).numpy(), equal_nan=True)
    np.testing.assert_allclose(x.log_softmax(1).numpy(), tx.log_softmax(1).numpy(), equal_nan=True)
    np.testing.assert_allclose(x.logsumexp(1).numpy(), tx.logsumexp(1).numpy(), equal_nan=True)
    np.testing.assert_allclose(x.logcumsumexp(1).numpy(), tx.logcumsumexp(1).numpy(), equal_nan=True)
    far = [-1000.0, 0.0, -INF, 5.0]
    np.testing.assert_allclose(Tensor(far).logcumsumexp().numpy(), torch.tensor(far).logcumsumexp(0).numpy())


def test_softmax_gradient_is_finite_for_huge_logits(torch: Any) -> None:
    x = np.array([[1e4, -1e4, 3e3], [50.0, 50.0, -50.0]], np.float32)
    t, tx = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    w = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 2.0]], np.float32)
    (t.softmax(1) * Tensor(w)).sum().backward()
    (t.log_softmax(1) * Tensor(w)).sum().backward()
    ((tx.softmax(1) * torch.tensor(w)).sum() + (tx.log_softmax(1) * torch.tensor(w)).sum()).backward()
    assert t.grad is not None and np.isfinite(t.grad.numpy()).all()
    np.testing.assert_allclose(t.grad.numpy(), tx.grad.numpy(), atol=1e-5)


def test_var_edge_counts_give_nan_or_inf_like_pytorch(torch: Any) -> None:
    assert np.isnan(Tensor([1.0]).var().item()) and np.isnan(Tensor([]).var().item())
    assert Tensor([1.0, 2.0]).var(correction=3).item() == torch.tensor([1.0, 2.0]).var(correction=3).item()
    assert Tensor([[1.0, 2.0]]).var(0, correction=0).tolist() == [0.0, 0.0]


def test_reductions_of_a_0d_tensor_accept_dim_0_and_minus_1() -> None:
    x = Tensor(2.5)
    expected = {"sum": 2.5, "max": 2.5, "logsumexp": 2.5, "softmax": 1.0, "cumsum": 2.5, "argmax": 0, "mean": 2.5,
                "var": 0.0}
    got = {"sum": x.sum(0), "max": x.max(-1), "logsumexp": x.logsumexp(0), "softmax": x.softmax(0),
           "cumsum": x.cumsum(0), "argmax": x.argmax(0), "mean": x.mean(-1), "var": x.var(0, correction=0)}
    for name, t in got.items():
        assert t.shape == () and t.item() == pytest.approx(expected[name]), name


# ---- bad input ----

@pytest.mark.parametrize("call", [
    lambda x: x.var(2), lambda x: x.std(dim=-3), lambda x: x.argmax(2), lambda x: x.argmin(-3), lambda x: x.softmax(2),
    lambda x: x.log_softmax(-3), lambda x: x.logsumexp((0, 5)), lambda x: x.cumsum(2), lambda x: x.cumprod(-3),
    lambda x: x.cummax(2), lambda x: x.logcumsumexp(2), lambda x: x.sort(2), lambda x: x.topk(1, dim=3),
    lambda x: x.normalize(dim=2), lambda x: x.var_mean(4), lambda x: x.sum(2), lambda x: x.mean(-3),
], ids=["var", "std", "argmax", "argmin", "softmax", "log_softmax", "logsumexp", "cumsum", "cumprod", "cummax",
        "logcumsumexp", "sort", "topk", "normalize", "var_mean", "sum", "mean"])
def test_invalid_dims_raise_index_error(call: Any) -> None:
    with pytest.raises(IndexError, match="out of range"):
        call(Tensor.ones(2, 3))


def test_argmax_of_an_empty_dimension_raises() -> None:
    with pytest.raises(IndexError, match="empty"):
        Tensor.ones(0, 3).argmax()
    with pytest.raises(IndexError, match="size 0"):
        Tensor.ones(0, 3).argmin(0)
    assert Tensor.ones(0, 3).argmax(1).shape == (0,)


def test_topk_rejects_k_out_of_range() -> None:
    with pytest.raises(RuntimeError, match="k=4 is out of range"):
        Tensor.ones(2, 3).topk(4)
    with pytest.raises(RuntimeError, match="out of range"):
        Tensor.ones(2, 3).topk(-1)


def test_normalize_rejects_nan_p() -> None:
    # p = 0 and negative p are norms (tinygrad's and PyTorch's normalize take them); NaN is none
    with pytest.raises(ValueError, match="a number for p"):
        Tensor.ones(2, 3).normalize(float("nan"))
