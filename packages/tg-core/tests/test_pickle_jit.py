"""pickle of tensors, buffers, knobs and captured TinyJits: loaded in this process or another, they give the same
values; a compiled program is refused where it may not run (docs/jit.md, "Pickling a captured jit")."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tinygrad import Tensor, TinyJit, Variable, dtypes, nn
from tinygrad.device import Buffer, Device
from tinygrad.engine.jit import JitError
from tinygrad.engine.jit_io import held_buffers
from tinygrad.helpers import Context, ContextVar
from tinygrad.runtime.runner import CompiledRunner, ProgramMismatchError
from tinygrad.uop.ops import Ops


def _data(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _is_realized(t: Tensor) -> bool:
    return held_buffers(t.uop) is not None


# ---- tensors, buffers, knobs ----

def test_a_realized_tensor_loads_realized_with_its_values() -> None:
    t = Tensor(_data(10, 10)).realize()
    want = t.numpy()
    st = pickle.dumps(t)
    del t
    t2 = pickle.loads(st)
    assert _is_realized(t2)
    np.testing.assert_array_equal(t2.numpy(), want)


def test_a_lazy_tensor_loads_as_the_same_graph() -> None:
    t = Tensor.ones(10, 10) * 2 + 1
    t2 = pickle.loads(pickle.dumps(t))
    assert t2.uop is t.uop  # hash-consed with the live graph
    np.testing.assert_array_equal(t2.numpy(), np.full((10, 10), 3, np.float32))


def test_a_lazy_tensor_over_realized_memory_keeps_that_memory_s_values() -> None:
    a = Tensor(_data(4, 4)).realize()
    t = (a * 2).sum(0)
    want = (a.numpy() * 2).sum(0)
    st = pickle.dumps(t)
    del a, t
    np.testing.assert_allclose(pickle.loads(st).numpy(), want, rtol=1e-6)


def test_a_deep_graph_pickles_without_recursing() -> None:
    t = Tensor.ones(4)
    for _ in range(3000):
        t = t + 1
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(t)).numpy(), np.full(4, 3001, np.float32))


def test_a_tensor_over_a_bound_variable() -> None:
    v = Variable("i", 1, 20).bind(10)  # type: ignore[attr-defined]
    ret = (Tensor.ones(10, v).contiguous() + Tensor.ones(10, v).contiguous()).sum(1)
    st = pickle.dumps(ret)
    del ret
    np.testing.assert_array_equal(pickle.loads(st).numpy(), np.full(10, 20, np.float32))


def test_a_slice_made_contiguous_and_a_buffer_view() -> None:
    t = Tensor.arange(10).contiguous().realize()
    vt = t[3:5].contiguous().realize()
    st = pickle.dumps(vt)
    del t, vt
    assert pickle.loads(st).tolist() == [3, 4]

    base = Buffer(Device.DEFAULT, 8, dtypes.int32).ensure_allocated()
    base.copyin(memoryview(np.arange(8, dtype=np.int32)).cast("B"))
    view = Buffer(Device.DEFAULT, 3, dtypes.int32, base=base)
    base2, view2 = pickle.loads(pickle.dumps((base, view)))
    assert view2.base is base2
    assert view2.numpy().tolist() == [0, 1, 2]
    base2.copyin(memoryview(np.full(8, 7, np.int32)).cast("B"))
    assert view2.numpy().tolist() == [7, 7, 7]  # still one memory after loading


def test_an_unallocated_buffer_loads_unallocated() -> None:
    b = pickle.loads(pickle.dumps(Buffer(Device.DEFAULT, 1000, dtypes.float32)))
    assert not b.is_allocated and b.size == 1000 and b.dtype == dtypes.float32


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_numpy_made_tensors_in_every_protocol(protocol: int) -> None:
    t = Tensor(np.array([1, 2, 3, 4.0]), dtype=dtypes.float32)
    h = Tensor(np.array([1, 2, 3], np.float16)).realize()
    t2, h2 = pickle.loads(pickle.dumps((t, h), protocol=protocol))
    assert t2.numpy().tolist() == [1, 2, 3, 4]
    assert h2.dtype == dtypes.float16 and h2.numpy().tolist() == [1, 2, 3]


def test_a_context_var_keeps_its_value_and_leaves_the_live_one() -> None:
    v = ContextVar("TEST_PICKLE_JIT_VAR", 0)
    with Context(TEST_PICKLE_JIT_VAR=1):
        st = pickle.dumps(v)
    v2 = pickle.loads(st)
    assert v2.value == 1 and v.value == 0
    assert ContextVar.registry["TEST_PICKLE_JIT_VAR"] is v


def test_protocol_5_passes_the_bytes_out_of_band_and_peak_memory_stays_below_the_data() -> None:
    n, m = 8, 1 << 20
    ts = [Tensor(_data(m, seed=i)).realize() for i in range(n)]
    want = [t.numpy() for t in ts]
    tracemalloc.start()
    try:
        out_of_band: list[pickle.PickleBuffer] = []
        st = pickle.dumps(ts, protocol=5, buffer_callback=out_of_band.append)
        dumped_peak = tracemalloc.get_traced_memory()[1]
        sizes = [pb.raw().nbytes for pb in out_of_band]
        copies = [bytearray(pb.raw()) for pb in out_of_band]  # as a file would hold them
        for pb in out_of_band:
            pb.release()
        del out_of_band
        tracemalloc.reset_peak()
        loaded = pickle.loads(st, buffers=(pickle.PickleBuffer(c) for c in copies))
        # beyond the copies the caller holds and the loaded buffers' own memory (host memory on a host device,
        # which tracemalloc may see): no third copy of the data
        loaded_peak = tracemalloc.get_traced_memory()[1] - sum(len(c) for c in copies) - n * m * 4
    finally:
        tracemalloc.stop()
    assert sizes == [m * 4] * n
    assert len(st) < 10_000  # the stream holds none of the bytes
    assert dumped_peak < n * m * 4 // 4
    assert loaded_peak < n * m * 4 // 4
    for got, w in zip(loaded, want):
        np.testing.assert_array_equal(got.numpy(), w)


# ---- jits ----

def _captured(fn: Any, *args: Any) -> Any:
    for _ in range(3):
        fn(*args)
    return fn


def test_a_jit_loads_and_replays_on_new_inputs() -> None:
    @TinyJit
    def add(a: Tensor, b: Tensor) -> Tensor:
        return a.sum() + b + 1

    _captured(add, Tensor(_data(10, 10)), Tensor(_data(10, 10, seed=1)))
    st = pickle.dumps(add)
    del add
    loaded = pickle.loads(st)
    for scale in (1.0, 2.0, 3.0):
        x, y = _data(10, 10, seed=2) * scale, _data(10, 10, seed=3)
        np.testing.assert_allclose(loaded(Tensor(x), Tensor(y)).numpy(), x.sum() + y + 1, rtol=1e-5, atol=1e-5)


def test_a_jit_of_a_lambda_loads_without_its_code() -> None:
    fn = _captured(TinyJit(lambda x: x + 1.0), Tensor(_data(4)))
    st = pickle.dumps(fn)
    assert b"<lambda>" in st and b"co_code" not in st
    loaded = pickle.loads(st)
    assert loaded.fn is None
    assert loaded(Tensor([1.0, 2.0, 3.0, 4.0])).tolist() == [2.0, 3.0, 4.0, 5.0]


class _Model:
    def __init__(self) -> None:
        self.l1 = nn.Linear(6, 16)
        self.l2 = nn.Linear(16, 3)

    def __call__(self, x: Tensor) -> Tensor:
        return self.l2(self.l1(x).relu())


def _model_and_jit() -> tuple[_Model, TinyJit]:
    Tensor.manual_seed(0)
    model = _Model()
    return model, _captured(TinyJit(lambda x: model(x)), Tensor(_data(2, 6)))


def test_a_jit_carries_the_weights_its_kernels_read() -> None:
    model, step = _model_and_jit()
    x = _data(2, 6, seed=5)
    want = model(Tensor(x)).numpy()
    st = pickle.dumps(step)
    del model, step
    np.testing.assert_allclose(pickle.loads(st)(Tensor(x)).numpy(), want, rtol=1e-5, atol=1e-6)


def test_inputs_and_scratch_go_as_sizes_and_weights_with_their_bytes() -> None:
    big = 1 << 18  # floats

    w = Tensor(_data(64)).realize()
    f = _captured(TinyJit(lambda x: ((x * 2 + 1).contiguous() * 3).sum() + w), Tensor(_data(big)))
    st = pickle.dumps(f)
    assert len(st) < big * 4 // 4  # neither the input nor the scratch of its size went in
    w_bytes = w.numpy().tobytes()
    assert w_bytes in st  # the weight did
    x = _data(big, seed=9)
    np.testing.assert_allclose(pickle.loads(st)(Tensor(x)).numpy(), ((x * 2 + 1) * 3).sum() + w.numpy(), rtol=1e-4)


def test_a_jit_with_a_variable_argument() -> None:
    f = TinyJit(lambda x, n: (x[:n] * 2).contiguous())
    x = Tensor.arange(8).float().contiguous().realize()
    v = Variable("n", 1, 8)
    for k in (3, 4, 5):
        f(x, v.bind(k))  # type: ignore[attr-defined]
    loaded = pickle.loads(pickle.dumps(f))
    for k in (2, 7, 8):
        assert loaded(x, v.bind(k)).tolist() == [2.0 * i for i in range(k)]  # type: ignore[attr-defined]


def test_a_jit_through_protocol_5_out_of_band() -> None:
    model, step = _model_and_jit()
    x = _data(2, 6, seed=6)
    want = model(Tensor(x)).numpy()
    out_of_band: list[pickle.PickleBuffer] = []
    st = pickle.dumps(step, protocol=5, buffer_callback=out_of_band.append)
    weights = sum(p.numel() * 4 for p in (model.l1.weight, model.l1.bias, model.l2.weight, model.l2.bias))
    assert sum(pb.raw().nbytes for pb in out_of_band) >= weights
    copies = [bytearray(pb.raw()) for pb in out_of_band]
    del model, step, out_of_band
    loaded = pickle.loads(st, buffers=copies)
    np.testing.assert_allclose(loaded(Tensor(x)).numpy(), want, rtol=1e-5, atol=1e-6)


def test_a_second_process_loads_the_jit_and_gives_the_same_bits(tmp_path: Path) -> None:
    _, step = _model_and_jit()
    xs = [_data(2, 6, seed=s) for s in (11, 12)]
    here = [step(Tensor(x)).numpy() for x in xs]
    (tmp_path / "step.pkl").write_bytes(pickle.dumps(step))
    np.save(tmp_path / "xs.npy", np.stack(xs))
    script = textwrap.dedent(f"""
        import pickle, sys
        import numpy as np
        from tinygrad import Tensor
        step = pickle.loads(open({str(tmp_path / "step.pkl")!r}, "rb").read())
        assert step.fn is None
        xs = np.load({str(tmp_path / "xs.npy")!r})
        np.save({str(tmp_path / "out.npy")!r}, np.stack([step(Tensor(x)).numpy() for x in xs]))
    """)
    # no test module, model class or compiler step is reachable by name from the loading process
    env = {**os.environ, "DEV": Device.DEFAULT}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    there = np.load(tmp_path / "out.npy")
    assert np.array_equal(there.view(np.uint32), np.stack(here).view(np.uint32))


def test_outputs_no_replayed_launch_writes_keep_their_values_in_a_second_process(tmp_path: Path) -> None:
    # a weight returned as it is, and the result of a launch prune=True leaves out of replays: no launch of the
    # loaded capture writes their memory, so it has to travel with its bytes
    w = Tensor(np.arange(1, 7, dtype=np.float32)).realize()
    step = _captured(TinyJit(lambda x: (x + 1, w, (w * 2).contiguous()), prune=True), Tensor(_data(3)))
    assert step.captured is not None and len(step.captured.pruned) == 1
    (tmp_path / "step.pkl").write_bytes(pickle.dumps(step, protocol=5))
    script = textwrap.dedent(f"""
        import pickle
        import numpy as np
        from tinygrad import Tensor
        step = pickle.loads(open({str(tmp_path / "step.pkl")!r}, "rb").read())
        np.save({str(tmp_path / "out.npy")!r}, np.stack([t.numpy() for t in step(Tensor(np.zeros(3, np.float32)))[1:]]))
    """)
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, "DEV": Device.DEFAULT},
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), [np.arange(1, 7), np.arange(1, 7) * 2])


def test_a_loaded_jit_refuses_calls_it_did_not_capture() -> None:
    f = _captured(TinyJit(lambda x: x * 2), Tensor(_data(4)))
    loaded = pickle.loads(pickle.dumps(f))
    with pytest.raises(JitError, match="captured for inputs"):
        loaded(Tensor(_data(5)))
    g = _captured(TinyJit(lambda x, k: x * k), Tensor(_data(4)), 2)
    loaded_g = pickle.loads(pickle.dumps(g))
    assert loaded_g(Tensor([1.0, 2.0, 3.0, 4.0]), 2).tolist() == [2.0, 4.0, 6.0, 8.0]
    with pytest.raises(JitError, match="loaded from a pickle"):
        loaded_g(Tensor(_data(4)), 3)
    with Context(JIT=0), pytest.raises(JitError, match="loaded from a pickle"):
        loaded(Tensor(_data(4)))


def test_a_jit_that_has_not_captured_does_not_pickle() -> None:
    f = TinyJit(lambda x: x * 2)
    f(Tensor(_data(4)))
    with pytest.raises(pickle.PicklingError, match="has not captured"):
        pickle.dumps(f)


def _runners(jit: TinyJit) -> list[CompiledRunner]:
    assert jit.captured is not None
    return [r.runner for r in jit.captured.recorded if isinstance(r.runner, CompiledRunner)]


@pytest.mark.parametrize("tamper", ["key", "compiler", "device"])
def test_a_program_for_another_machine_is_refused(tamper: str) -> None:
    f = _captured(TinyJit(lambda x: (x * 2 + 1).sum()), Tensor(_data(8)))
    runner = _runners(f)[0]
    saved = runner.device_name, runner.made_by
    try:  # the pickle of a machine whose compiler (or device) differs from this one's
        if tamper == "key":
            runner.made_by = (runner.made_by[0], runner.made_by[1] + "|another cpu")
        elif tamper == "compiler":
            runner.made_by = ("some.other.Compiler", runner.made_by[1])
        else:
            runner.device_name = "NOSUCHDEVICE"
        st = pickle.dumps(f)
    finally:
        runner.device_name, runner.made_by = saved
    with pytest.raises(ProgramMismatchError, match="cannot be opened here" if tamper == "device" else "may not run"):
        pickle.loads(st)


def test_a_loaded_runner_compiles_nothing() -> None:
    f = _captured(TinyJit(lambda x: (x * 3 - 1).sum()), Tensor(_data(8)))
    st = pickle.dumps(f)
    device = Device[Device.DEFAULT]
    compiler = device.compiler
    calls = []
    original = type(compiler).compile

    def counting(self: Any, src: str) -> bytes:
        calls.append(src)
        return original(self, src)

    type(compiler).compile = counting  # type: ignore[method-assign]
    try:
        with Context(DISABLE_COMPILER_CACHE=1):
            loaded = pickle.loads(st)
            x = _data(8, seed=4)
            np.testing.assert_allclose(loaded(Tensor(x).realize()).numpy(), (x * 3 - 1).sum(), rtol=1e-5)
    finally:
        type(compiler).compile = original  # type: ignore[method-assign]
    assert all("* 3" not in c and "3.0" not in c for c in calls), "the captured kernel was compiled again"
    assert not [r for r in _runners(loaded) if r.spec.src in calls]


def test_loaded_kernels_keep_their_ast_and_program() -> None:
    f = _captured(TinyJit(lambda x: x.relu() * 2), Tensor(_data(8)))
    loaded = pickle.loads(pickle.dumps(f))
    assert loaded.captured is not None and f.captured is not None
    assert [r.item.ast for r in loaded.captured.recorded] == [r.item.ast for r in f.captured.recorded]
    assert all(r.item.ast.op is Ops.SINK or r.item.ast.op is Ops.COPY for r in loaded.captured.recorded)
    assert [r.lib for r in _runners(loaded)] == [r.lib for r in _runners(f)]
