"""One file set per execd API, one naming rule (docs/ARCHITECTURE.md, "execd/"):

* every ``mock_opensandbox/execd/<api>_routes.py`` (HTTP, no state) has its state module ``<api>.py`` (no HTTP:
  it imports neither wire/http1.py, wire/sse.py, execd/gin.py nor any routes module or the server), or is
  listed in ROUTES_ONLY with the reason it keeps no state;
* the one route class of ``<api>_routes.py`` is ``<Api>Routes`` (``sessions_routes.py``: ``SessionsRoutes``), and
  every ROUTES target of execd/server.py is ``<attribute>.<method>`` with that attribute an ``<Api>Routes``
  imported from its ``<api>_routes.py``;
* execd/server.py is wiring only: no function of it takes a ``Request`` but the dispatch (``ExecdServer.handle``)
  and the wrapper ``_endpoint`` makes of a ROUTES target (ExecdError -> Gin's JSON error).

``test_layout_breaches_are_found`` shows each rule failing on a tree that breaks it."""

from __future__ import annotations

import ast
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXECD = os.path.join(REPO, "mock_opensandbox", "execd")

# routes modules without a state module, each with why
ROUTES_ONLY = {
    "ping": "a health check: 200, nothing kept",
    "proxy": "a reverse proxy to a port inside the sandbox: each request relayed on its own, nothing kept",
}
# what a state module must not import: the HTTP layer (and any routes module or the server, checked by name)
HTTP = {"mock_opensandbox.wire.http1", "mock_opensandbox.wire.sse", "mock_opensandbox.execd.gin"}
# the functions of server.py that take a Request: the dispatch and _endpoint's wrapper
SERVER_REQUEST_FUNCTIONS = {"ExecdServer.handle", "ExecdServer._endpoint.handler"}
REQUEST = re.compile(r"\bRequest\b")  # the annotation names wire's Request (not RequestJournal)


def _camel(api: str) -> str:
    return "".join(w.capitalize() for w in api.split("_"))


def _parse(root: str, name: str) -> ast.Module:
    with open(os.path.join(root, name), encoding="utf-8") as fh:
        return ast.parse(fh.read())


def _imported(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(node.module + "." + a.name for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def _request_functions(tree: ast.Module) -> list[str]:
    """Qualified names of the functions whose parameters include one annotated ``Request``."""
    found: list[str] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = child.args.posonlyargs + child.args.args + child.args.kwonlyargs
                if any(a.annotation is not None and REQUEST.search(ast.unparse(a.annotation)) for a in args):
                    found.append(prefix + child.name)
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def _routes_table(tree: ast.Module) -> list[str]:
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id == "ROUTES" and node.value is not None:
            return [ast.literal_eval(t)[2] for t in node.value.elts]
    raise AssertionError("server.py has no ROUTES table")


def _server_attributes(tree: ast.Module) -> dict[str, str]:
    """ExecdServer.__init__'s ``self.<attribute> = <Class>(...)``: attribute -> class name."""
    out: dict[str, str] = {}
    for cls in tree.body:
        if not (isinstance(cls, ast.ClassDef) and cls.name == "ExecdServer"):
            continue
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef) and fn.name == "__init__":
                for node in ast.walk(fn):
                    if (
                        isinstance(node, ast.Assign)
                        and isinstance(node.value, ast.Call)
                        and isinstance(node.value.func, ast.Name)
                    ):
                        for t in node.targets:
                            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                                out[t.attr] = node.value.func.id
    return out


def layout_breaches(root: str = EXECD) -> list[str]:
    files = sorted(f for f in os.listdir(root) if f.endswith(".py"))
    out: list[str] = []
    apis = [f[: -len("_routes.py")] for f in files if f.endswith("_routes.py")]
    route_classes: dict[str, str] = {}  # class name -> its module
    for api in apis:
        name = api + "_routes.py"
        if api + ".py" not in files and api not in ROUTES_ONLY:
            out.append(f"{name}: no state module {api}.py and not in ROUTES_ONLY")
        if api + ".py" in files:
            bad = sorted(
                m
                for m in _imported(_parse(root, api + ".py"))
                if m in HTTP or m.endswith("_routes") or m == "mock_opensandbox.execd.server"
            )
            if bad:
                out.append(f"{api}.py: a state module imports the HTTP side: {', '.join(bad)}")
        classes = [n.name for n in _parse(root, name).body if isinstance(n, ast.ClassDef) and n.name[0] != "_"]
        want = _camel(api) + "Routes"
        if want not in classes:
            out.append(f"{name}: no route class {want}")
        out += [f"{name}: {c} is not {want}" for c in classes if c != want and c.endswith(("Routes", "API", "Api"))]
        route_classes[want] = "mock_opensandbox.execd." + api + "_routes"
    for f in files:
        if not f.endswith("_routes.py"):
            tree = _parse(root, f)
            out += [
                f"{f}: route class {n.name} outside a *_routes.py"
                for n in tree.body
                if isinstance(n, ast.ClassDef) and n.name.endswith(("Routes", "API"))
            ]
    server = _parse(root, "server.py")
    attrs = _server_attributes(server)
    imported = _imported(server)
    for target in _routes_table(server):
        group, _, method = target.partition(".")
        cls = attrs.get(group, "")
        if not method or "." in method:
            out.append(f"server.py: ROUTES target {target!r} is not <attribute>.<method>")
        elif cls not in route_classes or route_classes[cls] + "." + cls not in imported:
            out.append(f"server.py: ROUTES target {target!r}: self.{group} is no <Api>Routes of a *_routes.py")
    out += [
        f"server.py: {fn} takes a Request (a handler: it belongs in a *_routes.py)"
        for fn in _request_functions(server)
        if fn not in SERVER_REQUEST_FUNCTIONS
    ]
    return out


def test_one_file_set_per_execd_api():
    assert layout_breaches() == []
    routes = sorted(f for f in os.listdir(EXECD) if f.endswith("_routes.py"))
    assert {"commands_routes.py", "files_routes.py", "pty_routes.py", "sessions_routes.py", "code_routes.py"} <= set(
        routes
    )
    assert set(ROUTES_ONLY) <= {f[: -len("_routes.py")] for f in routes}, "a ROUTES_ONLY entry names no module"


def test_layout_breaches_are_found(tmp_path):
    """Each rule can fail: a routes module without a state module, a state module importing gin, a route class
    named otherwise, a ROUTES target naming a server method, and a handler left in server.py."""
    files = {
        "gin.py": "",
        "widgets.py": "from mock_opensandbox.execd import gin\n",
        "widgets_routes.py": "class WidgetsAPI:\n    pass\n",
        "orphan_routes.py": "class OrphanRoutes:\n    pass\n",
        "helpers.py": "class HelperRoutes:\n    pass\n",
        "server.py": (
            "from mock_opensandbox.execd.orphan_routes import OrphanRoutes\n"
            "from mock_opensandbox.execd.widgets_routes import WidgetsAPI\n"
            "ROUTES = (('GET', '/a', 'orphan.get'), ('GET', '/b', 'widgets.get'), ('GET', '/ping', '_ping'))\n"
            "class ExecdServer:\n"
            "    def __init__(self):\n"
            "        self.orphan = OrphanRoutes()\n"
            "        self.widgets = WidgetsAPI()\n"
            "    def handle(self, req: Request) -> None: ...\n"
            "    def _ping(self, req: Request) -> None: ...\n"
        ),
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert layout_breaches(str(tmp_path)) == [
        "orphan_routes.py: no state module orphan.py and not in ROUTES_ONLY",
        "widgets.py: a state module imports the HTTP side: mock_opensandbox.execd.gin",
        "widgets_routes.py: no route class WidgetsRoutes",
        "widgets_routes.py: WidgetsAPI is not WidgetsRoutes",
        "helpers.py: route class HelperRoutes outside a *_routes.py",
        "server.py: ROUTES target 'widgets.get': self.widgets is no <Api>Routes of a *_routes.py",
        "server.py: ROUTES target '_ping' is not <attribute>.<method>",
        "server.py: ExecdServer._ping takes a Request (a handler: it belongs in a *_routes.py)",
    ]
