"""tinygrad.nn: layers (this module), `optim`, `lr_scheduler`, `state`, and `datasets` (imported on first use, as
`nn.datasets.mnist()` in tinygrad's examples).

    from tinygrad import Tensor, nn
    model = nn.Linear(4, 2); opt = nn.optim.Adam(nn.state.get_parameters(model))
"""

from tinygrad.nn import lr_scheduler, optim, state
from tinygrad.nn.layers import Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d, Embedding, Linear, LSTMCell
from tinygrad.nn.norm import (
                              BatchNorm,
                              BatchNorm1d,
                              BatchNorm2d,
                              BatchNorm3d,
                              GroupNorm,
                              InstanceNorm,
                              LayerNorm,
                              LayerNorm2d,
                              RMSNorm,
)
from tinygrad.nn.training import TRAINING, is_training

__all__ = ["TRAINING", "BatchNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Conv1d", "Conv2d",
           "ConvTranspose1d", "ConvTranspose2d", "Embedding", "GroupNorm", "InstanceNorm", "LSTMCell", "LayerNorm",
           "LayerNorm2d", "Linear", "RMSNorm", "is_training", "lr_scheduler", "optim", "state"]

#: submodules imported when first named, so that `nn.datasets.mnist()` works without importing them (they import
#: what a program that never uses them should not pay for)
_LAZY = ("datasets", "onnx", "gguf", "transformer", "whisper", "mamba", "yolov8", "diffusion")


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return importlib.import_module(f"tinygrad.nn.{name}")
    raise AttributeError(f"module 'tinygrad.nn' has no attribute {name!r}")
