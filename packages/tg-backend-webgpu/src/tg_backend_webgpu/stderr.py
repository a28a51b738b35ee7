"""Holding back what native code writes to stderr while a probe runs.

Looking for a WebGPU adapter makes wgpu-native load every graphics backend it has; on a machine without a display
its OpenGL backend asks EGL for a Wayland connection, and libwayland writes `error: XDG_RUNTIME_DIR is invalid or
not set in the environment.` straight to file descriptor 2, once per look. That is noise when an adapter is found
(`python -m tinygrad.device` printed it twice). It can also be the only hint of why none is found, so the text is
held, not dropped: the caller passes it on when the probe failed.

The file descriptor is process-wide: output that another thread writes in the meantime is held with the probe's
and dropped with it on success. A probe runs once or twice per process (the plugin's check caches its answer, and
opening the device looks once more), before a program's own work starts.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from typing import IO, TypeVar

from tinygrad.helpers import DEBUG

T = TypeVar("T")


def hold_stderr(probe: Callable[[], T], failed: Callable[[T], bool]) -> T:
    """Run `probe` with file descriptor 2 sent to a temporary file. What it wrote there is written to the real
    stderr afterwards when the probe raised, when `failed(result)` is true, or with DEBUG>=1; else it is dropped."""
    try:
        _flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no descriptor 2 to redirect (closed)
        return probe()
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            result = probe()
        except BaseException:
            _restore(saved, held, show=True)
            raise
        _restore(saved, held, show=DEBUG >= 1 or failed(result))
    return result


def _restore(saved: int, held: IO[bytes], show: bool) -> None:
    _flush()  # Python's own buffered writes from the probe go with the held text
    os.dup2(saved, 2)
    os.close(saved)
    held.seek(0)
    text = held.read()
    while show and text:  # where the native code wrote it: the descriptor, not sys.stderr
        text = text[os.write(2, text):]


def _flush() -> None:
    if sys.stderr is not None:  # None under pythonw
        sys.stderr.flush()
