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
    # own = the files themselves (and the root package): an import of a sub-package by its bare name
    # (`from osb import x` with plugin/osb/) only works with that directory on sys.path, and reads as a
    # third-party import to anyone checking the rule
    own = {p.stem for p in base.rglob("*.py") if p.stem != "__init__"} | {root}
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
