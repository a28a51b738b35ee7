"""Sliding windows as movement ops, and a convolution's weight gradient built on them, for tensors and UOps alike.

The Tensor layer cuts the windows of convolutions and pools (mixin/processing.py); the scheduler's layout pass
(engine/layout.py) rebuilds a weight gradient in batch chunks. Both use these functions, so that a graph the pass
rebuilds is the one the Tensor layer would have built: Tensor's movement methods take the same tuples as UOp's and
make the same nodes."""

from __future__ import annotations

from typing import Any, Protocol, Self, TypeVar

from tinygrad.uop.ops import Ops, UOp


class Movable(Protocol):
    """What cutting windows needs of a value: a `Tensor` or a `UOp`."""

    @property
    def shape(self) -> tuple[Any, ...]: ...
    def reshape(self, shape: tuple[Any, ...]) -> Self: ...
    def expand(self, shape: tuple[Any, ...]) -> Self: ...
    def shrink(self, bounds: tuple[tuple[Any, Any], ...]) -> Self: ...
    def permute(self, order: tuple[int, ...]) -> Self: ...


M = TypeVar("M", bound=Movable)


def overlapping(kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]) -> bool:
    """Whether windows overlap (or are dilated), which only an expand can cut."""
    return not (all(k <= s for k, s in zip(kernel, stride)) and all(d == 1 for d in dilation))


def window_lengths(kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
                   outs: tuple[int, ...]) -> list[int]:
    """The length of each of the last n dims that `cut_windows` reads: the input is cropped or extended to it."""
    if not overlapping(kernel, stride, dilation):
        return [o * s for o, s in zip(outs, stride)]
    return [o * s + d * (k - 1) for o, s, k, d in zip(outs, stride, kernel, dilation)]


def _whole(x: Movable, npre: int) -> tuple[tuple[int, Any], ...]:
    return tuple((0, s) for s in x.shape[:npre])


def cut_windows(x: M, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
                outs: tuple[int, ...]) -> M:
    """Every sliding window of the last n dims as a view: (..., i1..in) -> (..., o1..on, k1..kn), with
    result[..., o, k] = x[..., o*stride + k*dilation] (per dimension). The last n dims must have the lengths
    `window_lengths` gives."""
    n = len(kernel)
    pre = x.shape[:-n]
    npre = len(pre)
    if not overlapping(kernel, stride, dilation):
        # windows that do not overlap: split each dim into (o, s) and keep the first k of every step
        x = x.reshape(pre + tuple(v for o, s in zip(outs, stride) for v in (o, s)))
        x = x.shrink(_whole(x, npre) + tuple(b for o, k in zip(outs, kernel) for b in ((0, o), (0, k))))
        # (..., o1, k1, o2, k2, ...) -> (..., o1..on, k1..kn)
        return x.permute(tuple(range(npre)) + tuple(npre + 2 * i for i in range(n)) +
                         tuple(npre + 2 * i + 1 for i in range(n)))
    # Overlapping (or dilated) windows repeat elements, which only an expand can do. Lay e copies of each row of
    # length L end to end and read them back in rows of L + d: row k then starts k*d further into the data, so
    # element (k, j) is x[j + k*d]. Keeping every s-th j of the first o*s gives x[o*s + k*d].
    lens = x.shape[npre:]
    reps = [-(-k * (ln + d) // ln) for k, ln, d in zip(kernel, lens, dilation)]
    x = x.reshape(pre + tuple(v for ln in lens for v in (1, ln)))
    x = x.expand(pre + tuple(v for e, ln in zip(reps, lens) for v in (e, ln)))
    x = x.reshape(pre + tuple(e * ln for e, ln in zip(reps, lens)))
    x = x.shrink(_whole(x, npre) + tuple((0, k * (ln + d)) for k, ln, d in zip(kernel, lens, dilation)))
    x = x.reshape(pre + tuple(v for k, ln, d in zip(kernel, lens, dilation) for v in (k, ln + d)))
    x = x.shrink(_whole(x, npre) + tuple(b for k, o, s in zip(kernel, outs, stride) for b in ((0, k), (0, o * s))))
    x = x.reshape(pre + tuple(v for k, o, s in zip(kernel, outs, stride) for v in (k, o, s)))
    x = x.shrink(_whole(x, npre) + tuple(b for k, o in zip(kernel, outs) for b in ((0, k), (0, o), (0, 1))))
    x = x.reshape(pre + tuple(v for k, o in zip(kernel, outs) for v in (k, o)))
    # (..., k1, o1, k2, o2, ...) -> (..., o1..on, k1..kn)
    return x.permute(tuple(range(npre)) + tuple(npre + 2 * i + 1 for i in range(n)) +
                     tuple(npre + 2 * i for i in range(n)))


def _summed(x: UOp, axes: tuple[int, ...]) -> UOp:
    """The sum over `axes` without them, as Tensor.sum makes it."""
    return x.reduce_axis(Ops.ADD, axes).reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))


def weight_gradient(source: UOp, grad: UOp, kernel: tuple[int, ...], outs: tuple[int, ...], chunks: int) -> UOp:
    """The gradient (cout, cin, k...) of a stride-1 convolution's weight: every window of the padded input
    `source` (bs, cin, i...) times the output gradient `grad` (bs, cout, o...), summed over the batch and the
    positions. With `chunks` > 1 the batch is summed in that many partial sums first (split before the windows are
    cut, where it is a plain outer dimension of both operands), then over them."""
    n = len(kernel)
    bs, cin, cout = source.shape[0], source.shape[1], grad.shape[1]
    batch = (chunks, bs // chunks)
    taps = cut_windows(source.reshape(batch + source.shape[1:]), kernel, (1,) * n, (1,) * n, outs)
    a = taps.reshape(batch + (1, cin) + outs + kernel)
    b = grad.reshape(batch + (cout, 1) + outs + (1,) * n)
    shape = tuple(max(p, q) for p, q in zip(a.shape, b.shape))
    dw = _summed(a.expand(shape).alu(Ops.MUL, b.expand(shape)), (1,) + tuple(range(4, 4 + n)))
    return _summed(dw, (0,)) if chunks > 1 else dw.reshape(dw.shape[1:])
