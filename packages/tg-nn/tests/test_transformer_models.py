"""tinygrad.nn.transformer against Hugging Face transformers: tiny GPT-2, LLaMA (with LLaMA 3 rope scaling, tied and
untied embeddings) and Qwen2 models with seeded random weights, saved with save_pretrained and loaded back. Logits
must match transformers' to 1e-4 and greedy decoding must produce the same ids; the decode step must compile once;
padded batches, context shifts, sharded checkpoints, GGUF files, sampling, the examples and the errors are checked
too. Everything runs on Device.DEFAULT (DEV=CPU picks the CPU)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from tiny_llms import hf_greedy, tiny_gpt2, tiny_llama, tiny_qwen2, word_tokenizer, write_gguf  # noqa: E402
from tinygrad import Device, GlobalCounters, Tensor, Variable  # noqa: E402
from tinygrad.nn.transformer import (  # noqa: E402
    GPT2,
    ConfigError,
    Llama,
    WeightsError,
    load_tokenizer,
    prompt_chunks,
    rope_frequencies,
    sample,
)

ROOT = pathlib.Path(__file__).parents[3]
EXAMPLES = ROOT / "examples"
TOL = {"atol": 1e-4, "rtol": 1e-4}
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16, "rope_theta": 10000.0}


# name -> (our class, a factory of the transformers model)
MODELS = {
    "gpt2": (GPT2, lambda: tiny_gpt2()),
    "llama": (Llama, lambda: tiny_llama()),
    "llama3_tied": (Llama, lambda: tiny_llama(vocab=300, tie=True, rope=LLAMA3_ROPE)),
    "qwen2": (Llama, lambda: tiny_qwen2()),
    "qwen2_untied": (Llama, lambda: tiny_qwen2(vocab=200, tie=False)),
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """name -> (directory, the transformers model): each model made once with seeded weights and saved."""
    out = {}
    for i, (name, (_, make)) in enumerate(MODELS.items()):
        torch.manual_seed(i)
        hf = make().eval()
        # random biases: transformers initialises them to zero, which would hide a bias that is not applied
        with torch.no_grad():
            for pname, p in hf.named_parameters():
                if pname.endswith("bias"):
                    p.normal_(0, 0.1)
        d = tmp_path_factory.mktemp(name)
        hf.save_pretrained(d, safe_serialization=True)
        out[name] = (d, hf)
    return out


def _load(saved, name: str, **kwargs):
    cls = MODELS[name][0]
    return cls.from_pretrained(saved[name][0], **kwargs)


def _hf_logits(hf, ids: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return hf(torch.tensor(ids, dtype=torch.long)).logits.numpy()


def _ids(vocab: int, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, vocab, shape).astype(np.int32)


# ---- logits and greedy decoding ----

@pytest.mark.parametrize("name", list(MODELS))
def test_logits_match_transformers(saved, name):
    model, hf = _load(saved, name), saved[name][1]
    ids = _ids(model.vocab_size, (2, 9))
    np.testing.assert_allclose(model.forward(Tensor(ids), 0).numpy(), _hf_logits(hf, ids), **TOL)
    # a one-token prompt, and a new batch size (the caches are made again)
    one = ids[:1, :1]
    np.testing.assert_allclose(model.forward(Tensor(one), 0).numpy(), _hf_logits(hf, one), **TOL)


@pytest.mark.parametrize("name", list(MODELS))
def test_greedy_decode_matches_transformers(saved, name):
    model, hf = _load(saved, name), saved[name][1]
    prompt = _ids(model.vocab_size, (7,), seed=1).tolist()
    assert list(model.generate(prompt, 20)) == hf_greedy(hf, prompt, 20)
    # a one-token prompt
    assert list(model.generate(prompt[:1], 20)) == hf_greedy(hf, prompt[:1], 20)


@pytest.mark.parametrize("name", ["gpt2", "llama3_tied"])
def test_incremental_forward_matches_full(saved, name):
    """Chunks through the KV cache, the last ones at a bound Variable position, give the full forward's logits."""
    model = _load(saved, name)
    ids = _ids(model.vocab_size, (2, 12), seed=2)
    full = model.forward(Tensor(ids), 0).numpy()
    parts = [model.forward(Tensor(ids[:, :5]), 0).numpy(), model.forward(Tensor(ids[:, 5:8]), 5).numpy()]
    for p in range(8, 12):
        start = Variable("start_pos", 1, model.max_context - 1).bind(p)
        parts.append(model.forward(Tensor(ids[:, p:p + 1]), start).numpy())
    np.testing.assert_allclose(np.concatenate(parts, axis=1), full, **TOL)


def test_symbolic_prefill_chunk_matches(saved):
    """Several tokens at a Variable position: the causal mask is built over the symbolic key length."""
    model = _load(saved, "llama")
    ids = _ids(model.vocab_size, (1, 10), seed=3)
    full = model.forward(Tensor(ids), 0).numpy()
    model.forward(Tensor(ids[:, :6]), 0)
    start = Variable("start_pos", 1, model.max_context - 4).bind(6)
    np.testing.assert_allclose(model.forward(Tensor(ids[:, 6:]), start).numpy(), full[:, 6:], **TOL)


# ---- the jitted decode step ----

def test_decode_step_compiles_once(saved):
    model = _load(saved, "llama")
    prompt = _ids(model.vocab_size, (5,), seed=4).tolist()
    runners = getattr(Device[Device.DEFAULT], "_runners", None)  # the compiled kernels, by AST
    gen = model.generate(prompt, 20)
    out = [next(gen), next(gen)]  # the prefill's token, then the first decode step (eager: it compiles the step)
    before_capture = len(runners) if runners is not None else 0
    (step,) = model._decoders.values()
    out.append(next(gen))  # the second step is captured
    assert step.cnt == 2
    compiled = len(runners) if runners is not None else 0
    # the capture adds at most the copy kernel TinyJit writes the assigned cache back with (a slice assign makes a
    # new buffer in this framework; the capture copies it into the cache's own buffer, one kernel for all layers)
    assert compiled - before_capture <= 1
    per_step = [GlobalCounters.kernel_count]
    for t in gen:
        out.append(t)
        per_step.append(GlobalCounters.kernel_count)
    assert len(out) == 20
    assert step.cnt == 2, "called eagerly once, captured once, replayed from then on"
    assert len(model._decoders) == 1
    if runners is not None:
        assert len(runners) == compiled, "no kernel was compiled after the capture"
    # tokens 4..20 are replays, each launching exactly the captured kernels: nothing else runs between tokens
    launches = np.diff(per_step)
    assert len(launches) == 17 and (launches == step.captured_kernels).all(), (launches, step.captured_kernels)
    # a second generation of the same shape replays the same capture (and captures the prompt's jitted chunks: the
    # first generation ran them as TinyJit's first calls do), a third compiles nothing
    assert list(model.generate(prompt, 20)) == out
    compiled = len(runners) if runners is not None else 0
    assert list(model.generate(prompt, 20)) == out
    assert list(model._decoders.values()) == [step] and step.cnt == 2
    if runners is not None:
        assert len(runners) == compiled


# ---- the jitted prefill ----

@pytest.mark.parametrize("n, most, want", [(1, 256, [1]), (64, 256, [64]), (100, 64, [64, 32, 4]),
                                           (600, 256, [256, 256, 64, 16, 8]),
                                           (255, 256, [128, 64, 32, 16, 8, 4, 2, 1]), (0, 8, [])])
def test_prompt_chunks_are_powers_of_two(n, most, want):
    assert prompt_chunks(n, most) == want


@pytest.mark.parametrize("name", ["gpt2", "llama3_tied"])
def test_jitted_prefill_matches_transformers_at_every_length(saved, name):
    """A prompt runs as power-of-two chunks, each a TinyJit step at a Variable position: unjitted on a chunk length's
    first use, captured on its second, replayed after; every generation is transformers' greedy continuation, and
    one whose chunks are all replays compiles nothing."""
    model, hf = _load(saved, name), saved[name][1]
    runners = getattr(Device[Device.DEFAULT], "_runners", None)  # the compiled kernels, by AST
    for n in (13, 6, 13, 5, 13):  # 8+4+1, 4+2, 8+4+1, 4+1, 8+4+1 (all three replayed)
        prompt = _ids(model.vocab_size, (n,), seed=n).tolist()
        compiled = len(runners) if runners is not None else 0
        assert list(model.generate(prompt, 6)) == hf_greedy(hf, prompt, 6), n
    assert {k: step.cnt for k, step in model._prompters.items()} == {(1, 8): 2, (1, 4): 2, (1, 1): 2, (1, 2): 1}
    # between prefills the captures hold no activations: their memory went back to the device's pool
    assert all(step.captured is None or step.captured.freed for step in model._prompters.values())
    if runners is not None:
        assert len(runners) == compiled, "the last prompt's chunks were replays: nothing compiled"
    # a new batch size makes new caches, and drops the steps captured over the old ones
    model.reset_cache(2)
    assert model._prompters == {}


class _CapturesFewRows:
    """A layer that runs at most `most` rows inside a TinyJit capture as outside one."""

    def __init__(self, inner, most: int):
        self.inner, self.most = inner, most

    def captures_rows(self, rows: int) -> bool:
        return rows <= self.most

    def __call__(self, x):
        return self.inner(x)


def test_a_layer_that_does_not_capture_a_chunk_keeps_the_prompt_unjitted(saved):
    model, hf = _load(saved, "llama"), saved["llama"][1]
    model.model.layers[1].mlp = _CapturesFewRows(model.model.layers[1].mlp, 2)
    long, short = _ids(model.vocab_size, (7,), seed=7).tolist(), _ids(model.vocab_size, (3,), seed=3).tolist()
    assert list(model.generate(long, 5)) == hf_greedy(hf, long, 5)  # 4+2+1: the 4 is refused, so all of it
    assert model._prompters == {}
    assert list(model.generate(short, 5)) == hf_greedy(hf, short, 5)  # 2+1
    assert sorted(model._prompters) == [(1, 1), (1, 2)]


def test_prompt_chunks_shrink_to_bound_their_attention_scores(saved, monkeypatch):
    """Inside a capture a chunk's scores are sized for the whole context (its position is a Variable there)."""
    import tinygrad.nn.transformer as transformer

    model, hf = _load(saved, "llama"), saved["llama"][1]
    heads = model.model.layers[0].self_attn.n_heads
    monkeypatch.setattr(transformer, "PROMPT_SCORES_BYTES", 2 * heads * model.max_context * 4)
    prompt = _ids(model.vocab_size, (7,), seed=7).tolist()
    assert list(model.generate(prompt, 5)) == hf_greedy(hf, prompt, 5)
    assert sorted(model._prompters) == [(1, 1), (1, 2)]  # 2+2+2+1


def test_decode_time_per_token(saved):
    """Not a benchmark: the steady-state step of the tiny model is a replay, far under the eager time."""
    import time

    model = _load(saved, "llama")
    gen = model.generate(_ids(model.vocab_size, (4,), seed=5).tolist(), 40)
    stamps = []
    for _ in gen:
        stamps.append(time.perf_counter())
    per_token = float(np.median(np.diff(stamps)[5:]))
    print(f"tiny llama decode: {per_token * 1e3:.2f} ms/token")
    assert per_token < 0.5


# ---- batches, padding and the context shift ----

@pytest.mark.parametrize("name", ["gpt2", "llama", "qwen2"])
def test_padded_batch_matches_single_prompts(saved, name):
    model, hf = _load(saved, name), saved[name][1]
    rng = np.random.default_rng(6)
    prompts = [rng.integers(0, model.vocab_size, n).tolist() for n in (3, 9, 1)]
    steps = list(model.generate_batch(prompts, 12, pad_id=5))
    for b, p in enumerate(prompts):
        assert [s[b] for s in steps] == hf_greedy(hf, p, 12), f"row {b}"


def test_equal_length_batch_matches_single_prompts(saved):
    model = _load(saved, "llama3_tied")
    prompts = _ids(model.vocab_size, (2, 6), seed=13).tolist()
    steps = list(model.generate_batch(prompts, 10))
    for b, p in enumerate(prompts):
        assert [s[b] for s in steps] == list(model.generate(p, 10)), f"row {b}"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_weights(saved, dtype):
    from tinygrad import dtypes

    model, hf = _load(saved, "llama", dtype=getattr(dtypes, dtype)), saved["llama"][1]
    assert model.model.layers[0].self_attn.q_proj.weight.dtype == getattr(dtypes, dtype)
    ids = _ids(model.vocab_size, (1, 7), seed=14)
    logits = model.forward(Tensor(ids), 0)
    assert logits.dtype == getattr(dtypes, dtype)
    np.testing.assert_allclose(logits.float().numpy(), _hf_logits(hf, ids), atol=2e-2)


def _hf_windowed(hf, prompts: list[list[int]], n: int, max_context: int) -> list[list[int]]:
    """Greedy ids under the context-shift rule, each step a full transformers forward over the row's window (no
    cache): the last max_context columns of the left-padded prompts first; once the cache is full, the last
    max_context // 2 columns. Pads in a window are dropped, since a row's positions start at its first token."""
    width = max(len(p) for p in prompts)
    pads = [width - len(p) for p in prompts]
    rows = [[-1] * q + list(p) for q, p in zip(pads, prompts)]
    start = max(0, width - max_context)
    pos, out = width - start, [[] for _ in prompts]
    for _ in range(n):
        for b, row in enumerate(rows):
            ctx = [t for t in row[start:] if t != -1]
            nxt = int(_hf_logits(hf, np.array([ctx]))[0, -1].argmax())
            out[b].append(nxt)
            row.append(nxt)
        if pos == max_context:
            start, pos = len(rows[0]) - max_context // 2, max_context // 2
        else:
            pos += 1
    return out


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_kv_cache_past_two_windows(saved, name):
    model, hf = _load(saved, name, max_context=12), saved[name][1]
    assert model.max_context == 12
    rng = np.random.default_rng(7)
    prompts = [rng.integers(0, model.vocab_size, 5).tolist(), rng.integers(0, model.vocab_size, 3).tolist()]
    steps = list(model.generate_batch(prompts, 30))  # 5 + 30 columns: the 12-long cache fills and shifts 4 times
    expected = _hf_windowed(hf, prompts, 30, 12)
    for b in range(2):
        assert [s[b] for s in steps] == expected[b], f"row {b}"
    # a prompt longer than the cache keeps its last max_context tokens
    long = rng.integers(0, model.vocab_size, 20).tolist()
    assert list(model.generate(long, 6)) == _hf_windowed(hf, [long], 6, 12)[0]


def test_stop_ids_end_generation(saved):
    model = _load(saved, "llama")
    prompt = _ids(model.vocab_size, (6,), seed=8).tolist()
    free = list(model.generate(prompt, 10))
    stop = free[3]
    stopped = list(model.generate(prompt, 10, stop_ids=[stop]))
    assert stopped == free[:free.index(stop) + 1]


# ---- sampling ----

def test_sample_greedy_and_filters():
    rng = np.random.default_rng(9)
    logits = rng.standard_normal((3, 257)).astype(np.float32) * 3
    assert sample(Tensor(logits)).numpy().tolist() == logits.argmax(-1).tolist()
    Tensor.manual_seed(0)
    n = 400
    rows = np.repeat(logits[:1], n, axis=0)
    # top_k=1 is greedy whatever the temperature
    assert (sample(Tensor(rows), temperature=5.0, top_k=1).numpy() == logits[0].argmax()).all()
    # top_k: only the k largest appear
    top5 = set(np.argsort(-logits[0])[:5].tolist())
    drawn = sample(Tensor(rows), temperature=2.0, top_k=5).numpy()
    assert set(drawn.tolist()) <= top5 and len(set(drawn.tolist())) > 1
    # top_p: only the smallest set of most likely tokens reaching p
    p = np.exp(logits[0] - logits[0].max())
    p /= p.sum()
    order = np.argsort(-p)
    cum = np.cumsum(p[order])
    nucleus = set(order[:int(np.searchsorted(cum, 0.6)) + 1].tolist())
    drawn = sample(Tensor(rows), temperature=1.0, top_p=0.6).numpy()
    assert set(drawn.tolist()) <= nucleus and len(set(drawn.tolist())) > 1
    # temperature 1: the frequencies follow softmax(logits) (a loose check on the most likely token)
    drawn = sample(Tensor(np.repeat(logits[:1], 4000, axis=0)), temperature=1.0).numpy()
    assert abs((drawn == order[0]).mean() - p[order[0]]) < 0.05
    assert sample(Tensor(logits[0]), temperature=0.5).shape == ()


def test_sampled_generation_is_seeded(saved):
    model = _load(saved, "qwen2")
    prompt = _ids(model.vocab_size, (4,), seed=10).tolist()
    Tensor.manual_seed(3)
    a = list(model.generate(prompt, 15, temperature=0.9, top_k=20, top_p=0.9))
    Tensor.manual_seed(3)
    b = list(model.generate(prompt, 15, temperature=0.9, top_k=20, top_p=0.9))
    assert a == b and all(0 <= t < model.vocab_size for t in a)


@pytest.mark.parametrize("kwargs", [{"temperature": -1.0}, {"top_k": -2}, {"top_p": 0.0}, {"top_p": 1.5}])
def test_sample_rejects_bad_settings(kwargs):
    with pytest.raises(ValueError):
        sample(Tensor.zeros(1, 4), **kwargs)


# ---- checkpoints ----

def test_sharded_checkpoint_loads(saved, tmp_path):
    hf = saved["llama"][1]
    hf.save_pretrained(tmp_path, safe_serialization=True, max_shard_size="40KB")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1 and not (tmp_path / "model.safetensors").exists()
    model = Llama.from_pretrained(tmp_path)
    ids = _ids(model.vocab_size, (1, 6), seed=11)
    np.testing.assert_allclose(model.forward(Tensor(ids), 0).numpy(), _hf_logits(hf, ids), **TOL)
    # a shard the index names but that is gone
    shard = sorted(set(index["weight_map"].values()))[-1]
    (tmp_path / shard).unlink()
    with pytest.raises(FileNotFoundError, match=shard):
        Llama.from_pretrained(tmp_path)


def test_llama3_rope_frequencies_match_transformers():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, rope_parameters=LLAMA3_ROPE)
    inv, _ = ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")
    np.testing.assert_allclose(rope_frequencies(16, 10000.0, LLAMA3_ROPE), inv.numpy(), rtol=1e-6)


def _copy_dir(src: pathlib.Path, dst: pathlib.Path) -> pathlib.Path:
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def _edit_config(d: pathlib.Path, **changes) -> None:
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(changes)
    (d / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("changes, match", [
    ({"model_type": "deepseek_v3"}, "model_type"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0}}, "yarn"),
    ({"num_key_value_heads": 3}, "multiple"),
    ({"use_sliding_window": True}, "sliding"),
])
def test_unsupported_llama_configs_raise(saved, tmp_path, changes, match):
    d = _copy_dir(saved["llama"][0], tmp_path / "m")
    _edit_config(d, **changes)
    with pytest.raises(ConfigError, match=match):
        Llama.from_pretrained(d)


def test_unsupported_gpt2_config_raises(saved, tmp_path):
    d = _copy_dir(saved["gpt2"][0], tmp_path / "m")
    _edit_config(d, activation_function="softsign")
    with pytest.raises(ConfigError, match="activation_function"):
        GPT2.from_pretrained(d)
    with pytest.raises(ConfigError, match="model_type"):
        GPT2.from_pretrained(saved["llama"][0])


def test_weights_that_do_not_fit_raise(saved, tmp_path):
    from tinygrad.nn.state import safe_load, safe_save

    src = saved["llama"][0]
    weights = safe_load(src / "model.safetensors")
    # a missing weight
    d = _copy_dir(src, tmp_path / "missing")
    safe_save({k: v for k, v in weights.items() if k != "model.layers.1.mlp.up_proj.weight"}, d / "model.safetensors")
    with pytest.raises(WeightsError, match=r"missing weights.*model\.layers\.1\.mlp\.up_proj\.weight"):
        Llama.from_pretrained(d)
    # an unexpected one
    d = _copy_dir(src, tmp_path / "unexpected")
    safe_save({**weights, "model.layers.0.extra.weight": Tensor.ones(3)}, d / "model.safetensors")
    with pytest.raises(WeightsError, match=r"unexpected weights.*extra"):
        Llama.from_pretrained(d)
    # a config that does not match the tensors' shapes
    d = _copy_dir(src, tmp_path / "shapes")
    _edit_config(d, intermediate_size=96)
    with pytest.raises(WeightsError, match="shapes that differ"):
        Llama.from_pretrained(d)
    # no checkpoint at all
    d = _copy_dir(src, tmp_path / "none")
    (d / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"model\.safetensors"):
        Llama.from_pretrained(d)
    with pytest.raises(FileNotFoundError, match=r"config\.json"):
        Llama.from_pretrained(tmp_path / "nowhere")


def test_bad_calls_raise(saved):
    model = _load(saved, "gpt2", max_context=16)
    with pytest.raises(ValueError, match="max_context"):
        _load(saved, "gpt2", max_context=65)
    with pytest.raises(ValueError, match="max_context"):
        model.forward(Tensor(_ids(model.vocab_size, (1, 17))), 0)
    with pytest.raises(ValueError, match="vocabulary"):
        list(model.generate([model.vocab_size], 3))
    with pytest.raises(ValueError, match="empty"):
        list(model.generate([], 3))
    with pytest.raises(TypeError, match="integer"):
        model.forward(Tensor([[1.0, 2.0]]), 0)
    assert list(model.generate([1, 2], 0)) == []


# ---- GGUF ----

def _llama3_rope_factors(head_dim: int, rope: dict) -> np.ndarray:
    """rope_freqs as convert_hf_to_gguf.py computes them for LLaMA 3: the divisor of each frequency."""
    inv = 1.0 / (rope["rope_theta"] ** (np.arange(0, head_dim, 2) / head_dim))
    low_wl = rope["original_max_position_embeddings"] / rope["low_freq_factor"]
    high_wl = rope["original_max_position_embeddings"] / rope["high_freq_factor"]
    out = []
    for f in inv:
        wl = 2 * np.pi / f
        if wl < high_wl:
            out.append(1.0)
        elif wl > low_wl:
            out.append(rope["factor"])
        else:
            smooth = (rope["original_max_position_embeddings"] / wl - rope["low_freq_factor"]) / (
                rope["high_freq_factor"] - rope["low_freq_factor"])
            out.append(1 / ((1 - smooth) / rope["factor"] + smooth))
    return np.array(out)


def _need_gguf_reader() -> None:
    try:
        import tinygrad.nn.gguf  # noqa: F401
    except ImportError:
        pytest.skip("tinygrad.nn.gguf (the GGUF reader) is not in this checkout yet")


@pytest.mark.parametrize("name", ["llama", "llama3_tied"])
def test_gguf_llama_matches_transformers(saved, tmp_path, name):
    _need_gguf_reader()
    hf = saved[name][1]
    factors = _llama3_rope_factors(16, LLAMA3_ROPE) if name == "llama3_tied" else None
    path = tmp_path / "model.gguf"
    write_gguf(path, hf, eos_id=3, rope_freqs=factors)
    model = Llama.from_gguf(path)
    assert model.eos_token_ids == [3]
    ids = _ids(model.vocab_size, (2, 8), seed=12)
    np.testing.assert_allclose(model.forward(Tensor(ids), 0).numpy(), _hf_logits(hf, ids), **TOL)
    prompt = ids[0, :5].tolist()
    assert list(model.generate(prompt, 10)) == hf_greedy(hf, prompt, 10)


def test_gguf_unknown_architecture_raises(tmp_path):
    _need_gguf_reader()
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "falcon")
    w.add_tensor("token_embd.weight", np.zeros((4, 2), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ConfigError, match="falcon"):
        Llama.from_gguf(tmp_path / "m.gguf")


# ---- tokenizer and the examples ----

def test_load_tokenizer(saved, tmp_path):
    d = _copy_dir(saved["gpt2"][0], tmp_path / "m")
    assert load_tokenizer(d) is None
    word_tokenizer(257).save(str(d / "tokenizer.json"))
    tok = load_tokenizer(d)
    assert tok.decode(tok.encode("the lazy dog").ids) == "the lazy dog"


def _run_example(script: str, *args: str) -> subprocess.CompletedProcess:
    run = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    return run


@pytest.mark.skipif(not (EXAMPLES / "gpt2.py").exists(), reason="runs from the monorepo checkout")
@pytest.mark.parametrize("script, name", [("gpt2.py", "gpt2"), ("llama.py", "llama")])
def test_example_prints_text(saved, tmp_path, script, name):
    d = _copy_dir(saved[name][0], tmp_path / "m")
    model = _load(saved, name)
    word_tokenizer(model.vocab_size).save(str(d / "tokenizer.json"))
    run = _run_example(script, "--model", str(d), "--prompt", "the quick brown fox", "--max-tokens", "8")
    text = run.stdout.strip().splitlines()[-1]
    assert text.startswith("the quick brown fox") and len(text.split()) == 12, text
    # what it printed is the greedy continuation
    tok = load_tokenizer(d)
    expected = list(model.generate(tok.encode("the quick brown fox").ids, 8))
    assert text == tok.decode(tok.encode("the quick brown fox").ids + expected)
    assert "ms/token" in run.stderr
    # sampling options, then token ids without a tokenizer
    run = _run_example(script, "--model", str(d), "--prompt", "the lazy dog", "--max-tokens", "5",
                       "--temperature", "0.8", "--top-k", "10", "--top-p", "0.9", "--seed", "1")
    assert len(run.stdout.strip().splitlines()[-1].split()) == 8
    (d / "tokenizer.json").unlink()
    run = _run_example(script, "--model", str(d), "--prompt", "1 2 3", "--max-tokens", "4")
    assert [int(t) for t in run.stdout.split()] == [1, 2, 3, *model.generate([1, 2, 3], 4)]


@pytest.mark.skipif(not (EXAMPLES / "llama.py").exists(), reason="runs from the monorepo checkout")
def test_llama_example_reads_gguf(saved, tmp_path):
    _need_gguf_reader()
    hf = saved["llama"][1]
    path = tmp_path / "model.gguf"
    write_gguf(path, hf, eos_id=3)
    word_tokenizer(hf.config.vocab_size).save(str(tmp_path / "tokenizer.json"))
    run = _run_example("llama.py", "--model", str(path), "--prompt", "a small cat", "--max-tokens", "6")
    text = run.stdout.strip().splitlines()[-1]
    tok = load_tokenizer(tmp_path)
    prompt = tok.encode("a small cat").ids
    assert text == tok.decode(prompt + hf_greedy(hf, prompt, 6))
