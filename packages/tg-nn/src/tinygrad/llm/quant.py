"""Quantized weights that stay quantized: linear layers and embeddings over a GGUF file's blocks, and a LLaMA/Qwen2
model loaded from a GGUF file with them in place of its float weights.

Layout. A `QuantizedLinear` keeps the weight's blocks repacked once at load, from the file's order (row, block,
byte) to tiles of rows, (row tile, block, byte, row in the tile): the same bytes, the same size, but the bytes that
the same position of a block holds for the rows of a tile lie side by side. A matrix-vector product computes many
output rows at a time (the compiler vectorises along them), so each of its loads reads neighbouring bytes instead
of bytes a row apart, and a tile's bytes are one sequential stream through memory, with no page crossed per load.

The product. `x @ W.T` is written with Tensor ops as one reduction over the blocks, the sub-blocks that share a
scale and their values, `(x[..., 1, block, sub, value] * dequant(W)[out, block, sub, value]).sum((-3, -2, -1))`,
where dequant is the bit unpacking and scaling of `tinygrad.nn.gguf`: nothing realizes the float weight, so the
scheduler fuses the unpacking into the reduction, and a decode step's product is one kernel that reads the bytes.
With more rows of input than a few (a prompt's prefill), the unpacking would be repeated per row: there the layer's
float weight is made first, one kernel, and the product is an ordinary matmul; the float weight lives only while the
layer runs.
"""

from __future__ import annotations

import pathlib
from typing import Any

from tinygrad import Device, Tensor
from tinygrad.helpers import prod
from tinygrad.nn.gguf import QuantizedTensor, dequantize_blocks

__all__ = ["FUSED_MAX_ROWS", "QuantizedEmbedding", "QuantizedLinear", "llama_from_gguf"]

#: inputs of at most this many rows (tokens times batch) take the fused product; more dequantize the weight first
FUSED_MAX_ROWS = 4
#: values that share one scale within a block, for the types whose blocks hold several scales
SUB_BLOCK = {"Q4_K": 32, "Q5_K": 32, "Q6_K": 16}
#: output rows whose bytes are interleaved in the packed layout (see the module's doc)
MAX_TILE_ROWS = 256


class QuantizedLinear:
    """y = x @ W.T + bias with W (out_features, in_features) kept as its quantized blocks (see the module's doc)."""

    def __init__(self, weight: QuantizedTensor, bias: Tensor | None = None):
        self._setup(weight, bias, None)

    def _setup(self, weight: QuantizedTensor, bias: Tensor | None, unpermute_heads: int | None) -> None:
        if not isinstance(weight, QuantizedTensor):
            raise TypeError(f"QuantizedLinear takes a QuantizedTensor (from gguf_load_quantized), got "
                            f"{type(weight).__name__}; a float weight belongs in a plain Linear")
        if len(weight.shape) != 2:
            raise ValueError(f"a linear weight is (out_features, in_features), got a {weight.type_name} tensor of "
                             f"shape {weight.shape}")
        self.out_features, self.in_features = weight.shape
        self.type_name, self.block_elems, self.block_bytes = weight.type_name, weight.block_elems, weight.block_bytes
        self.n_blocks = self.in_features // self.block_elems
        self.tile = _tile_rows(self.out_features)
        self._packed = _pack(weight, self.tile, unpermute_heads)
        self.bias = bias

    @classmethod
    def _unpermuting(cls, weight: QuantizedTensor, bias: Tensor | None, unpermute_heads: int | None) -> QuantizedLinear:
        """A layer of a LLaMA q/k projection from a GGUF file: llama.cpp's row order undone while repacking."""
        out = cls.__new__(cls)
        out._setup(weight, bias, unpermute_heads)
        return out

    @classmethod
    def sharing(cls, other: QuantizedLinear, bias: Tensor | None = None) -> QuantizedLinear:
        """Another layer over the same blocks (an output projection tied to the token embedding)."""
        out = cls.__new__(cls)
        out.__dict__.update(other.__dict__)
        out.bias = bias
        return out

    @property
    def nbytes(self) -> int:
        return prod(self._packed.shape)

    def rows(self) -> Tensor:
        """The blocks in the file's order, (out_features, n_blocks, block_bytes), as a view of the packed ones."""
        return self._packed.permute(0, 3, 1, 2).reshape(self.out_features, self.n_blocks, self.block_bytes)

    def dequantize(self) -> Tensor:
        """The float32 weight (out_features, in_features), lazy."""
        return dequantize_blocks(self.rows(), self.type_name).reshape(self.out_features, self.in_features)

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim < 1 or x.shape[-1] != self.in_features:
            raise ValueError(f"this {self.type_name} linear layer takes inputs (..., {self.in_features}), got shape "
                             f"{x.shape}")
        lead = x.shape[:-1]
        if all(isinstance(s, int) for s in lead) and prod(lead) <= FUSED_MAX_ROWS:
            # (tiles, tile, n_blocks, sub-blocks, values), never realized. The reduction runs over blocks, their
            # sub-blocks and the values of one: a sub-block's scale then depends on the outer loops only, and is
            # computed once per sub-block rather than once per value
            sub = SUB_BLOCK.get(self.type_name, self.block_elems)
            w = dequantize_blocks(self._packed.permute(0, 3, 1, 2), self.type_name)
            w = w.reshape(*w.shape[:-1], self.block_elems // sub, sub)
            xb = x.reshape(*lead, 1, 1, self.n_blocks, self.block_elems // sub, sub)
            y = (xb * w).sum((-3, -2, -1)).reshape(*lead, self.out_features)
        else:
            y = x.linear(self.dequantize().contiguous().T)
        if self.bias is not None:
            y = y + self.bias
        return y.cast(x.dtype) if x.dtype.is_float and y.dtype != x.dtype else y

    def __repr__(self) -> str:
        return f"QuantizedLinear({self.in_features}, {self.out_features}, {self.type_name})"


def _tile_rows(rows: int) -> int:
    """Output rows per tile of the packed layout: the largest power of two up to MAX_TILE_ROWS dividing rows."""
    tile = MAX_TILE_ROWS
    while rows % tile:
        tile //= 2
    return tile


def _pack(weight: QuantizedTensor, tile: int, unpermute_heads: int | None) -> Tensor:
    """weight's blocks as (rows / tile, n_blocks, block_bytes, tile) in a buffer of their own: see the module's doc.
    unpermute_heads: undo llama.cpp's q/k row order on the way."""
    rows, row_bytes = weight.blocks.shape
    n_blocks, block_bytes = row_bytes // weight.block_bytes, weight.block_bytes
    blocks = weight.blocks.reshape(rows, n_blocks, block_bytes)
    if unpermute_heads is not None:
        blocks = _unpermute_rows(blocks, unpermute_heads)
    # realized before the file-order blocks are dropped: the repacked copy replaces them
    return blocks.reshape(rows // tile, tile, n_blocks, block_bytes).permute(0, 2, 3, 1).contiguous().realize()


class QuantizedEmbedding:
    """Rows of a quantized (vocab, dim) table picked by integer ids and dequantized: only the rows looked up are
    turned into floats. It reads the blocks of a QuantizedLinear, so a tied output projection shares them."""

    def __init__(self, table: QuantizedLinear):
        self._table = table
        self.num_embeddings, self.embedding_dim = table.out_features, table.in_features

    def __call__(self, idx: Tensor) -> Tensor:
        if not idx.dtype.is_int:
            raise TypeError(f"embedding ids must be integers, got {idx.dtype}")
        picked = self._table.rows()[idx]  # (*idx.shape, n_blocks, block_bytes), still bytes
        return dequantize_blocks(picked, self._table.type_name).reshape(*idx.shape, self.embedding_dim)

    def __repr__(self) -> str:
        return f"QuantizedEmbedding({self.num_embeddings}, {self.embedding_dim}, {self._table.type_name})"


# ---- LLaMA / Qwen2 from a GGUF file, its quantized weights kept ------------------------------------------------------

def _unpermute_rows(rows: Tensor, n_heads: int) -> Tensor:
    """Undo llama.cpp's interleaving of LLaMA's q/k rows (see nn.transformer's GGUF loader) on whole rows of blocks:
    a row's blocks are its values, so moving rows moves the same bytes."""
    n = rows.shape[0]
    return rows.reshape(n_heads, n // n_heads // 2, 2, *rows.shape[1:]).transpose(1, 2).reshape(rows.shape)


def _hf_name(name: str) -> tuple[str, str] | None:
    """(the model's name for a GGUF tensor, the tensor's name within its layer or ""), or None for tensors that are
    not weights (rope_freqs)."""
    from tinygrad.nn.transformer import _GGUF_LAYER_NAMES

    fixed = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    if name in fixed:
        return fixed[name], ""
    parts = name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in _GGUF_LAYER_NAMES:
        return f"model.layers.{parts[1]}.{_GGUF_LAYER_NAMES[parts[2]]}", parts[2]
    return None


def _parent(root: Any, name: str) -> tuple[Any, str]:
    *path, leaf = name.split(".")
    obj = root
    for part in path:
        obj = obj[int(part)] if isinstance(obj, list) else getattr(obj, part)
    return obj, leaf


def llama_from_gguf(path: str | pathlib.Path, max_context: int | None = None, device: str | None = None) -> Any:
    """A `tinygrad.nn.transformer.Llama` from a GGUF file whose block-quantized weights (Q4_0, Q4_1, Q5_0, Q5_1,
    Q8_0, Q4_K, Q5_K, Q6_K) stay quantized: each quantized projection of a layer becomes a QuantizedLinear, and a
    quantized token embedding a QuantizedEmbedding (shared with the output projection when they are tied). The rest
    loads as `Llama.from_gguf` loads it, by its mapping of names: float tensors (norms, biases, F16/F32 weights) as
    they are, and quantized tensors this cannot keep (those outside a plain linear layer) dequantized."""
    from tinygrad.nn.gguf import gguf_load_quantized
    from tinygrad.nn.transformer import Linear, Llama, _eos_ids, _from_gguf, _install

    where = f"the GGUF file {path}"
    meta, tensors = gguf_load_quantized(path, device)
    kept: dict[str, tuple[str, str, QuantizedTensor]] = {}
    inputs: dict[str, Tensor] = {}
    for name, t in tensors.items():
        mapped = _hf_name(name)
        if isinstance(t, QuantizedTensor) and mapped is not None and len(t.shape) == 2:
            kept[name] = (*mapped, t)
            inputs[name] = Tensor.empty(*t.shape, device=device)  # a lazy stand-in, never realized
        else:  # lazy: _install realizes them one at a time
            inputs[name] = t.dequantize() if isinstance(t, QuantizedTensor) else t
    del tensors
    # the configuration, the rope factors and the float weights by the float loader's own reading of the file
    config, weights, factors = _from_gguf(meta, inputs, str(path))
    del inputs
    model = Llama(config, max_context, None, device, rope_freq_factors=factors)
    model.eos_token_ids = _eos_ids(meta.get("tokenizer.ggml.eos_token_id"), config.vocab_size)
    heads = {"attn_q.weight": config.num_attention_heads, "attn_k.weight": config.num_key_value_heads}
    llama_rope = meta.get("general.architecture") == "llama"
    for name in list(kept):
        target, within, t = kept.pop(name)  # dropped as placed: nothing else holds the blocks once repacked
        unpermute = heads[within] if llama_rope and within in heads else None
        if target == "model.embed_tokens.weight":
            table = QuantizedLinear(t)
            # the model's attributes are annotated with its float layers; these take the same calls
            model.model.embed_tokens = QuantizedEmbedding(table)  # type: ignore[assignment]
            if config.tie_word_embeddings:
                model.lm_head = QuantizedLinear.sharing(table)  # type: ignore[assignment]
            weights.pop(target, None)
            continue
        owner, leaf = _parent(model, target)
        if leaf != "weight" or not isinstance(owner, Linear) or tuple(t.shape) != tuple(owner.weight.shape):
            # not a plain linear layer here (or not the shape the model expects, which _install then names)
            full = t.dequantize()
            weights[target] = full if unpermute is None else _unpermute_rows(full, unpermute)
            continue
        grand, attr = _parent(model, target.rsplit(".", 1)[0])
        setattr(grand, attr, QuantizedLinear._unpermuting(t, owner.bias, unpermute))
        weights.pop(target)
    # the float weights (norms, biases, what stayed float) with the float path's checks of names and shapes
    _install(model, weights, where)
    # the file-order blocks, freed as each layer was repacked, may wait in the device's pool of freed buffers for an
    # allocation of their size; a pool that can give its memory back (the CPU's) does so now
    release = getattr(Device[model.device or Device.DEFAULT].allocator, "release", None)
    if callable(release):
        release()
    return model
