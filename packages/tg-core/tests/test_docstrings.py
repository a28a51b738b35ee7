"""The public Tensor API is documented (issue 19): every member has a docstring with a runnable `>>>` example, and
every example prints what its docstring says.

A member is each name of `dir(Tensor)` that does not start with "_" (methods, properties, class and static
methods, the `train` context manager, and the data attributes `training`, `device`, `grad` and `uop`). Methods
and properties carry their docstring on the object; the data attributes carry theirs as attribute docstrings in
tensor.py's source (a string right after the attribute's declaration, which griffe and the docs site read too).

The examples run with `doctest` on the CPU, with the names below in scope (as `from tinygrad import ...` and
`import numpy as np` would give them). The docs site (`mkdocs build --strict`) renders the same docstrings.
"""

from __future__ import annotations

import ast
import doctest
import functools
import inspect
import itertools
import math
from typing import Any

import numpy as np
import pytest
from tinygrad import Context, Device, GlobalCounters, Tensor, TinyJit, Variable, dtypes

PUBLIC = sorted(n for n in dir(Tensor) if not n.startswith("_"))

#: members allowed to go without a docstring or example, each with the reason. Keep it empty if you can.
EXCEPTIONS: dict[str, str] = {}

GLOBS: dict[str, Any] = {"Tensor": Tensor, "dtypes": dtypes, "np": np, "Device": Device, "Context": Context,
                         "TinyJit": TinyJit, "GlobalCounters": GlobalCounters, "Variable": Variable, "math": math}
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@functools.cache
def _attribute_docs() -> dict[str, str]:
    """Attribute docstrings of Tensor and its base classes: a string statement right after `name: T` / `name = v`
    in a class body, or after `self.name: T = v` in a method (griffe's rule). Aliases (`clamp = clip`) carry one
    too: at run time they share the function's docstring, on the docs site they show their own."""
    docs: dict[str, str] = {}
    for klass in reversed(Tensor.__mro__[:-1]):  # a subclass's docstring wins over a base's
        tree = ast.parse(inspect.getsource(inspect.getmodule(klass)))
        cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == klass.__name__)
        bodies = [cls.body] + [f.body for f in cls.body if isinstance(f, ast.FunctionDef)]
        for body in bodies:
            for stmt, nxt in itertools.pairwise(body):
                target = stmt.target if isinstance(stmt, ast.AnnAssign) else \
                    stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
                name = target.id if isinstance(target, ast.Name) else \
                    target.attr if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                    and target.value.id == "self" else None
                if name and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) \
                        and isinstance(nxt.value.value, str):
                    docs[name] = inspect.cleandoc(nxt.value.value)
    return docs


def _documented_object(name: str) -> Any:
    """What carries the member's docstring: the function, property or class; None for a data attribute."""
    static = next(vars(c)[name] for c in Tensor.__mro__ if name in vars(c))
    if isinstance(static, (staticmethod, classmethod)):
        return static.__func__
    if isinstance(static, property) or inspect.isfunction(static) or inspect.isclass(static):
        return static
    return None


def _docstring(name: str) -> str | None:
    obj = _documented_object(name)
    return _attribute_docs().get(name) if obj is None else inspect.getdoc(obj)


def _doctests(name: str) -> list[doctest.DocTest]:
    obj = _documented_object(name)
    tests = []
    if obj is not None:
        finder = doctest.DocTestFinder(recurse=False, exclude_empty=True)
        tests += finder.find(obj, name=f"Tensor.{name}", module=False, globs=GLOBS)
    if (doc := _attribute_docs().get(name)) is not None:  # a data attribute's docstring, or an alias's own
        tests.append(doctest.DocTestParser().get_doctest(doc, dict(GLOBS), f"Tensor.{name} (attribute)", None, 0))
    return tests


def test_public_api_is_listed() -> None:
    # the members this test covers: the ~247 names of tinygrad's public Tensor API that exist here
    assert len(PUBLIC) > 200
    assert not set(EXCEPTIONS) - set(PUBLIC), f"stale exceptions: {sorted(set(EXCEPTIONS) - set(PUBLIC))}"


def test_every_public_member_has_a_docstring_with_an_example() -> None:
    missing = [n for n in PUBLIC if n not in EXCEPTIONS and not _docstring(n)]
    no_example = [n for n in PUBLIC if n not in EXCEPTIONS and n not in missing and ">>>" not in (_docstring(n) or "")]
    assert not missing, f"{len(missing)} public Tensor members have no docstring: {missing}"
    assert not no_example, f"{len(no_example)} public Tensor members have no `>>>` example: {no_example}"


@pytest.fixture
def _on_cpu():
    """The examples run on the CPU (their outputs name it), with the training flag and the seed put back."""
    before = Device.DEFAULT
    Device.DEFAULT = "CPU"
    try:
        yield
    finally:
        Device.DEFAULT = before
        Tensor.training = False
        Tensor.manual_seed(0)


@pytest.mark.usefixtures("_on_cpu")
@pytest.mark.parametrize("name", [n for n in PUBLIC if n not in EXCEPTIONS])
def test_examples_run(name: str) -> None:
    tests = [t for t in _doctests(name) if t.examples]
    assert tests, f"Tensor.{name}: no `>>>` example found"
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report: list[str] = []
    for t in tests:
        runner.run(t, out=report.append)
    assert runner.failures == 0, f"Tensor.{name}: {runner.failures} example(s) failed\n" + "".join(report)
