"""Zero-copy exchange with numpy and PyTorch: Tensor.from_blob over outside memory, and DLPack both ways.

"Shares memory" is checked twice: the data pointers are equal, and a write on one side is read on the other.
"""

from __future__ import annotations

import ctypes
import gc
import weakref
from typing import Any

import numpy as np
import pytest
from tinygrad import Device, Tensor, TinyJit, dtypes
from tinygrad.device import shared_buffers
from tinygrad.dlpack import (
    DLManagedTensor,
    DLManagedTensorVersioned,
    _capsule_new,
    _CapsuleDestructor,
    _Deleter,
    _exports,
)
from tinygrad.dtype import DType

NP_DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.float16,
             np.float32, np.float64]


def address(t: Tensor) -> int:
    """Where t's memory is (its realized buffer's)."""
    memory = t._buffer().host_array()
    assert memory is not None
    return int(memory.ctypes.data)


def sample(np_dtype: Any, shape: tuple[int, ...] = (3, 4)) -> np.ndarray:
    return (np.arange(int(np.prod(shape))) % 5).astype(np_dtype).reshape(shape)


# ---- numpy -> Tensor ----

@pytest.mark.parametrize("np_dtype", NP_DTYPES, ids=lambda d: np.dtype(d).name)
def test_numpy_to_tensor_shares_memory(np_dtype: Any) -> None:
    a = sample(np_dtype)
    t = Tensor.from_dlpack(a)
    assert t.shape == a.shape and t.dtype == getattr(dtypes, np.dtype(np_dtype).name)
    assert address(t) == a.ctypes.data
    np.testing.assert_array_equal(t.numpy(), a)
    a[0, 0] = 1  # a write on the numpy side is read by the tensor
    assert t[0, 0].item() == 1


@pytest.mark.parametrize("np_dtype", NP_DTYPES, ids=lambda d: np.dtype(d).name)
def test_tensor_to_numpy_shares_memory(np_dtype: Any) -> None:
    t = Tensor(sample(np_dtype))
    a = np.from_dlpack(t)
    assert a.ctypes.data == address(t) and a.dtype == np.dtype(np_dtype) and a.shape == t.shape
    np.testing.assert_array_equal(a, t.numpy())
    a[2, 3] = 1  # a write on the numpy side is read by the tensor
    assert t[2, 3].item() == 1


@pytest.mark.parametrize("make", [
    lambda b: b.transpose(2, 0, 1),  # permute
    lambda b: b[:, ::2, 1:3],  # slices with steps
    lambda b: b[1],  # an offset into the memory
    lambda b: b[..., 1],  # a gap between elements
    lambda b: b[::-1, :, ::-2],  # negative steps
    lambda b: np.broadcast_to(b[:, :1], (2, 5, 4)),  # a zero stride
    lambda b: b[:, 1:2, :].transpose(1, 2, 0)[:, ::3],  # a size-1 dimension, permuted, sliced
], ids=["permute", "slices", "offset", "gaps", "negative", "broadcast", "mixed"])
def test_strided_producers_are_views_of_their_memory(make: Any) -> None:
    b = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    v = make(b)
    t = Tensor.from_dlpack(v, copy=False)  # a view: no copy was needed
    np.testing.assert_array_equal(t.numpy(), v)
    b += 100  # the producer's memory changes: the tensor reads it
    np.testing.assert_array_equal(t.numpy(), v)
    np.testing.assert_array_equal((t * 2).numpy(), v * 2)


def test_strides_views_cannot_express_are_copied_or_refused() -> None:
    b = np.arange(10, dtype=np.int32)
    windows = np.lib.stride_tricks.sliding_window_view(b, 4)  # overlapping rows
    with pytest.raises(BufferError, match="copy=False"):
        Tensor.from_dlpack(windows, copy=False)
    t = Tensor.from_dlpack(windows)
    np.testing.assert_array_equal(t.numpy(), windows)
    b[:] = 0  # a copy: the producer's later writes do not show
    assert t.numpy().sum() > 0


def test_copy_true_copies() -> None:
    a = np.arange(4, dtype=np.float32)
    t = Tensor.from_dlpack(a, copy=True)
    assert address(t) != a.ctypes.data
    a[:] = 0
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_zero_dim_and_zero_size() -> None:
    scalar = np.array(2.5, dtype=np.float64)
    t = Tensor.from_dlpack(scalar)
    assert t.shape == () and t.item() == 2.5 and address(t) == scalar.ctypes.data
    out = np.from_dlpack(Tensor(3.5))
    assert out.shape == () and out == 3.5
    empty = np.zeros((0, 3), dtype=np.float32)
    e = Tensor.from_dlpack(empty)
    assert e.shape == (0, 3) and e.numpy().shape == (0, 3)
    assert np.from_dlpack(Tensor.empty(2, 0)).shape == (2, 0)


def test_read_only_memory_is_not_written() -> None:
    a = np.arange(3, dtype=np.float32)
    a.flags.writeable = False
    t = Tensor.from_dlpack(a)
    assert t.tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(ValueError, match="read-only"):
        t.assign(Tensor([5.0, 5.0, 5.0]))
    assert a.tolist() == [0.0, 1.0, 2.0]


# ---- capsules, versions and the deleter ----

def test_capsule_kinds_and_round_trip() -> None:
    t = Tensor([1, 2, 3])
    plain, versioned = t.__dlpack__(), t.__dlpack__(max_version=(1, 0))
    assert "dltensor" in repr(plain) and "dltensor_versioned" in repr(versioned)
    for capsule in (plain, versioned):
        back = Tensor.from_dlpack(capsule)
        assert address(back) == address(t) and back.tolist() == [1, 2, 3]
    assert Tensor.from_dlpack(t).tolist() == [1, 2, 3]
    assert t.__dlpack_device__() == (1, 0)


def test_a_producer_older_than_dlpack_1_gives_an_unversioned_capsule() -> None:
    a = np.arange(3, dtype=np.int16)

    class Legacy:  # __dlpack__ without max_version, as producers before DLPack 1.0
        def __dlpack__(self, stream: Any = None) -> Any:
            return a.__dlpack__(stream=stream)

        def __dlpack_device__(self) -> tuple[int, int]:
            return (1, 0)
    t = Tensor.from_dlpack(Legacy())
    assert address(t) == a.ctypes.data and t.tolist() == [0, 1, 2]


def test_unconsumed_capsules_release_their_memory() -> None:
    before = len(_exports)
    t = Tensor([1.0, 2.0])
    capsules = [t.__dlpack__(), t.__dlpack__(max_version=(1, 0))]
    assert len(_exports) == before + 2
    del capsules
    gc.collect()
    assert len(_exports) == before


def test_export_copy_and_views() -> None:
    t = Tensor([[1, 2], [3, 4]])
    c = Tensor.from_dlpack(t.__dlpack__(copy=True))
    assert address(c) != address(t) and c.tolist() == [[1, 2], [3, 4]]
    tt = t.T  # a view: exported as a contiguous copy of its value
    assert np.from_dlpack(tt).tolist() == [[1, 3], [2, 4]]
    lazy = Tensor([1, 2]) + 1  # computed first, and then the tensor's own buffer is lent
    a = np.from_dlpack(lazy)
    a[0] = 10
    assert lazy.tolist() == [10, 3]


def _handmade_capsule(data: int, shape: tuple[int, ...], code: int, bits: int, device_type: int = 1,
                      versioned: bool = False) -> tuple[Any, list[int], list[Any]]:
    """A capsule of our own making with a deleter that counts its calls (and what must outlive it)."""
    calls: list[int] = []
    managed: Any = DLManagedTensorVersioned() if versioned else DLManagedTensor()
    if versioned:
        managed.version.major, managed.version.minor = 1, 0
    shape_arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    dl = managed.dl_tensor
    dl.data, dl.device.device_type, dl.ndim = data, device_type, len(shape)
    dl.dtype.code, dl.dtype.bits, dl.dtype.lanes = code, bits, 1
    dl.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))

    @_Deleter
    def deleter(addr: int | None) -> None:
        calls.append(addr or 0)

    @_CapsuleDestructor
    def destructor(capsule: int | None) -> None:  # a consumed capsule's memory is the consumer's to release
        pass

    managed.deleter = deleter
    capsule = _capsule_new(ctypes.addressof(managed), b"dltensor_versioned" if versioned else b"dltensor",
                           destructor)
    return capsule, calls, [managed, shape_arr, deleter, destructor]


@pytest.mark.parametrize("versioned", [False, True])
def test_deleter_runs_once_when_the_tensor_is_done(versioned: bool) -> None:
    memory = np.array([1.5, 2.5], dtype=np.float32)
    capsule, calls, keep = _handmade_capsule(memory.ctypes.data, (2,), 2, 32, versioned=versioned)
    t = Tensor.from_dlpack(capsule)
    assert t.tolist() == [1.5, 2.5] and address(t) == memory.ctypes.data
    del capsule
    gc.collect()
    assert calls == []  # the tensor still uses the memory
    u = t + 1  # a graph over the memory keeps it too
    del t
    gc.collect()
    assert calls == [] and u.tolist() == [2.5, 3.5]
    del u
    gc.collect()
    assert len(calls) == 1
    del keep


def test_producer_outlives_the_tensor_and_the_buffer_outlives_the_consumer() -> None:
    a = np.arange(1000, dtype=np.float32)
    t = Tensor.from_dlpack(a[::2])
    del a
    gc.collect()
    np.testing.assert_array_equal(t.numpy(), np.arange(0, 1000, 2, dtype=np.float32))
    s = Tensor.arange(1000, dtype=dtypes.float32) * 2
    n = np.from_dlpack(s)
    assert s._buffer().deallocate() == 0  # lent out: not given back early (TinyJit's free_intermediates) either
    del s
    gc.collect()
    for _ in range(3):  # new buffers of that size would reuse the memory if it had been given back
        (Tensor.ones(1000) * 7).realize()
    np.testing.assert_array_equal(n, np.arange(1000, dtype=np.float32) * 2)


@pytest.mark.parametrize("make,exc,words", [
    (lambda: _handmade_capsule(0, (3,), 2, 32), BufferError, "null data pointer"),
    (lambda: _handmade_capsule(64, (3,), 2, 32, device_type=2), BufferError, "CUDA"),
    (lambda: _handmade_capsule(64, (3,), 5, 64), BufferError, "code 5"),
    (lambda: _handmade_capsule(64, (3,), 2, 24), BufferError, "24 bits"),
], ids=["null", "cuda", "complex", "odd_bits"])
def test_hostile_capsules_raise_and_are_not_consumed(make: Any, exc: type[Exception], words: str) -> None:
    capsule, calls, keep = make()
    with pytest.raises(exc, match=words):
        Tensor.from_dlpack(capsule)
    assert "used" not in repr(capsule)  # left to its producer
    del capsule, keep
    assert calls == []


def test_hostile_inputs() -> None:
    capsule = np.arange(3.0).__dlpack__()
    Tensor.from_dlpack(capsule)
    with pytest.raises(BufferError, match="already consumed"):
        Tensor.from_dlpack(capsule)
    with pytest.raises(TypeError, match="__dlpack__"):
        Tensor.from_dlpack(5)
    with pytest.raises(BufferError, match="code 5"):
        Tensor.from_dlpack(np.zeros(2, dtype=np.complex64))

    class OnAGPU:
        def __dlpack__(self, **kwargs: Any) -> Any:
            raise AssertionError("not asked: the device is checked first")

        def __dlpack_device__(self) -> tuple[int, int]:
            return (2, 0)
    with pytest.raises(BufferError, match="CUDA"):
        Tensor.from_dlpack(OnAGPU())
    t = Tensor([1.0])
    with pytest.raises(BufferError, match="dl_device"):
        t.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError, match="stream"):
        t.__dlpack__(stream=1)
    with pytest.raises(BufferError, match="fp8e4m3"):
        Tensor([1.0]).cast(dtypes.fp8e4m3).__dlpack__()


# ---- caching and writes ----

def test_results_follow_writes_behind_the_engines_back() -> None:
    a = np.arange(4, dtype=np.float32)
    t = Tensor.from_dlpack(a)
    first = t + 1
    np.testing.assert_array_equal(first.numpy(), [1, 2, 3, 4])
    a[:] += 1
    np.testing.assert_array_equal((t + 1).numpy(), [2, 3, 4, 5])  # an equal graph is not the old result
    np.testing.assert_array_equal(first.numpy(), [1, 2, 3, 4])  # what was computed before keeps its value
    # a result that keeps its graph (it has gradient history) is computed again too, and so is an equal graph
    w = Tensor.ones(4, requires_grad=True)
    y = t * w
    np.testing.assert_array_equal(y.numpy(), [1, 2, 3, 4])
    a[:] = 10
    np.testing.assert_array_equal(((t * w) + 1).numpy(), [11, 11, 11, 11])  # y's node, read as a source
    np.testing.assert_array_equal((t * w).numpy(), [10, 10, 10, 10])
    # a view of the memory keeps reading it after it was realized
    v = t[1:3]
    np.testing.assert_array_equal(v.numpy(), [10, 10])
    a[1] = 4
    np.testing.assert_array_equal(v.numpy(), [4, 10])


def test_results_follow_writes_from_blob() -> None:
    a = np.arange(4, dtype=np.float32)
    t = Tensor.from_blob(a.ctypes.data, (4,), dtype=dtypes.float32)
    first = t + 1
    np.testing.assert_array_equal(first.numpy(), [1, 2, 3, 4])
    a[:] += 1
    np.testing.assert_array_equal((t + 1).numpy(), [2, 3, 4, 5])
    np.testing.assert_array_equal(t.sum().numpy(), 10)
    a[:] = 0
    np.testing.assert_array_equal(t.sum().numpy(), 0)


def test_writes_into_the_tensor_reach_the_memory() -> None:
    a = np.zeros((2, 3), dtype=np.float32)
    t = Tensor.from_dlpack(a)
    t.assign(Tensor.ones(2, 3) * 2)
    np.testing.assert_array_equal(a, np.full((2, 3), 2))
    t[0, 1] = 7.0
    t[1] = Tensor([4.0, 5.0, 6.0])
    t[:, 2:].assign(t[:, :1] + 1)  # reads the memory it overwrites: computed first
    np.testing.assert_array_equal(a, [[2, 7, 3], [4, 5, 5]])
    assert t.tolist() == a.tolist()
    # through a strided import: the elements of the view, and only those
    b = np.zeros((4, 4), dtype=np.int32)
    v = Tensor.from_dlpack(b.T[::2])
    v.assign(Tensor.arange(8).reshape(2, 4))
    expected = np.zeros((4, 4), dtype=np.int32)
    expected.T[::2] = np.arange(8).reshape(2, 4)
    np.testing.assert_array_equal(b, expected)
    with pytest.raises(ValueError, match="broadcast"):
        rows = np.lib.stride_tricks.as_strided(b[:1], (3, 4), (0, 4))  # writable, unlike np.broadcast_to's
        Tensor.from_dlpack(rows).assign(Tensor.zeros(3, 4, dtype=dtypes.int32))
    # writes into an exported tensor reach the consumer
    s = Tensor([1, 2, 3])
    n = np.from_dlpack(s)
    s[0] = 9
    s.assign(s * 2)
    assert n.tolist() == [18, 4, 6]


def test_tinyjit_reads_shared_memory_at_every_call() -> None:
    a = np.zeros(4, dtype=np.float32)
    t = Tensor.from_dlpack(a)

    @TinyJit
    def double(x: Tensor) -> Tensor:
        return (x * 2).realize()
    for i in range(4):  # a capture, then replays: each reads the memory as it is at the call
        a[:] = i
        assert double(t).tolist() == [2.0 * i] * 4

    @TinyJit
    def write(x: Tensor) -> Tensor:
        x.assign(x + 1)
        return x
    with pytest.raises(RuntimeError, match="TinyJit"):
        for _ in range(3):
            write(t)


# ---- from_blob ----

@pytest.mark.parametrize("d", [dtypes.float32, dtypes.float64, dtypes.int64, dtypes.uint8, dtypes.float16,
                               dtypes.bool])
def test_from_blob_wraps_memory(d: DType) -> None:
    src = (np.arange(12) % 5 - 2).astype({dtypes.bool: np.bool_}.get(d, np.dtype(d.name)))
    t = Tensor.from_blob(src.ctypes.data, (3, 4), dtype=d)
    assert t.shape == (3, 4) and t.dtype == d and address(t) == src.ctypes.data
    src[...] = 1  # the tensor is the memory: later writes show
    np.testing.assert_array_equal(t.numpy(), np.ones((3, 4), dtype=src.dtype))
    t.assign(Tensor.zeros(3, 4, dtype=d))
    assert not src.any()


def test_from_blob_keeps_a_ctypes_array_alive_and_checks_alignment() -> None:
    t = Tensor.from_blob((ctypes.c_float * 3)(1.0, 2.0, 3.0), (3,))
    gc.collect()
    assert t.tolist() == [1.0, 2.0, 3.0]
    a = np.zeros(4, dtype=np.float32)
    with pytest.raises(ValueError, match="aligned"):
        Tensor.from_blob(a.ctypes.data + 1, (2,))
    buf = t._buffer()
    assert buf.shared is not None and buf.deallocate() == 0 and buf.is_allocated  # not ours to give back


def test_shared_buffers_are_forgotten_with_their_tensors() -> None:
    a = np.ones(3, dtype=np.float32)
    t = Tensor.from_dlpack(a)
    buf = weakref.ref(t._buffer())
    assert buf() in shared_buffers
    del t
    gc.collect()
    assert buf() is None


def test_a_device_that_cannot_wrap_host_memory_copies_it() -> None:
    name = next((n for n in ("CL", "WEBGPU") if n in Device.backends and Device.availability(n) is None), None)
    if name is None:
        pytest.skip("no device here lacks wrap_external (neither OpenCL nor WebGPU is available)")
    a = np.arange(3, dtype=np.float32)
    t = Tensor.from_blob(a.ctypes.data, (3,), device=name)
    a[:] = 0
    assert t.tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(BufferError, match="copy=False"):
        Tensor.from_dlpack(a, device=name, copy=False)
    u = Tensor.from_dlpack(a, device=name)
    assert u.device == name and u.tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(BufferError, match="CPU"):  # its memory is not the host's
        np.from_dlpack(u)
    assert Tensor.from_dlpack(u.__dlpack__(dl_device=(1, 0))).tolist() == [0.0, 0.0, 0.0]  # a copy, as asked


# ---- PyTorch ----

TORCH_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
                "bfloat16", "float32", "float64"]


@pytest.mark.parametrize("name", TORCH_DTYPES)
def test_torch_round_trips_share_memory(name: str) -> None:
    torch = pytest.importorskip("torch")
    tdt = getattr(torch, name)
    x = (torch.arange(12) % 3).to(tdt).reshape(3, 4)
    t = Tensor.from_dlpack(x)
    assert address(t) == x.data_ptr() and t.dtype == getattr(dtypes, name)
    np.testing.assert_array_equal(t.cast(dtypes.float64).numpy(), x.to(torch.float64).numpy())
    y = torch.from_dlpack(t)
    assert y.data_ptr() == x.data_ptr() and y.dtype == tdt
    back = torch.from_dlpack(Tensor((np.arange(6) % 2).astype(np.float32)).cast(getattr(dtypes, name)))
    assert back.dtype == tdt and back.to(torch.float32).tolist() == [0, 1, 0, 1, 0, 1]


def test_torch_strides_lifetimes_and_writes() -> None:
    torch = pytest.importorskip("torch")
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    t = Tensor.from_dlpack(x.t()[1:, ::2], copy=False)
    np.testing.assert_array_equal(t.numpy(), x.t()[1:, ::2].numpy())
    x.mul_(2)  # written by torch: read by the tensor
    np.testing.assert_array_equal(t.numpy(), x.t()[1:, ::2].numpy())
    t.assign(Tensor.zeros(3, 2))  # written by the tensor: read by torch
    assert x.t()[1:, ::2].abs().sum().item() == 0 and x[1].tolist() == [8.0, 10.0, 12.0, 14.0]
    del x
    gc.collect()
    assert t.tolist() == [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]
    s = Tensor([1.0, 2.0]) * 3
    y = torch.from_dlpack(s)
    del s
    gc.collect()
    assert y.tolist() == [3.0, 6.0]
    y += 1
    assert y.tolist() == [4.0, 7.0]
