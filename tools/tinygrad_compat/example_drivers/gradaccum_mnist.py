"""examples/gradaccum_mnist.py run as a script: 3 steps of 2 accumulated micro-batches of 16 (BS=32, ACC_STEPS=2)
over 512 Fashion-MNIST images, with the example's TinyJit micro-batch and functional Adam; the final weights and
the test accuracy are compared."""

import os
import runpy
import time

os.environ.update(BS="32", ACC_STEPS="2", STEPS="3")

from example_util import init_layers, patch_mnist, patch_random, save
from tinygrad.nn.state import get_state_dict

# compared with this project summing as tinygrad 0.14.0 does (see beautiful_mnist.py)
SEQUENTIAL_SUMS = True
RTOL, ATOL = 1e-3, 1e-3

patch_mnist(512, 256)
init_layers(reseed=patch_random())
start = time.perf_counter()
g = runpy.run_path("examples/gradaccum_mnist.py", run_name="__main__")
seconds = time.perf_counter() - start
weights = {k.replace(".", "_"): v for k, v in get_state_dict(g["model"]).items() if "num_batches" not in k}
save(seconds, test_acc=g["test_acc"], loss=g["loss_item"], **weights)
