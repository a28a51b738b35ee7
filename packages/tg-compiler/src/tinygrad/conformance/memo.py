"""A per-session memo for expensive shared work (one kernel carries many tests) that also remembers failures.

`functools.cache` forgets an exception, so every test sharing a kernel that fails to compile would compile it
again; here the first failure is kept and raised again to each test that asks.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")
_RESULTS: dict[Hashable, tuple[bool, Any]] = {}


def memoized(key: Hashable, make: Callable[[], T]) -> T:
    if key not in _RESULTS:
        try:
            _RESULTS[key] = (True, make())
        except Exception as e:  # kept and re-raised: each test that shares the kernel fails with the same cause
            _RESULTS[key] = (False, e)
    ok, value = _RESULTS[key]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]
