"""examples/mixtral.py: a tiny Mixtral (2 layers, dim 64, 4 experts of hidden 128, top-2 routing on the host) on
extra/models/llama's Transformer, loaded as the example's __main__ does: every weight cast to half, each expert
pair on a device of its own (CPU:1, CPU:2). Then greedy generation with a bound start_pos Variable.
Outputs: the prompt's logits (half) and the generated tokens."""

import functools
import os
import sys

import numpy as np

sys.path.insert(0, os.getcwd())  # the workspace's examples/ package, ahead of the runner's examples.py on the path
import standins  # noqa: F401  (tinygrad internals' stand-ins, before any example import)
from _lm_common import numpy_weights, save, timed

RTOL = 2e-2
ATOL = 2e-2

PROMPT = [1, 77, 12, 250, 9]
STEPS = 6


def main(out: str) -> None:
    from extra.models.llama import Transformer
    from tinygrad import Device, Tensor, Variable
    from tinygrad.nn.state import get_state_dict

    from examples.mixtral import MixtureFeedForward
    model = Transformer(n_layers=2, dim=64, hidden_dim=128, n_heads=4, n_kv_heads=2, norm_eps=1e-5, vocab_size=256,
                        feed_forward=functools.partial(MixtureFeedForward, 4), jit=False, max_context=64)
    state = numpy_weights(model, seed=5)
    model_state_dict = get_state_dict(model)
    for k in state:  # as the example's loader: experts in pairs on their own devices, everything in half
        if "feed_forward.experts." in k:
            device = Device.DEFAULT + ":" + str((int(k.split("feed_forward.experts.")[1].split(".")[0]) // 2) + 1)
        else:
            device = Device.DEFAULT
        model_state_dict[k].replace(state[k].to(device).half()).realize()

    logits = model(Tensor([PROMPT]), 0, float("nan"))[0, -1].float().numpy()

    def generate() -> list[int]:
        toks, start_pos = list(PROMPT), 0
        for _ in range(STEPS):
            tok = model(Tensor([toks[start_pos:]]), 0 if start_pos == 0 else
                        Variable("start_pos", 1, 1024 - 1).bind(start_pos), 0.0).item()
            toks.append(tok)
            start_pos = len(toks) - 1
        return toks[len(PROMPT):]

    toks, seconds = timed(generate)
    save(out, seconds, logits=logits, tokens=np.array(toks, dtype=np.int64))


if __name__ == "__main__":
    main(sys.argv[1])
