"""Every function in the renderer and the optimisation layer stays short enough to read in one screen.

A function (a def or a lambda, methods and nested functions included) is measured from its `def` line to its last
line, as Python's ast records them. Its length must stay under MAX_LINES; a longer one is split (a table of rules,
a helper per case) rather than the limit raised.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tinygrad.codegen.opt
import tinygrad.renderer

#: a function of this many lines or more fails the test
MAX_LINES = 50
CHECKED_PACKAGES = (tinygrad.renderer, tinygrad.codegen.opt)


def function_lengths(source: str, filename: str) -> list[tuple[int, str]]:
    """(lines, "file:line name") of every function and lambda in `source`."""
    out = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            assert node.end_lineno is not None
            name = node.name if not isinstance(node, ast.Lambda) else "<lambda>"
            out.append((node.end_lineno - node.lineno + 1, f"{filename}:{node.lineno} {name}"))
    return out


def checked_files() -> list[Path]:
    return sorted(p for package in CHECKED_PACKAGES for folder in package.__path__ for p in Path(folder).glob("*.py"))


def test_every_function_in_the_renderer_and_the_opts_is_under_the_limit() -> None:
    files = checked_files()
    assert any(f.name == "cstyle.py" for f in files) and any(f.name == "actions.py" for f in files), files
    lengths = [entry for f in files for entry in function_lengths(f.read_text(), str(f))]
    too_long = sorted((n, where) for n, where in lengths if n >= MAX_LINES)
    listed = "; ".join(f"{where} ({n} lines)" for n, where in reversed(too_long))
    assert not too_long, f"functions of {MAX_LINES} lines or more (split them): {listed}"


def test_the_measure_counts_every_line_of_a_function_and_names_it() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES))
    source = f"class K:\n    def short(self):\n        return 1\n\ndef long_one():\n{body}    return x0\n"
    lengths = dict((where, n) for n, where in function_lengths(source, "m.py"))
    assert lengths == {"m.py:2 short": 2, "m.py:5 long_one": MAX_LINES + 2}
