"""exp2 of float32 and float16 on the CPU paths (`tg_backend_cpu.exp2`): arithmetic instead of libm's exp2f, so that
softmax and sigmoid vectorise. Checked on every compiler this machine has against numpy's float64 exp2 rounded to
the dtype, over the whole range (subnormal results, overflow) and at the special values, and checked to be what the
kernel runs (no exp2 call left in the LLVM path's IR; the C path calls the helper)."""

from __future__ import annotations

import numpy as np
import pytest
from tg_backend_cpu import exp2
from tg_backend_cpu.device import CPUDevice
from tinygrad.codegen import get_program
from tinygrad.device import Buffer
from tinygrad.dtype import DType, dtypes, to_numpy
from tinygrad.uop.ops import Ops, ParamArg, UOp

SPECIAL = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1.0, -1.0, 0.5, 127.0, 127.99999, 128.0, 129.0, 1e30, -126.0, -127.5,
           -149.0, -149.5, -150.0, -150.5, -151.0, -1e30, 1e-30, -1e-45]


@pytest.fixture
def device(fresh_compiler_lookup, monkeypatch: pytest.MonkeyPatch, compiler: str) -> CPUDevice:  # type: ignore[no-untyped-def]
    """A CPUDevice of `compiler` (the lookup cached for another compiler is cleared first)."""
    if compiler == "llvm":
        pytest.importorskip("llvmlite")
    monkeypatch.setenv("CPU_COMPILER", compiler)
    try:
        dev = CPUDevice()
    except RuntimeError as e:
        pytest.skip(f"CPU_COMPILER={compiler} is not available here: {e}")
    if compiler != "llvm":
        assert compiler in getattr(dev.compiler, "version", "").lower(), (compiler, dev.compiler)
    return dev


def _exp2_kernel(n: int, d: DType) -> UOp:
    out, x = UOp(Ops.PARAM, d, (), ParamArg(0, n)), UOp(Ops.PARAM, d, (), ParamArg(1, n))
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, UOp(Ops.EXP2, d, (x,)))),))


def _run_exp2(dev: CPUDevice, xs: np.ndarray, d: DType) -> np.ndarray:
    n = len(xs)
    out, inp = Buffer("CPU", n, d), Buffer("CPU", n, d)
    inp.copyin(memoryview(np.ascontiguousarray(xs, dtype=to_numpy(d))).cast("B"))
    dev.get_runner(_exp2_kernel(n, d))([out, inp], {})
    return out.numpy()


def _ulps(got: np.ndarray, want: np.ndarray, bits: type) -> np.ndarray:
    """Distance in ulps between two arrays of one float dtype (as ordered integers: -0.0 and +0.0 one apart)."""
    def ordered(a: np.ndarray) -> np.ndarray:
        i = a.view(bits).astype(np.int64)
        sign = 1 << (8 * a.itemsize - 1)
        return np.where(i & sign, -(i & (sign - 1)) - 1, i)
    return np.abs(ordered(got) - ordered(want))


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(0)
    parts = [rng.uniform(-160, 140, 200_001), rng.uniform(-1, 1, 50_001), rng.uniform(-150, -125, 50_001),
             rng.uniform(126, 128.5, 20_001), np.array(SPECIAL)]
    return np.concatenate(parts).astype(np.float32)  # odd sizes: the vector loops' remainders run too


@pytest.mark.parametrize("compiler", ["llvm", "clang", "gcc"])
def test_float32_exp2_within_one_ulp_everywhere(device: CPUDevice) -> None:
    xs = _inputs()
    got = _run_exp2(device, xs, dtypes.float32)
    with np.errstate(over="ignore"):
        want = np.exp2(xs.astype(np.float64)).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), xs[np.isnan(got) != nan][:10]
    dist = _ulps(got[~nan], want[~nan], np.int32)
    assert dist.max() <= 1, (xs[~nan][dist > 1][:10], got[~nan][dist > 1][:10], want[~nan][dist > 1][:10])
    # and nearly always the correctly rounded result, as libm's (a float32 polynomial missed one in ten)
    assert (dist == 0).mean() > 0.999, (dist == 0).mean()
    # the special values exactly: overflow to inf, underflow to +0.0 (not -0.0), the smallest subnormal
    special = dict(zip(SPECIAL, _run_exp2(device, np.array(SPECIAL, np.float32), dtypes.float32).tolist(), strict=True))
    assert special[np.inf] == np.inf and special[128.0] == np.inf and special[1e30] == np.inf
    assert special[-np.inf] == 0.0 and np.signbit(special[-np.inf]) == False  # noqa: E712
    assert special[-1e30] == 0.0 and special[-150.0] == 0.0 and special[-149.0] == 2.0 ** -149
    assert special[0.0] == 1.0 and special[-0.0] == 1.0 and special[1.0] == 2.0 and special[-126.0] == 2.0 ** -126


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
def test_float16_exp2_within_one_ulp(device: CPUDevice) -> None:
    xs = np.concatenate([np.linspace(-26, 17, 40_001), [np.inf, -np.inf, np.nan, 0.0, 15.999, 16.0]]).astype(np.float16)
    got = _run_exp2(device, xs, dtypes.float16)
    with np.errstate(over="ignore"):
        want = np.exp2(xs.astype(np.float64)).astype(np.float16)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert _ulps(got[~nan], want[~nan], np.int16).max() <= 1


def test_the_kernels_call_the_helper_not_libm() -> None:
    from tg_backend_cpu.renderer import CPURenderer

    c = get_program(_exp2_kernel(1000, dtypes.float32), CPURenderer()).src
    assert "tg_exp2f(" in c and "static inline float tg_exp2f" in c
    f64 = get_program(_exp2_kernel(1000, dtypes.float64), CPURenderer()).src
    assert "tg_exp2f" not in f64 and "exp2(" in f64  # float64 keeps libm's correctly rounded-ish exp2
    pytest.importorskip("llvmlite")
    from tg_backend_cpu.llvm_renderer import LLVMRenderer

    ir = get_program(_exp2_kernel(1000, dtypes.float32), LLVMRenderer()).src
    assert "@tg_exp2_f32" in ir and "llvm.exp2" not in ir
    assert "llvm.exp2.f64" in get_program(_exp2_kernel(1000, dtypes.float64), LLVMRenderer()).src


def test_the_llvm_path_vectorises_exp2() -> None:
    pytest.importorskip("llvmlite")
    from tg_backend_cpu.llvm_compiler import LLVMCompiler
    from tg_backend_cpu.llvm_renderer import LLVMRenderer

    compiler = LLVMCompiler()
    src = get_program(_exp2_kernel(4096, dtypes.float32), LLVMRenderer()).src
    asm = compiler.disassemble(compiler.compile(src), src)
    if asm is None:
        pytest.skip("no disassembler for the LLVM path's objects here")
    assert "exp2f" not in asm
    if "xmm" in asm:  # x86: the helper's rounding to an integer is a packed instruction
        assert any(ins in asm for ins in ("vrndscalepd", "vroundpd", "roundpd")), asm[:3000]


def test_the_taylor_polynomial_is_the_series() -> None:
    # the coefficients are (ln 2)**k / k!, and the degree leaves the series' remainder far below a float32 ulp
    assert exp2.COEFFICIENTS[0] == 1.0 and abs(exp2.COEFFICIENTS[1] - np.log(2)) < 1e-15
    remainder = (np.log(2) / 2) ** (exp2.TAYLOR_DEGREE + 1) / np.prod(np.arange(1, exp2.TAYLOR_DEGREE + 2))
    assert remainder < 2.0 ** -31
