"""The local page: an http.server on 127.0.0.1 serving the static viewer and one trace as /trace.json.

Only the loopback interface is bound, only the package's own static files and the trace are served, and requests
must name this host (a page elsewhere cannot reach the trace through a DNS name rebound to 127.0.0.1). Each request
runs on its own thread, at most MAX_THREADS at once (more wait in the listen queue), and a connection that sends
nothing is dropped after REQUEST_TIMEOUT seconds, so `stop()` never waits on a stalled browser.
"""

from __future__ import annotations

import http.server
import json
import os
import sys
import webbrowser
from importlib import resources
from typing import Any

from tinygrad.localserver import LOOPBACK, BackgroundServer, BoundedHTTPServer, free_port

__all__ = ["VizServer", "display_present", "free_port", "load", "port_from_env", "serve_file", "start"]

MAX_THREADS = 8
REQUEST_TIMEOUT = 10.0
STATIC_FILES = {"index.html": "text/html; charset=utf-8", "viz.js": "text/javascript; charset=utf-8",
                "viz.css": "text/css; charset=utf-8"}


def _static() -> dict[str, bytes]:
    root = resources.files("tinygrad.viz") / "static"
    return {name: (root / name).read_bytes() for name in STATIC_FILES}


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    timeout = REQUEST_TIMEOUT  # HTTP/1.0 (the default): one request per connection, so no idle keep-alive holds a slot

    def _send(self, body: bytes, content_type: str, status: int = 200, head: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _serve(self, head: bool) -> None:
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0].strip("[]")
        if host not in ("127.0.0.1", "localhost"):
            self._send(b"only 127.0.0.1 or localhost may ask\n", "text/plain", 403, head)
            return
        name = self.path.split("?", 1)[0].split("#", 1)[0].lstrip("/") or "index.html"
        if name == "trace.json":
            self._send(self.server.trace_bytes, "application/json", head=head)
        elif name in self.server.static:
            self._send(self.server.static[name], STATIC_FILES[name], head=head)
        else:
            self._send(b"not found\n", "text/plain", 404, head)

    def do_GET(self) -> None:
        self._serve(head=False)

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def log_message(self, format: str, *args: Any) -> None:
        if os.environ.get("VIZ_LOG"):  # quiet by default: the terminal is the program's
            super().log_message(format, *args)


class _Server(BoundedHTTPServer):
    max_threads = MAX_THREADS
    allow_reuse_address = False  # two viewers must not share a port

    def __init__(self, port: int, trace_bytes: bytes):
        self.trace_bytes = trace_bytes
        self.static = _static()
        super().__init__(LOOPBACK, port, _Handler)


class VizServer(BackgroundServer):
    """A running viewer: `url`, and `stop()` (also on leaving a `with` block)."""

    def __init__(self, data: dict[str, Any] | bytes, port: int = 0):
        body = data if isinstance(data, bytes) else json.dumps(data, separators=(",", ":")).encode()
        super().__init__(_Server(port, body), LOOPBACK, thread_name="tinygrad-viz", label="VIZ")


def display_present() -> bool:
    """Whether opening a browser can show anything: a desktop session (macOS and Windows always have one)."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def port_from_env() -> int:
    value = os.environ.get("VIZ_PORT", "")
    try:
        return int(value) if value else 0
    except ValueError:
        raise ValueError(f"VIZ_PORT={value!r} is not a port number") from None


def start(data: dict[str, Any] | bytes, port: int | None = None, browser: bool | None = None) -> VizServer:
    """Serve `data` (a trace dict, or its JSON) on 127.0.0.1, print the URL and open a browser where one can show.
    `port`: None reads $VIZ_PORT, 0 takes a free one. `browser`: None opens one unless VIZ_NO_BROWSER=1 or there is
    no display."""
    port = port_from_env() if port is None else port
    try:
        server = VizServer(data, port)
    except OSError as e:
        raise OSError(f"VIZ: cannot serve on 127.0.0.1:{port}: {e}; choose another port (VIZ_PORT, --port)") from e
    print(f"VIZ: serving {server.url} (Ctrl-C to stop)", file=sys.stderr, flush=True)
    if browser is None:
        browser = os.environ.get("VIZ_NO_BROWSER", "") in ("", "0")
    if browser and display_present():
        try:
            webbrowser.open(server.url)
        except Exception as e:  # no usable browser: the printed URL is enough
            print(f"VIZ: could not open a browser ({e}); open {server.url}", file=sys.stderr)
    return server


def load(path: str) -> dict[str, Any]:
    """A saved trace; a bare PROFILE trace (Chrome trace events) opens too, as a trace with only a timeline."""
    with open(path) as f:
        data = json.load(f)
    if isinstance(data, dict) and data.get("format") == "tinygrad-viz":
        return data
    if (isinstance(data, dict) and "traceEvents" in data) or isinstance(data, list):
        profile = data if isinstance(data, dict) else {"traceEvents": data}
        return {"format": "tinygrad-viz", "version": 1, "schedules": [], "kernels": [], "profile": profile,
                "dropped": {"kernels": 0, "schedules": 0}, "argv": [], "source_file": path}
    raise ValueError(f"{path} is neither a VIZ trace nor a PROFILE trace")


def serve_file(path: str, port: int | None = None, browser: bool | None = None) -> None:
    """Serve a saved trace until Ctrl-C."""
    start(load(path), port, browser).wait()

