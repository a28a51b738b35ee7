"""tinygrad.llm's server against a hostile client (issue 34): each request that once got a 5xx or no status line
(a lone surrogate, JSON nested 10^5 deep, a 5,000-digit max_tokens, OPTIONS/PUT/DELETE/PATCH/HEAD, request lines
http.server answered with a bare body), the checks of every field's type and range, and a seeded fuzz of 300
malformed requests over raw sockets. The server runs a scripted model (nothing to compile) on 127.0.0.1, with the
default body limit, and is stopped by the tests; every socket has a timeout.
"""

from __future__ import annotations

import json
import logging
import random
import re
import socket
import time

import pytest

tokenizers = pytest.importorskip("tokenizers")

from tinygrad.llm import serve  # noqa: E402
from tinygrad.llm.request_body import MAX_JSON_DEPTH  # noqa: E402
from tinygrad.llm.server import MAX_REQUEST_LINE  # noqa: E402

NAME = "scripted"
WORDS = "the quick brown fox jumps over a lazy dog".split()
SOCKET_TIMEOUT = 10.0


def _tokenizer() -> tokenizers.Tokenizer:
    vocab = {"[UNK]": 0, "</s>": 1, **{w: i + 2 for i, w in enumerate(WORDS)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.add_special_tokens(["</s>"])
    return tok


class _Scripted:
    """A model that answers "quick brown fox" to anything."""
    max_context = 256
    eos_token_ids: list[int] = []

    def generate(self, ids, n, temperature=0.0, top_k=0, top_p=1.0, stop_ids=()):
        yield from [3, 4, 5][:n]


class _Failing(_Scripted):
    def generate(self, ids, n, temperature=0.0, top_k=0, top_p=1.0, stop_ids=()):
        raise RuntimeError("the model fell over")
        yield 0


@pytest.fixture(scope="module")
def server():
    srv = serve(_Scripted(), _tokenizer(), name=NAME)
    try:
        yield srv
    finally:
        srv.stop()


# ---- raw HTTP -------------------------------------------------------------------------------------------------------

def exchange(srv, data: bytes, close_write: bool = True) -> bytes:
    """Send data on a fresh connection and read the reply until the server closes it. Without close_write the
    server must close the connection itself (a recv timing out fails the test)."""
    with socket.create_connection((srv.host, srv.port), timeout=SOCKET_TIMEOUT) as s:
        try:
            s.sendall(data)
            if close_write:
                s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server refused early and closed: its reply is still to be read
        reply = bytearray()
        while chunk := s.recv(65536):
            reply += chunk
    return bytes(reply)


def request(method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
    head = {"Host": "127.0.0.1", "Content-Type": "application/json", "Content-Length": str(len(body)),
            **(headers or {})}
    lines = "".join(f"{k}: {v}\r\n" for k, v in head.items())
    return f"{method} {path} HTTP/1.1\r\n{lines}\r\n".encode("latin-1") + body


def parse(reply: bytes) -> tuple[int, dict[str, str], bytes]:
    """(status, headers with lower-case names, body) of a reply, which must start with a status line."""
    head, _, body = reply.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    match = re.fullmatch(r"HTTP/1\.[01] ([1-5][0-9][0-9]) .*", lines[0])
    assert match, f"no status line: {reply[:300]!r}"
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(match[1]), headers, body


def api_error(reply: bytes, status: int) -> dict:
    got, headers, body = parse(reply)
    assert got == status, reply[:500]
    assert headers["content-type"] == "application/json" and int(headers["content-length"]) == len(body)
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"], err
    assert err["type"] == "invalid_request_error", err
    assert "Traceback" not in err["message"]
    return err


def chat(**fields) -> dict:
    return {"model": NAME, "messages": [{"role": "user", "content": "the fox"}], "max_tokens": 3, **fields}


def post(srv, obj_or_bytes, path: str = "/v1/chat/completions") -> bytes:
    body = obj_or_bytes if isinstance(obj_or_bytes, bytes) else json.dumps(obj_or_bytes).encode()
    return exchange(srv, request("POST", path, body))


def assert_answers(srv) -> None:
    status, _, body = parse(post(srv, chat()))
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == "quick brown fox"


# ---- the reproducers ------------------------------------------------------------------------------------------------

def test_binds_loopback_by_default(server):
    assert server.host == "127.0.0.1"
    assert_answers(server)


def test_lone_surrogates_and_invalid_utf8_are_400(server):
    body = b'{"messages": [{"role": "user", "content": "the \\ud800 fox"}], "max_tokens": 3}'
    err = api_error(post(server, body), 400)
    assert err["param"] == "messages[0].content" and err["code"] == "invalid_text"
    err = api_error(post(server, b'{"prompt": "x", "\\udfff": 1}', "/v1/completions"), 400)
    assert err["code"] == "invalid_text"
    err = api_error(post(server, b'{"prompt": ["the \\uDBFF"]}', "/v1/completions"), 400)
    assert err["param"] == "prompt[0]"
    err = api_error(post(server, b'{"prompt": "the \xff\xfe fox"}', "/v1/completions"), 400)
    assert err["code"] == "invalid_encoding"
    # a surrogate pair is one character, and fine
    status, _, reply = parse(post(server, b'{"messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}'))
    assert status == 200, reply


def test_deep_nesting_is_400_before_the_parser_recurses(server):
    for body in (b"[" * 10 ** 5 + b"]" * 10 ** 5, b'{"a": ' * 10 ** 5 + b"1" + b"}" * 10 ** 5,
                 json.dumps(chat(metadata=[[[[]]]])).encode().replace(b"[[[[]]]]", b"[" * 10 ** 5)):
        err = api_error(post(server, body), 400)
        assert str(MAX_JSON_DEPTH) in err["message"] and err["code"] == "invalid_json"
    # brackets inside strings are text, and nesting up to the limit parses (an unknown field is ignored)
    deep = "[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1)
    status, _, reply = parse(post(server, chat(metadata=json.loads(deep), user="[[[[" * 1000)))
    assert status == 200, reply


@pytest.mark.parametrize("text", ["9" * 5000, "-" + "9" * 40, "1e999", "-1e999", "NaN", "Infinity", "-Infinity"])
def test_unrepresentable_numbers_are_400(server, text):
    body = b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": ' + text.encode() + b"}"
    err = api_error(post(server, body), 400)
    assert err["code"] == "invalid_number"


BAD_FIELDS = {
    "max_tokens": [-1, 2.0, 2.5, True, "3", 2 ** 40, [3]],
    "max_completion_tokens": [-1, 1.5, False],
    "temperature": [-0.5, 2.5, "hot", True, [1]],
    "top_p": [1.5, -0.1, False, "1"],
    "top_k": [-1, 1.5, True, 2 ** 40],
    "n": [0, 2, 2.0, True, "1", 10 ** 20],
    "seed": [1.5, "x", True, 2 ** 64, -(2 ** 63) - 1],
    "presence_penalty": [3, -2.5, "x", True],
    "frequency_penalty": [2.01, [0]],
    "logit_bias": [[], "x", {"5": 101}, {"5": True}, {"5": "x"}],
    "logprobs": [True, 1, "x"],
    "top_logprobs": [1, -1, 1.5, True],
    "stop": [7, [1], ["x"] * 17, ["x" * 300], True],
    "stream": ["yes", 1, 0],
    "stream_options": [1, [], {"include_usage": 1}],
    "model": [3, ["x"], True],
    "tools": [{}, "x", [{"type": "function"}]],
    "tool_choice": ["required", {"type": "function"}, 1],
    "response_format": ["json", {"type": "json_object"}, 1],
    "parallel_tool_calls": ["no", 1],
    "user": [5, ["u"]],
    "messages": ["hi", [], [1], [None], [{"content": "x"}], [{"role": "wizard", "content": "x"}],
                 [{"role": 5, "content": "x"}], [{"role": ["user"], "content": "x"}],
                 [{"role": "user", "content": 5}], [{"role": "user", "content": {"text": "x"}}],
                 [{"role": "user", "content": [{"type": "text", "text": 5}]}],
                 [{"role": "user", "content": [{"type": "image_url"}]}], [{"role": "user", "content": "x", "name": 5}]],
}


@pytest.mark.parametrize("key", list(BAD_FIELDS))
def test_every_field_of_a_wrong_type_or_range_is_400(server, key):
    for value in BAD_FIELDS[key]:
        err = api_error(post(server, chat(**{key: value})), 400)
        assert err["param"] is not None and err["param"].startswith(key), (key, value, err)


BAD_COMPLETION_FIELDS = {"prompt": [None, {"a": 1}, [], [True], [1, "a"], [[1], [2]], [-1], [10 ** 6], 5, [[]]],
                         "echo": ["yes", 1], "best_of": [2, 0, True], "suffix": [5, "tail"], "logprobs": [0, 5]}


@pytest.mark.parametrize("key", list(BAD_COMPLETION_FIELDS))
def test_every_completion_field_of_a_wrong_type_or_range_is_400(server, key):
    for value in BAD_COMPLETION_FIELDS[key]:
        body = {"prompt": "the fox", "max_tokens": 3, key: value}
        if value is None:
            del body[key]
        err = api_error(post(server, body, "/v1/completions"), 400)
        assert err["param"] == key, (key, value, err)


def test_unsupported_methods_get_405_with_allow(server):
    for path, allow in (("/v1/models", "GET, HEAD, OPTIONS"), ("/v1/models/" + NAME, "GET, HEAD, OPTIONS"),
                        ("/health", "GET, HEAD, OPTIONS"), ("/", "GET, HEAD, OPTIONS"),
                        ("/v1/chat/completions", "POST, OPTIONS"), ("/v1/completions", "POST, OPTIONS")):
        for method in ("PUT", "DELETE", "PATCH", "TRACE", "BREW", "GET" if "POST" in allow else "POST"):
            reply = exchange(server, request(method, path, b"{}"))
            err = api_error(reply, 405)
            assert parse(reply)[1]["allow"] == allow and err["code"] == "method_not_allowed", (method, path)
        # OPTIONS: 204 with what the path takes, and no CORS headers (a browser's preflight still fails)
        status, headers, body = parse(exchange(server, request("OPTIONS", path)))
        assert (status, headers["allow"], body) == (204, allow, b"")
        assert not any(k.startswith("access-control-") for k in headers)
    status, headers, _ = parse(exchange(server, request("OPTIONS", "*")))
    assert status == 204 and "POST" in headers["allow"]


def test_head_is_get_without_the_body(server):
    for path in ("/v1/models", "/health", "/"):
        status, headers, body = parse(exchange(server, request("HEAD", path)))
        got = exchange(server, request("GET", path))
        assert status == 200 and body == b"" and int(headers["content-length"]) == len(parse(got)[2]), path
    status, headers, body = parse(exchange(server, request("HEAD", "/nope")))
    assert status == 404 and body == b"" and int(headers["content-length"]) > 0


def test_unknown_paths_are_404_json(server):
    for method in ("GET", "POST", "DELETE", "OPTIONS", "HEAD"):
        reply = exchange(server, request(method, "/v1/embeddings", b"{}"))
        if method != "HEAD":
            assert api_error(reply, 404)["code"] == "not_found"
    assert api_error(exchange(server, request("GET", "/v1/models/gpt-9")), 404)["code"] == "model_not_found"


MALFORMED_LINES = [b"GARBAGE\r\n\r\n", b"GET\r\n\r\n", b"GET / HTTP/2.0\r\n\r\n", b"GET / HTTP/1.2\r\n\r\n",
                   b"GET / HTTP/1.x\r\n\r\n", b"GET /health\r\n\r\n", b"GET  /health HTTP/1.0\r\n\r\n",
                   b"GET /he alth HTTP/1.0\r\n\r\n", b"G(T / HTTP/1.0\r\n\r\n", b"GET /\xff HTTP/1.0\r\n\r\n",
                   b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", b"\r\n\r\n",
                   b"GET / HTTP/1.0 extra\r\n\r\n", b"GET http://[::1/ HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"]


@pytest.mark.parametrize("line", MALFORMED_LINES)
def test_malformed_request_lines_get_a_400_status_line_and_a_closed_connection(server, line):
    err = api_error(exchange(server, line, close_write=False), 400)
    assert "Traceback" not in err["message"]


def test_request_line_over_the_limit_is_refused_with_a_status_line(server):
    line = b"GET /" + b"a" * MAX_REQUEST_LINE + b" HTTP/1.0\r\n\r\n"
    assert parse(exchange(server, line, close_write=False))[0] == 414
    status, _, _ = parse(exchange(server, b"GET /?q=" + b"a" * (MAX_REQUEST_LINE - 100) + b" HTTP/1.0\r\n"
                                  b"Host: 127.0.0.1\r\n\r\n"))
    assert status == 200


def test_bad_content_lengths(server):
    body = json.dumps(chat()).encode()
    for value, status in (("-5", 400), ("abc", 400), ("+5", 400), ("5_0", 400), ("1" * 5000, 400),
                          ("99999999999999999999999", 400), (str(10 ** 15), 413), (f"{len(body)}, 3", 400),
                          (str(len(body) + 50), 400)):
        reply = exchange(server, request("POST", "/v1/chat/completions", body, {"Content-Length": value}))
        assert parse(reply)[0] == status, (value, reply[:300])
    two = request("POST", "/v1/chat/completions", body).replace(b"\r\n\r\n", b"\r\nContent-Length: 3\r\n\r\n", 1)
    assert parse(exchange(server, two))[0] == 400
    for headers in ({"X-Long": "x" * 70000}, {f"X-{i}": "1" for i in range(150)}):
        assert parse(exchange(server, request("GET", "/health", b"", headers)))[0] == 431
    assert_answers(server)


def test_an_internal_error_is_a_500_without_traceback_logged_once(caplog):
    srv = serve(_Failing(), _tokenizer(), name=NAME)
    try:
        with caplog.at_level(logging.ERROR, logger="tinygrad.llm"):
            reply = post(srv, chat())
            status, _, body = parse(reply)
            err = json.loads(body)["error"]
            assert status == 500 and err["type"] == "server_error" and "the model fell over" in err["message"]
            assert "Traceback" not in err["message"] and "File " not in err["message"]
        records = [r for r in caplog.records if r.name == "tinygrad.llm"]
        assert len(records) == 1 and records[0].exc_info is not None
    finally:
        srv.stop()


# ---- the fuzz -------------------------------------------------------------------------------------------------------

VALID_BODIES = [
    ("/v1/chat/completions", chat(temperature=0, stop=["dog"], seed=3)),
    ("/v1/chat/completions", chat(stream=True, stream_options={"include_usage": True}, top_p=0.5)),
    ("/v1/chat/completions", {"messages": [{"role": "system", "content": "be brief"},
                                           {"role": "user", "content": [{"type": "text", "text": "the dog"}]}],
                              "max_completion_tokens": 2, "n": 1, "logit_bias": {"3": 1}}),
    ("/v1/completions", {"model": NAME, "prompt": "the lazy dog", "max_tokens": 2, "echo": True, "top_k": 3}),
    ("/v1/completions", {"prompt": [[2, 3, 4]], "max_tokens": 2, "stream": True}),
]
ODD_VALUES = [None, True, False, 0, -1, 1.5, -0.0, 2 ** 31, 10 ** 19, "", "x", "\ud800", "\udc00x\ud83d", [], {},
              [None], {"": {}}, [[[[]]]], "9" * 50, [1, "a", None], {"type": "text"}]
NUMBER_TEXTS = ["9" * 5000, "-" + "9" * 33, "1e999", "-1e999", "NaN", "Infinity", "-Infinity", "1e-999", "0.0",
                "-0", "1" + "0" * 30, "3.0", "true", "01", "1.", ".5", "0x10", "1e5", "2e" + "9" * 40]
METHODS = ["GET", "POST", "HEAD", "OPTIONS", "PUT", "DELETE", "PATCH", "TRACE", "CONNECT", "BREW", "get", "P0ST",
           "X" * 40, "G\x00T", "GET\t", "\xffGET"]
PATHS = ["/", "/v1/models", "/v1/models/" + NAME, "/v1/models/x", "/health", "/v1/chat/completions",
         "/v1/completions", "/chat/completions", "/nope", "*", "//", "/%00", "/" + "a" * 300, "http://127.0.0.1/health",
         "http://[::1/x", "/v1/models/\xe9", "?", "/v1/chat/completions?x=1"]
VERSIONS = ["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/0.9", "HTTP/1.2", "HTTP/1", "http/1.1", "HTTP/1.1 ", "HTTP/",
            "HTTP/11", ""]


def _set_somewhere(rng: random.Random, obj, value) -> None:
    """Put value at a random key of obj or of an object or list nested in it."""
    while True:
        if isinstance(obj, dict):
            key = rng.choice([*obj, "max_tokens", "temperature", "n", "seed", "top_p", "stop", "stream", "model"])
            inner = obj.get(key)
        else:
            key = rng.randrange(len(obj))
            inner = obj[key]
        if isinstance(inner, (dict, list)) and inner and rng.random() < 0.6:
            obj = inner
            continue
        obj[key] = value
        return


def _mutated_body(rng: random.Random) -> bytes:
    path, base = rng.choice(VALID_BODIES)
    obj = json.loads(json.dumps(base))
    kind = rng.randrange(9)
    if kind == 0:  # a wrong type or odd value somewhere
        _set_somewhere(rng, obj, rng.choice(ODD_VALUES))
        body = json.dumps(obj, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
    elif kind == 1:  # a number the parser cannot hold, as text
        marker = 12345.5
        _set_somewhere(rng, obj, marker)
        body = json.dumps(obj).encode().replace(b"12345.5", rng.choice(NUMBER_TEXTS).encode(), 1)
    elif kind == 2:  # deep nesting, of arrays or objects, under the body limit
        depth = rng.choice([MAX_JSON_DEPTH - 2, MAX_JSON_DEPTH + 1, 1000, 10 ** 5, 300_000])
        opener, closer = rng.choice([(b"[", b"]"), (b'{"a":', b"}"), (b'[{"a":', b"}]")])
        deep = opener * depth + b"1" + closer * (depth if rng.random() < 0.7 else depth // 2)
        body = json.dumps(obj).encode().replace(b"{", b'{"x": ' + deep + b", ", 1) if rng.random() < 0.5 else deep
    else:
        body = json.dumps(obj).encode()
        if kind == 3:  # truncated
            body = body[:rng.randrange(len(body))]
        elif kind == 4:  # bytes flipped
            b = bytearray(body)
            for _ in range(rng.randint(1, 8)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            body = bytes(b)
        elif kind == 5:  # bytes inserted, escapes among them
            for _ in range(rng.randint(1, 4)):
                at = rng.randrange(len(body))
                piece = rng.choice([b"\\ud800", b"\\udfff", b"\\u0000", b"\\", b'"', b"\xc3", b"\xed\xa0\x80", b"[",
                                    b"}", b",", bytes(rng.randrange(256) for _ in range(rng.randint(1, 6)))])
                body = body[:at] + piece + body[at:]
        elif kind == 6:  # a lone surrogate escape in a string (or a key)
            at = [m.end() - 1 for m in re.finditer(rb'"', body)]
            pos = rng.choice(at)
            body = body[:pos] + rng.choice([b"\\ud800", b"\\uDBFF", b"\\udc00", b"\\ud83d\\ude00"]) + body[pos:]
        elif kind == 7:  # not an object at all
            body = rng.choice([b"[]", b"null", b"1", b'"x"', b"", b"\xef\xbb\xbf{}", b"{}" * 100, b"{\"a\":1}x"])
        # kind 8: left valid (the server must still answer it)
    ctype = "application/json" if rng.random() < 0.9 else rng.choice(["text/plain", "", "application/json; x=1"])
    return request("POST", path, body, {"Content-Type": ctype})


def _bad_request_line(rng: random.Random) -> bytes:
    kind = rng.randrange(4)
    if kind == 0:
        parts = [rng.choice(METHODS), rng.choice(PATHS), rng.choice(VERSIONS)]
        sep = rng.choice([" ", " ", " ", "  ", "\t", ""])
        line = sep.join(p for p in parts if rng.random() < 0.9)
    elif kind == 1:  # random bytes
        return bytes(rng.randrange(1, 256) for _ in range(rng.randint(1, 200))) + b"\r\n\r\n"
    elif kind == 2:  # too long
        line = "GET /" + "a" * rng.choice([MAX_REQUEST_LINE, 70_000]) + " HTTP/1.1"
    else:  # a valid line, then broken
        line = f"{rng.choice(METHODS[:6])} {rng.choice(PATHS[:7])} HTTP/1.1"
        at = rng.randrange(len(line))
        line = line[:at] + rng.choice(["\x00", "\r", "\n", " ", "\x7f", "\xff", ""]) + line[at + 1:]
    return line.encode("latin-1") + rng.choice([b"\r\n", b"\n"]) + b"Host: 127.0.0.1\r\n\r\n"


def _bad_headers(rng: random.Random) -> bytes:
    path, obj = rng.choice(VALID_BODIES)
    body = json.dumps(obj).encode()
    method = rng.choice(["POST", "POST", "GET", "PUT"])
    kind = rng.randrange(8)
    headers: dict[str, str] = {}
    if kind == 0:
        headers["Content-Length"] = rng.choice(["-1", "-99999999999", "1" * rng.randint(19, 6000), "1e3", "0x10",
                                                " ", "", "3.5", "\xb3", str(len(body) + rng.randint(1, 100)),
                                                str(rng.randint(0, len(body)))])
    elif kind == 1:
        headers["Transfer-Encoding"] = rng.choice(["chunked", "gzip, chunked", "x"])
    elif kind == 2:
        headers["Host"] = rng.choice(["", "evil.example", "127.0.0.1:xx", "[::1", "[]", "\xff", "localhost:80:80"])
    elif kind == 3:
        headers[rng.choice(["X-Big", "Cookie"])] = "x" * rng.choice([70_000, 1000])
    elif kind == 4:
        headers.update({f"X-{i}": "1" for i in range(rng.choice([99, 150]))})
    elif kind == 5:
        raw = request(method, path, body)
        junk = rng.choice([b"no colon here\r\n", b": empty name\r\n", b" folded\r\n", b"\xff\xfe: x\r\n",
                           b"Content-Length: 5\r\n", b"\x00\r\n"])
        return raw.replace(b"\r\n", b"\r\n" + junk, 1)
    elif kind == 6:
        headers["Content-Type"] = rng.choice(["", "application/jsonx", "\xff", "multipart/form-data; boundary=x"])
    else:  # no Content-Length at all
        return request(method, path, body).replace(f"Content-Length: {len(body)}\r\n".encode(), b"")
    return request(method, path, body, headers)


def _bad_method(rng: random.Random) -> bytes:
    body = json.dumps(rng.choice(VALID_BODIES)[1]).encode() if rng.random() < 0.5 else b""
    return request(rng.choice(METHODS[2:]), rng.choice(PATHS[:9]), body)


def test_fuzz_malformed_requests_never_get_a_5xx(server):
    rng = random.Random(34)
    makers = [_mutated_body] * 4 + [_bad_request_line] * 2 + [_bad_headers] * 2 + [_bad_method]
    started = time.monotonic()
    statuses: dict[int, int] = {}
    for i in range(300):
        data = rng.choice(makers)(rng)
        if not data.strip(b"\r\n"):
            data = b"?" + data  # an empty connection gets no answer; the fuzz asks for one
        reply = exchange(server, data)
        status = parse(reply)[0]
        assert status < 500, f"request {i}: {data[:300]!r} -> {reply[:500]!r}"
        statuses[status] = statuses.get(status, 0) + 1
    assert time.monotonic() - started < 50, statuses
    assert sum(n for s, n in statuses.items() if s >= 400) >= 200, statuses  # the fuzz mostly reached refusals
    assert_answers(server)
