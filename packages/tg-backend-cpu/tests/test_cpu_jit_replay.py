"""TinyJit replays on the CPU: each captured launch is prepared once (CPUProgram.prepare builds its argument array),
so a replay does no Python per buffer, runs its kernels from one native call (thread_pool.c's tg_run_all), and the
thread count may change between replays."""

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


def _chain_of_kernels(n: int, size: int) -> TinyJit:
    @TinyJit
    def chain(x: Tensor, y: Tensor) -> Tensor:
        for _ in range(n):
            x = (x * 0.5 + y).realize()
        return x
    return chain


def _chain_expected(x: np.ndarray, y: np.ndarray, n: int) -> np.ndarray:
    for _ in range(n):
        x = x * np.float32(0.5) + y
    return x


def test_a_replay_runs_its_kernels_from_one_native_call(monkeypatch: pytest.MonkeyPatch) -> None:
    from tg_backend_cpu import program as cpu_program

    if cpu_program._native_run_all() is None:
        pytest.skip("no C compiler here: the native loop (thread_pool.c) is not built, and replays call each launch")
    chain = _chain_of_kernels(6, 33)
    rng = np.random.default_rng(1)
    arrays = [(rng.standard_normal(33).astype(np.float32), rng.standard_normal(33).astype(np.float32))
              for _ in range(6)]
    for x, y in arrays[:2]:
        chain(Tensor(x).realize(), Tensor(y).realize())
    assert [type(r).__name__ for r in chain._current.runs] == ["LaunchSequence"]
    per_kernel = []
    monkeypatch.setattr(cpu_program.PreparedLaunch, "__call__", lambda self: per_kernel.append(self))
    for x, y in arrays[2:]:  # new input memory every call: the sequence takes the rebuilt launches
        np.testing.assert_array_equal(chain(Tensor(x).realize(), Tensor(y).realize()).numpy(),
                                      _chain_expected(x, y, 6))
    x, y = Tensor(arrays[0][0]).realize(), Tensor(arrays[0][1]).realize()
    for _ in range(2):  # the same inputs again
        np.testing.assert_array_equal(chain(x, y).numpy(), _chain_expected(*arrays[0], 6))
    assert per_kernel == [], "a replay called launches one by one from Python"


def test_a_native_replay_follows_a_change_of_threads_and_uses_the_pool_for_big_kernels() -> None:
    dev = Device["CPU"]
    before = dev.threads

    @TinyJit
    def two_matmuls(a: Tensor, b: Tensor) -> Tensor:
        c = (a @ b).realize()
        return (c @ b + 1).realize()

    rng = np.random.default_rng(2)
    pairs = [(rng.standard_normal((256, 256)).astype(np.float32), rng.standard_normal((256, 256)).astype(np.float32))
             for _ in range(6)]
    try:
        for i, (a, b) in enumerate(pairs):
            if i == 3:
                dev.set_threads(1 if before > 1 else 2)
            if i == 4:
                dev.set_threads(before)
            np.testing.assert_allclose(two_matmuls(Tensor(a).realize(), Tensor(b).realize()).numpy(),
                                       (a @ b) @ b + 1, rtol=1e-3, atol=1e-2)
    finally:
        dev.set_threads(before)


def test_a_sequence_on_a_python_threads_pool_calls_each_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    # a machine without a C compiler runs kernels on Python threads; a sequence built for it (or moved to it by
    # set_threads) calls its launches one by one, with the same results
    from tg_backend_cpu import program as cpu_program
    from tg_backend_cpu.py_thread_pool import PythonThreadPool

    chain = _chain_of_kernels(4, 70000)
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal(70000).astype(np.float32), rng.standard_normal(70000).astype(np.float32)
    for _ in range(2):
        chain(Tensor(x).realize(), Tensor(y).realize())
    programs = {launch.program for launch in chain._current.launches if isinstance(launch, cpu_program.PreparedLaunch)}
    pool = PythonThreadPool(2)
    saved = {p: p.pool for p in programs}
    try:
        for p in programs:
            p.use_pool(pool)
        calls = []
        original = cpu_program.PreparedLaunch.__call__
        monkeypatch.setattr(cpu_program.PreparedLaunch, "__call__", lambda self: calls.append(1) or original(self))
        np.testing.assert_array_equal(chain(Tensor(x).realize(), Tensor(y).realize()).numpy(),
                                      _chain_expected(x, y, 4))
        assert len(calls) == 4
    finally:
        for p, old in saved.items():
            p.use_pool(old)
        pool.close()


def test_without_a_native_loop_a_replay_calls_each_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    # no C compiler (the LLVM path alone), or one that cannot build the pool: no sequence is made
    from tg_backend_cpu import program as cpu_program

    monkeypatch.setattr(cpu_program, "_native_run_all", lambda: None)
    chain = _chain_of_kernels(3, 21)
    rng = np.random.default_rng(4)
    for _ in range(4):
        x, y = rng.standard_normal(21).astype(np.float32), rng.standard_normal(21).astype(np.float32)
        out = chain(Tensor(x).realize(), Tensor(y).realize()).numpy()
        np.testing.assert_array_equal(out, _chain_expected(x, y, 3))
    assert [type(r).__name__ for r in chain._current.runs] == ["PreparedLaunch"] * 3


def test_a_sequence_keeps_its_table_while_new_kernels_compile() -> None:
    # eager code that compiles new kernels between replays (new shapes) changes no captured launch: the sequence's
    # table is built once, and only set_threads makes it build again
    from tg_backend_cpu import program as cpu_program

    if cpu_program._native_run_all() is None:
        pytest.skip("no C compiler here: replays call each launch")
    chain = _chain_of_kernels(3, 13)
    x, y = np.arange(13, dtype=np.float32), np.ones(13, np.float32)
    for _ in range(3):
        chain(Tensor(x).realize(), Tensor(y).realize())
    (sequence,) = chain._current.runs
    table = sequence._table
    for n in range(3, 8):  # new kernels
        (Tensor.arange(n * 7).float() * 3 - 1).realize()
        np.testing.assert_array_equal(chain(Tensor(x).realize(), Tensor(y).realize()).numpy(), _chain_expected(x, y, 3))
    assert table is not None and sequence._table is table
