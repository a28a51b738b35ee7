"""An http.server run in the background, as tinygrad's local pages serve (the VIZ viewer, tinygrad.llm).

`BoundedHTTPServer` serves each request on its own daemon thread, at most `max_threads` at once (more wait in the
listen queue), so a stalled client neither exhausts the process nor keeps it alive after `stop()`. `BackgroundServer`
runs one on a daemon thread: `url`, `host`, `port`, `stop()` (also on leaving a `with` block) and `wait()` (serve
until Ctrl-C). The host is the caller's choice; the servers built on this bind 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import http.server
import socket
import sys
import threading
from typing import Any, Self

__all__ = ["BackgroundServer", "BoundedHTTPServer", "free_port"]

LOOPBACK = "127.0.0.1"


class BoundedHTTPServer(http.server.ThreadingHTTPServer):
    """A ThreadingHTTPServer on (host, port) (an IPv6 host where it has a ':') with at most `max_threads` requests in
    flight and daemon request threads."""

    daemon_threads = True  # a stalled connection must not keep the process alive after stop()
    max_threads = 8

    def __init__(self, host: str, port: int, handler: type[http.server.BaseHTTPRequestHandler]):
        self._slots = threading.BoundedSemaphore(self.max_threads)
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__((host, port), handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        self._slots.acquire()  # the accept loop waits here while max_threads requests are in flight
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class BackgroundServer:
    """`httpd` serving on a daemon thread named `thread_name`: `url` (ending in "/"), `host`, `port`, and `stop()`
    (also on leaving a `with` block). `wait()` serves until Ctrl-C, then prints "`label`: stopped" and stops."""

    def __init__(self, httpd: BoundedHTTPServer, host: str, thread_name: str, label: str):
        self._httpd, self._label = httpd, label
        self.host, self.port = host, int(httpd.server_address[1])
        self.url = f"http://{f'[{host}]' if ':' in host else host}:{self.port}/"
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, name=thread_name,
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting requests and close the socket; a request in flight finishes on its own thread."""
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join()
        self._httpd.server_close()

    def wait(self) -> None:
        try:
            while self._thread.is_alive():
                self._thread.join(0.5)
        except KeyboardInterrupt:
            print(f"{self._label}: stopped", file=sys.stderr)
        finally:
            self.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def free_port(host: str = LOOPBACK) -> int:
    """A port nothing listens on now (for callers that must name one before starting a server)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
