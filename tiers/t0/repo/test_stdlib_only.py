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
    # directory as sys.path[0], it has no __init__.py): only its top-level modules. Its one package,
    # methods/, is loaded by provider.py through importlib (a method's first call), never by an import
    # statement, and its modules are walked below like any other
    if (base / "__init__.py").exists():
        own = {p.stem for p in base.rglob("*.py") if p.stem != "__init__"} | {root}
    else:
        own = {p.stem for p in base.glob("*.py")}
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
    """plugin/'s one directory of Python, methods/, is a package (an __init__.py: no namespace package an
    import could take for a third-party one), does not shadow a standard-library name, and the walk above
    reads its modules."""
    plugin = REPO / "plugin"
    dirs = {p.parent for p in plugin.rglob("*.py")} - {plugin}
    assert sorted(d.name for d in dirs) == ["methods"]
    assert all((d / "__init__.py").exists() for d in dirs)
    assert {d.name for d in dirs} & STDLIB == set()
    walked = {path.relative_to(plugin).as_posix() for path in plugin.rglob("*.py")}
    assert {"osb_transport.py", "methods/pty.py"} <= walked


def test_a_third_party_import_in_a_subpackage_is_found(tmp_path, monkeypatch):
    """The check is not blind below plugin/'s top level, and an import statement naming a directory
    package of the flat root is not an own module: only top-level modules are."""
    root = tmp_path / "plugin"
    (root / "methods").mkdir(parents=True)
    (root / "provider.py").write_text("import osb\nimport methods.y\n", encoding="utf-8")
    (root / "osb.py").write_text("import osb_transport\n", encoding="utf-8")
    (root / "osb_transport.py").write_text("", encoding="utf-8")
    (root / "methods" / "__init__.py").write_text("", encoding="utf-8")
    (root / "methods" / "y.py").write_text("import json\nimport osb\nimport requests\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert list(_imports("plugin")) == ["plugin/methods/y.py:3: requests", "plugin/provider.py:2: methods.y"]
