"""nn behaviour that tinygrad's example programs rely on: `tar_extract`, BatchNorm's running statistics updated
from inside a `@function` model."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest
from tinygrad import Context, Tensor, function, nn


def test_tar_extract_slices_each_file(tmp_path) -> None:
    files = {"a/one.bin": bytes(range(5)), "two.txt": b"hello world"}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (tmp_path / "x.tar").write_bytes(buf.getvalue())
    for source in (Tensor(buf.getvalue()), tmp_path / "x.tar"):
        out = nn.state.tar_extract(source)
        assert {k: bytes(v.numpy()) for k, v in out.items()} == files


def test_tar_extract_of_a_path_reads_members_from_the_file_on_disk(tmp_path) -> None:
    data = bytes(range(256)) * 40
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("w.bin")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    (tmp_path / "x.tar").write_bytes(buf.getvalue())
    member = nn.state.tar_extract(tmp_path / "x.tar")["w.bin"]
    assert member.device.startswith("DISK:")  # a slice of the file, read when used
    assert bytes(member.to("CPU").numpy()) == data


def test_zip_extract_stored_and_deflated_members(tmp_path) -> None:
    import zipfile

    files = {"stored.bin": bytes(range(200)), "dir/deflated.txt": b"tinygrad " * 500}
    path = tmp_path / "x.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(zipfile.ZipInfo("stored.bin"), files["stored.bin"], compress_type=zipfile.ZIP_STORED)
        z.writestr("dir/deflated.txt", files["dir/deflated.txt"], compress_type=zipfile.ZIP_DEFLATED)
        z.writestr("empty/", b"")  # a folder entry is no file
    for source in (path, Tensor(path.read_bytes())):
        out = nn.state.zip_extract(source)
        assert {k: bytes(v.numpy()) for k, v in out.items()} == files
    bz = tmp_path / "bz.zip"
    with zipfile.ZipFile(bz, "w") as z:
        z.writestr("b.txt", b"x" * 100, compress_type=zipfile.ZIP_BZIP2)
    with pytest.raises(NotImplementedError, match="only stored and deflated"):
        nn.state.zip_extract(bz)
    with pytest.raises(TypeError, match="uint8"):
        nn.state.zip_extract(Tensor([1.0, 2.0]))


class _Net:
    def __init__(self) -> None:
        self.bn = nn.BatchNorm(2)

    @function
    def __call__(self, x: Tensor) -> Tensor:
        return self.bn(x).relu()


def test_batchnorm_running_stats_update_through_function() -> None:
    net, plain = _Net(), nn.BatchNorm(2)
    rng = np.random.default_rng(0)
    with Context(TRAINING=1):
        for _ in range(3):
            x = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
            np.testing.assert_allclose(net(Tensor(x)).numpy(), plain(Tensor(x)).relu().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(net.bn.running_mean.numpy(), plain.running_mean.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(net.bn.running_var.numpy(), plain.running_var.numpy(), rtol=1e-5, atol=1e-7)
    assert net.bn.num_batches_tracked.item() == 3


def test_load_state_dict_shape_mismatch_says_it_as_tinygrad_does() -> None:
    layer = nn.Linear(2, 2, bias=False)
    with pytest.raises(ValueError, match=r"Shape mismatch in layer `weight`: Expected shape \(2, 2\), but found "
                                         r"\(4, 4\) in state dict\."):
        nn.state.load_state_dict(layer, {"weight": Tensor.randn(4, 4)})
    with pytest.raises(KeyError):
        nn.state.load_state_dict(layer, {})


def test_conv2d_same_padding_needs_stride_one() -> None:
    with pytest.raises(ValueError, match="stride 1"):
        nn.Conv2d(16, 32, kernel_size=2, stride=2, padding="same")
    with pytest.raises(ValueError, match="not supported"):
        nn.Conv2d(16, 32, kernel_size=2, stride=1, padding="not_same")
    assert nn.Conv2d(1, 1, 3, padding="same").padding == "same"


def test_lamb_b1_t_and_state_moved_to_another_device() -> None:
    t = Tensor([[1.0, 2.0], [3.0, -1.0]])
    opt = nn.optim.LAMB([t])
    for p in opt.m + opt.v + [opt.b1_t, opt.b2_t]:
        p.to_("CPU")
    with Context(TRAINING=1):
        for step in range(1, 3):
            t.sum().backward()
            opt.step()
            assert abs(opt.b1_t.item() - 0.9 ** step) < 1e-6
    assert np.isfinite(t.numpy()).all() and opt.m[0].device == "CPU"


def test_context_default_float_takes_a_dtype() -> None:
    from tinygrad import dtypes

    with Context(DEFAULT_FLOAT=dtypes.half):
        assert Tensor([1.5]).dtype == dtypes.float16
    with Context(DEFAULT_FLOAT="bfloat16"):
        assert Tensor([1.5]).dtype == dtypes.bfloat16
    assert Tensor([1.5]).dtype == dtypes.float32
