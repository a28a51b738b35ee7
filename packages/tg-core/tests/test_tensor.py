"""Tensor creation, properties, realization, casts, integer semantics and the errors bad input raises.

Op values live in test_ops.py; this file covers what is not one op applied to random data.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from tinygrad import Device, Tensor, dtypes
from tinygrad.dtype import DType, to_numpy

ALL_NUMPY_DTYPES = [d for d in dtypes.all() if d not in (dtypes.bfloat16, *dtypes.fp8s)]  # those have no numpy type


# ---- creation ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value,dtype", [(3, dtypes.int32), (-7, dtypes.int32), (2.5, dtypes.float32),
                                         (0.0, dtypes.float32), (True, dtypes.bool), (False, dtypes.bool)])
def test_python_scalar(value: Any, dtype: DType, device: str) -> None:
    t = Tensor(value)
    assert t.shape == () and t.ndim == 0 and t.numel() == 1 and t.dtype == dtype and t.device == device
    got = t.item()
    assert got == value and type(got) is type(value)
    assert t.numpy().shape == () and t.numpy().dtype == to_numpy(dtype)
    assert t.tolist() == value


@pytest.mark.parametrize("value,dtype", [(3, dtypes.float16), (2.75, dtypes.float64), (1, dtypes.bool),
                                         (300, dtypes.int64), (200, dtypes.uint8)])
def test_python_scalar_with_dtype(value: Any, dtype: DType) -> None:
    t = Tensor(value, dtype=dtype)
    assert t.dtype == dtype
    assert t.item() == np.array(value).astype(to_numpy(dtype)).item()


@pytest.mark.parametrize("data,dtype,shape", [
    ([[1, 2, 3], [4, 5, 6]], dtypes.int32, (2, 3)),
    ([1, 2.5], dtypes.float32, (2,)),
    ([[True, False]], dtypes.bool, (1, 2)),
    ([True, 2], dtypes.int32, (2,)),
    ([], dtypes.float32, (0,)),
    ([[], []], dtypes.float32, (2, 0)),
    ([[[1]], [[2]]], dtypes.int32, (2, 1, 1)),
    (((1.5, 2), (3, 4)), dtypes.float32, (2, 2)),
])
def test_nested_lists(data: Any, dtype: DType, shape: tuple[int, ...]) -> None:
    t = Tensor(data)
    assert t.shape == shape and t.dtype == dtype
    np.testing.assert_array_equal(t.numpy(), np.array(data, dtype=to_numpy(dtype)).reshape(shape))
    assert t.tolist() == np.array(data, dtype=to_numpy(dtype)).reshape(shape).tolist()


@pytest.mark.parametrize("dtype", [dtypes.uint8, dtypes.int64, dtypes.float64, dtypes.float16, dtypes.bool])
def test_nested_list_with_dtype(dtype: DType) -> None:
    data = [[0, 1, 2], [3, 4, 250]]
    t = Tensor(data, dtype=dtype)
    assert t.dtype == dtype and t.shape == (2, 3)
    np.testing.assert_array_equal(t.numpy(), np.array(data).astype(to_numpy(dtype)))


@pytest.mark.parametrize("dtype", ALL_NUMPY_DTYPES, ids=lambda d: d.name)
def test_numpy_round_trip(dtype: DType) -> None:
    rng = np.random.default_rng(1)
    nd = to_numpy(dtype)
    if dtype.is_float:
        arr = rng.standard_normal((3, 5)).astype(nd)
    elif dtype.is_bool:
        arr = rng.random((3, 5)) < 0.5
    else:
        info = np.iinfo(nd)
        arr = rng.integers(info.min, info.max, size=(3, 5), dtype=nd, endpoint=True)
    t = Tensor(arr)
    assert t.dtype == dtype and t.shape == (3, 5)
    out = t.numpy()
    assert out.dtype == nd
    np.testing.assert_array_equal(out, arr)
    # through a kernel, not just the upload buffer
    np.testing.assert_array_equal(t.T.contiguous().numpy(), arr.T)


def test_numpy_inputs_of_every_layout() -> None:
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    for arr in (base[:, ::2], base.T, np.asfortranarray(base), base[::-1], np.array(5.5, dtype=np.float32),
                np.float32(2.5), np.zeros((0, 3), np.int16)):
        t = Tensor(arr)
        assert t.shape == np.shape(arr) and t.dtype.name == np.asarray(arr).dtype.name
        np.testing.assert_array_equal(t.numpy(), arr)


def test_numpy_input_is_copied() -> None:
    arr = np.ones(3, dtype=np.float32)
    t = Tensor(arr)
    arr[:] = 5
    np.testing.assert_array_equal(t.numpy(), np.ones(3))


def test_bytes() -> None:
    t = Tensor(b"\x00\x01\x7f\xff")
    assert t.dtype == dtypes.uint8 and t.shape == (4,)
    assert t.tolist() == [0, 1, 127, 255]
    assert Tensor(b"").shape == (0,)


def test_from_tensor_shares_value() -> None:
    a = Tensor([1.0, 2.0])
    assert Tensor(a).tolist() == [1.0, 2.0]
    assert Tensor(a, dtype=dtypes.int32).tolist() == [1, 2]


@pytest.mark.parametrize("shape_args,shape", [((2, 3), (2, 3)), (((2, 3),), (2, 3)), ((0,), (0,)), ((), ()),
                                              (([4, 1],), (4, 1))])
def test_empty(shape_args: tuple, shape: tuple[int, ...], device: str) -> None:
    t = Tensor.empty(*shape_args)
    assert t.shape == shape and t.dtype == dtypes.float32 and t.device == device
    assert t.numpy().shape == shape  # the values are undefined; the buffer is real
    assert Tensor.empty(*shape_args, dtype=dtypes.int16).numpy().dtype == np.int16


@pytest.mark.parametrize("make,value,dtype", [
    (lambda s: Tensor.zeros(*s), 0, dtypes.float32),
    (lambda s: Tensor.zeros(s, dtype=dtypes.int32), 0, dtypes.int32),
    (lambda s: Tensor.ones(*s), 1, dtypes.float32),
    (lambda s: Tensor.ones(s, dtype=dtypes.uint8), 1, dtypes.uint8),
    (lambda s: Tensor.ones(s, dtype="bool"), True, dtypes.bool),
    (lambda s: Tensor.full(s, 7), 7, dtypes.int32),
    (lambda s: Tensor.full(s, -2.5), -2.5, dtypes.float32),
    (lambda s: Tensor.full(s, True), True, dtypes.bool),
    (lambda s: Tensor.full(s, 3, dtype=dtypes.float16), 3, dtypes.float16),
])
@pytest.mark.parametrize("shape", [(2, 3), (), (0, 4), (1,)])
def test_constant_creation(make: Any, value: Any, dtype: DType, shape: tuple[int, ...]) -> None:
    t = make(shape)
    assert t.shape == shape and t.dtype == dtype
    np.testing.assert_array_equal(t.numpy(), np.full(shape, value, dtype=to_numpy(dtype)))


def test_full_int_shape_and_like() -> None:
    assert Tensor.full(3, 1.5).tolist() == [1.5, 1.5, 1.5]
    x = Tensor([[1, 2, 3]], dtype=dtypes.int64)
    for t, v in ((x.zeros_like(), 0), (x.ones_like(), 1), (x.full_like(9), 9)):
        assert t.shape == (1, 3) and t.dtype == dtypes.int64 and t.tolist() == [[v] * 3]
    assert x.zeros_like(dtype=dtypes.float32).dtype == dtypes.float32


@pytest.mark.parametrize("args,kwargs,dtype", [
    ((5,), {}, dtypes.int32), ((2, 10, 3), {}, dtypes.int32), ((5, 0, -1.5), {}, dtypes.float32),
    ((0,), {}, dtypes.int32), ((5, 2), {}, dtypes.int32), ((-3, 3, 0.5), {}, dtypes.float32),
    ((5.0,), {}, dtypes.float32), ((1, 2, 0.25), {"dtype": dtypes.float16}, dtypes.float16),
    ((10, -10, -3), {}, dtypes.int32), ((4,), {"dtype": dtypes.int64}, dtypes.int64),
])
def test_arange(args: tuple, kwargs: dict, dtype: DType) -> None:
    t = Tensor.arange(*args, **kwargs)
    ref = np.arange(*args)
    assert t.dtype == dtype and t.shape == ref.shape
    np.testing.assert_allclose(t.numpy(), ref, rtol=1e-6)


def test_arange_step_zero() -> None:
    with pytest.raises(ValueError, match="step"):
        Tensor.arange(0, 5, 0)


# ---- random numbers --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", [Tensor.rand, Tensor.randn], ids=["rand", "randn"])
def test_seed_reproducible(fn: Any) -> None:
    Tensor.manual_seed(42)
    a, b = fn(64).numpy(), fn(64).numpy()
    Tensor.manual_seed(42)
    np.testing.assert_array_equal(fn(64).numpy(), a)
    np.testing.assert_array_equal(fn(64).numpy(), b)
    assert not np.array_equal(a, b), "consecutive draws must differ"
    Tensor.manual_seed(43)
    assert not np.array_equal(fn(64).numpy(), a), "another seed must give other numbers"


def test_rand_statistics() -> None:
    Tensor.manual_seed(7)
    x = Tensor.rand(100, 100)
    assert x.shape == (100, 100) and x.dtype == dtypes.float32
    v = x.numpy()
    assert v.min() >= 0.0 and v.max() < 1.0
    assert abs(v.mean() - 0.5) < 0.02 and abs(v.var() - 1 / 12) < 0.005
    assert len(np.unique(v)) > 9900  # not a short cycle
    # the halves of the unit interval are equally likely
    assert abs((v < 0.5).mean() - 0.5) < 0.02


def test_randn_statistics() -> None:
    Tensor.manual_seed(7)
    v = Tensor.randn(100, 100).numpy()
    assert abs(v.mean()) < 0.05 and abs(v.std() - 1.0) < 0.05
    assert abs((np.abs(v) < 1).mean() - 0.6827) < 0.02
    assert np.isfinite(v).all()


def test_rand_shapes_and_dtypes() -> None:
    assert Tensor.rand((2, 3)).shape == (2, 3)
    assert Tensor.rand(0, 3).numpy().shape == (0, 3)
    h = Tensor.rand(4, dtype=dtypes.float16)
    assert h.dtype == dtypes.float16 and ((h.numpy() >= 0) & (h.numpy() <= 1)).all()
    assert Tensor.randn(3, dtype=dtypes.float64).dtype == dtypes.float64
    u = Tensor.uniform(1000, low=-2.0, high=3.0).numpy()
    assert u.min() >= -2.0 and u.max() < 3.0 and abs(u.mean() - 0.5) < 0.2
    assert Tensor.rand(2, requires_grad=True).requires_grad


# ---- properties and realization ---------------------------------------------------------------------------------

def test_properties(device: str) -> None:
    t = Tensor.zeros(2, 3, 4, dtype=dtypes.float16)
    assert t.shape == (2, 3, 4) and t.ndim == 3 and t.numel() == 24 and len(t) == 2
    assert t.size() == (2, 3, 4) and t.size(1) == 3 and t.size(-1) == 4
    assert t.element_size() == 2 and t.nbytes() == 48 and t.device == device
    assert "(2, 3, 4)" in repr(t) and "float16" in repr(t)
    with pytest.raises(TypeError):
        len(Tensor(1.0))


def test_realize_returns_self_and_keeps_values() -> None:
    a = Tensor([1.0, 2.0, 3.0])
    b = a * 2 + 1
    assert b.realize() is b
    np.testing.assert_array_equal(b.numpy(), [3, 5, 7])
    np.testing.assert_array_equal((b + 1).numpy(), [4, 6, 8])


def test_realize_several() -> None:
    a = Tensor([1, 2])
    b, c = a + 1, a * 3
    b.realize(c)
    assert b.tolist() == [2, 3] and c.tolist() == [3, 6]


def test_numpy_of_views() -> None:
    base = np.arange(12, dtype=np.int32).reshape(3, 4)
    t = Tensor(base)
    np.testing.assert_array_equal(t.T.numpy(), base.T)
    np.testing.assert_array_equal(t[:, ::-2].numpy(), base[:, ::-2])
    np.testing.assert_array_equal(t.reshape(2, 6)[1].numpy(), base.reshape(2, 6)[1])
    out = t.numpy()
    out[0, 0] = 100  # what numpy() returns is the caller's
    assert t.numpy()[0, 0] == 0


def test_tolist_and_item() -> None:
    assert Tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert Tensor([[1.5]]).item() == 1.5 and isinstance(Tensor([[1.5]]).item(), float)
    assert Tensor([7]).item() == 7 and isinstance(Tensor([7]).item(), int)
    assert Tensor.zeros(0, 2).tolist() == []
    with pytest.raises(ValueError, match=r"\(3,\)"):
        Tensor([1, 2, 3]).item()


def test_bool_of_tensor() -> None:
    # tinygrad defines no truth value at all (PyTorch does for one element): read the value explicitly
    for t in (Tensor([2.0]) > 1, Tensor(0), Tensor([1, 2])):
        with pytest.raises(TypeError, match="no truth value"):
            bool(t)
    assert (Tensor([2.0]) > 1).item() and not Tensor(0).item()


# ---- casts -----------------------------------------------------------------------------------------------------

CAST_CASES = [
    (dtypes.float32, dtypes.int32, [-2.7, -0.5, 0.0, 1.9, 100.2]),
    (dtypes.float32, dtypes.uint8, [0.0, 1.5, 254.9, 128.0]),
    (dtypes.float32, dtypes.bool, [0.0, -0.0, 0.5, -3.0]),
    (dtypes.float32, dtypes.float16, [1.0, 1e-3, 65504.0, -2.5]),
    (dtypes.float32, dtypes.float64, [1.1, -2.2, 1e30]),
    (dtypes.float64, dtypes.float32, [1.1, -2.2, 1e-40]),
    (dtypes.float64, dtypes.int64, [-3e12, 5e12, 0.5]),
    (dtypes.float16, dtypes.float32, [0.1, -65504.0, 6e-8]),
    (dtypes.int32, dtypes.float32, [-5, 0, 2**24 + 1, 7]),
    (dtypes.int32, dtypes.uint8, [-1, 256, 300, 7]),
    (dtypes.int32, dtypes.int8, [127, 128, -129, 5]),
    (dtypes.int32, dtypes.bool, [0, 1, -4]),
    (dtypes.int32, dtypes.float16, [3, -2048, 5]),
    (dtypes.int64, dtypes.int32, [2**31, -(2**31) - 1, 12]),
    (dtypes.uint8, dtypes.int32, [0, 200, 255]),
    (dtypes.uint8, dtypes.float32, [0, 200, 255]),
    (dtypes.bool, dtypes.float32, [True, False]),
    (dtypes.bool, dtypes.int32, [True, False]),
    (dtypes.int16, dtypes.uint16, [-1, 5, -32768]),
]


@pytest.mark.parametrize("frm,to,values", CAST_CASES, ids=lambda v: v.name if isinstance(v, DType) else "")
def test_cast(frm: DType, to: DType, values: list) -> None:
    arr = np.array(values, dtype=to_numpy(frm))
    t = Tensor(arr).cast(to)
    assert t.dtype == to
    with np.errstate(all="ignore"):
        ref = arr.astype(to_numpy(to))
    np.testing.assert_array_equal(t.numpy(), ref)


def test_cast_of_views_and_methods() -> None:
    base = np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5
    t = Tensor(base)
    np.testing.assert_array_equal(t.T.flip(0).cast(dtypes.int32).numpy(), base.T[::-1].astype(np.int32))
    for method, d in (("float", dtypes.float32), ("half", dtypes.float16), ("int", dtypes.int32),
                      ("long", dtypes.int64), ("bool", dtypes.bool), ("double", dtypes.float64)):
        out = getattr(t, method)()
        assert out.dtype == d
        np.testing.assert_array_equal(out.numpy(), base.astype(to_numpy(d)))
    assert t.cast("int16").dtype == dtypes.int16
    assert t.cast(dtypes.float32) is t


BITCAST_CASES = [
    (dtypes.float32, dtypes.int32, [1.0, -2.5, 0.0, -0.0, 3.4e38]),
    (dtypes.int32, dtypes.float32, [0, 1065353216, -1082130432, 1]),
    (dtypes.float32, dtypes.uint32, [1.0, -1.0]),
    (dtypes.float16, dtypes.int16, [1.0, -2.0, 65504.0]),
    (dtypes.int16, dtypes.float16, [15360, -16384, 1]),
    (dtypes.uint8, dtypes.int8, [0, 127, 128, 255]),
    (dtypes.int8, dtypes.uint8, [-1, -128, 5]),
    (dtypes.float64, dtypes.int64, [1.0, -0.5]),
    (dtypes.int64, dtypes.float64, [4607182418800017408, 0]),
]


@pytest.mark.parametrize("frm,to,values", BITCAST_CASES, ids=lambda v: v.name if isinstance(v, DType) else "")
def test_bitcast(frm: DType, to: DType, values: list) -> None:
    arr = np.array(values, dtype=to_numpy(frm))
    t = Tensor(arr).bitcast(to)
    assert t.dtype == to
    try:
        got = t.numpy()
    except Exception as e:
        # known renderer bug: C-style kernels use __builtin_bit_cast, which gcc accepts only in C++
        if "__builtin_bit_cast" in str(e):
            pytest.xfail("the C renderer emits __builtin_bit_cast, which gcc rejects in C")
        raise
    np.testing.assert_array_equal(got, arr.view(to_numpy(to)))
    # and after arithmetic, so that the bitcast happens inside a kernel on computed values
    np.testing.assert_array_equal((Tensor(arr) + Tensor(np.zeros_like(arr))).bitcast(to).numpy(),
                                  (arr + np.zeros_like(arr)).view(to_numpy(to)))


def test_bitcast_size_mismatch() -> None:
    # another size rescales the last axis (tinygrad's rule); a last axis whose bytes do not divide evenly raises
    assert Tensor([1, 2], dtype=dtypes.int32).bitcast(dtypes.int64).tolist() == [1 + (2 << 32)]
    with pytest.raises(TypeError, match=r"4 bytes.*8 bytes.*3 x 4"):
        Tensor([1, 2, 3], dtype=dtypes.int32).bitcast(dtypes.int64)


def _np_bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest bfloat16 (ties to even), returned as float32."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32)


def test_bfloat16_round_trip() -> None:
    vals = np.array([1.0, -2.5, 3.14159265, 1e-3, 65504.0, 1.00390625, 1.01171875, 3e38, -0.0], dtype=np.float32)
    x = Tensor(vals)
    b = x.cast(dtypes.bfloat16)
    assert b.dtype == dtypes.bfloat16
    back = b.cast(dtypes.float32)
    assert back.dtype == dtypes.float32
    np.testing.assert_array_equal(back.numpy(), _np_bf16_round(vals))
    # bfloat16 data reads back as float32 values
    got = b.numpy()
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, _np_bf16_round(vals))
    # created directly, and computed on: every result is rounded to bfloat16
    c = Tensor([1.5, -2.25, 3.0], dtype=dtypes.bfloat16)
    assert c.dtype == dtypes.bfloat16
    np.testing.assert_array_equal(c.numpy(), [1.5, -2.25, 3.0])
    np.testing.assert_array_equal((c * 1.001).cast(dtypes.float32).numpy(),
                                  _np_bf16_round(np.array([1.5, -2.25, 3.0], dtype=np.float32) * np.float32(1.001)))


def test_bfloat16_bitcast() -> None:
    b = Tensor([1.0, -2.0], dtype=dtypes.bfloat16)
    np.testing.assert_array_equal(b.bitcast(dtypes.uint16).numpy(), [0x3F80, 0xC000])
    np.testing.assert_array_equal(Tensor(np.array([0x3F80, 0x4040], np.uint16)).bitcast(dtypes.bfloat16)
                                  .cast(dtypes.float32).numpy(), [1.0, 3.0])


# ---- integer and reduction semantics --------------------------------------------------------------------------

def test_int_floordiv_mod_follow_python() -> None:
    a, b = np.meshgrid(np.arange(-9, 10), np.array([v for v in range(-4, 5) if v != 0]))
    a, b = a.astype(np.int32).reshape(-1), b.astype(np.int32).reshape(-1)
    q, r = (Tensor(a) // Tensor(b)).tolist(), (Tensor(a) % Tensor(b)).tolist()
    assert q == [int(x) // int(y) for x, y in zip(a, b, strict=True)]
    assert r == [int(x) % int(y) for x, y in zip(a, b, strict=True)]
    # a divisor scalar or a dividend scalar, both signs
    assert (Tensor(a) // -3).tolist() == [int(x) // -3 for x in a]
    assert (Tensor(a) % -3).tolist() == [int(x) % -3 for x in a]
    assert (17 // Tensor(b)).tolist() == [17 // int(y) for y in b]
    assert (-17 % Tensor(b)).tolist() == [-17 % int(y) for y in b]


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.int64, dtypes.uint8])
def test_int_division_by_zero_gives_zero(dtype: DType) -> None:
    """Documented in Tensor.floordiv: an integer divided by zero gives 0 (PyTorch raises, numpy also gives 0)."""
    assert "divided by zero gives 0" in (Tensor.floordiv.__doc__ or "")
    x = Tensor(np.array([7, 0, 3, 100], dtype=to_numpy(dtype)))
    zero = Tensor(np.zeros(4, dtype=to_numpy(dtype)))
    assert (x // zero).tolist() == [0, 0, 0, 0]
    assert (x % zero).tolist() == [0, 0, 0, 0]
    assert (x // 0).tolist() == [0, 0, 0, 0]
    assert x.div(zero, rounding_mode="trunc").tolist() == [0, 0, 0, 0]


def test_float_division_by_zero() -> None:
    x = Tensor([1.0, -1.0, 0.0])
    out = (x / 0).numpy()
    assert out[0] == np.inf and out[1] == -np.inf and np.isnan(out[2])
    assert (Tensor([1, -2]) / 0).numpy().tolist() == [np.inf, -np.inf]


def test_int_min_divided_by_minus_one_wraps() -> None:
    lo = np.iinfo(np.int32).min
    assert (Tensor([lo], dtype=dtypes.int32) // Tensor([-1], dtype=dtypes.int32)).tolist() == [lo]


def test_true_division_of_ints_is_float() -> None:
    out = Tensor([1, 2, 3]) / Tensor([2, 2, 2])
    assert out.dtype == dtypes.float32 and out.tolist() == [0.5, 1.0, 1.5]


def test_sum_of_ints_takes_tinygrads_dtype_and_widens_only_where_32_bits_could_overflow() -> None:
    # tinygrad: bool and signed integers sum to int32, unsigned ones to uint32 (PyTorch: int64 for all)
    u = Tensor(np.full(10, 200, np.uint8)).sum()
    assert u.dtype == dtypes.uint32 and u.item() == 2000
    b = Tensor([True, True, False]).sum()
    assert b.dtype == dtypes.int32 and b.item() == 2
    assert Tensor([[1, 2], [3, 4]], dtype=dtypes.int8).sum(axis=0).dtype == dtypes.int32
    assert Tensor([1, 2], dtype=dtypes.int64).sum().dtype == dtypes.int64
    # a 32-bit input wraps in its own dtype, as tinygrad's; dtype= asks for a wider sum
    big = Tensor([2**30, 2**30, 2**30], dtype=dtypes.int32)
    assert big.sum().dtype == dtypes.int32 and big.sum(dtype=dtypes.int64).item() == 3 * 2**30
    # more booleans (or bytes) than 32 bits can count: the sum is 64-bit, not a wrapped int32 (through an expand)
    many = Tensor([True]).expand(2**31 + 3)
    assert many.sum().dtype == dtypes.int64
    assert Tensor.ones(1, dtype=dtypes.uint8).expand(2**25).sum().dtype == dtypes.uint64
    assert Tensor([True, False]).cumsum().dtype == dtypes.int32
    assert Tensor([2**20, 2**20, 2**20], dtype=dtypes.int32).prod(dtype=dtypes.int64).item() == 2**60


def test_mean_of_ints_is_float() -> None:
    m = Tensor([1, 2], dtype=dtypes.int32).mean()
    assert m.dtype == dtypes.float32 and m.item() == 1.5
    m = Tensor([[1, 2], [4, 6]], dtype=dtypes.int64).mean(axis=0)
    assert m.dtype.is_float and m.tolist() == [2.5, 4.0]
    assert Tensor([True, False, False, False]).mean().item() == 0.25


def test_empty_reductions() -> None:
    e = Tensor.zeros(0, 3)
    assert e.sum().item() == 0 and e.sum(axis=0).tolist() == [0, 0, 0]
    assert e.prod(axis=0).tolist() == [1, 1, 1]
    assert np.isnan(e.mean().item())
    assert e.any().item() is False and e.all().item() is True
    assert e.max(axis=1).shape == (0,)


def test_where_promotion() -> None:
    c = Tensor([True, False])
    out = c.where(Tensor([1, 2], dtype=dtypes.int32), 0.5)
    assert out.dtype == dtypes.float32 and out.tolist() == [1.0, 0.5]
    out = c.where(3, Tensor([1, 2], dtype=dtypes.int64))
    assert out.dtype == dtypes.int64 and out.tolist() == [3, 2]
    out = c.where(1, 0)
    assert out.dtype == dtypes.int32 and out.tolist() == [1, 0]


def test_nan_and_inf_propagate() -> None:
    x = Tensor([np.nan, np.inf, -np.inf, 1.0])
    np.testing.assert_array_equal(x.maximum(0).numpy(), [np.nan, np.inf, 0, 1])
    assert np.isnan(x.max().item())
    assert np.isnan(x.sum().item())
    np.testing.assert_array_equal(x.relu().numpy()[1:], [np.inf, 0, 1])
    assert (x != x).tolist() == [True, False, False, False]


def test_inplace_operators_assign() -> None:
    x = Tensor([1.0, 2.0])
    x += 1
    x *= Tensor([2.0, 3.0])
    x -= 0.5
    x /= 2
    assert x.tolist() == [1.75, 4.25]
    with pytest.raises(ValueError, match=r"\(3,\).*\(2,\)"):
        x.assign(Tensor([1.0, 2.0, 3.0]))


# ---- errors that bad input raises -------------------------------------------------------------------------------

BAD_INPUTS = [
    ("broadcast", lambda: Tensor.ones(2, 3) + Tensor.ones(4, 3), ValueError, [r"\(2, 3\)", r"\(4, 3\)"]),
    ("broadcast_3d", lambda: Tensor.ones(2, 1, 3) * Tensor.ones(5, 2), ValueError, [r"\(2, 1, 3\)", r"\(5, 2\)"]),
    ("where_broadcast", lambda: Tensor.ones(2, 3).where(Tensor.ones(3, 2), 0.0), ValueError, [r"\(3, 2\)"]),
    ("reshape_size", lambda: Tensor.ones(2, 3).reshape(4, 2), ValueError, [r"\(2, 3\)", r"\(4, 2\)"]),
    ("reshape_infer", lambda: Tensor.ones(2, 3).reshape(-1, 4), ValueError, [r"\(2, 3\)", r"4"]),
    ("reshape_two_infer", lambda: Tensor.ones(2, 3).reshape(-1, -1), ValueError, [r"-1"]),
    ("reshape_negative", lambda: Tensor.ones(2, 3).reshape(-2, -3), ValueError, [r"-2"]),
    ("matmul_inner", lambda: Tensor.ones(2, 3) @ Tensor.ones(2, 3), ValueError, [r"\(2, 3\)", r"3", r"2"]),
    ("matmul_1d", lambda: Tensor.ones(2) @ Tensor.ones(3, 2), ValueError, [r"\(2,\)", r"\(3, 2\)"]),
    ("matmul_batch", lambda: Tensor.ones(2, 3, 4) @ Tensor.ones(3, 4, 5), ValueError,
     [r"\(2, 3, 4\)", r"\(3, 4, 5\)"]),
    ("matmul_scalar", lambda: Tensor(2.0) @ Tensor.ones(2), ValueError, [r"\(\)"]),
    ("unknown_device", lambda: Tensor.ones(2, device="NOPE"), ValueError, ["NOPE", "available"]),
    ("unknown_device_number", lambda: Tensor([1], device=f"{Device.DEFAULT}:x"), ValueError, [":x"]),
    ("axis_sum", lambda: Tensor.ones(2, 3).sum(axis=2), IndexError, [r"axis 2", r"\(2, 3\)"]),
    ("axis_max_negative", lambda: Tensor.ones(2, 3).max(axis=-3), IndexError, [r"-3", r"\(2, 3\)"]),
    ("axis_mean_dim", lambda: Tensor.ones(2, 3).mean(dim=5), IndexError, [r"5"]),
    ("axis_transpose", lambda: Tensor.ones(2, 3).transpose(0, 2), IndexError, [r"2"]),
    ("axis_unsqueeze", lambda: Tensor.ones(2, 3).unsqueeze(4), IndexError, [r"4"]),
    ("axis_squeeze", lambda: Tensor.ones(2, 3).squeeze(3), IndexError, [r"3"]),
    ("axis_flip", lambda: Tensor.ones(2, 3).flip(2), IndexError, [r"2"]),
    ("axis_float", lambda: Tensor.ones(2, 3).sum(axis=1.0), TypeError, [r"1\.0"]),
    ("permute", lambda: Tensor.ones(2, 3).permute(0, 0), ValueError, [r"\(0, 0\)"]),
    ("expand", lambda: Tensor.ones(2, 3).expand(4, 3), ValueError, [r"\(2, 3\)", r"\(4, 3\)"]),
    ("pad_length", lambda: Tensor.ones(2, 3).pad(((1, 1),)), ValueError, [r"\(\(1, 1\),\)"]),
    ("pad_odd_flat", lambda: Tensor.ones(2, 3).pad((1, 2, 3)), ValueError, [r"\(1, 2, 3\)"]),
    ("shrink", lambda: Tensor.ones(2, 3).shrink(((0, 3), (0, 1))), ValueError, [r"\(2, 3\)"]),
    ("index_float", lambda: Tensor.ones(2, 3)[1.0], IndexError, [r"float", r"1\.0"]),
    ("index_str", lambda: Tensor.ones(2, 3)["a"], IndexError, [r"'a'"]),
    ("index_out_of_range", lambda: Tensor.ones(2, 3)[2], IndexError, [r"index 2", r"size 2"]),
    ("index_out_of_range_neg", lambda: Tensor.ones(2, 3)[0, -4], IndexError, [r"-4", r"size 3"]),
    ("index_too_many", lambda: Tensor.ones(2, 3)[0, 0, 0], IndexError, [r"\(2, 3\)"]),
    ("index_two_ellipsis", lambda: Tensor.ones(2, 3)[..., ...], IndexError, [r"ellipsis"]),
    ("slice_step_zero", lambda: Tensor.ones(2, 3)[::0], ValueError, [r"step"]),
    ("negative_shape", lambda: Tensor.zeros(2, -1), ValueError, [r"-1"]),
    ("shape_float", lambda: Tensor.ones(2.0, 3), TypeError, [r"2\.0"]),
    ("ragged_list", lambda: Tensor([[1, 2], [3]]), ValueError, [r"\[\[1, 2\], \[3\]\]"]),
    ("bad_data_type", lambda: Tensor(object()), TypeError, [r"object"]),
    ("unknown_dtype", lambda: Tensor([1]).cast("float7"), TypeError, [r"float7"]),
    ("bitwise_on_float", lambda: Tensor([1.0]) & Tensor([1.0]), TypeError, [r"float32"]),
    ("sub_bools", lambda: Tensor([True]) - Tensor([False]), TypeError, [r"bool"]),
    ("neg_bool", lambda: -Tensor([True]), TypeError, [r"bool"]),
    ("requires_grad_int", lambda: Tensor([1, 2], requires_grad=True), RuntimeError, [r"int32"]),
    ("requires_grad_int_method", lambda: Tensor([1, 2]).requires_grad_(), RuntimeError, [r"int32"]),
    ("rounding_mode", lambda: Tensor([1.0]).div(2, rounding_mode="round"), ValueError, [r"'round'"]),
]


@pytest.mark.parametrize("fn,exc,patterns", [pytest.param(f, e, p, id=n) for n, f, e, p in BAD_INPUTS])
def test_bad_input(fn: Any, exc: type[Exception], patterns: list[str]) -> None:
    with pytest.raises(exc) as info:
        fn()
    msg = str(info.value)
    for p in patterns:
        assert re.search(p, msg), f"message {msg!r} should mention {p!r}"


def test_unknown_dev_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEV", "NOPE")
    Device.reset_default()
    try:
        with pytest.raises(ValueError, match="NOPE"):
            Device.DEFAULT  # noqa: B018
        with pytest.raises(ValueError, match="NOPE"):
            Tensor([1.0])
    finally:
        monkeypatch.undo()
        Device.reset_default()
    assert Tensor([1.0]).device == Device.DEFAULT
