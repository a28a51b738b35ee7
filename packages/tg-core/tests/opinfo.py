"""The op-info table machinery shared by the test_ops*.py files.

Each `OpCase` names an op, how tinygrad (and, by default, PyTorch - the APIs mirror each other) and
numpy compute it, the argument shapes and dtypes to try, the input domain and the tolerance. A test
file lists its cases and parametrizes `check_forward` (values against numpy, result dtype against
PyTorch) and `check_backward` (gradients against PyTorch) over them, so a new op is one new row.

An argument shape may be wrapped to feed a non-contiguous view into the op instead of a fresh
buffer: `P(...)` a permuted tensor, `S(...)` a strided slice, `F(...)` a flipped one, `M(...)` all three
at once. The wrapped shape is the shape the op sees. (Every distinct shape is a kernel to compile, so the
shape lists are short on purpose.)
"""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from tinygrad import Device, Tensor, dtypes
from tinygrad.dtype import DType, to_numpy

try:
    import torch as _torch
except ImportError:  # the forward tests still run; gradient tests skip
    _torch = None

F16, F32, F64 = dtypes.float16, dtypes.float32, dtypes.float64
I32, I64, U8, BOOL = dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.bool


# ---------------------------------------------------------------------------------------------------------------------
# inputs: shapes, views and domains

@dataclass(frozen=True)
class View:
    """An argument that reaches the op as a non-contiguous view of a larger or reordered buffer."""
    kind: str  # "permuted" | "sliced" | "flipped" | "mixed"
    shape: tuple[int, ...]

    def __repr__(self) -> str:
        return self.kind[0].upper() + _fmt_shape(self.shape)


def P(*shape: int) -> View: return View("permuted", shape)
def S(*shape: int) -> View: return View("sliced", shape)
def F(*shape: int) -> View: return View("flipped", shape)
def M(*shape: int) -> View: return View("mixed", shape)


Spec = tuple[int, ...] | View


def _fmt_shape(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) if shape else "scalar"


def fmt_spec(spec: Spec) -> str:
    return repr(spec) if isinstance(spec, View) else _fmt_shape(spec)


def base_shape(spec: Spec) -> tuple[int, ...]:
    if not isinstance(spec, View):
        return spec
    if spec.kind == "permuted":
        return spec.shape[::-1]
    if spec.kind == "sliced":
        return tuple(2 * s + 1 for s in spec.shape)
    if spec.kind == "mixed":
        return tuple(2 * s + 1 for s in spec.shape[::-1])
    return spec.shape


def apply_view(x: Any, spec: Spec, lib: str) -> Any:
    """The same view in numpy ("np"), tinygrad ("tg") or torch ("torch")."""
    if not isinstance(spec, View):
        return x
    axes = tuple(range(len(spec.shape)))
    if spec.kind in ("sliced", "mixed"):
        x = x[tuple(slice(1, None, 2) for _ in axes)]
    if spec.kind in ("permuted", "mixed"):
        x = x.transpose(axes[::-1]) if lib == "np" else x.permute(axes[::-1])
    if spec.kind in ("flipped", "mixed"):
        x = np.flip(x, axes) if lib == "np" else x.flip(axes)
    return x


Domain = tuple[float, float] | Callable[[np.random.Generator, tuple[int, ...], np.dtype], np.ndarray]


def nonzero(lo: float, hi: float) -> Domain:
    """Magnitudes in [lo, hi] with a random sign (unsigned dtypes stay positive)."""
    def gen(rng: np.random.Generator, shape: tuple[int, ...], nd: np.dtype) -> np.ndarray:
        if nd.kind in "iu":
            mag = rng.integers(int(lo), int(hi), size=shape, endpoint=True)
        else:
            mag = rng.uniform(lo, hi, size=shape)
        sign = np.ones(shape) if nd.kind == "u" else rng.choice([-1, 1], size=shape)
        return (mag * sign).astype(nd)
    return gen


def integral(lo: int, hi: int) -> Domain:
    """Whole numbers in any dtype, so that comparisons meet ties."""
    def gen(rng: np.random.Generator, shape: tuple[int, ...], nd: np.dtype) -> np.ndarray:
        if nd.kind == "b":
            return rng.random(shape) < 0.5
        return rng.integers(max(lo, 0) if nd.kind == "u" else lo, hi, size=shape, endpoint=True).astype(nd)
    return gen


def make_data(domain: Domain, rng: np.random.Generator, shape: tuple[int, ...], dt: DType) -> np.ndarray:
    nd = to_numpy(dt)
    if callable(domain):
        return np.asarray(domain(rng, shape, nd)).astype(nd)
    lo, hi = domain
    if dt.is_bool:
        return rng.random(shape) < 0.5
    if dt.is_int:
        ilo, ihi = int(lo), int(hi)
        if dt.is_unsigned:
            ilo, ihi = max(ilo, 0), max(ihi, 0)
        return rng.integers(ilo, ihi, size=shape, endpoint=True).astype(nd)
    return rng.uniform(lo, hi, size=shape).astype(nd)


def rng_for(*key: Any) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


# ---------------------------------------------------------------------------------------------------------------------
# the table

@dataclass(frozen=True)
class OpCase:
    name: str
    fn: Callable[..., Any]  # the op on tinygrad tensors; also on torch tensors unless torch_fn is given
    np_fn: Callable[..., Any]
    shapes: Sequence[tuple[Spec, ...]]  # argument shapes; the first entry is also used for the other dtypes
    dtypes: Sequence[DType] = (F32,)
    torch_fn: Callable[..., Any] | None = None
    grad: bool = True  # compare the gradient with PyTorch (float32 only)
    domain: Domain | Sequence[Domain] = (-3.0, 3.0)  # one for all arguments, or one per argument
    arg_dtypes: Callable[[DType], tuple[DType, ...]] | None = None  # default: every argument in the case dtype
    out_dtype: Callable[[DType], DType] | None = None  # expected result dtype; default: whatever PyTorch returns
    atol: float = 1e-5
    rtol: float = 1e-5

    def domain_of(self, i: int) -> Domain:
        if callable(self.domain) or all(isinstance(v, (int, float)) for v in self.domain):
            return self.domain  # type: ignore[return-value]
        return self.domain[i]  # type: ignore[index]

    def dtypes_of(self, dt: DType, n: int) -> tuple[DType, ...]:
        return self.arg_dtypes(dt) if self.arg_dtypes is not None else (dt,) * n


# shape sets; the first entry of each is the plain case
UNARY: list[tuple[Spec, ...]] = [((3, 4),), ((),), ((0, 3),), ((2, 1, 3),), (M(2, 3),)]
BINARY: list[tuple[Spec, ...]] = [
    ((3, 4), (3, 4)), ((3, 1), (1, 4)), ((4,), (2, 3, 4)), ((), (3,)), ((0, 4), (1, 4)), ((1,), (0,)),
    (P(3, 4), S(3, 4)), (M(2, 3), F(1, 3)),
]
TERNARY: list[tuple[Spec, ...]] = [
    ((3, 4), (3, 4), (3, 4)), ((3, 1), (1, 4), ()), ((0, 4), (4,), (1,)), (F(3, 4), P(3, 4), S(3, 4)),
]
REDUCE: list[tuple[Spec, ...]] = [((3, 4),), ((2, 3, 4),), ((0, 3),), ((1, 3),), (M(3, 4),), (F(2, 3),)]



def torch_module() -> Any:
    """PyTorch if installed, else None (forward tests then check dtypes by their stated rule only)."""
    return _torch


def same(d: DType) -> DType:
    return d


def float_of(d: DType) -> DType:
    return d if d.is_float else F32


def sum_of(d: DType) -> DType:
    """tinygrad's dtype of a sum (PyTorch's is int64 for every integer)."""
    from tinygrad.dtype import sum_acc_dtype
    return sum_acc_dtype(d)


def cond_first(d: DType) -> tuple[DType, ...]:
    return (BOOL, d, d)


# ---------------------------------------------------------------------------------------------------------------------
# running a table: each test file parametrizes these over its own cases

def _tol(case: OpCase, dt: DType) -> tuple[float, float]:
    if dt in (F16, dtypes.bfloat16):
        return max(case.atol, 1e-2), max(case.rtol, 1e-2)
    return case.atol, case.rtol


def _inputs(case: OpCase, specs: tuple[Spec, ...], dt: DType) -> list[np.ndarray]:
    rng = rng_for(case.name, specs, dt)
    return [np.asarray(make_data(case.domain_of(i), rng, base_shape(s), adt))
            for i, (s, adt) in enumerate(zip(specs, case.dtypes_of(dt, len(specs)), strict=True))]


def _torch_dtype_name(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


def forward_params(cases: Sequence[OpCase]) -> list[Any]:
    assert len({c.name for c in cases}) == len(cases), "case names must be unique"
    params = []
    for case in cases:
        for dt in case.dtypes:
            # the first dtype runs every shape; the others the plain one, to bound the number of kernels
            for specs in (case.shapes if dt == case.dtypes[0] else case.shapes[:1]):
                name = f"{case.name}-{'-'.join(map(fmt_spec, specs))}-{dt.name}"
                params.append(pytest.param(case, specs, dt, id=name))
    return params


def skip_unless_device_has(dts: Iterable[DType], what: str) -> None:
    """Skip, naming the dtypes, when the default device lacks some of them (WEBGPU has no float64, for one)."""
    device = Device.DEFAULT
    missing = sorted({d.scalar.name for d in dts if d.kind != "void" and not Device[device].supports_dtype(d)})
    if missing:
        pytest.skip(f"device {device} does not support {', '.join(missing)} ({what})")


def check_forward(case: OpCase, specs: tuple[Spec, ...], dt: DType) -> None:
    skip_unless_device_has(case.dtypes_of(dt, len(specs)), "the case's inputs")
    bases = _inputs(case, specs, dt)
    np_args = [apply_view(b, s, "np") for b, s in zip(bases, specs, strict=True)]
    tg_args = [apply_view(Tensor(b), s, "tg") for b, s in zip(bases, specs, strict=True)]
    for t, b in zip(tg_args, np_args, strict=True):
        assert t.shape == b.shape and t.dtype.name == b.dtype.name

    out = case.fn(*tg_args)
    skip_unless_device_has((u.dtype for u in out.uop.toposort()), "the op computes with them")
    got = out.numpy()
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy warns about the mean of an empty slice
        ref = np.asarray(case.np_fn(*np_args))
    assert got.shape == ref.shape, f"shape {got.shape}, numpy gives {ref.shape}"
    assert got.dtype == to_numpy(out.dtype)

    if case.out_dtype is not None:
        assert out.dtype == case.out_dtype(dt), f"result dtype {out.dtype}, expected {case.out_dtype(dt)}"
    elif _torch is not None:
        targs = [apply_view(_torch.from_numpy(b.copy()), s, "torch") for b, s in zip(bases, specs, strict=True)]
        expected = _torch_dtype_name((case.torch_fn or case.fn)(*targs))
        assert out.dtype.name == expected, f"result dtype {out.dtype}, PyTorch gives {expected}"

    if out.dtype.is_float:
        atol, rtol = _tol(case, out.dtype)
        np.testing.assert_allclose(got, ref.astype(got.dtype) if ref.dtype.kind == "f" else ref, atol=atol, rtol=rtol,
                                   equal_nan=True)
    else:
        np.testing.assert_array_equal(got, ref.astype(got.dtype))


def backward_params(cases: Sequence[OpCase]) -> list[Any]:
    return [pytest.param(case, specs, id=f"{case.name}-{'-'.join(map(fmt_spec, specs))}")
            for case in cases if case.grad for specs in case.shapes]


def check_backward(case: OpCase, specs: tuple[Spec, ...], torch: Any) -> None:
    skip_unless_device_has(case.dtypes_of(F32, len(specs)), "the case's inputs")
    bases = _inputs(case, specs, F32)
    grads_of = [b.dtype == np.float32 for b in bases]
    tg_leaves = [Tensor(b, requires_grad=g) for b, g in zip(bases, grads_of, strict=True)]
    th_leaves = [torch.tensor(b, requires_grad=bool(g)) for b, g in zip(bases, grads_of, strict=True)]
    tg_out = case.fn(*[apply_view(t, s, "tg") for t, s in zip(tg_leaves, specs, strict=True)])
    th_out = (case.torch_fn or case.fn)(*[apply_view(t, s, "torch") for t, s in zip(th_leaves, specs, strict=True)])
    skip_unless_device_has((u.dtype for u in tg_out.uop.toposort()), "the op computes with them")
    assert tg_out.shape == tuple(th_out.shape)

    # a random upstream gradient, so that every output element's contribution is checked
    upstream = rng_for("upstream", case.name, specs).standard_normal(tg_out.shape).astype(np.float32)
    (tg_out * Tensor(upstream)).sum().backward()
    (th_out * torch.from_numpy(upstream)).sum().backward()

    for i, (tl, hl) in enumerate(zip(tg_leaves, th_leaves, strict=True)):
        if not grads_of[i]:
            assert tl.grad is None
            continue
        expected = hl.grad.numpy() if hl.grad is not None else np.zeros_like(bases[i])
        assert tl.grad is not None, f"argument {i} got no gradient"
        assert tl.grad.shape == tl.shape and tl.grad.dtype == tl.dtype
        np.testing.assert_allclose(tl.grad.numpy(), expected, atol=max(case.atol, 1e-5) * 10,
                                   rtol=max(case.rtol, 1e-5) * 10, err_msg=f"gradient of argument {i}")


def table_tests(cases: Sequence[OpCase]) -> tuple[Callable[..., None], Callable[..., None]]:
    """The two parametrized tests of a table; a test file binds them: `test_forward, test_backward = table_tests(C)`."""

    @pytest.mark.parametrize("case,specs,dt", forward_params(cases))
    def test_forward(case: OpCase, specs: tuple[Spec, ...], dt: DType) -> None:
        check_forward(case, specs, dt)

    @pytest.mark.parametrize("case,specs", backward_params(cases))
    def test_backward(case: OpCase, specs: tuple[Spec, ...], torch: Any) -> None:
        check_backward(case, specs, torch)

    return test_forward, test_backward
