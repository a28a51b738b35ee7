"""examples/transformer.py: its adder dataset and Transformer(10, 6, 2, 128, 4, 32), trained with extra/training.py's
TinyJit train() for 6 Adam steps of batch 64; the predictions' logits on 64 test sums are compared."""

import random
import time

import numpy as np
from example_util import init_weights, save
from examples.transformer import make_dataset
from extra.models.transformer import Transformer
from extra.training import train
from tinygrad import Tensor
from tinygrad.helpers import TRAINING
from tinygrad.nn.optim import Adam
from tinygrad.nn.state import get_parameters

RTOL, ATOL = 1e-3, 1e-4

# the two frameworks' random generators differ: dropout masks come from numpy on both sides (inside train()'s
# TinyJit a mask is captured with the step and replayed, alike on both sides)
_masks = np.random.default_rng(1)


def _numpy_dropout(self: Tensor, p: float = 0.5) -> Tensor:
    if not (getattr(Tensor, "training", False) or TRAINING.value) or p == 0:  # tinygrad 0.14.0 has only TRAINING
        return self
    keep = (_masks.random(self.shape) >= p).astype(np.float32)
    return self * Tensor(keep, device=self.device) * (1 / (1 - p))


Tensor.dropout = _numpy_dropout  # type: ignore[method-assign]
random.seed(0)  # make_dataset shuffles with Python's random, train() samples with numpy's
np.random.seed(0)
X_train, Y_train, X_test, Y_test = make_dataset()
model = Transformer(10, 6, 2, 128, 4, 32)
init_weights(model)
optim = Adam(get_parameters(model), lr=0.003)
start = time.perf_counter()
losses, _ = train(model, X_train, Y_train, optim, 6, BS=64, allow_jit=True)
seconds = time.perf_counter() - start
# train() reads each loss after optim.step(): tinygrad computes a loss still lazy then from the updated weights,
# this project from the weights it was built on (README, deliberate differences), so the losses are not compared;
# the trained model's logits are
del losses
save(seconds, logits=model.forward(Tensor(X_test[:64])))
