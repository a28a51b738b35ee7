"""The internals list: the parts of tinygrad that this project does not mirror, and why.

tinygrad's tests and examples import these; they belong to tinygrad's own compiler and runtime (its
kernel IR passes, renderer classes, device runtimes, schedule format), which this project replaces with
its own (DESIGN.md). When the tinygrad under test lacks one of them, `standins.py` puts a stand-in in its
place, so that the file still collects and only the tests that use it fail. Both tinygrad 0.14.0 and this
project run under the same stand-ins. Everything not on this list is public surface that must exist here
with tinygrad's semantics.
"""

from __future__ import annotations

#: whole modules (and everything under them), with the reason
MODULES: dict[str, str] = {
    "tinygrad.codegen": "tinygrad's kernel compiler (rewrite passes, linearizer, to_program); ours lowers its own "
                        "kernel IR (tinygrad.codegen here is a different package with the same name)",
    "tinygrad.renderer": "tinygrad's renderer classes (NIRRenderer, PTXRenderer, X86Renderer, Renderer); ours render "
                         "our IR and are owned by the backend packages",
    "tinygrad.runtime": "tinygrad's device runtimes (ops_python, HCQ graphs, support.*); our devices are plugins "
                        "(tg-backend-*) behind the device contract (tinygrad.runtime here is the Compiled base, "
                        "runners and compile cache they share)",
    "tinygrad.engine.realize": "tinygrad's linear-schedule executor (its lowering, graph batching, ExecItems); ours "
                               "runs ScheduleItems. The user-level pair is here: run_linear and compile_linear "
                               "take what Tensor.linear_with_vars returns",
    "tinygrad.engine.schedule": "tinygrad's scheduler internals; ours is tinygrad.engine.dispatch",
    "tinygrad.schedule": "tinygrad's rangeify/kernel-splitting passes",
    "tinygrad.viz.serve": "tinygrad's graph viewer server; ours is tinygrad.viz with its own page",
    "tinygrad.apps": "tinygrad's application modules (its LLM server lives under tinygrad.llm here)",
}

#: single names inside public modules, with the reason
NAMES: dict[str, dict[str, str]] = {
    "tinygrad.helpers": {
        "Target": "tinygrad's renderer target record (device:renderer:arch); DEV here parses the same syntax "
                  "but devices pick their renderer themselves",
        "CAPTURE_PROCESS_REPLAY": "tinygrad's process-replay CI tool",
        "TRACK_MATCH_STATS": "statistics of tinygrad's pattern matcher",
    },
    "tinygrad.uop.ops": {
        "KernelInfo": "metadata of tinygrad's kernel ASTs",
        "PatternMatcher": "tinygrad's rewrite engine; ours is tinygrad.uop.rewrite with its own API",
        "UPat": "pattern of tinygrad's rewrite engine",
        "graph_rewrite": "tinygrad's rewrite driver",
        "track_rewrites": "tinygrad's rewrite tracing",
        "Ops.CUSTOM_FUNCTION": "the op of tinygrad's runtime graph calls (a batch of kernels as one call, HCQ "
                               "submissions) in a captured linear; no call here is one (docs/jit.md)",
        "Ops.PROGRAM": "the op of tinygrad's compiled-program nodes; calls here hold the kernel's SINK",
        "deconstruct_function": "pickles the lambdas of tinygrad's rewrite patterns by their code objects; ours "
                                "pickle no functions (a pickled TinyJit leaves its function out)",
    },
    "tinygrad.engine.jit": {
        "MultiGraphRunner": "tinygrad's multi-device graph runner",
        "GraphRunner": "tinygrad's graph runner base class",
        "ExecItem": "tinygrad's executor item; captured steps here are tinygrad.engine.jit_capture records",
    },
    "tinygrad.device": {
        "Compiler": "tinygrad's compiler base class; ours live in the backend packages",
        "CompileError": "tinygrad's compiler error class",
    },
}


def is_internal(module: str, name: str | None = None) -> bool:
    """Whether `module` (or the name `name` in it) is on the list."""
    if any(module == m or module.startswith(m + ".") for m in MODULES):
        return True
    return name is not None and name in NAMES.get(module, {})
