"""examples/transformer.py: its adder dataset and Transformer(10, 6, 2, 128, 4, 32), trained with extra/training.py's
TinyJit train() for 6 Adam steps of batch 64; the losses and the predictions' logits on 64 test sums are compared."""

import random
import time

import numpy as np
from example_util import init_weights, save
from examples.transformer import make_dataset
from extra.models.transformer import Transformer
from extra.training import train
from tinygrad import Tensor
from tinygrad.nn.optim import Adam
from tinygrad.nn.state import get_parameters

RTOL, ATOL = 1e-3, 1e-4

random.seed(0)  # make_dataset shuffles with Python's random, train() samples with numpy's
np.random.seed(0)
X_train, Y_train, X_test, Y_test = make_dataset()
model = Transformer(10, 6, 2, 128, 4, 32)
init_weights(model)
optim = Adam(get_parameters(model), lr=0.003)
start = time.perf_counter()
losses, _ = train(model, X_train, Y_train, optim, 6, BS=64, allow_jit=True)
seconds = time.perf_counter() - start
save(seconds, losses=np.array(losses), logits=model.forward(Tensor(X_test[:64])))
