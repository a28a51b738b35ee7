"""The tuning both CPU paths give LLVM's vectorisers: strided loads without gather instructions (x86), no vector
wider than 128 lanes from the SLP vectoriser (LLVM path), and a padding gate's two tests of a loop counter written as
one unsigned comparison (C path), which keeps clang from turning them into a switch that stops its loop vectoriser.
Each was a several-fold slowdown of a kernel; the CHANGELOG has the measurements."""

from __future__ import annotations

import platform
import re

import numpy as np
import pytest
from tg_backend_cpu.device import CPUDevice
from tg_backend_cpu.renderer import C_TARGET_REWRITES, CPURenderer
from tinygrad import Tensor
from tinygrad.codegen import get_program
from tinygrad.dtype import dtypes
from tinygrad.uop.ops import AxisKind, Ops, ParamArg, RangeArg, UOp
from tinygrad.uop.rewrite import graph_rewrite

X86 = platform.machine() in ("x86_64", "AMD64")


def _has_gathers_to_avoid() -> bool:
    """Whether this CPU has vector gather instructions (AVX2), which the tuning keeps out of kernels."""
    try:
        with open("/proc/cpuinfo") as f:
            return " avx2" in next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return False


def _device(monkeypatch: pytest.MonkeyPatch, compiler: str) -> CPUDevice:
    if compiler == "llvm":
        pytest.importorskip("llvmlite")
    monkeypatch.setenv("CPU_COMPILER", compiler)
    try:
        dev = CPUDevice()
    except RuntimeError as e:  # no clang on this machine
        pytest.skip(f"CPU_COMPILER={compiler} is not available here: {e}")
    if compiler == "clang" and "clang" not in getattr(dev.compiler, "version", "").lower():
        pytest.skip("the C compiler here is not clang")
    return dev


def _assembly(dev: CPUDevice, t: Tensor) -> dict[str, str]:
    out = {}
    for si in t.schedule():
        if si.ast.op is Ops.SINK:
            spec = dev._program(si.ast)
            asm = dev.compiler.disassemble(dev.compiler.compile(spec.src), spec.src)
            if asm is None:
                pytest.skip("this compiler gives no assembly here (no objdump)")
            out[spec.name] = asm
    return out


@pytest.mark.skipif(not X86 or not _has_gathers_to_avoid(), reason="gather instructions are x86 AVX2/AVX-512 ones")
@pytest.mark.parametrize("compiler", ["llvm", "clang"])
def test_strided_loads_are_not_gathered(monkeypatch: pytest.MonkeyPatch, compiler: str) -> None:
    # a 2x2 max-pool and the max-pool backward's count of equal maxima read rows at stride 2; vectorised with gather
    # instructions they ran 4-8x slower on AMD Zen than with loads and shuffles
    dev = _device(monkeypatch, compiler)
    x, m = Tensor.empty(8, 32, 20, 20), Tensor.empty(8, 32, 10, 10)
    kernels = {**_assembly(dev, x.max_pool2d()),
               **_assembly(dev, (x.reshape(8, 32, 10, 2, 10, 2) == m.reshape(8, 32, 10, 1, 10, 1)).float().sum((3, 5)))}
    assert kernels
    for name, asm in kernels.items():
        assert not re.search(r"\bv(p)?gather", asm), f"{name} uses gather instructions:\n{asm[:3000]}"


def test_a_big_register_tile_is_not_one_giant_vector() -> None:
    # the first convolution's weight gradient of the MNIST model: 32 output channels times a 5-wide kernel row, 160
    # accumulators; LLVM 20+ made them one <160 x float> and x86 code generation rebuilt it lane by lane. The tile is
    # left in scalars here (CPU_VECTOR_TILES=0), as any tile the vector plan does not take is
    pytest.importorskip("llvmlite")
    from tg_backend_cpu.llvm_compiler import LLVMCompiler
    from tg_backend_cpu.llvm_renderer import LLVMRenderer

    x, g = Tensor.empty(64, 1, 28, 28), Tensor.empty(64, 32, 24, 24)
    w = Tensor.empty(32, 1, 5, 5, requires_grad=True)
    (x.conv2d(w) * g).sum().backward()
    assert w.grad is not None
    renderer = LLVMRenderer()
    renderer.vector_tiles = False
    programs = [get_program(si.ast, renderer) for si in w.grad.schedule() if si.ast.op is Ops.SINK]
    program = max(programs, key=lambda p: len(re.findall(r"%acc\d+ = alloca float", p.src)))
    tile = len(re.findall(r"%acc\d+ = alloca float", program.src))
    assert tile > 128, f"the heuristics no longer give {program.name} a tile past 128 accumulators: the test is moot"
    optimized = str(LLVMCompiler()._optimized(program.src))
    lanes = [int(n) for n in re.findall(r"<(\d+) x float>", optimized)]
    assert lanes and max(lanes) <= 128, f"{program.name}: vectors of {sorted(set(lanes))} lanes"


def _padded_copy(x: Tensor) -> Tensor:
    return x.relu().pad((1, 1, 1, 1)).contiguous()


def test_a_padding_gate_is_one_unsigned_comparison_per_counter() -> None:
    (si,) = _padded_copy(Tensor.empty(2, 3, 16, 16)).schedule()
    src = get_program(si.ast, CPURenderer()).src
    # rows and columns 1..16 of 18: (unsigned)i - 1 < 16 for each counter, no signed pair of tests left
    assert len(re.findall(r"\(unsigned int\)\(ridx\d\)\)-1u\)<16u", src)) == 2, src
    assert "<1)!=1" not in src, src


@pytest.mark.parametrize("pads", [(1, 1, 1, 1), (0, 3, 2, 0), (5, 5, 0, 0), (-1, 2, 3, -2), (40, 0, 0, 40)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_padded_copies_match_numpy(pads: tuple[int, int, int, int], dtype: type) -> None:
    # the unsigned form is the signed pair for every counter value: borders before, after, both, shrinks mixed in
    a = np.arange(-60, 60).reshape(2, 6, 10).astype(dtype)
    got = Tensor(a).pad(pads).contiguous().numpy()
    (left, right, top, bottom) = pads
    want = np.pad(a, ((0, 0), (max(top, 0), max(bottom, 0)), (max(left, 0), max(right, 0))))
    want = want[:, max(-top, 0):want.shape[1] - max(-bottom, 0), max(-left, 0):want.shape[2] - max(-right, 0)]
    np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(not X86 or not _has_gathers_to_avoid(), reason="looks for AVX2/AVX-512 registers")
@pytest.mark.parametrize("compiler", ["llvm", "clang"])
def test_a_padded_copy_is_vectorised(monkeypatch: pytest.MonkeyPatch, compiler: str) -> None:
    # the copy a padded convolution reads (DeviceKnobs.conv_border_copy): clang 19 left it scalar, ten times slower
    dev = _device(monkeypatch, compiler)
    (asm,) = _assembly(dev, _padded_copy(Tensor.empty(8, 16, 16, 16))).values()
    assert re.search(r"%[yz]mm\d+", asm), asm[:3000]


def _rewritten(u: UOp) -> UOp:
    return graph_rewrite(u, C_TARGET_REWRITES, ctx=CPURenderer())


def _range(n: int) -> UOp:
    return UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, n),), RangeArg(0, AxisKind.GLOBAL))


def test_a_gated_load_inside_its_buffer_loses_only_its_gate() -> None:
    i = _range(18)
    gate = i.lt(17)
    inside = UOp(Ops.PARAM, dtypes.float32, (), ParamArg(1, 18))
    short = UOp(Ops.PARAM, dtypes.float32, (), ParamArg(2, 16))

    def load(buf: UOp, idx: UOp) -> UOp:
        return UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, dtypes.float32, (buf, idx, gate)),))
    # i in [0, 18) reads inside 18 elements whatever the gate: an ordinary load under the select
    ungated = _rewritten(load(inside, i))
    assert ungated.op is Ops.WHERE and ungated.src[0] is gate and len(ungated.src[1].src[0].src) == 2
    # 16 elements: i = 16 and 17 would read past the end, so the load keeps its gate
    assert _rewritten(load(short, i)) is load(short, i)


def test_an_inner_select_on_the_outer_gate_is_decided_but_not_in_an_address() -> None:
    i = _range(18)
    gate, a, b = i.lt(17), i.cast(dtypes.float32), UOp.const(dtypes.float32, 5.0)
    buf = UOp(Ops.PARAM, dtypes.float32, (), ParamArg(1, 17))
    # the address i (gate) or 0 (not): the load runs either way, so its select must stay
    safe = gate.where(i, 0)
    read = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, dtypes.float32, (buf, safe)),))
    # and a load whose own gate is a select on the outer gate: the gate stays as it is
    other_gate = gate.where(i.lt(3), UOp.const(dtypes.bool, False))
    gated = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, dtypes.float32, (buf, i, other_gate)),))
    out = _rewritten(gate.where(gate.where(a, b) + read + gated, UOp.const(dtypes.float32, 0.0)))
    nodes = out.src[1].toposort()
    assert gate.where(a, b) not in nodes and a in nodes  # decided: the value where the gate holds
    assert safe in nodes  # the address kept its select
    assert other_gate in nodes  # and the load its gate


def test_a_padded_copy_of_a_sum_matches_numpy_and_has_one_select_per_gate() -> None:
    # a convolution's output plus its bias, relu, padded: each operand of the sum is padded (gated) on its own
    rng = np.random.default_rng(5)
    x, bias = rng.standard_normal((2, 3, 6, 5)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    t = (Tensor(x) + Tensor(bias).reshape(1, 3, 1, 1)).relu().pad((1, 2, 2, 1)).contiguous()
    want = np.pad(np.maximum(x + bias.reshape(1, 3, 1, 1), 0), ((0, 0), (0, 0), (2, 1), (1, 2)))
    np.testing.assert_array_equal(t.numpy(), want)
    (si,) = (Tensor.empty(2, 3, 6, 5) + Tensor.empty(3).reshape(1, 3, 1, 1)).relu().pad((1, 2, 2, 1)) \
        .contiguous().schedule()
    src = get_program(si.ast, CPURenderer()).src
    # the bias is read without a gate, before the gated read of x (not after its branch)
    assert re.search(r"float val\d+ = data\d\[ridx1\];", src), src


@pytest.mark.skipif(not X86 or not _has_gathers_to_avoid(), reason="looks for AVX2/AVX-512 registers")
def test_a_padded_copy_of_a_sum_is_vectorised(monkeypatch: pytest.MonkeyPatch) -> None:
    dev = _device(monkeypatch, "clang")
    t = (Tensor.empty(8, 16, 16, 16) + Tensor.empty(16).reshape(1, 16, 1, 1)).relu().pad((1, 1, 1, 1)).contiguous()
    (asm,) = _assembly(dev, t).values()
    assert re.search(r"%[yz]mm\d+", asm), asm[:3000]
