"""Helpers for the optimisation tests: kernel ASTs built by hand, devices that may be missing, and running
one AST with a chosen opt list on a device."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tinygrad.codegen import ProgramSpec, get_program
from tinygrad.codegen.opt import Opt
from tinygrad.dtype import DType, dtypes
from tinygrad.uop.ops import Ops, UOp

F32 = dtypes.float32


def param(index: int, size: int, dtype: DType = F32) -> UOp:
    return UOp(Ops.PARAM, dtype, (), (index, size))


def store(out_shape: tuple[int, ...], value: UOp, dtype: DType = F32) -> UOp:
    size = int(np.prod(out_shape))
    out = param(0, size, dtype).reshape(out_shape)
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, value)),))


def matmul_ast(m: int, k: int, n: int) -> UOp:
    """out[m, n] = sum_k a[m, k] * b[k, n], the way Tensor.matmul builds it: broadcast, multiply, reduce."""
    a = param(1, m * k).reshape((m, 1, k)).expand((m, n, k))
    b = param(2, k * n).reshape((k, n)).permute((1, 0)).reshape((1, n, k)).expand((m, n, k))
    return store((m, n, 1), (a * b).reduce_axis(Ops.ADD, (2,)))


def reduce_ast(rows: int, cols: int, op: Ops = Ops.ADD) -> UOp:
    x = param(1, rows * cols).reshape((rows, cols))
    return store((rows, 1), x.reduce_axis(op, (1,)))


def elementwise_ast(shape: tuple[int, ...]) -> UOp:
    size = int(np.prod(shape))
    x = param(1, size).reshape(shape)
    y = param(2, shape[-1]).reshape((1,) * (len(shape) - 1) + (shape[-1],)).expand(shape)  # broadcast
    return store(shape, x * y + UOp.const(F32, 1.0).reshape((1,) * len(shape)).expand(shape))


def device_or_skip(name: str) -> Any:
    from tinygrad.device import Device

    try:
        return Device[name]
    except Exception as e:
        pytest.skip(f"device {name} is not available here: {e}")


def run_ast(dev: Any, ast: UOp, inputs: dict[int, np.ndarray], out_size: int,
            opts: tuple[Opt, ...] | None) -> tuple[np.ndarray, ProgramSpec]:
    """Compile `ast` with exactly `opts` (None: the heuristics) on `dev`, run it once, return the output."""
    spec = get_program(ast, dev.renderer, opts)
    lib = dev.compiler.compile(spec.src)
    program = dev.runtime(spec, lib)
    bufs: dict[int, Any] = {}
    out = np.zeros(out_size, np.float32)
    bufs[0] = dev.allocator.alloc(out.nbytes)
    dev.allocator.copyin(bufs[0], memoryview(out.tobytes()))
    for i, arr in inputs.items():
        bufs[i] = dev.allocator.alloc(arr.nbytes)
        dev.allocator.copyin(bufs[i], memoryview(np.ascontiguousarray(arr).tobytes()))
    program(*[bufs[i] for i in spec.param_indices], global_size=spec.global_size, local_size=spec.local_size,
            vals=(), wait=True)
    dev.synchronize()
    raw = bytearray(out.nbytes)
    dev.allocator.copyout(memoryview(raw), bufs[0])
    return np.frombuffer(bytes(raw), np.float32).copy(), spec
