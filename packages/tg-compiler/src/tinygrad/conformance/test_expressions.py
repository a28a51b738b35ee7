"""Compile-only mode only: every kernel of the table of Tensor expressions (`tinygrad.conformance.expressions`)
is built for the target: rendered and compiled, never run. An expression whose kernels compute in a dtype the
device does not claim is skipped (the device refuses it, as the contract says; `dtypes` checks that refusal).

Collected only with --tg-compile-only: on a device that is present, the other groups run their kernels.
"""

from __future__ import annotations

import pytest
from tinygrad.conformance.claims import DeviceClaims
from tinygrad.conformance.expressions import EXPRESSIONS, build, families
from tinygrad.conformance.report import CompileOnlyRun
from tinygrad.device import Device
from tinygrad.dtype import dtypes


@pytest.mark.parametrize("name", list(EXPRESSIONS))
def test_expression_compiles(tg_device: str, tg_claims: DeviceClaims, tg_compile_only: CompileOnlyRun | None,
                             name: str) -> None:
    if tg_compile_only is None:
        pytest.skip("the expression table only builds kernels: it runs with --tg-compile-only")
    asts = build(name, tg_device)
    assert asts, f"{name} scheduled no kernel"
    unclaimed = sorted({u.dtype.scalar.name for ast in asts for u in ast.toposort()
                        if u.dtype.kind != "void" and u.dtype != dtypes.index and not tg_claims.claims(u.dtype)})
    if unclaimed:
        pytest.skip(f"device {tg_claims.device} does not claim {', '.join(unclaimed)}")
    dev = Device[tg_device]
    for ast in asts:
        dev.get_runner(ast)  # renders and compiles for the target; a failure raises with the compiler's message


def test_the_table_covers_every_op_family() -> None:
    assert {"add", "where", "cast", "bitcast", "sum", "matmul", "conv2d", "gather", "cumsum", "pad", "shrink",
            "permute", "expand", "symbolic"} <= families()
    assert len(EXPRESSIONS) >= 100
