"""Linear, convolution, embedding and recurrent layers, with tinygrad's constructor signatures and attribute names
and PyTorch's default initialisations, so that weights copied from a torch module give the same outputs."""

from __future__ import annotations

import math
from collections.abc import Sequence

from tinygrad import Tensor, dtypes
from tinygrad.helpers import prod


def _tuple(x: int | Sequence[int], n: int, what: str) -> tuple[int, ...]:
    if isinstance(x, int):
        return (x,) * n
    out = tuple(x)
    if len(out) != n:
        raise ValueError(f"{what} {x!r} has {len(out)} entries; give one int or {n} (one per spatial dim)")
    return out


def _uniform_bias(n: int, fan_in: int) -> Tensor:
    # PyTorch's default bias: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    if fan_in <= 0:  # PyTorch's bound 0 (uniform itself needs low < high)
        return Tensor.zeros(n, requires_grad=True).contiguous().realize()
    bound = 1 / math.sqrt(fan_in)
    return Tensor.uniform(n, low=-bound, high=bound, requires_grad=True)


def _kaiming_sqrt5(*shape: int) -> Tensor:
    # PyTorch's default weight: kaiming_uniform(a=sqrt(5)), fan_in = prod(shape[1:]), i.e. U(+-1/sqrt(fan_in)). The
    # bound is written as tinygrad writes it (1 / sqrt(fan_in)), so that after the same seed Linear and Conv2d (groups
    # 1) draw tinygrad's weights bit for bit; kaiming_uniform's sqrt(6 / (1 + a^2) / fan_in) rounds differently
    fan_in = prod(shape[1:])
    if fan_in <= 0:  # no elements
        return Tensor.zeros(*shape, requires_grad=True).contiguous().realize()
    bound = 1 / math.sqrt(fan_in)
    return Tensor.uniform(*shape, low=-bound, high=bound, requires_grad=True)


def _check_channels(name: str, in_channels: int, out_channels: int, groups: int) -> None:
    if groups < 1 or in_channels % groups or out_channels % groups:
        raise ValueError(f"{name}: in_channels={in_channels} and out_channels={out_channels} must both be divisible "
                         f"by groups={groups}")


class Linear:
    """y = x @ weight.T + bias, weight (out_features, in_features) as in PyTorch."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        self.weight = _kaiming_sqrt5(out_features, in_features)
        self.bias = _uniform_bias(out_features, in_features) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        if x.shape[-1:] != self.weight.shape[1:]:
            raise ValueError(f"Linear expects inputs with {self.weight.shape[1]} features in the last dim, "
                             f"got shape {x.shape}")
        return x.linear(self.weight.T, self.bias)


class Conv2d:
    """Convolution over len(kernel_size) spatial dims (2 for an int), weight (out, in/groups, *kernel_size).
    `padding`: int, one int per dim, tinygrad's 2*n form, or 'same' / 'valid'."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride: int = 1,
                 padding: int | tuple[int, ...] | str = 0, dilation: int = 1, groups: int = 1, bias: bool = True):
        _check_channels("Conv2d", in_channels, out_channels, groups)
        self.kernel_size = _tuple(kernel_size, 2, "kernel_size") if isinstance(kernel_size, int) else tuple(kernel_size)
        if isinstance(padding, str) and padding not in ("same", "valid"):
            raise ValueError(f"padding={padding!r} is not supported; use 'same', 'valid' or integers")
        if padding == "same" and any(s != 1 for s in ((stride,) if isinstance(stride, int) else stride)):
            raise ValueError(f"padding='same' needs stride 1 (got stride={stride}), as in tinygrad and PyTorch: the "
                             f"output size would be ambiguous; pad with integers instead")
        self.stride, self.dilation, self.groups, self.padding = stride, dilation, groups, padding
        self.weight = _kaiming_sqrt5(out_channels, in_channels // groups, *self.kernel_size)
        self.bias = _uniform_bias(out_channels, prod(self.weight.shape[1:])) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        return x.conv2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation,
                        padding=self.padding)


def Conv1d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int | str = 0,
           dilation: int = 1, groups: int = 1, bias: bool = True) -> Conv2d:
    """A Conv2d with one spatial dim: inputs (N, C, L)."""
    return Conv2d(in_channels, out_channels, (kernel_size,), stride, padding, dilation, groups, bias)


class ConvTranspose2d(Conv2d):
    """Transposed convolution, weight (in, out/groups, *kernel_size) as in PyTorch."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride: int = 1,
                 padding: int = 0, output_padding: int = 0, dilation: int = 1, groups: int = 1, bias: bool = True):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
        # PyTorch computes fan_in from weight.shape[1:] here too, i.e. (out/groups) * prod(kernel_size)
        self.weight = _kaiming_sqrt5(in_channels, out_channels // groups, *self.kernel_size)
        self.bias = _uniform_bias(out_channels, prod(self.weight.shape[1:])) if bias else None
        self.output_padding = output_padding

    def __call__(self, x: Tensor) -> Tensor:
        if isinstance(self.padding, str):
            raise ValueError("ConvTranspose2d takes integer padding, not a string")
        return x.conv_transpose2d(self.weight, self.bias, groups=self.groups, stride=self.stride,
                                  dilation=self.dilation, padding=self.padding, output_padding=self.output_padding)


def ConvTranspose1d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
                    output_padding: int = 0, dilation: int = 1, groups: int = 1, bias: bool = True) -> ConvTranspose2d:
    """A ConvTranspose2d with one spatial dim: inputs (N, C, L)."""
    return ConvTranspose2d(in_channels, out_channels, (kernel_size,), stride, padding, output_padding, dilation,
                           groups, bias)


class Embedding:
    """Rows of `weight` (vocab_size, embed_size) picked by integer indices of any shape; N(0, 1) init (PyTorch's)."""

    def __init__(self, vocab_size: int, embed_size: int):
        self.vocab_size, self.embed_size = vocab_size, embed_size
        self.weight = Tensor.normal(vocab_size, embed_size, requires_grad=True)

    def __call__(self, idx: Tensor) -> Tensor:
        if not idx.dtype.is_int:
            raise TypeError(f"Embedding takes integer indices, got {idx.dtype}; cast them with .int()")
        # integer-tensor indexing: a one-hot sum that the compiler folds into a direct load of the picked rows (its
        # gradient is a scatter-add). A negative or too large index reads zeros, as tinygrad's Embedding does, so
        # negatives are sent out of range instead of being wrapped as t[idx] would.
        return self.weight[(idx < 0).where(self.vocab_size, idx)]


class LSTMCell:
    """One LSTM step: (x, (h, c)) -> (h', c'), gates in PyTorch's order input, forget, cell, output."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        bound = 1 / math.sqrt(hidden_size)  # PyTorch initialises every weight and bias U(+-1/sqrt(hidden_size))
        self.hidden_size = hidden_size
        self.weight_ih = Tensor.uniform(hidden_size * 4, input_size, low=-bound, high=bound, requires_grad=True)
        self.weight_hh = Tensor.uniform(hidden_size * 4, hidden_size, low=-bound, high=bound, requires_grad=True)
        self.bias_ih: Tensor | None = None
        self.bias_hh: Tensor | None = None
        if bias:
            self.bias_ih = Tensor.uniform(hidden_size * 4, low=-bound, high=bound, requires_grad=True)
            self.bias_hh = Tensor.uniform(hidden_size * 4, low=-bound, high=bound, requires_grad=True)

    def __call__(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        if hc is None:
            zeros = Tensor.zeros(*x.shape[:-1], self.hidden_size, dtype=x.dtype if x.dtype.is_float else dtypes.float,
                                 device=x.device)
            hc = (zeros, zeros)
        h, c = hc
        gates = x.linear(self.weight_ih.T, self.bias_ih) + h.linear(self.weight_hh.T, self.bias_hh)
        i, f, g, o = gates.chunk(4, dim=-1)
        c_new = f.sigmoid() * c + i.sigmoid() * g.tanh()
        return o.sigmoid() * c_new.tanh(), c_new
