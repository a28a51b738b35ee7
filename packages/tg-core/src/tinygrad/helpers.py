"""Small shared utilities: environment knobs, `Context`, `GlobalCounters`, caching paths, iteration helpers."""

from __future__ import annotations

import contextlib
import functools
import os
import pathlib
import sys
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, TypeVar

T = TypeVar("T")


@functools.cache
def getenv(key: str, default: Any = 0) -> Any:
    """Read an environment variable, converted to the type of `default`."""
    return type(default)(os.environ.get(key, default))


def prod(xs: Iterable[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def argsort(xs: Sequence[Any]) -> list[int]:
    return sorted(range(len(xs)), key=xs.__getitem__)












def colored(text: str, color: str | None) -> str:
    codes = {"red": 31, "green": 32, "yellow": 33, "blue": 34, "magenta": 35, "cyan": 36, "white": 37}
    if color is None or not sys.stdout.isatty():
        return text
    return f"\033[{codes[color]}m{text}\033[0m"




class ContextVar:
    """A named integer knob, initialised from the environment and overridable with `Context`."""

    registry: dict[str, ContextVar] = {}

    def __init__(self, key: str, default: int):
        self.key = key
        self.value = int(os.environ.get(key, default))
        ContextVar.registry[key] = self

    def __bool__(self) -> bool:
        return bool(self.value)

    def __ge__(self, other: int) -> bool:
        return self.value >= other

    def __gt__(self, other: int) -> bool:
        return self.value > other

    def __le__(self, other: int) -> bool:
        return self.value <= other

    def __lt__(self, other: int) -> bool:
        return self.value < other

    def __int__(self) -> int:
        return self.value

    def __repr__(self) -> str:
        return f"ContextVar({self.key}={self.value})"


class GlobalCounters:
    """What this process has run, as tinygrad counts it: kernels launched (`kernel_count`, JIT replays and copy
    kernels included), their estimated FLOPs (`global_ops`) and bytes read and written (`global_mem`), the device
    time of timed launches in seconds (`time_sum_s`, with DEBUG>=2), and the bytes of device memory held now
    (`mem_used`). `GlobalCounters.reset()` zeroes the first four; memory stays counted until it is freed."""

    global_ops: ClassVar[int] = 0
    global_mem: ClassVar[int] = 0
    time_sum_s: ClassVar[float] = 0.0
    kernel_count: ClassVar[int] = 0
    mem_used: ClassVar[int] = 0

    @staticmethod
    def reset() -> None:
        GlobalCounters.global_ops = GlobalCounters.global_mem = GlobalCounters.kernel_count = 0
        GlobalCounters.time_sum_s = 0.0

    @staticmethod
    def count_launches(n: int, ops: int, mem: int) -> None:
        GlobalCounters.kernel_count += n
        GlobalCounters.global_ops += ops
        GlobalCounters.global_mem += mem


DEBUG = ContextVar("DEBUG", 0)
NOOPT = ContextVar("NOOPT", 0)
DISABLE_COMPILER_CACHE = ContextVar("DISABLE_COMPILER_CACHE", 0)


class Context(contextlib.ContextDecorator):
    """Temporarily set knobs: `with Context(DEBUG=2): ...`."""

    def __init__(self, **kwargs: int):
        unknown = [k for k in kwargs if k not in ContextVar.registry]
        if unknown:
            raise KeyError(f"unknown Context variable(s) {unknown}; known ones are {sorted(ContextVar.registry)}")
        self.kwargs = kwargs
        self.saved: dict[str, int] = {}

    def __enter__(self) -> Context:
        for k, v in self.kwargs.items():
            self.saved[k] = ContextVar.registry[k].value
            ContextVar.registry[k].value = int(v)
        return self

    def __exit__(self, *exc: object) -> None:
        for k, v in self.saved.items():
            ContextVar.registry[k].value = v


def cache_dir() -> pathlib.Path:
    """Where compiled kernels are cached: $TINYGRAD_CACHE_DIR, else the user's cache directory."""
    if (override := os.environ.get("TINYGRAD_CACHE_DIR")) is not None:
        return pathlib.Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "tinygrad"

