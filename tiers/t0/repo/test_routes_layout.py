"""One file set per API, one naming rule, in execd/ and lifecycle/ (docs/ARCHITECTURE.md, "execd/", "lifecycle/"):

* every ``<package>/<api>_routes.py`` (HTTP, no state) has its state module (``<api>.py``, or the one ``Package.state`` names;
  no HTTP: it imports neither wire/http1.py, wire/sse.py, execd/gin.py nor any routes module or the server), or
  is listed in the package's ROUTES_ONLY with the reason it keeps no state;
* the one route class of ``<api>_routes.py`` is ``<Api>Routes`` (``sessions_routes.py``: ``SessionsRoutes``), and
  every route of the server module is ``<attribute>.<method>`` with that attribute an ``<Api>Routes`` imported
  from its ``<api>_routes.py`` (execd/server.py: its ROUTES table; lifecycle/app.py: the ``router.add`` calls of
  ``LifecycleApp.__init__``, ``self.<attribute>.<method>``);
* the server module is wiring only: no function of it takes a ``Request`` but the dispatch (``ExecdServer.handle``,
  ``LifecycleApp.handle``, ``LifecycleHandler.dispatch`` and the ``_Front.handle`` it calls), the API-key check
  (``LifecycleApp._authenticate``) and the wrapper ``_endpoint`` makes of a ROUTES target (ExecdError -> Gin's
  JSON error);
* in lifecycle/, no other module outside a ``*_routes.py`` has a function or method that takes a ``Request`` (a
  request handler), but the ones ``Package.request_modules`` lists with the reason (how every route reads a
  request, the reverse proxy).

``test_layout_breaches_are_found`` and ``test_lifecycle_layout_breaches_are_found`` show each rule failing on a
tree that breaks it."""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass, field

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXECD = os.path.join(REPO, "mock_opensandbox", "execd")
LIFECYCLE = os.path.join(REPO, "mock_opensandbox", "lifecycle")

# what a state module must not import: the HTTP layer (and any routes module or the server, checked by name)
HTTP = {"mock_opensandbox.wire.http1", "mock_opensandbox.wire.sse", "mock_opensandbox.execd.gin"}
_BEHIND_SERVICES = "state behind services.%s, served by docker/"


@dataclass(frozen=True)
class Package:
    name: str  # execd, lifecycle
    server: str  # the wiring module: execd/server.py, lifecycle/app.py
    server_class: str  # the class whose __init__ makes the <Api>Routes attributes
    routes_only: dict[str, str]  # routes modules without a state module, each with why
    request_functions: frozenset[str]  # the functions of the server module that may take a Request
    state: dict[str, str] = field(default_factory=dict)  # api -> its state module when not <api>.py
    # the modules besides the server and the *_routes.py that may take a Request, each with why; None: not checked
    request_modules: dict[str, str] | None = None


EXECD_PACKAGE = Package(
    "execd",
    "server.py",
    "ExecdServer",
    {
        "ping": "a health check: 200, nothing kept",
        "proxy": "a reverse proxy to a port inside the sandbox: each request relayed on its own, nothing kept",
    },
    frozenset({"ExecdServer.handle", "ExecdServer._endpoint.handler"}),
)
LIFECYCLE_PACKAGE = Package(
    "lifecycle",
    "app.py",
    "LifecycleApp",
    {
        "snapshots": _BEHIND_SERVICES % "SnapshotService",
        "diagnostics": _BEHIND_SERVICES % "DiagnosticsText",
        "health": "/health and /version: fixed answers, nothing kept",
        "templates": "the body or query checked, then 501 (a Kubernetes-only API): nothing kept",
        "metrics": "an SDK event accepted and recorded nowhere",
    },
    frozenset({"LifecycleApp.handle", "LifecycleApp._authenticate", "LifecycleHandler.dispatch", "_Front.handle"}),
    # the sandbox table keeps its name: lifecycle/model.py is what the other layers (docker/, the workbench, the
    # facade) import the Sandbox and SandboxStore from
    {"sandboxes": "model"},
    {
        "validation": "how every route reads its request (body, q_last, q_int, q_page, list_query, path_port): "
        "helpers the routes call, no route of its own",
        "proxy": "the server's reverse proxy: forward() relays a request SandboxesRoutes.proxy hands it, and the "
        "per-sandbox port listener (PortForwardHandler) dispatches its own requests",
    },
)
ROUTES_ONLY = EXECD_PACKAGE.routes_only
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


def _routes_table(tree: ast.Module, pkg: Package) -> list[str]:
    """The route targets of the server module: execd's ROUTES strings; lifecycle's ``r.add(...)`` handlers."""
    if pkg.name == "lifecycle":
        return _router_targets(tree, pkg.server_class)
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id == "ROUTES" and node.value is not None:
            return [ast.literal_eval(t)[2] for t in node.value.elts]
    raise AssertionError("server.py has no ROUTES table")


def _init(tree: ast.Module, cls_name: str) -> list[ast.FunctionDef]:
    return [
        fn
        for cls in tree.body
        if isinstance(cls, ast.ClassDef) and cls.name == cls_name
        for fn in cls.body
        if isinstance(fn, ast.FunctionDef) and fn.name == "__init__"
    ]


def _router_targets(tree: ast.Module, cls_name: str) -> list[str]:
    """The handlers of ``<x>.add(method, path, handler)`` in ``cls_name.__init__``, ``self.`` dropped (``a.b``)."""
    out: list[str] = []
    for fn in _init(tree, cls_name):
        for node in ast.walk(fn):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add":
                if len(node.args) == 3:
                    text = ast.unparse(node.args[2])
                    out.append(text[len("self.") :] if text.startswith("self.") else text)
    if not out:
        raise AssertionError(f"{cls_name}.__init__ adds no route")
    return out


def _server_attributes(tree: ast.Module, cls_name: str = "ExecdServer") -> dict[str, str]:
    """<cls_name>.__init__'s ``self.<attribute> = <Class>(...)``: attribute -> class name."""
    out: dict[str, str] = {}
    for cls in tree.body:
        if not (isinstance(cls, ast.ClassDef) and cls.name == cls_name):
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


def layout_breaches(root: str = EXECD, pkg: Package = EXECD_PACKAGE) -> list[str]:
    files = sorted(f for f in os.listdir(root) if f.endswith(".py"))
    server_name = pkg.server
    out: list[str] = []
    apis = [f[: -len("_routes.py")] for f in files if f.endswith("_routes.py")]
    route_classes: dict[str, str] = {}  # class name -> its module
    for api in apis:
        name = api + "_routes.py"
        state = pkg.state.get(api, api) + ".py"
        if state not in files and api not in pkg.routes_only:
            out.append(f"{name}: no state module {state} and not in ROUTES_ONLY")
        if state in files:
            server_module = f"mock_opensandbox.{pkg.name}.{server_name[:-3]}"
            bad = sorted(
                m
                for m in _imported(_parse(root, state))
                if m in HTTP or m.endswith("_routes") or m == server_module or m.startswith(server_module + ".")
            )
            if bad:
                out.append(f"{state}: a state module imports the HTTP side: {', '.join(bad)}")
        classes = [n.name for n in _parse(root, name).body if isinstance(n, ast.ClassDef) and n.name[0] != "_"]
        want = _camel(api) + "Routes"
        if want not in classes:
            out.append(f"{name}: no route class {want}")
        out += [f"{name}: {c} is not {want}" for c in classes if c != want and c.endswith(("Routes", "API", "Api"))]
        route_classes[want] = f"mock_opensandbox.{pkg.name}.{api}_routes"
    for f in files:
        if not f.endswith("_routes.py"):
            tree = _parse(root, f)
            out += [
                f"{f}: route class {n.name} outside a *_routes.py"
                for n in tree.body
                if isinstance(n, ast.ClassDef) and n.name.endswith(("Routes", "API"))
            ]
    server = _parse(root, server_name)
    attrs = _server_attributes(server, pkg.server_class)
    imported = _imported(server)
    for target in _routes_table(server, pkg):
        group, _, method = target.partition(".")
        cls = attrs.get(group, "")
        if not method or "." in method:
            out.append(f"{server_name}: ROUTES target {target!r} is not <attribute>.<method>")
        elif cls not in route_classes or route_classes[cls] + "." + cls not in imported:
            out.append(f"{server_name}: ROUTES target {target!r}: self.{group} is no <Api>Routes of a *_routes.py")
    out += [
        f"{server_name}: {fn} takes a Request (a handler: it belongs in a *_routes.py)"
        for fn in _request_functions(server)
        if fn not in pkg.request_functions
    ]
    if pkg.request_modules is not None:
        for f in files:
            if f.endswith("_routes.py") or f == server_name or f[:-3] in pkg.request_modules:
                continue
            out += [
                f"{f}: {fn} takes a Request (a handler: it belongs in a *_routes.py)"
                for fn in _request_functions(_parse(root, f))
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


def test_one_file_set_per_lifecycle_api():
    assert layout_breaches(LIFECYCLE, LIFECYCLE_PACKAGE) == []
    routes = {f[: -len("_routes.py")] for f in os.listdir(LIFECYCLE) if f.endswith("_routes.py")}
    assert {"sandboxes", "pools", "snapshots", "diagnostics"} <= routes
    assert set(LIFECYCLE_PACKAGE.routes_only) <= routes, "a ROUTES_ONLY entry names no module"
    assert "routes.py" not in os.listdir(LIFECYCLE), "the app is lifecycle/app.py"
    modules = {f[: -len(".py")] for f in os.listdir(LIFECYCLE) if f.endswith(".py")}
    assert set(LIFECYCLE_PACKAGE.request_modules or {}) <= modules, "a request_modules entry names no module"


def test_lifecycle_layout_breaches_are_found(tmp_path):
    """The lifecycle rules fail too: a routes module without its state module, the sandboxes' state module
    (model.py) importing a routes module, a route class named otherwise, a route whose handler is the app's own
    method, a handler left in app.py, and handlers in a module that is no *_routes.py (a method and a function
    of widgets.py; validation.py's request readers are allowed)."""
    files = {
        "model.py": "from mock_opensandbox.lifecycle.sandboxes_routes import SandboxesRoutes\n",
        "validation.py": "def body(req: Request, model: type) -> dict: ...\n",
        "widgets.py": (
            "class Widgets:\n"
            "    def get(self, req: Request) -> None: ...\n"
            "    def count(self) -> int: ...\n"
            "def answer(req: 'Request', status: int) -> None: ...\n"
            "def journal(j: RequestJournal) -> None: ...\n"
        ),
        "sandboxes_routes.py": "class SandboxesRoutes:\n    pass\n",
        "pools_routes.py": "class PoolRoutes:\n    pass\n",
        "health_routes.py": "class HealthRoutes:\n    pass\n",
        "app.py": (
            "from mock_opensandbox.lifecycle.health_routes import HealthRoutes\n"
            "from mock_opensandbox.lifecycle.sandboxes_routes import SandboxesRoutes\n"
            "class LifecycleApp:\n"
            "    def __init__(self):\n"
            "        self.sandboxes = SandboxesRoutes()\n"
            "        self.health = HealthRoutes()\n"
            "        r = self.router\n"
            "        r.add('GET', '/sandboxes', self.sandboxes.list)\n"
            "        r.add('GET', '/health', self.health.health)\n"
            "        r.add('GET', '/version', self.version)\n"
            "    def handle(self, req: Request) -> None: ...\n"
            "    def version(self, req: Request) -> None: ...\n"
        ),
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert layout_breaches(str(tmp_path), LIFECYCLE_PACKAGE) == [
        "pools_routes.py: no state module pools.py and not in ROUTES_ONLY",
        "pools_routes.py: no route class PoolsRoutes",
        "pools_routes.py: PoolRoutes is not PoolsRoutes",
        "model.py: a state module imports the HTTP side: mock_opensandbox.lifecycle.sandboxes_routes",
        "app.py: ROUTES target 'version' is not <attribute>.<method>",
        "app.py: LifecycleApp.version takes a Request (a handler: it belongs in a *_routes.py)",
        "widgets.py: Widgets.get takes a Request (a handler: it belongs in a *_routes.py)",
        "widgets.py: answer takes a Request (a handler: it belongs in a *_routes.py)",
    ]
