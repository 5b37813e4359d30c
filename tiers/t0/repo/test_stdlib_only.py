"""plugin/ and mock_opensandbox/ must import only the standard library (house rule)."""

from __future__ import annotations

import ast
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
STDLIB = set(sys.stdlib_module_names) | {"__future__"}


def _imports(root: str):
    base = REPO / root
    # own = what an absolute import may name without leaving the tree. mock_opensandbox/ is a package:
    # its name and every module and package under it. plugin/ is a flat root (launch.py runs with that
    # directory as sys.path[0], it has no __init__.py): what sys.path[0] resolves there, its top-level
    # modules and its top-level directory packages (a directory with an __init__.py). A directory without
    # one is a namespace package, which an import could take from anywhere on the path: not own. A module
    # of a package is named through it (`osb.transport`), never by its bare name. Relative imports
    # (level > 0) never leave their package and are not checked
    if (base / "__init__.py").exists():
        own = {p.stem for p in base.rglob("*.py") if p.stem != "__init__"} | {root}
    else:
        own = {p.stem for p in base.glob("*.py")} | {p.parent.name for p in base.glob("*/__init__.py")}
    for path in sorted(base.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in STDLIB and top not in own:
                    yield f"{path.relative_to(REPO)}:{node.lineno}: {name}"


@pytest.mark.parametrize("root", ["plugin", "mock_opensandbox"])
def test_only_standard_library_imports(root):
    assert list(_imports(root)) == []


def test_plugin_subpackages_are_walked_and_real():
    """plugin/'s directories of Python, methods/ and osb/, are top-level packages (an __init__.py: no namespace
    package an import could take for a third-party one), do not shadow a standard-library name, and the walk
    above reads their modules."""
    plugin = REPO / "plugin"
    dirs = {p.parent for p in plugin.rglob("*.py")} - {plugin}
    assert sorted(d.name for d in dirs) == ["methods", "osb"]
    assert all(d.parent == plugin and (d / "__init__.py").exists() for d in dirs)
    assert {d.name for d in dirs} & STDLIB == set()
    walked = {path.relative_to(plugin).as_posix() for path in plugin.rglob("*.py")}
    assert {"osb/__init__.py", "osb/transport.py", "methods/pty.py"} <= walked


def test_a_third_party_import_in_a_subpackage_is_found(tmp_path, monkeypatch):
    """The check can fail, below plugin/'s top level too: a third-party import inside a package is found; an
    import of a top-level directory package (an __init__.py) is own, relative imports are own, but an import of
    a top-level directory without an __init__.py (a namespace package, which could come from anywhere on the
    path) is not, nor a package's module by its bare name (only the package is on sys.path)."""
    root = tmp_path / "plugin"
    for d in ("methods", "osb", "vendored"):
        (root / d).mkdir(parents=True)
    files = {
        "provider.py": "import osb\nimport methods.y\nimport vendored.z\n",
        "errors.py": "",
        "osb/__init__.py": "from . import transport\nfrom .ws import OP_TEXT\n",
        "osb/transport.py": "from errors import SECRETS\nimport urllib3\n",
        "osb/ws.py": "import osb.transport\nfrom transport import NetError\n",
        "methods/__init__.py": "",
        "methods/y.py": "import json\nfrom osb import Http\nfrom osb.ws import OP_TEXT\nimport requests\n",
        "vendored/z.py": "",
    }
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert list(_imports("plugin")) == [
        "plugin/methods/y.py:4: requests",
        "plugin/osb/transport.py:2: urllib3",
        "plugin/osb/ws.py:2: transport",
        "plugin/provider.py:3: vendored.z",
    ]
