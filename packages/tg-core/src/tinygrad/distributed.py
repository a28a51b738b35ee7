"""Several processes, each on its own device(s), exchanging tensors through MPI: data-parallel training.

    mpirun -n 2 python train.py        # Open MPI; the `tg-core[mpi]` extra installs mpi4py

Every process (rank) runs the same program. `all_reduce`, `broadcast` and `all_gather` exchange a tensor with the
other ranks through MPI; `average_gradients` is the data-parallel step: each rank computes the gradients of its share
of the batch, and every rank then steps with their mean. MPI reads and writes the buffers of a device whose memory is
host memory (CPU: its allocator's `host_view`) where they are; other devices' buffers are staged through host numpy.

The exchanges run when called (their input is realized first): they are not part of the lazy graph. Inside a
TinyJit function they are recorded like kernels, so a replay exchanges the new values again at the same point,
between the kernels before and after; every rank must capture and replay the same sequence of exchanges, as MPI
needs matching calls on all ranks.

A process not started by an MPI launcher (no OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK in its environment) is
rank 0 of 1: the exchanges give back their input, and mpi4py is not imported.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tinygrad.device import Buffer
from tinygrad.dtype import is_emulated_float, to_numpy
from tinygrad.engine import realize as engine_realize
from tinygrad.engine.schedule import realized_views
from tinygrad.engine.schedule_item import ScheduleItem, buffer_view
from tinygrad.helpers import prod
from tinygrad.multi import realized_buffers
from tinygrad.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from tinygrad.tensor import Tensor

_LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")
_comm: Any = None


def launched_by_mpi() -> bool:
    """Whether an MPI launcher (mpirun, mpiexec, srun) started this process."""
    return any(v in os.environ for v in _LAUNCHER_VARS)


def _world() -> Any:
    """mpi4py's COMM_WORLD, or None outside an MPI launch."""
    global _comm
    if _comm is None and launched_by_mpi():
        try:
            from mpi4py import MPI
        except ImportError as e:
            raise RuntimeError("this process was started by an MPI launcher, but mpi4py is not installed: "
                               "pip install 'tg-core[mpi]' (it needs an MPI library, e.g. Debian's openmpi-bin "
                               "libopenmpi-dev)") from e
        _comm = MPI.COMM_WORLD
    return _comm


def rank() -> int:
    """This process's number, 0 .. world_size() - 1."""
    comm = _world()
    return 0 if comm is None else int(comm.Get_rank())


def world_size() -> int:
    """How many processes the MPI launch started (1 without one)."""
    comm = _world()
    return 1 if comm is None else int(comm.Get_size())


# ---- exchanges recorded like kernels ----

#: an exchange: (flat host arrays of the input buffers, flat host arrays of the output buffers) -> None; it fills the
#: outputs and must not write the inputs, which may be the input tensors' own memory
Exchange = Callable[[list[np.ndarray], list[np.ndarray]], None]


class _HostExchange:
    """An MPI exchange as a launch: gives MPI its input buffers and its output buffers as host arrays (the buffers'
    own memory where it is host memory, else copies to and from it). A TinyJit capture records it with its buffers,
    as it records a kernel, and replays call it again."""

    global_size: tuple[int, ...] | None = None

    def __init__(self, name: str, exchange: Exchange, n_out: int, nbytes: int):
        self.display_name, self._exchange, self._n_out = name, exchange, n_out
        self.estimated_ops, self.estimated_bytes = 0, nbytes

    def __call__(self, bufs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
        outs, ins = bufs[:self._n_out], bufs[self._n_out:]
        in_arrays = [a if (a := b.host_array()) is not None else b.numpy() for b in ins]
        out_arrays, staged = [], []
        for b in outs:
            if (a := b.host_array()) is None:
                a = np.empty(b.size, to_numpy(b.dtype))
                staged.append((b, a))
            out_arrays.append(a)
        self._exchange(in_arrays, out_arrays)
        for b, a in staged:
            b.copyin(a.data.cast("B"))
        return None


def _buffer(t: Tensor) -> Buffer:
    if isinstance(t.device, tuple):
        raise NotImplementedError(f"MPI exchanges take tensors on one device, this one is on {t.device}; gather it "
                                  f"with .to(device) first")
    if is_emulated_float(t.dtype):
        raise TypeError(f"MPI has no {t.dtype.name}: cast the tensor (for example to float32) before exchanging it")
    view = realized_views.get(t.uop)
    bufs = realized_buffers(view if view is not None else t.uop)
    if bufs is None or bufs[0].size != t.numel():
        t = t.contiguous().realize()
        view = realized_views.get(t.uop)
        bufs = realized_buffers(view if view is not None else t.uop)
    assert bufs is not None, "a realized contiguous tensor is one buffer"
    return bufs[0]


def _exchange(name: str, tensors: Sequence[Tensor], shapes: Sequence[tuple[int, ...]], exchange: Exchange
              ) -> list[Tensor]:
    """Run `exchange` now, into new buffers of `shapes` on the inputs' devices; a TinyJit capture in progress records
    it."""
    if not tensors:
        return []
    type(tensors[0]).realize(*tensors)
    ins = [_buffer(t) for t in tensors]
    outs = [Buffer(b.device, prod(s), b.dtype) for b, s in zip(ins, shapes)]
    runner = _HostExchange(name, exchange, len(outs), sum(b.nbytes for b in ins + outs))
    bufs = outs + ins
    for b in bufs:
        b.ensure_allocated()
    runner(bufs, {})
    if engine_realize.capture_hooks:
        engine_realize.capture_hooks[-1](ScheduleItem(UOp(Ops.SINK), bufs, outs[0].device), runner)
    return [type(t)(buffer_view(b, s), device=t.device) for t, b, s in zip(tensors, outs, shapes)]


_OPS = ("sum", "mean", "max", "min", "prod")


def _mpi_op(op: str) -> Any:
    from mpi4py import MPI

    return {"sum": MPI.SUM, "mean": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}[op]


def all_reduce_many(tensors: Sequence[Tensor], op: str = "sum") -> list[Tensor]:
    """`all_reduce` of several tensors in one MPI call per dtype (their values joined in one host array): what a
    gradient sync needs, as each call costs a round of messages."""
    if op not in _OPS:
        raise ValueError(f"all_reduce op {op!r}: choose one of {', '.join(_OPS)}")
    if op == "mean" and not all(t.dtype.is_float for t in tensors):
        raise TypeError("all_reduce op 'mean' takes floating-point tensors; use 'sum' for integers")
    comm = _world()
    if comm is None or comm.Get_size() == 1:
        return list(tensors)
    from mpi4py import MPI

    mpi_op, world = _mpi_op(op), comm.Get_size()

    def exchange(ins: list[np.ndarray], outs: list[np.ndarray]) -> None:
        by_dtype: dict[np.dtype, list[int]] = {}
        for i, a in enumerate(ins):
            by_dtype.setdefault(a.dtype, []).append(i)
        for idx in by_dtype.values():
            if len(idx) == 1:  # MPI reads the input and writes the output where they are
                joined = outs[idx[0]]
                comm.Allreduce(ins[idx[0]], joined, op=mpi_op)
            else:  # several are joined into one message, and the result parted into the outputs
                joined = np.concatenate([ins[i] for i in idx])
                comm.Allreduce(MPI.IN_PLACE, joined, op=mpi_op)
            if op == "mean":
                np.true_divide(joined, world, out=joined)
            if len(idx) > 1:
                at = 0
                for i in idx:
                    outs[i][:], at = joined[at:at + ins[i].size], at + ins[i].size

    return _exchange(f"mpi_allreduce_{op}", tensors, [t.shape for t in tensors], exchange)


def all_reduce(t: Tensor, op: str = "sum") -> Tensor:
    """t combined over all ranks with `op` ("sum", "mean", "max", "min", "prod"); every rank gets the result."""
    return all_reduce_many([t], op)[0]


def broadcast(t: Tensor, root: int = 0) -> Tensor:
    """Rank `root`'s t, on every rank."""
    comm = _world()
    if comm is None or comm.Get_size() == 1:
        return t

    def exchange(ins: list[np.ndarray], outs: list[np.ndarray]) -> None:
        if comm.Get_rank() == root:
            outs[0][:] = ins[0]
        comm.Bcast(outs[0], root=root)

    return _exchange("mpi_broadcast", [t], [t.shape], exchange)[0]


def all_gather(t: Tensor) -> Tensor:
    """Every rank's t, stacked along a new first axis in rank order: shape (world_size(), *t.shape)."""
    comm = _world()
    if comm is None or comm.Get_size() == 1:
        return t.unsqueeze(0)
    world = comm.Get_size()

    def exchange(ins: list[np.ndarray], outs: list[np.ndarray]) -> None:
        comm.Allgather(ins[0], outs[0])

    return _exchange("mpi_allgather", [t], [(world, *t.shape)], exchange)[0]


# ---- data parallel ----

def average_gradients(params: Sequence[Tensor]) -> None:
    """Replace each parameter's `.grad` by its mean over the ranks, in one MPI call: after each rank's backward()
    on its share of the batch, every rank then takes the same optimizer step (the step of the whole batch, when the
    shares are equal and the loss is a mean). Call it between backward() and the optimizer's step, also inside a
    TinyJit step."""
    with_grad = [p for p in params if p.grad is not None]
    averaged = all_reduce_many([p.grad for p in with_grad], "mean")  # type: ignore[misc]
    for p, g in zip(with_grad, averaged):
        p.grad = g


def broadcast_parameters(params: Sequence[Tensor], root: int = 0) -> None:
    """Give every rank rank `root`'s values of `params` (written into each tensor's own buffer), so that all start
    training from the same weights."""
    for p in params:
        value = broadcast(p, root)
        if value is not p:
            p.assign(value.cast(p.dtype)).realize()
