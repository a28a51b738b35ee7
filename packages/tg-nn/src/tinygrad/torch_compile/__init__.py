"""A `torch.compile` backend that runs PyTorch models on tinygrad.

After `pip install tg-nn[torch]`, `torch.compile(model, backend="tinygrad")` finds it through tg-nn's entry point
in torch's `torch_dynamo_backends` group; nothing needs importing. aot_autograd lowers the model (and, when it
trains, its backward pass) to aten ops, each aten op maps to Tensor ops (`ATEN_OPS` in `ops.py`) and each graph
runs under `TinyJit`. A graph with an op the table lacks runs in torch eager, with a `TinygradFallbackWarning`
naming the op.
"""
try:
    import torch  # noqa: F401
except ModuleNotFoundError as e:  # the backend is torch's plugin: without torch there is nothing to plug into
    raise ImportError("tinygrad.torch_compile needs PyTorch: pip install \"tg-nn[torch]\" (torch==2.13.0)") from e

from tinygrad.torch_compile.backend import TinygradFallbackWarning, compile_graph, tinygrad_backend, unsupported_ops
from tinygrad.torch_compile.ops import ATEN_OPS, core_aten_coverage

__all__ = ["ATEN_OPS", "TinygradFallbackWarning", "compile_graph", "core_aten_coverage", "tinygrad_backend",
           "unsupported_ops"]
