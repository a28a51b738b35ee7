"""Pattern matching over UOps: `UPat` describes a node, `PatternMatcher` maps matches to replacements,
`graph_rewrite` applies a matcher everywhere until nothing changes.

    pm = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c", 0))), lambda x, c: x)])
    graph_rewrite(sink, pm)   # every x+0 becomes x

A `src` tuple matches sources in order; a `src` list also tries the swapped order (for commutative ops).
"""

from __future__ import annotations

import functools
import itertools
import keyword
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
#: a compiled entry of a table: (u, ctx) -> the entry's function's result for the names its pattern binds in u, or
#: None where u does not match
Matcher = Callable[[UOp, Any], "UOp | None"]


def _has_choices(p: UPat) -> bool:
    """Whether p can match one node in more than one way (a commutative source list of two or more)."""
    if p.src is None:
        return False
    if isinstance(p.src, UPat):
        return _has_choices(p.src)
    return (p.commutative and len(p.src) > 1) or any(_has_choices(s) for s in p.src)


class _Unsupported(Exception):
    """A pattern `_compile` does not write as straight-line code (a named or nested pattern repeated over sources)."""


def _compile(p: UPat, fn: Rewrite, wants_ctx: bool) -> Matcher:
    """p, then fn on what it binds, as one generated function of straight-line checks: for a pattern without
    choices there is at most one match, so a failed check needs no backtracking, and a name's first place in the
    pattern binds it (later places compare against it) without a dict of bindings built up along the way. The checks
    are those of `UPat.match`, in its order, so both agree on every node. One function per pattern, not one per
    sub-pattern: the rewrite engine runs these for every node of every pass, and a Python call per sub-pattern was
    most of their cost. The names go to fn as keywords in the call itself, not through a dict of bindings."""
    try:
        return _generate(p, fn, wants_ctx)
    except _Unsupported:
        return _compile_nested(p, fn, wants_ctx)


def _generate(p: UPat, fn: Rewrite, wants_ctx: bool) -> Matcher:
    consts: dict[str, Any] = {}
    lines: list[str] = ["def match(u, ctx):"]
    names: dict[str, str] = {}  # name -> the local variable holding the node it binds

    def const(value: Any) -> str:
        key = f"_k{len(consts)}"
        consts[key] = value
        return key

    def emit(q: UPat, var: str, ind: str) -> None:
        if q.ops is not None:
            if len(q.ops) == 1:
                lines.append(f"{ind}if {var}.op is not {const(next(iter(q.ops)))}: return None")
            else:
                lines.append(f"{ind}if {var}.op not in {const(q.ops)}: return None")
        if q.dtypes is not None:
            d = const(q.dtypes)
            lines.append(f"{ind}if {var}.dtype not in {d} and {var}.dtype.scalar not in {d}: return None")
        if q.arg is not None:
            lines.append(f"{ind}if not ({var}.arg == {const(q.arg)} and type({var}.arg) is {const(type(q.arg))}): "
                         "return None")
        if q.name is not None:
            if not q.name.isidentifier() or keyword.iskeyword(q.name):
                raise _Unsupported  # not a keyword argument: the nested form passes it through a dict
            if q.name in names:
                lines.append(f"{ind}if {var} is not {names[q.name]}: return None")
            else:
                names[q.name] = var
        if q.src is None:
            return
        if isinstance(q.src, UPat):  # one pattern for every source: a loop, for a pattern that binds nothing
            if q.src.src is not None or q.src.name is not None:
                raise _Unsupported
            each = f"_v{len(lines)}"
            lines.append(f"{ind}for {each} in {var}.src:")
            emit(q.src, each, ind + "    ")
            lines.append(f"{ind}    pass")
            return
        lines.append(f"{ind}if len({var}.src) != {len(q.src)}: return None")
        if not q.src:
            return
        subs = [f"_v{len(lines)}_{i}" for i in range(len(q.src))]
        lines.append(f"{ind}{', '.join(subs)}, = {var}.src")
        for sq, sv in zip(q.src, subs):
            emit(sq, sv, ind)

    emit(p, "u", "    ")
    args = ", ".join([*(["ctx"] if wants_ctx else []), *(f"{n}={v}" for n, v in names.items())])
    lines.append(f"    return _fn({args})")
    namespace: dict[str, Any] = {**consts, "_fn": fn}
    exec(compile("\n".join(lines), f"<pattern {p.name or ''}>", "exec"), namespace)
    return namespace["match"]  # type: ignore[no-any-return]


def _compile_nested(p: UPat, fn: Rewrite, wants_ctx: bool) -> Matcher:
    """`_compile` for the patterns it cannot write out: one closure per sub-pattern, one dict of bindings."""
    inner = _compile_into(p)

    def match(u: UOp, ctx: Any) -> UOp | None:
        bound: Bindings = {}
        if not inner(u, bound):
            return None
        return fn(ctx, **bound) if wants_ctx else fn(**bound)

    return match


def _compile_into(p: UPat) -> Callable[[UOp, Bindings], bool]:
    """p as a function that checks u and adds the names it binds to `bound` (False leaves `bound` half-filled)."""
    ops, dts, arg, name = p.ops, p.dtypes, p.arg, p.name
    arg_type = type(arg)
    sub: Callable[[UOp, Bindings], bool] | None = None
    subs: tuple[Callable[[UOp, Bindings], bool], ...] | None = None
    if isinstance(p.src, UPat):
        sub = _compile_into(p.src)
    elif p.src is not None:
        subs = tuple(_compile_into(s) for s in p.src)
    n_src = -1 if subs is None else len(subs)

    def match(u: UOp, bound: Bindings) -> bool:
        if ops is not None and u.op not in ops:
            return False
        if dts is not None and u.dtype not in dts and u.dtype.scalar not in dts:
            return False
        if arg is not None and not (u.arg == arg and type(u.arg) is arg_type):
            return False
        if name is not None:
            if (prev := bound.get(name)) is None:
                bound[name] = u
            elif prev is not u:
                return False
        if subs is not None:
            src = u.src
            if len(src) != n_src:
                return False
            for m, s in zip(subs, src):
                if not m(s, bound):
                    return False
        elif sub is not None:
            for s in u.src:
                if not sub(s, bound):
                    return False
        return True

    return match


#: a pattern entry as the matcher runs it: (pattern, function, compiled pattern or None, whether fn takes ctx)
_Entry = tuple[UPat, Rewrite, Matcher | None, bool]


class PatternMatcher:
    """An ordered table of (pattern, function); the first function that returns a UOp wins."""

    def __init__(self, patterns: list[tuple[UPat, Rewrite]]):
        self.patterns = patterns
        # patterns that match at most one way run compiled (see `_entries`); the others (commutative source lists)
        # enumerate
        entries: list[_Entry] = [(p, f, None, _wants_ctx(f)) for p, f in patterns]
        # per op, the patterns that can match it in table order; patterns without an op sit in every list at
        # their own position, so an earlier op-less pattern still wins over a later op-specific one
        self.any_op: list[_Entry] = [e for e in entries if e[0].ops is None]
        self.by_op: dict[Ops, list[_Entry]] = {}
        for op in {op for p, _ in patterns if p.ops is not None for op in p.ops}:
            self.by_op[op] = [e for e in entries if e[0].ops is None or op in e[0].ops]
        #: (op, ops of the sources) -> the entries whose pattern allows those, filled as shapes of nodes come: most
        #: patterns fail on the ops of the sources, and one lookup rules them out for every node of that shape
        self._by_shape: dict[tuple[Ops, tuple[Ops, ...]], list[_Entry]] = {}
        #: row of the table -> its compiled entry, made the first time a node of a shape it allows comes: most tables
        #: are built at import, and many of their patterns never meet a node in a process
        self._compiled: dict[int, _Entry] = {}

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return _joined(self, other)

    def _entries(self, shape: tuple[Ops, tuple[Ops, ...]]) -> list[_Entry]:
        op, src_ops = shape
        out = self._by_shape[shape] = [self._compiled_entry(e) for e in self.by_op.get(op, self.any_op)
                                       if _allows(e[0], src_ops)]
        return out

    def _compiled_entry(self, entry: _Entry) -> _Entry:
        # keyed by the entry (one tuple per row of the table, kept alive by `by_op`): a pattern may sit in two rows
        if (hit := self._compiled.get(id(entry))) is None:
            p, f, _, wants_ctx = entry
            compiled = None if _has_choices(p) else _compile(p, f, wants_ctx)
            hit = self._compiled[id(entry)] = (p, f, compiled, wants_ctx)
        return hit

    def rewrite(self, u: UOp, ctx: Any = None) -> UOp | None:
        if not self.by_op.get(u.op, self.any_op):  # no pattern for this op (loads and stores, for symbolic)
            return None
        shape = (u.op, tuple([s.op for s in u.src]))
        entries = self._by_shape.get(shape)
        if entries is None:
            entries = self._entries(shape)
        for pat, fn, compiled, wants_ctx in entries:
            if compiled is not None:
                out = compiled(u, ctx)
                if out is not None and out is not u:
                    return out
                continue
            for bound in pat.match(u, {}):
                out = fn(ctx, **bound) if wants_ctx else fn(**bound)
                if out is not None and out is not u:
                    return out
        return None


def _allows(p: UPat, src_ops: tuple[Ops, ...]) -> bool:
    """Whether p's checks of the sources' ops (one level down) can pass for sources with these ops."""
    if p.src is None:
        return True
    if isinstance(p.src, UPat):
        one = p.src.ops
        return one is None or all(o in one for o in src_ops)
    if len(p.src) != len(src_ops):
        return False
    orders = itertools.permutations(p.src) if p.commutative else (p.src,)
    return any(all(q.ops is None or o in q.ops for q, o in zip(order, src_ops)) for order in orders)


@functools.lru_cache(maxsize=256)
def _joined(first: PatternMatcher, second: PatternMatcher) -> PatternMatcher:
    # passes join module-level tables per call (`symbolic + extra`): building the op index once per pair, not per
    # call, and returning the same matcher each time. A table is never changed after it is built, so this is safe.
    return PatternMatcher(first.patterns + second.patterns)


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
    rewriter = Rewriter(pm, ctx, max_steps)
    out = rewriter.walk(root)
    if VIZ.value:  # tinygrad/viz counts the rewrites run for the kernel or schedule it is recording
        from tinygrad.viz.record import record_rewrite
        record_rewrite(root, out, rewriter.steps)
    return out


class Rewriter:
    """`graph_rewrite` with a memo that lasts across calls: `rw = Rewriter(pm)`, then `rw.rewrite(a)`,
    `rw.rewrite(b)`, ... each return `graph_rewrite(x, pm)`, and a node that several of the graphs share is
    rewritten once. What a node becomes depends on the node alone (its sources' results, then the patterns, which
    read only the nodes they bind), so the memo is valid for every graph; a pass that builds many overlapping
    graphs (copies of a kernel body, one per value of an upcast axis) simplifies each new node as it makes it.
    Only for a matcher whose rewrites do not read or change `ctx` between calls."""

    def __init__(self, pm: PatternMatcher, ctx: Any = None, max_steps: int = 1_000_000):
        self.pm, self.ctx, self.max_steps = pm, ctx, max_steps
        self.done: dict[UOp, UOp] = {}
        self.steps = 0  # rewrites tried, over every call

    def rewrite(self, root: UOp) -> UOp:
        out = self.walk(root)
        if VIZ.value:
            from tinygrad.viz.record import record_rewrite
            record_rewrite(root, out, self.steps)
        return out

    def walk(self, root: UOp) -> UOp:
        """`rewrite` without VIZ's record of the call: for a pass that rewrites its graph node by node."""
        done = self.done
        if (hit := done.get(root)) is not None:
            return hit
        steps, max_steps, ctx = 0, self.max_steps, self.ctx
        # a node on the stack: visit it (rewrite it now if its sources are done, else queue them first); (u, None):
        # its sources are done, rewrite it; (u, target): u rewrote to target, and becomes what target becomes
        stack: list[UOp | tuple[UOp, UOp | None]] = [root]
        src = root.src
        for s in src:
            if s not in done:
                break
        else:  # a node made from rewritten sources (what a pass building its graph through the memo passes)
            new_src = tuple(map(done.__getitem__, src))
            node = root if new_src == src else UOp(root.op, root.dtype, new_src, root.arg)
            self.steps += 1
            if (out := self.pm.rewrite(node, ctx)) is None:
                done[root] = done[node] = node
                return node
            if out in done:
                done[root] = done[out]
                return done[root]
            stack = [(root, out), out]  # what it became, walked as below
        pop, push, rewrite, finished = stack.pop, stack.append, self.pm.rewrite, done.__getitem__
        while stack:
            item = pop()
            if type(item) is tuple:
                u, target = item
                if target is not None:
                    done[u] = done[target]
                    continue
                if u in done:
                    continue
            else:
                u = item  # type: ignore[assignment]
                if u in done:
                    continue
                pending = [s for s in u.src if s not in done]
                if pending:
                    push((u, None))
                    for s in reversed(pending):
                        push(s)
                    continue
            src = u.src
            new_src = tuple(map(finished, src))
            node = u if new_src == src else UOp(u.op, u.dtype, new_src, u.arg)
            steps += 1
            if steps > max_steps:
                raise RuntimeError(f"graph_rewrite did not reach a fixed point in {max_steps} steps; a pattern cycles")
            out = rewrite(node, ctx)
            if out is None:
                done[u] = done[node] = node
            elif out in done:
                done[u] = done[out]
            else:
                push((u, out))
                push(out)
        self.steps += steps
        return done[root]
