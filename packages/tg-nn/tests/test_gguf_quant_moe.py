"""Mixtures of experts from GGUF files with their experts kept quantized (llama_from_gguf): the stacked expert
tensors llama.cpp writes (`blk.N.ffn_gate_exps.weight`, ...) of a tiny random Mixtral (a LLaMA with experts),
Qwen3-MoE and OLMoE, against the same file dequantized up front and against the float weights they were quantized
from; only the chosen experts are read in a decode step; bad input."""

from __future__ import annotations

import numpy as np
import pytest
from tinygrad import GlobalCounters, Tensor, dtypes
from tinygrad.llm import quant
from tinygrad.llm.quant import BYTE_DOT_TYPES, QuantizedExperts, QuantizedLinear, QuantizedSparseMoE, llama_from_gguf
from tinygrad.nn.gguf import QuantizedTensor
from tinygrad.nn.transformer import Llama, SparseMoE

gguf = pytest.importorskip("gguf", reason="the gguf package writes the files and quantizes the weights")
from gguf import GGMLQuantizationType as Q  # noqa: E402
from test_gguf_quant import quantized, write  # noqa: E402

DIM, HIDDEN, EXPERT_HIDDEN, HEADS, KV_HEADS, VOCAB, LAYERS, EXPERTS, TOP_K = 256, 512, 256, 4, 2, 64, 2, 16, 2
ARCH = {"mixtral": "llama", "qwen3_moe": "qwen3moe", "olmoe": "olmoe"}


def _floats(rng, arch: str) -> dict[str, np.ndarray]:
    """The float weights of a random 2-layer mixture in GGUF names; layer 1 of the Qwen3-MoE is dense."""
    head_dim = DIM // HEADS
    out = {"token_embd.weight": rng.standard_normal((VOCAB, DIM)).astype(np.float32),
           "output.weight": 0.5 * rng.standard_normal((VOCAB, DIM)).astype(np.float32),
           "output_norm.weight": 1 + 0.1 * rng.standard_normal(DIM).astype(np.float32)}
    for i in range(LAYERS):
        shapes = {"attn_q": (DIM, DIM), "attn_k": (KV_HEADS * head_dim, DIM), "attn_v": (KV_HEADS * head_dim, DIM),
                  "attn_output": (DIM, DIM)}
        if arch == "qwen3moe" and i == 1:
            shapes |= {"ffn_gate": (HIDDEN, DIM), "ffn_up": (HIDDEN, DIM), "ffn_down": (DIM, HIDDEN)}
        else:
            shapes |= {"ffn_gate_inp": (EXPERTS, DIM), "ffn_gate_exps": (EXPERTS, EXPERT_HIDDEN, DIM),
                       "ffn_up_exps": (EXPERTS, EXPERT_HIDDEN, DIM), "ffn_down_exps": (EXPERTS, DIM, EXPERT_HIDDEN)}
        for name, shape in shapes.items():
            out[f"blk.{i}.{name}.weight"] = 0.1 * rng.standard_normal(shape).astype(np.float32)
        norms = {"attn_norm": DIM, "ffn_norm": DIM}
        if arch == "qwen3moe":
            norms |= {"attn_q_norm": head_dim, "attn_k_norm": head_dim}
        elif arch == "olmoe":
            norms |= {"attn_q_norm": DIM, "attn_k_norm": KV_HEADS * head_dim}
        for name, n in norms.items():
            out[f"blk.{i}.{name}.weight"] = 1 + 0.1 * rng.standard_normal(n).astype(np.float32)
    return out


def _quantize(rng, name: str, a: np.ndarray, types: dict[str, Q]) -> tuple[np.ndarray, Q | None]:
    """A weight as the writer takes it: the experts and projections of their types (routers and norms stay float
    as llama.cpp keeps them). The gguf package cannot quantize K-quants: those get random blocks of the same size."""
    kind = next((k for k in types if f".{k}." in name or name.startswith(f"{k}.")), None)
    if kind is None or a.ndim == 1 or "gate_inp" in name:
        return a, None
    qtype = types[kind]
    rows = a.reshape(-1, a.shape[-1])
    blocks = quantized(rng, qtype, rows.shape, 0.1) if qtype not in (Q.Q8_0, Q.Q4_0) else \
        gguf.quants.quantize(rows, qtype)
    return blocks.reshape(*a.shape[:-1], -1), qtype


def write_moe(path, arch: str, types: dict[str, Q] | None, seed: int = 0) -> None:
    """A tiny random mixture of architecture `arch` (a GGUF architecture name): float32 where types is None, else
    each tensor whose name contains a key of `types` of that type."""
    rng = np.random.default_rng(seed)
    tensors = {name: (_quantize(rng, name, a, types) if types else (a, None)) for name, a in _floats(rng, arch).items()}
    kv = {"add_block_count": LAYERS, "add_context_length": 64, "add_embedding_length": DIM,
          "add_feed_forward_length": HIDDEN, "add_head_count": HEADS, "add_head_count_kv": KV_HEADS,
          "add_rope_freq_base": 10000.0, "add_layer_norm_rms_eps": 1e-5, "add_eos_token_id": 2,
          "add_expert_count": EXPERTS, "add_expert_used_count": TOP_K, "add_expert_feed_forward_length": EXPERT_HIDDEN}
    write(path, tensors, arch, kv)


# Mixtral with Q8_0 everywhere; Qwen3-MoE as a Q4_K_M file mixes Q4_K and Q6_K; OLMoE with the 4-bit codes
CASES = {"mixtral": {"exps": Q.Q8_0, "attn": Q.Q8_0, "ffn": Q.Q8_0, "output": Q.Q8_0, "token_embd": Q.Q8_0},
         "qwen3_moe": {"ffn_gate_exps": Q.Q4_K, "ffn_up_exps": Q.Q4_K, "ffn_down_exps": Q.Q6_K, "attn": Q.Q4_K,
                       "ffn": Q.Q4_K},
         "olmoe": {"ffn_gate_exps": Q.IQ4_XS, "ffn_up_exps": Q.IQ4_XS, "ffn_down_exps": Q.MXFP4, "attn": Q.Q4_0}}


def _types(case: str) -> dict[str, Q]:
    # the keys match name parts: "exps" stands for the three expert tensors, "attn"/"ffn" for the layers' others
    out: dict[str, Q] = {}
    for key, qtype in CASES[case].items():
        if key == "exps":
            out |= {k: qtype for k in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")}
        elif key == "attn":
            out |= {k: qtype for k in ("attn_q", "attn_k", "attn_v", "attn_output")}
        elif key == "ffn":
            out |= {k: qtype for k in ("ffn_gate", "ffn_up", "ffn_down")}
        else:
            out[key] = qtype
    return out


@pytest.fixture(scope="module", params=list(CASES))
def loaded(request, tmp_path_factory):
    case = request.param
    path = tmp_path_factory.mktemp(case) / "moe.gguf"
    write_moe(path, ARCH[case], _types(case))
    return case, path, llama_from_gguf(path), Llama.from_gguf(path)


def test_experts_stay_quantized(loaded):
    case, _, model, reference = loaded
    assert model.config.model_type == case and model.config.num_experts == EXPERTS
    moe = getattr(model.model.layers[0], model.model.layers[0]._ffn_name)
    assert isinstance(moe, QuantizedSparseMoE) and isinstance(moe.experts, QuantizedExperts)
    types = _types(case)
    assert {n: t for n, (_, t) in moe.experts._proj.items()} == {
        k: types[f"ffn_{k}_exps"].name for k in ("gate", "up", "down")}
    # the blocks are the file's bytes: far fewer than the float experts' (4 bytes a value)
    assert moe.experts.nbytes < 0.3 * 4 * 3 * EXPERTS * DIM * EXPERT_HIDDEN
    if case == "qwen3_moe":  # the dense layer keeps its quantized SwiGLU
        assert isinstance(model.model.layers[1].mlp.down_proj, QuantizedLinear)
    # the router stays the float Linear that the float loader fills
    np.testing.assert_array_equal(moe.gate.weight.numpy(), getattr(
        reference.model.layers[0], reference.model.layers[0]._ffn_name).gate.weight.numpy())


def test_logits_and_greedy_decode_match_the_dequantized_file(loaded, monkeypatch):
    """The same weights dequantized up front: prefill (the grouped form), decode steps (the gathered form) and the
    greedy continuation agree. The layers of the byte-dot types (Q4_0, Q4_K, Q6_K) take x quantized to int8 per
    block, as llama.cpp's products do, which can turn a near tie of a random router to another expert: here they are
    loaded without it (their products by planes or unpacking; the byte-dot products are checked against numpy in
    test_gguf_quant.py)."""
    case, path, model, reference = loaded
    if any(q.name in BYTE_DOT_TYPES for q in CASES[case].values()):
        monkeypatch.setattr(quant, "BYTE_DOT_TYPES", frozenset())
        model = llama_from_gguf(path)
    ids = np.random.default_rng(1).integers(0, VOCAB, (1, 16)).astype(np.int32)  # 32 choices of 16 experts: grouped
    np.testing.assert_allclose(model.forward(Tensor(ids), 0).numpy(), reference.forward(Tensor(ids), 0).numpy(),
                               rtol=2e-3, atol=2e-3)
    prompt = ids[0, :5].tolist()
    assert list(model.generate(prompt, 4)) == list(reference.generate(prompt, 4))


def test_grouped_form_in_several_groups(loaded, monkeypatch):
    """A prefill whose chosen experts' float weights exceed EXPERT_GROUP_BYTES dequantizes them a group at a
    time, with the same result."""
    _, _, model, _ = loaded
    ids = Tensor(np.random.default_rng(2).integers(0, VOCAB, (2, 10)).astype(np.int32))
    whole = model.forward(ids, 0).numpy()
    monkeypatch.setattr(quant, "EXPERT_GROUP_BYTES", 3 * 4 * 3 * DIM * EXPERT_HIDDEN)  # three experts a group
    np.testing.assert_allclose(model.forward(ids, 0).numpy(), whole, rtol=1e-4, atol=1e-4)


def test_q8_0_mixture_matches_its_float_weights(tmp_path):
    """Against the float32 file the weights were quantized from: Q8_0 keeps the logits within its rounding."""
    write_moe(tmp_path / "f32.gguf", "llama", None)
    write_moe(tmp_path / "q8.gguf", "llama", _types("mixtral"))
    ids = Tensor(np.random.default_rng(3).integers(0, VOCAB, (1, 7)).astype(np.int32))
    want = Llama.from_gguf(tmp_path / "f32.gguf").forward(ids, 0).numpy()
    got = llama_from_gguf(tmp_path / "q8.gguf").forward(ids, 0).numpy()
    np.testing.assert_allclose(got, want, atol=0.05 * np.abs(want).max())


def test_a_decode_step_reads_only_the_chosen_experts(loaded):
    """One token through a mixture: the operations are those of top_k experts, not of all, and no float copy of
    the experts' weights is made (every kernel input of expert size is the blocks)."""
    _, _, model, _ = loaded
    moe = getattr(model.model.layers[0], model.model.layers[0]._ffn_name)
    x = Tensor(np.random.default_rng(4).standard_normal((1, 1, DIM)).astype(np.float32)).realize()
    out = moe(x)
    float_expert = EXPERT_HIDDEN * DIM
    for item in out.schedule():
        assert not [b for b in item.bufs if b.dtype == dtypes.float32 and b.size >= float_expert], item.ast
    moe(x).realize()
    GlobalCounters.reset()
    moe(Tensor(x.numpy()).realize()).realize()  # a fresh buffer: the same graph over x is one realized node
    chosen = 2 * TOP_K * 3 * EXPERT_HIDDEN * DIM  # a multiply and an add per weight of the chosen experts
    every_expert = chosen * EXPERTS // TOP_K
    # unpacking and scaling add a few operations per weight, which stay far below running every expert
    assert chosen <= GlobalCounters.global_ops < 0.7 * every_expert, GlobalCounters.global_ops


def test_mismatched_expert_tensors_raise(tmp_path):
    rng = np.random.default_rng(5)
    qt = {}
    for name, shape in {"g": (2, 64, 32), "u": (2, 64, 32), "d": (2, 32, 64), "bad": (2, 32, 32)}.items():
        raw = quantized(rng, Q.Q8_0, (shape[0] * shape[1], shape[2])).reshape(shape[0] * shape[1], -1)
        qt[name] = QuantizedTensor(Tensor(raw), shape, "Q8_0")
    QuantizedExperts(qt["g"], qt["u"], qt["d"])
    with pytest.raises(ValueError, match="do not fit together"):
        QuantizedExperts(qt["g"], qt["u"], qt["bad"])
    with pytest.raises(ValueError, match="3-d QuantizedTensor"):
        QuantizedExperts(qt["g"], qt["u"], Tensor.zeros(2, 32, 64))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="top_k=3"):
        QuantizedSparseMoE(None, QuantizedExperts(qt["g"], qt["u"], qt["d"]), 3, True)
    assert issubclass(QuantizedSparseMoE, SparseMoE)
