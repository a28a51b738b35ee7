"""No module of the project imports another that imports it back, however indirectly.

The graph is read from the source (`ast`), not from `sys.modules`, so it holds every import a module can make: an
import inside a function is a dependency like one at the top (it runs the first time the function does), and only
the body of `if TYPE_CHECKING:` is left out (it never runs). Relative imports are resolved, and `from pkg import
name` depends on `pkg.name` when that is a submodule, else on `pkg` itself (its `__init__`). A parent package is not
a dependency of its submodules (Python runs it first whoever imports them), so a package `__init__` that re-exports
a submodule is fine as long as the submodule imports the names it needs from the modules that define them, not from
the package.

A failure lists each group of modules that import each other (a strongly connected component of the graph), one
shortest cycle through it with the import lines that make it, and the other imports inside the group: move the
definitions so that the imports point one way (a lazy import inside a function does not break a cycle).
"""

from __future__ import annotations

import ast
import collections
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class ImportLine:
    """One import statement of `module` (in `path`, at `line`) that makes it depend on another module."""

    module: str
    path: Path
    line: int
    text: str

    def __str__(self) -> str:
        where = self.path.relative_to(REPO) if self.path.is_relative_to(REPO) else self.path
        return f"{where}:{self.line}: {self.text}"


def module_files(roots: Iterable[Path]) -> dict[str, Path]:
    """Every module under the `src` roots, by dotted name (a package by its own name: `__init__.py` is the
    package). Roots may share a namespace package: their modules merge."""
    mods: dict[str, Path] = {}
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            mods[name] = path
    return mods


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the nodes inside the body of an `if TYPE_CHECKING:` (or `typing.TYPE_CHECKING`): never run."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skipped


def _known(name: str, mods: dict[str, Path]) -> str | None:
    """The module `name` lands in: itself, or the nearest enclosing package of the project (None: not ours)."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, mods: dict[str, Path]) -> set[str]:
    """The project modules one import statement of `module` depends on."""
    if isinstance(node, ast.Import):
        found = {_known(alias.name, mods) for alias in node.names}
    else:
        base = node.module or ""
        if node.level:  # relative: level 1 is the package `module` is in (or is)
            package = module.split(".") if is_package else module.split(".")[:-1]
            anchor = package[:len(package) - node.level + 1]
            base = ".".join(anchor + ([base] if base else []))
        found = set()
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            found.add(sub if sub in mods else _known(base, mods))
    return {m for m in found if m is not None and m != module}


def import_graph(mods: dict[str, Path]) -> dict[tuple[str, str], list[ImportLine]]:
    """Every dependency (importer, imported) between the modules, with the statements that make it."""
    edges: dict[tuple[str, str], list[ImportLine]] = collections.defaultdict(list)
    for module, path in mods.items():
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source, str(path))
        skipped = _type_checking_only(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in skipped:
                for target in _targets(node, module, path.name == "__init__.py", mods):
                    edges[(module, target)].append(ImportLine(module, path, node.lineno, ast.unparse(node)))
    return edges


def strongly_connected(nodes: Iterable[str], succ: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's components, iteratively (the graph is deep enough for Python's recursion limit to matter)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in nodes:
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(succ.get(root, ())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while not comp or comp[-1] != v:
                        comp.append(stack.pop())
                        on_stack.discard(comp[-1])
                    out.append(sorted(comp))
            elif w not in index:
                index[w] = low[w] = len(index)
                stack.append(w)
                on_stack.add(w)
                work.append((w, iter(succ.get(w, ()))))
            elif w in on_stack:
                low[v] = min(low[v], index[w])
    return out


def shortest_cycle(start: str, succ: dict[str, list[str]], within: set[str]) -> list[str]:
    """The modules of a shortest cycle from `start` back to it inside `within` (breadth-first)."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in succ.get(v, ()):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return path[::-1]
                if w in within and w not in came_from:
                    came_from[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{start} is in a strongly connected group but on no cycle")


def cycles_report(edges: dict[tuple[str, str], list[ImportLine]], nodes: Iterable[str]) -> list[str]:
    """One paragraph per group of modules that import each other; empty when the graph has no cycle."""
    succ: dict[str, list[str]] = collections.defaultdict(list)
    for src, dst in sorted(edges):
        succ[src].append(dst)
    report = []
    for comp in strongly_connected(sorted(nodes), succ):
        if len(comp) < 2:
            continue
        members = set(comp)
        cycle = shortest_cycle(comp[0], succ, members)
        lines = [f"{len(comp)} modules import each other: {', '.join(comp)}", "  a cycle:"]
        shown = set()
        for src, dst in zip(cycle, cycle[1:] + cycle[:1]):
            shown.add((src, dst))
            lines += [f"    {src} -> {dst}"] + [f"      {imp}" for imp in edges[(src, dst)]]
        rest = sorted(e for e in edges if e[0] in members and e[1] in members and e not in shown)
        if rest:
            lines.append("  the other imports inside the group:")
            lines += [f"    {src} -> {dst}: {edges[(src, dst)][0]}" for src, dst in rest]
        report.append("\n".join(lines))
    return report


def dependencies(module: str, edges: dict[tuple[str, str], list[ImportLine]]) -> dict[str, list[ImportLine]]:
    """Every module `module` loads, directly or not, each with the import line that first reaches it."""
    succ: dict[str, list[str]] = collections.defaultdict(list)
    for src, dst in sorted(edges):
        succ[src].append(dst)
    reached: dict[str, list[ImportLine]] = {}
    frontier = [(module, list[ImportLine]())]
    while frontier:
        v, path = frontier.pop()
        for w in succ.get(v, ()):
            if w != module and w not in reached:
                reached[w] = path + [edges[(v, w)][0]]
                frontier.append((w, reached[w]))
    return reached


# ---- the project ----

@pytest.fixture(scope="module")
def project() -> tuple[dict[str, Path], dict[tuple[str, str], list[ImportLine]]]:
    roots = sorted(REPO.glob("packages/*/src"))
    if not roots:
        pytest.skip(f"no packages/*/src under {REPO}: this test reads the monorepo's sources, not an installed wheel")
    mods = module_files(roots)
    assert "tinygrad.tensor" in mods and "tinygrad.codegen" in mods, f"the project's modules were not found: {roots}"
    return mods, import_graph(mods)


def test_no_import_cycles(project: tuple[dict[str, Path], dict[tuple[str, str], list[ImportLine]]]) -> None:
    mods, edges = project
    report = cycles_report(edges, mods)
    assert not report, "import cycles (make the imports point one way):\n\n" + "\n\n".join(report)


def test_core_imports_no_other_distribution(project: tuple[dict[str, Path], dict[tuple[str, str], list[ImportLine]]]
                                            ) -> None:
    """tg-core never imports tg-compiler, tg-nn or a backend: it asks the device for a runner (its README)."""
    mods, edges = project
    core = REPO / "packages" / "tg-core"
    wrong = [f"{src} -> {dst}: {lines[0]}" for (src, dst), lines in sorted(edges.items())
             if mods[src].is_relative_to(core) and not mods[dst].is_relative_to(core)]
    assert not wrong, "tg-core imports other distributions:\n" + "\n".join(wrong)


def test_autograd_loads_neither_devices_nor_the_engine(
        project: tuple[dict[str, Path], dict[tuple[str, str], list[ImportLine]]]) -> None:
    """The gradient rules are graph rewrites: they build on the UOp layer alone."""
    _, edges = project
    loaded = dependencies("tinygrad.gradient", edges)
    wrong = {m: path for m, path in loaded.items()
             if m.split(".")[:2] in (["tinygrad", "engine"], ["tinygrad", "device"]) or m == "tinygrad.multi"}
    assert not wrong, "tinygrad.gradient loads:\n" + "\n".join(
        f"  {m}, through\n" + "\n".join(f"    {line}" for line in path) for m, path in sorted(wrong.items()))


# ---- the checker itself, on small made-up packages ----

def _write(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return module_files([root])


def test_checker_sees_lazy_relative_and_reexport_cycles(tmp_path: Path) -> None:
    mods = _write(tmp_path, {
        "pkg/__init__.py": "from pkg.a import A\n",
        "pkg/a.py": "def f():\n    from . import b\nA = 1\n",  # lazy and relative: still a dependency on pkg.b
        "pkg/b.py": "from pkg.a import A\n",
        "pkg/c.py": "from pkg import A\n",  # a name of the package's __init__, which re-exports ...
        "pkg/d.py": "import pkg.c\n",
        "pkg/sub/__init__.py": "from ..d import *\n",
    })
    # ... so pkg -> pkg.a is no cycle, but a module that imports the package's names from the package, while the
    # package imports it, is
    mods_cycle = _write(tmp_path / "two", {"q/__init__.py": "from q.m import M\nX = 1\n",
                                           "q/m.py": "from q import X\nM = X\n"})
    report = cycles_report(import_graph(mods), mods)
    assert len(report) == 1 and "pkg.a, pkg.b" in report[0], report
    assert "pkg/a.py:2: from . import b" in report[0] and "pkg/b.py:1: from pkg.a import A" in report[0], report
    edges = import_graph(mods)
    assert ("pkg.c", "pkg") in edges and ("pkg.d", "pkg.c") in edges and ("pkg.sub", "pkg.d") in edges
    report = cycles_report(import_graph(mods_cycle), mods_cycle)
    assert len(report) == 1 and "q, q.m" in report[0] and "q/m.py:1: from q import X" in report[0], report


def test_checker_skips_type_checking_and_resolves_submodules(tmp_path: Path) -> None:
    mods = _write(tmp_path, {
        "p/__init__.py": "from p.x import X\n",
        "p/x.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.y import Y\nelse:\n    import p.w\n",
        "p/w.py": "W = 1\n",
        "p/y.py": "from p import x\nfrom p import z\nY = 1\n",  # submodules of p, not p's __init__
        "p/z.py": "import numpy\nimport p.y\n",  # a module outside the project is no node
    })
    edges = import_graph(mods)
    assert ("p.x", "p.y") not in edges, "an import under `if TYPE_CHECKING:` never runs"
    assert ("p.x", "p.w") in edges, "the `else:` of `if TYPE_CHECKING:` runs"
    assert ("p.y", "p.x") in edges and ("p.y", "p.z") in edges and ("p.y", "p") not in edges
    report = cycles_report(edges, mods)
    assert len(report) == 1 and "p.y, p.z" in report[0], report
