"""Multi-threaded launches: a kernel's outermost output loop split across the thread pool.

Results must not depend on the thread count: every comparison between 1 and N threads is bit for bit. The
threshold that keeps small kernels on one thread is lowered to 1 (`split_everything`) wherever a test needs
small kernels to split. Kernels come from the Tensor API on `Device["CPU"]` (its thread count switched with
`set_threads`) or are built as kernel ASTs and run on private `CPUDevice`s, as in test_cpu_kernels.py.
"""

from __future__ import annotations

import concurrent.futures
import math
import threading
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from tg_backend_cpu import program as program_module
from tg_backend_cpu.device import CPUDevice
from tg_backend_cpu.program import CPUProgram
from tg_backend_cpu.renderer import CPURenderer
from tinygrad import Device, Tensor, Variable
from tinygrad.codegen import ProgramSpec, get_program
from tinygrad.device import Buffer
from tinygrad.dtype import DType, dtypes, to_numpy
from tinygrad.uop.ops import Ops, UOp

F32 = dtypes.float32


@pytest.fixture
def cpu() -> Iterator[CPUDevice]:
    """Device["CPU"], with its thread count put back afterwards."""
    dev = Device["CPU"]
    assert isinstance(dev, CPUDevice)
    before = dev.threads
    yield dev
    dev.set_threads(before)


def param(i: int, shape: tuple[int, ...], dtype: DType = F32) -> UOp:
    return UOp(Ops.PARAM, dtype, (), (i, math.prod(shape))).reshape(shape)


def run_ast(dev: CPUDevice, stores: list[tuple[UOp, UOp]], inputs: dict[int, np.ndarray],
            var_vals: dict[str, int] | None = None) -> tuple[dict[int, np.ndarray], CPUProgram]:
    """Run SINK(STORE(target, value)...) on `dev`; returns the outputs by param index and the program."""
    sink = UOp(Ops.SINK, dtypes.void, tuple(UOp(Ops.STORE, dtypes.void, (t, v)) for t, v in stores))
    params = {u.arg[0]: u for u in sink.toposort() if u.op is Ops.PARAM}
    bufs = []
    for i in sorted(params):
        p = params[i]
        size = p.arg[1] if isinstance(p.arg[1], int) else int(p.arg[1].vmax)  # a symbolic size: its largest
        b = Buffer("CPU", size, p.dtype)
        if i in inputs:
            b.copyin(memoryview(np.ascontiguousarray(inputs[i], dtype=to_numpy(p.dtype))).cast("B"))
        else:  # outputs start as NaN: an element no thread writes shows up
            b.copyin(memoryview(np.full(size, np.nan, dtype=to_numpy(p.dtype))).cast("B"))
        bufs.append(b)
    runner = dev.get_runner(sink)
    runner(bufs, var_vals or {})
    outputs = {t.src[0].arg[0] if t.op is Ops.RESHAPE else t.arg[0] for t, _ in stores}
    program = runner.program
    assert isinstance(program, CPUProgram)
    return {i: bufs[sorted(params).index(i)].numpy() for i in outputs}, program


def same_bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8))


# ---------------------------------------------------------------------------------------------------------------------
# the same results on 1 and N threads, through the Tensor API

def compute_on(dev: CPUDevice, threads: int, fn: Callable[[], Tensor]) -> np.ndarray:
    dev.set_threads(threads)
    return fn().numpy()


RNG = np.random.default_rng(0)
A = RNG.standard_normal((67, 45)).astype(np.float32)
B = RNG.standard_normal((45, 38)).astype(np.float32)
V = RNG.standard_normal(4099).astype(np.float32)

TENSOR_CASES: dict[str, tuple[Callable[[], Tensor], Callable[[], np.ndarray], float]] = {
    "elementwise": (lambda: Tensor(V, device="CPU") * 2 + Tensor(V[::-1].copy(), device="CPU").exp(),
                    lambda: V * 2 + np.exp(V[::-1]), 1e-6),
    "row_sum": (lambda: (Tensor(A, device="CPU") * 3 + 1).sum(axis=1), lambda: (A * 3 + 1).sum(axis=1), 1e-5),
    "column_max": (lambda: Tensor(A, device="CPU").max(axis=0), lambda: A.max(axis=0), 0),
    "full_sum": (lambda: Tensor(A, device="CPU").sum(), lambda: np.array(A.sum()), 1e-4),
    "matmul": (lambda: Tensor(A, device="CPU") @ Tensor(B, device="CPU"), lambda: A @ B, 1e-4),
    "matmul_relu_t": (lambda: (Tensor(A, device="CPU") @ Tensor(B, device="CPU")).relu().T.contiguous() - 1,
                      lambda: np.maximum(A @ B, 0).T - 1, 1e-4),
    "fewer_rows_than_threads": (lambda: Tensor(A[:3], device="CPU") @ Tensor(B, device="CPU"),
                                lambda: A[:3] @ B, 1e-4),
    "one_element": (lambda: Tensor(V[:1], device="CPU") + 1, lambda: V[:1] + 1, 0),
    "int_arithmetic": (lambda: (Tensor(np.arange(1000, dtype=np.int32), device="CPU") * 7 // 3) % 11,
                       lambda: (np.arange(1000, dtype=np.int32) * 7 // 3) % 11, 0),
}


@pytest.mark.parametrize("case", list(TENSOR_CASES))
@pytest.mark.parametrize("threads", [2, 3, 8])
def test_tensor_results_do_not_depend_on_the_thread_count(case: str, threads: int, cpu: CPUDevice,
                                                          split_everything: None) -> None:
    fn, reference, tol = TENSOR_CASES[case]
    one = compute_on(cpu, 1, fn)
    many = compute_on(cpu, threads, fn)
    same_bits(one, many)
    np.testing.assert_allclose(many, reference(), rtol=tol, atol=tol)


def test_a_symbolic_outer_size_splits_by_its_value(cpu: CPUDevice, split_everything: None) -> None:
    x_np = RNG.standard_normal((16, 5)).astype(np.float32)
    n = Variable("rows", 1, 16)
    for value in (1, 2, 3, 9, 16):
        def fn(value: int = value) -> Tensor:
            return (Tensor(x_np, device="CPU")[:n.bind(value)] * 3 + 1).sum(axis=1)
        one = compute_on(cpu, 1, fn)
        many = compute_on(cpu, 4, fn)
        same_bits(one, many)
        np.testing.assert_allclose(many, (x_np[:value] * 3 + 1).sum(axis=1), rtol=1e-5)


def test_empty_tensors(cpu: CPUDevice, split_everything: None) -> None:
    cpu.set_threads(4)
    x = Tensor(np.zeros((0, 4), np.float32), device="CPU")
    assert (x * 2 + 1).numpy().shape == (0, 4)
    np.testing.assert_array_equal(x.sum(axis=0).numpy(), np.zeros(4, np.float32))


# ---------------------------------------------------------------------------------------------------------------------
# kernel ASTs on private devices: which kernels split, and into how many slices

@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 8, 100, 4097])
@pytest.mark.parametrize("threads", [2, 3, 8])
def test_elementwise_of_every_size(n: int, threads: int, split_everything: None) -> None:
    a, b = np.arange(n, dtype=np.float32) / 7, np.cos(np.arange(n, dtype=np.float32))
    stores = [(param(0, (n,)), param(1, (n,)) * 2.0 + param(2, (n,)))]
    one, _ = run_ast(CPUDevice(threads=1), stores, {1: a, 2: b})
    many, program = run_ast(CPUDevice(threads=threads), stores, {1: a, 2: b})
    assert program.outer_max == (n if n > 1 else 0)  # a size-1 dimension has no loop
    assert program.parts == max(1, min(threads, n))
    same_bits(one[0], many[0])
    np.testing.assert_array_equal(many[0], a * np.float32(2) + b)


def test_a_kernel_too_small_to_split_keeps_constant_loop_bounds() -> None:
    # below two threads' minimum work the kernel never runs split, so its loops are not sliced at all
    small = render([(param(0, (64,)), param(1, (64,)) + 1.0)])
    loops = [line.strip() for line in small.src.splitlines() if line.strip().startswith("for (")]
    assert loops and all("tg_" not in loop and "< 64;" in loop for loop in loops)
    assert f"const long long {small.name}_tg_outer = 0;" in small.src
    n = 2 * program_module.MIN_WORK_PER_THREAD
    big = render([(param(0, (n,)), param(1, (n,)) + 1.0)])
    assert f"const long long {big.name}_tg_outer = {n};" in big.src


def test_small_kernels_stay_on_one_thread_and_big_ones_split() -> None:
    dev = CPUDevice(threads=4)
    small = run_ast(dev, [(param(0, (64,)), param(1, (64,)) + 1.0)], {1: np.ones(64, np.float32)})[1]
    assert small.parts == 1
    n = 4 * program_module.MIN_WORK_PER_THREAD
    big = run_ast(dev, [(param(0, (n,)), param(1, (n,)) + 1.0)], {1: np.ones(n, np.float32)})[1]
    assert big.parts == 4
    # a reduction of a few rows still splits when the rows are long: the threshold is on work, not trip count
    rows, cols = 4, 2 * program_module.MIN_WORK_PER_THREAD
    tall = run_ast(dev, [(param(0, (rows, 1)), param(1, (rows, cols)).reduce_axis(Ops.ADD, (1,)))],
                   {1: np.ones((rows, cols), np.float32)})
    assert tall[1].parts == 4
    np.testing.assert_array_equal(tall[0][0], np.full(rows, cols, np.float32))


def test_a_program_gets_its_specs_estimate_however_its_runner_is_made(cpu: CPUDevice) -> None:
    # a reduction of a few long rows splits on its work, which only the ProgramSpec knows (the outer loop has 4
    # trips): a runner loaded from a pickle, which no get_runner call sees, splits like the one compiled here
    import pickle

    cpu.set_threads(4)
    rows, cols = 4, 2 * program_module.MIN_WORK_PER_THREAD + 4
    value = param(1, (rows, cols)).reduce_axis(Ops.ADD, (1,))
    sink = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (param(0, (rows, 1)), value)),))
    runner = cpu.get_runner(sink)
    loaded = pickle.loads(pickle.dumps(runner))
    assert isinstance(loaded.program, CPUProgram) and loaded.program is not runner.program
    assert runner.program.parts == loaded.program.parts == 4
    x = np.ones((rows, cols), np.float32)
    out, inp = Buffer("CPU", rows, F32).ensure_allocated(), Buffer("CPU", rows * cols, F32)
    inp.copyin(memoryview(x).cast("B"))
    loaded([out, inp], {})
    np.testing.assert_array_equal(out.numpy(), np.full(rows, cols, np.float32))


def test_a_reduction_to_one_value_runs_on_one_thread(split_everything: None) -> None:
    x = RNG.standard_normal((40, 30)).astype(np.float32)
    stores = [(param(0, (1, 1)), param(1, (40, 30)).reduce_axis(Ops.ADD, (0, 1)))]
    out, program = run_ast(CPUDevice(threads=4), stores, {1: x})
    assert program.outer_max == 0 and program.parts == 1
    np.testing.assert_allclose(out[0], [x.sum()], rtol=1e-5)


def test_matmul_rows_split_and_each_dot_product_stays_on_one_thread(split_everything: None) -> None:
    m, k, n = 37, 129, 23
    a, b = RNG.standard_normal((m, k)).astype(np.float32), RNG.standard_normal((k, n)).astype(np.float32)
    pa = param(1, (m, k)).reshape((m, 1, k)).expand((m, n, k))
    pb = param(2, (k, n)).permute((1, 0)).reshape((1, n, k)).expand((m, n, k))
    stores = [(param(0, (m, n, 1)), (pa * pb).reduce_axis(Ops.ADD, (2,)))]
    one, _ = run_ast(CPUDevice(threads=1), stores, {1: a, 2: b})
    for threads in (2, 5, 64):
        many, program = run_ast(CPUDevice(threads=threads), stores, {1: a, 2: b})
        assert program.parts > 1
        same_bits(one[0], many[0])
    np.testing.assert_allclose(one[0].reshape(m, n), a @ b, rtol=1e-4, atol=1e-4)


def test_loop_nests_of_different_shapes_split_together(split_everything: None) -> None:
    x = np.arange(12, dtype=np.float32)
    stores = [(param(0, (12,)), param(2, (12,)) * 2.0),
              (param(1, (3, 4)), param(2, (12,)).reshape((3, 4)) + 1.0)]
    one, _ = run_ast(CPUDevice(threads=1), stores, {2: x})
    many, program = run_ast(CPUDevice(threads=5), stores, {2: x})
    assert program.parts == 5  # the larger outer loop (12) decides; the loop of 3 gives some threads nothing
    for i in (0, 1):
        same_bits(one[i], many[i])
    np.testing.assert_array_equal(many[0], x * 2)
    np.testing.assert_array_equal(many[1], x + 1)


def test_a_store_outside_every_loop_keeps_the_kernel_on_one_thread(split_everything: None) -> None:
    x = RNG.standard_normal(50).astype(np.float32)
    stores = [(param(0, (1,)), param(2, (50,)).reduce_axis(Ops.MAX, (0,))), (param(1, (50,)), param(2, (50,)) * 3.0)]
    out, program = run_ast(CPUDevice(threads=4), stores, {2: x})
    assert program.parts == 1
    np.testing.assert_array_equal(out[0], [x.max()])
    np.testing.assert_array_equal(out[1], x * np.float32(3))


def test_symbolic_outer_bound_in_a_kernel_ast(split_everything: None) -> None:
    n = Variable("n", 0, 40)
    x = RNG.standard_normal((40, 6)).astype(np.float32)
    # the form the scheduler gives a symbolic output: a PARAM of symbolic size, viewed as (n,)
    value = param(1, (40, 6)).shrink(((0, n), (0, 6))).reduce_axis(Ops.MAX, (1,)).reshape((n,))
    stores = [(UOp(Ops.PARAM, F32, (), (0, n)).reshape((n,)), value)]
    dev1, dev3 = CPUDevice(threads=1), CPUDevice(threads=3)
    for v in (0, 1, 2, 3, 4, 17, 40):
        one, _ = run_ast(dev1, stores, {1: x}, {"n": v})
        many, program = run_ast(dev3, stores, {1: x}, {"n": v})
        assert program.outer_max == 40 and program.parts == 3
        same_bits(one[0], many[0])
        np.testing.assert_array_equal(many[0][:v], x[:v].max(axis=1))
        assert np.isnan(many[0][v:]).all(), "a thread wrote past the symbolic bound"


def test_set_threads_replans_compiled_kernels(split_everything: None) -> None:
    dev = CPUDevice(threads=1)
    stores = [(param(0, (10,)), param(1, (10,)) + 1.0)]
    _, program = run_ast(dev, stores, {1: np.zeros(10, np.float32)})
    assert program.parts == 1
    dev.set_threads(6)
    assert program.parts == 6
    out, _ = run_ast(dev, stores, {1: np.zeros(10, np.float32)})
    np.testing.assert_array_equal(out[0], np.ones(10, np.float32))
    with pytest.raises(ValueError, match="positive"):
        dev.set_threads(0)


def test_a_launch_with_the_wrong_arguments_is_refused_and_the_pool_goes_on(split_everything: None) -> None:
    dev = CPUDevice(threads=3)
    stores = [(param(0, (9,)), param(1, (9,)) - 1.0)]
    _, program = run_ast(dev, stores, {1: np.zeros(9, np.float32)})
    buf = Buffer("CPU", 9, F32).ensure_allocated().opaque
    with pytest.raises(TypeError, match="takes 2 arguments"):
        program(buf)
    with pytest.raises(TypeError, match="takes 2 arguments"):
        program(buf, buf, vals=(3,))
    out, _ = run_ast(dev, stores, {1: np.full(9, 5, np.float32)})
    np.testing.assert_array_equal(out[0], np.full(9, 4, np.float32))


# ---------------------------------------------------------------------------------------------------------------------
# the rendered source

def render(stores: list[tuple[UOp, UOp]], renderer: CPURenderer | None = None) -> ProgramSpec:
    sink = UOp(Ops.SINK, dtypes.void, tuple(UOp(Ops.STORE, dtypes.void, (t, v)) for t, v in stores))
    return get_program(sink, renderer or CPURenderer())


def test_only_the_outermost_loop_takes_a_slice(split_everything: None) -> None:
    pa = param(1, (37, 1, 29)).expand((37, 11, 29))
    pb = param(2, (11, 29)).reshape((1, 11, 29)).expand((37, 11, 29))
    spec = render([(param(0, (37, 11, 1)), (pa * pb).reduce_axis(Ops.ADD, (2,)))])
    loops = [line.strip() for line in spec.src.splitlines() if line.strip().startswith("for (")]
    assert len(loops) >= 2 and "tg_start" in loops[0] and all("tg_start" not in loop for loop in loops[1:])
    assert f"const long long {spec.name}_tg_outer = 37;" in spec.src
    assert f"const long long {spec.name}_tg_nargs = 3;" in spec.src


def test_the_sliced_loops_are_marked_before_one_pure_walk(split_everything: None) -> None:
    # the plan marks the RANGEs the threads slice before rendering; the walk reads the marks and keeps no state on
    # the renderer, so one renderer renders from several threads at once, each kernel the same every time
    pa = param(1, (37, 1, 29)).expand((37, 11, 29))
    pb = param(2, (11, 29)).reshape((1, 11, 29)).expand((37, 11, 29))
    sink = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (param(0, (37, 11, 1)),
                                                                     (pa * pb).reduce_axis(Ops.ADD, (2,)))),))
    programs: list[list[UOp]] = []

    class Recording(CPURenderer):
        def render(self, name: str, program: list[UOp]) -> str:
            programs.append(program)
            return super().render(name, program)

    renderer = Recording()
    spec = get_program(sink, renderer)
    (program,) = programs
    marks = renderer.plan(program)
    ranges = [u for u in program if u.op is Ops.RANGE]
    assert len(ranges) >= 2 and marks.sliced == {ranges[0]} and marks.split.outer_max == 37
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        sources = list(pool.map(lambda _: CPURenderer.render(renderer, spec.name, program), range(8)))
    assert set(sources) == {spec.src}
    assert not any(isinstance(v, threading.local) for v in vars(renderer).values())


def test_tinyjit_replays_multi_threaded_kernels(cpu: CPUDevice, split_everything: None) -> None:
    try:
        from tinygrad import TinyJit
    except ImportError:
        pytest.skip("this tinygrad has no TinyJit")
    cpu.set_threads(3)

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        return (x @ y).relu() + 1

    for i in range(5):
        a = (A * i).astype(np.float32)
        out = step(Tensor(a, device="CPU"), Tensor(B, device="CPU")).numpy()
        np.testing.assert_allclose(out, np.maximum(a @ B, 0) + 1, rtol=1e-4, atol=1e-4)

