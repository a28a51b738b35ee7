"""Export a model to dependency-free C or to a WebGPU bundle (docs/export.md).

    python -m tinygrad.export model.py  --out build/      # a script: see below
    python -m tinygrad.export model.onnx --target webgpu --out web/

A script defines, at module level:
  model           the function to export (a TinyJit, or a plain function, which is wrapped in one): it takes the
                  input tensors positionally and returns a tensor, or a tuple, list or dict of tensors
  example_inputs  the inputs to capture it with: a list of Tensors (or a function returning one); their shapes and
                  dtypes are the exported program's
The script runs with __name__ == "__tinygrad_export__", so its `if __name__ == "__main__":` part does not.
An ONNX file runs through tinygrad.onnx's OnnxRunner under TinyJit; its inputs are random values of the declared
shapes (a symbolic dimension is taken as 1 unless given with --dim NAME=SIZE).
`--save-io` also writes the example inputs and the Python run's outputs as raw bytes (<prefix>_inputs.raw,
<prefix>_expected.raw), the files the generated C driver reads and writes.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from collections.abc import Callable
from typing import Any

import numpy as np


def _script_model(path: str) -> tuple[Callable[..., Any], list[Any], list[str] | None]:
    from tinygrad import Tensor, TinyJit
    from tinygrad.export.plan import ExportError

    ns = runpy.run_path(path, run_name="__tinygrad_export__")
    if "model" not in ns or "example_inputs" not in ns:
        missing = [k for k in ("model", "example_inputs") if k not in ns]
        raise ExportError(f"{path} defines no {' and no '.join(missing)}; an exported script defines `model` (the "
                          f"function to export) and `example_inputs` (a list of Tensors) at module level")
    fn, inputs = ns["model"], ns["example_inputs"]
    if callable(inputs) and not isinstance(inputs, Tensor):
        inputs = inputs()
    if isinstance(inputs, Tensor):
        inputs = [inputs]
    if not isinstance(inputs, (list, tuple)) or not all(isinstance(t, Tensor) for t in inputs):
        raise ExportError(f"{path}: example_inputs must be a list of Tensors, got {type(inputs).__name__}")
    if not callable(fn):
        raise ExportError(f"{path}: model must be a function, got {type(fn).__name__}")
    jit = fn if isinstance(fn, TinyJit) else TinyJit(fn)
    return jit, [t.realize() for t in inputs], None


def _onnx_model(path: str, dims: dict[str, int], seed: int) -> tuple[Callable[..., Any], list[Any], list[str]]:
    from tinygrad import Tensor
    from tinygrad.export.plan import ExportError
    from tinygrad.onnx import OnnxRunner
    from tinygrad.onnx.__main__ import _random_input

    runner = OnnxRunner(path, jit=True)
    rng = np.random.default_rng(seed)
    given: dict[str, np.ndarray] = {}
    for name, (elem, shape) in runner.input_spec().items():
        concrete = tuple(d if isinstance(d, int) and d > 0 else dims.get(str(d), 1) for d in shape)
        given[name] = _random_input(elem, concrete, rng)
    for _ in range(3):  # the first call runs eagerly, the second captures, the third replays
        runner({k: v.copy() for k, v in given.items()})
    jits = [j for j in runner._jits.values()]
    if len(jits) != 1 or jits[0] is None or jits[0].captured is None:
        raise ExportError(f"{path}: the model could not be captured by TinyJit (it reads device values on the host "
                          f"mid-graph, e.g. data-dependent shapes), so it cannot be exported")
    key = next(iter(runner._jits))
    if host := runner._host_outputs.get(key):
        raise ExportError(f"{path}: outputs {sorted(host)} are computed on the host, not by "
                          f"kernels; export writes the kernels' outputs only")
    names = [k for k, _, _ in key]
    return jits[0], [Tensor(given[k]).realize() for k in names], names


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tinygrad.export", description=__doc__.split("\n\n")[0],
                                 epilog="See docs/export.md.")
    ap.add_argument("model", help="a Python script (defining `model` and `example_inputs`) or an .onnx file")
    ap.add_argument("--target", choices=("c", "webgpu"), action="append", help="what to write (default: c); repeat "
                    "for both")
    ap.add_argument("--out", default=None, help="output folder (default: <model name>_export)")
    ap.add_argument("--prefix", default="net", help="file names and, in C, the functions' prefix (default: net)")
    ap.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE", help="ONNX: a symbolic dim's size")
    ap.add_argument("--seed", type=int, default=0, help="ONNX: seed of the random example inputs")
    ap.add_argument("--save-io", action="store_true", help="also write the example inputs and expected outputs")
    args = ap.parse_args(argv)

    from tinygrad import Tensor
    from tinygrad.export import ExportError, export_c, export_webgpu

    targets = args.target or ["c"]
    out = args.out or os.path.splitext(os.path.basename(args.model))[0] + "_export"
    try:
        dims = {}
        for item in args.dim:
            name, sep, size = item.partition("=")
            if not sep or not size.isdigit():
                raise ExportError(f"--dim {item!r}: expected NAME=SIZE with a positive integer size")
            dims[name] = int(size)
        if not os.path.isfile(args.model):
            raise ExportError(f"{args.model}: no such file")
        names: list[str] | None
        if args.model.endswith(".onnx"):
            jit, inputs, names = _onnx_model(args.model, dims, args.seed)
        else:
            jit, inputs, names = _script_model(args.model)
            for _ in range(3):
                jit(*inputs)
        result = jit(*inputs)
        manifest: dict = {}
        if "c" in targets:
            manifest = export_c(jit, out, args.prefix, input_names=names)
        if "webgpu" in targets:
            manifest = export_webgpu(jit, out, args.prefix, input_names=names)
    except ExportError as e:
        print(f"python -m tinygrad.export: {e}", file=sys.stderr)
        return 2
    if args.save_io:
        from tinygrad.export.c import write_atomic
        from tinygrad.export.plan import flat_outputs

        write_atomic(os.path.join(out, f"{args.prefix}_inputs.raw"), b"".join(t.numpy().tobytes() for t in inputs))
        outs = flat_outputs(result)
        write_atomic(os.path.join(out, f"{args.prefix}_expected.raw"),
                     b"".join(t.numpy().tobytes() for t in outs if isinstance(t, Tensor)))
    for p in manifest.get("inputs", []):
        print(f"input  {p.get('name', '')} {p['dtype']}{p['shape']}")
    for p in manifest.get("outputs", []):
        print(f"output {p.get('name', '')} {p['dtype']}{p['shape']}")
    print(f"wrote {', '.join(targets)} export to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
