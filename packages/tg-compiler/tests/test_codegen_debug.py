"""DEBUG levels of the codegen pipeline: 3 the chosen optimisations, 4 the source, 5 the AST, 6 the program."""

from __future__ import annotations

import pytest
from tinygrad.codegen import get_program
from tinygrad.codegen.linearize import linearize
from tinygrad.codegen.lowerer import lower_kernel
from tinygrad.dtype import dtypes
from tinygrad.helpers import Context
from tinygrad.renderer.cstyle import CStyleRenderer
from tinygrad.uop.ops import Ops, UOp


def reduce_ast() -> UOp:
    x = UOp(Ops.PARAM, dtypes.float32, (), (1, 20)).reshape((4, 5))
    out = UOp(Ops.PARAM, dtypes.float32, (), (0, 4)).reshape((4, 1))
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, (x * 3.0).reduce_axis(Ops.ADD, (1,)))),))


def debug_output(level: int, capsys: pytest.CaptureFixture[str], noopt: int = 0) -> tuple[str, str]:
    with Context(DEBUG=level, NOOPT=noopt):
        spec = get_program(reduce_ast(), CStyleRenderer())
    captured = capsys.readouterr()
    assert captured.out == ""  # diagnostics go to stderr, never into a program's output
    return spec.src, captured.err


def test_debug_0_is_silent(capsys: pytest.CaptureFixture[str]) -> None:
    assert debug_output(0, capsys)[1] == ""


def test_debug_3_names_the_kernel_and_its_optimisations(capsys: pytest.CaptureFixture[str]) -> None:
    src, err = debug_output(3, capsys)
    assert "r_4_5" in err and "opts" in err
    assert src not in err


def test_debug_4_prints_the_source(capsys: pytest.CaptureFixture[str]) -> None:
    src, err = debug_output(4, capsys)
    assert src.strip() in err
    assert "void r_4_5(" in err
    assert "UOp(" not in err  # not the AST yet


def test_debug_5_prints_the_ast(capsys: pytest.CaptureFixture[str]) -> None:
    _, err = debug_output(5, capsys)
    assert "UOp(Ops.SINK" in err and "REDUCE_AXIS" in err


def test_debug_6_prints_the_linearized_program(capsys: pytest.CaptureFixture[str]) -> None:
    src, err = debug_output(6, capsys, noopt=1)  # the program as lowered: its reduce loop (heuristics unroll it)
    program = linearize(lower_kernel(reduce_ast()))
    lines = [line for line in err.splitlines() if line[:4].strip().isdigit()]
    assert len(lines) == len(program)
    for i, (line, u) in enumerate(zip(lines, program, strict=True)):
        fields = line.split()
        assert int(fields[0]) == i and fields[1] == u.op.name
    for op in ("RANGE", "DEFINE_ACC", "ASSIGN", "END", "STORE"):
        assert any(line.split()[1] == op for line in lines)
    assert src.strip() in err  # 6 includes everything below it


def test_a_kernel_in_a_dtype_the_device_lacks_is_refused_with_the_alternatives() -> None:
    from tinygrad import Tensor, dtypes
    from tinygrad.device import Device
    from tinygrad.runtime.device import Compiled

    dev = Device[Device.DEFAULT]
    assert isinstance(dev, Compiled)
    saved = type(dev.renderer).supported_dtypes
    try:
        type(dev.renderer).supported_dtypes = frozenset(d for d in dtypes.all() if d != dtypes.float64)
        with pytest.raises(TypeError, match=r"cannot compute with float64.*Cast"):
            (Tensor([1.0, 2.0]).cast(dtypes.float64) * 3).realize()
    finally:
        type(dev.renderer).supported_dtypes = saved
