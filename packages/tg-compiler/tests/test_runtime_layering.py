"""Codegen writes kernels and the runtime runs them: `tinygrad.codegen` imports neither the device registry, the
engine nor the runtime (not even lazily or for type checking), so the pipeline from a kernel AST to source can be
read, and run, without a device. The runtime builds on codegen, never the other way."""

from __future__ import annotations

import ast
from pathlib import Path

import tinygrad.codegen
import tinygrad.runtime

CODEGEN = Path(tinygrad.codegen.__file__).parent
RUNTIME = Path(tinygrad.runtime.__file__).parent
#: what a module of codegen must not import (any module under these)
FORBIDDEN = ("tinygrad.device", "tinygrad.engine", "tinygrad.runtime")


def forbidden_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import statement in the file, wherever it stands, that names a FORBIDDEN module:
    `from tinygrad import device` names `tinygrad.device`."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        bad = [m for m in names if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]
        if bad:
            out.append((node.lineno, bad[0]))
    return sorted(out)


def test_codegen_imports_neither_devices_nor_the_engine_nor_the_runtime() -> None:
    files = sorted(CODEGEN.rglob("*.py"))
    assert len(files) > 10, f"codegen's modules were not found under {CODEGEN}"
    found = [f"{path.relative_to(CODEGEN.parent)}:{line}: imports {module}"
             for path in files for line, module in forbidden_imports(path)]
    assert not found, "codegen reaches into the runtime side:\n" + "\n".join(found)


def test_the_check_sees_lazy_and_from_imports(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("def f():\n    from tinygrad.device import Device\n"
                                   "from tinygrad import engine\nimport tinygrad.runtime.device\n"
                                   "from tinygrad.uop.ops import UOp\n")
    assert forbidden_imports(tmp_path / "m.py") == [(2, "tinygrad.device"), (3, "tinygrad.engine"),
                                                    (4, "tinygrad.runtime.device")]


def test_the_runtime_is_a_package_of_tg_compiler_beside_codegen() -> None:
    assert RUNTIME.parent == CODEGEN.parent
    assert {p.stem for p in RUNTIME.glob("*.py")} >= {"device", "runner", "compiler", "beam_timing"}
