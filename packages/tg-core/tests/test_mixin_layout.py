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
