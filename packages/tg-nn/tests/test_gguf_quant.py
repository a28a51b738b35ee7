"""Quantized GGUF weights kept quantized: gguf_load_quantized's blocks against the gguf package's reference
dequantizers (bit for bit), the fused quantized product against numpy, a tiny LLaMA whose projections stay quantized
against the same file dequantized up front, and bad input."""

from __future__ import annotations

import gc
import struct
from typing import Any

import numpy as np
import pytest
from tinygrad import Context, GlobalCounters, Tensor, dtypes
from tinygrad.llm.quant import (
    BYTE_DOT_TYPES,
    FUSED_MAX_ROWS,
    QuantizedEmbedding,
    QuantizedLinear,
    llama_from_gguf,
)
from tinygrad.nn.gguf import GGUFError, QuantizedTensor, dequantize_blocks, gguf_load_quantized

gguf = pytest.importorskip("gguf", reason="the gguf package writes the files and dequantizes the reference")
from gguf import GGMLQuantizationType as Q  # noqa: E402
from gguf.quants import dequantize, quantize  # noqa: E402

# the gguf package quantizes these; K-quants and IQ4_XS it only reads
QUANTIZABLE = [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.MXFP4]
BLOCK_TYPES = [*QUANTIZABLE, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.IQ4_XS]
# where each block keeps its fp16 scales, and a magnitude for them that keeps the values near 1
FP16_SCALES = {Q.Q4_K: ((0, 4), 1e-3), Q.Q5_K: ((0, 4), 5e-4), Q.Q6_K: ((208, 210), 1e-4), Q.IQ4_XS: ((0, 2), 1e-3)}


def write(path, tensors: dict, arch: str = "test", kv: dict | None = None) -> None:
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in (kv or {}).items():
        getattr(w, key)(value)
    for name, (arr, qtype) in tensors.items():
        w.add_tensor(name, arr, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def quantized(rng, qtype: Q, shape: tuple[int, int], scale: float = 1.0) -> np.ndarray:
    """Blocks of `qtype` for a (rows, cols) tensor as the writer takes them: quantized from normal values where the
    gguf package can, else random bits with fp16 scales of a sane size (so that products stay finite)."""
    if qtype in QUANTIZABLE:
        return quantize(rng.standard_normal(shape).astype(np.float32) * scale, qtype)
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (shape[0], shape[1] // block_elems, block_bytes), dtype=np.uint8)
    (a, b), size = FP16_SCALES[qtype]
    half = (rng.uniform(0.5, 1.5, (*raw.shape[:-1], (b - a) // 2)) * size * scale).astype("<f2")
    raw[..., a:b] = half.view(np.uint8)
    return raw.reshape(shape[0], -1)


# ---- loading ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("qtype", BLOCK_TYPES, ids=lambda q: q.name)
def test_blocks_load_as_bytes_and_dequantize_exactly(tmp_path, qtype):
    rng = np.random.default_rng(int(qtype))
    block_elems = gguf.GGML_QUANT_SIZES[qtype][0]
    shapes = [(3, block_elems * 3), (7, block_elems), (1, block_elems * 2)]  # odd row counts, several blocks a row
    raws = {f"t{i}": quantized(rng, qtype, s) for i, s in enumerate(shapes)}
    write(tmp_path / "q.gguf", {k: (v, qtype) for k, v in raws.items()})
    for source in (tmp_path / "q.gguf", (tmp_path / "q.gguf").read_bytes()):
        _, ts = gguf_load_quantized(source)
        for (name, raw), shape in zip(raws.items(), shapes):
            t = ts[name]
            assert isinstance(t, QuantizedTensor) and t.type_name == qtype.name and t.shape == shape
            assert t.blocks.dtype == dtypes.uint8 and t.nbytes == raw.nbytes
            np.testing.assert_array_equal(t.blocks.numpy(), raw)  # the file's bytes, untouched
            np.testing.assert_array_equal(t.dequantize().numpy(), dequantize(raw, qtype), err_msg=name)


def test_mxfp4_scales_dequantize_exactly_over_their_whole_range():
    """Every E8M0 scale byte (the subnormal halves 0 and 1, the largest finite 254, and 255, which overflows to inf
    in both) with every 4-bit code."""
    codes = np.arange(16, dtype=np.uint8)
    packed = np.tile((codes[:16:2] | (codes[1::2] << 4)).repeat(2), (256, 1))  # both nibbles of each byte vary
    blocks = np.concatenate([np.arange(256, dtype=np.uint8).reshape(256, 1), packed], axis=1)
    with np.errstate(over="ignore"):
        want = dequantize(blocks, Q.MXFP4)
    got = dequantize_blocks(Tensor(blocks), "MXFP4").numpy()
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))  # code 8 is +0, as in llama.cpp's table


def test_float_tensors_load_with_their_dtype(tmp_path):
    rng = np.random.default_rng(0)
    f32 = rng.standard_normal((3, 5)).astype(np.float32)
    f16 = rng.standard_normal((4, 6)).astype(np.float16)
    bf16 = quantize(rng.standard_normal((2, 8)).astype(np.float32), Q.BF16)
    write(tmp_path / "f.gguf", {"a": (f32, None), "b": (f16, None), "c": (bf16, Q.BF16)})
    _, ts = gguf_load_quantized(tmp_path / "f.gguf")
    assert all(isinstance(t, Tensor) for t in ts.values())
    assert (ts["a"].dtype, ts["b"].dtype, ts["c"].dtype) == (dtypes.float32, dtypes.float16, dtypes.bfloat16)
    np.testing.assert_array_equal(ts["a"].numpy(), f32)
    np.testing.assert_array_equal(ts["b"].numpy(), f16)
    np.testing.assert_array_equal(ts["c"].float().numpy(), dequantize(bf16, Q.BF16))


# ---- the quantized product ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("qtype", BLOCK_TYPES, ids=lambda q: q.name)
def test_quantized_linear_matches_numpy(tmp_path, qtype):
    rng = np.random.default_rng(10 + int(qtype))
    block_elems = gguf.GGML_QUANT_SIZES[qtype][0]
    out, cols = 37, block_elems * (3 if block_elems == 256 else 5)  # an odd row count, several blocks
    raw = quantized(rng, qtype, (out, cols))
    bias = rng.standard_normal(out).astype(np.float32)
    write(tmp_path / "w.gguf", {"w": (raw, qtype)})
    _, ts = gguf_load_quantized(tmp_path / "w.gguf")
    weight = ts["w"]
    assert isinstance(weight, QuantizedTensor)
    layer = QuantizedLinear(weight, Tensor(bias))
    ref_w = dequantize(raw, qtype).astype(np.float64)
    np.testing.assert_array_equal(layer.dequantize().numpy(), ref_w)
    # the fused product (a decode step's few rows) and the dequantize-first one (a prefill's many); the byte-dot
    # types take their product at any number of rows, and it multiplies x quantized to int8 per block, as llama.cpp's
    for shape in [(1, cols), (2, 1, cols), (FUSED_MAX_ROWS, cols), (3, 5, cols), (2, 33, cols)]:
        x = rng.standard_normal(shape).astype(np.float32)
        fused = qtype.name in BYTE_DOT_TYPES  # the byte-dot product takes any number of rows
        xin = int8_blocks(x, X_BLOCK[qtype.name]) if fused else x
        want = xin.astype(np.float64) @ ref_w.T + bias
        got = layer(Tensor(x)).numpy()
        assert got.shape == (*shape[:-1], out) and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max(), err_msg=str(shape))


#: the block of the activations' int8 quantization of each byte-dot type (quant's `_int8_blocks`)
X_BLOCK = {"Q4_0": 32, "Q4_K": 256, "Q6_K": 256}


def int8_blocks(x: np.ndarray, block: int = 32) -> np.ndarray:
    """x as the byte-dot product sees it: per block of values the scale d = max|x| / 127, round(x / d) times d
    (float32 arithmetic, rounding half to even; an all-zero block stays zero)."""
    xb = x.reshape(*x.shape[:-1], -1, block)
    d = np.abs(xb).max(-1, keepdims=True) / np.float32(127)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(d > 0, np.round(xb / d), np.float32(0))
    return (q * d).reshape(x.shape)


def _product_kernel(schedule: list) -> Any:
    """The schedule item of a decode product: the one kernel reading the blocks (types with an offset, Q4_0 and Q4_1,
    also have a small kernel summing each block's run of x, which every row reads)."""
    products = [si for si in schedule if any(b.dtype in (dtypes.uint8, dtypes.uint16) for b in si.bufs[1:])]
    assert len(products) == 1, [si.ast for si in schedule]
    return products[0]


def test_decode_product_is_one_kernel_reading_the_bytes(tmp_path):
    """A one-row product is one kernel whose inputs are the blocks, x and x's sum per block (Q4_1's offset
    multiplies it): no float weight buffer is made."""
    rng = np.random.default_rng(3)
    raw = quantized(rng, Q.Q4_1, (64, 256))
    write(tmp_path / "w.gguf", {"w": (raw, Q.Q4_1)})
    _, ts = gguf_load_quantized(tmp_path / "w.gguf")
    weight = ts["w"]
    assert isinstance(weight, QuantizedTensor)
    layer = QuantizedLinear(weight)
    x = Tensor(rng.standard_normal((1, 256)).astype(np.float32)).realize()
    y = layer(x)
    inputs = sorted((b.dtype.name, b.size) for b in _product_kernel(y.schedule()).bufs[1:])
    assert inputs == sorted([("float32", 256), ("float32", 256 // 32), ("uint8", raw.nbytes)]), inputs
    GlobalCounters.reset()
    with Context(DEBUG=0):
        np.testing.assert_allclose(y.numpy(), x.numpy() @ dequantize(raw, Q.Q4_1).T, rtol=1e-4, atol=1e-3)
    assert GlobalCounters.kernel_count == 2


def test_q4_0_decode_product_reads_words_and_int8_x(tmp_path):
    """Q4_0's decode product (quant's `_BlockWords`): x is quantized to int8 words once (with its blocks' scales and
    sums), and the product's one kernel reads those, the weight's words and its scales' bits; no float weight, and
    the blocks' bytes are the file's (words and scales together are as large)."""
    rng = np.random.default_rng(13)
    raw = quantized(rng, Q.Q4_0, (64, 256))
    write(tmp_path / "w.gguf", {"w": (raw, Q.Q4_0)})
    _, ts = gguf_load_quantized(tmp_path / "w.gguf")
    layer = QuantizedLinear(ts["w"])
    assert layer.nbytes == raw.nbytes
    x = rng.standard_normal((1, 256)).astype(np.float32)
    x[0, 32:64] = 0  # an all-zero block: scale 0, values 0
    y = layer(Tensor(x))
    schedule = [si for si in y.schedule() if not si.is_copy]
    # x's scales (max|x| / 127 in its reduction's kernel), words and sums, then the product: no kernel of its own
    # for a division read through a broadcast
    assert len(schedule) == 4, [si.ast for si in schedule]
    product = _product_kernel(schedule)
    inputs = sorted((b.dtype.name, b.size) for b in product.bufs[1:])
    blocks = raw.nbytes // 18
    assert inputs == sorted([("int32", blocks * 4), ("uint16", blocks), ("int32", 256 // 4), ("float32", 256 // 32),
                             ("int32", 256 // 32)]), inputs
    np.testing.assert_allclose(y.numpy(), int8_blocks(x).astype(np.float64) @ dequantize(raw, Q.Q4_0).T.astype(
        np.float64), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_1, Q.Q5_K], ids=lambda q: q.name)
def test_decode_product_reads_only_the_blocks_and_x(tmp_path, qtype):
    """The types unpacked by planes (quant's `_planes_product`) shift each plane's bytes by constants: the decode
    kernel's only inputs are x and the blocks, not the table of shifts that a value loop would index to unpack
    nibbles and bit pairs (a variable shift per value, then lanes cleared for shifts past a byte)."""
    rng = np.random.default_rng(30 + int(qtype))
    cols = 2 * gguf.GGML_QUANT_SIZES[qtype][0] if qtype in (Q.Q4_K, Q.Q5_K, Q.Q6_K) else 256
    raw = quantized(rng, qtype, (512, cols))
    write(tmp_path / "w.gguf", {"w": (raw, qtype)})
    _, ts = gguf_load_quantized(tmp_path / "w.gguf")
    layer = QuantizedLinear(ts["w"])
    x = Tensor(rng.standard_normal((1, cols)).astype(np.float32)).realize()
    schedule = layer(x).schedule()
    x_sums = [("float32", cols // 32)] if qtype == Q.Q4_1 else []
    assert len(schedule) == 1 + len(x_sums), [si.ast for si in schedule]
    inputs = sorted((b.dtype.name, b.size) for b in _product_kernel(schedule).bufs[1:])
    assert inputs == sorted([("float32", cols), ("uint8", raw.nbytes), *x_sums]), inputs

@pytest.mark.parametrize("qtype,tile", [(Q.Q8_0, 16), (Q.Q4_0, 16), (Q.Q4_1, 16), (Q.Q4_K, 128), (Q.Q6_K, 128)],
                         ids=lambda v: getattr(v, "name", str(v)))
def test_decode_product_reads_tiles_by_type_and_stores_one_axis_of_rows(tmp_path, qtype, tile):
    """Types with one scale per block are packed in tiles of 16 rows, the K-quants in tiles of 128 (see quant's doc).
    With 16-row tiles, the decode product's kernel has one output axis, the layer's rows, even where its consumer
    reads the output by heads: with two, (tiles, rows of a tile), the CPU's matrix-vector rule would tile only a
    tile's 16 rows, one stream, instead of 128 rows from 8 tiles."""
    from tinygrad.codegen.lowerer import lower_kernel
    from tinygrad.codegen.opt import OptState
    from tinygrad.uop.ops import AxisKind

    rng = np.random.default_rng(50 + int(qtype))
    rows, cols = 512, gguf.GGML_QUANT_SIZES[qtype][0] * 2
    raw = quantized(rng, qtype, (rows, cols))
    write(tmp_path / "w.gguf", {"w": (raw, qtype)})
    _, ts = gguf_load_quantized(tmp_path / "w.gguf")
    layer = QuantizedLinear(ts["w"])
    packed = layer._words.words if layer._words is not None else layer._packed
    assert layer.tile == tile and packed is not None and packed.shape[-1] == tile
    x = Tensor(rng.standard_normal((1, cols)).astype(np.float32)).realize()
    y = layer(x).reshape(1, 8, rows // 8) * 2  # read by heads, as attention reads q, k and v
    product = _product_kernel([si for si in y.schedule() if not si.is_copy])
    products = [k for k in [OptState.from_lowered(lower_kernel(product.ast))] if k.ranges(AxisKind.REDUCE)]
    assert len(products) == 1
    outputs = [r.vmax + 1 for r in products[0].ranges(AxisKind.GLOBAL)]
    assert outputs == [rows] if tile < 128 else outputs[-1] >= 64, outputs
    xin = int8_blocks(x.numpy(), X_BLOCK[qtype.name]) if qtype.name in BYTE_DOT_TYPES else x.numpy()
    np.testing.assert_allclose(y.numpy().reshape(1, rows), 2 * xin @ dequantize(raw, qtype).T, rtol=1e-4,
                               atol=1e-4)


def test_quantized_embedding_picks_dequantized_rows(tmp_path):
    rng = np.random.default_rng(4)
    raw = quantized(rng, Q.Q5_1, (11, 64))
    write(tmp_path / "e.gguf", {"e": (raw, Q.Q5_1)})
    _, ts = gguf_load_quantized(tmp_path / "e.gguf")
    weight = ts["e"]
    assert isinstance(weight, QuantizedTensor)
    emb = QuantizedEmbedding(QuantizedLinear(weight))
    ids = np.array([[0, 10, 3], [3, 3, 7]], np.int32)
    np.testing.assert_array_equal(emb(Tensor(ids)).numpy(), dequantize(raw, Q.Q5_1)[ids])


# ---- a tiny LLaMA ---------------------------------------------------------------------------------------------------

DIM, HIDDEN, HEADS, KV_HEADS, VOCAB, LAYERS = 256, 512, 4, 2, 96, 2


def write_llama(path, qtype: Q, tie: bool, seed: int = 0, quantized_norm: bool = False) -> None:
    """A random 2-layer LLaMA, every projection (and the token embedding) of `qtype`, norms in float32."""
    rng = np.random.default_rng(seed)
    norm = 1 + 0.1 * rng.standard_normal((1, DIM)).astype(np.float32)
    # a quantized norm (llama.cpp keeps them float, but a file may not) is not a linear layer: it loads dequantized
    tensors: dict = {"token_embd.weight": (quantized(rng, qtype, (VOCAB, DIM)), qtype),
                     "output_norm.weight": (quantize(norm, Q.Q8_0).reshape(-1), Q.Q8_0) if quantized_norm else
                     (norm.reshape(-1), None)}
    if not tie:
        tensors["output.weight"] = (quantized(rng, qtype, (VOCAB, DIM), 0.5), qtype)
    head_dim = DIM // HEADS
    for i in range(LAYERS):
        shapes = {"attn_q": (DIM, DIM), "attn_k": (KV_HEADS * head_dim, DIM), "attn_v": (KV_HEADS * head_dim, DIM),
                  "attn_output": (DIM, DIM), "ffn_gate": (HIDDEN, DIM), "ffn_up": (HIDDEN, DIM),
                  "ffn_down": (DIM, HIDDEN)}
        for name, shape in shapes.items():
            tensors[f"blk.{i}.{name}.weight"] = (quantized(rng, qtype, shape, 0.1), qtype)
        for name in ("attn_norm", "ffn_norm"):
            tensors[f"blk.{i}.{name}.weight"] = (1 + 0.1 * rng.standard_normal(DIM).astype(np.float32), None)
    write(path, tensors, "llama", {
        "add_block_count": LAYERS, "add_context_length": 64, "add_embedding_length": DIM,
        "add_feed_forward_length": HIDDEN, "add_head_count": HEADS, "add_head_count_kv": KV_HEADS,
        "add_rope_freq_base": 10000.0, "add_layer_norm_rms_eps": 1e-5, "add_eos_token_id": 2})


# one type of 32-value blocks with its own output projection, one of 256-value blocks tied to the embedding (every
# type's product is checked against numpy above)
@pytest.mark.parametrize("qtype, tie", [(Q.Q8_0, False), (Q.Q4_K, True)],
                         ids=lambda v: v.name if isinstance(v, Q) else ("tied" if v else "untied"))
def test_tiny_llama_generates_as_dequantized(tmp_path, qtype, tie):
    from tinygrad.nn.transformer import Llama

    path = tmp_path / "tiny.gguf"
    write_llama(path, qtype, tie, seed=int(qtype), quantized_norm=not tie)
    model = llama_from_gguf(path)
    reference = Llama.from_gguf(path)  # every weight dequantized to float32 up front
    layer = model.model.layers[0]
    assert isinstance(layer.self_attn.q_proj, QuantizedLinear) and isinstance(layer.mlp.down_proj, QuantizedLinear)
    assert isinstance(model.model.embed_tokens, QuantizedEmbedding) and isinstance(model.lm_head, QuantizedLinear)
    assert model.eos_token_ids == [2]
    # the q rows were moved back from llama.cpp's order exactly as the float loader moves them
    np.testing.assert_array_equal(layer.self_attn.q_proj.dequantize().numpy(),
                                  reference.model.layers[0].self_attn.q_proj.weight.numpy())
    ids = np.random.default_rng(1).integers(0, VOCAB, (1, 6)).astype(np.int32)
    want = reference.forward(Tensor(ids), 0).numpy()
    # the byte-dot types' products take x quantized to int8 per block (as llama.cpp's): within that rounding
    tol = 1e-2 * np.abs(want).max() if qtype.name in BYTE_DOT_TYPES else 1e-3
    np.testing.assert_allclose(model.forward(Tensor(ids), 0).numpy(), want, rtol=1e-3, atol=tol)
    prompt = ids[0].tolist()
    assert list(model.generate(prompt, 8)) == list(reference.generate(prompt, 8))


# ---- memory ---------------------------------------------------------------------------------------------------------


def _track_allocations(monkeypatch) -> tuple[list[int], list[int]]:
    """(the sizes the default device's allocator hands out, the peak of live plus pooled bytes at each), from now on.
    Pooled: freed buffers the allocator keeps for reuse (the CPU's `_free_bytes`; a device without a pool, 0)."""
    from tinygrad import Device

    allocator = Device[Device.DEFAULT].allocator
    sizes: list[int] = []
    peak = [0]
    alloc = allocator.alloc

    def tracked(nbytes: int, *args):
        sizes.append(nbytes)
        peak[0] = max(peak[0], GlobalCounters.mem_used + getattr(allocator, "_free_bytes", 0) + nbytes)
        return alloc(nbytes, *args)

    monkeypatch.setattr(allocator, "alloc", tracked)
    return sizes, peak


def test_loading_holds_the_blocks_once(tmp_path, monkeypatch):
    """Each layer's blocks are read from the file, repacked into a buffer of their own and dropped: once loaded, the
    device holds the file's bytes once (plus the rope tables), and while loading, at most one tensor more; freed
    blocks do not stay behind in the allocator's pool (one buffer of every size that no later tensor reuses)."""
    import gc

    from tinygrad import Device

    path = tmp_path / "tiny.gguf"
    write_llama(path, Q.Q4_K, tie=False)
    tensors = gguf.GGUFReader(str(path)).tensors
    # Q4_K layers keep their sub-blocks' six-bit scales and mins unpacked, 16 bytes a block for the file's 12
    data = [int(t.n_bytes) + (4 * int(t.n_bytes) // 144 if t.tensor_type == Q.Q4_K else 0) for t in tensors]
    gc.collect()
    # what earlier tests left in the allocator's pool would count in the peak: emptied first, where it can be
    getattr(Device[Device.DEFAULT].allocator, "release", lambda: None)()
    before = GlobalCounters.mem_used + getattr(Device[Device.DEFAULT].allocator, "_free_bytes", 0)
    _, peak = _track_allocations(monkeypatch)
    model = llama_from_gguf(path, max_context=16)
    gc.collect()
    rope = 2 * 16 * (DIM // HEADS) * 4  # cos and sin tables, float32
    held = GlobalCounters.mem_used - before
    assert held <= sum(data) + 2 * rope, (held, sum(data))
    assert peak[0] - before <= sum(data) + max(data) + 2 * rope, (peak[0] - before, sum(data), max(data))
    assert isinstance(model.lm_head, QuantizedLinear)


def test_prefill_product_dequantizes_a_chunk_of_rows_at_a_time(tmp_path, monkeypatch):
    """A product of many rows makes the layer's float weight a chunk of rows at a time (whole tiles of the packed
    layout, the last chunk shorter), so that no buffer as large as the whole float weight is made."""
    from tinygrad.llm import quant

    rng = np.random.default_rng(40)
    out, cols = 336, 256  # tiles of 16 rows (Q8_0's)
    raw = quantized(rng, Q.Q8_0, (out, cols))
    write(tmp_path / "w.gguf", {"w": (raw, Q.Q8_0)})
    _, ts = gguf_load_quantized(tmp_path / "w.gguf")
    layer = QuantizedLinear(ts["w"])
    x = Tensor(rng.standard_normal((FUSED_MAX_ROWS + 4, cols)).astype(np.float32)).realize()
    whole = out * cols * 4
    monkeypatch.setattr(quant, "PREFILL_CHUNK_BYTES", whole // 2)  # two chunks: 176 rows (11 tiles), then 160
    sizes, _ = _track_allocations(monkeypatch)
    y = layer(x).numpy()
    np.testing.assert_allclose(y, x.numpy() @ dequantize(raw, Q.Q8_0).T, rtol=1e-4, atol=1e-4 * np.abs(y).max())
    assert layer.tile == 16
    assert max(sizes) < whole and 176 * cols * 4 in sizes and 160 * cols * 4 in sizes, sizes
    # the next prefill unpacks the same chunks' graphs again (built once, kept unrealized): its own product, the float
    # weights made again, a chunk at a time, and dropped, none of them held by the layer afterwards
    gc.collect()
    before, sizes[:] = GlobalCounters.mem_used, []
    x2 = Tensor(rng.standard_normal((FUSED_MAX_ROWS + 7, cols)).astype(np.float32)).realize()
    y2 = layer(x2).numpy()
    np.testing.assert_allclose(y2, x2.numpy() @ dequantize(raw, Q.Q8_0).T, rtol=1e-4, atol=1e-4 * np.abs(y2).max())
    assert max(sizes) < whole and 176 * cols * 4 in sizes and 160 * cols * 4 in sizes, sizes
    gc.collect()
    assert GlobalCounters.mem_used - before < 176 * cols * 4, GlobalCounters.mem_used - before


# ---- bad input ------------------------------------------------------------------------------------------------------


def test_truncated_blocks_raise(tmp_path):
    rng = np.random.default_rng(5)
    write(tmp_path / "q.gguf", {"w": (quantized(rng, Q.Q4_K, (4, 512)), Q.Q4_K)})
    raw = (tmp_path / "q.gguf").read_bytes()
    (tmp_path / "cut.gguf").write_bytes(raw[:-100])
    with pytest.raises(GGUFError, match="truncated"):
        gguf_load_quantized(tmp_path / "cut.gguf")
    with pytest.raises(GGUFError, match="truncated"):
        gguf_load_quantized(raw[:-100])
    (tmp_path / "empty.gguf").write_bytes(b"")
    with pytest.raises(GGUFError, match="magic"):
        gguf_load_quantized(tmp_path / "empty.gguf")


def test_unknown_and_unsupported_types_raise(tmp_path):
    rng = np.random.default_rng(6)
    write(tmp_path / "q.gguf", {"w": (quantized(rng, Q.Q8_0, (2, 32)), Q.Q8_0)})
    raw = bytearray((tmp_path / "q.gguf").read_bytes())
    at = raw.index(struct.pack("<I", int(Q.Q8_0)), raw.index(b"w"))  # the tensor info's type, after its name
    for value, message in [(200, "unknown tensor type 200"), (int(Q.IQ2_XS), "IQ2_XS")]:
        struct.pack_into("<I", raw, at, value)
        with pytest.raises(GGUFError, match=message):
            gguf_load_quantized(bytes(raw))
    with pytest.raises(ValueError, match="unknown quantization type 'Q9_9'"):
        dequantize_blocks(Tensor.zeros(1, 34, dtype=dtypes.uint8), "Q9_9")
    with pytest.raises(ValueError, match="last dim is 34 bytes"):
        dequantize_blocks(Tensor.zeros(1, 33, dtype=dtypes.uint8), "Q8_0")


def test_bad_shapes_raise(tmp_path):
    rng = np.random.default_rng(7)
    write(tmp_path / "q.gguf", {"w": (quantized(rng, Q.Q8_0, (3, 64)), Q.Q8_0)})
    _, ts = gguf_load_quantized(tmp_path / "q.gguf")
    weight = ts["w"]
    assert isinstance(weight, QuantizedTensor)
    with pytest.raises(ValueError, match=r"takes inputs \(\.\.\., 64\)"):
        QuantizedLinear(weight)(Tensor.zeros(1, 32))
    with pytest.raises(ValueError, match="needs uint8 blocks of shape"):
        QuantizedTensor(weight.blocks[:, :34], (3, 64), "Q8_0")
    with pytest.raises(TypeError, match="QuantizedTensor"):
        QuantizedLinear(Tensor.zeros(3, 64))  # type: ignore[arg-type]


@pytest.mark.parametrize("block", [32, 256])
def test_int8_blocks_round_as_numpy(block):
    """x quantized for the byte-dot products (quant's `_int8_blocks`): per block max|x| / 127 as the scale d and
    values round(x / d), half to even (ties placed on purpose), an all-zero block all zeros; the words hold the
    values as bytes in order, the sums are per run of the given length."""
    from tinygrad.llm.quant import _int8_blocks

    rng = np.random.default_rng(block)
    x = (rng.standard_normal((2, 2 * block)) * 3).astype(np.float32)
    x[0, :block] = 0
    x[1, :5] = [127.0, 0.5, -0.5, 1.5, 2.5]  # max|x| 127 in the block: these are ties of round(x * 1)
    words, scale, sums = _int8_blocks(Tensor(x), block, run=16)
    xb = x.reshape(2, 2, block)
    want_scale = np.abs(xb).max(-1) / np.float32(127)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(want_scale[..., None] > 0, np.round(xb / want_scale[..., None]), np.float32(0))
    np.testing.assert_array_equal(scale.numpy(), want_scale)
    np.testing.assert_array_equal(words.numpy().view(np.int8).reshape(2, 2, block), q)
    np.testing.assert_array_equal(sums.numpy(), q.reshape(2, 2, block // 16, 16).sum(-1))
    assert list(q[1, 0, 1:5]) == [0, -0, 2, 2]
