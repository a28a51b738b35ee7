"""A request's JSON body, read as a hostile client may write it, and the OpenAI fields in it checked.

`parse_body` turns the bytes into a dict or raises ApiError(400): not UTF-8, not JSON, nested deeper than
MAX_JSON_DEPTH (found by a scan of the brackets before the parser, which recurses, sees them), a number with more
than MAX_INT_DIGITS digits in a row, NaN, Infinity or a float too large to hold, or a string with a lone surrogate (a
"\\ud800" escape: valid JSON, but no text). The field checks (`options`, `messages`, `prompt_ids`, `check_model`)
refuse a value of the wrong type or out of its range with a 400 naming the field in `param`; bools are never taken
for numbers. Fields this server ignores (penalties, logit_bias, user) are checked all the same, so that a client's
mistake is reported rather than passed over.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

__all__ = ["MAX_INT_DIGITS", "MAX_JSON_DEPTH", "ApiError", "Options", "check_model", "flag", "messages", "options",
           "parse_body", "prompt_ids", "show", "tool_choice", "tools"]

MAX_JSON_DEPTH = 64  # OpenAI's bodies nest a handful of levels; json's parser overflows the stack near 1000
MAX_INT_DIGITS = 32  # digits in a row in a number; a seed, the longest number asked for, has at most 20
MAX_TOKENS = 2 ** 31 - 1
MAX_STOPS = 16
MAX_STOP_CHARS = 256
ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_TOOLS = 128  # OpenAI's own limit on the tools of one request
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # OpenAI's rule for function names


class ApiError(Exception):
    """A request the server refuses: the HTTP status and OpenAI's error fields."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str | None = None, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.kind = kind or ("server_error" if status >= 500 else "invalid_request_error")
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


_shown = reprlib.Repr()
_shown.maxstring = _shown.maxother = _shown.maxlong = 40
_shown.maxlist = _shown.maxdict = 4
_shown.maxlevel = 2


def show(value: Any) -> str:
    """A value for an error message, cut short: the message must not echo a megabyte back."""
    return _shown.repr(value)


# ---- the body -------------------------------------------------------------------------------------------------------

# A JSON string, or an unterminated one running to the end of the text (so that every match attempt succeeds and the
# scan stays linear); possessive, so a failed tail never backtracks into the string.
_JSON_STRING = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP = tuple(1 if chr(c) in "[{" else -1 if chr(c) in "]}" else 0 for c in range(128))
_DIGITS_AS_ZEROS = str.maketrans("123456789", "000000000")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def json_skeleton(text: str) -> str:
    """text with each string replaced by a space: what is left are the brackets, numbers and literals."""
    return _JSON_STRING.sub(" ", text)


def json_depth(skeleton: str) -> int:
    """How deep a JSON text's arrays and objects nest, from its skeleton. Exact for valid JSON; for invalid JSON
    at least the depth json's parser reaches before it stops at the first fault."""
    brackets = _NOT_BRACKETS.sub("", skeleton).encode("ascii")
    return max(accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0)


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise ApiError(400, f"the number {show(literal)} is too large", code="invalid_number")
    return value


def _no_constant(name: str) -> Any:
    raise ApiError(400, f"{name} is not a JSON number; send a finite number", code="invalid_number")


def _find_surrogate(value: Any, where: str) -> str | None:
    """The path of the first string (or key) in value that holds a lone surrogate, or None."""
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return where or "body"
        return None
    if isinstance(value, list):
        for i, item in enumerate(value):
            if (found := _find_surrogate(item, f"{where}[{i}]")) is not None:
                return found
    elif isinstance(value, dict):
        for key, item in value.items():
            shown = key.encode("utf-8", "backslashreplace").decode("utf-8")  # a surrogate in a key, escaped
            name = f"{where}.{shown}" if where else shown
            if (found := _find_surrogate(key, name) or _find_surrogate(item, name)) is not None:
                return found
    return None


def parse_body(raw: bytes) -> dict[str, Any]:
    """The JSON object in raw, or ApiError(400) saying what is wrong with it."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ApiError(400, f"the body is not valid UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start}); send JSON "
                            f"encoded as UTF-8", code="invalid_encoding") from None
    # both checked before json.loads: it recurses once per level, and int() of thousands of digits is slow (past
    # 4300 it raises)
    skeleton = json_skeleton(text)
    if json_depth(skeleton) > MAX_JSON_DEPTH:
        raise ApiError(400, f"the body nests arrays and objects more than {MAX_JSON_DEPTH} levels deep",
                       code="invalid_json")
    # a substring search over the digits made alike, where a regex would try a match at every digit
    if "0" * (MAX_INT_DIGITS + 1) in skeleton.translate(_DIGITS_AS_ZEROS):
        raise ApiError(400, f"the body holds a number of more than {MAX_INT_DIGITS} digits; send numbers in range",
                       code="invalid_number")
    try:
        body = json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)
    except (json.JSONDecodeError, RecursionError, ValueError) as e:
        raise ApiError(400, f"the body is not valid JSON: {e}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object", code="invalid_json")
    # a lone surrogate can only come from a \uD8xx-\uDFxx escape, so bodies without one skip the walk
    if _SURROGATE_ESCAPE.search(text) and (where := _find_surrogate(body, "")) is not None:
        raise ApiError(400, f"{where} holds a lone UTF-16 surrogate (an unpaired \\ud800-\\udfff escape), which is "
                            f"not text", where, "invalid_text")
    return body


# ---- fields ---------------------------------------------------------------------------------------------------------

def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(body: Mapping[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    v = body.get(key)
    if v is None:
        return default
    if not (_is_int(v) or isinstance(v, float)) or not lo <= v <= hi:
        raise ApiError(400, f"'{key}' must be a number from {lo} to {hi}, got {show(v)}", key)
    return float(v)


def _integer(body: Mapping[str, Any], key: str, lo: int, hi: int) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if not _is_int(v) or not lo <= v <= hi:
        raise ApiError(400, f"'{key}' must be an integer from {lo} to {hi}, got {show(v)}", key)
    return int(v)


def flag(body: Mapping[str, Any], key: str) -> bool:
    v = body.get(key)
    if v is not None and not isinstance(v, bool):
        raise ApiError(400, f"'{key}' must be true or false, got {show(v)}", key)
    return bool(v)


def _string(body: Mapping[str, Any], key: str) -> str | None:
    v = body.get(key)
    if v is not None and not isinstance(v, str):
        raise ApiError(400, f"'{key}' must be a string, got {show(v)}", key)
    return v


def _stops(body: Mapping[str, Any]) -> list[str]:
    v = body.get("stop")
    if v is None:
        return []
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise ApiError(400, "'stop' must be a string or a list of strings", "stop")
    if len(items) > MAX_STOPS or any(len(s) > MAX_STOP_CHARS for s in items):
        raise ApiError(400, f"'stop' takes at most {MAX_STOPS} strings of at most {MAX_STOP_CHARS} characters",
                       "stop")
    return [s for s in items if s]


def _ignored(body: Mapping[str, Any]) -> None:
    """Options that only tilt sampling, which this server does not do: their values are checked, then ignored."""
    for key in ("presence_penalty", "frequency_penalty"):
        _number(body, key, 0.0, -2.0, 2.0)
    bias = body.get("logit_bias")
    if bias is not None:
        if not isinstance(bias, dict) or not all((_is_int(b) or isinstance(b, float)) and -100 <= b <= 100
                                                 for b in bias.values()):
            raise ApiError(400, "'logit_bias' must be an object of token ids to numbers from -100 to 100",
                           "logit_bias")
    _string(body, "user")
    flag(body, "parallel_tool_calls")


def _unsupported(body: Mapping[str, Any]) -> None:
    """Options that change what an answer is: refused, since ignoring them would return something else."""
    for key in ("n", "best_of"):
        if (count := _integer(body, key, 1, 128)) not in (None, 1):
            raise ApiError(400, f"only {key}=1 is supported (one answer per request), got {count}", key)
    logprobs = body.get("logprobs")
    if logprobs is not None and logprobs is not False:
        raise ApiError(400, "logprobs are not supported by this server", "logprobs")
    if _integer(body, "top_logprobs", 0, 20):
        raise ApiError(400, "logprobs are not supported by this server", "top_logprobs")
    for key in ("functions", "function_call"):
        if body.get(key) is not None:
            raise ApiError(400, f"'{key}' (OpenAI's deprecated function calling) is not supported; send 'tools' and "
                                f"'tool_choice' instead", key)
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, Mapping) and fmt.get("type") == "text"):
        raise ApiError(400, "only response_format {\"type\": \"text\"} is supported", "response_format")
    if _string(body, "suffix"):
        raise ApiError(400, "'suffix' (insertion) is not supported by this server", "suffix")


@dataclass
class Options:
    max_tokens: int | None
    temperature: float
    top_p: float
    top_k: int
    stop: list[str]
    seed: int | None
    stream: bool
    include_usage: bool
    extra_stops: list[str] = field(default_factory=list)

    def sampling(self) -> dict[str, Any]:
        greedy = self.temperature == 0 or self.top_p == 0
        return {"temperature": 0.0 if greedy else self.temperature, "top_p": 1.0 if greedy else self.top_p,
                "top_k": self.top_k, "seed": self.seed, "stop": self.stop + self.extra_stops}


def options(body: Mapping[str, Any], max_keys: tuple[str, ...], vocab_size: int) -> Options:
    """The generation options of a request; max_keys: the names its token budget may go by, in order of
    precedence."""
    _unsupported(body)
    _ignored(body)
    max_tokens = None
    for key in max_keys:
        if (value := _integer(body, key, 0, MAX_TOKENS)) is not None:
            max_tokens = value
            break
    stream = flag(body, "stream")
    so = body.get("stream_options")
    if so is not None and not isinstance(so, Mapping):
        raise ApiError(400, "'stream_options' must be an object", "stream_options")
    include_usage = (so or {}).get("include_usage")
    if include_usage is not None and not isinstance(include_usage, bool):
        raise ApiError(400, f"'stream_options.include_usage' must be true or false, got {show(include_usage)}",
                       "stream_options.include_usage")
    seed = _integer(body, "seed", -(2 ** 63), 2 ** 64 - 1)
    top_k = _integer(body, "top_k", 0, MAX_TOKENS) or 0
    return Options(max_tokens=max_tokens,
                   temperature=round(_number(body, "temperature", 1.0, 0.0, 2.0), 2),
                   top_p=round(_number(body, "top_p", 1.0, 0.0, 1.0), 2),
                   # keeping the whole vocabulary is no limit at all: one compiled sampler for all such values
                   top_k=0 if top_k >= vocab_size else top_k, stop=_stops(body), seed=seed, stream=stream,
                   include_usage=bool(include_usage))


def check_model(body: Mapping[str, Any], served: str) -> None:
    name = _string(body, "model")
    if name is not None and name != served:
        raise ApiError(404, f"the model {show(name)} does not exist; this server serves {served!r}", "model",
                       "model_not_found")


def _content(value: Any, where: str) -> str:
    """A message's content: a string, null, or OpenAI's list of parts (text parts only)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for i, part in enumerate(value):
            if not isinstance(part, Mapping) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ApiError(400, f"{where}.content[{i}] must be a text part {{\"type\": \"text\", \"text\": ...}}; "
                                    f"this server takes text only", f"{where}.content")
            texts.append(part["text"])
        return "".join(texts)
    raise ApiError(400, f"{where}.content must be a string or a list of text parts, got {show(value)}",
                   f"{where}.content")


def messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A chat's messages as the chat template takes them: role ("developer" as "system"), content, and name."""
    msgs = body.get("messages")
    if msgs is None:
        raise ApiError(400, "'messages' is required: a list of {\"role\", \"content\"} objects", "messages")
    if not isinstance(msgs, list) or not msgs:
        raise ApiError(400, "'messages' must be a non-empty list of {\"role\", \"content\"} objects", "messages")
    out = []
    for i, m in enumerate(msgs):
        where = f"messages[{i}]"
        if not isinstance(m, Mapping):
            raise ApiError(400, f"{where} must be an object with 'role' and 'content', got {show(m)}", where)
        role = m.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise ApiError(400, f"{where}.role must be one of {list(ROLES)}, got {show(role)}", f"{where}.role")
        # "developer" is OpenAI's newer name for the system role, which chat templates know as "system"
        msg: dict[str, Any] = {"role": "system" if role == "developer" else role,
                               "content": _content(m.get("content"), where)}
        name = m.get("name")
        if name is not None and not isinstance(name, str):
            raise ApiError(400, f"{where}.name must be a string, got {show(name)}", f"{where}.name")
        if name is not None:
            msg["name"] = name
        if role == "tool":
            call_id = m.get("tool_call_id")
            if not isinstance(call_id, str):
                raise ApiError(400, f"{where}.tool_call_id must be the id (a string) of the tool call this message "
                                    f"answers", f"{where}.tool_call_id")
            msg["tool_call_id"] = call_id
        calls = m.get("tool_calls")
        if calls is not None:
            if role != "assistant":
                raise ApiError(400, f"{where}.tool_calls: only assistant messages carry tool calls",
                               f"{where}.tool_calls")
            msg["tool_calls"] = _tool_calls(calls, f"{where}.tool_calls")
        out.append(msg)
    return out


def _tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    """An assistant message's tool calls, for the chat template: OpenAI's form, with each call's arguments (a JSON
    string on the wire) parsed into an object, which is what chat templates render (transformers documents
    arguments as a dict; templates apply tojson to them)."""
    if not isinstance(calls, list):
        raise ApiError(400, f"{where} must be a list of tool calls", where)
    out = []
    for i, c in enumerate(calls):
        at = f"{where}[{i}]"
        fn = c.get("function") if isinstance(c, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise ApiError(400, f"{at} must be {{\"id\", \"type\": \"function\", \"function\": {{\"name\", "
                                f"\"arguments\"}}}}, got {show(c)}", at)
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError as e:
                raise ApiError(400, f"{at}.function.arguments is not valid JSON ({e}); send the arguments as a JSON "
                                    f"object in a string", f"{at}.function.arguments") from None
        if not isinstance(args, dict):
            raise ApiError(400, f"{at}.function.arguments must be a JSON object, got {show(args)}",
                           f"{at}.function.arguments")
        call_id = c.get("id")
        if call_id is not None and not isinstance(call_id, str):
            raise ApiError(400, f"{at}.id must be a string", f"{at}.id")
        out.append({"id": call_id or f"call_{i}", "type": "function",
                    "function": {"name": fn["name"], "arguments": args}})
    return out


def tools(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The function tools offered ([] for none), checked: each {"type": "function", "function": {"name",
    "description"?, "parameters"? (a JSON schema of type object), "strict"?}}, names unique."""
    v = body.get("tools")
    if v is None:
        return []
    if not isinstance(v, list):
        raise ApiError(400, "'tools' must be a list of {\"type\": \"function\", \"function\": {...}} objects",
                       "tools")
    if len(v) > MAX_TOOLS:
        raise ApiError(400, f"'tools' holds {len(v)} tools; at most {MAX_TOOLS} are taken", "tools")
    out, seen = [], set()
    for i, t in enumerate(v):
        where = f"tools[{i}]"
        if not isinstance(t, Mapping) or t.get("type") != "function":
            raise ApiError(400, f"{where} must be an object with \"type\": \"function\" (the only kind of tool "
                                f"this server calls), got {show(t)}", f"{where}.type")
        fn = t.get("function")
        if not isinstance(fn, Mapping):
            raise ApiError(400, f"{where}.function must be an object with 'name', 'description' and 'parameters'",
                           f"{where}.function")
        name = fn.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
            raise ApiError(400, f"{where}.function.name must be 1 to 64 letters, digits, '_' or '-', got "
                                f"{show(name)}", f"{where}.function.name")
        if name in seen:
            raise ApiError(400, f"{where}.function.name {name!r} is offered twice; tool names must be unique",
                           f"{where}.function.name")
        seen.add(name)
        desc = fn.get("description")
        if desc is not None and not isinstance(desc, str):
            raise ApiError(400, f"{where}.function.description must be a string", f"{where}.function.description")
        params = fn.get("parameters")
        if params is not None and not (isinstance(params, Mapping) and params.get("type", "object") == "object"):
            raise ApiError(400, f"{where}.function.parameters must be a JSON schema of an object ({{\"type\": "
                                f"\"object\", \"properties\": {{...}}}}), got {show(params)}",
                           f"{where}.function.parameters")
        if params is not None and "properties" in params and not isinstance(params["properties"], Mapping):
            raise ApiError(400, f"{where}.function.parameters.properties must be an object",
                           f"{where}.function.parameters")
        strict = fn.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise ApiError(400, f"{where}.function.strict must be true or false", f"{where}.function.strict")
        function: dict[str, Any] = {"name": name}
        if desc is not None:
            function["description"] = desc
        function["parameters"] = dict(params) if params is not None else {"type": "object", "properties": {}}
        out.append({"type": "function", "function": function})
    return out


def tool_choice(body: Mapping[str, Any], offered: list[dict[str, Any]]) -> str:
    """"none", "auto", "required", or the name of the one function the model must call."""
    v = body.get("tool_choice")
    if v is None:
        return "auto" if offered else "none"
    if isinstance(v, str):
        if v not in ("none", "auto", "required"):
            raise ApiError(400, f"'tool_choice' must be \"none\", \"auto\", \"required\" or {{\"type\": "
                                f"\"function\", \"function\": {{\"name\": ...}}}}, got {show(v)}", "tool_choice")
        choice = v
    else:
        fn = v.get("function") if isinstance(v, Mapping) and v.get("type") == "function" else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise ApiError(400, f"'tool_choice' must be \"none\", \"auto\", \"required\" or {{\"type\": "
                                f"\"function\", \"function\": {{\"name\": ...}}}}, got {show(v)}", "tool_choice")
        choice = fn["name"]
        if choice not in {t["function"]["name"] for t in offered}:
            raise ApiError(400, f"'tool_choice' names the function {show(choice)}, which is not among 'tools'",
                           "tool_choice")
    if choice not in ("none", "auto") and not offered:
        raise ApiError(400, f"'tool_choice' {show(choice)} needs 'tools' to call", "tool_choice")
    return choice


def prompt_ids(body: Mapping[str, Any], vocab_size: int) -> list[int] | str:
    """/v1/completions' prompt: its text, or its token ids (checked against the vocabulary); a string, a list of one
    string, or token ids (a list of them, or a list of one such list)."""
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]  # a batch of one
    if isinstance(p, str):
        return p
    if isinstance(p, list) and p and all(_is_int(t) for t in p):
        if any(not 0 <= t < vocab_size for t in p):
            raise ApiError(400, f"'prompt' holds token ids outside the vocabulary of {vocab_size}", "prompt")
        return [int(t) for t in p]
    if p is None:
        raise ApiError(400, "'prompt' is required: a string (or a list of token ids)", "prompt")
    raise ApiError(400, "'prompt' must be a string, a list of one string, or a list of token ids (one prompt per "
                        "request)", "prompt")
