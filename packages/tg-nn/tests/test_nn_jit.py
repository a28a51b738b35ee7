"""An optimizer step inside TinyJit replays to the same parameters as eager steps: the optimizer's state (moments,
step counts, BatchNorm statistics) must be updated in place for the replay to see it."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import close
from tinygrad import Context, Tensor, nn
from tinygrad.nn.state import get_parameters, get_state_dict

tinygrad = pytest.importorskip("tinygrad")
TinyJit = getattr(tinygrad, "TinyJit", None)
pytestmark = pytest.mark.skipif(TinyJit is None, reason="this tg-core has no TinyJit yet")

RNG = np.random.default_rng(0)
BATCHES = [(RNG.standard_normal((8, 3)).astype(np.float32), RNG.integers(0, 2, 8).astype(np.int32)) for _ in range(6)]


class Net:
    def __init__(self):
        self.l1, self.bn, self.l2 = nn.Linear(3, 6), nn.BatchNorm(6), nn.Linear(6, 2)

    def __call__(self, x: Tensor) -> Tensor:
        return self.l2(self.bn(self.l1(x)).relu())


def train(use_jit: bool) -> dict[str, np.ndarray]:
    Tensor.manual_seed(3)
    net = Net()
    opt = nn.optim.Adam(get_parameters(net), lr=0.05)

    def step(x: Tensor, y: Tensor) -> Tensor:
        with Context(TRAINING=1, CHECK_INDICES=0):
            opt.zero_grad()
            loss = net(x).sparse_categorical_crossentropy(y).backward()
            return loss.realize(*opt.schedule_step())

    run = TinyJit(step) if use_jit else step
    losses = [run(Tensor(x), Tensor(y)).item() for x, y in BATCHES]
    out = {k: v.numpy() for k, v in get_state_dict(net).items()}
    out["losses"] = np.array(losses)
    return out


def test_jitted_adam_step_matches_eager():
    eager, jitted = train(False), train(True)
    assert eager.keys() == jitted.keys()
    for k in eager:
        close(jitted[k], eager[k], 1e-5, 1e-4)
    assert jitted["bn.num_batches_tracked"].tolist() == [len(BATCHES)]
