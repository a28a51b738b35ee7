"""extra/models/unet.py: a tiny UNetModel (model_ch 32, 2 levels, one transformer block, 16x16 latents) forward
pass with a timestep and a text context."""

import numpy as np
from example_util import init_weights, save, timed
from extra.models.unet import UNetModel
from tinygrad import Tensor

RTOL, ATOL = 2e-3, 2e-3  # the timestep embedding is float16 where the device has it

model = UNetModel(adm_in_ch=None, in_ch=4, out_ch=4, model_ch=32, attention_resolutions=[2], num_res_blocks=1,
                  channel_mult=[1, 2], transformer_depth=[1, 1], ctx_dim=16, n_heads=2, num_groups=8)
init_weights(model, seed=0)
rng = np.random.default_rng(1)
x = Tensor(rng.standard_normal((1, 4, 16, 16)).astype(np.float32))
t = Tensor(np.array([10.0], dtype=np.float32))
ctx = Tensor(rng.standard_normal((1, 3, 16)).astype(np.float32))
model(x, t, ctx).realize()
out, seconds = timed(lambda: model(x, t, ctx).numpy())
save(seconds, out=out)
