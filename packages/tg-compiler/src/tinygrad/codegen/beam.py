"""BEAM search: pick a kernel's opts by timing candidates on the device (`BEAM=n`, n the beam width).

Starting from no opts, every step extends each of the n best opt lists so far by one action (every UPCAST,
UNROLL, LOCAL, GROUP, SWAP and TILE the kernel accepts), has every candidate timed by the caller (compiled and
run on the device with scratch buffers: `tinygrad.runtime.beam_timing`), and keeps the n fastest. The search
stops when a step finds nothing faster (by more than the timing noise) or after `MAX_STEPS` steps.

The winner is cached on disk, one small JSON file per kernel, under `cache_dir()/beam/`, keyed by the kernel
AST, the device, the renderer, the compiler (its cache key: version and flags) and the beam width. It is the `beam`
table of the disk cache in `tinygrad.helpers`, which binds each entry to its key and checks it on read (an entry
copied or renamed from another kernel's file, cut short, or not a regular file is a miss); the JSON repeats the key
and a format version, so an entry from another version or for another kernel is ignored too, and searched again.
A cache that cannot be written is warned about once and the search result is still used.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

from tinygrad.codegen.opt.actions import Opt, OptError, OptOps, OptState, apply_opt
from tinygrad.helpers import DEBUG, disk_cache_get, disk_cache_path, disk_cache_put
from tinygrad.renderer import Renderer
from tinygrad.uop.ops import AxisKind, UOp

#: bump when the meaning of an opt list changes: older cache entries are then ignored
SEARCH_VERSION = 1
MAX_STEPS = 6
#: a candidate must beat the best so far by this factor to count as progress (timings are noisy)
MIN_GAIN = 0.97

UPCAST_AMOUNTS = (2, 3, 4, 8, 16, 32)
UNROLL_AMOUNTS = (2, 4, 8, 16)
LOCAL_AMOUNTS = (2, 4, 8, 16, 32, 64, 128, 256)
GROUP_AMOUNTS = (16, 32, 64, 128, 256)
TILE_AMOUNTS = (2, 4, 8)
#: how many choices of a tensor core's (m, n, k) axes a search tries (innermost first)
TC_CHOICES = 2


def candidate_actions(state: OptState, has_local: bool, tensor_cores: int = 0) -> list[Opt]:
    """Every action worth trying next (apply_opt still refuses the ones that do not fit the kernel). A target with
    `tensor_cores` starts a kernel with each of them on each of the first TC_CHOICES choices of axes."""
    axes = state.axes
    out: list[Opt] = []
    if not state.applied:
        out += [Opt(OptOps.TC, choice, tc) for tc in range(tensor_cores) for choice in range(TC_CHOICES)]
    for i, r in enumerate(axes):
        if r.arg.kind is AxisKind.GLOBAL:
            out += [Opt(OptOps.UPCAST, i, a) for a in UPCAST_AMOUNTS]
            out += [Opt(OptOps.SWAP, i, j) for j in range(i + 1, len(axes)) if axes[j].arg.kind is AxisKind.GLOBAL]
            if has_local:
                out += [Opt(OptOps.LOCAL, i, a) for a in LOCAL_AMOUNTS]
            else:
                out += [Opt(OptOps.TILE, i, a) for a in TILE_AMOUNTS]
        else:
            out += [Opt(OptOps.UNROLL, i, a) for a in UNROLL_AMOUNTS]
            if has_local:
                out += [Opt(OptOps.GROUP, i, a) for a in GROUP_AMOUNTS]
    return out


def ast_key(ast: UOp) -> str:
    """A stable text of the kernel AST (ops, dtypes, structure, args), the same in every process."""
    order = list(ast.toposort())
    index = {u: i for i, u in enumerate(order)}
    return "\n".join(f"{u.op.name} {u.dtype!r} {[index[s] for s in u.src]} {u.arg!r}" for u in order)


def _cache_file(key: str) -> Path:
    return disk_cache_path("beam", key, ".json")


def read_cached(key: str) -> tuple[Opt, ...] | None:
    if (text := disk_cache_get("beam", key, ".json")) is None:
        return None
    try:
        entry = json.loads(text)
        if entry["version"] != SEARCH_VERSION or entry["key"] != key:
            raise ValueError("another version or another kernel")
        return tuple(Opt(OptOps[op], int(axis), int(amount)) for op, axis, amount in entry["opts"])
    except (ValueError, KeyError, TypeError) as e:  # corrupt or stale: search again and overwrite
        if DEBUG >= 1:
            print(f"BEAM cache: ignoring {_cache_file(key)} ({e})", file=sys.stderr)
        return None


def write_cached(key: str, opts: tuple[Opt, ...]) -> None:
    entry = {"version": SEARCH_VERSION, "key": key, "opts": [[o.op.name, o.axis, o.amount] for o in opts]}
    disk_cache_put("beam", key, json.dumps(entry).encode(), ".json")


def beam_search(lowered: UOp, renderer: Renderer, time_opts: Callable[[tuple[Opt, ...]], float],
                width: int) -> tuple[Opt, ...]:
    """The fastest opt list the search finds (see the module docstring), without the cache. `time_opts` gives the
    seconds a launch of the kernel with those opts takes (inf: they failed to build or run)."""
    beam: list[tuple[float, tuple[Opt, ...]]] = [(time_opts(()), ())]
    seen: set[tuple[Opt, ...]] = {()}
    for _ in range(MAX_STEPS):
        timed: list[tuple[float, tuple[Opt, ...]]] = []
        for _, opts in beam:
            state = OptState.from_lowered(lowered)
            for o in opts:
                state = apply_opt(state, o, renderer)
            for action in candidate_actions(state, renderer.has_local, len(renderer.tensor_cores)):
                cand = (*opts, action)
                if cand in seen:
                    continue
                seen.add(cand)
                try:
                    apply_opt(state, action, renderer)
                except OptError:
                    continue
                if math.isfinite(t := time_opts(cand)):
                    timed.append((t, cand))
        timed.sort(key=lambda x: x[0])
        if not timed or timed[0][0] >= beam[0][0] * MIN_GAIN:
            break
        beam = timed[:width]
        if DEBUG >= 2:
            print(f"BEAM step: {beam[0][0] * 1e6:.1f} us with {[str(o) for o in beam[0][1]]}", file=sys.stderr)
    return beam[0][1]


def beam_cache_key(ast: UOp, device_name: str, renderer: Renderer, compiler_key: str, width: int) -> str:
    """The key of a search result: the kernel, the device, its renderer and compiler (cache key) and the width."""
    return "\0".join((f"v{SEARCH_VERSION}", device_name, type(renderer).__qualname__, compiler_key, f"beam{width}",
                      ast_key(ast)))


def beam_opts(key: str, search: Callable[[], tuple[Opt, ...]]) -> tuple[Opt, ...]:
    """The cached search result under `key` (`beam_cache_key`), running `search` (and caching it) on a miss."""
    if (hit := read_cached(key)) is not None:
        return hit
    opts = search()
    write_cached(key, opts)
    return opts


__all__ = ["SEARCH_VERSION", "ast_key", "beam_cache_key", "beam_opts", "beam_search", "candidate_actions",
           "read_cached", "write_cached"]
