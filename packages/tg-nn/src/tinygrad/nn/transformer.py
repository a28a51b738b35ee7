"""Decoder-only language models: GPT-2, and LLaMA 2/3 with its Qwen2 and Qwen3 variants and the mixtures of experts
Mixtral, Qwen3-MoE and OLMoE (`SparseMoE`: each token runs only its top-k experts), loaded from Hugging Face
checkpoints (`config.json` with `model.safetensors` or a sharded `model.safetensors.index.json`) or, for the LLaMA
family, a GGUF file.

    from tinygrad.nn.transformer import Llama, load_tokenizer
    model = Llama.from_pretrained("path/to/model")
    tok = load_tokenizer("path/to/model")
    ids = list(model.generate(tok.encode("Once upon a time").ids, max_new_tokens=32))
    print(tok.decode(ids))

How it runs. `forward(tokens, start_pos)` takes a batch of token ids (B, T) placed at positions start_pos ..
start_pos+T-1, writes their keys and values into each layer's KV cache (shape (2, B, n_kv_heads, max_context,
head_dim), made once per batch size and written in place) and returns the logits (B, T, vocab). `generate` runs the
prompt first (the prefill), then produces one token per step with a `TinyJit` step whose position is a bound
`Variable`: every step has the same shapes, so it compiles once and is replayed after. The prompt runs in chunks
whose lengths are powers of two (`prompt_chunks`: 100 tokens are 64 + 32 + 4), each chunk a `TinyJit` step of its
length at a Variable position, so that every prompt length is served by the same few captures and a prefill after
the first few replays kernels instead of building its graph in Python again; where a layer says it would run
worse inside a capture (`captures_rows`), the prompt runs as one unjitted forward. Prompts of different lengths are
padded on the left (and run unjitted); their positions start at their first real token and the pads are masked out
as keys. When the cache is full, the last half of the context is run again from position 0 (a
context shift, as llama.cpp does) and decoding goes on from there.
"""

from __future__ import annotations

import json
import math
import pathlib
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from tinygrad import Tensor, TinyJit, Variable, dtypes
from tinygrad.dtype import DType, DTypeLike, to_dtype
from tinygrad.nn.norm import LayerNorm, RMSNorm
from tinygrad.nn.state import get_state_dict, safe_load
from tinygrad.nn.training import is_training
from tinygrad.uop.ops import Ops, UOp

__all__ = ["GPT2", "LLAMA_MODEL_TYPES", "Attention", "ConfigError", "Experts", "FeedForward", "GPT2Config", "KVCache",
           "Llama", "LlamaConfig", "SparseMoE", "WeightsError", "apply_rope", "generate_main", "load_hf_weights",
           "load_tokenizer", "precompute_rope", "prompt_chunks", "rope_frequencies", "sample"]

Pos = int | UOp  # a start position: a plain int, or a bound Variable inside the jitted decode step


class ConfigError(ValueError):
    """A model configuration this module cannot run (an unknown architecture, activation or rope scaling)."""


class WeightsError(ValueError):
    """A checkpoint whose tensors do not fit the model: names missing or unexpected, or shapes that differ."""


# ---- building blocks ------------------------------------------------------------------------------------------------

class Linear:
    """y = x @ weight.T + bias, weight (out, in) as in PyTorch. Unlike nn.Linear it draws no initial weights
    (which would be computed only to be thrown away): the model's weights always come from a checkpoint."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False, dtype: DType = dtypes.float32):
        self.weight = Tensor.empty(out_features, in_features, dtype=dtype)
        self.bias: Tensor | None = Tensor.empty(out_features, dtype=dtype) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        return x.linear(self.weight.T, self.bias)


class Conv1D:
    """GPT-2's projection as Hugging Face stores it: weight (in, out), so y = x @ weight + bias needs no transpose."""

    def __init__(self, in_features: int, out_features: int, dtype: DType = dtypes.float32):
        self.weight = Tensor.empty(in_features, out_features, dtype=dtype)
        self.bias = Tensor.empty(out_features, dtype=dtype)

    def __call__(self, x: Tensor) -> Tensor:
        return x.linear(self.weight, self.bias)


class Embedding:
    """Rows of weight (vocab, dim) picked by integer ids; see Linear for why not nn.Embedding."""

    def __init__(self, vocab_size: int, dim: int, dtype: DType = dtypes.float32):
        self.weight = Tensor.empty(vocab_size, dim, dtype=dtype)

    def __call__(self, idx: Tensor) -> Tensor:
        return self.weight[idx]


def rope_frequencies(head_dim: int, theta: float = 10000.0, scaling: Mapping[str, Any] | None = None) -> np.ndarray:
    """The rotary inverse frequencies theta^(-2i/head_dim), i < head_dim/2, as float32, adjusted by a Hugging Face
    `rope_scaling` dict: type "default", "linear" (every frequency / factor) or "llama3" (long wavelengths / factor,
    short ones kept, a smooth blend between; LLaMA 3.1's long-context recipe)."""
    if head_dim % 2:
        raise ConfigError(f"rotary embeddings need an even head_dim, got {head_dim}")
    # float32 throughout, in the order transformers computes them, so the angles round the way they do there
    inv = (1.0 / (np.float32(theta) ** (np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32)
                                        / np.float32(head_dim)))).astype(np.float32)
    kind = _rope_kind(scaling)
    if kind == "default":
        return inv
    assert scaling is not None
    factor = np.float32(_need(scaling, "factor", "rope_scaling"))
    if kind == "linear":
        return (inv / factor).astype(np.float32)
    low = np.float32(_need(scaling, "low_freq_factor", "rope_scaling"))
    high = np.float32(_need(scaling, "high_freq_factor", "rope_scaling"))
    old_context = np.float32(_need(scaling, "original_max_position_embeddings", "rope_scaling"))
    if not high > low:
        raise ConfigError(f"llama3 rope scaling needs high_freq_factor > low_freq_factor, got {high} and {low}")
    low_wavelen, high_wavelen = old_context / low, old_context / high
    wavelen = np.float32(2 * math.pi) / inv
    scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old_context / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, blended, scaled).astype(np.float32)


def _rope_kind(scaling: Mapping[str, Any] | None) -> str:
    if scaling is None:
        return "default"
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind not in ("default", "linear", "llama3"):
        raise ConfigError(f"rope scaling of type {kind!r} is not supported (supported: default, linear, llama3)")
    return str(kind)


def precompute_rope(head_dim: int, max_context: int, theta: float = 10000.0, scaling: Mapping[str, Any] | None = None,
                    freq_factors: np.ndarray | None = None, device: str | None = None) -> tuple[Tensor, Tensor]:
    """cos and sin tables (max_context, head_dim) for positions 0 .. max_context-1, each frequency repeated over the
    two halves of a head (the "rotate half" layout of Hugging Face's LLaMA). `freq_factors` divides the frequencies
    (llama.cpp stores LLaMA 3's scaling that way, as the tensor rope_freqs.weight)."""
    inv = rope_frequencies(head_dim, theta, scaling)
    if freq_factors is not None:
        inv = (inv / np.asarray(freq_factors, np.float32).reshape(-1)).astype(np.float32)
    angles = np.arange(max_context, dtype=np.float32)[:, None] * inv[None, :]  # float32, as transformers does
    angles = np.concatenate([angles, angles], axis=-1)
    return (Tensor(np.cos(angles).astype(np.float32), device=device).realize(),
            Tensor(np.sin(angles).astype(np.float32), device=device).realize())


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate x (..., T, head_dim) by the angles whose cos and sin broadcast against it: each dim i of the first
    half pairs with dim i of the second half."""
    half = x.shape[-1] // 2
    rotated = Tensor.cat(-x[..., half:], x[..., :half], dim=-1)
    return (x * cos + rotated * sin).cast(x.dtype)


class KVCache:
    """Keys and values of past positions, (2, B, n_kv_heads, max_context, head_dim), one buffer realized once and
    written in place (each step's kernel stores only the new positions): the jitted decode step reads and writes the
    same memory on every replay."""

    def __init__(self, batch: int, n_kv_heads: int, max_context: int, head_dim: int, dtype: DType = dtypes.float32,
                 device: str | None = None):
        shape = (2, batch, n_kv_heads, max_context, head_dim)
        # a buffer of its own, zeroed from the host. Not `assign(Tensor.zeros(...))`: that constant graph is one node
        # shared by every cache of this shape and, realized, names the last cache's buffer, so that cache's first
        # write would have another reader and could not go in place.
        self.kv = Tensor.empty(*shape, dtype=dtype, device=device)
        memory = self.kv._buffer()
        memory.copyin(memoryview(bytearray(memory.nbytes)))  # all-zero bytes: 0.0 in every float format

    @property
    def max_context(self) -> int:
        return int(self.kv.shape[3])

    def update(self, k: Tensor, v: Tensor, start_pos: Pos, *along: Tensor) -> tuple[Tensor, Tensor]:
        """Write k, v (B, n_kv_heads, T, head_dim) at positions start_pos .. start_pos+T-1; return the keys and
        values of positions 0 .. start_pos+T-1. Outside training, `along` (the step's queries) are realized in the
        same schedule as the cache: computed with k and v, they share what those read (a norm of x, x quantized for
        a quantized projection, GPT-2's fused projection), which a later schedule would compute again."""
        T = k.shape[2]
        end = start_pos + T
        # a region of the realized cache that nothing else reads: the scheduler writes the new rows into its buffer
        # in place (mixin/views.py); realizing the cache, not the view, which would copy the rows out again
        value = Tensor.stack(k, v).cast(self.kv.dtype)
        if not is_training():
            # Outside training the cache holds data, not a gradient path. A value computed from parameters (nn's norm
            # weights are requires_grad=True until a checkpoint replaces them) would make the cache keep its graph
            # after realize(): every step would then compute a whole new cache instead of storing its rows, and a
            # TinyJit capture would add a copy back per layer. In training mode (where an optimizer steps)
            # gradients flow through the cache.
            value = value.detach()
            if self.kv.requires_grad:  # set by a training-mode call; the cache is plain state again from here on
                self.kv.requires_grad = None
        self.kv[:, :, :, start_pos:end].assign(value.contiguous())
        Tensor.realize(self.kv, *(() if is_training() else along))
        return self.kv[0, :, :, 0:end], self.kv[1, :, :, 0:end]


def attend(q: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None, scale: float | None = None) -> Tensor:
    """Attention of q (B, H, T, hd) over keys/values (B, KV, S, hd) with KV dividing H: query head h reads kv head
    h // (H / KV), as transformers' repeat_kv. The query heads are grouped by kv head instead of repeating the keys,
    so that a step never copies the cache. mask: bool (B or 1, 1, 1, T, S), True where a key is visible."""
    B, H, T, hd = q.shape
    KV = keys.shape[1]
    grouped = q.reshape(B, KV, H // KV, T, hd)
    out = grouped.scaled_dot_product_attention(keys.unsqueeze(2), values.unsqueeze(2), attn_mask=mask, scale=scale)
    return out.reshape(B, H, T, hd)


class Attention:
    """Multi-head attention with grouped key/value heads (n_kv_heads dividing n_heads), rotary positions and a KV
    cache; the projections are named as in Hugging Face's LLaMA."""

    def __init__(self, dim: int, n_heads: int, n_kv_heads: int, head_dim: int, qkv_bias: bool = False,
                 out_bias: bool = False, dtype: DType = dtypes.float32, qk_norm: str | None = None,
                 norm_eps: float = 1e-6, clip_qkv: float | None = None):
        if n_heads % n_kv_heads:
            raise ConfigError(f"num_attention_heads={n_heads} must be a multiple of num_key_value_heads={n_kv_heads}")
        if qk_norm not in (None, "head", "full"):
            raise ConfigError(f"qk_norm must be None, 'head' or 'full', got {qk_norm!r}")
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, head_dim
        self.q_proj = Linear(dim, n_heads * head_dim, qkv_bias, dtype)
        self.k_proj = Linear(dim, n_kv_heads * head_dim, qkv_bias, dtype)
        self.v_proj = Linear(dim, n_kv_heads * head_dim, qkv_bias, dtype)
        self.o_proj = Linear(n_heads * head_dim, dim, out_bias, dtype)
        # RMSNorms of the queries and keys before rope: per head over head_dim (Qwen3), or over the whole
        # projection (OLMo/OLMoE, whose weights then have n_heads * head_dim entries)
        self.qk_norm, self.clip_qkv = qk_norm, clip_qkv
        if qk_norm is not None:
            q_size, k_size = (head_dim, head_dim) if qk_norm == "head" else (n_heads * head_dim, n_kv_heads * head_dim)
            self.q_norm = RMSNorm(q_size, eps=norm_eps)
            self.k_norm = RMSNorm(k_size, eps=norm_eps)
        self._cache: KVCache | None = None

    def _project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q (B, n_heads, T, hd), k and v (B, n_kv_heads, T, hd), normalised and clipped as configured."""
        B, T, _ = x.shape
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.qk_norm == "full":
            q, k = self.q_norm(q).cast(x.dtype), self.k_norm(k).cast(x.dtype)
        if self.clip_qkv is not None:
            q, k, v = (t.clip(-self.clip_qkv, self.clip_qkv) for t in (q, k, v))
        q = q.reshape(B, T, self.n_heads, self.head_dim)
        k = k.reshape(B, T, self.n_kv_heads, self.head_dim)
        if self.qk_norm == "head":
            q, k = self.q_norm(q).cast(x.dtype), self.k_norm(k).cast(x.dtype)
        return (q.transpose(1, 2), k.transpose(1, 2),
                v.reshape(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2))

    def __call__(self, x: Tensor, start_pos: Pos, rope: tuple[Tensor, Tensor], mask: Tensor | None) -> Tensor:
        if self._cache is None:
            raise RuntimeError("the attention layer has no KV cache; call the model (it makes one per batch size)")
        B, T, _ = x.shape
        q, k, v = self._project(x)
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if T > 1:
            # computed once: the scores read each query once per key, and a query rotated in their kernel would be
            # rotated again for every key (its projection is a buffer already where the weights are quantized, so
            # the scheduler has no reduction to compute it with)
            q = q.contiguous()
        keys, values = self._cache.update(k, v, start_pos, q)
        out = attend(q, keys, values, mask)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim))


class FeedForward:
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, dim: int, hidden_dim: int, bias: bool = False, dtype: DType = dtypes.float32):
        self.gate_proj = Linear(dim, hidden_dim, bias, dtype)
        self.up_proj = Linear(dim, hidden_dim, bias, dtype)
        self.down_proj = Linear(hidden_dim, dim, bias, dtype)

    def __call__(self, x: Tensor) -> Tensor:
        return self.down_proj(self.gate_proj(x).silu() * self.up_proj(x))


class Experts:
    """The weights of a mixture's experts, each a SwiGLU, stacked and stored input-major: gate_up (n_experts, dim,
    2 * hidden_dim), each expert's gate columns then its up columns, and down (n_experts, hidden_dim, dim). These
    are the transposes of transformers' stacked gate_up_proj and down_proj (the loaders transpose once): a kernel
    that reads one expert's weights for one token then reads rows of outputs side by side, whole cache lines at a
    time, where the output-major layout would read one value from each of many rows a power of two apart, which
    the caches map to the same few sets (several times slower)."""

    def __init__(self, n_experts: int, dim: int, hidden_dim: int, dtype: DType = dtypes.float32):
        self.n_experts, self.dim, self.hidden_dim = n_experts, dim, hidden_dim
        self.gate_up = Tensor.empty(n_experts, dim, 2 * hidden_dim, dtype=dtype)
        self.down = Tensor.empty(n_experts, hidden_dim, dim, dtype=dtype)


def _host_reads_allowed() -> bool:
    """False inside a TinyJit call or a traced function body, where reading device data on the host is refused
    (a replay would keep the value read while capturing)."""
    from tinygrad.engine.jit_state import running, tracing_functions

    return not running and not tracing_functions


class SparseMoE:
    """A mixture of SwiGLU experts with top-k routing (Mixtral, Qwen3-MoE, OLMoE): the router `gate` scores the
    experts per token, softmax (in float32), the k best are kept, their weights renormalised to sum to 1 where
    `norm_topk_prob` (always for Mixtral), and the token's output is the weighted sum of those k experts' outputs.

    Only the chosen experts run, in one of two ways:
    - gathered (few tokens, and always inside TinyJit): per (token, chosen expert) the matmuls read that expert's
      rows directly. The one-hot compare over the experts is written as a where that the compiler folds into an
      indexed load (tg-compiler's codegen/gather_fold.py), so an expert that is not chosen is never read and the
      work is that of k experts. Every shape is static: the decode step compiles once.
    - grouped (prefill): the routing is read on the host, the tokens are sorted by expert into a (n_experts,
      capacity, dim) batch (capacity: the busiest expert's count, rounded up so that few shapes compile), and
      each expert runs one matmul over its tokens, reading its weights once for all of them. Unused
      slots are padding whose outputs are never gathered back.
    The gathered form reads the chosen experts' weights once per token; the grouped form reads every expert's
    weights once, whatever the number of tokens, and computes the padding too. So the grouped form pays off once
    each expert is chosen about twice on average (`grouped_min_choices`)."""

    #: (token, expert) choices per expert, on average, from which a call outside TinyJit groups tokens by expert
    grouped_min_choices = 2.0

    def __init__(self, dim: int, hidden_dim: int, n_experts: int, top_k: int, norm_topk_prob: bool,
                 dtype: DType = dtypes.float32):
        if not 1 <= top_k <= n_experts:
            raise ConfigError(f"num_experts_per_tok={top_k} must be between 1 and the number of experts ({n_experts})")
        self.top_k, self.norm_topk_prob = top_k, norm_topk_prob
        self.gate = Linear(dim, n_experts, False, dtype)
        self.experts = Experts(n_experts, dim, hidden_dim, dtype)

    def route(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """For tokens x (N, dim): the weights (N, k) in x's dtype and the chosen experts (N, k) int32, best first."""
        probs = self.gate(x).float().softmax(-1)
        n_experts = probs.shape[-1]
        positions = _positions(n_experts, x.device)
        weights, chosen = [], []
        for _ in range(self.top_k):  # k rounds of argmax: k is small, and ties go to the lowest index as in torch
            best = probs.argmax(-1, keepdim=True).cast(dtypes.int32)
            weights.append(probs.max(-1, keepdim=True))
            chosen.append(best)
            probs = (positions == best).where(-1.0, probs)  # probabilities are >= 0: a taken expert drops out
        w, sel = Tensor.cat(*weights, dim=-1), Tensor.cat(*chosen, dim=-1)
        if self.norm_topk_prob:
            w = w / w.sum(-1, keepdim=True)
        return w.cast(x.dtype), sel

    def captures_rows(self, rows: int) -> bool:
        """Whether `rows` tokens run inside a TinyJit capture as outside it: there they are always gathered, outside
        grouped by expert from this many on (see the class's doc)."""
        return rows * self.top_k < self.grouped_min_choices * self.experts.n_experts

    def __call__(self, x: Tensor) -> Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        w, sel = self.route(flat)
        n = flat.shape[0]
        if isinstance(n, int) and n * self.top_k >= self.grouped_min_choices * self.experts.n_experts \
                and _host_reads_allowed():
            out = self._grouped(flat, w, sel)
        else:
            out = self._gathered(flat, w, sel)
        return out.reshape(shape)

    def _gathered(self, x: Tensor, w: Tensor, sel: Tensor) -> Tensor:
        N, D = x.shape
        k, ex = self.top_k, self.experts
        E, H = ex.n_experts, ex.hidden_dim
        # (N, k, E, 1, 1): which expert each (token, choice) takes; a sum over E of a where on it is what the
        # compiler folds into a load of the chosen expert's row, so the sum over E never runs
        pick = sel.reshape(N, k, 1, 1, 1) == _positions(E, x.device).reshape(1, 1, E, 1, 1)
        # products and sums in float32, as matmul accumulates, with the casts inside the where: a sum of a cast where
        # (what a half sum would build) is not the where the fold looks for
        gate_up = pick.where(x.float().reshape(N, 1, 1, D, 1) * ex.gate_up.float().reshape(1, 1, E, D, 2 * H), 0.0)
        gate_up = gate_up.sum((2, 3)).contiguous()  # (N, k, 2H); realized once, not per output column below
        hidden = (gate_up[..., :H].silu() * gate_up[..., H:]).cast(x.dtype).contiguous()
        y = pick.where(hidden.float().reshape(N, k, 1, H, 1) * ex.down.float().reshape(1, 1, E, H, D), 0.0)
        return (y.sum((2, 3)) * w.float().reshape(N, k, 1)).sum(1).cast(x.dtype)

    def _grouped(self, x: Tensor, w: Tensor, sel: Tensor) -> Tensor:
        N, D = x.shape
        k, ex = self.top_k, self.experts
        E, H = ex.n_experts, ex.hidden_dim
        w = w.realize(sel)  # one schedule for both: the routing is computed once
        chosen = sel.numpy().reshape(-1).astype(np.int64)  # (N * k,) the expert of each (token, choice)
        counts = np.bincount(chosen, minlength=E)
        busiest = int(counts.max())
        # rounded up to a multiple of an eighth to a quarter of itself: at most 25% padding, and few distinct shapes
        # (each compiles its kernels once) as prompt lengths vary
        step = 1 << max(0, busiest.bit_length() - 3)
        capacity = -(-busiest // step) * step
        order = np.argsort(chosen, kind="stable")
        first = np.concatenate([[0], np.cumsum(counts)[:-1]])
        slot = np.empty_like(chosen)
        slot[order] = np.arange(len(chosen)) - first[chosen[order]]
        tokens = np.zeros((E, capacity), np.int32)  # padding slots read token 0; their results are never used
        tokens[chosen, slot] = np.arange(len(chosen)) // k
        where = (chosen * capacity + slot).reshape(N, k).astype(np.int32)
        xs = x[Tensor(tokens, device=x.device)]  # (E, capacity, D)
        gate_up = xs.matmul(ex.gate_up).contiguous()
        hidden = gate_up[..., :H].silu() * gate_up[..., H:]
        y = hidden.matmul(ex.down).reshape(E * capacity, D)
        return (y[Tensor(where, device=x.device)] * w.reshape(N, k, 1)).sum(1).cast(x.dtype)


def _positions(n: int, device: str | tuple[str, ...] | None) -> Tensor:
    """0 .. n-1 (int32) as a lazy ARANGE node, not host data: compared with an index and summed over, it lowers to
    the reduce loop's own counter, which is what lets the compiler fold the compare-and-sum into a load."""
    return Tensor(UOp(Ops.ARANGE, dtypes.int32, (), n), device=device)


# ---- sampling -------------------------------------------------------------------------------------------------------

def sample(logits: Tensor, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """Token ids (int32, shape logits.shape[:-1]) picked from logits (..., vocab) on the device.

    temperature 0: the most likely token (greedy). Otherwise a draw from softmax(logits / temperature), restricted
    to the top_k most likely tokens (0: no limit; tokens tied with the k-th are kept too, as transformers does) and
    then to the smallest set of most likely tokens whose probability reaches top_p (1: no limit). Random draws come
    from tinygrad's generator (`Tensor.manual_seed`)."""
    _check_sampling(temperature, top_k, top_p)
    V = logits.shape[-1]
    if temperature == 0:
        return logits.argmax(-1).cast(dtypes.int32)
    x = logits.float().reshape(-1, V) / temperature
    if 0 < top_k < V:
        t = _largest_threshold(x, None, float(top_k), x.min(-1, keepdim=True), x.max(-1, keepdim=True))
        x = (x >= t).where(x, -math.inf)
    if top_p < 1:
        probs = x.softmax(-1)
        zero = Tensor.zeros(probs.shape[0], 1, device=probs.device)
        t = _largest_threshold(probs, probs, top_p, zero, probs.max(-1, keepdim=True))
        x = (probs >= t).where(x, -math.inf)
    # the Gumbel-max trick: argmax(x + Gumbel noise) is a draw from softmax(x), made on the device with one pass
    # over the vocabulary (Tensor.multinomial compares every draw with the whole cdf); removed tokens stay at -inf.
    # The uniforms are kept off 0 so the noise is finite.
    u = Tensor.rand(*x.shape, device=x.device).maximum(1e-20)
    return (x - (-u.log()).log()).argmax(-1).reshape(logits.shape[:-1]).cast(dtypes.int32)


def _check_sampling(temperature: float, top_k: int, top_p: float) -> None:
    if temperature < 0 or not math.isfinite(temperature):
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0: no limit), got {top_k}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")


def _largest_threshold(v: Tensor, w: Tensor | None, target: float, lo: Tensor, hi: Tensor, rounds: int = 8,
                       n: int = 16) -> Tensor:
    """Per row of v (B, V): the largest t such that f(t) = sum of w (1 when None) over the values >= t reaches
    `target`, snapped to a value of the row; lo (B, 1) must satisfy f(lo) >= target and hi (B, 1) be the row's
    maximum. A full sort of the vocabulary costs O(V^2) here; instead each round tries n thresholds between lo and
    hi at once and keeps the bracket where f crosses the target (f only falls as t grows), so `rounds` rounds
    resolve t to (max - min) / n^rounds, past float32's precision."""
    steps = Tensor.arange(1, n + 1, device=v.device, dtype=dtypes.float32).reshape(1, n, 1)
    for _ in range(rounds):
        width = hi - lo
        grid = lo.unsqueeze(1) + width.unsqueeze(1) * steps / n  # (B, n, 1)
        above = v.unsqueeze(1) >= grid  # (B, n, V)
        mass = above.cast(dtypes.float32).sum(-1) if w is None else above.where(w.unsqueeze(1), 0.0).sum(-1)
        k = (mass >= target).cast(dtypes.float32).sum(-1, keepdim=True)  # how many thresholds still reach it
        lo, hi = lo + width * k / n, lo + width * (k + 1) / n
    # the smallest value at or above lo: every value the bracket leaves in is kept, none of those above dropped
    return (v >= lo).where(v, math.inf).min(-1, keepdim=True)


# ---- the shared model machinery -------------------------------------------------------------------------------------

class _CausalLM:
    """What GPT2 and Llama share: the caches, masks, forward and generation. A subclass sets max_context,
    vocab_size, dtype and device, and defines _attention_layers and _hidden."""

    max_context: int
    vocab_size: int
    dtype: DType
    device: str | None

    def _attention_layers(self) -> list[Any]:
        raise NotImplementedError

    def _hidden(self, tokens: Tensor, start_pos: Pos, positions: Tensor | None, mask: Tensor | None) -> Tensor:
        """The final normalised hidden states (B, T, dim)."""
        raise NotImplementedError

    def _head(self, h: Tensor) -> Tensor:
        raise NotImplementedError

    def _init_runtime(self) -> None:
        #: the end-of-text ids the checkpoint names (config.json's eos_token_id, GGUF's tokenizer.ggml.eos_token_id)
        self.eos_token_ids: list[int] = []
        self._batch: int | None = None
        self._decoders: dict[tuple, TinyJit] = {}
        #: the jitted prefill steps by (batch, chunk length): at most one per power of two up to PROMPT_CHUNK_MOST
        self._prompters: dict[tuple[int, int], TinyJit] = {}

    # -- caches --
    def reset_cache(self, batch_size: int) -> None:
        """Make fresh KV caches for batches of `batch_size` (forward does when the batch size changes)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        for attn in self._attention_layers():
            attn._cache = KVCache(batch_size, attn.n_kv_heads, self.max_context, attn.head_dim, self.dtype,
                                  self.device)
        self._batch = batch_size
        self._decoders.clear()  # their captures hold the old caches' buffers
        self._prompters.clear()

    def _ensure_cache(self, batch_size: int) -> None:
        if self._batch != batch_size:
            self.reset_cache(batch_size)

    # -- forward --
    def forward(self, tokens: Tensor, start_pos: Pos = 0) -> Tensor:
        """Logits (B, T, vocab) of tokens (B, T) at positions start_pos .. start_pos+T-1, each seeing the tokens
        before it: those of this call and those of earlier calls, which the KV cache keeps (so call with
        start_pos=0 first, then go on where the last call ended). start_pos may be a bound Variable."""
        return self._logits(tokens, start_pos, None, None, last_only=False)

    __call__ = forward

    def _logits(self, tokens: Tensor, start_pos: Pos, positions: Tensor | None, key_valid: Tensor | None,
                last_only: bool) -> Tensor:
        B, T = token_batch_shape(tokens)
        if isinstance(start_pos, int) and not 0 <= start_pos <= self.max_context - T:
            raise ValueError(f"positions {start_pos} .. {start_pos + T - 1} do not fit the KV cache of "
                             f"max_context={self.max_context}; start again from 0 (or load with a larger max_context)")
        if isinstance(start_pos, UOp) and start_pos.vmax + T > self.max_context:
            raise ValueError(f"start_pos {start_pos} may reach {start_pos.vmax}, past max_context={self.max_context}")
        self._ensure_cache(int(B))
        h = self._hidden(tokens, start_pos, positions, self._mask(int(B), T, start_pos, key_valid))
        return self._head(h[:, -1:] if last_only else h)

    def _mask(self, B: int, T: int, start_pos: Pos, key_valid: Tensor | None) -> Tensor | None:
        """bool (B or 1, 1, 1, T, S) with S = start_pos + T: query i (at start_pos + i) sees keys at positions up to
        its own, and only those key_valid marks (pads are not valid)."""
        S = start_pos + T
        mask: Tensor | None = None
        if T > 1:  # one query at the end sees every key: no causal mask needed
            q_pos = Tensor.arange(T, device=self.device) + (Tensor(start_pos, device=self.device)
                                                             if isinstance(start_pos, UOp) else start_pos)
            # arange takes a symbolic stop (a bound Variable) too, though its annotation names plain numbers only
            keys = Tensor.arange(cast(Any, S), device=self.device)
            mask = (keys.reshape(1, -1) <= q_pos.reshape(-1, 1)).reshape(1, 1, 1, T, S)
        if key_valid is not None:
            valid = key_valid[:, 0:S].reshape(B, 1, 1, 1, S)
            mask = valid if mask is None else mask & valid
        return mask

    # -- generation --
    def _decoder(self, batch: int, padded: bool, temperature: float, top_k: int, top_p: float) -> TinyJit:
        """The jitted one-token step for these settings. The sampling settings are baked into its kernels, so each
        combination has a TinyJit of its own."""
        key = (batch, padded, temperature, top_k, top_p)
        if key not in self._decoders:
            def step(tokens: Tensor, start_pos: UOp, positions: Tensor | None = None,
                     key_valid: Tensor | None = None) -> Tensor:
                logits = self._logits(tokens, start_pos, positions, key_valid, last_only=True)[:, -1]
                return sample(logits, temperature, top_k, top_p).realize()
            self._decoders[key] = TinyJit(step)
        return self._decoders[key]

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int, temperature: float = 0.0, top_k: int = 0,
                 top_p: float = 1.0, stop_ids: Sequence[int] = ()) -> Iterator[int]:
        """The new token ids for one prompt, one at a time (see `sample` for the settings); a token in stop_ids is
        yielded and ends the generation."""
        for ids in self.generate_batch([prompt_ids], max_new_tokens, temperature, top_k, top_p, stop_ids):
            yield ids[0]

    def generate_batch(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, temperature: float = 0.0,
                       top_k: int = 0, top_p: float = 1.0, stop_ids: Sequence[int] = (),
                       pad_id: int = 0) -> Iterator[list[int]]:
        """The next token of every prompt, step after step. Prompts of different lengths are padded on the left
        with pad_id (any valid id: pads are masked out). Ends after max_new_tokens steps, or once every row has
        produced a token of stop_ids (rows that stopped earlier keep producing tokens: ignore them). The KV caches
        belong to the model, so run one generation at a time on it (finish or drop an iterator before the next)."""
        rows, pads = self._check_prompts(prompts, pad_id)
        _check_sampling(temperature, top_k, top_p)
        if max_new_tokens <= 0:
            return
        B, padded, stops = len(rows), any(pads), set(stop_ids)
        self._ensure_cache(B)  # before taking the step: new caches drop the steps captured over the old ones
        step = self._decoder(B, padded, temperature, top_k, top_p)
        keep = max(1, self.max_context // 2)  # the context kept by a context shift
        history = [list(r) for r in rows]
        # the cache holds the last `pos` columns of history; cache_pads counts the pads among them, per row
        pos = min(len(history[0]), self.max_context)
        nxt, cache_pads, key_valid = self._prefill(history, pos, pads, temperature, top_k, top_p)
        done = [False] * B
        for i in range(max_new_tokens):
            yield nxt
            done = [d or t in stops for d, t in zip(done, nxt)]
            if all(done) or i == max_new_tokens - 1:
                return
            for row, t in zip(history, nxt):
                row.append(t)
            if pos == self.max_context:  # the cache is full: run the last `keep` columns again from position 0
                pos = keep
                nxt, cache_pads, key_valid = self._prefill(history, pos, pads, temperature, top_k, top_p)
                continue
            kwargs: dict[str, Tensor] = {}
            if key_valid is not None:  # each row's position counts its own tokens only, not its pads
                kwargs = {"positions": Tensor(np.array([[pos - p] for p in cache_pads], np.int32),
                                              device=self.device), "key_valid": key_valid}
            # bind exists on a Variable's UOp at run time; its annotation does not show it
            start = Variable("start_pos", 1, self.max_context - 1).bind(pos)  # type: ignore[attr-defined]
            out = step(Tensor(np.array([[t] for t in nxt], np.int32), device=self.device), start, **kwargs)
            nxt = [int(t) for t in out.numpy().reshape(-1)]
            pos += 1

    def _prompt_steps(self, batch: int, window: int) -> list[tuple[int, TinyJit]] | None:
        """The jitted steps that run a prompt of `window` tokens in chunks (`prompt_chunks`), each writing its keys and
        values into the caches and returning the last position's hidden state; None where a capture of some chunk
        would run a layer worse than an unjitted forward (`_capture_checks`). A chunk's attention scores are
        sized for a whole context inside a capture (its length is a Variable there), which bounds the chunks."""
        heads = max((getattr(a, "n_heads", 1) for a in self._attention_layers()), default=1)
        most = PROMPT_CHUNK_MOST
        while most > 1 and batch * heads * most * self.max_context * 4 > PROMPT_SCORES_BYTES:
            most //= 2
        chunks = prompt_chunks(window, most)
        checks = self._capture_checks()
        if not all(check(batch * rows) for check in checks for rows in set(chunks)):
            return None
        self._ensure_cache(batch)  # before taking the steps: new caches drop the steps captured over the old ones
        return [(rows, self._prompt_step(batch, rows)) for rows in chunks]

    def _prompt_step(self, batch: int, rows: int) -> TinyJit:
        if (batch, rows) not in self._prompters:
            def step(tokens: Tensor, start_pos: UOp) -> Tensor:
                mask = self._mask(batch, rows, start_pos, None)
                return self._hidden(tokens, start_pos, None, mask)[:, -1:].realize()
            self._prompters[batch, rows] = TinyJit(step)
        return self._prompters[batch, rows]

    def _capture_checks(self) -> list[Callable[[int], bool]]:
        """The `captures_rows(rows) -> bool` methods of the model's layers: a layer that may run some number of rows
        worse inside a TinyJit capture than outside one says so there (a quantized layer that makes its float weight
        for many rows, a mixture of experts that groups the tokens by expert on the host)."""
        checks: list[Callable[[int], bool]] = []
        seen: set[int] = set()
        todo: list[Any] = [self]
        while todo:
            obj = todo.pop()
            if id(obj) in seen or isinstance(obj, (Tensor, TinyJit, type, types.ModuleType, str, bytes, int, float,
                                                   np.ndarray)):
                continue
            seen.add(id(obj))
            if getattr(type(obj), "captures_rows", None) is not None:
                checks.append(obj.captures_rows)
            if isinstance(obj, (list, tuple)):
                todo.extend(obj)
            elif isinstance(obj, dict):
                todo.extend(obj.values())
            elif hasattr(obj, "__dict__"):
                todo.extend(vars(obj).values())
        return checks

    def _check_prompts(self, prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[list[list[int]], list[int]]:
        if isinstance(prompts, (str, bytes)) or not len(prompts):
            raise ValueError("prompts must be a non-empty list of token id lists")
        if not 0 <= pad_id < self.vocab_size:
            raise ValueError(f"pad_id {pad_id} is outside the vocabulary of {self.vocab_size}")
        rows = []
        for n, p in enumerate(prompts):
            ids = [int(t) for t in p]
            if not ids:
                raise ValueError(f"prompt {n} is empty; a prompt needs at least one token (a BOS token, say)")
            bad = [t for t in ids if not 0 <= t < self.vocab_size]
            if bad:
                raise ValueError(f"prompt {n} has ids outside the vocabulary of {self.vocab_size}: {bad[:5]}")
            rows.append(ids)
        width = max(len(r) for r in rows)
        pads = [width - len(r) for r in rows]
        return [[pad_id] * p + r for p, r in zip(pads, rows)], pads

    @staticmethod
    def _pads_in(pads: list[int], columns: int, window: int) -> list[int]:
        """How many of the last `window` of `columns` columns are pads, per row (the pads are the first ones)."""
        return [max(0, p - (columns - window)) for p in pads]

    def _key_valid(self, pads: list[int]) -> Tensor:
        cols = np.arange(self.max_context)[None, :]
        return Tensor(cols >= np.array(pads)[:, None], device=self.device).realize()

    def _prefill(self, history: list[list[int]], window: int, pads: list[int], temperature: float, top_k: int,
                 top_p: float) -> tuple[list[int], list[int], Tensor | None]:
        """Run the last `window` columns of every row from position 0: the next ids, the pads in the window per row,
        and the keys that are not pads (None without pads). Without pads the window runs as jitted chunks where the
        model's layers allow (`_prompt_steps`), else as one batched, unjitted forward."""
        columns = len(history[0])
        ids = np.array([r[columns - window:] for r in history], np.int32)
        in_window = self._pads_in(pads, columns, window)
        steps = None if any(pads) else self._prompt_steps(len(history), window)
        if steps is not None:
            last: list[Tensor] = []
            pos = 0
            for rows, step in steps:
                # bind exists on a Variable's UOp at run time; its annotation does not show it
                start = Variable("prompt_start", 0, self.max_context - rows).bind(pos)  # type: ignore[attr-defined]
                # the last chunk's output is dropped before the next runs: kept, it would be a second reader of the
                # caches (its graph reads them), and the next chunk's writes could not go in place
                last.clear()
                last.append(step(Tensor(ids[:, pos:pos + rows], device=self.device), start))
                pos += rows
            logits = self._head(last[0])[:, -1]
            nxt = [int(t) for t in sample(logits, temperature, top_k, top_p).numpy().reshape(-1)]
            last.clear()
            for _, step in steps:
                # the memory between a capture's launches (every layer's activations, for every row of the chunk)
                # goes back to the device's pool between prefills, where the decode steps and the other chunk
                # lengths' captures use it, instead of being held by each capture
                if step.captured is not None:
                    step.captured.free_intermediates()
            return nxt, in_window, None
        tokens = Tensor(ids, device=self.device)
        positions = key_valid = None
        if any(pads):  # padded rows keep this form even once their pads leave the window: one decode step fits all
            positions = Tensor(np.maximum(np.arange(window)[None, :] - np.array(in_window)[:, None], 0)
                               .astype(np.int32), device=self.device)
            key_valid = self._key_valid(in_window)
        logits = self._logits(tokens, 0, positions, key_valid, last_only=True)[:, -1]
        nxt = [int(t) for t in sample(logits, temperature, top_k, top_p).numpy().reshape(-1)]
        return nxt, in_window, key_valid


#: the longest chunk of a prompt that one jitted prefill step takes, and the most bytes of attention scores its capture
#: may hold (its scores are sized for a whole context: the chunk's position is a Variable there)
PROMPT_CHUNK_MOST = 256
PROMPT_SCORES_BYTES = 64 << 20


def prompt_chunks(n: int, most: int) -> list[int]:
    """n tokens as chunk lengths that are powers of two of at most `most` (itself one): as many `most` as fit, then
    the binary digits of the rest, longest first. Every prompt length is then served by the same few jitted steps
    (one per power of two), each compiled once."""
    chunks = [most] * (n // most)
    rest = n % most
    chunks += [1 << b for b in range(rest.bit_length() - 1, -1, -1) if rest >> b & 1]
    return chunks


def _rows_for(table: Tensor, start_pos: Pos, T: int, positions: Tensor | None) -> Tensor:
    """Rows of a per-position table for the tokens: start_pos .. start_pos+T-1 (T, d), or with positions (B, T)
    given, those rows per token (B, T, d)."""
    if positions is None:
        return table[start_pos:start_pos + T]
    return table[positions]


# ---- checkpoints ----------------------------------------------------------------------------------------------------

def _eos_ids(value: Any, vocab_size: int) -> list[int]:
    """The end-of-text ids of a config value (an id, a list of ids, or None) that the model can produce."""
    ids = value if isinstance(value, list) else [value]
    return [i for i in ids if isinstance(i, int) and not isinstance(i, bool) and 0 <= i < vocab_size]


def token_batch_shape(tokens: Tensor) -> tuple[Any, int]:
    """(batch, length) of a model's token ids, checked: a 2-D integer tensor of at least one position."""
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be (batch, length) ids, got shape {tokens.shape}")
    if not tokens.dtype.is_int:
        raise TypeError(f"tokens must be integer ids, got {tokens.dtype}")
    B, T = tokens.shape
    if not isinstance(T, int) or T < 1:
        raise ValueError(f"tokens must hold at least one position, got shape {tokens.shape}")
    return B, T


def prompt_ids(tokenizer: Any, prompt: str, missing: str) -> list[int]:
    """The ids of an example's --prompt: encoded by the tokenizer, or without one the prompt read as ids (exits with
    `missing`, the way to get a tokenizer, when it is text)."""
    if tokenizer is not None:
        return list(tokenizer.encode(prompt).ids)
    try:
        return [int(t) for t in prompt.split()]
    except ValueError:
        raise SystemExit(f"{missing}: give the prompt as token ids, e.g. --prompt '1 2 3'") from None


def _need(cfg: Mapping[str, Any], key: str, where: str = "config.json") -> Any:
    if key not in cfg or cfg[key] is None:
        raise ConfigError(f"{where} has no {key!r}")
    return cfg[key]


def _read_config(directory: str | pathlib.Path) -> dict[str, Any]:
    path = pathlib.Path(directory) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: from_pretrained takes a Hugging Face model directory")
    try:
        cfg = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(cfg, dict):
        raise ConfigError(f"{path} does not hold a JSON object")
    return cfg


def load_hf_weights(directory: str | pathlib.Path, device: str | None = None) -> dict[str, Tensor]:
    """Every tensor of a Hugging Face checkpoint directory, by name: model.safetensors, or the shards that
    model.safetensors.index.json lists (each one loaded once, and every tensor the index names checked)."""
    d = pathlib.Path(directory)
    single, index = d / "model.safetensors", d / "model.safetensors.index.json"
    if single.is_file():
        return safe_load(single, device)
    if not index.is_file():
        other = sorted(p.name for p in d.glob("*.bin")) + sorted(p.name for p in d.glob("*.pt"))
        hint = f" (found {other}: convert them to safetensors)" if other else ""
        raise FileNotFoundError(f"{d} has neither model.safetensors nor model.safetensors.index.json{hint}")
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise WeightsError(f"{index} is not a safetensors index (a JSON object with a 'weight_map'): {e}") from e
    out: dict[str, Tensor] = {}
    for shard in dict.fromkeys(weight_map.values()):
        path = d / shard
        if pathlib.Path(shard).is_absolute() or ".." in pathlib.Path(shard).parts:
            raise WeightsError(f"{index} names the shard {shard!r} outside the model directory")
        if not path.is_file():
            raise FileNotFoundError(f"{index} names the shard {shard}, which is not in {d}")
        out.update(safe_load(path, device))
    absent = [name for name in weight_map if name not in out]
    if absent:
        raise WeightsError(f"{index} lists tensors that its shards do not hold: {absent[:10]}")
    return out


def _weight_targets(model: Any) -> dict[str, Tensor]:
    """The model's weights by name; attributes starting with "_" (caches, rope tables) are runtime state."""
    return {k: v for k, v in get_state_dict(model).items() if not any(part.startswith("_") for part in k.split("."))}


def _install(model: Any, weights: Mapping[str, Tensor], source: str) -> None:
    """Put checkpoint tensors (already renamed to the model's names) in place of the model's placeholder weights,
    cast to the model's dtype and moved to its device; every name and shape is checked first."""
    targets = _weight_targets(model)
    missing = [k for k in targets if k not in weights]
    unexpected = [k for k in weights if k not in targets]
    misshaped = [f"{k}: checkpoint {tuple(weights[k].shape)}, model {tuple(targets[k].shape)}" for k in targets
                 if k in weights and tuple(weights[k].shape) != tuple(targets[k].shape)]
    problems = []
    if missing:
        problems.append(f"missing weights {missing[:10]}{' ...' if len(missing) > 10 else ''}")
    if unexpected:
        problems.append(f"unexpected weights {unexpected[:10]}{' ...' if len(unexpected) > 10 else ''}")
    if misshaped:
        problems.append(f"shapes that differ {misshaped[:10]}")
    if problems:
        raise WeightsError(f"{source} does not fit the model built from its config: " + "; ".join(problems))
    for name, t in weights.items():
        old = targets[name]
        new = t if t.device == old.device else t.to(old.device)
        # realized as it is: a loaded tensor is already a buffer of its own, and a contiguous copy of it would leave
        # the loaded buffer's memory behind (the allocator keeps freed memory for reuse), doubling what loading holds
        new = (new.cast(old.dtype) if new.dtype != old.dtype else new).realize()
        _set_path(model, name, new)


def _set_path(root: Any, name: str, value: Tensor) -> None:
    *parents, leaf = name.split(".")
    obj = root
    for part in parents:
        obj = obj[int(part)] if isinstance(obj, list) else getattr(obj, part)
    setattr(obj, leaf, value)


def load_tokenizer(directory: str | pathlib.Path) -> Any:
    """The `tokenizers.Tokenizer` of directory/tokenizer.json (or of a tokenizer.json path), or None when there is
    no such file. Needs the `tokenizers` package only when the file exists."""
    path = pathlib.Path(directory)
    path = path if path.name == "tokenizer.json" else path / "tokenizer.json"
    if not path.is_file():
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        raise ImportError(f"{path} needs the `tokenizers` package to be read: pip install tokenizers") from e
    return Tokenizer.from_file(str(path))


def _model_dtype(dtype: DTypeLike | None) -> DType:
    d = to_dtype(dtype) if dtype is not None else dtypes.float32
    if not d.is_float:
        raise ValueError(f"the model dtype must be a float type, got {d}")
    return d


def _context(max_context: int | None, limit: int, default_cap: int = 4096) -> int:
    """The KV cache length: max_context, which the model's position limit bounds (a larger one would reach
    positions it was not trained for, or, with learned positions, has no embedding)."""
    n = min(limit, default_cap) if max_context is None else max_context
    if not 2 <= n <= limit:
        raise ValueError(f"max_context must be in [2, {limit}] (the model's position limit), got {n}")
    return n


# ---- GPT-2 ----------------------------------------------------------------------------------------------------------

_GPT2_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu_new": lambda x: x.gelu(), "gelu_pytorch_tanh": lambda x: x.gelu(), "gelu_fast": lambda x: x.gelu(),
    "gelu": lambda x: x.gelu(approximate="none"), "relu": lambda x: x.relu(), "silu": lambda x: x.silu(),
    "swish": lambda x: x.silu(),
}


@dataclass(frozen=True)
class GPT2Config:
    vocab_size: int
    n_positions: int
    n_embd: int
    n_layer: int
    n_head: int
    n_inner: int
    layer_norm_epsilon: float = 1e-5
    activation_function: str = "gelu_new"
    scale_attn_weights: bool = True
    scale_attn_by_inverse_layer_idx: bool = False
    tie_word_embeddings: bool = True

    @staticmethod
    def from_hf(cfg: Mapping[str, Any]) -> GPT2Config:
        """From a Hugging Face config.json dict of model_type "gpt2"."""
        if cfg.get("model_type", "gpt2") != "gpt2":
            raise ConfigError(f"GPT2 loads model_type 'gpt2', not {cfg.get('model_type')!r}")
        act = cfg.get("activation_function", "gelu_new")
        if act not in _GPT2_ACTIVATIONS:
            raise ConfigError(f"activation_function {act!r} is not supported (supported: "
                              f"{sorted(_GPT2_ACTIVATIONS)})")
        if cfg.get("add_cross_attention"):
            raise ConfigError("GPT-2 with cross attention (an encoder-decoder) is not supported")
        n_embd, n_head = int(_need(cfg, "n_embd")), int(_need(cfg, "n_head"))
        if n_embd % n_head:
            raise ConfigError(f"n_embd={n_embd} must be a multiple of n_head={n_head}")
        return GPT2Config(
            vocab_size=int(_need(cfg, "vocab_size")), n_positions=int(_need(cfg, "n_positions")), n_embd=n_embd,
            n_layer=int(_need(cfg, "n_layer")), n_head=n_head, n_inner=int(cfg.get("n_inner") or 4 * n_embd),
            layer_norm_epsilon=float(cfg.get("layer_norm_epsilon", 1e-5)), activation_function=act,
            scale_attn_weights=bool(cfg.get("scale_attn_weights", True)),
            scale_attn_by_inverse_layer_idx=bool(cfg.get("scale_attn_by_inverse_layer_idx", False)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", True)))


class GPT2Attention:
    """GPT-2's attention: one fused projection c_attn to q, k and v, learned positions (no rope)."""

    def __init__(self, dim: int, n_heads: int, scale: float, dtype: DType):
        self.n_heads = self.n_kv_heads = n_heads
        self.head_dim, self.scale = dim // n_heads, scale
        self.c_attn = Conv1D(dim, 3 * dim, dtype)
        self.c_proj = Conv1D(dim, dim, dtype)
        self._cache: KVCache | None = None

    def __call__(self, x: Tensor, start_pos: Pos, mask: Tensor | None) -> Tensor:
        assert self._cache is not None
        B, T, C = x.shape
        q, k, v = (t.reshape(B, T, self.n_heads, self.head_dim).transpose(1, 2)
                   for t in self.c_attn(x).split(C, dim=-1))
        keys, values = self._cache.update(k, v, start_pos, q)
        out = attend(q, keys, values, mask, self.scale)
        return self.c_proj(out.transpose(1, 2).reshape(B, T, C))


class GPT2MLP:
    def __init__(self, dim: int, hidden: int, activation: str, dtype: DType):
        self.c_fc = Conv1D(dim, hidden, dtype)
        self.c_proj = Conv1D(hidden, dim, dtype)
        self._act = _GPT2_ACTIVATIONS[activation]

    def __call__(self, x: Tensor) -> Tensor:
        return self.c_proj(self._act(self.c_fc(x)))


class GPT2Block:
    def __init__(self, cfg: GPT2Config, layer: int, dtype: DType):
        scale = 1.0 / math.sqrt(cfg.n_embd // cfg.n_head) if cfg.scale_attn_weights else 1.0
        if cfg.scale_attn_by_inverse_layer_idx:
            scale /= layer + 1
        self.ln_1 = LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.attn = GPT2Attention(cfg.n_embd, cfg.n_head, scale, dtype)
        self.ln_2 = LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.mlp = GPT2MLP(cfg.n_embd, cfg.n_inner, cfg.activation_function, dtype)

    def __call__(self, x: Tensor, start_pos: Pos, mask: Tensor | None) -> Tensor:
        h = x + self.attn(self.ln_1(x).cast(x.dtype), start_pos, mask)
        return h + self.mlp(self.ln_2(h).cast(h.dtype))


class GPT2(_CausalLM):
    """GPT-2 (learned positions, pre-LayerNorm blocks, GELU MLP, output tied to the token embedding). Attribute
    names follow Hugging Face's GPT2LMHeadModel without its "transformer." prefix."""

    def __init__(self, config: GPT2Config, max_context: int | None = None, dtype: DTypeLike | None = None,
                 device: str | None = None):
        self.config, self.dtype, self.device = config, _model_dtype(dtype), device
        self.vocab_size = config.vocab_size
        self.max_context = _context(max_context, config.n_positions)
        self.wte = Embedding(config.vocab_size, config.n_embd, self.dtype)
        self.wpe = Embedding(config.n_positions, config.n_embd, self.dtype)
        self.h = [GPT2Block(config, i, self.dtype) for i in range(config.n_layer)]
        self.ln_f = LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.lm_head = None if config.tie_word_embeddings else Linear(config.n_embd, config.vocab_size, False,
                                                                      self.dtype)
        self._init_runtime()

    def _attention_layers(self) -> list[Any]:
        return [b.attn for b in self.h]

    def _hidden(self, tokens: Tensor, start_pos: Pos, positions: Tensor | None, mask: Tensor | None) -> Tensor:
        T = tokens.shape[1]
        pos = _rows_for(self.wpe.weight, start_pos, T, positions)
        x = self.wte(tokens) + pos
        for block in self.h:
            # realized per layer: the cache write realizes inside the next layer, which would recompute this one
            x = block(x, start_pos, mask).realize()
        return self.ln_f(x).cast(self.dtype)

    def _head(self, h: Tensor) -> Tensor:
        return self.lm_head(h) if self.lm_head is not None else h.linear(self.wte.weight.T)

    @classmethod
    def from_pretrained(cls, directory: str | pathlib.Path, max_context: int | None = None,
                        dtype: DTypeLike | None = None, device: str | None = None) -> GPT2:
        """A Hugging Face GPT-2 directory (config.json, and model.safetensors or a sharded index)."""
        raw = _read_config(directory)
        config = GPT2Config.from_hf(raw)
        model = cls(config, max_context, dtype, device)
        model.eos_token_ids = _eos_ids(raw.get("eos_token_id"), config.vocab_size)
        weights = {}
        for name, t in load_hf_weights(directory, device).items():
            short = name.removeprefix("transformer.")
            if short.endswith((".attn.bias", ".attn.masked_bias")):
                continue  # the causal mask buffers older checkpoints stored as if they were weights
            if short == "lm_head.weight" and config.tie_word_embeddings:
                continue  # tied: the output projection is the token embedding
            weights[short] = t
        _install(model, weights, f"the checkpoint in {directory}")
        return model


# ---- LLaMA / Qwen2 --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: Mapping[str, Any] | None = None
    attention_bias: bool = False  # biases of q, k, v
    o_bias: bool = False
    mlp_bias: bool = False
    tie_word_embeddings: bool = False
    model_type: str = "llama"
    qk_norm: str | None = None  # "head": RMSNorm per head (Qwen3); "full": over the whole projection (OLMoE)
    clip_qkv: float | None = None  # OLMoE: q, k and v clipped to [-clip_qkv, clip_qkv]
    sliding_window: int | None = None  # keys a query sees at most; a KV cache no longer than it never needs it
    # a mixture of experts (num_experts > 0): experts of moe_intermediate_size, top num_experts_per_tok per token,
    # in every layer except dense_layers (which keep a SwiGLU of intermediate_size)
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False
    dense_layers: tuple[int, ...] = ()

    @staticmethod
    def from_hf(cfg: Mapping[str, Any]) -> LlamaConfig:
        """From a Hugging Face config.json dict of model_type "llama", "qwen2", "qwen3", or a mixture of experts:
        "mixtral", "qwen3_moe", "olmoe" (transformers 4's `rope_theta` and `rope_scaling`, or 5's
        `rope_parameters`)."""
        kind = cfg.get("model_type", "llama")
        if kind not in LLAMA_MODEL_TYPES:
            raise ConfigError(f"Llama loads model_type {', '.join(map(repr, LLAMA_MODEL_TYPES))}, not {kind!r}")
        act = cfg.get("hidden_act", "silu")
        if act != "silu":
            raise ConfigError(f"hidden_act {act!r} is not supported (LLaMA's SwiGLU uses 'silu')")
        if cfg.get("use_sliding_window") or any(t != "full_attention" for t in cfg.get("layer_types") or []):
            raise ConfigError("sliding-window attention layers are not supported")
        if float(cfg.get("partial_rotary_factor", 1.0)) != 1.0:
            raise ConfigError("partial rotary embeddings (partial_rotary_factor != 1) are not supported")
        rope = dict(cfg.get("rope_parameters") or {})
        theta = float(rope.pop("rope_theta", cfg.get("rope_theta", 10000.0)))
        scaling = cfg.get("rope_scaling") or rope or None
        if scaling is not None:
            scaling = dict(scaling)
            scaling.pop("rope_theta", None)
            _rope_kind(scaling)
        dim, heads = int(_need(cfg, "hidden_size")), int(_need(cfg, "num_attention_heads"))
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or dim // heads)
        if heads % kv_heads:
            raise ConfigError(f"num_attention_heads={heads} must be a multiple of num_key_value_heads={kv_heads}")
        qwen = kind == "qwen2"
        layers = int(_need(cfg, "num_hidden_layers"))
        moe: dict[str, Any] = {}
        if kind in ("mixtral", "qwen3_moe", "olmoe"):
            moe = _moe_fields(cfg, kind, layers)
        if kind == "olmoe" and head_dim * heads != dim:
            raise ConfigError(f"OLMoE normalises the whole query projection: head_dim ({head_dim}) times "
                              f"num_attention_heads ({heads}) must equal hidden_size ({dim})")
        clip = cfg.get("clip_qkv") if kind == "olmoe" else None
        window = cfg.get("sliding_window") if kind == "mixtral" else None
        return LlamaConfig(
            vocab_size=int(_need(cfg, "vocab_size")), hidden_size=dim,
            intermediate_size=int(_need(cfg, "intermediate_size")),
            num_hidden_layers=layers, num_attention_heads=heads,
            num_key_value_heads=kv_heads, head_dim=head_dim,
            max_position_embeddings=int(cfg.get("max_position_embeddings") or 2048),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)), rope_theta=theta, rope_scaling=scaling,
            # Qwen2 always has q/k/v biases and no output bias; the others' attention_bias covers all four
            attention_bias=qwen or bool(cfg.get("attention_bias", False)),
            o_bias=not qwen and bool(cfg.get("attention_bias", False)), mlp_bias=bool(cfg.get("mlp_bias", False)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)), model_type=kind,
            qk_norm={"qwen3": "head", "qwen3_moe": "head", "olmoe": "full"}.get(kind),
            clip_qkv=None if clip is None else float(clip), sliding_window=None if window is None else int(window),
            **moe)


LLAMA_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mixtral", "qwen3_moe", "olmoe")


def _moe_fields(cfg: Mapping[str, Any], kind: str, layers: int) -> dict[str, Any]:
    """The mixture-of-experts fields of LlamaConfig from a Mixtral, Qwen3-MoE or OLMoE config.json."""
    # Mixtral's configs say num_local_experts, Qwen3-MoE's and OLMoE's num_experts (transformers 5 writes either)
    count = cfg.get("num_local_experts") if cfg.get("num_experts") is None else cfg.get("num_experts")
    if count is None:
        raise ConfigError(f"config.json of a {kind} model has neither 'num_experts' nor 'num_local_experts'")
    experts = int(count)
    top_k = int(_need(cfg, "num_experts_per_tok"))
    if not 1 <= top_k <= experts:
        raise ConfigError(f"num_experts_per_tok={top_k} must be between 1 and the number of experts ({experts})")
    dense: tuple[int, ...] = ()
    if kind == "qwen3_moe":
        # Qwen3-MoE keeps a dense SwiGLU in the layers mlp_only_layers lists and in those decoder_sparse_step skips
        step = int(cfg.get("decoder_sparse_step") or 1)
        only = {int(i) for i in cfg.get("mlp_only_layers") or []}
        dense = tuple(i for i in range(layers) if i in only or (i + 1) % step)
    hidden = int(_need(cfg, "moe_intermediate_size")) if kind == "qwen3_moe" else int(_need(cfg, "intermediate_size"))
    return {"num_experts": experts, "num_experts_per_tok": top_k, "moe_intermediate_size": hidden,
            # Mixtral always renormalises the chosen experts' weights; the others say so in norm_topk_prob
            "norm_topk_prob": True if kind == "mixtral" else bool(cfg.get("norm_topk_prob", False)),
            "dense_layers": dense}


class LlamaBlock:
    def __init__(self, cfg: LlamaConfig, dtype: DType, layer: int = 0):
        self.input_layernorm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.self_attn = Attention(cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim,
                                   cfg.attention_bias, cfg.o_bias, dtype, cfg.qk_norm, cfg.rms_norm_eps, cfg.clip_qkv)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        ffn: FeedForward | SparseMoE
        if cfg.num_experts and layer not in cfg.dense_layers:
            ffn = SparseMoE(cfg.hidden_size, cfg.moe_intermediate_size, cfg.num_experts, cfg.num_experts_per_tok,
                            cfg.norm_topk_prob, dtype)
        else:
            ffn = FeedForward(cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias, dtype)
        # the name Hugging Face gives the feed-forward part: Mixtral calls its mixture block_sparse_moe
        self._ffn_name = "block_sparse_moe" if cfg.model_type == "mixtral" else "mlp"
        setattr(self, self._ffn_name, ffn)

    def __call__(self, x: Tensor, start_pos: Pos, rope: tuple[Tensor, Tensor], mask: Tensor | None) -> Tensor:
        h = x + self.self_attn(self.input_layernorm(x).cast(x.dtype), start_pos, rope, mask)
        return h + getattr(self, self._ffn_name)(self.post_attention_layernorm(h).cast(h.dtype))


class _LlamaBody:
    def __init__(self, cfg: LlamaConfig, dtype: DType):
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size, dtype)
        self.layers = [LlamaBlock(cfg, dtype, i) for i in range(cfg.num_hidden_layers)]
        self.norm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)


class Llama(_CausalLM):
    """LLaMA 2/3 (RMSNorm, rotary positions with optional LLaMA 3 scaling, grouped-query attention, SwiGLU), Qwen2
    (the same with q/k/v biases), Qwen3 (RMSNorms of each query and key head), and the mixtures of experts Mixtral,
    Qwen3-MoE and OLMoE (the SwiGLU replaced by a SparseMoE; OLMoE normalises the whole query and key projections
    and may clip them). Attribute names follow Hugging Face's LlamaForCausalLM (and MixtralForCausalLM's
    block_sparse_moe), except each mixture's experts, which are stacked (see Experts)."""

    def __init__(self, config: LlamaConfig, max_context: int | None = None, dtype: DTypeLike | None = None,
                 device: str | None = None, rope_freq_factors: np.ndarray | None = None):
        self.config, self.dtype, self.device = config, _model_dtype(dtype), device
        self.vocab_size = config.vocab_size
        limit, window = config.max_position_embeddings, config.sliding_window
        if window is not None and window < limit:
            # every key stays in the window while the cache is no longer than it, so the window never has to be
            # applied; a longer cache would let queries see keys that the model was trained not to
            if max_context is not None and max_context > window:
                raise ConfigError(f"max_context={max_context} is longer than the model's sliding_window ({window}), "
                                  f"which is not supported: load with max_context <= {window}")
            limit = window
        self.max_context = _context(max_context, limit)
        self.model = _LlamaBody(config, self.dtype)
        self.lm_head = None if config.tie_word_embeddings else Linear(config.hidden_size, config.vocab_size, False,
                                                                      self.dtype)
        self._rope = precompute_rope(config.head_dim, self.max_context, config.rope_theta, config.rope_scaling,
                                     rope_freq_factors, device)
        self._init_runtime()

    def _attention_layers(self) -> list[Any]:
        return [layer.self_attn for layer in self.model.layers]

    def _hidden(self, tokens: Tensor, start_pos: Pos, positions: Tensor | None, mask: Tensor | None) -> Tensor:
        T = tokens.shape[1]
        cos, sin = (_rows_for(t, start_pos, T, positions) for t in self._rope)
        if positions is not None:  # (B, T, hd): one table row per token, broadcast over the heads
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        rope = (cos.cast(self.dtype), sin.cast(self.dtype))
        x = self.model.embed_tokens(tokens)
        for layer in self.model.layers:
            # realized per layer: the cache write realizes inside the next layer, which would recompute this one
            x = layer(x, start_pos, rope, mask).realize()
        return self.model.norm(x).cast(self.dtype)

    def _head(self, h: Tensor) -> Tensor:
        return self.lm_head(h) if self.lm_head is not None else h.linear(self.model.embed_tokens.weight.T)

    @classmethod
    def from_pretrained(cls, directory: str | pathlib.Path, max_context: int | None = None,
                        dtype: DTypeLike | None = None, device: str | None = None) -> Llama:
        """A Hugging Face directory (config.json, and model.safetensors or a sharded index) of model_type llama,
        qwen2, qwen3, mixtral, qwen3_moe or olmoe. Experts stored one by one (`experts.N.w1.weight` as Mixtral's
        checkpoints, `experts.N.gate_proj.weight` as Qwen3-MoE's and OLMoE's) and experts stored stacked
        (`experts.gate_up_proj`, `experts.down_proj`, as transformers 5 holds them) are both read."""
        raw = _read_config(directory)
        config = LlamaConfig.from_hf(raw)
        model = cls(config, max_context, dtype, device)
        model.eos_token_ids = _eos_ids(raw.get("eos_token_id"), config.vocab_size)
        weights = {}
        for name, t in load_hf_weights(directory, device).items():
            if name.endswith(".rotary_emb.inv_freq"):
                continue  # a buffer older checkpoints saved; the frequencies come from the config
            if name == "lm_head.weight" and config.tie_word_embeddings:
                continue  # tied: the output projection is the token embedding
            weights[name] = t
        if config.num_experts:
            weights = _stack_experts(weights, config.num_experts, f"the checkpoint in {directory}")
        _install(model, weights, f"the checkpoint in {directory}")
        return model

    @classmethod
    def from_gguf(cls, path: str | pathlib.Path, max_context: int | None = None, dtype: DTypeLike | None = None,
                  device: str | None = None) -> Llama:
        """A llama.cpp GGUF file of architecture "llama" (Mixtral too: a LLaMA with experts), "qwen2", "qwen3",
        "qwen3moe" or "olmoe" (quantized tensors are dequantized)."""
        try:
            from tinygrad.nn.gguf import gguf_load
        except ImportError as e:  # pragma: no cover - gguf.py ships with this package
            raise ImportError("loading GGUF files needs tinygrad.nn.gguf") from e
        meta, tensors = gguf_load(path, device)
        config, weights, factors = _from_gguf(meta, tensors, str(path))
        model = cls(config, max_context, dtype, device, rope_freq_factors=factors)
        _install(model, weights, f"the GGUF file {path}")
        model.eos_token_ids = _eos_ids(meta.get("tokenizer.ggml.eos_token_id"), config.vocab_size)
        return model


# the names of one expert's projections in Hugging Face checkpoints: Mixtral's w1/w3/w2, the others' SwiGLU names
_EXPERT_NAMES = {"w1": "gate", "w3": "up", "w2": "down", "gate_proj": "gate", "up_proj": "up", "down_proj": "down"}


def _stack_experts(weights: Mapping[str, Tensor], n_experts: int, source: str) -> dict[str, Tensor]:
    """The checkpoint's tensors with its experts in the layout Experts holds: per-expert projections
    (`<block>.experts.<i>.<proj>.weight`) and transformers 5's stacked ones (`<block>.experts.gate_up_proj`
    (n_experts, 2 * hidden, dim), `<block>.experts.down_proj` (n_experts, dim, hidden)) become `<block>.experts.gate_up`
    and `<block>.experts.down`, input-major."""
    out: dict[str, Tensor] = {}
    parts: dict[str, dict[tuple[int, str], Tensor]] = {}
    for name, t in weights.items():
        head, sep, tail = name.partition(".experts.")
        bits = tail.split(".")
        if sep and len(bits) == 3 and bits[0].isdigit() and bits[1] in _EXPERT_NAMES and bits[2] == "weight":
            parts.setdefault(head, {})[(int(bits[0]), _EXPERT_NAMES[bits[1]])] = t
        elif sep and tail in ("gate_up_proj", "down_proj") and t.ndim == 3:
            out[f"{head}.experts.{tail.removesuffix('_proj')}"] = t.transpose(1, 2).contiguous()
        else:
            out[name] = t
    for head, found in parts.items():
        missing = [f"{head}.experts.{i}.{kind}" for i in range(n_experts) for kind in ("gate", "up", "down")
                   if (i, kind) not in found]
        extra = [f"{head}.experts.{i}" for i, _ in found if not 0 <= i < n_experts]
        if missing or extra:
            raise WeightsError(f"{source} does not hold {n_experts} whole experts for {head}: "
                               f"{'missing ' + str(missing[:6]) if missing else ''}"
                               f"{' unexpected ' + str(sorted(set(extra))[:6]) if extra else ''}")
        shapes = {tuple(t.shape) for (_, kind), t in found.items() if kind != "down"}
        if len(shapes) != 1:
            raise WeightsError(f"{source}: the experts of {head} have gate/up projections of different shapes "
                               f"{sorted(shapes)}")
        out[f"{head}.experts.gate_up"] = Tensor.stack(
            *[Tensor.cat(found[(i, "gate")], found[(i, "up")], dim=0).T for i in range(n_experts)]).contiguous()
        out[f"{head}.experts.down"] = Tensor.stack(*[found[(i, "down")].T for i in range(n_experts)]).contiguous()
    return out


_GGUF_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias", "attn_output.bias": "self_attn.o_proj.bias",
    "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}


def _unpermute_rope(w: Tensor, n_heads: int) -> Tensor:
    """Undo llama.cpp's reordering of LLaMA's q/k projection rows: per head, convert_hf_to_gguf.py turns the
    Hugging Face order (two halves of head_dim/2 rows) into interleaved pairs (its rope works on adjacent dims)."""
    rows = w.shape[0]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


# GGUF architectures: model_type, whether llama.cpp's converter reordered the q/k rows for its interleaved rope,
# and (for mixtures) whether the chosen experts' weights are renormalised when the file does not say
_GGUF_ARCHS = {"llama": ("llama", True, True), "qwen2": ("qwen2", False, False), "qwen3": ("qwen3", False, False),
               "qwen3moe": ("qwen3_moe", False, True), "olmoe": ("olmoe", False, False)}
_GGUF_EXPERT_NAMES = {"ffn_gate_exps.weight": "gate", "ffn_up_exps.weight": "up", "ffn_down_exps.weight": "down"}


def _from_gguf(meta: Mapping[str, Any], tensors: Mapping[str, Tensor],
               where: str) -> tuple[LlamaConfig, dict[str, Tensor], np.ndarray | None]:
    arch = meta.get("general.architecture")
    if arch not in _GGUF_ARCHS:
        raise ConfigError(f"{where}: general.architecture {arch!r} is not supported ({', '.join(_GGUF_ARCHS)})")
    kind, permuted, renormalise = _GGUF_ARCHS[arch]

    def key(name: str, default: Any = None) -> Any:
        value = meta.get(f"{arch}.{name}", default)
        if value is None:
            raise ConfigError(f"{where} has no metadata {arch}.{name}")
        return value

    if "token_embd.weight" not in tensors:
        raise WeightsError(f"{where} has no token_embd.weight")
    vocab, dim = tensors["token_embd.weight"].shape
    heads = int(key("attention.head_count"))
    kv_heads = int(key("attention.head_count_kv", heads))
    head_dim = int(key("attention.key_length", dim // heads))
    layers = int(key("block_count"))
    scaling = None
    if meta.get(f"{arch}.rope.scaling.type", "none") not in ("none", None):
        rope_kind = meta[f"{arch}.rope.scaling.type"]
        if rope_kind != "linear":
            raise ConfigError(f"{where}: rope scaling {rope_kind!r} is not supported (linear, or LLaMA 3's rope_freqs)")
        scaling = {"rope_type": "linear", "factor": float(key("rope.scaling.factor"))}
    n_experts = int(meta.get(f"{arch}.expert_count") or 0)
    moe: dict[str, Any] = {}
    if n_experts:
        if arch == "llama":
            kind = "mixtral"  # llama.cpp writes Mixtral as a LLaMA with experts
        top_k = int(key("expert_used_count"))
        if not 1 <= top_k <= n_experts:
            raise ConfigError(f"{where}: {arch}.expert_used_count={top_k} must be between 1 and the number of "
                              f"experts ({n_experts})")
        moe = {"num_experts": n_experts, "num_experts_per_tok": top_k,
               "moe_intermediate_size": int(meta.get(f"{arch}.expert_feed_forward_length")
                                            or key("feed_forward_length")),
               "norm_topk_prob": bool(meta.get(f"{arch}.expert_weights_norm", renormalise)),
               # a layer without a router keeps a dense SwiGLU
               "dense_layers": tuple(i for i in range(layers) if f"blk.{i}.ffn_gate_inp.weight" not in tensors)}
    elif arch in ("qwen3moe", "olmoe"):
        raise ConfigError(f"{where}: a {arch} file needs the metadata {arch}.expert_count")
    clip = meta.get(f"{arch}.attention.clamp_kqv") if arch == "olmoe" else None
    config = LlamaConfig(
        vocab_size=int(vocab), hidden_size=int(dim), intermediate_size=int(key("feed_forward_length")),
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        head_dim=head_dim, max_position_embeddings=int(key("context_length")),
        rms_norm_eps=float(key("attention.layer_norm_rms_epsilon")), rope_theta=float(key("rope.freq_base", 10000.0)),
        rope_scaling=scaling, attention_bias=arch == "qwen2" or "blk.0.attn_q.bias" in tensors,
        o_bias="blk.0.attn_output.bias" in tensors, tie_word_embeddings="output.weight" not in tensors,
        model_type=kind, qk_norm={"qwen3": "head", "qwen3_moe": "head", "olmoe": "full"}.get(kind),
        clip_qkv=None if clip is None else float(clip), **moe)
    ffn = "block_sparse_moe" if kind == "mixtral" else "mlp"
    weights: dict[str, Tensor] = {}
    stacked: dict[str, dict[str, Tensor]] = {}  # layer -> gate/up/down of its experts, stacked in the file
    factors = None
    unknown = []
    for name, t in tensors.items():
        parts = name.split(".")
        rest = ".".join(parts[2:])
        layer = parts[1] if name.startswith("blk.") and len(parts) > 2 and parts[1].isdigit() else None
        if name == "token_embd.weight":
            weights["model.embed_tokens.weight"] = t
        elif name == "output_norm.weight":
            weights["model.norm.weight"] = t
        elif name == "output.weight":
            weights["lm_head.weight"] = t
        elif name == "rope_freqs.weight":
            factors = t.float().numpy()
        elif layer is not None and rest in _GGUF_LAYER_NAMES:
            if permuted and rest in ("attn_q.weight", "attn_q.bias"):
                t = _unpermute_rope(t, heads)
            elif permuted and rest in ("attn_k.weight", "attn_k.bias"):
                t = _unpermute_rope(t, kv_heads)
            weights[f"model.layers.{layer}.{_GGUF_LAYER_NAMES[rest]}"] = t
        elif layer is not None and rest in ("attn_q_norm.weight", "attn_k_norm.weight") and config.qk_norm:
            weights[f"model.layers.{layer}.self_attn.{rest[5]}_norm.weight"] = t
        elif layer is not None and n_experts and rest == "ffn_gate_inp.weight":
            weights[f"model.layers.{layer}.{ffn}.gate.weight"] = t
        elif layer is not None and n_experts and rest in _GGUF_EXPERT_NAMES:
            stacked.setdefault(layer, {})[_GGUF_EXPERT_NAMES[rest]] = t
        elif (layer is not None and n_experts and len(parts) == 5 and parts[3].isdigit()
              and f"{parts[2]}.weight" in ("ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")):
            # older Mixtral files: one tensor per expert, blk.N.ffn_gate.E.weight
            weights[f"model.layers.{layer}.{ffn}.experts.{parts[3]}.{parts[2].removeprefix('ffn_')}_proj.weight"] = t
        else:
            unknown.append(name)
    if unknown:
        raise WeightsError(f"{where} holds tensors this {arch} mapping does not know: {unknown[:10]}")
    for layer, found in stacked.items():
        if set(found) != {"gate", "up", "down"}:
            raise WeightsError(f"{where}: block {layer} has the expert tensors {sorted(found)}, not gate, up and down")
        weights[f"model.layers.{layer}.{ffn}.experts.gate_up_proj"] = Tensor.cat(found["gate"], found["up"], dim=1)
        weights[f"model.layers.{layer}.{ffn}.experts.down_proj"] = found["down"]
    if n_experts:
        weights = _stack_experts(weights, n_experts, where)
    return config, weights, factors


# ---- the command line of the examples -------------------------------------------------------------------------------

def generate_main(cls: type[GPT2] | type[Llama], argv: Sequence[str] | None = None,
                  description: str | None = None) -> None:
    """The command line of examples/gpt2.py and examples/llama.py: load `cls` from --model (a Hugging Face
    directory; for Llama also a .gguf file), continue --prompt (greedy by default, or sampled with --temperature,
    --top-k, --top-p and --seed) for --max-tokens tokens or up to an end-of-text token, print the prompt and its
    continuation, then the time per token on stderr. Text needs a tokenizer.json beside the model (for Llama, or
    one named by --tokenizer); without one, the prompt and the output are token ids."""
    import argparse
    import sys
    import time

    llama = issubclass(cls, Llama)
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", required=True, help="a Hugging Face model directory or a .gguf file" if llama else
                   "a Hugging Face GPT-2 directory")
    p.add_argument("--prompt", required=True, help="the text to continue (token ids '1 2 3' without a tokenizer)")
    if llama:
        p.add_argument("--tokenizer", default=None, help="a tokenizer.json (default: the one beside the model)")
    p.add_argument("--max-tokens", type=int, default=32, help="how many tokens to generate")
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    p.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens (0: all)")
    p.add_argument("--top-p", type=float, default=1.0, help="sample in the smallest set holding this probability")
    p.add_argument("--seed", type=int, default=None, help="seed of the sampler")
    p.add_argument("--max-context", type=int, default=None,
                   help="KV cache length (default: the model's limit, at most 4096)")
    args = p.parse_args(argv)

    if args.seed is not None:
        Tensor.manual_seed(args.seed)
    path = pathlib.Path(args.model)
    model: GPT2 | Llama
    if issubclass(cls, Llama) and path.suffix == ".gguf":
        model = cls.from_gguf(path, max_context=args.max_context)
    else:
        model = cls.from_pretrained(path, max_context=args.max_context)
    tokenizer = load_tokenizer(getattr(args, "tokenizer", None) or (path.parent if path.suffix == ".gguf" else path))
    hint = " (pass --tokenizer)" if llama else ""
    ids = prompt_ids(tokenizer, args.prompt, f"no tokenizer.json beside the model{hint}")
    if not ids:
        sys.exit("the prompt encodes to no tokens")
    start = time.perf_counter()
    out = list(model.generate(ids, args.max_tokens, args.temperature, args.top_k, args.top_p,
                              stop_ids=model.eos_token_ids))
    elapsed = time.perf_counter() - start
    print(tokenizer.decode(ids + out) if tokenizer is not None else " ".join(map(str, ids + out)))
    print(f"{len(out)} tokens in {elapsed:.2f} s ({elapsed / max(len(out), 1) * 1000:.1f} ms/token, prefill included)",
          file=sys.stderr)
