"""TinyJit writes a state tensor's new value into the state's buffer from the kernel that computes it when that is
safe (engine/jit_in_place.py), and keeps the write-back copy when the kernel reads the old value anywhere but where
it stores: every replay must equal the eager run either way."""

from __future__ import annotations

import pickle
from collections.abc import Callable

import numpy as np
import pytest
from tinygrad import GlobalCounters, Tensor, TinyJit, nn
from tinygrad.engine.jit_capture import Capture
from tinygrad.engine.schedule import copy_kernel_ast


def copies(cap: Capture | None) -> int:
    """The launches that copy a state's new value back into its buffer."""
    assert cap is not None
    state = {id(b.storage) for slot in cap.state for b in slot.buffers}
    return sum(1 for r in cap.recorded if r.runner is not None and id(r.item.bufs[0].storage) in state and
               r.item.ast is copy_kernel_ast(r.item.bufs[0].dtype, r.item.bufs[0].size))


def test_counter_updated_in_place_frees_nothing() -> None:
    """tinygrad's test_updated_not_freed: `x += y` in a TinyJit is one launch into x's memory, so freeing the
    capture's intermediates frees no memory, and x goes on counting after it."""
    x = Tensor([1]).realize()

    @TinyJit
    def add(y: Tensor) -> Tensor:
        nonlocal x
        x += y
        return x

    for _ in range(5):
        add(Tensor([1]))
    assert x.item() == 6
    assert add.captured is not None and len(add.captured.recorded) == 1 and copies(add.captured) == 0
    before = GlobalCounters.mem_used
    assert add.captured.free_intermediates() == 0
    assert GlobalCounters.mem_used == before
    add(Tensor([2]))
    assert x.item() == 8


def test_adam_step_in_place_equals_eager() -> None:
    Tensor.manual_seed(3)
    eager_model, jit_model = nn.Linear(7, 5), nn.Linear(7, 5)
    for p, q in zip(nn.state.get_parameters(eager_model), nn.state.get_parameters(jit_model)):
        q.assign(p.numpy()).realize()
    eager_opt = nn.optim.Adam(nn.state.get_parameters(eager_model), lr=0.01)
    jit_opt = nn.optim.Adam(nn.state.get_parameters(jit_model), lr=0.01)

    def step(model: nn.Linear, opt: nn.optim.Optimizer, x: Tensor) -> Tensor:
        with Tensor.train():
            opt.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            return loss.realize()

    jit_step = TinyJit(lambda x: step(jit_model, jit_opt, x))
    rng = np.random.default_rng(0)
    for _ in range(6):
        x = rng.standard_normal((4, 7)).astype(np.float32)
        want, got = step(eager_model, eager_opt, Tensor(x)), jit_step(Tensor(x))
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
        np.testing.assert_allclose(jit_model.weight.numpy(), eager_model.weight.numpy(), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(jit_model.bias.numpy(), eager_model.bias.numpy(), rtol=1e-6, atol=1e-7)
    assert copies(jit_step.captured) == 0  # the weights, moments and step counters are all updated in place


#: updates that read the old value where they do not store it: each keeps its write-back copy
HAZARDS: dict[str, Callable[[Tensor], Tensor]] = {
    "reduction": lambda s: (s.reshape(4, 1) * Tensor.ones(4, 4).contiguous()).sum(0) + s,
    "flip": lambda s: s.flip(0) + 1,
    "shift": lambda s: s.pad(((1, 0),))[:-1] * 2 + s,
    "permute": lambda s: (s.reshape(2, 2).T.reshape(4) + 0.5),
    "cumsum": lambda s: s.cumsum(0) * 0.5,
}


@pytest.mark.parametrize("name", sorted(HAZARDS))
def test_updates_reading_other_elements_keep_their_copy(name: str) -> None:
    update = HAZARDS[name]
    state = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
    want = np.array([1.0, 2.0, 3.0, 4.0], np.float32)

    @TinyJit
    def step() -> Tensor:
        state.assign(update(state))
        return state.sum()

    for _ in range(5):
        total = step()
        want = update(Tensor(want)).numpy()
        np.testing.assert_allclose(state.numpy(), want, rtol=1e-6)
        np.testing.assert_allclose(total.numpy(), want.sum(), rtol=1e-6)
    assert copies(step.captured) == 1


def test_old_value_read_after_the_update() -> None:
    """The call's output reads the old value, lazily, so its kernel may run after the update's: the update must not
    overwrite what it reads."""
    x = Tensor([1.0, 2.0, 3.0]).realize()

    @TinyJit
    def step() -> Tensor:
        before = x * 10
        x.assign(x + 1)
        return before - x

    xs = np.array([1.0, 2.0, 3.0], np.float32)
    for _ in range(4):
        got = step()
        np.testing.assert_allclose(got.numpy(), xs * 10 - (xs + 1))
        xs = xs + 1
        np.testing.assert_allclose(x.numpy(), xs)


def test_one_value_assigned_to_two_states_and_returned() -> None:
    a = Tensor([1.0, 2.0]).realize()
    b = Tensor([0.0, 0.0]).realize()

    @TinyJit
    def step() -> Tensor:
        v = a * 2 + b
        a.assign(v)
        b.assign(v)
        return v

    av, bv = np.array([1.0, 2.0], np.float32), np.zeros(2, np.float32)
    for _ in range(4):
        got = step().numpy()
        av = bv = av * 2 + bv
        np.testing.assert_allclose(got, av)
        np.testing.assert_allclose(a.numpy(), av)
        np.testing.assert_allclose(b.numpy(), bv)


def test_output_holding_the_new_value_stays_its_own() -> None:
    """The call returns the new value as another tensor: it keeps that call's value after x moves on."""
    x = Tensor([1.0, 2.0]).realize()

    @TinyJit
    def step() -> Tensor:
        y = x + 1
        x.assign(y)
        return y * 1

    for i in range(4):
        y = step().numpy()
        np.testing.assert_allclose(y, [2.0 + i, 3.0 + i])
        np.testing.assert_allclose(x.numpy(), [2.0 + i, 3.0 + i])


def test_in_place_capture_pickles_with_its_state() -> None:
    w = Tensor([1.0, 1.0, 1.0]).realize()

    @TinyJit
    def step(g: Tensor) -> Tensor:
        w.assign(w - 0.5 * g)
        return w.sum()

    for _ in range(3):
        step(Tensor([1.0, 2.0, 3.0]))
    assert copies(step.captured) == 0
    loaded = pickle.loads(pickle.dumps(step))
    got = loaded(Tensor([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(got.numpy(), (np.ones(3) - 2.0 * np.array([1.0, 2.0, 3.0])).sum())
