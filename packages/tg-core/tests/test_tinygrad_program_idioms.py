"""What tinygrad's example programs rely on: state updates in `@function` bodies, Variables as indices,
`from_url(gunzip=True)`, Context knobs of tinygrad's and names its model files import."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
from tinygrad import Context, Tensor, TinyJit, Variable, dtypes, function


class _Counter:
    """A layer with state: each call moves `avg` towards the input's mean and counts calls, by assign."""

    def __init__(self) -> None:
        self.avg = Tensor.zeros(3).contiguous().realize()
        self.calls = Tensor.zeros(1).contiguous().realize()

    @function
    def __call__(self, x: Tensor) -> Tensor:
        self.avg.assign(self.avg * 0.5 + x.mean(0) * 0.5)
        self.calls += 1
        return x * 2


def test_function_body_updates_argument_state_on_every_call() -> None:
    layer = _Counter()
    xs = [np.full((2, 3), v, dtype=np.float32) for v in (4.0, 8.0, 2.0)]
    avg = np.zeros(3, dtype=np.float32)
    for x in xs:  # the second and third calls reuse the trace without running the body
        out = layer(Tensor(x))
        avg = avg * 0.5 + x.mean(0) * 0.5
        np.testing.assert_allclose(out.numpy(), x * 2)
        np.testing.assert_allclose(layer.avg.numpy(), avg)
    assert layer.calls.item() == 3
    assert len(_Counter.__call__.traces) == 1


def test_function_state_update_inside_tinyjit() -> None:
    layer = _Counter()

    @TinyJit
    def step(x: Tensor) -> Tensor:
        return layer(x).sum().realize()

    avg = np.zeros(3, dtype=np.float32)
    for v in range(1, 5):  # plain run, capture, then replays
        x = np.full((2, 3), float(v), dtype=np.float32)
        assert step(Tensor(x)).item() == pytest.approx(12.0 * v)
        avg = avg * 0.5 + x.mean(0) * 0.5
        np.testing.assert_allclose(layer.avg.numpy(), avg)
    assert layer.calls.item() == 4


def test_function_refuses_realize_of_an_argument() -> None:
    @function
    def body(x: Tensor) -> Tensor:
        x.realize()
        return x + 1

    with pytest.raises(RuntimeError, match="other than by assign"):
        body(Tensor([1.0, 2.0]) * 3)


def test_bound_variable_as_index_reads_its_bound_value() -> None:
    table = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    v = Variable("row", 0, 2)
    rows = [table[v.bind(i)] * 1 for i in range(3)]  # one graph shape, three bindings
    for i, r in enumerate(rows):
        assert r.shape == (4,)
        np.testing.assert_equal(r.numpy(), np.arange(4) + 4 * i)


def test_from_url_gunzip(tmp_path) -> None:
    path = tmp_path / "data.gz"
    path.write_bytes(gzip.compress(bytes(range(10))))
    assert Tensor.from_url(path.as_uri(), gunzip=True).tolist() == list(range(10))
    assert Tensor.from_url(str(path)).numel() == len(path.read_bytes())  # without gunzip: the raw bytes


def test_context_default_float_and_fuse_optim() -> None:
    with Context(DEFAULT_FLOAT="HALF", FUSE_OPTIM=1):
        assert Tensor([1.5]).dtype == dtypes.float16
        assert dtypes.default_float == dtypes.float16
    assert Tensor([1.5]).dtype == dtypes.float32


def test_tensor_module_exports_typing_cast() -> None:
    from typing import cast

    from tinygrad.tensor import cast as tensor_cast
    assert tensor_cast is cast
