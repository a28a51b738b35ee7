"""Tool calls and reasoning read back out of generated text.

The chat template decides how a model writes a tool call; which way it is, is read from the template's text (the
markers it contains):

    hermes   <tool_call>{"name": ..., "arguments": {...}}</tool_call>, one block per call (Hermes, Qwen2.5, Qwen3)
    mistral  [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]
    llama    {"name": ..., "parameters": {...}} as the whole message, or after <|python_tag|> (Llama 3.1/3.2)

A template with `<think>` separates reasoning: the text inside <think>...</think> (or before </think> when the
generation prompt already opened the block, as DeepSeek-R1's and Qwen3's can) is the reasoning, the rest the answer.

`OutputSplitter` takes the text of a generation as it grows and says what may be sent: reasoning, content, and at
the end the tool calls. It holds back a tail that may be the start of a marker, and everything from a call's marker
on; a call that does not parse (bad JSON, an unknown tool, text after it) is given back as plain content.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["OutputSplitter", "Split", "call_format", "has_reasoning", "parse_calls"]

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
MISTRAL_OPEN = "[TOOL_CALLS]"
LLAMA_TAG = "<|python_tag|>"
# the marker text each format's calls start with; llama's calls may also start with a bare "{"
MARKERS = {"hermes": (HERMES_OPEN,), "mistral": (MISTRAL_OPEN,), "llama": (LLAMA_TAG,)}


def call_format(template: str | None) -> str | None:
    """The tool-call format a chat template teaches its model, from the markers in its text; None: not known."""
    if not template:
        return None
    if HERMES_OPEN in template:
        return "hermes"
    if MISTRAL_OPEN in template:
        return "mistral"
    # Llama 3.1's templates name the python tag, 3.2's only describe the JSON: both render tools with "parameters"
    if LLAMA_TAG in template or ("<|eot_id|>" in template and "tools" in template and "parameters" in template):
        return "llama"
    return None


def has_reasoning(template: str | None) -> bool:
    return bool(template) and THINK_CLOSE in str(template)


def marker_texts(fmt: str | None) -> tuple[str, ...]:
    return MARKERS.get(fmt or "", ())


def _new_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _call(obj: Any, arg_keys: Sequence[str], names: Collection[str]) -> dict[str, Any] | None:
    """One call in OpenAI's form from a parsed {"name", <arguments>} object, or None if it is not one."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or obj["name"] not in names:
        return None
    args: Any = next((obj[k] for k in arg_keys if k in obj), {})
    if isinstance(args, str):  # some models write the arguments as a JSON string already
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    return {"id": _new_id(), "type": "function",
            "function": {"name": obj["name"], "arguments": json.dumps(args, ensure_ascii=False)}}


def _json_values(text: str) -> list[Any] | None:
    """The JSON values in text, one after another (separated by whitespace or ';'), or None if anything else is
    there."""
    decoder, i = json.JSONDecoder(), 0
    out: list[Any] = []
    while True:
        while i < len(text) and (text[i].isspace() or text[i] == ";"):
            i += 1
        if i == len(text):
            return out
        try:
            value, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return None
        out.append(value)


def parse_calls(fmt: str, text: str, names: Collection[str]) -> list[dict[str, Any]] | None:
    """The tool calls in text (which starts at the format's marker, or for llama may be a bare JSON object), or
    None when it does not parse as calls to the tools named."""
    calls: list[dict[str, Any] | None] = []
    if fmt == "hermes":
        rest = text
        while rest.strip():
            rest = rest.lstrip()
            if not rest.startswith(HERMES_OPEN):
                return None
            body, closed, rest = rest[len(HERMES_OPEN):].partition(HERMES_CLOSE)
            if not closed and rest:
                return None
            values = _json_values(body)  # an unclosed last block (the model ended on its end token) is accepted
            if values is None or len(values) != 1:
                return None
            calls.append(_call(values[0], ("arguments", "parameters"), names))
    elif fmt == "mistral":
        values = _json_values(text.strip().removeprefix(MISTRAL_OPEN))
        if values is None or len(values) != 1 or not isinstance(values[0], list):
            return None
        calls = [_call(v, ("arguments", "parameters"), names) for v in values[0]]
    elif fmt == "llama":
        values = _json_values(text.strip().removeprefix(LLAMA_TAG))
        if values is None:
            return None
        for v in values:  # a list of calls is accepted too
            calls.extend(_call(x, ("parameters", "arguments"), names) for x in (v if isinstance(v, list) else [v]))
    else:
        return None
    if not calls or any(c is None for c in calls):
        return None
    return [c for c in calls if c is not None]


def _held(text: str, markers: Sequence[str]) -> int:
    """The length of the longest suffix of text that is the start of a marker (and may become one)."""
    hold = 0
    for m in markers:
        for k in range(min(len(m) - 1, len(text)), hold, -1):
            if text.endswith(m[:k]):
                hold = k
                break
    return hold


@dataclass
class Split:
    reasoning: str = ""
    content: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)


class OutputSplitter:
    """Splits a generation's text into reasoning, content and tool calls. `update(text)` with the whole text so far
    returns the reasoning and content that are safe to send (each a prefix of its final value); `finish(text)` the
    final split. fmt: call_format's answer (None: no tool calls parsed); names: the tools offered; reasoning: the
    template separates <think> blocks; thinking: the prompt ends inside an open <think> block."""

    def __init__(self, fmt: str | None, names: Collection[str], reasoning: bool = False, thinking: bool = False):
        self.fmt, self.names, self.reasoning, self.thinking = fmt if names else None, names, reasoning, thinking
        self.markers = marker_texts(self.fmt)

    def _think(self, text: str, final: bool) -> tuple[str, str | None, bool]:
        """(reasoning, the answer's text or None while still inside the block, whether to hold all as reasoning)"""
        if not self.reasoning:
            return "", text, False
        stripped = text.lstrip()
        opened = self.thinking or stripped.startswith(THINK_OPEN)
        if not opened:
            if not final and stripped and THINK_OPEN.startswith(stripped):
                return "", None, True  # may yet become "<think>"
            if not final and not stripped:
                return "", None, True  # leading whitespace before a possible "<think>"
            return "", text, False
        inner = stripped.removeprefix(THINK_OPEN) if stripped.startswith(THINK_OPEN) else text
        thought, closed, answer = inner.partition(THINK_CLOSE)
        if closed:
            return thought.strip(), answer.lstrip(), False
        if final:  # never closed: all of it was reasoning
            return thought.strip(), "", False
        return thought[:len(thought) - _held(thought, (THINK_CLOSE,))].strip(), None, False

    def update(self, text: str) -> Split:
        reasoning, answer, _ = self._think(text, final=False)
        if answer is None:
            return Split(reasoning)
        return Split(reasoning, self._content(answer, final=False))

    def _call_start(self, answer: str) -> int | None:
        hits = [i for m in self.markers if (i := answer.find(m)) >= 0]
        if self.fmt == "llama" and answer.lstrip().startswith(("{", "[")):
            hits.append(len(answer) - len(answer.lstrip()))
        return min(hits) if hits else None

    def _content(self, answer: str, final: bool) -> str:
        if self.fmt is None:
            return answer
        start = self._call_start(answer)
        if start is not None:
            return answer[:start]
        if self.fmt == "llama" and not answer.strip():
            return ""  # whitespace that may lead to a bare JSON call
        return answer if final else answer[:len(answer) - _held(answer, self.markers)]

    def finish(self, text: str) -> Split:
        reasoning, answer, _ = self._think(text, final=True)
        answer = answer or ""
        if self.fmt is not None and (start := self._call_start(answer)) is not None:
            calls = parse_calls(self.fmt, answer[start:], self.names)
            if calls is not None:
                return Split(reasoning, answer[:start], calls)
        return Split(reasoning, answer)
