"""mock_opensandbox/ and plugin/ have no import circle: the imports between their
modules - at module level and inside functions alike (the old execd/files_routes.py <-> execd/server.py
circle was one of function-level imports) - form a DAG. Imports under ``if TYPE_CHECKING:`` count
too (a circle of type names is still a circle for a reader). plugin/ is a root, not a package (launch.py runs
with that directory as sys.path[0]): its modules and packages are named from there (``epp``, ``osb``,
``osb.transport``, ``methods.pty``). Their size (800 lines at most, a smell detector) is test_module_size.py's,
with every other module's."""

from __future__ import annotations

import ast
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROOT = os.path.join(REPO, "mock_opensandbox")
PLUGIN = os.path.join(REPO, "plugin")


def _module(path: str, root: str = ROOT) -> str:
    # a root without an __init__.py (plugin/) is sys.path[0], not a package: names start below it
    base = os.path.dirname(root) if os.path.exists(os.path.join(root, "__init__.py")) else root
    rel = os.path.relpath(path, base)[:-3].replace(os.sep, ".")
    return rel[: -len(".__init__")] if rel.endswith(".__init__") else rel


def _imports(tree: ast.AST) -> list[ast.stmt]:
    out: list[ast.stmt] = []

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                out.append(child)
            walk(child)

    walk(tree)
    return out


def _graph(root: str = ROOT) -> dict[str, set[str]]:
    mods: dict[str, str] = {}
    for d, _, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                mods[_module(os.path.join(d, f), root)] = os.path.join(d, f)
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


@pytest.mark.parametrize(
    "root,known",
    [
        (ROOT, ("mock_opensandbox.execd.server", "mock_opensandbox.wire.gojson")),
        (PLUGIN, ("epp", "osb", "osb.transport", "methods.pty")),
    ],
    ids=["mock_opensandbox", "plugin"],
)
def test_no_import_cycle(root, known):
    graph = _graph(root)
    assert all(k in graph for k in known)
    assert root != PLUGIN or (graph["osb.ws"] == {"osb.transport"} and "osb" in graph["methods.pty"])
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(m) :] + [m]))
            if m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)


def _plugin_layer_breaches(root: str = PLUGIN) -> list[tuple[str, str]]:
    """(importer, imported) pairs that break the plugin's layers: the client (the package osb/: osb and osb.*)
    imports only itself and the errors leaf; the rest of the plugin imports only the client's public surface
    (``from osb import ...``, osb/__init__.py), never one of its modules (``osb.transport``); the methods
    (methods/) are imported by no module outside the package (provider.py imports them by name, on a method's
    first call), and by each other only within it."""
    graph = _graph(root)
    client = {m for m in graph if m == "osb" or m.startswith("osb.")}
    methods = {m for m in graph if m.startswith("methods.")}
    out = [(m, d) for m in sorted(client) for d in sorted(graph[m] - client - {"errors"})]
    out += [(m, d) for m in sorted(set(graph) - client) for d in sorted(graph[m] & client - {"osb"})]
    out += [(m, d) for m in sorted(set(graph) - methods) for d in sorted(graph[m] & methods)]
    return out


def test_plugin_layers():
    graph = _graph(PLUGIN)
    client = {m for m in graph if m == "osb" or m.startswith("osb.")}
    assert {"osb", "osb.transport", "osb.retries", "osb.lifecycle", "osb.execd", "osb.ws"} <= client
    assert {"methods." + n for n in ("sandbox", "exec", "process", "files", "ports", "pty")} <= set(graph)
    assert _plugin_layer_breaches() == []


def test_plugin_layer_breaches_are_found(tmp_path):
    """The check can fail: a plugin tree whose client reaches outside itself and whose methods name a
    module of the client or a module of methods/."""
    root = tmp_path / "plugin"
    (root / "methods").mkdir(parents=True)
    (root / "osb").mkdir()
    files = {
        "errors.py": "",
        "config.py": "",
        "context.py": "import methods.y\n",
        "osb/__init__.py": "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from .transport import Http\n",
        "osb/transport.py": "from errors import SECRETS\n",
        "osb/ws.py": "from .transport import NetError\nfrom config import Config\n",
        "methods/__init__.py": "",
        "methods/x.py": "from osb import Http\nimport osb.transport\n",
        "methods/y.py": "from osb import ws\nfrom osb.transport import Http\nfrom . import x\n",
    }
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")
    assert _plugin_layer_breaches(str(root)) == [
        ("osb.ws", "config"),
        ("methods.x", "osb.transport"),
        ("methods.y", "osb.transport"),
        ("methods.y", "osb.ws"),
        ("context", "methods.y"),
    ]


# the execd model modules (no HTTP by their own docs, docs/ARCHITECTURE.md): no import of the HTTP layer,
# and none of its text (the Range parsers and Content-Disposition live in execd/files_routes.py)
EXECD_MODELS = (
    "execd.files",
    "execd.globmatch",
    "execd.pty",
    "execd.commands",
    "execd.sessions",
    "execd.code",
    "execd.metrics",
)
HTTP_MODULES = {
    "mock_opensandbox.wire.http1",
    "mock_opensandbox.execd.gin",
    "mock_opensandbox.execd.files_routes",
    "mock_opensandbox.execd.server",
    "mock_opensandbox.execd.pty_routes",
    "mock_opensandbox.wire.sse",
}
HTTP_WORDS = re.compile(r"Content-(Disposition|Range|Length|Type)|\bbytes=|\bRange\b|\bstatus_line\b")


@pytest.mark.parametrize("mod", EXECD_MODELS)
def test_execd_model_modules_hold_no_http(mod):
    graph = _graph(ROOT)
    name = "mock_opensandbox." + mod
    assert graph[name] & HTTP_MODULES == set()
    text = open(os.path.join(ROOT, *mod.split(".")) + ".py", encoding="utf-8").read()
    assert HTTP_WORDS.findall(text) == []


def _trees(root: str = ROOT) -> dict[str, ast.AST]:
    return {
        _module(os.path.join(d, f), root): ast.parse(open(os.path.join(d, f), encoding="utf-8").read())
        for d, _, files in os.walk(root)
        for f in files
        if f.endswith(".py")
    }


def test_one_execd_process_class_and_one_hop_by_hop_set():
    """One ExecdProcess (runtime/execdproc.py; the stand-alone execd's too) and one hop-by-hop set
    (relay.HOP_BY_HOP; each proxy passes its policy made of it)."""
    trees = _trees()
    classes = sorted(
        m for m, t in trees.items() for n in ast.walk(t) if isinstance(n, ast.ClassDef) and "ExecdProcess" in n.name
    )
    assert classes == ["mock_opensandbox.runtime.execdproc"]
    hop_sets = sorted(
        m
        for m, t in trees.items()
        for n in ast.walk(t)
        if isinstance(n, ast.Constant) and n.value == "proxy-authenticate"
    )
    assert hop_sets == ["mock_opensandbox.wire.relay"]


# The mock's layers, bottom first: a package imports only packages before it in this order. The top level
# (the facade server.py, __main__) may import any. The workbench is plugged into the product by whoever builds a
# server (the apps' journal/faults: wire/listener.py RequestJournal, FaultRules) and is imported by no product layer.
LAYERS = ("wire", "runtime", "images", "execd", "lifecycle", "docker", "workbench")


def _layer(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def test_layers_import_only_downward():
    graph = _graph(ROOT)
    assert {_layer(m) for m in graph} >= set(LAYERS)
    up = sorted(
        (m, d)
        for m, deps in graph.items()
        for d in deps
        if _layer(m) and _layer(d) and LAYERS.index(_layer(d)) > LAYERS.index(_layer(m))
    )
    assert up == []
    product = ("wire", "runtime", "images", "execd", "lifecycle", "docker")
    assert (
        sorted((m, d) for m, deps in graph.items() for d in deps if _layer(m) in product and _layer(d) == "workbench")
        == []
    )
