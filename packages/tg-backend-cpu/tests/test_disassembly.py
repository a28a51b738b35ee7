"""DEBUG=7: each compiled kernel's assembly, from the C path (objdump, else the compiler's -S) and the LLVM path
(llvmlite's assembly printer); a device whose compiler gives none says so."""

from __future__ import annotations

import re
import shutil

import pytest
from tg_backend_cpu.device import CPUDevice
from tinygrad import Context, Tensor
from tinygrad.runtime.device import Compiled
from tinygrad.uop.ops import UOp

# an objdump line: address, then an instruction
OBJDUMP_INSN = re.compile(r"^\s+[0-9a-f]+:\s+[a-z]", re.M)


def has_label(asm: str, name: str) -> bool:
    """Whether assembler output defines `name` (a line of its own, perhaps with the compiler's comment)."""
    label = re.search(rf"^{name}:\s*(#.*)?$", asm, re.M)
    return label is not None and re.search(rf"\.globl\s+{name}\b", asm) is not None


def kernel_ast() -> UOp:
    x = Tensor.empty(64)
    (si,) = (x * 3 + 1).schedule()
    return si.ast


def debug7(device: Compiled, capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    """(kernel name, what DEBUG=7 printed) for one kernel built on `device` (a fresh device: nothing cached)."""
    ast = kernel_ast()
    capsys.readouterr()
    with Context(DEBUG=7):
        runner = device.get_runner(ast)
    return runner.display_name, capsys.readouterr().err


@pytest.mark.skipif(shutil.which("objdump") is None and shutil.which("llvm-objdump") is None, reason="no objdump")
def test_c_path_prints_the_objdump_of_the_kernel(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("CPU_COMPILER", raising=False)
    dev = CPUDevice()
    if dev.compiler.__class__.__name__ != "CCompiler":
        pytest.skip("no C compiler: the CPU device compiles with LLVM here")
    name, err = debug7(dev, capsys)
    assert f"<{name}>:" in err
    assert len(OBJDUMP_INSN.findall(err)) >= 3
    assert "tg-asm-" not in err  # the temporary file's name is left out


def test_c_path_without_objdump_prints_the_compilers_assembly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CPU_COMPILER", raising=False)
    dev = CPUDevice()
    if dev.compiler.__class__.__name__ != "CCompiler":
        pytest.skip("no C compiler: the CPU device compiles with LLVM here")
    spec = dev._program(kernel_ast())
    lib = dev.compiler.compile(spec.src)
    monkeypatch.setattr(shutil, "which", lambda name: None)  # after the device found its compiler
    asm = dev.compiler.disassemble(lib, spec.src)
    assert asm is not None and has_label(asm, spec.name)


def test_llvm_path_prints_llvms_assembly(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("llvmlite")
    monkeypatch.setenv("CPU_COMPILER", "llvm")
    name, err = debug7(CPUDevice(), capsys)
    assert has_label(err, name)
    assert "define void" in err  # the IR, printed at DEBUG>=4, comes before


def test_a_compiler_without_disassembly_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    pyref = pytest.importorskip("tg_backend_pyref.device")
    name, err = debug7(pyref.PyRefDevice(), capsys)
    assert f"{name}: no assembly: PYREF's compiler (PyRefCompiler) gives none" in err
