"""One WGSL renderer shared by threads: what the hooks know about a kernel (its bindings, the packed buffers it
writes, its unrolled loops, the helpers it calls) is that kernel's plan, not state on the renderer, so two kernels
rendered at once come out as each does alone. No device is needed: only the renderer runs."""

from __future__ import annotations

import pytest

pytest.importorskip("tg_backend_webgpu", reason="tg-backend-webgpu is not installed")

from tg_backend_webgpu.renderer import WGSLRenderer
from tinygrad.codegen import get_program
from tinygrad.conformance.render_threads import recorded_render, renders_on_threads
from tinygrad.dtype import DType, dtypes
from tinygrad.uop.ops import Ops, UOp


def _param(slot: int, d: DType, n: int) -> UOp:
    return UOp(Ops.PARAM, d, (), (slot, n)).reshape((n,))


def _kernel(*stores: tuple[UOp, UOp]) -> UOp:
    return UOp(Ops.SINK, dtypes.void, tuple(UOp(Ops.STORE, dtypes.void, s) for s in stores))


def _linear(ast: UOp, renderer: WGSLRenderer) -> tuple[str, list[UOp], str]:
    """(kernel name, the linearized program the renderer walks, its source) for `ast` compiled without opts."""
    return recorded_render(renderer, lambda: get_program(ast, renderer, opts=()).src)


def test_one_renderer_renders_two_kernels_on_two_threads_at_once() -> None:
    r = WGSLRenderer(max_loop_iterations=100, max_loop_iterations_reason="a test cap")
    # a sum of rows past the cap: its loop is unrolled; float data in buffers 0 and 1
    rows, n = 4, 350
    x = UOp(Ops.PARAM, dtypes.float32, (), (1, rows * n)).reshape((rows, n))
    sums = _kernel((_param(0, dtypes.float32, rows), x.reduce_axis(Ops.ADD, (1,)).reshape((rows,))))
    # int8 updated in place: packed words stored with atomics and loaded atomically, a division by a buffer's
    # values (a helper), buffers 0 and 3 bound as bindings 0 and 1
    m = 37
    out, y = _param(0, dtypes.int8, m), _param(3, dtypes.int8, m)
    divide = _kernel((out, UOp(Ops.IDIV, dtypes.int8, (out, y))))
    jobs = [_linear(sums, r), _linear(divide, r)]
    # what tells the two apart, so that a render that read the other kernel's facts would differ
    assert "ridx0_first" in jobs[0][2] and "atomicLoad" not in jobs[0][2] and "tg_idiv_i32" not in jobs[0][2]
    assert "atomicLoad" in jobs[1][2] and "fn tg_idiv_i32" in jobs[1][2] and "@binding(1)" in jobs[1][2]

    wrong = renders_on_threads(r, jobs)
    assert not wrong, wrong
