"""Compile-only checks of the AMD backend, for a machine without an AMD GPU: kernels rendered by `AMDRenderer`,
compiled by clang-19 and linked by ld.lld-19 into code objects for gfx942 (CDNA3, wave64) and gfx1100 (RDNA3,
wave32).

Three sources of kernels:

* a table of Tensor expressions below (every unary, binary and ternary op over float32, float16, bfloat16, int32,
  int64, uint8 and bool, casts and bit casts, reductions, matmuls, convolutions, gathers, scans, views, symbolic
  sizes, 64-bit indices), scheduled on the stand-in device AMDCC (see amd_standin.py) without running anything;
* the conformance kit (`--tg-device=AMDCC --tg-quick`) and
* the op table (packages/tg-core/tests/test_ops.py, DEV=AMDCC), both run in a subprocess on AMDCC, which compiles
  every kernel they launch for AMD and runs it on the CPU backend. These take minutes: they run when
  TG_AMD_COMPILE_TABLES=1.

Whether the kernels compute the right values is checked only on an AMD GPU (the conformance kit on DEV=AMD).
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("tg_backend_amd", reason="tg-backend-amd is not installed")

from tinygrad import Tensor, Variable
from tinygrad.codegen import get_program
from tinygrad.device import Device
from tinygrad.dtype import DType, dtypes

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
ARCHS = ("gfx942", "gfx1100")
TABLES_ENV = "TG_AMD_COMPILE_TABLES"

sys.path.insert(0, str(HERE))
import amd_standin  # noqa: E402

D = amd_standin.NAME
F32, F16, BF16, F64 = dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64
I32, I64, U8, BOOL = dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.bool
FLOATS = (F32, F16, BF16)
INTS = (I32, I64, U8)


def t(*shape: int, dtype: DType = F32) -> Tensor:
    """An input: a buffer on the stand-in, never filled (nothing runs here)."""
    return Tensor.empty(*shape, dtype=dtype, device=D)


Expr = Callable[[], Tensor | list[Tensor]]
EXPRESSIONS: dict[str, Expr] = {}


def expr(name: str, fn: Expr) -> None:
    assert name not in EXPRESSIONS, name
    EXPRESSIONS[name] = fn


UNARY_FLOAT: dict[str, Callable[[Tensor], Tensor]] = {
    "neg": lambda x: -x, "exp": Tensor.exp, "log": Tensor.log, "exp2": Tensor.exp2, "log2": Tensor.log2,
    "sqrt": Tensor.sqrt, "rsqrt": Tensor.rsqrt, "sin": Tensor.sin, "cos": Tensor.cos, "tan": Tensor.tan,
    "relu": Tensor.relu, "sigmoid": Tensor.sigmoid, "tanh": Tensor.tanh, "abs": Tensor.abs, "sign": Tensor.sign,
    "floor": Tensor.floor, "ceil": Tensor.ceil, "trunc": Tensor.trunc, "round": Tensor.round,
    "reciprocal": Tensor.reciprocal, "square": Tensor.square, "gelu": Tensor.gelu, "isnan": Tensor.isnan,
}
UNARY_INT: dict[str, Callable[[Tensor], Tensor]] = {
    "neg": lambda x: -x, "abs": Tensor.abs, "square": Tensor.square, "sign": Tensor.sign, "invert": lambda x: ~x,
    "relu": Tensor.relu,
}
BINARY_ANY: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "add": lambda a, b: a + b, "mul": lambda a, b: a * b, "maximum": Tensor.maximum, "minimum": Tensor.minimum,
    "lt": lambda a, b: a < b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
}
BINARY_NUMBER: dict[str, Callable[[Tensor, Tensor], Tensor]] = {"sub": lambda a, b: a - b}
BINARY_FLOAT: dict[str, Callable[[Tensor, Tensor], Tensor]] = {"div": lambda a, b: a / b, "pow": lambda a, b: a ** b}
BINARY_INT: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "idiv": lambda a, b: a // b, "mod": lambda a, b: a % b, "and": lambda a, b: a & b, "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b, "shl": lambda a, b: a << b, "shr": lambda a, b: a >> b,
}
BINARY_BOOL: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
}


def _unary(fn: Callable[[Tensor], Tensor], d: DType) -> Expr:
    # of a sum: an op that is the identity on a dtype (abs of uint8) still leaves a kernel
    return lambda: fn(t(33, 7, dtype=d) + t(33, 7, dtype=d))


def _binary(fn: Callable[[Tensor, Tensor], Tensor], d: DType) -> Expr:
    return lambda: fn(t(33, 7, dtype=d), t(33, 7, dtype=d))


for d in FLOATS:
    for name, fn in UNARY_FLOAT.items():
        expr(f"{name}-{d.name}", _unary(fn, d))
    for name, bfn in {**BINARY_ANY, **BINARY_NUMBER, **BINARY_FLOAT}.items():
        expr(f"{name}-{d.name}", _binary(bfn, d))
for d in INTS:
    for name, fn in UNARY_INT.items():
        expr(f"{name}-{d.name}", _unary(fn, d))
    for name, bfn in {**BINARY_ANY, **BINARY_NUMBER, **BINARY_INT}.items():
        expr(f"{name}-{d.name}", _binary(bfn, d))
for name, bfn in {**BINARY_ANY, **BINARY_BOOL}.items():
    expr(f"{name}-bool", _binary(bfn, BOOL))
expr("not-bool", lambda: t(33, 7, dtype=BOOL).logical_not())
for d in (*FLOATS, *INTS, BOOL, F64):
    expr(f"where-{d.name}", lambda d=d: t(33, 7, dtype=BOOL).where(t(33, 7, dtype=d), t(33, 7, dtype=d)))
for d in (F64, dtypes.int8, dtypes.int16, dtypes.uint16, dtypes.uint32, dtypes.uint64):
    expr(f"arith-{d.name}", lambda d=d: (t(65, dtype=d) * t(65, dtype=d) + t(65, dtype=d)).maximum(t(65, dtype=d)))
expr("mulacc-float32", lambda: t(64) * t(64) + t(64))
expr("lerp-float16", lambda: t(64, dtype=F16).lerp(t(64, dtype=F16), 0.25))

# ---- casts and bit casts ----
CASTS = [(F32, F16), (F32, BF16), (F32, I32), (F32, I64), (F32, U8), (F32, BOOL), (F16, F32), (BF16, F32),
         (F16, BF16), (BF16, F16), (I64, F16), (I32, BF16), (U8, F32), (BOOL, F16), (F64, F16), (F64, BF16),
         (F64, F32), (F16, F64), (F32, dtypes.fp8e4m3), (dtypes.fp8e4m3, F32), (F64, dtypes.fp8e5m2),
         (dtypes.fp8e5m2, F16), (I64, I32), (dtypes.uint64, F64), (dtypes.int8, U8)]
for frm, to in CASTS:
    expr(f"cast-{frm.name}-{to.name}", lambda frm=frm, to=to: t(65, dtype=frm).cast(to))
BITCASTS = [(F32, I32), (I32, F32), (F32, dtypes.uint32), (F16, dtypes.int16), (dtypes.uint16, F16), (BF16, F16),
            (BF16, dtypes.uint16), (dtypes.int16, BF16), (F64, I64), (dtypes.uint64, F64), (dtypes.fp8e4m3, U8),
            (U8, dtypes.fp8e5m2), (dtypes.int8, U8)]
for frm, to in BITCASTS:
    expr(f"bitcast-{frm.name}-{to.name}", lambda frm=frm, to=to: t(65, dtype=frm).bitcast(to))

# ---- reductions ----
for d in (*FLOATS, *INTS):
    expr(f"sum-{d.name}", lambda d=d: t(13, 257, dtype=d).sum(1))
    expr(f"max-{d.name}", lambda d=d: t(13, 257, dtype=d).max(0))
expr("sum-all-large", lambda: t(1 << 20).sum())
expr("sum-grouped", lambda: t(8, 8192).sum(1))  # few outputs, a long axis: a GROUP reduction in LDS
expr("max-grouped", lambda: t(4, 16384).max(1))
expr("sum-axes-4d", lambda: t(3, 5, 7, 9).sum((1, 3)))
expr("min-int64", lambda: t(100, 31, dtype=I64).min(1))
expr("mean-float16", lambda: t(64, 100, dtype=F16).mean(1))
expr("prod-int32", lambda: t(17, 9, dtype=I32).prod(1))
expr("any-all-bool", lambda: [t(17, 33, dtype=BOOL).any(1), t(17, 33, dtype=BOOL).all(0)])
expr("argmax", lambda: t(32, 100).argmax(1))
expr("softmax-float32", lambda: t(16, 1000).softmax(1))
expr("softmax-float16", lambda: t(16, 1000, dtype=F16).softmax(1))
expr("logsumexp", lambda: t(8, 77).logsumexp(1))
expr("var-std", lambda: [t(12, 300).var(1), t(12, 300, dtype=BF16).std(0)])
expr("layernorm", lambda: t(4, 768).layernorm())

# ---- matmul and convolution ----
for d in (F32, F16, BF16, I32):
    expr(f"matmul-{d.name}", lambda d=d: t(64, 64, dtype=d) @ t(64, 64, dtype=d))
expr("matmul-large", lambda: t(256, 512) @ t(512, 256))
expr("matmul-odd", lambda: t(33, 17) @ t(17, 65))
expr("matmul-batched", lambda: t(4, 32, 64) @ t(4, 64, 16))
expr("matvec", lambda: t(1, 1024) @ t(1024, 512))
expr("matmul-float16-acc", lambda: t(128, 128, dtype=F16).matmul(t(128, 128, dtype=F16), dtype=F32))
expr("conv2d", lambda: t(2, 3, 16, 16).conv2d(t(8, 3, 3, 3), t(8)))
expr("conv2d-float16", lambda: t(1, 4, 12, 12, dtype=F16).conv2d(t(4, 4, 3, 3, dtype=F16), padding=1))
expr("conv2d-strided-grouped", lambda: t(1, 8, 17, 17).conv2d(t(8, 2, 3, 3), groups=4, stride=2, dilation=2))
expr("conv2d-backward", lambda: _grads(lambda x, w: x.conv2d(w).relu().sum(), (2, 3, 10, 10), (4, 3, 3, 3)))
expr("matmul-backward", lambda: _grads(lambda a, b: (a @ b).tanh().mean(), (16, 32), (32, 8)))
expr("max-pool", lambda: t(1, 3, 16, 16).max_pool2d())
expr("avg-pool", lambda: t(1, 3, 15, 15).avg_pool2d(kernel_size=3, stride=2))
expr("attention-float16", lambda: t(1, 2, 16, 32, dtype=F16).scaled_dot_product_attention(
    t(1, 2, 16, 32, dtype=F16), t(1, 2, 16, 32, dtype=F16), is_causal=True))

# ---- indexing, scans, views ----
expr("gather", lambda: t(16, 32).gather(1, t(16, 5, dtype=I32)))
expr("fancy-index", lambda: t(100, 8)[t(20, dtype=I32)])
expr("one-hot", lambda: (Tensor.arange(50, device=D) % 10).one_hot(10))
expr("scatter", lambda: t(8, 16).scatter(1, t(8, 4, dtype=I32), t(8, 4)))
expr("cumsum-float32", lambda: t(3, 1000).cumsum(1))
expr("cumsum-int32", lambda: t(257, dtype=I32).cumsum(0))
expr("cummax", lambda: t(7, 50).cummax(1)[0])
expr("pad", lambda: t(5, 7).pad(((1, 2), (3, 0)), value=-1.0) + 1)
expr("shrink", lambda: t(20, 30)[3:17, 5:25:3] * 2)
expr("permute", lambda: t(4, 5, 6).permute(2, 0, 1).contiguous())
expr("expand", lambda: t(1, 7).expand(9, 7) + t(9, 1))
expr("flip", lambda: t(6, 9).flip(1) - t(6, 9))
expr("repeat-cat-stack", lambda: [t(3, 4).repeat(2, 3), t(3, 4).cat(t(5, 4)), Tensor.stack(t(3, 4), t(3, 4))])
expr("transpose-bf16", lambda: t(31, 17, dtype=BF16).T.contiguous())
expr("arange-eye-triu", lambda: [Tensor.arange(100, device=D), Tensor.eye(9, device=D), t(8, 8).triu(1)])
expr("rand", lambda: Tensor.rand(1000, device=D))
expr("interpolate", lambda: t(1, 2, 8, 8).interpolate((13, 5)))
expr("sort", lambda: t(4, 16).sort(1)[0])

# ---- symbolic sizes, 64-bit indices, launch shapes ----
expr("symbolic-elementwise", lambda: t(8, 4)[:Variable("n", 1, 8).bind(3)] * 2 + 1)
expr("symbolic-reduce", lambda: t(8, 4)[:Variable("n", 1, 8).bind(5)].sum(0))
expr("symbolic-matmul", lambda: t(8, 16)[:Variable("n", 1, 8).bind(5)] @ t(16, 4))
expr("index-int64", lambda: t(3, 1 << 30, dtype=U8) + 1)  # 3 GiB of elements: ids and indices in 64 bits
expr("grid-tall", lambda: t(3, 70000, 2) + 1)  # many work-items along y: AMD has no 65535 limit there
expr("launch-1d-odd", lambda: t(65537) * 3 + 1)


def _grads(fn: Callable[[Tensor, Tensor], Tensor], a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> list[Tensor]:
    a, b = Tensor.empty(*a_shape, device=D, requires_grad=True), Tensor.empty(*b_shape, device=D, requires_grad=True)
    fn(a, b).backward()
    assert a.grad is not None and b.grad is not None
    return [a.grad, b.grad]


@pytest.fixture(scope="module")
def standin(amd_tools: None) -> Iterator[amd_standin.CompileCheckDevice]:
    """AMDCC registered for this module's tests (and gone after them)."""
    amd_standin.register()
    try:
        dev = Device[D]
        assert isinstance(dev, amd_standin.CompileCheckDevice)
        yield dev
    finally:
        Device.unregister(D)


def kernels_of(result: Tensor | list[Tensor]) -> list:
    outs = result if isinstance(result, list) else [result]
    return [si.ast for si in Tensor.schedule(*outs) if not si.is_copy]


@pytest.mark.parametrize("name", list(EXPRESSIONS))
def test_expression_compiles_for_gfx942_and_gfx1100(standin: amd_standin.CompileCheckDevice, name: str) -> None:
    asts = kernels_of(EXPRESSIONS[name]())
    assert asts, f"{name} scheduled no kernel"
    failures = []
    for ast in asts:
        spec = get_program(ast, standin.renderer)
        for r in amd_standin.check_source(spec.src, standin.compilers):
            if r["stage"] != "ok":
                failures.append(f"{spec.name} on {r['arch']}: {r['stage']} failed\n{r['error']}")
    assert not failures, "\n\n".join(failures)


def test_the_table_covers_every_op_family() -> None:
    families = {name.split("-")[0] for name in EXPRESSIONS}
    assert {"add", "where", "cast", "bitcast", "sum", "matmul", "conv2d", "gather", "cumsum", "pad", "shrink",
            "permute", "expand", "symbolic"} <= families
    assert len(EXPRESSIONS) >= 100


# ---- the conformance kit and the op table, run on the stand-in in a subprocess ----

def run_on_standin(args: list[str], tmp_path: Path, env: dict[str, str] | None = None,
                   timeout: float = 3000) -> tuple[str, list[dict]]:
    """Run pytest with the stand-in plugin; returns its output and the compile records of every kernel."""
    records = tmp_path / "records"
    records.mkdir()
    pythonpath = os.pathsep.join([str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])])
    run_env = {**os.environ, **(env or {}), amd_standin.PLUGIN_ENV: "1", amd_standin.RECORD_ENV: str(records),
               amd_standin.ARCHS_ENV: ",".join(ARCHS), "PYTHONPATH": pythonpath,
               "TINYGRAD_CACHE_DIR": str(tmp_path / "cache")}
    workers = os.environ.get("PYTEST_WORKERS", "2")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "amd_standin", "-p", "no:cacheprovider", "-q",
                           "-n", workers, *args], cwd=ROOT, env=run_env, capture_output=True, text=True,
                          timeout=timeout)
    found = [json.loads(line) for f in sorted(records.glob("*.jsonl")) for line in f.read_text().splitlines()]
    return proc.stdout + proc.stderr, found


def summarize(records: list[dict]) -> tuple[dict[str, collections.Counter], list[str]]:
    """Per architecture: unique kernels by outcome; and a line per failure (one per kernel and stage)."""
    per_arch: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    seen: set[tuple[str, str]] = set()
    failures = []
    for r in records:
        if (r["key"], r["arch"]) in seen:  # xdist workers compile the same kernel once each
            continue
        seen.add((r["key"], r["arch"]))
        per_arch[r["arch"]][r["stage"]] += 1
        if r["stage"] != "ok":
            failures.append(f"{r['kernel']} on {r['arch']}: {r['stage']} failed\n{r['error'][:4000]}")
    return per_arch, failures


def _require_tables() -> None:
    if os.environ.get(TABLES_ENV) != "1":
        pytest.skip(f"compiling every kernel of the conformance kit and the op table takes minutes: set "
                    f"{TABLES_ENV}=1 (`nox -s backend_amd` does)")


def _last_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def test_conformance_kit_kernels_compile(amd_tools: None, tmp_path: Path) -> None:
    _require_tables()
    output, records = run_on_standin(["--pyargs", "tinygrad.conformance", f"--tg-device={D}", "--tg-quick"],
                                     tmp_path)
    per_arch, failures = summarize(records)
    print(f"conformance kit on {D}: {_last_line(output)}; kernels per arch: "
          f"{ {a: dict(c) for a, c in per_arch.items()} }")
    assert set(per_arch) == set(ARCHS), output[-3000:]
    assert all(sum(c.values()) >= 100 for c in per_arch.values()), (per_arch, output[-3000:])
    assert not failures, f"{len(failures)} failures:\n\n" + "\n\n".join(failures[:20])


def test_op_table_kernels_compile(amd_tools: None, tmp_path: Path) -> None:
    _require_tables()
    output, records = run_on_standin([str(ROOT / "packages/tg-core/tests/test_ops.py")], tmp_path, env={"DEV": D})
    per_arch, failures = summarize(records)
    print(f"op table on {D}: {_last_line(output)}; kernels per arch: {({a: dict(c) for a, c in per_arch.items()})}")
    assert set(per_arch) == set(ARCHS), output[-3000:]
    assert all(sum(c.values()) >= 200 for c in per_arch.values()), (per_arch, output[-3000:])
    assert not failures, f"{len(failures)} failures:\n\n" + "\n\n".join(failures[:20])
