"""examples/beautiful_mnist_multigpu.py run as a script on two CPU devices (CPU:0, CPU:1): 3 data-parallel Adam
steps of batch 32 over 512 Fashion-MNIST images; the last loss and the final weights are compared."""

import os
import runpy
import time

os.environ.update(BS="32", STEPS="3", GPUS="2")

from example_util import init_layers, patch_mnist, patch_random, save
from tinygrad.nn.state import get_state_dict

RTOL, ATOL = 5e-2, 1e-3  # see beautiful_mnist.py

patch_mnist(512, 256)
init_layers(reseed=patch_random())
start = time.perf_counter()
g = runpy.run_path("examples/beautiful_mnist_multigpu.py", run_name="__main__")
seconds = time.perf_counter() - start
weights = {k.replace(".", "_"): v.to("CPU") for k, v in get_state_dict(g["model"]).items() if "num_batches" not in k}
save(seconds, loss=g["loss"].to("CPU"), **weights)
