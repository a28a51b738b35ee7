"""Text generation with a GPT-2 checkpoint in Hugging Face's layout (a directory with config.json and
model.safetensors, and tokenizer.json for text; without it, the prompt and the output are token ids).

    python examples/gpt2.py --model path/to/gpt2 --prompt "The meaning of life is" --max-tokens 40
    python examples/gpt2.py --model path/to/gpt2 --prompt "Hello" --temperature 0.8 --top-k 40 --top-p 0.95 --seed 1

Greedy by default (--temperature 0). The prompt is run in one batched forward; every new token is then one replay
of a jitted decode step (see tinygrad.nn.transformer; its generate_main is this command line).
"""

from tinygrad.nn.transformer import GPT2, generate_main

if __name__ == "__main__":
    generate_main(GPT2, description=__doc__.splitlines()[0])
