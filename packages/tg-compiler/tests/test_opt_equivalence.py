"""Optimised kernels compute what unoptimised ones do, on every device that runs here (CPU, CL).

Two levels: hand-built kernel ASTs run with explicit opt lists (each opt, and combinations), and whole
Tensor programs run with the heuristics against NOOPT=1 and numpy."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from opt_helpers import device_or_skip, elementwise_ast, matmul_ast, reduce_ast, run_ast
from tinygrad.codegen.opt import Opt, OptOps
from tinygrad.helpers import Context
from tinygrad.uop.ops import Ops

DEVICES = ["CPU", "CL"]
U, R, L, G, S, T = OptOps.UPCAST, OptOps.UNROLL, OptOps.LOCAL, OptOps.GROUP, OptOps.SWAP, OptOps.TILE
rng = np.random.default_rng(0)


def _inputs(*sizes: int) -> dict[int, np.ndarray]:
    return {i + 1: rng.standard_normal(s).astype(np.float32) for i, s in enumerate(sizes)}


MATMUL_OPTS = [(), (Opt(U, 1, 4),), (Opt(U, 0, 3), Opt(U, 1, 2)), (Opt(R, 2, 5),), (Opt(S, 0, 1), Opt(U, 0, 3)),
               (Opt(U, 1, 4), Opt(U, 0, 3), Opt(R, 2, 5)),
               # the CPU heuristics' cache blocking: register tile, then TILE the column tiles and SWAP them outermost
               (Opt(U, 1, 2), Opt(U, 0, 3), Opt(T, 1, 3), Opt(S, 0, 1)), (Opt(T, 0, 2), Opt(R, 3, 2))]
GPU_MATMUL_OPTS = [(Opt(L, 0, 4),), (Opt(L, 1, 7), Opt(L, 0, 2)), (Opt(U, 1, 4), Opt(L, 0, 4), Opt(L, 1, 3)),
                   (Opt(L, 1, 5),)]  # 5 does not divide 12: a guarded partial work-group


@pytest.mark.parametrize("dev_name", DEVICES)
@pytest.mark.parametrize("opts", MATMUL_OPTS + GPU_MATMUL_OPTS, ids=lambda o: "-".join(map(str, o)) or "none")
def test_matmul_with_explicit_opts(dev_name: str, opts: tuple[Opt, ...]) -> None:
    dev = device_or_skip(dev_name)
    if any(o.op is L for o in opts) and not dev.renderer.has_local:
        pytest.skip(f"{dev_name} has no work-groups")
    if any(o.op is T for o in opts) and dev.renderer.has_local:
        pytest.skip(f"{dev_name} runs global axes as work-items: TILE is for loop targets")
    m, k, n = 6, 10, 12
    x = _inputs(m * k, k * n)
    out, _ = run_ast(dev, matmul_ast(m, k, n), x, m * n, opts)
    np.testing.assert_allclose(out.reshape(m, n), x[1].reshape(m, k) @ x[2].reshape(k, n), rtol=1e-5, atol=1e-5)


REDUCE_CASES = [(1, 1, ()), (3, 3, ()), (2, 1000, (Opt(R, 1, 8),)), (4, 100, (Opt(U, 0, 2), Opt(R, 1, 4)))]
GROUP_CASES = [(1, 1000003, (Opt(G, 0, 256),)), (3, 4097, (Opt(G, 1, 64),)), (2, 16, (Opt(G, 1, 16),)),
               (8, 333, (Opt(L, 0, 4), Opt(G, 1, 32))), (1, 3, (Opt(G, 0, 16),))]


@pytest.mark.parametrize("dev_name", DEVICES)
@pytest.mark.parametrize("op", [Ops.ADD, Ops.MAX])
@pytest.mark.parametrize("rows, cols, opts", REDUCE_CASES + GROUP_CASES,
                         ids=lambda v: "-".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_reductions_of_odd_sizes(dev_name: str, op: Ops, rows: int, cols: int, opts: tuple[Opt, ...]) -> None:
    dev = device_or_skip(dev_name)
    if any(o.op in (L, G) for o in opts) and not dev.renderer.local_mem_max:
        pytest.skip(f"{dev_name} has no local memory")
    x = _inputs(rows * cols)
    out, spec = run_ast(dev, reduce_ast(rows, cols, op), x, rows, opts)
    ref = x[1].reshape(rows, cols).astype(np.float64)
    want = ref.sum(1) if op is Ops.ADD else ref.max(1)
    np.testing.assert_allclose(out, want, rtol=2e-4, atol=2e-3)
    assert spec.applied_opts == tuple(str(o) for o in opts)


@pytest.mark.parametrize("dev_name", DEVICES)
@pytest.mark.parametrize("opts", [(), (Opt(U, 2, 4),), (Opt(U, 0, 3), Opt(U, 1, 2)), (Opt(S, 0, 2),),
                                  (Opt(L, 2, 16), Opt(L, 1, 4)), (Opt(L, 0, 2),)],
                         ids=lambda o: "-".join(map(str, o)) or "none")
def test_broadcast_elementwise_with_explicit_opts(dev_name: str, opts: tuple[Opt, ...]) -> None:
    dev = device_or_skip(dev_name)
    if any(o.op is L for o in opts) and not dev.renderer.has_local:
        pytest.skip(f"{dev_name} has no work-groups")
    shape = (3, 5, 8)
    x = _inputs(120, 8)
    out, _ = run_ast(dev, elementwise_ast(shape), x, 120, opts)
    np.testing.assert_allclose(out.reshape(shape), x[1].reshape(shape) * x[2] + 1, rtol=1e-5, atol=1e-6)


# ---- whole programs: the heuristics against NOOPT=1 and numpy ----

def _programs() -> dict[str, tuple[Callable, Callable, list[tuple[int, ...]]]]:
    def conv(t: object, w: object) -> object:
        return t.conv2d(w, padding=1)  # type: ignore[attr-defined]

    def conv_ref(a: np.ndarray, w: np.ndarray) -> np.ndarray:
        # numpy reference (torch is not installed on every Python the tests run on)
        padded = np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)))
        windows = np.lib.stride_tricks.sliding_window_view(padded, w.shape[2:], axis=(2, 3))
        return np.einsum("nchwij,ocij->nohw", windows, w)

    return {
        "elementwise": (lambda a, b: a * b + 2, lambda a, b: a * b + 2, [(33, 17), (33, 17)]),
        "broadcast": (lambda a, b: a + b, lambda a, b: a + b, [(7, 1, 9), (1, 5, 9)]),
        "sum_1": (lambda a: a.sum(), lambda a: a.sum(), [(1,)]),
        "sum_3": (lambda a: a.sum(), lambda a: a.sum(), [(3,)]),
        "sum_1000003": (lambda a: a.sum(), lambda a: a.astype(np.float64).sum(), [(1000003,)]),
        "sum_65536": (lambda a: a.sum(), lambda a: a.astype(np.float64).sum(), [(65536,)]),
        "max_rows": (lambda a: a.max(1), lambda a: a.max(1), [(5, 4096)]),
        "mean_cols": (lambda a: a.mean(0), lambda a: a.mean(0), [(1000, 24)]),
        "matmul_odd": (lambda a, b: a @ b, lambda a, b: a @ b, [(67, 45), (45, 129)]),
        "matmul_64": (lambda a, b: a @ b, lambda a, b: a @ b, [(64, 96), (96, 128)]),
        "matmul_vec": (lambda a, b: a @ b, lambda a, b: a @ b, [(1, 512), (512, 48)]),
        "matmul_T": (lambda a, b: a.T @ b, lambda a, b: a.T @ b, [(40, 64), (40, 32)]),
        "conv2d": (conv, conv_ref, [(2, 3, 17, 19), (8, 3, 3, 3)]),
        "conv2d_wide": (conv, conv_ref, [(1, 16, 8, 32), (32, 16, 3, 3)]),
    }


PROGRAMS = _programs()


@pytest.mark.parametrize("dev_name", DEVICES)
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_optimised_programs_match_noopt_and_numpy(dev_name: str, name: str) -> None:
    from tinygrad import Tensor

    dev = device_or_skip(dev_name)
    fn, ref, shapes = PROGRAMS[name]
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]

    def run() -> np.ndarray:
        dev._runners.clear()  # the runner cache is keyed by AST only: compile again under this setting
        return fn(*[Tensor(a, device=dev_name) for a in arrays]).numpy()

    optimised = run()
    with Context(NOOPT=1):
        plain = run()
    dev._runners.clear()
    # float32 sums in another order differ by rounding that grows like sqrt(terms): scale the tolerance with it
    atol = 1e-3 * max(1.0, np.sqrt(max(a.size for a in arrays)) / 16)
    np.testing.assert_allclose(optimised, ref(*arrays), rtol=1e-4, atol=atol)
    np.testing.assert_allclose(optimised, plain, rtol=1e-4, atol=atol)


@pytest.mark.parametrize("dev_name", DEVICES)
def test_symbolic_shapes_run_unoptimised_and_right(dev_name: str) -> None:
    from tinygrad import Tensor, Variable

    device_or_skip(dev_name)
    x_np = rng.standard_normal((64, 48)).astype(np.float32)
    n = Variable("opt_n", 1, 64)
    for value in (5, 64):
        got = (Tensor(x_np, device=dev_name)[:n.bind(value)] * 2).sum(axis=1).numpy()
        np.testing.assert_allclose(got, (x_np[:value] * 2).sum(1), rtol=1e-5, atol=1e-5)
