"""A pickle interpreter that builds plain data and calls nothing but the constructors its caller allows.

Python's own unpickler hands the objects a pickle names straight to opcodes that change them: BUILD sets any
attribute (a function's `__defaults__` or `__code__`), SETITEM, APPEND and ADDITEMS call methods of whatever is on
the stack, and REDUCE calls whatever was looked up. Restricting `find_class` is not enough, because the allowed
objects themselves can be changed for the rest of the process. This interpreter implements the opcodes itself
(protocols 0 to 5), so that:

- a global is whatever `find_global` returns: plain values, or `Global` stand-ins that REDUCE (or INST and OBJ)
  may call; a real function or class never reaches the stack;
- APPEND(S) only extend lists, SETITEM(S) only fill dicts, ADDITEMS only fills sets, all made by the pickle;
  BUILD only sets plain attributes of an OrderedDict (torch keeps `_metadata` there); everything else is refused;
- memoised objects are shared, never copied, and nothing walks the object graph, so the work is linear in the
  pickle's size: the few operations whose cost depends on their operands (copying a container into a constructor,
  hashing a key) are charged against an allowance proportional to the pickle's length;
- every problem raises `BadPickle` naming the opcode, its byte offset and what is wrong.
"""

from __future__ import annotations

import codecs
import collections
import pickletools
import struct
from collections.abc import Callable
from typing import Any

_OP_NAMES = {op.code.encode("latin-1")[0]: op.name for op in pickletools.opcodes}
_STOP = ord(".")
_PY2_MODULES = {"__builtin__": "builtins", "copy_reg": "copyreg"}  # names protocol 0-2 pickles from Python 2 use
# a key's hash is recomputed on every insertion (tuples do not cache it), so keys stay small
_MAX_KEY_COST = 64
# the work allowance: units per byte of pickle, plus a fixed amount for small pickles
_WORK_PER_BYTE, _WORK_BASE = 64, 1 << 20
_PLAIN_KEYS = (type(None), bool, int, float, complex, str, bytes)
# Python's own limit on decimal digits, applied whatever the interpreter is set to: int() of more is slow
_MAX_TEXT_DIGITS = 4300


class BadPickle(ValueError):
    """A pickle this interpreter will not build: damaged, truncated, or using something it does not allow."""


class Global:
    """An allowed global as a pickle sees it: its name and the constructor a call builds the result with.
    Immutable, and the only thing REDUCE, INST and OBJ will call."""

    __slots__ = ("_build", "name")
    name: str
    _build: Callable[[Unpickler, tuple], Any]

    def __init__(self, name: str, build: Callable[[Unpickler, tuple], Any]):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "_build", build)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"{self.name} is a stand-in for an allowed global and cannot be changed")

    def __delattr__(self, key: str) -> None:
        raise AttributeError(f"{self.name} is a stand-in for an allowed global and cannot be changed")

    def __repr__(self) -> str:
        return f"<pickle global {self.name}>"

    def call(self, machine: Unpickler, args: tuple) -> Any:
        return self._build(machine, args)


def describe(obj: Any, nested: bool = False) -> str:
    """A short description of an object from a pickle, cheap whatever its size and shape (never a full repr)."""
    if isinstance(obj, Global):
        return obj.name
    if obj is None or isinstance(obj, (bool, float)):
        return repr(obj)
    if isinstance(obj, int):
        return repr(obj) if obj.bit_length() <= 64 else f"an int of {obj.bit_length()} bits"
    if isinstance(obj, (str, bytes, bytearray)):
        return repr(obj[:40]) + ("..." if len(obj) > 40 else "")
    if isinstance(obj, tuple) and not nested:
        return "(" + ", ".join(describe(x, True) for x in obj[:4]) + (", ...)" if len(obj) > 4 else ")")
    if isinstance(obj, (tuple, list, dict, set, frozenset)):
        return f"a {type(obj).__name__} of {len(obj)} items"
    return f"a {type(obj).__name__}"


def _sized_length(obj: Any) -> int:
    return len(obj) if isinstance(obj, (tuple, list, dict, set, frozenset, str, bytes, bytearray)) else 0


# ---- constructors for the plain Python globals a checkpoint may name ----

def _items(machine: Unpickler, args: tuple, what: str) -> tuple:
    if len(args) > 1:
        raise machine.error(f"{what} takes at most one argument, the pickle passes {len(args)}")
    items = args[0] if args else ()
    if not isinstance(items, (list, tuple, set, frozenset)):
        raise machine.error(f"{what} is given {describe(items)}, not a list or tuple of its items")
    return tuple(items)


def _build_set(machine: Unpickler, args: tuple) -> set:
    return {machine.check_key(x) for x in _items(machine, args, "set")}


def _build_frozenset(machine: Unpickler, args: tuple) -> frozenset:
    return frozenset(machine.check_key(x) for x in _items(machine, args, "frozenset"))


def _build_tuple(machine: Unpickler, args: tuple) -> tuple:
    return _items(machine, args, "a tuple (torch.Size)")


def _build_ordered_dict(machine: Unpickler, args: tuple) -> collections.OrderedDict:
    out: collections.OrderedDict = collections.OrderedDict()
    for pair in _items(machine, args, "OrderedDict"):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise machine.error(f"OrderedDict is given {describe(pair)} where a (key, value) pair belongs")
        out[machine.check_key(pair[0])] = pair[1]
    return out


def _build_slice(machine: Unpickler, args: tuple) -> slice:
    if not 1 <= len(args) <= 3:
        raise machine.error(f"slice takes 1 to 3 arguments, the pickle passes {len(args)}")
    return slice(*args)


def _build_latin1_bytes(machine: Unpickler, args: tuple) -> bytes:
    # protocols 0 to 2 have no bytes opcode: Python writes bytes as _codecs.encode(text, "latin1"), b"" as bytes()
    if len(args) != 2 or type(args[0]) is not str or type(args[1]) is not str or args[1] not in ("latin1", "latin-1"):
        raise machine.error(f"_codecs.encode is only allowed as (text, 'latin1'), not {describe(args)}")
    try:
        return args[0].encode("latin-1")
    except UnicodeEncodeError:
        raise machine.error("_codecs.encode is given text that is not latin-1") from None


def _build_empty_bytes(machine: Unpickler, args: tuple) -> bytes:
    if args:
        raise machine.error(f"bytes is only allowed without arguments (b''), not {describe(args)}")
    return b""


def python_globals() -> dict[tuple[str, str], Global]:
    """Stand-ins for the builtin containers checkpoints use, by (module, name)."""
    return {
        ("collections", "OrderedDict"): Global("collections.OrderedDict", _build_ordered_dict),
        ("builtins", "set"): Global("builtins.set", _build_set),
        ("builtins", "frozenset"): Global("builtins.frozenset", _build_frozenset),
        ("builtins", "slice"): Global("builtins.slice", _build_slice),
        ("_codecs", "encode"): Global("_codecs.encode", _build_latin1_bytes),
        ("builtins", "bytes"): Global("builtins.bytes", _build_empty_bytes),
    }


def tuple_global(name: str) -> Global:
    """A stand-in for a tuple subclass (torch.Size): calling it builds a plain tuple."""
    return Global(name, _build_tuple)


# ---- the interpreter ----

class Unpickler:
    """Runs one pickle from `data[start:]`: `load()` returns its object, and `end` is the offset after its STOP."""

    def __init__(self, data: bytes, find_global: Callable[[str, str], Any], persistent_load: Callable[[Any], Any],
                 start: int = 0):
        self._data, self._pos, self.end = data, start, start
        self._find_global, self._persistent_load = find_global, persistent_load
        self._stack: list[Any] = []
        self._outer: list[list[Any]] = []  # the stacks saved by MARK, innermost last
        self._memo: dict[int, Any] = {}
        self._op_at = start
        self._work_left = _WORK_PER_BYTE * max(len(data) - start, 0) + _WORK_BASE

    # -- errors and accounting --

    def error(self, problem: str) -> BadPickle:
        """The error for a problem with the opcode being run, naming it and its offset."""
        name = _OP_NAMES.get(self._data[self._op_at]) if self._op_at < len(self._data) else None
        return BadPickle(f"{name + ' at byte' if name else 'byte'} {self._op_at}: {problem}")

    def charge(self, units: int) -> None:
        """Count work whose cost depends on the operands, and refuse a pickle that asks for far more than its size."""
        self._work_left -= units
        if self._work_left < 0:
            raise self.error("the pickle asks for far more work than its size warrants (it copies or hashes the "
                             "same large objects over and over)")

    def check_key(self, key: Any) -> Any:
        """`key` if it may go into a dict or set: plain data (or a stand-in compared by identity), so inserting it
        runs no `__eq__` or `__hash__` of an object the pickle built, and cheap to hash (a tuple's hash is not
        cached, and recursing through a deep one overflows the C stack)."""
        cost, todo = 0, [key]
        while todo:
            k = todo.pop()
            cost += 1
            if type(k) is tuple:
                cost += len(k)
                if cost <= _MAX_KEY_COST:
                    todo.extend(k)
            elif type(k) is frozenset:
                cost += len(k)  # its members were checked when it was built, and it caches its hash
            elif type(k) is int:
                cost += k.bit_length() // 64
            elif not isinstance(k, _PLAIN_KEYS) and (type(k).__eq__ is not object.__eq__
                                                     or type(k).__hash__ is not object.__hash__):
                raise self.error(f"{describe(k)} cannot be a dict key or set member; checkpoints key by plain data")
            if cost > _MAX_KEY_COST:
                raise self.error(f"{describe(key)} is too large or too deeply nested to be a dict key or set member")
        self.charge(cost)
        return key

    # -- reading the opcode stream --

    def _read(self, n: int) -> bytes:
        if n < 0:
            raise self.error(f"negative length {n}")
        if self._pos + n > len(self._data):
            raise self.error(f"wants {n} bytes, only {len(self._data) - self._pos} are left: the data is truncated")
        out = self._data[self._pos:self._pos + n]
        self._pos += n
        return out

    def _uint(self, n: int) -> int:
        return int.from_bytes(self._read(n), "little")

    def _sint(self, n: int) -> int:
        return int.from_bytes(self._read(n), "little", signed=True)

    def _line(self) -> bytes:
        end = self._data.find(b"\n", self._pos)
        if end < 0:
            raise self.error("its text argument has no end of line: the data is truncated")
        out = self._data[self._pos:end]
        self._pos = end + 1
        return out

    def _text(self, raw: bytes, codec: str = "utf-8", errors: str = "strict") -> str:
        try:
            return raw.decode(codec, errors)
        except UnicodeDecodeError as e:
            raise self.error(f"its text is not valid {codec} ({e.reason} at byte {e.start})") from None

    def _text_int(self, raw: bytes) -> int:
        digits = raw.strip()
        if len(digits) > _MAX_TEXT_DIGITS:
            raise self.error(f"a decimal number of {len(digits)} digits")
        try:
            return int(digits)
        except ValueError:
            raise self.error(f"{describe(raw)} is not a decimal number") from None

    # -- the stack --

    def _push(self, obj: Any) -> None:
        self._stack.append(obj)

    def _pop(self) -> Any:
        if not self._stack:
            raise self.error("needs an object on the stack, and there is none")
        return self._stack.pop()

    def _top(self) -> Any:
        if not self._stack:
            raise self.error("needs an object on the stack, and there is none")
        return self._stack[-1]

    def _pop_mark(self) -> list[Any]:
        if not self._outer:
            raise self.error("needs a MARK, and there is none")
        items, self._stack = self._stack, self._outer.pop()
        return items

    def _memo_get(self, index: int) -> None:
        if index not in self._memo:
            raise self.error(f"refers to memo entry {index}, which the pickle never stored")
        self._push(self._memo[index])

    def _memo_put(self, index: int) -> None:
        if index < 0:
            raise self.error(f"negative memo index {index}")
        self._memo[index] = self._top()

    def _global(self, module: str, name: str) -> Any:
        return self._find_global(_PY2_MODULES.get(module, module), name)

    def _call(self, func: Any, args: Any) -> Any:
        if not isinstance(func, Global):
            raise self.error(f"calls {describe(func)}, which is not an allowed function")
        if not isinstance(args, tuple):
            raise self.error(f"calls {func.name} with {describe(args)} where its argument tuple belongs")
        self.charge(sum(_sized_length(a) for a in args))
        return func.call(self, args)

    # -- running --

    def load(self) -> Any:
        data = self._data
        while self._pos < len(data):
            self._op_at = self._pos
            op = data[self._pos]
            self._pos += 1
            if op == _STOP:
                return self._stop()
            handler = _HANDLERS.get(op)
            if handler is None:
                raise self.error(f"unknown opcode {op:#04x}: this is not a pickle, or it is damaged")
            handler(self)
        self._op_at = len(data)
        raise self.error("the pickle ends without its STOP opcode: the data is truncated")

    def _stop(self) -> Any:
        # like Python's unpickler, the result is the top object; anything left under it is dropped
        self.end = self._pos
        return self._pop()

    # -- opcodes that check more than their operand count (the plain ones are in _HANDLERS below) --

    def _proto(self) -> None:
        version = self._uint(1)
        if version > 5:
            raise self.error(f"pickle protocol {version} is newer than any this reader knows (0 to 5)")

    def _frame(self) -> None:
        # frames only group opcodes for buffered reading; the opcodes inside are read like any others
        size = self._uint(8)
        if size > len(self._data) - self._pos:
            raise self.error(f"a frame of {size} bytes, only {len(self._data) - self._pos} are left: truncated")

    def _mark(self) -> None:
        self._outer.append(self._stack)
        self._stack = []

    def _pop_op(self) -> None:
        # POP on an empty stack pops a MARK, as Python's unpickler does
        if self._stack:
            self._stack.pop()
        else:
            self._pop_mark()

    def _discard_mark(self) -> None:
        self._pop_mark()

    def _int(self) -> None:
        line = self._line()
        # protocol 0 writes booleans as these two INT spellings
        self._push(line == b"01" if line in (b"00", b"01") else self._text_int(line))

    def _long(self) -> None:
        line = self._line()
        self._push(self._text_int(line[:-1] if line.endswith(b"L") else line))

    def _float(self) -> None:
        line = self._line()
        try:
            self._push(float(line))
        except ValueError:
            raise self.error(f"{describe(line)} is not a number") from None

    def _string(self) -> None:
        line = self._line().rstrip(b"\r")
        if len(line) < 2 or line[:1] not in (b"'", b'"') or line[-1:] != line[:1]:
            raise self.error("its string is not quoted")
        try:
            raw = codecs.escape_decode(line[1:-1])[0]
        except ValueError as e:
            raise self.error(f"its string has a bad escape ({e})") from None
        self._push(self._text(raw))

    def _tuple_of(self, n: int) -> None:
        items = [self._pop() for _ in range(n)]
        self._push(tuple(reversed(items)))

    def _dict(self) -> None:
        out: dict[Any, Any] = {}
        self._fill_dict(out, self._pop_mark())
        self._push(out)

    def _append(self) -> None:
        item = self._pop()
        self._target(list, "append to").append(item)

    def _appends(self) -> None:
        items = self._pop_mark()
        self._target(list, "append to").extend(items)

    def _setitem(self) -> None:
        value, key = self._pop(), self._pop()
        self._fill_dict(self._target(dict, "set items of"), [key, value])

    def _setitems(self) -> None:
        items = self._pop_mark()
        self._fill_dict(self._target(dict, "set items of"), items)

    def _additems(self) -> None:
        items = self._pop_mark()
        target = self._target(set, "add items to")
        target.update(self.check_key(x) for x in items)

    def _target(self, kind: type, action: str) -> Any:
        """The object under the operands, if it is a container of `kind` made by the pickle (never a subclass
        instance or stand-in whose methods could do something else)."""
        target = self._top()
        if type(target) is not kind and not (kind is dict and type(target) is collections.OrderedDict):
            raise self.error(f"tries to {action} {describe(target)}; only a {kind.__name__} the pickle made allows it")
        return target

    def _fill_dict(self, target: dict, flat: list[Any]) -> None:
        if len(flat) % 2:
            raise self.error(f"has {len(flat)} keys and values together, which does not pair up")
        for i in range(0, len(flat), 2):
            target[self.check_key(flat[i])] = flat[i + 1]

    def _build(self) -> None:
        state = self._pop()
        target = self._top()
        if type(target) is not collections.OrderedDict:
            raise self.error(f"tries to set the state of {describe(target)}; a checkpoint only sets attributes of "
                             f"an OrderedDict")
        if not isinstance(state, dict):
            raise self.error(f"gives an OrderedDict the state {describe(state)}, where a dict of attributes belongs")
        self.charge(len(state))
        for name, value in state.items():
            # plain names only: not dunders, and nothing that would shadow a dict method for whoever uses it
            if not isinstance(name, str) or not name.isidentifier() or name.startswith("__") \
                    or hasattr(collections.OrderedDict, name):
                raise self.error(f"would set the attribute {describe(name)} of an OrderedDict, which is not a plain "
                                 f"data attribute")
            vars(target)[name] = value

    def _global_op(self) -> None:
        module = self._text(self._line())
        self._push(self._global(module, self._text(self._line())))

    def _stack_global(self) -> None:
        name, module = self._pop(), self._pop()
        if type(module) is not str or type(name) is not str:
            raise self.error(f"names the global {describe(module)}.{describe(name)}, which is not a pair of strings")
        self._push(self._global(module, name))

    def _reduce(self) -> None:
        args = self._pop()
        self._push(self._call(self._pop(), args))

    def _inst(self) -> None:
        module = self._text(self._line())
        func = self._global(module, self._text(self._line()))
        self._push(self._call(func, tuple(self._pop_mark())))

    def _obj(self) -> None:
        items = self._pop_mark()
        if not items:
            raise self.error("has no class to call")
        self._push(self._call(items[0], tuple(items[1:])))

    def _refuse(self, why: str) -> None:
        raise self.error(why)


_NO_NEWOBJ = "creates an object without calling a constructor; checkpoints only call their rebuild functions (REDUCE)"
_NO_BUFFERS = "the pickle wants an out-of-band buffer; checkpoints keep their data in the file"
_NO_EXTENSIONS = "names a global through copyreg's extension registry, which this reader does not consult"

# what each opcode does, by its byte (STOP is handled by load)
_HANDLERS: dict[int, Callable[[Unpickler], None]] = {op[0]: fn for op, fn in {
    # framing, the stack and the memo
    b"\x80": Unpickler._proto, b"\x95": Unpickler._frame, b"(": Unpickler._mark, b"0": Unpickler._pop_op,
    b"1": Unpickler._discard_mark, b"2": lambda m: m._push(m._top()),
    b"g": lambda m: m._memo_get(m._text_int(m._line())), b"h": lambda m: m._memo_get(m._uint(1)),
    b"j": lambda m: m._memo_get(m._uint(4)), b"p": lambda m: m._memo_put(m._text_int(m._line())),
    b"q": lambda m: m._memo_put(m._uint(1)), b"r": lambda m: m._memo_put(m._uint(4)),
    b"\x94": lambda m: m._memo_put(len(m._memo)),
    # scalars
    b"N": lambda m: m._push(None), b"\x88": lambda m: m._push(True), b"\x89": lambda m: m._push(False),
    b"I": Unpickler._int, b"L": Unpickler._long, b"F": Unpickler._float,
    b"J": lambda m: m._push(m._sint(4)), b"K": lambda m: m._push(m._uint(1)), b"M": lambda m: m._push(m._uint(2)),
    b"\x8a": lambda m: m._push(m._sint(m._uint(1))), b"\x8b": lambda m: m._push(m._sint(m._sint(4))),
    b"G": lambda m: m._push(struct.unpack(">d", m._read(8))[0]),
    # text (protocol 0-2 byte strings are read as UTF-8 text, as torch.load does) and bytes
    b"S": Unpickler._string, b"T": lambda m: m._push(m._text(m._read(m._sint(4)))),
    b"U": lambda m: m._push(m._text(m._read(m._uint(1)))),
    b"V": lambda m: m._push(m._text(m._line(), "raw-unicode-escape")),
    b"X": lambda m: m._push(m._text(m._read(m._uint(4)), errors="surrogatepass")),
    b"\x8c": lambda m: m._push(m._text(m._read(m._uint(1)), errors="surrogatepass")),
    b"\x8d": lambda m: m._push(m._text(m._read(m._uint(8)), errors="surrogatepass")),
    b"B": lambda m: m._push(m._read(m._uint(4))), b"C": lambda m: m._push(m._read(m._uint(1))),
    b"\x8e": lambda m: m._push(m._read(m._uint(8))), b"\x96": lambda m: m._push(bytearray(m._read(m._uint(8)))),
    b"\x97": lambda m: m._refuse(_NO_BUFFERS), b"\x98": lambda m: m._refuse(_NO_BUFFERS),
    # containers
    b")": lambda m: m._push(()), b"t": lambda m: m._push(tuple(m._pop_mark())),
    b"\x85": lambda m: m._tuple_of(1), b"\x86": lambda m: m._tuple_of(2), b"\x87": lambda m: m._tuple_of(3),
    b"]": lambda m: m._push([]), b"l": lambda m: m._push(m._pop_mark()), b"}": lambda m: m._push({}),
    b"d": Unpickler._dict, b"\x8f": lambda m: m._push(set()),
    b"\x91": lambda m: m._push(frozenset(m.check_key(x) for x in m._pop_mark())),
    b"a": Unpickler._append, b"e": Unpickler._appends, b"s": Unpickler._setitem, b"u": Unpickler._setitems,
    b"\x90": Unpickler._additems, b"b": Unpickler._build,
    # globals, calls and persistent ids
    b"c": Unpickler._global_op, b"\x93": Unpickler._stack_global, b"R": Unpickler._reduce, b"i": Unpickler._inst,
    b"o": Unpickler._obj, b"\x81": lambda m: m._refuse(_NO_NEWOBJ), b"\x92": lambda m: m._refuse(_NO_NEWOBJ),
    b"\x82": lambda m: m._refuse(_NO_EXTENSIONS), b"\x83": lambda m: m._refuse(_NO_EXTENSIONS),
    b"\x84": lambda m: m._refuse(_NO_EXTENSIONS),
    b"P": lambda m: m._push(m._persistent_load(m._text(m._line(), "ascii"))),
    b"Q": lambda m: m._push(m._persistent_load(m._pop())),
}.items()}
