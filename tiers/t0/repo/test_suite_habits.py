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


TIER_NAMES = ("t0", "t1", "t2", "t3", "t4", "diff")  # tiers/conftest.py TIERS: the markers make test selects


def _make_tiers(makefile: str) -> list[str]:
    """The tier markers `make test` selects: the names in the Makefile's TEST_TIERS expression."""
    with open(makefile, encoding="utf-8") as fh:
        text = fh.read()
    found = re.search(r"^TEST_TIERS \?=(.*)$", text, re.M)
    assert found, "no TEST_TIERS in the Makefile"
    return [w for w in found.group(1).split() if w not in ("or", "and", "not")]


def unselected_folders(tiers_dir: str = TIERS, makefile: str = os.path.join(REPO, "Makefile")) -> list[str]:
    """Every folder holding tests sits in a tier whose marker `make test` selects."""
    chosen = _make_tiers(makefile)
    bad = [f"TEST_TIERS names {w!r}, which is no tier" for w in chosen if w not in TIER_NAMES]
    for d, _, fs in os.walk(tiers_dir):
        if "__pycache__" in d or not any(f.startswith("test_") and f.endswith(".py") for f in fs):
            continue
        rel = os.path.relpath(d, os.path.dirname(tiers_dir))
        parts = rel.split(os.sep)
        if len(parts) < 2 or parts[1] not in TIER_NAMES:
            bad.append(f"{rel} is in no tier")
        elif parts[1] not in chosen:
            bad.append(f"{rel}: make test does not select its tier {parts[1]}")
    return bad


def test_tests_sit_in_component_folders():
    assert misplaced_tests() == []


def test_make_test_selects_every_test_folder():
    assert unselected_folders() == []


def test_the_tiers_here_are_the_conftests():
    from tiers.conftest import TIERS as MARKED

    assert tuple(MARKED) == TIER_NAMES


def test_a_misplaced_or_unselected_test_is_found(tmp_path):
    for tier in BY_COMPONENT:
        (tmp_path / "tiers" / tier / "execd").mkdir(parents=True)
    (tmp_path / "tiers" / "t1" / "test_stray.py").write_text("")
    (tmp_path / "tiers" / "t1" / "execd" / "test_ok.py").write_text("")
    (tmp_path / "tiers" / "t4" / "execd" / "test_live.py").write_text("")
    (tmp_path / "tiers" / "t9" / "test_lost.py").parent.mkdir(parents=True)
    (tmp_path / "tiers" / "t9" / "test_lost.py").write_text("")
    mk = tmp_path / "Makefile"
    mk.write_text("TEST_TIERS ?= t0 or t1 or t2 or t3 or t5\n")
    assert misplaced_tests(str(tmp_path / "tiers")) == ["t1/test_stray.py"]
    assert sorted(unselected_folders(str(tmp_path / "tiers"), str(mk))) == [
        "TEST_TIERS names 't5', which is no tier",
        "tiers/t4/execd: make test does not select its tier t4",
        "tiers/t9 is in no tier",
    ]


# `make lint` runs the tests marked `lint` in one folder; `make test` and `make test-serial` deselect them
def _recipe(makefile: str, target: str) -> str:
    with open(makefile, encoding="utf-8") as fh:
        found = re.search(rf"^{re.escape(target)}:[^\n]*\n((?:\t[^\n]*\n)+)", fh.read(), re.M)
    return found.group(1) if found else ""


def lint_split(tiers_dir: str = TIERS, makefile: str = os.path.join(REPO, "Makefile")) -> list[str]:
    """Every check marked `lint` runs in `make lint` and only there: it sits in tiers/t0/repo (the only folder
    `make lint` collects), `make lint` selects the marker there and the test targets deselect it."""
    home = os.path.join(tiers_dir, "t0", "repo")
    bad = []
    for d, _, fs in os.walk(tiers_dir):
        for f in sorted(fs):
            path = os.path.join(d, f)
            if f.endswith(".py") and "__pycache__" not in d and d != home:
                with open(path, encoding="utf-8") as fh:
                    if "mark.lint" in fh.read():
                        bad.append(f"{os.path.relpath(path, tiers_dir)} marks a test `lint` outside t0/repo")
    if not re.search(r"-m lint tiers/t0/repo\b", _recipe(makefile, "lint")):
        bad.append("make lint does not run `-m lint tiers/t0/repo`")
    for target in ("test", "test-serial"):
        if not re.search(r'-m "[^"]*\bnot lint"', _recipe(makefile, target)):
            bad.append(f'make {target} does not deselect the lint checks (-m "not lint")')
    return bad


def test_make_lint_runs_the_lint_checks_and_make_test_does_not():
    assert lint_split() == []


def test_the_lint_split_check_can_fail(tmp_path):
    (tmp_path / "tiers" / "t0" / "repo").mkdir(parents=True)
    (tmp_path / "tiers" / "t1").mkdir()
    (tmp_path / "tiers" / "t0" / "repo" / "test_ok.py").write_text("@pytest.mark.lint\ndef test_x(): pass\n")
    (tmp_path / "tiers" / "t1" / "test_lost.py").write_text("@pytest.mark.lint\ndef test_x(): pass\n")
    mk = tmp_path / "Makefile"
    mk.write_text('test: x\n\trun -- -m "not lint"\n\nlint: x\n\tpytest -q tiers/t0/repo\n')
    assert lint_split(str(tmp_path / "tiers"), str(mk)) == [
        "t1/test_lost.py marks a test `lint` outside t0/repo",
        "make lint does not run `-m lint tiers/t0/repo`",
        'make test-serial does not deselect the lint checks (-m "not lint")',
    ]
