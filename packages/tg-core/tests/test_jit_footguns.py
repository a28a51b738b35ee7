"""TinyJit's footguns (docs/jit.md has the table, one row per test here): each is run eagerly and jitted over
several calls, and the jitted run gives the eager values or raises JitError, never another value."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tinygrad import Tensor, TinyJit, dtypes
from tinygrad.engine.jit import MAX_CAPTURES, JitError


def _values(f: Any, calls: list[tuple[tuple, dict]]) -> list[Any]:
    return [np.asarray(f(*a, **k).numpy()).tolist() for a, k in calls]


def _same_as_eager(fn: Any, make_calls: Any) -> None:
    eager = _values(fn, make_calls())
    assert _values(TinyJit(fn), make_calls()) == eager


def test_tensors_in_a_list_are_inputs() -> None:
    _same_as_eager(lambda ts: ts[0] + ts[1], lambda: [(([Tensor([float(i)]), Tensor([2.0 * i])],), {})
                                                       for i in range(5)])


def test_tensors_in_a_tuple_and_a_dict_are_inputs() -> None:
    _same_as_eager(lambda p, d: p[1] * d["a"], lambda: [(((None, Tensor([float(i)])), {"a": Tensor([3.0])}), {})
                                                         for i in range(5)])


@dataclass
class Box:
    t: Tensor
    scale: float


class Holder:
    def __init__(self, t: Tensor) -> None:
        self.t = t


def test_tensors_in_dataclasses_and_objects_are_inputs() -> None:
    _same_as_eager(lambda b: b.t * b.scale, lambda: [((Box(Tensor([float(i)]), 2.0),), {}) for i in range(5)])
    _same_as_eager(lambda h: h.t + 1, lambda: [((Holder(Tensor([float(i)])),), {}) for i in range(5)])


def test_a_changing_number_is_captured_anew() -> None:
    x = Tensor([1.0, 2.0]).realize()
    _same_as_eager(lambda t, s: t * s, lambda: [((x, i), {}) for i in (1, 2, 3, 2, 1)])
    _same_as_eager(lambda t, s: t * s, lambda: [((x, 0.5 * i), {}) for i in range(5)])
    _same_as_eager(lambda t, flag: t * 2 if flag else t - 1, lambda: [((x, i % 2 == 0), {}) for i in range(5)])


def test_a_changing_keyword_and_string_are_captured_anew() -> None:
    x = Tensor([1.0, 2.0]).realize()
    _same_as_eager(lambda t, s=1: t * s, lambda: [((x,), {"s": i}) for i in range(5)])
    _same_as_eager(lambda t, op: t.exp2() if op == "exp2" else t.sqrt(), lambda: [((x, op), {}) for op in
                                                                                 ("exp2", "sqrt", "exp2", "sqrt")])


def test_a_changing_numpy_array_argument_is_captured_anew() -> None:
    x = Tensor([1.0, 2.0]).realize()
    _same_as_eager(lambda t, a: t + Tensor(a), lambda: [((x, np.array([i, i], np.float32)), {}) for i in range(4)])


def test_a_value_that_changes_every_call_raises_naming_it() -> None:
    f = TinyJit(lambda t, step: t * step)
    x = Tensor([1.0]).realize()
    for i in range(MAX_CAPTURES + 1):
        assert f(x, i).item() == i
    with pytest.raises(JitError, match=r"argument 1.*as a Tensor, or as a Variable"):
        f(x, MAX_CAPTURES + 1)


def test_a_rebound_closure_tensor_raises() -> None:
    w = Tensor([1.0]).realize()
    f = TinyJit(lambda x: x * w)
    x = Tensor([2.0]).realize()
    assert [f(x).item() for _ in range(3)] == [2.0, 2.0, 2.0]
    w = Tensor([5.0]).realize()
    with pytest.raises(JitError, match=r"closure variable w now names another value.*assign"):
        f(x)


W_GLOBAL = Tensor([1.0]).realize()


def test_a_rebound_global_tensor_raises() -> None:
    global W_GLOBAL
    f = TinyJit(lambda x: x * W_GLOBAL)
    x = Tensor([2.0]).realize()
    assert [f(x).item() for _ in range(3)] == [2.0, 2.0, 2.0]
    W_GLOBAL = Tensor([5.0]).realize()
    with pytest.raises(JitError, match="global W_GLOBAL"):
        f(x)


def test_a_rebound_attribute_of_a_closure_object_raises() -> None:
    model = Holder(Tensor([1.0]).realize())
    f = TinyJit(lambda x: x * model.t)
    x = Tensor([2.0]).realize()
    assert [f(x).item() for _ in range(3)] == [2.0, 2.0, 2.0]
    model.t = Tensor([5.0]).realize()
    with pytest.raises(JitError, match=r"model\.t.*is gone"):
        f(x)


def test_an_assign_outside_to_a_tensor_the_function_reads_is_seen() -> None:
    w = Tensor([1.0]).realize()
    model = Holder(Tensor([10.0]).realize())
    f = TinyJit(lambda x: x * w + model.t)
    x = Tensor([1.0]).realize()
    out = []
    for i in range(6):
        w.assign(Tensor([float(i)])).realize()
        if i % 2:
            model.t.assign(model.t + 1)  # left lazy: the replay realizes it
        out.append(f(x).item())
    assert out == [10.0, 12.0, 13.0, 15.0, 16.0, 18.0]


def test_an_earlier_output_read_after_a_later_call_raises() -> None:
    f = TinyJit(lambda x: x * 2)
    outs = [f(Tensor([float(i)])) for i in range(5)]
    assert outs[-1].item() == 8.0
    for old in outs[1:4]:  # the capture's output and the replays' share one memory
        with pytest.raises(JitError, match=r"overwritten by a later call.*clone"):
            old.numpy()
        with pytest.raises(JitError, match="overwritten"):
            (old + 1).numpy()
    kept = [f(Tensor([float(i)])).clone().realize() for i in range(4)]
    assert [k.item() for k in kept] == [0.0, 2.0, 4.0, 6.0]
    assert outs[0].item() == 0.0, "the first, eager call's output is its own"


def test_an_output_fed_back_as_the_input_is_not_raced() -> None:
    # reversed in place, the second half would read what the first half wrote, whatever the threads do
    f = TinyJit(lambda b: b.flip(0).contiguous())
    b = Tensor(np.arange(4096, dtype=np.float32)).realize()
    for i in range(6):
        b = f(b)
        np.testing.assert_array_equal(b.numpy(), np.arange(4096)[::-1] if i % 2 == 0 else np.arange(4096))
    # the issue's: half of the last output, then new values (wrong when threads split the kernel)
    n = 1 << 16
    f = TinyJit(lambda b, new: b[n // 2:].cat(new))
    b = Tensor.zeros(n, dtype=dtypes.int32).contiguous().realize()
    for i in range(8):
        b = f(b, Tensor(np.full(n // 2, i + 1, np.int32)))
        got = b.numpy()
        assert (got[:n // 2] == i).all() and (got[n // 2:] == i + 1).all(), i


def test_multinomial_inside_a_jit_draws_on_the_device() -> None:
    Tensor.manual_seed(0)
    f = TinyJit(lambda p: p.multinomial(64, replacement=True))
    p = Tensor([0.0, 1.0, 0.0, 3.0]).realize()
    draws = np.concatenate([f(p).numpy() for _ in range(6)])
    assert set(draws.tolist()) <= {1, 3} and 0.6 < (draws == 3).mean() < 0.9
    g = TinyJit(lambda p: p.multinomial(2))
    assert all(sorted(g(p).tolist()) == [1, 3] for _ in range(5))


def test_two_jits_share_tensors_one_assigns_and_the_other_reads() -> None:
    # gradient accumulation: one step adds into accumulators, another reads them and resets them outside
    def run(jit: bool) -> list[float]:
        w = Tensor([1.0, 2.0]).realize()
        acc = Tensor.zeros(2).contiguous().realize()

        def micro(x: Tensor) -> Tensor:
            acc.assign(acc + x * w)
            return acc.sum()

        def apply() -> Tensor:
            w.assign(w - acc * 0.5)
            return w.sum()

        m, a = (TinyJit(micro), TinyJit(apply)) if jit else (micro, apply)
        out = []
        for step in range(5):
            for k in range(2):
                m(Tensor([float(step + k), 1.0])).realize()
            out.append(a().item())
            acc.assign(Tensor.zeros(2)).realize()
        return out

    assert run(True) == run(False)


def test_every_row_of_the_footgun_table_is_a_test() -> None:
    docs = Path(__file__).parents[3] / "docs" / "jit.md"
    if not docs.exists():
        pytest.skip("docs/ is not beside the package (an installed copy)")
    named = re.findall(r"\| `(test_\w+)` \|", docs.read_text())
    assert len(named) >= 15
    here = Path(__file__).parent
    defined = set(re.findall(r"^def (test_\w+)", (here / "test_jit_footguns.py").read_text() +
                             (here / "test_jit.py").read_text() +
                             (here / "test_tinygrad_surface.py").read_text(), re.M))
    assert set(named) <= defined, set(named) - defined


def test_the_same_arguments_changed_in_place_are_seen() -> None:
    # a call with the very objects of the last one skips taking them apart (jit_memo) only while nothing in them
    # changed: an attribute rebound, a list entry replaced, a tensor assigned, a flag flipped
    class Model:
        def __init__(self) -> None:
            self.w = Tensor([1.0, 2.0]).realize()
            self.parts = [Tensor([10.0, 10.0]).realize()]
            self.flip = False

        @TinyJit
        def __call__(self, x: Tensor) -> Tensor:
            y = x * self.w + self.parts[0]
            return (y.flip(0) if self.flip else y).contiguous()

    m, x = Model(), Tensor([1.0, 1.0]).realize()
    assert [m(x).tolist() for _ in range(4)] == [[11.0, 12.0]] * 4
    m.w = Tensor([3.0, 4.0]).realize()
    assert m(x).tolist() == [13.0, 14.0]
    m.parts[0] = Tensor([0.0, 0.0]).realize()
    assert m(x).tolist() == [3.0, 4.0]
    m.w.assign(Tensor([5.0, 6.0]))
    assert m(x).tolist() == [5.0, 6.0]
    x.assign(Tensor([2.0, 2.0]))
    assert m(x).tolist() == [10.0, 12.0]
    m.flip = True
    assert m(x).tolist() == [12.0, 10.0]
    assert m(x).tolist() == [12.0, 10.0]


def test_a_result_computed_before_the_capture_is_computed_again() -> None:
    # equal graphs over one buffer are one realized node: the capturing call's `x * 3` was realized just before by
    # the caller, so it launched nothing, and every replay handed back that value
    f = TinyJit(lambda x: (x * 3).contiguous())
    got = []
    for i in range(5):
        a = Tensor([float(i)]).realize()
        (a * 3).contiguous().realize()
        got.append(f(a).item())
    assert got == [0.0, 3.0, 6.0, 9.0, 12.0]
