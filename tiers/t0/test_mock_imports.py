"""mock_opensandbox/ has no import circle (issue 13): the imports between its modules - at module
level and inside functions alike (the old execd/files.py <-> execd/server.py circle was one of
function-level imports) - form a DAG. ``if TYPE_CHECKING:`` blocks never run and are not counted."""
from __future__ import annotations

import ast
import os

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "mock_opensandbox")


def _module(path: str) -> str:
    rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
    return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


def _imports(tree: ast.AST) -> list[ast.stmt]:
    out: list[ast.stmt] = []

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.dump(child.test):
                for sub in child.orelse:
                    walk(sub)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                out.append(child)
            walk(child)
    walk(tree)
    return out


def _graph() -> dict[str, set[str]]:
    mods: dict[str, str] = {}
    for d, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py"):
                mods[_module(os.path.join(d, f))] = os.path.join(d, f)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        pkg = m if path.endswith("__init__.py") else m.rsplit(".", 1)[0]
        tree = ast.parse(open(path, encoding="utf-8").read())
        for node in _imports(tree):
            if isinstance(node, ast.ImportFrom):
                base = pkg
                for _ in range(max(0, node.level - 1)):
                    base = base.rsplit(".", 1)[0]
                target = (base + "." + node.module if node.module else base) if node.level else (node.module or "")
                subs = [target + "." + a.name for a in node.names if target + "." + a.name in mods]
                # "from . import sub" needs only the submodule; a name of the package needs the package
                cands = subs + ([target] if len(subs) < len(node.names) else [])
            elif isinstance(node, ast.Import):
                cands = [a.name for a in node.names]
            else:
                continue
            for c in cands:
                if c in mods and c != m:
                    graph[m].add(c)
    return graph


def test_no_import_cycle():
    graph = _graph()
    assert "mock_opensandbox.execd.server" in graph and "mock_opensandbox.gojson" in graph
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(m):] + [m]))
            if m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)
