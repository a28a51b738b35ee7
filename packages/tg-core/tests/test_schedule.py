"""The scheduler: how many kernels a graph becomes (via Tensor.schedule()), reuse of realized values, and
what DEBUG prints about it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from tinygrad import Context, Device, GlobalCounters, Tensor
from tinygrad.uop.ops import Ops


def kernels(*ts: Tensor) -> int:
    return sum(1 for si in ts[0].schedule(*ts[1:]) if not si.is_copy)


def launched(fn) -> int:  # type: ignore[no-untyped-def]
    before = GlobalCounters.kernel_count
    fn()
    return GlobalCounters.kernel_count - before


def rand(*shape: int, seed: int = 0) -> tuple[Tensor, np.ndarray]:
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return Tensor(a), a


N = 6


def test_readme_example_is_one_kernel() -> None:
    (a, na), (b, nb) = rand(N, N, seed=1), rand(N, N, seed=2)
    c = (a.reshape(N, 1, N) * b.T.reshape(1, N, N)).sum(axis=2)
    assert kernels(c) == 1
    assert launched(c.realize) == 1
    np.testing.assert_allclose(c.numpy(), na @ nb, atol=1e-5, rtol=1e-5)


def test_uploaded_inputs_need_no_kernel() -> None:
    a, _ = rand(3, 4)
    assert a.schedule() == []
    assert kernels(a.reshape(4, 3)) == 0  # a reshape of a contiguous buffer is that buffer
    assert kernels(a.T) == 1  # a permuted view is realized into a buffer of its own


def test_movement_ops_are_views() -> None:
    a, na = rand(4, 6)
    v = a.permute(1, 0).reshape(3, 8).pad(((1, 0), (0, 2))).shrink(((0, 3), (1, 9))).flip(0)[::2, 1:].unsqueeze(0)
    out = v.expand(2, 2, 7) * 2  # the views only change how the one kernel indexes a's buffer
    assert kernels(out) == 1
    ref = np.flip(np.pad(na.T.reshape(3, 8), ((1, 0), (0, 2)))[0:3, 1:9], 0)[::2, 1:][None]
    np.testing.assert_array_equal(out.numpy(), np.broadcast_to(ref, (2, 2, 7)) * 2)


def test_elementwise_chain_is_one_kernel() -> None:
    (a, na), (b, nb), (c, nc) = rand(3, 4, seed=1), rand(4, seed=2), rand(4, 3, seed=3)
    out = ((a + b) * c.T - 1).exp().relu().sqrt() / (a.abs() + 1)
    assert kernels(out) == 1
    ref = np.sqrt(np.maximum(np.exp((na + nb) * nc.T - 1), 0)) / (np.abs(na) + 1)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5)


def test_elementwise_into_reduce_is_one_kernel() -> None:
    (a, na), (b, nb) = rand(3, 4, seed=1), rand(3, 4, seed=2)
    out = (a * b + 1).sum(axis=1)
    assert kernels(out) == 1
    np.testing.assert_allclose(out.numpy(), (na * nb + 1).sum(axis=1), rtol=1e-5, atol=1e-6)


def test_reduce_then_elementwise_is_one_kernel() -> None:
    (a, na), (b, nb) = rand(3, 4, seed=1), rand(3, seed=2)
    out = (a.sum(axis=1) * 2 + b).abs().sqrt()
    assert kernels(out) == 1
    np.testing.assert_allclose(out.numpy(), np.sqrt(np.abs(na.sum(axis=1) * 2 + nb)), rtol=1e-5)


def test_a_reduction_read_by_two_kernels_runs_once() -> None:
    # a weight's gradient (a reduction, then a reshape) read by both of Adam's moments: computed once, read twice
    (a, na), (m, nm), (v, nv) = rand(6, 4, seed=1), rand(2, 2, seed=2), rand(2, 2, seed=3)
    g = a.sum(axis=0).reshape(2, 2)
    m2, v2 = m * 0.9 + g * 0.1, v * 0.99 + (g * g) * 0.01
    schedule = m2.schedule(v2)
    reducing = [si for si in schedule if any(u.op is Ops.REDUCE_AXIS for u in si.ast.toposort())]
    assert len(reducing) == 1 and len(schedule) == 3
    ng = na.sum(axis=0).reshape(2, 2)
    Tensor.realize(m2, v2)
    np.testing.assert_allclose(m2.numpy(), nm * 0.9 + ng * 0.1, rtol=1e-5)
    np.testing.assert_allclose(v2.numpy(), nv * 0.99 + ng * ng * 0.01, rtol=1e-5)
    # one consumer kernel that reads it twice still fuses the reduction
    assert kernels(g * 2 + g.exp()) == 1


def test_a_reduction_of_reductions_is_one_kernel_where_nothing_is_reused() -> None:
    """A reduction read by another reduction through elementwise ops and reshapes, nothing else reading it, whose
    loads all move along the axes the outer one reduces (sums of sums; a block-scaled dot product, each block's sum
    scaled then summed: a quantized matrix-vector product): one kernel, the inner sum computed in the outer loop."""
    (t, nt), (w, nw) = rand(6, 7, 5), rand(8, 4, 16, seed=1)
    (x, nx), (s, ns) = rand(4, 16, seed=2), rand(8, 4, 1, seed=3)
    assert kernels(t.sum(2).sum(1)) == 1
    np.testing.assert_allclose(t.sum(2).sum(1).numpy(), nt.sum(2).sum(1), rtol=1e-5)
    assert kernels((t.sum(2) * 2 + 1).max(1)) == 1
    np.testing.assert_allclose((t.sum(2) * 2 + 1).max(1).numpy(), (nt.sum(2) * 2 + 1).max(1), rtol=1e-5)
    blocked = (s * (w * x).sum(-1, keepdim=True)).sum((-2, -1))  # (rows, blocks, values) against x (blocks, values)
    assert kernels(blocked) == 1
    np.testing.assert_allclose(blocked.numpy(), (ns * (nw * nx).sum(-1, keepdims=True)).sum((-2, -1)), rtol=1e-5)
    # x scaled by a value that is the same for every block (a norm's) still moves along the blocks: one kernel
    scaled = x * (x * x).mean().rsqrt()
    normed = (s * (w * scaled).sum(-1, keepdim=True)).sum((-2, -1))
    nscaled = nx / np.sqrt((nx * nx).mean())
    assert kernels(normed) == 2  # the norm's sum of squares, then the product
    # the check follows each path to a read once per state: a value built from itself 30 times over (2**30 paths)
    deep = x
    for _ in range(30):
        deep = deep * deep + deep
    assert kernels((s * (w * deep).sum(-1, keepdim=True)).sum((-2, -1))) == 1
    np.testing.assert_allclose(normed.numpy(), (ns * (nw * nscaled).sum(-1, keepdims=True)).sum((-2, -1)),
                               rtol=1e-5)


def test_a_nested_reduction_under_a_rotary_read_stays_in_its_outer_kernel() -> None:
    """A block-scaled product read at two index maps (a rotary embedding reads each output and its partner in the
    other half): the product is realized (one kernel, not recomputed per map), and the sums nested in it stay in
    its loop, though the rule that realizes it reaches them along the same two paths."""
    (w, nw), (x, nx), (s, ns) = rand(4, 3, 8, 16, seed=7), rand(4, 3, 8, 1, seed=8), rand(4, 3, 1, 16, seed=9)
    (c, nc) = rand(16, seed=10)
    y = (s * (w * x).sum(-2, keepdim=True)).sum((0, 1, 2))
    ny = (ns * (nw * nx).sum(-2, keepdims=True)).sum((0, 1, 2))
    rotated = y * c + y[8:].cat(-y[:8]) * c
    assert kernels(rotated) == 2  # the product, then the rotation
    np.testing.assert_allclose(rotated.numpy(), ny * nc + np.concatenate([ny[8:], -ny[:8]]) * nc, rtol=1e-5,
                               atol=1e-5)


def test_a_reduction_that_reuses_a_value_across_the_outer_axes_keeps_its_kernel() -> None:
    """A convolution under a global pool: its weight is the same for every position the pool reduces, and a kernel
    of the convolution's own reuses it across them; an inner reduction read through a broadcast, or by two
    consumers, is realized too."""
    (x, nx), (wt, nw) = rand(2, 3, 8, 8), rand(4, 3, 3, 3, seed=1)
    pooled = x.conv2d(wt).relu().mean((2, 3))
    assert kernels(pooled) == 2
    torch = pytest.importorskip("torch")
    ref = torch.nn.functional.conv2d(torch.tensor(nx), torch.tensor(nw)).relu().mean((2, 3)).numpy()
    np.testing.assert_allclose(pooled.numpy(), ref, rtol=1e-5, atol=1e-6)
    t, nt = rand(6, 7, 5)
    assert kernels((t.sum(2, keepdim=True) * t).sum((1, 2))) == 2  # read back at every value: broadcast
    inner = t.sum(2)
    assert kernels(inner.sum(1), inner * 2) == 3  # the inner sum is realized once, read by both
    np.testing.assert_allclose((t.sum(2, keepdim=True) * t).sum((1, 2)).numpy(),
                               (nt.sum(2, keepdims=True) * nt).sum((1, 2)), rtol=1e-5)


def test_softmax_like_is_two_kernels() -> None:
    x, nx = rand(4, 5)
    out = x - x.max(axis=1, keepdim=True)
    assert kernels(out) == 2  # the max is read by every element of its row: it is realized first
    assert launched(out.realize) == 2
    np.testing.assert_allclose(out.numpy(), nx - nx.max(axis=1, keepdims=True), rtol=1e-6)
    e = (x - x.max(axis=1, keepdim=True)).exp()
    soft = e / e.sum(axis=1, keepdim=True)
    ref = np.exp(nx - nx.max(axis=1, keepdims=True))
    np.testing.assert_allclose(soft.numpy(), ref / ref.sum(axis=1, keepdims=True), rtol=1e-5)


def test_contiguous_is_a_boundary() -> None:
    a, na = rand(3, 4)
    assert kernels((a + 1).contiguous() * 2) == 2
    assert kernels(a + 1, a * 2) == 2  # two outputs, two kernels
    np.testing.assert_allclose(((a + 1).contiguous() * 2).numpy(), (na + 1) * 2, rtol=1e-6)


def test_outputs_read_by_one_elementwise_kernel_are_stored_by_it() -> None:
    # an optimizer's step: the new moments are outputs, and the new weight reads them at its own index. One kernel
    # stores all three (after the gradient's reduction), and a requested output read elsewhere keeps its own kernel
    (a, na), (m, nm), (v, nv), (w, nw) = (rand(6, 4, seed=1), rand(2, 2, seed=2), rand(2, 2, seed=3),
                                          rand(2, 2, seed=4))
    g = a.sum(axis=0).reshape(2, 2)
    m2, v2 = m * 0.9 + g * 0.1, v * 0.99 + (g * g) * 0.01
    w2 = w - 0.1 * m2 / ((v2 + 1e-8).sqrt() + 1e-3)
    # read through a permute (another index), by two kernels, or as a broadcast: each keeps its own kernel
    assert kernels(m2, m2.T + 1) == 2
    assert kernels(m2, m2 + 1, m2 * 2) == 3
    assert kernels(m2, m2.sum() * m2) == 3  # read by the sum's kernel too
    assert kernels(m2, m2.reshape(1, 4).expand(3, 4) * 2) == 2  # read once per row of the broadcast
    schedule = w2.schedule(m2, v2)
    assert [si.outs for si in schedule] == [1, 3]
    assert len(schedule[1].ast.src) == 3 and schedule[1].bufs[1] is not schedule[1].bufs[2]
    Tensor.realize(w2, m2, v2)
    ng = na.sum(axis=0).reshape(2, 2)
    nm2, nv2 = nm * 0.9 + ng * 0.1, nv * 0.99 + ng * ng * 0.01
    np.testing.assert_allclose(m2.numpy(), nm2, rtol=1e-5)
    np.testing.assert_allclose(v2.numpy(), nv2, rtol=1e-5)
    np.testing.assert_allclose(w2.numpy(), nw - 0.1 * nm2 / (np.sqrt(nv2 + 1e-8) + 1e-3), rtol=1e-5)
    # chains end in the last reader: three outputs, one kernel
    x, nx = rand(3, 4, seed=5)
    x1 = x + 1
    x2 = x1 * 2
    x3 = x2.exp()
    assert kernels(x1, x2, x3) == 1
    Tensor.realize(x1, x2, x3)
    np.testing.assert_allclose(x1.numpy(), nx + 1, rtol=1e-6)
    np.testing.assert_allclose(x3.numpy(), np.exp((nx + 1) * 2), rtol=1e-5)


def test_a_kernel_storing_several_outputs_replays_in_a_jit() -> None:
    from tinygrad import TinyJit

    (m, nm), (w, nw) = rand(4, seed=1), rand(4, seed=2)
    m, w = m.contiguous().realize(), w.contiguous().realize()

    @TinyJit
    def step(g: Tensor) -> Tensor:
        m.assign(m * 0.5 + g)
        w.assign(w - m)
        return Tensor.realize(m, w)[1]

    for i in range(4):
        ng = np.full(4, float(i), np.float32)
        step(Tensor(ng))
        nm = nm * 0.5 + ng
        nw = nw - nm
        np.testing.assert_allclose(m.numpy(), nm, rtol=1e-6)
        np.testing.assert_allclose(w.numpy(), nw, rtol=1e-6)


def test_schedule_runs_nothing() -> None:
    a, _ = rand(3, 4)
    out = (a * 3).exp()
    assert launched(lambda: out.schedule()) == 0
    assert launched(out.realize) == 1


def test_realized_tensors_are_reused() -> None:
    (a, na), (b, nb) = rand(3, 4, seed=1), rand(3, 4, seed=2)
    c = (a * b).sum(axis=0)
    graph = c.uop  # realize() swaps c's graph for its buffer; holding the graph keeps its record alive
    assert launched(c.realize) == 1
    assert c.schedule() == [] and launched(c.realize) == 0
    # the same expression built again is the same (hash-consed) graph, and that is already realized
    again = (a * b).sum(axis=0)
    assert again.uop is graph
    assert again.schedule() == []
    assert launched(again.realize) == 0
    np.testing.assert_allclose(again.numpy(), (na * nb).sum(axis=0), rtol=1e-5, atol=1e-6)
    # a consumer of a realized value runs only its own kernel, reading the stored buffer
    d = c + 1
    (item,) = d.schedule()
    assert any(buf is c._buffer() for buf in item.bufs[1:])
    np.testing.assert_allclose(d.numpy(), (na * nb).sum(axis=0) + 1, rtol=1e-5, atol=1e-6)


def test_shared_intermediate_realized_once() -> None:
    a, na = rand(3, 4)
    m = (a * 2).contiguous()
    x, y = m + 1, m * 3
    assert kernels(x, y) == 3  # m once, then each consumer
    assert launched(lambda: x.realize(y)) == 3
    np.testing.assert_allclose(x.numpy(), na * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(y.numpy(), na * 6, rtol=1e-6)


def test_empty_results_launch_nothing() -> None:
    a = Tensor.zeros(0, 3) + 1
    assert launched(a.realize) == 0 and a.numpy().shape == (0, 3)
    s = Tensor(np.zeros((0, 3), np.float32)).sum(axis=0)  # an empty source, a non-empty result
    np.testing.assert_array_equal(s.numpy(), [0, 0, 0])


def test_debug2_reports_the_kernel_count(capfd: pytest.CaptureFixture[str]) -> None:
    (a, _), (b, _) = rand(N, N, seed=3), rand(N, N, seed=4)
    c = (a.reshape(N, 1, N) * b.T.reshape(1, N, N)).sum(axis=2)
    capfd.readouterr()
    with Context(DEBUG=2):
        c.realize()
    err = capfd.readouterr().err
    assert "scheduled 1 kernel," in err, err


def test_debug4_prints_the_kernel_source() -> None:
    pytest.importorskip("tinygrad.renderer.cstyle")
    from tinygrad.renderer.cstyle import CStyleRenderer

    if not isinstance(getattr(Device[Device.DEFAULT], "renderer", None), CStyleRenderer):
        pytest.skip(f"{Device.DEFAULT} does not render C-style source")
    # a fresh process: kernels compiled earlier in this one are cached and would print nothing
    script = textwrap.dedent(f"""
        from tinygrad import Tensor
        N = {N}
        a, b = Tensor.rand(N, N), Tensor.rand(N, N)
        (a.reshape(N, 1, N) * b.T.reshape(1, N, N)).sum(axis=2).realize()
    """)
    env = {**os.environ, "DEBUG": "4", "DEV": Device.DEFAULT}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "scheduled 1 kernel" in proc.stderr
    assert "for (" in proc.stderr, proc.stderr


@pytest.mark.skipif(bool(os.environ.get("TG_EXPECT_DEVICE")), reason="opens a second device")
def test_a_constant_graph_realized_on_one_device_is_not_read_on_another() -> None:
    # equal constant graphs are one node on every device; the buffer it was realized into belongs to that device
    # alone, so a graph on another device computes the constants again instead of reading it
    other = next((d for d in ("PYREF", "CPU") if d != Device.DEFAULT and d in Device.backends and
                  Device.availability(d) is None), None)
    if other is None:
        pytest.skip(f"no second device besides {Device.DEFAULT}")
    Tensor.full((3,), 2.0, device=other).exp().realize()
    got = (Tensor.full((3,), 2.0).exp() + Tensor([1.0, 2.0, 3.0])).numpy()
    np.testing.assert_allclose(got, np.exp(2.0) + np.array([1, 2, 3]), rtol=1e-6)
