"""gguf_load against files written by the `gguf` package (llama.cpp's Python writer) and its reference
dequantizers, block by block and bit for bit; plus damaged and hostile files, built byte by byte, that must give a
GGUFError naming the problem."""

from __future__ import annotations

import pathlib
import struct

import numpy as np
import pytest
from tinygrad import Device, Tensor, dtypes
from tinygrad.nn.state import GGUFError, gguf_load

gguf = pytest.importorskip("gguf", reason="the gguf package writes the files and dequantizes the reference")
from gguf import GGMLQuantizationType as Q  # noqa: E402
from gguf import GGUFValueType as V  # noqa: E402
from gguf.quants import dequantize, quantize  # noqa: E402

# the gguf package can quantize these itself; the K-quants it only dequantizes
QUANTIZABLE = [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1]
BLOCK_TYPES = [*QUANTIZABLE, Q.Q4_K, Q.Q5_K, Q.Q6_K]
# where each block keeps its fp16 scales (the rest of a block is any bits at all)
FP16_BYTES = {Q.Q8_0: (0, 2), Q.Q4_0: (0, 2), Q.Q4_1: (0, 4), Q.Q5_0: (0, 2), Q.Q5_1: (0, 4), Q.Q4_K: (0, 4),
              Q.Q5_K: (0, 4), Q.Q6_K: (208, 210)}
# one block, several blocks in 2-d, and 3-d: the last dim is the row, a whole number of blocks
SHAPES_32 = [(32,), (5, 96), (2, 3, 64)]
SHAPES_256 = [(256,), (3, 512), (2, 3, 256)]


def write(path, tensors: dict[str, tuple[np.ndarray, Q | None]], kv=(), alignment: int | None = None) -> None:
    w = gguf.GGUFWriter(str(path), "test")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    for key, value, vtype, sub in kv:
        w.add_key_value(key, value, vtype, sub_type=sub)
    for name, (arr, qtype) in tensors.items():
        w.add_tensor(name, arr, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def random_blocks(rng, qtype: Q, shape: tuple[int, ...]) -> np.ndarray:
    """Random blocks of `qtype` for a tensor of `shape`, as the byte array the writer takes: every bit random except
    the fp16 scales, which are random finite values (subnormals and negatives included) so that the comparison
    sees numbers rather than NaNs."""
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (*shape[:-1], shape[-1] // block_elems, block_bytes), dtype=np.uint8)
    a, b = FP16_BYTES[qtype]
    half = rng.integers(0, 1 << 16, (*raw.shape[:-1], (b - a) // 2), dtype=np.uint16)
    half = np.where((half & 0x7C00) == 0x7C00, half & 0x83FF, half)  # exponent 31 is inf/NaN: clear it
    raw[..., a:b] = half.astype("<u2").view(np.uint8)
    return raw.reshape(*shape[:-1], -1)


def bits(t: Tensor) -> np.ndarray:
    return t.bitcast({4: dtypes.uint32, 2: dtypes.uint16}[t.dtype.itemsize]).numpy()


# ---- tensors ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES_32, ids=str)
@pytest.mark.parametrize("qtype", QUANTIZABLE, ids=lambda q: q.name)
def test_quantized_by_gguf_matches_reference(tmp_path, qtype, shape):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32) * 3
    x.reshape(-1)[:32] = 0  # an all-zero block: a zero scale
    q = quantize(x, qtype)
    write(tmp_path / "q.gguf", {"w": (q, qtype)})
    _, ts = gguf_load(tmp_path / "q.gguf")
    assert ts["w"].shape == shape and ts["w"].dtype == dtypes.float32
    ref = dequantize(q, qtype)
    np.testing.assert_array_equal(ts["w"].numpy(), ref)
    np.testing.assert_allclose(ts["w"].numpy(), x, atol=np.abs(x).max() / 3)  # and it is near the original


@pytest.mark.parametrize("qtype", BLOCK_TYPES, ids=lambda q: q.name)
def test_random_blocks_match_reference(tmp_path, qtype):
    rng = np.random.default_rng(int(qtype))
    shapes = SHAPES_256 if gguf.GGML_QUANT_SIZES[qtype][0] == 256 else SHAPES_32
    blocks = {f"t{i}": random_blocks(rng, qtype, s) for i, s in enumerate(shapes)}
    write(tmp_path / "r.gguf", {k: (v, qtype) for k, v in blocks.items()})
    _, ts = gguf_load(tmp_path / "r.gguf")
    for (name, raw), shape in zip(blocks.items(), shapes):
        assert ts[name].shape == shape and ts[name].dtype == dtypes.float32
        ref = dequantize(raw, qtype)
        got = ts[name].numpy()
        # block by block, so a failure names the block
        n = gguf.GGML_QUANT_SIZES[qtype][0]
        for i, (g, r) in enumerate(zip(got.reshape(-1, n), ref.reshape(-1, n))):
            np.testing.assert_array_equal(g, r, err_msg=f"{qtype.name} {name} block {i}")


def test_plain_types_keep_dtype_and_bits(tmp_path):
    rng = np.random.default_rng(2)
    f32 = rng.standard_normal((3, 5, 7)).astype(np.float32)
    f32.reshape(-1)[:6] = [np.inf, -np.inf, np.nan, -0.0, 1e-45, np.finfo(np.float32).max]
    f16 = rng.standard_normal((4, 9)).astype(np.float16)
    f16.reshape(-1)[:4] = [np.inf, np.nan, -0.0, np.float16(6e-8)]
    bf16 = quantize(rng.standard_normal((6, 10)).astype(np.float32), Q.BF16)  # bytes (6, 20)
    write(tmp_path / "p.gguf", {"f32": (f32, None), "f16": (f16, None), "bf16": (bf16, Q.BF16),
                                "one": (np.array([2.5], dtype=np.float32), None)})
    _, ts = gguf_load(tmp_path / "p.gguf")
    assert (ts["f32"].dtype, ts["f16"].dtype, ts["bf16"].dtype) == (dtypes.float32, dtypes.float16, dtypes.bfloat16)
    assert ts["f32"].shape == (3, 5, 7) and ts["f16"].shape == (4, 9) and ts["bf16"].shape == (6, 10)
    np.testing.assert_array_equal(bits(ts["f32"]), f32.view(np.uint32))
    np.testing.assert_array_equal(bits(ts["f16"]), f16.view(np.uint16))
    np.testing.assert_array_equal(bits(ts["bf16"]), bf16.view("<u2"))
    np.testing.assert_array_equal(ts["bf16"].float().numpy(), dequantize(bf16, Q.BF16))
    assert ts["one"].tolist() == [2.5]


def test_order_names_and_mixed_types(tmp_path):
    rng = np.random.default_rng(3)
    tensors = {"blk.0.attn_q.weight": (quantize(rng.standard_normal((4, 64)).astype(np.float32), Q.Q8_0), Q.Q8_0),
               "token_embd.weight": (rng.standard_normal((8, 16)).astype(np.float16), None),
               "output_norm.weight": (rng.standard_normal(16).astype(np.float32), None),
               "blk.0.ffn.weight": (random_blocks(rng, Q.Q6_K, (2, 256)), Q.Q6_K)}
    write(tmp_path / "m.gguf", tensors)
    _, ts = gguf_load(tmp_path / "m.gguf")
    assert list(ts) == list(tensors)
    assert [t.shape for t in ts.values()] == [(4, 64), (8, 16), (16,), (2, 256)]


@pytest.mark.parametrize("alignment", [1, 8, 64, 256])
def test_alignment_other_than_32(tmp_path, alignment):
    rng = np.random.default_rng(alignment)
    a = rng.standard_normal(7).astype(np.float32)  # 28 bytes: the next tensor needs padding for most alignments
    b = quantize(rng.standard_normal((3, 32)).astype(np.float32), Q.Q5_1)
    c = rng.standard_normal((3, 3)).astype(np.float16)
    write(tmp_path / "a.gguf", {"a": (a, None), "b": (b, Q.Q5_1), "c": (c, None)}, alignment=alignment)
    kv, ts = gguf_load(tmp_path / "a.gguf")
    assert kv["general.alignment"] == alignment
    np.testing.assert_array_equal(ts["a"].numpy(), a)
    np.testing.assert_array_equal(ts["b"].numpy(), dequantize(b, Q.Q5_1))
    np.testing.assert_array_equal(ts["c"].numpy(), c)


def test_every_kind_of_source_and_version_2(tmp_path):
    x = np.arange(64, dtype=np.float32).reshape(2, 32) / 7
    q = quantize(x, Q.Q4_1)
    write(tmp_path / "s.gguf", {"x": (x, None), "q": (q, Q.Q4_1)})
    raw = (tmp_path / "s.gguf").read_bytes()
    v2 = bytearray(raw)
    struct.pack_into("<I", v2, 4, 2)  # version 2 has the same layout (3 only allowed big-endian files)
    (tmp_path / "v2.gguf").write_bytes(bytes(v2))
    sources = [str(tmp_path / "s.gguf"), tmp_path / "s.gguf", raw, bytearray(raw), memoryview(raw),
               Tensor(raw), tmp_path / "v2.gguf"]
    for src in sources:
        _, ts = gguf_load(src, device=Device.DEFAULT if isinstance(src, bytes) else None)
        np.testing.assert_array_equal(ts["x"].numpy(), x)
        np.testing.assert_array_equal(ts["q"].numpy(), dequantize(q, Q.Q4_1))


def test_file_bytes_go_to_the_device_once(tmp_path, monkeypatch):
    """The data section is uploaded once, as bytes, and dequantized there: nothing else of any size is uploaded
    (a dequantization done in numpy would upload its float32 result, several times the quantized bytes)."""
    from tinygrad.device import Buffer

    rng = np.random.default_rng(4)
    tensors = {"a": (random_blocks(rng, Q.Q4_K, (4, 512)), Q.Q4_K), "b": (random_blocks(rng, Q.Q8_0, (8, 64)), Q.Q8_0),
               "c": (rng.standard_normal((16, 16)).astype(np.float32), None)}
    write(tmp_path / "u.gguf", tensors)
    size = (tmp_path / "u.gguf").stat().st_size
    uploads: list[int] = []
    real = Buffer.copyin

    def spy(self, data):
        uploads.append(data.nbytes)
        return real(self, data)

    monkeypatch.setattr(Buffer, "copyin", spy)
    _, ts = gguf_load(tmp_path / "u.gguf")
    big = [n for n in uploads if n > 64]
    assert len(big) == 1 and size - 4096 < big[0] <= size, uploads  # the data section (the header is small)
    assert sum(uploads) - big[0] <= 64, uploads  # the rest: a few shift constants
    assert sum(uploads) < sum(t.numel() * t.element_size() for t in ts.values())  # less than what came out
    src = Tensor((tmp_path / "u.gguf").read_bytes())
    uploads.clear()
    gguf_load(src)
    assert sum(uploads) <= 64, uploads  # a tensor of the file is used in place


def test_unusual_but_valid_shapes(tmp_path):
    write(tmp_path / "z.gguf", {"empty": (np.zeros((0, 4), np.float32), None),
                                "scalar": (np.array(3.0, np.float32), None)})
    _, ts = gguf_load(tmp_path / "z.gguf")
    assert ts["empty"].shape == (0, 4) and ts["empty"].dtype == dtypes.float32
    assert ts["scalar"].shape == () and ts["scalar"].item() == 3.0
    # nothing to upload: a vocabulary-only file, and one whose tensors are all empty
    kv, ts = gguf_load(build(tensors=(), kv=(("tokenizer.ggml.model", 8, _str("llama")),))[0])
    assert kv == {"tokenizer.ggml.model": "llama"} and ts == {}
    _, ts = gguf_load(build(tensors=(("e", (0, 3), int(Q.Q6_K)),))[0])
    assert ts["e"].shape == (3, 0) and ts["e"].dtype == dtypes.float32


# ---- metadata -----------------------------------------------------------------------------------------------------


def test_metadata_of_every_value_type(tmp_path):
    kv = [
        ("u8", 255, V.UINT8, None), ("i8", -128, V.INT8, None), ("u16", 65535, V.UINT16, None),
        ("i16", -32768, V.INT16, None), ("u32", 2**32 - 1, V.UINT32, None), ("i32", -(2**31), V.INT32, None),
        ("u64", 2**64 - 1, V.UINT64, None), ("i64", -(2**63), V.INT64, None), ("f32", 0.1, V.FLOAT32, None),
        ("f64", 0.1, V.FLOAT64, None), ("t", True, V.BOOL, None), ("f", False, V.BOOL, None),
        ("s", "héllo ✓ 🦙", V.STRING, None), ("empty", "", V.STRING, None),
        ("a.u8", [0, 7, 255], V.ARRAY, V.UINT8), ("a.i8", [-1, 2], V.ARRAY, V.INT8),
        ("a.u16", [1, 65535], V.ARRAY, V.UINT16), ("a.i16", [-5, 5], V.ARRAY, V.INT16),
        ("a.u32", [3], V.ARRAY, V.UINT32), ("a.i32", [-3, 4, 5], V.ARRAY, V.INT32),
        ("a.u64", [2**64 - 1], V.ARRAY, V.UINT64), ("a.i64", [-(2**63), 1], V.ARRAY, V.INT64),
        ("a.f32", [0.5, -2.25, 0.1], V.ARRAY, V.FLOAT32), ("a.f64", [0.1, 1e300], V.ARRAY, V.FLOAT64),
        ("a.bool", [True, False, True], V.ARRAY, V.BOOL),
        ("tokenizer.ggml.tokens", ["<s>", "", "▁the", "日本", "\n"], V.ARRAY, V.STRING),
        ("a.nested", [[1, 2], [3]], V.ARRAY, V.ARRAY),
    ]
    write(tmp_path / "kv.gguf", {"w": (np.ones(4, np.float32), None)}, kv=kv)
    got, _ = gguf_load(tmp_path / "kv.gguf")
    assert got["general.architecture"] == "test"
    for key, value, vtype, _sub in kv:
        want = float(np.float32(value)) if vtype == V.FLOAT32 else value
        if key == "a.f32":
            want = [float(np.float32(v)) for v in value]
        assert got[key] == want, key
        assert type(got[key]) is type(want), key
    assert all(type(v) is bool for v in got["a.bool"]) and all(type(v) is int for v in got["a.u64"])
    assert list(got) == ["general.architecture", *(k for k, *_ in kv)]


# ---- damaged and hostile files, built byte by byte ----------------------------------------------------------------


def u32(v: int) -> bytes: return struct.pack("<I", v)
def u64(v: int) -> bytes: return struct.pack("<Q", v)


def _str(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def build(tensors=(("w", (32, 2), 0),), kv=(), version=3, alignment=32):
    """A GGUF file: tensors as (name, dims innermost first, ggml type) laid out back to back at aligned offsets; kv
    as (key, value type, payload bytes). Returns (bytes, where) with `where` the byte positions of fields to damage."""
    where: dict[str, int] = {}
    if alignment != 32:
        kv = (("general.alignment", 4, u32(alignment)), *kv)
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kv))
    body = b""
    for key, vtype, payload in kv:
        where[f"kv:{key}"] = len(head) + len(body)
        body += _str(key) + struct.pack("<I", vtype) + payload
    offset = 0
    sizes = []
    for name, dims, qtype in tensors:
        block_elems, block_bytes = gguf.GGML_QUANT_SIZES[Q(qtype)]
        nbytes = int(np.prod(dims)) // block_elems * block_bytes
        where[f"ti:{name}"] = len(head) + len(body)
        body += _str(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        where[f"type:{name}"] = len(head) + len(body)
        body += struct.pack("<I", qtype)
        where[f"offset:{name}"] = len(head) + len(body)
        body += struct.pack("<Q", offset)
        sizes.append((offset, nbytes))
        offset += -(-nbytes // alignment) * alignment
    out = head + body
    out += b"\0" * (-len(out) % alignment)
    where["data"] = len(out)
    data = bytearray()
    for off, nbytes in sizes:
        data += b"\0" * (off - len(data))
        data += (bytes(range(256)) * (nbytes // 256 + 1))[:nbytes]
    return out + bytes(data), where


def patched(raw: bytes, at: int, fmt: str, value: int) -> bytes:
    out = bytearray(raw)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


def load_error(src, match: str) -> str:
    with pytest.raises(GGUFError, match=match) as e:
        gguf_load(src)
    return str(e.value)


def test_the_builder_makes_valid_files():
    raw, _ = build(tensors=(("a", (32, 2), 8), ("b", (3,), 0)), kv=(("k", 4, u32(7)),))
    kv, ts = gguf_load(raw)
    assert kv == {"k": 7} and ts["a"].shape == (2, 32) and ts["b"].shape == (3,)


def test_error_names_file_offset_and_problem(tmp_path):
    raw, _ = build()
    (tmp_path / "bad.gguf").write_bytes(b"GGML" + raw[4:])
    msg = load_error(tmp_path / "bad.gguf", "bad magic")
    assert str(tmp_path / "bad.gguf") in msg and "at byte 0" in msg and "not a GGUF file" in msg
    assert isinstance(GGUFError("x"), ValueError)


def test_every_truncation_is_an_error():
    raw, _ = build(tensors=(("a", (32, 2), 2), ("b", (5,), 0)), kv=(("k", 8, _str("v")), ("arr", 9, u32(8) + u64(2)
                   + _str("x") + _str("yz"))), alignment=8)
    gguf_load(raw)
    for n in range(len(raw)):
        with pytest.raises(GGUFError, match="truncated"):
            gguf_load(raw[:n])


@pytest.mark.parametrize("version, hint", [(1, "obsolete"), (4, ""), (0x03000000, "big-endian"), (0, "")])
def test_unknown_version(version, hint):
    raw, _ = build()
    msg = load_error(patched(raw, 4, "<I", version), f"unknown GGUF version {version}")
    assert "at byte 4" in msg and "[2, 3]" in msg and hint in msg


def test_unknown_and_unsupported_tensor_types():
    raw, where = build()
    msg = load_error(patched(raw, where["type:w"], "<I", 99), "unknown tensor type 99")
    assert "'w'" in msg and "Q4_K" in msg and "BF16" in msg and f"at byte {where['type:w']}" in msg
    msg = load_error(patched(raw, where["type:w"], "<I", int(Q.Q2_K)), "Q2_K")
    assert "cannot load" in msg and "supported:" in msg


def test_offsets_out_of_range_misaligned_or_overlapping():
    raw, where = build(tensors=(("a", (32,), 0), ("b", (32,), 0)))
    load_error(patched(raw, where["offset:b"], "<Q", 1 << 20), "out of range")
    load_error(patched(raw, where["offset:b"], "<Q", 2**64 - 32), "out of range")
    load_error(patched(raw, where["offset:b"], "<Q", 4), "not a multiple of the alignment 32")
    load_error(patched(raw, where["offset:b"], "<Q", 0), "overlaps tensor 'a'")


def test_bad_dims():
    raw, where = build(tensors=(("q", (64, 2), int(Q.Q8_0)),))
    dims_at = where["ti:q"] + 8 + 1 + 4
    load_error(patched(raw, dims_at, "<Q", 48), r"rows of 48 values, not a whole number of 32-value blocks")
    load_error(patched(raw, dims_at + 8, "<Q", 2**62), "out of range")
    load_error(patched(raw, where["ti:q"] + 9, "<I", 5), "5 dimensions; GGUF allows at most 4")
    raw, _ = build(tensors=(("s", (), int(Q.Q4_0)),))
    load_error(raw, "rows of 1 values")


def test_bad_metadata():
    base = (("general.alignment", 4, u32(32)),)
    raw, where = build(kv=base)
    at = where["kv:general.alignment"] + 8 + len("general.alignment")
    load_error(patched(raw, at, "<I", 13), "value type 13, which GGUF does not define")
    load_error(patched(raw, at + 4, "<I", 48), "general.alignment is 48; it must be a power of two")
    load_error(patched(raw, at + 4, "<I", 0), "general.alignment is 0")
    load_error(build(kv=(("general.alignment", 8, _str("32")),))[0], "general.alignment is '32'")
    load_error(build(kv=(("k", 4, u32(1)), ("k", 4, u32(2))))[0], "metadata key 'k' appears twice")
    load_error(build(tensors=(("w", (4,), 0), ("w", (4,), 0)))[0], "tensor name 'w' appears twice")
    load_error(build(kv=((b"\xff\xfe", 4, u32(1)),))[0], "not valid UTF-8")
    load_error(build(kv=(("a", 9, u32(6) + u64(2**60)),))[0], "claims 1152921504606846976 FLOAT32 elements")
    load_error(build(kv=(("a", 9, u32(8) + u64(2**60)),))[0], "claims 1152921504606846976 elements")
    load_error(build(kv=(("a", 9, u32(77) + u64(1)),))[0], "element type 77")
    nested = u32(9) + u64(1)
    load_error(build(kv=(("deep", 9, nested * 40 + u32(4) + u64(0)),))[0], "nests arrays deeper than 16")
    raw, _ = build()
    load_error(patched(raw, 8, "<Q", 2**40), "more than the")


def test_stray_bytes_in_metadata_strings_are_kept():
    kv, _ = gguf_load(build(kv=(("tok", 8, _str(b"a\xffb")),))[0])
    assert kv["tok"].encode("utf-8", "surrogateescape") == b"a\xffb"


def test_tensor_argument_must_be_bytes():
    with pytest.raises(TypeError):
        gguf_load(Tensor([1.0, 2.0]))


def test_missing_file_is_not_a_format_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        gguf_load(pathlib.Path(tmp_path / "nope.gguf"))
