"""TinyJit: call 1 runs eagerly, call 2 captures the kernels, later calls replay them with the new inputs."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest
from tinygrad import GlobalCounters, Tensor, TinyJit, Variable, dtypes
from tinygrad.engine.jit import JitError

RNG = np.random.default_rng(7)


def data(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def launched(fn) -> int:  # type: ignore[no-untyped-def]
    before = GlobalCounters.kernel_count
    fn()
    return GlobalCounters.kernel_count - before


def test_replays_compute_with_the_new_inputs_without_running_python() -> None:
    body_runs = []

    @TinyJit
    def f(x: Tensor, y: Tensor) -> Tensor:
        body_runs.append(1)
        return ((x * y).relu() + 1).sum(axis=1).contiguous() * 2

    for _ in range(6):
        nx, ny = data(3, 4), data(3, 4)
        out = f(Tensor(nx), y=Tensor(ny))
        np.testing.assert_allclose(out.numpy(), ((np.maximum(nx * ny, 0) + 1).sum(axis=1)) * 2, rtol=1e-5)
    assert len(body_runs) == 2, "the body runs eagerly once and once more to capture; replays skip it"
    assert f.captured_kernels == 2
    nx, ny = data(3, 4), data(3, 4)
    assert launched(lambda: f(Tensor(nx), Tensor(ny))) == 2


def test_outputs_are_new_tensors_over_the_replayed_memory() -> None:
    f = TinyJit(lambda x: x * 2)
    results = []
    for i in range(5):
        out = f(Tensor([float(i), 1.0]))
        doubled = out * 10  # an expression on one replay's result must not be reused for the next one's
        results.append((out.tolist(), doubled.tolist()))
    assert results[4] == ([8.0, 2.0], [80.0, 20.0]) and results[3] == ([6.0, 2.0], [60.0, 20.0])


def test_structures_constants_and_inputs_returned_as_they_are() -> None:
    @TinyJit
    def f(x: Tensor, scale: float) -> dict[str, Any]:
        return {"pair": (x + 1, x * scale), "same": x, "label": "ok"}

    for i in range(4):
        out = f(Tensor([float(i)]), 3.0)  # non-tensor arguments are baked in at the capture
        assert out["label"] == "ok"
        assert out["pair"][0].item() == i + 1 and out["pair"][1].item() == 3 * i
        assert out["same"].item() == i, "an input returned unchanged is the new input on a replay"


def test_method_decorator_binds_the_instance() -> None:
    class Model:
        def __init__(self) -> None:
            self.w = Tensor([2.0, 3.0])

        @TinyJit
        def __call__(self, x: Tensor) -> Tensor:
            return x * self.w

    m = Model()
    for i in range(4):
        assert m(Tensor([1.0, float(i)])).tolist() == [2.0, 3.0 * i]


def test_changed_shape_or_dtype_is_a_clear_error_and_reset_recaptures() -> None:
    f = TinyJit(lambda x: x + 1)
    for _ in range(3):
        f(Tensor.ones(2, 3).contiguous())
    with pytest.raises(JitError, match=r"\(2, 3\) float.*\(4,\) float.*reset"):
        f(Tensor.ones(4).contiguous())
    with pytest.raises(JitError, match="int32"):
        f(Tensor.ones(2, 3, dtype=dtypes.int32).contiguous())
    f.reset()
    for i in range(3):
        assert f(Tensor([float(i)] * 4)).tolist() == [i + 1.0] * 4


def test_reading_values_inside_a_capture_is_an_error() -> None:
    @TinyJit
    def f(x: Tensor) -> float:
        return (x * 2).sum().item()

    assert f(Tensor([1.0, 2.0])) == 6.0  # the eager first call can read
    with pytest.raises(JitError, match=r"item\(\).*host.*Return the tensor"):
        f(Tensor([1.0, 2.0]))


def test_nested_capture_is_an_error() -> None:
    inner = TinyJit(lambda x: x + 1)

    @TinyJit
    def outer(x: Tensor) -> Tensor:
        return inner(x) * 2

    outer(Tensor([1.0]))
    with pytest.raises(JitError, match=r"while .*outer.* is being captured"):
        outer(Tensor([1.0]))

    @TinyJit
    def recursive(x: Tensor, depth: int) -> Tensor:
        return x if depth == 0 else recursive(x + 1, depth - 1)

    with pytest.raises(JitError, match="recursive called itself"):
        recursive(Tensor([0.0]), 1)
    assert recursive(Tensor([5.0]), 0).item() == 5.0, "a refused call leaves the function usable"


def test_same_tensor_as_two_inputs_is_one_input() -> None:
    # one memory passed twice is one input of the capture; distinct tensors later are another pattern of memory,
    # captured anew, and the first pattern still replays right
    f = TinyJit(lambda x, y: (x + y * 10).contiguous())
    for i in range(4):
        t = Tensor([float(i), 2.0]).realize()
        assert f(t, t).tolist() == [11.0 * i, 22.0]
    for i in range(3):
        a, b = Tensor([float(i)]).realize(), Tensor([1.0]).realize()
        assert f(a, b).item() == i + 10.0
    t = Tensor([3.0, 1.0]).realize()
    assert f(t, t).tolist() == [33.0, 11.0]


def test_sgd_steps_jitted_match_eager_exactly() -> None:
    xs, ys, w0 = data(16, 3), data(16, 1), data(3, 1)

    def train(jit: bool) -> tuple[list[float], np.ndarray]:
        w = Tensor(w0.copy(), requires_grad=True)
        b = Tensor.zeros(1).contiguous().realize().requires_grad_()

        def step(x: Tensor, y: Tensor) -> Tensor:
            loss = ((x @ w + b - y) ** 2).mean()
            loss.backward()
            assert w.grad is not None and b.grad is not None
            w.assign(w.detach() - 0.1 * w.grad)
            b.assign(b.detach() - 0.1 * b.grad)
            Tensor.realize(w, b)  # as an optimizer step does (eagerly, an unrealized w would fuse into the next step)
            w.grad = b.grad = None
            return loss

        run = TinyJit(step) if jit else step
        losses = [run(Tensor(xs[i % 4 * 4:(i % 4 + 1) * 4]), Tensor(ys[i % 4 * 4:(i % 4 + 1) * 4])).item()
                  for i in range(10)]
        return losses, np.concatenate([w.numpy().ravel(), b.numpy()])

    (eager, w_eager), (jitted, w_jitted) = train(False), train(True)
    assert eager == jitted
    np.testing.assert_array_equal(w_eager, w_jitted)
    assert eager[-1] < eager[0]


def test_state_tensor_reads_after_replays_see_the_newest_value() -> None:
    counter = Tensor([0.0]).contiguous().realize()

    @TinyJit
    def tick() -> Tensor:
        counter.assign(counter + 1)
        return counter * 1

    seen = [(tick().item(), counter.item(), (counter * 10).item()) for _ in range(5)]
    assert seen == [(float(i), float(i), 10.0 * i) for i in range(1, 6)]


def test_state_assigned_outside_between_replays_reaches_the_next_replay() -> None:
    """A counter the function advances, set from outside after the capture (as load_state_dict sets weights): the
    next replay starts from the value set, not from the buffer's old contents."""
    counter = Tensor([0.0]).contiguous().realize()

    @TinyJit
    def tick() -> Tensor:
        counter.assign(counter + 1)
        return counter * 1

    assert [tick().item() for _ in range(4)] == [1.0, 2.0, 3.0, 4.0]  # eager, capture, two replays
    counter.assign(Tensor([100.0]))  # lazy, and a new buffer once realized
    assert tick().item() == 101.0
    assert tick().item() == 102.0 and counter.item() == 102.0
    counter.assign(Tensor([-5.0]).contiguous().realize())
    assert tick().item() == -4.0


def test_random_numbers_advance_on_every_replay_as_eager() -> None:
    def noisy(x: Tensor) -> Tensor:
        return x + Tensor.rand(8) + Tensor.randn(8) * 0 + Tensor.rand(8, dtype=dtypes.float16).float()

    Tensor.manual_seed(11)
    eager = [noisy(Tensor.zeros(8).contiguous()).numpy() for _ in range(5)]
    Tensor.manual_seed(11)
    jit = TinyJit(noisy)
    jitted = [jit(Tensor.zeros(8).contiguous()).numpy() for _ in range(5)]
    for a, b in zip(eager, jitted):
        np.testing.assert_array_equal(a, b)
    assert len({tuple(v) for v in jitted}) == 5, "every replay draws new numbers"
    # the seed reaches the captured kernels: the replays start the stream again
    Tensor.manual_seed(11)
    np.testing.assert_array_equal(jit(Tensor.zeros(8).contiguous()).numpy(), eager[0])
    # eager draws between replays take their own positions of the stream
    Tensor.manual_seed(11)
    first = jit(Tensor.zeros(8).contiguous()).numpy()
    between = Tensor.rand(8).numpy()
    Tensor.manual_seed(11)
    noisy(Tensor.zeros(8).contiguous()).numpy()
    np.testing.assert_array_equal(Tensor.rand(8).numpy(), between)
    np.testing.assert_array_equal(first, eager[0])


def test_dropout_in_a_jitted_training_step() -> None:
    Tensor.training = True
    try:
        f = TinyJit(lambda x: x.dropout(0.5))
        masks = [tuple(f(Tensor.ones(64).contiguous()).numpy() > 0) for _ in range(4)]
        assert len(set(masks)) == 4
    finally:
        Tensor.training = False


def test_symbolic_variable_takes_its_value_on_each_replay() -> None:
    @TinyJit
    def f(x: Tensor, n: Any) -> Tensor:
        return (x.shrink(((0, n),)) * 2).contiguous()

    v = Variable("n", 1, 8)
    base = Tensor(np.arange(8, dtype=np.float32))
    for k in (3, 5, 2, 7, 4):
        out = f(base, v.bind(k))  # type: ignore[attr-defined]
        np.testing.assert_array_equal(out.numpy(), np.arange(k, dtype=np.float32) * 2)


def test_capture_keeps_its_buffers_and_frees_them_with_the_jit() -> None:
    import weakref

    f = TinyJit(lambda x: (x + 1).contiguous() * 2)
    for _ in range(3):
        out = f(Tensor([1.0]))
    assert f._current is not None
    ref = weakref.ref(f._current.recorded[0].item.bufs[0])
    gc.collect()
    assert ref() is not None and out.item() == 4.0
    del f, out
    gc.collect()
    assert ref() is None


def test_debug_reports_capture_and_replayed_launches(capsys: pytest.CaptureFixture[str]) -> None:
    from tinygrad import Context

    f = TinyJit(lambda x: (x + 1).contiguous() * 2)
    with Context(DEBUG=2):
        for _ in range(3):
            f(Tensor([1.0, 2.0]))
    err = capsys.readouterr().err
    assert "captured 2 launches" in err and "replaying 2 launches" in err
    assert err.count("(replay)") == 2


def test_class_index_loss_is_captured_without_a_host_read():
    # the target check reads back to the host eagerly; during capture it is skipped, so the loss jits
    w = Tensor([[0.5, -0.25, 1.0], [0.1, 0.2, -0.3]], requires_grad=True).realize()

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        return (x @ w).sparse_categorical_crossentropy(y).realize()

    x = Tensor([[1.0, 2.0], [3.0, -1.0]]).realize()
    y = Tensor([2, 0]).realize()
    eager = (x @ w).sparse_categorical_crossentropy(y).item()
    for _ in range(4):
        assert abs(step(x, y).item() - eager) < 1e-6


def test_replays_with_the_same_input_buffer_reuse_the_built_launches(monkeypatch: pytest.MonkeyPatch) -> None:
    # a caller that passes the same input tensor again (an evaluation on fixed data, or a runner that refills a
    # staging buffer in place) replays the launches built for it last time; another buffer, or the first one again
    # after it, rebuilds them, and every result is right
    f = TinyJit(lambda x: (x * 2).contiguous() + 1)
    x = Tensor.zeros(16).contiguous().realize()
    other = Tensor.full((16,), 100.0).contiguous().realize()
    builds = []
    from tinygrad.engine import jit_capture

    real_prepare = jit_capture._prepare
    monkeypatch.setattr(jit_capture, "_prepare", lambda *a: builds.append(1) or real_prepare(*a))
    for i in range(6):
        x._buffer().copyin(memoryview(np.full(16, i, np.float32)).cast("B"))  # new contents, same memory
        assert f(x).tolist() == [2.0 * i + 1] * 16
    assert 0 < len(builds) <= 2 * f.captured_kernels, "replays with the same buffer rebuilt their launches"
    before = len(builds)
    for t, want in ((other, 201.0), (x, 11.0), (other, 201.0)):
        assert f(t).tolist() == [want] * 16
    assert len(builds) > before


def test_a_constant_is_not_read_from_the_buffer_an_assign_filled() -> None:
    # x.assign(ones) realized the constant graph `ones` into x's buffer; a capture that then read `x + 1`'s 1 from
    # that buffer replayed `x + x` once x held other values
    f = TinyJit(lambda x: (x * 2).contiguous() + 1)
    x = Tensor.zeros(16).contiguous().realize()
    for i in range(6):
        x.assign(Tensor.full((16,), float(i))).realize()
        assert f(x).tolist() == [2.0 * i + 1] * 16
    y = Tensor.zeros(4).contiguous().realize()
    y.assign(Tensor.full((4,), 3.0)).realize()
    y.assign(Tensor.full((4,), 5.0)).realize()
    assert (Tensor.full((4,), 3.0) + y).tolist() == [8.0] * 4


def test_an_eager_op_computes_its_constant_operand_instead_of_reading_where_it_was_realized() -> None:
    # the eager dispatch path (one op over realized buffers and constants, keyed by the buffers' dtype and size)
    # keyed a realized constant graph as the buffer it had been realized into, so `3 + z` matched the kernel learned
    # for an addition of two such buffers and read that buffer, which holds 7s by now
    a, b = Tensor([0.5, 0.5, 0.5, 0.5]).realize(), Tensor([1.0, 1.0, 1.0, 1.0]).realize()
    assert (a + b).tolist() == [1.5] * 4  # learns buffer + buffer over 4 floats
    y = Tensor.zeros(4).contiguous().realize()
    y.assign(Tensor.full((4,), 3.0)).realize()
    y._buffer().copyin(memoryview(np.full(4, 7.0, np.float32)).cast("B"))
    z = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
    for _ in range(3):
        assert (Tensor.full((4,), 3.0) + z).tolist() == [4.0, 5.0, 6.0, 7.0]


def test_replays_with_symbolic_values_rebuild_when_the_value_changes() -> None:
    from tinygrad import Variable

    f = TinyJit(lambda x, n: (x[:n] * 2).contiguous())
    x = Tensor.arange(8).float().contiguous().realize()
    for k in (3, 3, 5, 5, 3, 7):
        n = Variable("n", 1, 8).bind(k)
        assert f(x, n).tolist()[:k] == [2.0 * i for i in range(k)]


def test_the_same_tensors_again_replay_without_the_checks_and_see_an_assign() -> None:
    from tinygrad import Context

    calls = []

    def fn(x: Tensor) -> Tensor:
        calls.append(1)
        return (x + 1).contiguous()

    f = TinyJit(fn)
    x = Tensor.zeros(8).contiguous().realize()
    for i in range(5):
        x._buffer().copyin(memoryview(np.full(8, i, np.float32)).cast("B"))
        assert f(x).tolist() == [i + 1.0] * 8
    assert len(calls) == 2  # the eager call and the capture
    x.assign(Tensor.full((8,), 10.0)).realize()  # a new name (and buffer) for x: the next call takes the checks
    assert f(x).tolist() == [11.0] * 8
    with Context(JIT=0):  # turned off after the capture: the function runs
        assert f(x).tolist() == [11.0] * 8
    assert len(calls) == 3
    with pytest.raises(JitError, match="captured for inputs"):
        f(Tensor.zeros(9).contiguous().realize())
    assert f(x).tolist() == [11.0] * 8


def test_consecutive_launches_of_one_backend_run_together_and_others_alone() -> None:
    from tinygrad.engine.jit_capture import _run_together

    made: list[list[Any]] = []

    class Together:
        def __init__(self, name: str, refuse: bool = False):
            self.name, self.refuse = name, refuse

        def __call__(self) -> None:
            pass

        @staticmethod
        def run_together(launches: list[Any]) -> Any:
            if any(launch.refuse for launch in launches):
                return None
            made.append(launches)
            return ("run", [launch.name for launch in launches])

    def alone() -> None:
        pass

    a, b, c, d, e = Together("a"), Together("b"), Together("c"), Together("d"), Together("e", refuse=True)
    runs, placed = _run_together([a, b, alone, c, alone, d, e])
    assert runs == [("run", ["a", "b"]), alone, c, alone, d, e]
    assert placed == [(0, 0), (0, 1), (1, None), (2, None), (3, None), (4, None), (5, None)]
    assert _run_together([]) == ([], [])
