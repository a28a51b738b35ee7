"""Renderers turn a linearized program (a list of UOps) into source code for one target.

`Renderer` is the backend's part of the device contract: it names the ops it can write
(`code_for_op`) and the dtypes it supports; the compiler decomposes anything else before rendering.
"""

from __future__ import annotations

from tinygrad.dtype import DType, dtypes
from tinygrad.uop.ops import Ops, UOp


class Renderer:
    device: str = ""
    #: dtypes this target can hold in memory and compute with (directly or by emulation in the renderer)
    supported_dtypes: frozenset[DType] = frozenset(dtypes.all())
    #: GPU-style targets map global ranges to work-item ids; CPU-style ones loop
    has_local: bool = False
    global_max: tuple[int, ...] | None = None

    def supports_dtype(self, dtype: DType) -> bool:
        return dtype.scalar in self.supported_dtypes

    def render(self, name: str, program: list[UOp]) -> str:
        raise NotImplementedError

    def global_ranges(self, program: list[UOp]) -> list[UOp]:
        """The loop RANGEs a `has_local` target runs as work-items, in launch-dimension order; the launch's
        global size is their sizes. The default is every global range; a target that maps only some of them
        (keeping the rest as loops in the kernel) narrows this."""
        return [u for u in program if u.op is Ops.RANGE and u.arg[1] == "global"]

    @staticmethod
    def kernel_name(sink: UOp) -> str:
        """A readable name: r_ for kernels with a reduction, E_ for elementwise, then the loop sizes."""
        ranges = sorted((u for u in sink.toposort() if u.op is Ops.RANGE), key=lambda r: r.arg[0])
        prefix = "r" if any(r.arg[1] == "reduce" for r in ranges) else "E"
        sizes = "_".join(_size_name(r.src[0]) for r in ranges) or "1"
        return f"{prefix}_{sizes}"


def _size_name(size: UOp) -> str:
    if size.op is Ops.CONST:
        return str(size.arg)
    if size.op is Ops.DEFINE_VAR:
        return str(size.arg[0])
    return "s"  # a symbolic expression
