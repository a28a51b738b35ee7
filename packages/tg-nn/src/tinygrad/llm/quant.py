"""Quantized weights that stay quantized: linear layers and embeddings over a GGUF file's blocks, and a LLaMA/Qwen2
model loaded from a GGUF file with them in place of its float weights.

Layout. A `QuantizedLinear` keeps the weight's blocks repacked once at load, from the file's order (row, block,
byte) to tiles of rows, (row tile, block, byte, row in the tile): the same bytes, the same size, but the bytes that
the same position of a block holds for the rows of a tile lie side by side. A matrix-vector product computes many
output rows at a time (the compiler vectorises along them), so each of its loads reads neighbouring bytes instead
of bytes a row apart, and a tile's bytes are one sequential stream through memory, with no page crossed per load.
The CPU's matrix-vector kernel computes 128 rows at a time (8 registers of 16). Types with one scale per block
(SMALL_TILE_TYPES: Q8_0, Q4_0, Q4_1) are packed in tiles of 16 rows, so those 128 rows come from 8 tiles: 8
sequential streams in flight per thread instead of one, which memory serves faster than one stream. The K-quants
keep 128-row tiles: their per-sub-block scales and mins, read per tile, cost more than the streams gain.

The product by byte dots (BYTE_DOT_TYPES: Q4_0, Q4_K, Q6_K). These layers keep their blocks' value bytes as
32-bit words (`_BlockWords`, the same bytes), and a product quantizes x to int8 per block (`_int8_blocks`, as
llama.cpp does for its integer products: Q8_0's blocks of 32 against Q4_0, Q8_K's of 256 against the K-quants). A
block's sum of products is then integer dot products of four unsigned bytes (the weight's values, unpacked from a
word by masks and constant shifts) with four int8 activations (`_byte_dot`), which the CPU backend writes as one
VNNI instruction, 64 multiply-adds at a time (`tg_backend_cpu.byte_dot`; elsewhere the same shifts and masks); the
scales multiply once per block or sub-block. Compute was the limit of the float products of 4- and 6-bit weights:
this one reads the blocks at the memory's pace. It serves a prompt's rows too (a prefill): unpacking the words again
for each row costs a few integer instructions per weight, and a byte dot does 64 multiply-adds, where the float path
(the float weight made in memory, then a float32 matmul) moves 4 bytes per weight and does 16 per instruction
(CHANGELOG). A K-quant sub-block's dots are summed by a loop over its words, a reduction inside the reduction over the
blocks (the scheduler keeps it in the product's kernel, the CPU's vector tiles read its sums whole): the loop's body
holds a word per row, where terms for every word of a group would hold them all at once and spill registers.

The product by planes (the other types, and the experts of a mixture). `x @ W.T` is written with Tensor ops as a
reduction over the blocks and the values of a plane of a block (`_planes_product`): a plane is a run of values
unpacked by the same constant shifts (the low nibbles of a Q4_0 block, then the high ones), so the kernel unpacks
them with masks and shifts by constants. Where the planes share the block's scale (Q8_0, Q4_0, Q4_1), the block's
sum is taken first and scaled once: a reduction over the values inside the reduction over the blocks, which the
scheduler keeps in the one kernel (an offset multiplies the block's sum of x, a small kernel of its own). Types
without planes (Q5_0, Q5_1, IQ4_XS, MXFP4) reduce over the blocks, sub-blocks and values of the unpacking of
`tinygrad.nn.gguf`. Nothing realizes the float weight: the
scheduler fuses the unpacking into the reduction, and a decode step's product is one kernel that reads the bytes.
With more rows of input than a few (a prompt's prefill), the unpacking would be repeated per row: there the layer's
float weight (of these types; the byte-dot types keep their product) is made first, one kernel, and the product is an
ordinary matmul; the float weight lives only while the
layer runs. Where the device packs a matmul's right operand into panels (the CPU), the scheduler computes the float
weight straight into the packed copy, since nothing else reads it (engine/layout.py).
"""

from __future__ import annotations

import abc
import functools
import pathlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from tinygrad import Device, Tensor, dtypes
from tinygrad.dtype import DType
from tinygrad.helpers import prod
from tinygrad.nn.gguf import QuantizedTensor, dequantize_blocks
from tinygrad.nn.transformer import SparseMoE, _host_reads_allowed

__all__ = ["FUSED_MAX_ROWS", "QuantizedEmbedding", "QuantizedExperts", "QuantizedLinear", "QuantizedSparseMoE",
           "llama_from_gguf"]

#: inputs of at most this many rows (tokens times batch) take the fused product; more dequantize the weight first
#: (except the types of BYTE_DOT_TYPES, whose product by byte dots takes any number of rows)
FUSED_MAX_ROWS = 4
#: values that share one scale within a block, for the types whose blocks hold several scales
SUB_BLOCK = {"Q4_K": 32, "Q5_K": 32, "Q6_K": 16, "IQ4_XS": 32}
#: output rows whose bytes are interleaved in the packed layout (see the module's doc)
MAX_TILE_ROWS = 128
#: the tile of the types with one scale per block (SMALL_TILE_TYPES): see the module's doc
SMALL_TILE_ROWS = 16
SMALL_TILE_TYPES = frozenset({"Q8_0", "Q4_0", "Q4_1"})
#: the types whose layers keep their blocks as words for a decode product of byte dot products (`_BlockWords`)
BYTE_DOT_TYPES = frozenset({"Q4_0", "Q4_K", "Q6_K"})
#: the most bytes of float32 weight that a product of many rows (a prefill) dequantizes at once
PREFILL_CHUNK_BYTES = 64 << 20


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
        self.tile = _tile_rows(self.out_features, SMALL_TILE_ROWS if self.type_name in SMALL_TILE_TYPES else
                               MAX_TILE_ROWS)
        #: the blocks repacked (see the module's doc): bytes (tiles, n_blocks, block_bytes, tile), or for the types of
        #: BYTE_DOT_TYPES words and scales (`_BlockWords`)
        self._packed: Tensor | None = None
        self._words: _BlockWords | None = None
        if self.type_name in BYTE_DOT_TYPES:
            self._words = _WORD_TYPES[self.type_name].pack(weight, self.tile, unpermute_heads)
        else:
            self._packed = _pack(weight, self.tile, unpermute_heads)
        self.bias = bias
        #: the float weight of each chunk of rows `_by_row_chunks` makes, as lazy graphs (built once: see there)
        self._chunk_weights: list[Tensor] | None = None

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
        return self._words.nbytes if self._words is not None else prod(self._packed_bytes().shape)

    def _packed_bytes(self) -> Tensor:
        assert self._packed is not None, "the layer's blocks are words (_BlockWords)"
        return self._packed

    def dequantize(self) -> Tensor:
        """The float32 weight (out_features, in_features), lazy."""
        return self._dequantized_tiles(0, self.out_features // self.tile)

    def dequantize_rows(self, idx: Tensor) -> Tensor:
        """The float32 rows `idx` (integers) of the weight, (*idx.shape, in_features), lazy: only those rows'
        blocks are read (an embedding's lookup)."""
        if self._words is not None:
            return self._words.dequantize_rows(idx).reshape(*idx.shape, self.in_features)
        rows = self._packed_bytes().permute(0, 3, 1, 2).reshape(self.out_features, self.n_blocks, self.block_bytes)
        return dequantize_blocks(rows[idx], self.type_name).reshape(*idx.shape, self.in_features)

    def _dequantized_tiles(self, start: int, stop: int) -> Tensor:
        """The float32 weight of tiles start..stop of the packed layout, (rows, in_features), lazy."""
        if self._words is not None:
            return self._words.dequantize(start, stop)
        rows = self._packed_bytes()[start:stop].permute(0, 3, 1, 2).reshape(-1, self.n_blocks, self.block_bytes)
        return dequantize_blocks(rows, self.type_name).reshape(-1, self.in_features)

    def captures_rows(self, rows: int) -> bool:
        """Whether a product of `rows` rows runs inside a TinyJit capture as outside it: the byte-dot and the fused
        products do; with more rows the others make the float weight, which inside a capture would be one buffer
        of the capture's per layer (see `__call__`)."""
        return self._words is not None or rows <= FUSED_MAX_ROWS

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim < 1 or x.shape[-1] != self.in_features:
            raise ValueError(f"this {self.type_name} linear layer takes inputs (..., {self.in_features}), got shape "
                             f"{x.shape}")
        lead = x.shape[:-1]
        static = all(isinstance(s, int) for s in lead)
        fused = static and prod(lead) <= FUSED_MAX_ROWS
        if static and self._words is not None:  # at any number of rows, a prompt's too: see the module's doc
            now = not fused and _host_reads_allowed()
            # a prompt's product, outside a TinyJit capture, runs now on x computed once, as `_by_row_chunks` does:
            # its graph is then the same at every prefill (the scheduler's cache answers it), where left lazy it
            # would be scheduled again with the rest of the layer's graph, which writes the KV cache in place
            y = self._words.product(x.realize() if now else x).reshape(*lead, self.out_features)
            if self.tile < MAX_TILE_ROWS:  # as below
                y = y.contiguous()
            if now:
                y = y.realize()
        elif fused and self.type_name in _PLANES:
            planes = _PLANE_COUNT[self.type_name]
            xr = x.float().reshape(*lead, 1, self.n_blocks, planes, self.block_elems // planes)
            y = _planes_product(self._packed_bytes(), self.type_name, xr).reshape(*lead, self.out_features)
            if self.tile < MAX_TILE_ROWS:
                # stored in the layer's output shape, one axis of rows: a consumer that reads it by heads would
                # otherwise leave the kernel two output axes (tiles, rows of a tile), and the CPU's rule for a
                # matrix-vector product tiles the inner one only, a small tile's one stream (see the module's doc).
                # 128-row tiles go without: the copy costs more than it gains there
                y = y.contiguous()
        elif fused:
            # (tiles, tile, n_blocks, sub-blocks, values), never realized. The reduction runs over blocks, their
            # sub-blocks and the values of one: a sub-block's scale then depends on the outer loops only, and is
            # computed once per sub-block rather than once per value
            sub = SUB_BLOCK.get(self.type_name, self.block_elems)
            w = dequantize_blocks(self._packed_bytes().permute(0, 3, 1, 2), self.type_name)
            w = w.reshape(*w.shape[:-1], self.block_elems // sub, sub)
            xb = x.reshape(*lead, 1, 1, self.n_blocks, self.block_elems // sub, sub)
            y = (xb * w).sum((-3, -2, -1)).reshape(*lead, self.out_features)
        elif _host_reads_allowed():  # outside a TinyJit capture: run now, as a prefill does
            y = self._by_row_chunks(x)
        else:  # inside a TinyJit capture: one product, whose float weight the capture's memory planner places
            y = x.linear(self.dequantize().contiguous().T)
        if self.bias is not None:
            y = y + self.bias
        return y.cast(x.dtype) if x.dtype.is_float and y.dtype != x.dtype else y

    def _by_row_chunks(self, x: Tensor) -> Tensor:
        """x @ W.T for many rows of x, run now, a chunk of W's rows at a time: each chunk's float weight is made (one
        kernel: where the device packs the matmul's operand, the packed copy itself), used by an ordinary matmul and
        dropped before the next. Left lazy, a layer's products would be one
        schedule holding several of its float weights at once, each with the matmul's packed copy of it (a float32
        weight is 7x its 4-bit blocks: a large model's layer would add a fifth of the whole file to the resident
        memory); chunked, at most PREFILL_CHUNK_BYTES of float weight (and its copy) live, and the device's pool of
        freed buffers keeps a few chunks' worth for the next layer."""
        # x computed once: left lazy, its graph (a norm, SwiGLU's silu(gate) * up) would be fused into every
        # chunk's matmul and recomputed for each of the chunk's columns
        x = x.realize()
        parts = [x.linear(w.contiguous().T).realize() for w in self._float_chunks()]
        return parts[0] if len(parts) == 1 else parts[0].cat(*parts[1:], dim=-1)

    def _float_chunks(self) -> list[Tensor]:
        """The float weight of each chunk of W's rows, lazy: graphs of the unpacking over the packed blocks, never
        realized themselves (a product realizes a `contiguous()` of one, which it drops), built at the first prefill
        and kept: they are the same graphs every time, and building one costs as much Python as the scheduler
        spends on the chunk's whole product."""
        if self._chunk_weights is None:
            chunks = -(-self.out_features * self.in_features * 4 // PREFILL_CHUNK_BYTES)
            step = -(-self.out_features // chunks // self.tile) * self.tile  # whole tiles of the packed layout
            weights = []
            for start in range(0, self.out_features, step):
                stop = min(start + step, self.out_features)
                weights.append(self._dequantized_tiles(start // self.tile, -(-stop // self.tile)))
            self._chunk_weights = weights
        return self._chunk_weights

    def __repr__(self) -> str:
        return f"QuantizedLinear({self.in_features}, {self.out_features}, {self.type_name})"


def _tile_rows(rows: int, most: int = MAX_TILE_ROWS) -> int:
    """Output rows per tile of the packed layout: the largest power of two up to `most` dividing rows."""
    tile = most
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


# ---- the decode product of 4-bit weights and 8-bit activations, by byte dot products ------------------------------


class _BlockWords(abc.ABC):
    """4-bit blocks as 32-bit words, for a decode product of integer byte dot products (`product`): a base for the
    types of BYTE_DOT_TYPES.

    A block's nibble bytes are kept as words of four bytes, and the rows of a tile lie side by side: `words` (tiles,
    n_blocks, words per block, tile), int32 (their bits: the shifts that take bytes apart are arithmetic, their masks
    clear what a sign fills in); the block's float16 scales as bits, `halves` (tiles, n_blocks, k, tile) uint16. A
    word's low nibbles are four values of the block, its high ones four values further on: masked, each is four
    unsigned bytes whose dot product with four int8 activations (x quantized per block, `_int8_blocks`, in
    words of the same order) is one integer instruction where the CPU has one (x86's VNNI: `tg_backend_cpu.byte_dot`
    recognises the shifts and masks of `_byte_dot`), 64 multiply-adds at a time, as llama.cpp computes these
    blocks. Each type says where its values lie and how its scales apply (`_values`, `product`)."""

    def __init__(self, words: Tensor, halves: Tensor, extra: Tensor | None = None):
        self.words, self.halves, self.extra = words, halves, extra

    @staticmethod
    def _tiled(weight: QuantizedTensor, tile: int, unpermute_heads: int | None) -> Tensor:
        """The blocks as (rows / tile, tile, n_blocks, block_bytes)."""
        rows, row_bytes = weight.blocks.shape
        n_blocks = row_bytes // weight.block_bytes
        blocks = weight.blocks.reshape(rows, n_blocks, weight.block_bytes)
        if unpermute_heads is not None:
            blocks = _unpermute_rows(blocks, unpermute_heads)
        return blocks.reshape(rows // tile, tile, n_blocks, weight.block_bytes)

    @staticmethod
    def _side_by_side(t: Tensor, dtype: DType) -> Tensor:
        """Fields (tiles, tile, n_blocks, k, size) of `size` bytes each read as `dtype`, as (tiles, n_blocks, k, tile),
        realized (before the file-order blocks are dropped: the repacked copies replace them)."""
        v = t.bitcast(dtype) if dtype.itemsize > 1 else t
        return v.reshape(*t.shape[:-1]).permute(0, 2, 3, 1).contiguous().realize()

    @property
    def nbytes(self) -> int:
        return sum(prod(t.shape) * t.dtype.itemsize for t in (self.words, self.halves, self.extra) if t is not None)

    @classmethod
    @abc.abstractmethod
    def pack(cls, weight: QuantizedTensor, tile: int, unpermute_heads: int | None) -> _BlockWords:
        """The layer's blocks repacked: see the class's doc."""

    @abc.abstractmethod
    def _values(self, words: Tensor, halves: Tensor, extra: Tensor | None) -> Tensor:
        """The float32 values (..., n_blocks * values per block), from the fields in the file's row order
        (..., n_blocks, k)."""

    def dequantize(self, start: int, stop: int) -> Tensor:
        """The float32 weight of tiles start..stop, (rows, in_features), lazy."""
        def tiles(t: Tensor) -> Tensor:
            return t[start:stop].permute(0, 3, 1, 2)
        out = self._values(tiles(self.words), tiles(self.halves), None if self.extra is None else tiles(self.extra))
        return out.reshape(-1, out.shape[-1])

    def dequantize_rows(self, idx: Tensor) -> Tensor:
        """The float32 rows `idx` (*idx.shape, in_features), lazy."""
        def rows(t: Tensor) -> Tensor:
            tiles, nb, k, tile = t.shape
            return t.permute(0, 3, 1, 2).reshape(tiles * tile, nb, k)[idx]
        return self._values(rows(self.words), rows(self.halves), None if self.extra is None else rows(self.extra))

    @abc.abstractmethod
    def product(self, x: Tensor) -> Tensor:
        """x (..., in_features) times the weight's transpose, (..., tiles, tile)."""


class _Q4_0Words(_BlockWords):
    """Q4_0: per block a float16 scale d and 16 bytes, byte p's low nibble value p, its high one value p + 16
    (value = d * (nibble - 8)); four words per block, word g bytes 4g .. 4g + 3."""

    @classmethod
    def pack(cls, weight: QuantizedTensor, tile: int, unpermute_heads: int | None) -> _BlockWords:
        t = cls._tiled(weight, tile, unpermute_heads)
        tiles, _, nb, _ = t.shape
        return cls(cls._side_by_side(t[..., 2:].reshape(tiles, tile, nb, 4, 4), dtypes.int32),
                   cls._side_by_side(t[..., :2].reshape(tiles, tile, nb, 1, 2), dtypes.uint16))

    def _values(self, words: Tensor, halves: Tensor, extra: Tensor | None) -> Tensor:
        d = halves.bitcast(dtypes.float16).cast(dtypes.float32)  # (..., nb, 1)
        return (d * (_nibbles(words, (1, 4, 1)).cast(dtypes.float32) - 8)).reshape(*words.shape[:-2], -1)

    def product(self, x: Tensor) -> Tensor:
        """x (..., in_features) times the weight's transpose, (..., tiles, tile): each block's integer sum of
        products from words by byte dots, scaled by both scales and summed over the blocks in float32."""
        nb = self.words.shape[1]
        lead = x.shape[:-1]
        xw, x_scale, x_sum = _int8_blocks(x, 32)  # (..., nb, 8), (..., nb), (..., nb, 1)
        w = self.words
        planes = (w & 0x0F0F0F0F, (w >> 4) & 0x0F0F0F0F)  # values 4g + j, and 16 + 4g + j
        xw = xw.reshape(*lead, 1, nb, 2, 4, 1)
        dots = [_byte_dot(planes[h][:, :, g], xw[..., h, g, :]) for g in range(4) for h in (0, 1)]
        # sum over the block of (nibble - 8) * x: the offset times the block's sum of x, which every row shares
        total = _sum_terms(dots) - 8 * x_sum.reshape(*lead, 1, nb, 1)
        d = self.halves[:, :, 0].bitcast(dtypes.float16).cast(dtypes.float32)
        return (total.cast(dtypes.float32) * (d * x_scale.reshape(*lead, 1, nb, 1))).sum(-2)


class _Q4_KWords(_BlockWords):
    """Q4_K: per block of 256 float16 d and dmin, 12 bytes of six-bit scales and mins of its 8 sub-blocks of 32, and
    128 bytes: group g's 32 bytes hold sub-block 2g in their low nibbles and 2g + 1 in their high ones (value = d *
    scale * nibble - dmin * min). 32 words per block, word 8g + k bytes 4k .. 4k + 3 of group g; the scales and mins
    unpacked once at load (`extra`: (tiles, n_blocks, 16, tile) uint8, the 8 scales then the 8 mins: 4 bytes a block
    more than the file's 12, so that the product reads them as bytes)."""

    @classmethod
    def pack(cls, weight: QuantizedTensor, tile: int, unpermute_heads: int | None) -> _BlockWords:
        t = cls._tiled(weight, tile, unpermute_heads)
        tiles, _, nb, _ = t.shape
        fields = _Fields(t.reshape(tiles, tile, nb, 144, 1))
        unpacked = [f for p in range(8) for f in fields.k_scale_bytes(4, p)]  # sc0, m0, sc1, m1, ...
        scales = Tensor.cat(*unpacked[0::2], *unpacked[1::2], dim=-2)  # (tiles, tile, nb, 16, 1)
        return cls(cls._side_by_side(t[..., 16:].reshape(tiles, tile, nb, 32, 4), dtypes.int32),
                   cls._side_by_side(t[..., :4].reshape(tiles, tile, nb, 2, 2), dtypes.uint16),
                   cls._side_by_side(scales, dtypes.uint8))

    def _values(self, words: Tensor, halves: Tensor, extra: Tensor | None) -> Tensor:
        assert extra is not None
        d = halves.bitcast(dtypes.float16).cast(dtypes.float32)  # (..., nb, 2): d, dmin
        sm = extra.cast(dtypes.float32)  # (..., nb, 16)
        scale = (d[..., :1] * sm[..., :8]).unsqueeze(-1)  # (..., nb, 8, 1) per sub-block
        offset = (d[..., 1:] * sm[..., 8:]).unsqueeze(-1)
        q = _nibbles(words, (4, 1, 8, 1)).reshape(*words.shape[:-1], 8, 32).cast(dtypes.float32)
        return (scale * q - offset).reshape(*words.shape[:-2], -1)

    def product(self, x: Tensor) -> Tensor:
        """x (..., in_features) times the weight's transpose, (..., tiles, tile): per sub-block of 32 the integer sum
        of products by byte dots times d * scale, less dmin * min times the sub-block's sum of x, each times x's
        scale of that sub-block, summed in float32. A sub-block's byte dots are a loop over its 8 words (a reduction
        inside the reduction over the blocks and groups: its body keeps one word per row, where the terms of all 8
        words would hold the group's words at once, and spill)."""
        assert self.extra is not None
        tiles, nb, _, tile = self.words.shape
        lead = x.shape[:-1]
        xw, x_scale, x_sum = _int8_blocks(x, 256)  # one scale per block, as llama.cpp's Q8_K: (..., nb, 64), ...
        xw = xw.reshape(*lead, 1, nb, 4, 2, 8, 1)  # (.., g, h, k) as the values of sub-block 2g + h
        w = self.words.reshape(tiles, nb, 4, 8, tile)
        planes = (w & 0x0F0F0F0F, (w >> 4) & 0x0F0F0F0F)
        sm = self.extra.cast(dtypes.int32).reshape(tiles, nb, 2, 4, 2, tile)  # (scale or min, g, h)
        x_sums = x_sum.reshape(*lead, 1, nb, 4, 2, 1)
        # per group g of two sub-blocks (a loop of the reduction, with the blocks), in integers: the sub-blocks' dot
        # sums times their scales, and their sums of x times their mins; then one float expression per group
        # (the word sums keep their axis, of 1 after the sum: the scheduler keeps such a sum in the product's kernel)
        dots, mins = [], []
        for h in (0, 1):
            dots.append(sm[:, :, 0, :, h].unsqueeze(-2) * _byte_dot(planes[h], xw[..., h, :, :]).sum(-2, keepdim=True))
            mins.append((sm[:, :, 1, :, h] * x_sums[..., h, :]).unsqueeze(-2))
        d = self.halves.bitcast(dtypes.float16).cast(dtypes.float32).reshape(tiles, nb, 2, 1, 1, tile)
        per_group = d[:, :, 0] * _sum_terms(dots).cast(dtypes.float32) - \
            d[:, :, 1] * _sum_terms(mins).cast(dtypes.float32)  # (..., tiles, nb, 4, 1, tile)
        out = (per_group * x_scale.reshape(*lead, 1, nb, 1, 1, 1)).sum((-4, -3))
        return out.reshape(*lead, tiles, tile)


class _Q6_KWords(_BlockWords):
    """Q6_K: per block of 256, 128 bytes of low nibbles (ql), 64 bytes of high bit pairs (qh), 16 int8 scales (one per
    16 values) and a float16 d (value = d * scale * (q - 32)). In each half n of the block (128 values, ql bytes 64n..,
    qh bytes 32n..), value 32t + l (t < 4, l < 32) takes its low four bits from ql byte l (t = 0, 2) or l + 32 (t = 1,
    3), low nibble for t < 2, and its top two from bits 2t of qh byte l. A word of four values is put together from a
    ql word and a qh word by masks and constant shifts, four unsigned six-bit bytes for a byte dot. Words (`words`,
    the file's ql and qh words): in the order the product reads them, per half n and sub-block s of 16 values of each
    group t: the ql words of l = 16s .. 16s + 15, then those of l + 32, then the qh words (12 words, one sequential
    run: the product's loops over n and s read each run whole, where the file's order would send them back and forth
    through the block); the scales (`extra`, int8 bits as uint8), d (`halves`)."""

    @classmethod
    def pack(cls, weight: QuantizedTensor, tile: int, unpermute_heads: int | None) -> _BlockWords:
        t = cls._tiled(weight, tile, unpermute_heads)
        tiles, _, nb, _ = t.shape
        ql = t[..., :128].reshape(tiles, tile, nb, 2, 2, 2, 4, 4)  # (n, l or l + 32, s, word k of the sub-block, byte)
        qh = t[..., 128:192].reshape(tiles, tile, nb, 2, 1, 2, 4, 4)  # (n, 1, s, k, byte)
        words = ql.cat(qh, dim=4).permute(0, 1, 2, 3, 5, 4, 6, 7).reshape(tiles, tile, nb, 48, 4)  # (n, s, role, k)
        return cls(cls._side_by_side(words, dtypes.int32),
                   cls._side_by_side(t[..., 208:].reshape(tiles, tile, nb, 1, 2), dtypes.uint16),
                   cls._side_by_side(t[..., 192:208].reshape(tiles, tile, nb, 16, 1), dtypes.uint8))

    @staticmethod
    def _ql_qh(words: Tensor) -> tuple[Tensor, Tensor]:
        """The ql words (..., n, l or l + 32, s, k) and the qh words (..., n, s, k) of a block's words (..., 48)."""
        w = words.reshape(*words.shape[:-1], 2, 2, 3, 4)  # (n, s, role, k)
        lead = w.ndim - 4
        return w[..., :2, :].permute(*range(lead), lead, lead + 2, lead + 1, lead + 3), w[..., 2, :]

    def _values(self, words: Tensor, halves: Tensor, extra: Tensor | None) -> Tensor:
        assert extra is not None
        ar = functools.partial(Tensor.arange, dtype=dtypes.int32)
        # value 128n + 64u + 32p + 4k' + j (t = 2u + p, k' = 4s + k): ql word (n, p, s, k), nibble u of byte j; qh
        # word (n, s, k), bits 2t of byte j
        ql, qh = self._ql_qh(words)
        ql = ql.reshape(*words.shape[:-1], 2, 1, 2, 8, 1)
        qh = qh.reshape(*words.shape[:-1], 2, 1, 1, 8, 1)
        low = (ql >> (ar(2).reshape(2, 1, 1, 1) * 4 + ar(4) * 8)) & 0xF
        high = (qh >> ((ar(2).reshape(2, 1, 1, 1) * 2 + ar(2).reshape(2, 1, 1)) * 2 + ar(4) * 8)) & 3
        q = (low | (high << 4)).reshape(*words.shape[:-1], 16, 16).cast(dtypes.float32) - 32
        d = halves.bitcast(dtypes.float16).cast(dtypes.float32).unsqueeze(-1)  # (..., nb, 1, 1)
        sc = extra.bitcast(dtypes.int8).cast(dtypes.float32).unsqueeze(-1)  # (..., nb, 16, 1)
        return (d * sc * q).reshape(*words.shape[:-2], -1)

    def product(self, x: Tensor) -> Tensor:
        """x (..., in_features) times the weight's transpose, (..., tiles, tile): per block half n and sub-block of 16
        values of each value group t (loops of the reduction, with the blocks), the byte dots of its 4 words (a loop
        of its own inside: a reduction inside the reduction, whose body keeps one word per row, where the terms of all
        of them would hold every word of the half block at once, and spill), less 32 times its sum of x, times its
        scale, in integers; then times d and x's scale."""
        assert self.extra is not None
        tiles, nb, _, tile = self.words.shape
        lead = x.shape[:-1]
        xw, x_scale, x_sum = _int8_blocks(x, 256, run=16)  # (..., nb, 64), (..., nb), (..., nb, 16)
        xw = xw.reshape(*lead, 1, nb, 2, 4, 2, 4, 1)  # (n, t, sub-block of the group, word k of it)
        x_sums = x_sum.reshape(*lead, 1, nb, 2, 4, 2, 1)  # (n, t, sub-block of the group)
        # (n, ql byte l or l + 32, sub-block, k) and (n, sub-block, k)
        ql, qh = self._ql_qh(self.words.permute(0, 1, 3, 2))
        ql, qh = ql.permute(0, 1, 3, 4, 5, 6, 2), qh.permute(0, 1, 3, 4, 5, 2)
        sc = self.extra.bitcast(dtypes.int8).cast(dtypes.int32).reshape(tiles, nb, 2, 4, 2, tile)  # (n, t, sub-block)
        groups = []
        for t in range(4):
            low = (ql[:, :, :, t % 2] >> (4 * (t // 2))) & 0x0F0F0F0F
            high = ((qh >> (2 * t)) & 0x03030303) << 4
            # (..., tiles, nb, n, sub-block, 1, tile): the word sums keep their axis (see Q4_K's)
            dots = _byte_dot(low | high, xw[..., t, :, :, :]).sum(-2, keepdim=True)
            groups.append(sc[:, :, :, t].unsqueeze(-2) * (dots - 32 * x_sums[..., t, :, :].unsqueeze(-2)))
        d = self.halves[:, :, 0].bitcast(dtypes.float16).cast(dtypes.float32).reshape(tiles, nb, 1, 1, 1, tile)
        per_sub_block = d * _sum_terms(groups).cast(dtypes.float32)  # (..., tiles, nb, n, sub-block, 1, tile)
        out = (per_sub_block * x_scale.reshape(*lead, 1, nb, 1, 1, 1, 1)).sum((-5, -4, -3))
        return out.reshape(*lead, tiles, tile)


def _nibbles(words: Tensor, order: tuple[int, ...]) -> Tensor:
    """The nibbles of words (..., n_blocks, words) as int32 values (..., n_blocks, values): the words reshaped to
    `order` against the shifts (nibble h, byte j) = 4h + 8j of shape (2, 1, 4), so the values run in the order of
    the reshaped axes (Q4_0 (1, 4, 1): value 16h + 4g + j of word g; Q4_K (4, 1, 8, 1): value 64g + 32h + 4k + j of
    word 8g + k)."""
    shifts = Tensor.arange(2, dtype=dtypes.int32).reshape(2, 1, 1) * 4 + Tensor.arange(4, dtype=dtypes.int32) * 8
    q = (words.reshape(*words.shape[:-1], *order) >> shifts) & 0xF
    return q.reshape(*words.shape[:-1], -1)


#: the layout and product of each type of BYTE_DOT_TYPES
_WORD_TYPES: dict[str, type[_BlockWords]] = {"Q4_0": _Q4_0Words, "Q4_K": _Q4_KWords, "Q6_K": _Q6_KWords}


def _byte_dot(u: Tensor, v: Tensor) -> Tensor:
    """The dot products of the four unsigned bytes of each int32 word of u with the four signed bytes of v's, as
    int32: shifts and masks that every device computes, and that the CPU backend writes as one instruction where
    the CPU has byte dot products (`tg_backend_cpu.byte_dot` matches exactly this form)."""
    terms = [((u >> (8 * i)) & 0xFF) * ((v << (24 - 8 * i)) >> 24) for i in range(4)]
    return (terms[0] + terms[1]) + (terms[2] + terms[3])


def _int8_blocks(x: Tensor, block: int, run: int = 32) -> tuple[Tensor, Tensor, Tensor]:
    """x (..., in_features) quantized as llama.cpp quantizes activations for its integer products (Q8_0 with blocks
    of 32, Q8_K with blocks of 256): per block a scale d = max|x| / 127 and values round(x / d) in [-127, 127] (an
    all-zero block: scale and values 0). Returns the values as int32 words (..., n_blocks, block // 4), word k holding
    values 4k .. 4k + 3 as bytes, the blocks' scales d (..., n_blocks) and the sums of each run of `run` values
    (..., n_blocks, block // run), int32. Each realized, three small kernels (the scale's division is in its
    reduction's kernel, and nothing divides by a broadcast value: a division read through a broadcast would be a
    kernel of its own): the product reads them once per tile of rows, which would otherwise quantize x again for
    each."""
    lead = x.shape[:-1]
    n_blocks = x.shape[-1] // block
    xb = x.float().reshape(*lead, n_blocks, block)
    d = (xb.abs().max(-1, keepdim=True) / 127).contiguous()
    # round(), half to even (adding and taking away 1.5 * 2**23 is cheaper on the CPU, but a GPU compiler that
    # reassociates float arithmetic cancels it: WebGPU's did)
    q = (d > 0).where(xb / d, 0).round().cast(dtypes.int32)
    b = (q & 0xFF).reshape(*lead, n_blocks, block // 4, 4)
    words = _sum_terms([b[..., j] << (8 * j) for j in range(4)])  # bytes at their places: the sum never carries
    sums = q.reshape(*lead, n_blocks, block // run, run).sum(-1)
    return words.contiguous(), d.reshape(*lead, n_blocks), sums.contiguous()


# ---- the decode product, plane by plane ----------------------------------------------------------------------------
# A block's values are unpacked from bit fields whose shift depends on the value's place in the block (the low or the
# high nibble of a byte, a pair of bits of a high-bits byte). Unpacked by `dequantize_blocks`, the shift is a load
# from a small tensor of shifts indexed by the value loop, and the kernel shifts every byte by an amount it learns at
# run time, then clears lanes for shifts past the byte's width. Here a block is split into planes, runs of values
# that share their fields' shifts and their scale (for Q4_0 the 16 low nibbles, then the 16 high ones), each plane a
# term of its own with constant shifts: a plane's values are plain byte loads, masks and constant shifts of
# neighbouring bytes, and the reduction runs over the blocks and the values of a plane.


class _Fields:
    """Blocks (..., n_blocks, block_bytes, tile) read field by field as (..., n_blocks, k, tile): k values of the
    field per block, for each row of a tile. A layer's packed blocks have tiles of rows whose bytes lie together;
    blocks in the file's order are tiles of one row."""

    def __init__(self, packed: Tensor):
        self.packed = packed
        self.tile = packed.shape[-1]

    def _shrunk(self, t: Tensor, start: int, stop: int) -> Tensor:
        return t.shrink(tuple((0, s) for s in t.shape[:-2]) + ((start, stop), (0, t.shape[-1])))

    def bytes(self, start: int, stop: int) -> Tensor:
        return self._shrunk(self.packed, start, stop)

    def f16(self, at: int) -> Tensor:
        """The fp16 at bytes at, at + 1 as float32 (..., n_blocks, 1, tile)."""
        lo, hi = self.bytes(at, at + 1).cast(dtypes.uint16), self.bytes(at + 1, at + 2).cast(dtypes.uint16)
        return (lo | (hi << 8)).bitcast(dtypes.float16).cast(dtypes.float32)

    def k_scale(self, at: int, p: int) -> tuple[Tensor, Tensor]:
        """The six-bit scale and min of sub-block p of a Q4_K/Q5_K block whose 12 bytes of scales start at `at`, as
        float32 (..., n_blocks, 1, tile): bytes 0-3 hold scales 0-3 (low 6 bits), 4-7 mins 0-3; scales and mins
        4-7 take their low 4 bits from bytes 8-11 and their top 2 from the spare top bits of bytes 0-3 (scales) and
        4-7 (mins). The same fields as gguf's `_k_scales`, picked by the constant p rather than selected per value."""
        sc, mn = self.k_scale_bytes(at, p)
        return sc.cast(dtypes.float32), mn.cast(dtypes.float32)

    def k_scale_bytes(self, at: int, p: int) -> tuple[Tensor, Tensor]:
        """`k_scale`'s six-bit scale and min of sub-block p as uint8 (..., n_blocks, 1, tile)."""
        i = p % 4
        d, m = self.bytes(at + i, at + i + 1), self.bytes(at + 4 + i, at + 5 + i)
        if p < 4:
            return d & 0x3F, m & 0x3F
        md = self.bytes(at + 8 + i, at + 9 + i)
        return (md & 0x0F) | ((d >> 2) & 0x30), (md >> 4) | ((m >> 2) & 0x30)

    def plane(self, t: Tensor, start: int, stop: int | None = None) -> Tensor:
        """Entries start to stop (start + 1 by default) of a per-block field (..., n_blocks, k, tile)."""
        return self._shrunk(t, start, start + 1 if stop is None else stop)


@dataclass(frozen=True)
class _Planes:
    """A block as planes of `run` values each: value k of plane p is w_p[k] = scale * planes[p][k] + offset, where
    scale and offset (tiles, n_blocks, 1, tile) are the block's own, shared by its planes (None: planes[p] are the
    values themselves, with their own scales folded in: the K-quants, a scale per sub-block)."""

    run: int
    planes: list[Tensor]
    scale: Tensor | None
    offset: Tensor | None


def _nibble(b: Tensor, high: int) -> Tensor:
    return ((b >> 4) if high else (b & 0xF)).cast(dtypes.float32)


def _planes_q8_0(f: _Fields) -> _Planes:
    return _Planes(32, [f.bytes(2, 34).bitcast(dtypes.int8).cast(dtypes.float32)], f.f16(0), None)


def _planes_q4_0(f: _Fields) -> _Planes:
    d, qs = f.f16(0), f.bytes(2, 18)
    return _Planes(16, [_nibble(qs, h) for h in (0, 1)], d, -8 * d)


def _planes_q4_1(f: _Fields) -> _Planes:
    qs = f.bytes(4, 20)
    return _Planes(16, [_nibble(qs, h) for h in (0, 1)], f.f16(0), f.f16(2))


def _planes_k(f: _Fields, qh_at: int | None, qs_at: int) -> _Planes:
    """Q4_K (qh_at None) and Q5_K: 8 planes of 32, plane 2g + h the nibble h of the 32 bytes of group g, plus bit
    2g + h of the 32 high-bits bytes for Q5_K; x = d * sc * q - dmin * m per plane."""
    d, dmin = f.f16(0), f.f16(2)
    out = []
    for p in range(8):
        sc, mn = f.k_scale(4, p)
        q = _nibble(f.bytes(qs_at + 32 * (p // 2), qs_at + 32 * (p // 2 + 1)), p % 2)
        if qh_at is not None:
            q = q + (((f.bytes(qh_at, qh_at + 32) >> p) & 1) << 4).cast(dtypes.float32)
        out.append(d * sc * q - dmin * mn)
    return _Planes(32, out, None, None)


def _planes_q6_k(f: _Fields) -> _Planes:
    """16 planes of 16, one per scale: plane 8h + 2j + g takes nibble j // 2 of ql bytes 64h + 32 (j % 2) + 16g + k
    and bits 2j of qh byte 32h + 16g + k, and has scale 8h + 2j + g (int8, times d). With a scale per plane, the
    scale depends on the block only: the kernel computes it once per block, not once per value (with planes of 32
    and a scale per half, it was picked per value). The six bits are put together as a byte and offset there, so a
    value is one conversion to float."""
    d = f.f16(208)
    scales = f.bytes(192, 208).bitcast(dtypes.int8)
    out = []
    for h in (0, 1):
        for j in range(4):
            for g in (0, 1):
                ql_at, qh_at = 64 * h + 32 * (j % 2) + 16 * g, 128 + 32 * h + 16 * g
                ql, qh = f.bytes(ql_at, ql_at + 16), f.bytes(qh_at, qh_at + 16)
                q = ((ql >> 4) if j // 2 else (ql & 0xF)) | (((qh >> (2 * j)) & 3) << 4)
                out.append(d * f.plane(scales, 8 * h + 2 * j + g).cast(dtypes.float32) * (q.cast(dtypes.float32) - 32))
    return _Planes(16, out, None, None)


#: the types whose decode product runs by planes (the others unpack their values as `dequantize_blocks` does)
_PLANES: dict[str, Callable[[_Fields], _Planes]] = {
    "Q8_0": _planes_q8_0, "Q4_0": _planes_q4_0, "Q4_1": _planes_q4_1, "Q4_K": lambda f: _planes_k(f, None, 16),
    "Q5_K": lambda f: _planes_k(f, 16, 48), "Q6_K": _planes_q6_k}
#: planes per block of each type in _PLANES
_PLANE_COUNT = {"Q8_0": 1, "Q4_0": 2, "Q4_1": 2, "Q4_K": 8, "Q5_K": 8, "Q6_K": 16}


def _planes_product(blocks: Tensor, type_name: str, xr: Tensor) -> Tensor:
    """The products of blocks (..., n_blocks, block_bytes, tile) with x, (..., tile): the sum over each block's
    planes (see above) of plane times the matching run of x, reduced over the blocks and the runs. xr is x as
    (..., n_blocks, planes, run), its leading dims broadcasting against the blocks'. Where the planes share the
    block's scale, it multiplies the block's sum once, and the offset multiplies the block's sum of x, which every
    row shares."""
    b = _PLANES[type_name](_Fields(blocks))
    xs = [xr.shrink(tuple((0, s) for s in xr.shape[:-2]) + ((p, p + 1), (0, b.run))).transpose(-1, -2)
          for p in range(len(b.planes))]  # (..., n_blocks, run, 1)
    total = _sum_terms([w * xp for w, xp in zip(b.planes, xs)])
    if b.scale is None:
        return total.sum((-3, -2))
    # the block's sum first, then its scale: one multiply per block and row instead of one per value (the scheduler
    # computes the blocks' sums inside the loop over the blocks: engine/schedule.py `_nested_reductions`); the
    # offset multiplies the block's sum of x, which every row reads (a small kernel of its own)
    total = b.scale * total.sum(-2, keepdim=True)
    if b.offset is not None:
        total = total + b.offset * _sum_terms(xs).sum(-2, keepdim=True)
    return total.sum((-3, -2))


def _sum_terms(terms: list[Tensor]) -> Tensor:
    out = terms[0]
    for t in terms[1:]:
        out = out + t
    return out


class QuantizedEmbedding:
    """Rows of a quantized (vocab, dim) table picked by integer ids and dequantized: only the rows looked up are
    turned into floats. It reads the blocks of a QuantizedLinear, so a tied output projection shares them."""

    def __init__(self, table: QuantizedLinear):
        self._table = table
        self.num_embeddings, self.embedding_dim = table.out_features, table.in_features

    def __call__(self, idx: Tensor) -> Tensor:
        if not idx.dtype.is_int:
            raise TypeError(f"embedding ids must be integers, got {idx.dtype}")
        return self._table.dequantize_rows(idx)

    def __repr__(self) -> str:
        return f"QuantizedEmbedding({self.num_embeddings}, {self.embedding_dim}, {self._table.type_name})"


# ---- mixtures of experts whose experts stay quantized --------------------------------------------------------------

#: the most bytes of float weights that a prefill dequantizes at once (a group of chosen experts' projections)
EXPERT_GROUP_BYTES = 256 << 20


class QuantizedExperts:
    """The SwiGLU experts of a mixture with their weights as GGUF stores them, stacked and block-quantized: gate and
    up (n_experts, hidden_dim, dim), down (n_experts, dim, hidden_dim), each a QuantizedTensor of its own type (a
    Q4_K_M file mixes Q4_K and Q6_K). Each expert's blocks are packed in tiles of rows as a QuantizedLinear's (see
    the module's doc), so that a decode step's product with the chosen experts is a QuantizedLinear's product with
    an indexed load in front."""

    def __init__(self, gate: QuantizedTensor, up: QuantizedTensor, down: QuantizedTensor):
        for name, t in (("gate", gate), ("up", up), ("down", down)):
            if not isinstance(t, QuantizedTensor) or len(t.shape) != 3:
                raise ValueError(f"the experts' {name} projection must be a 3-d QuantizedTensor (n_experts, out, in), "
                                 f"got {type(t).__name__} of shape {getattr(t, 'shape', None)}")
        E, H, D = gate.shape
        if tuple(up.shape) != (E, H, D) or tuple(down.shape) != (E, D, H):
            raise ValueError(f"expert projections of shapes gate {gate.shape}, up {up.shape}, down {down.shape} do not "
                             f"fit together: gate and up must be (n_experts, hidden, dim) and down (n_experts, dim, "
                             f"hidden)")
        self.n_experts, self.hidden_dim, self.dim = E, H, D
        # underscored: the blocks are not float weights for a loader to fill (see nn.state's get_state_dict)
        self._proj = {name: _expert_blocks(t) for name, t in (("gate", gate), ("up", up), ("down", down))}

    @property
    def nbytes(self) -> int:
        return sum(prod(b.shape) for b, _ in self._proj.values())

    def gathered(self, name: str, x: Tensor, sel: Tensor) -> Tensor:
        """x (N, k or 1, in) through projection `name` of the expert each (token, choice) picked: (N, k, out).
        sel (N, k) holds the chosen experts' ids. Indexing the blocks with it is an indexed load inside the product's
        kernel: only the chosen experts' blocks are read and dequantized, by planes (`_planes_product`) where the
        type has them, as a QuantizedLinear's."""
        packed, type_name = self._proj[name]
        _, tiles, nb, _, tile = packed.shape
        N, k = sel.shape
        chosen = packed[sel]  # (N, k, tiles, n_blocks, block_bytes, tile), never realized
        elems = x.shape[-1] // nb
        if type_name in _PLANES:
            planes = _PLANE_COUNT[type_name]
            xr = x.float().reshape(N, x.shape[1], 1, nb, planes, elems // planes)
            return _planes_product(chosen, type_name, xr).reshape(N, k, tiles * tile)
        sub = SUB_BLOCK.get(type_name, elems)
        w = dequantize_blocks(chosen.permute(0, 1, 2, 5, 3, 4), type_name).reshape(N, k, tiles * tile, nb,
                                                                                     elems // sub, sub)
        xb = x.float().reshape(N, x.shape[1], 1, nb, elems // sub, sub)
        return (xb * w).sum((3, 4, 5))

    def dequantized(self, name: str, experts: Tensor) -> Tensor:
        """The float32 weights (len(experts), in, out) of projection `name` of the experts listed (int32 ids),
        input-major as Experts holds them, lazy."""
        packed, type_name = self._proj[name]
        E, tiles, nb, bb, tile = packed.shape
        rows = packed.permute(0, 1, 4, 2, 3).reshape(E, tiles * tile, nb, bb)  # the file's order, a view
        return dequantize_blocks(rows[experts], type_name).reshape(experts.shape[0], tiles * tile, -1).transpose(1, 2)


def _expert_blocks(t: QuantizedTensor) -> tuple[Tensor, str]:
    """An expert projection's blocks packed as a QuantizedLinear's, per expert: (experts, rows / tile, n_blocks,
    block_bytes, tile), in a buffer of their own that replaces the file's."""
    experts, rows, _ = t.shape
    tile = _tile_rows(rows)
    blocks = t.blocks.reshape(experts, rows // tile, tile, -1, t.block_bytes)
    return blocks.permute(0, 1, 3, 4, 2).contiguous().realize(), t.type_name


class QuantizedSparseMoE(SparseMoE):
    """A SparseMoE whose experts are QuantizedExperts: routing as SparseMoE's (its router `gate` is a Linear or a
    QuantizedLinear). The gathered form (decode) reads the chosen experts' blocks and dequantizes them inside its
    products; the grouped form (prefill) dequantizes the weights of the experts that some token chose, a group of
    at most EXPERT_GROUP_BYTES at a time, and runs each expert's matmul over its tokens."""

    def __init__(self, gate: Any, experts: QuantizedExperts, top_k: int, norm_topk_prob: bool):
        if not 1 <= top_k <= experts.n_experts:
            raise ValueError(f"top_k={top_k} must be between 1 and the number of experts ({experts.n_experts})")
        self.top_k, self.norm_topk_prob = top_k, norm_topk_prob
        self.gate, self.experts = gate, experts  # type: ignore[assignment]  # the same calls as Linear and Experts

    def _gathered(self, x: Tensor, w: Tensor, sel: Tensor) -> Tensor:
        N, k, ex = x.shape[0], self.top_k, self.experts
        assert isinstance(ex, QuantizedExperts)
        ids = sel.reshape(N, k)
        x1 = x.reshape(N, 1, x.shape[1])
        # the gate's product realized on its own: fused with the up projection's, the two reductions share one
        # kernel, which the compiler schedules worse than the two kernels apart
        gate, up = ex.gathered("gate", x1, ids).contiguous(), ex.gathered("up", x1, ids)
        hidden = (gate.silu() * up).cast(x.dtype).contiguous()
        y = ex.gathered("down", hidden, ids)
        return (y * w.float().reshape(N, k, 1)).sum(1).cast(x.dtype)

    def _grouped(self, x: Tensor, w: Tensor, sel: Tensor) -> Tensor:
        assert isinstance(self.experts, QuantizedExperts)
        return _grouped_quantized(self.experts, self.top_k, x, w, sel)


def _grouped_quantized(ex: QuantizedExperts, k: int, x: Tensor, w: Tensor, sel: Tensor) -> Tensor:
    """SparseMoE's grouped form over the experts that some token chose (see QuantizedSparseMoE)."""
    N, D = x.shape
    w = w.realize(sel)
    chosen = sel.numpy().reshape(-1).astype(np.int64)  # (N * k,) the expert of each (token, choice)
    used = np.unique(chosen)  # the experts to run, in order; `rank` is each one's place among them
    rank = np.searchsorted(used, chosen)
    counts = np.bincount(rank, minlength=len(used))
    busiest = int(counts.max())
    step = 1 << max(0, busiest.bit_length() - 3)  # as SparseMoE: few distinct shapes, at most 25% padding
    capacity = -(-busiest // step) * step
    order = np.argsort(rank, kind="stable")
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    slot = np.empty_like(rank)
    slot[order] = np.arange(len(rank)) - first[rank[order]]
    tokens = np.zeros((len(used), capacity), np.int32)  # padding slots read token 0; their results are never used
    tokens[rank, slot] = np.arange(len(rank)) // k
    per_expert = 4 * 3 * ex.dim * ex.hidden_dim  # float32 bytes of one expert's three projections
    group = max(1, EXPERT_GROUP_BYTES // per_expert)
    outs = []
    for at in range(0, len(used), group):
        ids = Tensor(used[at:at + group].astype(np.int32), device=x.device)
        xs = x[Tensor(tokens[at:at + group], device=x.device)]  # (group, capacity, D)
        gate = xs.matmul(ex.dequantized("gate", ids).contiguous())
        up = xs.matmul(ex.dequantized("up", ids).contiguous())
        hidden = gate.silu() * up
        # realized per group: the group's float weights are freed before the next group's are made
        outs.append(hidden.matmul(ex.dequantized("down", ids).contiguous()).reshape(-1, D).realize())
    y = outs[0] if len(outs) == 1 else outs[0].cat(*outs[1:])
    where = (rank * capacity + slot).reshape(N, k).astype(np.int32)
    return (y[Tensor(where, device=x.device)] * w.reshape(N, k, 1)).sum(1).cast(x.dtype)


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
    Q8_0, Q4_K, Q5_K, Q6_K, IQ4_XS, MXFP4) stay quantized: each quantized projection of a layer becomes a
    QuantizedLinear, a quantized token embedding a QuantizedEmbedding (shared with the output projection when they
    are tied), and a mixture's stacked experts (`blk.N.ffn_gate_exps.weight`, `ffn_up_exps`, `ffn_down_exps`, as
    llama.cpp writes Mixtral, Qwen3-MoE and OLMoE), when all three are quantized, QuantizedExperts in a
    QuantizedSparseMoE. The rest loads as `Llama.from_gguf` loads it, by its mapping of names: float tensors (norms,
    biases, routers, F16/F32 weights) as they are, and quantized tensors this cannot keep (those outside a plain
    linear layer, experts stored one tensor per expert) dequantized."""
    from tinygrad.nn.gguf import gguf_load_quantized
    from tinygrad.nn.transformer import Llama, _eos_ids, _from_gguf, _install

    meta, tensors = gguf_load_quantized(path, device)
    kept, experts, inputs = _split(tensors, device)
    del tensors
    # the configuration, the rope factors and the float weights by the float loader's own reading of the file
    config, weights, factors = _from_gguf(meta, inputs, str(path))
    del inputs
    model = Llama(config, max_context, None, device, rope_freq_factors=factors)
    model.eos_token_ids = _eos_ids(meta.get("tokenizer.ggml.eos_token_id"), config.vocab_size)
    release = _pool_release(model.device)
    _place_linear(model, kept, weights, meta.get("general.architecture") == "llama", release)
    _place_experts(model, experts, weights, release)
    # the float weights (norms, biases, what stayed float) with the float path's checks of names and shapes
    _install(model, weights, f"the GGUF file {path}")
    release()
    return model


def _pool_release(device: str | None) -> Callable[[], None]:
    """What empties the device's pool of freed buffers, where the device has one that can give its memory back (the
    CPU's; elsewhere nothing). Each layer's file-order blocks are freed once repacked and wait in the pool for an
    allocation of their size, which only a later tensor of the same size makes: the pool would keep one buffer of
    every other size (the token embedding's, the output projection's, each type's projections), for a large
    vocabulary most of a gigabyte, so loading empties it after each repacked tensor. The repacked copies then take
    fresh memory, whose first touch costs a page fault per huge page."""
    release = getattr(Device[device or Device.DEFAULT].allocator, "release", None)
    return release if callable(release) else (lambda: None)


_EXPERT_TENSORS = {"ffn_gate_exps.weight": "gate", "ffn_up_exps.weight": "up", "ffn_down_exps.weight": "down"}


def _split(tensors: dict[str, Tensor | QuantizedTensor], device: str | None) -> tuple[
        dict[str, tuple[str, str, QuantizedTensor]], dict[str, dict[str, QuantizedTensor]], dict[str, Tensor]]:
    """(the quantized tensors kept for linear layers by GGUF name, with their model name and name within the layer;
    the quantized experts kept by layer; the inputs of the float loader, with lazy stand-ins for what is kept)."""
    kept: dict[str, tuple[str, str, QuantizedTensor]] = {}
    experts: dict[str, dict[str, QuantizedTensor]] = {}
    for name, t in tensors.items():
        parts = name.split(".", 2)
        if (len(parts) == 3 and parts[0] == "blk" and parts[2] in _EXPERT_TENSORS and isinstance(t, QuantizedTensor)
                and len(t.shape) == 3):
            experts.setdefault(parts[1], {})[_EXPERT_TENSORS[parts[2]]] = t
    # a layer's experts stay quantized only when all three projections are
    experts = {layer: found for layer, found in experts.items() if len(found) == 3}
    inputs: dict[str, Tensor] = {}
    for name, t in tensors.items():
        mapped = _hf_name(name)
        parts = name.split(".", 2)
        if isinstance(t, QuantizedTensor) and ((mapped is not None and len(t.shape) == 2) or (
                len(parts) == 3 and parts[1] in experts and parts[2] in _EXPERT_TENSORS)):
            if mapped is not None:
                kept[name] = (*mapped, t)
            inputs[name] = Tensor.empty(*t.shape, device=device)  # a lazy stand-in, never realized
        else:  # lazy: _install realizes them one at a time
            inputs[name] = t.dequantize() if isinstance(t, QuantizedTensor) else t
    return kept, experts, inputs


def _place_linear(model: Any, kept: dict[str, tuple[str, str, QuantizedTensor]], weights: dict[str, Tensor],
                  llama_rope: bool, release: Callable[[], None]) -> None:
    """Each kept tensor into the model as a QuantizedLinear (or QuantizedEmbedding) in place of its float layer, its
    float weight taken out of `weights`; one that is not a plain linear layer's weight goes into `weights`
    dequantized. `release` runs after each tensor, once its file-order blocks are dropped (see _pool_release)."""
    config = model.config
    heads = {"attn_q.weight": config.num_attention_heads, "attn_k.weight": config.num_key_value_heads}
    for name in list(kept):
        target, within, t = kept.pop(name)  # dropped as placed: nothing else holds the blocks once repacked
        unpermute = heads[within] if llama_rope and within in heads else None
        _place_one(model, target, t, unpermute, weights)
        del t
        release()


def _place_one(model: Any, target: str, t: QuantizedTensor, unpermute: int | None, weights: dict[str, Tensor]) -> None:
    from tinygrad.nn.transformer import Linear

    if target == "model.embed_tokens.weight":
        table = QuantizedLinear(t)
        # the model's attributes are annotated with its float layers; these take the same calls
        model.model.embed_tokens = QuantizedEmbedding(table)
        if model.config.tie_word_embeddings:
            model.lm_head = QuantizedLinear.sharing(table)
        weights.pop(target, None)
        return
    owner, leaf = _parent(model, target)
    if leaf != "weight" or not isinstance(owner, Linear) or tuple(t.shape) != tuple(owner.weight.shape):
        # not a plain linear layer here (or not the shape the model expects, which _install then names)
        full = t.dequantize()
        weights[target] = full if unpermute is None else _unpermute_rows(full, unpermute)
        return
    grand, attr = _parent(model, target.rsplit(".", 1)[0])
    setattr(grand, attr, QuantizedLinear._unpermuting(t, owner.bias, unpermute))
    weights.pop(target)


def _place_experts(model: Any, experts: dict[str, dict[str, QuantizedTensor]], weights: dict[str, Tensor],
                   release: Callable[[], None]) -> None:
    """Each layer's kept experts into the model: its SparseMoE becomes a QuantizedSparseMoE over them (the router
    stays the layer's, filled from `weights` later), and the stand-ins of their float weights leave `weights`.
    `release` runs after each layer, once its file-order blocks are dropped (see _pool_release)."""
    for layer in list(experts):
        found = experts.pop(layer)  # dropped as placed: the packed copy replaces the file's blocks
        _place_layer_experts(model, layer, found, weights)
        del found
        release()


def _place_layer_experts(model: Any, layer: str, found: dict[str, QuantizedTensor], weights: dict[str, Tensor]) -> None:
    block = model.model.layers[int(layer)]
    moe = getattr(block, block._ffn_name)
    prefix = f"model.layers.{layer}.{block._ffn_name}.experts"
    if not isinstance(moe, SparseMoE):
        # a layer the file's metadata made dense: _install names the stand-ins as unexpected weights
        return
    quantized = QuantizedExperts(found["gate"], found["up"], found["down"])
    if (quantized.n_experts, quantized.dim, quantized.hidden_dim) != (moe.experts.n_experts, moe.experts.dim,
                                                                     moe.experts.hidden_dim):
        return  # _install names the shapes that differ
    setattr(block, block._ffn_name, QuantizedSparseMoE(moe.gate, quantized, moe.top_k, moe.norm_topk_prob))
    weights.pop(f"{prefix}.gate_up")
    weights.pop(f"{prefix}.down")
