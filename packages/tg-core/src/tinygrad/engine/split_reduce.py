"""Split large reductions into partial results and a combine: a scheduler pass over the tensor graph.

A reduction lowers to one accumulator per output, run by one thread (or one work-group). A sum of one output over
many elements therefore runs on one core, and it is inexact: float32 rounding grows with the number of terms,
and past 2**24 adding 1.0 no longer changes the sum. A qualifying reduction is rewritten into

    REDUCE_AXIS(op, axes, PERMUTE(CONTIGUOUS(PERMUTE(RESHAPE(REDUCE_AXIS(op, chunk axes, source in chunks))))))

The first kernel reduces each chunk of C consecutive elements to one partial result; the combine reduces the P
partial results of each output over the original axes, so it has the reduction's op, axes, dtype and shape, and
its consumers do not change. Partial results are stored outputs first, chunks last, so that each output's partial
results are contiguous for the combine. The `CONTIGUOUS` is untagged: its buffer is private to the schedule and
the memory planner may reuse it. A combine with many partial results is split again (the rule runs until nothing
qualifies), so that no float accumulator adds up more than a few of them. A single-output float sum is split from
a few hundred elements on, in short chunks: that is where one running accumulator starts to fall behind numpy.

A chunk is whole trailing reduced axes times a run of one more axis (the cut), so its elements keep their order
in memory and the index arithmetic needs no division. Runs are powers of two where they can be, one that divides
the cut axis before one nearer the preferred length; when the run length does not divide the cut axis, the axis is
padded with the op's identity: 0 for ADD, 1 for MUL, the dtype's lowest value for MAX (-inf for floats, so NaN
still propagates). The padding never changes the result.
Symbolic shapes and empty tensors are left alone.

`SPLIT_REDUCE=0` (or `Context(SPLIT_REDUCE=0)`) turns the pass off.
"""

from __future__ import annotations

import math

from tinygrad.dtype import dtypes
from tinygrad.helpers import ContextVar, prod
from tinygrad.uop.ops import Ops, UOp, inverse_permutation
from tinygrad.uop.reduce_identity import reduce_identity_value
from tinygrad.uop.rewrite import PatternMatcher, UPat

#: set SPLIT_REDUCE=0 to run every reduction in one kernel, as written
SPLIT_REDUCE = ContextVar("SPLIT_REDUCE", 1)

# Plain module variables, read at each use, so that tests can make them small and reach the split with small inputs;
# `split_settings()` puts them in the schedule cache's key.

#: reductions over fewer elements stay one kernel: the extra launch would cost more than the split gains
MIN_REDUCED = 2**15
#: a single-output float sum (or product) of this many elements or more is split even below MIN_REDUCED, in chunks
#: of SHORT_CHUNK: one running accumulator over a few hundred float32 terms (all a GPU-style kernel has for one
#: output) is already several ulps further from the exact sum than numpy's pairwise sum
MIN_SHORT_REDUCED = 256
SHORT_CHUNK = 128
#: chunk length of a single-output reduction: it had no parallelism at all, so it gets as many partial results as
#: chunks of this length, each short enough that one accumulator's rounding stays small
MAX_CHUNK = 1024
#: partial results in all (outputs times chunks) of a reduction with several outputs. Its outputs already run in
#: parallel; a few chunks each make enough independent work for a GPU's work-groups. More would not help a CPU,
#: whose cores the outputs keep busy, and the CPU heuristics tile a kernel with hundreds of outputs like a matmul,
#: streaming from many chunks at once, slower than the reduction it replaces. A reduction with more than half this
#: many outputs is not split, unless it is longer than MAX_LONG_CHUNK.
MAX_PARTIALS = 128
#: the longest chunk of any reduction: longer ones lose exactness even in the accumulators a kernel splits them into
#: (sixteen on a CPU, one on the simplest backends), which count in float32 only up to 2**24. A reduction longer than
#: this is split whatever its number of outputs.
MAX_LONG_CHUNK = 2**17
#: partial results one float combine adds up, and at most MAX_LAST_COMBINE at the last level. Rounding is worst at
#: the last level, where nothing averages it out; a short accumulator there keeps a float32 sum within a few ulps, as
#: numpy's pairwise sum. Exact combines (max, integers) take up to MAX_CHUNK at any level.
MAX_COMBINE = 32
MAX_LAST_COMBINE = 8

_SPLITTABLE = (Ops.ADD, Ops.MAX, Ops.MUL)


def split_settings() -> tuple[int, ...]:
    """What the pass's output depends on besides the graph (part of the schedule cache's key)."""
    return (SPLIT_REDUCE.value, MIN_REDUCED, MIN_SHORT_REDUCED, SHORT_CHUNK, MAX_CHUNK, MAX_PARTIALS, MAX_LONG_CHUNK,
            MAX_COMBINE, MAX_LAST_COMBINE)


def split_large_reductions(outputs: list[UOp]) -> tuple[list[UOp], dict[UOp, UOp | None]]:
    """`outputs` with every qualifying reduction split, and for each node of the new graph that is not in the given
    one, the given node it stands for, or None for the nodes the pass added (the partial results)."""
    if not SPLIT_REDUCE:
        return outputs, {}
    given = UOp(Ops.SINK, src=tuple(outputs)).toposort()
    new_of: dict[UOp, UOp] = {}
    combines: set[UOp] = set()
    for node in given:
        if node.op is Ops.SINK:
            continue
        rebuilt = new_of and any(s in new_of for s in node.src)
        new = node.replace(src=tuple(new_of.get(s, s) for s in node.src)) if rebuilt else node
        while (split := split_rules.rewrite(new, combines)) is not None:
            new = split
        if new is not node:
            new_of[node] = new
    if not new_of:
        return outputs, {}
    new_outputs = [new_of.get(o, o) for o in outputs]
    stands_for: dict[UOp, UOp | None] = {}
    for old, new in new_of.items():
        stands_for.setdefault(new, old)
    for node in UOp(Ops.SINK, src=tuple(new_outputs)).toposort():
        if node.op is not Ops.SINK and node not in given and node not in stands_for:
            stands_for[node] = None
    return new_outputs, stands_for


def _split_reduction(ctx: set[UOp], red: UOp) -> UOp | None:
    """The rule. `ctx` holds the combines made so far: they split again by their own measure."""
    op, axes = red.arg
    shape = red.src[0].shape
    if op not in _SPLITTABLE or not all(isinstance(s, int) for s in shape) or 0 in shape:
        return None
    lengths = _combine_lengths(red) if red in ctx else _chunk_lengths(red)
    if lengths is None or (cut := _chunking(shape, axes, *lengths)) is None:
        return None
    out = _split(red, *cut)
    ctx.add(out)
    return out


def _chunk_lengths(red: UOp) -> tuple[int, int, int] | None:
    """(shortest, longest, preferred) chunk length for a reduction of the given graph, or None if it stays whole."""
    reduced, outputs = prod(red.src[0].shape[a] for a in red.arg.axes), prod(red.shape)
    if reduced < MIN_REDUCED:
        if outputs == 1 and reduced >= MIN_SHORT_REDUCED and _order_matters(red):
            return SHORT_CHUNK // 2, SHORT_CHUNK, SHORT_CHUNK
        return None
    if outputs == 1:
        return MAX_CHUNK // 8, MAX_CHUNK, MAX_CHUNK
    per_output = min(MAX_PARTIALS // outputs, _fan_in(red)[1])  # the combine is the last level
    length = math.ceil(reduced / max(per_output, 1))
    if length > MAX_LONG_CHUNK:
        return MAX_LONG_CHUNK // 2, MAX_LONG_CHUNK, MAX_LONG_CHUNK
    if per_output < 2:
        return None
    return length, min(2 * length, reduced) - 1, length  # per_output chunks, or down to half as many if that pads less


def _combine_lengths(red: UOp) -> tuple[int, int, int] | None:
    """Chunk lengths for a combine the pass made, or None if it is the last level: at most `last` partial results
    remain for it, and no level before adds up more than `fan_in`."""
    fan_in, last = _fan_in(red)
    reduced = prod(red.src[0].shape[a] for a in red.arg.axes)
    if reduced <= last:
        return None
    if reduced <= fan_in * last:  # one more level, then the last: 2 to `last` chunks
        length = math.ceil(reduced / last)
        return length, max(length, min(fan_in, reduced // 2)), length
    return math.ceil(fan_in / 8), fan_in, fan_in


def _fan_in(red: UOp) -> tuple[int, int]:
    """How many partial results one combine may add up, at any level and at the last. Where the order of the terms
    changes the result (float sums and products) MAX_COMBINE and MAX_LAST_COMBINE; where it does not (a max, integer
    arithmetic) MAX_CHUNK."""
    if _order_matters(red):
        return MAX_COMBINE, MAX_LAST_COMBINE
    return MAX_CHUNK, MAX_CHUNK


def _order_matters(red: UOp) -> bool:
    """Whether the order of the terms changes the result: float sums and products, not a max or integers."""
    return red.dtype.is_float and red.arg.op is not Ops.MAX


def _split(red: UOp, axis: int, inner: int, padded: int) -> UOp:
    op, axes = red.arg
    source = red.src[0]
    shape = source.shape
    if padded > shape[axis]:
        source = _pad_with_identity(source, axis, padded - shape[axis], op)
    # the cut axis becomes (chunks, inner): a chunk is `inner` steps of it times every reduced axis after it
    chunked = source.reshape(shape[:axis] + (padded // inner, inner) + shape[axis + 1:])
    chunk_axes = (axis + 1,) + tuple(a + 1 for a in axes if a > axis)
    # back to the source's rank, the chunk count on the cut axis, then stored outputs first and chunks last
    partial_shape = tuple(padded // inner if i == axis else 1 if i in axes and i > axis else s
                          for i, s in enumerate(shape))
    partials = chunked.reduce_axis(op, chunk_axes).reshape(partial_shape)
    order = tuple(i for i in range(len(shape)) if i not in axes) + tuple(axes)
    stored = UOp(Ops.CONTIGUOUS, red.dtype, (partials.permute(order),))
    return stored.permute(inverse_permutation(order)).reduce_axis(op, axes)


def _chunking(shape: tuple[int, ...], axes: tuple[int, ...], shortest: int, longest: int,
              preferred: int) -> tuple[int, int, int] | None:
    """Where to cut the reduced elements into chunks: (axis, inner, padded size of axis) for chunks of `inner`
    steps of `axis` times every reduced axis after it, about `shortest` to `longest` elements. None if all the
    reduced elements fit in one chunk."""
    shortest = max(shortest, 2)  # a chunk of one element would not reduce anything, and the rule would repeat
    trailing = 1  # elements of the reduced axes after the one looked at
    for axis in reversed(axes):
        size = shape[axis]
        if trailing * size <= longest:
            trailing *= size
            continue
        last = longest // trailing  # < size, so there are at least two chunks along the axis
        first = min(last, max(1, math.ceil(shortest / trailing)))
        inner = _inner_steps(size, first, last, preferred / trailing)
        return axis, inner, size + (-size % inner)
    return None


def _inner_steps(size: int, first: int, last: int, preferred: float) -> int:
    """Steps of an axis of `size` per chunk, from `first` to `last`: a power of two if the range holds one (sums of
    equal terms, counts of ones for one, then stay exact in float32 at every level), one that divides `size` first
    (padding makes every load of the chunk kernel a gated one, which a CPU cannot vectorise), then the one nearest
    `preferred`; else the count that pads the axis least. Those candidates come from whichever is shorter to walk,
    the lengths or the chunk counts (one length per count, the shortest that gives that many chunks: every exact
    divisor is among them)."""
    powers = [1 << k for k in range(first.bit_length() - 1, last.bit_length()) if first <= 1 << k <= last]
    if powers:
        return min(powers, key=lambda d: (size % d != 0, abs(d - preferred)))
    counts = range(-(-size // last), -(-size // first) + 1)
    if len(counts) <= last - first:
        steps = [d for k in counts if first <= (d := -(-size // k)) <= last] or [last]
    else:
        steps = list(range(first, last + 1))
    return min(steps, key=lambda d: (-size % d, abs(d - preferred)))


def _pad_with_identity(x: UOp, axis: int, amount: int, op: Ops) -> UOp:
    pads = tuple((0, amount) if i == axis else (0, 0) for i in range(len(x.shape)))
    padded = x.pad(pads)  # PAD fills with zeros
    fill = reduce_identity_value(op, x.dtype)
    if fill == 0:
        return padded
    own = UOp.const(dtypes.bool, True).reshape((1,) * len(x.shape)).expand(x.shape).pad(pads)
    return own.where(padded, fill)


split_rules = PatternMatcher([
    (UPat(Ops.REDUCE_AXIS, name="red"), _split_reduction),
])
