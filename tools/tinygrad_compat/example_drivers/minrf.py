"""examples/minrf.py run as a script: DiT_Llama (patch 2, dim 64, 6 layers) trained with rectified flow for 3 TinyJit
Adam steps of batch 8 on 512 Fashion-MNIST images (noise and timesteps from numpy), then one 2-step sample; the
losses of the steps are compared (the example prints them), with the final model's weights."""

import os
import runpy
import time

os.environ.update(BS="8", STEPS="3", SAMPLE_STEPS="2")

from example_util import init_layers, patch_mnist, patch_random, save
from tinygrad.nn.state import get_state_dict

RTOL, ATOL = 1e-3, 1e-4

patch_mnist(512, 256)
init_layers(reseed=patch_random())
start = time.perf_counter()
g = runpy.run_path("examples/minrf.py", run_name="__main__")
seconds = time.perf_counter() - start
weights = {k.replace(".", "_"): v for k, v in get_state_dict(g["model"]).items()
           if k.startswith(("final_layer", "layers.0.", "x_embedder"))}
save(seconds, loss=g["loss"], **weights)
