"""TinyJit against eager execution on random programs: elementwise ops, reductions, slices, cat and assigns, over
arguments that nest tensors in lists and dicts, change a number, feed an output back and read closures that are
assigned or rebound between calls. Six calls each; every jitted call gives the eager value or raises JitError, never
another value. Runs on Device.DEFAULT (the backend sessions run it on OpenCL and WebGPU too)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tinygrad import Tensor, TinyJit
from tinygrad.engine.jit import JitError

N = 256  # more than a vector register holds: a kernel reading what it writes gets it wrong
OPS = ["add_list", "mul_scale", "sum", "rotate", "flip", "closure", "state", "dict"]
CALLS = 6


class World:
    """One run of a program: its closure tensor and its state, eager or jitted."""

    def __init__(self, ops: list[str], jit: bool) -> None:
        self.w = Tensor(np.arange(N, dtype=np.float32)).realize()
        self.state = Tensor.zeros(N).contiguous().realize()
        self.fn = TinyJit(self.body) if jit else self.body
        self.ops = ops

    def body(self, x: Tensor, ys: list[Tensor], d: dict[str, Tensor], scale: int) -> Tensor:
        v = x
        for i, op in enumerate(self.ops):
            if op == "add_list":
                v = v + ys[i % len(ys)]
            elif op == "mul_scale":
                v = v * scale
            elif op == "sum":
                v = v - v.sum(keepdim=True).expand(N) / N
            elif op == "rotate":  # by 1 to N-1: each output element comes from another position
                k = i % (N - 1) + 1
                v = v[k:].cat(v[:k])
            elif op == "flip":
                v = v.flip(0)
            elif op == "closure":
                v = v + self.w
            elif op == "state":
                self.state.assign(self.state + v)
                v = v + self.state
            elif op == "dict":
                v = v * d["k"]
        return v.contiguous()


@st.composite
def programs(draw: Any) -> tuple[list[str], list[dict[str, Any]]]:
    ops = draw(st.lists(st.sampled_from(OPS), min_size=1, max_size=5))
    calls = [dict(feed_back=draw(st.booleans()), scale=draw(st.sampled_from([1, 2, 3])),
                  n_list=draw(st.sampled_from([1, 2])), assign_w=draw(st.booleans()),
                  rebind_w=draw(st.integers(0, 9)) == 0, seed=draw(st.integers(0, 5))) for _ in range(CALLS)]
    return ops, calls


def _arguments(call: dict[str, Any], previous: Tensor | None) -> tuple:
    rng = np.random.default_rng(call["seed"])

    def small() -> Tensor:
        return Tensor(rng.integers(-3, 4, N).astype(np.float32))

    x = previous if call["feed_back"] and previous is not None else small()
    return x, [small() for _ in range(call["n_list"])], {"k": small()}, call["scale"]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_jitted_program_equals_eager_or_raises(program: tuple[list[str], list[dict[str, Any]]]) -> None:
    ops, calls = program
    eager, jitted = World(ops, jit=False), World(ops, jit=True)
    prev_e: Tensor | None = None
    prev_j: Tensor | None = None
    for call in calls:
        for world in (eager, jitted):
            if call["assign_w"]:
                world.w.assign(world.w + 1)
            if call["rebind_w"]:
                world.w = (world.w * 2).realize()
        want = eager.fn(*_arguments(call, prev_e)).numpy()
        try:
            got_t = jitted.fn(*_arguments(call, prev_j))
            got = got_t.numpy()
        except JitError:
            return  # loud is allowed; the jitted world cannot go on from here
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4, err_msg=str((ops, call)))
        np.testing.assert_allclose(jitted.state.numpy(), eager.state.numpy(), rtol=1e-5, atol=1e-4)
        prev_e = Tensor(want).realize()
        prev_j = got_t
