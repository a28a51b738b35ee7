"""The LLVM path writes the address of a load or store that is a constant number of elements from a neighbour's (an
UPCAST's lanes, a register tile's rows and its epilogue's stores) as that offset from the neighbour's address
(`llvm_renderer.neighbour_addresses`): the same address, with less for LLVM's induction variable and scalar
evolution passes to analyse."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from tinygrad import Tensor
from tinygrad.codegen import get_program
from tinygrad.uop.ops import Ops, UOp

pytest.importorskip("llvmlite")

from tg_backend_cpu.llvm_renderer import LLVMRenderer, neighbour_addresses


class _Capturing(LLVMRenderer):
    """The LLVM renderer, keeping the linearized program of the last kernel it rendered."""

    program: list[UOp] = []

    def render(self, name: str, program: list[UOp]) -> str:
        self.program = program
        return super().render(name, program)


def _kernels(out: Tensor, vector_tiles: bool = True) -> list[tuple[str, list[UOp]]]:
    """(IR, linearized program) of each kernel of `out`'s schedule."""
    renderer = _Capturing()
    renderer.vector_tiles = vector_tiles
    return [(get_program(si.ast, renderer).src, renderer.program) for si in out.schedule() if si.ast.op is Ops.SINK]


def _no_wrap(program: list[UOp]) -> set[UOp]:
    from tg_backend_cpu.llvm_renderer import address_math
    return address_math(program)


def test_the_loads_of_a_scalar_tile_are_offsets_from_their_rows_first() -> None:
    x, w = Tensor.empty(64, 72), Tensor.empty(72, 48)
    ((src, _),) = _kernels(x @ w, vector_tiles=False)
    loads = len(re.findall(r"= load float, ptr %t", src))  # (not the accumulators' stack slots)
    from_buffer = len(re.findall(r"getelementptr inbounds float, ptr %data\d+,", src))
    from_neighbour = len(re.findall(r"getelementptr inbounds float, ptr %t\d+, i64 -?\d+\n", src))
    # a tile of 8 rows of A (one load each) times 32 columns of B (one row of neighbours): two addresses from the
    # buffers' starts per step of the reduction, the others offsets
    assert from_buffer <= 4 and from_neighbour >= loads - from_buffer, src[:4000]


@pytest.mark.skipif(os.environ.get("CPU_COMPILER", "llvm").lower() not in ("llvm", ""),
                    reason="the convolution's layout (channels-last operands, its tile) is chosen by the CPU device's "
                           "compiler path; this kernel is the LLVM path's, which CI's tests sessions run")
def test_a_tiles_strided_stores_are_offsets_from_the_first() -> None:
    # output channels as the tile's SIMD axis, stored 100 floats apart (the MNIST example's largest compile)
    x, w = Tensor.empty(8, 64, 12, 12), Tensor.empty(64, 32, 3, 3)
    out = x.conv2d(w.flip((2, 3)).transpose(0, 1)) / Tensor.empty(8, 32, 10, 10)
    src = max((s for s, _ in _kernels(out)), key=lambda s: s.count("store float"))
    stores = re.findall(r"store float %t\d+, ptr (%t\d+)", src)
    assert len(stores) >= 64, src[:3000]
    offsets = set(re.findall(r"(%t\d+) = getelementptr inbounds float, ptr %t\d+, i64 (\d+)00\n", src))
    assert sum(1 for p in stores if p in {name for name, _ in offsets}) >= len(stores) - 1, src[:3000]


def _rebased_across_loops(program: list[UOp]) -> list[UOp]:
    """The INDEXes `neighbour_addresses` bases on an INDEX whose loop has ended where they stand."""
    scope_at: dict[UOp, tuple[int, ...]] = {}
    scopes: list[int] = []
    for i, u in enumerate(program):
        if u.op is Ops.RANGE:
            scopes.append(i)
        elif u.op is Ops.END:
            scopes.pop()
        scope_at[u] = tuple(scopes)
    rebased = neighbour_addresses(program, _no_wrap(program))
    return [u for u, (base, _) in rebased.items() if scope_at[u][:len(scope_at[base])] != scope_at[base]]


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)  # type: ignore[no-any-return]


@pytest.mark.parametrize("make, want", [
    (lambda x: x.softmax(axis=-1), _softmax),  # the row read in the loop of its maximum, then in its sum's
    (lambda x: x.cumsum(axis=1), lambda x: np.cumsum(x, 1)),
    (lambda x: (x - x.mean(axis=1, keepdim=True)).square().mean(axis=1), lambda x: x.var(1)),
], ids=["softmax", "cumsum", "variance"])
def test_an_address_is_never_taken_from_a_loop_that_has_ended(make, want) -> None:  # type: ignore[no-untyped-def]
    xn = np.random.default_rng(0).standard_normal((7, 100)).astype(np.float32)
    kernels = _kernels(make(Tensor(xn)))
    assert kernels
    for _, program in kernels:
        assert not _rebased_across_loops(program)
    # compiled by LLVM, which refuses a use that its definition does not dominate
    np.testing.assert_allclose(make(Tensor(xn)).numpy(), want(xn), rtol=1e-4, atol=1e-5)


def test_gated_addresses_keep_their_own() -> None:
    # a padded convolution's loads are gated at the border: their index may be out of bounds where the gate is false
    x, w = Tensor.empty(2, 8, 10, 10), Tensor.empty(16, 8, 3, 3)
    programs = [p for _, p in _kernels(x.conv2d(w, padding=1), vector_tiles=False)]
    gated = [u for p in programs for u in p if u.op is Ops.INDEX and len(u.src) > 2]
    assert gated
    for p in programs:
        rebased = neighbour_addresses(p, _no_wrap(p))
        assert not any(len(u.src) > 2 or len(base.src) > 2 for u, (base, _) in rebased.items())
