"""`@function`: trace a Tensor function once per input signature and reuse the traced graph on later calls.

    from tinygrad import Tensor, function

    @function
    def layer(x: Tensor, w: Tensor) -> Tensor: return (x @ w).relu()

    y = layer(a, b)  # the values of the plain call (x @ w).relu() with x=a, w=b

The first call with a signature runs the Python body on stand-ins of the argument tensors and keeps the graph it
returns. A later call with the same signature (the shapes, dtypes and devices of the argument tensors, which
arguments are the same tensor, the non-tensor arguments, Tensor.training) does not run Python code: it puts the
new arguments' graphs in place of the stand-ins. The result is the same lazy graph the plain call would build, so
values, realization and gradients are those of the plain call.

What this asks of the body (tinygrad's rules for functions):
  * Argument tensors may be nested in lists, tuples, dicts and the attributes of objects (a module passed as
    `self` to a method: its weights are arguments too). Other arguments are baked into the trace: they are part of
    the signature when hashable, and a call with an unhashable non-tensor argument (a numpy array) is traced anew.
  * It returns a Tensor or a tuple of Tensors.
  * It reads no value on the host (`.numpy()`, `.item()`, `.tolist()`, `if t:`): that raises RuntimeError.
  * It may `assign` to argument tensors, as a layer updates its state (BatchNorm's running statistics in training):
    each call, traced or not, gives those tensors the value the body assigned, computed from this call's arguments,
    as the plain call would (lazily, like any assign). Other writes to arguments (`realize()` of one) raise
    RuntimeError. It keeps no tensor it computes in globals or attributes; a body that assigns to a tensor that
    is not an argument runs its Python code again on every call.
  * A tensor it reads that is not an argument (a global weight) is an implicit input, taken as it is. Realized
    buffers read that way are refused unless `allow_implicit=True`, so that weights are passed explicitly by
    default. A trace whose implicit input has since been replaced by `assign` (an optimizer step) is traced again;
    one whose body launched kernels (random numbers, a realize()) is never reused.
"""

from __future__ import annotations

import functools
import itertools
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

from tinygrad.engine import jit_state
from tinygrad.engine.jit_state import note_assign
from tinygrad.gradient import define_gradient, substitute_keeping_gradients
from tinygrad.helpers import DEBUG, GlobalCounters
from tinygrad.tensor import Tensor
from tinygrad.uop.ops import Ops, UOp, post_order

R = TypeVar("R")

_tokens = itertools.count()


class _Uncacheable(Exception):
    """An argument that cannot be part of a signature (unhashable, and no container of tensors)."""


def _walk(obj: Any, tensors: dict[int, int], order: list[Tensor], seen: dict[int, int]) -> Any:
    """A hashable description of `obj` with each tensor replaced by its number in `order` (one number per tensor
    object, so passing one tensor twice is a different signature from passing two), its shape, dtype and device."""
    if isinstance(obj, Tensor):
        if id(obj) not in tensors:
            tensors[id(obj)] = len(order)
            order.append(obj)
        return ("tensor", tensors[id(obj)], obj.shape, obj.dtype, obj.device)
    if id(obj) in seen:  # a container met before (shared or a cycle): its first description stands for it
        return ("seen", seen[id(obj)])
    if isinstance(obj, (list, tuple)):
        seen[id(obj)] = len(seen)
        return (type(obj), tuple(_walk(x, tensors, order, seen) for x in obj))
    if isinstance(obj, dict):
        seen[id(obj)] = len(seen)
        return (dict, tuple((_hashable(k), _walk(v, tensors, order, seen)) for k, v in obj.items()))
    if _holds_state(obj):
        # an object holding state (a module): its attributes are walked like a dict, so that two instances of one
        # class with weights of the same shapes share a trace, each call reading its own weights
        seen[id(obj)] = len(seen)
        return (type(obj), tuple((k, _walk(v, tensors, order, seen)) for k, v in vars(obj).items()))
    return _hashable(obj)


def _holds_state(obj: Any) -> bool:
    """Whether obj is an object whose attributes may hold argument tensors (a module, a config), as opposed to code
    (functions, classes, modules), which is part of a signature by identity."""
    return hasattr(obj, "__dict__") and not isinstance(obj, _CODE)


_CODE = (type, types.ModuleType, types.FunctionType, types.MethodType, types.BuiltinFunctionType, functools.partial)


def _hashable(obj: Any) -> Any:
    try:
        hash(obj)
    except TypeError:
        raise _Uncacheable from None
    return (type(obj), obj)


def _signature(args: tuple, kwargs: dict) -> tuple[Any, list[Tensor]]:
    """(the cache key of a call or None when it has none, the argument tensors in order)."""
    tensors: dict[int, int] = {}
    order: list[Tensor] = []
    try:
        key = (_walk((args, kwargs), tensors, order, {}), Tensor.training)
    except _Uncacheable:
        # still find every argument tensor, walking again with unhashable values skipped
        order.clear()
        tensors.clear()
        _collect(args, kwargs, tensors, order)
        return None, order
    return key, order


def _collect(args: tuple, kwargs: dict, tensors: dict[int, int], order: list[Tensor]) -> None:
    stack: list[Any] = [(args, kwargs)]
    seen: set[int] = set()
    while stack:
        obj = stack.pop(0)
        if isinstance(obj, Tensor):
            if id(obj) not in tensors:
                tensors[id(obj)] = len(order)
                order.append(obj)
        elif id(obj) in seen:
            continue
        elif isinstance(obj, (list, tuple)):
            seen.add(id(obj))
            stack[0:0] = list(obj)
        elif isinstance(obj, dict):
            seen.add(id(obj))
            stack[0:0] = list(obj.values())
        elif _holds_state(obj):
            seen.add(id(obj))
            stack[0:0] = list(vars(obj).values())


@dataclass(eq=False)
class _Trace:
    """The graph a body returned, over one stand-in per argument tensor (`inputs`)."""

    inputs: tuple[UOp, ...]
    outputs: tuple[UOp, ...]
    devices: tuple[str, ...]
    is_tuple: bool
    updates: tuple[tuple[int, UOp], ...]  # (argument number, its new value) for each argument the body assigned
    implicit_grad: bool  # an implicit input is a parameter (requires_grad=True)
    implicit: frozenset[UOp]  # the nodes that depend on no argument: the implicit inputs and what is made of them
    generation: int  # jit_state.assign_generation when `implicit` was last found current

    def is_current(self) -> bool:
        if self.generation == jit_state.assign_generation:
            return True
        small, large = sorted((self.implicit, jit_state.superseded), key=len)
        if any(u in large for u in small):
            return False
        self.generation = jit_state.assign_generation
        return True


#: traces one function keeps, one per argument signature; the oldest goes first
MAX_TRACES = 64


class _Function(Generic[R]):
    depth = 0  # nesting of calls, for DEBUG output

    def __init__(self, fxn: Callable[..., R], *, precompile: bool, precompile_backward: bool, allow_implicit: bool,
                 grad_fxn: Callable[..., tuple[Tensor | None, ...]] | None):
        functools.update_wrapper(self, fxn)  # type: ignore[arg-type]
        self.fxn, self.allow_implicit, self.grad_fxn = fxn, allow_implicit, grad_fxn
        self.precompile, self.precompile_backward = precompile, precompile_backward
        self.name: str = getattr(fxn, "__qualname__", None) or type(fxn).__qualname__
        self.traces: dict[Any, _Trace] = {}

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        # a method: the instance is the first argument, so its tensor attributes are arguments too
        return self if obj is None else functools.partial(self.__call__, obj)

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        st = time.perf_counter()
        key, tensors = _signature(args, kwargs)
        trace = self.traces.get(key) if key is not None else None
        cached = trace is not None and trace.is_current()
        if not cached:
            trace, reusable = self._trace(args, kwargs, tensors)
            if key is not None and reusable:
                if len(self.traces) >= MAX_TRACES:  # drop the oldest: a new Variable value per call is a new key
                    self.traces.pop(next(iter(self.traces)))
                self.traces[key] = trace
            elif key is not None:
                self.traces.pop(key, None)
        assert trace is not None
        outs = self._apply(trace, tensors)
        if DEBUG >= 2:
            print(f"{'  ' * _Function.depth}function {self.name} in {(time.perf_counter() - st) * 1000:8.2f} ms"
                  f"{' (cached trace)' if cached else ''}")
        return tuple(outs) if trace.is_tuple else outs[0]  # type: ignore[return-value]

    def _trace(self, args: tuple, kwargs: dict, tensors: list[Tensor]) -> tuple[_Trace, bool]:
        """Run the body on stand-ins of the argument tensors: (the trace, whether later calls may reuse it: not when
        the body launched kernels, whose results, random numbers for one, belong to this call alone)."""
        token = next(_tokens)
        # Stand-ins: the body sees each argument as a node of its own, so nothing it builds from other tensors can
        # be mistaken for an argument when the stand-ins are replaced. Each wraps the argument's graph, so a value
        # computed from it by accident (a realize() in the body) is still right for this call.
        stand_ins = [UOp(Ops.CONTIGUOUS, t.dtype, (t.uop,), ("function_input", token, i))
                     for i, t in enumerate(tensors)]
        originals = [t.uop for t in tensors]
        kernels = GlobalCounters.kernel_count
        # Assigns in the body: note which tensors they hit. An assign to an argument is noted for TinyJit when the
        # call applies it (with the argument's real graph), not here, where the tensor holds its stand-in.
        assigned: dict[int, Tensor] = {}
        jit_noted = dict(jit_state.running[-1].assigned) if jit_state.running else None
        outer_hook = jit_state.on_assign
        jit_state.on_assign = lambda t, old: assigned.__setitem__(id(t), t)
        jit_state.tracing_functions.append(self.name)
        _Function.depth += 1
        try:
            for t, s in zip(tensors, stand_ins):
                t.uop = s
            ret = self.fxn(*args, **kwargs)
            changed = [i for i, (t, s) in enumerate(zip(tensors, stand_ins)) if t.uop is not s]
            rets: tuple[Any, ...] = (ret,) if isinstance(ret, Tensor) else ret  # type: ignore[assignment]
            if not isinstance(ret, (Tensor, tuple)) or not all(isinstance(x, Tensor) for x in rets):
                inner = f" of {[type(x).__name__ for x in ret]}" if isinstance(ret, tuple) else ""
                raise RuntimeError(f"function {self.name} returned {type(ret).__name__}{inner}; a function returns "
                                   f"a Tensor or a tuple of Tensors")
            outputs = tuple(x.uop for x in rets)
            updates = tuple((i, tensors[i].uop) for i in changed if id(tensors[i]) in assigned)
        finally:
            for t, u in zip(tensors, originals):
                t.uop = u
            _Function.depth -= 1
            jit_state.tracing_functions.pop()
            jit_state.on_assign = outer_hook
            if jit_noted is not None:
                noted = jit_state.running[-1].assigned
                for k in [k for k in noted if k not in jit_noted and any(id(t) == k for t in tensors)]:
                    del noted[k]
        if written := [i for i in changed if id(tensors[i]) not in assigned]:
            raise RuntimeError(f"function {self.name} changed its argument tensor(s) {written} other than by assign() "
                               f"(realize() on an argument); a function must not write its inputs that way")
        arg_ids = {id(t) for t in tensors}
        foreign = [t for t in assigned.values() if id(t) not in arg_ids]  # assigned tensors that are not arguments
        if outer_hook is not None:
            for t in foreign:
                outer_hook(t, t.uop)
        if self.grad_fxn is not None and isinstance(ret, tuple):
            raise RuntimeError(f"function {self.name} has a grad_fxn and returns a tuple; a custom gradient is "
                               f"supported for functions that return one Tensor")
        implicit = _independent(outputs + tuple(u for _, u in updates), set(stand_ins))
        if not self.allow_implicit and (bufs := [u.arg for u in implicit if u.op is Ops.BUFFER]):
            listing = "\n  ".join(f"{i}: dtype={b.dtype}, size={b.size}, device={b.device}" for i, b in enumerate(bufs))
            raise RuntimeError(f"function {self.name} reads {len(bufs)} realized buffer(s) that are not arguments, but "
                               f"allow_implicit=False; pass them as arguments or use @function(allow_implicit=True)"
                               f"\n  {listing}")
        params = {t.uop for t in Tensor._grad_tensors.values()}
        # the kept trace reads stand-ins that hold no graph of this call, so that it keeps no input of it alive
        holes = {s: UOp(Ops.NOOP, s.dtype, (), ("function_input", token, i)) for i, s in enumerate(stand_ins)}
        kept = substitute_keeping_gradients(outputs + tuple(u for _, u in updates), holes)
        trace = _Trace(tuple(holes.values()), kept[:len(outputs)], tuple(x.device for x in rets),
                       isinstance(ret, tuple), tuple((i, u) for (i, _), u in zip(updates, kept[len(outputs):])),
                       any(u in params for u in implicit), frozenset(implicit), jit_state.assign_generation)
        # not reusable: the body launched kernels, or assigned to tensors that are not arguments (a later call that
        # skipped the body would skip those assigns)
        return trace, GlobalCounters.kernel_count == kernels and not foreign

    def _apply(self, trace: _Trace, tensors: list[Tensor]) -> list[Tensor]:
        """The trace's outputs over this call's argument tensors."""
        mapping = {hole: t.uop for hole, t in zip(trace.inputs, tensors)}
        graphs = trace.outputs + tuple(u for _, u in trace.updates)
        # the rules of gradients defined in the body (a convolution's) move to the rebuilt nodes
        graphs = substitute_keeping_gradients(graphs, mapping) if mapping else graphs
        outputs = graphs[:len(trace.outputs)]
        for (i, _), new in zip(trace.updates, graphs[len(trace.outputs):]):
            # the argument's state update, as the assign in the body would have made it on this call's tensors
            note_assign(tensors[i])
            tensors[i].uop = new
        any_grad = trace.implicit_grad or any(t._requires_grad is True for t in tensors)
        outs = []
        for uop, device in zip(outputs, trace.devices):
            if self.grad_fxn is not None:
                uop = self._custom_gradient(uop, tensors, device)
            out = Tensor(uop, device=device)
            # as for any op: True when computed from a parameter, so that realize() keeps the graph for backward
            out._requires_grad = True if any_grad else None if uop.dtype.is_float else False
            outs.append(out)
        return outs

    def _custom_gradient(self, uop: UOp, tensors: list[Tensor], device: str) -> UOp:
        """`uop` as a node of its own whose gradient is grad_fxn's, not that of the body's graph."""
        grad_fxn, name = self.grad_fxn, self.name
        assert grad_fxn is not None
        node = UOp(Ops.CONTIGUOUS, uop.dtype, (uop,), ("function", name, next(_tokens)))
        inputs = tuple(t.uop for t in tensors)
        devices = tuple(t.device for t in tensors)

        def rule(g: UOp, *values: UOp) -> tuple[UOp | None, ...]:
            grads = grad_fxn(Tensor(g, device=device, requires_grad=False),
                             *(Tensor(u, device=d, requires_grad=False) for u, d in zip(values, devices)))
            grads = (grads,) if isinstance(grads, Tensor) or grads is None else tuple(grads)
            if len(grads) != len(values):
                raise RuntimeError(f"grad_fxn of function {name} returned {len(grads)} gradient(s) for "
                                   f"{len(values)} input tensor(s); return one per input (None for no gradient)")
            out: list[UOp | None] = []
            for i, (gr, u) in enumerate(zip(grads, values)):
                if gr is not None and gr.shape != u.shape:
                    raise RuntimeError(f"grad_fxn of function {name} returned a gradient of shape {gr.shape} for "
                                       f"input {i} of shape {u.shape}")
                out.append(None if gr is None else gr.uop if gr.dtype == u.dtype else gr.uop.cast(u.dtype))
            return tuple(out)

        define_gradient(node, inputs, rule)
        return node


def _independent(outputs: tuple[UOp, ...], stand_ins: set[UOp]) -> list[UOp]:
    """The nodes of the outputs' graph that depend on no stand-in (implicit inputs and what is built from them
    alone), sources first. The stand-ins' own graphs (the arguments) are not entered."""
    depends: set[UOp] = set()
    out: list[UOp] = []
    # last output and last source first: the order in which the implicit inputs have always been listed
    for node in post_order(outputs[::-1], children=lambda n: () if n in stand_ins else n.src[::-1]):
        if node in stand_ins or any(s in depends for s in node.src):
            depends.add(node)
        else:
            out.append(node)
    return out


@overload
def function(fxn: Callable[..., R], *, precompile: bool = False, precompile_backward: bool = False,
             allow_implicit: bool = False, grad_fxn: Callable[..., tuple[Tensor | None, ...]] | None = None
             ) -> _Function[R]: ...
@overload
def function(fxn: None = None, *, precompile: bool = False, precompile_backward: bool = False,
             allow_implicit: bool = False, grad_fxn: Callable[..., tuple[Tensor | None, ...]] | None = None
             ) -> Callable[[Callable[..., R]], _Function[R]]: ...
def function(fxn: Callable[..., Any] | None = None, *, precompile: bool = False, precompile_backward: bool = False,
             allow_implicit: bool = False, grad_fxn: Callable[..., tuple[Tensor | None, ...]] | None = None) -> Any:
    """Decorate a Tensor function: `@function` or `@function(allow_implicit=True, ...)`; works on methods too.

    allow_implicit: let the body read realized tensors that are not arguments (global weights); by default that
      raises RuntimeError listing them (dtype, size, device), so that every buffer a function reads is passed in.
    grad_fxn: a custom backward, `grad_fxn(grad_output, *inputs) -> tuple[Tensor | None, ...]`, one gradient per
      argument tensor in the order the arguments hold them (nested ones included; None for none). The forward value
      is the body's; gradients reach the inputs only through grad_fxn (implicit inputs get none from this call).
      Only for functions that return one Tensor. Note: tinygrad's
      grad_fxn works on UOps, `grad_fxn(grad_output_uop, call_uop)`; here it takes and returns Tensors.
    precompile, precompile_backward: accepted for tinygrad compatibility and change nothing here. tinygrad compiles
      a function's kernels as one call; here the traced graph is inlined into the caller's graph and its kernels
      are compiled (and cached, see engine/schedule_cache.py) when the result is realized.

    DEBUG>=2 prints one line per call: "function <name> in <ms> ms", with "(cached trace)" when the body did not run.
    """
    def wrap(f: Callable[..., Any]) -> _Function[Any]:
        return _Function(f, precompile=precompile, precompile_backward=precompile_backward,
                         allow_implicit=allow_implicit, grad_fxn=grad_fxn)
    return wrap if fxn is None else wrap(fxn)


__all__ = ["function"]
