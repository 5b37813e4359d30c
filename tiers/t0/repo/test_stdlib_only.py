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
    # directory as sys.path[0], it has no __init__.py): its top-level modules and its top-level directory
    # packages (a directory with an __init__.py: osb/, the client, and methods/, which provider.py loads
    # through importlib); a directory without one would be a namespace package, which an import could
    # take from anywhere on the path, so it is not own. Relative imports never leave their package
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
    """plugin/'s directories of Python, methods/ and osb/, are packages (an __init__.py: no namespace package
    an import could take for a third-party one), do not shadow a standard-library name, and the walk above
    reads their modules."""
    plugin = REPO / "plugin"
    dirs = {p.parent for p in plugin.rglob("*.py")} - {plugin}
    assert sorted(d.name for d in dirs) == ["methods", "osb"]
    assert all(d.parent == plugin and (d / "__init__.py").exists() for d in dirs)
    assert {d.name for d in dirs} & STDLIB == set()
    walked = {path.relative_to(plugin).as_posix() for path in plugin.rglob("*.py")}
    assert {"osb/__init__.py", "osb/transport.py", "methods/pty.py"} <= walked


def test_a_third_party_import_in_a_subpackage_is_found(tmp_path, monkeypatch):
    """The check is not blind below plugin/'s top level: a third-party import inside a package is found,
    relative imports are own, and an import of a top-level directory without an __init__.py (a namespace
    package, which could come from anywhere on the path) is not own: only top-level modules and
    directory packages are."""
    root = tmp_path / "plugin"
    for d in ("methods", "osb", "vendored"):
        (root / d).mkdir(parents=True)
    (root / "provider.py").write_text("import osb\nimport methods.y\nimport vendored.z\n", encoding="utf-8")
    (root / "osb" / "__init__.py").write_text("from . import transport\n", encoding="utf-8")
    (root / "osb" / "transport.py").write_text("from errors import SECRETS\nimport urllib3\n", encoding="utf-8")
    (root / "errors.py").write_text("", encoding="utf-8")
    (root / "methods" / "__init__.py").write_text("", encoding="utf-8")
    (root / "methods" / "y.py").write_text("import json\nfrom osb import Http\nimport requests\n", encoding="utf-8")
    (root / "vendored" / "z.py").write_text("", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert list(_imports("plugin")) == [
        "plugin/methods/y.py:3: requests",
        "plugin/osb/transport.py:2: urllib3",
        "plugin/provider.py:3: vendored.z",
    ]
