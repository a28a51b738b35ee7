"""Control flow (If, Loop, Scan), sequences and optionals. Sequences are Python lists of values; an empty optional
is Absent. Loop conditions and trip counts are read on the host: the graph's structure depends on them."""

from __future__ import annotations

from typing import Any

import numpy as np
from tinygrad import Tensor
from tinygrad.onnx._base import Absent, NodeCtx, Value, axis_of, op


def _scalar(ctx: NodeCtx, v: Value, what: str) -> Any:
    """The one value of a scalar input (a condition, a trip count)."""
    arr = ctx.host(v).reshape(-1)
    if arr.size != 1:
        raise ctx.fail(f"{what} must hold one value, got {arr.size}")
    return arr[0]


def _flag(ctx: NodeCtx, v: Value, what: str) -> bool:
    return bool(_scalar(ctx, v, what))


def _run(ctx: NodeCtx, g: Any, inputs: list[Value]) -> list[Value]:
    assert ctx.scope is not None  # the runner's scope sets it while the node runs
    return ctx.scope.run_subgraph(ctx, g, inputs)


@op("If")
def if_(ctx: NodeCtx, cond: Value) -> tuple[Value, ...]:
    then_branch, else_branch = ctx.required("then_branch"), ctx.required("else_branch")
    c = _flag(ctx, cond, "cond")
    branch = then_branch if c else else_branch
    return tuple(_run(ctx, branch, []))


@op("Loop")
def loop(ctx: NodeCtx, max_trip: Value = None, cond: Value = None, *carried: Value) -> tuple[Value, ...]:
    body = ctx.required("body")
    trips = int(_scalar(ctx, max_trip, "M")) if max_trip is not None else None
    keep_going = _flag(ctx, cond, "cond") if cond is not None else True
    state = list(carried)
    n_carried = len(state)
    scans: list[list[Value]] = []
    i = 0
    while keep_going and (trips is None or i < trips):
        outs = _run(ctx, body, [np.asarray(i, dtype=np.int64), np.asarray(keep_going)] + state)
        if len(outs) < 1 + n_carried:
            raise ctx.fail(f"the body gives {len(outs)} outputs; it must give the condition and the {n_carried} "
                           f"loop-carried values, then any scan outputs")
        keep_going = _flag(ctx, outs[0], "the body's cond output") if cond is not None or outs[0] is not None \
            else True
        state = outs[1:1 + n_carried]
        for j, v in enumerate(outs[1 + n_carried:]):
            if len(scans) <= j:
                scans.append([])
            scans[j].append(v)
        i += 1
    n_scan = len(ctx.outputs) - n_carried
    stacked: list[Value] = []
    for j in range(n_scan):
        vals = scans[j] if j < len(scans) else []
        if not vals:
            stacked.append(np.zeros((0,), dtype=np.float32))
        elif all(isinstance(v, np.ndarray) for v in vals):
            stacked.append(np.stack(vals))
        else:
            ts = [ctx.t(v) for v in vals]
            stacked.append(Tensor.stack(*ts, dim=0))
    return tuple(state) + tuple(stacked)


@op("Scan")
def scan(ctx: NodeCtx, *args: Value) -> tuple[Value, ...]:
    body = ctx.required("body")
    m = int(ctx.required("num_scan_inputs"))
    if not 0 <= m <= len(args):
        raise ctx.fail(f"num_scan_inputs is {m}, for a node with {len(args)} inputs")
    if ctx.opset < 9:
        # Scan-8: a leading sequence_lens input and a batch axis on everything; the body sees one batch entry
        if args[0] is not None:
            raise NotImplementedError(f"{ctx}: Scan-8 with sequence_lens is not supported")
        rest = args[1:]
        n = len(rest) - m
        dirs = ctx.attr("directions") or [0] * m
        batch = ctx.t(rest[n]).shape[0] if m else ctx.t(rest[0]).shape[0]
        per_batch = [_scan_loop(ctx, body, [ctx.t(a)[b] for a in rest[:n]], [ctx.t(a)[b] for a in rest[n:]],
                                [0] * m, dirs, len(ctx.outputs) - n, [0] * (len(ctx.outputs) - n),
                                [0] * (len(ctx.outputs) - n)) for b in range(batch)]
        return tuple(Tensor.stack(*[ctx.t(r[j]) for r in per_batch], dim=0) for j in range(len(ctx.outputs)))
    n = len(args) - m
    xs = [ctx.t(a) for a in args[n:]]
    in_axes = [axis_of(int(a), x.ndim, ctx) for a, x in zip(ctx.attr("scan_input_axes") or [0] * m, xs)]
    k = len(ctx.outputs) - n
    return tuple(_scan_loop(ctx, body, list(args[:n]), xs, in_axes, ctx.attr("scan_input_directions") or [0] * m,
                            k, ctx.attr("scan_output_axes") or [0] * k, ctx.attr("scan_output_directions") or [0] * k))


def _scan_loop(ctx: NodeCtx, body: Any, state: list[Value], xs: list[Tensor], in_axes: list[int], in_dirs: list[int],
               k: int, out_axes: list[int], out_dirs: list[int]) -> list[Value]:
    n = len(state)
    steps = xs[0].shape[in_axes[0]] if xs else 0
    outs_per_step: list[list[Value]] = []
    for t in range(steps):
        sl = []
        for x, ax, d in zip(xs, in_axes, in_dirs):
            i = steps - 1 - t if d else t
            sl.append(x.shrink(tuple((i, i + 1) if j == ax else None for j in range(x.ndim))).squeeze(ax))
        res = _run(ctx, body, state + sl)
        if len(res) != n + k:
            raise ctx.fail(f"the body gives {len(res)} outputs; the node expects {n} state values and {k} scan "
                           f"outputs")
        state = res[:n]
        outs_per_step.append(res[n:])
    scanned: list[Value] = []
    for j in range(k):
        vals = [ctx.t(o[j]) for o in outs_per_step]
        if out_dirs[j]:
            vals = vals[::-1]
        y = Tensor.stack(*vals, dim=0)
        ax = axis_of(int(out_axes[j]), y.ndim, ctx)
        if ax:
            y = y.permute(list(range(1, ax + 1)) + [0] + list(range(ax + 1, y.ndim)))
        scanned.append(y)
    return state + scanned


# ---- sequences ----
@op("SequenceEmpty")
def sequence_empty(ctx: NodeCtx) -> list:
    return []


@op("SequenceConstruct")
def sequence_construct(ctx: NodeCtx, *args: Value) -> list:
    return list(args)


def _seq(ctx: NodeCtx, s: Value) -> list:
    if not isinstance(s, list):
        raise ctx.fail(f"expected a sequence, got {type(s).__name__}")
    return s


def _pos(ctx: NodeCtx, p: Value, n: int, default: int, insert: bool = False) -> int:
    if p is None:
        return default
    i = int(ctx.host(p).reshape(-1)[0])
    i = i + n if i < 0 else i
    if not 0 <= i <= (n if insert else n - 1):
        raise ctx.fail(f"position {i} is out of range for a sequence of {n}")
    return i


@op("SequenceInsert")
def sequence_insert(ctx: NodeCtx, s: Value, t: Value, p: Value = None) -> list:
    seq = list(_seq(ctx, s))
    seq.insert(_pos(ctx, p, len(seq), len(seq), insert=True), t)
    return seq


@op("SequenceAt")
def sequence_at(ctx: NodeCtx, s: Value, p: Value) -> Value:
    seq = _seq(ctx, s)
    return seq[_pos(ctx, p, len(seq), 0)]


@op("SequenceErase")
def sequence_erase(ctx: NodeCtx, s: Value, p: Value = None) -> list:
    seq = list(_seq(ctx, s))
    del seq[_pos(ctx, p, len(seq), len(seq) - 1)]
    return seq


@op("SequenceLength")
def sequence_length(ctx: NodeCtx, s: Value) -> np.ndarray:
    return np.asarray(len(_seq(ctx, s)), dtype=np.int64)


@op("ConcatFromSequence")
def concat_from_sequence(ctx: NodeCtx, s: Value) -> Tensor:
    ts = [ctx.t(v) for v in _seq(ctx, s)]
    axis = int(ctx.required("axis"))
    if not ts:
        raise ctx.fail("the sequence is empty")
    if ctx.attr("new_axis", 0):
        return Tensor.stack(*ts, dim=axis_of(axis, ts[0].ndim + 1, ctx))
    ax = axis_of(axis, ts[0].ndim, ctx)
    return ts[0].cat(*ts[1:], dim=ax) if len(ts) > 1 else ts[0]


@op("SplitToSequence")
def split_to_sequence(ctx: NodeCtx, a: Value, split: Value = None) -> list:
    x = ctx.t(a)
    axis = axis_of(int(ctx.attr("axis", 0)), x.ndim, ctx)
    n = x.shape[axis]
    if split is None:
        parts = [x.shrink(tuple((i, i + 1) if k == axis else None for k in range(x.ndim))) for i in range(n)]
        return parts if ctx.attr("keepdims", 1) else [p.squeeze(axis) for p in parts]
    sizes = ctx.ints(split)
    if len(sizes) == 1 and ctx.host(split).ndim == 0:
        c = sizes[0]
        sizes = [min(c, n - i) for i in range(0, n, c)]
    out, start = [], 0
    for sz in sizes:
        out.append(x.shrink(tuple((start, start + sz) if k == axis else None for k in range(x.ndim))))
        start += sz
    return out


@op("SequenceMap")
def sequence_map(ctx: NodeCtx, s: Value, *extra: Value) -> tuple[list, ...]:
    body = ctx.required("body")
    seq = _seq(ctx, s)
    results: list[list[Value]] = [[] for _ in ctx.outputs]
    for i in range(len(seq)):
        args = [seq[i]] + [e[i] if isinstance(e, list) else e for e in extra]
        outs = _run(ctx, body, args)
        for j, o in enumerate(outs):
            results[j].append(o)
    return tuple(results)


# ---- optionals ----
@op("Optional")
def optional(ctx: NodeCtx, a: Value = None) -> Value:
    return Absent if a is None else a


@op("OptionalHasElement")
def optional_has_element(ctx: NodeCtx, a: Value = None) -> np.ndarray:
    return np.asarray(a is not None and a is not Absent)


@op("OptionalGetElement")
def optional_get_element(ctx: NodeCtx, a: Value) -> Value:
    if a is None or a is Absent:
        raise ctx.fail("the optional holds no value")
    return a
