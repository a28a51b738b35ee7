"""tinygrad.llm's server with tools: tool calls in the Hermes/Qwen, Llama 3.1 and Mistral formats parsed into
OpenAI's `tool_calls` (whole and streamed), the tool's result rendered back into the prompt, reasoning_content from
<think> blocks, tool_choice, tool definitions a hostile client may send, the 503 of a full queue, and the CLI's
benchmark. A random model cannot be made to call a tool, so the model here is scripted: each generation emits the
next of the token sequences it was given, and it records the prompts it saw. The tokenizer is byte-level (any text
encodes) with the templates' markers as special tokens; the chat templates are small ones written here after the
structure of the published Qwen2.5, Llama 3.1 and Mistral templates. Servers listen on 127.0.0.1 and are stopped by
the tests.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

tokenizers = pytest.importorskip("tokenizers")
openai = pytest.importorskip("openai")
pytest.importorskip("jinja2")

from tinygrad.llm import Engine, serve  # noqa: E402
from tinygrad.llm.cli import benchmark, parse_args  # noqa: E402
from tinygrad.llm.tool_calls import OutputSplitter, call_format, parse_calls  # noqa: E402

SPECIALS = ["<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
            "<|eot_id|>", "<|eom_id|>", "<|python_tag|>", "<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]",
            "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"]

HERMES = """{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}You can call functions. Their signatures:
<tools>
{% for t in tools %}{{ t | tojson }}
{% endfor %}</tools>
To call one, answer with <tool_call>{"name": <name>, "arguments": <object>}</tool_call>.<|im_end|>
{% endif %}
{%- for m in messages %}
{%- if m.role == 'system' and tools %}
{%- elif m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant
{% if m.content %}{{ m.content }}
{% endif %}{% for c in m.tool_calls %}<tool_call>
{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}
</tool_call>{% endfor %}<|im_end|>
{% elif m.role == 'tool' %}<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

# a Qwen3-like template: Hermes calls, and <think> blocks dropped from earlier turns
THINKING = HERMES.replace("{{ m.content }}<|im_end|>", "{{ m.content.split('</think>')[-1] }}<|im_end|>")

LLAMA = """<|begin_of_text|>
{%- for m in messages %}
{%- if m.role == 'assistant' and m.tool_calls %}<|start_header_id|>assistant<|end_header_id|>

{% for c in m.tool_calls %}{"name": "{{ c.function.name }}", "parameters": {{ c.function.arguments | tojson }}}
{% endfor %}<|eot_id|>
{%- elif m.role == 'tool' %}<|start_header_id|>ipython<|end_header_id|>

{{ m.content }}<|eot_id|>
{%- elif m.role == 'user' and loop.last and tools is defined %}<|start_header_id|>user<|end_header_id|>

Answer with a function call as {"name": function name, "parameters": its arguments} or with <|python_tag|>.
{% for t in tools %}{{ t | tojson }}
{% endfor %}
{{ m.content }}<|eot_id|>
{%- else %}<|start_header_id|>{{ m.role }}<|end_header_id|>

{{ m.content }}<|eot_id|>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>

{% endif %}"""

MISTRAL = """<s>
{%- for m in messages %}
{%- if m.role == 'user' %}
{%- if loop.last and tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}
[INST]{{ m.content }}[/INST]
{%- elif m.role == 'assistant' and m.tool_calls %}[TOOL_CALLS][
{%- for c in m.tool_calls %}{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}, \
"id": "{{ c.id }}"}{% if not loop.last %}, {% endif %}{% endfor %}]</s>
{%- elif m.role == 'tool' %}[TOOL_RESULTS]{"content": {{ m.content | tojson }}, \
"call_id": "{{ m.tool_call_id }}"}[/TOOL_RESULTS]
{%- else %}{{ m.content }}</s>
{%- endif %}
{%- endfor %}"""

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The time in a city.",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
TIMEOUT = 60


def byte_tokenizer() -> Any:
    """One token per byte (byte-level BPE without merges), so any text can be scripted, and the markers as
    special tokens, which decoding drops unless the engine keeps them."""
    alphabet = sorted(tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok = tokenizers.Tokenizer(tokenizers.models.BPE({c: i for i, c in enumerate(alphabet)}, []))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    return tok


class Scripted:
    """A model with the interface the Engine calls: generation i emits the tokens of scripts[i] (the last one
    repeats), whatever the prompt; `prompts` holds each prompt it was given."""
    max_context = 4096
    eos_token_ids: list[int] = []

    def __init__(self, tok: Any, *scripts: str):
        self.tok, self.prompts = tok, []
        self.scripts = [tok.encode(s, add_special_tokens=False).ids for s in scripts]

    def generate(self, ids, n, temperature=0.0, top_k=0, top_p=1.0, stop_ids=()) -> Iterator[int]:
        self.prompts.append(self.tok.decode(list(ids), skip_special_tokens=False))
        script = self.scripts[min(len(self.prompts) - 1, len(self.scripts) - 1)]
        for t in script[:n]:
            yield t
            if t in stop_ids:
                return


class Served:
    def __init__(self, template: str, *scripts: str, **kwargs: Any):
        self.tok = byte_tokenizer()
        self.model = Scripted(self.tok, *scripts)
        stops = tuple(self.tok.token_to_id(t) for t in ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "</s>"))
        self.server = serve(self.model, self.tok, "127.0.0.1", 0, name="scripted", chat_template=template,
                            stop_ids=stops, **kwargs)
        self.client = openai.OpenAI(base_url=self.server.url + "v1", api_key="unused", max_retries=0,
                                    timeout=TIMEOUT)

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.stop()


def _stream(client: Any, **kwargs: Any) -> dict[str, Any]:
    """A streamed chat put together: content, reasoning, tool calls (by index) and the finish reason."""
    out: dict[str, Any] = {"content": "", "reasoning": "", "calls": {}, "finish": None, "chunks": 0}
    for chunk in client.chat.completions.create(model="scripted", stream=True, **kwargs):
        out["chunks"] += 1
        choice = chunk.choices[0]
        delta = choice.delta
        out["content"] += delta.content or ""
        out["reasoning"] += (delta.model_extra or {}).get("reasoning_content") or ""
        for c in delta.tool_calls or []:
            slot = out["calls"].setdefault(c.index, {"id": None, "name": "", "arguments": ""})
            slot["id"] = slot["id"] or c.id
            slot["name"] += (c.function.name or "") if c.function else ""
            slot["arguments"] += (c.function.arguments or "") if c.function else ""
        out["finish"] = choice.finish_reason or out["finish"]
    return out


def test_formats_are_read_from_the_templates():
    assert call_format(HERMES) == call_format(THINKING) == "hermes"
    assert call_format(LLAMA) == "llama"
    assert call_format(MISTRAL) == "mistral"
    assert call_format("{{ messages }}") is None and call_format(None) is None


def test_hermes_round_trip():
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'
    with Served(HERMES, call, "It is sunny in Paris.<|im_end|>") as s:
        r = s.client.chat.completions.create(model="scripted", messages=ASK, tools=[WEATHER, TIME])
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content is None
        (c,) = choice.message.tool_calls
        assert c.id.startswith("call_") and c.type == "function" and c.function.name == "get_weather"
        assert json.loads(c.function.arguments) == {"city": "Paris"}
        # the tools were rendered into the prompt by the template
        assert '"name": "get_weather"' in s.model.prompts[0] and '"name": "get_time"' in s.model.prompts[0]
        # the client runs the tool and sends its result back
        history = [*ASK, choice.message.model_dump(exclude_none=True),
                   {"role": "tool", "tool_call_id": c.id, "content": "sunny, 21 C"}]
        r = s.client.chat.completions.create(model="scripted", messages=history, tools=[WEATHER])
        assert r.choices[0].message.content == "It is sunny in Paris."
        assert r.choices[0].finish_reason == "stop" and not r.choices[0].message.tool_calls
        prompt = s.model.prompts[1]
        assert "<tool_response>\nsunny, 21 C\n</tool_response>" in prompt
        # the arguments, a JSON string on the wire, reach the template as an object (tojson renders it once)
        assert '{"name": "get_weather", "arguments": {"city": "Paris"}}' in prompt


def test_hermes_streaming_and_parallel_calls():
    text = ('Let me look. <tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>\n'
            '<tool_call>{"name": "get_time", "arguments": "{\\"city\\": \\"Oslo\\"}"}</tool_call><|im_end|>')
    with Served(HERMES, text) as s:
        got = _stream(s.client, messages=ASK, tools=[WEATHER, TIME])
        assert got["finish"] == "tool_calls"
        assert got["content"] == "Let me look. " and "<" not in got["content"]
        calls = [got["calls"][i] for i in sorted(got["calls"])]
        assert [c["name"] for c in calls] == ["get_weather", "get_time"]
        assert [json.loads(c["arguments"]) for c in calls] == [{"city": "Oslo"}] * 2
        assert all(c["id"].startswith("call_") for c in calls)
        # the same answer whole
        r = s.client.chat.completions.create(model="scripted", messages=ASK, tools=[WEATHER, TIME])
        assert r.choices[0].message.content == "Let me look. "
        assert [c.function.name for c in r.choices[0].message.tool_calls] == ["get_weather", "get_time"]


def test_llama_json_and_python_tag():
    bare = '{"name": "get_weather", "parameters": {"city": "Rome"}}<|eot_id|>'
    tagged = '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Lima"}}<|eom_id|>'
    with Served(LLAMA, bare, tagged, "Warm in Lima.<|eot_id|>") as s:
        r = s.client.chat.completions.create(model="scripted", messages=ASK, tools=[WEATHER])
        (c,) = r.choices[0].message.tool_calls
        assert (c.function.name, json.loads(c.function.arguments)) == ("get_weather", {"city": "Rome"})
        assert r.choices[0].finish_reason == "tool_calls"
        # <|python_tag|> is a special token, which the engine keeps so the call can be found
        got = _stream(s.client, messages=ASK, tools=[WEATHER])
        assert got["content"] == "" and got["finish"] == "tool_calls"
        assert json.loads(got["calls"][0]["arguments"]) == {"city": "Lima"}
        history = [*ASK, {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Lima"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "25 C"}]
        r = s.client.chat.completions.create(model="scripted", messages=history, tools=[WEATHER])
        assert r.choices[0].message.content == "Warm in Lima."
        assert "<|start_header_id|>ipython<|end_header_id|>\n\n25 C<|eot_id|>" in s.model.prompts[-1]
        assert '{"name": "get_weather", "parameters": {"city": "Lima"}}' in s.model.prompts[-1]
        # without tools, a JSON answer is just content
        plain = s.client.chat.completions.create(model="scripted", messages=ASK)
        assert plain.choices[0].message.content == "Warm in Lima." and not plain.choices[0].message.tool_calls


def test_mistral_calls_and_results():
    text = 'Checking. [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Bern"}}]</s>'
    with Served(MISTRAL, text, "Cold in Bern.</s>") as s:
        got = _stream(s.client, messages=ASK, tools=[WEATHER])
        assert got["content"] == "Checking. " and got["finish"] == "tool_calls"
        call = got["calls"][0]
        assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Bern"}
        assert '[AVAILABLE_TOOLS][{"type": "function"' in s.model.prompts[0]
        history = [*ASK, {"role": "assistant", "content": None, "tool_calls": [
            {"id": call["id"], "type": "function", "function": {"name": "get_weather",
                                                                "arguments": call["arguments"]}}]},
            {"role": "tool", "tool_call_id": call["id"], "content": "-3 C"}]
        r = s.client.chat.completions.create(model="scripted", messages=history, tools=[WEATHER])
        assert r.choices[0].message.content == "Cold in Bern."
        assert f'[TOOL_RESULTS]{{"content": "-3 C", "call_id": "{call["id"]}"}}[/TOOL_RESULTS]' in s.model.prompts[1]


def test_reasoning_content_whole_and_streamed():
    text = "<think>\nTwo and two make four.\n</think>\n\nThe answer is 4.<|im_end|>"
    with Served(THINKING, text) as s:
        msg = s.client.chat.completions.create(model="scripted", messages=ASK).choices[0].message
        assert msg.content == "The answer is 4."
        assert (msg.model_extra or {}).get("reasoning_content") == "Two and two make four."
        got = _stream(s.client, messages=ASK)
        assert (got["reasoning"], got["content"], got["finish"]) == ("Two and two make four.", "The answer is 4.",
                                                                     "stop")


def test_reasoning_then_a_call():
    text = ('<think>I need the weather.</think>'
            '<tool_call>{"name": "get_weather", "arguments": {"city": "Kyiv"}}</tool_call><|im_end|>')
    with Served(THINKING, text) as s:
        got = _stream(s.client, messages=ASK, tools=[WEATHER])
        assert got["reasoning"] == "I need the weather." and got["content"] == "" and got["finish"] == "tool_calls"


def test_splitter_holds_back_what_may_be_a_marker():
    sp = OutputSplitter("hermes", ["get_weather"], reasoning=True)
    assert sp.update("Hi <tool_").content == "Hi "
    assert sp.update("Hi <tool_x").content == "Hi <tool_x"
    assert sp.update("<thi").content == "" and sp.update("<think>ab</th").reasoning == "ab"
    # a prompt that opened the block already: everything up to </think> is reasoning
    sp = OutputSplitter(None, [], reasoning=True, thinking=True)
    assert (sp.finish("pondering</think>done").reasoning, sp.finish("pondering</think>done").content) == \
        ("pondering", "done")


@pytest.mark.parametrize("text", [
    '<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call>',  # bad JSON
    '<tool_call>{"name": "launch_rockets", "arguments": {}}</tool_call>',  # a tool not offered
    '<tool_call>{"name": "get_weather", "arguments": [1]}</tool_call>',  # arguments not an object
    '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call> and more words',  # text after the call
])
def test_malformed_calls_are_plain_content(text):
    with Served(HERMES, text + "<|im_end|>") as s:
        r = s.client.chat.completions.create(model="scripted", messages=ASK, tools=[WEATHER])
        assert r.choices[0].message.content == text and not r.choices[0].message.tool_calls
        assert r.choices[0].finish_reason == "stop"
        got = _stream(s.client, messages=ASK, tools=[WEATHER])
        assert got["content"] == text and not got["calls"] and got["finish"] == "stop"
    assert parse_calls("hermes", text, ["get_weather"]) is None


def test_tool_choice():
    with Served(HERMES, "No tool needed.<|im_end|>") as s:
        # "none": the template is given no tools
        r = s.client.chat.completions.create(model="scripted", messages=ASK, tools=[WEATHER], tool_choice="none")
        assert r.choices[0].message.content == "No tool needed." and "<tools>" not in s.model.prompts[-1]
        # "required" and a named function are checked: an answer without the call is a 422, never passed off
        for choice in ("required", {"type": "function", "function": {"name": "get_time"}}):
            with pytest.raises(openai.UnprocessableEntityError) as e:
                s.client.chat.completions.create(model="scripted", messages=ASK, tools=[WEATHER, TIME],
                                                 tool_choice=choice)
            assert e.value.body["code"] == "tool_call_missing"
        # the named function is the only one described
        assert '"get_time"' in s.model.prompts[-1] and '"get_weather"' not in s.model.prompts[-1]
        # streamed: nothing is sent before the check, then an error event instead of an answer
        with pytest.raises(openai.APIError, match="asks for a tool call"):
            _stream(s.client, messages=ASK, tools=[WEATHER], tool_choice="required")
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Nice"}}</tool_call><|im_end|>'
    with Served(HERMES, call) as s:
        r = s.client.chat.completions.create(model="scripted", messages=ASK, tools=[WEATHER], tool_choice="required")
        assert r.choices[0].message.tool_calls[0].function.name == "get_weather"


def test_stop_strings_still_cut_with_tools():
    with Served(HERMES, "one two three<|im_end|>") as s:
        r = s.client.chat.completions.create(model="scripted", messages=ASK, tools=[WEATHER], stop=[" three"])
        assert r.choices[0].message.content == "one two" and r.choices[0].finish_reason == "stop"


def _post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any], Any]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


FN = {"name": "f", "parameters": {"type": "object", "properties": {}}}
BAD_TOOLS: dict[str, Any] = {
    "not a list": ({"tools": {"type": "function"}}, "tools"),
    "not an object": ({"tools": ["f"]}, "tools[0].type"),
    "another kind": ({"tools": [{"type": "code_interpreter"}]}, "tools[0].type"),
    "no function": ({"tools": [{"type": "function"}]}, "tools[0].function"),
    "no name": ({"tools": [{"type": "function", "function": {"parameters": {}}}]}, "tools[0].function.name"),
    "a name with spaces": ({"tools": [{"type": "function", "function": {"name": "rm -rf /"}}]},
                           "tools[0].function.name"),
    "a name too long": ({"tools": [{"type": "function", "function": {"name": "x" * 65}}]}, "tools[0].function.name"),
    "twice": ({"tools": [{"type": "function", "function": FN}] * 2}, "tools[1].function.name"),
    "parameters not a schema": ({"tools": [{"type": "function", "function": {"name": "f", "parameters": [1]}}]},
                                "tools[0].function.parameters"),
    "parameters of a string": ({"tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "string"}}}]}, "tools[0].function.parameters"),
    "description a number": ({"tools": [{"type": "function", "function": {"name": "f", "description": 5}}]},
                             "tools[0].function.description"),
    "too many": ({"tools": [{"type": "function", "function": {"name": f"f{i}"}} for i in range(129)]}, "tools"),
    "choice unknown": ({"tools": [{"type": "function", "function": FN}], "tool_choice": "always"}, "tool_choice"),
    "choice names another": ({"tools": [{"type": "function", "function": FN}],
                              "tool_choice": {"type": "function", "function": {"name": "g"}}}, "tool_choice"),
    "required without tools": ({"tool_choice": "required"}, "tool_choice"),
    "legacy functions": ({"functions": [FN]}, "functions"),
    "call arguments not JSON": ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]},
        "messages[1].tool_calls[0].function.arguments"),
    "call without function": ({"messages": [{"role": "assistant", "tool_calls": [{"id": "a"}]}]},
                              "messages[0].tool_calls[0]"),
    "tool result without id": ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
    "calls on a user message": ({"messages": [{"role": "user", "content": "x", "tool_calls": []}]},
                                "messages[0].tool_calls"),
}


def test_hostile_tool_definitions_are_400():
    with Served(HERMES, "ok<|im_end|>") as s:
        for case, (fields, param) in BAD_TOOLS.items():
            status, _, body = _post(s.server.url + "v1/chat/completions", {"messages": ASK, **fields})
            assert status == 400, (case, body)
            assert body["error"]["param"] == param and body["error"]["message"], (case, body)
        # tools for a template without a known call format, and on /v1/completions
        status, _, body = _post(s.server.url + "v1/completions", {"prompt": "x", "tools": [WEATHER]})
        assert (status, body["error"]["param"]) == (400, "tools")
    with Served("{% for m in messages %}{{ m.content }}{% endfor %}", "ok") as s:
        status, _, body = _post(s.server.url + "v1/chat/completions", {"messages": ASK, "tools": [WEATHER]})
        assert (status, body["error"]["param"]) == (400, "tools")


def test_a_full_queue_answers_503_with_retry_after():
    with Served(HERMES, "fine<|im_end|>", max_queue=0) as s:
        url = s.server.url + "v1/chat/completions"
        results: list[Any] = []
        with s.server.engine.lock:  # the engine is busy: the next request waits for it
            waiting = threading.Thread(target=lambda: results.append(_post(url, {"messages": ASK})))
            waiting.start()
            deadline = time.monotonic() + TIMEOUT
            while s.server.pending < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert s.server.pending == 1
            status, headers, body = _post(url, {"messages": ASK})
            assert status == 503 and headers["Retry-After"] == "1" and body["error"]["code"] == "server_busy"
        waiting.join(TIMEOUT)
        assert results[0][0] == 200 and results[0][2]["choices"][0]["message"]["content"] == "fine"
        assert s.server.pending == 0 and _post(url, {"messages": ASK})[0] == 200


def test_benchmark_measures_prefill_and_decode():
    tok = byte_tokenizer()
    engine = Engine(Scripted(tok, "x" * 50), tok)
    prefill, decode = benchmark(engine, 16, 8)
    assert prefill > 0 and decode > 0
    with pytest.raises(ValueError, match="--benchmark-prompt"):
        benchmark(engine, 0, 8)
    with pytest.raises(ValueError, match="--benchmark-tokens"):
        benchmark(engine, 16, 1)
    args = parse_args(["--model", "m", "--benchmark", "--benchmark-prompt", "32", "--max-queue", "2"])
    assert args.benchmark and args.benchmark_prompt == 32 and args.max_queue == 2
