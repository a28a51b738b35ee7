"""examples/mamba.py: a tiny Mamba (2 layers, dim 32, vocab 64) through the example's generate(): the prompt through
the reference selective scan, then greedy one-token steps through the jitted recurrent step.
Outputs: the prompt's last logits and the generated tokens."""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.getcwd())  # the workspace's examples/ package, ahead of the runner's examples.py on the path
import standins  # noqa: F401  (tinygrad internals' stand-ins, before any example import)
from _lm_common import numpy_weights, save, stub_module

RTOL = 1e-4
ATOL = 1e-4

PROMPT = [3, 41, 7, 19, 60]
STEPS = 8

# the example imports these at module level; generate() takes its tokenizer as an argument
stub_module("tqdm", tqdm=lambda it, **_: it)
stub_module("transformers", AutoTokenizer=None)


class IdTokenizer:
    """Stands in for the GPT-NeoX tokenizer: the prompt is already token ids."""
    def __call__(self, prompt):
        return {"input_ids": list(prompt)}

    def decode(self, tok):
        return f"{int(tok)} "


def main(out: str) -> None:
    from tinygrad import Tensor
    from tinygrad.nn.state import load_state_dict

    import examples.mamba as mamba

    def build():
        m = mamba.Mamba(dim=32, n_layers=2, vocab_size=64)
        load_state_dict(m, numpy_weights(m, seed=7), verbose=False)
        return m

    probe = build()
    logits = probe.forward(Tensor([PROMPT]))[0, -1].numpy()
    mamba.generate(build(), IdTokenizer(), PROMPT, n_tokens_to_gen=STEPS)  # compiles every kernel
    model = build()  # the states of a model are filled by its first prompt: time a fresh one
    t0 = time.perf_counter()
    text = mamba.generate(model, IdTokenizer(), PROMPT, n_tokens_to_gen=STEPS)
    seconds = time.perf_counter() - t0
    save(out, seconds, logits=logits, tokens=np.array([int(t) for t in text.split()], dtype=np.int64))


if __name__ == "__main__":
    main(sys.argv[1])
