"""No import cycle inside storage_core (checked on the source, not by importing it).

Every ``import`` and ``from ... import`` of a storage_core module counts: at module level,
inside functions and under ``if TYPE_CHECKING:`` alike. Each is an arrow a reader follows, and
a cycle that only type checking sees is still two modules that cannot be understood apart
(``server/`` had one of eight files, all through ``TYPE_CHECKING`` imports of the broker).
Relative imports are resolved against their package; ``from pkg import name`` is an arrow to
``pkg.name`` when that is a module, else to ``pkg``. Modules loaded by name at run time
(``importlib``, as the handler registry does) are not arrows here.

``KNOWN_CYCLES`` lists the cycles that were there when this check came and that are being
taken apart elsewhere; it may only shrink: a cycle outside it fails, and so does an entry
whose cycle is gone (remove it then).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "storage_core"

KNOWN_CYCLES: tuple[frozenset[str], ...] = ()


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(name: str, path: Path, modules: Iterable[str]) -> set[str]:
    """The modules of ``modules`` that ``name`` (at ``path``) imports, anywhere in it."""
    known = set(modules)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                if f"{source}.{alias.name}" in known:
                    found.add(f"{source}.{alias.name}")
                elif source in known:
                    found.add(source)
    found.discard(name)
    return found


def import_graph(root: Path, package: Path) -> dict[str, set[str]]:
    paths = {module_name(path, root): path for path in package.rglob("*.py")}
    return {name: imported_modules(name, path, paths) for name, path in paths.items()}


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One cycle (a path that comes back to its first module) per strongly connected group
    of modules (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, pending = work[-1]
            if pending:
                nxt = pending.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(group)
    return [_a_cycle_in(group, graph) for group in groups]


def _a_cycle_in(group: set[str], graph: Mapping[str, set[str]]) -> list[str]:
    """The shortest way from the group's first module back to itself, within the group."""
    first = min(group)
    paths = {first: [first]}
    frontier = [first]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & group):
                if nxt == first:
                    return [*paths[node], first]
                if nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle through {first} in {sorted(group)}")


def test_no_import_cycle_but_the_known_ones() -> None:
    graph = import_graph(ROOT, PACKAGE)
    assert len(graph) > 100
    unknown = [
        " -> ".join(cycle)
        for cycle in cycles(graph)
        if not any(set(cycle) <= known for known in KNOWN_CYCLES)
    ]
    assert unknown == [], "import cycles in storage_core (break them, do not list them)"


def test_every_known_cycle_is_still_there() -> None:
    found = [set(cycle) for cycle in cycles(import_graph(ROOT, PACKAGE))]
    gone = [sorted(known) for known in KNOWN_CYCLES if not any(c & known for c in found)]
    assert gone == [], "these cycles are gone: remove them from KNOWN_CYCLES"


def test_the_check_finds_a_cycle_through_any_kind_of_import(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .. import c\n"
    )
    (package / "c.py").write_text("def f():\n    import pkg.a\n")
    (package / "d.py").write_text("from pkg import a\n")
    graph = import_graph(tmp_path, package)
    assert graph["pkg.a"] == {"pkg.sub.b"}
    assert graph["pkg.sub.b"] == {"pkg.c"}
    assert cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]]
    (package / "c.py").write_text("import os\n")
    assert cycles(import_graph(tmp_path, package)) == []
