"""An OpenAI-compatible HTTP API over one model, with the standard library's http.server.

    GET  /                       the chat page (static/chat.html; `/?q=hello` sends "hello" when it opens)
    GET  /v1/models              the one model served, as a list; /v1/models/{id} that model
    POST /v1/chat/completions    messages -> the checkpoint's chat template -> an answer
    POST /v1/completions         a prompt (text, or token ids) -> its continuation
    GET  /health                 {"status": "ok"}

Both POST routes take `max_tokens` (chat: also `max_completion_tokens`), `temperature` (0..2, default 1; 0 is
greedy), `top_p`, `top_k` (an extension; 0 = off), `stop` (a string or a list), `seed`, `stream` (server-sent
events: `data: {chunk}` ... `data: [DONE]`, with `stream_options.include_usage` for a last usage chunk) and answer
with `usage` token counts and finish_reason "stop" (an end-of-text token or a stop string, which is cut from the
text) or "length" (max_tokens, or the end of the context). Temperature and top_p are rounded to 0.01: the decode
step is compiled for each pair used. Options this server cannot honour (n > 1, logprobs, tools, a response_format
other than text) get a 400 rather than being ignored; penalties and logit_bias are ignored.

Requests are served on threads (at most MAX_THREADS at once, more wait to be accepted) but generate one at a time:
the model's KV caches and its sampler's seed are shared, so the others wait for the engine's lock, in turn.
Errors are JSON as OpenAI's, {"error": {"message", "type", "param", "code"}}: a 4xx for a request that cannot be
served (checked before anything is generated), a 500 when generation itself fails (in a stream that has started:
an error event, then [DONE]). A failing request never takes the server down.

Safety for a local server: POST bodies must be application/json (so a web page elsewhere cannot post to it without
a CORS preflight, which this server never grants) and at most max_body bytes; when bound to a loopback address,
the Host header must name a loopback host too (a page cannot reach it through a DNS name rebound to 127.0.0.1).
There is no authentication: bind another interface (--host) only on a network you trust.
"""

from __future__ import annotations

import http.server
import ipaddress
import json
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from tinygrad.llm.engine import ChatTemplateError, Engine, Piece
from tinygrad.localserver import BackgroundServer, BoundedHTTPServer

__all__ = ["MAX_BODY", "ApiError", "LLMServer", "serve"]

MAX_BODY = 1 << 20  # bytes of JSON in a request: room for long chats, and a bound on what a request makes us hold
MAX_THREADS = 16
REQUEST_TIMEOUT = 60.0  # seconds a socket read or write may stall before the connection is dropped
MAX_STOPS = 16
MAX_STOP_CHARS = 256
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


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


# ---- request fields -------------------------------------------------------------------------------------------------

def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(body: Mapping[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    v = body.get(key)
    if v is None:
        return default
    if not (_is_int(v) or isinstance(v, float)) or not lo <= v <= hi:
        raise ApiError(400, f"'{key}' must be a number from {lo} to {hi}, got {v!r}", key)
    return float(v)


def _integer(body: Mapping[str, Any], key: str, lo: int, hi: int | None = None) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if not _is_int(v) or v < lo or (hi is not None and v > hi):
        bound = f"from {lo} to {hi}" if hi is not None else f">= {lo}"
        raise ApiError(400, f"'{key}' must be an integer {bound}, got {v!r}", key)
    return int(v)


def _flag(body: Mapping[str, Any], key: str) -> bool:
    v = body.get(key)
    if v is not None and not isinstance(v, bool):
        raise ApiError(400, f"'{key}' must be true or false, got {v!r}", key)
    return bool(v)


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


def _unsupported(body: Mapping[str, Any]) -> None:
    """Options that change what an answer is: refused, since ignoring them would return something else."""
    if body.get("n") not in (None, 1):
        raise ApiError(400, "only n=1 is supported (one answer per request)", "n")
    if body.get("best_of") not in (None, 1):
        raise ApiError(400, "only best_of=1 is supported", "best_of")
    if body.get("logprobs") not in (None, False):
        raise ApiError(400, "logprobs are not supported by this server", "logprobs")
    for key in ("tools", "functions"):
        if body.get(key):
            raise ApiError(400, f"'{key}' (tool calling) is not supported by this server", key)
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, Mapping) and fmt.get("type") == "text"):
        raise ApiError(400, "only response_format {\"type\": \"text\"} is supported", "response_format")
    if body.get("suffix"):
        raise ApiError(400, "'suffix' (insertion) is not supported by this server", "suffix")


@dataclass
class _Options:
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


def _options(body: Mapping[str, Any], max_keys: tuple[str, ...]) -> _Options:
    _unsupported(body)
    max_tokens = None
    for key in max_keys:
        if (value := _integer(body, key, 0)) is not None:
            max_tokens = value
            break
    stream = _flag(body, "stream")
    so = body.get("stream_options")
    if so is not None and not isinstance(so, Mapping):
        raise ApiError(400, "'stream_options' must be an object", "stream_options")
    include_usage = _flag(so, "include_usage") if so is not None else False
    seed = _integer(body, "seed", -(2 ** 63), 2 ** 64 - 1)
    return _Options(max_tokens=max_tokens,
                    temperature=round(_number(body, "temperature", 1.0, 0.0, 2.0), 2),
                    top_p=round(_number(body, "top_p", 1.0, 0.0, 1.0), 2),
                    top_k=_integer(body, "top_k", 0) or 0, stop=_stops(body), seed=seed, stream=stream,
                    include_usage=include_usage)


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
    raise ApiError(400, f"{where}.content must be a string or a list of text parts", f"{where}.content")


def _messages(body: Mapping[str, Any]) -> list[dict[str, str]]:
    msgs = body.get("messages")
    if msgs is None:
        raise ApiError(400, "'messages' is required: a list of {\"role\", \"content\"} objects", "messages")
    if not isinstance(msgs, list) or not msgs:
        raise ApiError(400, "'messages' must be a non-empty list of {\"role\", \"content\"} objects", "messages")
    out = []
    for i, m in enumerate(msgs):
        where = f"messages[{i}]"
        if not isinstance(m, Mapping):
            raise ApiError(400, f"{where} must be an object with 'role' and 'content'", where)
        role = m.get("role")
        if role not in ROLES:
            raise ApiError(400, f"{where}.role must be one of {list(ROLES)}, got {role!r}", f"{where}.role")
        # "developer" is OpenAI's newer name for the system role, which chat templates know as "system"
        msg = {"role": "system" if role == "developer" else str(role), "content": _content(m.get("content"), where)}
        if isinstance(m.get("name"), str):
            msg["name"] = m["name"]
        out.append(msg)
    return out


def _prompt_ids(engine: Engine, body: Mapping[str, Any]) -> tuple[list[int], str]:
    """The ids and text of /v1/completions' prompt: a string, a list of one string, or token ids."""
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]  # a batch of one
    if isinstance(p, str):
        return engine.encode(p, add_special_tokens=True), p
    if isinstance(p, list) and p and all(_is_int(t) for t in p):
        vocab = int(engine.tokenizer.get_vocab_size())
        if any(not 0 <= t < vocab for t in p):
            raise ApiError(400, f"'prompt' holds token ids outside the vocabulary of {vocab}", "prompt")
        return [int(t) for t in p], engine.decode(p)
    if p is None:
        raise ApiError(400, "'prompt' is required: a string (or a list of token ids)", "prompt")
    raise ApiError(400, "'prompt' must be a string, a list of one string, or a list of token ids (one prompt per "
                        "request)", "prompt")


# ---- the HTTP side --------------------------------------------------------------------------------------------------

def _chat_page() -> bytes:
    return (resources.files("tinygrad.llm") / "static" / "chat.html").read_bytes()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _HTTPServer
    timeout = REQUEST_TIMEOUT
    server_version = "tinygrad.llm"
    # HTTP/1.0: one request per connection, so a stream ends by closing it and no idle keep-alive holds a thread

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.log:
            sys.stderr.write(f"tinygrad.llm: {self.address_string()} {format % args}\n")

    # -- responses --
    def _send_json(self, status: int, obj: Any, headers: Mapping[str, str] | None = None) -> None:
        body = json.dumps(obj, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (a malformed request line, headers too long, an unknown method) as JSON."""
        short = self.responses.get(code, ("error",))[0]
        err = ApiError(code, message or short)
        self.close_connection = True
        try:
            self._send_json(code, err.body(), {"Connection": "close"})
        except OSError:
            pass

    # -- dispatch --
    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        self._streaming = False
        try:
            self._check_host()
            path = urlsplit(self.path).path
            if method == "GET":
                self._get(path)
            else:
                self._post(path)
        except ApiError as e:
            self._send_json(e.status, e.body(), e.headers)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True  # the client went away or stalled: nobody to answer
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            if not self._streaming:
                try:
                    self._send_json(500, ApiError(500, f"internal error: {type(e).__name__}: {e}").body())
                except OSError:
                    self.close_connection = True

    def _check_host(self) -> None:
        if not self.server.loopback:
            return
        host = (self.headers.get("Host") or "").strip()
        name = host[1:].split("]", 1)[0] if host.startswith("[") else host.rsplit(":", 1)[0]
        if name.lower() not in LOOPBACK_NAMES:
            raise ApiError(403, f"this server answers requests for 127.0.0.1 or localhost only, not {host!r}",
                           code="forbidden_host", kind="permission_error")

    def _get(self, path: str) -> None:
        engine = self.server.engine
        if path in ("/", "/index.html", "/chat.html"):
            body = self.server.page
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.end_headers()
            self.wfile.write(body)
        elif path in ("/v1/models", "/models"):
            self._send_json(200, {"object": "list", "data": [self.server.model_card()]})
        elif path.startswith(("/v1/models/", "/models/")):
            name = path.split("/models/", 1)[1]
            if name != engine.name:
                raise ApiError(404, f"the model {name!r} does not exist; this server serves {engine.name!r}",
                               "model", "model_not_found")
            self._send_json(200, self.server.model_card())
        elif path == "/health":
            self._send_json(200, {"status": "ok"})
        elif path in POST_ROUTES:
            raise ApiError(405, f"{path} takes POST", code="method_not_allowed", headers={"Allow": "POST"})
        else:
            raise ApiError(404, f"no such endpoint: GET {path}", code="not_found")

    def _post(self, path: str) -> None:
        if path not in POST_ROUTES:
            if path in ("/", "/v1/models", "/health"):
                raise ApiError(405, f"{path} takes GET", code="method_not_allowed", headers={"Allow": "GET"})
            raise ApiError(404, f"no such endpoint: POST {path}", code="not_found")
        body = self._read_body()
        POST_ROUTES[path](self, body)

    def _read_body(self) -> dict[str, Any]:
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise ApiError(411, "send the body with a Content-Length (chunked bodies are not accepted)")
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            raise ApiError(411, "a Content-Length header is required")
        try:
            length = int(length_text)
        except ValueError:
            length = -1
        if length < 0:
            self.close_connection = True
            raise ApiError(400, f"bad Content-Length {length_text!r}")
        if length > self.server.max_body:
            self._discard(length)
            raise ApiError(413, f"the request body is {length} bytes; at most {self.server.max_body} are accepted",
                           code="request_too_large")
        raw = self.rfile.read(length)
        ctype = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        if ctype != "application/json":
            raise ApiError(415, f"the body must be JSON sent as Content-Type: application/json, not {ctype!r}",
                           code="unsupported_media_type")
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ApiError(400, f"the body is not valid JSON: {e}", code="invalid_json") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a JSON object", code="invalid_json")
        return body

    def _discard(self, length: int) -> None:
        """Read (and drop) an oversized body that is not absurdly large, so the client, still sending, gets to read
        the 413 instead of a reset connection; beyond that the connection is just closed."""
        self.close_connection = True
        if length <= 16 * self.server.max_body:
            left = length
            while left > 0 and (chunk := self.rfile.read(min(left, 65536))):
                left -= len(chunk)

    # -- the API --
    def _check_model(self, body: Mapping[str, Any]) -> None:
        name = body.get("model")
        if name is not None and not isinstance(name, str):
            raise ApiError(400, "'model' must be a string", "model")
        if name is not None and name != self.server.engine.name:
            raise ApiError(404, f"the model {name!r} does not exist; this server serves {self.server.engine.name!r}",
                           "model", "model_not_found")

    def _check_prompt(self, ids: list[int], param: str) -> None:
        limit = self.server.engine.max_context
        if not ids:
            raise ApiError(400, "the prompt encodes to no tokens", param)
        if len(ids) >= limit:
            raise ApiError(400, f"this model's maximum context length is {limit} tokens; the prompt has {len(ids)}, "
                                f"which leaves no room for an answer", param, "context_length_exceeded")

    def _chat(self, body: dict[str, Any]) -> None:
        engine = self.server.engine
        self._check_model(body)
        messages = _messages(body)
        opts = _options(body, ("max_completion_tokens", "max_tokens"))
        opts.extra_stops = list(engine.chat_stops)
        try:
            prompt = engine.chat_prompt(messages)
        except ChatTemplateError as e:
            raise ApiError(400, str(e), "messages") from None
        ids = engine.encode(prompt, add_special_tokens=False)
        self._check_prompt(ids, "messages")
        self._generate("chat", ids, opts, prefix="")

    def _completion(self, body: dict[str, Any]) -> None:
        self._check_model(body)
        ids, text = _prompt_ids(self.server.engine, body)
        opts = _options(body, ("max_tokens",))
        echo = _flag(body, "echo")
        self._check_prompt(ids, "prompt")
        self._generate("text", ids, opts, prefix=text if echo else "")

    def _generate(self, kind: str, ids: list[int], opts: _Options, prefix: str) -> None:
        engine = self.server.engine
        max_tokens = opts.max_tokens if opts.max_tokens is not None else engine.max_context
        pieces = engine.stream(ids, max_tokens, **opts.sampling())
        meta = {"id": f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex[:24]}",
                "object": "chat.completion" if kind == "chat" else "text_completion", "created": int(time.time()),
                "model": engine.name, "system_fingerprint": "tinygrad"}
        if opts.stream:
            self._stream(kind, pieces, meta, len(ids), opts.include_usage, prefix)
            return
        try:
            collected = list(pieces)
        finally:
            pieces.close()
        text = prefix + "".join(p.text for p in collected)
        last = collected[-1]
        choice: dict[str, Any] = {"index": 0, "finish_reason": last.finish_reason, "logprobs": None}
        if kind == "chat":
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        self._send_json(200, {**meta, "choices": [choice], "usage": _usage(len(ids), last.completion_tokens)})

    def _stream(self, kind: str, pieces: Generator[Piece, None, None], meta: dict[str, Any], n_prompt: int,
                include_usage: bool, prefix: str) -> None:
        meta = {**meta, "object": "chat.completion.chunk" if kind == "chat" else "text_completion"}

        def chunk(text: str | None, finish: str | None, role: bool = False) -> dict[str, Any]:
            if kind == "chat":
                delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
                if text:
                    delta["content"] = text
                c: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
            else:
                c = {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
            return {**meta, "choices": [c]}

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Accel-Buffering", "no")  # for a reverse proxy in front: pass events on at once
        self.end_headers()
        self._streaming = True
        self.close_connection = True
        try:
            if kind == "chat":
                self._event(chunk(None, None, role=True))
            if prefix:
                self._event(chunk(prefix, None))
            for p in pieces:
                if p.text:
                    self._event(chunk(p.text, None))
                if p.finish_reason is not None:
                    self._event(chunk(None, p.finish_reason))
                    if include_usage:
                        self._event({**meta, "choices": [], "usage": _usage(n_prompt, p.completion_tokens)})
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            return  # the client left: closing the generator (below) ends the generation
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            self._event(ApiError(500, f"generation failed: {type(e).__name__}: {e}").body())
        finally:
            pieces.close()
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _event(self, obj: Any) -> None:
        self.wfile.write(b"data: " + json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n\n")
        self.wfile.flush()


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


POST_ROUTES: dict[str, Callable[[_Handler, dict[str, Any]], None]] = {
    "/v1/chat/completions": _Handler._chat, "/chat/completions": _Handler._chat,
    "/v1/completions": _Handler._completion, "/completions": _Handler._completion,
}


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _HTTPServer(BoundedHTTPServer):
    max_threads = MAX_THREADS
    request_queue_size = 64

    def __init__(self, host: str, port: int, engine: Engine, max_body: int, log: bool):
        self.engine, self.max_body, self.log = engine, max_body, log
        self.loopback = is_loopback(host)
        self.page = _chat_page()
        self.created = int(time.time())
        super().__init__(host, port, _Handler)

    def model_card(self) -> dict[str, Any]:
        return {"id": self.engine.name, "object": "model", "created": self.created, "owned_by": "tinygrad",
                "max_context": self.engine.max_context}


class LLMServer(BackgroundServer):
    """A running server: `url` (ending in "/"; the API is under url + "v1"), `host`, `port`, `engine`, and `stop()`
    (also on leaving a `with` block; a generation in flight finishes on its own thread). `wait()` serves until
    Ctrl-C."""

    def __init__(self, engine: Engine, host: str = "127.0.0.1", port: int = 0, max_body: int = MAX_BODY,
                 log: bool = False):
        self.engine = engine
        super().__init__(_HTTPServer(host, port, engine, max_body, log), host, thread_name="tinygrad-llm",
                         label="tinygrad.llm")


def serve(model: Any, tokenizer: Any, host: str = "127.0.0.1", port: int = 0, *, name: str = "model",
          chat_template: str | None = None, special_tokens: Mapping[str, Any] | None = None,
          stop_ids: tuple[int, ...] = (), max_body: int = MAX_BODY, log: bool = False) -> LLMServer:
    """Serve `model` (a tinygrad.nn.transformer model) with `tokenizer` (a tokenizers.Tokenizer) on host:port (0: a
    free port) in a background thread; returns the running LLMServer. chat_template / special_tokens: as in
    tokenizer_config.json (without a template, chats become "User: ...\\nAssistant:" turns)."""
    engine = Engine(model, tokenizer, name, chat_template, special_tokens, stop_ids)
    return LLMServer(engine, host, port, max_body, log)
