"""tinygrad 0.14's module path for its ONNX runner: `from tinygrad.nn.onnx import OnnxRunner` gives this project's
runner (tinygrad.onnx), which takes the same model forms (a path, or a uint8 Tensor of the model's bytes) and the
same call, `runner({"input": tensor_or_array})` -> {output name: Tensor}."""

from tinygrad.onnx import OnnxError, OnnxRunner

__all__ = ["OnnxError", "OnnxRunner"]
