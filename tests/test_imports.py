"""No import cycles in tb_attention_plugin (issue #14).

Every ``import`` in every module counts, those inside functions too (a function-level import
is still a dependency: it only hides a cycle until the function runs); imports under
``if TYPE_CHECKING:`` do not, as they never run. An import of ``pkg.mod`` is an edge to
``pkg.mod``; ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to
``pkg``.
"""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tb_attention_plugin")
PACKAGE = "tb_attention_plugin"


def _modules() -> dict[str, str]:
    """Module name -> file path, for every .py file of the package."""
    out = {}
    for d, _, files in os.walk(ROOT):
        for f in files:
            if not f.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(d, f), os.path.dirname(ROOT))[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            out[".".join(rel)] = os.path.join(d, f)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST):
    """Import nodes anywhere in the tree, skipping ``if TYPE_CHECKING:`` bodies."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        is_pkg = path.endswith("__init__.py")
        for node in _imports(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                targets = [f"{src}.{a.name}" if f"{src}.{a.name}" in mods else src for a in node.names]
            for t in targets:
                # "import a.b.c" binds a, but runs a.b.c: the deepest module of ours it names
                while t and t not in mods and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != mod:
                    graph[mod].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    out = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_walk_sees_function_level_imports():
    g = import_graph()
    assert f"{PACKAGE}.cli" in g and f"{PACKAGE}.memory" in g and f"{PACKAGE}.memory.block" in g
    # cli.py imports the analysis modules inside its command functions only
    assert f"{PACKAGE}.analyze" in g[f"{PACKAGE}.cli"]
    # relative imports resolve: "from . import patterns as P" and "from ..formats import x"
    assert f"{PACKAGE}.formats" in g[f"{PACKAGE}.memory.flags"]


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("package", [PACKAGE])
def test_no_import_cycles(package):
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)
