"""The captures of real programs launch what their eager calls launch, once each: a LLaMA decode step (every layer's
output realized inside the step) and a convnet training step with BatchNorm and Adam. The only launches a capture
adds are the copies writing assigned state back into the buffers its kernels read (docs/jit.md). A layer output
with gradient history keeps its graph after realize(), and the capture used to compute it again wherever it was
read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from tinygrad import Context, GlobalCounters, Tensor, TinyJit, nn
from tinygrad.engine.jit_capture import Capture
from tinygrad.engine.schedule import copy_kernel_ast
from tinygrad.nn.state import get_parameters, get_state_dict
from tinygrad.nn.transformer import Llama, LlamaConfig
from tinygrad.uop.ops import UOp

CONFIG = LlamaConfig(vocab_size=48, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=8, max_position_embeddings=32)


def kernels_of(call: Callable[[], Any]) -> int:
    GlobalCounters.reset()
    call()
    return GlobalCounters.kernel_count


def write_backs(cap: Capture) -> int:
    state = {id(b.storage) for slot in cap.state for b in slot.buffers}
    return sum(1 for r in cap.recorded if r.runner is not None and id(r.item.bufs[0].storage) in state and
               r.item.ast is copy_kernel_ast(r.item.bufs[0].dtype, r.item.bufs[0].size))


def assert_each_launch_once(cap: Capture) -> None:
    seen = [(r.item.ast, tuple(id(b) for b in r.item.bufs)) for r in cap.recorded]
    assert len(set(seen)) == len(seen), "the capture launches one kernel on the same buffers twice"


def llama() -> Llama:
    model = Llama(CONFIG, max_context=16)
    rng = np.random.default_rng(5)
    for t in get_state_dict(model).values():
        t.assign(Tensor((rng.standard_normal(t.shape) * 0.3).astype(np.float32))).realize()
    model.reset_cache(1)
    return model


def position(p: int) -> UOp:
    return UOp.variable("start_pos", 1, 15).bind(p)  # type: ignore[attr-defined,no-any-return]


def test_llama_decode_step_captures_each_kernel_once() -> None:
    jitted, eager = llama(), llama()
    step = TinyJit(lambda tok, pos: jitted.forward(tok, pos)[:, -1].realize())
    first = np.array([[3]], np.int32)
    jitted.forward(Tensor(first), 0).realize()
    eager.forward(Tensor(first), 0).realize()
    tokens = [7, 1, 30, 12, 5]
    for p, tok in enumerate(tokens, start=1):
        ids = np.array([[tok]], np.int32)
        got = step(Tensor(ids), position(p)).numpy()
        want = eager.forward(Tensor(ids), position(p))[:, -1].numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    cap = step.captured
    assert cap is not None
    p = len(tokens) + 1
    assert kernels_of(lambda: step(Tensor(np.array([[2]], np.int32)), position(p))) == step.captured_kernels
    with Context(JIT=0):
        eager_kernels = kernels_of(lambda: step(Tensor(np.array([[4]], np.int32)), position(p + 1)))
    assert step.captured_kernels - write_backs(cap) == eager_kernels
    assert_each_launch_once(cap)


class ConvNet:
    def __init__(self) -> None:
        self.layers: list[Callable[[Tensor], Tensor]] = [
            nn.Conv2d(1, 4, 3), Tensor.relu, nn.BatchNorm(4), Tensor.max_pool2d,  # type: ignore[list-item]
            lambda x: x.flatten(1), nn.Linear(36, 3)]

    def __call__(self, x: Tensor) -> Tensor:
        return x.sequential(self.layers)


def test_convnet_training_step_captures_the_eager_kernels_and_the_write_backs() -> None:
    def setup() -> tuple[Callable[[Tensor, Tensor], Tensor], ConvNet]:
        Tensor.manual_seed(4)
        model = ConvNet()
        opt = nn.optim.Adam(get_parameters(model), lr=0.01)

        def step(x: Tensor, y: Tensor) -> Tensor:
            with Context(TRAINING=1, CHECK_INDICES=0):
                opt.zero_grad()
                loss = model(x).sparse_categorical_crossentropy(y).backward()
                return loss.realize(*opt.schedule_step())
        return step, model

    rng = np.random.default_rng(6)
    batches = [(rng.standard_normal((4, 1, 8, 8)).astype(np.float32), rng.integers(0, 3, 4).astype(np.int32))
               for _ in range(5)]
    step, model = setup()
    jit = TinyJit(step)
    losses = [jit(Tensor(x), Tensor(y)).item() for x, y in batches]
    eager_step, eager_model = setup()
    eager_losses = [eager_step(Tensor(x), Tensor(y)).item() for x, y in batches]
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5)
    for name, t in get_state_dict(model).items():
        np.testing.assert_allclose(t.numpy(), get_state_dict(eager_model)[name].numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    assert jit.captured is not None
    x, y = batches[0]
    assert kernels_of(lambda: jit(Tensor(x), Tensor(y))) == jit.captured_kernels
    assert jit.captured_kernels - write_backs(jit.captured) == kernels_of(lambda: eager_step(Tensor(x), Tensor(y)))
    assert_each_launch_once(jit.captured)
