"""Mixtures of experts in tinygrad.nn.transformer against Hugging Face transformers: tiny Mixtral, Qwen3-MoE (with a
dense layer) and OLMoE (with clipped q/k/v) models with seeded random weights, saved with save_pretrained and loaded
back through Llama.from_pretrained and tinygrad.llm's loader. Logits must match transformers' to 1e-4 in both ways
SparseMoE runs (gathered per token, grouped by expert), greedy decoding must give the same ids, and the work done
must be that of the chosen experts only."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from tiny_llms import hf_greedy, word_tokenizer  # noqa: E402
from tinygrad import GlobalCounters, Tensor  # noqa: E402
from tinygrad.nn.transformer import ConfigError, Llama, SparseMoE, WeightsError, load_tokenizer  # noqa: E402

ROOT = pathlib.Path(__file__).parents[3]
EXAMPLES = ROOT / "examples"
TOL = {"atol": 1e-4, "rtol": 1e-4}
VOCAB = 97
COMMON = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64, "bos_token_id": 0,
          "eos_token_id": None, "initializer_range": 0.2}  # weights large enough that every layer changes the logits

MODELS = {
    "mixtral": lambda: transformers.MixtralForCausalLM(transformers.MixtralConfig(
        num_local_experts=6, num_experts_per_tok=2, **COMMON)),
    # three experts per token, renormalised; layer 1 keeps a dense SwiGLU of intermediate_size
    "qwen3_moe": lambda: transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(
        num_experts=6, num_experts_per_tok=3, moe_intermediate_size=24, norm_topk_prob=True, mlp_only_layers=[1],
        **COMMON)),
    # weights not renormalised (OLMoE's default), q/k/v clipped
    "olmoe": lambda: transformers.OlmoeForCausalLM(transformers.OlmoeConfig(
        num_experts=6, num_experts_per_tok=2, clip_qkv=2.0, **COMMON)),
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """name -> (directory, the transformers model)."""
    out = {}
    for i, (name, make) in enumerate(MODELS.items()):
        torch.manual_seed(10 + i)
        hf = make().eval()
        with torch.no_grad():
            for pname, p in hf.named_parameters():
                if pname.endswith(("gate.weight", "norm.weight")) and "experts" not in pname:
                    p.normal_(1.0 if "norm" in pname else 0.0, 0.5)  # decisive routing, norms that are not all ones
        d = tmp_path_factory.mktemp(name)
        hf.save_pretrained(d, safe_serialization=True)
        out[name] = (d, hf)
    return out


@pytest.fixture
def gathered_only(monkeypatch):
    """Every SparseMoE call runs the gathered form (the one the jitted decode step uses)."""
    monkeypatch.setattr(SparseMoE, "grouped_min_choices", float("inf"))


def _hf_logits(hf, ids: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return hf(torch.tensor(ids, dtype=torch.long)).logits.numpy()


def _ids(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, shape).astype(np.int32)


@pytest.mark.parametrize("name", list(MODELS))
def test_logits_match_transformers(saved, name):
    d, hf = saved[name]
    model = Llama.from_pretrained(d)
    assert model.config.model_type == name and model.config.num_experts == 6
    ids = _ids((2, 9))
    # 18 tokens: grouped by expert
    np.testing.assert_allclose(model.forward(Tensor(ids), 0).numpy(), _hf_logits(hf, ids), **TOL)
    # one token: gathered
    np.testing.assert_allclose(model.forward(Tensor(ids[:1, :1]), 0).numpy(), _hf_logits(hf, ids[:1, :1]), **TOL)


@pytest.mark.parametrize("name", list(MODELS))
def test_gathered_form_matches_transformers(saved, name, gathered_only):
    d, hf = saved[name]
    ids = _ids((2, 7), seed=1)
    np.testing.assert_allclose(Llama.from_pretrained(d).forward(Tensor(ids), 0).numpy(), _hf_logits(hf, ids), **TOL)


@pytest.mark.parametrize("name", list(MODELS))
def test_greedy_decode_matches_transformers(saved, name):
    d, hf = saved[name]
    model = Llama.from_pretrained(d)
    prompt = _ids((7,), seed=2).tolist()
    assert list(model.generate(prompt, 16)) == hf_greedy(hf, prompt, 16)
    assert list(model.generate(prompt[:1], 8)) == hf_greedy(hf, prompt[:1], 8)
    # a prompt chunk whose tokens the experts would take grouped (outside a capture) is not jitted
    moe = next(f for layer in model.model.layers if hasattr(f := getattr(layer, layer._ffn_name), "top_k"))
    grouped_from = moe.grouped_min_choices * moe.experts.n_experts / moe.top_k
    assert (1, 1) in model._prompters and all(rows < grouped_from for _, rows in model._prompters)


def test_batched_decode_stays_gathered_inside_the_jit(saved):
    """Eight prompts: 16 choices of 6 experts per decode step would group tokens by expert outside TinyJit, which
    reads the routing on the host; inside the jitted step the gathered form runs, and every row is transformers'
    greedy continuation."""
    d, hf = saved["mixtral"]
    model = Llama.from_pretrained(d)
    prompts = _ids((8, 5), seed=5).tolist()
    rows = list(model.generate_batch(prompts, 6))
    for b, prompt in enumerate(prompts):
        assert [step[b] for step in rows] == hf_greedy(hf, prompt, 6)


def test_qwen3_moe_dense_layer_and_olmoe_norms_are_built(saved):
    qwen = Llama.from_pretrained(saved["qwen3_moe"][0])
    assert isinstance(qwen.model.layers[0].mlp, SparseMoE) and not isinstance(qwen.model.layers[1].mlp, SparseMoE)
    assert qwen.model.layers[0].self_attn.q_norm.weight.shape == (8,)  # per head
    olmoe = Llama.from_pretrained(saved["olmoe"][0])
    assert olmoe.model.layers[0].self_attn.q_norm.weight.shape == (32,)  # the whole projection
    assert olmoe.config.clip_qkv == 2.0 and not olmoe.config.norm_topk_prob


def test_qwen3_dense_matches_transformers(tmp_path):
    """Qwen3 without experts: the per-head q/k RMSNorms the MoE models share."""
    torch.manual_seed(20)
    hf = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(head_dim=16, **COMMON)).eval()
    with torch.no_grad():
        for pname, p in hf.named_parameters():
            if pname.endswith("norm.weight"):
                p.normal_(1.0, 0.5)
    hf.save_pretrained(tmp_path, safe_serialization=True)
    model = Llama.from_pretrained(tmp_path)
    assert model.config.qk_norm == "head" and model.config.head_dim == 16
    ids = _ids((2, 7), seed=6)
    np.testing.assert_allclose(model.forward(Tensor(ids), 0).numpy(), _hf_logits(hf, ids), **TOL)
    prompt = ids[0].tolist()
    assert list(model.generate(prompt, 8)) == hf_greedy(hf, prompt, 8)


def test_stacked_expert_names_load(saved, tmp_path):
    """A checkpoint holding experts stacked as transformers 5 keeps them in memory (experts.gate_up_proj and
    experts.down_proj) loads as the per-expert one does."""
    from safetensors.numpy import load_file, save_file

    d, hf = saved["mixtral"]
    tensors = load_file(str(d / "model.safetensors"))
    out = {k: v for k, v in tensors.items() if ".experts." not in k}
    for layer in range(2):
        head = f"model.layers.{layer}.block_sparse_moe.experts"
        out[f"{head}.gate_up_proj"] = np.stack([np.concatenate([tensors[f"{head}.{i}.w1.weight"],
                                                                tensors[f"{head}.{i}.w3.weight"]]) for i in range(6)])
        out[f"{head}.down_proj"] = np.stack([tensors[f"{head}.{i}.w2.weight"] for i in range(6)])
    (tmp_path / "config.json").write_text((d / "config.json").read_text())
    save_file(out, str(tmp_path / "model.safetensors"))
    ids = _ids((1, 6), seed=3)
    np.testing.assert_allclose(Llama.from_pretrained(tmp_path).forward(Tensor(ids), 0).numpy(), _hf_logits(hf, ids),
                               **TOL)


def test_missing_expert_is_named(saved, tmp_path):
    from safetensors.numpy import load_file, save_file

    d = saved["olmoe"][0]
    tensors = load_file(str(d / "model.safetensors"))
    del tensors["model.layers.1.mlp.experts.4.up_proj.weight"]
    (tmp_path / "config.json").write_text((d / "config.json").read_text())
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(WeightsError, match=r"model\.layers\.1\.mlp\.experts\.4\.up"):
        Llama.from_pretrained(tmp_path)


def test_config_errors(saved, tmp_path):
    cfg = json.loads((saved["mixtral"][0] / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "num_experts_per_tok": 7}))
    with pytest.raises(ConfigError, match="num_experts_per_tok=7"):
        Llama.from_pretrained(tmp_path)
    # a sliding window shorter than the cache asked for
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "sliding_window": 16}))
    with pytest.raises(ConfigError, match="sliding_window"):
        Llama(_config(tmp_path), max_context=32)
    assert Llama(_config(tmp_path)).max_context == 16  # the default cache stops at the window


def _config(d: pathlib.Path):
    from tinygrad.nn.transformer import LlamaConfig

    return LlamaConfig.from_hf(json.loads((d / "config.json").read_text()))


# ---- GGUF files ----

_GGUF_ARCH = {"mixtral": "llama", "qwen3_moe": "qwen3moe", "olmoe": "olmoe"}
_GGUF_ATTN = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
              "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
              "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
              "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
              "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
              "mlp.down_proj.weight": "ffn_down.weight"}


def _write_gguf(path: pathlib.Path, d: pathlib.Path, hf, name: str, per_expert: bool = False) -> None:
    """A float32 GGUF file of a saved model as llama.cpp's convert_hf_to_gguf.py writes one: the experts of a block
    stacked (ffn_gate_exps, ffn_up_exps, ffn_down_exps) or, as older Mixtral files, one tensor per expert; the q/k
    rows of a LLaMA-architecture (Mixtral) file reordered for llama.cpp's interleaved rope."""
    gguf = pytest.importorskip("gguf")
    from safetensors.numpy import load_file

    cfg, arch = hf.config, _GGUF_ARCH[name]
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(cfg.hidden_size // cfg.num_attention_heads)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_expert_count(6)
    w.add_expert_used_count(cfg.num_experts_per_tok)
    if name == "qwen3_moe":
        w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
    if name == "olmoe":
        w.add_clamp_kqv(cfg.clip_qkv)

    def permute(a: np.ndarray, n: int) -> np.ndarray:
        return a.reshape(n, 2, a.shape[0] // n // 2, *a.shape[1:]).swapaxes(1, 2).reshape(a.shape)

    tensors = load_file(str(d / "model.safetensors"))
    experts: dict[tuple[str, str], dict[int, np.ndarray]] = {}
    for key, a in tensors.items():
        if key == "model.embed_tokens.weight":
            w.add_tensor("token_embd.weight", a)
        elif key == "model.norm.weight":
            w.add_tensor("output_norm.weight", a)
        elif key == "lm_head.weight":
            w.add_tensor("output.weight", a)
        else:
            _, _, layer, rest = key.split(".", 3)
            if ".experts." in rest:
                _, _, e, proj, _ = rest.split(".")
                kind = {"w1": "gate", "w3": "up", "w2": "down"}.get(proj, proj.removesuffix("_proj"))
                experts.setdefault((layer, kind), {})[int(e)] = a
            elif rest.endswith("gate.weight"):
                w.add_tensor(f"blk.{layer}.ffn_gate_inp.weight", a)
            else:
                if name == "mixtral" and rest == "self_attn.q_proj.weight":
                    a = permute(a, cfg.num_attention_heads)
                elif name == "mixtral" and rest == "self_attn.k_proj.weight":
                    a = permute(a, cfg.num_key_value_heads)
                w.add_tensor(f"blk.{layer}.{_GGUF_ATTN[rest]}", a)
    for (layer, kind), found in experts.items():
        if per_expert:
            for e, a in found.items():
                w.add_tensor(f"blk.{layer}.ffn_{kind}.{e}.weight", a)
        else:
            w.add_tensor(f"blk.{layer}.ffn_{kind}_exps.weight", np.stack([found[e] for e in range(6)]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("name, per_expert", [("mixtral", False), ("mixtral", True), ("qwen3_moe", False),
                                              ("olmoe", False)])
def test_gguf_files_match_transformers(saved, tmp_path, name, per_expert):
    d, hf = saved[name]
    _write_gguf(tmp_path / "m.gguf", d, hf, name, per_expert)
    model = Llama.from_gguf(tmp_path / "m.gguf")
    assert model.config.model_type == name and model.config.norm_topk_prob == (name != "olmoe")
    ids = _ids((2, 6), seed=4)
    np.testing.assert_allclose(model.forward(Tensor(ids), 0).numpy(), _hf_logits(hf, ids), **TOL)


# ---- only the chosen experts run ----

def _moe(E: int = 16, k: int = 2, D: int = 32, H: int = 24, never: int | None = None, seed: int = 0):
    """A SparseMoE with random weights; expert `never` gets a router row that no positive input picks, and NaN
    weights."""
    rng = np.random.default_rng(seed)
    moe = SparseMoE(D, H, E, k, norm_topk_prob=True)
    gate = rng.standard_normal((E, D)).astype(np.float32)
    gate_up = (rng.standard_normal((E, 2 * H, D)) / np.sqrt(D)).astype(np.float32)
    down = (rng.standard_normal((E, D, H)) / np.sqrt(H)).astype(np.float32)
    if never is not None:
        gate[never] = -10.0
        gate_up[never] = np.nan
        down[never] = np.nan
    moe.gate.weight, moe.experts.gate_up, moe.experts.down = (
        Tensor(np.ascontiguousarray(a)).realize() for a in (gate, gate_up.transpose(0, 2, 1), down.transpose(0, 2, 1)))
    return moe, (gate, gate_up, down)


def _reference(x: np.ndarray, k: int, weights) -> np.ndarray:
    gate, gate_up, down = weights
    H = down.shape[2]
    logits = x @ gate.T
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    out = np.zeros_like(x)
    for n in range(x.shape[0]):
        top = np.argsort(-probs[n], kind="stable")[:k]
        w = probs[n, top] / probs[n, top].sum()
        for e, we in zip(top, w):
            g = gate_up[e] @ x[n]
            out[n] += we * (down[e] @ (g[:H] / (1 + np.exp(-g[:H])) * g[H:]))
    return out


@pytest.mark.parametrize("tokens, gathered", [(1, True), (24, True), (24, False)])
def test_an_expert_never_chosen_is_never_used(tokens, gathered, monkeypatch):
    """Expert 5 is never chosen and its weights are NaN: a form that multiplied every expert's output by a 0
    weight would give NaN."""
    if gathered:
        monkeypatch.setattr(SparseMoE, "grouped_min_choices", float("inf"))
    moe, weights = _moe(never=5)
    x = np.abs(np.random.default_rng(1).standard_normal((tokens, 32))).astype(np.float32) + 0.1
    out = moe(Tensor(x).reshape(1, tokens, 32)).numpy().reshape(tokens, 32)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, _reference(x, 2, weights), atol=1e-4, rtol=1e-4)


def _expert_flops(moe: SparseMoE, x: Tensor) -> int:
    moe(x).realize()  # compile first
    GlobalCounters.reset()
    moe(x).realize()
    return GlobalCounters.global_ops


def test_work_is_that_of_the_chosen_experts(monkeypatch):
    """The operations counted for a call (routing included) stay far below those of running every expert on every
    token: 2 of 32 experts per token in the gathered form (the decode step's), and in the grouped form a batch of
    the busiest expert's size per expert."""
    E, k, D, H = 32, 2, 32, 24
    moe, _ = _moe(E, k, D, H)
    every_expert = 2 * E * 3 * H * D  # the operations of the three projections of every expert, per token
    one = Tensor(np.random.default_rng(2).standard_normal((1, 1, D)).astype(np.float32))
    assert _expert_flops(moe, one) < 0.25 * every_expert
    many = Tensor(np.random.default_rng(3).standard_normal((1, 64, D)).astype(np.float32))
    assert _expert_flops(moe, many) < 0.5 * 64 * every_expert
    monkeypatch.setattr(SparseMoE, "grouped_min_choices", float("inf"))
    assert _expert_flops(moe, many) < 0.25 * 64 * every_expert


def test_half_weights_still_read_only_the_chosen_experts():
    """In half precision the gathered form still folds its compare-and-sum (it sums float32 products, as a half
    matmul accumulates), and matches the float32 result to half precision."""
    from tinygrad import dtypes
    from tinygrad.errors import DeviceDTypeError

    E, k, D, H = 32, 2, 32, 24
    moe, _ = _moe(E, k, D, H)
    x = Tensor(np.random.default_rng(2).standard_normal((1, 1, D)).astype(np.float32))
    full = moe(x).numpy()
    try:
        for name in ("gate", "experts"):
            part = getattr(moe, name)
            for attr in ("weight", "gate_up", "down"):
                if hasattr(part, attr):
                    setattr(part, attr, getattr(part, attr).cast(dtypes.half).realize())
        half = _expert_flops(moe, x.cast(dtypes.half))
    except DeviceDTypeError as e:
        pytest.skip(f"the device has no half: {e}")
    assert half < 0.25 * 2 * E * 3 * H * D
    np.testing.assert_allclose(moe(x.cast(dtypes.half)).float().numpy(), full, atol=2e-2, rtol=2e-2)


# ---- serving and the example ----

@pytest.mark.parametrize("name", ["mixtral", "qwen3_moe"])
def test_llm_engine_serves_an_moe_folder(saved, tmp_path, name):
    from tinygrad.llm import load_engine

    d, hf = saved[name]
    target = tmp_path / name
    target.mkdir()
    for f in d.iterdir():
        (target / f.name).write_bytes(f.read_bytes())
    word_tokenizer(VOCAB).save(str(target / "tokenizer.json"))
    engine = load_engine(target)
    tok = load_tokenizer(target)
    prompt = tok.encode("the quick brown fox jumps").ids
    text, finish, n = engine.complete(prompt, 10, temperature=0.0)
    assert (finish, n) == ("length", 10)
    assert text == tok.decode(hf_greedy(hf, prompt, 10))


@pytest.mark.skipif(not (EXAMPLES / "mixtral.py").exists(), reason="runs from the monorepo checkout")
def test_mixtral_example_prints_the_greedy_continuation(saved):
    d, hf = saved["mixtral"]
    run = subprocess.run([sys.executable, str(EXAMPLES / "mixtral.py"), "--model", str(d), "--prompt", "3 1 4 1 5",
                          "--max-tokens", "6"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert [int(t) for t in run.stdout.split()] == [3, 1, 4, 1, 5, *hf_greedy(hf, [3, 1, 4, 1, 5], 6)]
    assert "ms/token" in run.stderr
