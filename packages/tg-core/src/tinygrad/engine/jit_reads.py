"""Where the tensors live that a TinyJit function reads without being given them: its closure, the globals it names,
the object of a bound method, and the objects and containers those hold.

A replay reads the memory those tensors had at capture. An `assign` to one of them is followed (the capture copies
the new value in; see jit_capture), but a name bound to another tensor (`w = Tensor(...)`) cannot be: the replay
would go on reading the old tensor. So the places found here are checked before each replay, and a tensor found in
an object is watched for its end (an object's attribute bound to a new tensor drops the old one).
"""

from __future__ import annotations

import functools
import inspect
import types
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tinygrad.engine.jit_args import OPAQUE, PLAIN, attributes_of
from tinygrad.engine.jit_io import old_buffers
from tinygrad.tensor import Tensor

#: how far into the objects of a closure or a global the search for read tensors goes
_MAX_DEPTH = 4
_MAX_VALUES = 5_000
_MISSING = object()


@dataclass(eq=False)
class Location:
    """A place the function reads a tensor from. `get`: what is there now, for a name checked before each replay;
    None for a place inside an object, watched through its tensor's lifetime instead."""

    name: str
    get: Callable[[], Any] | None
    tensor: weakref.ref[Tensor]


def unrealized_reads(fn: Callable[..., Any]) -> list[Tensor]:
    """The tensors `fn` can reach that hold a graph rather than a buffer. They are realized before a capture: read
    as a graph, the capture would bake in the buffers under it and miss a later assign to the tensor."""
    return [t for _, _, t in _reachable(fn) if old_buffers(t.uop) is None]


def find_reads(fn: Callable[..., Any], read: set[int], on_lost: Callable[[str], None]) -> list[Location]:
    """The places of the tensors that `fn` can reach and that hold memory in `read` (ids of storage buffers).
    `on_lost(name)` is called when a tensor found inside an object is dropped."""
    def holds_read(t: Tensor) -> bool:
        bufs = old_buffers(t.uop)
        return bufs is not None and any(id(b.storage) in read for b in bufs)

    found: list[Location] = []
    for where, get, t in _reachable(fn):
        if holds_read(t):
            # a name checked before each replay, or a place inside an object, watched through its tensor's end
            found.append(Location(where, get, weakref.ref(t)) if get is not None else
                         Location(where, None, weakref.ref(t, functools.partial(_tell_lost, on_lost, where))))
    return found


def _tell_lost(on_lost: Callable[[str], None], where: str, _: weakref.ref) -> None:
    on_lost(where)


def _reachable(fn: Callable[..., Any]) -> list[tuple[str, Callable[[], Any] | None, Tensor]]:
    """The tensors `fn` reaches without being given them: where each is, and for one named directly (a closure
    variable, a global), the getter of what that name holds now."""
    found: list[tuple[str, Callable[[], Any] | None, Tensor]] = []
    seen: set[int] = set()
    for where, get in _roots(fn):
        value = get()
        if isinstance(value, Tensor):
            if id(value) not in seen:
                seen.add(id(value))
                found.append((where, get, value))
        elif value is not _MISSING:
            _search(value, where.split(" ")[-1], found, seen)
    return found


def _search(root: Any, where: str, found: list, seen: set[int]) -> None:
    """The tensors inside an object a closure variable or global names, breadth first and bounded."""
    level = [(where, root)]
    budget = _MAX_VALUES
    for _ in range(_MAX_DEPTH):
        deeper: list[tuple[str, Any]] = []
        for name, v in level:
            budget -= 1
            if budget < 0 or id(v) in seen or isinstance(v, (*PLAIN, *OPAQUE)):
                continue
            seen.add(id(v))
            if isinstance(v, Tensor):
                found.append((name, None, v))
            elif isinstance(v, (list, tuple)):
                deeper += [(f"{name}[{i}]", x) for i, x in enumerate(v)]
            elif isinstance(v, dict):
                deeper += [(f"{name}[{k!r}]", x) for k, x in v.items()]
            elif (attrs := attributes_of(v)) is not None:
                deeper += [(f"{name}.{k}", x) for k, x in attrs.items()]
        level = deeper


def _roots(fn: Callable[..., Any]) -> list[tuple[str, Callable[[], Any]]]:
    """The names through which `fn` reaches values it is not given, each with a getter of its value now."""
    roots: list[tuple[str, Callable[[], Any]]] = []
    while isinstance(fn, functools.partial):
        roots += [(f"bound argument {i}", functools.partial(lambda a: a, a)) for i, a in enumerate(fn.args)]
        roots += [(f"bound keyword {k}", functools.partial(lambda a: a, a)) for k, a in fn.keywords.items()]
        fn = fn.func
    if inspect.ismethod(fn):
        roots.append(("self", functools.partial(lambda m: m.__self__, fn)))
        fn = fn.__func__
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        return roots
    for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
        roots.append((f"closure variable {name}", functools.partial(_cell_value, cell)))
    scope = getattr(fn, "__globals__", {})
    for name in dict.fromkeys(_global_names(code)):
        if name in scope:
            roots.append((f"global {name}", functools.partial(scope.get, name, _MISSING)))
    return roots


def _cell_value(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # not bound yet
        return _MISSING


def _global_names(code: types.CodeType) -> Iterator[str]:
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):  # a lambda or comprehension inside reads the same globals
            yield from _global_names(const)
