"""tinygrad.llm: the OpenAI-compatible server on a tiny LLaMA with random weights (transformers' LlamaConfig, saved
with save_pretrained) and a word-level tokenizer with a chat template, driven with the `openai` client; malformed
requests through urllib; the terminal chat in a subprocess; the text streaming (UTF-8 split across tokens, stop
strings across tokens) on a scripted model; and vocabularies rebuilt from GGUF metadata against the tokenizers
they came from, with a GGUF model chatting end to end. Servers listen on 127.0.0.1 and are stopped by the tests.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
tokenizers = pytest.importorskip("tokenizers")
openai = pytest.importorskip("openai")
pytest.importorskip("jinja2")

from tiny_llms import MAX_CONTEXT, hf_greedy, tiny_llama, word_tokenizer, write_gguf  # noqa: E402
from tinygrad.llm import Engine, load_engine, serve  # noqa: E402
from tinygrad.llm.engine import Piece  # noqa: E402
from tinygrad.llm.gguf_vocab import LLAMA3_PATTERN, tokenizer_from_gguf  # noqa: E402
from tinygrad.nn.transformer import Llama, load_tokenizer  # noqa: E402

VOCAB = 257
SPECIALS = ["<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]
BOS, EOS = 1, 2
TEMPLATE = ("{% if messages[0]['role'] == 'assistant' %}{{ raise_exception('the user speaks first') }}{% endif %}"
            "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} </s> {% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")
NAME = "tiny-llama"
TIMEOUT = 300  # seconds for a request: the first ones compile kernels


def _word_tokenizer() -> tokenizers.Tokenizer:
    """Whole words, the specials first, a BOS added to plain prompts (see tiny_llms.word_tokenizer)."""
    return word_tokenizer(VOCAB, SPECIALS, bos="<s>")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> pathlib.Path:
    d = tmp_path_factory.mktemp("tiny-llama")
    tiny_llama(VOCAB, bos=BOS, seed=0).save_pretrained(d, safe_serialization=True)
    _word_tokenizer().save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE, "bos_token": "<s>",
                                                         "eos_token": "</s>"}))
    return d


@pytest.fixture(scope="module")
def reference(model_dir):
    """A model of its own (not the server's) and the tokenizer, for the answers the server must give."""
    return Llama.from_pretrained(model_dir), load_tokenizer(model_dir)


@pytest.fixture(scope="module")
def server(model_dir):
    srv = serve(Llama.from_pretrained(model_dir), load_tokenizer(model_dir), "127.0.0.1", 0, name=NAME,
                chat_template=TEMPLATE, special_tokens={"bos_token": "<s>", "eos_token": "</s>"},
                max_body=64 * 1024)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "v1", api_key="unused", max_retries=0, timeout=TIMEOUT)


def greedy(reference, ids: list[int], n: int) -> tuple[str, str, int]:
    """(text, finish_reason, tokens) of the model's own greedy generate, stopped at </s>."""
    model, tok = reference
    out = []
    for t in model.generate(ids, min(n, MAX_CONTEXT - len(ids)), stop_ids=[EOS]):
        if t == EOS:
            return tok.decode(out), "stop", len(out)
        out.append(t)
    return tok.decode(out), "length", len(out)


def chat_ids(reference, messages: list[dict]) -> list[int]:
    """The template rendered by hand: what the server must feed the model."""
    text = "<s>" + "".join(f"<|{m['role']}|> {m['content']} </s> " for m in messages) + "<|assistant|>"
    return reference[1].encode(text, add_special_tokens=False).ids


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


# ---- the API through the openai client ------------------------------------------------------------------------------

def test_models_list(client, server):
    assert [m.id for m in client.models.list()] == [NAME]
    assert client.models.retrieve(NAME).id == NAME
    with urllib.request.urlopen(server.url + "health", timeout=30) as r:
        assert json.loads(r.read()) == {"status": "ok"}


def test_chat_greedy_matches_generate(client, reference):
    messages = [{"role": "system", "content": "one small cat"}, *user("the quick brown fox")]
    r = client.chat.completions.create(model=NAME, messages=messages, max_tokens=12, temperature=0)
    ids = chat_ids(reference, messages)
    text, finish, n = greedy(reference, ids, 12)
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == text and text
    assert r.choices[0].finish_reason == finish
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (len(ids), n, len(ids) + n)
    # temperature 0 is deterministic
    again = client.chat.completions.create(model=NAME, messages=messages, max_tokens=12, temperature=0)
    assert again.choices[0].message.content == text


def test_chat_streaming_matches_non_streaming(client, reference):
    messages = user("a lazy dog sat on the mat")
    text, finish, n = greedy(reference, chat_ids(reference, messages), 10)
    stream = client.chat.completions.create(model=NAME, messages=messages, max_tokens=10, temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    deltas = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(deltas) == text
    assert sum(1 for d in deltas if d) >= min(n, 2), "the answer arrives in pieces, not at once"
    assert finishes == [finish]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == n


def test_completions_and_max_tokens(client, reference):
    prompt = "the warm mat"
    ids = reference[1].encode(prompt).ids
    assert ids[0] == BOS  # a plain prompt gets the tokenizer's BOS
    for max_tokens in (1, 5):
        r = client.completions.create(model=NAME, prompt=prompt, max_tokens=max_tokens, temperature=0)
        text, finish, n = greedy(reference, ids, max_tokens)
        assert (r.choices[0].text, r.choices[0].finish_reason, r.usage.completion_tokens) == (text, finish, n)
        assert r.usage.completion_tokens <= max_tokens
        assert r.usage.prompt_tokens == len(ids)
    # a streamed completion, and token ids as the prompt
    stream = client.completions.create(model=NAME, prompt=prompt, max_tokens=5, temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in stream) == greedy(reference, ids, 5)[0]
    r = client.completions.create(model=NAME, prompt=ids, max_tokens=5, temperature=0)
    assert r.choices[0].text == greedy(reference, ids, 5)[0]
    # echo puts the prompt in front
    r = client.completions.create(model=NAME, prompt=prompt, max_tokens=3, temperature=0, echo=True)
    assert r.choices[0].text.startswith(prompt)


def test_max_tokens_past_the_context_ends_at_the_context(client, reference):
    prompt = " ".join(["fox"] * 40)
    ids = reference[1].encode(prompt).ids
    r = client.completions.create(model=NAME, prompt=prompt, max_tokens=500, temperature=0)
    assert r.usage.completion_tokens <= MAX_CONTEXT - len(ids)
    assert r.choices[0].text == greedy(reference, ids, 500)[0]


def test_stop_strings_are_cut(client, reference):
    messages = user("one small cat")
    full, _, _ = greedy(reference, chat_ids(reference, messages), 12)
    words = full.split(" ")
    assert len(words) >= 4, full
    stop = words[2]
    expected = full[:full.find(stop)]
    r = client.chat.completions.create(model=NAME, messages=messages, max_tokens=12, temperature=0, stop=stop)
    assert (r.choices[0].message.content, r.choices[0].finish_reason) == (expected, "stop")
    # a list: the earliest match wins; a stop that never appears changes nothing
    r = client.chat.completions.create(model=NAME, messages=messages, max_tokens=12, temperature=0,
                                       stop=["never-generated", words[3], stop])
    assert r.choices[0].message.content == expected
    stream = client.chat.completions.create(model=NAME, messages=messages, max_tokens=12, temperature=0, stop=[stop],
                                            stream=True)
    chunks = [c for c in stream if c.choices]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == expected
    assert chunks[-1].choices[0].finish_reason == "stop"
    # a stop string spanning two tokens
    two = " ".join(words[1:3])
    r = client.completions.create(model=NAME, prompt="<|user|> one small cat </s> <|assistant|>", max_tokens=12,
                                  temperature=0, stop=two)
    assert r.choices[0].finish_reason == "stop" and two not in r.choices[0].text


def test_seeded_sampling_repeats(client):
    kwargs = {"model": NAME, "prompt": "a small cat", "max_tokens": 8, "temperature": 1.0, "top_p": 0.9}
    a = client.completions.create(seed=11, **kwargs).choices[0].text
    b = client.completions.create(seed=11, **kwargs).choices[0].text
    assert a == b and len(a.split()) >= 1


def test_concurrent_requests_are_both_answered(server, reference):
    prompts = ["the quick brown fox", "a lazy dog"]
    results: dict[int, str] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(len(prompts))

    def ask(i: int) -> None:
        try:
            c = openai.OpenAI(base_url=server.url + "v1", api_key="unused", max_retries=0, timeout=TIMEOUT)
            start.wait(timeout=30)
            r = c.chat.completions.create(model=NAME, messages=user(prompts[i]), max_tokens=10, temperature=0)
            results[i] = r.choices[0].message.content
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=TIMEOUT)
    assert not errors, errors
    for i, p in enumerate(prompts):
        assert results[i] == greedy(reference, chat_ids(reference, user(p)), 10)[0]


# ---- malformed requests ---------------------------------------------------------------------------------------------

def _post(url: str, data: bytes, content_type: str = "application/json", method: str = "POST",
          headers: dict | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=data if method == "POST" else None, method=method,
                                 headers={"Content-Type": content_type, **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _chat_body(**fields) -> bytes:
    return json.dumps({"model": NAME, "messages": user("the fox"), "max_tokens": 2, **fields}).encode()


LONG = " ".join(["dog"] * (MAX_CONTEXT + 5))
BAD_REQUESTS = {
    "invalid json": ("v1/chat/completions", b"{not json", 400, None),
    "not an object": ("v1/chat/completions", b"[1, 2]", 400, None),
    "missing messages": ("v1/chat/completions", json.dumps({"model": NAME}).encode(), 400, "messages"),
    "messages not a list": ("v1/chat/completions", _chat_body(messages="hi"), 400, "messages"),
    "empty messages": ("v1/chat/completions", _chat_body(messages=[]), 400, "messages"),
    "message without role": ("v1/chat/completions", _chat_body(messages=[{"content": "x"}]), 400,
                             "messages[0].role"),
    "content of a wrong type": ("v1/chat/completions", _chat_body(messages=[{"role": "user", "content": 5}]), 400,
                                "messages[0].content"),
    "image content": ("v1/chat/completions", _chat_body(messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:,"}}]}]), 400, "messages[0].content"),
    "template refuses": ("v1/chat/completions", _chat_body(messages=[{"role": "assistant", "content": "hi"}]), 400,
                         "messages"),
    "unknown model": ("v1/chat/completions", _chat_body(model="gpt-9"), 404, "model"),
    "model not a string": ("v1/chat/completions", _chat_body(model=3), 400, "model"),
    "negative max_tokens": ("v1/chat/completions", _chat_body(max_tokens=-1), 400, "max_tokens"),
    "max_tokens not an integer": ("v1/chat/completions", _chat_body(max_tokens=2.5), 400, "max_tokens"),
    "temperature a string": ("v1/chat/completions", _chat_body(temperature="hot"), 400, "temperature"),
    "temperature negative": ("v1/chat/completions", _chat_body(temperature=-0.5), 400, "temperature"),
    "top_p above 1": ("v1/chat/completions", _chat_body(top_p=1.5), 400, "top_p"),
    "stop of a wrong type": ("v1/chat/completions", _chat_body(stop=7), 400, "stop"),
    "stream not a bool": ("v1/chat/completions", _chat_body(stream="yes"), 400, "stream"),
    "seed not an integer": ("v1/chat/completions", _chat_body(seed="x"), 400, "seed"),
    "n above 1": ("v1/chat/completions", _chat_body(n=2), 400, "n"),
    "tools": ("v1/chat/completions", _chat_body(tools=[{"type": "function"}]), 400, "tools[0].function"),
    "too long prompt (chat)": ("v1/chat/completions", _chat_body(messages=user(LONG)), 400, "messages"),
    "too long prompt": ("v1/completions", json.dumps({"prompt": LONG}).encode(), 400, "prompt"),
    "missing prompt": ("v1/completions", json.dumps({"max_tokens": 3}).encode(), 400, "prompt"),
    "prompt of a wrong type": ("v1/completions", json.dumps({"prompt": {"a": 1}}).encode(), 400, "prompt"),
    "token ids outside the vocabulary": ("v1/completions", json.dumps({"prompt": [1, 99999]}).encode(), 400,
                                         "prompt"),
    "empty list of token ids": ("v1/completions", json.dumps({"prompt": []}).encode(), 400, "prompt"),
    "body too large": ("v1/completions", json.dumps({"prompt": "x" * 70_000}).encode(), 413, None),
    "unknown endpoint": ("v1/embeddings", _chat_body(), 404, None),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_malformed_requests_get_json_errors(server, case):
    path, data, status, param = BAD_REQUESTS[case]
    got, body = _post(server.url + path, data)
    assert got == status, body
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert err["type"] == "invalid_request_error"
    assert err["param"] == param
    if case == "unknown model":
        assert err["code"] == "model_not_found"
    if case.startswith("too long prompt"):
        assert err["code"] == "context_length_exceeded"


def test_http_level_refusals(server):
    url = server.url + "v1/chat/completions"
    assert _post(url, _chat_body(), content_type="text/plain")[0] == 415
    status, body = _post(url, b"", method="GET")
    assert status == 405 and body["error"]["code"] == "method_not_allowed"
    status, body = _post(url, _chat_body(), headers={"Host": "evil.example:80"})
    assert status == 403 and body["error"]["type"] == "permission_error"
    # no Content-Length, and a method http.server itself would answer with a 501: JSON errors too
    for raw, expected in ((b"POST /v1/completions HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                           b"\r\n\r\n", 411), (b"BREW / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", 405)):
        with socket.create_connection((server.host, server.port), timeout=30) as s:
            s.sendall(raw)
            s.shutdown(socket.SHUT_WR)
            reply = b""
            while chunk := s.recv(65536):
                reply += chunk
        head, _, payload = reply.partition(b"\r\n\r\n")
        assert head.split()[1] == str(expected).encode(), reply
        assert "message" in json.loads(payload)["error"]
    # after all of that the server still answers
    assert _post(server.url + "v1/models", b"", method="GET")[0] == 200


class _Exploding:
    """A model whose generation fails after its first token."""
    max_context = MAX_CONTEXT
    eos_token_ids: list[int] = []

    def generate(self, ids, n, temperature=0.0, top_k=0, top_p=1.0, stop_ids=()):
        yield 20
        raise RuntimeError("the device fell over")


def test_errors_inside_generation_give_500():
    srv = serve(_Exploding(), _word_tokenizer(), name="boom")
    try:
        status, body = _post(srv.url + "v1/completions", json.dumps({"prompt": "the fox"}).encode())
        assert status == 500 and body["error"]["type"] == "server_error"
        assert "the device fell over" in body["error"]["message"]
        c = openai.OpenAI(base_url=srv.url + "v1", api_key="unused", max_retries=0, timeout=60)
        with pytest.raises(openai.APIError, match="the device fell over"):
            list(c.chat.completions.create(model="boom", messages=user("hi"), stream=True))
        assert [m.id for m in c.models.list()] == ["boom"]  # still serving, and the lock was released:
        assert _post(srv.url + "v1/completions", json.dumps({"prompt": "fox"}).encode())[0] == 500
    finally:
        srv.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(srv.url + "health", timeout=5)


def test_chat_page_is_served(server):
    with urllib.request.urlopen(server.url, timeout=30) as r:
        page = r.read().decode()
        assert r.headers["Content-Type"].startswith("text/html")
    assert "/v1/chat/completions" in page and "getReader" in page
    assert "http://" not in page.replace("http://www.w3.org", "") and "https://" not in page  # nothing external


# ---- the text streaming on a scripted model -------------------------------------------------------------------------

class _Scripted:
    """A model that generates the given ids, whatever the prompt."""
    max_context = 1000
    eos_token_ids: list[int] = []

    def __init__(self, ids: list[int]):
        self.ids = ids

    def generate(self, ids, n, temperature=0.0, top_k=0, top_p=1.0, stop_ids=()):
        for t in self.ids[:n]:
            yield t
            if t in stop_ids:
                return


def _byte_tokenizer() -> tokenizers.Tokenizer:
    """One token per byte (byte-level BPE without merges): a multi-byte character spans tokens."""
    alphabet = sorted(tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok = tokenizers.Tokenizer(tokenizers.models.BPE({c: i for i, c in enumerate(alphabet)}, []))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    return tok


def test_streaming_never_splits_a_character_and_cuts_stops_across_tokens():
    tok = _byte_tokenizer()
    text = "héllo wörld, 日本 🙂 done"
    ids = tok.encode(text).ids
    assert len(ids) == len(text.encode())
    engine = Engine(_Scripted(ids), tok)
    pieces = list(engine.stream([0], 100))
    assert "".join(p.text for p in pieces) == text
    assert all("\ufffd" not in p.text for p in pieces)
    assert pieces[-1].finish_reason == "length" and pieces[-1].completion_tokens == len(ids)
    # a stop string that starts inside a character's bytes and ends tokens later
    pieces = list(engine.stream([0], 100, stop=["本 🙂"]))
    assert "".join(p.text for p in pieces) == "héllo wörld, 日"
    assert pieces[-1].finish_reason == "stop"
    # a prefix of a stop string that turns out not to be one is sent after all
    assert engine.complete([0], 100, stop=["wörm"])[0] == text
    # max_tokens cuts
    assert engine.complete([0], 3) == ("hé", "length", 3)


def test_end_of_text_ids_stop_and_are_not_shown():
    tok = _word_tokenizer()
    ids = tok.encode("the fox </s> cat", add_special_tokens=False).ids
    engine = Engine(_Scripted(ids), tok, special_tokens={"eos_token": "</s>"})
    assert engine.stop_ids == [EOS]
    assert engine.complete([1], 10) == ("the fox", "stop", 2)
    assert all(isinstance(p, Piece) for p in engine.stream([1], 10))


def test_fallback_chat_format_without_template():
    tok = _word_tokenizer()
    engine = Engine(_Scripted([]), tok)
    assert not engine.has_template
    assert engine.chat_prompt([{"role": "system", "content": "be brief"}, *user("hi")]) == \
        "System: be brief\nUser: hi\nAssistant:"
    assert "\nUser:" in engine.chat_stops


# ---- the command line -----------------------------------------------------------------------------------------------

def _run_cli(args: list[str], stdin: bytes) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    done = subprocess.run([sys.executable, "-m", "tinygrad.llm", *args], input=stdin, capture_output=True,
                          timeout=600, env=env)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    return done


def test_terminal_chat(model_dir, reference):
    first = user("the quick brown fox")
    done = _run_cli(["--model", str(model_dir), "--chat", "--temperature", "0", "--max-tokens", "6"],
                    b"the quick brown fox\na lazy dog\n/exit\nnever read\n")
    answers = done.stdout.decode().split("\n")
    a1, _, _ = greedy(reference, chat_ids(reference, first), 6)
    second = [*first, {"role": "assistant", "content": a1}, *user("a lazy dog")]
    a2, _, _ = greedy(reference, chat_ids(reference, second), 6)
    assert answers == [a1, a2, ""], answers  # the second turn saw the first; /exit ended before "never read"
    assert b"loaded" in done.stderr
    # end of input ends it too
    done = _run_cli(["--model", str(model_dir), "--chat", "--temperature", "0", "--max-tokens", "6"], b"hello\n")
    assert len(done.stdout.decode().split("\n")) == 2


def test_cli_refuses_what_it_cannot_load(tmp_path):
    done = subprocess.run([sys.executable, "-m", "tinygrad.llm", "--model", str(tmp_path / "nothing"), "--chat"],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and "does not exist" in done.stderr


def test_load_engine_picks_the_architecture(tmp_path, model_dir):
    torch.manual_seed(1)
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=VOCAB,
                                                                 n_positions=32, eos_token_id=None)).eval()
    gpt2.save_pretrained(tmp_path, safe_serialization=True)
    _word_tokenizer().save(str(tmp_path / "tokenizer.json"))
    engine = load_engine(tmp_path, name="g")
    assert type(engine.model).__name__ == "GPT2" and not engine.has_template and engine.max_context == 32
    ids = engine.encode("the fox")
    assert engine.complete(ids, 4, temperature=0.0)[0] == engine.decode(hf_greedy(gpt2, ids, 4))
    llama = load_engine(model_dir)
    assert type(llama.model).__name__ == "Llama" and llama.has_template and llama.name == model_dir.name


# ---- GGUF vocabularies ----------------------------------------------------------------------------------------------

CORPUS = [
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away!",
    "A small cat sat on the warm mat, and 12345 birds flew over 678 houses in 2024.",
    "Héllo wörld: café, naïve, über. 日本語のテキスト。 Emoji 🙂 too.",
    "def main():\n    print('hello world')\n    return 0\n\n\nclass Fox:\n    pass\n",
    "They're here, we'll see, it's done, I'd go, you've won, I'm fine.",
] * 20
SAMPLES = ["The quick brown fox, 12345!", "  leading spaces and\ttabs\nnew lines\n\n", "Héllo wörld 日本 🙂",
           "they're fine; it's 2024", "def fox():\n    return 'dog'", "zyxwvut QQQ unseen words"]
GGUF_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start|>", "<|end|>"]


def _train_byte_bpe(pattern: str | None, vocab_size: int = 400) -> tokenizers.Tokenizer:
    pt = tokenizers.pre_tokenizers
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    if pattern is None:  # GPT-2's split, built into ByteLevel
        tok.pre_tokenizer = pt.ByteLevel(add_prefix_space=False)
    else:
        tok.pre_tokenizer = pt.Sequence([pt.Split(tokenizers.Regex(pattern), behavior="isolated"),
                                         pt.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=GGUF_SPECIALS,
                                             initial_alphabet=pt.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def _byte_bpe_meta(tok: tokenizers.Tokenizer, pre: str) -> dict:
    model = json.loads(tok.to_str())["model"]
    tokens = [t for t, _ in sorted(tok.get_vocab().items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre, "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": [3 if t in GGUF_SPECIALS else 1 for t in tokens],
            "tokenizer.ggml.merges": merges, "tokenizer.ggml.bos_token_id": tok.token_to_id("<|begin_of_text|>"),
            "tokenizer.ggml.eos_token_id": tok.token_to_id("<|end|>"), "tokenizer.ggml.add_bos_token": True}


@pytest.mark.parametrize("pre, pattern", [("gpt-2", None), ("llama-bpe", LLAMA3_PATTERN)])
def test_gguf_byte_level_vocabulary_matches_its_tokenizer(pre, pattern):
    ref = _train_byte_bpe(pattern)
    tok = tokenizer_from_gguf(_byte_bpe_meta(ref, pre))
    bos = ref.token_to_id("<|begin_of_text|>")
    for s in SAMPLES + ["<|start|>user hi<|end|>"]:
        ids = ref.encode(s).ids
        assert tok.encode(s, add_special_tokens=False).ids == ids, s
        assert tok.encode(s).ids == [bos, *ids], s  # add_bos_token
        assert tok.decode(ids) == ref.decode(ids)
    assert tok.decode(tok.encode("Héllo 🙂").ids, skip_special_tokens=True) == "Héllo 🙂"


def _spm_meta() -> tuple[dict, tokenizers.Tokenizer]:
    """A SentencePiece-style vocabulary as llama.cpp stores it (control pieces, 256 byte pieces, then pieces with
    scores: later merges lower, single characters lowest), from a BPE trained on "▁"-marked words, and that BPE."""
    ref = tokenizers.SentencePieceBPETokenizer(add_prefix_space=True)
    ref.train_from_iterator(CORPUS, vocab_size=300, min_frequency=1, show_progress=False, special_tokens=[])
    merges = json.loads(ref._tokenizer.to_str())["model"]["merges"]
    rank = {("".join(m.split(" ")) if isinstance(m, str) else "".join(m)): i for i, m in enumerate(merges)}
    pieces = sorted(ref.get_vocab(), key=lambda p: ref.get_vocab()[p])
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    scores = [0.0] * len(tokens)
    for p in pieces:
        tokens.append(p)
        types.append(1)
        scores.append(-float(rank[p]) if p in rank else -1e6 - len(scores))
    meta = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.scores": scores,
            "tokenizer.ggml.token_type": types, "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
            "tokenizer.ggml.unknown_token_id": 0}
    return meta, ref


def test_gguf_sentencepiece_vocabulary():
    meta, ref = _spm_meta()
    tok = tokenizer_from_gguf(meta)
    tokens = meta["tokenizer.ggml.tokens"]
    for s in ["The quick brown fox jumps over the lazy dog.", "a small cat sat on the warm mat",
              "they run away, 12345 birds"]:
        ours = [tokens[i] for i in tok.encode(s, add_special_tokens=False).ids]
        assert ours == ref.encode(s).tokens, s  # the same pieces as the BPE the scores came from
        assert tok.decode(tok.encode(s).ids, skip_special_tokens=True) == s
    ids = tok.encode("fox")
    assert ids.ids[0] == 1 and tokens[ids.ids[1]].startswith("\u2581")  # BOS, then the prepended "▁"
    # a special token written in the text is matched, and the text after it gets a "▁" again, as in llama.cpp
    ids = tok.encode("fox</s>fox", add_special_tokens=False).ids
    assert tokens[ids[0]] == tokens[ids[-1]] == "\u2581fox" and tokens[ids[1]] == "</s>"
    # characters outside the vocabulary fall back to their UTF-8 bytes, and decode back
    ids = tok.encode("fox ✓", add_special_tokens=False).ids
    assert [tokens[i] for i in ids][-3:] == ["<0xE2>", "<0x9C>", "<0x93>"]
    assert tok.decode(ids) == "fox ✓"


def test_gguf_unsupported_vocabulary_is_refused():
    from tinygrad.llm.gguf_vocab import GGUFVocabError

    with pytest.raises(GGUFVocabError, match="bert"):
        tokenizer_from_gguf({"tokenizer.ggml.model": "bert", "tokenizer.ggml.tokens": ["a"]})
    with pytest.raises(GGUFVocabError, match="no vocabulary"):
        tokenizer_from_gguf({})


GGUF_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|start|>{{ m['role'] }}\n{{ m['content'] }}<|end|>"
                 "{% endfor %}{% if add_generation_prompt %}<|start|>assistant\n{% endif %}")


def test_gguf_model_chats_in_the_terminal(tmp_path):
    """A .gguf file alone: its weights, vocabulary and chat template; the answer is transformers' greedy one."""
    ref_tok = _train_byte_bpe(LLAMA3_PATTERN)
    meta = _byte_bpe_meta(ref_tok, "llama-bpe")
    hf = tiny_llama(len(meta["tokenizer.ggml.tokens"]), bos=BOS, seed=3)
    path = tmp_path / "tiny.gguf"
    write_gguf(path, hf, vocab=meta, chat_template=GGUF_TEMPLATE)
    prompt = "<|begin_of_text|><|start|>user\nthe quick fox<|end|><|start|>assistant\n"
    ids = ref_tok.encode(prompt).ids
    out = hf_greedy(hf, ids, 8)
    eos = meta["tokenizer.ggml.eos_token_id"]
    out = out[:out.index(eos)] if eos in out else out
    done = _run_cli(["--model", str(path), "--chat", "--temperature", "0", "--max-tokens", "8"],
                    b"the quick fox\n/exit\n")
    assert done.stdout.decode("utf-8") == ref_tok.decode(out) + "\n"
    engine = load_engine(path)
    assert engine.name == "tiny" and engine.has_template and engine.stop_ids == [eos]
