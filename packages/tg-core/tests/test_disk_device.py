"""DISK tensors (tinygrad/device/disk.py, engine/disk_views.py): a file as device memory, written in place, read
through views that cover one range of bytes, as tinygrad's `device="disk:PATH"` and `Tensor(pathlib.Path)`."""

import os
import pathlib
import struct

import numpy as np
import pytest
from tinygrad import Device, Tensor, dtypes


@pytest.fixture
def path(tmp_path) -> pathlib.Path:
    return tmp_path / "tensor.bin"


def test_to_disk_writes_the_bytes_and_empty_reads_them_back(path):
    Tensor.ones(10, 10).to(f"disk:{path}")
    assert path.read_bytes() == struct.pack("<f", 1.0) * 100
    back = Tensor.empty(10, 10, device=f"disk:{path}")
    assert back.device == f"DISK:{path}"
    np.testing.assert_equal(back.numpy(), np.ones((10, 10), np.float32))


def test_a_constant_and_a_view_are_computed_where_they_live_before_the_write(path):
    Tensor.arange(12).reshape(3, 4).T.to(f"disk:{path}")  # a permuted view: written in its logical order
    np.testing.assert_equal(np.fromfile(path, np.int32), np.arange(12).reshape(3, 4).T.ravel())


def test_slices_read_only_their_range(path):
    data = np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32)
    d = Tensor(data).to(f"disk:{path}")
    np.testing.assert_equal(d[2:4].numpy(), data[2:4])
    np.testing.assert_equal(d[3].numpy(), data[3])
    np.testing.assert_equal(d[3, 1:4].to("CPU").numpy(), data[3, 1:4])
    np.testing.assert_equal((d[1:3].to("CPU") * 2).numpy(), data[1:3] * 2)
    # a realized DISK view is a buffer on the same mapping: it reads nothing and sees later writes
    view = d[4:5].realize()
    d[4] = Tensor.full((5,), 7.0)
    np.testing.assert_equal(view.numpy(), np.full((1, 5), 7.0, np.float32))


def test_path_tensor_is_the_files_bytes(path):
    path.write_bytes(bytes(range(100)))
    t = Tensor(path)
    assert t.shape == (100,) and t.dtype == dtypes.uint8 and t.device.startswith("DISK:")
    np.testing.assert_equal(t.numpy(), np.arange(100, dtype=np.uint8))
    wide = Tensor(path, dtype=dtypes.int16)
    assert wide.shape == (50,)
    np.testing.assert_equal(wide.numpy(), np.frombuffer(bytes(range(100)), np.int16))
    on_cpu = Tensor(path, device="CPU")
    assert on_cpu.device == "CPU"
    np.testing.assert_equal(on_cpu.numpy(), np.arange(100, dtype=np.uint8))


def test_cross_size_bitcasts_are_views_for_reading_and_writing(path):
    t = Tensor.empty(32, dtype=dtypes.uint8, device=f"disk:{path}")
    floats = t[8:24].bitcast(dtypes.float32)
    assert floats.shape == (4,)
    floats.assign(Tensor([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_equal(np.frombuffer(path.read_bytes()[8:24], np.float32), [1.0, 2.0, 3.0, 4.0])
    t[0:8].bitcast(dtypes.int64).assign([12345])  # a safetensors header length
    assert int.from_bytes(bytes(t[0:8].data()), "little") == 12345
    square = Tensor.empty(4, 4, dtype=dtypes.uint8, device=f"disk:{path}").bitcast(dtypes.uint16)
    assert square.shape == (4, 2)
    with pytest.raises(RuntimeError, match="multiple of 2"):
        Tensor.empty(3, dtype=dtypes.int8, device=f"disk:{path}").bitcast(dtypes.float16)


def test_setitem_writes_the_file(path):
    dt = Tensor([[1], [2]]).to(f"disk:{path}")
    dt[1] = [3]
    assert dt.tolist() == [[1], [3]]
    dt[0] = 9
    assert np.fromfile(path, np.int32).tolist() == [9, 3]


def test_what_disk_cannot_do_raises_and_says_what_to_do(path):
    dt = Tensor([0, 1, 2, 3, 4, 5]).to(f"disk:{path}")
    with pytest.raises(RuntimeError, match="non-contiguous view is not supported"):
        dt[::2].tolist()
    with pytest.raises(RuntimeError, match="non-contiguous view is not supported"):
        dt.reshape(2, 3).T.tolist()
    with pytest.raises(RuntimeError, match="non-contiguous view is not supported"):
        dt[::2] = Tensor([10, 20, 30])
    with pytest.raises(NotImplementedError, match="DISK runs no kernels"):
        dt.cast(dtypes.float32).to("CPU")
    with pytest.raises(RuntimeError, match="advanced setitem"):
        dt[Tensor([0, 2])] = 99
    assert np.fromfile(path, np.int32).tolist() == [0, 1, 2, 3, 4, 5]  # nothing was written by a refused op
    with pytest.raises(Exception, match="names no file"):
        Tensor.empty(4, device="disk:")


def test_a_shorter_file_grows_and_keeps_its_bytes(path):
    path.write_bytes(b"\x01\x02")
    t = Tensor.empty(8, dtype=dtypes.uint8, device=f"disk:{path}")
    assert t.tolist() == [1, 2, 0, 0, 0, 0, 0, 0]
    assert path.stat().st_size == 8


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write a read-only file, so there is nothing to refuse")
def test_a_read_only_file_reads_and_refuses_writes(path):
    path.write_bytes(bytes(range(16)))
    path.chmod(0o444)
    t = Tensor.empty(16, dtype=dtypes.uint8, device=f"disk:{path}")
    assert t.tolist() == list(range(16))
    with pytest.raises(OSError, match="read-only"):
        t.assign(Tensor.zeros(16, dtype=dtypes.uint8))
    assert path.read_bytes() == bytes(range(16))


def test_sharding_a_disk_slice_reads_it_once_and_splits_it(path):
    path.write_bytes(bytes(range(32)))
    t = Tensor.empty(8, 4, device=f"disk:{path}", dtype=dtypes.uint8)[0:4].shard(("CPU:0", "CPU:1"), axis=0)
    np.testing.assert_equal(t.to("CPU").numpy(), np.arange(16, dtype=np.uint8).reshape(4, 4))


def test_gguf_style_whole_file_load_and_disk_to_disk(path, tmp_path):
    data = np.arange(1000, dtype=np.uint8)
    data.tofile(path)
    loaded = Tensor.empty(os.stat(path).st_size, dtype=dtypes.uint8, device=f"disk:{path}").to(Device.DEFAULT)
    np.testing.assert_equal(loaded.numpy(), data)
    other = tmp_path / "copy.bin"
    Tensor(path)[100:200].to(f"disk:{other}")
    assert other.read_bytes() == data[100:200].tobytes()


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm on this machine")
def test_shared_memory_names(tmp_path):
    name = f"tg-test-{os.getpid()}-{tmp_path.name}"
    try:
        Tensor([1.5, 2.5]).to(f"disk:shm:{name}")
        assert Tensor.empty(2, device=f"disk:shm:{name}").tolist() == [1.5, 2.5]
    finally:
        pathlib.Path(f"/dev/shm/{name}").unlink(missing_ok=True)


def test_empty_tensors(path):
    t = Tensor.empty(0, device=f"disk:{path}")
    assert t.numpy().shape == (0,)
