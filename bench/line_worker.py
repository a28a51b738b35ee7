"""A benchmark's worker process spoken to in JSON lines: `python SCRIPT --worker ARGS...` prints one JSON object a
line (the first names its version), and answers each request written to its stdin with one line."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


class LineWorker:
    def __init__(self, script: str, *args: str):
        self.proc = subprocess.Popen([sys.executable, script, "--worker", *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.version = self._reply()["version"]

    def _reply(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the benchmark's worker {self.proc.args} stopped (exit status {self.proc.wait()})")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def ask(self, **req: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)
