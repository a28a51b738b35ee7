"""The tuning both CPU paths give LLVM's vectorisers: strided loads without gather instructions (x86), and no vector
wider than 128 lanes from the SLP vectoriser (LLVM path). Each was a several-fold slowdown of a kernel of the MNIST
example's training step; the CHANGELOG has the measurements."""

from __future__ import annotations

import platform
import re

import pytest
from tg_backend_cpu.device import CPUDevice
from tinygrad import Tensor
from tinygrad.codegen import get_program
from tinygrad.uop.ops import Ops

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
    # accumulators; LLVM 20+ made them one <160 x float> and x86 code generation rebuilt it lane by lane
    pytest.importorskip("llvmlite")
    from tg_backend_cpu.llvm_compiler import LLVMCompiler
    from tg_backend_cpu.llvm_renderer import LLVMRenderer

    x, g = Tensor.empty(64, 1, 28, 28), Tensor.empty(64, 32, 24, 24)
    w = Tensor.empty(32, 1, 5, 5, requires_grad=True)
    (x.conv2d(w) * g).sum().backward()
    assert w.grad is not None
    programs = [get_program(si.ast, LLVMRenderer()) for si in w.grad.schedule() if si.ast.op is Ops.SINK]
    program = max(programs, key=lambda p: len(re.findall(r"%acc\d+ = alloca float", p.src)))
    tile = len(re.findall(r"%acc\d+ = alloca float", program.src))
    assert tile > 128, f"the heuristics no longer give {program.name} a tile past 128 accumulators: the test is moot"
    optimized = str(LLVMCompiler()._optimized(program.src))
    lanes = [int(n) for n in re.findall(r"<(\d+) x float>", optimized)]
    assert lanes and max(lanes) <= 128, f"{program.name}: vectors of {sorted(set(lanes))} lanes"
