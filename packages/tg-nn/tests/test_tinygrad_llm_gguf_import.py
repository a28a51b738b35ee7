"""`tinygrad.llm.gguf.gguf_load`, where tinygrad's programs import the GGUF loader from, fed the way they feed it:
the file's bytes as a uint8 tensor on the default device, read through `device="disk:PATH"`."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
from tinygrad import Device, Tensor, dtypes


def _string(s: str) -> bytes:
    return struct.pack("<Q", len(s.encode())) + s.encode()


def _write_f32_gguf(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """GGUF v3 with one metadata string and F32 tensors (dims innermost first, data aligned to 32 bytes)."""
    infos, data = b"", b""
    for name, arr in tensors.items():
        infos += _string(name) + struct.pack("<I", arr.ndim) + b"".join(struct.pack("<Q", d) for d in arr.shape[::-1])
        infos += struct.pack("<IQ", 0, len(data))
        blob = arr.astype(np.float32).tobytes()
        data += blob + b"\0" * ((-len(blob)) % 32)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 1) + _string("general.architecture")
    head += struct.pack("<I", 8) + _string("tiny") + infos
    path.write_bytes(head + b"\0" * ((-len(head)) % 32) + data)


def test_llm_gguf_loads_a_disk_tensor_as_tinygrad_programs_do(tmp_path: Path) -> None:
    from tinygrad.llm.gguf import gguf_load
    from tinygrad.nn.state import gguf_load as state_gguf_load
    rng = np.random.default_rng(0)
    weights = {"tok.weight": rng.standard_normal((6, 4)), "norm.weight": rng.standard_normal(4)}
    fn = tmp_path / "tiny.gguf"
    _write_f32_gguf(fn, weights)
    blob = Tensor.empty(os.stat(fn).st_size, dtype=dtypes.uint8, device=f"disk:{fn}").to(Device.DEFAULT)
    kv, state = gguf_load(blob)
    assert kv["general.architecture"] == "tiny"
    assert gguf_load is state_gguf_load  # one loader, reached by tinygrad's path too
    for name, arr in weights.items():
        assert state[name].shape == arr.shape
        np.testing.assert_array_equal(state[name].numpy(), arr.astype(np.float32))
