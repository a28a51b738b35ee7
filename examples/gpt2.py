"""Text generation with a GPT-2 checkpoint in Hugging Face's layout (a directory with config.json and
model.safetensors, and tokenizer.json for text; without it, the prompt and the output are token ids).

    python examples/gpt2.py --model path/to/gpt2 --prompt "The meaning of life is" --max-tokens 40
    python examples/gpt2.py --model path/to/gpt2 --prompt "Hello" --temperature 0.8 --top-k 40 --top-p 0.95 --seed 1

Greedy by default (--temperature 0). The prompt is run in one batched forward; every new token is then one replay
of a jitted decode step (see tinygrad.nn.transformer).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from tinygrad import Tensor
from tinygrad.nn.transformer import GPT2, load_tokenizer


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a Hugging Face GPT-2 directory")
    p.add_argument("--prompt", required=True, help="the text to continue (token ids '1 2 3' without tokenizer.json)")
    p.add_argument("--max-tokens", type=int, default=32, help="how many tokens to generate")
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    p.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens (0: all)")
    p.add_argument("--top-p", type=float, default=1.0, help="sample in the smallest set holding this probability")
    p.add_argument("--seed", type=int, default=None, help="seed of the sampler")
    p.add_argument("--max-context", type=int, default=None, help="KV cache length (default: the model's limit)")
    return p.parse_args(argv)


def encode(tokenizer: Any, prompt: str) -> list[int]:
    if tokenizer is not None:
        return list(tokenizer.encode(prompt).ids)
    try:
        return [int(t) for t in prompt.split()]
    except ValueError:
        sys.exit("there is no tokenizer.json beside the model: give the prompt as token ids, e.g. --prompt '1 2 3'")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.seed is not None:
        Tensor.manual_seed(args.seed)
    model = GPT2.from_pretrained(args.model, max_context=args.max_context)
    tokenizer = load_tokenizer(args.model)
    ids = encode(tokenizer, args.prompt)
    if not ids:
        sys.exit("the prompt encodes to no tokens")
    out: list[int] = []
    start = time.perf_counter()
    for t in model.generate(ids, args.max_tokens, args.temperature, args.top_k, args.top_p,
                            stop_ids=model.eos_token_ids):
        out.append(t)
    elapsed = time.perf_counter() - start
    print(tokenizer.decode(ids + out) if tokenizer is not None else " ".join(map(str, ids + out)))
    print(f"{len(out)} tokens in {elapsed:.2f} s ({elapsed / max(len(out), 1) * 1000:.1f} ms/token, prefill included)",
          file=sys.stderr)


if __name__ == "__main__":
    main()
