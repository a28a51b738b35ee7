"""Text generation with Mamba, a selective state-space language model, from a Hugging Face directory in the layout of
the state-spaces/mamba-*-hf checkpoints (config.json, model.safetensors, tokenizer.json).

    python examples/mamba.py --model path/to/mamba-130m-hf --prompt "Mamba is a" --count 32
    DEV=CL python examples/mamba.py --model path/to/mamba-130m-hf --prompt "1 2 3"   # ids, without a tokenizer

Greedy decoding. The prompt runs in one batched forward: every state of every layer's recurrence comes out of a
chunked scan of Tensor ops (tinygrad.nn.mamba.selective_scan). Each new token is then one replay of a jitted
recurrent step that reads and rewrites a fixed-size state (the convolution's last inputs and the SSM state), so a
step costs the same however long the text gets. Without a tokenizer.json beside the model the prompt and the output
are token ids.
"""

import argparse
import pathlib
import sys
import time

from tinygrad import Device
from tinygrad.nn.mamba import Mamba
from tinygrad.nn.transformer import load_tokenizer, prompt_ids


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a Hugging Face Mamba directory (config.json, model.safetensors)")
    p.add_argument("--prompt", default="Mamba is a",
                   help="the text to continue (token ids '1 2 3' without a tokenizer)")
    p.add_argument("--count", type=int, default=32, help="how many tokens to generate")
    p.add_argument("--chunk", type=int, default=16, help="time steps per chunk of the prompt's scan")
    args = p.parse_args(argv)
    if args.count < 1:
        p.error(f"--count must be >= 1, got {args.count}")

    path = pathlib.Path(args.model)
    model = Mamba.from_pretrained(path, chunk=args.chunk)
    tokenizer = load_tokenizer(path)
    ids = prompt_ids(tokenizer, args.prompt, f"{path} has no tokenizer.json")
    if not ids:
        sys.exit("the prompt encodes to no tokens")

    out: list[int] = []
    stamps = []  # when each token arrived
    start = time.perf_counter()
    for token in model.generate(ids, args.count, stop_ids=model.eos_token_ids):
        out.append(token)
        stamps.append(time.perf_counter())

    print(tokenizer.decode(ids + out) if tokenizer is not None else " ".join(map(str, ids + out)))
    prefill = stamps[0] - start  # the prompt's forward gives the first token
    report = [f"{Device.DEFAULT}: prompt of {len(ids)} tokens {len(ids) / prefill:.1f} tokens/s ({prefill:.2f} s)"]
    # the 2nd and 3rd tokens' steps compile and capture the jitted step; from then on every step is a replay
    if len(stamps) > 3:
        report.append(f"decode {(len(stamps) - 3) / (stamps[-1] - stamps[2]):.1f} tokens/s (jit replays)")
    report.append(f"{len(out)} tokens in {stamps[-1] - start:.2f} s")
    print(", ".join(report), file=sys.stderr)

if __name__ == "__main__":
    main()
