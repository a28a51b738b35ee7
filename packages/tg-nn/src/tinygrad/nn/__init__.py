"""tinygrad.nn: layers (this module), `optim`, `lr_scheduler`, `state`, and `datasets` (import it explicitly).

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
