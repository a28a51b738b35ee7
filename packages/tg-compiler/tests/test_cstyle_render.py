"""The C-style renderer: constants of every dtype, and rendered kernels that a C compiler accepts.

Constants are checked by compiling a small C program that stores each rendered literal into a variable of
its dtype and prints the bytes; those must equal numpy's bytes for the same value. Kernels are checked with
`-fsyntax-only` (the CPU backend's tests run them).
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
from tinygrad.codegen import get_program
from tinygrad.dtype import DType, dtypes, is_emulated_float, to_numpy, truncate
from tinygrad.renderer.cstyle import CStyleRenderer
from tinygrad.uop.ops import Ops, UOp

ALL = dtypes.all()
R = CStyleRenderer()


def const_values(d: DType) -> list[float | int | bool]:
    if d.is_bool:
        return [False, True]
    if d.is_int:
        return sorted({truncate(v, d) for v in (0, 1, -1, 7, d.min, d.min + 1, d.max, d.max - 1, 2**31, 2**32 - 1)})
    vals = [0.0, -0.0, 1.0, -1.5, 1 / 3, 65504.0, 2.0**-24, 1e-40, 3.4028234663852886e38, 1e300, math.pi,
            math.inf, -math.inf, math.nan]
    return [truncate(v, d) for v in vals]


def expected_bytes(v: float | int | bool, d: DType) -> bytes:
    if is_emulated_float(d):
        return np.float32(v).tobytes()  # bfloat16 and 8-bit float values live in a float
    return np.array([v], dtype=to_numpy(d)).tobytes()


def run_c(c_compiler: str, tmp_path: Path, source: str) -> str:
    src, exe = tmp_path / "consts.c", tmp_path / "consts"
    src.write_text(source)
    proc = subprocess.run([c_compiler, "-std=gnu11", "-Werror", "-O0", str(src), "-o", str(exe), "-lm"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr + "\n" + source
    return subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout


def test_constants_of_every_dtype_compile_to_their_value(c_compiler: str, tmp_path: Path) -> None:
    lines = [R.prelude, "#include <stdio.h>\n#include <string.h>", "int main(void) {"]
    cases = []
    for d in ALL:
        for v in const_values(d):
            t = R.value_type(d)
            lines.append(f"  {{ {t} x = {R.render_const(v, d)}; unsigned char b[sizeof x]; memcpy(b, &x, sizeof x);"
                         f" for (unsigned i = 0; i < sizeof x; i++) printf(\"%02x\", b[i]); printf(\"\\n\"); }}")
            cases.append((d, v))
    lines.append("  return 0;\n}")
    out = run_c(c_compiler, tmp_path, "\n".join(lines)).split()
    assert len(out) == len(cases)
    bad = []
    for (d, v), got in zip(cases, out, strict=True):
        want = expected_bytes(v, d)
        if isinstance(v, float) and math.isnan(v):
            value = np.frombuffer(bytes.fromhex(got), dtype=np.float32 if is_emulated_float(d) else to_numpy(d))[0]
            ok = bool(np.isnan(value))
        else:
            ok = bytes.fromhex(got) == want
        if not ok:
            bad.append(f"{d} {v!r}: rendered {R.render_const(v, d)}, bytes {got} != {want.hex()}")
    assert not bad, "\n".join(bad)


def test_most_negative_integers_are_not_written_as_literals() -> None:
    # -2147483648 is the literal 2147483648 negated: a long, and for int64 an out-of-range literal
    for d in (dtypes.int32, dtypes.int64):
        text = R.render_const(d.min, d)
        assert str(d.min) not in text and str(-d.min) not in text


def test_special_float_constants() -> None:
    assert R.render_const(math.inf, dtypes.float32) == "INFINITY"
    assert "-" in R.render_const(-math.inf, dtypes.float64)
    assert R.render_const(math.nan, dtypes.float32) == "NAN"
    assert "_Float16" in R.render_const(1.0, dtypes.float16)
    assert R.render_const(1.0, dtypes.bfloat16) == "1.0f"


# ---------------------------------------------------------------------------------------------------------------------
# whole kernels

def elementwise_ast(d: DType) -> UOp:
    """One kernel that applies every op the renderer must write for dtype d, each stored to its own output."""
    n = 8
    a, b = UOp(Ops.PARAM, d, (), (100, n)), UOp(Ops.PARAM, d, (), (101, n))
    cond = UOp(Ops.PARAM, dtypes.bool, (), (102, n))
    values = []
    if d.is_float:
        values += [UOp(op, d, (a, b)) for op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX)]
        values += [UOp(op, d, (a,)) for op in (Ops.NEG, Ops.RECIPROCAL, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN,
                                               Ops.TRUNC)]
    elif d.is_int:
        values += [UOp(op, d, (a, b)) for op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.AND,
                                                 Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR)]
        values += [UOp(Ops.NEG, d, (a,)), a // UOp.const(d, 3), a % UOp.const(d, 3)]
    else:
        values += [UOp(op, d, (a, b)) for op in (Ops.AND, Ops.OR, Ops.XOR, Ops.MAX, Ops.ADD)]
    values += [UOp(op, dtypes.bool, (a, b)) for op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)]
    values += [UOp(Ops.WHERE, d, (cond, a, b)), a.pad(((2, 0),)).shrink(((0, n),))]
    values += [UOp(Ops.CAST, t, (a,)) for t in ALL if t != d]
    values += [UOp(Ops.BITCAST, t, (a,)) for t in ALL if t != d and t.itemsize == d.itemsize and not t.is_bool
               and not d.is_bool]
    stores = tuple(UOp(Ops.STORE, dtypes.void, (UOp(Ops.PARAM, v.dtype, (), (i, n)), v)) for i, v in enumerate(values))
    return UOp(Ops.SINK, dtypes.void, stores)


def compiles(c_compiler: str, src: str) -> None:
    proc = subprocess.run([c_compiler, "-std=gnu11", "-fsyntax-only", "-Werror=implicit-function-declaration",
                           "-x", "c", "-"], input=src, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr + "\n" + src


@pytest.mark.parametrize("d", ALL, ids=lambda d: d.name)
def test_every_op_of_every_dtype_renders_to_valid_c(d: DType, c_compiler: str) -> None:
    compiles(c_compiler, get_program(elementwise_ast(d), R).src)


def test_reduce_kernels_render_to_valid_c(c_compiler: str) -> None:
    for d in (dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.int64, dtypes.uint8, dtypes.bool):
        for op in (Ops.ADD, Ops.MAX, Ops.MUL):
            x = UOp(Ops.PARAM, d, (), (1, 12)).reshape((3, 4))
            out = UOp(Ops.PARAM, d, (), (0, 3)).reshape((3, 1))
            ast = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, x.reduce_axis(op, (1,)))),))
            compiles(c_compiler, get_program(ast, R).src)


def test_max_chain_does_not_grow_exponentially() -> None:
    a = UOp(Ops.PARAM, dtypes.float32, (), (1, 4))
    v = a
    for i in range(12):  # inlined, each MAX would repeat its operand's text three times: 3**12 copies
        v = v.maximum(a * float(i))
    ast = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (UOp(Ops.PARAM, dtypes.float32, (), (0, 4)), v)),))
    assert len(get_program(ast, R).src) < 12 * 400


def store_ast(value: UOp, n: int = 4) -> UOp:
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (UOp(Ops.PARAM, value.dtype, (), (0, n)), value)),))


def test_loads_are_not_inlined_into_an_arm_of_a_where() -> None:
    # C evaluates one arm of `c ? a : b`: a load there must be guarded by a branch (relu's backward was scalar code
    # mispredicting on every element); read before the select, it becomes a branch-free blend
    x, g = (UOp(Ops.PARAM, dtypes.float32, (), (i, 4)) for i in (1, 2))
    src = get_program(store_ast(x.lt(0.0).where(0.0, g * 2.0 + x)), R).src
    body = [line.strip() for line in src.splitlines() if "?" in line and "data0[" in line]
    assert body and not any("data2[" in line or "data1[" in line.split("?", 1)[1] for line in body), src
    # the condition itself may read memory inline: only the arms are evaluated lazily
    cond_only = get_program(store_ast(x.lt(0.0).where(0.0, 1.0)), R).src
    assert any("data1[" in line and "?" in line for line in cond_only.splitlines()), cond_only


def test_float_max_renders_without_short_circuit_operators() -> None:
    # `||` and `&&` may compile to branches; NaN propagation and +0.0 over -0.0 need only `|` and `&`
    a, b = (UOp(Ops.PARAM, dtypes.float32, (), (i, 4)) for i in (1, 2))
    src = get_program(store_ast(a.maximum(b)), R).src
    kernel = src[src.index("void "):]
    assert "signbit" in kernel and "||" not in kernel and "&&" not in kernel, kernel


def test_kernel_names_say_what_they_do() -> None:
    x = UOp(Ops.PARAM, dtypes.float32, (), (1, 12)).reshape((3, 4))
    out = UOp(Ops.PARAM, dtypes.float32, (), (0, 3)).reshape((3, 1))
    reduce_ast = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, x.reduce_axis(Ops.ADD, (1,)))),))
    assert get_program(reduce_ast, R).name == "r_3_4"
    out2 = UOp(Ops.PARAM, dtypes.float32, (), (0, 12)).reshape((3, 4))
    elementwise = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out2, x + 1.0)),))
    spec = get_program(elementwise, R)
    assert spec.name == "E_3_4"
    assert spec.param_indices == (0, 1)
    assert "const float* restrict data1" in spec.src and "float* restrict data0" in spec.src


# ---------------------------------------------------------------------------------------------------------------------
# the op table

def test_code_for_op_has_an_entry_for_every_alu_op() -> None:
    from tinygrad.uop.ops import GroupOp
    missing = sorted(op.name for op in GroupOp.ALU if op not in CStyleRenderer.code_for_op)
    assert not missing, f"CStyleRenderer.code_for_op lacks {missing}"


def test_a_subclass_changes_an_op_by_overriding_its_table_entry() -> None:
    class FmaxRenderer(CStyleRenderer):
        code_for_op = {**CStyleRenderer.code_for_op, Ops.MAX: lambda r, d, src, a, b: f"fmaxf({a},{b})"}

    a, b = UOp(Ops.PARAM, dtypes.float32, (), (1, 4)), UOp(Ops.PARAM, dtypes.float32, (), (2, 4))
    ast = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (UOp(Ops.PARAM, dtypes.float32, (), (0, 4)),
                                                                     a.maximum(b))),))
    src = get_program(ast, FmaxRenderer()).src
    assert "fmaxf(" in src and "signbit" not in src
    assert "fmaxf(" not in get_program(ast, R).src  # the base's table is untouched
