"""Tiny language models for the tests of tinygrad.nn.transformer and tinygrad.llm: transformers models with random
weights (seeded by the caller, or by `seed`), word-level tokenizers over a small vocabulary of WORDS, transformers'
greedy decoding, and float32 GGUF files written as llama.cpp's convert_hf_to_gguf.py writes a LLaMA.

Import it after `pytest.importorskip("transformers")` and `pytest.importorskip("torch")`; tokenizers and gguf are
asked for (or the test skipped) only by the helpers that need them.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
import torch
import transformers

WORDS = "the quick brown fox jumps over a lazy dog while one small cat sat on the warm mat".split()
MAX_CONTEXT = 64  # the tiny models' max_position_embeddings
SIZES = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "max_position_embeddings": MAX_CONTEXT}


def tiny_gpt2(vocab: int = 257, tie: bool = True) -> Any:
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=vocab, n_positions=MAX_CONTEXT, tie_word_embeddings=tie,
        bos_token_id=0, eos_token_id=None))


def tiny_llama(vocab: int = 257, tie: bool = False, rope: dict | None = None, bos: int = 0,
               seed: int | None = None) -> Any:
    """A 2-layer LLaMA (grouped-query attention: 4 heads, 2 of keys and values) in eval mode; `rope`: its
    rope_parameters (e.g. LLaMA 3 scaling); `seed`: torch's seed for the weights (None: as torch stands)."""
    if seed is not None:
        torch.manual_seed(seed)
    kwargs = {"rope_parameters": rope} if rope else {}
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=vocab, tie_word_embeddings=tie, bos_token_id=bos, eos_token_id=None, **SIZES, **kwargs)).eval()


def tiny_qwen2(vocab: int = 257, tie: bool = True) -> Any:
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        vocab_size=vocab, tie_word_embeddings=tie, bos_token_id=0, eos_token_id=None, **SIZES))


def word_tokenizer(vocab_size: int, specials: Sequence[str] = (), bos: str | None = None) -> Any:
    """Whole words: "[UNK]" (id 0), the `specials` (as special tokens), WORDS, then fillers "w<id>" up to
    `vocab_size`, so that every id a model can produce decodes to a word. `bos`: a special token added in front of
    every plain prompt."""
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {"[UNK]": 0}
    for w in [*specials, *WORDS]:
        vocab.setdefault(w, len(vocab))
    while len(vocab) < vocab_size:
        vocab[f"w{len(vocab)}"] = len(vocab)
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    if specials:
        tok.add_special_tokens(list(specials))
    if bos is not None:
        tok.post_processor = tokenizers.processors.TemplateProcessing(single=f"{bos} $A",
                                                                      special_tokens=[(bos, vocab[bos])])
    return tok


def hf_greedy(hf: Any, prompt: list[int], n: int) -> list[int]:
    """transformers' greedy continuation of `prompt`: n ids (fewer where its eos_token_id ends it)."""
    with torch.no_grad():
        out = hf.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                          max_new_tokens=n, do_sample=False, pad_token_id=0)
    return out[0, len(prompt):].tolist()


GGUF_NAMES = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
              "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
              "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
              "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
              "mlp.down_proj.weight": "ffn_down.weight"}


def write_gguf(path: pathlib.Path, hf: Any, *, vocab: Mapping[str, Any] | None = None, eos_id: int | None = None,
               chat_template: str | None = None, rope_freqs: np.ndarray | None = None) -> None:
    """A float32 GGUF file of the transformers LLaMA `hf` as llama.cpp's convert_hf_to_gguf.py writes one: its tensor
    names, and the q/k rows of each head reordered into interleaved pairs for its rope. `vocab`: tokenizer.ggml.*
    metadata (a byte-level BPE: model, pre, tokens, token_type, merges, bos and eos ids), written with
    add_bos_token; `eos_id`: an end-of-text id without a vocabulary; `rope_freqs`: LLaMA 3's rope_freqs tensor."""
    gguf = pytest.importorskip("gguf")
    cfg = hf.config
    heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads

    def permute(w: np.ndarray, n: int) -> np.ndarray:
        return w.reshape(n, 2, w.shape[0] // n // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    if vocab is not None:
        w.add_tokenizer_model(vocab["tokenizer.ggml.model"])
        w.add_tokenizer_pre(vocab["tokenizer.ggml.pre"])
        w.add_token_list(vocab["tokenizer.ggml.tokens"])
        w.add_token_types(vocab["tokenizer.ggml.token_type"])
        w.add_token_merges(vocab["tokenizer.ggml.merges"])
        w.add_bos_token_id(vocab["tokenizer.ggml.bos_token_id"])
        eos_id = vocab["tokenizer.ggml.eos_token_id"] if eos_id is None else eos_id
        w.add_add_bos_token(True)
    if eos_id is not None:
        w.add_eos_token_id(eos_id)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    for name, t in hf.state_dict().items():
        a = t.detach().numpy().astype(np.float32)
        if name == "model.embed_tokens.weight":
            w.add_tensor("token_embd.weight", a)
        elif name == "model.norm.weight":
            w.add_tensor("output_norm.weight", a)
        elif name == "lm_head.weight":
            if not cfg.tie_word_embeddings:
                w.add_tensor("output.weight", a)
        else:
            _, _, layer, rest = name.split(".", 3)
            if rest == "self_attn.q_proj.weight":
                a = permute(a, heads)
            elif rest == "self_attn.k_proj.weight":
                a = permute(a, kv_heads)
            w.add_tensor(f"blk.{layer}.{GGUF_NAMES[rest]}", a)
    if rope_freqs is not None:
        w.add_tensor("rope_freqs.weight", rope_freqs.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
