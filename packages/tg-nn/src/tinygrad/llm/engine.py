"""A model and its tokenizer put together for serving: prompts from chat messages (the checkpoint's chat template),
text completions streamed as text pieces with stop strings, and one generation at a time.

Streaming text from token ids. After each new token the whole completion is decoded again and the text past what
was already sent goes out, except for a tail that is held back: trailing U+FFFD (a byte-level or byte-fallback
token can end in the middle of a UTF-8 character, which the next token completes) and any suffix that is the start
of a stop string (it may turn into one, and a stop string is never sent). So the pieces joined are exactly the
final text, however the tokens cut it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tinygrad import Tensor
from tinygrad.llm.tool_calls import THINK_CLOSE, THINK_OPEN, call_format, has_reasoning, marker_texts

__all__ = ["ChatTemplateError", "Engine", "Piece"]

# for checkpoints without a chat template: plain role-prefixed turns ("User: hi\nAssistant:"), which base models
# continue reasonably; FALLBACK_STOPS ends the answer where the model starts writing the next turn itself
FALLBACK_STOPS = ("\nUser:", "\nSystem:")
MAX_DECODERS = 8  # jitted decode steps kept on the model (each temperature/top_p pair compiles one)


class ChatTemplateError(ValueError):
    """The chat template refused the messages (its raise_exception), or failed to render them."""


@dataclass
class Piece:
    """A stretch of generated text. The last piece of a generation has finish_reason set ("stop": an end-of-text
    token or a stop string; "length": max_tokens or the end of the context) and the number of tokens generated."""
    text: str
    finish_reason: str | None = None
    completion_tokens: int = 0


def _special_content(value: Any) -> str | None:
    """A special token from tokenizer_config.json: a string, or (older files) a dict with its "content"."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


class Engine:
    """Serves one model: `chat_prompt` turns messages into text, `encode` text into ids, `stream` generates.

    model: a tinygrad.nn.transformer model (GPT2, Llama), or anything with `generate(ids, max_new_tokens,
    temperature, top_k, top_p, stop_ids)`, `max_context` and `eos_token_ids`. tokenizer: a `tokenizers.Tokenizer`.
    chat_template: a Jinja template as in tokenizer_config.json (None: role-prefixed turns, see FALLBACK_STOPS).
    special_tokens: the template's variables such as bos_token and eos_token. stop_ids: end-of-text ids besides
    the model's own."""

    def __init__(self, model: Any, tokenizer: Any, name: str = "model", chat_template: str | None = None,
                 special_tokens: Mapping[str, Any] | None = None, stop_ids: Iterable[int] = ()):
        if tokenizer is None:
            raise ValueError("serving text needs a tokenizer (a tokenizer.json, or the vocabulary of a GGUF file)")
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.max_context = int(model.max_context)
        self.special_tokens = {k: c for k, v in (special_tokens or {}).items() if (c := _special_content(v))}
        ids = set(getattr(model, "eos_token_ids", []) or []) | {int(i) for i in stop_ids}
        eos = self.special_tokens.get("eos_token")
        if eos is not None and (eos_id := tokenizer.token_to_id(eos)) is not None:
            ids.add(int(eos_id))
        self.stop_ids = sorted(ids)
        self.has_template = chat_template is not None
        #: stop strings every chat answer gets (the fallback template's turn starts; none with a real template)
        self.chat_stops: tuple[str, ...] = () if self.has_template else FALLBACK_STOPS
        self._template = _compile_template(chat_template) if chat_template is not None else None
        #: how the template's model writes tool calls (tool_calls.call_format) and whether it separates <think>
        self.call_format = call_format(chat_template)
        self.reasoning = has_reasoning(chat_template)
        # markers the answer is split at that some tokenizers hold as special tokens, which decoding would drop
        markers = marker_texts(self.call_format) + ((THINK_OPEN, THINK_CLOSE) if self.reasoning else ())
        self._kept: dict[int, str] = {}
        for text in markers:
            mid = tokenizer.token_to_id(text)
            if mid is not None and tokenizer.decode([mid], skip_special_tokens=True) != text:
                self._kept[int(mid)] = text
        # the model's KV caches and the sampler's seed are global to it: one generation at a time
        self.lock = threading.Lock()

    # -- prompts --
    def chat_prompt(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None
                    ) -> str:
        """The text of a chat, ending where the assistant's answer starts (add_generation_prompt=True). tools: the
        function tools offered, in OpenAI's form, given to the template as its `tools` variable (as transformers'
        apply_chat_template does); None: the variable is left undefined, as templates test it with `is defined`."""
        if tools and self._template is None:
            raise ChatTemplateError("this model has no chat template, so tools cannot be described to it; serve it "
                                    "with a chat template that renders `tools`")
        if self._template is None:
            turns = "".join(f"{str(m['role']).capitalize()}: {m['content']}\n" for m in messages)
            return turns + "Assistant:"
        from jinja2 import TemplateError

        variables: dict[str, Any] = {"bos_token": "", "eos_token": "", **self.special_tokens}
        try:
            if tools:
                variables["tools"] = [dict(t) for t in tools]
            return str(self._template.render(messages=list(messages), add_generation_prompt=True, **variables))
        except TemplateError as e:
            raise ChatTemplateError(f"the chat template refused these messages: {e}") from e

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of text. A rendered chat template already holds its special tokens (the BOS among them),
        so encode it with add_special_tokens=False, as transformers' apply_chat_template does."""
        return [int(i) for i in self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ids without special tokens, except the reasoning and tool-call markers the answer is split at
        (decoded between the runs of other tokens, which are decoded as usual)."""
        if not self._kept or not any(i in self._kept for i in ids):
            return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))
        out: list[str] = []
        run: list[int] = []
        for i in ids:
            if i in self._kept:
                out.append(str(self.tokenizer.decode(run, skip_special_tokens=True)) if run else "")
                out.append(self._kept[i])
                run = []
            else:
                run.append(i)
        out.append(str(self.tokenizer.decode(run, skip_special_tokens=True)) if run else "")
        return "".join(out)

    # -- generation --
    def stream(self, prompt_ids: Sequence[int], max_tokens: int, temperature: float = 1.0, top_p: float = 1.0,
               stop: Sequence[str] = (), seed: int | None = None, top_k: int = 0) -> Generator[Piece, None, None]:
        """Generate after prompt_ids, as text pieces; the last one carries the finish reason. Holds the engine's
        lock from the first piece asked for until the iterator ends or is closed. At most max_tokens tokens, and
        no more than the context has room for after the prompt (the model would otherwise shift its context)."""
        budget = max(0, min(max_tokens, self.max_context - len(prompt_ids)))
        stops = [s for s in dict.fromkeys(stop) if s]
        with self.lock:
            if seed is not None:
                Tensor.manual_seed(seed)
            _bound_decoders(self.model)
            ids: list[int] = []
            sent, finish = 0, "length"
            text = ""
            gen = self.model.generate(list(prompt_ids), budget, temperature, top_k, top_p, self.stop_ids)
            try:
                for token in gen:
                    if token in self.stop_ids:
                        finish = "stop"
                        break
                    ids.append(int(token))
                    text = self.decode(ids)
                    cut = _find_stop(text, stops, sent)
                    if cut is not None:
                        text, finish = text[:cut], "stop"
                        break
                    safe = _safe_end(text, stops)
                    if safe > sent:
                        yield Piece(text[sent:safe])
                        sent = safe
            finally:
                close = getattr(gen, "close", None)
                if close is not None:
                    close()
            yield Piece(text[sent:], finish, len(ids))

    def complete(self, prompt_ids: Sequence[int], max_tokens: int, **kwargs: Any) -> tuple[str, str, int]:
        """(text, finish_reason, completion_tokens) of a whole generation; see `stream` for the arguments."""
        pieces = list(self.stream(prompt_ids, max_tokens, **kwargs))
        return "".join(p.text for p in pieces), pieces[-1].finish_reason or "length", pieces[-1].completion_tokens


def _find_stop(text: str, stops: Sequence[str], sent: int) -> int | None:
    """Where the first stop string in text starts, or None. A stop string can only begin in the unsent text (a
    sent tail never was the start of one), but look back a stop's length in case decoding changed earlier text."""
    if not stops:
        return None
    start = max(0, sent - max(len(s) for s in stops))
    hits = [i for s in stops if (i := text.find(s, start)) >= 0]
    return max(min(hits), sent) if hits else None


def _safe_end(text: str, stops: Sequence[str]) -> int:
    """How much of text can be sent: all but a trailing U+FFFD run and the longest suffix that starts a stop."""
    end, hold = len(text.rstrip("\ufffd")), 0
    for s in stops:
        for k in range(min(len(s) - 1, end), hold, -1):
            if text.endswith(s[:k], 0, end):
                hold = k
                break
    return end - hold


def _bound_decoders(model: Any) -> None:
    """Keep the model's jitted decode steps (one per batch size and sampling setting, each holding compiled
    kernels) from growing without bound as requests ask for ever new temperatures: past MAX_DECODERS the
    cache is emptied and steps compile again when next used."""
    decoders = getattr(model, "_decoders", None)
    if isinstance(decoders, dict) and len(decoders) >= MAX_DECODERS:
        decoders.clear()


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # transformers' tojson: plain json.dumps (jinja2's own escapes <, > and & for HTML, which would change prompts)
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    from jinja2 import TemplateError

    raise TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _compile_template(source: str) -> Any:
    """A chat template compiled the way transformers does: a sandbox (the template comes with a downloaded
    checkpoint, so it must not reach Python objects), trim_blocks/lstrip_blocks, loop controls, and the helpers
    templates expect (raise_exception, strftime_now, a JSON tojson)."""
    try:
        from jinja2 import TemplateSyntaxError
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as e:
        raise ImportError("rendering chat templates needs jinja2: pip install jinja2") from e
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(source)
    except TemplateSyntaxError as e:
        raise ChatTemplateError(f"the chat template does not compile: {e}") from e
