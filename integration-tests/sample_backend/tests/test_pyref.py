"""Tests of the PYREF backend itself: the program format, the interpreter, and tensors on the device."""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tg_backend_pyref.device import PyRefAllocator, PyRefCompiler
from tg_backend_pyref.interpreter import OutOfBoundsError, ProgramFormatError, PyRefProgram, decode_program
from tg_backend_pyref.renderer import PyRefRenderer
from tinygrad import Device, Tensor, dtypes
from tinygrad.codegen import ProgramSpec
from tinygrad.dtype import DType
from tinygrad.uop.alu import exec_alu, exec_bitcast, exec_cast
from tinygrad.uop.ops import AxisKind, Ops, RangeArg, UOp

IDX = dtypes.int32
SRC = Path(__file__).resolve().parents[1] / "src"


# ---- building kernels by hand ----

def c(v: int | float | bool, d: DType = IDX) -> UOp:
    return UOp.const(d, v)


def param(index: int, size: int, d: DType) -> UOp:
    return UOp(Ops.PARAM, d, (), (index, size))


def rng(size: UOp | int, axis: int = 0, kind: AxisKind = AxisKind.GLOBAL) -> UOp:
    end = size if isinstance(size, UOp) else c(size)
    return UOp(Ops.RANGE, IDX, (end,), RangeArg(axis, kind))


def load(p: UOp, idx: UOp, gate: UOp | None = None) -> UOp:
    return UOp(Ops.LOAD, p.dtype, (UOp(Ops.INDEX, p.dtype, (p, idx) if gate is None else (p, idx, gate)),))


def store(p: UOp, idx: UOp, value: UOp, gate: UOp | None = None) -> UOp:
    return UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, p.dtype, (p, idx) if gate is None else (p, idx, gate)), value))


def end(r: UOp) -> UOp:
    return UOp(Ops.END, dtypes.void, (r,))


def linear(*statements: UOp) -> list[UOp]:
    """A linear program from statements given in program order (RANGE, body..., END): each statement is
    preceded by whatever it needs that was not emitted before."""
    out: list[UOp] = []
    seen: set[UOp] = set()
    for st in statements:
        for u in st.toposort():
            if u not in seen:
                seen.add(u)
                out.append(u)
    return out


def spec_of(name: str, src: str) -> ProgramSpec:
    """The spec of a hand-built program: a program reads only its name (the launch passes buffers and values)."""
    return ProgramSpec(name, src, (), None, None, estimated_ops=0, estimated_bytes=0)


def build(name: str, program: list[UOp]) -> PyRefProgram:
    src = PyRefRenderer().render(name, program)
    return PyRefProgram(spec_of(name, src), PyRefCompiler().compile(src))


def host(arr: np.ndarray) -> bytearray:
    return bytearray(arr.tobytes())


def elementwise(op: Ops, d: DType, out_d: DType, n: int, arity: int) -> PyRefProgram:
    """out[i] = op(in1[i], in2[i], ...)"""
    ins = [param(k + 1, n, dtypes.bool if (op is Ops.WHERE and k == 0) else d) for k in range(arity)]
    out = param(0, n, out_d)
    r = rng(n)
    vals = [load(p, r) for p in ins]
    value = UOp(op, out_d, tuple(vals))
    st = store(out, r, value)
    return build("k_" + op.name.lower(), linear(r, st, end(r)))


# ---- the program format ----

def test_float_arguments_survive_bit_exactly() -> None:
    values = [-0.0, 0.0, math.inf, -math.inf, math.nan, 1 / 3, 5e-324, 1.7976931348623157e308]
    out = param(0, len(values), dtypes.float64)
    stores = [store(out, c(i), c(v, dtypes.float64)) for i, v in enumerate(values)]
    src = PyRefRenderer().render("consts", linear(*stores))
    _, program = decode_program(src)
    got = [ins.arg for ins in program if ins.op is Ops.CONST and ins.dtype == dtypes.float64]
    assert [struct.pack("<d", v) for v in got] == [struct.pack("<d", v) for v in values]
    buf = bytearray(8 * len(values))
    build("consts", linear(*stores))(buf)
    assert np.frombuffer(buf, np.float64).tobytes() == np.array(values, np.float64).tobytes()


def test_rendered_program_is_plain_json_one_uop_per_line() -> None:
    a = Tensor([1.0, 2.0, 3.0], device="PYREF")
    ast = (a * 2).schedule()[-1].ast
    from tinygrad.codegen import get_program

    spec = get_program(ast, PyRefRenderer())
    doc = json.loads(spec.src)
    assert doc["format"] == "tg-pyref-program" and doc["version"] == 1 and doc["name"] == spec.name
    assert len(spec.src.splitlines()) == len(doc["uops"]) + 3
    assert {"RANGE", "LOAD", "STORE", "END", "MUL"} <= {u["op"] for u in doc["uops"]}


@pytest.mark.parametrize("bad, why", [
    ("not json", "not a PYREF program"),
    ('{"format": "other"}', "no \"format\""),
    ('{"format": "tg-pyref-program", "version": 2, "name": "k", "uops": []}', "format version 2"),
    ('{"format": "tg-pyref-program", "version": 1, "name": "k", "uops": ['
     '{"i": 0, "op": "ADD", "dtype": "int32", "src": [0, 1], "arg": null}]}', "earlier UOps"),
    ('{"format": "tg-pyref-program", "version": 1, "name": "k", "uops": ['
     '{"i": 0, "op": "FROBNICATE", "dtype": "int32", "src": [], "arg": null}]}', "unknown op"),
    ('{"format": "tg-pyref-program", "version": 1, "name": "k", "uops": ['
     '{"i": 0, "op": "COPY", "dtype": "int32", "src": [], "arg": null}]}', "cannot run COPY"),
    ('{"format": "tg-pyref-program", "version": 1, "name": "k", "uops": ['
     '{"i": 0, "op": "CONST", "dtype": "int32", "src": [], "arg": 4},'
     '{"i": 1, "op": "RANGE", "dtype": "int32", "src": [0], "arg": [0, "global"]}]}', "never closed"),
    ('{"format": "tg-pyref-program", "version": 1, "name": "k", "uops": ['
     '{"i": 0, "op": "CONST", "dtype": "float32", "src": [], "arg": {"pickle": "x"}}]}', "cannot decode"),
])
def test_malformed_programs_are_refused_with_the_reason(bad: str, why: str) -> None:
    with pytest.raises(ProgramFormatError, match=why):  # at compile time, as a CompileError
        PyRefCompiler().compile(bad)
    with pytest.raises(ProgramFormatError, match=why):  # and by the program loader, whatever bytes it is given
        PyRefProgram(spec_of("k", bad), bad.encode())


def test_store_of_a_value_of_another_dtype_is_refused() -> None:
    out = param(0, 1, dtypes.float32)
    with pytest.raises(ProgramFormatError, match=r"stores a dtypes\.int32 value into a dtypes\.float32 buffer"):
        build("k", linear(store(out, c(0), c(1))))


def test_end_must_close_the_innermost_range() -> None:
    out = param(0, 4, dtypes.int32)
    r0, r1 = rng(2, 0), rng(2, 1)
    with pytest.raises(ProgramFormatError, match="does not close the innermost open RANGE"):
        build("k", linear(r0, r1, store(out, r0 * c(2) + r1, r1), end(r0), end(r1)))


# ---- the interpreter ----

def test_loop_accumulator_and_nested_ranges() -> None:
    # out[i] = sum_j a[i*3 + j] over a 2x3 input; the accumulator restarts for every i
    a, out = param(1, 6, dtypes.float32), param(0, 2, dtypes.float32)
    i, j = rng(2, 0), rng(3, 1, AxisKind.REDUCE)
    acc = UOp(Ops.DEFINE_ACC, dtypes.float32, (c(0.0, dtypes.float32),), 0)
    update = UOp(Ops.ASSIGN, dtypes.float32, (acc, UOp(Ops.ADD, dtypes.float32, (acc, load(a, i * c(3) + j)))))
    buf, data = bytearray(8), host(np.arange(6, dtype=np.float32))
    build("acc", linear(i, acc, j, update, end(j), store(out, i, acc), end(i)))(buf, data)
    assert np.frombuffer(buf, np.float32).tolist() == [3.0, 12.0]


def test_gated_load_reads_nothing_and_gated_store_writes_nothing() -> None:
    a, out = param(1, 4, dtypes.int32), param(0, 8, dtypes.int32)
    r = rng(8)
    inside = UOp(Ops.CMPLT, dtypes.bool, (r, c(4)))
    # for r >= 4 the index r would be out of bounds of a: the gate must stop the read and give 0
    st = store(out, r, load(a, r, inside) + c(100))
    st2 = store(out, r, c(-1), UOp(Ops.CMPEQ, dtypes.bool, (r, c(7))))
    prog = build("gated", linear(r, st, st2, end(r)))
    buf = bytearray(32)
    prog(buf, host(np.array([1, 2, 3, 4], np.int32)))
    assert np.frombuffer(buf, np.int32).tolist() == [101, 102, 103, 104, 100, 100, 100, -1]


@pytest.mark.parametrize("offset", [1, -1])
def test_out_of_bounds_access_is_reported(offset: int) -> None:
    a, out = param(1, 4, dtypes.float32), param(0, 4, dtypes.float32)
    r = rng(4)
    prog = build("oob", linear(r, store(out, r, load(a, r + c(offset))), end(r)))
    with pytest.raises(OutOfBoundsError, match=r"kernel oob reads data1 \(float32\[4\]\) at index (4|-1)"):
        prog(bytearray(16), bytearray(16))


def test_define_var_bounds_a_loop() -> None:
    n = UOp(Ops.DEFINE_VAR, IDX, (), ("n", 1, 8))
    out = param(0, 8, dtypes.int32)
    r = rng(n)
    prog = build("var", linear(r, store(out, r, r * c(10)), end(r)))
    buf = bytearray(32)
    prog(buf, vals=(3,))
    assert np.frombuffer(buf, np.int32).tolist() == [0, 10, 20, 0, 0, 0, 0, 0]
    with pytest.raises(ValueError, match=r"variable n=9 is outside its range \[1, 8\]"):
        prog(buf, vals=(9,))
    with pytest.raises(TypeError, match="takes 1 variable values"):
        prog(buf)


def test_define_vars_bind_in_name_order() -> None:
    n, m = UOp(Ops.DEFINE_VAR, IDX, (), ("n", 0, 9)), UOp(Ops.DEFINE_VAR, IDX, (), ("m", 0, 9))
    out = param(0, 2, dtypes.int32)
    prog = build("vars", linear(store(out, c(0), n), store(out, c(1), m)))  # n is used (and emitted) first
    buf = bytearray(8)
    prog(buf, vals=(3, 7))  # m=3, n=7
    assert np.frombuffer(buf, np.int32).tolist() == [7, 3]


def test_a_uop_emitted_twice_is_read_from_its_latest_emission() -> None:
    # the linearizer may emit a (hash-consed) value again, e.g. after the loop that computed it closed;
    # its users after the second emission must read that one
    three = c(3)
    six = UOp(Ops.ADD, IDX, (three, three))
    out = param(0, 1, dtypes.int32)
    st = store(out, c(0), six)
    program = [three, six, six, *[u for u in linear(st) if u not in (three, six)]]
    doc = json.loads(PyRefRenderer().render("twice", program))
    assert [u["op"] for u in doc["uops"][:3]] == ["CONST", "ADD", "ADD"]
    assert doc["uops"][-1]["op"] == "STORE" and doc["uops"][-1]["src"][1] == 2
    buf = bytearray(4)
    build("twice", program)(buf)
    assert np.frombuffer(buf, np.int32).tolist() == [6]


EDGE_FLOATS = [0.0, -0.0, 1.0, -1.5, 3.0, 0.1, 1e30, -1e-30, math.inf, -math.inf, math.nan, 65504.0, 7.0, -7.0]
EDGE_INTS = [0, 1, -1, 2, -2, 3, 7, -7, 100, 127, -128, 255, 2**31 - 1, -2**31, 2**63 - 1, -2**63, 31, 64]


def _edge_values(d: DType) -> np.ndarray:
    if d.is_bool:
        return np.array([False, True, True, False, True, False] * 3, dtype=np.bool_)
    if d.is_float:
        raw = [exec_cast(v, d) for v in EDGE_FLOATS]
    else:
        raw = [exec_cast(v, d) for v in EDGE_INTS]
    if d == dtypes.bfloat16:
        return np.array([exec_bitcast(v, dtypes.bfloat16, dtypes.uint16) for v in raw], np.uint16)
    from tinygrad.dtype import to_numpy

    return np.array(raw, dtype=to_numpy(d))


def _as_python(arr: np.ndarray, d: DType) -> list:
    if d == dtypes.bfloat16:
        return [exec_bitcast(int(b), dtypes.uint16, dtypes.bfloat16) for b in arr]
    return [v.item() for v in arr]


def _same(x: object, y: object) -> bool:
    if isinstance(x, float) and isinstance(y, float):
        return struct.pack("<d", x) == struct.pack("<d", y) or (math.isnan(x) and math.isnan(y))
    return type(x) is type(y) and x == y


BINARY_CASES = [(op, d) for d in (dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.uint32, dtypes.int64,
                                  dtypes.uint64)
                for op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.AND, Ops.XOR, Ops.SHL, Ops.SHR,
                           Ops.CMPLT, Ops.CMPNE)] + \
               [(op, d) for d in (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
                for op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.CMPLT, Ops.CMPEQ, Ops.IDIV, Ops.MOD)] + \
               [(op, dtypes.bool) for op in (Ops.AND, Ops.OR, Ops.XOR, Ops.CMPNE, Ops.MAX)]


@pytest.mark.parametrize("op, d", BINARY_CASES, ids=[f"{op.name}-{d.name}" for op, d in BINARY_CASES])
def test_binary_ops_match_the_reference_table(op: Ops, d: DType) -> None:
    """Every pair of edge values, through memory of the dtype (16-bit floats, bools, 64-bit ints)."""
    vals = _edge_values(d)
    a, b = np.repeat(vals, len(vals)), np.tile(vals, len(vals))
    if op in (Ops.SHL, Ops.SHR):
        b = b % np.array(d.bits + 2, dtype=b.dtype) if d.is_unsigned else b  # shift amounts in and just past range
    out_d = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else d
    from tinygrad.dtype import to_numpy

    out = np.zeros(len(a), dtype=to_numpy(out_d))
    buf = bytearray(out.tobytes())
    elementwise(op, d, out_d, len(a), 2)(buf, host(a), host(b))
    got = _as_python(np.frombuffer(buf, dtype=out.dtype), out_d)
    pa, pb = _as_python(a, d), _as_python(b, d)
    want = [exec_alu(op, out_d, (x, y), d) for x, y in zip(pa, pb, strict=True)]
    bad = [(x, y, g, w) for x, y, g, w in zip(pa, pb, got, want, strict=True) if not _same(g, w)]
    assert not bad, f"{op.name} {d.name}: (a, b, got, want) {bad[:5]}"


UNARY_CASES = [(op, d) for d in (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
               for op in (Ops.NEG, Ops.RECIPROCAL, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC)] + \
              [(Ops.NEG, d) for d in (dtypes.int8, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.bool)]


@pytest.mark.parametrize("op, d", UNARY_CASES, ids=[f"{op.name}-{d.name}" for op, d in UNARY_CASES])
def test_unary_ops_match_the_reference_table(op: Ops, d: DType) -> None:
    vals = _edge_values(d)
    buf = bytearray(vals.nbytes)
    elementwise(op, d, d, len(vals), 1)(buf, host(vals))
    got = _as_python(np.frombuffer(buf, dtype=vals.dtype), d)
    want = [exec_alu(op, d, (x,), d) for x in _as_python(vals, d)]
    inputs = _as_python(vals, d)
    assert all(_same(g, w) for g, w in zip(got, want, strict=True)), list(zip(inputs, got, want, strict=True))


def test_where_picks_per_element() -> None:
    n = 6
    cond = np.array([True, False, True, False, False, True])
    x, y = np.arange(n, dtype=np.float32), -np.arange(n, dtype=np.float32) - 0.5
    buf = bytearray(4 * n)
    elementwise(Ops.WHERE, dtypes.float32, dtypes.float32, n, 3)(buf, host(cond), host(x), host(y))
    assert np.frombuffer(buf, np.float32).tolist() == np.where(cond, x, y).tolist()


CAST_DTYPES = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.uint32, dtypes.int64,
               dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]


@pytest.mark.parametrize("frm", CAST_DTYPES, ids=[d.name for d in CAST_DTYPES])
def test_casts_match_the_reference_table(frm: DType) -> None:
    vals = _edge_values(frm)
    for to in CAST_DTYPES:
        from tinygrad.dtype import to_numpy

        out_np = np.uint16 if to == dtypes.bfloat16 else to_numpy(to)
        buf = bytearray(len(vals) * np.dtype(out_np).itemsize)
        inp, out, r = param(1, len(vals), frm), param(0, len(vals), to), rng(len(vals))
        build("cast", linear(r, store(out, r, UOp(Ops.CAST, to, (load(inp, r),))), end(r)))(buf, host(vals))
        got = _as_python(np.frombuffer(buf, out_np), to)
        want = [exec_cast(v, to) for v in _as_python(vals, frm)]
        assert all(_same(g, w) for g, w in zip(got, want, strict=True)), (frm, to, list(zip(got, want, strict=True)))


@pytest.mark.parametrize("frm, to", [(dtypes.float32, dtypes.int32), (dtypes.int32, dtypes.float32),
                                     (dtypes.float16, dtypes.uint16), (dtypes.bfloat16, dtypes.int16),
                                     (dtypes.uint16, dtypes.bfloat16), (dtypes.float64, dtypes.uint64)])
def test_bitcasts_match_the_reference_table(frm: DType, to: DType) -> None:
    vals = _edge_values(frm)
    from tinygrad.dtype import to_numpy

    out_np = np.uint16 if to == dtypes.bfloat16 else to_numpy(to)
    buf = bytearray(len(vals) * np.dtype(out_np).itemsize)
    inp, out, r = param(1, len(vals), frm), param(0, len(vals), to), rng(len(vals))
    build("bitcast", linear(r, store(out, r, UOp(Ops.BITCAST, to, (load(inp, r),))), end(r)))(buf, host(vals))
    got = _as_python(np.frombuffer(buf, out_np), to)
    want = [exec_bitcast(v, frm, to) for v in _as_python(vals, frm)]
    assert all(_same(g, w) for g, w in zip(got, want, strict=True)), list(zip(got, want, strict=True))


def test_allocator_round_trip() -> None:
    alloc = PyRefAllocator()
    buf = alloc.alloc(12)
    alloc.copyin(buf, memoryview(np.array([1.5, -2.0, 3.25], np.float32)).cast("B"))
    out = np.zeros(3, np.float32)
    alloc.copyout(memoryview(out).cast("B"), buf)
    assert out.tolist() == [1.5, -2.0, 3.25]


def test_plugin_module_is_light() -> None:
    """Discovery imports the plugin module and calls the hook: neither may pull in the compiler or the device."""
    code = ("import sys, tg_backend_pyref\n"
            "infos = tg_backend_pyref.tinygrad_backends()\n"
            "assert [i.name for i in infos] == ['PYREF'] and infos[0].contract_version == '2.0', infos\n"
            "heavy = [m for m in ('tinygrad.codegen', 'tinygrad.renderer', 'tg_backend_pyref.device',"
            " 'tg_backend_pyref.interpreter') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    # installed, the package is found as usual; from a checkout, in its source folder
    env = {**os.environ, "PYTHONPATH": "" if _installed() else str(SRC), "TINYGRAD_NO_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr


def _installed() -> bool:
    import importlib.metadata

    try:
        importlib.metadata.distribution("tg-backend-pyref")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


# ---- tensors on the device ----

def _both(fn, *arrays: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    ref = fn(*[Tensor(a, device="PYREF") for a in arrays]).numpy()
    cpu = None
    if "CPU" in Device.backends and Device.availability("CPU") is None:
        cpu = fn(*[Tensor(a, device="CPU") for a in arrays]).numpy()
    return ref, cpu


@pytest.mark.parametrize("name, fn, npfn", [
    ("add", lambda a, b: a + b, lambda a, b: a + b),
    ("matmul", lambda a, b: a @ b.T, lambda a, b: a @ b.T),
    ("sum", lambda a, b: (a * b).sum(axis=1), lambda a, b: (a * b).sum(axis=1)),
    ("max", lambda a, b: a.max(axis=0) - b.max(), lambda a, b: a.max(axis=0) - b.max()),
    ("views", lambda a, b: a.permute(1, 0).pad(((1, 2), (0, 1))).flip(0)[1:5] + 1,
     lambda a, b: np.flip(np.pad(a.T, ((1, 2), (0, 1))), 0)[1:5] + 1),
    ("reshape", lambda a, b: (a.reshape(6, 2) * b.reshape(2, 6).T).sum(0),
     lambda a, b: (a.reshape(6, 2) * b.reshape(2, 6).T).sum(0)),
    ("exp_log", lambda a, b: (a.exp() + b.abs().sqrt()).log(),
     lambda a, b: np.log(np.exp(a) + np.sqrt(np.abs(b)))),
])
def test_tensor_ops_match_numpy_and_cpu(name: str, fn, npfn) -> None:
    rng_ = np.random.default_rng(0)
    a, b = rng_.standard_normal((3, 4)).astype(np.float32), rng_.standard_normal((3, 4)).astype(np.float32)
    ref, cpu = _both(fn, a, b)
    np.testing.assert_allclose(ref, npfn(a, b), rtol=1e-5, atol=1e-6)
    if cpu is not None:
        np.testing.assert_allclose(ref, cpu, rtol=1e-6, atol=1e-7)


def test_integer_wraparound_and_casts_on_tensors() -> None:
    big = np.array([2**31 - 1, -2**31, 5, -7], np.int32)
    t = Tensor(big, device="PYREF")
    assert (t + 1).numpy().tolist() == [-2**31, -2**31 + 1, 6, -6]
    assert t.cast(dtypes.int8).numpy().tolist() == [-1, 0, 5, -7]
    assert Tensor([1.7, -1.7, 300.0], device="PYREF").cast(dtypes.uint8).numpy().tolist() == \
        [exec_cast(v, dtypes.uint8) for v in (exec_cast(1.7, dtypes.float32), exec_cast(-1.7, dtypes.float32), 300.0)]
    h = Tensor([1.0, 2.0, 65504.0], device="PYREF").cast(dtypes.float16)
    assert (h * 2).cast(dtypes.float32).numpy().tolist() == [2.0, 4.0, math.inf]


def test_gradient_on_pyref() -> None:
    rng_ = np.random.default_rng(1)
    x_np, w_np = rng_.standard_normal((2, 3)).astype(np.float32), rng_.standard_normal((3, 2)).astype(np.float32)
    x = Tensor(x_np, device="PYREF", requires_grad=True)
    w = Tensor(w_np, device="PYREF", requires_grad=True)
    loss = (x @ w).relu().sum()
    loss.backward()
    assert x.grad is not None and w.grad is not None
    mask = ((x_np @ w_np) > 0).astype(np.float32)
    np.testing.assert_allclose(x.grad.numpy(), mask @ w_np.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), x_np.T @ mask, rtol=1e-5, atol=1e-6)
