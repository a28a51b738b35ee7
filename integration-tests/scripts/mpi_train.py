"""Data-parallel training over MPI, small enough for a test: an MLP and Adam, 5 TinyJit steps on fixed batches.

    python integration-tests/scripts/mpi_train.py OUT_PREFIX                  # one process, whole batches
    mpirun -n 2 python integration-tests/scripts/mpi_train.py OUT_PREFIX     # each rank half of every batch

Each process writes its final weights to OUT_PREFIX.rank<N>.npz. Under MPI it first checks the exchanges of
tinygrad.distributed (all_reduce, broadcast, all_gather, also replayed by a TinyJit function), then trains: every
rank takes its share of each batch and steps with the gradients averaged over the ranks, which is the step of the
whole batch. test_mpi.py compares the ranks' weights with each other and with the one-process run.
"""

from __future__ import annotations

import sys

import numpy as np
from tinygrad import Context, Tensor, TinyJit, distributed, nn
from tinygrad.nn.state import get_parameters

BATCH, STEPS = 16, 5


class MLP:
    def __init__(self) -> None:
        self.l1, self.l2 = nn.Linear(12, 24), nn.Linear(24, 5)

    def __call__(self, x: Tensor) -> Tensor:
        return self.l2(self.l1(x).relu())


def check_exchanges(rank: int, world: int) -> None:
    mine = Tensor(np.arange(6, dtype=np.float32) + 10 * rank)
    want = sum(np.arange(6, dtype=np.float32) + 10 * r for r in range(world))
    np.testing.assert_array_equal(distributed.all_reduce(mine).numpy(), want)
    np.testing.assert_array_equal(distributed.all_reduce(mine, "max").numpy(), np.arange(6) + 10 * (world - 1))
    np.testing.assert_array_equal(distributed.broadcast(mine, root=world - 1).numpy(), np.arange(6) + 10 * (world - 1))
    gathered = distributed.all_gather(mine.reshape(2, 3)).numpy()
    assert gathered.shape == (world, 2, 3)
    for r in range(world):
        np.testing.assert_array_equal(gathered[r].reshape(-1), np.arange(6) + 10 * r)

    @TinyJit
    def summed(x: Tensor) -> Tensor:
        return (distributed.all_reduce(x * 2) + 1).realize()

    for i in range(4):  # eager, capture, then replays: each exchanges the new values
        x = Tensor(np.full(3, rank + i, dtype=np.float32))
        np.testing.assert_array_equal(summed(x).numpy(), sum(2 * (r + i) for r in range(world)) + 1)


def main(prefix: str) -> None:
    rank, world = distributed.rank(), distributed.world_size()
    if world > 1:
        check_exchanges(rank, world)
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((STEPS, BATCH, 12)).astype(np.float32)
    ys = rng.integers(0, 5, (STEPS, BATCH)).astype(np.int32)
    Tensor.manual_seed(rank)  # different starting weights on each rank: broadcast_parameters makes them rank 0's
    if world > 1:
        model = MLP()
        distributed.broadcast_parameters(get_parameters(model))
    else:
        Tensor.manual_seed(0)
        model = MLP()
    opt = nn.optim.Adam(get_parameters(model), lr=0.01)

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        with Context(TRAINING=1, CHECK_INDICES=0):
            opt.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y).backward()
            distributed.average_gradients(opt.params)
            return loss.realize(*opt.schedule_step())

    share = BATCH // world
    for x, y in zip(xs, ys):
        step(Tensor(x[rank * share:(rank + 1) * share]), Tensor(y[rank * share:(rank + 1) * share]))
    np.savez(f"{prefix}.rank{rank}.npz", *[p.numpy() for p in get_parameters(model)])


if __name__ == "__main__":
    main(sys.argv[1])
