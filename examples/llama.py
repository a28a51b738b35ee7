"""Text generation with a LLaMA 2/3 or Qwen2 model: a Hugging Face directory (config.json, model.safetensors or a
sharded index, tokenizer.json) or a llama.cpp .gguf file (text needs a tokenizer.json beside it or --tokenizer;
without one, the prompt and the output are token ids).

    python examples/llama.py --model path/to/Llama-3.2-1B --prompt "The capital of France is" --max-tokens 32
    python examples/llama.py --model model.Q8_0.gguf --tokenizer path/to/tokenizer.json --prompt "Hi" --temperature 0.7

Greedy by default (--temperature 0). The prompt is run in one batched forward; every new token is then one replay
of a jitted decode step (see tinygrad.nn.transformer; its generate_main is this command line).
"""

from tinygrad.nn.transformer import Llama, generate_main

if __name__ == "__main__":
    generate_main(Llama, description=__doc__.splitlines()[0])
