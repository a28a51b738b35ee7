"""A renderer keeps no state of its own while it renders (docs/architecture.md, section 5), so one renderer may
render kernels on several threads at once. These helpers let a backend's tests check that of its renderer: record
the program the renderer walks for a kernel, then render several such programs from as many threads at once, many
times over, with the interpreter switching threads every microsecond, and compare each source with its render
alone. No device is needed: only the renderer runs."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tinygrad.uop.ops import UOp

#: renders per thread: enough that, with threads switching every microsecond, the walks interleave many times
RENDERS = 200


def recorded_render(renderer: Any, build: Callable[[], str]) -> tuple[str, list[UOp], str]:
    """(kernel name, the program `renderer.render` walked, the source) of the last kernel that `build()` renders
    (`build` compiles a kernel with the renderer, e.g. `lambda: get_program(ast, r).src`)."""
    seen: list[tuple[str, list[UOp]]] = []
    render = renderer.render

    def recording(name: str, program: list[UOp]) -> str:
        seen.append((name, program))
        return render(name, program)
    renderer.render = recording  # on the instance: the class's method is untouched
    try:
        src = build()
    finally:
        del renderer.render
    if not seen:
        raise ValueError("build() rendered no kernel with this renderer")
    return seen[-1][0], seen[-1][1], src


@contextmanager
def fast_thread_switches() -> Iterator[None]:
    """Threads take turns every microsecond instead of every 5 ms, so that their renders interleave."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def renders_on_threads(renderer: Any, jobs: list[tuple[str, list[UOp], str]], renders: int = RENDERS) -> list[str]:
    """Render each job's program (from `recorded_render`) on a thread of its own, all at once, `renders` times, and
    return what went wrong: a render that raised or whose source differs from the job's render alone (empty: none)."""
    start = threading.Barrier(len(jobs))
    wrong: list[str] = []

    def work(which: int, name: str, program: list[UOp], alone: str) -> None:
        start.wait()
        for i in range(renders):
            try:
                src = renderer.render(name, program)
            except Exception as e:  # a hook that read another kernel's facts may fail outright
                wrong.append(f"kernel {which} ({name}), render {i}: {type(e).__name__}: {e}")
                return
            if src != alone:
                wrong.append(f"kernel {which} ({name}), render {i}: differs from its render alone")
                return
    with fast_thread_switches():
        threads = [threading.Thread(target=work, args=(which, *job)) for which, job in enumerate(jobs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return wrong
