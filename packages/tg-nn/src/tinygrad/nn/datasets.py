"""MNIST, Fashion-MNIST and CIFAR-10 as tensors: `X_train, Y_train, X_test, Y_test = mnist()`.

Images are uint8 (N, C, H, W) tensors, labels uint8 (N,). Where the files come from (an argument, an environment
variable, the cache, Debian's dataset-fashion-mnist package, a download) is described in `_datafiles.py`. The
files are parsed from their documented binary formats: IDX for the MNISTs, CIFAR-10's binary version (one label
byte and 3072 pixel bytes per record) read straight out of its tar.gz without extracting it, never the pickled
python version.
"""

from __future__ import annotations

import gzip
import os
import pathlib
import struct
import tarfile
from collections.abc import Mapping

import numpy as np
from tinygrad import Tensor
from tinygrad.nn._datafiles import DataFiles, DatasetError, locate

__all__ = ["DatasetError", "cifar", "mnist", "parse_idx"]

_MNIST_NAMES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                "t10k-labels-idx1-ubyte.gz")
MNIST = DataFiles(
    name="mnist",
    # the checksums published with the files (MD5 is what is published; it detects damage, not tampering)
    checksums=dict(zip(_MNIST_NAMES, ("md5:f68b3c2dcbeaaa9fbdd348bbdeb94873", "md5:d53e105ee54ea40749a09fcbcd1e9432",
                                      "md5:9fb629c4189551a2d022fa330f9573f3", "md5:ec29112dd5afa0611ce80d1b7f02629c"))),
    dir_env="MNIST_DIR", url_env="MNIST_URL", url_base="https://storage.googleapis.com/cvdf-datasets/mnist/")
FASHION_MNIST = DataFiles(
    name="fashion-mnist",
    checksums=dict(zip(_MNIST_NAMES, (
        "sha256:b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7",
        "sha256:0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056",
        "sha256:cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa",
        "sha256:8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05"))),
    dir_env="FASHION_MNIST_DIR", url_env="FASHION_MNIST_URL",
    url_base="http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
    system_dirs=("/usr/share/datasets/fashion-mnist",),
    how_to_get="on Debian/Ubuntu `apt-get install dataset-fashion-mnist` (files in /usr/share/datasets/fashion-mnist); "
               "or ")
CIFAR10 = DataFiles(
    name="cifar-10", checksums={"cifar-10-binary.tar.gz": "md5:c32a1d4ab5d03f1284b67883e8d87530"},
    dir_env="CIFAR_DIR", url_env="CIFAR_URL", url_base="https://www.cs.toronto.edu/~kriz/")

# IDX element types: code -> big-endian numpy dtype
_IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def parse_idx(raw: bytes, where: str = "<bytes>") -> np.ndarray:
    """An IDX file (gzip-compressed or not) as a numpy array: 2 zero bytes, a type code, the number of dims, each
    dim as a big-endian uint32, then the big-endian elements."""
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise DatasetError(f"{where}: damaged gzip data ({e}); delete the file so that it is fetched again") \
                from None
    if len(raw) < 4 or raw[:2] != b"\0\0" or raw[2] not in _IDX_TYPES:
        raise DatasetError(f"{where}: not an IDX file (its magic number is {raw[:4].hex() or 'missing'})")
    ndim = raw[3]
    if len(raw) < 4 + 4 * ndim:
        raise DatasetError(f"{where}: IDX header truncated ({len(raw)} bytes for {ndim} dims)")
    shape = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
    dtype = np.dtype(_IDX_TYPES[raw[2]])
    want = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    body = raw[4 + 4 * ndim:]
    if len(body) != want:
        raise DatasetError(f"{where}: IDX data of shape {shape} needs {want} bytes, the file has {len(body)}; it is "
                           f"truncated or damaged")
    return np.frombuffer(body, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))


def mnist(device: str | None = None, fashion: bool = False, *, directory: str | os.PathLike | None = None,
          download: bool = True, url_base: str | None = None,
          checksums: Mapping[str, str | None] | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(X_train (60000, 1, 28, 28), Y_train (60000,), X_test (10000, 1, 28, 28), Y_test (10000,)), uint8.
    `fashion`: Fashion-MNIST instead of the digits. `checksums`: override the known ones by file name
    ("sha256:<hex>", "md5:<hex>", or None to skip) for files of your own."""
    spec = FASHION_MNIST if fashion else MNIST
    where = locate(spec, directory, download, url_base, checksums)
    arrays = [parse_idx((where / f).read_bytes(), str(where / f)) for f in _MNIST_NAMES]
    x_train, y_train, x_test, y_test = arrays
    for x, y, part in ((x_train, y_train, "train"), (x_test, y_test, "test")):
        if x.ndim != 3 or y.ndim != 1 or x.shape[0] != y.shape[0]:
            raise DatasetError(f"{where}: the {part} images {x.shape} and labels {y.shape} do not match")
    return (Tensor(x_train.reshape(-1, 1, *x_train.shape[1:]), device=device), Tensor(y_train, device=device),
            Tensor(x_test.reshape(-1, 1, *x_test.shape[1:]), device=device), Tensor(y_test, device=device))


_CIFAR_RECORD = 1 + 3 * 32 * 32
_CIFAR_TRAIN = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
_CIFAR_TEST = "test_batch.bin"


def _cifar_records(raw: bytes, where: str) -> tuple[np.ndarray, np.ndarray]:
    if len(raw) % _CIFAR_RECORD:
        raise DatasetError(f"{where}: {len(raw)} bytes is not a whole number of {_CIFAR_RECORD}-byte CIFAR-10 "
                           f"records; the file is truncated or damaged")
    records = np.frombuffer(raw, dtype=np.uint8).reshape(-1, _CIFAR_RECORD)
    return records[:, 1:].reshape(-1, 3, 32, 32), records[:, 0].copy()


def _read_cifar_archive(path: pathlib.Path) -> dict[str, bytes]:
    """The batch files of cifar-10-binary.tar.gz by base name, read from the archive without extracting it."""
    wanted = {*_CIFAR_TRAIN, _CIFAR_TEST}
    out: dict[str, bytes] = {}
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar:
                base = member.name.rsplit("/", 1)[-1]
                if base in wanted and member.isfile():
                    f = tar.extractfile(member)
                    if f is not None:
                        out[base] = f.read()
    except (tarfile.TarError, OSError, EOFError) as e:
        raise DatasetError(f"{path}: damaged archive ({e}); delete it so that it is fetched again") from None
    missing = sorted(wanted - out.keys())
    if missing:
        raise DatasetError(f"{path}: the archive lacks {missing}; it is not CIFAR-10's binary version")
    return out


def cifar(device: str | None = None, *, directory: str | os.PathLike | None = None, download: bool = True,
          url_base: str | None = None,
          checksums: Mapping[str, str | None] | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """CIFAR-10: (X_train (50000, 3, 32, 32), Y_train (50000,), X_test (10000, 3, 32, 32), Y_test (10000,)), uint8,
    from the binary version's archive cifar-10-binary.tar.gz."""
    where = locate(CIFAR10, directory, download, url_base, checksums) / "cifar-10-binary.tar.gz"
    files = _read_cifar_archive(where)
    train = [_cifar_records(files[n], f"{where}:{n}") for n in _CIFAR_TRAIN]
    x_test, y_test = _cifar_records(files[_CIFAR_TEST], f"{where}:{_CIFAR_TEST}")
    x_train, y_train = np.concatenate([x for x, _ in train]), np.concatenate([y for _, y in train])
    return (Tensor(x_train, device=device), Tensor(y_train, device=device), Tensor(x_test, device=device),
            Tensor(y_test, device=device))
