"""extra/models/bert.py: a 2-layer BertForQuestionAnswering (hidden 64, 4 heads, vocab 100) forward pass."""

import numpy as np
from example_util import init_weights, save, timed
from extra.models.bert import BertForQuestionAnswering
from tinygrad import Tensor

RTOL, ATOL = 1e-3, 1e-4

model = BertForQuestionAnswering(hidden_size=64, intermediate_size=128, max_position_embeddings=32,
                                 num_attention_heads=4, num_hidden_layers=2, vocab_size=100)
init_weights(model, seed=0)
rng = np.random.default_rng(1)
ids = Tensor(rng.integers(0, 100, (2, 16)).astype(np.int32))
mask = Tensor(np.concatenate([np.ones((2, 12)), np.zeros((2, 4))], 1).astype(np.int32))
types = Tensor(np.concatenate([np.zeros((2, 8)), np.ones((2, 8))], 1).astype(np.int32))
model(ids, mask, types).realize()
out, seconds = timed(lambda: model(ids, mask, types).numpy())
save(seconds, logits=out)
