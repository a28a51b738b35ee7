"""State dicts, safetensors (our writer and reader against the `safetensors` package, and every validation
error), and torch_load against files written by torch itself, including hostile and damaged ones."""

from __future__ import annotations

import collections
import io
import json
import os
import pickle
import struct
import zipfile

import numpy as np
import pytest
from conftest import close
from tinygrad import Tensor, dtypes, nn
from tinygrad.nn.state import (
    SafetensorsError,
    TorchLoadError,
    get_parameters,
    get_state_dict,
    load_state_dict,
    safe_load,
    safe_load_metadata,
    safe_save,
    torch_load,
)


class Net:
    def __init__(self):
        self.conv = nn.Conv2d(1, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.blocks = [nn.Linear(4, 4), nn.Linear(4, 2, bias=False)]


def test_state_dict_names_follow_torch():
    torch = pytest.importorskip("torch", reason="torch's state_dict names are the reference")
    ref = torch.nn.Module()
    ref.conv, ref.bn = torch.nn.Conv2d(1, 4, 3), torch.nn.BatchNorm2d(4)
    ref.blocks = torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.Linear(4, 2, bias=False)])
    sd = get_state_dict(Net())
    assert sorted(sd) == sorted(ref.state_dict())
    assert all(sd[k].shape == tuple(v.shape) for k, v in ref.state_dict().items() if v.ndim)
    assert len(get_parameters(Net())) == len(sd)


def test_load_state_dict_strict_reports_every_problem():
    net = Net()
    sd = {k: v.detach() for k, v in get_state_dict(Net()).items()}
    del sd["bn.running_var"]
    sd["extra.weight"] = Tensor.ones(2)
    sd["blocks.0.weight"] = Tensor.ones(3, 4)
    with pytest.raises(KeyError) as e:
        load_state_dict(net, sd)
    msg = str(e.value)
    assert "bn.running_var" in msg and "extra.weight" in msg and "blocks.0.weight" in msg and "strict=False" in msg


def test_load_state_dict_non_strict_warns_and_loads_the_rest():
    net, src = Net(), Net()
    sd = get_state_dict(src)
    sd = {k: v for k, v in sd.items() if k != "conv.bias"}
    sd["unused"] = Tensor.ones(1)
    with pytest.warns(UserWarning, match="conv.bias"):
        loaded = load_state_dict(net, sd, strict=False)
    assert len(loaded) == len(get_state_dict(net)) - 1
    close(net.conv.weight, src.conv.weight.numpy())
    close(net.blocks[1].weight, src.blocks[1].weight.numpy())


def test_load_state_dict_casts_and_consumes():
    net = nn.Linear(3, 2)
    sd = {"weight": Tensor(np.arange(6, dtype=np.float64).reshape(2, 3)), "bias": Tensor([1, 2])}
    load_state_dict(net, sd, consume=True)
    assert net.weight.dtype == dtypes.float32 and net.weight.numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
    assert net.bias.numpy().tolist() == [1, 2] and sd == {}
    assert net.weight.requires_grad


DTYPES = [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
          np.uint64, np.bool_]


def sample(dt, shape=(2, 3)):
    return (np.arange(np.prod(shape)).reshape(shape) % 5 - 1).astype(dt) if dt != np.bool_ else \
        np.arange(np.prod(shape)).reshape(shape) % 2 == 0


def test_safetensors_roundtrip_all_dtypes(tmp_path):
    tensors = {f"t{i}": Tensor(sample(dt)) for i, dt in enumerate(DTYPES)}
    tensors["bf"] = Tensor([1.5, -2.0, 3.25], dtype=dtypes.bfloat16)
    tensors["empty"] = Tensor(np.zeros((0, 4), np.float32))
    tensors["scalar"] = Tensor(np.array(7.0, np.float32))
    fn = tmp_path / "a.safetensors"
    safe_save(tensors, fn, metadata={"format": "pt", "note": "hi"})
    back = safe_load(fn)
    assert list(back) == list(tensors)
    for k, t in tensors.items():
        assert back[k].dtype == t.dtype and back[k].shape == t.shape
        np.testing.assert_array_equal(back[k].numpy(), t.numpy())
    _, start, header = safe_load_metadata(fn)
    assert header["__metadata__"] == {"format": "pt", "note": "hi"} and start % 8 == 0


def test_safetensors_interop_with_the_reference_package(tmp_path):
    st_numpy = pytest.importorskip("safetensors.numpy", reason="the safetensors package is the reference")
    arrays = {f"a{i}": sample(dt, (3, 2)) for i, dt in enumerate(DTYPES)}
    theirs = tmp_path / "theirs.safetensors"
    st_numpy.save_file(arrays, str(theirs), metadata={"k": "v"})
    loaded = safe_load(theirs)
    for k, a in arrays.items():
        np.testing.assert_array_equal(loaded[k].numpy(), a)
    ours = tmp_path / "ours.safetensors"
    safe_save({k: Tensor(a) for k, a in arrays.items()}, ours, metadata={"k": "v"})
    back = st_numpy.load_file(str(ours))
    for k, a in arrays.items():
        assert back[k].dtype == a.dtype
        np.testing.assert_array_equal(back[k], a)


def test_safetensors_bfloat16_interop(tmp_path):
    torch = pytest.importorskip("torch", reason="bfloat16 safetensors are written by safetensors.torch")
    from safetensors.torch import load_file, save_file

    t = torch.tensor([[1.5, -2.0], [3.0e38, 1e-3]], dtype=torch.bfloat16)
    save_file({"x": t}, str(tmp_path / "bf.safetensors"))
    ours = safe_load(tmp_path / "bf.safetensors")["x"]
    assert ours.dtype == dtypes.bfloat16
    np.testing.assert_array_equal(ours.numpy(), t.float().numpy())
    safe_save({"x": ours}, tmp_path / "back.safetensors")
    assert torch.equal(load_file(str(tmp_path / "back.safetensors"))["x"], t)


def test_safetensors_fp8_round_trip_and_interop(tmp_path):
    tensors = {"e4": Tensor([1.5, -448.0, 0.001953125, 0.3], dtype=dtypes.fp8e4m3),
               "e5": Tensor([[57344.0, -1.25], [float("inf"), 2.0**-16]], dtype=dtypes.fp8e5m2)}
    safe_save(tensors, tmp_path / "f8.safetensors")
    back = safe_load(tmp_path / "f8.safetensors")
    for k, t in tensors.items():
        assert back[k].dtype == t.dtype and back[k].shape == t.shape
        np.testing.assert_array_equal(back[k].bitcast(dtypes.uint8).numpy(), t.bitcast(dtypes.uint8).numpy())
    torch = pytest.importorskip("torch", reason="8-bit float safetensors are written by safetensors.torch")
    from safetensors.torch import load_file, save_file

    theirs = {"e4": torch.tensor([1.5, -448.0, 0.3]).to(torch.float8_e4m3fn),
              "e5": torch.tensor([57344.0, -1.25, 2.0**-16]).to(torch.float8_e5m2)}
    save_file(theirs, str(tmp_path / "theirs.safetensors"))
    ours = safe_load(tmp_path / "theirs.safetensors")
    assert (ours["e4"].dtype, ours["e5"].dtype) == (dtypes.fp8e4m3, dtypes.fp8e5m2)
    for k, t in theirs.items():
        np.testing.assert_array_equal(ours[k].numpy(), t.float().numpy())
    safe_save(ours, tmp_path / "back.safetensors")
    back_t = load_file(str(tmp_path / "back.safetensors"))
    assert all(torch.equal(back_t[k].view(torch.uint8), t.view(torch.uint8)) for k, t in theirs.items())


def raw_file(header: dict | bytes, data: bytes = b"", length: int | None = None) -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text) if length is None else length) + text + data


@pytest.mark.parametrize("blob,match", [
    (b"\x01\x02", "too short"),
    (raw_file({}, length=1 << 40), "exceeds"),
    (raw_file({}, length=500), "truncated"),
    (raw_file(b"{not json"), "not valid UTF-8 JSON"),
    (raw_file(b"[1, 2]"), "JSON object"),
    (raw_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4), "past the end"),
    (raw_file({"a": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4), "does not know"),
    (raw_file({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}, b"\0" * 4), "out of order"),
    (raw_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
               "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8), "overlaps"),
    (raw_file({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8), "belong to no tensor"),
    (raw_file({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8), "needs 12 bytes"),
    (raw_file({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4), "list of ints"),
    (raw_file({"a": {"dtype": "F32", "shape": [1]}}, b"\0" * 4), "needs 'dtype'"),
    (raw_file({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 12), "file holds 12"),
    (raw_file({"__metadata__": {"a": 1}}), "strings to strings"),
])
def test_safetensors_rejects_damaged_files(tmp_path, blob, match):
    fn = tmp_path / "bad.safetensors"
    fn.write_bytes(blob)
    with pytest.raises(SafetensorsError, match=match):
        safe_load(fn)


def test_safetensors_save_rejects_bad_input(tmp_path):
    with pytest.raises(TypeError, match="strings to strings"):
        safe_save({"a": Tensor([1.0])}, tmp_path / "x", metadata={"a": 1})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="reserved"):
        safe_save({"__metadata__": Tensor([1.0])}, tmp_path / "x")


# ---- torch_load ----

def test_torch_load_state_dicts_of_every_dtype(tmp_path):
    torch = pytest.importorskip("torch", reason="files written by torch.save are the test input")
    tdtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
               torch.int32, torch.int64, torch.bool, torch.uint16, torch.uint32, torch.uint64]
    sd = collections.OrderedDict((str(d), (torch.arange(12).reshape(3, 4) % 7 - 2).to(d)) for d in tdtypes)
    sd["param"] = torch.nn.Parameter(torch.randn(2, 3))
    sd["transposed"] = torch.randn(4, 5).t()
    sd["sliced"] = torch.arange(40.0).reshape(5, 8)[1:4, ::3]
    sd["expanded"] = torch.tensor([1.0, 2.0]).reshape(2, 1).expand(2, 3)
    base = torch.arange(10.0)
    sd["shares_a"], sd["shares_b"] = base[2:5], base[4:]
    sd["scalar"] = torch.tensor(3.5)
    sd["nested"] = {"list": [torch.ones(2), {"deep": torch.zeros(1, 2, dtype=torch.int32)}], "n": 3, "s": "x",
                    "tuple": (torch.tensor([7]), 1.5)}
    fn = tmp_path / "sd.pt"
    torch.save(sd, fn)
    got = torch_load(fn)
    assert isinstance(got, collections.OrderedDict) and list(got) == list(sd)

    def same(ours, ref):
        if isinstance(ref, torch.Tensor):
            assert isinstance(ours, Tensor) and ours.shape == tuple(ref.shape), (ours, ref)
            want = ref.detach().float().numpy() if ref.dtype == torch.bfloat16 else ref.detach().numpy()
            np.testing.assert_array_equal(ours.numpy(), want)
        elif isinstance(ref, dict):
            assert set(ours) == set(ref)
            for k in ref:
                same(ours[k], ref[k])
        elif isinstance(ref, (list, tuple)):
            assert type(ours) is type(ref) and len(ours) == len(ref)
            for a, b in zip(ours, ref):
                same(a, b)
        else:
            assert ours == ref
    same(got, sd)
    assert got[str(torch.bfloat16)].dtype == dtypes.bfloat16 and got[str(torch.uint16)].dtype == dtypes.uint16


def test_torch_load_a_module_state_dict_into_our_model(tmp_path):
    torch = pytest.importorskip("torch", reason="files written by torch.save are the test input")
    ref = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    ref.train()
    ref(torch.randn(8, 3))  # move the running statistics off their initial values
    torch.save(ref.state_dict(), tmp_path / "m.pth")
    ours = [nn.Linear(3, 4), nn.BatchNorm(4)]
    load_state_dict(ours, torch_load(tmp_path / "m.pth"))
    ref.eval()
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    close(ours[1](ours[0](Tensor(x))), ref(torch.tensor(x)), 1e-5)


def test_torch_load_legacy_format(tmp_path):
    torch = pytest.importorskip("torch", reason="files written by torch.save are the test input")
    sd = {"w": torch.randn(3, 4).t(), "i": torch.arange(5), "nested": [torch.ones(2, dtype=torch.float16)]}
    fn = tmp_path / "legacy.pt"
    torch.save(sd, fn, _use_new_zipfile_serialization=False)
    got = torch_load(fn)
    np.testing.assert_array_equal(got["w"].numpy(), sd["w"].numpy())
    np.testing.assert_array_equal(got["i"].numpy(), sd["i"].numpy())
    np.testing.assert_array_equal(got["nested"][0].numpy(), sd["nested"][0].numpy())
    for cut in (10, len(fn.read_bytes()) // 2, len(fn.read_bytes()) - 3):
        with pytest.raises(TorchLoadError):
            torch_load(fn.read_bytes()[:cut])


class _Evil:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_torch_load_refuses_code_in_the_pickle(tmp_path):
    marker = tmp_path / "pwned"
    payload = pickle.dumps({"weight": _Evil(str(marker))}, protocol=2)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", payload)
        z.writestr("archive/byteorder", "little")
    with pytest.raises(TorchLoadError, match=r"(posix|os)\.system"):
        torch_load(buf.getvalue())
    legacy = pickle.dumps(_Evil(str(marker)), protocol=2)  # a legacy file whose first pickle is hostile
    with pytest.raises(TorchLoadError, match=r"(posix|os)\.system"):
        torch_load(legacy)
    assert not marker.exists()


def test_torch_load_truncated_and_garbage(tmp_path):
    torch = pytest.importorskip("torch", reason="files written by torch.save are the test input")
    fn = tmp_path / "sd.pt"
    torch.save({"w": torch.randn(64, 64)}, fn)
    raw = fn.read_bytes()
    for cut in (100, len(raw) // 2, len(raw) - 30):
        with pytest.raises(TorchLoadError):
            torch_load(raw[:cut])
    with pytest.raises(TorchLoadError):
        torch_load(b"")
    with pytest.raises(TorchLoadError):
        torch_load(b"this is not a checkpoint")
    got = torch_load(Tensor(raw))  # a uint8 tensor of the file's bytes works like the file name
    np.testing.assert_array_equal(got["w"].numpy(), torch.load(fn)["w"].numpy())
