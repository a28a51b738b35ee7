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
step is compiled for each pair used. Options this server cannot honour (n > 1, logprobs, a response_format other
than text) get a 400 rather than being ignored; penalties and logit_bias are checked, then ignored. How a body is
read and its fields checked is request_body.py's part.

Chat completions take `tools` (function tools; given to the chat template as its `tools` variable) and
`tool_choice`. The calls the model writes, in its template's format (tool_calls.py), come back as `tool_calls`
with finish_reason "tool_calls"; streamed, as OpenAI does: the text before a call as content, then each call as
a delta with its id and name and one with its arguments. Text inside <think> blocks, where the template uses
them, comes back as `reasoning_content` (streamed: `delta.reasoning_content`). tool_choice "required" or a named
function is checked, not enforced: an answer without the call gets a 422 (code "tool_call_missing"). Assistant
messages may carry `tool_calls` (their arguments reach the template as objects) and "tool" messages answer them
by `tool_call_id`.

Requests are served on threads (at most MAX_THREADS at once, more wait to be accepted) but generate one at a time:
the model's KV caches and its sampler's seed are shared, so the others wait for the engine's lock, in turn. At
most max_queue requests wait so; one more is answered 503 with Retry-After at once.
Errors are JSON as OpenAI's, {"error": {"message", "type", "param", "code"}}: a 4xx for a request that cannot be
served (checked before anything is generated), a 500 when generation itself fails (in a stream that has started:
an error event, then [DONE]). A failing request never takes the server down; an unexpected error is logged once,
with its traceback, to the "tinygrad.llm" logger, and the client gets its one-line description.

HTTP: one request per connection (HTTP/1.0 answers). Every answer has a status line, including those to request
lines that cannot be parsed (400, the connection closed; http.server would answer those with a bare body), a request
line over MAX_REQUEST_LINE bytes (414) and headers over http.client's limits (431). HEAD is GET without the body;
OPTIONS answers 204 with an `Allow` header and no CORS headers, so a browser's preflight still fails; any other
method on a known path gets 405 with `Allow`, and any method on an unknown path 404. No request gets a 5xx for what
it holds.

Safety for a local server: POST bodies must be application/json (so a web page elsewhere cannot post to it without
a CORS preflight, which this server never grants) and at most max_body bytes; when bound to a loopback address,
the Host header must name a loopback host too (a page cannot reach it through a DNS name rebound to 127.0.0.1).
There is no authentication: bind another interface (--host) only on a network you trust.
"""

from __future__ import annotations

import http.client
import http.server
import ipaddress
import json
import logging
import re
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterator, Mapping
from contextlib import contextmanager
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from tinygrad.llm import request_body
from tinygrad.llm.engine import ChatTemplateError, Engine, Piece
from tinygrad.llm.request_body import ApiError, Options, show
from tinygrad.llm.tool_calls import THINK_OPEN, OutputSplitter, Split
from tinygrad.localserver import BackgroundServer, BoundedHTTPServer

__all__ = ["MAX_BODY", "ApiError", "LLMServer", "serve"]

MAX_BODY = 1 << 20  # bytes of JSON in a request: room for long chats, and a bound on what a request makes us hold
MAX_THREADS = 16
MAX_QUEUE = 8  # requests waiting for the engine while one generates; more get a 503 (MAX_THREADS bounds it too)
RETRY_AFTER = 1  # seconds, in a 503's Retry-After
REQUEST_TIMEOUT = 60.0  # seconds a socket read or write may stall before the connection is dropped
MAX_REQUEST_LINE = 16 * 1024  # bytes: room for the chat page's ?q= text; http.server's own limit is 64 KiB
LINGER_SECONDS = 1.0
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")

logger = logging.getLogger("tinygrad.llm")

# METHOD SP request-target SP HTTP-version (RFC 9112), the method a token, the target visible ASCII
_REQUEST_LINE = re.compile(r"(?P<method>[!#$%&'*+.^_`|~0-9A-Za-z-]{1,32}) (?P<target>[\x21-\x7e]+) "
                           r"(?P<version>HTTP/1\.[01])")
_CONTENT_LENGTH = re.compile(r"[0-9]{1,18}")  # more digits than that is more than any body this server takes
GET_PATHS = ("/", "/index.html", "/chat.html", "/v1/models", "/models", "/health")
MODEL_PATHS = ("/v1/models/", "/models/")
GET_ALLOW = "GET, HEAD, OPTIONS"
POST_ALLOW = "POST, OPTIONS"


def _chat_page() -> bytes:
    return (resources.files("tinygrad.llm") / "static" / "chat.html").read_bytes()


def _allowed_methods(path: str) -> str | None:
    """The Allow header of a path this server has, or None."""
    if path in POST_ROUTES:
        return POST_ALLOW
    if path in GET_PATHS or path.startswith(MODEL_PATHS):
        return GET_ALLOW
    return None


def _json_bytes(obj: Any) -> bytes:
    try:
        return json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (in a model's name, say) can only travel escaped
        return json.dumps(obj).encode("ascii")


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _HTTPServer
    timeout = REQUEST_TIMEOUT
    server_version = "tinygrad.llm"
    # HTTP/1.0: one request per connection, so a stream ends by closing it and no idle keep-alive holds a thread

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.log:
            sys.stderr.write(f"tinygrad.llm: {self.address_string()} {format % args}\n")

    # -- the request line and headers --
    def handle_one_request(self) -> None:
        """Read, parse and answer one request. http.server's own would answer a request line it cannot parse with a
        body and no status line (as HTTP/0.9) and an unknown method with a 501; here both get a 4xx."""
        self.close_connection = True
        # what a refusal needs before anything is parsed: the status line is written for any version but HTTP/0.9
        self.command, self.path, self.request_version, self.requestline = "", "", "HTTP/1.0", ""
        try:
            line = self.rfile.readline(MAX_REQUEST_LINE + 1)
            if line in (b"\r\n", b"\n"):  # RFC 9112: a server should skip an empty line before the request line
                line = self.rfile.readline(MAX_REQUEST_LINE + 1)
            if not line:
                return  # connected and left without a word: nobody to answer
            self.raw_requestline = line
            if len(line) > MAX_REQUEST_LINE:
                self.send_error(414, f"the request line is longer than {MAX_REQUEST_LINE} bytes")
                return
            if self.parse_request():
                self._dispatch()
            self.wfile.flush()
        except TimeoutError as e:
            self.log_error("request timed out: %r", e)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away: nobody to answer

    def parse_request(self) -> bool:
        """The request line, strictly (three parts, HTTP/1.0 or 1.1), then the headers; on a fault the refusal has
        been sent and the answer is False."""
        self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        match = _REQUEST_LINE.fullmatch(self.requestline)
        if match is None:
            self.send_error(400, f"malformed request line {show(self.requestline)}: expected METHOD /path HTTP/1.1")
            return False
        self.command, self.path, self.request_version = match["method"], match["target"], match["version"]
        try:
            self.headers = http.client.parse_headers(self.rfile, _class=self.MessageClass)
        except http.client.HTTPException as e:  # a header line over 64 KiB, or over 100 headers
            self.send_error(431, f"the request's headers are too large ({type(e).__name__}: {show(str(e))})")
            return False
        except ValueError as e:
            self.send_error(400, f"malformed headers: {show(str(e))}")
            return False
        return True

    # -- responses --
    def _send_json(self, status: int, obj: Any, headers: Mapping[str, str] | None = None) -> None:
        body = _json_bytes(obj)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_no_content(self, headers: Mapping[str, str]) -> None:
        self.send_response(204)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """A refusal as JSON, on a closed connection (http.server's own error pages are HTML)."""
        if getattr(self, "request_version", "HTTP/0.9") == "HTTP/0.9":
            self.request_version = "HTTP/1.0"  # so that the status line is written
        short = self.responses.get(code, ("error",))[0]
        err = ApiError(code, message or short)
        self.close_connection = True
        try:
            self._send_json(code, err.body(), {"Connection": "close"})
        except OSError:
            pass

    # -- dispatch --
    def _dispatch(self) -> None:
        self._streaming = False
        try:
            self._check_host()
            self._route(self.command)
        except ApiError as e:
            self._send_json(e.status, e.body(), e.headers)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True  # the client went away or stalled: nobody to answer
        except Exception as e:
            logger.exception("internal error answering %s from %s", show(self.requestline), self.address_string())
            if not self._streaming:
                try:
                    self._send_json(500, ApiError(500, f"internal error: {type(e).__name__}: {show(str(e))}").body())
                except OSError:
                    self.close_connection = True

    def _check_host(self) -> None:
        if not self.server.loopback:
            return
        host = (self.headers.get("Host") or "").strip()
        name = host[1:].split("]", 1)[0] if host.startswith("[") else host.rsplit(":", 1)[0]
        if name.lower() not in LOOPBACK_NAMES:
            raise ApiError(403, f"this server answers requests for 127.0.0.1 or localhost only, not {show(host)}",
                           code="forbidden_host", kind="permission_error")

    def _route(self, method: str) -> None:
        if method == "OPTIONS" and self.path == "*":
            self._send_no_content({"Allow": "GET, HEAD, POST, OPTIONS"})
            return
        try:
            path = urlsplit(self.path).path
        except ValueError as e:  # e.g. an absolute URL with a broken [IPv6] host
            raise ApiError(400, f"malformed request target {show(self.path)}: {e}") from None
        allow = _allowed_methods(path)
        if allow is None:
            raise ApiError(404, f"no such endpoint: {method} {show(path)}", code="not_found")
        if method == "OPTIONS":
            self._send_no_content({"Allow": allow})
        elif method not in allow.split(", "):
            raise ApiError(405, f"{path} takes {allow.removesuffix(', OPTIONS')}, not {show(method)}",
                           code="method_not_allowed", headers={"Allow": allow})
        elif method == "POST":
            POST_ROUTES[path](self, self._read_body())
        else:
            self._get(path)

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
            if self.command != "HEAD":
                self.wfile.write(body)
        elif path in ("/v1/models", "/models"):
            self._send_json(200, {"object": "list", "data": [self.server.model_card()]})
        elif path == "/health":
            self._send_json(200, {"status": "ok"})
        else:
            name = path.split("/models/", 1)[1]
            if name != engine.name:
                raise ApiError(404, f"the model {show(name)} does not exist; this server serves {engine.name!r}",
                               "model", "model_not_found")
            self._send_json(200, self.server.model_card())

    def _read_body(self) -> dict[str, Any]:
        if self.headers.get("Transfer-Encoding"):
            raise ApiError(411, "send the body with a Content-Length (chunked bodies are not accepted)")
        lengths = {v.strip() for v in self.headers.get_all("Content-Length") or []}
        if not lengths:
            raise ApiError(411, "a Content-Length header is required")
        length_text = lengths.pop()
        if lengths or not _CONTENT_LENGTH.fullmatch(length_text):
            raise ApiError(400, f"bad Content-Length {show(length_text)}: send one, a whole number of bytes")
        length = int(length_text)
        if length > self.server.max_body:
            self._discard(length)
            raise ApiError(413, f"the request body is {length} bytes; at most {self.server.max_body} are accepted",
                           code="request_too_large")
        raw = self.rfile.read(length)
        if len(raw) < length:
            raise ApiError(400, f"the body ended after {len(raw)} of the {length} bytes its Content-Length announced")
        ctype = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        if ctype != "application/json":
            raise ApiError(415, f"the body must be JSON sent as Content-Type: application/json, not {show(ctype)}",
                           code="unsupported_media_type")
        return request_body.parse_body(raw)

    def _discard(self, length: int) -> None:
        """Read (and drop) an oversized body that is not absurdly large, so the client, still sending, gets to read
        the 413 instead of a reset connection; beyond that the connection is just closed."""
        if length <= 16 * self.server.max_body:
            left = length
            while left > 0 and (chunk := self.rfile.read(min(left, 65536))):
                left -= len(chunk)

    # -- the API --
    def _check_prompt(self, ids: list[int], param: str) -> None:
        limit = self.server.engine.max_context
        if not ids:
            raise ApiError(400, "the prompt encodes to no tokens", param)
        if len(ids) >= limit:
            raise ApiError(400, f"this model's maximum context length is {limit} tokens; the prompt has {len(ids)}, "
                                f"which leaves no room for an answer", param, "context_length_exceeded")

    def _chat(self, body: dict[str, Any]) -> None:
        engine = self.server.engine
        request_body.check_model(body, engine.name)
        messages = request_body.messages(body)
        offered = request_body.tools(body)
        choice = request_body.tool_choice(body, offered)
        opts = request_body.options(body, ("max_completion_tokens", "max_tokens"), self.server.vocab_size)
        opts.extra_stops = list(engine.chat_stops)
        # a named function is the only tool the template describes; "none" describes none
        given = [] if choice == "none" else [t for t in offered if choice in ("auto", "required")
                                             or t["function"]["name"] == choice]
        if given and engine.has_template and engine.call_format is None:
            raise ApiError(400, "this model's chat template writes tool calls in no format this server reads "
                                "(Hermes/Qwen <tool_call>, Mistral [TOOL_CALLS], Llama 3.1 JSON); send no 'tools'",
                           "tools")
        try:
            prompt = engine.chat_prompt(messages, given or None)
        except ChatTemplateError as e:
            raise ApiError(400, str(e), "tools" if given and not engine.has_template else "messages") from None
        ids = engine.encode(prompt, add_special_tokens=False)
        self._check_prompt(ids, "messages")
        splitter = OutputSplitter(engine.call_format, [t["function"]["name"] for t in given], engine.reasoning,
                                  thinking=prompt.rstrip().endswith(THINK_OPEN))
        self._generate("chat", ids, opts, prefix="", chat=_ChatOutput(splitter, choice))

    def _completion(self, body: dict[str, Any]) -> None:
        engine = self.server.engine
        request_body.check_model(body, engine.name)
        for key in ("tools", "tool_choice"):
            if body.get(key) is not None:
                raise ApiError(400, f"'{key}' applies to /v1/chat/completions only", key)
        prompt = request_body.prompt_ids(body, self.server.vocab_size)
        ids, text = (engine.encode(prompt), prompt) if isinstance(prompt, str) else (prompt, engine.decode(prompt))
        opts = request_body.options(body, ("max_tokens",), self.server.vocab_size)
        echo = request_body.flag(body, "echo")
        self._check_prompt(ids, "prompt")
        self._generate("text", ids, opts, prefix=text if echo else "")

    def _generate(self, kind: str, ids: list[int], opts: Options, prefix: str, chat: _ChatOutput | None = None
                  ) -> None:
        with self.server.admission():
            engine = self.server.engine
            max_tokens = opts.max_tokens if opts.max_tokens is not None else engine.max_context
            pieces = engine.stream(ids, max_tokens, **opts.sampling())
            meta = {"id": f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex[:24]}",
                    "object": "chat.completion" if kind == "chat" else "text_completion",
                    "created": int(time.time()), "model": engine.name, "system_fingerprint": "tinygrad"}
            if opts.stream:
                self._stream(kind, pieces, meta, len(ids), opts.include_usage, prefix, chat)
                return
            try:
                collected = list(pieces)
            finally:
                pieces.close()
        text = prefix + "".join(p.text for p in collected)
        last = collected[-1]
        choice: dict[str, Any] = {"index": 0, "finish_reason": last.finish_reason, "logprobs": None}
        if chat is not None:
            split = chat.splitter.finish(text)
            chat.check(split)
            message: dict[str, Any] = {"role": "assistant", "content": split.content or None}
            if split.reasoning:
                message["reasoning_content"] = split.reasoning
            if split.calls:
                message["tool_calls"] = split.calls
                choice["finish_reason"] = "tool_calls"
            elif message["content"] is None:
                message["content"] = ""
            choice["message"] = message
        else:
            choice["text"] = text
        self._send_json(200, {**meta, "choices": [choice], "usage": _usage(len(ids), last.completion_tokens)})

    def _stream(self, kind: str, pieces: Generator[Piece, None, None], meta: dict[str, Any], n_prompt: int,
                include_usage: bool, prefix: str, chat: _ChatOutput | None) -> None:
        meta = {**meta, "object": "chat.completion.chunk" if kind == "chat" else "text_completion"}

        def chunk(delta: dict[str, Any] | str | None, finish: str | None) -> dict[str, Any]:
            if kind == "chat":
                c: dict[str, Any] = {"index": 0, "delta": delta or {}, "finish_reason": finish, "logprobs": None}
            else:
                c = {"index": 0, "text": delta or "", "finish_reason": finish, "logprobs": None}
            return {**meta, "choices": [c]}

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Accel-Buffering", "no")  # for a reverse proxy in front: pass events on at once
        self.end_headers()
        self._streaming = True
        self.close_connection = True
        text, sent = "", {"reasoning_content": 0, "content": 0}

        def send_split(split: Split) -> None:
            """The reasoning and content of split not sent yet, as deltas (each only ever grows)."""
            for key, value in (("reasoning_content", split.reasoning), ("content", split.content)):
                if len(value) > sent[key]:
                    self._event(chunk({key: value[sent[key]:]}, None))
                    sent[key] = len(value)

        try:
            if kind == "chat":
                self._event(chunk({"role": "assistant", "content": ""}, None))
            elif prefix:
                self._event(chunk(prefix, None))
            for p in pieces:
                text += p.text
                if chat is None:
                    if p.text:
                        self._event(chunk(p.text, None))
                elif p.finish_reason is None:
                    if not chat.forced:  # a call that must come: nothing is sent before it is checked
                        send_split(chat.splitter.update(text))
                    continue
                finish = p.finish_reason
                if chat is not None:
                    split = chat.splitter.finish(text)
                    chat.check(split)
                    send_split(split)
                    for i, call in enumerate(split.calls):
                        fn = call["function"]
                        self._event(chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                                           "function": {"name": fn["name"], "arguments": ""}}]},
                                          None))
                        self._event(chunk({"tool_calls": [{"index": i, "function": {"arguments": fn["arguments"]}}]},
                                          None))
                    if split.calls:
                        finish = "tool_calls"
                if finish is not None:
                    self._event(chunk(None, finish))
                    if include_usage:
                        self._event({**meta, "choices": [], "usage": _usage(n_prompt, p.completion_tokens)})
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            return  # the client left: closing the generator (below) ends the generation
        except ApiError as e:
            self._event(e.body())
        except Exception as e:
            logger.exception("generation failed in a stream for %s", self.address_string())
            self._event(ApiError(500, f"generation failed: {type(e).__name__}: {show(str(e))}").body())
        finally:
            pieces.close()
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _event(self, obj: Any) -> None:
        self.wfile.write(b"data: " + _json_bytes(obj) + b"\n\n")
        self.wfile.flush()


class _ChatOutput:
    """How a chat answer is read: its splitter (reasoning, content, tool calls) and the request's tool_choice, which
    "required" or a function's name turn into a check of the answer (the model is not steered to call; an answer
    without the call is refused with a 422 rather than passed off as one)."""

    def __init__(self, splitter: OutputSplitter, choice: str):
        self.splitter, self.choice = splitter, choice
        self.forced = choice not in ("auto", "none")

    def check(self, split: Split) -> None:
        if not self.forced:
            return
        if not split.calls:
            raise ApiError(422, f"tool_choice {self.choice!r} asks for a tool call, and the model answered without one "
                                f"(or with one that does not parse); try again, or use tool_choice \"auto\"",
                           "tool_choice", "tool_call_missing")
        if self.choice != "required" and any(c["function"]["name"] != self.choice for c in split.calls):
            raise ApiError(422, f"tool_choice names {self.choice!r}, and the model called another tool",
                           "tool_choice", "tool_call_missing")


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

    def __init__(self, host: str, port: int, engine: Engine, max_body: int, log: bool, max_queue: int = MAX_QUEUE):
        if max_queue < 0:
            raise ValueError(f"max_queue must be 0 or more (requests waiting for the engine), got {max_queue}")
        self.engine, self.max_body, self.log, self.max_queue = engine, max_body, log, max_queue
        #: requests admitted to generate: the one generating and those waiting for the engine's lock
        self.pending = 0
        self._pending_lock = threading.Lock()
        self.loopback = is_loopback(host)
        self.page = _chat_page()
        self.created = int(time.time())
        self.vocab_size = int(engine.tokenizer.get_vocab_size())
        super().__init__(host, port, _Handler)

    @contextmanager
    def admission(self) -> Iterator[None]:
        """A place among the requests generating or waiting to: past max_queue waiting, a 503 with Retry-After
        (a client should come back later rather than hold a connection and a thread for an unbounded wait)."""
        with self._pending_lock:
            if self.pending > self.max_queue:
                raise ApiError(503, f"the server is busy: {self.pending} requests are generating or waiting to, and "
                                    f"at most {self.max_queue} may wait; retry after a moment",
                               code="server_busy", kind="server_error", headers={"Retry-After": str(RETRY_AFTER)})
            self.pending += 1
        try:
            yield
        finally:
            with self._pending_lock:
                self.pending -= 1

    def handle_error(self, request: Any, client_address: Any) -> None:
        """An exception that escaped a request's handler (socketserver's default prints it to stderr, unlabelled):
        logged once, unless it is only the client going away."""
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            logger.exception("internal error serving %s", client_address)

    def shutdown_request(self, request: Any) -> None:
        """Close a connection after reading, for up to LINGER_SECONDS, what the client still sends: closing with
        unread bytes makes the kernel reset the connection, and a reset can discard the answer before the client
        has read it (a refused request leaves its body unread)."""
        try:
            request.shutdown(socket.SHUT_WR)
            request.settimeout(LINGER_SECONDS)
            deadline, left = time.monotonic() + LINGER_SECONDS, 16 * self.max_body
            while left > 0 and time.monotonic() < deadline and (chunk := request.recv(65536)):
                left -= len(chunk)
        except OSError:
            pass
        self.close_request(request)

    def model_card(self) -> dict[str, Any]:
        return {"id": self.engine.name, "object": "model", "created": self.created, "owned_by": "tinygrad",
                "max_context": self.engine.max_context}


class LLMServer(BackgroundServer):
    """A running server: `url` (ending in "/"; the API is under url + "v1"), `host`, `port`, `engine`, and `stop()`
    (also on leaving a `with` block; a generation in flight finishes on its own thread). `wait()` serves until
    Ctrl-C."""

    def __init__(self, engine: Engine, host: str = "127.0.0.1", port: int = 0, max_body: int = MAX_BODY,
                 log: bool = False, max_queue: int = MAX_QUEUE):
        self.engine = engine
        self._server = _HTTPServer(host, port, engine, max_body, log, max_queue)
        super().__init__(self._server, host, thread_name="tinygrad-llm", label="tinygrad.llm")

    @property
    def pending(self) -> int:
        """Requests generating now or waiting for the engine to (at most max_queue + 1)."""
        return self._server.pending


def serve(model: Any, tokenizer: Any, host: str = "127.0.0.1", port: int = 0, *, name: str = "model",
          chat_template: str | None = None, special_tokens: Mapping[str, Any] | None = None,
          stop_ids: tuple[int, ...] = (), max_body: int = MAX_BODY, log: bool = False,
          max_queue: int = MAX_QUEUE) -> LLMServer:
    """Serve `model` (a tinygrad.nn.transformer model) with `tokenizer` (a tokenizers.Tokenizer) on host:port (0: a
    free port) in a background thread; returns the running LLMServer. chat_template / special_tokens: as in
    tokenizer_config.json (without a template, chats become "User: ...\\nAssistant:" turns). max_queue: requests
    that may wait while one generates; past that a 503."""
    engine = Engine(model, tokenizer, name, chat_template, special_tokens, stop_ids)
    return LLMServer(engine, host, port, max_body, log, max_queue)
