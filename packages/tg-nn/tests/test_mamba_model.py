"""tinygrad.nn.mamba and examples/mamba.py against Hugging Face transformers' MambaForCausalLM: tiny models with
seeded random weights, saved with save_pretrained and loaded back. Prefill logits must match transformers' to float
tolerance, greedy decoding must give transformers' `generate` ids, and the chunked scan of a prompt must leave the
same logits and state as one recurrent step per token. Everything runs on Device.DEFAULT (DEV=CPU picks the CPU)."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from tiny_llms import hf_greedy, word_tokenizer  # noqa: E402
from tinygrad import GlobalCounters, Tensor  # noqa: E402
from tinygrad.nn.mamba import Mamba, selective_scan  # noqa: E402
from tinygrad.nn.transformer import ConfigError, WeightsError, load_tokenizer  # noqa: E402

EXAMPLES = pathlib.Path(__file__).parents[3] / "examples"
TOL = {"atol": 1e-4, "rtol": 1e-4}
VOCAB = 120


def _tiny_mamba(seed: int, **overrides):
    cfg = dict(vocab_size=VOCAB, hidden_size=32, state_size=8, num_hidden_layers=2, conv_kernel=4, expand=2,
               time_step_rank=4)
    cfg.update(overrides)
    torch.manual_seed(seed)
    hf = transformers.MambaForCausalLM(transformers.MambaConfig(**cfg)).eval()
    # transformers' initialisation makes one token win everywhere (a greedy decode then repeats it) and leaves the
    # biases and norm weights at constants that would hide a missing term: spread them out
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith(("embeddings.weight", "lm_head.weight")):
                p.normal_(0, 0.5)
            elif name.endswith(("in_proj.weight", "out_proj.weight", "x_proj.weight")):
                p.normal_(0, 0.3)
            elif name.endswith(("norm.weight", "norm_f.weight", ".D", "bias")):
                p.add_(torch.randn_like(p) * 0.2)
            elif name.endswith("A_log"):
                p.add_(torch.randn_like(p) * 0.5)
    return hf


# name -> the transformers config overrides
MODELS = {
    "tied": {},
    # the other switches of the layout: an untied head, projection biases, no conv bias, residual in the model dtype
    "untied": {"tie_word_embeddings": False, "use_bias": True, "use_conv_bias": False, "residual_in_fp32": False,
               "conv_kernel": 3},
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """name -> (directory, the transformers model)."""
    out = {}
    for i, (name, overrides) in enumerate(MODELS.items()):
        hf = _tiny_mamba(i, **overrides)
        d = tmp_path_factory.mktemp(name)
        hf.save_pretrained(d, safe_serialization=True)
        out[name] = (d, hf)
    return out


@pytest.fixture(scope="module")
def loaded(saved):
    """name -> our model loaded from the directory (shared: each test resets the state it uses)."""
    return {name: Mamba.from_pretrained(d) for name, (d, _) in saved.items()}


def _ids(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, shape).astype(np.int32)


def _hf_logits(hf, ids: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return hf(torch.tensor(ids, dtype=torch.long)).logits.numpy()


# ---- the scan ------------------------------------------------------------------------------------------------------

def _scan_loop(dt: np.ndarray, A: np.ndarray, b: np.ndarray, h0: np.ndarray | None) -> np.ndarray:
    h = np.zeros_like(b[:, 0]) if h0 is None else h0
    out = []
    for t in range(b.shape[1]):
        h = np.exp(dt[:, t, :, None] * A) * h + b[:, t]
        out.append(h)
    return np.stack(out, axis=1)


@pytest.mark.parametrize("T, chunk, with_h0", [(1, 16, True), (5, 16, False), (16, 4, True), (37, 4, True),
                                               (37, 16, False), (70, 2, True)])
def test_selective_scan_is_the_recurrence(T, chunk, with_h0):
    rng = np.random.default_rng(T)
    dt = rng.uniform(0, 1, (2, T, 3)).astype(np.float32)
    A = -rng.uniform(0, 2, (3, 4)).astype(np.float32)
    b = rng.normal(size=(2, T, 3, 4)).astype(np.float32)
    h0 = rng.normal(size=(2, 3, 4)).astype(np.float32) if with_h0 else None
    got = selective_scan(Tensor(dt), Tensor(A), Tensor(b), None if h0 is None else Tensor(h0), chunk=chunk).numpy()
    np.testing.assert_allclose(got, _scan_loop(dt, A, b, h0), atol=1e-5, rtol=1e-4)


def test_selective_scan_strong_decay_stays_finite():
    # decays of exp(-80) per step: a product of whole-chunk decays underflows to 0, and nothing may overflow
    dt = np.full((1, 40, 2), 40.0, np.float32)
    b = np.ones((1, 40, 2, 1), np.float32)
    got = selective_scan(Tensor(dt), Tensor(np.full((2, 1), -2.0, np.float32)), Tensor(b),
                         Tensor(np.full((1, 2, 1), 5.0, np.float32)), chunk=4).numpy()
    np.testing.assert_allclose(got, np.ones_like(b), atol=1e-6)


def test_selective_scan_rejects_bad_shapes():
    with pytest.raises(ValueError, match="disagree"):
        selective_scan(Tensor.zeros(1, 4, 2), Tensor.zeros(3, 5), Tensor.zeros(1, 4, 2, 5))
    with pytest.raises(ValueError, match=r"dt must be \(batch, T, D\)"):
        selective_scan(Tensor.zeros(1, 4), Tensor.zeros(2, 5), Tensor.zeros(1, 4, 2, 5))
    with pytest.raises(ValueError, match="h0 must be"):
        selective_scan(Tensor.zeros(1, 4, 2), Tensor.zeros(2, 5), Tensor.zeros(1, 4, 2, 5), Tensor.zeros(2, 2, 5))
    with pytest.raises(ValueError, match="chunk must be"):
        selective_scan(Tensor.zeros(1, 4, 2), Tensor.zeros(2, 5), Tensor.zeros(1, 4, 2, 5), chunk=1)


# ---- the model against transformers --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(MODELS))
def test_prefill_logits_match_transformers(saved, loaded, name):
    ids = _ids((2, 37))  # more than two chunks of 16: the scan's chunk-to-chunk level runs too
    model = loaded[name]
    model.reset_state(2)
    np.testing.assert_allclose(model(Tensor(ids)).numpy(), _hf_logits(saved[name][1], ids), **TOL)


def test_small_chunks_give_the_same_logits(saved):
    ids = _ids((1, 37), seed=1)
    model = Mamba.from_pretrained(saved["tied"][0], chunk=3)  # three levels of chunks
    model.reset_state(1)
    np.testing.assert_allclose(model(Tensor(ids)).numpy(), _hf_logits(saved["tied"][1], ids), **TOL)


@pytest.mark.parametrize("name", list(MODELS))
def test_greedy_decode_matches_transformers_generate(saved, loaded, name):
    hf, model = saved[name][1], loaded[name]
    for seed in (2, 3):  # twice on one model: the second generation starts from a fresh state, jit replays included
        prompt = _ids((9,), seed=seed).tolist()
        expected = hf_greedy(hf, prompt, 8)
        got = list(model.generate(prompt, 8, stop_ids=model.eos_token_ids))
        assert got == expected
        assert len(set(got)) > 1, "a decode that repeats one token would not show a wrong state"


def test_prefill_equals_recurrent_steps(saved, loaded):
    # prompts of 37 like test_prefill_logits_match_transformers, whose kernels are compiled already
    model = loaded["tied"]
    ids = _ids((2, 38), seed=4)
    model.reset_state(2)
    prefill = model(Tensor(ids[:, :37])).numpy()
    state_after_prefill = [t.numpy() for t in model.state()]
    model.reset_state(2)
    steps = np.concatenate([model(Tensor(ids[:, t:t + 1])).numpy() for t in range(37)], axis=1)
    np.testing.assert_allclose(prefill, steps, atol=1e-5, rtol=1e-4)
    for a, b in zip(state_after_prefill, model.state()):
        np.testing.assert_allclose(a, b.numpy(), atol=1e-5, rtol=1e-4)
    # one step, then a prefill of the rest: the scan starts from the state the step left
    model.reset_state(2)
    model(Tensor(ids[:, :1]))
    np.testing.assert_allclose(model(Tensor(ids[:, 1:])).numpy(), _hf_logits(saved["tied"][1], ids)[:, 1:], **TOL)


def test_decode_step_is_jitted_and_fixed_size(loaded):
    model = loaded["tied"]
    gen = model.generate(_ids((5,), seed=5).tolist(), 12)
    for _ in range(4):  # the prefill, then the jit's eager and capturing calls
        next(gen)
    sizes = [t.shape for t in model.state()]
    GlobalCounters.reset()
    next(gen)
    per_step = GlobalCounters.kernel_count
    for _ in range(5):
        next(gen)
    assert GlobalCounters.kernel_count == 6 * per_step  # a replay launches the same kernels whatever the position
    assert [t.shape for t in model.state()] == sizes == [(1, 3, 64), (1, 64, 8)] * 2


# ---- loading and errors --------------------------------------------------------------------------------------------

def _copy(src: pathlib.Path, dst: pathlib.Path) -> pathlib.Path:
    shutil.copytree(src, dst)
    return dst


def test_old_embedding_name_loads(saved, tmp_path):
    from safetensors.numpy import load_file, save_file
    d = _copy(saved["tied"][0], tmp_path / "m")
    tensors = load_file(d / "model.safetensors")
    tensors["backbone.embedding.weight"] = tensors.pop("backbone.embeddings.weight")
    save_file(tensors, d / "model.safetensors")
    ids = _ids((1, 6), seed=6)
    model = Mamba.from_pretrained(d)
    np.testing.assert_allclose(model(Tensor(ids)).numpy(), _hf_logits(saved["tied"][1], ids), **TOL)


def test_errors_name_the_problem(saved, loaded, tmp_path):
    d = _copy(saved["tied"][0], tmp_path / "m")
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "model_type": "mamba2"}))
    with pytest.raises(ConfigError, match="mamba2"):
        Mamba.from_pretrained(d)
    (d / "config.json").write_text(json.dumps({**cfg, "conv_kernel": 1}))
    with pytest.raises(ConfigError, match="conv_kernel must be >= 2"):
        Mamba.from_pretrained(d)
    (d / "config.json").write_text(json.dumps({**cfg, "state_size": 4}))
    with pytest.raises(WeightsError, match="A_log"):
        Mamba.from_pretrained(d)
    model = loaded["tied"]
    with pytest.raises(ValueError, match="outside the vocabulary"):
        next(model.generate([VOCAB + 3], 2))
    model.reset_state(1)
    with pytest.raises(ValueError, match=r"reset_state\(2\)"):
        model(Tensor(_ids((2, 3))))


# ---- the example ---------------------------------------------------------------------------------------------------

def _run_example(*args: str) -> subprocess.CompletedProcess:
    run = subprocess.run([sys.executable, str(EXAMPLES / "mamba.py"), *args], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    return run


@pytest.mark.skipif(not (EXAMPLES / "mamba.py").exists(), reason="runs from the monorepo checkout")
def test_example_prints_the_greedy_text(saved, tmp_path):
    d = _copy(saved["tied"][0], tmp_path / "m")
    hf = saved["tied"][1]
    word_tokenizer(VOCAB).save(str(d / "tokenizer.json"))
    run = _run_example("--model", str(d), "--prompt", "the quick brown fox", "--count", "8")
    tok = load_tokenizer(d)
    prompt = tok.encode("the quick brown fox").ids
    assert run.stdout.strip().splitlines()[-1] == tok.decode(prompt + hf_greedy(hf, prompt, 8))
    assert "tokens/s" in run.stderr
