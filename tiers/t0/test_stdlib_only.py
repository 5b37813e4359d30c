"""plugin/ and mock_opensandbox/ must import only the standard library (house rule)."""

from __future__ import annotations

import ast
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
STDLIB = set(sys.stdlib_module_names) | {"__future__"}


def _imports(root: str):
    base = REPO / root
    # own = what an absolute import may name without leaving the tree. mock_opensandbox/ is a package:
    # its name and every module and package under it. plugin/ is a root (launch.py runs with that
    # directory as sys.path[0], it has no __init__.py): its top-level modules and its packages, the
    # directories holding an __init__.py (osb/, methods/), whose modules are walked below like any other
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
    """Every directory of plugin/ holding Python is a package (an __init__.py: no namespace package an
    import could take for a third-party one), none shadows a standard-library name, and the walk above
    reads their modules (a package import names the package: ``from osb import ...``)."""
    plugin = REPO / "plugin"
    dirs = {p.parent for p in plugin.rglob("*.py")} - {plugin}
    assert sorted(d.name for d in dirs) == ["methods", "osb"]
    assert all((d / "__init__.py").exists() for d in dirs)
    assert {d.name for d in dirs} & STDLIB == set()
    walked = {path.relative_to(plugin).as_posix() for path in plugin.rglob("*.py")}
    assert {"osb/transport.py", "methods/pty.py"} <= walked


def test_a_third_party_import_in_a_subpackage_is_found(tmp_path, monkeypatch):
    """The check is not blind below plugin/'s top level."""
    root = tmp_path / "plugin"
    (root / "osb").mkdir(parents=True)
    (root / "provider.py").write_text("import osb\nfrom osb import x\n", encoding="utf-8")
    (root / "osb" / "__init__.py").write_text("from . import y\n", encoding="utf-8")
    (root / "osb" / "y.py").write_text("import json\nimport errors\nimport requests\n", encoding="utf-8")
    (root / "errors.py").write_text("", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert list(_imports("plugin")) == ["plugin/osb/y.py:3: requests"]
