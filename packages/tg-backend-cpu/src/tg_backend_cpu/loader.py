"""Loading a compiled shared object (bytes from the compile cache) into the process."""

from __future__ import annotations

import ctypes
import os
import tempfile


def load_library(lib: bytes) -> ctypes.CDLL:
    """dlopen the bytes through a private temporary file; the mapping outlives the file, which is removed at once."""
    fd, path = tempfile.mkstemp(suffix=".so", prefix="tg-kernel-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(lib)
        return ctypes.CDLL(path)
    finally:
        os.unlink(path)
