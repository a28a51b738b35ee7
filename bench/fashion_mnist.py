"""Fashion-MNIST from its IDX files, with numpy only, and the batches every framework trains on.

Every worker loads the data through this module and draws batch i from the same seeded generator,
so PyTorch, tinygrad 0.14.0 and this project see exactly the same images in the same order.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist package
FILES = {"train_x": "train-images-idx3-ubyte", "train_y": "train-labels-idx1-ubyte",
         "test_x": "t10k-images-idx3-ubyte", "test_y": "t10k-labels-idx1-ubyte"}


def data_dir() -> Path:
    return Path(os.environ.get("FASHION_MNIST_DIR", DEFAULT_DIR))


def missing_reason() -> str | None:
    """None when the four files are present, else where they were looked for and how to get them."""
    folder = data_dir()
    absent = [name for name in FILES.values()
              if not (folder / name).exists() and not (folder / f"{name}.gz").exists()]
    if not absent:
        return None
    return (f"Fashion-MNIST not found in {folder} (missing {', '.join(absent)}); install it with "
            f"`apt-get install dataset-fashion-mnist` or point FASHION_MNIST_DIR at a folder holding the IDX files")


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (optionally gzipped): a 4-byte magic whose last byte is the rank, then big-endian sizes."""
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path} is not an IDX file of unsigned bytes (magic {raw[:4].hex()})")
    rank = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(rank)]
    offset = 4 + 4 * rank
    expected = int(np.prod(dims))
    if len(raw) - offset != expected:
        raise ValueError(f"{path} holds {len(raw) - offset} data bytes, its header says {dims} = {expected}")
    return np.frombuffer(raw, dtype=np.uint8, offset=offset).reshape(dims)


def load() -> dict[str, np.ndarray]:
    """Images as float32 pixel values 0..255 shaped (N, 1, 28, 28), as examples/beautiful_mnist.py feeds them (not
    scaled: see the note there), labels as int32."""
    if (why := missing_reason()) is not None:
        raise FileNotFoundError(why)
    folder, out = data_dir(), {}
    for key, name in FILES.items():
        path = folder / name if (folder / name).exists() else folder / f"{name}.gz"
        array = read_idx(path)
        out[key] = (array.reshape(-1, 1, 28, 28).astype(np.float32) if key.endswith("_x")
                    else array.astype(np.int32))
    return out


def batch_indices(step: int, batch: int, n_train: int, seed: int = 0) -> np.ndarray:
    """The sample indices of training step `step`: the same in every process for the same seed."""
    return np.random.default_rng([seed, step]).integers(0, n_train, size=batch)
