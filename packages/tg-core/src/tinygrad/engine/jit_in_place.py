"""In-place state updates in a TinyJit capture: the kernel that computes a state tensor's new value writes it
straight into the buffer the state lives in, instead of into a buffer of its own followed by a write-back copy.

A function that assigns model state (`w.assign(w - lr * g)`, an optimizer's moments, `x += y`) computes each new
value into fresh memory; a replay must leave the value in the buffer the kernels read the state from, so the capture
ends with one copy per state tensor (jit_io.write_back_state). That copy costs a launch and, between replays, a
second buffer of the state's size. It is not needed when the kernel that makes the new value could have written it
over the old one:

* that kernel reads the old value only element by element, each element where it stores the same element of the new
  value: the reads are elementwise ops over reshapes of the buffer, of the stored value's shape (an update such as
  Adam's). A read through a reduction, a permute, a flip, a shift (any other movement) could see an element the
  kernel already overwrote, so such a kernel keeps the copy;
* no launch after it in the capture writes the old value's memory, none but it writes the new one, and the launches
  after it that read the old value can run before it (nothing between reads what they write or writes what they
  touch): they are moved there;
* the new value is in memory of its own (not an alias), of the old one's dtype and size, and no output of the call
  other than the state tensor itself holds it.

The kernel is then rebuilt to read the old value through its output argument (one pointer for both: two arguments
over one memory would break the no-alias promise the renderers give the compilers) and launched on the state's
buffer; launches after it that read the new value read the state's buffer. The capturing call itself already ran the
old kernels, so its write-back copy still runs once, and only the replays take the in-place launches.
"""

from __future__ import annotations

from tinygrad.device import Buffer, Device, Runner
from tinygrad.engine.schedule_item import ScheduleItem
from tinygrad.uop.ops import GroupOp, Ops, ParamArg, UOp

Record = tuple[ScheduleItem, "Runner | None"]


def write_in_place(records: list[Record], pairs: list[tuple[Buffer, Buffer]], held: set[int]) -> set[int]:
    """Rewrite `records` (a capture's launches, in order) so that each state's new value is stored into its old
    buffer where that is safe (the module docstring). `pairs` are (old, new) buffers per state tensor and device;
    `held` the ids of the memory the call's other outputs hold. Returns the ids of the new values' memory now written
    in place, whose write-back copies the replays skip."""
    done: set[int] = set()
    twice = {id(new) for _, new in pairs if sum(n is new for _, n in pairs) > 1}  # one value assigned to two states
    for old, new in pairs:
        i = None if id(new) in twice else _writer(records, old, new, held)
        if i is None:
            continue
        si, _ = records[i]
        out = next(pos for pos, b in enumerate(si.bufs[:si.outs]) if b.storage is new)
        ins = [pos for pos in range(si.outs, len(si.bufs)) if si.bufs[pos].storage is old.storage]
        if not all(_reads_where_stored(si.ast, pos) for pos in ins):
            continue
        if (moved := _hoist_readers(records, i, old)) is None:
            continue
        i = moved
        ast, bufs = si.ast, list(si.bufs)
        for pos in reversed(ins):  # from the last, so the slots still to rewrite keep their numbers
            ast, bufs = _read_through_output(ast, pos, out), bufs[:pos] + bufs[pos + 1:]
        bufs[out] = old
        item = ScheduleItem(ast, bufs, si.device, outputs=si.outputs, var_vals=si.var_vals, outs=si.outs)
        records[i] = (item, Device[si.device].get_runner(ast))
        for j in range(i + 1, len(records)):  # later readers of the new value find it in the state's buffer
            later, runner = records[j]
            if any(b.storage is new for b in later.bufs):
                bufs = [old if b.storage is new else b for b in later.bufs]
                records[j] = (ScheduleItem(later.ast, bufs, later.device, outputs=later.outputs,
                                           var_vals=later.var_vals, outs=later.outs), runner)
        done.add(id(new))
    return done


def _writer(records: list[Record], old: Buffer, new: Buffer, held: set[int]) -> int | None:
    """The launch that stores `new`, when it may store it over `old` instead (see the module docstring)."""
    if new.base is not None or id(new) in held or new.dtype != old.dtype or new.nbytes != old.nbytes or \
            new.device != old.device:
        return None
    writers = [i for i, (si, _) in enumerate(records) if any(b.storage is new for b in si.bufs[:si.outs])]
    if len(writers) != 1:
        return None
    i = writers[0]
    si = records[i][0]
    if si.is_copy or any(b.storage is new for b in si.bufs[si.outs:]):
        return None
    if any(b.storage is new for si, _ in records[:i] for b in si.bufs):
        return None
    if any(b.storage is old.storage for b in si.bufs[:si.outs]):
        return None
    return i


def _hoist_readers(records: list[Record], i: int, old: Buffer) -> int | None:
    """Move the launches after launch `i` that read `old`'s memory to before it, where no launch between them writes
    what they read or touches what they write (a training step's loss, realized with the optimizer's updates, may
    read the old weights after the update's kernel). Returns launch i's new position; None when a later launch writes
    `old`'s memory or a reader cannot move."""
    j = i + 1
    while j < len(records):
        si = records[j][0]
        if any(b.storage is old.storage for b in si.bufs):
            if any(b.storage is old.storage for b in si.bufs[:si.outs]):
                return None
            between = [s for s, _ in records[i:j]]
            writes = {id(b.storage) for s in between for b in s.bufs[:s.outs]}
            touched = writes | {id(b.storage) for s in between for b in s.bufs[s.outs:]}
            if any(id(b.storage) in writes for b in si.bufs[si.outs:]) or \
                    any(id(b.storage) in touched for b in si.bufs[:si.outs]):
                return None
            records.insert(i, records.pop(j))
            i += 1
        j += 1
    return i


def _param_below(u: UOp) -> UOp | None:
    while u.op is Ops.RESHAPE:
        u = u.src[0]
    return u if u.op is Ops.PARAM else None


def _reads_where_stored(ast: UOp, slot: int) -> bool:
    """Whether every read of PARAM `slot` in the kernel `ast` is of the element a store writes at that point: the
    kernel's stores all write whole parameters (through reshapes) with values of one shape, and the parameter is read
    through reshapes only, at that shape, under elementwise ops only."""
    stores = ast.src
    if not stores or any(st.op is not Ops.STORE for st in stores):
        return False
    shape = stores[0].src[1].shape
    if any(_param_below(st.src[0]) is None or st.src[0].shape != shape or st.src[1].shape != shape for st in stores):
        return False
    todo, seen = [st.src[1] for st in stores], set()
    while todo:
        u = todo.pop()
        if u in seen:
            continue
        seen.add(u)
        param = _param_below(u)
        if param is not None:
            if param.arg.slot == slot and u.shape != shape:
                return False
        elif u.op in GroupOp.Elementwise and u.shape == shape:
            todo.extend(u.src)
        elif any(x.op is Ops.PARAM and x.arg.slot == slot for x in u.toposort()):
            return False
    return True


def _read_through_output(ast: UOp, slot: int, out: int) -> UOp:
    """`ast` with PARAM `slot` read through output PARAM `out` (same dtype and size) and the parameters after it
    renumbered down by one."""
    out_param = next(u for u in ast.toposort() if u.op is Ops.PARAM and u.arg.slot == out)
    mapping: dict[UOp, UOp] = {}
    for u in ast.toposort():
        if u.op is Ops.PARAM and u.arg.slot == slot:
            mapping[u] = out_param
        elif u.op is Ops.PARAM and u.arg.slot > slot:
            mapping[u] = UOp(Ops.PARAM, u.dtype, (), ParamArg(u.arg.slot - 1, u.arg.size))
    return ast.substitute(mapping)
