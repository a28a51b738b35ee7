"""examples/gpt2.py: a tiny GPT-2 (2 layers, dim 64, vocab 128) generating greedily with its KV cache and TinyJit,
through the example's GPT2.generate (prompt step eager, one-token steps jitted with a bound token Variable).
Outputs: the prompt's last-position logits and the generated token ids."""

import os
import sys

import numpy as np

sys.path.insert(0, os.getcwd())  # the workspace's examples/ package, ahead of the runner's examples.py on the path
import standins  # noqa: F401  (tinygrad internals' stand-ins, before any example import)
from _lm_common import load_numpy_weights, save, timed

RTOL = 1e-4
ATOL = 1e-4

VOCAB, STEPS = 128, 8
PROMPT = [5, 17, 99, 3, 64, 42]


class IdTokenizer:
    """Stands in for tiktoken: a prompt is already token ids, decoding gives them back."""
    def encode(self, ids, allowed_special=None):
        return list(ids)

    def decode(self, ids):
        return " ".join(map(str, ids))


def main(out: str) -> None:
    from tinygrad import Tensor, Variable

    import examples.gpt2 as gpt2
    gpt2.MAX_CONTEXT = 32
    gpt2.VOCAB_SIZE = VOCAB
    model = gpt2.Transformer(dim=64, n_heads=4, n_layers=2, norm_eps=1e-5, vocab_size=VOCAB, max_seq_len=32)
    load_numpy_weights(model, seed=1)
    g = gpt2.GPT2(model, IdTokenizer())

    # the prompt's logits, from the model's own head, before any cache is written
    seen = []
    head = model.lm_head
    model.lm_head = lambda x: seen.append(head(x)) or seen[-1]
    model.forward(Tensor([PROMPT]), Variable("start_pos", 0, gpt2.MAX_CONTEXT - 1).bind(0)).realize()
    logits = seen[0][:, -1, :].numpy()
    model.lm_head = head

    texts, seconds = timed(lambda: g.generate(PROMPT, STEPS, 0.0))
    tokens = np.array([int(t) for t in texts[0].split()], dtype=np.int64)
    save(out, seconds, logits=logits, tokens=tokens)


if __name__ == "__main__":
    main(sys.argv[1])
