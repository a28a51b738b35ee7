"""The scheduler: split a lazy tensor graph into kernels.

Rules (docs/architecture.md, section 2 "The schedule"):
  * every requested tensor, every CONTIGUOUS and every COPY is realized into its own buffer;
  * elementwise ops fuse into whatever consumes them, including reductions;
  * a reduction fuses into its consumer only when each of its values is used once there: no EXPAND
    (broadcast) and no enclosing reduction between them, and one consumer kernel (also through elementwise
    and movement ops) - otherwise it would be recomputed for every output element or kernel that reads it,
    so it becomes its own kernel, together with its epilogue (the elementwise ops, reshapes and permutes on its
    value up to the broadcast: a convolution's bias and ReLU under the next convolution's windows). Other movement
    ops (reshape, permute, pad, shrink, flip) only re-map indices and do not stop fusion;
  * a reduction read along two paths one of which remaps indices, or through a PAD, and a costly elementwise
    op (exp, log, sin, sqrt, reciprocal, division) read through an EXPAND, are realized too: fused, the kernel
    would compute them again for every index map, padding element or broadcast element;
  * a requested elementwise output read by one kernel only, elementwise too, at that kernel's own output index (an
    optimizer's new moments, which its new weight reads) is stored by that kernel as a further output instead of
    having a kernel of its own: one pass over the data, and one kernel fewer to compile and launch.

Each kernel becomes an AST: `SINK(STORE(PARAM(0), value), ...)`, where the value is the fused tensor-level
subgraph with the kernel's input buffers replaced by `PARAM(i)` leaves; the further outputs of a kernel that stores
several are PARAM 1..k, before its inputs. ASTs do not mention buffers,
so equal kernels over different data share one compiled program.
"""

from __future__ import annotations

import weakref
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from tinygrad.device import Buffer, shared_buffers
from tinygrad.dtype import DType
from tinygrad.engine import jit_state
from tinygrad.engine.layout import layout_settings, lower_layouts
from tinygrad.engine.memory import plan_memory
from tinygrad.engine.schedule_cache import SCHEDULE_CACHE, Template, graph_key, schedule_cache
from tinygrad.engine.schedule_item import ScheduleItem, buffer_view
from tinygrad.engine.split_reduce import split_large_reductions, split_settings
from tinygrad.helpers import VIZ
from tinygrad.uop.ops import GroupOp, Ops, UOp, UOpMeta, post_order, sint, sym_prod, unbind
from tinygrad.uop.reduce_identity import reduce_identity_value


class RealizedViews:
    """Realized graph nodes -> the buffer view that now holds their value, like a weak-key dictionary: an entry lives
    as long as its node. Stored on the node (`UOp._realized`), because every eager op adds one and walks the graph
    looking for them, and a weakref per entry costs several times the attribute."""

    def get(self, node: UOp, default: UOp | None = None) -> UOp | None:
        view = node._realized
        return default if view is None else view

    def __getitem__(self, node: UOp) -> UOp:
        if (view := node._realized) is None:
            raise KeyError(node)
        return view

    def __setitem__(self, node: UOp, view: UOp) -> None:
        node._realized = view
        if jit_state.running and (state := jit_state.running[-1]).capturing:
            state.realized_here.add(view)

    def __contains__(self, node: UOp) -> bool:
        return node._realized is not None

    def __len__(self) -> int:
        """How many live nodes have a view (a walk over every live node: for tests and debugging)."""
        return sum(1 for ref in UOpMeta.cache.values() if (u := ref()) is not None and u._realized is not None)


realized_views = RealizedViews()

#: CONTIGUOUS nodes made by `Tensor.contiguous()`, with the tensor made (`t = x.contiguous()`): while that tensor
#: lives and still holds the node, the node is a tensor's value as in tinygrad, computed once by the first realize
#: that reaches it, and later graphs read its buffer. Weak both ways: the table keeps neither node nor tensor alive,
#: and a node no tensor holds any longer is an intermediate again, whose memory the planner may reuse.
held_values: weakref.WeakKeyDictionary[UOp, weakref.ref] = weakref.WeakKeyDictionary()


def is_held(node: UOp) -> bool:
    """Whether the tensor that `Tensor.contiguous()` made for `node` is alive and still holds it."""
    ref = held_values.get(node)
    return ref is not None and (t := ref()) is not None and getattr(t, "uop", None) is node

class InPlaceWrite(NamedTuple):
    """The arg of `CONTIGUOUS(WHERE(mask, PAD(value), old), InPlaceWrite(region))`, an assign through a region of a
    realized base that only the base reads (mixin/views.py decides): its kernel stores `value` into that region of
    old's buffer and the base's new value is that buffer, under a new name."""

    region: tuple  # a SHRINK arg over old's shape


def base_buffer(u: UOp) -> UOp | None:
    """The BUFFER under a node that is just a contiguous reshape of a buffer, else None."""
    while u.op is Ops.RESHAPE:
        u = u.src[0]
    return u if u.op is Ops.BUFFER else None


def _substitute_realized(roots: list[UOp]) -> tuple[list[UOp], dict[UOp, UOp]]:
    """`roots` with every node realized before replaced by the buffer view holding its value, and the tagged
    CONTIGUOUS nodes (a tensor's own value: their views are remembered) this rebuilt, rebuilt node -> given node."""
    sink = UOp(Ops.SINK, src=tuple(roots))
    on_device: dict[UOp, bool] = {}  # whether a node reads a buffer (else it is constants, computed anywhere)
    # A TinyJit capture records the kernels it runs: a node of the call's inputs that an equal graph realized before
    # the call would launch nothing, and every replay would hand back that old value. So it is computed again. A
    # node realized during the capture is read like any other: the kernel that computed it is recorded already, and
    # computing it again would put a second, identical launch into every replay.
    state = jit_state.running[-1] if jit_state.running and jit_state.running[-1].capturing else None
    capturing = state.inputs if state is not None else None
    realized_here = state.realized_here if state is not None else set()
    from_inputs: dict[UOp, bool] = {}
    # Memory shared with another library (from_blob, DLPack) may have been written since a node over it was realized:
    # such a node is computed again, from the memory as it is now
    shared: dict[UOp, bool] | None = {} if shared_buffers else None
    mapping: dict[UOp, UOp] = {}
    for u in sink.toposort():
        on_device[u] = u.op in (Ops.BUFFER, Ops.COPY) or any(on_device[s] for s in u.src)
        if capturing:
            from_inputs[u] = (u.op is Ops.BUFFER and id(u.arg.storage) in capturing) or \
                any(from_inputs[s] for s in u.src)
            if from_inputs[u] and u._realized not in realized_here:
                continue
        if shared is not None:
            shared[u] = (u.op is Ops.BUFFER and u.arg.shared is not None) or any(shared.get(s, False) for s in u.src)
            if shared[u]:
                continue
        # Leaves keep their place: a buffer is its own value, and a constant is cheaper inline than read from memory.
        # So does a graph of constants, computed again wherever it is used: it is one node on every device
        # (hash-consing) and for all time, while the buffer it was realized into belongs to one device and may be
        # an assign's target that changes later. A TinyJit capture that read `x + 1`'s 1 from the buffer x had
        # just been assigned ones replayed `x + x`.
        if u.src and on_device[u] and (v := u._realized) is not None:
            mapping[u] = v
    if not mapping:
        return roots, {}
    rebuilt: dict[UOp, UOp] = {}
    renamed: dict[UOp, UOp] = {}
    for u in sink.toposort():
        if u in mapping:
            rebuilt[u] = mapping[u]
            continue
        new_src = tuple(rebuilt[s] for s in u.src)
        rebuilt[u] = u if new_src == u.src else u.replace(src=new_src)
        if rebuilt[u] is not u and _stands_for_a_tensor(u):
            renamed[rebuilt[u]] = u
    return list(rebuilt[sink].src), renamed


def _named_back(result: tuple[list[ScheduleItem], dict[UOp, UOp], list[UOp]], renamed: dict[UOp, UOp]
                ) -> tuple[list[ScheduleItem], dict[UOp, UOp], list[UOp]]:
    """The views of tagged nodes that `_substitute_realized` rebuilt, reported for the given nodes too: the caller
    remembers them there, where tensors and later graphs hold them (a clone or a random draw computed from a value
    realized before would otherwise be computed again by every later realize that reads it)."""
    if not renamed:
        return result
    items, views, out_views = result
    views = dict(views)
    for new, old in renamed.items():
        if (view := views.get(new)) is not None:
            views[old] = view
    return items, views, out_views


#: what a reduction's value passes through on its way to the node realized in its place (its epilogue)
_EPILOGUE = GroupOp.Elementwise | {Ops.RESHAPE, Ops.PERMUTE}


def _find_realize_points(sink: UOp, outputs: list[UOp]) -> set[UOp]:
    topo = list(sink.toposort())
    consumers: dict[UOp, int] = defaultdict(int)
    for node in topo:
        for s in set(node.src):
            consumers[s] += 1
    seed: set[UOp] = {o for o in outputs if base_buffer(o) is None}
    for node in topo:
        if node.op is Ops.CONTIGUOUS or node.op is Ops.COPY:
            seed.add(node)
        if node.op is Ops.COPY and base_buffer(node.src[0]) is None:
            seed.add(node.src[0])  # a transfer moves a realized, contiguous buffer
    points, outers = _propagate_points(topo, consumers, seed)
    mapped = _reductions_read_through_several_maps(topo, points)
    if again := {o for o in mapped & outers.keys() if mapped & outers[o]}:
        # a reduction with nested ones, read through several maps (a projection under a rotary embedding), and those
        # nested ones with it, reached along the same paths: decided again with the outer one realized from the
        # start, they are reached from its kernel only, and stay in its loop
        points, _ = _propagate_points(topo, consumers, seed | again)
        mapped = _reductions_read_through_several_maps(topo, points)
    return _with_late_points(topo, points, mapped)


def _propagate_points(topo: list[UOp], consumers: dict[UOp, int],
                      seed: set[UOp]) -> tuple[set[UOp], dict[UOp, set[UOp]]]:
    """The realize points that follow from `seed` down the graph (consumers before their sources), and the
    reductions found computing others in their own loop, with those others (`_nested_reductions`)."""
    points = set(seed)
    # cone[n]: the reductions n computes through elementwise ops, reshapes and permutes only (their epilogue)
    cone: dict[UOp, tuple[UOp, ...]] = {}
    for node in topo:
        if node.op is Ops.REDUCE_AXIS:
            cone[node] = (node,)
        elif node.op in _EPILOGUE and node not in points:
            cone[node] = tuple(dict.fromkeys(r for s in node.src for r in cone.get(s, ())))
    # inside[n]: n is read from its kernel's root through an EXPAND or a reduction, so it may be read many times;
    # expanded[n]: through an EXPAND, so that its consumer recomputes it for every element of the broadcast
    inside: dict[UOp, bool] = defaultdict(bool)
    expanded: dict[UOp, bool] = defaultdict(bool)
    nested: set[UOp] = set()  # reductions their consumer reduction computes in its own loop (_nested_reductions)
    outers: dict[UOp, set[UOp]] = {}
    for node in reversed(topo):
        if node.op is Ops.SINK:
            continue
        if node.op is Ops.REDUCE_AXIS and (found := _nested_reductions(node, consumers)):
            nested.update(found)
            outers[node] = set(found)
        if node.op in GroupOp.Elementwise and node not in points and expanded[node] and cone.get(node) and \
                not all(_folds_to_loads(r) for r in cone[node]):
            # the epilogue of a reduction that a broadcast reads (a convolution's bias and ReLU under the next
            # convolution's windows, a linear layer's or a LayerNorm's under the next matmul) is realized with its
            # reduction, once, instead of recomputed in the consumer's inner loop. A kernel holds one reduction:
            # the cone's others are realized on their own
            points.add(node)
            points.update(cone[node][1:])
        if node.op is Ops.REDUCE_AXIS and node not in points and \
                ((inside[node] and (node not in nested or expanded[node])) or consumers[node] > 1):
            points.add(node)
        flag = node.op in (Ops.EXPAND, Ops.REDUCE_AXIS) or (node not in points and inside[node])
        eflag = node.op is Ops.EXPAND or (node not in points and expanded[node])
        for s in node.src:
            inside[s] = inside[s] or flag
            expanded[s] = expanded[s] or eflag
    return points, outers


def _with_late_points(topo: list[UOp], points: set[UOp], mapped: set[UOp]) -> set[UOp]:
    """`points` with those the rules that look at whole kernels add: `mapped` (what
    `_reductions_read_through_several_maps` adds), costly broadcasts, reductions read by several kernels."""
    with_late = points | mapped
    _realize_costly_broadcasts(topo, with_late)
    while shared := _reductions_in_several_kernels(topo, with_late):
        with_late |= shared
    return with_late


def _nested_reductions(outer: UOp, consumers: dict[UOp, int]) -> list[UOp]:
    """Reductions that `outer` reads through elementwise ops and reshapes only, nothing else reading them, and that
    lose no reuse inside `outer`'s loop: its kernel computes them there, one value per iteration of the axes it
    reduces, nothing computed twice (a quantized product's sum over each block, scaled by the block's scale and
    summed over the blocks). A reduction that reads a value along its own axes but the same one for every position
    of an axis `outer` reduces (a convolution's weight under a global pool) keeps a kernel of its own, where that
    axis is an output axis and the value is reused across it in registers."""
    found: list[UOp] = []
    # a walk of its own, not post_order: each path carries which of its node's axes `outer` reduces (the same node
    # reached along two paths is read at two places); `seen` visits each (node, axes) once
    stack: list[tuple[UOp, frozenset[int]]] = [(outer.src[0], frozenset(outer.arg.axes))]
    seen: set[tuple[UOp, frozenset[int]]] = set()
    while stack:
        u, dims = visit = stack.pop()  # dims: u's axes that `outer` reduces
        if consumers[u] != 1 or visit in seen:
            continue
        seen.add(visit)
        if u.op is Ops.REDUCE_AXIS:
            shape = u.src[0].shape
            outer_dims = frozenset(d for d in dims if shape[d] != 1)
            inner_dims = frozenset(d for d in u.arg.axes if shape[d] != 1)
            reads = _moved_by(u.src[0], outer_dims | inner_dims)
            if reads is not None and all(not (r & inner_dims) or outer_dims <= r for r in reads):
                found.append(u)
        elif u.op in GroupOp.Elementwise:
            stack.extend((s, dims) for s in u.src)
        elif u.op is Ops.RESHAPE and (below := _reshape_groups(u.src[0].shape, u.shape)) is not None:
            stack.append((u.src[0], frozenset(i for d in dims for i in below[d])))
    return found


def _moved_by(node: UOp, dims: frozenset[int]) -> list[frozenset[int]] | None:
    """For each value `node` reads from memory (through elementwise and movement ops), which of `dims` (axes of
    node's shape) move the place it is read at; None where a symbolic reshape hides that."""
    out: list[frozenset[int]] = []
    # a walk of its own, not post_order: each path to a read carries where `dims` went (see _nested_reductions)
    stack: list[tuple[UOp, dict[int, frozenset[int]]]] = [(node, {d: frozenset((d,)) for d in dims})]
    seen: set[tuple[UOp, frozenset[tuple[int, frozenset[int]]]]] = set()
    while stack:
        u, at = stack.pop()  # at: for each of `dims`, the axes of u it has become
        at = {d: frozenset(i for i in axes if u.shape[i] != 1) for d, axes in at.items()}
        if (visit := (u, frozenset(at.items()))) in seen:
            continue
        seen.add(visit)
        if u.op in _READ_AS_BUFFERS or (u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER):
            out.append(frozenset(d for d, axes in at.items() if axes))
        elif u.op in GroupOp.Elementwise:
            stack.extend((s, at) for s in u.src)
        elif u.op in (Ops.EXPAND, Ops.SHRINK, Ops.PAD, Ops.FLIP):  # an expanded axis is 1 below, and dropped there
            stack.append((u.src[0], at))
        elif u.op is Ops.PERMUTE:
            order: tuple[int, ...] = u.arg  # axis i of u is axis order[i] of its source
            stack.append((u.src[0], {d: frozenset(order[i] for i in axes) for d, axes in at.items()}))
        elif u.op is Ops.RESHAPE and (below := _reshape_groups(u.src[0].shape, u.shape)) is not None:
            stack.append((u.src[0], {d: frozenset(j for i in axes for j in below[i]) for d, axes in at.items()}))
        elif u.op is not Ops.CONST:
            return None
    return out


#: what a kernel reads from memory: buffers, and the values other kernels compute (a reduction read inside another
#: one is realized unless nested, and then its own loads are what moves)
_READ_AS_BUFFERS = frozenset({Ops.BUFFER, Ops.REDUCE_AXIS, Ops.CONTIGUOUS, Ops.COPY})


def _reshape_groups(old: tuple[sint, ...], new: tuple[sint, ...]) -> list[tuple[int, ...]] | None:
    """For each dim of `new`, the dims of `old` whose indices it decides (reshape merges and splits runs of dims
    with equal products); None for symbolic sizes."""
    src, dst = [s for s in old if isinstance(s, int)], [s for s in new if isinstance(s, int)]
    if len(src) != len(old) or len(dst) != len(new):
        return None
    out: list[tuple[int, ...]] = []
    i = j = 0
    while j < len(dst):
        start_i, start_j, po, pn = i, j, 1, 1
        while True:
            if pn <= po and j < len(dst):
                pn *= dst[j]
                j += 1
            elif i < len(src):
                po *= src[i]
                i += 1
            else:
                break
            if po == pn and (i == len(src) or src[i] != 1) and (j == len(dst) or dst[j] != 1):
                break
        out.extend([tuple(range(start_i, i))] * (j - start_j))
    return out


#: movement ops after which a value is read at other indices than its consumer's own
_REMAPS = frozenset({Ops.SHRINK, Ops.PAD, Ops.FLIP, Ops.PERMUTE})
#: elementwise ops that cost many times a load: recomputing one per element of a broadcast costs more than a buffer
_COSTLY = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.FDIV})


def _reductions_read_through_several_maps(topo: list[UOp], points: set[UOp]) -> set[UOp]:
    """Reductions that their kernel would compute as plain dot products inside an elementwise loop, badly: read
    along more than one path, one of them remapping indices (a rotary embedding reads a projection at i and at its
    partner in the other half), so computed once per index map; or read through a PAD (`Tensor.cat`/`stack` of
    matmul results), so looped over the padding too. Realized, each is one reduction kernel the optimiser tiles,
    and the reads are loads. (Paths that read at the same index share one lowered reduction: left fused.)"""
    paths: dict[UOp, int] = defaultdict(int)  # ways the node's kernel reaches it, counted up to 2
    remapped: dict[UOp, bool] = defaultdict(bool)
    padded: dict[UOp, bool] = defaultdict(bool)
    for node in reversed(topo):  # consumers before their sources
        if node.op is Ops.SINK:
            continue
        root = node in points
        mine = 1 if root else paths[node]
        remap = (not root and remapped[node]) or node.op in _REMAPS
        pad = (not root and padded[node]) or node.op is Ops.PAD
        for s in set(node.src):
            paths[s] = min(2, paths[s] + mine)
            remapped[s] = remapped[s] or remap
            padded[s] = padded[s] or pad
    return {u for u in topo if u.op is Ops.REDUCE_AXIS and u not in points and
            ((paths[u] > 1 and remapped[u]) or padded[u]) and not _folds_to_loads(u)}


def _folds_to_loads(reduction: UOp) -> bool:
    """A reduction over an equality with an ARANGE (the one-hot form of integer-tensor indexing, gather and scatter):
    the compiler folds it into direct loads (codegen/gather_fold.py), so fused it costs no loop."""
    def is_arange(u: UOp) -> bool:
        while u.op in GroupOp.Movement or u.op is Ops.CAST:
            u = u.src[0]
        return u.op is Ops.ARANGE

    # the reduction's own elementwise body (through movement ops, not into other reductions)
    body = post_order((reduction.src[0],), children=lambda u: u.src if u.op in _EPILOGUE or
                      u.op in GroupOp.Movement else ())
    return any(u.op is Ops.CMPEQ and any(is_arange(s) for s in u.src) for u in body)


def _realize_costly_broadcasts(topo: list[UOp], points: set[UOp]) -> None:
    """Make a point of each costly elementwise node (exp, log, sin, sqrt, reciprocal, division) that its kernel
    reads through an EXPAND: fused, it would be recomputed for every element of the broadcast (the activation of an
    MLP feeding the next matmul: once per output column). The one nearest the kernel's root is taken; what it
    reads then sits in its own kernel, no longer broadcast."""
    expanded: dict[UOp, bool] = defaultdict(bool)
    for node in reversed(topo):  # consumers before their sources
        if node.op is Ops.SINK:
            continue
        if node.op in _COSTLY and expanded[node] and node not in points:
            points.add(node)
        flag = node.op is Ops.EXPAND or (node not in points and expanded[node])
        for s in node.src:
            expanded[s] = expanded[s] or flag


def _reductions_in_several_kernels(topo: list[UOp], points: set[UOp]) -> set[UOp]:
    """Reductions that the kernels of more than one realize point would each compute: a reduction's value that
    reaches two kernels through elementwise and movement ops (a weight's gradient, reshaped, read by both of
    Adam's moments). Each would run the whole reduction again; realized once, they read its buffer."""
    owners: dict[UOp, frozenset[UOp]] = {}  # node -> the realize points whose kernels contain it
    for node in reversed(topo):  # consumers before their sources
        if node.op is Ops.SINK:
            continue
        mine = frozenset((node,)) if node in points else owners.get(node)
        if mine is None:
            continue
        for s in node.src:
            have = owners.get(s)
            owners[s] = mine if have is None or have == mine else have | mine
    return {u for u, o in owners.items() if u.op is Ops.REDUCE_AXIS and u not in points and len(o) > 1}


class _KernelBuilder:
    """Turns the subgraph under one realize point into a kernel AST with PARAM leaves."""

    def __init__(self, root: UOp, points: set[UOp], stored_too: Sequence[UOp] = ()):
        self.root, self.points = root, points
        #: points this kernel computes and stores itself (PARAM 1..k) instead of reading them
        self.inline = frozenset(stored_too)
        # what each input PARAM reads: a Buffer named in the graph, or the realize point (a node) that produces it;
        # points get their buffers only once every kernel is built (in-place writes are decided then)
        self.params: list[Buffer | UOp] = list(stored_too)
        self.param_of: dict[tuple[int, sint], UOp] = {}
        self.memo: dict[UOp, UOp] = {}

    def param(self, source: Buffer | UOp, dtype: DType, size: sint) -> UOp:
        """The PARAM standing for `source`. A buffer seen through a symbolic shape is given that symbolic size, so the
        kernel does not depend on the value the variable had when the buffer was made."""
        key = (id(source), size)
        if key not in self.param_of:
            if not any(b is source for b in self.params):
                self.params.append(source)
            index = next(i for i, b in enumerate(self.params) if b is source) + 1
            self.param_of[key] = UOp(Ops.PARAM, dtype, (), (index, size))
        return self.param_of[key]

    def build(self, root: UOp) -> UOp:
        def enter(node: UOp) -> Sequence[UOp]:
            if (leaf := self._leaf(node)) is not None:
                self.memo[node] = leaf
                return ()
            # the last source first: inputs are numbered in the order kernels have always had them
            return node.src[:1] if node.op in (Ops.CONTIGUOUS, Ops.DETACH) else node.src[::-1]

        for node in post_order((root,), children=enter, skip=self.memo.__contains__):
            if node in self.memo:  # a leaf
                continue
            if node.op in (Ops.CONTIGUOUS, Ops.DETACH):
                self.memo[node] = self.memo[node.src[0]]
            else:
                new_src = tuple(self.memo[s] for s in node.src)
                self.memo[node] = node if new_src == node.src else node.replace(src=new_src)
        return self.memo[root]

    def _leaf(self, node: UOp) -> UOp | None:
        """What a node becomes when the kernel does not look inside it, else None."""
        if node.op is Ops.BUFFER:
            return self.param(node.arg, node.dtype, node.arg.size)
        if node is not self.root and node in self.points and node not in self.inline:
            return self.param(node, node.dtype, _symbolic_size(node.shape) or _point_size(node)).reshape(node.shape)
        if node.op is Ops.RESHAPE and node.src[0].op is Ops.BUFFER and (size := _symbolic_size(node.shape)) is not None:
            return self.param(node.src[0].arg, node.dtype, size).reshape(node.shape)
        if node.op in (Ops.REDUCE_AXIS, Ops.PAD) and 0 in node.src[0].shape:
            # the only ways from an empty tensor to a non-empty one: the value is the reduction's identity, or
            # all padding. Folding it here keeps zero-sized loops (and their index arithmetic) out of kernels.
            return _empty_source_value(node)
        return None


def _symbolic_size(shape: tuple[sint, ...]) -> UOp | None:
    if all(isinstance(s, int) for s in shape):
        return None
    size = sym_prod(shape)
    return size if isinstance(size, UOp) else None


def _empty_source_value(node: UOp) -> UOp:
    value = reduce_identity_value(node.arg.op, node.dtype) if node.op is Ops.REDUCE_AXIS else 0
    return UOp.const(node.dtype, value).reshape((1,) * len(node.shape)).expand(node.shape)


def _point_size(node: UOp) -> int:
    # a symbolic size gets a buffer for its largest value: kernels and buffers then fit every value
    size = node.size
    return size if isinstance(size, int) else int(size.vmax)


@dataclass(eq=False)
class _Kernel:
    """One kernel before buffers are placed: what it computes and what it reads."""

    node: UOp
    ast: UOp
    sources: list[Buffer | UOp]  # PARAM 1.. in order: graph buffers, or realize points
    device: str
    var_vals: dict[str, int] = field(default_factory=dict)
    into: Buffer | None = None  # an in-place write's output: a new name for an existing buffer's memory
    stored_too: list[UOp] = field(default_factory=list)  # points it stores besides `node` (PARAM 1..k)


def create_schedule(outputs: list[UOp], devices: list[str]) -> tuple[list[ScheduleItem], dict[UOp, UOp], list[UOp]]:
    """Kernels (in execution order) that compute `outputs`, the buffer view each realized node becomes,
    and the buffer view of each output (valid once the kernels ran)."""
    if VIZ.value:  # tinygrad/viz records the graph given and the items made
        from tinygrad.viz.record import record_schedule
        return record_schedule(outputs, devices, _create_schedule)
    return _create_schedule(outputs, devices)


def _create_schedule(outputs: list[UOp], devices: list[str]) -> tuple[list[ScheduleItem], dict[UOp, UOp], list[UOp]]:
    if not SCHEDULE_CACHE.value:
        outputs, renamed = _substitute_realized(outputs)
        return _named_back(_schedule_graph(outputs, devices), renamed)
    walked = graph_key(outputs, devices, stop_at_realized=True)
    renamed = {}
    if walked is None:  # part of the graph was realized before: schedule the graph that reads those buffers instead
        outputs, renamed = _substitute_realized(outputs)
        walked = graph_key(outputs, devices)
        assert walked is not None, "graph_key gives up only at realized nodes when asked to"
    key, topo, inputs = walked
    # the graph passes' settings too
    key = (key, split_settings(), layout_settings(devices, topo, inputs, _stands_for_a_tensor))
    if (template := schedule_cache.get(key)) is not None:
        return _named_back(template.instantiate(topo, inputs), renamed)
    items, views, out_views = _schedule_graph(outputs, devices)
    schedule_cache.put(key, Template.record(topo, inputs, items, views, out_views))
    return _named_back((items, views, out_views), renamed)


def _schedule_graph(given: list[UOp], devices: list[str]) -> tuple[list[ScheduleItem], dict[UOp, UOp], list[UOp]]:
    # graph passes first; `stands_for` maps the nodes they rebuilt back to the given graph, which is what the
    # caller (and the schedule cache) knows: realized views, and each kernel's outputs, are reported in its terms
    laid_out, layout_for = lower_layouts(given, lambda sink: _assign_devices(sink, given, devices),
                                         _stands_for_a_tensor)
    outputs, split_for = split_large_reductions(laid_out)
    stands_for = _composed(layout_for, split_for)
    sink = UOp(Ops.SINK, src=tuple(outputs))
    points = _find_realize_points(sink, outputs)
    device_of = _assign_devices(sink, outputs, devices)
    stored_by = _stored_by_their_reader(sink, points, set(outputs), device_of)
    stored_too: dict[UOp, list[UOp]] = defaultdict(list)
    for node in sink.toposort():  # sources first: a kernel stores its further outputs in graph order
        if node in stored_by:
            stored_too[stored_by[node]].append(node)
    kernels: list[_Kernel] = []
    for node in sink.toposort():
        if node not in points or node in stored_by:
            continue
        dev = device_of[node]
        if node.op is Ops.COPY:
            src = node.src[0]
            source: Buffer | UOp = src if src in points else base_buffer(src).arg  # type: ignore[union-attr]
            ast = UOp(Ops.COPY, node.dtype, (UOp(Ops.PARAM, node.dtype, (), (0, node.size)),
                                            UOp(Ops.PARAM, node.dtype, (), (1, node.size))), node.arg)
            kernels.append(_Kernel(node, ast, [source], dev))
            continue
        value = _kernel_value(node)
        builder = _KernelBuilder(node, points, stored_too[node])
        if (region := _in_place_region(node)) is not None:
            written, value, region_arg = region
            into = Buffer(written.device, written.size, written.dtype, base=written)  # a new name for new contents
            out_param = UOp(Ops.PARAM, node.dtype, (), (0, written.size)).reshape(node.shape).shrink(region_arg)
        else:
            into = None
            out_param = UOp(Ops.PARAM, node.dtype, (), (0, node.size)).reshape(node.shape)
        stores = [UOp(Ops.STORE, src=(out_param, builder.build(value)))]
        for i, extra in enumerate(stored_too[node], start=1):
            extra_param = UOp(Ops.PARAM, extra.dtype, (), (i, extra.size)).reshape(extra.shape)
            stores.append(UOp(Ops.STORE, src=(extra_param, builder.build(_kernel_value(extra)))))
        # bound variables leave the AST (it keeps the Variable) and travel as launch arguments instead,
        # so one compiled kernel serves every value
        ast, var_vals = unbind(UOp(Ops.SINK, src=tuple(stores)))
        kernels.append(_Kernel(node, ast, builder.params, dev, {v.arg.name: val for v, val in var_vals.items()},
                               into, stored_too[node]))
    buffers_of = _place_outputs(kernels)
    items = [ScheduleItem(k.ast, [buffers_of[k.node], *(buffers_of[s] if isinstance(s, UOp) else s
                                                        for s in k.sources)], k.device,
                          _given_nodes([k.node, *k.stored_too], stands_for), k.var_vals, 1 + len(k.stored_too))
             for k in kernels]
    wanted = set(outputs)
    visible = {node for node in buffers_of if node in wanted or _stands_for_a_tensor(node)
               or _stands_for_a_tensor(stands_for.get(node, node))}
    plan_memory(items, {buf for node, buf in buffers_of.items() if node not in visible and buf.base is None})
    views = {old: buffer_view(buffers_of[node], node.shape) for node in visible
             if (old := stands_for.get(node, node)) is not None}
    return items, views, [views.get(o, o) for o in given]


def _composed(first: dict[UOp, UOp | None], then: dict[UOp, UOp | None]) -> dict[UOp, UOp | None]:
    """What each node stands for after two passes, given what each pass's nodes stand for in its input."""
    if not first:
        return then
    out = dict(first)
    out.update({node: None if mid is None else first.get(mid, mid) for node, mid in then.items()})
    return out


def _given_nodes(nodes: list[UOp], stands_for: dict[UOp, UOp | None]) -> list[UOp]:
    """`nodes` of the rewritten graph as nodes of the given one; nodes a pass added (a split reduction's partial
    results) stand for none and are left out."""
    if not stands_for:
        return nodes
    return [old for n in nodes if (old := stands_for.get(n, n)) is not None]


def _stands_for_a_tensor(node: UOp | None) -> bool:
    """Tagged CONTIGUOUS nodes are a tensor's own value (requires_grad leaves, clones), and so are those a live
    tensor holds (`held_values`): like the requested outputs, their buffers are remembered for later reads. Every
    other intermediate is private to its schedule, so the memory planner may give its memory to a later buffer."""
    return node is not None and node.op is Ops.CONTIGUOUS and (node.arg is not None or is_held(node))


def _place_outputs(kernels: list[_Kernel]) -> dict[UOp, Buffer]:
    placed = {k.node: k.into if k.into is not None else Buffer(k.device, _point_size(k.node), k.node.dtype)
              for k in kernels}
    placed.update({extra: Buffer(k.device, _point_size(extra), extra.dtype) for k in kernels for extra in k.stored_too})
    return placed


def _kernel_value(point: UOp) -> UOp:
    """What the kernel of a (non-copy) realize point computes: a CONTIGUOUS stores its source."""
    return point.src[0] if point.op is Ops.CONTIGUOUS else point


#: ops that read each source at their own output index, so a point under only these is read where it is stored
_SAME_INDEX = GroupOp.ALU | {Ops.CAST, Ops.DETACH}


def _stored_by_their_reader(sink: UOp, points: set[UOp], wanted: set[UOp], device_of: dict[UOp, str]) -> dict[UOp, UOp]:
    """Points that another kernel stores as a further output: point -> the realize point whose kernel stores it.

    A requested output that is elementwise and read by exactly one kernel, elementwise too, only at that kernel's own
    output index (through elementwise ops from its root, same shape and device) is computed there, where its value is
    at hand anyway, and stored beside the kernel's own output. An optimizer's new moments, which its new weight reads,
    are the case: three kernels become one. Only requested outputs: a `contiguous()` in the middle of an expression
    is a kernel boundary the caller asked for. Reductions stay out (their loops and the optimiser's choices for them
    are per kernel), and so do in-place writes, copies and symbolic shapes. Chains resolve to the last reader."""
    readers: dict[UOp, set[UOp]] = defaultdict(set)
    read_elsewhere: set[UOp] = set()  # points some kernel reads other than at its own output index
    reduces: set[UOp] = set()  # kernels with a reduction
    candidates: list[UOp] = []
    for node in sink.toposort():
        if node not in points:
            continue
        if node.op is Ops.COPY:
            readers[node.src[0]].add(node)
            continue
        value = _kernel_value(node)

        def enter(u: UOp, root: UOp = node) -> Sequence[UOp]:
            return () if u.op is Ops.BUFFER or (u is not root and u in points) else u.src

        body = post_order((value,), children=enter)
        off_index: set[UOp] = set()  # nodes some path from the root reaches other than at the output index
        for u in reversed(body):  # consumers before their sources
            if u is not node and u in points:
                readers[u].add(node)
                if u in off_index:
                    read_elsewhere.add(u)
                continue
            if u.op is Ops.REDUCE_AXIS:
                reduces.add(node)
            if u in off_index or u.op not in _SAME_INDEX:
                off_index.update(u.src)
        if _in_place_region(node) is None and not isinstance(node.arg, InPlaceWrite) and \
                all(isinstance(d, int) for d in node.shape):
            candidates.append(node)
    stored_by: dict[UOp, UOp] = {}
    ok = set(candidates) - reduces
    for q in candidates:
        if q not in ok or q not in wanted or q in read_elsewhere or len(readers[q]) != 1:
            continue
        (p,) = readers[q]
        if p in ok and p.shape == q.shape and device_of[p] == device_of[q]:
            stored_by[q] = p
    for q in stored_by:  # chains: a point stored by a kernel that is itself stored by another's goes there
        while stored_by[q] in stored_by:
            stored_by[q] = stored_by[stored_by[q]]
    return stored_by


def _in_place_region(node: UOp) -> tuple[Buffer, UOp, tuple] | None:
    """For an in-place assign (see InPlaceWrite): the buffer written, the value of the region and the region (a SHRINK
    arg over the buffer's shape); None for any other node, or when a graph pass reshaped it past recognising."""
    if node.op is not Ops.CONTIGUOUS or not isinstance(node.arg, InPlaceWrite):
        return None
    where = node.src[0]
    if where.op is not Ops.WHERE or where.src[1].op is not Ops.PAD:
        return None
    old = base_buffer(where.src[2])
    if old is None or where.src[2].shape != node.shape:
        return None
    return old.arg, where.src[1].src[0], node.arg.region


def copy_kernel_ast(dtype: DType, size: int) -> UOp:
    """A kernel that copies PARAM 1 into PARAM 0 (same device, dtype and size)."""
    return UOp(Ops.SINK, src=(UOp(Ops.STORE, src=(UOp(Ops.PARAM, dtype, (), (0, size)),
                                                   UOp(Ops.PARAM, dtype, (), (1, size)))),))


def _assign_devices(sink: UOp, outputs: list[UOp], devices: list[str]) -> dict[UOp, str]:
    """Every node runs where its buffers live; a graph of constants runs on the device of its tensor."""
    found: dict[UOp, str | None] = {}
    for node in sink.toposort():
        if node.op is Ops.BUFFER:
            found[node] = node.arg.device
        elif node.op is Ops.COPY:
            found[node] = node.arg
        elif node.op is Ops.SINK:  # outputs may live on different devices (the shards of a multi-device tensor)
            found[node] = None
        else:
            devs = {d for s in node.src if (d := found.get(s)) is not None}
            if len(devs) > 1:
                raise RuntimeError(f"an operation mixes tensors on devices {sorted(devs)}; move them to one device "
                                   f"with .to(device) first")
            found[node] = devs.pop() if devs else None
    out: dict[UOp, str] = {}
    fallback = dict(zip(outputs, devices))
    users: dict[UOp, list[UOp]] = defaultdict(list)
    for node in sink.toposort():
        for s in node.src:
            users[s].append(node)
    # constants-only subgraphs take the device of the output that uses them
    for node in reversed(list(sink.toposort())):
        d = found.get(node)
        if d is None:
            d = fallback.get(node) or next((out[c] for c in users.get(node, []) if c in out), None)
        out[node] = d or devices[0]
    return out
