"""Moving raw bytes between files, numpy and tensors, shared by the checkpoint readers and writers."""

from __future__ import annotations

import os
import pathlib

import numpy as np
from tinygrad import Tensor, dtypes
from tinygrad.dtype import EMULATED_FLOATS, DType, is_emulated_float, to_numpy

FileLike = str | os.PathLike | Tensor | bytes | bytearray | memoryview


def read_bytes(src: FileLike) -> bytes:
    """The whole content of a file name, a uint8 tensor of file bytes, or bytes."""
    if isinstance(src, Tensor):
        if src.dtype != dtypes.uint8 or src.ndim != 1:
            raise TypeError(f"a tensor holding a file must be 1-d uint8 (Tensor(pathlib.Path(...).read_bytes())), "
                            f"got {src.dtype} of shape {src.shape}")
        return src.numpy().tobytes()
    if isinstance(src, (bytes, bytearray, memoryview)):
        return bytes(src)
    return pathlib.Path(src).read_bytes()


def tensor_from_raw(raw: bytes | memoryview, dtype: DType, shape: tuple[int, ...], device: str | None = None,
                    byteswap: bool = False) -> Tensor:
    """A tensor of `dtype` and `shape` from its little-endian (or, with byteswap, big-endian) bytes."""
    if is_emulated_float(dtype):
        # numpy has no bfloat16 or 8-bit floats: upload the bit patterns and reinterpret them
        bits = np.frombuffer(raw, dtype=to_numpy(dtype).newbyteorder("<"))
        bits = bits.byteswap() if byteswap else bits
        return Tensor(bits.reshape(shape).copy(), device=device).bitcast(dtype).realize()
    arr = np.frombuffer(raw, dtype=to_numpy(dtype).newbyteorder("<"))
    if byteswap:
        arr = arr.byteswap()
    return Tensor(arr.reshape(shape).copy(), device=device, dtype=dtype).realize()


def tensor_to_raw(t: Tensor) -> bytes:
    """A tensor's elements as little-endian bytes, in C order."""
    if is_emulated_float(t.dtype):  # their bit patterns, not the float32 values numpy() gives
        bits = t.bitcast(EMULATED_FLOATS[t.dtype]).numpy()
        return np.ascontiguousarray(bits).astype(bits.dtype.newbyteorder("<"), copy=False).tobytes()
    arr = t.numpy()
    return np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
