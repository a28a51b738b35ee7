"""tinygrad.distributed without an MPI launch (rank 0 of 1), and its exchanges against a stand-in communicator:
what they send, and that a TinyJit replay exchanges again. integration-tests/test_mpi.py runs real MPI processes."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest
from tinygrad import Tensor, TinyJit, distributed

LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")


@pytest.fixture
def no_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    for v in LAUNCHER_VARS:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setattr(distributed, "_comm", None)


@pytest.mark.usefixtures("no_launch")
def test_without_an_mpi_launch_this_is_rank_0_of_1() -> None:
    assert not distributed.launched_by_mpi()
    assert distributed.rank() == 0 and distributed.world_size() == 1
    t = Tensor([1.0, 2.0])
    assert distributed.all_reduce(t) is t and distributed.broadcast(t) is t
    assert distributed.all_gather(t).tolist() == [[1.0, 2.0]]
    with pytest.raises(ValueError, match="median"):
        distributed.all_reduce(t, "median")
    with pytest.raises(TypeError, match="floating-point"):
        distributed.all_reduce(Tensor([1, 2]), "mean")


def test_launched_without_mpi4py_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.setattr(distributed, "_comm", None)
    monkeypatch.setitem(__import__("sys").modules, "mpi4py", None)  # as if not installed
    with pytest.raises(RuntimeError, match=r"tg-core\[mpi\]"):
        distributed.world_size()


class TwinComm:
    """Rank 0 of 2 whose twin holds the same values: a sum doubles them, a gather repeats them."""

    def __init__(self) -> None:
        self.calls = 0
        self.arrays: list[np.ndarray] = []  # the host arrays of every call's send and receive buffers

    def Get_size(self) -> int:
        return 2

    def Get_rank(self) -> int:
        return 0

    def Allreduce(self, send: Any, recv: np.ndarray, op: Any = None) -> None:
        from mpi4py import MPI

        self.calls += 1
        in_place = send is MPI.IN_PLACE
        self.arrays += [recv] if in_place else [send, recv]
        recv[:] = (recv if in_place else send) * 2

    def Bcast(self, data: np.ndarray, root: int = 0) -> None:
        self.calls += 1
        self.arrays.append(data)

    def Allgather(self, send: np.ndarray, recv: np.ndarray) -> None:
        self.calls += 1
        self.arrays += [send, recv]
        recv[:] = np.concatenate([send, send])


@pytest.fixture
def twin(monkeypatch: pytest.MonkeyPatch) -> TwinComm:
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py is not installed (pip install 'tg-core[mpi]'): the exchanges name its MPI ops")
    comm = TwinComm()
    monkeypatch.setattr(distributed, "_comm", comm)
    return comm


def test_exchanges_send_the_device_values(twin: TwinComm) -> None:
    t = Tensor([[1.0, 2.0], [3.0, 4.0]]) + 1
    assert distributed.all_reduce(t).tolist() == [[4.0, 6.0], [8.0, 10.0]]
    assert distributed.all_reduce(t, "mean").tolist() == [[2.0, 3.0], [4.0, 5.0]]
    assert distributed.all_gather(t[0]).tolist() == [[2.0, 3.0], [2.0, 3.0]]
    assert distributed.broadcast(t).tolist() == [[2.0, 3.0], [4.0, 5.0]]
    a, b = distributed.all_reduce_many([Tensor([1.0]), Tensor([2, 3])])
    assert a.tolist() == [2.0] and b.tolist() == [4, 6]
    assert twin.calls == 6  # one call per dtype for all_reduce_many


def test_tinyjit_replays_the_exchange(twin: TwinComm) -> None:
    @TinyJit
    def f(x: Tensor) -> Tensor:
        return (distributed.all_reduce(x * 3) + 1).realize()

    for i in range(5):
        x = np.arange(4, dtype=np.float32) + i
        np.testing.assert_array_equal(f(Tensor(x)).numpy(), 2 * 3 * x + 1)
    assert f.captured_kernels >= 3 and twin.calls == 5  # every call exchanged, replays included


def test_average_gradients(twin: TwinComm) -> None:
    w = Tensor([1.0, -2.0], requires_grad=True)
    (w * w).sum().backward()
    distributed.average_gradients([w])
    assert w.grad is not None and w.grad.tolist() == [2.0, -4.0]  # the mean of two equal gradients


def test_host_memory_is_exchanged_where_it_is(twin: TwinComm) -> None:
    # a device whose memory is host memory (CPU) lends MPI its buffers: no copies to and from staging arrays
    from tinygrad import Device
    from tinygrad.distributed import _buffer

    t = (Tensor([1.0, 2.0, 3.0]) + 1).realize()
    if getattr(Device[t.device].allocator, "host_view", None) is None:
        pytest.skip(f"{t.device} memory is not host memory")
    out = distributed.all_reduce(t)
    assert out.tolist() == [4.0, 6.0, 8.0] and t.tolist() == [2.0, 3.0, 4.0]
    send, recv = twin.arrays
    assert np.shares_memory(send, _buffer(t).host_array()) and np.shares_memory(recv, _buffer(out).host_array())
