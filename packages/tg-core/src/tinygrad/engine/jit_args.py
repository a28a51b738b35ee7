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
# searched neither for tensors nor by value: the same object is the same function
OPAQUE = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, type,
           functools.partial)


@dataclass
class Arguments:
    """One call's arguments, taken apart."""

    tensors: list[Tensor] = field(default_factory=list)  # each tensor once, in the order found
    names: list[str] = field(default_factory=list)  # where each was found, as the caller would write it
    key: list[tuple[str, Any]] = field(default_factory=list)  # (where, what) for everything else
    variables: dict[str, int] = field(default_factory=dict)  # values of bound symbolic Variables passed
    keep: list[Any] = field(default_factory=list)  # objects keyed by identity: kept alive so their id is not reused
    _count: int = 0
    _index: dict[int, int] = field(default_factory=dict)  # id of each tensor found -> its number
    _on_path: set[int] = field(default_factory=set)  # containers being searched: a cycle is keyed, not followed

    @property
    def all_tensors(self) -> bool:
        """Every argument was a tensor given directly."""
        return all(what[0] == "tensor" for _, what in self.key)


def take_apart(args: tuple, kwargs: dict[str, Any]) -> Arguments:
    found = Arguments()
    for i, a in enumerate(args):
        _visit(found, a, f"argument {i}", 0)
    for k, a in kwargs.items():
        _visit(found, a, f"keyword {k}", 0)
    return found


def _visit(found: Arguments, v: Any, where: str, depth: int) -> None:
    found._count += 1
    if found._count > MAX_VALUES or depth > MAX_DEPTH:
        raise JitError(f"the arguments of a TinyJit function go deeper than {MAX_DEPTH} levels or hold more than "
                       f"{MAX_VALUES} values (at {where}); a replay must compare them all with the captured ones. "
                       f"Pass the tensors and values the function needs as arguments of their own")
    t = type(v)
    if isinstance(v, Tensor):
        index = found._index.get(id(v))
        if index is None:
            index = found._index[id(v)] = len(found.tensors)
            found.tensors.append(v)
            found.names.append(where)
        found.key.append((where, ("tensor", index)))
        for d in v.shape:
            if isinstance(d, UOp):
                found.variables.update({var.arg.name: val for var, val in unbind(d)[1].items()})
    elif t is float:
        found.key.append((where, (t, v.hex())))  # nan equals itself, -0.0 differs from 0.0
    elif isinstance(v, PLAIN) or isinstance(v, enum.Enum):
        found.key.append((where, (t, v)))
    elif isinstance(v, UOp):  # a Variable: its bound value travels with the replay, its range is the key
        var, values = unbind(v)
        found.variables.update({u.arg.name: val for u, val in values.items()})
        found.key.append((where, ("uop", var)))
    elif isinstance(v, np.generic):
        found.key.append((where, (t, v.item())))
    elif isinstance(v, np.ndarray):
        digest = hashlib.blake2b(np.ascontiguousarray(v).data, digest_size=16).hexdigest()
        found.key.append((where, ("ndarray", v.shape, v.dtype.str, digest)))
    elif isinstance(v, OPAQUE) or id(v) in found._on_path or (
            not isinstance(v, (list, tuple, dict)) and attributes_of(v) is None):
        # the same function, module or opaque object (a C extension's, say) is the same capture
        found.keep.append(v)
        found.key.append((where, ("object", t, id(v))))
    else:
        if isinstance(v, (list, tuple)):
            found.key.append((where, (t, len(v))))
            items = [(f"{where}[{i}]", x) for i, x in enumerate(v)]
        elif isinstance(v, dict):
            found.key.append((where, (t, tuple(map(_key_of, v)))))
            items = [(f"{where}[{k!r}]", x) for k, x in v.items()]
        else:
            attrs = attributes_of(v) or {}
            found.key.append((where, ("object", t, tuple(attrs))))
            items = [(f"{where}.{k}", x) for k, x in attrs.items()]
        found._on_path.add(id(v))
        for name, x in items:
            _visit(found, x, name, depth + 1)
        found._on_path.discard(id(v))


def _key_of(k: Any) -> Any:
    return (type(k), k.hex()) if type(k) is float else k


def attributes_of(v: Any) -> dict[str, Any] | None:
    """The attributes of an object that holds state: its fields (a dataclass), its __dict__, its slots."""
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: getattr(v, f.name) for f in dataclasses.fields(v) if hasattr(v, f.name)}
    attrs = getattr(v, "__dict__", None)
    if isinstance(attrs, dict):
        return attrs
    slots = [s for c in type(v).__mro__ for s in getattr(c, "__slots__", ()) if s not in ("__weakref__", "__dict__")]
    return {s: getattr(v, s) for s in slots if hasattr(v, s)} if slots else None


def describe_change(old: list[tuple[str, Any]], new: list[tuple[str, Any]]) -> str:
    """Which arguments differ between two keys, as the caller would name them."""
    before, after = dict(old), dict(new)
    changed = [w for w in after if w in before and before[w] != after[w]]
    changed += [w for w in after if w not in before] + [w for w in before if w not in after]
    return ", ".join(dict.fromkeys(changed)) or "the arguments' structure"
