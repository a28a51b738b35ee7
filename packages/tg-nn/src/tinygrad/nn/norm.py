"""Normalisation layers. BatchNorm keeps PyTorch's running statistics while training (see `training.py` for what
"training" means); the others normalise each sample on its own and behave the same in both modes."""

from __future__ import annotations

from tinygrad import Tensor, dtypes
from tinygrad.nn.training import fresh_buffer, is_training


def _per_channel(ndim: int) -> tuple[int, ...]:
    """The shape that lays a per-channel (C,) tensor along axis 1 of an (N, C, ...) input."""
    return (1, -1) + (1,) * (ndim - 2)


def _need_channels(name: str, x: Tensor, channels: int) -> None:
    if x.ndim < 2 or x.shape[1] != channels:
        raise ValueError(f"{name} expects inputs (N, {channels}, ...) with the channels on axis 1, got shape {x.shape}")


class BatchNorm:
    """Batch normalisation over every axis but 1 (the channels), for inputs (N, C) or (N, C, ...).

    Training: normalise with the batch's statistics and, with `track_running_stats`, move `running_mean` and
    `running_var` (unbiased) towards them by `momentum` and count `num_batches_tracked`. These updates are lazy
    assigns: realize the running statistics with the step (for example `Tensor.realize(loss, *opt.schedule_step(),
    bn.running_mean, bn.running_var)`) so that their graph does not grow from step to step.
    Evaluation: normalise with the running statistics (the batch's when they are not tracked)."""

    def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True,
                 momentum: float = 0.1):
        self.eps, self.track_running_stats, self.momentum = eps, track_running_stats, momentum
        self.weight: Tensor | None = fresh_buffer(1.0, (sz,)).requires_grad_() if affine else None
        self.bias: Tensor | None = fresh_buffer(0.0, (sz,)).requires_grad_() if affine else None
        # statistics, not parameters: requires_grad=False keeps them out of an optimizer's updates and gradients
        self.num_batches_tracked = fresh_buffer(0, (1,), dtypes.int64).requires_grad_(False)
        if track_running_stats:
            self.running_mean = fresh_buffer(0.0, (sz,)).requires_grad_(False)
            self.running_var = fresh_buffer(1.0, (sz,)).requires_grad_(False)

    def calc_stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The batch's mean and biased variance per channel."""
        axes = tuple(a for a in range(x.ndim) if a != 1)
        mean = x.mean(axes)
        # the mean is detached in the variance (tinygrad's graph): d(var)/d(mean) is 0 at the batch mean, and
        # leaving that path out keeps its rounding out of the gradients
        var = (x - mean.detach().reshape((1, -1) + (1,) * (x.ndim - 2))).square().mean(axes)
        return mean, var

    def __call__(self, x: Tensor) -> Tensor:
        channels = self.running_mean.shape[0] if self.track_running_stats else (
            self.weight.shape[0] if self.weight is not None else x.shape[1])
        _need_channels("BatchNorm", x, channels)
        if is_training() or not self.track_running_stats:
            mean, var = self.calc_stats(x)
            if is_training() and self.track_running_stats:
                n = x.numel() // channels
                m = self.momentum
                # the running variance is the unbiased one, as in PyTorch
                unbiased = var.detach() * (n / max(n - 1, 1))
                self.running_mean.assign((self.running_mean * (1 - m) + mean.detach() * m).cast(
                    self.running_mean.dtype))
                self.running_var.assign((self.running_var * (1 - m) + unbiased * m).cast(self.running_var.dtype))
                self.num_batches_tracked.assign(self.num_batches_tracked + 1)
        else:
            mean, var = self.running_mean, self.running_var
        return x.batchnorm(self.weight, self.bias, mean, (var + self.eps).rsqrt())


BatchNorm1d = BatchNorm2d = BatchNorm3d = BatchNorm


class GroupNorm:
    """Split the channels into `num_groups` groups and normalise each (sample, group); per-channel affine."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
        if num_groups < 1 or num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels={num_channels} must be divisible by num_groups={num_groups}")
        self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
        self.weight: Tensor | None = fresh_buffer(1.0, (num_channels,)).requires_grad_() if affine else None
        self.bias: Tensor | None = fresh_buffer(0.0, (num_channels,)).requires_grad_() if affine else None

    def __call__(self, x: Tensor) -> Tensor:
        _need_channels("GroupNorm", x, self.num_channels)
        x = x.reshape(x.shape[0], self.num_groups, -1).layernorm(eps=self.eps).reshape(x.shape)
        if self.weight is None or self.bias is None:
            return x
        return x * self.weight.reshape(_per_channel(x.ndim)) + self.bias.reshape(_per_channel(x.ndim))


class InstanceNorm:
    """Normalise each (sample, channel) over its spatial positions; per-channel affine (on by default, unlike
    PyTorch's InstanceNorm2d, as in tinygrad)."""

    def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True):
        self.num_features, self.eps = num_features, eps
        self.weight: Tensor | None = fresh_buffer(1.0, (num_features,)).requires_grad_() if affine else None
        self.bias: Tensor | None = fresh_buffer(0.0, (num_features,)).requires_grad_() if affine else None

    def __call__(self, x: Tensor) -> Tensor:
        _need_channels("InstanceNorm", x, self.num_features)
        x = x.reshape(x.shape[0], self.num_features, -1).layernorm(eps=self.eps).reshape(x.shape)
        if self.weight is None or self.bias is None:
            return x
        return x * self.weight.reshape(_per_channel(x.ndim)) + self.bias.reshape(_per_channel(x.ndim))


class LayerNorm:
    """Normalise over the trailing `normalized_shape` dims; elementwise affine of that shape."""

    def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5, elementwise_affine: bool = True):
        self.normalized_shape: tuple[int, ...] = (normalized_shape,) if isinstance(normalized_shape, int) \
            else tuple(normalized_shape)
        self.axis = tuple(-1 - i for i in range(len(self.normalized_shape)))
        self.eps = eps
        self.weight: Tensor | None = None
        self.bias: Tensor | None = None
        if elementwise_affine:
            self.weight = fresh_buffer(1.0, self.normalized_shape).requires_grad_()
            self.bias = fresh_buffer(0.0, self.normalized_shape).requires_grad_()

    def __call__(self, x: Tensor) -> Tensor:
        n = len(self.normalized_shape)
        if x.shape[x.ndim - n:] != self.normalized_shape:
            raise ValueError(f"LayerNorm over the last dims {self.normalized_shape} got an input of shape {x.shape}")
        x = x.layernorm(axis=self.axis, eps=self.eps)
        if self.weight is None or self.bias is None:
            return x
        return x * self.weight + self.bias


class LayerNorm2d(LayerNorm):
    """LayerNorm over the channels of (N, C, H, W) inputs (each pixel on its own)."""

    def __call__(self, x: Tensor) -> Tensor:
        return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class RMSNorm:
    """x / sqrt(mean(x^2 over the last dim) + eps) * weight."""

    def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True):
        self.eps = eps
        self.weight: Tensor | None = fresh_buffer(1.0, (dim,)).requires_grad_() if elementwise_affine else None

    def _norm(self, x: Tensor) -> Tensor:
        return x * (x.square().mean(-1, keepdim=True) + self.eps).rsqrt()

    def __call__(self, x: Tensor) -> Tensor:
        x = self._norm(x.float()).cast(x.dtype) if x.dtype.is_float else self._norm(x.float())
        return x if self.weight is None else x * self.weight
