"""The chat page of `python -m tinygrad.llm` in headless Chromium: a tiny LLaMA with random weights is served from a
subprocess, the page opens with `?q=...` (which sends that message on load), streams the answer from
/v1/chat/completions, and the DOM must then hold the same answer the API gives without streaming; a second message
typed into the form continues the conversation, and a message too long for the context shows the server's error.

Chromium is driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: JSON messages ending in a NUL
byte on file descriptors 3 and 4), with nothing to install. Its command line alone (`--dump-dom` with
`--virtual-time-budget`) cannot check this page: virtual time waits for pending requests but not for the body of a
response that is still streaming, so the DOM is dumped while the answer is being written. Screenshots go to the
test's tmp dir, and also to $LLM_SCREENSHOT_DIR when set. Skipped where no Chromium is installed (Debian:
`apt-get install -y chromium`) or transformers/torch/tokenizers are missing (the tiny model is made with them).
"""

from __future__ import annotations

import base64
import fcntl
import html
import json
import os
import queue
import re
import select
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_support import find_chromium, stop_server

# checked before Chromium starts: without them there is no model to serve
transformers = pytest.importorskip("transformers", reason="the tiny model is made with transformers")
torch = pytest.importorskip("torch", reason="the tiny model is made with transformers on PyTorch")
tokenizers = pytest.importorskip("tokenizers", reason="the tiny model's tokenizer is made with tokenizers")
pytest.importorskip("jinja2", reason="the server renders chat templates with jinja2")

PNG = b"\x89PNG\r\n\x1a\n"
STARTUP_TIMEOUT = 300  # seconds for the server to load, and for an answer: the first one compiles kernels
ANSWER_TIMEOUT = 300
MAX_TOKENS = 12
WORDS = "the quick brown fox jumps over a lazy dog while one small cat sat on the warm mat".split()
SPECIALS = ["<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} </s> {% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


BASH = shutil.which("bash") or "/bin/bash"


def _above(fd: int, low: int) -> int:
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, low)
    os.close(fd)
    return moved


class DevTools:
    """A headless Chromium and one page of it, spoken to over --remote-debugging-pipe."""

    def __init__(self, exe: str, profile: Path, width: int = 1100, height: int = 800):
        # the child's ends moved above fd 9, so that placing them on 3 and 4 cannot overwrite one with the other
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        to_browser_r, from_browser_w = (_above(fd, 10) for fd in (to_browser_r, from_browser_w))
        args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--hide-scrollbars", f"--user-data-dir={profile}", f"--window-size={width},{height}",
                "--remote-debugging-pipe", "about:blank"]
        # Chromium reads commands on fd 3 and writes replies on fd 4: bash puts the pipe ends there (dash, the
        # usual /bin/sh, takes only one-digit descriptors in redirections)
        script = f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w} {to_browser_r}<&- {from_browser_w}>&-'
        self.proc = subprocess.Popen([BASH, "-c", script, exe, *args], pass_fds=(to_browser_r, from_browser_w),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buf = b""
        self._next_id = 0
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def _message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer over the DevTools pipe")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                err = self.proc.stderr.read().decode(errors="replace")[-2000:] if self.proc.stderr else ""
                raise RuntimeError(f"Chromium closed the DevTools pipe (exit {self.proc.poll()}): {err}")
            self._buf += chunk
        raw, _, self._buf = self._buf.partition(b"\0")
        return json.loads(raw)

    def call(self, method: str, session: bool = False, timeout: float = 60.0, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:  # events arrive in between: skip them
            reply = self._message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result", {}))

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str) -> None:
        self.call("Page.navigate", session=True, url=url)

    def wait_state(self, states: tuple[str, ...], timeout: float = ANSWER_TIMEOUT) -> str:
        """Poll the page's body[data-state] until it is one of states (the page sets it as it goes)."""
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            state = self.evaluate("document.body ? document.body.dataset.state : null")
            if state in states:
                return str(state)
            time.sleep(0.2)
        raise TimeoutError(f"the page stayed in state {state!r} for {timeout} s")

    def dom(self) -> str:
        return str(self.evaluate("document.documentElement.outerHTML"))

    def screenshot(self, path: Path) -> Path:
        data = base64.b64decode(self.call("Page.captureScreenshot", session=True, format="png")["data"])
        assert data[:8] == PNG
        path.write_bytes(data)
        return path

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_browser, self._from_browser):
            os.close(fd)
        if self.proc.stderr:
            self.proc.stderr.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevTools]:
    exe = find_chromium()
    if exe is None:
        pytest.skip("no Chromium here (Debian: apt-get install -y chromium); the chat page is not checked")
    tools = DevTools(exe, tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield tools
    finally:
        tools.close()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny LLaMA (random weights), a word-level tokenizer and a chat template."""
    d = tmp_path_factory.mktemp("tiny-llama")
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=257, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, bos_token_id=1, eos_token_id=None,
    )).save_pretrained(d, safe_serialization=True)
    vocab = {"[UNK]": 0}
    for w in SPECIALS + WORDS:
        vocab.setdefault(w, len(vocab))
    while len(vocab) < 257:
        vocab[f"w{len(vocab)}"] = len(vocab)
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.add_special_tokens(SPECIALS)
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE, "bos_token": "<s>",
                                                         "eos_token": "</s>"}))
    return d


Served = tuple[str, "subprocess.Popen[str]", list[str]]  # the server's URL, its process, its stderr lines


@pytest.fixture(scope="module")
def server(model_dir: Path) -> Iterator[Served]:
    """`python -m tinygrad.llm --model DIR --port 0`: its URL (read from what it prints), its stderr lines."""
    env = {**os.environ}
    env.pop("DISPLAY", None)
    proc = subprocess.Popen([sys.executable, "-m", "tinygrad.llm", "--model", str(model_dir), "--port", "0",
                             "--name", "tiny"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env)
    lines: queue.Queue[str] = queue.Queue()
    log: list[str] = []

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            log.append(line)
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        url = None
        while url is None:
            left = deadline - time.monotonic()
            if left <= 0 or proc.poll() is not None:
                pytest.fail(f"python -m tinygrad.llm did not start serving:\n{''.join(log)}")
            try:
                line = lines.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            if found := re.search(r"serving tiny at (http://127\.0\.0\.1:\d+/)", line):
                url = found.group(1)
        yield url, proc, log
    finally:
        stop_server(proc)


def ask(url: str, messages: list[dict[str, str]]) -> str:
    """The answer of the API without streaming (greedy, so the page must show the same)."""
    body = json.dumps({"model": "tiny", "messages": messages, "temperature": 0, "max_tokens": MAX_TOKENS}).encode()
    req = urllib.request.Request(url + "v1/chat/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=ANSWER_TIMEOUT) as r:
        return str(json.loads(r.read())["choices"][0]["message"]["content"])


def messages_in(dom: str) -> list[tuple[str, str]]:
    """(role, text) of each message the page shows."""
    found = re.findall(r'<div class="msg (user|assistant)[^"]*"(?: data-pieces="\d+")?><div class="role">\w+</div>'
                       r'<div class="text">(.*?)</div>', dom, re.S)
    return [(role, html.unescape(text)) for role, text in found]


def screenshot_dirs(tmp_path: Path) -> list[Path]:
    dirs = [tmp_path]
    if extra := os.environ.get("LLM_SCREENSHOT_DIR"):
        Path(extra).mkdir(parents=True, exist_ok=True)
        dirs.append(Path(extra))
    return dirs


def test_the_page_streams_a_conversation(browser: DevTools, server: Served, tmp_path: Path) -> None:
    url, _, _ = server
    first = "the quick brown fox"
    expected1 = ask(url, [{"role": "user", "content": first}])  # also compiles the kernels before the page asks
    assert expected1.strip()
    query = urllib.parse.urlencode({"q": first, "temperature": 0, "max_tokens": MAX_TOKENS})
    browser.open(f"{url}?{query}")
    assert browser.wait_state(("done", "error")) == "done", browser.dom()
    dom = browser.dom()
    assert messages_in(dom) == [("user", first), ("assistant", expected1)]
    pieces = re.search(r'<div class="msg assistant[^"]*" data-pieces="(\d+)"', dom)
    assert pieces and int(pieces.group(1)) > 1, "the answer was streamed in pieces, not sent at once"
    assert re.search(r"\d+ tokens in [\d.]+ s", dom), "the usage note under the answer"
    assert "tiny · context 64 tokens" in html.unescape(dom)
    # a second message through the form: the answer continues the conversation
    second = "a lazy dog"
    expected2 = ask(url, [{"role": "user", "content": first}, {"role": "assistant", "content": expected1},
                          {"role": "user", "content": second}])
    browser.evaluate(f"document.getElementById('input').value = {json.dumps(second)};"
                     "document.getElementById('form').requestSubmit(); true")
    assert browser.wait_state(("done", "error")) == "done", browser.dom()
    assert messages_in(browser.dom()) == [("user", first), ("assistant", expected1), ("user", second),
                                          ("assistant", expected2)]
    for d in screenshot_dirs(tmp_path):
        assert browser.screenshot(d / "llm_chat.png").stat().st_size > 1000


def test_the_page_shows_server_errors(browser: DevTools, server: Served, tmp_path: Path) -> None:
    url, _, _ = server
    too_long = " ".join(["fox"] * 80)  # more tokens than the 64 of the context
    browser.open(f"{url}?{urllib.parse.urlencode({'q': too_long, 'temperature': 0})}")
    assert browser.wait_state(("done", "error")) == "error"
    dom = html.unescape(browser.dom())
    assert "Error: this model's maximum context length is 64 tokens" in dom
    for d in screenshot_dirs(tmp_path):
        browser.screenshot(d / "llm_chat_error.png")


def test_ctrl_c_stops_the_server(server: Served) -> None:
    url, proc, log = server
    stop_server(proc)
    assert proc.returncode == 0
    deadline = time.monotonic() + 10
    while not any("stopped" in line for line in log) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert any("stopped" in line for line in log), "".join(log)
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "health", timeout=5)
