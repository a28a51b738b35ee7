"""VIZ: see what the compiler did to each kernel, in a browser.

Run a program with `VIZ=1` (or wrap a part of it in `Context(VIZ=1)`): every schedule's tensor graph and every
kernel's AST after each pass of get_program, its source and its program are recorded (record.py). At exit the trace
is saved to $VIZ_PATH (default ./tinygrad_viz.json) and, in an interactive run, served on 127.0.0.1 (a free port, or
$VIZ_PORT) until Ctrl-C; `python -m tinygrad.viz TRACE.json [--port N] [--no-browser]` opens a saved one again.
`VIZ_SERVE=0` only saves (as does a run whose stdin is not a terminal), `VIZ_SERVE=1` serves even then, and
`VIZ_NO_BROWSER=1` prints the URL without opening a browser. With PROFILE=1 too, the page shows launch timings and
a timeline.

From Python: `tinygrad.viz.serve()` saves and serves what was recorded so far (`block=False` returns the running
server, with `.url` and `.stop()`); `trace()`, `save()` and `clear()` are the recording itself.
"""

from __future__ import annotations

import sys
from typing import Any

from tinygrad.viz.record import clear, default_path, save, trace
from tinygrad.viz.server import VizServer, load, start


def serve(data: dict[str, Any] | None = None, path: str | None = None, port: int | None = None,
          browser: bool | None = None, block: bool = True) -> VizServer:
    """Save `data` (default: what this process recorded) to `path` (default $VIZ_PATH or ./tinygrad_viz.json) and
    serve it; with `block`, until Ctrl-C (the returned server is then stopped)."""
    data = trace() if data is None else data
    saved = save(path, data)
    print(f"VIZ: saved the trace to {saved}", file=sys.stderr, flush=True)
    server = start(data, port, browser)
    if block:
        server.wait()
    return server


__all__ = ["VizServer", "clear", "default_path", "load", "save", "serve", "start", "trace"]
