"""Tensors on several devices: `shard`, replication, the ops on them (per shard, with all-reduces and gathers where
the placement asks for them), autograd through them, TinyJit, and data-parallel training equal to one device."""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import pytest
from tinygrad import Context, Device, Tensor, TinyJit, dtypes, nn
from tinygrad.engine import collectives
from tinygrad.multi import sharding
from tinygrad.nn.state import get_parameters

RNG = np.random.default_rng(3)


def data(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def devices(n: int, kind: str | None = None) -> tuple[str, ...]:
    """n devices of one backend (the default one's): CPU:0, CPU:1, ..., opened here; skips where there are fewer."""
    kind = kind or Device.DEFAULT.split(":")[0]
    names = tuple(f"{kind}:{i}" for i in range(n))
    try:
        for name in names:
            Device[name]
    except (RuntimeError, ValueError) as e:
        pytest.skip(f"needs {n} devices of {kind}: {e}")
    return names


@pytest.fixture
def d2() -> tuple[str, ...]:
    return devices(2)


@pytest.fixture
def d4() -> tuple[str, ...]:
    return devices(4)


def axis_of(t: Tensor) -> int | None:
    return sharding(t.uop)[1]


def close(t: Tensor, want: np.ndarray, tol: float = 1e-5) -> None:
    np.testing.assert_allclose(t.numpy(), want, rtol=tol, atol=tol)


# ---- devices and placement ----

def test_numbered_devices_of_one_kind_are_separate_devices(d2: tuple[str, ...]) -> None:
    assert Device[d2[0]] is not Device[d2[1]]
    x = Tensor([1.0, 2.0], device=d2[1])
    assert (x + 1).to(d2[0]).tolist() == [2.0, 3.0]
    # a constant realized on one device (the same node as `x + 1`'s operand) is not read by another device's kernel
    Tensor.ones(2, device=d2[0]).realize()
    assert (x + 1).to(d2[0]).tolist() == [2.0, 3.0]


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_shard_keeps_the_whole_shape_and_value(d4: tuple[str, ...], axis: int | None) -> None:
    a = data(8, 12)
    t = Tensor(a).shard(d4, axis)
    assert t.device == tuple(Device.canonicalize(d) for d in d4) and t.shape == (8, 12)
    assert axis_of(t) == (None if axis is None else axis % 2)
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal(t.realize().numpy(), a)
    np.testing.assert_array_equal(t.to(d4[2]).numpy(), a)  # gathered onto one device


def test_uneven_split_raises_as_tinygrad_does(d2: tuple[str, ...]) -> None:
    with pytest.raises(RuntimeError, match="multi axis uneven"):
        Tensor(data(5, 4)).shard(d2, 0)


def test_replicated_creation(d2: tuple[str, ...]) -> None:
    assert Tensor([[1, 2], [3, 4]], device=d2).tolist() == [[1, 2], [3, 4]]
    assert Tensor.zeros(2, 3, device=d2).sum().item() == 0
    assert Tensor.empty(4, device=d2).shape == (4,)
    assert Tensor.arange(6, device=d2).reshape(2, 3).sum(1).tolist() == [3, 12]
    r = Tensor.rand(16, device=d2).realize()
    replicas = [s.numpy() for s in _shards(r)]
    np.testing.assert_array_equal(replicas[0], replicas[1])  # one draw, replicated


def _shards(t: Tensor) -> list[Tensor]:
    view = t.realize().uop
    return [Tensor(u, device=d) for u, d in zip(view.src, t.device)]


def test_shards_hold_their_part(d4: tuple[str, ...]) -> None:
    a = data(8, 4)
    parts = [s.numpy() for s in _shards(Tensor(a).shard(d4, 0))]
    for i, p in enumerate(parts):
        np.testing.assert_array_equal(p, a[2 * i:2 * i + 2])


def test_mixing_devices_is_refused(d2: tuple[str, ...]) -> None:
    x = Tensor(data(4, 4)).shard(d2, 0)
    with pytest.raises(RuntimeError, match="mixes"):
        (x + Tensor(data(4, 4), device=d2[0])).realize()
    three = devices(3)
    with pytest.raises(RuntimeError, match="mixes"):
        (x + Tensor(data(4, 4)).shard(three[1:], 0)).realize()


# ---- elementwise ----

@pytest.mark.parametrize("ax_a", [None, 0, 1])
@pytest.mark.parametrize("ax_b", [None, 0, 1])
def test_elementwise_over_any_two_shardings(d2: tuple[str, ...], ax_a: int | None, ax_b: int | None) -> None:
    a, b = data(4, 6), data(4, 6)
    x, y = Tensor(a).shard(d2, ax_a), Tensor(b).shard(d2, ax_b)
    out = ((x > y).where(x * 2 + y, x - y) * 0.5).exp2()
    want = np.exp2(np.where(a > b, a * 2 + b, a - b) * 0.5)
    close(out, want)
    # the result is placed as the last sharded operand is
    assert axis_of(out) == (ax_b if ax_b is not None else ax_a)


def test_replicated_and_constant_operands_are_sliced_per_shard(d4: tuple[str, ...]) -> None:
    a, b = data(8, 3), data(3)
    x = Tensor(a).shard(d4, 0)
    out = x + Tensor(b).to(d4) + Tensor.arange(8, device=d4).reshape(8, 1).float() + 1
    assert axis_of(out) == 0
    close(out, a + b + np.arange(8).reshape(8, 1) + 1)
    close(x.cast(dtypes.int32), a.astype(np.int32))


# ---- reductions ----

@pytest.mark.parametrize("shard_axis", [None, 0, 1])
@pytest.mark.parametrize("axis", [None, 0, 1, (0, 1)])
@pytest.mark.parametrize("op", ["sum", "max", "min", "mean", "prod"])
def test_reductions_over_every_axis(d2: tuple[str, ...], shard_axis: int | None, axis: int | tuple | None,
                                    op: str) -> None:
    a = data(4, 6) if op != "prod" else RNG.uniform(0.5, 1.5, (4, 6)).astype(np.float32)
    x = Tensor(a).shard(d2, shard_axis)
    out = getattr(x, op)(axis)
    close(out, getattr(np, op)(a, axis=axis), 1e-5)
    reduced = {0, 1} if axis is None else {axis} if isinstance(axis, int) else set(axis)
    if shard_axis is not None and shard_axis not in reduced:
        assert axis_of(out) == shard_axis - sum(1 for r in reduced if r < shard_axis)  # the axis stays sharded
    else:
        assert axis_of(out) is None  # per shard, then all-reduced: every device holds the result
    keep = getattr(x, op)(axis, keepdim=True)
    close(keep, getattr(np, op)(a, axis=axis, keepdims=True), 1e-5)


def test_argmax_and_softmax_over_the_sharded_axis(d2: tuple[str, ...]) -> None:
    a = data(4, 8)
    x = Tensor(a).shard(d2, 1)
    assert x.argmax(1).tolist() == a.argmax(1).tolist()
    e = np.exp(a - a.max(1, keepdims=True))
    close(x.softmax(1), e / e.sum(1, keepdims=True))


@pytest.mark.parametrize("n, size", [(2, 100), (2, 4096), (4, 100), (4, 4096)])
def test_all_reduce_sums_in_the_documented_order(n: int, size: int) -> None:
    devs = devices(n)
    a = data(n, size)
    out = Tensor(a).shard(devs, 0).sum(0).numpy()
    if n == 2 or size < n * collectives.RING_MIN_CHUNK:
        want = a[0].copy()  # in device order, on the first device: bit-identical to the sequential sum
        for row in a[1:]:
            want = want + row
    else:  # chunk k of the ring: from the device after k, around to k
        want = np.empty(size, np.float32)
        for k in range(n):
            lo, hi = k * size // n, (k + 1) * size // n
            acc = a[(k + 1) % n, lo:hi].copy()
            for step in range(1, n):
                acc = acc + a[(k + 1 + step) % n, lo:hi]
            want[lo:hi] = acc
    np.testing.assert_array_equal(out, want)
    replicas = [s.numpy() for s in _shards(Tensor(a).shard(devs, 0).sum(0))]
    for r in replicas[1:]:
        np.testing.assert_array_equal(r, replicas[0])  # every device holds the same bits


def test_two_devices_combine_on_the_first(d2: tuple[str, ...]) -> None:
    # two devices take no ring, whatever the size: the second's value is copied to the first, combined there in one
    # kernel and copied back; each device's one row is its value as it is, with no kernel to reduce it
    a = data(2, 4096)
    x = Tensor(a).shard(d2, 0).realize()
    items = x.sum(0).schedule()
    assert [(si.is_copy, si.device) for si in items] == [(True, x.device[0]), (False, x.device[0]),
                                                          (True, x.device[1])]
    out = x.sum(0)
    np.testing.assert_array_equal(out.numpy(), a[0] + a[1])
    replicas = [s.numpy() for s in _shards(out)]
    np.testing.assert_array_equal(replicas[0], replicas[1])
    np.testing.assert_array_equal(x.max(0).numpy(), np.maximum(a[0], a[1]))


def test_reducing_rows_of_one_element_leaves_the_input_alone(d2: tuple[str, ...]) -> None:
    # the all-reduce reads each device's row as it is: its result is new buffers, and writing it keeps the input
    a = data(2, 4096)
    x = Tensor(a).shard(d2, 0).realize()
    s = x.sum(0).realize()
    s.assign(s * 2).realize()
    np.testing.assert_array_equal(x.numpy(), a)
    np.testing.assert_array_equal(s.numpy(), (a[0] + a[1]) * 2)


def test_all_reduce_of_max_and_ints_is_exact(d4: tuple[str, ...]) -> None:
    a = RNG.integers(-1000, 1000, (4, 2048)).astype(np.int32)
    x = Tensor(a).shard(d4, 0)
    np.testing.assert_array_equal(x.sum(0).numpy(), a.sum(0))
    np.testing.assert_array_equal(x.max(0).numpy(), a.max(0))


# ---- matmul ----

def test_matmul_batch_sharded_with_replicated_weights(d4: tuple[str, ...]) -> None:
    a, w = data(8, 5), data(5, 3)
    out = Tensor(a).shard(d4, 0) @ Tensor(w).to(d4)
    assert axis_of(out) == 0
    close(out, a @ w)


def test_matmul_weights_sharded_on_the_output_dim(d4: tuple[str, ...]) -> None:
    a, w = data(6, 5), data(5, 8)
    out = Tensor(a).to(d4) @ Tensor(w).shard(d4, 1)
    assert axis_of(out) == 1
    close(out, a @ w)
    batched = Tensor(data(2, 6, 5)).to(d4) @ Tensor(w).shard(d4, 1)
    assert axis_of(batched) == 2


def test_matmul_contracting_a_sharded_axis_all_reduces(d4: tuple[str, ...]) -> None:
    a, w = data(6, 8), data(8, 3)
    out = Tensor(a).shard(d4, 1) @ Tensor(w).shard(d4, 0)
    assert axis_of(out) is None
    close(out, a @ w)
    close(Tensor(a).shard(d4, 1) @ Tensor(w).to(d4), a @ w)


# ---- movement ----

def test_reshape_moves_the_axis_where_shards_stay_whole(d2: tuple[str, ...]) -> None:
    a = data(4, 6)
    x = Tensor(a).shard(d2, 0)
    for shape, axis in [((2, 2, 6), 0), ((8, 3), 0), ((24,), 0), ((1, 4, 6), 1), ((4, 2, 3), 0)]:
        out = x.reshape(shape)
        assert axis_of(out) == axis, shape
        close(out + 1, a.reshape(shape) + 1)
    y = Tensor(a).shard(d2, 1)
    out = y.reshape(4, 2, 3)
    assert axis_of(out) == 1
    close(out, a.reshape(4, 2, 3))


def test_reshape_that_moves_elements_between_devices_raises(d2: tuple[str, ...]) -> None:
    with pytest.raises(RuntimeError, match="move elements between devices"):
        Tensor(data(4, 6)).shard(d2, 1).reshape(24).realize()
    with pytest.raises(RuntimeError, match="move elements between devices"):
        Tensor(data(2, 6)).shard(d2, 0).reshape(3, 4).realize()
    with pytest.raises(RuntimeError, match="move elements between devices"):
        Tensor(data(4, 6)).shard(d2, 1).reshape(4, 3, 2).realize()


def test_permute_expand_pad_shrink_flip(d2: tuple[str, ...]) -> None:
    a = data(4, 1, 6)
    x = Tensor(a).shard(d2, 0)
    assert axis_of(x.permute(2, 0, 1)) == 1
    close(x.permute(2, 0, 1), a.transpose(2, 0, 1))
    close(x.expand(4, 3, 6), np.broadcast_to(a, (4, 3, 6)))
    close(x.pad(((0, 0), (1, 1), (2, 0))), np.pad(a, ((0, 0), (1, 1), (2, 0))))
    close(x[:, :, 1:4], a[:, :, 1:4])
    close(x.flip(2), a[:, :, ::-1])
    assert axis_of(x[:, :, 1:4]) == 0
    # on the sharded axis the value is gathered first: right, and replicated
    padded = np.pad(a, ((1, 0), (0, 0), (0, 0)))
    for out, want in [(x[1:3], a[1:3]), (x.flip(0), a[::-1]), (x.pad(((1, 0), (0, 0), (0, 0))), padded)]:
        assert axis_of(out) is None
        close(out, want)


def test_cat_and_stack(d2: tuple[str, ...]) -> None:
    a, b = data(4, 3), data(4, 3)
    x, y = Tensor(a).shard(d2, 0), Tensor(b).shard(d2, 0)
    close(x.cat(y, dim=1), np.concatenate([a, b], 1))
    close(x.cat(y, dim=0), np.concatenate([a, b], 0))
    close(Tensor.stack(x, y, dim=2), np.stack([a, b], 2))


def test_reshard(d4: tuple[str, ...]) -> None:
    a = data(8, 12)
    x = Tensor(a).shard(d4, 0)
    for axis in (1, None, 0):
        y = x.shard(d4, axis)
        assert axis_of(y) == axis
        np.testing.assert_array_equal(y.numpy(), a)
    like = Tensor(data(8, 12)).shard(d4, 1)
    z = Tensor(a).shard_like(like)
    assert z.device == like.device and axis_of(z) == 1
    np.testing.assert_array_equal(z.numpy(), a)


def test_indexing_and_one_hot_on_sharded_batches(d2: tuple[str, ...]) -> None:
    a = data(8, 5)
    labels = RNG.integers(0, 5, 8).astype(np.int32)
    x, y = Tensor(a).shard(d2, 0), Tensor(labels).shard(d2, 0)
    with Context(CHECK_INDICES=0):
        loss = x.sparse_categorical_crossentropy(y)
    logp = a - np.log(np.exp(a).sum(1, keepdims=True))
    close(loss, -logp[np.arange(8), labels].mean())
    close(x.gather(1, y.reshape(8, 1)), a[np.arange(8), labels].reshape(8, 1))


def test_assign_to_a_multi_device_tensor(d2: tuple[str, ...]) -> None:
    a = data(4, 2)
    x = Tensor(a).shard(d2, 0).realize()
    x.assign(x * 2).realize()
    close(x, a * 2)
    x[1:3].assign(Tensor.zeros(2, 2, device=d2)).realize()
    want = a * 2
    want[1:3] = 0
    close(x, want)


# ---- autograd ----

def grads(loss_fn: Callable[..., Tensor], arrays: list[np.ndarray], place: Callable[[Tensor, int], Tensor]
          ) -> list[np.ndarray]:
    ts = [Tensor(a, requires_grad=True) for a in arrays]
    loss_fn(*[place(t, i) for i, t in enumerate(ts)]).backward()
    return [t.grad.numpy() for t in ts]  # type: ignore[union-attr]


@pytest.mark.parametrize("case", ["batch", "out_dim", "contract"])
def test_matmul_backward_matches_one_device(d2: tuple[str, ...], case: str) -> None:
    a, w = data(8, 6), data(6, 4)
    axes = {"batch": (0, None), "out_dim": (None, 1), "contract": (1, 0)}[case]

    def loss(x: Tensor, y: Tensor) -> Tensor:
        return ((x @ y).relu() * Tensor.arange(4, device=x.device).float()).mean()

    want = grads(loss, [a, w], lambda t, i: t)
    got = grads(loss, [a, w], lambda t, i: t.shard(d2, axes[i]))
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)


def test_replicated_parameter_gradient_is_summed_over_the_whole_batch(d4: tuple[str, ...]) -> None:
    a, w = data(8, 3), data(3, 2)
    p = Tensor(w, requires_grad=True).shard_(d4)
    (Tensor(a).shard(d4, 0) @ p).square().sum().backward()
    assert p.grad is not None and p.grad.device == p.device and axis_of(p.grad) is None
    close(p.grad, 2 * a.T @ (a @ w), 1e-4)


def test_gradient_through_a_gather(d2: tuple[str, ...]) -> None:
    a = data(4, 3)
    x = Tensor(a, requires_grad=True)
    sharded = x.shard(d2, 0)
    (sharded.exp().to(d2[0]) * 3).sum().backward()
    assert x.grad is not None
    close(x.grad, 3 * np.exp(a))


# ---- TinyJit ----

def test_tinyjit_captures_and_replays_a_multi_device_step(d2: tuple[str, ...]) -> None:
    w = Tensor(data(6, 3)).to(d2).realize()

    @TinyJit
    def f(x: Tensor) -> Tensor:
        return ((x @ w).relu().sum(0) + 1).realize()

    for _ in range(5):
        a = data(4, 6)
        out = f(Tensor(a).shard(d2, 0))
        assert out.device == w.device
        close(out, np.maximum(a @ w.numpy(), 0).sum(0) + 1)
    assert f.captured_kernels > 0


# ---- data-parallel training equals one device ----

class MLP:
    def __init__(self) -> None:
        self.l1, self.l2 = nn.Linear(20, 32), nn.Linear(32, 10)

    def __call__(self, x: Tensor) -> Tensor:
        return self.l2(self.l1(x).relu())


class ConvNet:
    def __init__(self) -> None:
        self.layers: list[Callable[[Tensor], Tensor]] = [
            nn.Conv2d(1, 4, 3), Tensor.relu, nn.BatchNorm(4), Tensor.max_pool2d,  # type: ignore[list-item]
            lambda x: x.flatten(1), nn.Linear(4 * 3 * 3, 10)]

    def __call__(self, x: Tensor) -> Tensor:
        return x.sequential(self.layers)


def _train(model_type: type, opt_type: Callable[..., nn.optim.Optimizer], xs: np.ndarray, ys: np.ndarray,
           devs: tuple[str, ...] | None) -> list[np.ndarray]:
    Tensor.manual_seed(11)
    model = model_type()
    params = get_parameters(model)
    if devs is not None:
        for p in params:
            p.shard_(devs)  # replicated weights, batch-sharded data
    opt = opt_type(params)

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        with Context(TRAINING=1, CHECK_INDICES=0):
            opt.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y).backward()
            return loss.realize(*opt.schedule_step())

    for x, y in zip(xs, ys):
        tx, ty = Tensor(x), Tensor(y)
        step(tx.shard(devs, 0), ty.shard(devs, 0)) if devs is not None else step(tx, ty)
    return [p.numpy() for p in params]


@pytest.mark.parametrize("model_type, opt_type, shape", [
    (MLP, lambda ps: nn.optim.Adam(ps, lr=0.01), (20,)),
    (ConvNet, lambda ps: nn.optim.SGD(ps, lr=0.05, momentum=0.9), (1, 8, 8)),
], ids=["mlp-adam", "convnet-batchnorm-sgd"])
def test_data_parallel_steps_equal_one_device(d2: tuple[str, ...], model_type: type,
                                              opt_type: Callable[..., nn.optim.Optimizer],
                                              shape: tuple[int, ...]) -> None:
    xs = RNG.standard_normal((5, 8, *shape)).astype(np.float32)
    ys = RNG.integers(0, 10, (5, 8)).astype(np.int32)
    one = _train(model_type, opt_type, xs, ys, None)
    two = _train(model_type, opt_type, xs, ys, d2)
    for a, b in zip(one, two):
        np.testing.assert_allclose(b, a, atol=1e-5, rtol=0)


# ---- devices of other kinds ----

def _open(*names: str) -> tuple[str, ...]:
    try:
        for n in names:
            Device[n]
    except Exception as e:  # an unknown or unavailable backend: say which and why
        pytest.skip(f"needs {names}: {type(e).__name__}: {e}")
    if os.environ.get("TG_EXPECT_DEVICE"):
        pytest.skip("TG_EXPECT_DEVICE runs may open only their own device")
    return names


@pytest.mark.parametrize("names", [("CPU", "CL"), ("CL:0", "CL:1"), ("CPU", "PYREF")],
                         ids=["cpu+opencl", "two-opencl", "cpu+pyref"])
def test_devices_of_different_kinds(names: tuple[str, ...]) -> None:
    devs = _open(*names)
    a, w = data(4, 6), data(6, 2)
    x = Tensor(a).shard(devs, 0)
    close(x.sum(0), a.sum(0))
    close((x @ Tensor(w).to(devs)).relu().sum(1), np.maximum(a @ w, 0).sum(1))
    close(x.shard(devs, 1).max(1), a.max(1))
    # above the ring's minimum too, each element is combined once, on one device: every device holds the same bits
    b = data(2, 1024)
    y = Tensor(b).shard(devs[:2], 0).sum(0)
    np.testing.assert_array_equal(y.numpy(), b[0] + b[1])
    replicas = [s.numpy() for s in _shards(y)]
    np.testing.assert_array_equal(replicas[0], replicas[1])


def test_assign_keeps_the_placement(d2: tuple[str, ...]) -> None:
    a = data(4, 6)
    w = Tensor(a).to(d2).realize()
    w.assign(w - Tensor(a).shard(d2, 1)).realize()  # the value alone would be sharded on axis 1
    assert axis_of(w) is None
    np.testing.assert_array_equal(w.numpy(), np.zeros_like(a))


def test_write_in_place_fills_every_shard(d2: tuple[str, ...]) -> None:
    from tinygrad.nn.training import fresh_buffer, write_in_place

    lr = fresh_buffer(0.1, (), device=d2)  # an optimizer's learning rate over replicated parameters
    write_in_place(lr, 0.5)
    assert [s.item() for s in _shards(lr)] == [0.5, 0.5]
    t = Tensor(np.zeros((4, 2), np.float32)).shard(d2, 0).realize()
    write_in_place(t, np.arange(8).reshape(4, 2))
    np.testing.assert_array_equal(t.numpy(), np.arange(8).reshape(4, 2))
