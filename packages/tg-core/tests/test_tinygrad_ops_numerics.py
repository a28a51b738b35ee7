"""Numerics where tinygrad's own op tests pin down behaviour: pow's values and derivatives at 0, +-inf and negative
bases, normalize for every p, integer interpolation, arange's dtype and range checks, max_unpool2d of infinite
values, and the arguments that tinygrad refuses (as PyTorch does). Values and gradients are compared with PyTorch."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from tinygrad import Tensor, dtypes

torch = pytest.importorskip("torch")
F = torch.nn.functional

SPECIAL = [-math.inf, -2.5, -2.0, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, 3.0, math.inf, math.nan]


def _grads(fn_tiny: Callable[..., Tensor], fn_torch: Callable[..., Any], *vals: np.ndarray) -> None:
    """fn's value and the gradient of its sum for every argument, against PyTorch's (NaN where PyTorch's is NaN)."""
    tiny_args = [Tensor(v, requires_grad=True) for v in vals]
    torch_args = [torch.tensor(v, requires_grad=True) for v in vals]
    out, ref = fn_tiny(*tiny_args), fn_torch(*torch_args)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    out.sum().backward()
    ref.sum().backward()
    for t, r in zip(tiny_args, torch_args, strict=True):
        assert t.grad is not None and r.grad is not None
        np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), rtol=1e-5, atol=1e-6)


# ---- pow ----

def test_pow_tensor_tensor_special_values() -> None:
    base, exp = np.meshgrid(np.array(SPECIAL, np.float32), np.array(SPECIAL, np.float32))
    _grads(lambda b, e: b ** e, lambda b, e: b ** e, base.ravel(), exp.ravel())


@pytest.mark.parametrize("c", [-2.0, -1.0, -0.3, 0.0, 0.3, 0.5, 1.0, 1.1, 2.0, 3.0, 3.3, -5.5])
def test_pow_const_exponent_special_bases(c: float) -> None:
    _grads(lambda b: b ** c, lambda b: b ** c, np.array(SPECIAL, np.float32))


@pytest.mark.parametrize("c", [0.0, 0.7, 1.0, 2.0, -2.0, -5.5])
def test_pow_const_base(c: float) -> None:
    _grads(lambda e: c ** e, lambda e: c ** e, np.array(SPECIAL, np.float32))


def test_pow_negative_base_random() -> None:
    # a negative base to a non-integer power has no real value: both the value and its gradients are NaN
    rng = np.random.default_rng(0)
    _grads(lambda b, e: b ** e, lambda b, e: b ** e, rng.uniform(-3, 3, 64).astype(np.float32),
           np.concatenate([rng.uniform(-3, 3, 32), rng.integers(-3, 4, 32)]).astype(np.float32))


def test_pow_gradient_of_gradient() -> None:
    # the derivative is a pow itself, with its own rule: the second derivative of x ** 3 is 6x
    x = Tensor([-2.0, 0.0, 1.5], requires_grad=True)
    (dx,) = (x ** 3).sum().gradient(x)
    (ddx,) = dx.sum().gradient(x)
    np.testing.assert_allclose(ddx.numpy(), [-12.0, 0.0, 9.0])


def test_pow_half_keeps_dtype_and_gradient() -> None:
    x = Tensor([0.0, 2.0, -1.0], dtype=dtypes.float16, requires_grad=True)
    out = x ** Tensor([0.0, 0.5, 2.0], dtype=dtypes.float16)
    assert out.dtype == dtypes.float16
    out.sum().backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy().astype(np.float32), [0.0, 0.35355339, -2.0], rtol=1e-3)


# ---- normalize ----

@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 2.0, 3.0, -1.0, -2.5, math.inf, -math.inf])
@pytest.mark.parametrize("dim", [0, 1])
def test_normalize_every_p(p: float, dim: int) -> None:
    x = np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32)
    x[0, 1] = 0.0  # a zero element: the derivative of |x|^p there is taken as 0 for p < 1
    x[:, 3] = 0.0  # a zero vector along dim 0
    tiny = Tensor(x, requires_grad=True)
    ref = torch.tensor(x, requires_grad=True)
    weights = np.random.default_rng(2).standard_normal((4, 5)).astype(np.float32)
    out, expected = tiny.normalize(p=p, dim=dim), F.normalize(ref, p=p, dim=dim)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-5, atol=1e-6)
    (out * Tensor(weights)).sum().backward()
    (expected * torch.tensor(weights)).sum().backward()
    assert tiny.grad is not None and ref.grad is not None
    np.testing.assert_allclose(tiny.grad.numpy(), ref.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_normalize_rejects_nan_p() -> None:
    with pytest.raises(ValueError):
        Tensor.ones(2, 3).normalize(p=math.nan)


# ---- integer interpolation ----

@pytest.mark.parametrize("mode,torch_mode", [("linear", "bilinear"), ("bilinear", "bilinear"), ("bicubic", "bicubic")])
@pytest.mark.parametrize("shape,size", [((2, 3, 64, 64), (10, 10)), ((1, 2, 7, 9), (10, 4)), ((1, 8, 5, 5), (13, 17))])
@pytest.mark.parametrize("align_corners", [False, True])
def test_interpolate_uint8_matches_torch_exactly(mode: str, torch_mode: str, shape: tuple[int, ...],
                                                 size: tuple[int, int], align_corners: bool) -> None:
    x = np.random.default_rng(3).integers(0, 256, shape).astype(np.uint8)
    out = Tensor(x).interpolate(size=size, mode=mode, align_corners=align_corners)
    expected = F.interpolate(torch.tensor(x), size=size, mode=torch_mode, align_corners=align_corners).numpy()
    assert out.dtype == dtypes.uint8
    np.testing.assert_array_equal(out.numpy(), expected)


def test_interpolate_other_ints_keep_dtype() -> None:
    # PyTorch resamples only uint8; wider integers follow the same rounding (here within uint8's range, so the
    # values are PyTorch's uint8 ones) and keep their dtype
    x = np.random.default_rng(4).integers(0, 256, (1, 2, 6, 6))
    expected = F.interpolate(torch.tensor(x.astype(np.uint8)), size=(4, 9), mode="bilinear").numpy()
    for dt, npdt in ((dtypes.int16, np.int16), (dtypes.int32, np.int32)):
        out = Tensor(x.astype(npdt)).interpolate(size=(4, 9), mode="linear")
        assert out.dtype == dt
        np.testing.assert_array_equal(out.numpy(), expected)


def test_interpolate_float_unchanged_by_integer_path() -> None:
    x = np.random.default_rng(5).standard_normal((1, 2, 6, 7)).astype(np.float32)
    out = Tensor(x).interpolate(size=(4, 9), mode="linear").numpy()
    expected = F.interpolate(torch.tensor(x), size=(4, 9), mode="bilinear").numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


# ---- creation ----

def test_arange_int_dtypes() -> None:
    assert Tensor.arange(10).dtype == dtypes.int32
    big = Tensor.arange(2**31, 2**31 + 3)
    assert big.dtype == dtypes.int64 and big.tolist() == [2**31, 2**31 + 1, 2**31 + 2]
    assert Tensor.arange(-2**31 - 2, -2**31 + 1).dtype == dtypes.int64
    assert Tensor.arange(-128, 128, dtype=dtypes.int8).tolist() == list(range(-128, 128))
    assert Tensor.arange(127, -129, -1, dtype=dtypes.int8).tolist() == list(range(127, -129, -1))
    assert Tensor.arange(300, 0, dtype=dtypes.int8).tolist() == []  # empty: nothing to overflow


@pytest.mark.parametrize("args,dtype", [((2**33,), dtypes.int32), ((129,), dtypes.int8), ((-129, 128), dtypes.int8),
                                        ((128, 0, -1), dtypes.int8), ((127, -130, -1), dtypes.int8),
                                        ((-1, 3), dtypes.uint8)])
def test_arange_overflow_raises(args: tuple[int, ...], dtype: Any) -> None:
    with pytest.raises(OverflowError):
        Tensor.arange(*args, dtype=dtype)


def test_linspace_refuses_bool() -> None:
    with pytest.raises((RuntimeError, ValueError)):
        torch.linspace(5, 10, 3, dtype=torch.bool)
    with pytest.raises(ValueError):
        Tensor.linspace(5, 10, 3, dtype=dtypes.bool)


# ---- max_unpool2d ----

def test_max_unpool2d_infinite_values() -> None:
    data = [[[[math.inf, -math.inf, 1.0, -2.0], [1.0, 2.0, 3.0, math.inf]]]]
    x = Tensor(data)
    values, indices = x.max_pool2d(kernel_size=(2, 2), return_indices=True)
    tv, ti = F.max_pool2d(torch.tensor(data), kernel_size=(2, 2), return_indices=True)
    v = values.detach().requires_grad_()
    tvv = tv.detach().requires_grad_()
    out, expected = v.max_unpool2d(indices, kernel_size=(2, 2)), F.max_unpool2d(tvv, ti, kernel_size=(2, 2))
    np.testing.assert_array_equal(out.numpy(), expected.detach().numpy())  # inf stays inf: no NaN from inf - inf
    w = np.arange(8, dtype=np.float32).reshape(1, 1, 2, 4)
    (out * Tensor(w)).sum().backward()
    (expected * torch.tensor(w)).sum().backward()
    assert v.grad is not None and tvv.grad is not None
    np.testing.assert_array_equal(v.grad.numpy(), tvv.grad.numpy())


def test_max_unpool2d_overlapping_windows_gradient() -> None:
    x = np.random.default_rng(6).standard_normal((2, 3, 6, 6)).astype(np.float32)
    values, indices = Tensor(x).max_pool2d(kernel_size=(3, 3), stride=(1, 1), return_indices=True)
    tv, ti = F.max_pool2d(torch.tensor(x), 3, 1, return_indices=True)
    v, tvv = values.detach().requires_grad_(), tv.detach().requires_grad_()
    out = v.max_unpool2d(indices, kernel_size=(3, 3), stride=(1, 1))
    expected = F.max_unpool2d(tvv, ti, 3, 1)
    np.testing.assert_array_equal(out.numpy(), expected.detach().numpy())
    w = np.random.default_rng(7).standard_normal(expected.shape).astype(np.float32)
    (out * Tensor(w)).sum().backward()
    (expected * torch.tensor(w)).sum().backward()
    assert v.grad is not None and tvv.grad is not None
    np.testing.assert_allclose(v.grad.numpy(), tvv.grad.numpy(), rtol=1e-6)


# ---- arguments refused ----

def test_one_hot_num_classes() -> None:
    out = Tensor([1, 2, 4]).one_hot(6)
    assert out.dtype == dtypes.int32
    np.testing.assert_array_equal(out.numpy(), F.one_hot(torch.tensor([1, 2, 4]), 6).numpy())
    assert Tensor([0, 2]).one_hot().tolist() == [[1, 0, 0], [0, 0, 1]]  # left out: inferred
    with pytest.raises(ValueError):
        Tensor([1, 2]).one_hot(-1)  # tinygrad's rule; PyTorch reads -1 as "infer"


def test_clip_needs_a_bound() -> None:
    with pytest.raises(RuntimeError):
        torch.zeros(2).clip(None, None)
    with pytest.raises(RuntimeError):
        Tensor.zeros(2).clip(None, None)
    assert Tensor([-1.0, 2.0]).clip(None, 0).tolist() == [-1.0, 0.0]


def test_div_unknown_rounding_mode() -> None:
    with pytest.raises(RuntimeError):
        torch.tensor([5]).div(torch.tensor([2]), rounding_mode="typo")
    with pytest.raises(RuntimeError):
        Tensor([5]).div(Tensor([2]), rounding_mode="typo")
    with pytest.raises(ValueError):  # still the ValueError it was
        Tensor([5]).div(2, rounding_mode="typo")


@pytest.mark.parametrize("target", [np.zeros((4, 1), np.float32), np.zeros((4, 1), np.int64)],
                         ids=["float", "int"])
def test_cross_entropy_target_of_wrong_shape(target: np.ndarray) -> None:
    with pytest.raises(RuntimeError):
        F.cross_entropy(torch.zeros(4, 3), torch.tensor(target))
    with pytest.raises(RuntimeError):
        Tensor.zeros(4, 3).cross_entropy(Tensor(target))
    with pytest.raises(ValueError):
        Tensor.zeros(4, 3).cross_entropy(Tensor(target))
