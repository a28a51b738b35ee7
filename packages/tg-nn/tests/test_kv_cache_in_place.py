"""The KV caches of tinygrad.nn.transformer are written in place on every step: each layer's cache keeps its memory
from the cache's creation on (the prefill after a reset included), and a decode step under TinyJit launches what the
same step launches eagerly, with no copy writing a cache back. The models here are built from configs, so their norm
weights are parameters (requires_grad=True), as in a user's model filled by assign or load_state_dict: the values
written into the caches are computed from them, yet a cache must stay plain data outside training mode."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from tinygrad import Context, GlobalCounters, Tensor, TinyJit
from tinygrad.engine.jit_capture import Capture
from tinygrad.engine.schedule import copy_kernel_ast
from tinygrad.nn.state import get_state_dict
from tinygrad.nn.transformer import GPT2, GPT2Config, KVCache, Llama, LlamaConfig
from tinygrad.uop.ops import UOp

MAX_CONTEXT = 16
LLAMA = LlamaConfig(vocab_size=48, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=8, max_position_embeddings=32)
GPT2_CONFIG = GPT2Config(vocab_size=48, n_positions=32, n_embd=32, n_layer=3, n_head=4, n_inner=64)


def _filled(model: Any, seed: int) -> Any:
    rng = np.random.default_rng(seed)
    for t in get_state_dict(model).values():
        t.assign(Tensor((rng.standard_normal(t.shape) * 0.3).astype(np.float32))).realize()
    return model


def llama(seed: int = 3) -> Llama:
    return _filled(Llama(LLAMA, max_context=MAX_CONTEXT), seed)


def gpt2(seed: int = 3) -> GPT2:
    return _filled(GPT2(GPT2_CONFIG, max_context=MAX_CONTEXT), seed)


MODELS: dict[str, Callable[[], Any]] = {"llama": llama, "gpt2": gpt2}


def caches(model: Any) -> list[KVCache]:
    found = [attn._cache for attn in model._attention_layers()]
    assert all(c is not None for c in found)
    return found


def memory(model: Any) -> list[Any]:
    """The memory each layer's cache holds (a write in place may rename the buffer, never its memory)."""
    return [c.kv._buffer().storage for c in caches(model)]


def position(p: int) -> UOp:
    return UOp.variable("start_pos", 1, MAX_CONTEXT - 1).bind(p)  # type: ignore[attr-defined,no-any-return]


def kernels_of(call: Callable[[], Any]) -> int:
    GlobalCounters.reset()
    call()
    return GlobalCounters.kernel_count


def cache_write_backs(cap: Capture, model: Any) -> int:
    """The copies a capture launches into a cache's memory (state it would write back after each replay)."""
    cache_memory = {id(m) for m in memory(model)}
    return sum(1 for r in cap.recorded if r.runner is not None and id(r.item.bufs[0].storage) in cache_memory and
               r.item.ast is copy_kernel_ast(r.item.bufs[0].dtype, r.item.bufs[0].size))


def ids(*tokens: int) -> Tensor:
    return Tensor(np.array([list(tokens)], np.int32))


@pytest.mark.parametrize("name", list(MODELS))
def test_a_users_jitted_decode_step_launches_the_eager_kernels(name: str) -> None:
    model = MODELS[name]()
    model.forward(ids(5, 9, 2), 0).realize()
    before = memory(model)
    step = TinyJit(lambda tok, pos: model.forward(tok, pos)[:, -1].realize())
    for p, tok in enumerate([7, 1, 30, 12], start=3):
        step(ids(tok), position(p))
    cap = step.captured
    assert cap is not None
    assert cache_write_backs(cap, model) == 0
    assert kernels_of(lambda: step(ids(4), position(7))) == step.captured_kernels
    with Context(JIT=0):
        eager = kernels_of(lambda: step(ids(8), position(8)))
    assert step.captured_kernels == eager
    assert [a is b for a, b in zip(memory(model), before)] == [True] * len(before)


@pytest.mark.parametrize("name", list(MODELS))
def test_a_decode_step_computes_each_layers_queries_with_its_cache(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # the queries are realized in the cache's schedule: realized after it, the q projection would read the layer's
    # normed input again and compute the norm (and GPT-2's fused projection) a second time
    model = MODELS[name]()
    model.forward(ids(5, 9, 2), 0).realize()
    with_q = kernels_of(lambda: model.forward(ids(7), position(3)).realize())
    update = KVCache.update
    monkeypatch.setattr(KVCache, "update", lambda self, k, v, start_pos, *along: update(self, k, v, start_pos))
    apart = kernels_of(lambda: model.forward(ids(7), position(4)).realize())
    layers = len(caches(model))
    assert with_q < apart and (apart - with_q) % layers == 0, (with_q, apart)


@pytest.mark.parametrize("name", list(MODELS))
def test_generate_writes_every_cache_in_place(name: str) -> None:
    model = MODELS[name]()
    for _ in range(2):  # the caches a reset makes, including the last one made, are written in place from the start
        model.reset_cache(1)
        before = memory(model)
        assert len({id(m) for m in before}) == len(before), "each layer's cache needs memory of its own"
        assert not any(c.kv.numpy().any() for c in caches(model)), "a new cache starts zeroed"
        out = list(model.generate([3, 11, 6], 6))
        assert len(out) == 6
        assert [a is b for a, b in zip(memory(model), before)] == [True] * len(before)
        assert not any(c.kv.requires_grad for c in caches(model))
    step = next(iter(model._decoders.values()))
    assert step.captured is not None and cache_write_backs(step.captured, model) == 0


@pytest.mark.parametrize("name", list(MODELS))
def test_decoded_tokens_and_logits_match_a_full_forward(name: str) -> None:
    """Each decode step against the model run afresh over the whole sequence (no cache carried over)."""
    model, reference = MODELS[name](), MODELS[name]()
    prompt = [3, 11, 6, 40]
    got = list(model.generate(prompt, 8))
    seq = list(prompt)
    for tok in got:
        reference.reset_cache(1)
        want = int(reference.forward(ids(*seq), 0)[0, -1].argmax().item())
        assert tok == want
        seq.append(tok)
    model.reset_cache(1)
    model.forward(ids(*prompt), 0).realize()
    step = TinyJit(lambda tok, pos: model.forward(tok, pos)[:, -1].realize())
    for p in range(len(prompt), len(seq)):
        logits = step(ids(seq[p]), position(p)).numpy()
        reference.reset_cache(1)
        full = reference.forward(ids(*seq[:p + 1]), 0)[:, -1].numpy()
        np.testing.assert_allclose(logits, full, rtol=1e-4, atol=1e-4)


def test_training_mode_keeps_gradients_through_the_cache() -> None:
    model = llama()
    k_proj = model.model.layers[0].self_attn.k_proj.weight
    with Context(TRAINING=1):
        model.forward(ids(1, 2, 3, 4), 0).sum().backward()
    assert k_proj.grad is not None and float(k_proj.grad.abs().sum().item()) > 0
    # back outside training the cache is data again: after the first write, the steps go in place
    model.forward(ids(5), 4).realize()
    after_first = memory(model)
    for p, tok in enumerate([6, 7], start=5):
        model.forward(ids(tok), p).realize()
    assert [a is b for a, b in zip(memory(model), after_first)] == [True] * len(after_first)
    assert not any(c.kv.requires_grad for c in caches(model))


def test_inference_sends_no_gradient_through_the_cache() -> None:
    """Outside training, keys and values reach the loss only through the cache, which is data: k_proj gets no
    gradient, while the query side (q_proj) still does."""
    model = llama()
    model.forward(ids(1, 2, 3, 4), 0).sum().backward()
    layer = model.model.layers[0].self_attn
    assert layer.k_proj.weight.grad is None
    assert layer.q_proj.weight.grad is not None


def test_greedy_decode_of_parameter_weights_matches_transformers(tmp_path: Any) -> None:
    """A checkpoint's weights with the norm weights made parameters (as a user's load_state_dict into a fresh model
    leaves them) decode as transformers does."""
    pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from tiny_llms import hf_greedy, tiny_llama

    torch.manual_seed(0)
    hf = tiny_llama()
    hf.save_pretrained(tmp_path, safe_serialization=True)
    model = Llama.from_pretrained(tmp_path, max_context=32)
    for name, t in get_state_dict(model).items():
        if name.endswith("layernorm.weight") or name == "model.norm.weight":
            t.requires_grad_()
    prompt = [5, 17, 200, 3, 99]
    assert list(model.generate(prompt, 12)) == hf_greedy(hf, prompt, 12)
    step = next(iter(model._decoders.values()))
    assert step.captured is not None and cache_write_backs(step.captured, model) == 0


def test_a_pickled_decode_step_goes_on_from_its_cache() -> None:
    import pickle

    model = llama()
    step = TinyJit(lambda tok, pos: model.forward(tok, pos)[:, -1].realize())
    model.forward(ids(5), 0).realize()
    for p, tok in enumerate([9, 2, 33], start=1):
        step(ids(tok), position(p))
    loaded = pickle.loads(pickle.dumps(step))
    want = step(ids(17), position(4)).numpy()
    np.testing.assert_allclose(loaded(ids(17), position(4)).numpy(), want, rtol=1e-5, atol=1e-5)
