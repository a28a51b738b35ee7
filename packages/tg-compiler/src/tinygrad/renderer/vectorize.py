"""Finding vector loads and stores in a linearized program (for renderers with `vector_widths`).

An UPCAST copies a load once per value of the upcast index, so a contiguous upcast axis leaves w loads
`buf[X + c0]`, `buf[X + c0 + 1]`, ..., `buf[X + c0 + w - 1]` that differ only in their constant part.
They become one vector access when

* the w accesses are of one buffer, ungated, at the same loop depth, of a dtype the target vectorises,
* X + c0 is provably a multiple of w: c0 is, and so is every other term of the index sum (a constant, or a
  product with a constant factor that is) - the target may then use aligned vector types,
* for loads: the buffer is only read in this kernel; for stores: no other access to the buffer comes
  between the first and the last of the w stores (the vector store is written at the last one).

Anything else stays scalar, which is always correct.
"""

from __future__ import annotations

from dataclasses import dataclass

from tinygrad.dtype import DType
from tinygrad.uop.ops import Ops, UOp


@dataclass(frozen=True)
class VectorAccess:
    """One vector access: its members in lane order, the index terms X and the constant c0 of lane 0."""

    members: tuple[UOp, ...]
    terms: tuple[UOp, ...]
    offset: int

    @property
    def width(self) -> int:
        return len(self.members)


def split_index(idx: UOp) -> tuple[tuple[UOp, ...], int]:
    """An index sum as (its non-constant terms, in a canonical order, and its constant part)."""
    terms: list[UOp] = []
    const = 0
    stack = [idx]
    while stack:
        u = stack.pop()
        if u.op is Ops.ADD:
            stack.extend(u.src)
        elif u.op is Ops.CONST:
            const += int(u.arg)
        else:
            terms.append(u)
    return tuple(sorted(terms, key=id)), const


def multiple_of(u: UOp, w: int) -> bool:
    """Whether u is provably a multiple of w for every value of its variables."""
    if u.op is Ops.CONST:
        return int(u.arg) % w == 0
    if u.op is Ops.MUL:
        return any(multiple_of(s, w) for s in u.src)
    if u.op is Ops.ADD:
        return all(multiple_of(s, w) for s in u.src)
    return False


def find_vector_accesses(program: list[UOp], widths: tuple[int, ...], dtypes_ok: frozenset[DType],
                         depth_of: dict[UOp, int]) -> dict[UOp, VectorAccess]:
    """Each LOAD/STORE that is part of a vector access, mapped to that access."""
    out: dict[UOp, VectorAccess] = {}
    if not widths:
        return out
    stored = {u.src[0].src[0] for u in program if u.op is Ops.STORE}
    position = {u: i for i, u in enumerate(program)}
    for op in (Ops.LOAD, Ops.STORE):
        candidates: dict[tuple, dict[int, UOp]] = {}
        for u in program:
            if u.op is not op:
                continue
            index = u.src[0]
            buf = index.src[0]
            if buf.op is not Ops.PARAM or len(index.src) > 2 or (op is Ops.STORE and len(u.src) > 2) or \
                    index.dtype.scalar not in dtypes_ok or (op is Ops.LOAD and buf in stored):
                continue
            terms, const = split_index(index.src[1])
            candidates.setdefault((buf, terms, depth_of[u]), {})[const] = u
        for (buf, terms, _), by_const in candidates.items():
            for w in sorted(widths, reverse=True):
                if not all(multiple_of(t, w) for t in terms):
                    continue
                for c0 in sorted(by_const):
                    if c0 % w or any(by_const.get(c0 + i) is None or by_const[c0 + i] in out for i in range(w)):
                        continue
                    members = tuple(by_const[c0 + i] for i in range(w))
                    if op is Ops.STORE and not _stores_uninterrupted(program, position, members, buf):
                        continue
                    # the address's terms in program order: the id order that groups them varies from run to run
                    ordered = tuple(sorted(terms, key=lambda t: position.get(t, -1)))
                    access = VectorAccess(members, ordered, c0)
                    for m in members:
                        out[m] = access
    return out


def _stores_uninterrupted(program: list[UOp], position: dict[UOp, int], members: tuple[UOp, ...],
                          buf: UOp) -> bool:
    first, last = min(position[m] for m in members), max(position[m] for m in members)
    for u in program[first:last + 1]:
        if u in members:
            continue
        if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].src[0] is buf:
            return False
        if u.op in (Ops.RANGE, Ops.END, Ops.IF, Ops.ENDIF, Ops.BARRIER):
            return False
    return True


__all__ = ["VectorAccess", "find_vector_accesses", "multiple_of", "split_index"]
