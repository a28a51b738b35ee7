"""Lower layout hints per target: a scheduler pass over the tensor graph, run before the others.

The Tensor layer marks the operands of a matmul and of a convolution with `Ops.LAYOUT` nodes (args in
uop/layout.py) and builds the same graph on every device. This pass replaces each hint with the operand itself or
with a copy of it in another memory layout, as the knobs of the device the node runs on ask:

* **Panel packing** (`PanelPacked`). A register-tiled matmul reads, per output tile, a strip of B: PANEL columns
  (two SIMD registers of float32) over all k rows. In row-major B those rows lie a whole row apart; with a
  power-of-two row length they fall in a few cache sets, so a strip never stays in L2 and every tile re-reads B
  from memory. A copy laid out as (..., m/PANEL, k, PANEL) makes a strip one contiguous block that caches and
  prefetchers keep (BLAS libraries pack B the same way). Only a B of at least the device's L2 is packed (a smaller
  one stays in L2 whole), and only when at least PANEL rows of A read it: the copy is a pass over B as long as the
  product itself for a single row. Where B is a private `contiguous()` of an elementwise computation (a weight
  dequantized for a prefill's matmul), the panels are computed from that computation: one pass writes them,
  instead of one that stores B and another that copies it.
* **Convolution operands** (`ConvOperand`). Where the device asks (`conv_border_copy`), a padded convolution reads
  a copy of its input with the zero border written out, instead of testing the border in its inner loop. A
  convolution whose output rows are shorter than a SIMD register reads its weight with the output channels
  innermost, so that the kernel tiles registers of channels times images instead of part-empty rows.
* **Weight-gradient operands** (`WeightGradOperand`). The weight gradient's reduction runs over the batch and the
  positions, along which no output axis is contiguous; a copy with the channels innermost gives the compiler a
  SIMD direction, where the device asks (`channels_last_min`).
* **Weight-gradient batch chunks** (`BatchChunked`). Every output tile of a weight gradient reads all of its share
  of the inputs again, which for a whole batch streams from memory. The batch is summed in partial sums over
  chunks of images whose inputs fit in half of the device's L2, then over the chunks (split-K over the batch).

The rules are the device's: a target whose knobs ask for none of the copies gets the operands unchanged."""

from __future__ import annotations

from collections.abc import Callable

from tinygrad.device import Buffer, Device, DeviceKnobs
from tinygrad.dtype import DType, dtypes
from tinygrad.helpers import prod
from tinygrad.uop import GroupOp
from tinygrad.uop.layout import BatchChunked, ConvOperand, PanelPacked, WeightGradOperand
from tinygrad.uop.ops import Ops, UOp, post_order
from tinygrad.uop.windows import weight_gradient

#: a padded convolution's bordered copy of its input may hold at most this many times the elements of the
#: convolution's output: a typical layer's copy holds 1-3 times as many, while an input broadcast by an expand (a
#: few values viewed as gigabytes) would be made real by the copy
BORDER_COPY_MAX_RATIO = 8


def layout_settings(devices: list[str], nodes: list[UOp], inputs: list[Buffer],
                    keeps: Callable[[UOp], bool] | None = None) -> tuple:
    """What the pass's output for the graph of `nodes` depends on besides the graph (part of the schedule cache's
    key): the knobs of the devices its hints may run on, read anew each time (a test may change a device's knobs),
    and which CONTIGUOUS nodes `keeps` (see `lower_layouts`); nothing for a graph without hints, which is most of
    them and all of an eager step's."""
    if not any(node.op is Ops.LAYOUT for node in nodes):
        return ()
    kept = tuple(i for i, node in enumerate(nodes) if node.op is Ops.CONTIGUOUS and (keeps is None or keeps(node)))
    return (*(_knob_values(Device[d].knobs) for d in sorted({*devices, *(b.device for b in inputs)})), kept)


def _knob_values(k: DeviceKnobs) -> tuple:
    return (k.l2_cache_bytes, k.simd_bytes, k.channels_last_min, k.conv_border_copy, k.uneven_rows_channels_last)


def lower_layouts(outputs: list[UOp], place: Callable[[UOp], dict[UOp, str]],
                  keeps: Callable[[UOp], bool] | None = None) -> tuple[list[UOp], dict[UOp, UOp | None]]:
    """`outputs` with every LAYOUT node lowered for the device `place(sink)` assigns it, and for each node of the new
    graph that is not in the given one, the given node it stands for (None for the copies the pass added).

    `keeps(node)`: whether a CONTIGUOUS node must keep its own buffer (a tensor holds it, or a later graph reads
    it); a packed operand computes the others' values itself where they serve it alone. None: every one is kept."""
    sink = UOp(Ops.SINK, src=tuple(outputs))
    given = sink.toposort()
    if not any(node.op is Ops.LAYOUT for node in given):
        return outputs, {}
    device_of = place(sink)
    users: dict[UOp, int] = {}
    for node in given:
        for s in set(node.src):
            users[s] = users.get(s, 0) + 1

    def private_source(y: UOp) -> UOp:
        """y without a CONTIGUOUS under its movement ops that only y reads, that no one keeps, and whose value is
        elementwise in realized buffers (computing it in the packing pass costs what storing it did); else y."""
        chain: list[UOp] = []
        node = y
        while node.op in _MOVES_WITHOUT_BROADCAST and users.get(node, 0) <= 1:
            chain.append(node)
            node = node.src[0]
        if node.op is not Ops.CONTIGUOUS or users.get(node, 0) != 1 or node._realized is not None or keeps is None \
                or keeps(node) or not _elementwise(node.src[0]):
            return y
        out = node.src[0]
        for moved in reversed(chain):
            out = moved.replace(src=(out, *moved.src[1:]))
        return out
    new_of: dict[UOp, UOp] = {}
    for node in given:
        if node.op is Ops.SINK:
            continue
        new = node.replace(src=tuple(new_of.get(s, s) for s in node.src)) if any(s in new_of for s in node.src) \
            else node
        if node.op is Ops.LAYOUT:
            knobs = Device[device_of[node]].knobs
            if isinstance(node.arg, BatchChunked):
                new = _batch_chunked(node, new.src[0], knobs, new_of)
            elif isinstance(node.arg, PanelPacked) and new.src[0] is node.src[0]:
                new = _panel_packed(new.src[0], node.arg, knobs, private_source)
            else:
                new = lower_hint(new.src[0], node.arg, knobs)
        if new is not node:
            new_of[node] = new
    new_outputs = [new_of.get(o, o) for o in outputs]
    stands_for: dict[UOp, UOp | None] = {}
    for old in outputs:  # an output whose hint was dropped is its source, reported as the output
        if old in new_of:
            stands_for[new_of[old]] = old
    for old, new in new_of.items():
        if new not in given:
            stands_for.setdefault(new, old)
    for node in UOp(Ops.SINK, src=tuple(new_outputs)).toposort():
        if node.op is not Ops.SINK and node not in given and node not in stands_for:
            stands_for[node] = None
    return new_outputs, stands_for


#: movement ops through which an operand's elements are its source's, each once (an EXPAND repeats them)
_MOVES_WITHOUT_BROADCAST = GroupOp.Movement - {Ops.EXPAND}
#: where the value of a node stops depending on computation in the graph: realize points and leaves
_STORED = frozenset({Ops.BUFFER, Ops.CONST, Ops.CONTIGUOUS, Ops.COPY})


def _elementwise(value: UOp) -> bool:
    """Whether `value` is computed from stored values by elementwise and movement ops only: each of its elements
    costs a few operations on a few loads, wherever it is computed."""
    def stored(node: UOp) -> bool:
        return node.op in _STORED or node._realized is not None

    nodes = post_order((value,), lambda node: () if stored(node) else node.src)
    return all(stored(n) or n.op in GroupOp.Elementwise or n.op in GroupOp.Movement for n in nodes)


def lower_hint(value: UOp, hint: object, knobs: DeviceKnobs) -> UOp:
    """`value` as the hint asks on a device with `knobs`: a copy in another layout, or `value` itself."""
    if isinstance(hint, PanelPacked):
        return _panel_packed(value, hint, knobs)
    if isinstance(hint, ConvOperand):
        bordered, short = conv_layout(hint, value.dtype, knobs)
        if hint.role == "input":
            return _contiguous(value) if bordered and not short else value
        return _output_channels_last(value) if hint.groups == 1 and short else value
    if isinstance(hint, WeightGradOperand):
        least = knobs.channels_last_min
        wanted = least and (hint.cin >= least or (hint.role == "grad" and hint.cout >= least))
        return _channels_last(value) if wanted else value
    if isinstance(hint, BatchChunked):
        return value  # lowered by `_batch_chunked`, which needs the given graph
    raise TypeError(f"unknown layout hint {hint!r}: a LAYOUT node's arg must be one of tinygrad/uop/layout.py's")


# ---- matmul ----

def _panel_packed(y: UOp, hint: PanelPacked, knobs: DeviceKnobs,
                  source: Callable[[UOp], UOp] = lambda y: y) -> UOp:
    """y (..., k, m) read from a copy laid out as (..., m/PANEL, k, PANEL), where the device's knobs make it pay;
    the copy is made from `source(y)`, the same value."""
    shape = y.shape
    if not all(isinstance(s, int) for s in shape):
        return y  # symbolic sizes: the layout would change with the variable's value
    k, m = shape[-2:]
    panel = 2 * knobs.simd_lanes(dtypes.float32)
    if m % panel or m == panel or k < panel or prod(shape) * y.dtype.itemsize < knobs.l2_cache_bytes or \
            (hint.rows is not None and hint.rows < panel):
        return y
    lead = shape[:-2]
    n = len(lead)
    order = (*range(n), n + 1, n, n + 2)
    panels = _contiguous(source(y).reshape(lead + (k, m // panel, panel)).permute(order))
    return panels.permute(order).reshape(lead + (k, m))


# ---- convolution ----

def conv_layout(hint: ConvOperand, acc: DType, knobs: DeviceKnobs) -> tuple[bool, bool]:
    """(whether the convolution reads a bordered copy of its input, whether it reads its weight with the output
    channels innermost): one decision for both operands of a convolution accumulating in `acc`."""
    bordered = hint.may_copy_border and _copies_border(hint, knobs)
    padded = not bordered and any(b or a for b, a in hint.pads[-1:])
    return bordered, _short_rows(hint, acc, knobs, padded)


def _copies_border(hint: ConvOperand, knobs: DeviceKnobs) -> bool:
    """Where the device asks (`conv_border_copy`) and the copy stays within `BORDER_COPY_MAX_RATIO` of the output."""
    if not any(b or a for b, a in hint.pads) or not knobs.conv_border_copy:
        return False
    if not all(isinstance(s, int) for s in (*hint.padded_shape, *hint.out_shape)):
        return False  # a symbolic size: the copy's size is not known here
    return prod(hint.padded_shape) <= BORDER_COPY_MAX_RATIO * prod(hint.out_shape)


def _short_rows(hint: ConvOperand, acc: DType, knobs: DeviceKnobs, padded: bool) -> bool:
    """Whether the output rows are too short for the usual SIMD direction along a row: shorter than half a
    register, or than a whole one and padded (every lane tests the border), or (where the device asks:
    `uneven_rows_channels_last`, and with a window wider than one) than a whole one and leaving part of its last
    half empty. Then registers of output channels times several images make the tile instead: that needs whole
    registers of channels and a batch to tile."""
    bs, cout, *outs = hint.out_shape
    if not outs or not knobs.channels_last_min:
        return False
    lanes = knobs.simd_lanes(acc)
    row = outs[-1]
    uneven = knobs.uneven_rows_channels_last and hint.window and row < lanes and row % (lanes // 2) != 0
    short = row < lanes // 2 or (padded and row < lanes) or uneven
    return bool(bs >= 4 and cout % (2 * lanes) == 0 and short)


def batch_chunk(bs: int, bytes_per_image: int, chunk_bytes: int) -> int:
    """The images per partial sum of a weight gradient: the most whose inputs (images and output gradients) fit
    chunk_bytes, a divisor of the batch; the whole batch when it fits (or when only single images would, which
    gain nothing)."""
    fitting = max(1, chunk_bytes // max(bytes_per_image, 1))
    if fitting >= bs:
        return bs
    chunk = max(d for d in range(1, fitting + 1) if bs % d == 0)
    return chunk if chunk > 1 else bs


def _batch_chunked(hinted: UOp, value: UOp, knobs: DeviceKnobs, new_of: dict[UOp, UOp]) -> UOp:
    """The weight gradient `value` (the lowered source of the given node `hinted`) rebuilt with its batch summed
    in chunks, where the device's L2 asks for them; its operands are the weight-gradient hints under it, as this
    pass lowered them."""
    hint: BatchChunked = hinted.arg
    chunk = batch_chunk(hint.bs, hint.bytes_per_image, knobs.l2_cache_bytes // 2)
    operands = _weight_grad_operands(hinted.src[0])
    if chunk >= hint.bs or operands is None:
        return value
    source, grad = (new_of.get(u, u) for u in operands)
    if source.shape[0] != hint.bs or grad.shape[0] != hint.bs:
        return value  # one device's share of a batch split over several: summed whole
    return weight_gradient(source, grad, value.shape[2:], grad.shape[2:], hint.bs // chunk)


#: what lies between a weight gradient and its two operands (uop/windows.py's `weight_gradient`)
_WEIGHT_GRADIENT_OPS = frozenset({Ops.RESHAPE, Ops.EXPAND, Ops.SHRINK, Ops.PERMUTE, Ops.MUL, Ops.REDUCE_AXIS})


def _weight_grad_operands(root: UOp) -> tuple[UOp, UOp] | None:
    """The input and output-gradient hints that the weight gradient `root` was built from, or None where the graph
    is not the one `weight_gradient` builds."""
    def children(node: UOp) -> tuple[UOp, ...]:
        return node.src if node.op in _WEIGHT_GRADIENT_OPS else ()
    found: dict[str, list[UOp]] = {"input": [], "grad": []}
    for node in post_order([root], children):
        if node.op is Ops.LAYOUT and isinstance(node.arg, WeightGradOperand):
            found[node.arg.role].append(node)
    if len(found["input"]) != 1 or len(found["grad"]) != 1:
        return None
    return found["input"][0], found["grad"][0]


# ---- copies in another layout (each the same value and shape, a view over a buffer of its own) ----

def _contiguous(x: UOp) -> UOp:
    return UOp(Ops.CONTIGUOUS, x.dtype, (x,))


def _channels_last(x: UOp) -> UOp:
    """x (bs, c, spatial...) over a copy whose channels are innermost in memory."""
    n = len(x.shape) - 2
    inner = _contiguous(x.permute((0,) + tuple(range(2, n + 2)) + (1,)))
    return inner.permute((0, n + 1) + tuple(range(1, n + 1)))


def _output_channels_last(w: UOp) -> UOp:
    """A weight (cout, cin, k...) over a copy whose output channels are innermost."""
    n = len(w.shape)
    return _contiguous(w.permute(tuple(range(1, n)) + (0,))).permute((n - 1,) + tuple(range(n - 1)))
