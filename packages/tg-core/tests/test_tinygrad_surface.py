"""tinygrad's public surface as its own tests and examples use it (issue 35), checked against numpy and torch here.

tinygrad's test files run against this project with tools/tinygrad_compat/run.py; this file keeps the same API in
this repository's CI, written from tinygrad's documented behaviour.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from tinygrad import Device, GlobalCounters, Tensor, TinyJit, dtypes
from tinygrad.engine.jit import JitError
from tinygrad.helpers import DEV, IMAGE, Target


# ---- DEV: device[:renderer[:arch]] ----
@pytest.mark.parametrize("text, want", [
    ("CPU", Target("CPU")),
    ("cpu:llvm", Target("CPU", "LLVM")),
    ("CPU:CLANG:znver4", Target("CPU", "CLANG", "znver4")),
    ("PCI:1+AMD", Target("AMD", interface="PCI", indices="1")),
])
def test_target_parses_tinygrads_syntax(text: str, want: Target) -> None:
    got = Target.parse(text)
    assert got == want
    assert Target.parse(repr(got)) == got


def test_target_refuses_too_many_parts() -> None:
    with pytest.raises(ValueError, match="more than two ':'"):
        Target.parse("CPU:LLVM:x:y")


def test_dev_reads_its_first_entry_and_finds_a_device_entry() -> None:
    old = DEV.value
    try:
        DEV.value = "CPU:CLANG;CL:x"
        assert (DEV.device, DEV.renderer) == ("CPU", "CLANG")
        assert DEV.target("cl") == Target("CL", "X")
        assert DEV.target("WEBGPU") == Target("WEBGPU")
        DEV.value = ""
        assert DEV.device == "" and DEV.target("CPU") == Target("CPU")
    finally:
        DEV.value = old
    assert not IMAGE  # no image buffers here: tinygrad's IMAGE>0 branches are skipped


@pytest.mark.parametrize("dev, compiler", [("CPU:CLANG", "clang"), ("CPU:GCC", "gcc")])
def test_dev_renderer_picks_the_cpu_compiler(dev: str, compiler: str) -> None:
    if not any(shutil.which(name) for name in ((compiler,) if compiler == "gcc" else
                                               ("clang", *(f"clang-{v}" for v in range(15, 30))))):
        pytest.skip(f"no {compiler} on this machine")
    probe = ("from tinygrad import Device, Tensor; from tg_backend_cpu import compiler as c; "
             "print(Device.DEFAULT, c.compiler_choice(), (Tensor.arange(3) + 1).tolist())")
    env = {**os.environ, "DEV": dev}
    env.pop("CPU_COMPILER", None)
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["CPU", compiler, "[1,", "2,", "3]"]


def test_dev_with_an_unknown_cpu_renderer_says_which_exist() -> None:
    env = {**os.environ, "DEV": "CPU:NOPE"}
    env.pop("CPU_COMPILER", None)
    out = subprocess.run([sys.executable, "-c", "from tinygrad import Tensor; Tensor([1]).realize()"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and "'NOPE'" in out.stderr and "LLVM" in out.stderr


# ---- tensors ----
def test_nonzero_with_size_is_lazy_and_filled() -> None:
    x = np.array([[0, 3, 0], [5, 0, 7]], dtype=np.int32)
    t = Tensor(x)
    want = np.argwhere(x)
    np.testing.assert_equal(t.nonzero().numpy(), want)
    np.testing.assert_equal(t.nonzero(size=5, fill_value=-1).numpy(), np.concatenate([want, [[-1, -1]] * 2]))
    np.testing.assert_equal(t.nonzero(size=2).numpy(), want[:2])
    rows, cols = t.nonzero(size=3, as_tuple=True)
    np.testing.assert_equal(rows.numpy(), want[:, 0])
    np.testing.assert_equal(cols.numpy(), want[:, 1])
    assert Tensor(3).nonzero(size=2).shape == (2, 0)
    np.testing.assert_equal(Tensor.zeros(0).nonzero(size=2, fill_value=-1).numpy(), [[-1], [-1]])


def test_nonzero_and_masked_select_with_size_run_in_a_jit() -> None:
    @TinyJit
    def f(x: Tensor) -> tuple[Tensor, Tensor]:
        return x.nonzero(size=3, fill_value=-1), x.masked_select(x > 1, size=3, fill_value=0)
    for i in range(4):
        x = np.array([0, i, 2, 0, 3], dtype=np.int32)
        idx, picked = f(Tensor(x))
        want = np.argwhere(x)[:3]
        np.testing.assert_equal(idx.numpy(), np.concatenate([want, np.full((3 - len(want), 1), -1)]))
        got = x[x > 1][:3]
        np.testing.assert_equal(picked.numpy(), np.concatenate([got, [0] * (3 - len(got))]))


def test_masked_select_size_broadcasts_like_torch(torch: Any) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    mask = np.array([True, False, True])
    want = torch.masked_select(torch.tensor(x), torch.tensor(mask)).numpy()
    np.testing.assert_equal(Tensor(x).masked_select(Tensor(mask), size=len(want)).numpy(), want)
    np.testing.assert_equal(Tensor(x).masked_select(Tensor(mask), size=6, fill_value=-1).numpy(),
                            np.concatenate([want, [-1, -1]]))


def test_pad_to_value() -> None:
    np.testing.assert_equal(Tensor([[1.0, 2.0]]).pad_to(2, 3, value=9).numpy(), [[1, 2, 9], [9, 9, 9]])
    np.testing.assert_equal(Tensor([1, 2]).pad_to(None).numpy(), [1, 2])


def test_tensor_none_is_a_zero_scalar() -> None:
    t = Tensor(None)
    assert t.shape == () and t.dtype == dtypes.default_float and t.item() == 0


@pytest.mark.parametrize("dtype, tdtype", [(dtypes.uint8, "uint8"), (dtypes.int8, "int8"), (dtypes.int32, None),
                                           (dtypes.uint32, None)])
def test_out_of_range_python_ints_wrap_like_a_cast(dtype, tdtype: str | None) -> None:
    data = [-1, 0, 255, 256, 1 << 33, -(1 << 33)]
    want = np.array(data).astype(np.dtype(dtype.name if dtype.name != "char" else "int8"))
    np.testing.assert_equal(Tensor(data, dtype=dtype).numpy(), want)
    torch = pytest.importorskip("torch") if tdtype is not None else None
    if torch is not None:  # torch wraps small ints the same way
        want = torch.tensor(data[:4]).to(getattr(torch, tdtype)).numpy()
        np.testing.assert_equal(Tensor(data[:4], dtype=dtype).numpy(), want)


def test_a_tensor_has_no_truth_value() -> None:
    with pytest.raises(TypeError, match="no truth value"):
        bool(Tensor(3))
    with pytest.raises(TypeError):
        _ = Tensor([3]) in [Tensor([3]), Tensor([4])]
    assert Tensor(3).item() == 3  # the explicit way


def test_errors_are_the_types_both_libraries_catch() -> None:
    with pytest.raises(ValueError):
        Tensor.zeros((2, 2), 2)
    with pytest.raises(TypeError):
        Tensor.ones((2, 2), (2, 2))
    with pytest.raises(AttributeError):
        Tensor([3], dtype="typo")
    with pytest.raises(AttributeError):
        Tensor([3], dtype=(dtypes.int,))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Tensor([3], dtype="typo")


@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.int32, dtypes.uint8, dtypes.bool, dtypes.float16])
def test_randn_of_any_dtype_is_drawn_as_float_and_cast(dtype) -> None:
    Tensor.manual_seed(3)
    t = Tensor.randn(64, dtype=dtype)
    assert t.dtype == dtype and t.element_size() == dtype.itemsize
    Tensor.manual_seed(3)
    np.testing.assert_equal(t.numpy(), Tensor.randn(64).cast(dtype).numpy())


# ---- TinyJit(prune=), .captured ----
def test_prune_leaves_constant_work_out_of_replays() -> None:
    weights = Tensor.rand(16).realize()

    def f(x: Tensor) -> Tensor:
        return (weights * 2).contiguous() + x

    plain, pruned = TinyJit(f), TinyJit(f, prune=True)
    for _ in range(4):
        a = Tensor.rand(16).realize()
        want = weights.numpy() * 2 + a.numpy()
        np.testing.assert_allclose(plain(a).numpy(), want, rtol=1e-6)
        np.testing.assert_allclose(pruned(a).numpy(), want, rtol=1e-6)
    assert pruned.captured is not None and plain.captured is not None
    assert pruned.captured_kernels == plain.captured_kernels - 1 == 1
    # the constant changes: the pruned kernel runs again instead of leaving a stale value
    weights.assign(Tensor.full((16,), 5.0)).realize()
    a = Tensor.rand(16).realize()
    np.testing.assert_allclose(pruned(a).numpy(), 10 + a.numpy(), rtol=1e-6)


def test_prune_keeps_state_updates_and_random_numbers() -> None:
    acc = Tensor.zeros(4).contiguous().realize()

    @TinyJit
    def step(x: Tensor) -> Tensor:
        acc.assign(acc + 1)
        return x + Tensor.rand(4) * 0 + acc

    pruned = TinyJit(step.fn, prune=True)
    for i in range(5):
        out = pruned(Tensor.zeros(4).contiguous().realize())
        np.testing.assert_equal(out.numpy(), [i + 1] * 4)


def test_free_intermediates_gives_memory_back_and_the_next_call_works() -> None:
    ext = Tensor([1, 24, 23, 45, 1])

    @TinyJit
    def f(x: Tensor) -> Tensor:
        t1 = (x * 2).contiguous().realize()
        t2 = (t1 + ext).contiguous().realize()
        return t2.sum().contiguous().realize()

    for i in range(4):
        out = f(Tensor([i, 1, 2, 3, 4]))
        assert out.item() == 114 + 2 * i
    assert f.captured is not None
    before = GlobalCounters.mem_used
    freed = f.captured.free_intermediates()
    assert freed >= 2 * 5 * 4 + 4 and before - GlobalCounters.mem_used == freed
    with pytest.raises(JitError, match="free_intermediates"):
        out.item()
    assert f.captured.free_intermediates() == 0  # twice is fine
    assert f(Tensor([11, 1, 2, 3, 4])).item() == 136
    assert f(Tensor([12, 1, 2, 3, 4])).item() == 138
    for i in range(3):  # the memory allocated again is given back again, and counted each time
        before = GlobalCounters.mem_used
        assert f.captured.free_intermediates() == freed == before - GlobalCounters.mem_used
        assert f(Tensor([i, 1, 2, 3, 4])).item() == 114 + 2 * i


def test_free_intermediates_keeps_state() -> None:
    x = Tensor([1]).realize()

    @TinyJit
    def f(y: Tensor) -> Tensor:
        x.assign(x + y)
        return x

    for _ in range(5):
        f(Tensor([1]))
    assert x.item() == 6 and f.captured is not None
    f.captured.free_intermediates()
    f(Tensor([2]))
    assert x.item() == 8


def test_devices_say_they_have_no_graph_class() -> None:
    assert Device[Device.DEFAULT].graph is None


def test_clones_of_equal_tensors_take_their_own_gradients() -> None:
    for _ in range(3):  # equal temporaries: the first one's id is free again when the second is made
        w1, w2 = Tensor(3.5).clone(), Tensor(3.5).clone()
        (w1 + w2).backward()
        assert w1.grad is not None and w2.grad is not None
        assert (w1.grad.item(), w2.grad.item()) == (1.0, 1.0)
    assert Tensor([1, 2]).clone(device=Device.DEFAULT).tolist() == [1, 2]


@pytest.mark.parametrize("dtype, low, high", [(dtypes.float32, -np.inf, np.inf), (dtypes.int32, -2**31, 2**31 - 1),
                                              (dtypes.uint8, 0, 255)])
def test_max_and_min_of_nothing_are_the_identities(dtype, low, high) -> None:
    empty = Tensor.zeros(2, 0, dtype=dtype)
    assert empty.max(1).tolist() == [low, low] and empty.min(1).tolist() == [high, high]
    assert Tensor.zeros(0, 3, dtype=dtype).max(0).tolist() == [low] * 3
    assert Tensor([]).sum().item() == 0 and np.isnan(Tensor([]).mean().item())


def test_assign_takes_host_data() -> None:
    t = Tensor.zeros(2, 2).contiguous().realize()
    t.assign(np.arange(4, dtype=np.float64).reshape(2, 2))
    assert t.dtype == dtypes.float32 and t.tolist() == [[0.0, 1.0], [2.0, 3.0]]
    t.assign([[5, 6], [7, 8]])
    assert t.tolist() == [[5.0, 6.0], [7.0, 8.0]]


def test_clone_has_its_own_buffer_and_copies_the_gradient() -> None:
    a = Tensor.rand(4, 4).realize()
    b = a.clone()
    np.testing.assert_equal(a.numpy(), b.numpy())
    assert a.uop.base.buffer is not b.uop.base.buffer
    x = Tensor.rand(3)
    (x * 5).sum().backward()
    y = x.clone()
    assert x.grad is not None and y.grad is not None
    np.testing.assert_equal(y.grad.numpy(), [5.0] * 3)
    with pytest.raises(RuntimeError, match="realize"):
        _ = (Tensor.ones(2) + 1).uop.buffer


def test_uop_const_takes_tinygrads_order_and_ours() -> None:
    from tinygrad import UOp

    assert UOp.const(2.0).dtype == dtypes.float32 and UOp.const(3).dtype == dtypes.int32
    assert UOp.const(True).dtype == dtypes.bool
    assert UOp.const(2.5, dtypes.float16) is UOp.const(dtypes.float16, 2.5)  # one node either way
    assert Tensor(UOp.const(2.0).cast(dtypes.float)).numpy() == 2.0
    with pytest.raises(TypeError, match="needs a value"):
        UOp.const(dtypes.float32)


def test_clone_of_a_constant_has_a_buffer_and_can_go_to_a_device() -> None:
    from tinygrad import UOp

    t = Tensor(UOp.const(2.0).cast(dtypes.float)).clone()
    assert t.numpy() == 2.0 and t.uop.has_buffer_identity()
    assert not (Tensor([1.0]) + 1).uop.has_buffer_identity()
    c = Tensor(UOp.const(2.0).cast(dtypes.float)).clone(device="CPU")
    assert c.device == "CPU" and c.numpy() == 2.0


def test_uop_variable_is_a_variable() -> None:
    from tinygrad import UOp, Variable

    v = UOp.variable("n", 1, 8)
    assert v is Variable("n", 1, 8)
    t = Tensor.arange(8)[:v.bind(3)]
    assert t.max_shape == (8,) and t.numpy().tolist() == [0, 1, 2]
    with pytest.raises(TypeError, match="integer"):
        UOp.variable("x", 0, 1, dtypes.float32)


def test_uop_axis_follows_the_sharding() -> None:
    devices = ("CPU:1", "CPU:2", "CPU:3")
    w = Tensor.arange(30).reshape(5, 6).float().shard(devices, axis=1)
    assert w.uop.axis == 1 and (w + 1).uop.axis == 1
    assert w.sum(axis=1).uop.axis is None  # summed over the split axis: replicated
    assert w.sum(axis=0).uop.axis == 0  # the split axis moves left
    assert Tensor.ones(4).shard(devices).uop.axis is None and Tensor([1]).uop.axis is None
