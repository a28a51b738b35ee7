"""TinyJit replays on the CPU: each captured launch is prepared once (CPUProgram.prepare builds its argument array),
so a replay is one ctypes call per kernel and no Python per buffer; the thread count may change between replays."""

from __future__ import annotations

import numpy as np
import pytest
from tg_backend_cpu.program import CPUProgram
from tinygrad import Device, Tensor, TinyJit


def test_a_replay_launches_prepared_kernels_without_rebuilding_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    @TinyJit
    def chain(x: Tensor) -> Tensor:
        for _ in range(5):
            x = (x * 2 + 1).realize()
        return x

    for i in range(3):  # captured on an early call
        chain(Tensor(np.full(7, i, np.float32)).realize())
    calls = []
    original = CPUProgram.__call__
    monkeypatch.setattr(CPUProgram, "__call__", lambda self, *a, **k: calls.append(self) or original(self, *a, **k))
    for i in range(3, 6):
        want = np.full(7, i, np.float32)
        for _ in range(5):
            want = want * 2 + 1
        np.testing.assert_array_equal(chain(Tensor(np.full(7, i, np.float32)).realize()).numpy(), want)
    assert calls == [], "a replay went through CPUProgram.__call__, which builds the argument array every time"


def test_a_replay_follows_a_change_of_threads() -> None:
    dev = Device["CPU"]
    before = dev.threads

    @TinyJit
    def big(x: Tensor) -> Tensor:
        return (x.reshape(512, 512) @ x.reshape(512, 512)).realize()

    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(512 * 512).astype(np.float32) for _ in range(5)]
    try:
        for i, a in enumerate(inputs):
            if i == 3:
                dev.set_threads(1 if before > 1 else 2)
            m = a.reshape(512, 512)
            np.testing.assert_allclose(big(Tensor(a).realize()).numpy(), m @ m, rtol=1e-3, atol=1e-2)
    finally:
        dev.set_threads(before)
