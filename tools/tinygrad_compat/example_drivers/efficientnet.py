"""extra/models/efficientnet.py: EfficientNet-B0 forward pass (eval mode) on one 64x64 image."""

import numpy as np
from example_util import init_weights, save, timed
from extra.models.efficientnet import EfficientNet
from tinygrad import Tensor

RTOL, ATOL = 1e-3, 1e-4

model = EfficientNet(0, classes=10)
init_weights(model, seed=0)
x = Tensor(np.random.default_rng(1).standard_normal((1, 3, 64, 64)).astype(np.float32))
model.forward(x).realize()
out, seconds = timed(lambda: model.forward(x).numpy())
save(seconds, logits=out)
