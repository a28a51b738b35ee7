"""extra/models/vit.py: a 2-layer ViT (embed 48, 3 heads) forward pass on one 224x224 image."""

import numpy as np
from example_util import init_weights, save, timed
from extra.models.vit import ViT
from tinygrad import Tensor

RTOL, ATOL = 1e-3, 1e-4

model = ViT(layers=2, embed_dim=48, num_heads=3)
init_weights(model, seed=0)
x = Tensor(np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32))
model.forward(x).realize()
out, seconds = timed(lambda: model.forward(x).numpy())
save(seconds, logits=out)
