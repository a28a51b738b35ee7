"""What a TinyJit call is given: the tensors it reads as inputs, wherever they sit in the arguments, and the key of
everything else.

A replay does not run the function, so every value the function could have turned into a different graph must be
compared before replaying: tensors are inputs (their buffers are swapped in), and the rest of the arguments —
numbers, strings, flags, the shape of the containers — form the capture's key. Tensors are found inside lists,
tuples, dicts and objects (dataclasses, modules: any object with attributes), and the values beside them are part of
the key as well; a call with another key is captured anew.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import types
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tinygrad.engine.jit_state import JitError
from tinygrad.tensor import Tensor
from tinygrad.uop.ops import UOp, unbind

#: how deep containers and objects are searched, and how many values at most: a call whose arguments go further
#: raises, since the values past the bound could not be compared
MAX_DEPTH = 8
MAX_VALUES = 20_000

PLAIN = (int, float, bool, str, bytes, complex, type(None), range, slice)
_EXACT_PLAIN = frozenset((int, bool, str, type(None)))
# searched neither for tensors nor by value: the same object is the same function
OPAQUE = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, type,
           functools.partial)


@dataclass
class Arguments:
    """One call's arguments, taken apart. Taken apart `named`, each entry of the key comes with where it was found, as
    the caller would write it (for error messages: a call's key is compared without them)."""

    tensors: list[Tensor] = field(default_factory=list)  # each tensor once, in the order found
    key: list[Any] = field(default_factory=list)  # what each value is, tensors by their number in `tensors`
    where: list[str] = field(default_factory=list)  # with `named`: where each entry of the key was found
    variables: dict[str, int] = field(default_factory=dict)  # values of the Variables passed (not in shapes)
    keep: list[Any] = field(default_factory=list)  # objects keyed by identity: kept alive so their id is not reused
    #: each container and object searched, with what it held (`snapshot`): a call with the same ones, still
    #: holding the same, need not be taken apart again
    containers: list[tuple[Any, tuple]] = field(default_factory=list)
    _count: int = 0
    _index: dict[int, int] = field(default_factory=dict)  # id of each tensor found -> its number
    _on_path: set[int] = field(default_factory=set)  # containers being searched: a cycle is keyed, not followed

    def add(self, where: str | None, what: Any) -> None:
        self.key.append(what)
        if where is not None:
            self.where.append(where)


def take_apart(args: tuple, kwargs: dict[str, Any], named: bool = False) -> Arguments:
    found = Arguments()
    for i, a in enumerate(args):
        _visit_argument(found, a, f"argument {i}" if named else None)
    for k, a in kwargs.items():
        _visit_argument(found, a, f"keyword {k}" if named else None)
    return found


def _visit_argument(found: Arguments, a: Any, where: str | None) -> None:
    """One argument. An object (not a container) too large or deep to compare, such as a whole model passed to a
    jitted step as tinygrad programs do, is keyed by identity instead: tinygrad does not look inside objects, the
    captured kernels read its tensors' buffers in place, and another object is captured anew."""
    marks = (len(found.tensors), len(found.key), len(found.where), len(found.keep), len(found.containers),
             found._count, dict(found.variables))
    try:
        _visit(found, a, where, 0)
    except JitError:
        if isinstance(a, (list, tuple, dict, Tensor, OPAQUE)) or attributes_of(a) is None:
            raise
        n_tensors, n_key, n_where, n_keep, n_containers, count, variables = marks
        for t in found.tensors[n_tensors:]:
            found._index.pop(id(t), None)
        del found.tensors[n_tensors:], found.key[n_key:], found.where[n_where:], found.keep[n_keep:]
        del found.containers[n_containers:]
        found._count, found.variables = count, variables
        found._on_path.clear()  # the search stopped inside the object, before leaving what it had entered
        found.keep.append(a)
        found.add(where, ("object", type(a), id(a)))


def _visit(found: Arguments, v: Any, where: str | None, depth: int) -> None:
    found._count += 1
    if found._count > MAX_VALUES or depth > MAX_DEPTH:
        raise JitError(f"the arguments of a TinyJit function go deeper than {MAX_DEPTH} levels or hold more than "
                       f"{MAX_VALUES} values; a replay must compare them all with the captured ones. Pass the "
                       f"tensors and values the function needs as arguments of their own")
    t = type(v)
    if t in _EXACT_PLAIN:  # the common values first, without the isinstance chain below
        found.add(where, (t, v))
        return
    if t is Tensor or isinstance(v, Tensor):
        index = found._index.get(id(v))
        if index is None:
            index = found._index[id(v)] = len(found.tensors)
            found.tensors.append(v)
        found.add(where, ("tensor", index))
        return
    if t is float:
        found.add(where, (t, v.hex()))  # nan equals itself, -0.0 differs from 0.0
    elif isinstance(v, PLAIN) or isinstance(v, enum.Enum):
        found.add(where, (t, v))
    elif isinstance(v, UOp):  # a Variable: its bound value travels with the replay, its range is the key
        var, values = unbind(v)
        found.variables.update({u.arg.name: val for u, val in values.items()})
        found.add(where, ("uop", var))
    elif isinstance(v, np.generic):
        found.add(where, (t, v.item()))
    elif isinstance(v, np.ndarray):
        digest = hashlib.blake2b(np.ascontiguousarray(v).data, digest_size=16).hexdigest()
        found.add(where, ("ndarray", v.shape, v.dtype.str, digest))
    elif isinstance(v, (list, tuple)):
        if _cycle(found, v, where, t):
            return
        found.add(where, (t, len(v)))
        _visit_all(found, v, enumerate(v), where, "[{!r}]", depth)
    elif isinstance(v, dict):
        if _cycle(found, v, where, t):
            return
        found.add(where, (t, tuple(map(_key_of, v))))
        _visit_all(found, v, v.items(), where, "[{!r}]", depth)
    elif not isinstance(v, OPAQUE) and (attrs := attributes_of(v)) is not None:
        if _cycle(found, v, where, t):
            return
        found.add(where, ("object", t, tuple(attrs)))
        _visit_all(found, v, attrs.items(), where, ".{}", depth)
    else:  # the same function, module or opaque object (a C extension's, say) is the same capture
        found.keep.append(v)
        found.add(where, ("object", t, id(v)))


def _visit_all(found: Arguments, container: Any, items: Iterable[tuple[Any, Any]], where: str | None, step: str,
               depth: int) -> None:
    found.containers.append((container, snapshot(container)))
    found._on_path.add(id(container))
    for k, x in items:
        _visit(found, x, None if where is None else where + step.format(k), depth + 1)
    found._on_path.discard(id(container))


def snapshot(container: Any) -> tuple:
    """What a container holds now: its items, or its keys (attribute names) and then its values."""
    if isinstance(container, (list, tuple)):
        return tuple(container)
    items = container if isinstance(container, dict) else attributes_of(container) or {}
    return (*items.keys(), *items.values())


def named_key(args: tuple, kwargs: dict[str, Any]) -> Arguments:
    """The key of a call with where each entry was found, holding on to none of the call's values."""
    found = take_apart(args, kwargs, named=True)
    found.tensors, found.keep = [], []
    return found


def _cycle(found: Arguments, v: Any, where: str | None, t: type) -> bool:
    """A container inside itself is keyed by identity, not followed."""
    if id(v) not in found._on_path:
        return False
    found.keep.append(v)
    found.add(where, ("cycle", t, id(v)))
    return True


def _key_of(k: Any) -> Any:
    return (type(k), k.hex()) if type(k) is float else k


def attributes_of(v: Any) -> dict[str, Any] | None:
    """The attributes of an object that holds state: its __dict__ (a dataclass's fields are there too), else its
    fields or slots."""
    attrs = getattr(v, "__dict__", None)
    if type(attrs) is dict:
        return attrs
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: getattr(v, f.name) for f in dataclasses.fields(v) if hasattr(v, f.name)}
    slots = [s for c in type(v).__mro__ for s in getattr(c, "__slots__", ()) if s not in ("__weakref__", "__dict__")]
    return {s: getattr(v, s) for s in slots if hasattr(v, s)} if slots else None


def describe_change(old: Arguments, new: Arguments) -> str:
    """Which arguments differ between two calls' keys (both taken apart `named`), as the caller would name them."""
    before, after = dict(zip(old.where, old.key)), dict(zip(new.where, new.key))
    changed = [w for w in after if w in before and before[w] != after[w]]
    changed += [w for w in after if w not in before] + [w for w in before if w not in after]
    return ", ".join(dict.fromkeys(changed)) or "the arguments' structure"
