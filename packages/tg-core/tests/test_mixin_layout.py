"""The layout of Tensor's mixin modules (tinygrad/mixin/*.py): they reach the Tensor class through `type(self)`,
`cls` or a tensor argument, and test for tensors with `isinstance(x, TensorBase)`; no module binds a global
`Tensor` at run time, tensor.py patches no other module, and no mixin module imports another one's private
names."""

from __future__ import annotations

import ast
import pathlib

import pytest
from tinygrad import Tensor
from tinygrad.mixin.common import TensorBase

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "tinygrad"
MIXINS = sorted((SRC / "mixin").glob("*.py"))
TENSOR = SRC / "tensor.py"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node that runs: the bodies of `if TYPE_CHECKING:` are left out (their `else:` is kept), and so are
    annotations (strings at run time under `from __future__ import annotations`)."""
    out: list[ast.AST] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
            continue
        for field, value in ast.iter_fields(node):
            if field in ("annotation", "returns"):
                continue
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, ast.AST):
                    todo.append(child)
    return out


def _bound_names(node: ast.AST) -> list[str]:
    """The names a statement binds in its scope."""
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.With)):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [i.optional_vars for i in node.items if i.optional_vars] if isinstance(node, ast.With) else [node.target]
        return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.NamedExpr):
        return [node.target.id]
    return []


def _where(path: pathlib.Path, node: ast.AST) -> str:
    return f"{path.relative_to(SRC)}:{getattr(node, 'lineno', '?')}"


@pytest.mark.parametrize("path", MIXINS, ids=lambda p: p.name)
def test_mixin_modules_bind_no_runtime_tensor_name(path: pathlib.Path) -> None:
    tree = ast.parse(path.read_text())
    nodes = _runtime_nodes(tree)
    bound = [_where(path, n) for n in nodes if "Tensor" in _bound_names(n)]
    assert not bound, f"{bound}: a mixin module binds `Tensor` at run time; import it under `if TYPE_CHECKING:` only"
    read = [_where(path, n) for n in nodes if isinstance(n, ast.Name) and n.id == "Tensor"]
    assert not read, f"{read}: the name `Tensor` read at run time; use type(self), cls, type(x) or TensorBase"
    if any(isinstance(n, ast.Name) and n.id == "Tensor" for n in ast.walk(tree)):
        assert any(isinstance(n, ast.ImportFrom) and n.module == "__future__" and
                   any(a.name == "annotations" for a in n.names) for n in tree.body), \
            f"{path.name} names Tensor in annotations without `from __future__ import annotations`"


@pytest.mark.parametrize("path", [TENSOR, *MIXINS], ids=lambda p: p.name)
def test_no_module_is_patched_from_outside(path: pathlib.Path) -> None:
    """Module-level code assigns no attribute of anything but the module's own classes (nor through setattr); no
    code anywhere assigns an attribute of an imported module."""
    tree = ast.parse(path.read_text())
    own_classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    imported = {name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for name in _bound_names(n)}
    module_level: list[ast.AST] = []
    todo: list[ast.AST] = list(tree.body)
    while todo:  # statements outside function and class bodies
        node = todo.pop()
        module_level.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))

    def root(target: ast.expr) -> str | None:
        while isinstance(target, (ast.Attribute, ast.Subscript)):
            target = target.value
        return target.id if isinstance(target, ast.Name) else None

    bad = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for t in targets:
            if isinstance(t, ast.Attribute) and (root(t) in imported or
                                                 (node in module_level and root(t) not in own_classes)):
                bad.append(_where(path, node))
    bad += [_where(path, n) for n in module_level if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
            and n.func.id == "setattr"]
    assert not bad, f"{bad}: an attribute of another module (or object) assigned from module level"


@pytest.mark.parametrize("path", [TENSOR, *MIXINS], ids=lambda p: p.name)
def test_no_private_imports_between_mixin_modules(path: pathlib.Path) -> None:
    """A helper two mixin modules share is public, in the module whose job it is (mixin/common.py for the
    building blocks)."""
    tree = ast.parse(path.read_text())
    bad = [f"{_where(path, n)} {a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
           and (n.level > 0 or (n.module or "").startswith("tinygrad.mixin"))
           for a in n.names if a.name.startswith("_")]
    modules = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
               and n.module == "tinygrad.mixin" for a in n.names}
    bad += [f"{_where(path, n)} {n.attr}" for n in ast.walk(tree) if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name) and n.value.id in modules and n.attr.startswith("_")]
    assert not bad, f"private names of a mixin module used from another module: {bad}"


FORBIDDEN = ("tinygrad.device", "tinygrad.engine")


def _imported_modules(node: ast.AST) -> list[str]:
    """The absolute names of the modules an import statement (or an importlib.import_module / __import__ call of a
    constant name) loads or takes names from, relative imports resolved from tinygrad.mixin; `from X import y` also
    counts X.y, which is a module when y is one."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        package = "tinygrad.mixin".split(".")
        base = ".".join(package[:len(package) - node.level + 1] if node.level else [])
        module = ".".join(p for p in (base, node.module or "") if p)
        return [module] + [f"{module}.{a.name}" for a in node.names]
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) and \
            isinstance(node.args[0].value, str):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in ("import_module", "__import__"):
            return [node.args[0].value]
    return []


def _forbidden(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


@pytest.mark.parametrize("path", MIXINS, ids=lambda p: p.name)
def test_mixin_modules_import_no_device_or_engine_module(path: pathlib.Path) -> None:
    """The mixins sit below the devices and the engine: they reach them only through TensorBase's `_runtime` (which
    tensor.py sets), never by importing them, at module level, inside a function, or under TYPE_CHECKING."""
    found = [(n, [m for m in _imported_modules(n) if _forbidden(m)]) for n in ast.walk(ast.parse(path.read_text()))]
    bad = [f"{_where(path, n)} imports {min(mods, key=len)}" for n, mods in found if mods]
    assert not bad, f"{bad}: a mixin module imports a device or engine module; ask for what it needs through " \
        f"`type(self)._runtime` (TensorRuntime in mixin/common.py, implemented in tensor.py)"


@pytest.mark.parametrize("source", [
    "import tinygrad.device", "import tinygrad.engine.jit_state as j", "from tinygrad.device.disk import is_disk",
    "from tinygrad import engine", "from .. import device", "from ..engine.schedule import base_buffer",
    "def f():\n    from tinygrad.engine import jit_state", "if TYPE_CHECKING:\n    from tinygrad.device import Buffer",
    "importlib.import_module('tinygrad.engine.schedule')", "__import__('tinygrad.device')"])
def test_the_import_check_sees_every_form(source: str) -> None:
    found = [m for n in ast.walk(ast.parse(source)) for m in _imported_modules(n)]
    assert any(_forbidden(m) for m in found), (source, found)


def test_the_import_check_passes_other_modules() -> None:
    source = "import tinygrad\nfrom tinygrad.devicex import a\nfrom tinygrad.uop import placement\nfrom . import common"
    found = [m for n in ast.walk(ast.parse(source)) for m in _imported_modules(n)]
    assert "tinygrad.mixin.common" in found and not any(_forbidden(m) for m in found), found


def test_every_tensor_is_a_tensor_base_and_keeps_its_slots() -> None:
    t = Tensor([1.0, 2.0])
    assert isinstance(t, TensorBase) and not isinstance([t], TensorBase)
    assert not hasattr(t, "__dict__"), "every base class declares __slots__, so a tensor has no __dict__"


def test_subclass_gets_its_class_from_the_mixins_and_sees_training() -> None:
    class Sub(Tensor):
        pass

    x = Sub([1.0, 2.0, 3.0, 4.0])
    assert type(Sub.arange(3)) is Sub and type(Sub.rand(2)) is Sub and type(x.logical_not()) is Sub
    assert x.dropout(1.0) is x, "not training: dropout is the identity"
    prev = Tensor.training
    try:
        Tensor.training = True  # set on Tensor, as tinygrad programs do, and read through the subclass
        assert x.dropout(1.0).tolist() == [0.0, 0.0, 0.0, 0.0]
        with Tensor.train(False):
            assert x.dropout(1.0) is x
    finally:
        Tensor.training = prev


def _contract_names() -> set[str]:
    """The names TensorBase declares: its methods and properties, and its annotated attributes."""
    return {n for n in vars(TensorBase) if not n.startswith("__")} | set(TensorBase.__annotations__)


def test_tensor_implements_the_whole_contract() -> None:
    """TensorBase only declares (its methods raise NotImplementedError); Tensor implements every name of it."""
    for name in _contract_names():
        if name in vars(TensorBase):
            assert getattr(Tensor, name) is not vars(TensorBase)[name], f"Tensor does not implement {name}"
        else:
            assert any(name in vars(c) or name in getattr(c, "__slots__", ()) for c in Tensor.__mro__
                       if c is not TensorBase), f"Tensor has no attribute {name} that TensorBase declares"
    t = Tensor([1.0, 2.0])
    assert t._derive(t.uop).tolist() == [1.0, 2.0] and t._float() is t and t.shape == (2,)


def test_mixins_reach_tensor_py_only_through_the_contract() -> None:
    """The private names of tensor.py's classes that a mixin module uses are the ones TensorBase declares: a mixin
    depends on that contract (mixin/common.py), never on a private helper of tensor.py."""
    tree = ast.parse(TENSOR.read_text())
    private: set[str] = set()
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for node in cls.body:
            if isinstance(node, ast.FunctionDef):
                private.add(node.name)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple):  # __slots__
                private |= {e.value for e in node.value.elts if isinstance(e, ast.Constant)
                            and isinstance(e.value, str)}
    private = {n for n in private if n.startswith("_") and not n.startswith("__")} - _contract_names()
    bad = [f"{_where(path, n)} {n.attr}" for path in MIXINS for n in ast.walk(ast.parse(path.read_text()))
           if isinstance(n, ast.Attribute) and n.attr in private]
    assert not bad, f"mixin code uses private names of tensor.py that TensorBase does not declare: {bad}"


def test_the_type_checker_stub_of_the_tensor_api_is_current() -> None:
    """mixin/surface.pyi (what mypy knows of `Self` in a mixin) is generated from the code; a changed signature
    needs `python tools/tensor_surface.py`."""
    import subprocess
    import sys

    script = SRC.parents[3] / "tools" / "tensor_surface.py"
    if not script.exists():
        pytest.skip("tools/tensor_surface.py is not in this checkout (an installed tg-core without the repository)")
    proc = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
