"""tinygrad's deviceless tensors: a graph of constants given to the constructor belongs to no device until it meets
one (README, "deliberate differences" for what stays on the default device)."""

import pickle

import numpy as np
import pytest
from tinygrad import Device, Tensor, dtypes
from tinygrad.uop.ops import UOp


def const(value: float = 2.0) -> Tensor:
    return Tensor(UOp.const(value).cast(dtypes.float))


def test_device_is_none_and_repr_says_so():
    t = const()
    assert t.device is None and t.uop.device is None
    assert "<UOp None" in repr(t) and "on None" in repr(t)


def test_realize_is_a_no_op_and_reading_computes_on_the_default_device():
    t = const()
    node = t.uop
    assert t.realize() is t and t.uop is node and t.device is None
    assert t.schedule() == []
    assert t.numpy() == 2.0 and t.item() == 2.0 and t.tolist() == 2.0
    assert t.device is None  # reading does not move it


def test_movement_and_elementwise_stay_deviceless():
    t = const(3.0)
    for out in (t + 1, t * t, t.exp(), t.reshape(1).expand(4), t.cast(dtypes.int32), t.contiguous()):
        assert out.device is None
    np.testing.assert_allclose((t.reshape(1).expand(4) * t).numpy(), [9.0] * 4)


@pytest.mark.parametrize("reverse", [False, True])
def test_meeting_a_tensor_joins_its_device(reverse):
    a = Tensor([1.0, 2.0, 3.0])
    t = const(2.0)
    out = (t * a) if reverse else (a * t)
    assert out.device == a.device
    np.testing.assert_allclose(out.numpy(), [2.0, 4.0, 6.0])
    assert Tensor.cat(t.reshape(1), a).device == a.device
    assert Tensor.stack(a, t.expand(3)).device == a.device
    picked = Tensor([True, False, True]).where(t, a)
    assert picked.device == a.device
    np.testing.assert_allclose(picked.numpy(), [2.0, 2.0, 2.0])


def test_clone_and_to_give_a_device():
    t = const()
    c = t.clone()
    assert c.device == Device.DEFAULT and c.numpy() == 2.0 and c.uop.has_buffer_identity()
    assert t.clone(device="CPU").device == "CPU"
    assert t.to("CPU").device == "CPU" and t.to("CPU").numpy() == 2.0


def test_written_into_a_tensor_and_used_as_index():
    x = Tensor.zeros(3).contiguous().realize()
    x[1] = const(5.0)
    np.testing.assert_allclose(x.numpy(), [0.0, 5.0, 0.0])
    x.assign(const(7.0).reshape(1).expand(3))
    np.testing.assert_allclose(x.numpy(), [7.0] * 3)
    idx = Tensor(UOp.const(1).cast(dtypes.int32))
    assert idx.device is None
    assert Tensor([10, 20, 30])[idx].item() == 20
    np.testing.assert_allclose(Tensor.zeros(3).scatter(0, Tensor([2]), const(4.0).reshape(1)).numpy(), [0, 0, 4])


def test_realized_together_with_others():
    a = Tensor([1.0, 2.0]) + 1
    t = const()
    assert t.realize(a) is t
    assert t.device is None and a.uop.is_realized
    np.testing.assert_allclose(a.numpy(), [2.0, 3.0])


def test_gradient_through_a_deviceless_constant():
    w = Tensor([3.0, 4.0], requires_grad=True)
    (w * const(2.0)).sum().backward()
    assert w.grad is not None
    np.testing.assert_allclose(w.grad.numpy(), [2.0, 2.0])


def test_pickle_keeps_it_deviceless():
    back = pickle.loads(pickle.dumps(const(6.0)))
    assert back.device is None and back.numpy() == 6.0


def test_what_stays_on_the_default_device():
    # the creation functions and Python numbers are placed (README: tinygrad 0.14.0 leaves some on none)
    for t in (Tensor(3.0), Tensor.zeros(2), Tensor.full((2,), 1.5), Tensor.arange(3), Tensor.eye(2),
              Tensor.linspace(0, 1, 3)):
        assert t.device == Device.DEFAULT
    # a graph with a buffer or a bound variable is not deviceless
    assert Tensor(Tensor([1.0]).uop + 1).device == Device.DEFAULT
    from tinygrad import Variable
    assert Tensor(Variable("n", 1, 10).bind(3)).device == Device.DEFAULT


def test_uop_device_follows_copies_and_buffers():
    a = Tensor([1.0, 2.0]).realize()
    assert a.uop.device == a.device
    assert (a.uop + 1).device == a.device
    assert UOp.const(1.0).device is None
