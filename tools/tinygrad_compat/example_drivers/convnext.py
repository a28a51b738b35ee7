"""extra/models/convnext.py: a tiny ConvNeXt (depths 1,1,1,1, dims 16..128) forward pass on 2 images."""

import numpy as np
from example_util import init_weights, save, timed
from extra.models.convnext import ConvNeXt
from tinygrad import Tensor

RTOL, ATOL = 1e-3, 1e-4

model = ConvNeXt(num_classes=10, depths=[1, 1, 1, 1], dims=[16, 32, 64, 128])
init_weights(model, seed=0)
x = Tensor(np.random.default_rng(1).standard_normal((2, 3, 64, 64)).astype(np.float32))
model(x).realize()
out, seconds = timed(lambda: model(x).numpy())
save(seconds, logits=out)
