"""Pattern matching over UOps: `UPat` describes a node, `PatternMatcher` maps matches to replacements,
`graph_rewrite` applies a matcher everywhere until nothing changes.

    pm = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c", 0))), lambda x, c: x)])
    graph_rewrite(sink, pm)   # every x+0 becomes x

A `src` tuple matches sources in order; a `src` list also tries the swapped order (for commutative ops).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

from tinygrad.dtype import DType
from tinygrad.helpers import VIZ
from tinygrad.uop.ops import ARG_RECORDS, Ops, UOp

Bindings = dict[str, UOp]


class UPat:
    __slots__ = ("arg", "commutative", "dtypes", "name", "ops", "src")

    def __init__(self, op: Ops | tuple[Ops, ...] | frozenset[Ops] | set[Ops] | None = None,
                 dtype: DType | tuple[DType, ...] | None = None,
                 src: tuple[UPat, ...] | list[UPat] | UPat | None = None, arg: Any = None, name: str | None = None):
        self.ops = None if op is None else (frozenset((op,)) if isinstance(op, Ops) else frozenset(op))
        self.dtypes = None if dtype is None else (frozenset((dtype,)) if isinstance(dtype, DType) else frozenset(dtype))
        self.commutative = isinstance(src, list)
        self.src: tuple[UPat, ...] | UPat | None = tuple(src) if isinstance(src, (list, tuple)) else src
        if type(arg) is tuple and self.ops is not None and len(self.ops) == 1:
            # a tuple for an op whose arg is a record (ParamArg, VarArg, ...) means the record, as in UOp(...)
            record = ARG_RECORDS.get(next(iter(self.ops)))
            arg = arg if record is None else record(*arg)
        self.arg, self.name = arg, name

    @staticmethod
    def var(name: str | None = None, dtype: DType | tuple[DType, ...] | None = None) -> UPat:
        return UPat(dtype=dtype, name=name)

    @staticmethod
    def cvar(name: str | None = None, value: Any = None, dtype: DType | tuple[DType, ...] | None = None) -> UPat:
        return UPat(Ops.CONST, dtype=dtype, arg=value, name=name)

    def match(self, u: UOp, bound: Bindings) -> Iterator[Bindings]:
        if self.ops is not None and u.op not in self.ops:
            return
        if self.dtypes is not None and u.dtype not in self.dtypes and u.dtype.scalar not in self.dtypes:
            return
        if self.arg is not None and not (u.arg == self.arg and type(u.arg) is type(self.arg)):
            return
        if self.name is not None:
            if self.name in bound:
                if bound[self.name] is not u:
                    return
            else:
                bound = {**bound, self.name: u}
        if self.src is None:
            yield bound
            return
        if isinstance(self.src, UPat):  # one pattern for every source
            yield from _match_all(tuple(self.src for _ in u.src), u.src, bound)
            return
        if len(self.src) != len(u.src):
            return
        orders = itertools.permutations(self.src) if self.commutative else (self.src,)
        for order in orders:
            yield from _match_all(order, u.src, bound)


def _match_all(pats: tuple[UPat, ...], srcs: tuple[UOp, ...], bound: Bindings) -> Iterator[Bindings]:
    if not pats:
        yield bound
        return
    for b in pats[0].match(srcs[0], bound):
        yield from _match_all(pats[1:], srcs[1:], b)


Rewrite = Callable[..., UOp | None]


class PatternMatcher:
    """An ordered table of (pattern, function); the first function that returns a UOp wins."""

    def __init__(self, patterns: list[tuple[UPat, Rewrite]]):
        self.patterns = patterns
        # per op, the patterns that can match it in table order; patterns without an op sit in every list at
        # their own position, so an earlier op-less pattern still wins over a later op-specific one
        self.any_op: list[tuple[UPat, Rewrite]] = [(p, f) for p, f in patterns if p.ops is None]
        self.by_op: dict[Ops, list[tuple[UPat, Rewrite]]] = {}
        for op in {op for p, _ in patterns if p.ops is not None for op in p.ops}:
            self.by_op[op] = [(p, f) for p, f in patterns if p.ops is None or op in p.ops]

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return PatternMatcher(self.patterns + other.patterns)

    def rewrite(self, u: UOp, ctx: Any = None) -> UOp | None:
        for pat, fn in self.by_op.get(u.op, self.any_op):
            for bound in pat.match(u, {}):
                kwargs = {k: v for k, v in bound.items()}
                out = fn(ctx, **kwargs) if _wants_ctx(fn) else fn(**kwargs)
                if out is not None and out is not u:
                    return out
        return None


def _wants_ctx(fn: Rewrite) -> bool:
    cached = getattr(fn, "_tg_wants_ctx", None)
    if cached is None:
        code = getattr(fn, "__code__", None)
        cached = bool(code and code.co_argcount > 0 and code.co_varnames[0] == "ctx")
        try:
            fn._tg_wants_ctx = cached  # type: ignore[attr-defined]
        except AttributeError:
            pass
    return cached


def graph_rewrite(root: UOp, pm: PatternMatcher, ctx: Any = None, max_steps: int = 1_000_000) -> UOp:
    """Rewrite bottom-up to a fixed point: sources first, then the node, again until no pattern applies.

    Iterative (an explicit stack), so deep graphs do not hit Python's recursion limit.
    """
    done: dict[UOp, UOp] = {}
    steps = 0
    # stage 0: queue the sources; stage 1: rebuild from rewritten sources and rewrite; stage 2: u becomes done[target]
    stack: list[tuple[UOp, int, UOp | None]] = [(root, 0, None)]
    while stack:
        u, stage, target = stack.pop()
        if stage == 2:
            assert target is not None
            done[u] = done[target]
            continue
        if u in done:
            continue
        if stage == 0:
            stack.append((u, 1, None))
            stack.extend((s, 0, None) for s in reversed(u.src) if s not in done)
            continue
        new_src = tuple(done[s] for s in u.src)
        node = u if new_src == u.src else u.replace(src=new_src)
        steps += 1
        if steps > max_steps:
            raise RuntimeError(f"graph_rewrite did not reach a fixed point in {max_steps} steps; a pattern cycles")
        out = pm.rewrite(node, ctx)
        if out is None:
            done[u] = done[node] = node
        elif out in done:
            done[u] = done[out]
        else:
            stack.append((u, 2, out))
            stack.append((out, 0, None))
    if VIZ.value:  # tinygrad/viz counts the rewrites run for the kernel or schedule it is recording
        from tinygrad.viz.record import record_rewrite
        record_rewrite(root, done[root], steps)
    return done[root]
