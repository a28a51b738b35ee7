"""tinygrad.onnx: run ONNX models with tinygrad.

    from tinygrad.onnx import OnnxRunner
    runner = OnnxRunner("model.onnx")                 # a path, the model's bytes (or a uint8 Tensor of them), or
                                                      # an onnx.ModelProto
    outputs = runner({"input": np_array_or_tensor})   # {output name: Tensor}

Reading models needs the `onnx` package (`pip install 'tg-nn[onnx]'`); importing this module does not. Every node
becomes Tensor operations on the device; shape arithmetic runs on the host with numpy. `python -m tinygrad.onnx
model.onnx` runs a model on random inputs and times it. tinygrad 0.14's import path, `tinygrad.nn.onnx`, gives the
same runner.

A damaged or hostile model fails with an OnnxError that names the node: a malformed node (a missing attribute, a
wrong count of inputs or pads) when it is loaded or built, and a node that would make a tensor out of all proportion
to the model and its inputs before anything is allocated (`OnnxRunner(..., max_tensor_bytes=)` or the environment
variable TG_ONNX_MAX_TENSOR_BYTES raises that limit for a trusted model).

Compile and ship (docs/onnx.md): `compile_onnx(model, "model.tgprog", {"x": (1, 3, 224, 224)})` captures the model
under TinyJit into one file (kernels as compiled, weights, launch order, input and output names, shapes, dtypes,
device); `load_compiled("model.tgprog")` loads it in a process without the model or onnx, and compiles nothing:
`program({"x": x})` gives the same outputs. On the command line: `python -m tinygrad.onnx compile MODEL.onnx OUT`
and `python -m tinygrad.onnx run OUT`.
"""

from tinygrad.onnx._compiled import CompiledOnnx, CompileResult, compile_onnx, load_compiled
from tinygrad.onnx._program_file import CompiledFileError
from tinygrad.onnx._proto import OnnxError
from tinygrad.onnx._runner import OnnxRunner

__all__ = ["CompileResult", "CompiledFileError", "CompiledOnnx", "OnnxError", "OnnxRunner", "compile_onnx",
           "load_compiled", "supported_ops"]


def supported_ops() -> list[str]:
    """The op types of the default ONNX domain with an implementation here (ops whose ONNX schema defines them as a
    function of other ops also run, expanded)."""
    from tinygrad.onnx._base import OPS
    return sorted(name for domain, name in OPS if domain == "")
