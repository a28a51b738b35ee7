"""extra/models/resnet.py: ResNet18 forward pass (eval mode, so BatchNorm uses its running statistics) on 2 images."""

import numpy as np
from example_util import init_weights, save, timed
from extra.models.resnet import ResNet18
from tinygrad import Tensor

RTOL, ATOL = 1e-3, 1e-4

model = ResNet18(num_classes=10)
init_weights(model, seed=0)
x = Tensor(np.random.default_rng(1).standard_normal((2, 3, 64, 64)).astype(np.float32))
model(x).realize()  # warm-up: compiles the kernels
out, seconds = timed(lambda: model(x).numpy())
save(seconds, logits=out)
