"""Tensor cores as data: what one matrix instruction of a GPU computes and where each lane keeps its operands.

A tensor core instruction is executed by a whole warp (wave) of `threads` lanes together: it multiplies an
M x K tile of A by a K x N tile of B and adds an M x N tile C. No lane holds a whole tile; each holds a few
elements of each operand, the *fragments*, in a layout the hardware fixes. A layout here is a function
(lane, element) -> (row, column) of the tile, written with `+ * // %` only, so that it works on Python ints (the
tests, emulation) and on index UOps (the TC optimisation substitutes it into a kernel's loads and stores, see
`tinygrad.codegen.opt.tensor_cores`).

The renderer of a target lists the tensor cores it can use (`Renderer.tensor_cores`) and writes the instruction
itself (a C-style renderer: the `Ops.WMMA` entry of `render_rules`), given each lane's fragment values. The
layouts below are the vendors' documented ones: PTX ISA "Matrix Fragments for mma.m16n8k16", AMD's RDNA3 WMMA
(wave32) and CDNA3 MFMA 16x16x16 (wave64).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tinygrad.dtype import DType, dtypes

#: (lane, element index) -> (row, column); lane is an int or an index UOp
Layout = Callable[[Any, int], tuple[Any, Any]]


@dataclass(frozen=True)
class TensorCore:
    """One matrix instruction: D (M x N, `dtype_acc`) = A (M x K, `dtype_in`) @ B (K x N, `dtype_in`) + C, run
    by `threads` lanes, each holding `elements[0]` values of A, `elements[1]` of B and `elements[2]` of C/D.
    Compared and hashed by name and shape (it is the arg of WMMA UOps); the layouts are functions."""

    name: str
    dims: tuple[int, int, int]  # M, N, K
    threads: int
    dtype_in: DType
    dtype_acc: DType
    elements: tuple[int, int, int]
    layout_a: Layout = field(compare=False, hash=False, repr=False)
    layout_b: Layout = field(compare=False, hash=False, repr=False)
    layout_c: Layout = field(compare=False, hash=False, repr=False)

    def __str__(self) -> str:
        m, n, k = self.dims
        return f"{self.name} {m}x{n}x{k} {self.dtype_in.name}->{self.dtype_acc.name}"

    def check_layouts(self) -> None:
        """Every element of every tile is held by some lane (A and B may be held twice: RDNA3 replicates them
        across the two half-waves), and every element of C exactly once; a layout that misses one is a bug."""
        m, n, k = self.dims
        for what, layout, count, shape, once in (("A", self.layout_a, self.elements[0], (m, k), False),
                                                 ("B", self.layout_b, self.elements[1], (k, n), False),
                                                 ("C", self.layout_c, self.elements[2], (m, n), True)):
            seen = [layout(lane, i) for lane in range(self.threads) for i in range(count)]
            cells = {(r, c) for r in range(shape[0]) for c in range(shape[1])}
            if set(seen) != cells or (once and len(seen) != len(cells)):
                raise AssertionError(f"{self}: the layout of {what} does not cover its {shape[0]}x{shape[1]} tile")


class LaneText:
    """A layout's arithmetic written out as C text, for renderers that compute coordinates in the kernel (lanes are
    never negative, so C's / and % are Python's // and %)."""

    def __init__(self, text: str):
        self.text = text

    def _op(self, sym: str, other: Any, reverse: bool = False) -> LaneText:
        o = other.text if isinstance(other, LaneText) else str(other)
        return LaneText(f"({o}{sym}{self.text})" if reverse else f"({self.text}{sym}{o})")

    def __add__(self, o: Any) -> LaneText: return self._op("+", o)
    def __radd__(self, o: Any) -> LaneText: return self._op("+", o, True)
    def __mul__(self, o: Any) -> LaneText: return self._op("*", o)
    def __rmul__(self, o: Any) -> LaneText: return self._op("*", o, True)
    def __floordiv__(self, o: Any) -> LaneText: return self._op("/", o)
    def __mod__(self, o: Any) -> LaneText: return self._op("%", o)


def lane_coordinates(layout: Layout, lane: str, i: int) -> tuple[str, str]:
    """C text of the (row, column) of element i of lane `lane` (a C expression)."""
    row, col = layout(LaneText(lane), i)
    return (row.text if isinstance(row, LaneText) else str(row)), (col.text if isinstance(col, LaneText) else str(col))


def tile_offset(layout: Layout, lane: str, i: int, row_length: int) -> str:
    """C text of where element i of lane `lane` sits in a row-major tile of `row_length` columns."""
    row, col = lane_coordinates(layout, lane, i)
    return f"{row}*{row_length}+{col}"


# ---- Apple: simdgroup_matrix 8x8 (MSL's simdgroup_load/multiply_accumulate/store) ----
# where a lane's elements sit inside the hardware's matrices is not documented: the renderer goes through
# threadgroup memory with simdgroup_load and simdgroup_store, so this layout is the renderer's own choice, two
# neighbouring elements of one row per lane

def _pairs(lane: Any, i: int) -> tuple[Any, Any]:
    return lane // 4, lane % 4 * 2 + i


def simdgroup_8x8(dtype_in: DType) -> TensorCore:
    return TensorCore("simdgroup.8x8", (8, 8, 8), 32, dtype_in, dtypes.float32, (2, 2, 2), _pairs, _pairs, _pairs)


# ---- NVIDIA: mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16} (sm_80 and newer) ----
# lanes in groups of four: g = lane // 4 is a row (of A and C) or column (of B), t = lane % 4 a pair of columns

def _mma_a(lane: Any, i: int) -> tuple[Any, Any]:
    return lane // 4 + 8 * ((i // 2) % 2), lane % 4 * 2 + i % 2 + 8 * (i // 4)


def _mma_b(lane: Any, i: int) -> tuple[Any, Any]:
    return lane % 4 * 2 + i % 2 + 8 * (i // 2), lane // 4


def _mma_c(lane: Any, i: int) -> tuple[Any, Any]:
    return lane // 4 + 8 * (i // 2), lane % 4 * 2 + i % 2


def mma_m16n8k16(dtype_in: DType) -> TensorCore:
    return TensorCore("mma.m16n8k16", (16, 8, 16), 32, dtype_in, dtypes.float32, (8, 4, 4), _mma_a, _mma_b, _mma_c)


# ---- AMD RDNA3 (gfx11): v_wmma_f32_16x16x16_{f16,bf16}, wave32 ----
# lane % 16 is a row of A and a column of B and C; both half-waves hold all of A and B, and C's rows alternate
# between them

def _wmma_a(lane: Any, i: int) -> tuple[Any, Any]:
    return lane % 16, i


def _wmma_b(lane: Any, i: int) -> tuple[Any, Any]:
    return i, lane % 16


def _wmma_c(lane: Any, i: int) -> tuple[Any, Any]:
    return lane // 16 + 2 * i, lane % 16


def rdna3_wmma(dtype_in: DType) -> TensorCore:
    return TensorCore("wmma.16x16x16.w32", (16, 16, 16), 32, dtype_in, dtypes.float32, (16, 16, 8),
                      _wmma_a, _wmma_b, _wmma_c)


# ---- AMD CDNA3 (gfx942): v_mfma_f32_16x16x16_{f16,bf16}, wave64 ----
# lane % 16 is a row of A and a column of B and C; lane // 16 picks which four of the K (and of C's rows) it holds

def _mfma_a(lane: Any, i: int) -> tuple[Any, Any]:
    return lane % 16, lane // 16 * 4 + i


def _mfma_b(lane: Any, i: int) -> tuple[Any, Any]:
    return lane // 16 * 4 + i, lane % 16


def _mfma_c(lane: Any, i: int) -> tuple[Any, Any]:
    return lane // 16 * 4 + i, lane % 16


def cdna3_mfma(dtype_in: DType) -> TensorCore:
    return TensorCore("mfma.16x16x16", (16, 16, 16), 64, dtype_in, dtypes.float32, (4, 4, 4),
                      _mfma_a, _mfma_b, _mfma_c)


__all__ = ["LaneText", "Layout", "TensorCore", "cdna3_mfma", "lane_coordinates", "mma_m16n8k16", "rdna3_wmma",
           "simdgroup_8x8", "tile_offset"]
