"""DISK: a file as device memory, as tinygrad's `device="disk:PATH"`.

A DISK tensor's buffer is the file mapped into memory (`mmap`), from its first byte: `Tensor.empty(n, dtype=...,
device="disk:/path")` reads the file's first bytes as that tensor without reading the file, `t.to("disk:/path")`
writes t there (creating the file, or growing it to the tensor's size), and `Tensor(pathlib.Path(p))` is the whole
file as uint8. `disk:shm:NAME` is a POSIX shared-memory object (`/dev/shm/NAME`).

The device holds bytes and runs no kernels. Views of a DISK tensor (slices, reshapes, same-size bitcasts) that cover
one contiguous byte range are buffers too, another window on the same mapping (`region`); what reads a DISK
tensor elsewhere copies only the ranges it reads (both in engine/disk_views.py). Writes go into the file in place:
that is what the device is for, so a DISK write is not the temporary-file-and-rename this project uses for files it
writes on its own account.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tinygrad.device.contract import Allocator, DeviceKnobs, Runner

if TYPE_CHECKING:
    from tinygrad.dtype import DType
    from tinygrad.uop.ops import UOp

NAME = "DISK"


def is_disk(device: object) -> bool:
    return isinstance(device, str) and device[:5].upper() == "DISK:"


def file_of(device: str) -> str:
    """The file a DISK device name stands for: `DISK:/path` is /path, `DISK:shm:NAME` the shared-memory object."""
    rest = device[5:]
    if not rest:
        raise ValueError(f"device {device!r} names no file: write disk:/path/to/file")
    return f"/dev/shm/{rest[4:]}" if rest.startswith("shm:") else rest


@dataclass(eq=False)
class DiskRegion:
    """`nbytes` bytes from `offset` of a mapped file. `mapping` is None for an empty region (mmap maps no 0 bytes)."""

    mapping: mmap.mmap | None
    offset: int
    nbytes: int
    path: str
    writable: bool

    def view(self) -> memoryview:
        if self.mapping is None:
            return memoryview(b"")
        return memoryview(self.mapping)[self.offset:self.offset + self.nbytes]


class DiskAllocator(Allocator):
    def __init__(self, device: str):
        self.device = device
        self.path = file_of(device)

    def alloc(self, nbytes: int) -> DiskRegion:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            writable = True
        except PermissionError:
            fd = os.open(self.path, os.O_RDONLY)
            writable = False
        except OSError as e:
            raise OSError(f"{self.device}: cannot open {self.path}: {e.strerror}") from e
        try:
            size = os.fstat(fd).st_size
            if size < nbytes:
                if not writable:
                    raise OSError(f"{self.device}: {self.path} holds {size} bytes and is read-only; a tensor of "
                                  f"{nbytes} bytes does not fit (make the tensor smaller or the file writable)")
                os.ftruncate(fd, nbytes)  # a new file, or one shorter than what is written to it, grows (zeros)
            mapping = mmap.mmap(fd, nbytes, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ) \
                if nbytes else None
        finally:
            os.close(fd)  # the mapping stays valid without the descriptor
        return DiskRegion(mapping, 0, nbytes, self.path, writable)

    def free(self, opaque: DiskRegion, nbytes: int) -> None:
        pass  # the mapping is unmapped when the last region that shares it is gone

    def copyin(self, dest: DiskRegion, src: memoryview) -> None:
        if not dest.writable:
            raise OSError(f"{self.device}: {dest.path} is read-only; it cannot be written")
        dest.view()[:] = src.cast("B")

    def copyout(self, dest: memoryview, src: DiskRegion) -> None:
        dest.cast("B")[:] = src.view()

    def host_view(self, opaque: DiskRegion, nbytes: int) -> memoryview:
        """The bytes, read in place (engine/realize.py copies from it without a staging array)."""
        return opaque.view()[:nbytes]


class DiskDevice:
    """The runtime of one file. It has an allocator and no compiler: every computation on a DISK tensor happens
    after it is copied to a compute device."""

    def __init__(self, device: str):
        self.name = device
        self.allocator: Allocator = DiskAllocator(device)

    def get_runner(self, ast: UOp) -> Runner:
        raise RuntimeError(f"{self.name} holds bytes and runs no kernels: copy the tensor to a compute device first "
                           f"(t.to('CPU')), compute there, and write the result back with .to('{self.name}') or "
                           f"assign")

    def supports_dtype(self, dtype: DType) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    @property
    def knobs(self) -> DeviceKnobs:
        raise RuntimeError(f"{self.name} runs no kernels, so it has no tuning knobs")

