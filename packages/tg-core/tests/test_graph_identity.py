"""One graph for every device: the Tensor layer builds the same UOp graph for a matmul and a convolution (and their
gradients) on CPU and on PYREF, the reference interpreter; the layouts that pay on a CPU (panel-packed matmul
operands, channels-last weights, bordered convolution inputs) are chosen when the graph is scheduled, by the
layout pass (engine/layout.py) from the target's knobs."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tinygrad import Device, Tensor
from tinygrad.engine.layout import lower_layouts
from tinygrad.uop.ops import Ops, UOp

SAMPLE_BACKEND = Path(__file__).resolve().parents[3] / "integration-tests" / "sample_backend" / "src"


@pytest.fixture(scope="module")
def devices() -> Iterator[tuple[str, str]]:
    """CPU and PYREF, registering the sample backend from the repository (for this module only) when it is not
    installed."""
    if "CPU" not in Device.backends or Device.availability("CPU") is not None:
        pytest.skip("the CPU backend (tg-backend-cpu) is not installed or cannot run here")
    if "PYREF" not in Device.backends:
        if not SAMPLE_BACKEND.is_dir():
            pytest.skip(f"PYREF is not installed and the sample backend is not at {SAMPLE_BACKEND}")
        sys.path.insert(0, str(SAMPLE_BACKEND))
        import tg_backend_pyref
        Device.register_plugin(tg_backend_pyref, package="tg-backend-pyref")
        yield "CPU", "PYREF"
        Device.unregister("PYREF")
        sys.path.remove(str(SAMPLE_BACKEND))
        return
    yield "CPU", "PYREF"


def normalised(roots: list[UOp]) -> list[tuple[Any, ...]]:
    """The graph under `roots` in a form that names no device: each node as (op, dtype, arg, source positions),
    buffers by their dtype and size and their place in the walk."""
    topo = list(UOp(Ops.SINK, src=tuple(roots)).toposort())
    place = {node: i for i, node in enumerate(topo)}
    out = []
    for node in topo:
        arg = ("buffer", node.arg.dtype, node.arg.size) if node.op is Ops.BUFFER else node.arg
        out.append((node.op, node.dtype, arg, tuple(place[s] for s in node.src)))
    return out


def matmul_graph(device: str) -> list[UOp]:
    # a right operand of 1 MiB read by 64 rows: panel-packed on a CPU
    a = Tensor.empty(64, 256, device=device, requires_grad=True)
    b = Tensor.empty(256, 1024, device=device, requires_grad=True)
    out = a @ b
    out.sum().backward()
    assert a.grad is not None and b.grad is not None
    return [out.uop, a.grad.uop, b.grad.uop]


def short_rows_conv_graph(device: str) -> list[UOp]:
    # 6-wide output rows, 32 output channels, a batch of 8: a channels-last weight on a CPU
    x = Tensor.empty(8, 16, 6, 6, device=device, requires_grad=True)
    w = Tensor.empty(32, 16, 3, 3, device=device, requires_grad=True)
    out = x.conv2d(w, padding=1)
    out.sum().backward()
    assert x.grad is not None and w.grad is not None
    return [out.uop, x.grad.uop, w.grad.uop]


def bordered_conv_graph(device: str) -> list[UOp]:
    # wide padded rows: a bordered copy of the input where the CPU compiler asks for one
    x = Tensor.empty(4, 8, 30, 30, device=device)
    w = Tensor.empty(16, 8, 3, 3, device=device)
    return [x.conv2d(w, padding=1).uop]


GRAPHS = {"matmul": matmul_graph, "short rows conv": short_rows_conv_graph, "bordered conv": bordered_conv_graph}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_the_tensor_graph_is_the_same_on_every_device(devices: tuple[str, str], name: str) -> None:
    build: Callable[[str], list[UOp]] = GRAPHS[name]
    cpu, pyref = (normalised(build(d)) for d in devices)
    assert cpu == pyref
    assert any(op is Ops.LAYOUT for op, *_ in cpu), "the graph marks no operand for the layout pass"


@pytest.mark.parametrize("name", ["matmul", "short rows conv"])
def test_the_layout_pass_copies_on_the_cpu(devices: tuple[str, str], name: str) -> None:
    """The hints are not empty: on the CPU the pass turns them into copies in another layout."""
    roots = GRAPHS[name]("CPU")
    lowered, _ = lower_layouts(roots, lambda sink: dict.fromkeys(sink.toposort(), "CPU"))
    nodes = UOp(Ops.SINK, src=tuple(lowered)).toposort()
    assert not any(n.op is Ops.LAYOUT for n in nodes)
    assert sum(n.op is Ops.CONTIGUOUS for n in nodes) > sum(n.op is Ops.CONTIGUOUS for n in
                                                            UOp(Ops.SINK, src=tuple(roots)).toposort())


def test_a_matmul_computes_the_same_on_both_devices(devices: tuple[str, str]) -> None:
    rng = np.random.default_rng(0)
    an, bn = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((8, 64)).astype(np.float32)
    got = [(Tensor(an, device=d) @ Tensor(bn, device=d)).numpy() for d in devices]
    np.testing.assert_allclose(got[0], an @ bn, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], an @ bn, rtol=1e-5, atol=1e-5)
