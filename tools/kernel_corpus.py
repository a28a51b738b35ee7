"""Dump every kernel source of a fixed corpus of programs for every renderer, and compare two dumps.

    python tools/kernel_corpus.py dump DIR          # schedule the corpus on the CPU, render each kernel everywhere
    python tools/kernel_corpus.py diff OLD NEW      # which sources differ, per renderer (exit 1 if any)

A refactor of the compiler (renderers, opts, passes) should leave every source byte-identical; a diff names each
kernel that changed, so the change can be explained or measured. The corpus: kernels of the op table (odd shapes,
int64, symbolic sizes, random numbers, matmuls and convolutions large enough for the CPU's layout choices), one
training step of the README's MNIST model, a small ONNX ResNet and a LLaMA decode step. Each program is scheduled
on the CPU (the graphs the CPU runs); each kernel's AST is then rendered by every renderer importable here: the
CPU's C and LLVM paths, OpenCL, QCOM, WGSL, CUDA, AMD and Metal (renderers need no device, only their package; a
package that is not installed is looked up in this checkout's packages/). A kernel a renderer refuses is
recorded with the error, so a changed refusal is a diff too.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: (label, module, class name, keyword arguments): the renderers whose sources are dumped
RENDERERS: list[tuple[str, str, str, dict[str, Any]]] = [
    ("cpu-c", "tg_backend_cpu.renderer", "CPURenderer", {}),
    ("cpu-llvm", "tg_backend_cpu.llvm_renderer", "LLVMRenderer", {}),
    ("cl", "tg_backend_opencl.renderer", "OpenCLRenderer", {}),
    ("qcom", "tg_backend_qcom.renderer", "QCOMRenderer", {}),
    ("wgsl", "tg_backend_webgpu.renderer", "WGSLRenderer", {}),
    ("cuda", "tg_backend_cuda.renderer", "CUDARenderer", {"arch": "sm_90"}),
    ("amd", "tg_backend_amd.renderer", "AMDRenderer", {"arch": "gfx942"}),
    ("metal", "tg_backend_metal.renderer", "MetalRenderer", {}),
]


def _import_renderer(module: str, cls: str, kwargs: dict[str, Any]) -> Any:
    try:
        mod = importlib.import_module(module)
    except ImportError:
        src = ROOT / "packages" / f"tg-backend-{module.split('.')[0].removeprefix('tg_backend_')}" / "src"
        if not src.is_dir():
            raise
        sys.path.append(str(src))
        mod = importlib.import_module(module)
    return getattr(mod, cls)(**kwargs)


# ---- the corpus: each program returns the tensors whose schedule is dumped ----

def _ops() -> list[tuple[str, Callable[[], list[Any]]]]:
    from tinygrad import Tensor, Variable, dtypes

    def x(*shape: int) -> Tensor:
        return Tensor.empty(*shape, dtype=dtypes.float32)

    def conv(bs: int, cin: int, cout: int, hw: int, k: int, pad: int) -> list[Tensor]:
        return [x(bs, cin, hw, hw).conv2d(x(cout, cin, k, k), padding=pad)]

    n = Variable("n", 1, 64).bind(37)
    return [
        ("add_broadcast", lambda: [x(33, 1, 7) + x(1, 5, 7)]),
        ("where_cmp", lambda: [(x(17, 9) > 0).where(x(17, 9), x(9).exp())]),
        ("transcendental", lambda: [x(31).sin() + x(31).log2() * x(31).sqrt()]),
        ("int64_math", lambda: [(Tensor.empty(45, dtype=dtypes.int64) * 3 // 7) % 5]),
        ("half_cast", lambda: [x(19, 3).cast(dtypes.half).relu().cast(dtypes.float32)]),
        ("sum_axis", lambda: [x(13, 257).sum(axis=1), x(13, 257).sum(axis=0)]),
        ("max_argmax", lambda: [x(29, 11).max(axis=1), x(29, 11).argmax(axis=0)]),
        ("softmax", lambda: [x(7, 100).softmax(axis=-1)]),
        ("cumsum", lambda: [x(5, 300).cumsum(axis=1)]),
        ("permute_pad_flip", lambda: [x(3, 4, 5).permute(2, 0, 1).pad(((1, 0), None, (2, 1))).flip(0)]),
        ("gather", lambda: [x(50, 8)[Tensor.empty(12, dtype=dtypes.int32)]]),
        ("symbolic", lambda: [x(64, 16).shrink(((0, n), None)).sum(axis=0)]),
        ("rand", lambda: [Tensor.rand(1000), Tensor.randn(33)]),
        ("matmul_small", lambda: [x(33, 17) @ x(17, 5)]),
        ("matmul_packed", lambda: [x(256, 512) @ x(512, 512)]),
        ("gemv", lambda: [x(1, 1024) @ x(1024, 4096)]),
        ("conv_small", lambda: conv(1, 3, 8, 9, 3, 1)),
        ("conv_channels_last", lambda: conv(8, 16, 64, 10, 3, 0)),
        ("conv_padded", lambda: conv(4, 16, 32, 16, 3, 1)),
        ("conv_big_batch", lambda: conv(64, 32, 32, 24, 5, 0)),
    ]


def _mnist_step() -> list[Any]:
    from tinygrad import Tensor, nn
    sys.path.insert(0, str(ROOT / "examples"))
    from beautiful_mnist import Model  # type: ignore[import-not-found]
    Tensor.manual_seed(0)
    model = Model()
    opt = nn.optim.Adam(nn.state.get_parameters(model))
    with Tensor.train():
        loss = model(Tensor.empty(64, 1, 28, 28)).sparse_categorical_crossentropy(Tensor([i % 10 for i in range(64)]))
        opt.zero_grad()
        loss.backward()
        return [loss, *opt.schedule_step()]


def _onnx_resnet() -> list[Any]:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from tinygrad import Tensor
    from tinygrad.onnx import OnnxRunner
    rng = np.random.default_rng(0)

    def init(name: str, *shape: int) -> Any:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.1, name)
    nodes, inits = [], []
    prev, c = "x", 3
    for i, cout in enumerate((16, 16, 32)):
        inits += [init(f"w{i}", cout, c, 3, 3), init(f"s{i}", cout), init(f"b{i}", cout), init(f"m{i}", cout)]
        inits.append(numpy_helper.from_array(np.ones(cout, np.float32), f"v{i}"))
        nodes += [helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("BatchNormalization", [f"c{i}", f"s{i}", f"b{i}", f"m{i}", f"v{i}"], [f"n{i}"]),
                  helper.make_node("Relu", [f"n{i}"], [f"r{i}"])]
        if cout == c:
            nodes.append(helper.make_node("Add", [f"r{i}", prev], [f"a{i}"]))
            prev = f"a{i}"
        else:
            prev = f"r{i}"
        c = cout
    inits += [init("fc", 10, c), init("fcb", 10)]
    nodes += [helper.make_node("GlobalAveragePool", [prev], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
              helper.make_node("Gemm", ["f", "fc", "fcb"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "resnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    out = OnnxRunner(onnx.load_from_string(model.SerializeToString()))({"x": Tensor.empty(2, 3, 32, 32)})
    return list(out.values())


def _llama_decode() -> list[Any]:
    from tinygrad import Tensor, Variable
    from tinygrad.nn.state import get_parameters
    from tinygrad.nn.transformer import Llama, LlamaConfig
    Tensor.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=16, max_position_embeddings=64)
    model = Llama(cfg)
    Tensor.realize(*get_parameters(model))
    return [model(Tensor([[3]]), Variable("start_pos", 1, 63).bind(5))]


def programs() -> list[tuple[str, Callable[[], list[Any]]]]:
    return [*_ops(), ("mnist_step", _mnist_step), ("onnx_resnet", _onnx_resnet), ("llama_decode", _llama_decode)]


def program_asts(make: Callable[[], list[Any]]) -> list[Any]:
    """The kernel ASTs of one program, in order: those its construction ran (an ONNX graph's shape arithmetic, a
    model's weights), recorded where the CPU device builds runners, then those of the schedule of its outputs."""
    from tinygrad import Device, Tensor
    device = Device["CPU"]
    seen: dict[Any, None] = {}
    build = device.get_runner

    def recording(ast: Any, *args: Any, **kwargs: Any) -> Any:
        seen.setdefault(ast)
        return build(ast, *args, **kwargs)
    Tensor.manual_seed(0)
    device.get_runner = recording  # type: ignore[method-assign]
    try:
        outs = make()
    finally:
        del device.get_runner
    for si in Tensor.schedule(*outs):
        if not si.is_copy:
            seen.setdefault(si.ast)
    return list(seen)


def dump(out: Path, only: set[str] | None = None, labels: set[str] | None = None) -> int:
    os.environ.setdefault("DEV", "CPU")
    from tinygrad.codegen import get_program
    renderers = []
    for label, module, cls, kwargs in RENDERERS:
        if labels is not None and label not in labels:
            continue
        try:
            renderers.append((label, _import_renderer(module, cls, kwargs)))
        except Exception as e:  # a renderer that cannot be built here is reported, not dumped
            print(f"skip {label}: {type(e).__name__}: {e}", file=sys.stderr)
    kernels = 0
    for name, make in programs():
        if only is not None and name not in only:
            continue
        try:
            asts = program_asts(make)
        except ImportError as e:
            print(f"skip {name}: {e}", file=sys.stderr)
            continue
        for i, ast in enumerate(asts):
            for label, renderer in renderers:
                try:
                    src = get_program(ast, renderer).src
                except Exception:  # a refusal is part of the record
                    src = "ERROR " + traceback.format_exc(limit=0).strip()
                path = out / label / f"{name}.{i:03d}.src"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(src)
            kernels += 1
    print(f"{kernels} kernels x {len(renderers)} renderers -> {out}")
    return 0


def diff(old: Path, new: Path, show: int) -> int:
    changed = 0
    labels = sorted({p.name for p in old.iterdir()} | {p.name for p in new.iterdir()})
    for label in labels:
        a = {p.name: p for p in (old / label).glob("*.src")} if (old / label).is_dir() else {}
        b = {p.name: p for p in (new / label).glob("*.src")} if (new / label).is_dir() else {}
        only_old, only_new = sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())
        differ = sorted(k for k in a.keys() & b.keys() if a[k].read_bytes() != b[k].read_bytes())
        status = "identical" if not (only_old or only_new or differ) else \
            f"{len(differ)} differ, {len(only_old)} gone, {len(only_new)} new"
        print(f"{label:<9} {len(a.keys() & b.keys()):>4} common kernels: {status}")
        for k in only_old:
            print(f"  gone: {k}")
        for k in only_new:
            print(f"  new:  {k}")
        for k in differ:
            print(f"  differs: {k}")
            lines = list(difflib.unified_diff(a[k].read_text().splitlines(), b[k].read_text().splitlines(),
                                              f"old/{label}/{k}", f"new/{label}/{k}", lineterm="", n=1))
            for line in lines[:show]:
                print("    " + line)
        changed += len(only_old) + len(only_new) + len(differ)
    return 1 if changed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump", help="write every kernel source of the corpus under DIR/<renderer>/")
    d.add_argument("dir", type=Path)
    d.add_argument("--only", help="comma-separated program names (default: the whole corpus)")
    d.add_argument("--renderers", help=f"comma-separated renderers (default: all of {[r[0] for r in RENDERERS]})")
    c = sub.add_parser("diff", help="compare two dumps; exit 1 when any source differs")
    c.add_argument("old", type=Path)
    c.add_argument("new", type=Path)
    c.add_argument("--show", type=int, default=20, help="diff lines shown per changed kernel (default 20)")
    args = parser.parse_args()
    if args.cmd == "dump":
        def names(arg: str | None) -> set[str] | None:
            return None if arg is None else set(arg.split(","))
        return dump(args.dir, names(args.only), names(args.renderers))
    return diff(args.old, args.new, args.show)


if __name__ == "__main__":
    sys.exit(main())
