"""A TinyJit capture launches what an eager call of the function launches, once each.

A tensor with gradient history keeps its graph after realize(), and the scheduler reads the buffer it was realized
into in its place. While capturing, a node computed from the call's inputs used to be computed again whenever it was
realized once more (the jit realizes the outputs at the end of the call): `TinyJit(lambda x: l1(x).realize())` with an
nn.Linear captured its kernel twice. The only launches a capture may add to an eager call's are the copies that write
the new value of assigned model state back into the buffer its kernels read (see docs/jit.md), and a replay after
state was written in place between calls copies nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from tinygrad import Context, GlobalCounters, Tensor, TinyJit, nn
from tinygrad.engine.jit_capture import Capture
from tinygrad.engine.jit_io import held_buffers
from tinygrad.engine.schedule import copy_kernel_ast
from tinygrad.nn.state import get_parameters

RNG = np.random.default_rng(11)


def data(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def kernels_of(call: Callable[[], Any]) -> int:
    GlobalCounters.reset()
    call()
    return GlobalCounters.kernel_count


def eager_kernels(jit: TinyJit, *args: Any) -> int:
    """The kernels the same function launches when it runs eagerly (JIT=0: no capture, no replay)."""
    with Context(JIT=0):
        return kernels_of(lambda: jit(*args))


def write_backs(cap: Capture) -> int:
    """The launches that copy assigned state back into the buffer the capture's kernels read it from."""
    state = {id(b.storage) for slot in cap.state for b in slot.buffers}
    return sum(1 for r in cap.recorded if r.runner is not None and id(r.item.bufs[0].storage) in state and
               r.item.ast is copy_kernel_ast(r.item.bufs[0].dtype, r.item.bufs[0].size))


def assert_no_repeated_launch(cap: Capture) -> None:
    seen = [(r.item.ast, tuple(id(b) for b in r.item.bufs)) for r in cap.recorded]
    assert len(set(seen)) == len(seen), "the capture launches one kernel on the same buffers twice"


def test_linear_layer_realized_in_the_function_is_captured_once() -> None:
    Tensor.manual_seed(0)
    layer = nn.Linear(8, 4)  # requires_grad weights: its output keeps its graph after realize()
    jit = TinyJit(lambda x: layer(x).realize())
    for _ in range(4):
        x = data(2, 8)
        out = jit(Tensor(x)).numpy()
        with Context(JIT=0):
            np.testing.assert_allclose(out, jit(Tensor(x)).numpy(), rtol=1e-6)
    assert jit.captured is not None
    eager = eager_kernels(jit, Tensor(data(2, 8)))
    assert eager == 1
    assert jit.captured_kernels == eager
    assert kernels_of(lambda: jit(Tensor(data(2, 8)))) == eager
    assert_no_repeated_launch(jit.captured)


def test_layers_realized_one_by_one_are_each_captured_once() -> None:
    # a decoder's loop: every layer's output realized before the next layer reads it, all of it with gradient history
    Tensor.manual_seed(1)
    weights = [Tensor.randn(6, 6, requires_grad=True).realize() for _ in range(3)]

    def body(x: Tensor) -> Tensor:
        for w in weights:
            x = (x @ w).relu().realize()
        return (x * 2).sum(axis=1)

    jit = TinyJit(body)
    for _ in range(4):
        x = data(3, 6)
        got = jit(Tensor(x)).numpy()
        want = x
        for w in weights:
            want = np.maximum(want @ w.numpy(), 0)
        np.testing.assert_allclose(got, (want * 2).sum(axis=1), rtol=1e-5, atol=1e-6)
    eager = eager_kernels(jit, Tensor(data(3, 6)))
    assert jit.captured_kernels == eager
    assert kernels_of(lambda: jit(Tensor(data(3, 6)))) == eager
    assert jit.captured is not None
    assert_no_repeated_launch(jit.captured)


def test_a_node_realized_before_the_call_is_still_computed_in_the_capture() -> None:
    # the other side of the rule: an equal graph realized by the caller before the capture holds an old value, and a
    # replay must compute it from its own inputs
    x = Tensor(data(4))
    before = x * 3
    node = before.uop  # held, so that the capture's `t * 3` is this node, realized before the call
    before.realize()
    jit = TinyJit(lambda t: (t * 3).realize() + 1)
    for i in range(4):
        arg = x if i < 2 else Tensor(data(4))
        want = arg.numpy() * 3 + 1
        np.testing.assert_allclose(jit(arg).numpy(), want, rtol=1e-6)
        if i == 1:
            assert node._realized is not None and jit.captured_kernels == 2


def test_training_step_captures_the_eager_kernels_plus_the_state_write_backs() -> None:
    def setup() -> tuple[Callable[[Tensor, Tensor], Tensor], list[Tensor]]:
        Tensor.manual_seed(2)
        l1, l2 = nn.Linear(5, 7), nn.Linear(7, 3)
        params = get_parameters([l1, l2])
        opt = nn.optim.Adam(params, lr=0.01)

        def step(x: Tensor, y: Tensor) -> Tensor:
            with Context(TRAINING=1, CHECK_INDICES=0):
                opt.zero_grad()
                loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y).backward()
                return loss.realize(*opt.schedule_step())
        return step, params

    batches = [(data(6, 5), RNG.integers(0, 3, 6).astype(np.int32)) for _ in range(5)]
    step, params = setup()
    jit = TinyJit(step)
    jitted = [jit(Tensor(x), Tensor(y)).item() for x, y in batches]
    eager_step, eager_params = setup()
    with Context(JIT=0):
        eager = [eager_step(Tensor(x), Tensor(y)).item() for x, y in batches]
    np.testing.assert_allclose(jitted, eager, rtol=1e-6)
    for p, q in zip(params, eager_params):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-6, atol=1e-7)

    cap = jit.captured
    assert cap is not None
    x, y = batches[0]
    launched = kernels_of(lambda: jit(Tensor(x), Tensor(y)))
    assert launched == jit.captured_kernels
    assert jit.captured_kernels - write_backs(cap) == kernels_of(lambda: eager_step(Tensor(x), Tensor(y)))
    assert write_backs(cap) <= len(cap.state)
    assert_no_repeated_launch(cap)


def memory_of(t: Tensor) -> Any:
    held = held_buffers(t.uop)
    assert held is not None, "the tensor is realized"
    return held[0].storage


def test_state_written_in_place_between_replays_stays_in_place_and_costs_no_copy() -> None:
    # a KV cache's pattern: the jitted step updates the state, and eager code between replays (a prefill) writes a
    # region of it. The capture's hold on the state must not stop that write from going into the state's buffer, and
    # the next replay has nothing to copy: the value is already in the memory its kernels read
    state = Tensor.empty(4, 8)
    state.assign(Tensor.zeros(4, 8)).realize()

    @TinyJit
    def step(x: Tensor) -> Tensor:
        state.assign(state * 0.5 + x)
        return state.sum(axis=1).realize()

    want = np.zeros((4, 8), np.float32)
    for i in range(6):
        if i >= 3:
            memory, row = memory_of(state), data(1, 8)
            state[1:2].assign(Tensor(row)).realize()
            want[1:2] = row
            assert memory_of(state) is memory, "the region was not written into the state's buffer"
        x = data(4, 8)
        want = want * 0.5 + x
        GlobalCounters.reset()
        out = step(Tensor(x))
        if i >= 2:
            assert GlobalCounters.kernel_count == step.captured_kernels
        np.testing.assert_allclose(out.numpy(), want.sum(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(state.numpy(), want, rtol=1e-5, atol=1e-5)
