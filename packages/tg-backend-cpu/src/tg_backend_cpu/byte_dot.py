"""Byte dot products: a sum of four byte products recognised in an int32 expression, for one instruction.

An int32 word can hold four bytes. The dot product of the four unsigned bytes of a word `u` with the four signed
bytes of a word `v`, written with shifts and masks every backend computes,

    ((u >> 0) & m) * ((v << 24) >> 24) + ((u >> 8) & m) * ((v << 16) >> 24)
        + ((u >> 16) & m) * ((v << 8) >> 24) + ((u >> 24) & m) * (v >> 24)           (m <= 255, >> arithmetic)

is one instruction on CPUs with byte dot products (x86's AVX512-VNNI `vpdpbusd`: a 32-bit lane adds the four
products of its unsigned and signed bytes to itself; ARM's `sdot`/`udot` are the same idea). A quantized matrix-vector
product written this way (4-bit weights times int8 activations, `tinygrad.llm.quant`) does 64 multiply-adds per
instruction instead of a few. `byte_dots` finds the four terms of such sums inside an int32 sum of any order (the
terms may be spread over a tree of adds, with other terms among them); the LLVM path's vector tiles write each as
the instruction where the target has it (`llvm_tiles`), else as the same shifts and masks on vectors. Integer sums
are exact: grouping the terms differently gives the same bits.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from tinygrad.dtype import dtypes
from tinygrad.uop.ops import Ops, UOp


@dataclass(frozen=True)
class ByteDot:
    """sum over bytes i of ((u >> 8i) & mask) * (signed byte i of v): `u`'s bytes read as unsigned under `mask`."""

    u: UOp
    v: UOp
    mask: int


def _const(u: UOp) -> int | None:
    return u.arg if u.op is Ops.CONST and isinstance(u.arg, int) and not isinstance(u.arg, bool) else None


def _unsigned_byte(x: UOp) -> tuple[UOp, int, int] | None:
    """(u, byte, mask) where x is `(u >> 8*byte) & mask` (a shift by 0 may be left out), mask within a byte."""
    if x.op is not Ops.AND or x.dtype not in (dtypes.int32, dtypes.uint32):
        return None
    for a, m in ((x.src[0], x.src[1]), (x.src[1], x.src[0])):
        mask = _const(m)
        if mask is None or not 0 < mask <= 0xFF:
            continue
        if a.op is Ops.SHR and (s := _const(a.src[1])) is not None and s in (0, 8, 16, 24):
            return a.src[0], s // 8, mask
        return a, 0, mask
    return None


def _signed_byte(x: UOp) -> tuple[UOp, int] | None:
    """(v, byte) where x is `(v << (24 - 8*byte)) >> 24` in int32 (arithmetic: the byte's sign fills the word)."""
    if x.op is not Ops.SHR or x.dtype != dtypes.int32 or _const(x.src[1]) != 24:
        return None
    inner = x.src[0]
    if inner.op is Ops.SHL and (s := _const(inner.src[1])) is not None and s in (0, 8, 16, 24):
        return inner.src[0], 3 - s // 8
    return inner, 3


def _term(x: UOp) -> tuple[UOp, UOp, int, int] | None:
    """(u, v, mask, byte) where x is one product of a byte dot."""
    if x.op is not Ops.MUL or x.dtype != dtypes.int32:
        return None
    for a, b in ((x.src[0], x.src[1]), (x.src[1], x.src[0])):
        ub, sb = _unsigned_byte(a), _signed_byte(b)
        if ub is not None and sb is not None and ub[1] == sb[1]:
            return ub[0], sb[0], ub[2], ub[1]
    return None


def _addends(x: UOp) -> list[UOp]:
    """The terms of an int32 sum written as a tree of adds, left to right."""
    out: list[UOp] = []
    stack = [x]
    while stack:  # not a graph walk: the tree of one sum's adds, each entered once from its parent
        u = stack.pop()
        if u.op is Ops.ADD and u.dtype == dtypes.int32:
            stack.extend(reversed(u.src))
        else:
            out.append(u)
    return out


@functools.lru_cache(maxsize=1 << 12)
def byte_dots(x: UOp) -> tuple[tuple[ByteDot, ...], tuple[UOp, ...]] | None:
    """The byte dots in the int32 sum x, in the order of their first term, and the sum's other terms; None where x
    holds no whole byte dot (four products, one of each byte of the same u, v and mask)."""
    if x.op is not Ops.ADD or x.dtype != dtypes.int32:
        return None
    terms = _addends(x)
    found: dict[tuple[UOp, UOp, int], dict[int, UOp]] = {}
    for t in terms:
        if (m := _term(t)) is not None:
            found.setdefault(m[:3], {}).setdefault(m[3], t)
    whole = {key: by_byte for key, by_byte in found.items() if len(by_byte) == 4}
    if not whole:
        return None
    used = {t for by_byte in whole.values() for t in by_byte.values()}
    dots = tuple(ByteDot(u, v, mask) for (u, v, mask) in whole)
    rest, seen = [], set()
    for t in terms:
        if t in used and t not in seen:
            seen.add(t)  # a term that appears twice in the sum counts twice: only its first use is the dot's
            continue
        rest.append(t)
    return dots, tuple(rest)


def host_has_byte_dot(width: int) -> bool:
    """Whether this host's LLVM target has `vpdpbusd` on vectors of `width` int32 lanes (16: AVX512-VNNI; 8: with
    AVX512-VL, or AVX-VNNI)."""
    features = _llvm_host_features()
    if width == 16:
        return "+avx512vnni" in features
    if width == 8:
        return ("+avx512vnni" in features and "+avx512vl" in features) or "+avxvnni" in features
    return False


@functools.cache
def _llvm_host_features() -> frozenset[str]:
    import llvmlite.binding as llvm

    return frozenset(f for f in llvm.get_host_cpu_features().flatten().split(",") if f.startswith("+"))
