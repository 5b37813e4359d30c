"""Habits of the test suite itself.

* A fixture that redefines one a conftest already offers says so: its docstring starts with "Overrides" and names
  what it replaces. A silent redefinition changes what every test of that file gets, and a reader of the test sees
  only the shared fixture's name.
* No ``sys.path`` shims: tests import ``tiers.*``, ``mock_opensandbox`` and ``demo`` from the repository root
  (pyproject's ``pythonpath``); only the toolkit puts plugin/ on the path (tiers/toolkit/plugin.py), and a file run
  as a script by a test (``__main__``) may add the root for itself.
"""

from __future__ import annotations

import ast
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TIERS = os.path.join(REPO, "tiers")
# file that defines shared fixtures -> the directory whose tests see them (a conftest there imports them)
SHARED = {
    os.path.join(TIERS, "toolkit", "fixtures.py"): TIERS,
    os.path.join(TIERS, "t1", "conftest_execd.py"): os.path.join(TIERS, "t1"),
}


def _fixtures(path: str) -> list[ast.FunctionDef]:
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    out = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any("fixture" in ast.unparse(d) for d in node.decorator_list):
            out.append(node)
    return out


def _python_files() -> list[str]:
    return sorted(
        os.path.join(d, f) for d, _, fs in os.walk(TIERS) for f in fs if f.endswith(".py") and "__pycache__" not in d
    )


def _shared_fixtures() -> dict[str, list[tuple[str, str]]]:
    """fixture name -> [(defining file, directory it reaches)]."""
    providers = dict(SHARED)
    providers.update({p: os.path.dirname(p) for p in _python_files() if os.path.basename(p) == "conftest.py"})
    shared: dict[str, list[tuple[str, str]]] = {}
    for path, reach in providers.items():
        for fx in _fixtures(path):
            shared.setdefault(fx.name, []).append((path, reach))
    return shared


def silent_overrides() -> list[str]:
    shared = _shared_fixtures()
    bad = []
    for path in _python_files():
        for fx in _fixtures(path):
            for origin, reach in shared.get(fx.name, []):
                if origin == path or not path.startswith(reach + os.sep):
                    continue
                doc = ast.get_docstring(fx) or ""
                if not doc.startswith("Overrides"):
                    bad.append(
                        f"{os.path.relpath(path, REPO)}:{fx.lineno}: fixture {fx.name!r} redefines the one "
                        f"of {os.path.relpath(origin, REPO)}; start its docstring with 'Overrides ...'"
                    )
    return bad


def test_every_fixture_override_says_so():
    assert silent_overrides() == []


def test_the_check_sees_the_toolkit_fixtures():
    shared = _shared_fixtures()
    assert {"mock", "epp", "sid"} <= set(shared)
    assert "make_execd" in shared and "execd_bin" in shared


PATH_SHIMS_ALLOWED = {os.path.join(TIERS, "toolkit", "plugin.py")}


def _is_main_guard(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)


def sys_path_shims() -> list[str]:
    bad = []
    for path in _python_files():
        if path in PATH_SHIMS_ALLOWED:
            continue
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
        skip = {id(n) for top in tree.body if _is_main_guard(top) for n in ast.walk(top)}
        skip |= {
            id(n)
            for fn in ast.walk(tree)
            if isinstance(fn, ast.FunctionDef) and fn.name == "main"
            for n in ast.walk(fn)
        }
        for node in ast.walk(tree):
            if id(node) in skip or not isinstance(node, ast.Call):
                continue
            name = ast.unparse(node.func)
            if name in ("sys.path.insert", "sys.path.append"):
                bad.append(f"{os.path.relpath(path, REPO)}:{node.lineno}: {name}")
    return bad


def test_no_sys_path_shims():
    assert sys_path_shims() == []


def test_the_shim_check_sees_a_shim(tmp_path, monkeypatch):
    f = tmp_path / "tiers" / "t9" / "test_x.py"
    f.parent.mkdir(parents=True)
    f.write_text("import sys\nsys.path.insert(0, '.')\nCODE = 'sys.path.insert(0, 1)'\n")
    monkeypatch.setattr(sys.modules[__name__], "TIERS", str(tmp_path / "tiers"), raising=True)
    monkeypatch.setattr(sys.modules[__name__], "REPO", str(tmp_path), raising=True)
    assert sys_path_shims() == ["tiers/t9/test_x.py:2: sys.path.insert"]


# tiers whose tests sit in one folder per component (t3 is one component, an execd process; diff is one harness)
BY_COMPONENT = ("t0", "t1", "t2", "t4")


def misplaced_tests(tiers_dir: str = TIERS) -> list[str]:
    """A test module of a component tier directly in the tier's root, not in a component folder."""
    bad = []
    for tier in BY_COMPONENT:
        root = os.path.join(tiers_dir, tier)
        bad += [os.path.join(tier, f) for f in sorted(os.listdir(root)) if f.startswith("test_") and f.endswith(".py")]
    return bad


def _make_groups(makefile: str) -> list[str]:
    """The folders `make test` runs: the quoted words of the Makefile's TEST_GROUPS."""
    with open(makefile, encoding="utf-8") as fh:
        text = fh.read()
    block = re.search(r"^TEST_GROUPS :=((?:.*\\\n)*.*)$", text, re.M)
    assert block, "no TEST_GROUPS in the Makefile"
    return [w for group in re.findall(r'"([^"]*)"', block.group(1)) for w in group.split()]


def ungrouped_folders(tiers_dir: str = TIERS, makefile: str = os.path.join(REPO, "Makefile")) -> list[str]:
    """Every folder holding tests is run by exactly one group of `make test` (itself or a folder above it)."""
    named = _make_groups(makefile)
    bad = ["%s named %d times" % (w, named.count(w)) for w in sorted(set(named)) if named.count(w) > 1]
    for d, _, fs in os.walk(tiers_dir):
        if "__pycache__" in d or not any(f.startswith("test_") and f.endswith(".py") for f in fs):
            continue
        rel = os.path.relpath(d, os.path.dirname(tiers_dir))
        if not any(rel == w or rel.startswith(w + os.sep) for w in named):
            bad.append("%s is in no group of TEST_GROUPS" % rel)
    return bad


def test_tests_sit_in_component_folders():
    assert misplaced_tests() == []


def test_make_test_runs_every_test_folder_once():
    assert ungrouped_folders() == []


def test_a_misplaced_or_ungrouped_test_is_found(tmp_path):
    for tier in BY_COMPONENT:
        (tmp_path / "tiers" / tier / "execd").mkdir(parents=True)
    (tmp_path / "tiers" / "t1" / "test_stray.py").write_text("")
    (tmp_path / "tiers" / "t1" / "execd" / "test_ok.py").write_text("")
    (tmp_path / "tiers" / "t2" / "execd" / "test_lost.py").write_text("")
    mk = tmp_path / "Makefile"
    mk.write_text('TEST_GROUPS := "tiers/t1" \\\n               "tiers/t0 tiers/t1"\n')
    assert misplaced_tests(str(tmp_path / "tiers")) == ["t1/test_stray.py"]
    assert ungrouped_folders(str(tmp_path / "tiers"), str(mk)) == [
        "tiers/t1 named 2 times",
        "tiers/t2/execd is in no group of TEST_GROUPS",
    ]
