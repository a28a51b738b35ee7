"""From a kernel's global and work-group sizes (work-items, dimension 0 first) to HIP's grid and block, in pure
Python so the tests check it without a GPU.

An AMD dispatch packet counts work-items in 32 bits per dimension, so the only grid limit is that blocks times
block size stay below 2**32 along each dimension. The renderer caps global sizes at 2**31-1 per dimension and a
block is at most 1024, so a launch the compiler makes always fits: no flattening like CUDA's y/z limit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: work-items per block dimension and per block on every gfx9 (CDNA) and gfx10/11 (RDNA) GPU
BLOCK_MAX = (1024, 1024, 1024)
MAX_THREADS_PER_BLOCK = 1024
#: work-items per grid dimension: the dispatch packet's 32-bit grid size
GRID_WORK_ITEMS_MAX = 2**32 - 1
#: threads the runtime gives a kernel that leaves its block open: 4 wave64 or 8 wave32 waves
DEFAULT_BLOCK_THREADS = 256

Dim3 = tuple[int, int, int]


def _dim3(sizes: Sequence[int]) -> Dim3:
    padded = [*sizes, 1, 1, 1][:3]
    return padded[0], padded[1], padded[2]


def default_block(global_size: Sequence[int], budget: int = DEFAULT_BLOCK_THREADS,
                  block_max: Sequence[int] = BLOCK_MAX) -> Dim3:
    """Dimension 0 (contiguous in memory) takes as much of the budget as it uses, the next ones what is left; the
    kernel guards every id (`launch_rounds_up`), so a last partial block is fine."""
    out = []
    for d, size in enumerate(_dim3(global_size)):
        take = max(1, min(size, budget, block_max[d]))
        out.append(take)
        budget //= take
    return _dim3(out)


def launch_dims(global_size: Sequence[int] | None, local_size: Sequence[int] | None,
                block_max: Sequence[int] = BLOCK_MAX, max_threads: int = MAX_THREADS_PER_BLOCK) -> tuple[Dim3, Dim3]:
    """(grid in blocks, block) of a launch; ValueError naming the limit for one HIP cannot run."""
    gsize = _dim3(global_size or (1,))
    if len(local_size or ()) > 3 or len(global_size or ()) > 3:
        raise ValueError(f"a launch of global size {tuple(global_size or ())} and block {tuple(local_size or ())} "
                         f"has more than three dimensions")
    block = _dim3(local_size) if local_size else default_block(gsize, block_max=block_max)
    if any(b < 1 for b in block):
        raise ValueError(f"a block of {block} has an empty dimension")
    if (threads := math.prod(block)) > max_threads or any(b > m for b, m in zip(block, block_max)):
        raise ValueError(f"a block of {block} ({threads} threads) exceeds the device's limits: {tuple(block_max)} "
                         f"per dimension, {max_threads} in all")
    grid = _dim3([-(-g // b) for g, b in zip(gsize, block)])
    if any(n * b > GRID_WORK_ITEMS_MAX for n, b in zip(grid, block)):
        raise ValueError(f"a launch of global size {gsize} in blocks of {block} has more than 2**32-1 work-items "
                         f"along one dimension, which an AMD dispatch cannot count")
    return grid, block


__all__ = ["BLOCK_MAX", "DEFAULT_BLOCK_THREADS", "MAX_THREADS_PER_BLOCK", "default_block", "launch_dims"]
