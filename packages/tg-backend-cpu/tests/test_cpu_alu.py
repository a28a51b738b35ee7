"""Every required ALU op, CAST and BITCAST on every dtype the CPU backend claims, against the reference ALU.

Kernels are built directly as kernel ASTs - `SINK(STORE(PARAM(0), op(PARAM(i), ...)), ...)`, the form the
scheduler emits - and launched through `Device["CPU"].get_runner(ast)` with `Buffer`s, so this exercises the
renderer contract without the Tensor layer. Inputs are edge values (NaN, +-inf, -0.0, subnormals, MIN/MAX,
shift amounts past the width, zero divisors) crossed pairwise; expectations come from
`tinygrad.uop.alu.exec_alu`/`exec_cast`/`exec_bitcast` (themselves checked against numpy in tg-core's
test_alu.py). One kernel per dtype carries all of that dtype's ops (a C compile costs ~50-100 ms), and each
(op, dtype) pair is still its own test.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from tinygrad.device import Buffer, Device
from tinygrad.dtype import DType, bits_to_float, dtypes, encode_floats, is_emulated_float, to_numpy, truncate
from tinygrad.uop.alu import exec_alu, exec_bitcast, exec_cast
from tinygrad.uop.ops import Ops, UOp

ALL = dtypes.all()
FLOATS = tuple(d for d in ALL if d.is_float)
INTS = tuple(d for d in ALL if d.is_int)

FLOAT_BINARY = (Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)
FLOAT_UNARY = (Ops.NEG, Ops.RECIPROCAL, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC)
INT_BINARY = (Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ,
              Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR)
INT_UNARY = (Ops.NEG,)
BOOL_BINARY = (Ops.AND, Ops.OR, Ops.XOR, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)
BOOL_UNARY = (Ops.NEG,)
# libm's transcendental functions are not correctly rounded; everything else must match bit for bit
APPROX_ULPS = {Ops.EXP2: 2, Ops.LOG2: 2, Ops.SIN: 2}


def ops_for(d: DType) -> tuple[tuple[Ops, ...], tuple[Ops, ...]]:
    if d.is_float:
        return FLOAT_BINARY, FLOAT_UNARY
    if d.is_int:
        return INT_BINARY, INT_UNARY
    return BOOL_BINARY, BOOL_UNARY


# ---------------------------------------------------------------------------------------------------------------------
# edge values, as the Python numbers a buffer of that dtype holds

def _dedup_bits(values: Sequence[float | int | bool], d: DType) -> list[float | int | bool]:
    seen, out = set(), []
    for v in values:
        key = struct.pack("<d", v) if isinstance(v, float) else v
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


def edge_values(d: DType) -> list[float | int | bool]:
    if d.is_bool:
        return [False, True]
    if d.is_float:
        raw = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 7.0, 1 / 3, -100.25, 2.0**-11, 2.0**-8 + 2.0**-10, 1e-3, 1e4,
               65504.0, 3.0e38, 1e-40, 2.0**-24, math.inf, -math.inf, math.nan,
               37575424.0, 6.71097469329834]  # a pair whose float32 quotient rounds up to an integer
        if d == dtypes.float64:
            raw += [1e300, -1e-310, 2.0**1023]
        return _dedup_bits([truncate(v, d) for v in raw], d)
    bits = d.bits
    raw = [0, 1, -1, 2, -2, 3, 7, -7, 8, bits - 1, bits, bits + 1, 100, d.min, d.min + 1, d.max, d.max - 1]
    return _dedup_bits([truncate(v, d) for v in raw], d)


def to_buffer_array(values: Sequence[float | int | bool], d: DType) -> np.ndarray:
    """What a buffer of dtype d holds for these values (bfloat16 and the 8-bit floats as their raw bits)."""
    if is_emulated_float(d):
        return encode_floats([float(v) for v in values], d)
    return np.array(values, dtype=to_numpy(d))


def from_buffer_array(arr: np.ndarray, d: DType) -> list[float | int | bool]:
    if is_emulated_float(d):
        return [bits_to_float(int(b), d) for b in arr]
    return [v.item() for v in arr]


# ---------------------------------------------------------------------------------------------------------------------
# building and launching a kernel AST

def run_kernel(inputs: Sequence[tuple[DType, Sequence[float | int | bool]]],
               outputs: Sequence[tuple[DType, Callable[[list[UOp]], UOp]]]) -> list[np.ndarray]:
    """One kernel: output i is `outputs[i][1](input params)`, stored elementwise. All inputs have one length."""
    n = len(inputs[0][1])
    assert all(len(vals) == n for _, vals in inputs)
    k = len(outputs)
    in_params = [UOp(Ops.PARAM, d, (), (k + j, n)) for j, (d, _) in enumerate(inputs)]
    stores = [UOp(Ops.STORE, dtypes.void, (UOp(Ops.PARAM, d, (), (i, n)).reshape((n,)), fn(in_params)))
              for i, (d, fn) in enumerate(outputs)]
    ast = UOp(Ops.SINK, dtypes.void, tuple(stores))
    out_bufs = [Buffer("CPU", n, d) for d, _ in outputs]
    in_bufs = [Buffer("CPU", n, d).copyin(memoryview(to_buffer_array(vals, d)).cast("B")) for d, vals in inputs]
    runner = Device["CPU"].get_runner(ast)
    runner([*out_bufs, *in_bufs], {})
    return [b.numpy() for b in out_bufs]


def _ordered_bits(x: np.ndarray) -> np.ndarray:
    """Map float bit patterns to integers whose differences count ulps (-0.0 and +0.0 one apart)."""
    signed = x.astype(np.int64)
    width = x.dtype.itemsize * 8
    return np.where(signed >> (width - 1) & 1, -(signed & ((1 << (width - 1)) - 1)) - 1, signed)


def assert_matches(got: np.ndarray, expected: Sequence[float | int | bool], d: DType, ulps: int,
                   describe: Callable[[int], str]) -> None:
    exp = to_buffer_array(expected, d)
    if d.is_float:
        bits_dtype = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[d.itemsize]
        g_bits, e_bits = got.view(bits_dtype), exp.view(bits_dtype)
        g_val, e_val = np.array(from_buffer_array(got, d)), np.array(from_buffer_array(exp, d))
        both_nan = np.isnan(g_val) & np.isnan(e_val)
        if ulps == 0:
            bad = ~both_nan & (g_bits != e_bits)
        else:
            # special values (inf, nan) must match exactly; finite ones within `ulps`
            dist = np.abs(_ordered_bits(g_bits) - _ordered_bits(e_bits))
            bad = ~both_nan & (dist > ulps)
            bad |= ~both_nan & (np.isinf(g_val) | np.isinf(e_val)) & (g_bits != e_bits)
    else:
        bad = got != exp
    idx = np.nonzero(bad)[0]
    if len(idx):
        lines = [f"  {describe(i)}: got {from_buffer_array(got[i:i + 1], d)[0]!r}, "
                 f"expected {from_buffer_array(exp[i:i + 1], d)[0]!r}" for i in idx[:12]]
        pytest.fail(f"{len(idx)} of {len(got)} results differ from the reference ALU ({d}):\n" + "\n".join(lines))


# ---------------------------------------------------------------------------------------------------------------------
# ALU ops: one kernel per dtype computes every op over all pairs of edge values

def _alu_result_dtype(op: Ops, d: DType) -> DType:
    return dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else d


@functools.cache
def alu_results(d: DType) -> dict[Ops, tuple[np.ndarray, list, list, list]]:
    vals = edge_values(d)
    a = [x for x in vals for _ in vals]
    b = [y for _ in vals for y in vals]
    cond = [(i * 7 + i // len(vals)) % 3 == 0 for i in range(len(a))]
    binary, unary = ops_for(d)
    outputs: list[tuple[DType, Callable[[list[UOp]], UOp]]] = []
    order: list[Ops] = []
    for op in binary:
        outputs.append((_alu_result_dtype(op, d), lambda p, op=op: UOp(op, _alu_result_dtype(op, d), (p[0], p[1]))))
        order.append(op)
    for op in unary:
        outputs.append((d, lambda p, op=op: UOp(op, d, (p[0],))))
        order.append(op)
    outputs.append((d, lambda p: UOp(Ops.WHERE, d, (p[2], p[0], p[1]))))
    order.append(Ops.WHERE)
    got = run_kernel([(d, a), (d, b), (dtypes.bool, cond)], outputs)
    return {op: (g, a, b, cond) for op, g in zip(order, got, strict=True)}


ALU_CASES = [pytest.param(d, op, id=f"{op.name}-{d.name}") for d in ALL for op in (*ops_for(d)[0], *ops_for(d)[1],
                                                                                      Ops.WHERE)]


@pytest.mark.parametrize("d,op", ALU_CASES)
def test_alu_op_matches_reference(d: DType, op: Ops) -> None:
    if not Device["CPU"].supports_dtype(d):
        pytest.skip(f"CPU does not claim {d}")
    got, a, b, cond = alu_results(d)[op]
    rd = _alu_result_dtype(op, d)
    if op is Ops.WHERE:
        expected = [exec_alu(op, rd, (c, x, y), d) for c, x, y in zip(cond, a, b, strict=True)]
        describe = lambda i: f"WHERE({cond[i]}, {a[i]!r}, {b[i]!r})"  # noqa: E731
    elif op in ops_for(d)[1]:
        expected = [exec_alu(op, rd, (x,), d) for x in a]
        describe = lambda i: f"{op.name}({a[i]!r})"  # noqa: E731
    else:
        expected = [exec_alu(op, rd, (x, y), d) for x, y in zip(a, b, strict=True)]
        describe = lambda i: f"{op.name}({a[i]!r}, {b[i]!r})"  # noqa: E731
    assert_matches(got, expected, rd, APPROX_ULPS.get(op, 0) if d.is_float else 0, describe)


# ---------------------------------------------------------------------------------------------------------------------
# CAST: one kernel per source dtype, one output per target dtype

def cast_inputs(frm: DType, to: DType) -> list[float | int | bool]:
    """Edge values of `frm` whose conversion to `to` C defines (a float must truncate into an int's range)."""
    vals = edge_values(frm)
    if frm.is_float:
        vals = _dedup_bits(vals + [truncate(v, frm) for v in (255.9, -128.5, 127.0, -0.75, 2.0**31 - 128,
                                                               2.0**62, 1e19)], frm)
        if to.is_int:
            vals = [v for v in vals if math.isfinite(v) and to.min <= math.trunc(v) <= to.max]
    elif frm.is_int:
        vals = _dedup_bits(vals + [truncate(v, frm) for v in (2**60 + 2**36 + 1, 2**24 + 1, 65519, 65520, 300)], frm)
    return vals


@functools.cache
def cast_results(frm: DType) -> dict[DType, tuple[np.ndarray, list]]:
    per_target = {to: cast_inputs(frm, to) for to in ALL}
    n = max(len(v) for v in per_target.values())
    padded = {to: v + [v[0]] * (n - len(v)) for to, v in per_target.items()}
    targets = list(ALL)
    got = run_kernel([(frm, padded[to]) for to in targets],
                     [(to, lambda p, j=j, to=to: UOp(Ops.CAST, to, (p[j],))) for j, to in enumerate(targets)])
    return {to: (g, per_target[to]) for to, g in zip(targets, got, strict=True)}


@pytest.mark.parametrize("frm", ALL, ids=lambda d: d.name)
@pytest.mark.parametrize("to", ALL, ids=lambda d: d.name)
def test_cast_matches_reference(frm: DType, to: DType) -> None:
    got, vals = cast_results(frm)[to]
    got = got[:len(vals)]
    assert_matches(got, [exec_cast(v, to) for v in vals], to, 0, lambda i: f"CAST({vals[i]!r}: {frm} -> {to})")


# ---------------------------------------------------------------------------------------------------------------------
# BITCAST between dtypes of one size

BITCAST_PAIRS = [(f, t) for f in ALL for t in ALL if f != t and f.itemsize == t.itemsize and not f.is_bool
                 and not t.is_bool]


@functools.cache
def bitcast_results(frm: DType) -> dict[DType, tuple[np.ndarray, list]]:
    vals = edge_values(frm)
    if frm.is_float:
        vals = [v for v in vals if not math.isnan(v)]  # NaN payloads are not preserved by the Python reference
    targets = [t for f, t in BITCAST_PAIRS if f == frm]
    got = run_kernel([(frm, vals)], [(to, lambda p, to=to: UOp(Ops.BITCAST, to, (p[0],))) for to in targets])
    return {to: (g, vals) for to, g in zip(targets, got, strict=True)}


@pytest.mark.parametrize("frm,to", BITCAST_PAIRS, ids=[f"{f.name}-{t.name}" for f, t in BITCAST_PAIRS])
def test_bitcast_matches_reference(frm: DType, to: DType) -> None:
    got, vals = bitcast_results(frm)[to]
    assert_matches(got, [exec_bitcast(v, frm, to) for v in vals], to, 0,
                   lambda i: f"BITCAST({vals[i]!r}: {frm} -> {to})")
