"""The reference ALU (`tinygrad.uop.alu`) against numpy, op by op and dtype by dtype, on edge values.

bfloat16 has no numpy type: PyTorch is its reference (skipped where torch is not installed). Where our
definition deliberately differs from numpy, the expectation is adjusted in one named place and the reason
given there:

* MAX of -0.0 and +0.0 is +0.0 in either order (IEEE 754-2019 maximum, so MAX is commutative); numpy's
  maximum returns its second operand on ties.
* IDIV truncates toward zero (C), numpy's floor_divide floors; integer division by zero is 0.
* NEG of a bool is logical not (numpy refuses to negate bools).
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import numpy as np
import pytest
from tinygrad.dtype import DType, bf16_bits_to_float, dtypes, float_to_bf16_bits, to_numpy, truncate
from tinygrad.uop.alu import REFERENCE_OPS, exec_alu, exec_bitcast, exec_cast
from tinygrad.uop.ops import Ops

try:
    import torch
except ImportError:  # bfloat16 cases skip
    torch = None

ALL = dtypes.all()
NP_FLOATS = (dtypes.float16, dtypes.float32, dtypes.float64)
INTS = tuple(d for d in ALL if d.is_int)


def float_edges(d: DType) -> list[float]:
    raw = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 7.0, 1 / 3, -100.25, 2.0**-11, 1e-3, 1e4, 65504.0, 3.0e38, 1e-40,
           2.0**-24, math.inf, -math.inf, math.nan, 37575424.0, 6.71097469329834]
    out, seen = [], set()
    for v in raw:
        t = truncate(v, d)
        if struct.pack("<d", t) not in seen:
            seen.add(struct.pack("<d", t))
            out.append(t)
    return out


def int_edges(d: DType) -> list[int]:
    raw = [0, 1, -1, 2, -2, 3, 7, -7, d.bits - 1, d.bits, d.bits + 1, -(d.bits), 100, d.min, d.min + 1, d.max,
           d.max - 1]
    return sorted({truncate(v, d) for v in raw})


def pairs(vals: list) -> tuple[list, list]:
    return [a for a in vals for _ in vals], [b for _ in vals for b in vals]


def same_float(got: float, want: float, d: DType, ulps: int = 0) -> bool:
    if math.isnan(want) or math.isnan(got):
        return math.isnan(want) and math.isnan(got)
    if ulps == 0 or math.isinf(want) or math.isinf(got):
        return struct.pack("<d", float(got)) == struct.pack("<d", float(want))  # -0.0 != +0.0
    spacing = float(np.spacing(np.array(abs(want), dtype=to_numpy(d)))) if d != dtypes.bfloat16 else \
        abs(want) * 2.0**-7 + 2.0**-133
    return abs(got - want) <= ulps * spacing


def check_all(op: Ops, d: DType, operands: list[tuple], want: list, result_dtype: DType | None = None,
              ulps: int = 0) -> None:
    rd = result_dtype or d
    bad = []
    for ops_, w in zip(operands, want, strict=True):
        got = exec_alu(op, rd, ops_, d)
        ok = same_float(got, w, rd, ulps) if rd.is_float else (got == w and type(got) is type(w))
        if not ok:
            bad.append(f"{op.name}{ops_} = {got!r}, expected {w!r}")
    assert not bad, f"{len(bad)} mismatches on {d}:\n" + "\n".join(bad[:10])


# ---------------------------------------------------------------------------------------------------------------------
# floats against numpy

NP_BINARY = {Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.FDIV: np.divide, Ops.MOD: np.fmod,
             Ops.IDIV: lambda a, b: np.trunc(np.divide(a, b)), Ops.MAX: np.maximum}
NP_COMPARE = {Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal}
NP_UNARY = {Ops.NEG: np.negative, Ops.RECIPROCAL: np.reciprocal, Ops.SQRT: np.sqrt, Ops.TRUNC: np.trunc,
            Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin}
# numpy's SIMD exp2/log2/sin are not correctly rounded; the reference computes in float64 and rounds once
APPROX = {Ops.EXP2: 4, Ops.LOG2: 4, Ops.SIN: 4}


def _ieee_maximum_zeros(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """numpy.maximum, except that a tie of -0.0 and +0.0 gives +0.0 (our deliberate choice, see module doc)."""
    out = out.copy()
    zero_tie = (a == 0) & (b == 0)
    out[zero_tie] = np.where(np.signbit(a[zero_tie]) & np.signbit(b[zero_tie]), -0.0, 0.0)
    return out


@pytest.mark.parametrize("d", NP_FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("op", [*NP_BINARY, *NP_COMPARE], ids=lambda o: o.name)
def test_float_binary_against_numpy(op: Ops, d: DType) -> None:
    a, b = pairs(float_edges(d))
    na, nb = np.array(a, dtype=to_numpy(d)), np.array(b, dtype=to_numpy(d))
    with np.errstate(all="ignore"):
        if op in NP_COMPARE:
            want = [bool(x) for x in NP_COMPARE[op](na, nb)]
            check_all(op, d, list(zip(a, b, strict=True)), want, dtypes.bool)
            return
        out = NP_BINARY[op](na, nb)
    if op is Ops.MAX:
        out = _ieee_maximum_zeros(na, nb, out)
    check_all(op, d, list(zip(a, b, strict=True)), [float(x) for x in out])


@pytest.mark.parametrize("d", NP_FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("op", list(NP_UNARY), ids=lambda o: o.name)
def test_float_unary_against_numpy(op: Ops, d: DType) -> None:
    a = float_edges(d) + [truncate(v, d) for v in (-0.5, -1e-30, 2.75, 100.0, -3.5, 1e6)]
    with np.errstate(all="ignore"):
        out = NP_UNARY[op](np.array(a, dtype=to_numpy(d)))
    check_all(op, d, [(x,) for x in a], [float(x) for x in out], ulps=APPROX.get(op, 0))


def test_float_where_and_max_nan_propagation() -> None:
    nan = math.nan
    assert math.isnan(exec_alu(Ops.MAX, dtypes.float32, (nan, 1.0)))
    assert math.isnan(exec_alu(Ops.MAX, dtypes.float32, (1.0, nan)))
    assert exec_alu(Ops.WHERE, dtypes.float32, (True, -0.0, 1.0)) == 0.0
    assert math.copysign(1, exec_alu(Ops.WHERE, dtypes.float32, (True, -0.0, 1.0))) == -1


@pytest.mark.parametrize("d", [dtypes.float32, dtypes.float64], ids=lambda d: d.name)
def test_max_is_commutative_on_signed_zeros(d: DType) -> None:
    for a, b in ((-0.0, 0.0), (0.0, -0.0)):
        assert struct.pack("<d", exec_alu(Ops.MAX, d, (a, b))) == struct.pack("<d", 0.0)
    assert struct.pack("<d", exec_alu(Ops.MAX, d, (-0.0, -0.0))) == struct.pack("<d", -0.0)


def test_float_idiv_rounds_the_quotient_before_truncating() -> None:
    # 37575424 / 6.71097469... is 5599100.9997 in float64 but 5599101.0 once rounded to float32
    a, b = 37575424.0, 6.71097469329834
    want = float(np.trunc(np.float32(a) / np.float32(b)))
    assert exec_alu(Ops.IDIV, dtypes.float32, (a, b)) == want == 5599101.0
    assert exec_alu(Ops.IDIV, dtypes.float64, (a, b)) == math.trunc(a / b)


def test_trunc_keeps_the_sign_of_zero() -> None:
    for d in NP_FLOATS:
        got = exec_alu(Ops.TRUNC, d, (-0.5,))
        assert got == 0 and math.copysign(1.0, got) == -1.0


def test_float_division_by_zero() -> None:
    f = dtypes.float32
    assert exec_alu(Ops.FDIV, f, (1.0, 0.0)) == math.inf
    assert exec_alu(Ops.FDIV, f, (1.0, -0.0)) == -math.inf
    assert exec_alu(Ops.FDIV, f, (-1.0, 0.0)) == -math.inf
    assert math.isnan(exec_alu(Ops.FDIV, f, (0.0, 0.0)))
    assert exec_alu(Ops.RECIPROCAL, f, (-0.0,)) == -math.inf
    # overflow of the float64 computation rounds to inf instead of raising
    assert exec_alu(Ops.FDIV, f, (1e38, 1e-38)) == math.inf
    assert exec_alu(Ops.EXP2, f, (1e5,)) == math.inf
    assert exec_alu(Ops.MUL, dtypes.float64, (1e308, 10.0)) == math.inf


# ---------------------------------------------------------------------------------------------------------------------
# bfloat16 against PyTorch

TORCH_BINARY = {Ops.ADD: "add", Ops.SUB: "sub", Ops.MUL: "mul", Ops.FDIV: "div", Ops.MOD: "fmod",  # see below
                Ops.MAX: "maximum"}
TORCH_UNARY = {Ops.NEG: "neg", Ops.RECIPROCAL: "reciprocal", Ops.SQRT: "sqrt", Ops.TRUNC: "trunc",
               Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin"}


@pytest.mark.skipif(torch is None, reason="PyTorch is the bfloat16 reference and is not installed")
@pytest.mark.parametrize("op", [*TORCH_BINARY, Ops.IDIV, *TORCH_UNARY], ids=lambda o: o.name)
def test_bfloat16_against_torch(op: Ops) -> None:
    d = dtypes.bfloat16
    vals = float_edges(d)
    if op in TORCH_UNARY:
        ta = torch.tensor(vals, dtype=torch.float32).to(torch.bfloat16)
        out = getattr(torch, TORCH_UNARY[op])(ta).float().tolist()
        check_all(op, d, [(x,) for x in vals], out, ulps=1 if op in APPROX else 0)
        return
    a, b = pairs(vals)
    ta = torch.tensor(a, dtype=torch.float32).to(torch.bfloat16)
    tb = torch.tensor(b, dtype=torch.float32).to(torch.bfloat16)
    out_t = torch.trunc(ta / tb) if op is Ops.IDIV else getattr(torch, TORCH_BINARY[op])(ta, tb)
    out_np = out_t.float().numpy()
    if op is Ops.MOD:
        # fmod is exact, so float32's is bfloat16's too; torch's bfloat16 fmod is not (it overflows to NaN for
        # 3e38 % 0.5 and flushes subnormal divisors)
        with np.errstate(all="ignore"):
            out_np = np.fmod(np.array(a, dtype=np.float32), np.array(b, dtype=np.float32))
    if op is Ops.MAX:
        out_np = _ieee_maximum_zeros(np.array(a, dtype=np.float32), np.array(b, dtype=np.float32), out_np)
    check_all(op, d, list(zip(a, b, strict=True)), [float(x) for x in out_np])


# ---------------------------------------------------------------------------------------------------------------------
# integers against numpy (wrap-around) and exact rational arithmetic (truncating division)

NP_INT_BINARY = {Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.MAX: np.maximum,
                 Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or, Ops.XOR: np.bitwise_xor,
                 Ops.SHL: np.left_shift, Ops.SHR: np.right_shift, Ops.MOD: np.fmod}


def _wrap(v: int, d: DType) -> int:
    return int(np.array(v & ((1 << d.bits) - 1), dtype=np.uint64).astype(to_numpy(d)))


@pytest.mark.parametrize("d", INTS, ids=lambda d: d.name)
@pytest.mark.parametrize("op", list(NP_INT_BINARY), ids=lambda o: o.name)
def test_int_binary_against_numpy(op: Ops, d: DType) -> None:
    a, b = pairs(int_edges(d))
    if op in (Ops.SHL, Ops.SHR):
        # numpy defines shifts by >= the width (0, or -1 for a negative value shifted right) like we do, and a
        # negative amount the same way; in C all of these are undefined
        pass
    with np.errstate(all="ignore"):
        out = NP_INT_BINARY[op](np.array(a, dtype=to_numpy(d)), np.array(b, dtype=to_numpy(d)))
    check_all(op, d, list(zip(a, b, strict=True)), [int(x) for x in out])


@pytest.mark.parametrize("d", INTS, ids=lambda d: d.name)
def test_int_idiv_truncates_toward_zero(d: DType) -> None:
    a, b = pairs(int_edges(d))
    want = [_wrap(int(Fraction(x, y)), d) if y else 0 for x, y in zip(a, b, strict=True)]  # int(Fraction) truncates
    check_all(Ops.IDIV, d, list(zip(a, b, strict=True)), want)


@pytest.mark.parametrize("d", [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64], ids=lambda d: d.name)
def test_min_int_divided_by_minus_one_wraps(d: DType) -> None:
    assert exec_alu(Ops.IDIV, d, (d.min, -1)) == d.min
    assert exec_alu(Ops.MOD, d, (d.min, -1)) == 0
    assert exec_alu(Ops.NEG, d, (d.min,)) == d.min
    assert exec_alu(Ops.MUL, d, (d.min, -1)) == d.min


@pytest.mark.parametrize("d", INTS, ids=lambda d: d.name)
def test_int_division_by_zero_is_zero(d: DType) -> None:
    for x in int_edges(d):
        assert exec_alu(Ops.IDIV, d, (x, 0)) == 0
        assert exec_alu(Ops.MOD, d, (x, 0)) == 0


@pytest.mark.parametrize("d", INTS, ids=lambda d: d.name)
@pytest.mark.parametrize("op", [Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ], ids=lambda o: o.name)
def test_int_compare_against_numpy(op: Ops, d: DType) -> None:
    a, b = pairs(int_edges(d))
    out = NP_COMPARE[op](np.array(a, dtype=to_numpy(d)), np.array(b, dtype=to_numpy(d)))
    check_all(op, d, list(zip(a, b, strict=True)), [bool(x) for x in out], dtypes.bool)


@pytest.mark.parametrize("d", INTS, ids=lambda d: d.name)
def test_int_neg_wraps_like_numpy(d: DType) -> None:
    a = int_edges(d)
    with np.errstate(all="ignore"):
        out = np.negative(np.array(a, dtype=to_numpy(d)))
    check_all(Ops.NEG, d, [(x,) for x in a], [int(x) for x in out])


@pytest.mark.parametrize("d", [dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.uint64], ids=lambda d: d.name)
def test_shifts_past_the_width(d: DType) -> None:
    for amount in (d.bits, d.bits + 1, 64, 1000):
        assert exec_alu(Ops.SHL, d, (1, amount)) == 0
        assert exec_alu(Ops.SHR, d, (truncate(-5, d), amount)) == (-1 if not d.is_unsigned else 0)
    if not d.is_unsigned:
        assert exec_alu(Ops.SHL, d, (1, -1)) == 0
        assert exec_alu(Ops.SHR, d, (-8, -1)) == -1
    assert exec_alu(Ops.SHL, d, (1, d.bits - 1)) == truncate(1 << (d.bits - 1), d)


# ---------------------------------------------------------------------------------------------------------------------
# bool

def test_bool_ops() -> None:
    b = dtypes.bool
    tf = [False, True]
    for x in tf:
        assert exec_alu(Ops.NEG, b, (x,)) is (not x)  # logical not: numpy refuses to negate bools
        for y in tf:
            assert exec_alu(Ops.AND, b, (x, y)) is bool(np.logical_and(x, y))
            assert exec_alu(Ops.OR, b, (x, y)) is bool(np.logical_or(x, y))
            assert exec_alu(Ops.XOR, b, (x, y)) is bool(np.logical_xor(x, y))
            assert exec_alu(Ops.MAX, b, (x, y)) is bool(np.maximum(x, y))
            assert exec_alu(Ops.CMPLT, b, (x, y)) is bool(np.less(x, y))
            assert exec_alu(Ops.ADD, b, (x, y)) is bool(np.add(x, y))  # numpy's bool add is or
            assert exec_alu(Ops.MUL, b, (x, y)) is bool(np.multiply(x, y))


def test_every_reference_op_is_covered() -> None:
    covered = set(NP_BINARY) | set(NP_COMPARE) | set(NP_UNARY) | set(NP_INT_BINARY) | {Ops.WHERE, Ops.IDIV}
    assert REFERENCE_OPS <= covered, REFERENCE_OPS - covered


def test_unknown_op_raises() -> None:
    with pytest.raises(NotImplementedError, match="REDUCE_AXIS"):
        exec_alu(Ops.REDUCE_AXIS, dtypes.float32, (1.0,))


# ---------------------------------------------------------------------------------------------------------------------
# casts and bitcasts against numpy's astype / view

def cast_sources(frm: DType, to: DType) -> list:
    if frm.is_bool:
        return [False, True]
    if frm.is_int:
        return sorted({truncate(v, frm) for v in [*int_edges(frm), 2**60 + 2**36 + 1, -(2**60 + 2**36 + 1),
                                                   2**24 + 1, 2**53 + 1, 65519, 65520, 300]})
    vals = float_edges(frm) + [truncate(v, frm) for v in (255.9, -128.5, 127.0, -0.75, 2.0**31 - 128, 1e19)]
    if to.is_int:  # C leaves float -> int undefined outside the int's range
        vals = [v for v in vals if math.isfinite(v) and to.min <= math.trunc(v) <= to.max]
    return vals


NP_DTYPES = [d for d in ALL if d not in (dtypes.bfloat16, *dtypes.fp8s)]  # the 8-bit floats: test_fp8.py


@pytest.mark.parametrize("frm", NP_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("to", NP_DTYPES, ids=lambda d: d.name)
def test_cast_against_numpy(frm: DType, to: DType) -> None:
    vals = cast_sources(frm, to)
    with np.errstate(all="ignore"):
        out = np.array(vals, dtype=to_numpy(frm)).astype(to_numpy(to))
    bad = []
    for v, w in zip(vals, out.tolist(), strict=True):
        got = exec_cast(v, to)
        ok = same_float(got, w, to) if to.is_float else (got == w)
        if not ok:
            bad.append(f"{v!r} -> {got!r}, numpy {w!r}")
    assert not bad, f"{frm} -> {to}:\n" + "\n".join(bad[:10])


def test_int64_to_float32_rounds_once() -> None:
    # via float64 this would round twice: 2**60 + 2**36 + 1 -> 2**60 + 2**36 (a float32 tie) -> 2**60
    v = 2**60 + 2**36 + 1
    assert exec_cast(v, dtypes.float32) == float(np.float32(np.int64(v))) == 2.0**60 + 2.0**37
    assert exec_cast(-v, dtypes.float32) == -(2.0**60 + 2.0**37)
    assert exec_cast(v, dtypes.float64) == float(np.float64(np.int64(v)))


@pytest.mark.skipif(torch is None, reason="PyTorch is the bfloat16 reference and is not installed")
@pytest.mark.parametrize("other", NP_DTYPES, ids=lambda d: d.name)
def test_bfloat16_casts_against_torch(other: DType) -> None:
    tdt = getattr(torch, other.name)
    # into bfloat16 (float32 sources only where torch rounds the same way: float64 goes through float32 in both)
    vals = cast_sources(other, dtypes.bfloat16)
    if other in (dtypes.int64, dtypes.uint64):
        vals = [v for v in vals if abs(v) < 2**53]  # torch converts these through float64, we through float32
    if other == dtypes.uint64:
        vals = [v for v in vals if v < 2**63]
    src = torch.tensor(vals, dtype=tdt if other != dtypes.uint64 else torch.int64)
    want = src.to(torch.bfloat16).float().tolist()
    for v, w in zip(vals, want, strict=True):
        assert same_float(exec_cast(v, dtypes.bfloat16), w, dtypes.bfloat16), (v, w)
    # out of bfloat16
    bvals = cast_sources(dtypes.bfloat16, other)
    if other == dtypes.uint64:  # torch has no uint64 conversion; int64 agrees on the values both hold
        bvals, tdt = [v for v in bvals if v < 2**63], torch.int64
    out = torch.tensor(bvals, dtype=torch.float32).to(torch.bfloat16).to(tdt).tolist()
    for v, w in zip(bvals, out, strict=True):
        got = exec_cast(v, other)
        assert (same_float(got, w, other) if other.is_float else got == w), (v, got, w)


SAME_SIZE = [(f, t) for f in NP_DTYPES for t in NP_DTYPES if f.itemsize == t.itemsize and f != t
             and not f.is_bool and not t.is_bool]


@pytest.mark.parametrize("frm,to", SAME_SIZE, ids=[f"{f.name}-{t.name}" for f, t in SAME_SIZE])
def test_bitcast_against_numpy_view(frm: DType, to: DType) -> None:
    vals = [v for v in (float_edges(frm) if frm.is_float else int_edges(frm)) if not (
        isinstance(v, float) and math.isnan(v))]
    out = np.array(vals, dtype=to_numpy(frm)).view(to_numpy(to)).tolist()
    for v, w in zip(vals, out, strict=True):
        got = exec_bitcast(v, frm, to)
        assert (same_float(got, w, to) if to.is_float else got == w), (v, got, w)


def test_bitcast_bfloat16_bits() -> None:
    assert exec_bitcast(1.0, dtypes.bfloat16, dtypes.int16) == 0x3F80
    assert exec_bitcast(-2.0, dtypes.bfloat16, dtypes.uint16) == 0xC000
    assert exec_bitcast(0x3F80, dtypes.uint16, dtypes.bfloat16) == 1.0
    assert exec_bitcast(0x3C00, dtypes.uint16, dtypes.float16) == 1.0
    with pytest.raises(TypeError, match="one size"):
        exec_bitcast(1.0, dtypes.float32, dtypes.float16)


# ---------------------------------------------------------------------------------------------------------------------
# rounding into the narrow float types (dtype.truncate)

def test_float16_rounding_matches_numpy() -> None:
    rng = np.random.default_rng(1)
    vals = np.concatenate([rng.standard_normal(2000) * 10.0 ** rng.integers(-8, 6, 2000),
                           [1 + 2**-11, 1 + 3 * 2**-11, 65504.0, 65519.99, 65520.0, 2.0**-25, 2.0**-25 * 1.0001,
                            -0.0, 1e-9]])
    with np.errstate(over="ignore"):
        want = vals.astype(np.float16).astype(np.float64)
    for v, w in zip(vals.tolist(), want.tolist(), strict=True):
        assert same_float(truncate(v, dtypes.float16), w, dtypes.float16), (v, w)


@pytest.mark.skipif(torch is None, reason="PyTorch is the bfloat16 reference and is not installed")
def test_bfloat16_rounding_matches_torch() -> None:
    rng = np.random.default_rng(2)
    vals = np.concatenate([(rng.standard_normal(2000) * 10.0 ** rng.integers(-30, 30, 2000)).astype(np.float32),
                           np.array([1 + 2**-8, 1 + 3 * 2**-8, 3.39e38, 3.4e38, -0.0, np.inf, -np.inf],
                                    dtype=np.float32)])
    want = torch.from_numpy(vals).to(torch.bfloat16).float().tolist()
    for v, w in zip(vals.tolist(), want, strict=True):
        got = truncate(v, dtypes.bfloat16)
        assert same_float(got, w, dtypes.bfloat16), (v, got, w)
        assert bf16_bits_to_float(float_to_bf16_bits(got)) == got or math.isnan(got)
    assert math.isnan(truncate(math.nan, dtypes.bfloat16))
