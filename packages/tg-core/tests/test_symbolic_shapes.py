"""Symbolic shapes: a Variable bound to a value stands for a size, and one compiled kernel serves every value."""

from __future__ import annotations

import numpy as np
import pytest
from tinygrad import Device, Tensor, Variable


def _compiled_kernels() -> int:
    dev = Device[Device.DEFAULT]
    runners = getattr(dev, "_runners", None)
    if runners is None:
        pytest.skip(f"{Device.DEFAULT} does not expose its compiled kernels")
    return len(runners)


def test_one_kernel_serves_every_value_of_the_variable() -> None:
    x_np = np.random.default_rng(0).standard_normal((16, 5)).astype(np.float32)
    x = Tensor(x_np)
    n = Variable("n", 1, 16)
    (x[:n.bind(2)] * 3 + 1).sum(axis=1).numpy()  # compile once
    before = _compiled_kernels()
    for value in (3, 7, 16, 1):
        got = (x[:n.bind(value)] * 3 + 1).sum(axis=1).numpy()
        np.testing.assert_allclose(got, (x_np[:value] * 3 + 1).sum(axis=1), rtol=1e-5, atol=1e-5)
        assert got.shape == (value,)
    assert _compiled_kernels() == before, "a new value of the Variable compiled a new kernel"


def test_symbolic_tensors_combine_elementwise_and_reduce_over_the_symbolic_axis() -> None:
    rng = np.random.default_rng(1)
    a_np, b_np = rng.standard_normal((10, 3)).astype(np.float32), rng.standard_normal((10, 3)).astype(np.float32)
    n = Variable("rows", 1, 10)
    for value in (4, 9):
        vb = n.bind(value)
        a, b = Tensor(a_np).shrink(((0, vb), None)), Tensor(b_np).shrink(((0, vb), None))
        assert a.shape[0] is vb and a.max_shape == (10, 3)
        np.testing.assert_allclose((a * b).sum(axis=0).numpy(), (a_np[:value] * b_np[:value]).sum(0), rtol=1e-5)
        np.testing.assert_allclose(a.mean(axis=0).numpy(), a_np[:value].mean(0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(a.max().numpy(), a_np[:value].max())


def test_a_realized_symbolic_tensor_keeps_its_symbolic_shape() -> None:
    x_np = np.arange(24, dtype=np.float32).reshape(8, 3)
    n = Variable("k", 1, 8)
    y = (Tensor(x_np)[:n.bind(5)] * 2).realize()
    np.testing.assert_array_equal((y + 1).numpy(), x_np[:5] * 2 + 1)
    np.testing.assert_array_equal(y.unsqueeze(0).numpy(), (x_np[:5] * 2)[None])


def test_variables_refuse_bad_values_and_unsupported_uses() -> None:
    n = Variable("m", 2, 6)
    with pytest.raises(ValueError, match=r"\[2, 6\]"):
        n.bind(7)
    with pytest.raises(ValueError, match="identifier"):
        Variable("not a name", 0, 3)
    x = Tensor(np.zeros((4, 3), np.float32))
    assert x[:n.bind(3)].shape[1] == 3  # n could reach 6 > 4, but bounds are checked at the bound value (tinygrad's)
    with pytest.raises(ValueError, match="outside shape"):
        x[:Variable("m", 2, 8).bind(5)]
    y = Tensor(np.zeros((6, 3), np.float32))[:n.bind(3)]
    with pytest.raises(ValueError, match="size-1 dimensions"):
        y.reshape(3, 3)
    with pytest.raises(IndexError, match="plain slices"):
        y[::2, :n.bind(2)]
