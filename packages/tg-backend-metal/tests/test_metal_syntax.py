"""Without a Mac: every kernel of a table of Tensor expressions is rendered as MSL and syntax-checked by clang-19
as C++17 against a stand-in <metal_stdlib> (tests/metal_stub). This checks the renderer's C++ syntax and the names
it uses, not Metal's own rules (address spaces, attributes), which only Apple's compiler checks."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

tg_backend_metal = pytest.importorskip("tg_backend_metal", reason="tg-backend-metal is not installed")

from tg_backend_metal.renderer import MetalRenderer  # noqa: E402
from tinygrad import Tensor, Variable  # noqa: E402
from tinygrad.codegen import get_program  # noqa: E402
from tinygrad.dtype import dtypes  # noqa: E402

STUB = Path(__file__).resolve().parent / "metal_stub"
R = MetalRenderer()
F32, F16, BF16, I32, I64, U8, BOOL = (dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.int32, dtypes.int64,
                                      dtypes.uint8, dtypes.bool)


def t(*shape: int, dtype=F32) -> Tensor:  # type: ignore[no-untyped-def]
    return Tensor.empty(*shape, dtype=dtype, device="CPU")


EXPRESSIONS = {
    **{f"{n}-{d.name}": (lambda f=f, d=d: f(t(33, 7, dtype=d))) for d in (F32, F16, BF16)
       for n, f in {"exp": Tensor.exp, "log": Tensor.log, "sqrt": Tensor.sqrt, "sin": Tensor.sin,
                    "trunc": Tensor.trunc, "sigmoid": Tensor.sigmoid, "relu": Tensor.relu}.items()},
    **{f"{n}-{d.name}": (lambda f=f, d=d: f(t(33, 7, dtype=d), t(33, 7, dtype=d))) for d in (F32, F16, I32, I64, U8)
       for n, f in {"add": Tensor.add, "mul": Tensor.mul, "max": Tensor.maximum, "lt": Tensor.__lt__}.items()},
    **{f"{n}-{d.name}": (lambda f=f, d=d: f(t(33, 7, dtype=d), t(33, 7, dtype=d))) for d in (I32, I64, U8)
       for n, f in {"idiv": Tensor.__floordiv__, "mod": Tensor.__mod__, "shl": Tensor.__lshift__,
                    "xor": Tensor.__xor__}.items()},
    "where-bool": lambda: t(9, dtype=BOOL).where(t(9), t(9)),
    "cast-f32-fp8": lambda: t(65).cast(dtypes.fp8e4m3), "cast-bf16-f16": lambda: t(65, dtype=BF16).cast(F16),
    "bitcast-f32-i32": lambda: t(65).bitcast(I32), "bitcast-bf16-u16": lambda: t(65, dtype=BF16).bitcast(dtypes.uint16),
    "sum-grouped": lambda: t(8, 8192).sum(1), "softmax-f16": lambda: t(16, 1000, dtype=F16).softmax(1),
    "matmul": lambda: t(64, 64) @ t(64, 64), "conv2d": lambda: t(2, 3, 16, 16).conv2d(t(8, 3, 3, 3)),
    "symbolic": lambda: t(8, 4)[:Variable("n", 1, 8).bind(3)] * 2, "argmax": lambda: t(32, 100).argmax(1),
    "matmul-f16-tc": lambda: t(64, 32, dtype=F16).dot(t(32, 48, dtype=F16), dtype=F32),
    "matmul-f16-out-tc": lambda: t(4, 16, 24, dtype=F16) @ t(4, 24, 8, dtype=F16),
    "conv2d-tc": lambda: t(1, 8, 10, 10).conv2d(t(8, 8, 3, 3)),
    "cumsum": lambda: t(3, 1000).cumsum(1), "gather": lambda: t(16, 32).gather(1, t(16, 5, dtype=I32)),
}


@pytest.fixture(scope="module")
def clang() -> str:
    path = shutil.which("clang-19")
    if path is None:
        pytest.skip("clang-19 not found: `apt-get install clang-19`")
    return path


@pytest.mark.parametrize("name", list(EXPRESSIONS))
def test_msl_parses(clang: str, name: str) -> None:
    failures = []
    for si in Tensor.schedule(EXPRESSIONS[name]()):
        if si.is_copy:
            continue
        src = get_program(si.ast, R).src
        proc = subprocess.run([clang, "-fsyntax-only", "-x", "c++", "-std=c++17", "-Wno-unknown-attributes",
                               "-Wno-parentheses-equality", "-Werror", f"-I{STUB}", "-"], input=src,
                              capture_output=True, text=True)
        if proc.returncode:
            failures.append(f"{proc.stderr}\n{src}")
    assert not failures, "\n\n".join(failures)


def test_kernel_signature() -> None:
    (si,) = Tensor.schedule(t(8, 4)[:Variable("n", 1, 8).bind(3)] * 2)
    src = get_program(si.ast, R).src
    assert "device float* data0 [[buffer(0)]], device const float* data1 [[buffer(1)]]" in src
    assert "constant int& n [[buffer(2)]]" in src and "uint3 tg_group [[threadgroup_position_in_grid]]" in src
    assert not R.supports_dtype(dtypes.float64)


def test_unavailable_off_macos() -> None:
    if sys.platform == "darwin":
        pytest.skip("on macOS")
    reason = tg_backend_metal._check.__wrapped__()
    assert reason is not None and reason.startswith("not macOS")


def test_matmuls_use_simdgroup_matrices() -> None:
    """float16 and float32 matmuls (and convolutions) take the TC opt: one simdgroup per 8x8 tile, going through
    threadgroup tiles with simdgroup_load/multiply_accumulate/store."""
    for name in ("matmul", "matmul-f16-tc", "matmul-f16-out-tc", "conv2d-tc"):
        for si in Tensor.schedule(EXPRESSIONS[name]()):
            spec = get_program(si.ast, R)
            assert spec.applied_opts[0].startswith("TC(") and spec.local_size is not None and \
                spec.local_size[0] == 32, (name, spec.applied_opts)
            assert "simdgroup_multiply_accumulate(mc, ma, mb, mc);" in spec.src
