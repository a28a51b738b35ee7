"""From a kernel's global and work-group sizes (in work-items, dimension 0 first, as `ProgramSpec` has them) to
CUDA's grid and block. Pure Python, shared by the renderer (which writes how a block finds its coordinates) and
the runtime (which launches), so that both read the same launch from the same numbers.

CUDA allows 2**31-1 blocks along grid x but only 65535 along y and z. A launch with more work-items than that in
dimension 1 or 2 runs all its blocks along x ("flat"), and the kernel takes blockIdx.x apart into the three block
coordinates. The choice depends on the global size alone, not on the block size: blocks are chosen after
rendering (by the opts or by the runtime), and at most `size` blocks cover `size` work-items.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: blocks per grid dimension (every GPU since compute capability 3.0)
GRID_MAX = (2**31 - 1, 65535, 65535)
#: threads per block dimension and per block (every GPU since compute capability 2.0); devices report their own
BLOCK_MAX = (1024, 1024, 64)
MAX_THREADS_PER_BLOCK = 1024
#: threads of a block the runtime picks for a kernel that leaves it open: 8 warps
DEFAULT_BLOCK_THREADS = 256

Dim3 = tuple[int, int, int]


def _dim3(sizes: Sequence[int]) -> Dim3:
    padded = [*sizes, 1, 1, 1][:3]
    return padded[0], padded[1], padded[2]


def flat_grid(global_size: Sequence[int]) -> bool:
    """Whether the launch runs all its blocks along grid x (see the module's docstring)."""
    return any(size > GRID_MAX[d] for d, size in enumerate(global_size) if d > 0)


def default_block(global_size: Sequence[int], budget: int = DEFAULT_BLOCK_THREADS,
                  block_max: Sequence[int] = BLOCK_MAX) -> Dim3:
    """A block for a kernel whose work-group size is left to the runtime: dimension 0 (the innermost output loop,
    contiguous in memory) takes as much of the budget as its size uses, the next ones what is left. The kernel
    guards every id (`launch_rounds_up`), so the last block along a dimension may be partial."""
    out = []
    for d, size in enumerate(_dim3(global_size)):
        take = max(1, min(size, budget, block_max[d]))
        out.append(take)
        budget //= take
    return _dim3(out)


def launch_dims(global_size: Sequence[int] | None, local_size: Sequence[int] | None,
                block_max: Sequence[int] = BLOCK_MAX, max_threads: int = MAX_THREADS_PER_BLOCK) -> tuple[Dim3, Dim3]:
    """(grid, block) of a launch. Raises ValueError, saying which limit, for a launch CUDA cannot run."""
    gsize = _dim3(global_size or (1,))
    block = _dim3(local_size) if local_size else default_block(gsize, block_max=block_max)
    if any(b < 1 for b in block) or len(local_size or ()) > 3 or len(global_size or ()) > 3:
        raise ValueError(f"a launch of global size {tuple(global_size or ())} and block {tuple(local_size or ())} "
                         f"has no CUDA form (three dimensions of positive sizes)")
    if (threads := math.prod(block)) > max_threads or any(b > m for b, m in zip(block, block_max)):
        raise ValueError(f"a block of {block} ({threads} threads) exceeds the device's limits: {tuple(block_max)} "
                         f"per dimension, {max_threads} in all")
    blocks = _dim3([-(-g // b) for g, b in zip(gsize, block)])
    grid: Dim3 = (math.prod(blocks), 1, 1) if flat_grid(gsize) else blocks
    if any(n > m for n, m in zip(grid, GRID_MAX)):
        raise ValueError(f"a launch of global size {gsize} in blocks of {block} needs a grid of {grid} blocks; CUDA "
                         f"allows at most {GRID_MAX}: use larger work-groups or split the kernel")
    return grid, block


__all__ = ["BLOCK_MAX", "DEFAULT_BLOCK_THREADS", "GRID_MAX", "MAX_THREADS_PER_BLOCK", "default_block", "flat_grid",
           "launch_dims"]
