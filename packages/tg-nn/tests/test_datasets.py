"""Data set lookup, download, checksums and parsing, on small generated files (served by a local http.server for
the download path), plus the real Fashion-MNIST files where Debian's dataset-fashion-mnist package is installed."""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import http.server
import io
import pathlib
import struct
import subprocess
import sys
import tarfile
import threading

import numpy as np
import pytest
from tinygrad.nn import datasets
from tinygrad.nn.datasets import DatasetError, cifar, mnist, parse_idx

NAMES = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
         "t10k-labels-idx1-ubyte.gz"]


def idx_bytes(arr: np.ndarray) -> bytes:
    return struct.pack(">BBBB", 0, 0, 0x08, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape) + \
        arr.astype(np.uint8).tobytes()


def make_mnist(where: pathlib.Path, n_train: int = 5, n_test: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    arrays = {NAMES[0]: rng.integers(0, 256, (n_train, 28, 28)), NAMES[1]: rng.integers(0, 10, n_train),
              NAMES[2]: rng.integers(0, 256, (n_test, 28, 28)), NAMES[3]: rng.integers(0, 10, n_test)}
    where.mkdir(parents=True, exist_ok=True)
    for name, arr in arrays.items():
        (where / name).write_bytes(gzip.compress(idx_bytes(arr)))
    return arrays


def sha256s(where: pathlib.Path) -> dict[str, str | None]:
    return {n: "sha256:" + hashlib.sha256((where / n).read_bytes()).hexdigest() for n in NAMES}


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """An empty cache and no data set variables from the environment."""
    monkeypatch.setenv("TINYGRAD_CACHE_DIR", str(tmp_path / "cache"))
    for var in ("MNIST_DIR", "MNIST_URL", "FASHION_MNIST_DIR", "FASHION_MNIST_URL", "CIFAR_DIR", "CIFAR_URL"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def server(tmp_path):
    """A local HTTP server on 127.0.0.1 serving tmp_path/served; yields its URL base."""
    root = tmp_path / "served"
    root.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def check_mnist(result, arrays):
    x_train, y_train, x_test, y_test = result
    assert x_train.shape == (5, 1, 28, 28) and y_train.shape == (5,) and x_test.shape == (3, 1, 28, 28)
    np.testing.assert_array_equal(x_train.numpy()[:, 0], arrays[NAMES[0]])
    np.testing.assert_array_equal(y_train.numpy(), arrays[NAMES[1]])
    np.testing.assert_array_equal(x_test.numpy()[:, 0], arrays[NAMES[2]])
    np.testing.assert_array_equal(y_test.numpy(), arrays[NAMES[3]])


def test_explicit_directory_with_own_checksums(tmp_path):
    arrays = make_mnist(tmp_path / "mine")
    check_mnist(mnist(directory=tmp_path / "mine", download=False, checksums=sha256s(tmp_path / "mine")), arrays)


def test_environment_variable_directory(tmp_path, monkeypatch):
    arrays = make_mnist(tmp_path / "env")
    monkeypatch.setenv("MNIST_DIR", str(tmp_path / "env"))
    check_mnist(mnist(download=False, checksums=dict.fromkeys(NAMES)), arrays)


def test_known_checksums_reject_other_files(tmp_path):
    make_mnist(tmp_path / "mine")
    with pytest.raises(DatasetError, match=r"md5 .* expected f68b3c2d.*damaged"):
        mnist(directory=tmp_path / "mine", download=False)


def test_download_with_progress_then_cache(tmp_path, server, capsys):
    root, url = server
    arrays = make_mnist(root)
    sums = sha256s(root)
    check_mnist(mnist(url_base=url, checksums=sums), arrays)
    assert NAMES[0] in capsys.readouterr().err  # tqdm's bar names each file
    cached = tmp_path / "cache" / "datasets" / "mnist"
    assert sorted(p.name for p in cached.iterdir()) == sorted(NAMES)  # no temporary files left behind
    for name in NAMES:
        (root / name).unlink()
    check_mnist(mnist(download=False, checksums=sums), arrays)  # found in the cache, server files gone


def test_download_url_from_environment_and_bad_checksum(tmp_path, server, monkeypatch):
    root, url = server
    make_mnist(root)
    monkeypatch.setenv("MNIST_URL", url)
    sums = sha256s(root)
    sums[NAMES[2]] = "sha256:" + "0" * 64
    with pytest.raises(DatasetError, match="expected 0000"):
        mnist(checksums=sums)
    assert not (tmp_path / "cache" / "datasets" / "mnist" / NAMES[2]).exists()  # a bad download is not kept


def test_nothing_found_lists_every_place(tmp_path, server, monkeypatch):
    _, url = server  # serves nothing: every download is a 404
    monkeypatch.setenv("FASHION_MNIST_DIR", str(tmp_path / "nowhere"))
    monkeypatch.setattr(datasets, "FASHION_MNIST", dataclasses.replace(datasets.FASHION_MNIST,
                                                                       system_dirs=(str(tmp_path / "no-system"),)))
    with pytest.raises(DatasetError) as e:
        mnist(fashion=True, directory=tmp_path / "arg", url_base=url)
    msg = str(e.value)
    for expected in ("arg", "$FASHION_MNIST_DIR", "tinygrad cache", "no-system", "download from", "404",
                     "apt-get install dataset-fashion-mnist", "FASHION_MNIST_URL"):
        assert expected in msg, expected


def test_partial_directory_is_reported(tmp_path):
    make_mnist(tmp_path / "part")
    (tmp_path / "part" / NAMES[3]).unlink()
    with pytest.raises(DatasetError, match="has 3 of the 4 files"):
        mnist(directory=tmp_path / "part", download=False)


@pytest.mark.parametrize("blob,match", [(b"\x1f\x8b\x08\x00garbage", "damaged gzip"), (b"\0\0\x08", "not an IDX"),
                                        (b"\0\0\x08\x01\0\0", "header truncated"),
                                        (b"\0\0\x08\x01\0\0\0\x05abc", "needs 5 bytes")])
def test_idx_errors(blob, match):
    with pytest.raises(DatasetError, match=match):
        parse_idx(blob)


def test_idx_types_and_plain_files():
    arr = (np.arange(6).reshape(2, 3) - 3).astype(">i4")
    raw = struct.pack(">BBBB", 0, 0, 0x0C, 2) + struct.pack(">2I", 2, 3) + arr.tobytes()
    np.testing.assert_array_equal(parse_idx(raw), arr)
    np.testing.assert_array_equal(parse_idx(gzip.compress(raw)), arr)


def make_cifar(where: pathlib.Path, per_batch: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (6 * per_batch, 3, 32, 32), dtype=np.uint8)
    labels = rng.integers(0, 10, 6 * per_batch, dtype=np.uint8)
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
    where.mkdir(parents=True, exist_ok=True)
    with tarfile.open(where / "cifar-10-binary.tar.gz", "w:gz") as tar:
        for i, name in enumerate(names):
            sl = slice(i * per_batch, (i + 1) * per_batch)
            records = np.concatenate([labels[sl, None], images[sl].reshape(per_batch, -1)], axis=1).tobytes()
            info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
            info.size = len(records)
            tar.addfile(info, io.BytesIO(records))
    return images, labels


def test_cifar_from_archive(tmp_path):
    images, labels = make_cifar(tmp_path / "c")
    x_train, y_train, x_test, y_test = cifar(directory=tmp_path / "c", download=False,
                                             checksums={"cifar-10-binary.tar.gz": None})
    assert x_train.shape == (20, 3, 32, 32) and x_test.shape == (4, 3, 32, 32)
    np.testing.assert_array_equal(x_train.numpy(), images[:20])
    np.testing.assert_array_equal(y_train.numpy(), labels[:20])
    np.testing.assert_array_equal(x_test.numpy(), images[20:])
    np.testing.assert_array_equal(y_test.numpy(), labels[20:])


def test_cifar_damaged_archive(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "cifar-10-binary.tar.gz").write_bytes(gzip.compress(b"not a tar"))
    with pytest.raises(DatasetError, match=r"damaged archive|lacks"):
        cifar(directory=tmp_path / "c", download=False, checksums={"cifar-10-binary.tar.gz": None})


@pytest.mark.skipif(not pathlib.Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").exists(),
                    reason="Debian's dataset-fashion-mnist package is not installed (apt-get install "
                           "dataset-fashion-mnist)")
def test_real_fashion_mnist_from_the_debian_package():
    x_train, y_train, x_test, y_test = mnist(fashion=True, download=False)  # checksums verified on the way
    assert x_train.shape == (60000, 1, 28, 28) and y_test.shape == (10000,)
    counts = np.bincount(y_train.numpy(), minlength=10)
    assert counts.tolist() == [6000] * 10  # Fashion-MNIST is balanced
    assert x_test.numpy().max() == 255


def test_nn_datasets_is_reached_as_an_attribute() -> None:
    # tinygrad's examples call nn.datasets.mnist() after `from tinygrad import nn` alone; a fresh interpreter, so
    # that no earlier import has loaded the module
    code = ("import sys; from tinygrad import nn; assert 'tinygrad.nn.datasets' not in sys.modules; "
            "print(nn.datasets.mnist.__module__, nn.onnx.__name__)\n"
            "try:\n    nn.no_such_thing\nexcept AttributeError as e:\n    print(e)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["tinygrad.nn.datasets tinygrad.nn.onnx",
                                        "module 'tinygrad.nn' has no attribute 'no_such_thing'"]
