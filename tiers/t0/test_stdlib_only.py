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
    # own = what an absolute import may name without leaving the tree: the files, the root package,
    # and, in a flat root (plugin/: launch.py runs with that directory as sys.path[0], it has no
    # __init__.py), each package directly in it (plugin/osb/: `from osb import OpenSandbox`)
    own = {p.stem for p in base.rglob("*.py") if p.stem != "__init__"} | {root}
    if not (base / "__init__.py").exists():
        own |= {p.parent.name for p in base.glob("*/__init__.py")}
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


def test_plugin_packages_import_their_own_modules_relatively():
    """Inside plugin/osb/ a sibling is `from .transport import x`: an absolute `osb.` import there
    would tie the package to the name it is installed under."""
    bad = []
    for init in (REPO / "plugin").glob("*/__init__.py"):
        pkg = init.parent.name
        for path in sorted(init.parent.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
                bad += [f"{path.relative_to(REPO)}:{node.lineno}: {n}" for n in names if n.split(".")[0] == pkg]
    assert bad == []
