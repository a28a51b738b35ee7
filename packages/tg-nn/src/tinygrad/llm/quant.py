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

The product. `x @ W.T` is written with Tensor ops as a reduction over the blocks and the values of a plane of a
block (`_planes_product`): a plane is a run of values unpacked by the same constant shifts (the low nibbles of a
Q4_0 block, then the high ones), so the kernel unpacks them with masks and shifts by constants. Where the planes
share the block's scale (Q8_0, Q4_0, Q4_1), the block's sum is taken first and scaled once: a reduction over the
values inside the reduction over the blocks, which the scheduler keeps in the one kernel (an offset multiplies the
block's sum of x, a small kernel of its own). Types without planes (Q5_0, Q5_1, IQ4_XS, MXFP4) reduce over
the blocks, sub-blocks and values of the unpacking of `tinygrad.nn.gguf`. Nothing realizes the float weight: the
scheduler fuses the unpacking into the reduction, and a decode step's product is one kernel that reads the bytes.
With more rows of input than a few (a prompt's prefill), the unpacking would be repeated per row: there the layer's
float weight is made first, one kernel, and the product is an ordinary matmul; the float weight lives only while the
layer runs. Where the device packs a matmul's right operand into panels (the CPU), the scheduler computes the float
weight straight into the packed copy, since nothing else reads it (engine/layout.py).
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from tinygrad import Device, Tensor, dtypes
from tinygrad.helpers import prod
from tinygrad.nn.gguf import QuantizedTensor, dequantize_blocks
from tinygrad.nn.transformer import SparseMoE, _host_reads_allowed

__all__ = ["FUSED_MAX_ROWS", "QuantizedEmbedding", "QuantizedExperts", "QuantizedLinear", "QuantizedSparseMoE",
           "llama_from_gguf"]

#: inputs of at most this many rows (tokens times batch) take the fused product; more dequantize the weight first
FUSED_MAX_ROWS = 4
#: values that share one scale within a block, for the types whose blocks hold several scales
SUB_BLOCK = {"Q4_K": 32, "Q5_K": 32, "Q6_K": 16, "IQ4_XS": 32}
#: output rows whose bytes are interleaved in the packed layout (see the module's doc)
MAX_TILE_ROWS = 128
#: the tile of the types with one scale per block (SMALL_TILE_TYPES): see the module's doc
SMALL_TILE_ROWS = 16
SMALL_TILE_TYPES = frozenset({"Q8_0", "Q4_0", "Q4_1"})
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
        if all(isinstance(s, int) for s in lead) and prod(lead) <= FUSED_MAX_ROWS and self.type_name in _PLANES:
            planes = _PLANE_COUNT[self.type_name]
            xr = x.float().reshape(*lead, 1, self.n_blocks, planes, self.block_elems // planes)
            y = _planes_product(self._packed, self.type_name, xr).reshape(*lead, self.out_features)
            if self.tile < MAX_TILE_ROWS:
                # stored in the layer's output shape, one axis of rows: a consumer that reads it by heads would
                # otherwise leave the kernel two output axes (tiles, rows of a tile), and the CPU's rule for a
                # matrix-vector product tiles the inner one only, a small tile's one stream (see the module's doc).
                # 128-row tiles go without: the copy costs more than it gains there
                y = y.contiguous()
        elif all(isinstance(s, int) for s in lead) and prod(lead) <= FUSED_MAX_ROWS:
            # (tiles, tile, n_blocks, sub-blocks, values), never realized. The reduction runs over blocks, their
            # sub-blocks and the values of one: a sub-block's scale then depends on the outer loops only, and is
            # computed once per sub-block rather than once per value
            sub = SUB_BLOCK.get(self.type_name, self.block_elems)
            w = dequantize_blocks(self._packed.permute(0, 3, 1, 2), self.type_name)
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
                rows = self._packed[start // self.tile:-(-stop // self.tile)].permute(0, 3, 1, 2)
                w = dequantize_blocks(rows.reshape(-1, self.n_blocks, self.block_bytes), self.type_name)
                weights.append(w.reshape(stop - start, self.in_features))
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
        i = p % 4
        d, m = self.bytes(at + i, at + i + 1), self.bytes(at + 4 + i, at + 5 + i)
        if p < 4:
            return (d & 0x3F).cast(dtypes.float32), (m & 0x3F).cast(dtypes.float32)
        md = self.bytes(at + 8 + i, at + 9 + i)
        sc, mn = (md & 0x0F) | ((d >> 2) & 0x30), (md >> 4) | ((m >> 2) & 0x30)
        return sc.cast(dtypes.float32), mn.cast(dtypes.float32)

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
        picked = self._table.rows()[idx]  # (*idx.shape, n_blocks, block_bytes), still bytes
        return dequantize_blocks(picked, self._table.type_name).reshape(*idx.shape, self.embedding_dim)

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
