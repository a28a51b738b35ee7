"""The one IR: `UOp(op, dtype, src, arg)`, immutable and hash-consed.

The same node type describes three stages:
  * the tensor graph (BUFFER, CONST, ALU ops, REDUCE_AXIS, movement ops), where every node has a `shape`;
  * a kernel's AST (the same ops, with PARAM leaves standing for the kernel's buffers);
  * the lowered program (RANGE, INDEX, LOAD, STORE, REDUCE, ...) over scalar index arithmetic.

The op codes, `Ops` and their groups `GroupOp`, are defined in uop/__init__.py and re-exported here.
"""

from __future__ import annotations

import enum
import struct
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from tinygrad.dtype import DType, dtypes, truncate
from tinygrad.helpers import argsort
from tinygrad.uop import GroupOp, Ops

if TYPE_CHECKING:
    from tinygrad.device import Buffer

#: marks a missing argument of UOp.const (None cannot: tinygrad's order passes dtype=None)
_NO_VALUE: Any = object()
#: where a value on several devices is split: set by tinygrad.multi, which this module cannot import (it builds on it)
_sharding_axis: Callable[[UOp], int | None] | None = None


class AxisKind(enum.Enum):
    """What a RANGE's loop is for. The value is the kind's name in messages and in serialised programs."""

    GLOBAL = "global"  # an output dimension: a loop on loop targets, work-item ids on work-group targets
    REDUCE = "reduce"  # a reduced dimension: a loop around an accumulator
    UPCAST = "upcast"  # inner part of a split GLOBAL axis (opt UPCAST): expanded into copies of the computation
    UNROLL = "unroll"  # inner part of a split REDUCE axis (opt UNROLL): expanded into independent accumulators
    GROUP = "group"  # the lane of a reduction shared by a work-group through local memory (opt GROUP)

    # as for Ops: members are singletons, and every RANGE made or looked up hashes its kind
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"AxisKind.{self.name}"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class RangeArg:
    """The arg of a RANGE. `axis` is the loop's id: loops of one nest open in id order, and kernel names list
    the loop sizes in it. Frozen and compared by value, as hash-consing needs."""

    axis: int
    kind: AxisKind

    def __post_init__(self) -> None:
        # a kind spelled as a string (the arg was a tuple like (0, "global") before) would silently match nothing
        if not isinstance(self.kind, AxisKind):
            raise TypeError(f"RangeArg kind must be an AxisKind member, got {self.kind!r}; use one of "
                            + ", ".join(repr(k) for k in AxisKind))

    def __repr__(self) -> str:
        return f"RangeArg({self.axis}, {self.kind!r})"


# The args of the ops below are small records. They are NamedTuples, so they hash and compare as hash-consing needs and
# unpack like the tuples tinygrad programs pass (`slot, size = param.arg`); code reads them by field name. A plain
# tuple given for one of these ops becomes its record when the node is made (`UOpMeta.__call__`).


class ParamArg(NamedTuple):
    """PARAM: kernel argument number `slot` (0 is the output), a buffer of `size` elements (an int, or a symbolic
    size while the kernel is built)."""

    slot: int
    size: Any  # int | UOp

    def __repr__(self) -> str:
        return f"ParamArg({self.slot}, {self.size})"


class VarArg(NamedTuple):
    """DEFINE_VAR: a symbolic integer `name` in [vmin, vmax]."""

    name: str
    vmin: int
    vmax: int

    def __repr__(self) -> str:
        return f"VarArg({self.name!r}, {self.vmin}, {self.vmax})"


class LocalArg(NamedTuple):
    """DEFINE_LOCAL: work-group memory number `slot`, of `size` elements."""

    slot: int
    size: int

    def __repr__(self) -> str:
        return f"LocalArg({self.slot}, {self.size})"


class ReduceArg(NamedTuple):
    """REDUCE_AXIS: combine with `op` (ADD, MUL or MAX) over the source's `axes`."""

    op: Ops
    axes: tuple[int, ...]

    def __repr__(self) -> str:
        return f"ReduceArg(Ops.{self.op.name}, {self.axes})"


class SpecialArg(NamedTuple):
    """SPECIAL: the work-item id `name` (as `gidx0`: the global id in launch dimension 0), in [0, size)."""

    name: str
    size: int

    @property
    def dim(self) -> int:
        """The launch dimension: the number that ends the name."""
        return int(self.name[len(self.name.rstrip("0123456789")):])

    def __repr__(self) -> str:
        return f"SpecialArg({self.name!r}, {self.size})"


ARG_RECORDS: dict[Ops, type] = {Ops.PARAM: ParamArg, Ops.DEFINE_VAR: VarArg, Ops.DEFINE_LOCAL: LocalArg,
                                Ops.REDUCE_AXIS: ReduceArg, Ops.SPECIAL: SpecialArg}


def _arg_key(arg: Any) -> Any:
    # floats are keyed by their bits so that 0.0 and -0.0 (equal in Python) stay distinct nodes and NaN is reusable
    if isinstance(arg, float):
        return ("float", struct.pack("<d", arg))
    return (type(arg), arg)


class _NodeRef(weakref.ref["UOp"]):
    """A weak reference to a hash-consed node that carries the node's cache key, so that its death callback is one
    plain function: a functools.partial per node would cost a second object to make and a second call to run."""

    __slots__ = ("key",)
    key: tuple


class UOpMeta(type):
    #: structure -> a weak reference to the one live node with it. Every Tensor op passes through here, so this is a
    #: plain dict whose references remove their own entry when their node dies: a WeakValueDictionary does the same
    #: in Python code and costs several times more per node.
    cache: dict[tuple, weakref.ref[UOp]] = {}

    def __call__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None) -> UOp:
        if type(arg) is tuple and (record := ARG_RECORDS.get(op)) is not None:
            arg = record(*arg)
        key = (op, dtype, src, None if arg is None else _arg_key(arg))
        ref = UOpMeta.cache.get(key)
        if ref is not None and (hit := ref()) is not None:
            return hit
        # new_node's body, inline: every node of every graph is made here
        node = object.__new__(UOp)
        node.op, node.dtype, node.src, node.arg = op, dtype, src, arg
        node._shape, node._toposort, node._ranges, node._realized = False, None, None, None
        ref = _NodeRef(node, _forget_node)
        ref.key = key
        UOpMeta.cache[key] = ref
        return node


#: UOp(...) as a plain function, for the hot paths (alu): calling the class goes through the metaclass's __call__
#: slot, which costs more than the call itself
_make_uop = UOpMeta.__call__


def _forget_node(ref: _NodeRef, cache: dict[tuple, weakref.ref[UOp]] = UOpMeta.cache) -> None:
    # the entry may already belong to a newer node of the same structure: only drop our own reference
    key = ref.key
    if cache.get(key) is ref:
        del cache[key]


def new_node(op: Ops, dtype: DType, src: tuple[UOp, ...], arg: Any) -> UOp:
    """A node that is not entered in the hash-consing table (UOp(...) makes and enters one). Fills the slots here
    rather than through type.__call__ and __init__: every eager op makes two nodes. UOpMeta.__call__ repeats this
    body inline."""
    node = object.__new__(UOp)
    node.op, node.dtype, node.src, node.arg = op, dtype, src, arg
    node._shape, node._toposort, node._ranges, node._realized = False, None, None, None
    return node


def buffer_node(buf: Buffer) -> UOp:
    """The graph's one BUFFER node for `buf`. Made here only, and found through the buffer (a weak reference) rather
    than the hash-consing table: every eager op makes one for its new output, and a table entry, with the callback
    that removes it, costs about as much again as the node."""
    ref = buf._node
    if ref is not None and (node := ref()) is not None:
        return node
    node = new_node(Ops.BUFFER, buf.dtype, (), buf)
    node._shape = (buf.size,)  # known here; the next op reads it
    buf._node = weakref.ref(node)
    return node


_BOOL, _WHERE, _COMPARISON = dtypes.bool, Ops.WHERE, GroupOp.Comparison  # read by alu on every op: module globals


class UOp(metaclass=UOpMeta):
    """A node of the IR. Equal structure is the same object, so `is` compares graphs in O(1)."""

    __slots__ = ("__weakref__", "_ranges", "_realized", "_shape", "_toposort", "arg", "dtype", "op", "src")

    def __init__(self, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None):
        # UOp(...) does not run this (see UOpMeta.__call__): new_node fills the same slots, and must follow any change
        self.op, self.dtype, self.src, self.arg = op, dtype, src, arg
        self._shape: tuple[int, ...] | bool | None = False
        self._toposort: dict[UOp, None] | None = None
        self._ranges: tuple[int | float, int | float] | None = None
        #: in the tensor graph: the buffer view holding this node's value once a realize() computed it (the engine's
        #: `realized_views` reads and writes it); kept on the node so that it lives exactly as long as the node
        self._realized: UOp | None = None

    def __repr__(self) -> str:
        return self.pretty()

    def __reduce__(self) -> tuple:
        # the graph as a flat list, sources before users: pickle's own recursion would follow `src` one Python frame
        # per level and fail on the deep graphs of a training step. Loading makes each node through UOp(...), so a
        # loaded graph is hash-consed with the live one (equal structure is the same node again)
        order = list(self.toposort())
        index = {node: i for i, node in enumerate(order)}
        return _graph_from_pickle, (tuple((n.op, n.dtype, tuple(index[s] for s in n.src), n.arg) for n in order),)

    def pretty(self, depth: int = 0, seen: set[int] | None = None) -> str:
        # an explicit stack of pending nodes and closing text: printing a deep graph must not recurse
        seen = set() if seen is None else seen
        out: list[str] = []
        stack: list[tuple[UOp, int] | str] = [(self, depth)]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                out.append(item)
                continue
            node, d = item
            pad = "  " * d
            if id(node) in seen:
                out.append(f"{pad}<{node.op.name} ...>")
                continue
            seen.add(id(node))
            arg = node.arg if node.op is not Ops.BUFFER else f"<buffer {node.arg}>"
            head = f"{pad}UOp({node.op}, {node.dtype}, arg={arg!r}"
            if not node.src:
                out.append(head + ")")
                continue
            out.append(head + ", src=(\n")
            stack.append(f")\n{pad})")
            for i, child in enumerate(reversed(node.src)):
                stack.append((child, d + 1))
                if i != len(node.src) - 1:
                    stack.append(",\n")
        return "".join(out)

    # ---- graph walking ----
    def toposort(self) -> dict[UOp, None]:
        """All nodes reachable from self, sources before users (a new dict; the walk is cached on the node)."""
        below = self._toposort
        if below is None:
            below = dict.fromkeys(post_order((self,)))
            # the memo leaves out the node itself: a node in its own memo would be a reference cycle, which lives
            # (with the buffers under it) until the cyclic garbage collector runs, and makes reference counts lie
            del below[self]
            self._toposort = below
        out = below.copy()
        out[self] = None
        return out

    def substitute(self, mapping: dict[UOp, UOp]) -> UOp:
        cache: dict[UOp, UOp] = {}
        for node in self.toposort():
            if node in mapping:
                cache[node] = mapping[node]
            else:
                new_src = tuple(cache[s] for s in node.src)
                cache[node] = node if new_src == node.src else node.replace(src=new_src)
        return cache[self]

    def replace(self, **kwargs: Any) -> UOp:
        return UOp(kwargs.get("op", self.op), kwargs.get("dtype", self.dtype), kwargs.get("src", self.src),
                   kwargs.get("arg", self.arg))

    # ---- what tinygrad's users read off a tensor's node (`t.uop.base.buffer`) ----
    @property
    def base(self) -> UOp:
        """The node under this one's movement ops (reshape, permute, expand, pad, shrink, flip)."""
        u = self
        while u.op in GroupOp.Movement:
            u = u.src[0]
        return u

    @property
    def buffer(self) -> Any:
        """The device Buffer holding a BUFFER node's memory, or a realized node's; a node not realized raises."""
        u = self if self.op is Ops.BUFFER else self._realized.base if self._realized is not None else None
        if u is None or u.op is not Ops.BUFFER:
            raise RuntimeError(f"this {self.op} node has no buffer: realize the tensor first")
        return u.arg

    @property
    def device(self) -> str | tuple[str, ...] | None:
        """tinygrad's: where this node's value is computed: the target of the nearest copy above its buffers, else the
        device of its buffers; None for a graph of constants alone (it can be computed anywhere)."""
        seen: set[UOp] = set()
        todo = [self]
        while todo:  # top-down, so a copy is found before the buffers it reads
            u = todo.pop()
            if u.op is Ops.COPY:
                return u.arg  # type: ignore[no-any-return]
            if u.op is Ops.BUFFER:
                return u.arg.device  # type: ignore[no-any-return]
            for s in u.src:
                if s not in seen:
                    seen.add(s)
                    todo.append(s)
        return None

    @property
    def realized(self) -> Any:
        """tinygrad's: the Buffer holding this node's value (a BUFFER node's, or a realized node's), else None."""
        u = self if self.op is Ops.BUFFER else self._realized.base if self._realized is not None else None
        return u.arg if u is not None and u.op is Ops.BUFFER else None

    @property
    def is_realized(self) -> bool:
        """tinygrad's: whether this node's value is in memory (it is a buffer, a view of one, or was realized)."""
        return self.realized is not None or self.base.realized is not None

    # ---- shapes of the tensor graph ----
    @property
    def shape(self) -> tuple[int, ...]:
        s = self._shape
        if s is False:
            s = self._fill_shape()
        if s is None:
            raise ValueError(f"{self.op} has no shape")
        return s  # type: ignore[return-value]

    @property
    def has_shape(self) -> bool:
        s = self._shape
        if s is False:
            s = self._fill_shape()
        return s is not None

    def _fill_shape(self) -> tuple[int, ...] | None:
        if not self.src or all(x._shape is not False for x in self.src):  # usual in eager code: sources are known
            self._shape = _infer_shape(self)
        else:
            _fill_sources_first(self, lambda n: n._shape is not False, _cache_shape)
        return self._shape  # type: ignore[return-value]

    @property
    def size(self) -> sint:
        return sym_prod(self.shape)

    # ---- constructors used everywhere ----
    @staticmethod
    def const(dtype: Any, value: Any = _NO_VALUE) -> UOp:
        """A constant: `UOp.const(dtypes.float32, 2.0)`, or tinygrad's order `UOp.const(2.0)` /
        `UOp.const(2.0, dtypes.float32)`, where the dtype defaults to the Python value's (a value is never a DType,
        so the order is unambiguous)."""
        if not isinstance(dtype, DType):
            dtype, value = (dtypes.from_py(dtype) if value is _NO_VALUE or value is None else value), dtype
        elif value is _NO_VALUE:
            raise TypeError(f"UOp.const({dtype}) needs a value: UOp.const(value, dtype) or UOp.const(dtype, value)")
        return UOp(Ops.CONST, dtype, (), truncate(value, dtype.scalar))

    @staticmethod
    def variable(name: str, min_val: int, max_val: int, dtype: DType | None = None) -> UOp:
        """tinygrad's spelling of `Variable(name, min_val, max_val)` (an index-typed symbolic integer)."""
        if dtype is not None and not dtype.is_int:
            raise TypeError(f"a Variable is an integer, got dtype {dtype}")
        return Variable(name, min_val, max_val)

    def has_buffer_identity(self) -> bool:
        """tinygrad's: whether this node is a buffer itself (through reshapes), so that writing it writes memory."""
        u = self
        while u.op is Ops.RESHAPE:
            u = u.src[0]
        return u.op is Ops.BUFFER

    @property
    def axis(self) -> int | None:
        """The axis a value on several devices is split along (None: replicated, or on one device), as the
        multi-device lowering places it (tinygrad's `t.uop.axis`)."""
        if _sharding_axis is None:
            raise RuntimeError("the multi-device layer (tinygrad.multi) is not loaded: import tinygrad first")
        return _sharding_axis(self)

    def const_like(self, value: Any) -> UOp:
        c = UOp.const(self.dtype, value)
        if self.has_shape and self.shape != ():
            return c.reshape((1,) * len(self.shape)).expand(self.shape)
        return c

    def alu(self, op: Ops, *srcs: UOp) -> UOp:
        out_dtype = _BOOL if op in _COMPARISON else (srcs[-1].dtype if op is _WHERE else self.dtype)
        return _make_uop(UOp, op, out_dtype, (self, *srcs))

    def cast(self, dtype: DType) -> UOp:
        return self if self.dtype == dtype else UOp(Ops.CAST, dtype, (self,))

    def bitcast(self, dtype: DType) -> UOp:
        return UOp(Ops.BITCAST, dtype, (self,))

    def _ufix(self, x: UOp | int | float | bool) -> UOp:
        return x if isinstance(x, UOp) else self.const_like(x)

    def __add__(self, x: UOp | int | float) -> UOp: return self.alu(Ops.ADD, self._ufix(x))
    def __radd__(self, x: UOp | int | float) -> UOp: return self._ufix(x).alu(Ops.ADD, self)
    def __sub__(self, x: UOp | int | float) -> UOp: return self.alu(Ops.SUB, self._ufix(x))
    def __rsub__(self, x: UOp | int | float) -> UOp: return self._ufix(x).alu(Ops.SUB, self)
    def __mul__(self, x: UOp | int | float) -> UOp: return self.alu(Ops.MUL, self._ufix(x))
    def __rmul__(self, x: UOp | int | float) -> UOp: return self._ufix(x).alu(Ops.MUL, self)
    def __floordiv__(self, x: UOp | int) -> UOp: return self.alu(Ops.IDIV, self._ufix(x))
    def __mod__(self, x: UOp | int) -> UOp: return self.alu(Ops.MOD, self._ufix(x))
    def __neg__(self) -> UOp: return self.alu(Ops.NEG)
    def lt(self, x: UOp | int | float) -> UOp: return self.alu(Ops.CMPLT, self._ufix(x))
    def ne(self, x: UOp | int | float) -> UOp: return self.alu(Ops.CMPNE, self._ufix(x))
    def eq(self, x: UOp | int | float) -> UOp: return self.alu(Ops.CMPEQ, self._ufix(x))
    def logical_and(self, x: UOp | bool) -> UOp: return self.alu(Ops.AND, self._ufix(x))
    def where(self, a: UOp | int | float, b: UOp | int | float) -> UOp:
        ua = a if isinstance(a, UOp) else (b.const_like(a) if isinstance(b, UOp) else self.const_like(a))
        ub = b if isinstance(b, UOp) else ua.const_like(b)
        return self.alu(Ops.WHERE, ua, ub)
    def maximum(self, x: UOp | int | float) -> UOp: return self.alu(Ops.MAX, self._ufix(x))

    # movement (tensor graph); these never copy
    def reshape(self, shape: tuple[sint, ...]) -> UOp:
        return self if self.shape == shape else UOp(Ops.RESHAPE, self.dtype, (self,), tuple(shape))

    def permute(self, order: tuple[int, ...]) -> UOp:
        return self if tuple(order) == tuple(range(len(order))) else UOp(Ops.PERMUTE, self.dtype, (self,), tuple(order))

    def expand(self, shape: tuple[sint, ...]) -> UOp:
        return self if self.shape == shape else UOp(Ops.EXPAND, self.dtype, (self,), tuple(shape))

    def pad(self, padding: tuple[tuple[int, int], ...]) -> UOp:
        return self if all(p == (0, 0) for p in padding) else UOp(Ops.PAD, self.dtype, (self,), tuple(padding))

    def shrink(self, bounds: tuple[tuple[sint, sint], ...]) -> UOp:
        same = all(b == (0, s) for b, s in zip(bounds, self.shape))
        return self if same else UOp(Ops.SHRINK, self.dtype, (self,), tuple(bounds))

    def flip(self, axes: tuple[bool, ...]) -> UOp:
        return self if not any(axes) else UOp(Ops.FLIP, self.dtype, (self,), tuple(axes))

    def reduce_axis(self, op: Ops, axes: tuple[int, ...]) -> UOp:
        axes = tuple(sorted(axes))
        return self if not axes else UOp(Ops.REDUCE_AXIS, self.dtype, (self,), (op, axes))

    # ---- value bounds of integer index arithmetic, used by symbolic simplification ----
    @property
    def vmin(self) -> int | float:
        return self._bounds()[0]

    @property
    def vmax(self) -> int | float:
        return self._bounds()[1]

    def _bounds(self) -> tuple[int | float, int | float]:
        if self._ranges is None:
            if all(s._ranges is not None for s in self.src):  # usual in passes that walk sources first
                self._ranges = _compute_bounds(self)
            else:
                _fill_sources_first(self, lambda n: n._ranges is not None, _cache_bounds)
        assert self._ranges is not None
        return self._ranges


def _fill_sources_first(root: UOp, is_cached: Callable[[UOp], bool], fill: Callable[[UOp], None]) -> None:
    """Compute a per-node cached property for root, sources before users, without recursion.

    Shapes and bounds of a node read those of its sources; computing them depth-first through Python calls
    fails with RecursionError on long chains (a 5000-deep ADD), so fill the uncached subgraph bottom-up here.
    """
    for node in post_order((root,), skip=is_cached):
        fill(node)


def _graph_from_pickle(nodes: tuple[tuple[Ops, DType, tuple[int, ...], Any], ...]) -> UOp:
    """UOp.__reduce__'s inverse: the last node of the list, its sources made first."""
    made: list[UOp] = []
    for op, dtype, src, arg in nodes:
        if op is Ops.BUFFER:
            made.append(buffer_node(arg))  # a buffer's one graph node is kept on the buffer, not in the table
        else:
            made.append(UOp(op, dtype, tuple(made[i] for i in src), arg))
    return made[-1]


def post_order(roots: Iterable[UOp], children: Callable[[UOp], Sequence[UOp]] | None = None,
               skip: Callable[[UOp], bool] | None = None) -> list[UOp]:
    """The one graph traversal every pass shares: the nodes reachable from `roots`, each once, every node after its
    children, the first child's subgraph before the second's.

    `children(node)` says which nodes to enter below `node` (default: its sources); it is called once per node,
    when the walk enters it, so a pass may decide there what it does not look inside. A node for which `skip` is
    true (typically: already in the pass's memo) is neither entered nor listed. Iterative: graphs thousands of
    nodes deep must not hit Python's recursion limit."""
    out: list[UOp] = []
    # a dict, not a set: nodes hash by address, and a set's linear probing clusters on neighbouring addresses
    entered: dict[UOp, None] = {}
    # (node, False): enter it; (node, True): its children are listed, list it
    stack: list[tuple[UOp, bool]] = [(r, False) for r in reversed(tuple(roots))]
    pop, push, place = stack.pop, stack.append, out.append
    while stack:
        node, ready = pop()
        if ready:
            place(node)
        elif node not in entered and (skip is None or not skip(node)):
            entered[node] = None
            push((node, True))
            for s in reversed(node.src if children is None else children(node)):
                if s not in entered:
                    push((s, False))
    return out


def _cache_shape(u: UOp) -> None:
    u._shape = _infer_shape(u)


def _cache_bounds(u: UOp) -> None:
    u._ranges = _compute_bounds(u)


def _compute_bounds(u: UOp) -> tuple[int | float, int | float]:
    d = u.dtype
    full: tuple[int | float, int | float] = (d.min, d.max) if d.kind != "bool" else (0, 1)
    if u.op is Ops.CONST:
        return (u.arg, u.arg)
    if u.op is Ops.RANGE:
        end = u.src[0]
        return (0, max(0, end.vmax - 1))
    if u.op is Ops.SPECIAL:
        return (0, u.arg.size - 1)
    if u.op is Ops.DEFINE_VAR:
        return (u.arg.vmin, u.arg.vmax)
    if u.op is Ops.BIND:
        return u.src[0]._bounds()
    if not d.is_int:
        return full
    if u.op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX, Ops.IDIV, Ops.MOD):
        (a0, a1), (b0, b1) = u.src[0]._bounds(), u.src[1]._bounds()
        if u.op is Ops.ADD:
            return _clip(a0 + b0, a1 + b1, full)
        if u.op is Ops.SUB:
            return _clip(a0 - b1, a1 - b0, full)
        if u.op is Ops.MUL:
            vals = [a0 * b0, a0 * b1, a1 * b0, a1 * b1]
            return _clip(min(vals), max(vals), full)
        if u.op is Ops.MAX:
            return (max(a0, b0), max(a1, b1))
        if u.op is Ops.IDIV and b0 > 0:
            # truncating division by a positive divisor (a constant, or a Variable's range: symbolic strides) is
            # monotonic in the dividend and in the divisor, so the corners bound it
            quotients = [_trunc_div(a, b) for a in (a0, a1) for b in (b0, b1)]
            return (min(quotients), max(quotients))
        if u.op is Ops.MOD and b0 > 0:
            if a0 >= 0:
                return (0, min(a1, b1 - 1)) if a1 >= b0 else (a0, a1)
            # C's remainder takes the dividend's sign and is no larger than it in magnitude
            return (max(a0, 1 - b1), min(a1, b1 - 1) if a1 >= 0 else 0)
    if u.op is Ops.NEG and d.is_int:
        s0, s1 = u.src[0]._bounds()
        return _clip(-s1, -s0, full)
    if u.op is Ops.WHERE:
        (a0, a1), (b0, b1) = u.src[1]._bounds(), u.src[2]._bounds()
        return (min(a0, b0), max(a1, b1))
    if u.op is Ops.CAST and u.src[0].dtype.is_int:
        s0, s1 = u.src[0]._bounds()
        if full[0] <= s0 and s1 <= full[1]:
            return (s0, s1)
    return full


def _trunc_div(a: int | float, b: int | float) -> int | float:
    if isinstance(a, float) or isinstance(b, float):  # an unbounded side stays unbounded
        return a / b
    q = abs(a) // b
    return q if a >= 0 else -q


def _clip(lo: int | float, hi: int | float, full: tuple[int | float, int | float]) -> tuple[int | float, int | float]:
    # an out-of-dtype bound means the arithmetic may wrap: fall back to the whole range
    if lo < full[0] or hi > full[1]:
        return full
    return (lo, hi)


def _infer_shape(u: UOp) -> tuple[int, ...] | None:
    op = u.op
    if op is Ops.BUFFER:
        return (u.arg.size,)
    if op is Ops.PARAM:
        return (u.arg.size,)
    if op in (Ops.CONST, Ops.BIND, Ops.DEFINE_VAR):
        return ()
    if op is Ops.ARANGE:
        return (u.arg,)
    if op in GroupOp.Elementwise or op in (Ops.CONTIGUOUS, Ops.DETACH, Ops.LAYOUT, Ops.COPY, Ops.SHARD):
        shapes = [s.shape for s in u.src if s.has_shape]
        if not shapes:
            return None
        return shapes[0]
    if op is Ops.MULTI:  # the shards joined along the axis, or one replica
        shard = u.src[0].shape
        return shard if u.arg is None else shard[:u.arg] + (shard[u.arg] * len(u.src),) + shard[u.arg + 1:]
    if op is Ops.REDUCE_AXIS:
        axes = u.arg.axes
        return tuple(1 if i in axes else s for i, s in enumerate(u.src[0].shape))
    if op in (Ops.RESHAPE, Ops.EXPAND):
        return _canonical_shape(tuple(u.arg))
    if op is Ops.PERMUTE:
        return tuple(u.src[0].shape[i] for i in u.arg)
    if op is Ops.PAD:
        return _canonical_shape(tuple(s + b + a for s, (b, a) in zip(u.src[0].shape, u.arg)))
    if op is Ops.SHRINK:
        return _canonical_shape(tuple(e - b if b else e for b, e in u.arg))
    if op is Ops.FLIP:
        return u.src[0].shape
    if op is Ops.STORE and u.src[0].has_shape:
        return u.src[0].shape
    return None


def _canonical_shape(shape: tuple[Any, ...]) -> tuple[Any, ...]:
    # symbolic sizes in one form, so that shapes compare by identity (n+1-1 is n); int shapes pass untouched
    return shape if all(isinstance(s, int) for s in shape) else tuple(ssimplify(s) for s in shape)


def inverse_permutation(order: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(argsort(order))


# ---- symbolic sizes: a dimension may be a Variable bound to a value ----

sint = int | UOp  # a size: an int, or an integer UOp over bound variables


def sym_prod(xs: Iterable[sint]) -> sint:
    """The product of sizes, symbolic if any of them is (in the canonical form of `ssimplify`)."""
    out: sint = 1
    for x in xs:
        out = out * x if isinstance(out, UOp) or not isinstance(x, UOp) else x * out
    return ssimplify(out)


# A size expression as a polynomial: {monomial: coefficient}, a monomial being the sorted tuple of its atoms (bound
# or free Variables, and any sub-expression that is not a sum or product, such as n // 2). The constant term has the
# empty monomial.
_Poly = dict[tuple[UOp, ...], int]


def _atom_key(u: UOp) -> tuple:
    # Variables sort by name (and bound value); other atoms by their identity, which hash-consing makes unique
    if u.op is Ops.DEFINE_VAR:
        return (0, u.arg.name, 0)
    if u.op is Ops.BIND:
        return (0, u.src[0].arg.name, int(u.src[1].arg))
    return (1, "", id(u))


def _poly(x: UOp, memo: dict[UOp, _Poly]) -> _Poly:
    for u in x.toposort():
        if u in memo:
            continue
        if u.op is Ops.CONST:
            memo[u] = {(): int(u.arg)} if u.arg else {}
        elif u.op in (Ops.ADD, Ops.SUB):
            out = dict(memo[u.src[0]])
            sign = 1 if u.op is Ops.ADD else -1
            for mono, c in memo[u.src[1]].items():
                out[mono] = out.get(mono, 0) + sign * c
            memo[u] = {m: c for m, c in out.items() if c}
        elif u.op is Ops.NEG:
            memo[u] = {m: -c for m, c in memo[u.src[0]].items()}
        elif u.op is Ops.MUL:
            out = {}
            for ma, ca in memo[u.src[0]].items():
                for mb, cb in memo[u.src[1]].items():
                    mono = tuple(sorted(ma + mb, key=_atom_key))
                    out[mono] = out.get(mono, 0) + ca * cb
            memo[u] = {m: c for m, c in out.items() if c}
        elif u.op in (Ops.DEFINE_VAR, Ops.BIND) or not u.src:
            memo[u] = {(u,): 1}
        else:  # an atom: canonicalize its operands, so that equal atoms are one node
            atom = u.replace(src=tuple(_rebuild(memo[s]) for s in u.src))
            memo[u] = {(atom,): 1}
    return memo[x]


def _rebuild(poly: _Poly) -> sint:
    out: sint = poly.get((), 0)
    for mono in sorted((m for m in poly if m), key=lambda m: tuple(_atom_key(a) for a in m)):
        term: UOp = mono[0]
        for a in mono[1:]:
            term = term * a
        c = poly[mono]
        term = term if c == 1 else term * c
        out = term if isinstance(out, int) and out == 0 else term + out
    return out


def sym_div_exact(x: sint, d: sint) -> sint | None:
    """x / d when d divides x for every value of the Variables (an int dividing every coefficient, or x itself),
    else None."""
    x, d = ssimplify(x), ssimplify(d)
    if x is d:
        return 1
    if isinstance(d, UOp) or d == 0:
        return None
    if isinstance(x, int):
        return x // d if x % d == 0 else None
    poly = _poly(x, {})
    if any(c % d for c in poly.values()):
        return None
    return _rebuild({m: c // d for m, c in poly.items()})


def ssimplify(x: sint) -> sint:
    """A size expression in one canonical form: equal polynomials in the Variables (n*4 and 4*n, n+1+1 and n+2, or
    (n+2)-2 and n) become the same node, and constants become ints. Shapes are compared by identity, so every
    symbolic size a shape holds passes through here."""
    if isinstance(x, int) or not x.dtype.is_int:
        return x
    return _rebuild(_poly(x, {}))


def Variable(name: str, min_val: int, max_val: int) -> UOp:
    """A symbolic integer in [min_val, max_val]. `Variable("n", 1, 64).bind(10)` stands for 10 in shapes, while the
    kernels compiled for it take n as an argument, so one program serves every value."""
    if not name.isidentifier():
        raise ValueError(f"a Variable's name must be an identifier, got {name!r}")
    if not (isinstance(min_val, int) and isinstance(max_val, int)) or min_val > max_val or min_val < 0:
        raise ValueError(f"Variable {name} needs 0 <= min_val <= max_val, got [{min_val}, {max_val}]")
    return UOp(Ops.DEFINE_VAR, dtypes.index, (), (name, min_val, max_val))


def _bind(self: UOp, value: int) -> UOp:
    if self.op is not Ops.DEFINE_VAR:
        raise TypeError(f"only a Variable can be bound, not {self.op}")
    name, lo, hi = self.arg
    if not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"Variable {name} takes values in [{lo}, {hi}], got {value!r}")
    return UOp(Ops.BIND, dtypes.index, (self, UOp.const(dtypes.index, value)))


UOp.bind = _bind  # type: ignore[attr-defined]


def resolve_size(x: sint, var_vals: dict[UOp, int] | None = None) -> int:
    """The value of a size: ints as they are, symbolic ones with their bound (or the given) values."""
    if isinstance(x, int):
        return x
    from tinygrad.uop.alu import exec_alu

    values: dict[UOp, int | None] = {}
    for node in x.toposort():
        if node.op is Ops.CONST:
            values[node] = int(node.arg)
        elif node.op is Ops.BIND:
            values[node] = int(node.src[1].arg)
        elif node.op is Ops.DEFINE_VAR:
            values[node] = (var_vals or {}).get(node)  # None: only fine under a BIND, which carries the value
        else:
            operands = tuple(values[s] for s in node.src)
            if None in operands:
                unbound = next(s.arg.name for s in node.toposort() if s.op is Ops.DEFINE_VAR and values[s] is None)
                raise ValueError(f"Variable {unbound} has no value here; bind it: Variable(...).bind(value)")
            values[node] = int(exec_alu(node.op, node.dtype, operands))  # type: ignore[arg-type]
    out = values[x]
    if out is None:
        raise ValueError(f"Variable {x.arg.name} has no value here; bind it: Variable(...).bind(value)")
    return out


def _arg_uops(arg: Any) -> Iterator[UOp]:
    """UOps inside an arg (movement ops keep symbolic sizes in theirs)."""
    if isinstance(arg, UOp):
        yield arg
    elif isinstance(arg, tuple):
        for a in arg:
            yield from _arg_uops(a)


def _map_arg(arg: Any, fn: Callable[[UOp], UOp]) -> Any:
    if isinstance(arg, UOp):
        return fn(arg)
    if isinstance(arg, tuple):
        return tuple(_map_arg(a, fn) for a in arg)
    return arg


def unbind(x: UOp) -> tuple[UOp, dict[UOp, int]]:
    """Replace every BIND under x (in sources and in symbolic sizes inside args) by its variable; return the new
    graph and the variables' values."""
    values: dict[UOp, int] = {}
    memo: dict[UOp, UOp] = {}

    def strip(root: UOp) -> UOp:
        for node in root.toposort():
            if node in memo:
                continue
            if node.op is Ops.BIND:
                var, val = node.src[0], int(node.src[1].arg)
                if values.get(var, val) != val:
                    raise ValueError(f"Variable {var.arg.name} is bound to both {values[var]} and {val} in one "
                                     f"computation")
                values[var] = val
                memo[node] = var
                continue
            new_src = tuple(memo[s] for s in node.src)
            new_arg = _map_arg(node.arg, strip) if any(True for _ in _arg_uops(node.arg)) else node.arg
            memo[node] = node if new_src == node.src and new_arg == node.arg else node.replace(src=new_src,
                                                                                                arg=new_arg)
        return memo[root]

    out = strip(x)
    return out, values



def _broadcast_constant(u: UOp) -> UOp | None:
    """The CONST a node broadcasts (a constant reshaped and expanded), or None."""
    while u.op in (Ops.EXPAND, Ops.RESHAPE):
        u = u.src[0]
    return u if u.op is Ops.CONST else None


def shrink_folded(x: UOp, bounds: tuple[tuple[sint, sint], ...]) -> UOp:
    """`x.shrink(bounds)`, folded where the graph says what the slice is (`fold_shrink`)."""
    folded = fold_shrink(x, bounds)
    return x.shrink(bounds) if folded is None else folded


def fold_shrink(x: UOp, bounds: tuple[tuple[sint, sint], ...]) -> UOp | None:
    """A slice of `x` without a SHRINK node where the graph says what it is, else None: a slice of a slice is one
    slice; a slice of a pad that lies in the padded tensor is a slice of it, one that lies in the padding is zeros;
    a slice of a broadcast constant is that constant; a slice of a `where` whose condition is constant over the
    slice is the chosen side's slice. So a slice of a `cat` (wheres over pads) is the slice of the one part it lies
    in. The lowerer folds every slice it reads: a chain of cats of slices of the previous cat (a counter advanced
    draw by draw) would otherwise be read along every path through it, whose number doubles with each link. A loop,
    not recursion: such chains are as deep as the program made them."""
    if not all(isinstance(n, int) for n in x.shape):
        return None
    folded = False
    while all(isinstance(b, int) and isinstance(e, int) for b, e in bounds):
        shape = tuple(e - b for b, e in bounds)
        if all(b == 0 and e == n for (b, e), n in zip(bounds, x.shape)):
            return x
        if x.op is Ops.SHRINK and all(isinstance(b, int) for b, _ in x.arg):
            x, bounds = x.src[0], tuple((ob + b, ob + e) for (ob, _), (b, e) in zip(x.arg, bounds))
        elif (c := _broadcast_constant(x)) is not None:
            return c.reshape((1,) * len(shape)).expand(shape)  # type: ignore[arg-type]
        elif x.op is Ops.PAD and any(e <= before or b >= before + n
                                     for (b, e), (before, _), n in zip(bounds, x.arg, x.src[0].shape)):
            return UOp.const(x.dtype, 0).reshape((1,) * len(shape)).expand(shape)  # type: ignore[arg-type]
        elif x.op is Ops.PAD and all(b >= before and e <= before + n
                                     for (b, e), (before, _), n in zip(bounds, x.arg, x.src[0].shape)):
            x, bounds = x.src[0], tuple((b - before, e - before) for (b, e), (before, _) in zip(bounds, x.arg))
        elif x.op is Ops.WHERE and (c := _broadcast_constant(shrink_folded(x.src[0], bounds))) is not None:
            x = x.src[1] if c.arg else x.src[2]
        else:
            break
        folded = True
    return x.shrink(bounds) if folded else None
