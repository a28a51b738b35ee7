"""Kernels beyond one op: fused expressions, reductions, padding, deep chains, multi-output kernels; plus
crash safety, the compile cache across processes, and buffers.

Kernels are ASTs launched through `Device["CPU"].get_runner`, as in test_cpu_alu.py; expectations come from
numpy (stepwise, in the kernel's dtype) or from the reference ALU.
"""

from __future__ import annotations

import functools
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from tinygrad.device import Buffer, Device
from tinygrad.dtype import DType, dtypes, to_numpy, truncate
from tinygrad.uop.alu import exec_alu
from tinygrad.uop.ops import Ops, UOp

F16, F32 = dtypes.float16, dtypes.float32


def param(i: int, shape: tuple[int, ...], dtype: DType) -> UOp:
    return UOp(Ops.PARAM, dtype, (), (i, int(np.prod(shape)))).reshape(shape)


def launch(stores: list[tuple[UOp, UOp]], inputs: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """Run SINK(STORE(target, value)...). Targets are PARAMs (maybe reshaped); inputs maps param index -> data."""
    sink = UOp(Ops.SINK, dtypes.void, tuple(UOp(Ops.STORE, dtypes.void, (t, v)) for t, v in stores))
    params = {u.arg[0]: u for u in sink.toposort() if u.op is Ops.PARAM}
    bufs = []
    for i in range(max(params) + 1):
        if i not in params:  # indices the kernel does not use still take a slot in the buffer list
            bufs.append(Buffer("CPU", 1, dtypes.uint8))
            continue
        p = params[i]
        b = Buffer("CPU", p.arg[1], p.dtype)
        if i in inputs:
            b.copyin(memoryview(np.ascontiguousarray(inputs[i], dtype=to_numpy(p.dtype))).cast("B"))
        bufs.append(b)
    Device["CPU"].get_runner(sink)(bufs, {})
    outputs = {t.src[0].arg[0] if t.op is Ops.RESHAPE else t.arg[0] for t, _ in stores}
    return {i: bufs[i].numpy() for i in outputs}


# ---------------------------------------------------------------------------------------------------------------------
# fused expressions round like the ops they are made of

def test_float16_rounds_after_every_op_in_a_fused_expression() -> None:
    rng = np.random.default_rng(0)
    n = 512
    a, b, c = (rng.uniform(-8, 8, n).astype(np.float16) for _ in range(3))
    pa, pb, pc = (param(i, (n,), F16) for i in (1, 2, 3))
    exprs = [(pa * pb) + pc, UOp(Ops.SQRT, F16, (pa * pa,)) * pb, ((pa + pb) * pc) - pa]
    got = launch([(param(10 + k, (n,), F16), e) for k, e in enumerate(exprs)], {1: a, 2: b, 3: c})
    with np.errstate(all="ignore"):
        want = [(a * b) + c, np.sqrt(a * a) * b, ((a + b) * c) - a]  # numpy rounds each step to float16
    for k, w in enumerate(want):
        np.testing.assert_array_equal(got[10 + k].view(np.uint16), w.view(np.uint16), err_msg=f"expression {k}")


def test_bool_arithmetic_inlined_into_a_comparison() -> None:
    p = param(1, (4,), dtypes.bool)
    q = param(2, (4,), dtypes.bool)
    t = UOp.const(dtypes.bool, True)
    added = UOp(Ops.CMPEQ, dtypes.bool, (UOp(Ops.ADD, dtypes.bool, (p, q)), t))
    xs, ys = [False, False, True, True], [False, True, False, True]
    got = launch([(param(0, (4,), dtypes.bool), added)], {1: np.array(xs), 2: np.array(ys)})[0]
    want = [exec_alu(Ops.CMPEQ, dtypes.bool, (exec_alu(Ops.ADD, dtypes.bool, (x, y)), True))
            for x, y in zip(xs, ys, strict=True)]
    assert got.tolist() == want


def test_max_chain() -> None:
    n = 64
    a = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    pa = param(1, (n,), F32)
    v, w = pa, a
    for i in range(12):
        v = v.maximum(pa * float(i - 6))
        w = np.maximum(w, a * np.float32(i - 6))
    # MAX names its operands several times in C: inlined operands would make 3**12 copies (and gcc take forever)
    from tinygrad.codegen import get_program

    sink = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (param(0, (n,), F32), v)),))
    assert len(get_program(sink, Device["CPU"].renderer).src) < 20_000
    np.testing.assert_array_equal(launch([(param(0, (n,), F32), v)], {1: a})[0], w)


def test_deep_elementwise_chain() -> None:
    # multipliers are powers of two: the CPU compiles with -ffp-contract=fast, and a product that rounds could
    # be fused with the following add into one FMA (one rounding instead of two) - exact products cannot differ
    n = 16
    a = np.arange(n, dtype=np.float32) / 3
    v, w = param(1, (n,), F32), a.copy()
    for i in range(3000):
        c = float(i % 7) - 3.0
        v = v + c if i % 2 else v * UOp.const(F32, 2.0 ** (i % 3 - 1))
        w = w + np.float32(c) if i % 2 else w * np.float32(2.0 ** (i % 3 - 1))
    np.testing.assert_array_equal(launch([(param(0, (n,), F32), v)], {1: a})[0], w)


# ---------------------------------------------------------------------------------------------------------------------
# integer division, modulo and shifts by constants (a separate path in the renderer)

INT_DTYPES = [d for d in dtypes.all() if d.is_int]
CONST_OPS = [(Ops.IDIV, 7), (Ops.MOD, 7), (Ops.IDIV, -3), (Ops.MOD, -3), (Ops.IDIV, 0), (Ops.MOD, 0),
             (Ops.IDIV, -1), (Ops.MOD, -1), (Ops.SHL, 3), (Ops.SHR, 3), (Ops.SHR, 200), (Ops.MUL, -1)]


@functools.cache
def const_op_results() -> tuple[dict[tuple[DType, int], np.ndarray], dict[DType, list[int]]]:
    values = {d: sorted({truncate(v, d) for v in (0, 1, -1, 6, 7, -7, 8, 100, -100, d.min, d.max, d.min + 1)})
              for d in INT_DTYPES}
    n = max(len(v) for v in values.values())
    padded = {d: v + [v[0]] * (n - len(v)) for d, v in values.items()}
    stores, inputs = [], {}
    for j, d in enumerate(INT_DTYPES):
        inputs[100 + j] = np.array(padded[d], dtype=to_numpy(d))
        x = param(100 + j, (n,), d)
        for k, (op, c) in enumerate(CONST_OPS):
            stores.append((param(j * len(CONST_OPS) + k, (n,), d), UOp(op, d, (x, UOp.const(d, c)))))
    out = launch(stores, inputs)
    return {(d, k): out[j * len(CONST_OPS) + k] for j, d in enumerate(INT_DTYPES)
            for k in range(len(CONST_OPS))}, values


@pytest.mark.parametrize("d", INT_DTYPES, ids=lambda d: d.name)
def test_int_ops_by_constants(d: DType) -> None:
    results, values = const_op_results()
    vals = values[d]
    for k, (op, c) in enumerate(CONST_OPS):
        got = results[(d, k)][:len(vals)].tolist()
        want = [exec_alu(op, d, (v, truncate(c, d)), d) for v in vals]
        assert got == want, f"{op.name} by {c} on {d}: {vals}"


def test_integer_traps_do_not_crash_the_process(tmp_path: Path) -> None:
    # x86 raises SIGFPE for x/0 and INT_MIN/-1; shifts by 64 are undefined in C. Run in a child process so a
    # crash is reported as a failure instead of killing the test worker.
    script = textwrap.dedent("""
        import numpy as np
        from tinygrad.device import Buffer, Device
        from tinygrad.dtype import dtypes
        from tinygrad.uop.ops import Ops, UOp
        for d, np_d in ((dtypes.int32, np.int32), (dtypes.int64, np.int64)):
            lo = -(2 ** (d.bits - 1))
            a = np.array([7, lo, lo, 5, -5, 1], dtype=np_d)
            b = np.array([0, -1, 0, 64, 64, 63], dtype=np_d)
            x, y = UOp(Ops.PARAM, d, (), (4, 6)), UOp(Ops.PARAM, d, (), (5, 6))
            ops = (Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR)
            sink = UOp(Ops.SINK, dtypes.void, tuple(UOp(Ops.STORE, dtypes.void, (UOp(Ops.PARAM, d, (), (i, 6)),
                       UOp(op, d, (x, y)))) for i, op in enumerate(ops)))
            bufs = [Buffer("CPU", 6, d) for _ in range(4)]
            bufs += [Buffer("CPU", 6, d).copyin(memoryview(v).cast("B")) for v in (a, b)]
            Device["CPU"].get_runner(sink)(bufs, {})
            print([b.numpy().tolist() for b in bufs[:4]])
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"the kernel crashed (exit {proc.returncode}):\n{proc.stderr}"
    lines = proc.stdout.strip().splitlines()
    for line, d in zip(lines, (dtypes.int32, dtypes.int64), strict=True):
        lo = d.min
        a, b = [7, lo, lo, 5, -5, 1], [0, -1, 0, 64, 64, 63]
        want = [[exec_alu(op, d, (x, y), d) for x, y in zip(a, b, strict=True)]
                for op in (Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR)]
        assert eval(line) == want


# ---------------------------------------------------------------------------------------------------------------------
# reductions, padding, several outputs

@pytest.mark.parametrize("d", [dtypes.float32, dtypes.int32, dtypes.uint8, dtypes.bool, dtypes.bfloat16],
                         ids=lambda d: d.name)
def test_reductions(d: DType) -> None:
    if d.is_bool:
        data = [[False, False, False, False], [False, True, False, False], [True, True, True, True]]
    elif d.is_float:
        data = [[1.5, -2.0, math.inf, 0.25], [math.nan, 1.0, 2.0, 3.0], [-0.0, -0.0, -1e30, 7.0]]
    else:
        data = [[1, -2, 3, 4], [d.max, d.max, 1, 2], [d.min, -1, 100, 5]]
    data = [[truncate(v, d) for v in row] for row in data]
    x = param(1, (3, 4), d)
    ops = [Ops.ADD, Ops.MAX, Ops.MUL] if not d.is_bool else [Ops.MAX]
    flat = np.array([v for row in data for v in row], dtype=np.float32 if d == dtypes.bfloat16 else to_numpy(d))
    src = flat.view(np.uint32).__rshift__(16).astype(np.uint16) if d == dtypes.bfloat16 else flat
    got = launch([(param(i + 10, (3, 1), d), x.reduce_axis(op, (1,))) for i, op in enumerate(ops)], {1: src})
    for i, op in enumerate(ops):
        identity = {Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: d.min}[op]
        want = [functools.reduce(lambda acc, v: exec_alu(op, d, (acc, v), d), row, truncate(identity, d))
                for row in data]
        out = got[i + 10]
        if d == dtypes.bfloat16:
            out = (out.astype(np.uint32) << 16).view(np.float32)
        for g, w in zip(out.tolist(), want, strict=True):
            assert (math.isnan(g) and math.isnan(w)) if isinstance(w, float) and math.isnan(w) else g == w, (op, g, w)


@pytest.mark.parametrize("d", [dtypes.float32, dtypes.float16, dtypes.int8, dtypes.bool, dtypes.bfloat16],
                         ids=lambda d: d.name)
def test_transposes_tiled_in_blocks(d: DType) -> None:
    # big enough for the heuristics' 4x4 blocks (a channels-last copy, a matrix), and sides that are not multiples
    # of 4 (which stay untiled); every element is a distinct bit pattern of d
    from tinygrad import Tensor
    rng = np.random.default_rng(1)
    for shape, perm in [((64, 16, 12, 20), (0, 2, 3, 1)), ((516, 260), (1, 0)), ((33, 16, 10, 10), (0, 2, 3, 1))]:
        bits = rng.integers(0, 1 << (8 * d.itemsize), shape, dtype=np.uint64)
        if d == dtypes.bool:
            x = Tensor(bits % 2 == 1, device="CPU")
        elif d == dtypes.bfloat16:
            x = Tensor((bits % 255).astype(np.float32), device="CPU").cast(d)
        else:
            x = Tensor(bits.astype(np.dtype(f"u{d.itemsize}")).view(to_numpy(d)), device="CPU")
        want = x.numpy().transpose(perm) if d != dtypes.bfloat16 else x.float().numpy().transpose(perm)
        got = x.permute(perm).contiguous()
        got_np = got.numpy() if d != dtypes.bfloat16 else got.float().numpy()
        assert got_np.tobytes() == np.ascontiguousarray(want).tobytes(), (shape, perm)


def test_the_partial_sums_of_a_split_reduction() -> None:
    # a BatchNorm's statistics over a batch big enough to split into partial sums, which run side by side
    from tinygrad import Tensor
    x = np.random.default_rng(2).standard_normal((128, 32, 20, 20)).astype(np.float32)
    got = Tensor(x, device="CPU").sum((0, 2, 3)).numpy()
    np.testing.assert_allclose(got, x.astype(np.float64).sum((0, 2, 3)), rtol=1e-4, atol=1e-3)
    # huge through an expand: 2^31 elements of one row, summed per channel
    row = Tensor(np.arange(32, dtype=np.float32).reshape(1, 32, 1, 1), device="CPU")
    big = row.expand(4096, 32, 128, 128).sum((0, 2, 3)).numpy()
    np.testing.assert_allclose(big, np.arange(32) * 4096 * 128 * 128, rtol=1e-5)


def test_pools_over_a_batch_computed_side_by_side() -> None:
    # a batch big enough for 8 images side by side (the heuristics' small-window rule), odd sizes, and the backward
    from tinygrad import Tensor
    rng = np.random.default_rng(4)
    x = rng.standard_normal((48, 3, 10, 14)).astype(np.float32)
    t = Tensor(x, device="CPU", requires_grad=True)
    out = t.max_pool2d(2)
    want = x.reshape(48, 3, 5, 2, 7, 2).max((3, 5))
    np.testing.assert_array_equal(out.numpy(), want)
    out.sum().backward()
    assert t.grad is not None
    mask = x == np.repeat(np.repeat(want, 2, axis=2), 2, axis=3)  # distinct values: one maximum per window
    np.testing.assert_array_equal(t.grad.numpy(), mask.astype(np.float32))
    avg = Tensor(x, device="CPU").avg_pool2d((3, 3), stride=1).numpy()
    ref = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3)).mean((-1, -2))
    np.testing.assert_allclose(avg, ref, rtol=1e-5, atol=1e-6)


def test_padding_reads_only_inside_the_buffer() -> None:
    a = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    x = param(1, (2, 3), F32)
    value = x.pad(((2, 1), (3, 2))).flip((True, False)) + 1.0
    got = launch([(param(0, (5, 8), F32), value)], {1: a})[0]
    np.testing.assert_array_equal(got.reshape(5, 8), np.pad(a, ((2, 1), (3, 2)))[::-1] + 1)


def test_outputs_of_different_shapes_in_one_kernel() -> None:
    a = np.array([5.0], dtype=np.float32)
    first = param(2, (1,), F32).expand((6,)) * 2.0  # loop-invariant, used by both loop nests
    got = launch([(param(0, (6,), F32), first), (param(1, (2, 3), F32), first.reshape((2, 3)) + 1.0)], {2: a})
    np.testing.assert_array_equal(got[0], np.full(6, 10.0, dtype=np.float32))
    np.testing.assert_array_equal(got[1], np.full(6, 11.0, dtype=np.float32))


# ---------------------------------------------------------------------------------------------------------------------
# runners and the compile cache

def add_kernel(c: float) -> UOp:
    x = param(1, (8,), F32)
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (param(0, (8,), F32), x + c)),))


def test_equal_asts_share_a_runner() -> None:
    dev = Device["CPU"]
    assert dev.get_runner(add_kernel(0.125)) is dev.get_runner(add_kernel(0.125))


def test_a_new_device_reuses_the_disk_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tg_backend_cpu.compiler import CCompiler
    from tg_backend_cpu.device import CPUDevice

    monkeypatch.setenv("TINYGRAD_CACHE_DIR", str(tmp_path / "cache"))
    CPUDevice().get_runner(add_kernel(0.375))  # compiles and stores

    def no_compiling(self: CCompiler, src: str) -> bytes:
        raise AssertionError("compiled again although the cache holds this kernel")

    monkeypatch.setattr(CCompiler, "compile", no_compiling)
    runner = CPUDevice().get_runner(add_kernel(0.375))
    out, inp = Buffer("CPU", 8, F32), Buffer("CPU", 8, F32).copyin(memoryview(np.ones(8, np.float32)).cast("B"))
    runner([out, inp], {})
    np.testing.assert_array_equal(out.numpy(), np.full(8, 1.375, dtype=np.float32))


def test_two_processes_compile_one_kernel_into_one_cache(tmp_path: Path) -> None:
    script = textwrap.dedent("""
        import sys, time
        from pathlib import Path
        import numpy as np
        from tinygrad.device import Buffer, Device
        from tinygrad.dtype import dtypes
        from tinygrad.uop.ops import Ops, UOp
        go = Path(sys.argv[1])
        while not go.exists():
            time.sleep(0.005)
        x = UOp(Ops.PARAM, dtypes.float32, (), (1, 4))
        sink = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (UOp(Ops.PARAM, dtypes.float32, (), (0, 4)),
                                                                         x * 3.0 + 0.5)),))
        out, inp = Buffer("CPU", 4, dtypes.float32), Buffer("CPU", 4, dtypes.float32)
        inp.copyin(memoryview(np.arange(4, dtype=np.float32)).cast("B"))
        Device["CPU"].get_runner(sink)([out, inp], {})
        print(out.numpy().tolist())
    """)
    env = os.environ | {"TINYGRAD_CACHE_DIR": str(tmp_path / "cache")}
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", script, str(go)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    go.touch()
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert eval(out) == [0.5, 3.5, 6.5, 9.5]
    entries = [p for p in (tmp_path / "cache" / "compile").iterdir()]
    assert len(entries) == 1 and not entries[0].name.startswith(".tmp")


@pytest.mark.parametrize("d", dtypes.all(), ids=lambda d: d.name)
def test_buffer_round_trip(d: DType) -> None:
    data = np.arange(37).astype(to_numpy(d))
    buf = Buffer("CPU", 37, d).copyin(memoryview(data).cast("B"))
    np.testing.assert_array_equal(buf.numpy(), data)
    with pytest.raises(ValueError, match="bytes"):
        buf.copyin(memoryview(np.zeros(3, dtype=np.uint8)))
