"""examples/stunning_mnist.py run as a script: the whole training (3 steps of batch 16, indexed by a bound
Variable) scheduled lazily and realized at the end, over 512 Fashion-MNIST images; the losses and test accuracy."""

import os
import runpy
import time

os.environ.update(BS="16", STEPS="3")

import numpy as np
from example_util import init_layers, patch_mnist, patch_random, save

RTOL, ATOL = 5e-2, 1e-3  # see beautiful_mnist.py

patch_mnist(512, 256)
init_layers(reseed=patch_random())
start = time.perf_counter()
g = runpy.run_path("examples/stunning_mnist.py", run_name="__main__")
seconds = time.perf_counter() - start
save(seconds, losses=np.array([x.item() for x in g["losses"]]), test_acc=g["test_acc"].item())
