"""Every required ALU op, CAST and BITCAST on every dtype the CL device claims, over edge values (NaN, +-inf,
-0.0, subnormals, MIN/MAX, zero divisors, shifts past the width) crossed pairwise, against the reference
ALU `tinygrad.uop.alu`. One kernel per dtype carries all its ops; each (op, dtype) is its own test."""

from __future__ import annotations

import functools
import math
import struct

import numpy as np
import pytest
from tinygrad.device import Buffer, Device
from tinygrad.dtype import (
    DType,
    bits_to_float,
    decode_floats,
    dtypes,
    encode_floats,
    is_emulated_float,
    to_numpy,
    truncate,
)
from tinygrad.uop.alu import exec_alu, exec_bitcast, exec_cast
from tinygrad.uop.ops import Ops, UOp

COMPARE = (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)
BINARY = {
    "float": (Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, *COMPARE),
    "int": (Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, *COMPARE, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL,
            Ops.SHR),
    "bool": (Ops.AND, Ops.OR, Ops.XOR, Ops.MAX, *COMPARE),
}
UNARY = {"float": (Ops.NEG, Ops.RECIPROCAL, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC), "int": (Ops.NEG,),
         "bool": (Ops.NEG,)}
#: OpenCL's exp2/log2/sin are allowed a few ulps (the spec's limits are 3-4 ulp); everything else is exact
ULPS = {Ops.EXP2: 4, Ops.LOG2: 4, Ops.SIN: 4}


def kind(d: DType) -> str:
    return "float" if d.is_float else "int" if d.is_int else "bool"


def edges(d: DType) -> list:
    if d.is_bool:
        return [False, True]
    if d.is_float:
        raw = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 7.0, 1 / 3, -100.25, 1e-3, 1e4, 65504.0, 3.0e38, 1e-40,
               math.inf, -math.inf, math.nan]
        if d == dtypes.float64:
            raw += [1e300, -1e-310]
    else:
        raw = [0, 1, -1, 2, -3, 7, d.bits - 1, d.bits, d.bits + 1, 100, d.min, d.min + 1, d.max, d.max - 1]
    out, seen = [], set()
    for v in (truncate(x, d) for x in raw):
        key = struct.pack("<d", v) if isinstance(v, float) else v
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


def to_array(values: list, d: DType) -> np.ndarray:
    if is_emulated_float(d):  # bfloat16 and the 8-bit floats: their raw bits
        return encode_floats([float(v) for v in values], d)
    return np.array(values, dtype=to_numpy(d))


def from_array(arr: np.ndarray, d: DType) -> list:
    return [bits_to_float(int(b), d) for b in arr] if is_emulated_float(d) else [v.item() for v in arr]


def run(inputs: list[tuple[DType, list]], outputs: list[tuple[DType, UOp]], device: str = "CL") -> list[np.ndarray]:
    """outputs[i] = (dtype, expression over PARAMs len(outputs)+j for input j), stored elementwise. `device`: other
    OpenCL-based backends (QCOM) reuse these helpers on their own device."""
    n = len(inputs[0][1])
    stores = tuple(UOp(Ops.STORE, dtypes.void, (UOp(Ops.PARAM, d, (), (i, n)).reshape((n,)), e))
                   for i, (d, e) in enumerate(outputs))
    out_bufs = [Buffer(device, n, d) for d, _ in outputs]
    in_bufs = [Buffer(device, n, d).copyin(memoryview(to_array(v, d)).cast("B")) for d, v in inputs]
    Device[device].get_runner(UOp(Ops.SINK, dtypes.void, stores))([*out_bufs, *in_bufs], {})
    return [b.numpy() for b in out_bufs]


@functools.cache
def results(d: DType, device: str = "CL") -> dict[Ops, tuple[np.ndarray, list, list]]:
    vals = edges(d)
    pairs = [(a, b) for a in vals for b in vals]
    xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
    ops = BINARY[kind(d)] + UNARY[kind(d)]
    k = len(ops)
    x, y = UOp(Ops.PARAM, d, (), (k, len(xs))), UOp(Ops.PARAM, d, (), (k + 1, len(xs)))
    outs = [(dtypes.bool if op in COMPARE else d, UOp(op, dtypes.bool if op in COMPARE else d,
                                                      (x, y) if op in BINARY[kind(d)] else (x,)))
            for op in ops]
    got = run([(d, xs), (d, ys)], outs, device)
    return {op: (g, xs, ys) for op, g in zip(ops, got)}


def check(got: np.ndarray, want: list, d: DType, ulps: int, what) -> None:  # type: ignore[no-untyped-def]
    exp = to_array(want, d)
    if d.is_float:
        with np.errstate(all="ignore"):
            return _check_float(got, exp, want, d, ulps, what)
    bad = got != exp
    _report(got, want, d, np.nonzero(bad)[0], what)


def _check_float(got: np.ndarray, exp: np.ndarray, want: list, d: DType, ulps: int, what) -> None:  # type: ignore[no-untyped-def]
    g, e = np.array(from_array(got, d), dtype=np.float64), np.array(from_array(exp, d), dtype=np.float64)
    same_bits = got.view(f"u{d.itemsize}") == exp.view(f"u{d.itemsize}")
    both_nan = np.isnan(g) & np.isnan(e)
    ulp = _spacing(e, d)
    close = np.isfinite(g) & np.isfinite(e) & (np.abs(g - e) <= ulps * ulp) if ulps else np.zeros_like(same_bits)
    _report(got, want, d, np.nonzero(~(same_bits | both_nan | close))[0], what)


def _spacing(values: np.ndarray, d: DType) -> np.ndarray:
    """The distance from each value to the next one up in d (an ulp of d there; of float32 for bfloat16)."""
    if d in dtypes.fp8s:
        bits = encode_floats(np.abs(values), d)
        with np.errstate(all="ignore"):
            return decode_floats(bits + 1, d).astype(np.float64) - np.abs(values)
    return np.spacing(np.abs(values).astype(np.float32 if d == dtypes.bfloat16 else to_numpy(d))).astype(np.float64)


def _report(got: np.ndarray, want: list, d: DType, idx: np.ndarray, what) -> None:  # type: ignore[no-untyped-def]
    if len(idx):
        lines = [f"  {what(i)}: got {from_array(got[i:i + 1], d)[0]!r}, want {want[i]!r}" for i in idx[:10]]
        pytest.fail(f"{len(idx)} of {len(got)} differ from the reference ALU ({d}):\n" + "\n".join(lines))


CASES = [(op, d) for d in dtypes.all() for op in BINARY[kind(d)] + UNARY[kind(d)]]


@pytest.mark.parametrize("op,d", CASES, ids=[f"{op.name}-{d.name}" for op, d in CASES])
def test_alu_matches_reference(cl_device, op: Ops, d: DType) -> None:  # type: ignore[no-untyped-def]
    _require(cl_device, d)
    got, xs, ys = results(d)[op]
    binary = op in BINARY[kind(d)]
    out_d = dtypes.bool if op in COMPARE else d
    want = [exec_alu(op, out_d, (a, b) if binary else (a,), d) for a, b in zip(xs, ys)]
    check(got, want, out_d, ULPS.get(op, 0) if d.is_float else 0,
          lambda i: f"{op.name}({xs[i]!r}{', ' + repr(ys[i]) if binary else ''})")


def _require(cl_device, *dts: DType) -> None:  # type: ignore[no-untyped-def]
    for d in dts:
        if not cl_device.supports_dtype(d):
            pytest.skip(f"CL device {cl_device.device.name} does not claim {d.name}")


PAIRS = [(a, b) for a in dtypes.all() for b in dtypes.all() if a != b]


@pytest.mark.parametrize("frm,to", PAIRS, ids=[f"{a.name}-{b.name}" for a, b in PAIRS])
def test_cast_matches_reference(cl_device, frm: DType, to: DType) -> None:  # type: ignore[no-untyped-def]
    _require(cl_device, frm, to)
    vals = edges(frm)
    if to.is_int and frm.is_float:  # float -> int is defined only where the value fits (C and OpenCL alike)
        vals = [v for v in vals if math.isfinite(v) and to.min <= math.trunc(v) <= to.max]
    x = UOp(Ops.PARAM, frm, (), (1, len(vals)))
    (got,) = run([(frm, vals)], [(to, x.cast(to))])
    check(got, [exec_cast(v, to) for v in vals], to, 0, lambda i: f"cast({vals[i]!r})")


BITCASTS = [(a, b) for a in dtypes.all() for b in dtypes.all() if a != b and a.itemsize == b.itemsize
            and not a.is_bool and not b.is_bool]


@pytest.mark.parametrize("frm,to", BITCASTS, ids=[f"{a.name}-{b.name}" for a, b in BITCASTS])
def test_bitcast_matches_reference(cl_device, frm: DType, to: DType) -> None:  # type: ignore[no-untyped-def]
    _require(cl_device, frm, to)
    vals = edges(frm)
    x = UOp(Ops.PARAM, frm, (), (1, len(vals)))
    (got,) = run([(frm, vals)], [(to, x.bitcast(to))])
    want = [exec_bitcast(v, frm, to) for v in vals]
    if to.is_float:  # NaN payloads aside, the bits must survive
        check(got, want, to, 0, lambda i: f"bitcast({vals[i]!r})")
    else:
        assert from_array(got, to) == want
