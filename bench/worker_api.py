"""What workload modules share inside a worker process: the "not available" signal and timing helpers.

Workers run in other frameworks' venvs, so this module uses only the standard library.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

#: A measurement: seconds per unit of work, plus any other figure the workload reports (accuracy, ...).
Result = dict[str, float]


class NotAvailable(Exception):
    """The framework cannot run this workload; the message is shown in the table instead of a number."""


def calibrate(step: Callable[[], Any], seconds: float, at_least: int = 5) -> int:
    """How many calls of `step` take about `seconds`, so one measurement lasts long enough to time well."""
    count, start = 0, time.perf_counter()
    while count < at_least or time.perf_counter() - start < seconds:
        step()
        count += 1
    return count


def per_call(step: Callable[[], Any], calls: int, sync: Callable[[], Any] = lambda: None) -> Result:
    """Seconds per call of `step`, `calls` calls in a row, synchronising the device once at the end."""
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        step()
    sync()
    return {"seconds": (time.perf_counter() - start) / calls}
