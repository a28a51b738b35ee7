"""Export a TinyJit-captured function out of Python: to dependency-free C (`export_c`) and to a WebGPU bundle for a
browser (`export_webgpu`). `python -m tinygrad.export` does it from a script or an ONNX file; docs/export.md."""

from tinygrad.export.c import export_c
from tinygrad.export.plan import ExportError
from tinygrad.export.webgpu import export_webgpu

__all__ = ["ExportError", "export_c", "export_webgpu"]
