"""Utilities of the Tensor API that are not math: low-level op access, in-place replacement, symbolic-shape
bounds, hashing, and loading bytes from a URL."""

from __future__ import annotations

import hashlib
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Self

import numpy as np

from tinygrad.dtype import DTypeLike, dtypes
from tinygrad.helpers import prod
from tinygrad.mixin.common import Scalar, TensorBase
from tinygrad.uop.ops import GroupOp, Ops
from tinygrad.uop.placement import DeviceLike

#: the Keccak configurations keccak() accepts (FIPS 202 names, as hashlib spells them); shake digests are 32 bytes
KECCAK_CONFIGS = ("sha3_224", "sha3_256", "sha3_384", "sha3_512", "shake_128", "shake_256")


class UtilityMixin(TensorBase):
    __slots__ = ()

    def alu(self, op: Ops, *src: Self) -> Self:
        """Apply one ALU op of the IR (`Ops.ADD`, `Ops.MAX`, ...) to this tensor and `src`, broadcasting them.

        Examples:
            >>> from tinygrad.uop.ops import Ops
            >>> Tensor([1, 5]).alu(Ops.MAX, Tensor([3, 2])).tolist()
            [3, 5]
            >>> Tensor([1.0, 4.0]).alu(Ops.SQRT).tolist()
            [1.0, 2.0]
        """
        if op not in GroupOp.ALU:
            raise ValueError(f"alu takes an ALU op ({sorted(o.name for o in GroupOp.ALU)}), got {op}")
        if op is Ops.WHERE:
            return self.where(*src)
        operands = [self, *src]
        want = 1 if op in GroupOp.Unary else 2
        if len(operands) != want:
            raise ValueError(f"{op.name} takes {want} operand(s), got {len(operands)}")
        if len(operands) == 1:
            return self._unop(op)
        return self._binop(op, src[0])

    @classmethod
    def const(cls, b: Scalar, dtype: DTypeLike | None = None, device: DeviceLike = None) -> Self:
        """A 0-d tensor holding the constant `b` (lazy: no buffer until it is realized).

        Examples:
            >>> c = Tensor.const(3)
            >>> c.shape, c.item()
            ((), 3)
            >>> Tensor.const(2, dtype=dtypes.float32).item()
            2.0
        """
        if not isinstance(b, (bool, int, float)):
            raise TypeError(f"const takes a Python number, got {type(b).__name__}")
        return cls(b, dtype=dtype, device=device)

    def ufix(self, x: Self | Scalar) -> Self:
        """`x` as a tensor that can meet this one in an op: Python numbers become constants of a matching dtype.

        Examples:
            >>> Tensor([1.0]).ufix(2).dtype
            dtypes.float32
            >>> Tensor([1, 2]).ufix(2.5).item()
            2.5
        """
        return x if isinstance(x, TensorBase) else self._const_operand(x)

    def replace(self, x: Self) -> Self:
        """Give this tensor the value (and dtype) of `x`, which must have the same shape; returns self.

        Examples:
            >>> t = Tensor([1, 2])
            >>> t.replace(Tensor([3.0, 4.0])).tolist(), t.dtype
            ([3.0, 4.0], dtypes.float32)
        """
        if not isinstance(x, TensorBase):
            raise TypeError(f"replace needs a Tensor, got {type(x).__name__}")
        if x.shape != self.shape:
            raise ValueError(f"replace of a tensor of shape {self.shape} by one of shape {x.shape}: shapes must match")
        if x.device != self.device:
            x = x.to(self.device)
        self.uop = x.uop
        return self

    def to_(self, device: DeviceLike) -> Self:
        """Move this tensor to `device` in place; returns self.

        Examples:
            >>> t = Tensor([1, 2])
            >>> t.to_("CPU") is t, t.device
            (True, 'CPU')
        """
        moved = self.to(device)
        self.uop, self.device = moved.uop, moved.device
        return self

    @property
    def max_shape(self) -> tuple[int, ...]:
        """The shape with every symbolic dimension replaced by its largest value.

        Examples:
            >>> n = Variable("n", 1, 10).bind(4)
            >>> t = Tensor.arange(10)[:n]
            >>> t.max_shape
            (10,)
            >>> Tensor.zeros(2, 3).max_shape
            (2, 3)
        """
        return tuple(s if isinstance(s, int) else int(s.vmax) for s in self.shape)

    def max_numel(self) -> int:
        """The number of elements of `max_shape`.

        Examples:
            >>> n = Variable("n", 1, 10).bind(4)
            >>> Tensor.zeros(3, 10)[:, :n].max_numel()
            30
        """
        return prod(self.max_shape)

    def _host_bytes(self) -> np.ndarray:
        data = np.ascontiguousarray(self.numpy())
        return data.reshape(data.shape[:-1] + (-1,)).view(np.uint8) if data.ndim else data.reshape(1).view(np.uint8)

    def hash(self) -> Self:
        """A 16-byte digest (BLAKE2b) of the tensor's shape, dtype and data, as a uint8 tensor, computed on the host.
        The digest is this project's own: equal tensors hash alike, but the bytes differ from tinygrad's `hash`.

        Examples:
            >>> h = Tensor([1, 2, 3]).hash()
            >>> h.shape, h.dtype
            ((16,), dtypes.uint8)
            >>> h.tolist() == Tensor([1, 2, 3]).hash().tolist(), h.tolist() == Tensor([1, 2, 4]).hash().tolist()
            (True, False)
        """
        h = hashlib.blake2b(digest_size=16)
        h.update(repr((tuple(self.shape), self.dtype.name)).encode())
        h.update(np.ascontiguousarray(self.numpy()).tobytes())
        return type(self)(np.frombuffer(h.digest(), dtype=np.uint8), device=self.device)

    def keccak(self, cfg: str = "sha3_256") -> Self:
        """A Keccak (SHA-3) hash of each row of bytes along the last dimension; returns uint8 digests.

        Examples:
            >>> digest = Tensor(b"abc").keccak()
            >>> digest.shape, bytes(digest.tolist()).hex()[:16]
            ((32,), '3a985da74fe225b2')
        """
        if cfg not in KECCAK_CONFIGS:
            raise ValueError(f"unknown keccak configuration {cfg!r}; use one of {sorted(KECCAK_CONFIGS)}")
        rows = self._host_bytes()
        flat = rows.reshape(-1, rows.shape[-1]) if rows.ndim > 1 else rows.reshape(1, -1)

        def digest(row: np.ndarray) -> bytes:
            h = hashlib.new(cfg, row.tobytes())
            return h.digest(32) if cfg.startswith("shake") else h.digest()  # type: ignore[call-arg]

        out = np.stack([np.frombuffer(digest(r), dtype=np.uint8) for r in flat]) if len(flat) else \
            np.zeros((0, 32), dtype=np.uint8)
        lead = self.shape[:-1] if self.ndim > 1 else ()
        return type(self)(out.reshape(*lead, out.shape[-1]), device=self.device)

    @classmethod
    def from_url(cls, url: str, device: DeviceLike = None, dtype: DTypeLike | None = None,
                 timeout: float = 30.0, gunzip: bool = False, **kwargs: Any) -> Self:
        """The bytes at `url` (http(s) or file://, or a plain local path) as a 1-D uint8 tensor (or `dtype`);
        `gunzip=True` decompresses them (gzip) first.

        Examples:
            >>> import tempfile
            >>> with tempfile.NamedTemporaryFile(suffix=".bin") as f:
            ...     _ = f.write(bytes([1, 2, 3]))
            ...     f.flush()
            ...     print(Tensor.from_url(f.name).tolist())
            [1, 2, 3]
        """
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme in ("", "file"):
            path = Path(urllib.request.url2pathname(parsed.path) if parsed.scheme else url)
            if not path.exists():
                raise FileNotFoundError(f"from_url: {path} does not exist")
            data = path.read_bytes()
        elif parsed.scheme in ("http", "https"):
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                data = resp.read()
        else:
            raise ValueError(f"from_url supports http(s)://, file:// and local paths, not {parsed.scheme}://")
        if gunzip:
            import gzip
            data = gzip.decompress(data)
        out = cls(data, device=device, **kwargs)
        return out if dtype is None else out.bitcast_bytes(dtype)

    def bitcast_bytes(self, dtype: DTypeLike) -> Self:
        """Reinterpret a 1-D uint8 tensor as `dtype` (its length must be a multiple of the item size).

        Examples:
            >>> Tensor(bytes([0, 0, 128, 63, 0, 0, 0, 64])).bitcast_bytes(dtypes.float32).tolist()
            [1.0, 2.0]
        """
        from tinygrad.dtype import is_emulated_float, to_dtype, to_numpy

        d = to_dtype(dtype)
        if self.dtype != dtypes.uint8 or self.ndim != 1:
            raise TypeError(f"bitcast_bytes needs a 1-D uint8 tensor, got {self.dtype} of shape {self.shape}")
        if self.shape[0] % d.itemsize:
            raise ValueError(f"{self.shape[0]} bytes are not a whole number of {d.name} items ({d.itemsize} bytes)")
        raw = self.numpy().view(to_numpy(d))  # bfloat16 and the 8-bit floats travel as their bit patterns
        out = type(self)(raw, device=self.device)
        return out.bitcast(d) if is_emulated_float(d) else out

