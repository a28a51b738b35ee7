"""Text generation with a mixture-of-experts model from a Hugging Face directory: Mixtral (MixtralForCausalLM),
Qwen3-MoE (Qwen3MoeForCausalLM) or OLMoE (OlmoeForCausalLM): config.json, model.safetensors or a sharded index, and
tokenizer.json (without one, the prompt and the output are token ids).

    python examples/mixtral.py --model path/to/Mixtral-8x7B-v0.1 --prompt "The capital of France is" --max-tokens 32
    python examples/mixtral.py --model path/to/OLMoE-1B-7B-0924 --prompt "Hi" --temperature 0.7 --seed 1

Each token runs only the experts its router picks (tinygrad.nn.transformer.SparseMoE): the prompt's tokens are
grouped by expert, so that each expert multiplies all of its tokens at once, and every new token is one replay of a
jitted decode step that reads just the chosen experts' weights. Greedy by default (--temperature 0).
"""

from tinygrad.nn.transformer import Llama, generate_main

if __name__ == "__main__":
    generate_main(Llama, description=__doc__.splitlines()[0])
