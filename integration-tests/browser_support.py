"""What the browser-driven tests share: finding Chromium, and stopping the local server a test started."""

from __future__ import annotations

import shutil
import signal
import subprocess


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if (path := shutil.which(name)) is not None:
            return path
    return None


def stop_server(proc: subprocess.Popen[str], drain_pipes: bool = False, timeout: float = 30) -> None:
    """Ctrl-C the server (it stops itself), killing it after `timeout` seconds. `drain_pipes`: read what is left in
    its stdout/stderr pipes while waiting (a server whose pipes nothing else reads could block writing to them)."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
    wait = proc.communicate if drain_pipes else proc.wait
    try:
        wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        wait()
