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


def test_a_captured_jit_reads_as_a_linear():
    from tinygrad import Device, TinyJit
    from tinygrad.engine.jit import graph_class

    @TinyJit
    def step(a: Tensor, b: Tensor) -> Tensor:
        c = (a + b).realize()
        return (c * 2).realize()

    for i in range(3):
        out = step(Tensor([float(i), 1.0]).realize(), Tensor([1.0, 1.0]).realize())
    assert out.tolist() == [6.0, 4.0]
    assert step.captured is not None
    linear = step.captured.linear
    assert kernels(linear) == len(linear.src) == step.captured_kernels == 2  # the replay's two launches, in order
    assert [call.src[0].op for call in linear.src] == [Ops.SINK, Ops.SINK]
    with pytest.raises(RuntimeError, match="has run already"):
        run_linear(linear)  # a record of what replays, not work to run
    assert graph_class(Device[Device.DEFAULT]) is None  # replays batch through run_together, not a graph class


def test_a_pruned_capture_leaves_the_pruned_launches_out():
    from tinygrad import TinyJit

    weights = Tensor([1.0, 2.0, 3.0]).realize()

    def f(x: Tensor) -> Tensor:
        return (weights * 2).contiguous() + x  # weights * 2 reads no input: computed once, at the capture

    pruned, full = TinyJit(f, prune=True), TinyJit(f)
    for i in range(3):
        x = Tensor([float(i)] * 3).realize()
        np.testing.assert_equal(pruned(x).numpy(), full(x).numpy())
    assert pruned.captured is not None and full.captured is not None
    assert len(pruned.captured.linear.src) == 1 and len(full.captured.linear.src) == 2
