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
    # own = what an absolute import may name without leaving the tree: the root package and its
    # modules; in a flat root (plugin/: launch.py runs with that directory as sys.path[0], it has no
    # __init__.py) only the files directly in it - a package directory there would read as a
    # third-party import (`import osb` must be plugin/osb.py)
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


def test_plugin_is_flat():
    """plugin/ is one directory of modules (the OpenSandbox client is osb.py + osb_*.py): no package
    directory whose name an import could take for a third-party one."""
    assert sorted(p.parent.name for p in (REPO / "plugin").rglob("*.py") if p.parent != REPO / "plugin") == []
