"""tinygrad's `Tensor.linear_with_vars`, `run_linear`, `compile_linear`: the calls a realize would run, run later."""

import numpy as np
import pytest
from tinygrad import Tensor, Variable, dtypes
from tinygrad.engine.realize import compile_linear, run_linear
from tinygrad.uop.ops import Ops, UOp


def kernels(linear) -> int:
    return sum(1 for call in linear.src if call.src[0].op is Ops.SINK)


def test_calls_then_run():
    a = Tensor([1.0, 2.0, 3.0])
    t = (a * 2 + 1).sum()
    linear, var_vals = t.linear_with_vars()
    assert var_vals == {} and kernels(linear) >= 1
    for call in linear.src:
        assert call.device == a.device and call.src[0] is call.ast and len(call.src) == 1 + len(call.bufs)
    assert t.uop.op is not Ops.BUFFER  # nothing ran yet: the tensor keeps its graph
    assert compile_linear(linear) is linear
    run_linear(linear, var_vals)
    assert t.item() == 15.0


def test_not_run_changes_nothing():
    t = Tensor([1, 2]) + 5
    t.linear_with_vars()
    assert t.tolist() == [6, 7]  # read without running the linear: computed as usual


def test_several_tensors_in_one_linear():
    a = Tensor([1.0, 2.0])
    x, y = a + 1, a * 3
    linear, var_vals = x.linear_with_vars(y)
    run_linear(linear, var_vals)
    assert x.uop.base.op is Ops.BUFFER and y.uop.base.op is Ops.BUFFER
    np.testing.assert_allclose(x.numpy(), [2.0, 3.0])
    np.testing.assert_allclose(y.numpy(), [3.0, 6.0])


def test_runs_once():
    linear, var_vals = (Tensor([1]) + 1).linear_with_vars()
    run_linear(linear, var_vals)
    with pytest.raises(RuntimeError, match="has run already"):
        run_linear(linear, var_vals)


def test_variables_travel_with_the_calls():
    n = Variable("n", 1, 8)
    base = Tensor.arange(8).float().contiguous().realize()
    t = base.shrink(((0, n.bind(3)),)).sum()
    linear, var_vals = t.linear_with_vars()
    assert var_vals == {"n": 3}
    with pytest.raises(ValueError, match="built for"):
        run_linear(linear, {"n": 5})
    run_linear(linear, var_vals)
    assert t.item() == 3.0  # 0 + 1 + 2


def test_realized_or_deviceless_tensors_need_no_call():
    done = Tensor([1.0, 2.0]).realize()
    assert len(done.linear_with_vars()[0].src) == 0
    linear, var_vals = Tensor(UOp.const(2.0).cast(dtypes.float)).linear_with_vars()
    assert linear.src == () and var_vals == {}
    run_linear(linear, var_vals)
