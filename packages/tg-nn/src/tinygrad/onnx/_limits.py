"""How large a tensor a model may make. A few bytes of graph can ask for any size (a Constant holding a huge dimension
feeding ConstantOfShape, an Expand, a Resize with a vast scale), and tensors are lazy: nothing is allocated until the
outputs are realized, by which time the size is a fact. So every tensor a node makes is measured when the node
builds it, and one out of all proportion to the model file and its inputs is refused with an OnnxError, before
anything holds its memory.

The default limit grows with what the caller handed over (the model's bytes, the call's input bytes) from a floor
that real models stay far below; a trusted model that needs more passes `max_tensor_bytes=` to OnnxRunner, or sets
the environment variable named by ENV_VAR before the runner is made.
"""

from __future__ import annotations

import math
import operator
import os
from collections.abc import Sequence

from tinygrad.onnx._proto import OnnxError

ENV_VAR = "TG_ONNX_MAX_TENSOR_BYTES"
#: bytes any model may make in one tensor, however small the model and its inputs
FLOOR_BYTES = 2 << 30
#: beyond the floor: this many times the bytes of the model file and the call's inputs together
PER_GIVEN_BYTE = 64


def _fmt(n: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def _parse(value: object, source: str) -> int:
    """A positive number of bytes: an int given to the runner, or the text of the environment variable."""
    try:
        if isinstance(value, str):
            n = int(value.replace("_", "").strip())
        elif isinstance(value, bool):
            raise TypeError
        else:
            n = operator.index(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise (ValueError if isinstance(value, str) else TypeError)(
            f"{source} must be a number of bytes (an int), got {value!r}") from None
    if n <= 0:
        raise ValueError(f"{source} must be a positive number of bytes, got {n}")
    return n


class SizeLimit:
    """The largest tensor, in bytes, that one runner lets a node make: fixed by the caller, or computed from the
    model's bytes and those of the current call's inputs."""

    def __init__(self, model_bytes: int, max_tensor_bytes: int | None):
        self.model_bytes, self.input_bytes = model_bytes, 0
        self.fixed: int | None = None
        self.source = ""
        if max_tensor_bytes is not None:
            self.fixed, self.source = _parse(max_tensor_bytes, "max_tensor_bytes"), "max_tensor_bytes="
        elif (env := os.environ.get(ENV_VAR, "").strip()):
            self.fixed, self.source = _parse(env, f"the environment variable {ENV_VAR}"), f"${ENV_VAR}"

    @property
    def limit(self) -> int:
        if self.fixed is not None:
            return self.fixed
        return max(FLOOR_BYTES, PER_GIVEN_BYTE * (self.model_bytes + self.input_bytes))

    def _why(self) -> str:
        if self.fixed is not None:
            return f"the limit set by {self.source}"
        return (f"the limit for this model: the larger of {_fmt(FLOOR_BYTES)} and {PER_GIVEN_BYTE}x the "
                f"{self.model_bytes} bytes of the model plus the {self.input_bytes} bytes of its inputs; a model "
                f"asking for that much more than it was given is damaged or hostile")

    def check(self, what: str, shape: Sequence[int], itemsize: int, dtype: str = "") -> None:
        """Refuse a tensor of `shape` with elements of `itemsize` bytes that would pass the limit."""
        if any(d < 0 for d in shape):
            raise OnnxError(f"{what}: negative dimension in shape {tuple(shape)}")
        nbytes = math.prod(shape) * itemsize
        limit = self.limit
        if nbytes <= limit:
            return
        kind = f"{dtype} " if dtype else ""
        raise OnnxError(f"{what}: would make a {kind}tensor of shape {tuple(shape)} ({_fmt(nbytes)}), more than "
                        f"{_fmt(limit)}, {self._why()}. If you trust the model, raise the limit: "
                        f"OnnxRunner(..., max_tensor_bytes={nbytes}) or the environment variable {ENV_VAR}={nbytes}")
