"""The split-reduction pass (tinygrad/engine/split_reduce.py): which reductions it splits into partial results and
a combine, and that a split changes no result, gradient or replay.

Most correctness tests run with small thresholds (the `small` fixture), so that a few hundred elements split over
several levels, with padding, on every device quickly (the PYREF backend interprets kernels in Python). A few
tests use the real thresholds and sizes: sums past 2**24 and index spaces past 2**31.
"""

from __future__ import annotations

import numpy as np
import pytest
import tinygrad.engine.split_reduce as split_reduce
from opinfo import skip_unless_device_has
from tinygrad import Context, Device, Tensor, TinyJit, Variable, dtypes
from tinygrad.uop.ops import Ops

PYREF = Device.DEFAULT == "PYREF"


def kernels(t: Tensor) -> int:
    return sum(1 for si in t.schedule() if not si.is_copy)


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thresholds that split a reduction of 256 elements or more into chunks of 4..32, at most 16 partial results
    for several outputs, and float combines of 4 (2 at the last level)."""
    monkeypatch.setattr(split_reduce, "MIN_REDUCED", 256)
    monkeypatch.setattr(split_reduce, "MAX_CHUNK", 32)
    monkeypatch.setattr(split_reduce, "MAX_PARTIALS", 16)
    monkeypatch.setattr(split_reduce, "MAX_COMBINE", 4)
    monkeypatch.setattr(split_reduce, "MAX_LAST_COMBINE", 2)


def data(shape: tuple[int, ...], kind: str = "normal", seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "normal":
        return rng.standard_normal(shape).astype(np.float32)
    if kind == "negative":
        return -rng.random(shape).astype(np.float32) - 1
    if kind == "near_one":  # products of thousands of these stay finite
        return (1 + rng.uniform(-1e-3, 1e-3, shape)).astype(np.float32)
    if kind == "int":
        return rng.integers(-1000, 1000, shape).astype(np.int32)
    raise ValueError(kind)


# ---- which reductions split (schedules only: no kernel runs) ----

@pytest.mark.parametrize(("op", "expected"), [("sum", 3), ("prod", 3), ("max", 2)])
def test_a_large_single_output_reduction_is_split(op: str, expected: int) -> None:
    # 2**15 elements: 32 chunks of 1024; a float sum or product adds the 32 up in two levels (8 at the last), an
    # exact max in one
    x = Tensor.empty(2**15)
    assert kernels(getattr(x, op)()) == expected
    with Context(SPLIT_REDUCE=0):
        assert kernels(getattr(x, op)()) == 1


def test_smaller_reductions_stay_one_kernel() -> None:
    assert kernels(Tensor.empty(2**15 - 1, 3).sum(0)) == 1
    assert kernels(Tensor.empty(2**15 - 1).max()) == 1  # a max is exact in any order
    assert kernels(Tensor.empty(2**15 - 1, dtype=dtypes.int32).sum()) == 1
    assert kernels(Tensor.empty(split_reduce.MIN_SHORT_REDUCED - 1).sum()) == 1


def test_short_single_output_float_sums_are_split() -> None:
    # from MIN_SHORT_REDUCED (256) elements: chunks of 128, then the last combine of 2 to 8 partial results
    assert kernels(Tensor.empty(256).sum()) == 2
    assert kernels(Tensor.empty(1000).mean()) == 2
    assert kernels(Tensor.empty(2**15 - 1).sum()) == 3  # 256 partial results: a combine level, then the last
    assert kernels(Tensor.empty(16, 64).prod()) == 2
    with Context(SPLIT_REDUCE=0):
        assert kernels(Tensor.empty(1000).sum()) == 1


def test_reductions_with_many_outputs_stay_one_kernel() -> None:
    # MAX_PARTIALS (128) partial results in all: 64 outputs get two chunks each, 65 would get one
    assert kernels(Tensor.empty(64, 2**15).sum(1)) == 2
    assert kernels(Tensor.empty(65, 2**15).sum(1)) == 1
    # unless they are longer than any chunk may be (an expanded scalar: no memory)
    many_long = Tensor.ones(1, 1).expand(100, 2**17 + 1)
    assert kernels(many_long.sum(1)) > 1
    if not PYREF:  # 13M elements: minutes in the Python interpreter
        np.testing.assert_array_equal(many_long.sum(1).numpy(), np.full(100, 2**17 + 1, np.float32))


def test_a_long_combine_is_split_again() -> None:
    # 2**25 / 1024 = 32768 partial sums, then 1024, 32 and 8: a float accumulator adds at most 32 terms, 8 at the last
    assert kernels(Tensor.empty(2**25).sum()) == 5
    # an exact max: 32768 partial results, 1024 at most per combine
    assert kernels(Tensor.empty(2**25).max()) == 3


def test_a_power_of_two_that_divides_the_axis_is_taken_before_one_that_pads() -> None:
    # 128256 = 2**8 * 501: chunks of 256 leave nothing over, the preferred 1024 would pad the axis (and make every
    # load of the chunk kernel a gated one); 2**15 + 1 has no such divisor and is still padded
    def pads(n: int) -> bool:
        outputs, _ = split_reduce.split_large_reductions([Tensor.empty(n).max().uop])
        return any(u.op is Ops.PAD for u in outputs[0].toposort())
    assert not pads(128256) and not pads(2**15 * 3)
    assert pads(2**15 + 1)
    x = data((128256,))
    x[77777] = 9
    t = Tensor(x)
    assert t.max().item() == 9 and t.argmax().item() == 77777


def test_symbolic_and_empty_shapes_are_left_alone() -> None:
    n = Variable("n", 1, 2**20).bind(2**16)
    assert kernels(Tensor.empty(2**20)[:n].sum()) == 1
    assert kernels(Tensor.empty(0, 2**16).sum(1)) == 1  # as before the pass: no outputs, nothing to split
    assert kernels(Tensor.empty(2**16, 0).sum(0)) == 1  # the empty source folds to the identity


def test_the_pass_rewrites_only_qualifying_reductions() -> None:
    x = Tensor.empty(2**15)
    big, small_max = x.max(), x[:100].max()
    outputs, stands_for = split_reduce.split_large_reductions([big.uop, small_max.uop])
    assert outputs[1] is small_max.uop  # untouched: the same node
    assert stands_for[outputs[0]] is big.uop  # the rebuilt output stands for the given one
    added = [u for u, old in stands_for.items() if old is None]
    assert sum(1 for u in added if u.op is Ops.CONTIGUOUS and u.arg is None) == 1  # one private partial buffer


def test_partial_results_are_private_to_the_schedule() -> None:
    x = Tensor(np.ones(2**15, np.float32))
    y = x.sum()
    items = y.schedule()
    assert len(items) == 3
    assert items[0].outputs == items[1].outputs == []  # partial results stand for no tensor: no buffer is remembered
    assert items[2].outputs == [y.uop]
    assert y.item() == 2**15


def test_the_schedule_cache_tells_the_settings_apart() -> None:
    x = Tensor(np.ones(2**15, np.float32))
    assert kernels(x.max()) == 2
    with Context(SPLIT_REDUCE=0):
        assert kernels(x.max()) == 1  # the same graph, scheduled again with the pass off
    assert kernels(x.max()) == 2


# ---- results: every op, odd sizes, special values, axes ----

SIZES = [257, 1009, 1023, 1025, 4099]  # primes and 2**k +- 1: every split pads


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("kind", ["normal", "negative"])
def test_float_reductions_match_numpy(small: None, n: int, kind: str) -> None:
    a = data((n,), kind, seed=n)
    x = Tensor(a)
    assert kernels(x.sum()) > 2
    ref = a.astype(np.float64)
    np.testing.assert_allclose(x.sum().item(), ref.sum(), rtol=1e-5, atol=1e-5 * np.abs(ref).sum())
    np.testing.assert_allclose(x.mean().item(), ref.mean(), rtol=1e-5, atol=1e-6 * np.abs(ref).mean())
    assert x.max().item() == a.max() and x.min().item() == a.min()  # all-negative data: not the padding's 0
    assert x.argmax().item() == a.argmax() and x.argmin().item() == a.argmin()
    p = data((n,), "near_one", seed=n)
    np.testing.assert_allclose(Tensor(p).prod().item(), p.astype(np.float64).prod(), rtol=1e-5)


@pytest.mark.parametrize("n", SIZES)
def test_integer_reductions_are_exact(small: None, n: int) -> None:
    a = data((n,), "int", seed=n)
    x = Tensor(a)
    skip_unless_device_has([dtypes.int64], "integer sums accumulate in int64")
    assert x.sum().item() == int(a.astype(np.int64).sum())
    assert x.max().item() == a.max() and x.min().item() == a.min()
    signs = np.where(a > 0, 1, -1).astype(np.int32)  # a product that neither overflows nor vanishes
    assert Tensor(signs).prod().item() == int(signs.astype(np.int64).prod())


@pytest.mark.parametrize("n", [257, 1025])
def test_nan_and_inf(small: None, n: int) -> None:
    a = data((n,), "negative", seed=1)
    a[n // 3] = np.nan
    x = Tensor(a)
    assert np.isnan(x.sum().item()) and np.isnan(x.max().item()) and np.isnan(x.min().item())
    assert np.isnan(x.prod().item())
    b = np.full(n, -np.inf, np.float32)
    assert Tensor(b).max().item() == -np.inf and Tensor(b).sum().item() == -np.inf
    b[-1] = np.inf  # the last element sits next to the padding
    assert Tensor(b).max().item() == np.inf and np.isnan(Tensor(b).sum().item())


@pytest.mark.parametrize("n", [257, 1025])
def test_any_and_all(small: None, n: int) -> None:
    a = np.zeros(n, bool)
    assert not Tensor(a).any().item() and not Tensor(a).all().item()
    a[-1] = True  # only the last element, next to the padding
    assert Tensor(a).any().item() and not Tensor(a).all().item()
    assert Tensor(np.ones(n, bool)).all().item()


def test_products_pad_with_the_identity(small: None) -> None:
    assert Tensor.ones(1025).prod().item() == 1.0
    assert Tensor(np.full(1025, -1, np.int32)).prod().item() == -1  # an odd count of -1: a 0 in the padding shows
    assert Tensor(np.full(1025, 2, np.float32)).prod().item() == np.inf


@pytest.mark.parametrize(("shape", "axis"), [
    ((1009, 3), 0),  # down the columns of a tall matrix: the reduced axis is not the last
    ((3, 1009), 1),
    ((64, 3, 5, 7), (0, 2, 3)),  # a BatchNorm's statistics over NCHW
    ((31, 37, 2), (0, 1)),
    ((2, 17, 31), (1, 2)),
])
@pytest.mark.parametrize("keepdim", [False, True])
def test_axis_variants(small: None, shape: tuple[int, ...], axis: int | tuple[int, ...], keepdim: bool) -> None:
    a = data(shape)
    x = Tensor(a)
    assert kernels(x.sum(axis, keepdim=keepdim)) > 1, "the case should split"
    ref = a.astype(np.float64)
    got = x.sum(axis, keepdim=keepdim).numpy()
    np.testing.assert_allclose(got, ref.sum(axis, keepdims=keepdim), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(x.max(axis, keepdim=keepdim).numpy(), a.max(axis, keepdims=keepdim))
    np.testing.assert_allclose(x.var(axis, keepdim=keepdim).numpy(), ref.var(axis, ddof=1, keepdims=keepdim),
                               rtol=1e-4)
    if isinstance(axis, int):
        np.testing.assert_array_equal(x.argmax(axis, keepdim=keepdim).numpy(), a.argmax(axis, keepdims=keepdim))


def test_empty_and_single_element_reductions(small: None) -> None:
    assert Tensor.empty(0, 1000).sum(1).shape == (0,)
    np.testing.assert_array_equal(Tensor(np.zeros((1000, 0), np.float32)).sum(0).numpy(), np.zeros(0))
    np.testing.assert_array_equal(Tensor(np.zeros((0, 1000), np.float32)).sum(0).numpy(), np.zeros(1000))
    assert Tensor(np.zeros(0, np.float32)).sum().item() == 0
    assert Tensor(np.zeros(0, np.float32)).prod().item() == 1
    a = data((1000, 1))
    np.testing.assert_array_equal(Tensor(a).sum(1).numpy(), a[:, 0])  # R == 1: nothing to split


def test_elementwise_sources_and_consumers_fuse_as_before(small: None) -> None:
    a = data((1000,))
    x = Tensor(a)
    y = ((x * 2 + 1).exp().sum() + 3).sqrt()  # the source fuses into the partial kernel, the consumer into the combine
    np.testing.assert_allclose(y.item(), np.sqrt(np.exp(a.astype(np.float64) * 2 + 1).sum() + 3), rtol=1e-5)
    s = x.sum()
    both = (s + 1) * (s - 1)  # one reduction, read twice
    np.testing.assert_allclose(both.item(), a.astype(np.float64).sum() ** 2 - 1, rtol=1e-4)


def test_a_softmax_over_a_long_axis(small: None) -> None:
    a = data((2, 1000))
    e = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(Tensor(a).softmax(1).numpy(), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_split_and_unsplit_agree(small: None) -> None:
    a = data((64, 3, 5, 7))
    x = Tensor(a)
    for f in (lambda t: t.sum((0, 2, 3)), lambda t: t.max((0, 2, 3)), lambda t: t.mean()):
        split = f(x)
        assert kernels(split) > 1
        with Context(SPLIT_REDUCE=0):
            whole = f(x)
            assert kernels(whole) == 1
            whole_np = whole.numpy()
        np.testing.assert_allclose(split.numpy(), whole_np, rtol=1e-5, atol=1e-5)


# ---- gradients and TinyJit ----

def test_gradients_through_split_reductions(small: None, torch) -> None:  # type: ignore[no-untyped-def]
    a = data((1009, 3))
    w = data((3,), seed=1)
    x = Tensor(a, requires_grad=True)
    loss = (x.sum(0) * Tensor(w)).sum() + x.max() + (x * x).mean()
    loss.backward()
    tx = torch.tensor(a, requires_grad=True)
    tloss = (tx.sum(0) * torch.tensor(w)).sum() + tx.max() + (tx * tx).mean()
    tloss.backward()
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5)
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_a_jitted_split_sum_replays_with_new_inputs(small: None) -> None:
    @TinyJit
    def f(x: Tensor) -> Tensor:
        return (x * 2).sum().realize()

    for seed in range(4):  # call 1 runs eagerly, 2 captures, 3 and 4 replay
        a = data((1025,), seed=seed)
        np.testing.assert_allclose(f(Tensor(a)).item(), 2 * a.astype(np.float64).sum(), rtol=1e-5, atol=1e-4)


# ---- the real thresholds and sizes ----

needs_compiled = pytest.mark.skipif(PYREF, reason="PYREF interprets kernels in Python: these sizes take minutes")


@needs_compiled
def test_a_float32_sum_keeps_growing_past_2_24() -> None:
    assert Tensor.ones(33554433).sum().item() == 33554432.0  # 2**25 + 1 rounds to 2**25, as in numpy
    assert Tensor.ones(2**25).mean().item() == 1.0


@needs_compiled
def test_a_sum_over_2_32_elements_of_an_expanded_scalar() -> None:
    # no memory: one float broadcast to 65536 x 65536
    assert Tensor.ones(1, 1).expand(65536, 65536).sum().item() == 4294967296.0


def _has_wide_indices() -> bool:
    renderer = getattr(Device[Device.DEFAULT], "renderer", None)
    return renderer is None or getattr(renderer, "index_wide_dtype", 1) is not None


@needs_compiled
def test_reductions_past_2_31_elements() -> None:
    if not _has_wide_indices():
        pytest.skip(f"{Device.DEFAULT} has no 64-bit integers for the index of the padded chunks")
    n = 2**31 + 8  # in chunks of 1024, the last one padded: element indices pass 2**31
    assert Tensor.ones(n).max().item() == 1.0
    assert abs(Tensor.ones(n).sum().item() - n) <= 2 * np.spacing(np.float32(n))
    skip_unless_device_has([dtypes.int64], "a count of this many booleans is an int64")
    assert Tensor.ones(n, dtype=dtypes.bool).sum().item() == n


def test_real_thresholds_on_a_tall_matrix(torch) -> None:  # type: ignore[no-untyped-def]
    a = data((2**15 + 1, 3))
    a[-1, 1] = 10  # the largest value in the last row, next to the padding
    x = Tensor(a, requires_grad=True)
    assert kernels(x.sum(0)) == 2  # 8 chunks per column, one combine
    np.testing.assert_allclose(x.sum(0).numpy(), a.astype(np.float64).sum(0), rtol=1e-5, atol=1e-3)
    np.testing.assert_array_equal(x.max(0).numpy(), a.max(0))
    (x.max() * 2 + x.sum(0).square().sum()).backward()
    tx = torch.tensor(a, requires_grad=True)
    (tx.max() * 2 + tx.sum(0).square().sum()).backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4)
