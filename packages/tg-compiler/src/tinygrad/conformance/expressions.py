"""A table of Tensor expressions whose kernels compile-only mode builds (the kit's group `expressions`).

Every unary, binary and ternary op over float32, float16, bfloat16, int32, int64, uint8 and bool, casts and bit
casts (the 8-bit floats and float64 included), reductions (GROUP reductions in local memory among them), matmuls,
convolutions and their gradients, pooling, attention, gathers, scatters, scans, views, random numbers, symbolic
sizes, 64-bit indices and a launch past 65535 work-items along y. Inputs are `Tensor.empty`: nothing is read or
computed, so sizes cost nothing (`index-int64` views 3 GiB).

`build(name, device)` returns the kernel ASTs of one expression as scheduled for `device`; the names are the keys
of `EXPRESSIONS`. A backend's own tests may use it with a stand-in device (`tinygrad.conformance.standin`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from tinygrad import Tensor, Variable
from tinygrad.dtype import DType, dtypes
from tinygrad.uop.ops import UOp

_DEVICE: list[str] = []  # the device of the expression being built (a stack: build() sets it)


def _device() -> str:
    if not _DEVICE:
        raise RuntimeError("an expression is built with build(name, device)")
    return _DEVICE[-1]


@contextlib.contextmanager
def _on(device: str) -> Iterator[None]:
    _DEVICE.append(device)
    try:
        yield
    finally:
        _DEVICE.pop()


F32, F16, BF16, F64 = dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64
I32, I64, U8, BOOL = dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.bool
FLOATS = (F32, F16, BF16)
INTS = (I32, I64, U8)


def t(*shape: int, dtype: DType = F32) -> Tensor:
    """An input on the device being built for: a buffer that is never filled (the table only builds kernels)."""
    return Tensor.empty(*shape, dtype=dtype, device=_device())


Expr = Callable[[], Tensor | list[Tensor]]
EXPRESSIONS: dict[str, Expr] = {}


def expr(name: str, fn: Expr) -> None:
    assert name not in EXPRESSIONS, name
    EXPRESSIONS[name] = fn


def _of(fn: Callable[[DType], Tensor | list[Tensor]], d: DType) -> Expr:
    return lambda: fn(d)


def _of2(fn: Callable[[DType, DType], Tensor], frm: DType, to: DType) -> Expr:
    return lambda: fn(frm, to)


def _n(value: int) -> UOp:
    """The symbolic size n in [1, 8], bound to `value`."""
    return Variable("n", 1, 8).bind(value)  # type: ignore[attr-defined,no-any-return]


def _tensor(x: object) -> Tensor:
    assert isinstance(x, Tensor)
    return x


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
    expr(f"where-{d.name}", _of(lambda d: t(33, 7, dtype=BOOL).where(t(33, 7, dtype=d), t(33, 7, dtype=d)), d))
for d in (F64, dtypes.int8, dtypes.int16, dtypes.uint16, dtypes.uint32, dtypes.uint64):
    expr(f"arith-{d.name}",
         _of(lambda d: (t(65, dtype=d) * t(65, dtype=d) + t(65, dtype=d)).maximum(t(65, dtype=d)), d))
expr("mulacc-float32", lambda: t(64) * t(64) + t(64))
expr("lerp-float16", lambda: t(64, dtype=F16).lerp(t(64, dtype=F16), 0.25))

# ---- casts and bit casts ----
CASTS = [(F32, F16), (F32, BF16), (F32, I32), (F32, I64), (F32, U8), (F32, BOOL), (F16, F32), (BF16, F32),
         (F16, BF16), (BF16, F16), (I64, F16), (I32, BF16), (U8, F32), (BOOL, F16), (F64, F16), (F64, BF16),
         (F64, F32), (F16, F64), (F32, dtypes.fp8e4m3), (dtypes.fp8e4m3, F32), (F64, dtypes.fp8e5m2),
         (dtypes.fp8e5m2, F16), (I64, I32), (dtypes.uint64, F64), (dtypes.int8, U8)]
for frm, to in CASTS:
    expr(f"cast-{frm.name}-{to.name}", _of2(lambda frm, to: t(65, dtype=frm).cast(to), frm, to))
BITCASTS = [(F32, I32), (I32, F32), (F32, dtypes.uint32), (F16, dtypes.int16), (dtypes.uint16, F16), (BF16, F16),
            (BF16, dtypes.uint16), (dtypes.int16, BF16), (F64, I64), (dtypes.uint64, F64), (dtypes.fp8e4m3, U8),
            (U8, dtypes.fp8e5m2), (dtypes.int8, U8)]
for frm, to in BITCASTS:
    expr(f"bitcast-{frm.name}-{to.name}", _of2(lambda frm, to: t(65, dtype=frm).bitcast(to), frm, to))

# ---- reductions ----
for d in (*FLOATS, *INTS):
    expr(f"sum-{d.name}", _of(lambda d: t(13, 257, dtype=d).sum(1), d))
    expr(f"max-{d.name}", _of(lambda d: t(13, 257, dtype=d).max(0), d))
expr("sum-all-large", lambda: t(1 << 20).sum())
expr("sum-grouped", lambda: t(8, 8192).sum(1))  # few outputs, a long axis: a GROUP reduction in local memory
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
    expr(f"matmul-{d.name}", _of(lambda d: t(64, 64, dtype=d) @ t(64, 64, dtype=d), d))
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
expr("max-pool", lambda: _tensor(t(1, 3, 16, 16).max_pool2d()))
expr("avg-pool", lambda: t(1, 3, 15, 15).avg_pool2d(kernel_size=3, stride=2))
expr("attention-float16", lambda: t(1, 2, 16, 32, dtype=F16).scaled_dot_product_attention(
    t(1, 2, 16, 32, dtype=F16), t(1, 2, 16, 32, dtype=F16), is_causal=True))

# ---- indexing, scans, views ----
expr("gather", lambda: t(16, 32).gather(1, t(16, 5, dtype=I32)))
expr("fancy-index", lambda: t(100, 8)[t(20, dtype=I32)])
expr("one-hot", lambda: (Tensor.arange(50, device=_device()) % 10).one_hot(10))
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
expr("arange-eye-triu", lambda: [Tensor.arange(100, device=_device()), Tensor.eye(9, device=_device()),
                                 t(8, 8).triu(1)])
expr("rand", lambda: Tensor.rand(1000, device=_device()))
expr("interpolate", lambda: t(1, 2, 8, 8).interpolate((13, 5)))
expr("sort", lambda: t(4, 16).sort(1)[0])

# ---- symbolic sizes, 64-bit indices, launch shapes ----
expr("symbolic-elementwise", lambda: t(8, 4)[:_n(3)] * 2 + 1)
expr("symbolic-reduce", lambda: t(8, 4)[:_n(5)].sum(0))
expr("symbolic-matmul", lambda: t(8, 16)[:_n(5)] @ t(16, 4))
expr("index-int64", lambda: t(3, 1 << 30, dtype=U8) + 1)  # 3 GiB of elements: ids and indices in 64 bits
expr("grid-tall", lambda: t(3, 70000, 2) + 1)  # 70000 work-items along y: past CUDA's 65535 blocks there
expr("launch-1d-odd", lambda: t(65537) * 3 + 1)


def _grads(fn: Callable[[Tensor, Tensor], Tensor], a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> list[Tensor]:
    a = Tensor.empty(*a_shape, device=_device(), requires_grad=True)
    b = Tensor.empty(*b_shape, device=_device(), requires_grad=True)
    fn(a, b).backward()
    assert a.grad is not None and b.grad is not None
    return [a.grad, b.grad]


def build(name: str, device: str) -> list[UOp]:
    """The kernel ASTs (copies left out) the scheduler makes for expression `name` on `device`; nothing runs."""
    with _on(device):
        result = EXPRESSIONS[name]()
        outs = result if isinstance(result, list) else [result]
        return [si.ast for si in Tensor.schedule(*outs) if not si.is_copy]


def families() -> set[str]:
    """The op families of the table ("add", "cast", "matmul", ...)."""
    return {name.split("-")[0] for name in EXPRESSIONS}
