"""tinygrad's spellings that its language-model, speech and diffusion programs rely on, with tinygrad's semantics:
symbolic bounds checked at the bound value, a symbolic int as a scalar operand, reshape's None, a 0-d tensor as a
linspace endpoint, `device="disk:PATH"`, contiguous_backward, profile_marker, and a whole object (a model) passed
to a TinyJit function."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tinygrad import Tensor, TinyJit, Variable, dtypes
from tinygrad.helpers import Context, profile_marker


def test_shrink_checks_a_variable_at_its_bound_value() -> None:
    # a prompt step shrinks to start_pos + len with start_pos bound to 0, though start_pos's range plus len passes
    # the end of the buffer; tinygrad accepts it, and the values are those of the bound value
    x_np = np.arange(32, dtype=np.float32).reshape(8, 4)
    start = Variable("start", 0, 7).bind(0)
    y = Tensor(x_np).shrink(((start, start + 3), None))
    np.testing.assert_array_equal((y * 1).numpy(), x_np[:3])
    with pytest.raises(ValueError, match="outside shape"):
        Tensor(x_np).shrink(((Variable("late", 0, 7).bind(6), Variable("late", 0, 7).bind(6) + 3), None))


def test_a_symbolic_int_is_a_scalar_operand() -> None:
    v = Variable("pos", 0, 10).bind(2)
    np.testing.assert_array_equal((Tensor.arange(4) + v).numpy(), [2, 3, 4, 5])
    assert (Tensor.arange(4) + v).dtype == dtypes.int32
    assert (Tensor.ones(3) * v).dtype == dtypes.float32
    np.testing.assert_array_equal((Tensor.ones(3) * v).numpy(), [2.0, 2.0, 2.0])
    assert ((Tensor.arange(4) < v).numpy() == [True, True, False, False]).all()


def test_triu_with_a_symbolic_diagonal_masks_a_causal_prompt() -> None:
    pos = Variable("start_pos", 0, 15).bind(2)
    mask = Tensor.full((1, 1, 3, pos + 3), float("-inf")).triu(pos + 1)
    expect = np.triu(np.full((3, 5), -np.inf, np.float32), 3)
    np.testing.assert_array_equal(mask.numpy()[0, 0], expect)


def test_reshape_none_keeps_that_dimension() -> None:
    x = Tensor.arange(24).reshape(2, 12)
    assert x.reshape(None, 3, 4).shape == (2, 3, 4)
    assert x.reshape((None, -1, 2)).shape == (2, 6, 2)
    np.testing.assert_array_equal(x.reshape(None, None).numpy(), np.arange(24).reshape(2, 12))
    with pytest.raises(ValueError, match="None"):
        x.reshape(2, 3, None, 4)


def test_linspace_with_tensor_endpoints() -> None:
    ends = Tensor([1.0, 4.0])
    np.testing.assert_allclose(Tensor.linspace(ends[0], ends[1], 7).numpy(), np.linspace(1, 4, 7), rtol=1e-6)
    np.testing.assert_allclose(Tensor.linspace(-2.0, ends[1], 4).numpy(), np.linspace(-2, 4, 4), rtol=1e-6)
    np.testing.assert_allclose(Tensor.linspace(ends[0], 9, 1).numpy(), [1.0])
    assert Tensor.linspace(ends[0], ends[1], 0).shape == (0,)
    assert Tensor.linspace(ends[0], ends[1], 5, dtype=dtypes.float16).dtype == dtypes.float16


def test_empty_on_a_disk_path_reads_the_file(tmp_path: Path) -> None:
    data = np.arange(10, dtype=np.float32)
    fn = tmp_path / "blob.bin"
    fn.write_bytes(data.tobytes() + b"tail")
    raw = Tensor.empty(fn.stat().st_size, dtype=dtypes.uint8, device=f"disk:{fn}").to(None)
    assert raw.numpy().tobytes() == fn.read_bytes()
    floats = Tensor.empty(2, 5, dtype=dtypes.float32, device=f"disk:{fn}")
    np.testing.assert_array_equal(floats.numpy(), data.reshape(2, 5))
    # as tinygrad's DISK: a tensor longer than the file grows it with zeros, keeping every byte it had
    longer = Tensor.empty(12, dtype=dtypes.float32, device=f"disk:{fn}").numpy()
    assert fn.stat().st_size == 48 and longer[:10].tolist() == data.tolist()


def test_contiguous_backward_is_the_identity_for_values_and_gradients() -> None:
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x * 2).contiguous_backward()
    (y * y).sum().backward()
    np.testing.assert_array_equal(y.numpy(), [2.0, 4.0, 6.0])
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), [8.0, 16.0, 24.0])


def test_profile_marker_is_inert_off_and_traced_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tinygrad.engine import profile
    monkeypatch.setenv("PROFILE_PATH", str(tmp_path / "at_exit.json"))  # the first event fixes where the exit writes
    before = len(profile.trace()["traceEvents"])
    profile_marker("nothing")  # PROFILE off: no event
    assert len(profile.trace()["traceEvents"]) == before
    with Context(PROFILE=1):
        profile_marker("load weights", "green")
    marks = [e for e in profile.trace()["traceEvents"] if e.get("cat") == "marker"]
    assert marks[-1]["name"] == "load weights" and marks[-1]["ph"] == "i" and marks[-1]["args"]["color"] == "green"
    json.dumps(profile.trace())  # the trace stays writable


class _Leaf:
    def __init__(self, scale: float) -> None:
        self.w = Tensor([scale, scale]).realize()


class _Nest:
    """An object deeper than the argument search goes: a model passed whole to a jitted step."""

    def __init__(self, depth: int, scale: float) -> None:
        self.inner: _Nest | _Leaf = _Nest(depth - 1, scale) if depth else _Leaf(scale)
        self.blocks = [Tensor([float(i)]) for i in range(3)]

    def leaf(self) -> _Leaf:
        node: _Nest | _Leaf = self
        while isinstance(node, _Nest):
            node = node.inner
        return node


def test_a_whole_model_may_be_a_tinyjit_argument() -> None:
    @TinyJit
    def run(model: _Nest, x: Tensor) -> Tensor:
        return (model.leaf().w * x).realize()

    model = _Nest(12, 2.0)
    for i in range(4):
        np.testing.assert_array_equal(run(model, Tensor([1.0, float(i)])).numpy(), [2.0, 2.0 * i])
    model.leaf().w.assign(Tensor([3.0, 5.0])).realize()  # the captured kernels read the model's buffers in place
    np.testing.assert_array_equal(run(model, Tensor([1.0, 2.0])).numpy(), [3.0, 10.0])
    other = _Nest(12, 7.0)  # another object is another capture
    np.testing.assert_array_equal(run(other, Tensor([1.0, 1.0])).numpy(), [7.0, 7.0])
