"""examples/beautiful_mnist.py as tinygrad runs it, nothing patched: the weights are the layers' own default
initialisation and the batches the example's own `Tensor.randint`, both from `Tensor.manual_seed(0)`, so the two
sides agree only if their random streams do (tinygrad's Threefry stream, bit for bit). 512 Fashion-MNIST images,
batch 32, 3 Adam steps (plain, captured, replayed); the losses and the BatchNorm running statistics are compared, before
later steps amplify the two sides' float32 rounding (beautiful_mnist.py's driver compares the longer run loosely)."""

import os
import time

os.environ.update(FASHION="1", BS="32")

import numpy as np
from example_util import mnist_arrays, save
from tinygrad import Tensor, nn

import examples.beautiful_mnist as bm

RTOL, ATOL = 1e-2, 1e-3
STEPS, WARMUP = 3, 2  # TinyJit runs the first call plainly and captures on the second

Tensor.manual_seed(0)
X_train, Y_train = (Tensor(a) for a in mnist_arrays(512, 256)[:2])
model = bm.Model()
bm.opt = nn.optim.Adam(nn.state.get_parameters(model))  # the example's main makes this global
losses = [model.train_step(X_train, Y_train).item() for _ in range(WARMUP)]
start = time.perf_counter()
losses += [model.train_step(X_train, Y_train).item() for _ in range(STEPS - WARMUP)]
seconds = time.perf_counter() - start
bn = model.layers[4]
save(seconds, losses=np.array(losses), running_mean=bn.running_mean, running_var=bn.running_var)
