"""The non-math parts of the Tensor API: alu, ufix, const, replace, to_, max_shape, hash, keccak, from_url,
and the matrix decompositions qr and svd."""

from __future__ import annotations

import hashlib
import http.server
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tinygrad import Device, Tensor, dtypes
from tinygrad.uop.ops import Ops


def test_alu_applies_one_ir_op_with_broadcasting() -> None:
    a, b = np.array([[1.0, -2.0, 3.0]], np.float32), np.array([[0.5], [4.0]], np.float32)
    np.testing.assert_array_equal(Tensor(a).alu(Ops.MAX, Tensor(b)).numpy(), np.maximum(a, b))
    np.testing.assert_allclose(Tensor(np.abs(a)).alu(Ops.SQRT).numpy(), np.sqrt(np.abs(a)), rtol=1e-6)
    cond = Tensor([True, False])
    np.testing.assert_array_equal(cond.alu(Ops.WHERE, Tensor([1, 2]), Tensor([3, 4])).numpy(), [1, 4])


def test_alu_rejects_what_is_not_an_alu_op_or_has_the_wrong_arity() -> None:
    with pytest.raises(ValueError, match="RESHAPE"):
        Tensor([1.0]).alu(Ops.RESHAPE)
    with pytest.raises(ValueError, match="ADD takes 2"):
        Tensor([1.0]).alu(Ops.ADD)


def test_ufix_and_const() -> None:
    t = Tensor([1, 2], dtype=dtypes.int32)
    assert t.ufix(3).dtype == dtypes.int32 and t.ufix(0.5).dtype == dtypes.float32
    assert t.ufix(t) is t
    c = Tensor.const(2.5)
    assert c.shape == () and c.item() == 2.5
    assert Tensor.const(7, dtype=dtypes.int64).dtype == dtypes.int64
    with pytest.raises(TypeError, match="Python number"):
        Tensor.const([1, 2])  # type: ignore[arg-type]


def test_replace_takes_the_value_and_dtype_of_a_same_shaped_tensor() -> None:
    t = Tensor([1.0, 2.0])
    assert t.replace(Tensor([3, 4])) is t
    assert t.tolist() == [3, 4] and t.dtype == dtypes.int32
    with pytest.raises(ValueError, match=r"\(2,\).*\(3,\)"):
        t.replace(Tensor([1, 2, 3]))


def test_to_in_place_keeps_the_values() -> None:
    t = Tensor([1.0, 2.0])
    assert t.to_(Device.DEFAULT) is t and t.tolist() == [1.0, 2.0]


def test_max_shape_of_a_concrete_shape_is_the_shape() -> None:
    t = Tensor.zeros(2, 3)
    assert t.max_shape == (2, 3) and t.max_numel() == 6


def test_hash_depends_on_data_shape_and_dtype() -> None:
    a = Tensor([1.0, 2.0, 3.0])
    digest = a.hash()
    assert digest.shape == (16,) and digest.dtype == dtypes.uint8
    assert digest.tolist() == Tensor([1.0, 2.0, 3.0]).hash().tolist()
    assert digest.tolist() != Tensor([1.0, 2.0, 4.0]).hash().tolist()
    assert digest.tolist() != Tensor([[1.0, 2.0, 3.0]]).hash().tolist()
    assert digest.tolist() != Tensor([1, 2, 3]).hash().tolist()


@pytest.mark.parametrize("cfg", ["sha3_256", "sha3_512", "shake_128"])
def test_keccak_matches_hashlib_row_by_row(cfg: str) -> None:
    rows = np.arange(2 * 5, dtype=np.uint8).reshape(2, 5)
    got = Tensor(rows).keccak(cfg).numpy()

    def ref(b: bytes) -> bytes:
        h = hashlib.new(cfg, b)
        return h.digest(32) if cfg.startswith("shake") else h.digest()  # type: ignore[call-arg]

    for row, digest in zip(rows, got, strict=True):
        assert bytes(digest) == ref(row.tobytes())
    with pytest.raises(ValueError, match="unknown keccak"):
        Tensor(rows).keccak("md5")


def test_from_url_reads_local_paths_and_file_urls(tmp_path: Path) -> None:
    data = np.arange(6, dtype=np.float32)
    path = tmp_path / "blob.bin"
    path.write_bytes(data.tobytes())
    assert Tensor.from_url(str(path)).numpy().tobytes() == data.tobytes()
    np.testing.assert_array_equal(Tensor.from_url(path.as_uri(), dtype=dtypes.float32).numpy(), data)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Tensor.from_url(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="ftp"):
        Tensor.from_url("ftp://example/blob")


def test_from_url_over_http_on_loopback(tmp_path: Path) -> None:
    payload = bytes(range(200))
    (tmp_path / "w.bin").write_bytes(payload)

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(tmp_path), **kwargs)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        got = Tensor.from_url(f"http://127.0.0.1:{server.server_address[1]}/w.bin", timeout=10)
        assert bytes(got.numpy()) == payload
    finally:
        server.shutdown()
        thread.join(5)


def test_bitcast_bytes_checks_the_length() -> None:
    with pytest.raises(ValueError, match="whole number"):
        Tensor(b"abc").bitcast_bytes(dtypes.int16)
    np.testing.assert_array_equal(Tensor(np.int16([-2, 7]).tobytes()).bitcast_bytes(dtypes.int16).numpy(), [-2, 7])


@pytest.mark.parametrize("shape,full", [((4, 3), True), ((3, 5), False), ((2, 3, 3), True)])
def test_svd_reconstructs_the_input(shape: tuple[int, ...], full: bool) -> None:
    a = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    u, s, vh = Tensor(a).svd(full_matrices=full)
    ref_s = np.linalg.svd(a.astype(np.float64), compute_uv=False)
    np.testing.assert_allclose(s.numpy(), ref_s, rtol=1e-5, atol=1e-5)
    k = min(shape[-2:])
    rebuilt = (u.numpy()[..., :, :k] * s.numpy()[..., None, :]) @ vh.numpy()[..., :k, :]
    np.testing.assert_allclose(rebuilt, a, atol=1e-5)


def test_decompositions_need_float_matrices() -> None:
    with pytest.raises(ValueError, match="matrix"):
        Tensor([1.0, 2.0]).svd()
    with pytest.raises(TypeError, match="floating point"):
        Tensor([[1, 2], [3, 4]]).qr()


@pytest.mark.parametrize("shape", [(4, 3), (3, 3), (3, 5), (2, 4, 2)])
def test_qr_is_orthonormal_times_upper_triangular(shape: tuple[int, ...]) -> None:
    a = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    q, r = Tensor(a).qr()
    k = min(shape[-2:])
    assert q.shape == (*shape[:-2], shape[-2], k) and r.shape == (*shape[:-2], k, shape[-1])
    qn, rn = q.numpy(), r.numpy()
    np.testing.assert_allclose(qn @ rn, a, atol=1e-5)
    np.testing.assert_allclose(np.swapaxes(qn, -1, -2) @ qn, np.broadcast_to(np.eye(k), qn.shape[:-2] + (k, k)),
                               atol=1e-5)
    assert np.allclose(np.tril(rn, -1), 0)
    # the same factors as LAPACK up to the sign of each column/row
    ref_r = np.linalg.qr(a.astype(np.float64))[1]
    np.testing.assert_allclose(np.abs(rn), np.abs(ref_r), atol=1e-4)


def test_qr_is_differentiable(torch: Any) -> None:
    a = np.random.default_rng(6).standard_normal((4, 3)).astype(np.float32)
    t = Tensor(a, requires_grad=True)
    q, r = t.qr()
    (q.sum() + (r * r).sum()).backward()
    ta = torch.tensor(a, requires_grad=True)
    tq, tr = torch.linalg.qr(ta)
    (tq.sum() + (tr * tr).sum()).backward()
    assert t.grad is not None
    np.testing.assert_allclose(t.grad.numpy(), ta.grad.numpy(), atol=1e-4)
