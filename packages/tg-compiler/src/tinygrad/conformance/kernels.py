"""Build a kernel AST by hand and launch it on a device through the public device contract.

`run_elementwise` writes the form the scheduler emits, `SINK(STORE(PARAM(0), expr), ...)` over `PARAM`
inputs, and launches it with `Device[name].get_runner(ast)` on `Buffer`s: the backend's renderer, compiler,
allocator and program all take part, while the Tensor layer (which might fold or rewrite an op before the
device sees it) does not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from tinygrad.conformance.values import Scalar, to_buffer_array
from tinygrad.device import Buffer, Device
from tinygrad.dtype import DType, dtypes
from tinygrad.uop.ops import Ops, UOp

#: builds output i's expression from the input PARAMs
ExprBuilder = Callable[[list[UOp]], UOp]


def run_elementwise(device: str, inputs: Sequence[tuple[DType, Sequence[Scalar]]],
                    outputs: Sequence[tuple[DType, ExprBuilder]]) -> list[np.ndarray]:
    """One kernel whose output i is `outputs[i][1](input params)` element by element; all inputs have one length.

    Returns each output buffer's contents as the array `to_buffer_array` would make (bfloat16 and the 8-bit floats
    as raw bits)."""
    n = len(inputs[0][1])
    if any(len(vals) != n for _, vals in inputs):
        raise ValueError(f"every input needs {n} values, got lengths {[len(v) for _, v in inputs]}")
    k = len(outputs)
    params = [UOp(Ops.PARAM, d, (), (k + j, n)) for j, (d, _) in enumerate(inputs)]
    stores = tuple(UOp(Ops.STORE, dtypes.void, (UOp(Ops.PARAM, d, (), (i, n)).reshape((n,)), build(params)))
                   for i, (d, build) in enumerate(outputs))
    out_bufs = [Buffer(device, n, d) for d, _ in outputs]
    in_bufs = [Buffer(device, n, d).copyin(to_buffer_array(vals, d).data.cast("B")) for d, vals in inputs]
    runner = Device[device].get_runner(UOp(Ops.SINK, dtypes.void, stores))
    runner([*out_bufs, *in_bufs], {})
    return [b.numpy() for b in out_bufs]
