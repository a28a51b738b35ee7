"""The aten op table: each aten overload the backend runs, mapped to a small function of tinygrad Tensors.

The functions take the op's arguments as torch's schema orders them, with every tensor already a tinygrad
`Tensor` and every other argument (ints, floats, lists, dtypes) as torch passes it. They return a Tensor, a tuple
of Tensors (ops with several outputs) or a plain Python value (the symbolic-size helpers).

Semantics are PyTorch's, not tinygrad's: the caller casts each result to the dtype torch's own shape propagation
gave the node, and the arithmetic ops cast their operands to that dtype first (`result_dtype()`), so integer
division, type promotion and the dtypes of reductions follow torch. Backward ops whose closed form is long are
the vector-Jacobian product of the forward op computed by tinygrad's autograd (`_vjp`).
"""
from __future__ import annotations

import contextvars
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from tinygrad import Device, Tensor, dtypes
from tinygrad.dtype import DType

aten = torch.ops.aten

# torch dtype -> tinygrad dtype, for every dtype the backend moves across the boundary
TORCH_TO_TINY: dict[torch.dtype, DType] = {
    torch.float32: dtypes.float32, torch.float16: dtypes.float16, torch.bfloat16: dtypes.bfloat16,
    torch.float64: dtypes.float64, torch.int8: dtypes.int8, torch.int16: dtypes.int16, torch.int32: dtypes.int32,
    torch.int64: dtypes.int64, torch.uint8: dtypes.uint8, torch.bool: dtypes.bool,
}


class Unsupported(Exception):
    """An op the table has, called with arguments it does not handle (the graph then runs in torch)."""


# the torch value (a FakeTensor, a tuple of them or a SymInt) that shape propagation gave the node being run, and
# those of its arguments (None for arguments that are not graph nodes)
current_meta: contextvars.ContextVar[Any] = contextvars.ContextVar("current_meta", default=None)
current_arg_metas: contextvars.ContextVar[tuple[Any, ...]] = contextvars.ContextVar("current_arg_metas", default=())


def result_dtype(i: int = 0) -> DType:
    """The tinygrad dtype of the node's (i-th) output, as torch computed it."""
    meta = current_meta.get()
    if isinstance(meta, (tuple, list)):
        meta = meta[i]
    if not isinstance(meta, torch.Tensor):
        raise Unsupported("the graph carries no dtype for this node (it was not traced by aot_autograd)")
    if meta.dtype not in TORCH_TO_TINY:
        raise Unsupported(f"dtype {meta.dtype} has no tinygrad counterpart")
    return TORCH_TO_TINY[meta.dtype]


def _cast(x: Any, d: DType) -> Any:
    return x.cast(d) if isinstance(x, Tensor) and x.dtype != d else x


def _binary(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """An elementwise op computed in torch's result dtype: both operands are cast to it first (keyword arguments
    such as alpha or rounding_mode pass through)."""
    def run(a: Any, b: Any, *rest: Any, **kwargs: Any) -> Tensor:
        d = result_dtype()
        a, b = _cast(a, d), _cast(b, d)
        if not isinstance(a, Tensor):
            a = Tensor(a, dtype=d, device=b.device)
        return fn(a, b, *rest, **kwargs)
    return run


def _compare(fn: Callable[[Any, Any], Tensor]) -> Callable[..., Tensor]:
    """A comparison: torch compares in the operands' promoted dtype (a float scalar lifts an int tensor)."""
    def run(a: Any, b: Any) -> Tensor:
        if isinstance(a, Tensor) and isinstance(b, float) and not a.dtype.is_float:
            a = a.cast(dtypes.float32)
        return fn(a, b)
    return run


def _unary_float(fn: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    """A float op: torch computes integer inputs in its default float dtype."""
    return lambda x: fn(_cast(x, result_dtype()))


def _dims(x: Tensor, dims: Sequence[int] | int | None) -> tuple[int, ...]:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return tuple(range(x.ndim))
    if isinstance(dims, int):
        dims = (dims,)
    return tuple(d % max(x.ndim, 1) for d in dims)


def _vjp(fn: Callable[..., Tensor], primals: Sequence[Tensor], grad: Tensor, mask: Sequence[bool]) -> list[Any]:
    """The vector-Jacobian product of fn at primals for the incoming grad (None where mask says not needed)."""
    leaves = [p.detach() for p in primals]
    wanted = [leaf for leaf, m in zip(leaves, mask) if m]
    grads = iter(fn(*leaves).gradient(*wanted, gradient=grad) if wanted else [])
    return [next(grads) if m else None for m in mask]


# ---- creation ----

def _device() -> str:
    return Device.DEFAULT


def _full(size: Sequence[int], value: Any, dtype: Any = None, **_: Any) -> Tensor:
    return Tensor.full(tuple(size), value, dtype=result_dtype(), device=_device())


def _full_like(x: Tensor, value: Any, dtype: Any = None, **_: Any) -> Tensor:
    return Tensor.full(x.shape, value, dtype=result_dtype(), device=x.device)


def _arange(start: Any, end: Any = None, step: Any = 1, **_: Any) -> Tensor:
    if end is None:
        start, end = 0, start
    d = result_dtype()
    return Tensor.arange(start, end, step, dtype=d, device=_device())


def _scalar_tensor(value: Any, **_: Any) -> Tensor:
    return Tensor(value, dtype=result_dtype(), device=_device())


def _rand(size: Sequence[int], **_: Any) -> Tensor:
    return Tensor.rand(*size, dtype=result_dtype(), device=_device())


def _randn(size: Sequence[int], **_: Any) -> Tensor:
    return Tensor.randn(*size, dtype=result_dtype(), device=_device())


# ---- movement ----

def _view(x: Tensor, size: Sequence[int]) -> Tensor:
    return x.reshape(tuple(size))


def _expand(x: Tensor, size: Sequence[int], implicit: bool = False) -> Tensor:
    lead = len(size) - x.ndim
    return x.expand(tuple(x.shape[i - lead] if s == -1 else s for i, s in enumerate(size)))


def _slice(x: Tensor, dim: int = 0, start: int | None = None, end: int | None = None, step: int = 1) -> Tensor:
    dim %= x.ndim
    lo, hi, st = slice(start, end, step).indices(x.shape[dim])
    if st == 1:
        return x.shrink(tuple((lo, max(lo, hi)) if i == dim else None for i in range(x.ndim)))
    return x[(slice(None),) * dim + (slice(lo, hi, st),)]


def _select(x: Tensor, dim: int, index: int) -> Tensor:
    dim %= x.ndim
    index %= x.shape[dim]
    return _slice(x, dim, index, index + 1).squeeze(dim)


def _squeeze(x: Tensor, dims: Sequence[int] | int | None = None) -> Tensor:
    drop = {d for d in _dims(x, dims) if x.shape[d] == 1}
    return x.reshape(tuple(s for i, s in enumerate(x.shape) if i not in drop))


def _split_with_sizes(x: Tensor, sizes: Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
    out, at = [], 0
    for s in sizes:
        out.append(_slice(x, dim, at, at + s))
        at += s
    return tuple(out)


def _split(x: Tensor, size: int, dim: int = 0) -> tuple[Tensor, ...]:
    n = x.shape[dim % x.ndim]
    return _split_with_sizes(x, [min(size, n - i) for i in range(0, n, size)], dim)


def _slice_scatter(x: Tensor, src: Tensor, dim: int = 0, start: int | None = None, end: int | None = None,
                   step: int = 1) -> Tensor:
    dim %= x.ndim
    n = x.shape[dim]
    lo, hi, st = slice(start, end, step).indices(n)
    m = len(range(lo, hi, st))
    if m == 0:
        return x
    src = src.cast(x.dtype)
    if st > 1:
        # interleave st-1 zeros after each element, then drop the trailing ones: element i lands at i*st
        src = src.unsqueeze(dim + 1).pad(tuple((0, st - 1) if i == dim + 1 else (0, 0) for i in range(x.ndim + 1)))
        src = src.reshape(x.shape[:dim] + (m * st,) + x.shape[dim + 1:])
        src = src.shrink(tuple((0, (m - 1) * st + 1) if i == dim else None for i in range(x.ndim)))
    last = lo + (m - 1) * st + 1
    placed = src.pad(tuple((lo, n - last) if i == dim else (0, 0) for i in range(x.ndim)))
    pos = Tensor.arange(n, device=x.device).reshape(tuple(n if i == dim else 1 for i in range(x.ndim)))
    return ((pos >= lo) & (pos < last) & ((pos - lo) % st == 0)).where(placed, x)


def _select_scatter(x: Tensor, src: Tensor, dim: int, index: int) -> Tensor:
    dim %= x.ndim
    index %= x.shape[dim]
    return _slice_scatter(x, src.unsqueeze(dim), dim, index, index + 1)


def _cat(xs: Sequence[Tensor], dim: int = 0) -> Tensor:
    d = result_dtype()
    xs = [_cast(x, d) for x in xs if not (x.ndim == 1 and x.shape[0] == 0)]  # torch skips empty 1-D inputs
    return xs[0].cat(*xs[1:], dim=dim) if len(xs) > 1 else xs[0]


def _constant_pad_nd(x: Tensor, pad: Sequence[int], value: float = 0.0) -> Tensor:
    return x.pad(tuple(pad), value=value)


def _index(x: Tensor, indices: Sequence[Tensor | None]) -> Tensor:
    return x[tuple(slice(None) if i is None else i for i in indices)]


def _index_select(x: Tensor, dim: int, idx: Tensor) -> Tensor:
    dim %= x.ndim
    return x[(slice(None),) * dim + (idx.reshape(-1),)]


def _as_strided(x: Tensor, size: Sequence[int], stride: Sequence[int], storage_offset: int | None = None) -> Tensor:
    # a gather from the flat storage: right only where torch's input is a whole, contiguous storage, so that its
    # memory order is the element order the lazy tensor has here
    metas = current_arg_metas.get()
    src = metas[0] if metas else None
    if not isinstance(src, torch.Tensor) or not src.is_contiguous() or src.storage_offset() != 0:
        raise Unsupported("as_strided of a tensor that is not contiguous from the start of its storage")
    if (storage_offset or 0) + sum((n - 1) * st for n, st in zip(size, stride) if n > 0) >= max(x.numel(), 1):
        raise Unsupported("as_strided reaching past the tensor's own elements")
    flat = x.flatten()
    idx = Tensor(storage_offset or 0, dtype=dtypes.int64, device=x.device)
    for i, (n, st) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[i] = n
        idx = idx + (Tensor.arange(n, dtype=dtypes.int64, device=x.device) * st).reshape(shape)
    return flat[idx.reshape(-1)].reshape(tuple(size)) if len(size) else flat[idx]


# ---- reductions ----

def _sum(x: Tensor, dims: Sequence[int] | None = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
    return _cast(x, result_dtype()).sum(_dims(x, dims), keepdim=keepdim)


def _mean(x: Tensor, dims: Sequence[int] | None = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
    return _cast(x, result_dtype()).mean(_dims(x, dims), keepdim=keepdim)


def _var(x: Tensor, dims: Sequence[int] | None = None, unbiased: bool | None = None, keepdim: bool = False, *,
         correction: float | None = None) -> Tensor:
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    return x.var(_dims(x, dims), keepdim=keepdim, correction=correction)


def _var_correction(x: Tensor, dims: Sequence[int] | None = None, *, correction: float | None = None,
                    keepdim: bool = False) -> Tensor:
    return _var(x, dims, None, keepdim, correction=1 if correction is None else correction)


def _max_dim(x: Tensor, dim: int, keepdim: bool = False) -> tuple[Tensor, Tensor]:
    return x.max(dim, keepdim=keepdim), x.argmax(dim, keepdim=keepdim).cast(dtypes.int64)


def _min_dim(x: Tensor, dim: int, keepdim: bool = False) -> tuple[Tensor, Tensor]:
    return x.min(dim, keepdim=keepdim), x.argmin(dim, keepdim=keepdim).cast(dtypes.int64)


def _arg(fn: str) -> Callable[..., Tensor]:
    def run(x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
        if dim is None:
            out = getattr(x.flatten(), fn)(0)
            return out.reshape((1,) * x.ndim) if keepdim else out
        return getattr(x, fn)(dim, keepdim=keepdim)
    return run


def _any(x: Tensor, dims: Sequence[int] | int | None = None, keepdim: bool = False) -> Tensor:
    return x.cast(dtypes.bool).any(_dims(x, dims), keepdim=keepdim)


def _prod(x: Tensor, dim: int | None = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
    return _cast(x, result_dtype()).prod(_dims(x, dim), keepdim=keepdim)


def _cumsum(x: Tensor, dim: int, dtype: Any = None) -> Tensor:
    return _cast(x, result_dtype()).cumsum(dim)


# ---- activations and their backward ops ----

def _softmax(x: Tensor, dim: int, half_to_float: bool = False) -> Tensor:
    return x.cast(result_dtype()).softmax(dim)


def _log_softmax(x: Tensor, dim: int, half_to_float: bool = False) -> Tensor:
    return x.cast(result_dtype()).log_softmax(dim)


def _softmax_backward(grad: Tensor, out: Tensor, dim: int, input_dtype: Any) -> Tensor:
    return out * (grad - (grad * out).sum(dim, keepdim=True))


def _log_softmax_backward(grad: Tensor, out: Tensor, dim: int, input_dtype: Any) -> Tensor:
    return grad - out.exp() * grad.sum(dim, keepdim=True)


def _gelu(x: Tensor, approximate: str = "none") -> Tensor:
    return x.gelu(approximate=approximate)


def _gelu_backward(grad: Tensor, x: Tensor, approximate: str = "none") -> Tensor:
    return _vjp(lambda t: t.gelu(approximate=approximate), [x], grad, [True])[0]


def _threshold_backward(grad: Tensor, x: Tensor, threshold: float) -> Tensor:
    return (x <= threshold).where(0, grad)


def _hardtanh(x: Tensor, lo: float = -1.0, hi: float = 1.0) -> Tensor:
    return x.clamp(lo, hi)


def _hardtanh_backward(grad: Tensor, x: Tensor, lo: float, hi: float) -> Tensor:
    return ((x <= lo) | (x >= hi)).where(0, grad)


def _leaky_relu(x: Tensor, slope: float = 0.01) -> Tensor:
    return (x > 0).where(x, x * slope)


def _leaky_relu_backward(grad: Tensor, x: Tensor, slope: float, self_is_result: bool = False) -> Tensor:
    return (x > 0).where(grad, grad * slope)


def _elu(x: Tensor, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0) -> Tensor:
    return (x > 0).where(x * scale, ((x * input_scale).exp() - 1) * (alpha * scale))


def _silu_backward(grad: Tensor, x: Tensor) -> Tensor:
    s = x.sigmoid()
    return grad * s * (1 + x * (1 - s))


def _clamp(x: Tensor, lo: Any = None, hi: Any = None) -> Tensor:
    d = result_dtype()
    x = _cast(x, d)
    if lo is not None:
        x = x.maximum(_cast(lo, d))
    if hi is not None:
        x = x.minimum(_cast(hi, d))
    return x


def _where(c: Tensor, a: Any, b: Any) -> Tensor:
    d = result_dtype()
    return c.cast(dtypes.bool).where(_cast(a, d), _cast(b, d))


# ---- linear algebra ----

def _addmm(bias: Tensor, a: Tensor, b: Tensor, beta: float = 1, alpha: float = 1) -> Tensor:
    mm = a @ b
    if alpha != 1:
        mm = mm * alpha
    return mm if beta == 0 else mm + (bias if beta == 1 else bias * beta)


# ---- convolution and pooling ----

def _convolution(x: Tensor, w: Tensor, bias: Tensor | None, stride: Sequence[int], padding: Sequence[int],
                 dilation: Sequence[int], transposed: bool, output_padding: Sequence[int], groups: int) -> Tensor:
    if transposed:
        return x.conv_transpose2d(w, bias, groups=groups, stride=tuple(stride), dilation=tuple(dilation),
                                  padding=tuple(padding), output_padding=tuple(output_padding))
    return x.conv2d(w, bias, groups=groups, stride=tuple(stride), dilation=tuple(dilation), padding=tuple(padding))


def _convolution_backward(grad: Tensor, x: Tensor, w: Tensor, bias_sizes: Sequence[int] | None,
                          stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int], transposed: bool,
                          output_padding: Sequence[int], groups: int, mask: Sequence[bool]) -> tuple[Any, ...]:
    def conv(a: Tensor, b: Tensor) -> Tensor:
        return _convolution(a, b, None, stride, padding, dilation, transposed, output_padding, groups)
    gx, gw = _vjp(conv, [x, w], grad, mask[:2])
    gb = grad.sum(tuple(i for i in range(grad.ndim) if i != 1)) if mask[2] else None
    return gx, gw, gb


def _pool_windows(x: Tensor, kernel: Sequence[int], stride: Sequence[int], padding: Sequence[int],
                  dilation: Sequence[int], fill: float) -> Tensor:
    """(..., o1..on, k1..kn): the pooling windows of the last n = len(kernel) dims, padded with `fill`."""
    n = len(kernel)
    x = x.pad(((0, 0),) * (x.ndim - n) + tuple((p, p) for p in padding), value=fill)
    for k, s, d in zip(kernel, stride, dilation):
        # (..., i1, i2) -> (..., o1, i2, k1) -> (..., o1, o2, k1, k2): the next dim to unfold is always at -n
        x = x.unfold(x.ndim - n, d * (k - 1) + 1, s)
        if d > 1:
            x = x[..., ::d]
    return x


def _pool_args(n: int, kernel: Sequence[int], stride: Sequence[int], padding: Sequence[int],
               dilation: Sequence[int], ceil_mode: bool) -> tuple[tuple[int, ...], ...]:
    """kernel, stride, padding, dilation as n ints each (torch passes one int for all dims, and no stride for the
    kernel's)."""
    if ceil_mode:
        raise Unsupported("ceil_mode=True")

    def each(v: Sequence[int]) -> tuple[int, ...]:
        return tuple(v) * n if len(v) == 1 else tuple(v)
    return each(kernel), each(stride or kernel), each(padding or (0,)), each(dilation or (1,))


def _max_pool_with_indices(n: int) -> Callable[..., tuple[Tensor, Tensor]]:
    def run(x: Tensor, kernel: Sequence[int], stride: Sequence[int] = (), padding: Sequence[int] = (0,),
            dilation: Sequence[int] = (1,), ceil_mode: bool = False) -> tuple[Tensor, Tensor]:
        k, s, p, d = _pool_args(n, kernel, stride, padding, dilation, ceil_mode)
        out, idx = x.max_pool2d(k, s, d, p, return_indices=True)  # type: ignore[misc]
        return out, idx.cast(dtypes.int64)
    return run


def _max_pool_with_indices_backward(n: int) -> Callable[..., Tensor]:
    def run(grad: Tensor, x: Tensor, kernel: Sequence[int], stride: Sequence[int], padding: Sequence[int],
            dilation: Sequence[int], ceil_mode: bool, indices: Tensor) -> Tensor:
        # each output's gradient goes to the input position its index names (torch's rule on ties): the windows of
        # a map of flat positions are compared with the indices, and autograd sums the masked gradients back
        k, s, p, d = _pool_args(n, kernel, stride, padding, dilation, ceil_mode)
        spatial = x.shape[-n:]
        pos = Tensor.arange(math.prod(spatial), dtype=dtypes.int64, device=x.device).reshape(spatial)
        hit = _pool_windows(pos, k, s, p, d, -1) == indices.reshape(indices.shape + (1,) * n)
        weights = hit.where(grad.reshape(grad.shape + (1,) * n), 0).detach()
        one = Tensor(1.0, device=x.device).cast(grad.dtype)
        return _vjp(lambda t: (_pool_windows(t, k, s, p, d, 0) * weights).sum(), [x], one, [True])[0]
    return run


def _avg_pool(n: int) -> Callable[..., Tensor]:
    def run(x: Tensor, kernel: Sequence[int], stride: Sequence[int] = (), padding: Sequence[int] = (0,),
            ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
        if divisor_override is not None:
            raise Unsupported("divisor_override")
        k, s, p, _ = _pool_args(n, kernel, stride, padding, (1,), ceil_mode)
        return x.avg_pool2d(k, s, 1, p, ceil_mode, count_include_pad)
    return run


def _avg_pool_backward(n: int) -> Callable[..., Tensor]:
    def run(grad: Tensor, x: Tensor, kernel: Sequence[int], stride: Sequence[int], padding: Sequence[int],
            ceil_mode: bool, count_include_pad: bool, divisor_override: int | None) -> Tensor:
        pool = _avg_pool(n)
        return _vjp(lambda t: pool(t, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override),
                    [x], grad, [True])[0]
    return run


def _adaptive_weights(i: int, o: int, device: str | tuple[str, ...], dtype: DType) -> Tensor:
    """(o, i): row k averages input positions floor(k*i/o) up to ceil((k+1)*i/o), torch's adaptive windows."""
    w = np.zeros((o, i), dtype=np.float64)
    for k in range(o):
        lo, hi = (k * i) // o, -(-((k + 1) * i) // o)
        w[k, lo:hi] = 1.0 / (hi - lo)
    return Tensor(w.astype(np.float32), device=device).cast(dtype)


def _adaptive_avg_pool2d(x: Tensor, output_size: Sequence[int]) -> Tensor:
    h, w = x.shape[-2:]
    oh, ow = output_size
    if h % oh == 0 and w % ow == 0:  # equal windows: a plain pooling
        return x.avg_pool2d((h // oh, w // ow))
    # overlapping windows of varying size: a small averaging matrix per axis
    return _adaptive_weights(h, oh, x.device, x.dtype) @ x @ _adaptive_weights(w, ow, x.device, x.dtype).T


def _adaptive_avg_pool2d_backward(grad: Tensor, x: Tensor) -> Tensor:
    return _vjp(lambda t: _adaptive_avg_pool2d(t, grad.shape[-2:]), [x], grad, [True])[0]


def _upsample(x: Tensor, mode: str, output_size: Sequence[int] | None, align_corners: bool,
              scales: Sequence[float | None] | None) -> Tensor:
    # torch indexes by the scale when the caller gave one, else by the sizes; tinygrad's interpolate follows the same
    # rules given the same arguments
    if scales is not None and all(s is not None for s in scales):
        return x.interpolate(mode=mode, align_corners=align_corners, scale_factor=tuple(scales))  # type: ignore[arg-type]
    if output_size is None:
        raise Unsupported("upsampling without an output size or scales")
    return x.interpolate(tuple(output_size), mode=mode, align_corners=align_corners)


def _upsample_backward(mode: str) -> Callable[..., Tensor]:
    def run(grad: Tensor, output_size: Sequence[int], input_size: Sequence[int], *rest: Any) -> Tensor:
        align_corners = bool(rest[0]) if mode == "linear" else False
        scales = list(rest[1:] if mode == "linear" else rest)
        base = Tensor.zeros(*input_size, dtype=grad.dtype, device=grad.device)  # a linear map: any point will do
        return _vjp(lambda t: _upsample(t, mode, output_size, align_corners, scales), [base], grad, [True])[0]
    return run


# ---- normalization ----

def _bn_stats(x: Tensor) -> tuple[Tensor, Tensor, int]:
    """Per channel (axis 1): the mean, the biased variance, and how many values each was taken over."""
    axes = tuple(i for i in range(x.ndim) if i != 1)
    mean = x.mean(axes)
    var = ((x - _channel(mean, x.ndim)) ** 2).mean(axes)
    return mean, var, math.prod(x.shape[i] for i in axes)


def _channel(v: Tensor, ndim: int) -> Tensor:
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def _bn_apply(x: Tensor, mean: Tensor, invstd: Tensor, w: Tensor | None, b: Tensor | None) -> Tensor:
    out = (x - _channel(mean, x.ndim)) * _channel(invstd, x.ndim)
    if w is not None:
        out = out * _channel(w, x.ndim)
    if b is not None:
        out = out + _channel(b, x.ndim)
    return out


def _bn_functional(x: Tensor, w: Tensor | None, b: Tensor | None, rm: Tensor | None, rv: Tensor | None,
                   training: bool, momentum: float, eps: float) -> tuple[Tensor, ...]:
    if not training:
        if rm is None or rv is None:
            raise Unsupported("batch norm in eval mode without running stats")
        out = _bn_apply(x, rm, (rv + eps).rsqrt(), w, b)
        empty = Tensor.zeros(0, dtype=x.dtype, device=x.device)
        return out, empty, empty, rm, rv
    mean, var, n = _bn_stats(x)
    invstd = (var + eps).rsqrt()
    out = _bn_apply(x, mean, invstd, w, b)
    if rm is None or rv is None:
        return out, mean, invstd
    # torch keeps the unbiased variance as the running one, while it normalizes with the biased one
    unbiased = var * (n / max(n - 1, 1))
    return out, mean, invstd, rm * (1 - momentum) + mean * momentum, rv * (1 - momentum) + unbiased * momentum


def _native_batch_norm(x: Tensor, w: Tensor | None, b: Tensor | None, rm: Tensor | None, rv: Tensor | None,
                       training: bool, momentum: float, eps: float) -> tuple[Tensor, ...]:
    return _bn_functional(x, w, b, rm, rv, training, momentum, eps)[:3]


def _bn_no_training(x: Tensor, w: Tensor | None, b: Tensor | None, rm: Tensor, rv: Tensor, momentum: float,
                    eps: float) -> tuple[Tensor, ...]:
    return _bn_functional(x, w, b, rm, rv, False, momentum, eps)[:3]


def _bn_no_stats(x: Tensor, w: Tensor | None, b: Tensor | None, training: bool, momentum: float,
                 eps: float) -> tuple[Tensor, ...]:
    return _bn_functional(x, w, b, None, None, True, momentum, eps)[:3]


def _native_batch_norm_backward(grad: Tensor, x: Tensor, w: Tensor | None, rm: Tensor | None, rv: Tensor | None,
                                save_mean: Tensor | None, save_invstd: Tensor | None, train: bool, eps: float,
                                mask: Sequence[bool]) -> tuple[Any, ...]:
    axes = tuple(i for i in range(x.ndim) if i != 1)
    if train:
        assert save_mean is not None and save_invstd is not None
        mean, invstd = save_mean, save_invstd
    else:
        assert rm is not None and rv is not None
        mean, invstd = rm, (rv + eps).rsqrt()
    xhat = (x - _channel(mean, x.ndim)) * _channel(invstd, x.ndim)
    scale = _channel(invstd * (w if w is not None else 1), x.ndim)
    gx = None
    if mask[0]:
        if train:
            n = math.prod(x.shape[i] for i in axes)
            gsum, gdot = grad.sum(axes, keepdim=True), (grad * xhat).sum(axes, keepdim=True)
            gx = scale * (grad - gsum / n - xhat * gdot / n)
        else:
            gx = grad * scale
    gw = (grad * xhat).sum(axes) if mask[1] else None
    gb = grad.sum(axes) if mask[2] else None
    return gx, gw, gb


def _native_layer_norm(x: Tensor, shape: Sequence[int], w: Tensor | None, b: Tensor | None,
                       eps: float) -> tuple[Tensor, Tensor, Tensor]:
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    mean = x.mean(axes, keepdim=True)
    rstd = ((x - mean) ** 2).mean(axes, keepdim=True).add(eps).rsqrt()
    out = (x - mean) * rstd
    if w is not None:
        out = out * w
    if b is not None:
        out = out + b
    return out, mean, rstd


def _native_layer_norm_backward(grad: Tensor, x: Tensor, shape: Sequence[int], mean: Tensor, rstd: Tensor,
                                w: Tensor | None, b: Tensor | None, mask: Sequence[bool]) -> tuple[Any, ...]:
    gx = None
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    lead = tuple(range(x.ndim - len(shape)))
    xhat = (x - mean) * rstd
    if mask[0]:
        gxhat = grad * w if w is not None else grad
        n = math.prod(shape)
        gx = rstd * (gxhat - gxhat.sum(axes, keepdim=True) / n - xhat * (gxhat * xhat).sum(axes, keepdim=True) / n)
    gw = (grad * xhat).sum(lead) if mask[1] and w is not None else None
    gb = grad.sum(lead) if mask[2] and b is not None else None
    return gx, gw, gb


def _native_group_norm(x: Tensor, w: Tensor | None, b: Tensor | None, n: int, c: int, hw: int, groups: int,
                       eps: float) -> tuple[Tensor, Tensor, Tensor]:
    g = x.reshape(n, groups, -1)
    mean = g.mean(-1, keepdim=True)
    rstd = ((g - mean) ** 2).mean(-1, keepdim=True).add(eps).rsqrt()
    out = ((g - mean) * rstd).reshape(x.shape)
    if w is not None:
        out = out * _channel(w, x.ndim)
    if b is not None:
        out = out + _channel(b, x.ndim)
    return out, mean.reshape(n, groups), rstd.reshape(n, groups)


def _native_group_norm_backward(grad: Tensor, x: Tensor, mean: Tensor, rstd: Tensor, w: Tensor | None, n: int,
                                c: int, hw: int, groups: int, mask: Sequence[bool]) -> tuple[Any, ...]:
    g = x.reshape(n, groups, -1)
    xhat = ((g - mean.reshape(n, groups, 1)) * rstd.reshape(n, groups, 1)).reshape(x.shape)
    gx = None
    if mask[0]:
        gxhat = (grad * _channel(w, x.ndim) if w is not None else grad).reshape(n, groups, -1)
        xh = xhat.reshape(n, groups, -1)
        gx = (rstd.reshape(n, groups, 1) * (gxhat - gxhat.mean(-1, keepdim=True) -
                                            xh * (gxhat * xh).mean(-1, keepdim=True))).reshape(x.shape)
    axes = tuple(i for i in range(x.ndim) if i != 1)
    gw = (grad * xhat).sum(axes) if mask[1] and w is not None else None
    gb = grad.sum(axes) if mask[2] else None
    return gx, gw, gb


# ---- losses, embedding, attention, dropout ----

def _nll_weights(x: Tensor, target: Tensor, weight: Tensor | None, ignore_index: int) -> Tensor:
    """The one-hot of target over the class axis (1, or 0 unbatched) scaled by the class weights; ignored targets
    weigh 0."""
    classes = x.shape[1] if x.ndim > 1 else x.shape[0]
    cls_shape = (1, classes) + (1,) * (x.ndim - 2) if x.ndim > 1 else (classes,)
    tgt = target.reshape(target.shape[:1] + (1,) + target.shape[1:]) if x.ndim > 1 else target.reshape(1)
    onehot = tgt == Tensor.arange(classes, dtype=target.dtype, device=x.device).reshape(cls_shape)
    wsel = onehot.where(weight.reshape(cls_shape) if weight is not None else 1.0, 0.0).cast(x.dtype)
    return (tgt != ignore_index).where(wsel, 0.0)


def _nll_loss_forward(x: Tensor, target: Tensor, weight: Tensor | None, reduction: int,
                      ignore_index: int) -> tuple[Tensor, Tensor]:
    if x.ndim > 2:
        raise Unsupported("nll_loss over more than 2 dims (torch uses nll_loss2d)")
    wsel = _nll_weights(x, target, weight, ignore_index)
    losses = -(x * wsel).sum(1 if x.ndim > 1 else 0)
    total = wsel.sum()
    if reduction == 0:
        return losses, total
    if reduction == 1:
        return losses.sum() / total, total
    return losses.sum(), total


def _nll_loss_backward(grad: Tensor, x: Tensor, target: Tensor, weight: Tensor | None, reduction: int,
                       ignore_index: int, total_weight: Tensor) -> Tensor:
    wsel = _nll_weights(x, target, weight, ignore_index)
    if reduction == 0:
        g = grad.reshape(grad.shape[:1] + (1,)) if x.ndim > 1 else grad
    elif reduction == 1:
        g = grad / total_weight
    else:
        g = grad
    return -wsel * g


def _embedding(w: Tensor, idx: Tensor, padding_idx: int = -1, scale_grad_by_freq: bool = False,
               sparse: bool = False) -> Tensor:
    return w[idx]


def _embedding_dense_backward(grad: Tensor, idx: Tensor, num_weights: int, padding_idx: int,
                              scale_grad_by_freq: bool) -> Tensor:
    if scale_grad_by_freq:
        raise Unsupported("scale_grad_by_freq=True")
    flat = idx.reshape(-1, 1)
    onehot = (flat == Tensor.arange(num_weights, dtype=idx.dtype, device=grad.device).reshape(1, -1))
    if padding_idx >= 0:
        onehot = onehot & (flat != padding_idx)
    return onehot.cast(grad.dtype).transpose(0, 1) @ grad.reshape(-1, grad.shape[-1])


def _attention(q: Tensor, k: Tensor, v: Tensor, is_causal: bool, mask: Tensor | None,
               scale: float | None) -> tuple[Tensor, Tensor]:
    sc = scale if scale is not None else 1 / math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-2, -1)) * sc
    if is_causal:
        lq, lk = scores.shape[-2:]
        scores = Tensor.ones(lq, lk, dtype=dtypes.bool, device=q.device).tril().where(scores, -math.inf)
    if mask is not None:
        scores = mask.where(scores, -math.inf) if mask.dtype == dtypes.bool else scores + mask
    lse = scores.logsumexp(-1)
    return (scores - lse.unsqueeze(-1)).exp() @ v, lse


def _flash_attention(q: Tensor, k: Tensor, v: Tensor, dropout_p: float = 0.0, is_causal: bool = False,
                     attn_mask: Tensor | None = None, scale: float | None = None) -> tuple[Tensor, Tensor]:
    if dropout_p:
        raise Unsupported("attention dropout")
    return _attention(q, k, v, is_causal, attn_mask, scale)


def _flash_attention_backward(grad: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                              dropout_p: float, is_causal: bool, attn_mask: Tensor | None = None,
                              scale: float | None = None) -> tuple[Any, ...]:
    if dropout_p:
        raise Unsupported("attention dropout")
    return tuple(_vjp(lambda a, b, c: _attention(a, b, c, is_causal, attn_mask, scale)[0], [q, k, v], grad,
                      [True, True, True]))


def _native_dropout(x: Tensor, p: float, train: bool | None) -> tuple[Tensor, Tensor]:
    if not train or p == 0:
        return x, Tensor.ones(x.shape, dtype=dtypes.bool, device=x.device)
    keep = Tensor.rand(*x.shape, device=x.device) >= p
    return keep.where(x * (1 / (1 - p)), 0), keep


def _native_dropout_backward(grad: Tensor, mask: Tensor, scale: float) -> Tensor:
    return mask.where(grad * scale, 0)


def _copy(dst: Tensor, src: Tensor, non_blocking: bool = False) -> Tensor:
    return src.cast(dst.dtype).expand(dst.shape)


def _to_copy(x: Tensor, **_: Any) -> Tensor:
    return x.cast(result_dtype())


def _sym_size(x: Tensor, dim: int) -> int:
    return x.shape[dim]


def _topk(x: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> tuple[Tensor, Tensor]:
    vals, idx = x.topk(k, dim, largest, sorted)
    return vals, idx.cast(dtypes.int64)


def _sort(x: Tensor, dim: int = -1, descending: bool = False) -> tuple[Tensor, Tensor]:
    vals, idx = x.sort(dim, descending)
    return vals, idx.cast(dtypes.int64)


def _scatter_reduce(x: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool = True) -> Tensor:
    return x.scatter_reduce(dim, index, src, {"sum": "sum", "prod": "prod", "mean": "mean", "amax": "amax",
                                              "amin": "amin"}[reduce], include_self=include_self)


def _index_put(x: Tensor, indices: Sequence[Tensor | None], values: Tensor, accumulate: bool = False) -> Tensor:
    """x[indices] = values (or += with accumulate): integer index tensors on adjacent dims, or one boolean mask."""
    values = values.cast(x.dtype)
    if len(indices) == 1 and indices[0] is not None and indices[0].dtype == dtypes.bool:
        if accumulate or values.numel() != 1:
            raise Unsupported("index_put of a boolean mask with more than one value")
        mask = indices[0].reshape(indices[0].shape + (1,) * (x.ndim - indices[0].ndim))
        return mask.where(values.reshape(()), x)
    dims = [d for d, i in enumerate(indices) if i is not None]
    if not dims or dims != list(range(dims[0], dims[-1] + 1)) or \
            any(i.dtype == dtypes.bool for i in indices if i is not None):
        raise Unsupported("index_put with index tensors on dims that are not adjacent")
    p, q = dims[0], dims[-1] + 1
    idx = [i for i in indices if i is not None]
    b = tuple(np.broadcast_shapes(*[i.shape for i in idx]))
    nb, pre, post = math.prod(b), x.shape[:p], x.shape[q:]
    sizes = x.shape[p:q]
    # the one-hot of every index position over the flattened indexed dims: (nb, prod(sizes))
    flat = Tensor.zeros(*b, dtype=dtypes.int64, device=x.device)
    for i, n in zip(idx, sizes):
        flat = flat * n + (i.cast(dtypes.int64) % n).expand(b)
    onehot = flat.reshape(nb, 1) == Tensor.arange(math.prod(sizes), dtype=dtypes.int64, device=x.device).reshape(1, -1)
    if not accumulate:
        # a position indexed twice takes the last value written there (as torch's CPU loop does), not their sum
        order = Tensor.arange(1, nb + 1, dtype=dtypes.int64, device=x.device).reshape(nb, 1)
        onehot = onehot & (order == onehot.where(order, 0).max(0, keepdim=True))
    # values (pre, b, post) -> (pre, post, nb) @ onehot -> (pre, post, sizes) -> (pre, sizes, post)
    v = values.expand(pre + b + post).reshape(pre + (nb,) + post)
    v = v.permute(tuple(range(p)) + tuple(range(p + 1, p + 1 + len(post))) + (p,))
    moved = (v @ onehot.cast(x.dtype)).reshape(pre + post + sizes)
    n_pre, n_post = len(pre), len(post)
    placed = moved.permute(tuple(range(n_pre)) + tuple(range(n_pre + n_post, n_pre + n_post + len(sizes))) +
                           tuple(range(n_pre, n_pre + n_post)))
    if accumulate:
        return x + placed
    hit = (onehot.sum(0) > 0).reshape((1,) * n_pre + sizes + (1,) * n_post)
    return hit.where(placed, x)


def _diagonal_scatter(x: Tensor, src: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """x with its (dim1, dim2) diagonal `offset` replaced by src (whose last dim runs along the diagonal)."""
    a, b = dim1 % x.ndim, dim2 % x.ndim
    n1, n2, length = x.shape[a], x.shape[b], src.shape[-1]
    k = Tensor.arange(length, device=x.device).reshape(1, 1, length)
    at_i = Tensor.arange(n1, device=x.device).reshape(n1, 1, 1) == k + max(0, -offset)
    at_j = Tensor.arange(n2, device=x.device).reshape(1, n2, 1) == k + max(0, offset)
    on = at_i & at_j  # (n1, n2, length)
    placed = (on.where(src.cast(x.dtype).unsqueeze(-2).unsqueeze(-2), 0)).sum(-1)  # (..., n1, n2)
    rest = [d for d in range(x.ndim) if d not in (a, b)]
    order = rest + [a, b]
    inverse = [order.index(d) for d in range(x.ndim)]
    return on.any(-1).where(placed, x.permute(order)).permute(inverse)


# The table: aten overload -> its tinygrad implementation. An op missing here makes its graph run in torch.
ATEN_OPS: dict[Any, Callable[..., Any]] = {
    # arithmetic, in torch's result dtype
    aten.add.Tensor: _binary(lambda x, y, alpha=1: x + (y * alpha if alpha != 1 else y)),
    aten.add.Scalar: _binary(lambda x, y, alpha=1: x + (y * alpha if alpha != 1 else y)),
    aten.sub.Tensor: _binary(lambda x, y, alpha=1: x - (y * alpha if alpha != 1 else y)),
    aten.sub.Scalar: _binary(lambda x, y, alpha=1: x - (y * alpha if alpha != 1 else y)),
    aten.rsub.Scalar: _binary(lambda x, y, alpha=1: y - (x * alpha if alpha != 1 else x)),
    aten.rsub.Tensor: _binary(lambda x, y, alpha=1: y - (x * alpha if alpha != 1 else x)),
    aten.mul.Tensor: _binary(operator.mul),
    aten.mul.Scalar: _binary(operator.mul),
    aten.div.Tensor: _binary(lambda x, y: x.div(y)),
    aten.div.Scalar: _binary(lambda x, y: x.div(y)),
    aten.div.Tensor_mode: _binary(lambda x, y, rounding_mode=None: x.div(y, rounding_mode=rounding_mode)),
    aten.div.Scalar_mode: _binary(lambda x, y, rounding_mode=None: x.div(y, rounding_mode=rounding_mode)),
    aten.floor_divide.default: _binary(lambda x, y: x.floordiv(y)),
    aten.remainder.Tensor: _binary(lambda x, y: x.mod(y)),
    aten.remainder.Scalar: _binary(lambda x, y: x.mod(y)),
    aten.fmod.Tensor: _binary(lambda x, y: x.fmod(y)),
    aten.fmod.Scalar: _binary(lambda x, y: x.fmod(y)),
    aten.pow.Tensor_Tensor: _binary(lambda x, y: x.pow(y)),
    aten.pow.Tensor_Scalar: _binary(lambda x, y: x.pow(y)),
    aten.pow.Scalar: _binary(lambda x, y: x.pow(y)),
    aten.maximum.default: _binary(lambda x, y: x.maximum(y)),
    aten.minimum.default: _binary(lambda x, y: x.minimum(y)),
    aten.atan2.default: _binary(lambda x, y: x.atan2(y)),
    aten.bitwise_and.Tensor: _binary(lambda x, y: x.bitwise_and(y)),
    aten.bitwise_and.Scalar: _binary(lambda x, y: x.bitwise_and(y)),
    aten.bitwise_or.Tensor: _binary(lambda x, y: x.bitwise_or(y)),
    aten.bitwise_or.Scalar: _binary(lambda x, y: x.bitwise_or(y)),
    aten.bitwise_xor.Tensor: _binary(lambda x, y: x.bitwise_xor(y)),
    aten.bitwise_xor.Scalar: _binary(lambda x, y: x.bitwise_xor(y)),
    aten.bitwise_not.default: lambda x: x.bitwise_not() if x.dtype != dtypes.bool else x.logical_not(),
    aten.neg.default: lambda x: -x,
    aten.abs.default: lambda x: x.abs(),
    aten.sign.default: lambda x: x.sign(),
    aten.reciprocal.default: _unary_float(lambda x: x.reciprocal()),
    aten.sqrt.default: _unary_float(lambda x: x.sqrt()),
    aten.rsqrt.default: _unary_float(lambda x: x.rsqrt()),
    aten.exp.default: _unary_float(lambda x: x.exp()),
    aten.exp2.default: _unary_float(lambda x: x.exp2()),
    aten.expm1.default: _unary_float(lambda x: x.expm1()),
    aten.log.default: _unary_float(lambda x: x.log()),
    aten.log2.default: _unary_float(lambda x: x.log2()),
    aten.log10.default: _unary_float(lambda x: x.log10()),
    aten.log1p.default: _unary_float(lambda x: x.log1p()),
    aten.sin.default: _unary_float(lambda x: x.sin()),
    aten.cos.default: _unary_float(lambda x: x.cos()),
    aten.tan.default: _unary_float(lambda x: x.tan()),
    aten.asin.default: _unary_float(lambda x: x.asin()),
    aten.acos.default: _unary_float(lambda x: x.acos()),
    aten.atan.default: _unary_float(lambda x: x.atan()),
    aten.sinh.default: _unary_float(lambda x: x.sinh()),
    aten.cosh.default: _unary_float(lambda x: x.cosh()),
    aten.tanh.default: _unary_float(lambda x: x.tanh()),
    aten.asinh.default: _unary_float(lambda x: x.asinh()),
    aten.acosh.default: _unary_float(lambda x: x.acosh()),
    aten.atanh.default: _unary_float(lambda x: x.atanh()),
    aten.erf.default: _unary_float(lambda x: x.erf()),
    aten.sigmoid.default: _unary_float(lambda x: x.sigmoid()),
    aten.floor.default: lambda x: x.floor() if x.dtype.is_float else x,
    aten.ceil.default: lambda x: x.ceil() if x.dtype.is_float else x,
    aten.trunc.default: lambda x: x.trunc() if x.dtype.is_float else x,
    aten.round.default: lambda x: x.round() if x.dtype.is_float else x,
    aten.isnan.default: lambda x: x.isnan(),
    aten.isinf.default: lambda x: x.isinf(),
    # comparisons and logic
    aten.eq.Tensor: _compare(operator.eq), aten.eq.Scalar: _compare(operator.eq),
    aten.ne.Tensor: _compare(operator.ne), aten.ne.Scalar: _compare(operator.ne),
    aten.lt.Tensor: _compare(operator.lt), aten.lt.Scalar: _compare(operator.lt),
    aten.le.Tensor: _compare(operator.le), aten.le.Scalar: _compare(operator.le),
    aten.gt.Tensor: _compare(operator.gt), aten.gt.Scalar: _compare(operator.gt),
    aten.ge.Tensor: _compare(operator.ge), aten.ge.Scalar: _compare(operator.ge),
    aten.logical_not.default: lambda x: x.cast(dtypes.bool).logical_not(),
    aten.logical_and.default: lambda a, b: a.cast(dtypes.bool) & b.cast(dtypes.bool),
    aten.logical_or.default: lambda a, b: a.cast(dtypes.bool) | b.cast(dtypes.bool),
    aten.logical_xor.default: lambda a, b: a.cast(dtypes.bool) ^ b.cast(dtypes.bool),
    aten.where.self: _where,
    aten.clamp.default: _clamp,
    aten.clamp.Tensor: _clamp,
    aten.clamp_min.default: lambda x, lo: _clamp(x, lo, None),
    aten.clamp_max.default: lambda x, hi: _clamp(x, None, hi),
    # activations and their gradients
    aten.relu.default: lambda x: x.relu(),
    aten.gelu.default: _gelu,
    aten.gelu_backward.default: _gelu_backward,
    aten.threshold_backward.default: _threshold_backward,
    aten.hardtanh.default: _hardtanh,
    aten.hardtanh_backward.default: _hardtanh_backward,
    aten.leaky_relu.default: _leaky_relu,
    aten.leaky_relu_backward.default: _leaky_relu_backward,
    aten.elu.default: _elu,
    aten.silu.default: lambda x: x.silu(),
    aten.silu_backward.default: _silu_backward,
    aten.sigmoid_backward.default: lambda g, y: g * y * (1 - y),
    aten.tanh_backward.default: lambda g, y: g * (1 - y * y),
    aten._softmax.default: _softmax,
    aten._log_softmax.default: _log_softmax,
    aten._softmax_backward_data.default: _softmax_backward,
    aten._log_softmax_backward_data.default: _log_softmax_backward,
    # reductions, in torch's result dtype
    aten.sum.default: lambda x, dtype=None: _sum(x, None, False),
    aten.sum.dim_IntList: _sum,
    aten.mean.default: lambda x, dtype=None: _mean(x, None, False),
    aten.mean.dim: _mean,
    aten.var.dim: _var,
    aten.var.correction: _var_correction,
    aten.var_mean.correction: lambda x, dims=None, *, correction=None, keepdim=False:
        (_var_correction(x, dims, correction=correction, keepdim=keepdim), _mean(x, dims, keepdim)),
    aten.std.correction: lambda x, dims=None, *, correction=None, keepdim=False:
        _var_correction(x, dims, correction=correction, keepdim=keepdim).sqrt(),
    aten.amax.default: lambda x, dims=(), keepdim=False: x.max(_dims(x, dims), keepdim=keepdim),
    aten.amin.default: lambda x, dims=(), keepdim=False: x.min(_dims(x, dims), keepdim=keepdim),
    aten.max.dim: _max_dim,
    aten.min.dim: _min_dim,
    aten.max.default: lambda x: x.max(),
    aten.min.default: lambda x: x.min(),
    aten.argmax.default: _arg("argmax"),
    aten.argmin.default: _arg("argmin"),
    aten.any.default: lambda x: _any(x),
    aten.any.dim: _any,
    aten.any.dims: _any,
    aten.all.default: lambda x: x.cast(dtypes.bool).all(),
    aten.prod.default: lambda x, dtype=None: _prod(x),
    aten.prod.dim_int: _prod,
    aten.cumsum.default: _cumsum,
    aten.logsumexp.default: lambda x, dims, keepdim=False: x.logsumexp(_dims(x, dims), keepdim=keepdim),
    aten.sort.default: _sort,
    aten.topk.default: _topk,
    # linear algebra
    aten.mm.default: lambda a, b: a @ b,
    aten.bmm.default: lambda a, b: a @ b,
    aten.matmul.default: lambda a, b: a @ b,
    aten.addmm.default: _addmm,
    aten.dot.default: lambda a, b: (a * b).sum(),
    # movement: views in torch, lazy movement ops here
    aten.view.default: _view,
    aten._unsafe_view.default: _view,
    aten.reshape.default: _view,
    aten.expand.default: _expand,
    aten.permute.default: lambda x, dims: x.permute(tuple(dims)),
    aten.t.default: lambda x: x.transpose(0, 1) if x.ndim == 2 else x,
    aten.transpose.int: lambda x, a, b: x.transpose(a, b),
    aten.unsqueeze.default: lambda x, dim: x.unsqueeze(dim),
    aten.squeeze.default: lambda x: _squeeze(x),
    aten.squeeze.dim: _squeeze,
    aten.squeeze.dims: _squeeze,
    aten.select.int: _select,
    aten.slice.Tensor: _slice,
    aten.split_with_sizes.default: _split_with_sizes,
    aten.split.Tensor: _split,
    aten.cat.default: _cat,
    aten.slice_scatter.default: _slice_scatter,
    aten.select_scatter.default: _select_scatter,
    aten.stack.default: lambda xs, dim=0: xs[0].stack(*xs[1:], dim=dim),
    aten.flip.default: lambda x, dims: x.flip(tuple(dims)),
    aten.roll.default: lambda x, shifts, dims=(): x.roll(tuple(shifts), tuple(dims)),
    aten.repeat.default: lambda x, reps: x.repeat(tuple(reps)),
    aten.constant_pad_nd.default: _constant_pad_nd,
    aten.reflection_pad1d.default: lambda x, pad: x.pad(tuple(pad), mode="reflect"),
    aten.reflection_pad2d.default: lambda x, pad: x.pad(tuple(pad), mode="reflect"),
    aten.reflection_pad3d.default: lambda x, pad: x.pad(tuple(pad), mode="reflect"),
    aten.replication_pad2d.default: lambda x, pad: x.pad(tuple(pad), mode="replicate"),
    aten.replication_pad3d.default: lambda x, pad: x.pad(tuple(pad), mode="replicate"),
    aten.as_strided.default: _as_strided,
    aten.alias.default: lambda x: x,
    aten.clone.default: lambda x, memory_format=None: x,
    aten.contiguous.default: lambda x, memory_format=None: x,
    aten.lift_fresh_copy.default: lambda x: x,
    aten.detach.default: lambda x: x.detach(),
    aten._to_copy.default: _to_copy,
    aten.copy.default: _copy,
    aten.diagonal.default: lambda x, offset=0, dim1=0, dim2=1: x.diagonal(offset, dim1, dim2),
    aten.tril.default: lambda x, diagonal=0: x.tril(diagonal),
    aten.triu.default: lambda x, diagonal=0: x.triu(diagonal),
    # indexing
    aten.index.Tensor: _index,
    aten.index_select.default: _index_select,
    aten.gather.default: lambda x, dim, idx, sparse_grad=False: x.gather(dim, idx),
    aten.scatter.src: lambda x, dim, idx, src: x.scatter(dim, idx, src),
    aten.scatter.value: lambda x, dim, idx, value: x.scatter(dim, idx, value),
    aten.scatter_add.default: lambda x, dim, idx, src: x.scatter_reduce(dim, idx, src, "sum"),
    aten.scatter_reduce.two: _scatter_reduce,
    aten.index_put.default: _index_put,
    aten._unsafe_index.Tensor: _index,
    aten._unsafe_index_put.default: _index_put,
    aten.diagonal_scatter.default: _diagonal_scatter,
    aten.embedding.default: _embedding,
    aten.embedding_dense_backward.default: _embedding_dense_backward,
    # creation
    aten.full.default: _full,
    aten.full_like.default: _full_like,
    aten.zeros.default: lambda size, **kw: _full(size, 0),
    aten.ones.default: lambda size, **kw: _full(size, 1),
    aten.zeros_like.default: lambda x, **kw: _full_like(x, 0),
    aten.ones_like.default: lambda x, **kw: _full_like(x, 1),
    aten.empty.memory_format: lambda size, **kw: _full(size, 0),
    aten.empty_strided.default: lambda size, stride, **kw: _full(size, 0),
    aten.empty_like.default: lambda x, **kw: _full_like(x, 0),
    aten.new_zeros.default: lambda x, size, **kw: _full(size, 0),
    aten.new_ones.default: lambda x, size, **kw: _full(size, 1),
    aten.new_full.default: lambda x, size, value, **kw: _full(size, value),
    aten.new_empty.default: lambda x, size, **kw: _full(size, 0),
    aten.fill.Scalar: lambda x, value: _full_like(x, value),
    aten.scalar_tensor.default: _scalar_tensor,
    aten.arange.default: lambda end, **kw: _arange(0, end),
    aten.arange.start: lambda start, end, **kw: _arange(start, end),
    aten.arange.start_step: _arange,
    aten.rand.default: _rand,
    aten.randn.default: _randn,
    # convolution, pooling, normalization
    aten.convolution.default: _convolution,
    aten.convolution_backward.default: _convolution_backward,
    aten.max_pool2d_with_indices.default: _max_pool_with_indices(2),
    aten.max_pool2d_with_indices_backward.default: _max_pool_with_indices_backward(2),
    aten.max_pool3d_with_indices.default: _max_pool_with_indices(3),
    aten.max_pool3d_with_indices_backward.default: _max_pool_with_indices_backward(3),
    aten.avg_pool1d.default: _avg_pool(1),
    aten.avg_pool2d.default: _avg_pool(2),
    aten.avg_pool2d_backward.default: _avg_pool_backward(2),
    aten.avg_pool3d.default: _avg_pool(3),
    aten.avg_pool3d_backward.default: _avg_pool_backward(3),
    aten._adaptive_avg_pool2d.default: _adaptive_avg_pool2d,
    aten.adaptive_avg_pool1d.default: lambda x, size: _adaptive_avg_pool2d(x.unsqueeze(-2), (1, size[0])).squeeze(-2),
    aten._adaptive_avg_pool2d_backward.default: _adaptive_avg_pool2d_backward,
    aten.upsample_nearest2d.vec: lambda x, size, scales: _upsample(x, "nearest", size, False, scales),
    aten.upsample_nearest2d.default: lambda x, size, sh=None, sw=None: _upsample(x, "nearest", size, False, [sh, sw]),
    aten.upsample_nearest2d_backward.default: _upsample_backward("nearest"),
    aten.upsample_bilinear2d.vec: lambda x, size, align, scales: _upsample(x, "linear", size, align, scales),
    aten.upsample_bilinear2d.default: lambda x, size, align, sh=None, sw=None:
        _upsample(x, "linear", size, align, [sh, sw]),
    aten.upsample_bilinear2d_backward.default: _upsample_backward("linear"),
    aten.native_batch_norm.default: _native_batch_norm,
    aten._native_batch_norm_legit_functional.default: _bn_functional,
    aten._native_batch_norm_legit_no_training.default: _bn_no_training,
    aten._native_batch_norm_legit.no_stats: _bn_no_stats,
    aten.native_batch_norm_backward.default: _native_batch_norm_backward,
    aten.native_layer_norm.default: _native_layer_norm,
    aten.native_layer_norm_backward.default: _native_layer_norm_backward,
    aten.native_group_norm.default: _native_group_norm,
    aten.native_group_norm_backward.default: _native_group_norm_backward,
    # losses, attention, dropout
    aten.nll_loss_forward.default: _nll_loss_forward,
    aten.nll_loss_backward.default: _nll_loss_backward,
    aten._scaled_dot_product_flash_attention_for_cpu.default: _flash_attention,
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default: _flash_attention_backward,
    aten.native_dropout.default: _native_dropout,
    aten.native_dropout_backward.default: _native_dropout_backward,
    # symbolic sizes (dynamic shapes: plain ints at run time)
    aten.sym_size.int: _sym_size,
    aten.sym_numel.default: lambda x: x.numel(),
}

# Python-level calls an FX graph makes besides aten ops: tuple indexing and arithmetic on symbolic sizes
PYTHON_OPS: dict[Any, Callable[..., Any]] = {
    operator.getitem: operator.getitem, operator.add: operator.add, operator.sub: operator.sub,
    operator.mul: operator.mul, operator.floordiv: operator.floordiv, operator.truediv: operator.truediv,
    operator.mod: operator.mod, operator.neg: operator.neg, operator.eq: operator.eq, operator.ne: operator.ne,
    operator.lt: operator.lt, operator.le: operator.le, operator.gt: operator.gt, operator.ge: operator.ge,
    math.ceil: math.ceil, math.floor: math.floor, math.sqrt: math.sqrt,
}


def core_aten_ops() -> list[Any]:
    """torch's core aten op set (the overloads tagged `core`): what a backend of decomposed graphs must cover."""
    ops = []
    for name in dir(aten):
        packet = getattr(aten, name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            if torch.Tag.core in op.tags:
                ops.append(op)
    return sorted(ops, key=str)


def core_aten_coverage() -> tuple[list[Any], list[Any]]:
    """(covered, missing): the core aten ops the table runs and those it lacks."""
    core = core_aten_ops()
    return [op for op in core if op in ATEN_OPS], [op for op in core if op not in ATEN_OPS]
