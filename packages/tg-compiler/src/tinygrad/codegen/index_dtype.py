"""Index typing: give every index expression a concrete integer type, int32 where its whole range fits and int64
where it may not.

Lowering and optimisation compute indices in `dtypes.index`, a mathematical integer: the simplifier may assume that
`r*500000 + c` never wraps, and value bounds (`vmin`/`vmax`) are exact. This pass runs last, before linearizing, and
types each index node from those bounds:

* a node is int64 when its bounds leave int32's range, or when one of its operands is int64 (a value computed from a
  64-bit one is computed in 64 bits, even where it fits again: `(r*500000) // 7`);
* the int32 operands of an int64 node are widened *before* the operation (a CAST, or a 64-bit constant), so no
  product is formed in 32 bits and widened after it wrapped;
* a loop counter is int64 when its bound is past int32's largest value (the last `i++` of an int32 counter would
  wrap and the loop would never end);
* a Variable is a 32-bit kernel argument: one whose range is past int32 is refused.

Everything else stays int32, so kernels whose indices fit are rendered exactly as before this pass existed: 64-bit
arithmetic costs only the kernels that need it. A target without 64-bit integers (`Renderer.index_wide_dtype` is
None, as on WGSL) refuses a kernel that needs them with an `IndexRangeError` naming the value and the limit.
"""

from __future__ import annotations

from tinygrad.dtype import DType, dtypes
from tinygrad.uop.ops import GroupOp, Ops, UOp

NARROW = dtypes.int32
# DType.min/max are computed properties; this pass asks them for every index node
_NARROW_MIN, _NARROW_MAX, _NARROW_BYTES = NARROW.min, NARROW.max, NARROW.itemsize


class IndexRangeError(ValueError):
    """A kernel's index arithmetic needs a wider integer than the target has."""


def fits_narrow(u: UOp) -> bool:
    return _NARROW_MIN <= u.vmin and u.vmax <= _NARROW_MAX


def type_indices(sink: UOp, wide: DType | None, device: str = "this device") -> UOp:
    """`sink` with every `dtypes.index` node made int32 or `wide` (see the module docstring)."""
    typed: dict[UOp, UOp] = {}
    retype, typed_of = _IndexTyper(wide, device).retype, typed.__getitem__
    index, comparisons = dtypes.index, GroupOp.Comparison
    for u in sink.toposort():
        src = u.src
        new_src = tuple(map(typed_of, src))
        if u.dtype is index or (u.op in comparisons and src[0].dtype is index):
            typed[u] = retype(u, new_src)
        else:  # not index arithmetic: only its sources may have changed
            typed[u] = u if new_src == src else UOp(u.op, u.dtype, new_src, u.arg)
    return typed[sink]


class _IndexTyper:
    def __init__(self, wide: DType | None, device: str):
        self.wide, self.device = wide, device

    def retype(self, u: UOp, src: tuple[UOp, ...]) -> UOp:
        if u.dtype == dtypes.index:
            return self._index_node(u, src)
        if u.op in GroupOp.Comparison and u.src[0].dtype == dtypes.index:
            return u.replace(src=self._same_width(src, u))
        return u if src == u.src else u.replace(src=src)

    def _index_node(self, u: UOp, src: tuple[UOp, ...]) -> UOp:
        if u.op is Ops.CONST:
            if fits_narrow(u) and type(u.arg) is int:  # already its own int32 value: nothing to truncate
                return UOp(Ops.CONST, NARROW, (), u.arg)
            return UOp.const(NARROW if fits_narrow(u) else self._wide_for(u), u.arg)
        if u.op is Ops.CAST:
            # a value (an index tensor's element) entering index arithmetic: its bounds, not its dtype's width,
            # decide, so a clamped int64 value becomes an int32 index (codegen/gather_fold.py narrows them)
            return u.replace(dtype=NARROW if fits_narrow(u) else self._wide_for(u), src=src)
        if u.op is Ops.DEFINE_VAR:
            if not fits_narrow(u):
                raise IndexRangeError(f"Variable {u.arg.name} ranges over [{u.arg.vmin}, {u.arg.vmax}], past the int32 "
                                      f"kernel argument it is passed as (largest {NARROW.max}); give it a smaller "
                                      f"max_val")
            return u.replace(dtype=NARROW)
        if u.op is Ops.RANGE:
            if u.src[0].vmax <= NARROW.max:
                return u.replace(dtype=NARROW, src=src)
            wide = self._wide_for(u.src[0])
            return u.replace(dtype=wide, src=(self._widen(src[0], wide),))
        # arithmetic: WHERE's condition is a bool, its two values are the operands
        operands = src[1:] if u.op is Ops.WHERE else src
        if fits_narrow(u):
            for s in operands:
                if s.dtype.itemsize > _NARROW_BYTES:
                    break
            else:  # the usual case: int32 from int32 operands, nothing to widen
                return UOp(u.op, NARROW, src, u.arg)
        dtype = self._wide_for(u)
        first = 1 if u.op is Ops.WHERE else 0
        new_src = src[:first] + tuple(self._widen(s, dtype) if s.dtype.is_int else s for s in src[first:])
        return UOp(u.op, dtype, new_src, u.arg)

    def _same_width(self, src: tuple[UOp, ...], node: UOp) -> tuple[UOp, ...]:
        """Operands of a comparison in one type: the wider of theirs."""
        if any(s.dtype.itemsize > NARROW.itemsize for s in src):
            dtype = self._wide_for(node.src[0])
            return tuple(self._widen(s, dtype) for s in src)
        return src

    def _wide_for(self, u: UOp) -> DType:
        if self.wide is None:
            reach = int(u.vmin) if u.vmin < NARROW.min else int(u.vmax)
            raise IndexRangeError(f"an index of this kernel reaches {reach}, past the 32-bit integers of "
                                  f"{self.device} (largest {NARROW.max}); it has no 64-bit integers, so split the "
                                  f"tensor into parts under 2**31 elements or run it on another device")
        return self.wide

    @staticmethod
    def _widen(u: UOp, dtype: DType) -> UOp:
        if u.dtype == dtype:
            return u
        return UOp.const(dtype, u.arg) if u.op is Ops.CONST else UOp(Ops.CAST, dtype, (u,))


__all__ = ["IndexRangeError", "fits_narrow", "type_indices"]
