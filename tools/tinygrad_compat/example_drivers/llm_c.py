"""examples/llm.c/train_gpt2.py: a tiny GPT-2 (2 layers, dim 64, vocab 128, tied embeddings) trained
as the example's __main__ does: AdamW, one TinyJit step under Context(TRAINING=1) returning the loss realized with
the optimizer's scheduled step, overfitting one batch. Outputs: the loss of every step and the logits afterwards."""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.getcwd())  # the workspace's examples/ package, ahead of the runner's examples.py on the path
sys.path.insert(0, os.path.join(os.getcwd(), "examples", "llm.c"))  # the example is a script folder, not a package
import standins  # noqa: F401  (tinygrad internals' stand-ins, before any example import)
from _lm_common import numpy_weights, save

RTOL = 1e-3
ATOL = 1e-4

WARMUP, MEASURED = 3, 5


def main(out: str) -> None:
    from tinygrad import Context, Device, Tensor, TinyJit, nn
    from train_gpt2 import GPT, GPTConfig
    model = GPT(GPTConfig(block_size=32, vocab_size=128, padded_vocab_size=128, n_layer=2, n_head=4, n_embd=64))
    # every float tensor but the causal mask (".attn.bias", a buffer)
    weights = {k: v for k, v in numpy_weights(model, seed=11).items() if not k.endswith(".attn.bias")}
    weights["wte.weight"] = weights["lm_head.weight"]  # tied, as load_pretrained ties them
    nn.state.load_state_dict(model, weights, strict=False, verbose=False)

    data = np.random.default_rng(12).integers(0, 128, size=2 * 16 + 1).astype(np.int32)
    # separate tensors, not views of one token tensor: tinygrad 0.14.0 crashes (SIGSEGV) on CPU computing the loss
    # against a shrunk view as targets
    x, y = Tensor(data[:32].reshape(2, 16)), Tensor(data[1:33].reshape(2, 16))
    optimizer = nn.optim.AdamW(nn.state.get_parameters(model), lr=1e-3, weight_decay=0)

    @TinyJit
    @Context(TRAINING=1)
    def step(x: Tensor, y: Tensor) -> Tensor:
        _, loss = model(x, y)
        optimizer.zero_grad()
        loss.backward()
        return loss.realize(*optimizer.schedule_step())

    losses = [step(x.contiguous(), y.contiguous()).item() for _ in range(WARMUP)]
    t0 = time.perf_counter()
    for _ in range(MEASURED):
        loss = step(x.contiguous(), y.contiguous())
        Device[Device.DEFAULT].synchronize()
        losses.append(loss.item())
    seconds = time.perf_counter() - t0
    logits, _ = model(x)
    save(out, seconds, losses=np.array(losses, dtype=np.float32), logits=logits.numpy())


if __name__ == "__main__":
    main(sys.argv[1])
