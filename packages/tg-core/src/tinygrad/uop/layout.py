"""Layout hints: the args of `Ops.LAYOUT`, which the Tensor layer puts on the operands of a matmul or a convolution.

A hint says where a copy of a value in another memory layout could pay, and carries the static facts of the
operation the value feeds; it never says whether to copy. That is the target's choice, made when the graph is
scheduled (engine/layout.py reads the device's knobs), so the Tensor layer builds the same graph on every device.
A `LAYOUT` node has its source's value, dtype and shape, and its gradient passes through unchanged."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PanelPacked:
    """The right operand y (..., k, m) of a matmul, which may be read from a panel-major copy. `rows`: how many
    rows of the left operand read each matrix of y (None where a size is symbolic)."""

    rows: int | None


@dataclass(frozen=True)
class ConvOperand:
    """The padded input (`role` "input") or the weight ("weight") of a convolution, which may be read from a copy
    with the border written out (the input) or with the output channels innermost (the weight). Both hints of one
    convolution carry the same facts, so the pass makes one decision for the pair."""

    role: str
    padded_shape: tuple  # the padded input's shape (ints, or UOps where symbolic)
    out_shape: tuple  # (batch, cout, outs...)
    pads: tuple[tuple[int, int], ...]  # (before, after) per spatial dim
    window: bool  # the last spatial dim's kernel is wider than one
    groups: int
    may_copy_border: bool  # conv2d's input; conv_transpose2d's input, spread out with zeros, stays a view


@dataclass(frozen=True)
class WeightGradOperand:
    """The padded input ("input") or the output gradient ("grad") that a convolution's weight gradient reads, which
    may be read from a copy with the channels innermost."""

    role: str
    cin: int
    cout: int


@dataclass(frozen=True)
class BatchChunked:
    """A convolution's weight gradient summed over a batch of `bs` images at once (uop/windows.py's
    `weight_gradient`), which may be summed in chunks of images instead. `bytes_per_image`: the input and output
    gradient bytes that one image adds to a chunk."""

    bs: int
    bytes_per_image: int
