"""The LLVM path (the default; CPU_COMPILER=llvm): LLVM IR from LLVMRenderer, compiled in process by LLVMCompiler
(llvmlite), loaded from memory by llvm_loader. Kernels run on a CPUDevice of their own and are checked against numpy
or the reference ALU; the op tables and the conformance kit run on this path too (see the README)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from tg_backend_cpu.device import CPUDevice
from tinygrad.codegen import get_program
from tinygrad.device import Buffer
from tinygrad.dtype import DType, dtypes, to_numpy
from tinygrad.errors import CompileError
from tinygrad.uop.alu import exec_alu
from tinygrad.uop.ops import Ops, ParamArg, UOp

pytest.importorskip("llvmlite")

F32 = dtypes.float32


@pytest.fixture
def llvm_device(monkeypatch: pytest.MonkeyPatch) -> CPUDevice:
    monkeypatch.setenv("CPU_COMPILER", "llvm")
    return CPUDevice()


def param(slot: int, n: int, dtype: DType) -> UOp:
    return UOp(Ops.PARAM, dtype, (), ParamArg(slot, n))


def launch(dev: CPUDevice, stores: list[tuple[UOp, UOp]], inputs: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """Run SINK(STORE(target, value)...) on `dev`; inputs maps a PARAM slot to its data."""
    sink = UOp(Ops.SINK, dtypes.void, tuple(UOp(Ops.STORE, dtypes.void, (t, v)) for t, v in stores))
    params = {u.arg.slot: u for u in sink.toposort() if u.op is Ops.PARAM}
    bufs = []
    for slot in range(max(params) + 1):
        if slot not in params:  # a slot the kernel does not use still takes its place in the buffer list
            bufs.append(Buffer("CPU", 1, dtypes.uint8))
            continue
        p = params[slot]
        b = Buffer("CPU", p.arg.size, p.dtype)
        if slot in inputs:
            b.copyin(memoryview(np.ascontiguousarray(inputs[slot], dtype=to_numpy(p.dtype))).cast("B"))
        bufs.append(b)
    dev.get_runner(sink)(bufs, {})
    slots = [(t.src[0] if t.op is Ops.RESHAPE else t).arg.slot for t, _ in stores]
    return {slot: bufs[slot].numpy() for slot in slots}


def test_the_device_uses_the_llvm_path(llvm_device: CPUDevice) -> None:
    from tg_backend_cpu.llvm_compiler import LLVMCompiler
    from tg_backend_cpu.llvm_renderer import LLVMRenderer

    assert isinstance(llvm_device.renderer, LLVMRenderer) and isinstance(llvm_device.compiler, LLVMCompiler)


def test_math_and_fused_arithmetic_match_numpy(llvm_device: CPUDevice) -> None:
    n = 1000  # not a multiple of any vector width: the vectorised loops' remainders run too
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0.5, 4, n).astype(np.float32), rng.uniform(-2, 2, n).astype(np.float32)
    pa, pb = param(1, n, F32), param(2, n, F32)
    exprs = [UOp(Ops.SQRT, F32, (pa,)) * pb + 1.0, UOp(Ops.SIN, F32, (pb,)), UOp(Ops.EXP2, F32, (pb,)),
             UOp(Ops.LOG2, F32, (pa,)), pa.maximum(pb)]
    got = launch(llvm_device, [(param(10 + k, n, F32), e) for k, e in enumerate(exprs)], {1: a, 2: b})
    want = [np.sqrt(a) * b + 1, np.sin(b), np.exp2(b), np.log2(a), np.maximum(a, b)]
    for k, w in enumerate(want):
        np.testing.assert_allclose(got[10 + k], w, rtol=2e-6, atol=1e-6, err_msg=f"expression {k}")


@pytest.mark.parametrize("d", [dtypes.int8, dtypes.int32, dtypes.uint32, dtypes.int64])
def test_integer_division_and_shifts_follow_the_reference(llvm_device: CPUDevice, d: DType) -> None:
    # division by 0 and MIN / -1 are undefined in LLVM; shifts past the width are poison
    lo = d.min if not d.is_unsigned else 0
    xs = [lo, -7 if lo else 7, 0, 5, 13, d.max]
    ys = [0, 1, -1 if lo else 3, 2, 40, 3, d.bits]
    pairs = [(x, y) for x in xs for y in ys]
    a, b = np.array([x for x, _ in pairs], to_numpy(d)), np.array([y for _, y in pairs], to_numpy(d))
    n = len(pairs)
    pa, pb = param(1, n, d), param(2, n, d)
    ops = (Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR)
    got = launch(llvm_device, [(param(10 + k, n, d), UOp(op, d, (pa, pb))) for k, op in enumerate(ops)], {1: a, 2: b})
    for k, op in enumerate(ops):
        want = [exec_alu(op, d, (int(x), int(y))) for x, y in pairs]
        assert got[10 + k].tolist() == want, op


@pytest.mark.parametrize("d", [dtypes.float16, dtypes.bfloat16, dtypes.fp8e4m3, dtypes.fp8e5m2])
def test_small_floats_round_after_every_op(llvm_device: CPUDevice, d: DType) -> None:
    xs = [0.1, 1.5, -3.25, 100.0, 1e-3, 7.0]
    ys = [3.0, -0.7, 0.3, 1000.0, 2.0, -0.01]
    n = len(xs)
    pa, pb = param(1, n, F32).cast(d), param(2, n, F32).cast(d)
    value = ((pa * pb) + pa).cast(F32)
    got = launch(llvm_device, [(param(0, n, F32), value)], {1: np.array(xs), 2: np.array(ys)})[0]
    want = []
    for x, y in zip(xs, ys, strict=True):
        x, y = exec_alu(Ops.ADD, d, (x, 0.0)), exec_alu(Ops.ADD, d, (y, 0.0))  # the inputs rounded to d
        want.append(exec_alu(Ops.ADD, d, (exec_alu(Ops.MUL, d, (x, y)), x)))
    np.testing.assert_array_equal(got, np.array(want, np.float32))


def test_gated_loads_read_nothing_outside_the_gate(llvm_device: CPUDevice) -> None:
    a = np.arange(1, 9, dtype=np.float32)
    x = param(1, 8, F32).reshape((2, 4))
    value = x.pad(((1, 2), (3, 1))) * 2.0
    got = launch(llvm_device, [(param(0, 5 * 8, F32).reshape((5, 8)), value)], {1: a})[0]
    np.testing.assert_array_equal(got.reshape(5, 8), np.pad(a.reshape(2, 4), ((1, 2), (3, 1))) * 2)


def test_loop_counters_are_64_bit_and_read_as_int32_where_the_program_uses_them() -> None:
    # counters are i64 like the address arithmetic that reads them (no sext per use for LLVM to widen); an index
    # value used as data (arange) or in a gate (pad) reads the counter truncated, which must give the same numbers
    from tg_backend_cpu.llvm_renderer import LLVMRenderer
    from tinygrad import Device, Tensor

    src = get_program(kernel(1.0, 4096), LLVMRenderer()).src
    assert "icmp slt i64" in src and "alloca i32" not in src, src
    if not isinstance(Device["CPU"].renderer, LLVMRenderer):
        pytest.skip("the CPU device here is not on the LLVM path (CPU_COMPILER)")
    got = (Tensor.arange(35, dtype=dtypes.int32, device="CPU").reshape(5, 7).pad(((1, 0), (0, 2))) * 3).numpy()
    np.testing.assert_array_equal(got, np.pad(np.arange(35, dtype=np.int32).reshape(5, 7), ((1, 0), (0, 2))) * 3)


def test_bool_values_are_bytes_in_memory(llvm_device: CPUDevice) -> None:
    xs, ys = [False, False, True, True], [False, True, False, True]
    p, q = param(1, 4, dtypes.bool), param(2, 4, dtypes.bool)
    got = launch(llvm_device, [(param(0, 4, dtypes.bool), UOp(Ops.ADD, dtypes.bool, (p, q)))],
                 {1: np.array(xs), 2: np.array(ys)})[0]
    assert got.tolist() == [x or y for x, y in zip(xs, ys, strict=True)]


# ---------------------------------------------------------------------------------------------------------------------
# the entry points, the loader and the compiler

def kernel(c: float, n: int = 64) -> UOp:
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (param(0, n, F32), param(1, n, F32) + c)),))


def test_entry_points_have_the_c_path_abi(split_everything: None) -> None:
    from tg_backend_cpu.llvm_compiler import LLVMCompiler
    from tg_backend_cpu.llvm_loader import entry_points
    from tg_backend_cpu.llvm_renderer import LLVMRenderer

    spec = get_program(kernel(2.0), LLVMRenderer())
    addresses = entry_points(spec.name, LLVMCompiler().compile(spec.src))
    assert ctypes.c_longlong.from_address(addresses[f"{spec.name}_tg_nargs"]).value == 2
    assert ctypes.c_longlong.from_address(addresses[f"{spec.name}_tg_outer"]).value == 64
    src, out = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    args = (ctypes.c_longlong * 2)(out.ctypes.data, src.ctypes.data)
    slice_fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_longlong)
    slice_fn(addresses[f"{spec.name}_tg_slice"])(args, 1, 2, 4)  # the second quarter of the outer loop only
    np.testing.assert_array_equal(out, np.where((np.arange(64) >= 16) & (np.arange(64) < 32), src + 2, 0))
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(addresses[f"{spec.name}_tg_run"])(args)
    np.testing.assert_array_equal(out, src + 2)


def test_kernels_of_one_name_and_different_code_load_side_by_side(llvm_device: CPUDevice) -> None:
    from tg_backend_cpu.llvm_loader import entry_points

    specs = [get_program(kernel(c), llvm_device.renderer) for c in (0.5, 0.25)]
    assert specs[0].name == specs[1].name
    objs = [llvm_device.compiler.compile(s.src) for s in specs]
    first, second = (entry_points(s.name, o) for s, o in zip(specs, objs, strict=True))
    assert first[f"{specs[0].name}_tg_run"] != second[f"{specs[1].name}_tg_run"]
    assert entry_points(specs[0].name, objs[0]) == first  # loaded once
    src = np.ones(64, np.float32)
    assert launch(llvm_device, [(param(0, 64, F32), param(1, 64, F32) + 0.5)], {1: src})[0][0] == 1.5
    assert launch(llvm_device, [(param(0, 64, F32), param(1, 64, F32) + 0.25)], {1: src})[0][0] == 1.25


def test_cache_key_names_llvm_and_the_host_cpu() -> None:
    import llvmlite
    import llvmlite.binding as llvm
    from tg_backend_cpu.llvm_compiler import LLVMCompiler

    key = LLVMCompiler().cache_key
    assert f"llvmlite {llvmlite.__version__}" in key and f"LLVM {llvm.llvm_version_info[0]}." in key
    assert llvm.get_host_cpu_name() in key and llvm.get_host_cpu_features().flatten() in key


def test_bad_ir_is_a_compile_error() -> None:
    from tg_backend_cpu.llvm_compiler import LLVMCompiler

    with pytest.raises(CompileError, match="LLVM rejected"):
        LLVMCompiler().compile("define void @k() {\n  ret i32 0\n}\n")


def test_missing_llvmlite_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import tg_backend_cpu
    from tg_backend_cpu.device import CPUDevice

    monkeypatch.setenv("CPU_COMPILER", "llvm")
    monkeypatch.setitem(sys.modules, "llvmlite", None)
    monkeypatch.setitem(sys.modules, "llvmlite.binding", None)
    with pytest.raises(RuntimeError, match=r"pip install llvmlite==0\.50\.0; or CPU_COMPILER=clang"):
        CPUDevice()
    assert "pip install llvmlite==0.50.0" in (tg_backend_cpu._check() or "")


def test_an_unknown_compiler_choice_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import tg_backend_cpu

    monkeypatch.setenv("CPU_COMPILER", "icc")
    assert "not one of llvm, clang, gcc" in (tg_backend_cpu._check() or "")


def test_tensors_threads_and_symbolic_sizes_on_the_llvm_path(tmp_path: Path) -> None:
    # a process of its own: Device["CPU"] is opened once per process, with the compiler CPU_COMPILER names then
    script = textwrap.dedent("""
        import numpy as np
        from tinygrad import Device, Tensor, Variable
        from tg_backend_cpu.llvm_renderer import LLVMRenderer
        assert isinstance(Device["CPU"].renderer, LLVMRenderer)
        rng = np.random.default_rng(0)
        a, b = rng.standard_normal((96, 80), np.float32), rng.standard_normal((80, 72), np.float32)
        got = (Tensor(a) @ Tensor(b)).relu().numpy()
        np.testing.assert_allclose(got, np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)
        n = Variable("n", 1, 96)
        rows = Tensor(a)[:n.bind(37)].sum(axis=1).numpy()
        np.testing.assert_allclose(rows, a[:37].sum(axis=1), rtol=1e-4, atol=1e-4)
        # kernels the heuristics tile in blocks: transposes (a channels-last copy, a matrix), and the partial sums of
        # a split reduction side by side (a BatchNorm's statistics)
        x = rng.standard_normal((128, 32, 20, 20), np.float32)
        np.testing.assert_array_equal(Tensor(x).permute(0, 2, 3, 1).contiguous().numpy(), x.transpose(0, 2, 3, 1))
        m = rng.standard_normal((516, 260), np.float32)
        np.testing.assert_array_equal(Tensor(m).T.contiguous().numpy(), m.T)
        np.testing.assert_allclose(Tensor(x).sum((0, 2, 3)).numpy(), x.sum((0, 2, 3)), rtol=1e-4, atol=1e-3)
        # small transposes, whose loops stay scalar (gathering_loops)
        w = rng.standard_normal((32, 64, 3, 3), np.float32)
        np.testing.assert_array_equal(Tensor(w).permute(1, 2, 3, 0).contiguous().numpy(), w.transpose(1, 2, 3, 0))
        np.testing.assert_array_equal(Tensor(x[:3, :, :10, :10]).permute(0, 2, 3, 1).contiguous().numpy(),
                                      x[:3, :, :10, :10].transpose(0, 2, 3, 1))
        print("ok", Device["CPU"].threads)
    """)
    env = {**os.environ, "CPU_COMPILER": "llvm", "DEV": "CPU", "CPU_THREADS": "4",
           "TINYGRAD_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ok", "4"]


def test_without_a_c_compiler_kernels_still_use_every_thread(tmp_path: Path) -> None:
    # a machine with only Python and the packages (llvmlite among them): no compiler on PATH, and the default path
    # still runs the native pool, built from LLVM IR; a matmul big enough to split must use it and be right, and a
    # TinyJit replay runs from the pool library's loop
    script = textwrap.dedent("""
        import numpy as np
        from tinygrad import Device, Tensor, TinyJit
        from tg_backend_cpu import program
        from tg_backend_cpu.compiler import find_c_compiler, uses_llvm
        from tg_backend_cpu.llvm_pool import llvm_pool_library
        from tg_backend_cpu.thread_pool import ThreadPool
        assert find_c_compiler()[0] is None, find_c_compiler()
        assert uses_llvm()
        dev = Device["CPU"]
        assert isinstance(dev.pool, ThreadPool), dev.pool
        assert dev.pool.library() is llvm_pool_library()
        rng = np.random.default_rng(1)
        a, b = rng.standard_normal((257, 300), np.float32), rng.standard_normal((300, 129), np.float32)
        for _ in range(3):
            np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-3)
        step = TinyJit(lambda x, y: ((x @ y).relu() + 1).sum(axis=1).realize())
        for _ in range(4):
            x, y = rng.standard_normal((257, 300), np.float32), rng.standard_normal((300, 129), np.float32)
            np.testing.assert_allclose(step(Tensor(x), Tensor(y)).numpy(), (np.maximum(x @ y, 0) + 1).sum(axis=1),
                                       rtol=1e-3, atol=1e-2)
        print("ok", dev.threads, dev.pool.started, program._native_run_all() is not None)
    """)
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "CPU_COMPILER", "DEV")}
    env.update({"PATH": str(empty), "DEV": "CPU", "CPU_THREADS": "3", "TINYGRAD_CACHE_DIR": str(tmp_path / "cache")})
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ok", "3", "True", "True"]


def test_neighbouring_loads_of_an_upcast_are_vectorised() -> None:
    # a convolution whose result is divided elementwise (MNIST's backward has one): the upcast's lanes read
    # buf[a], buf[a+1], ... and only 64-bit address arithmetic lets LLVM's SLP vectoriser see them as neighbours
    import re

    from tg_backend_cpu.llvm_compiler import LLVMCompiler
    from tg_backend_cpu.llvm_renderer import LLVMRenderer
    from tinygrad import Tensor

    x, w = Tensor.empty(8, 64, 12, 12, device="CPU"), Tensor.empty(64, 32, 3, 3, device="CPU")
    out = x.conv2d(w.flip((2, 3)).transpose(0, 1)) / Tensor.empty(8, 32, 10, 10, device="CPU")
    # the convolution (on the LLVM path its weight is read from a channels-last copy, one more kernel)
    kernels = [get_program(si.ast, LLVMRenderer()) for si in out.schedule() if si.ast.op is Ops.SINK]
    prog = max(kernels, key=lambda p: p.estimated_ops)
    optimized = str(LLVMCompiler()._optimized(prog.src))
    # lanes of vector arithmetic: some dozens of vectors of 8 or 16, or a few of the whole tile (128); the tile's
    # multiply-adds are the renderer's own vectors (`llvm_tiles`)
    lanes = sum(int(m.group(2)) for line in optimized.splitlines()
                if (m := re.search(r"\b(fmul|fadd|fdiv|llvm\.fma\.v\d+f32|llvm\.fmuladd\.v\d+f32)\b.*<(\d+) x float>",
                                   line)))
    assert lanes >= 64, f"{prog.name} stayed scalar:\n{optimized[:4000]}"


def _some_ir(n: int = 3) -> list[str]:
    """The LLVM IR of `n` different small kernels."""
    from tg_backend_cpu.llvm_renderer import LLVMRenderer

    srcs = []
    for i in range(n):
        p = param(1, 100, F32)
        sink = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (param(0, 100, F32), p * float(i + 2) + 1.0)),))
        srcs.append(get_program(sink, LLVMRenderer()).src)
    return srcs


@pytest.fixture
def batch_compiler(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    from tg_backend_cpu import llvm_compiler

    if llvm_compiler.COMPILE_WORKERS < 2:
        pytest.skip("one core: a batch compiles in process, without worker processes")
    monkeypatch.delenv("LLVM_COMPILE_PROCESSES", raising=False)
    compiler = llvm_compiler.LLVMCompiler()
    compiler.expect_batch(llvm_compiler.WORKERS_MIN_BATCH)
    yield compiler
    if compiler._workers is not None:
        compiler._workers.close()


def test_a_batch_compiles_in_worker_processes_to_the_same_objects(batch_compiler) -> None:  # type: ignore[no-untyped-def]
    from tg_backend_cpu.llvm_compiler import LLVMCompiler

    assert batch_compiler._workers is None  # started by the first compile: a batch all in the cache starts none
    in_process = LLVMCompiler()
    for src in _some_ir():
        assert batch_compiler.compile(src) == in_process.compile(src)
    assert "worker processes" in batch_compiler.workers_note and batch_compiler._workers is not None
    assert batch_compiler._workers.alive >= 2


def test_a_batch_that_compiles_nothing_starts_no_worker_now_or_for_a_later_kernel(batch_compiler) -> None:  # type: ignore[no-untyped-def]
    # every kernel of the batch came from the compile cache (compile was never called): no process started, and the
    # next kernel compiled alone, outside a batch, compiles in this process instead of starting the batch's workers
    batch_compiler.end_batch()
    assert batch_compiler._workers is None
    assert batch_compiler.compile(_some_ir(1)[0])[:4] == b"\x7fELF"
    assert batch_compiler._workers is None and "compiled nothing" in batch_compiler.workers_note


def test_a_workers_compile_error_names_the_problem(batch_compiler) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CompileError, match="LLVM rejected a kernel's IR"):
        batch_compiler.compile("define void @broken( {")
    assert batch_compiler._workers.alive >= 2  # a bad kernel does not cost a worker


def test_kernels_of_dead_workers_compile_in_this_process(batch_compiler) -> None:  # type: ignore[no-untyped-def]
    from tg_backend_cpu.llvm_compiler import LLVMCompiler

    first, src = _some_ir(2)
    batch_compiler.compile(first)  # starts the workers
    for worker in batch_compiler._workers._all:
        worker.proc.kill()
        worker.proc.wait()
    assert batch_compiler.compile(src) == LLVMCompiler().compile(src)
    assert "compiling in process" in batch_compiler.workers_note


def test_workers_that_cannot_start_leave_compiling_to_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from tg_backend_cpu import llvm_compiler, llvm_workers

    def no_processes(*args: object, **kwargs: object) -> None:
        raise OSError("process limit reached")

    monkeypatch.setattr(llvm_workers.subprocess, "Popen", no_processes)
    monkeypatch.setattr(llvm_compiler, "COMPILE_WORKERS", 2)
    compiler = llvm_compiler.LLVMCompiler()
    compiler.expect_batch(100)
    assert compiler.compile(_some_ir(1)[0])[:4] == b"\x7fELF"
    assert compiler._workers is None and "process limit reached" in compiler.workers_note


def test_a_training_step_compiled_by_workers_computes_the_same(tmp_path: Path) -> None:
    # a training step (two convolutions, a linear layer, SGD: dozens of kernels in one precompiled batch) on the LLVM
    # path with a cold cache, against PyTorch; the batch went to worker processes where there are two cores
    pytest.importorskip("torch")
    from tg_backend_cpu import llvm_compiler

    script = textwrap.dedent("""
        import numpy as np, torch
        from tinygrad import Device, Tensor
        from tinygrad.nn.optim import SGD
        rng = np.random.default_rng(0)
        x = rng.standard_normal((8, 3, 12, 12)).astype(np.float32)
        arrays = [rng.standard_normal(s).astype(np.float32) for s in ((6, 3, 3, 3), (4, 6, 3, 3), (5, 64))]
        params = [Tensor(a, requires_grad=True) for a in arrays]
        h = Tensor(x).conv2d(params[0]).relu().conv2d(params[1]).relu().max_pool2d().flatten(1)
        loss = (h @ params[2].T).log_softmax(1).mean()
        Tensor.training = True
        opt = SGD(params, lr=0.1)
        opt.zero_grad()
        loss.backward()
        loss.realize(*opt.schedule_step())
        F = torch.nn.functional
        tp = [torch.tensor(a, requires_grad=True) for a in arrays]
        th = F.max_pool2d(F.conv2d(F.conv2d(torch.tensor(x), tp[0]).relu(), tp[1]).relu(), 2).flatten(1)
        (th @ tp[2].T).log_softmax(1).mean().backward()
        for p, t in zip(params, tp):
            np.testing.assert_allclose(p.numpy(), (t - 0.1 * t.grad).detach().numpy(), rtol=1e-4, atol=1e-5)
        print(Device["CPU"].compiler.workers_note)
    """)
    env = {**os.environ, "DEV": "CPU", "CPU_COMPILER": "llvm", "TINYGRAD_CACHE_DIR": str(tmp_path)}
    env.pop("LLVM_COMPILE_PROCESSES", None)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if llvm_compiler.COMPILE_WORKERS >= 2:
        assert "worker processes" in proc.stdout, proc.stdout


def test_a_worker_that_answers_garbage_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    # a reply with a status that is not one (as if something printed to the worker's stdout) costs the worker,
    # not the kernel: it compiles in this process
    from tg_backend_cpu import llvm_compiler, llvm_workers

    garbage = "import sys; sys.stdin.buffer.read(9); sys.stdout.buffer.write(bytes([7]) + bytes(8)); sys.stdout.flush()"

    def start(self: llvm_workers._Worker) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", garbage], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    monkeypatch.setattr(llvm_workers._Worker, "__init__", start)
    monkeypatch.setattr(llvm_compiler, "COMPILE_WORKERS", 2)
    compiler = llvm_compiler.LLVMCompiler()
    compiler.expect_batch(100)
    src = _some_ir(1)[0]
    assert compiler.compile(src) == llvm_compiler.LLVMCompiler().compile(src)
    assert compiler._workers is not None
    assert "not one" in compiler.workers_note and compiler._workers.alive == 1
    compiler._workers.close()


def test_the_process_count_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    from tg_backend_cpu import llvm_compiler

    monkeypatch.setattr(llvm_compiler, "COMPILE_WORKERS", 2)
    monkeypatch.setenv("LLVM_COMPILE_PROCESSES", "0")
    compiler = llvm_compiler.LLVMCompiler()
    compiler.expect_batch(100)
    assert compiler._workers is None  # compiling in this process, as asked
    monkeypatch.setenv("LLVM_COMPILE_PROCESSES", "two")
    with pytest.raises(ValueError, match="LLVM_COMPILE_PROCESSES='two' is not a number"):
        compiler.expect_batch(100)


def test_a_worker_imports_llvmlite_and_not_tinygrad() -> None:
    # a worker's start is paid on the cores that render the batch: it must not import tinygrad (the package's
    # __init__ does), only the standard library and llvmlite, and it must answer as the in-process compiler does
    from tg_backend_cpu import llvm_workers
    from tg_backend_cpu.llvm_compiler import LLVMCompiler

    probe = ("import runpy, sys; runpy.run_path(sys.argv[1]); "
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tinygrad', 'tg_backend_cpu')))")
    proc = subprocess.run([sys.executable, "-P", "-c", probe, llvm_workers.__file__], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr
    workers = llvm_workers.CompileWorkers(1)
    try:
        src = _some_ir(1)[0]
        assert workers.compile(src) == (llvm_workers.OK, LLVMCompiler().compile(src))
        status, message = workers.compile("define void @broken( {")
        assert status == llvm_workers.ERROR and b"LLVM rejected a kernel's IR" in message
    finally:
        workers.close()


@pytest.mark.parametrize("d", [dtypes.float16, dtypes.bfloat16, F32, dtypes.float64])
def test_bools_become_floats_by_a_select(llvm_device: CPUDevice, d: DType) -> None:
    # uitofp of an i1 kept the MNIST example's mask-times-gradient kernels scalar; a select of 1 and 0 vectorises
    from tg_backend_cpu.llvm_renderer import LLVMRenderer

    n = 37
    pa, pb = param(1, n, F32), param(2, n, F32)
    mask = UOp(Ops.CMPEQ, dtypes.bool, (pa, pb)).cast(d)
    a = np.arange(n, dtype=np.float32)
    b = np.where(np.arange(n) % 3 == 0, a, -1).astype(np.float32)
    got = launch(llvm_device, [(param(0, n, F32), (mask * pa.cast(d)).cast(F32))], {1: a, 2: b})[0]
    np.testing.assert_array_equal(got, np.where(a == b, a, 0).astype(np.float32))
    sink = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (param(0, n, d), mask)),))
    src = get_program(sink, LLVMRenderer()).src
    assert "uitofp i1" not in src and "select i1" in src


def test_the_loops_of_small_transposes_stay_scalar() -> None:
    from tg_backend_cpu.llvm_renderer import LLVMRenderer
    from tinygrad import Tensor

    def src(t: Tensor) -> str:
        return get_program(t.schedule()[-1].ast, LLVMRenderer()).src

    marked = '!{!"llvm.loop.vectorize.enable", i1 false}'
    # a channels-last copy of a weight: every load of the innermost loop strides by a row
    small = src(Tensor.empty(32, 64, 3, 3).permute(1, 2, 3, 0).contiguous())
    assert marked in small and small.count(", !llvm.loop !") == 1
    # a plain elementwise op, a big transpose in 4x4 blocks (16 stores an iteration), reductions, and a short row
    # reduction unrolled (a row of neighbours per iteration)
    for t in (Tensor.empty(64, 576) * 2, Tensor.empty(64, 32, 24, 24).permute(0, 2, 3, 1).contiguous(),
              Tensor.empty(64, 32).T.contiguous().sum(1), Tensor.empty(32, 640).sum(1), Tensor.empty(512, 10).sum(1)):
        assert "!llvm.loop" not in src(t)
