"""What VIZ=1 records, kept as plain data (dicts, lists, strings) so that recording never keeps a graph alive.

The engine calls in here behind one `VIZ` check each: `record_schedule` (tinygrad/engine/schedule.py) for the tensor
graph a schedule started from and its items, `record_kernel` (get_program in tinygrad/codegen) for the AST after each
pass, the source and the program, and `record_rewrite` (graph_rewrite) to count which rewrites ran for the kernel or
schedule being built.

The trace (`trace()`, the JSON that `save` writes and the page reads) is

    {"format": "tinygrad-viz", "version": 1, "created": ..., "argv": [...], "limits": {...},
     "schedules": [{"id", "seq", "name", "devices", "graph", "items", "rewrites", "time_ms"}],
     "kernels": [{"id", "seq", "name", "device", "ast", "nodes", "passes", "source", "program", "rewrites",
                  "timings"?}],
     "dropped": {"kernels": n, "schedules": n}, "profile": {Chrome trace} | null}

A kernel's `nodes` is one table for all its passes: node i is {"id": i, "op", "dtype", "arg" (repr, shortened), "src"
(ids, or null for a node that only appears as the cut-off source of a truncated pass)}; a UOp keeps its id across
passes (UOps are hash-consed, so an untouched node is the same object), which is what the page's diff compares. A
pass is {"name", "ids" (the nodes it holds, sources first), "total" (nodes before truncation), "truncated",
"linear" (the ids are the program order)}. A schedule's `graph` is one such table with one pass, its nodes with a
"shape". `items` lists the schedule's kernels and copies, each with `ast`: the number kernels carry in their own
`ast` field, so the page can find which kernel ran an item (kernels compile later, and once per AST).
"""

from __future__ import annotations

import atexit
import datetime
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tinygrad.helpers import atomic_write
from tinygrad.uop.ops import Ops, UOp, post_order

if TYPE_CHECKING:
    from tinygrad.engine.schedule_item import ScheduleItem

FORMAT, VERSION = "tinygrad-viz", 1
#: where the trace goes unless $VIZ_PATH says otherwise (relative to the working directory at exit)
DEFAULT_PATH = "tinygrad_viz.json"


def _limit(name: str, default: int) -> int:
    try:
        return max(int(os.environ.get(name, default)), 1)
    except ValueError:
        return default


#: nodes one pass keeps (the ones nearest the output: a truncated graph still shows what the kernel stores)
MAX_NODES = _limit("VIZ_MAX_NODES", 2000)
#: kernels and schedules kept; later ones are only counted, so a long training run stays within memory
MAX_KERNELS = _limit("VIZ_MAX_KERNELS", 1000)
MAX_SCHEDULES = _limit("VIZ_MAX_SCHEDULES", 1000)
MAX_ARG = 160  # characters of an arg's repr (a BUFFER's arg or a long tuple would otherwise dominate the file)
MAX_SOURCE = 256_000  # characters of rendered source kept per kernel
MAX_REWRITE_SITES = 64  # distinct graph_rewrite callers counted per kernel

_lock = threading.Lock()  # precompile renders on the main thread, but BEAM and user threads may compile too
_kernels: list[dict[str, Any]] = []
_schedules: list[dict[str, Any]] = []
_dropped = {"kernels": 0, "schedules": 0}
# AST -> the number that links schedule items to kernels; holds the ASTs, as the device's runner cache already does
_ast_ids: dict[UOp, int] = {}
_seq = 0
_exit_registered = False
_pending = threading.local()  # graph_rewrite calls since the last kernel or schedule on this thread


def _next_seq() -> int:
    global _seq
    _seq += 1
    return _seq


def _ast_id(ast: UOp) -> int | None:
    if (got := _ast_ids.get(ast)) is not None:
        return got
    if len(_ast_ids) >= 4 * MAX_KERNELS:
        return None
    _ast_ids[ast] = len(_ast_ids)
    return _ast_ids[ast]


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def _dtype_name(u: UOp) -> str:
    return str(u.dtype).removeprefix("dtypes.")


class NodeTable:
    """Serialises UOps into one id-numbered table; the same UOp gets the same id every time it is met."""

    def __init__(self, shapes: bool = False):
        self.ids: dict[UOp, int] = {}
        self.nodes: list[dict[str, Any]] = []
        self.shapes = shapes

    def _entry(self, u: UOp) -> int:
        if (got := self.ids.get(u)) is not None:
            return got
        i = self.ids[u] = len(self.nodes)
        arg = None if u.arg is None else _short(repr(u.arg), MAX_ARG)
        node: dict[str, Any] = {"id": i, "op": u.op.name, "dtype": _dtype_name(u), "arg": arg, "src": None}
        if self.shapes:
            try:
                if u.has_shape:
                    node["shape"] = [s if isinstance(s, int) else repr(s) for s in u.shape]
            except Exception:  # a node whose shape cannot be inferred still gets drawn
                pass
        self.nodes.append(node)
        return i

    def _full(self, u: UOp) -> int:
        i = self._entry(u)
        node = self.nodes[i]
        if node["src"] is None:
            node["src"] = [self._entry(s) for s in u.src]
        return i

    def graph(self, name: str, roots: Sequence[UOp]) -> dict[str, Any]:
        """A pass holding everything reachable from `roots`, at most MAX_NODES of it (the last in sources-first
        order, so the outputs stay; the sources a kept node loses are still named in the table, without their own)."""
        order = post_order(roots)
        kept = order[-MAX_NODES:]
        return {"name": name, "ids": [self._full(u) for u in kept], "total": len(order),
                "truncated": len(kept) < len(order), "linear": False}

    def program(self, name: str, program: Sequence[UOp]) -> dict[str, Any]:
        """A linearized pass: the program's own order, cut after MAX_NODES instructions."""
        kept = program[:MAX_NODES]
        return {"name": name, "ids": [self._full(u) for u in kept], "total": len(program),
                "truncated": len(kept) < len(program), "linear": True}


def _take_rewrites() -> list[dict[str, Any]]:
    sites: dict[str, dict[str, Any]] | None = getattr(_pending, "sites", None)
    _pending.sites = {}
    return list(sites.values()) if sites else []


def record_rewrite(root: UOp, out: UOp, steps: int) -> None:
    """graph_rewrite finished: count it under its caller (where a pass calls it from names the pass)."""
    sites: dict[str, dict[str, Any]] | None = getattr(_pending, "sites", None)
    if sites is None:
        sites = _pending.sites = {}
    frame = sys._getframe(2)  # 0: here, 1: graph_rewrite, 2: the pass that called it
    site = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_code.co_name}"
    entry = sites.get(site)
    if entry is None:
        if len(sites) >= MAX_REWRITE_SITES:
            return
        entry = sites[site] = {"site": site, "calls": 0, "steps": 0, "changed": 0}
    entry["calls"] += 1
    entry["steps"] += steps
    entry["changed"] += out is not root


def _register_exit() -> None:
    global _exit_registered
    if not _exit_registered:
        _exit_registered = True
        atexit.register(_at_exit)


def record_kernel(spec: Any, device: str, passes: Sequence[tuple[str, UOp | Sequence[UOp]]]) -> None:
    """One kernel through get_program: `passes` are (name, the sink after it, or the program once linearized);
    `spec` is the ProgramSpec it rendered (typed Any: the class lives in tg-compiler, which core does not import)."""
    rewrites = _take_rewrites()
    with _lock:
        if len(_kernels) >= MAX_KERNELS:
            _dropped["kernels"] += 1
            return
        _register_exit()
        table = NodeTable()
        recorded = [table.graph(name, (g,)) if isinstance(g, UOp) else table.program(name, g) for name, g in passes]
        first = passes[0][1] if passes else None
        src: str = spec.src
        _kernels.append({
            "id": len(_kernels), "seq": _next_seq(), "name": spec.name, "device": device,
            "ast": _ast_id(first) if isinstance(first, UOp) else None,
            "nodes": table.nodes, "passes": recorded,
            "source": _short(src, MAX_SOURCE), "source_truncated": len(src) > MAX_SOURCE,
            "program": {"name": spec.name, "global_size": spec.global_size, "local_size": spec.local_size,
                        "estimated_ops": spec.estimated_ops, "estimated_bytes": spec.estimated_bytes,
                        "applied_opts": list(spec.applied_opts), "param_indices": list(spec.param_indices),
                        "var_names": list(spec.var_names)},
            "rewrites": rewrites,
        })


def record_schedule(outputs: list[UOp], devices: list[str],
                    create: Callable[[list[UOp], list[str]], tuple[list[ScheduleItem], dict[UOp, UOp], list[UOp]]]
                    ) -> tuple[list[ScheduleItem], dict[UOp, UOp], list[UOp]]:
    """Run the scheduler (`create`) on `outputs` and record the graph it was given and the items it made."""
    _take_rewrites()  # what ran before belongs to no schedule
    st = time.perf_counter()
    result = create(outputs, devices)
    elapsed = time.perf_counter() - st
    rewrites = _take_rewrites()
    with _lock:
        if len(_schedules) >= MAX_SCHEDULES:
            _dropped["schedules"] += 1
            return result
        _register_exit()
        table = NodeTable(shapes=True)
        graph = table.graph("tensor graph", (UOp(Ops.SINK, src=tuple(outputs)),))
        items = [{"kind": "copy" if si.is_copy else "kernel", "device": si.device, "ast": _ast_id(si.ast),
                  "bufs": [_short(repr(b), MAX_ARG) for b in si.bufs]} for si in result[0]]
        _schedules.append({"id": len(_schedules), "seq": _next_seq(), "name": f"schedule {len(_schedules)}",
                           "devices": sorted(set(devices)), "nodes": table.nodes, "graph": graph, "items": items,
                           "rewrites": rewrites, "time_ms": round(elapsed * 1e3, 3)})
    return result


def _launch_key(name: str, gsize: Any, lsize: Any, ops: Any, nbytes: Any) -> str:
    # a launch names its kernel only by name, which kernels of one shape share (E_4); sizes and estimates tell most
    # of them apart. JSON so that tuples (recorded) and lists (read back) compare equal.
    return json.dumps([name, gsize, lsize, ops, nbytes])


def _timings(profile_trace: dict[str, Any]) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Launch count and device time (µs) from a PROFILE trace, per launch key and per kernel name; and compile time
    (ms) per kernel name."""
    launches: dict[str, dict[str, float]] = {}
    compiles: dict[str, float] = {}
    for ev in profile_trace.get("traceEvents", []):
        if ev.get("ph") != "X":
            continue
        dur, args = float(ev.get("dur", 0.0)), ev.get("args", {})
        if ev.get("cat") == "kernel":
            key = _launch_key(ev["name"], args.get("global_size"), args.get("local_size"), args.get("estimated_ops"),
                              args.get("estimated_bytes"))
            for k in (key, ev["name"]):
                t = launches.setdefault(k, {"count": 0, "total_us": 0.0, "min_us": dur, "max_us": dur})
                t["count"] += 1
                t["total_us"] += dur
                t["min_us"], t["max_us"] = min(t["min_us"], dur), max(t["max_us"], dur)
        elif ev.get("cat") == "compile":
            kernel = args.get("kernel", ev["name"])
            compiles[kernel] = compiles.get(kernel, 0.0) + dur / 1e3
    return launches, compiles


def trace() -> dict[str, Any]:
    """Everything recorded so far, with the PROFILE trace (when PROFILE=1 recorded anything) and the launch timings
    it holds joined to the kernels by name, sizes and estimates (by name alone where those do not match, marked
    "by_name": kernels of one name then share them)."""
    from tinygrad.engine import profile

    prof = profile.trace()
    has_profile = any(ev.get("ph") == "X" for ev in prof["traceEvents"])
    launches, compiles = _timings(prof) if has_profile else ({}, {})
    with _lock:
        kernels = []
        for k in _kernels:
            k = dict(k)
            p = k["program"]
            key = _launch_key(k["name"], p["global_size"] and list(p["global_size"]),
                              p["local_size"] and list(p["local_size"]), p["estimated_ops"], p["estimated_bytes"])
            t, by_name = launches.get(key), False
            if t is None and (t := launches.get(k["name"])) is not None:
                by_name = True
            if t is not None:
                k["timings"] = {**t, "mean_us": t["total_us"] / max(t["count"], 1), "by_name": by_name}
            if (c := compiles.get(k["name"])) is not None:
                k["compile_ms"] = c
            kernels.append(k)
        return {"format": FORMAT, "version": VERSION,
                "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "argv": list(sys.argv),
                "limits": {"max_nodes": MAX_NODES, "max_kernels": MAX_KERNELS, "max_schedules": MAX_SCHEDULES},
                "schedules": list(_schedules), "kernels": kernels, "dropped": dict(_dropped),
                "profile": prof if has_profile else None}


def default_path() -> str:
    return os.path.abspath(os.environ.get("VIZ_PATH") or DEFAULT_PATH)


def save(path: str | None = None, data: dict[str, Any] | None = None) -> str:
    """Write the trace (this process's, unless `data` is given) as JSON; returns the absolute path."""
    path = os.path.abspath(path) if path is not None else default_path()
    data = trace() if data is None else data
    with atomic_write(path, "w") as f:  # a reader, or a crash, never leaves half a trace
        json.dump(data, f, separators=(",", ":"))
    return path


def has_records() -> bool:
    return bool(_kernels or _schedules)


def clear() -> None:
    """Forget everything recorded, and the save at exit (tests record under Context(VIZ=1) and clean up)."""
    global _exit_registered, _seq
    with _lock:
        _kernels.clear()
        _schedules.clear()
        _ast_ids.clear()
        _dropped.update(kernels=0, schedules=0)
        _seq = 0
        if _exit_registered:
            atexit.unregister(_at_exit)
            _exit_registered = False
    _take_rewrites()


def should_serve() -> bool:
    """VIZ_SERVE=0 never serves at exit, VIZ_SERVE=1 always does; otherwise only an interactive run (stdin a
    terminal) does, so that scripts, CI and pipes exit instead of waiting for a Ctrl-C."""
    choice = os.environ.get("VIZ_SERVE", "")
    if choice in ("0", "1"):
        return choice == "1"
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):  # stdin closed
        return False


def _at_exit() -> None:
    if not has_records():
        return
    try:
        path = save()
    except OSError as e:
        print(f"VIZ: could not write the trace to {default_path()}: {e}; set VIZ_PATH to a writable file",
              file=sys.stderr)
        return
    print(f"VIZ: wrote {len(_kernels)} kernels and {len(_schedules)} schedules to {path}", file=sys.stderr)
    if not should_serve():
        print(f"VIZ: open it with: python -m tinygrad.viz {path}", file=sys.stderr)
        return
    from tinygrad.viz.server import serve_file

    serve_file(path)
