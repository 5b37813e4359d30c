"""The docs name only what exists: every Python file or directory of this repository that README.md, plugin/README.md
or docs/*.md mention in backticks, every module they run with ``python -m``, every ``make`` target, and every
``--option`` of our own commands (checked against the command's ``--help``; an option belongs to the last
``python -m <module> [subcommand]`` named before it in the same paragraph or code block, and an options table to the
command of the block just above it).

A renamed module or a dropped option fails here, with the doc and line to fix.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DOCS = [
    "README.md",
    "CONTRIBUTING.md",
    os.path.join("plugin", "README.md"),
    os.path.join("fixtures", "README.md"),
    os.path.join("bench", "README.md"),
] + sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(REPO, "docs")) if f.endswith(".md"))
# modules of this repository whose options the docs list (the others, like agent_sandbox.providers, are the host's)
OWN = ("mock_opensandbox", "record", "bench", "demo")
# where a bare or package-relative path in the docs may live
BASES = ["", "plugin", "mock_opensandbox", "tiers", os.path.join("mock_opensandbox", "execd"), "bench", "record"]
# upstream files the docs cite (execd's Go tree, opensandbox-server's Python): not ours to check
UPSTREAM = re.compile(r"^(pkg/|components/|src/|opensandbox_server/|server/|services/)")

PY_M = re.compile(r"python3?(?:\s+-\S+)*\s+-m\s+([A-Za-z_][\w.]*)((?:\s+[a-z][\w-]*)?)")
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]+)")
MAKE = re.compile(r"(?<![\w-])make\s+([a-z][\w-]*)")
TICKED_PATH = re.compile(r"`([\w./-]+\.py|[\w.-]+/[\w./-]*)`")


def _lines(doc: str) -> list[tuple[int, str]]:
    with open(os.path.join(REPO, doc), encoding="utf-8") as fh:
        return list(enumerate(fh.read().splitlines(), 1))


def _repo_files() -> set[str]:
    out = set()
    for d, dirs, files in os.walk(REPO):
        dirs[:] = [x for x in dirs if not x.startswith(".") and x not in ("__pycache__", "node_modules")]
        rel = os.path.relpath(d, REPO)
        out.add("" if rel == "." else rel)
        out.update(os.path.normpath(os.path.join(rel, f)) for f in files)
    return out


def _exists(ref: str, doc: str, files: set[str]) -> bool:
    ref = ref.rstrip("/")
    if ref.startswith("../shared/") or ref.startswith("../") and not ref.startswith("../plugin"):
        return True  # outside the repository (the machine's shared directory)
    here = os.path.dirname(doc)
    for base in [here] + BASES:
        if os.path.normpath(os.path.join(base, ref)) in files:
            return True
    if "/" not in ref:  # a bare file name: anywhere in the repository
        return any(os.path.basename(f) == ref for f in files)
    return False


def _ignored(ref: str) -> bool:
    """A path that a run makes and git ignores (`bench/out/`): the docs may name it before it exists."""
    out = subprocess.run(["git", "check-ignore", "-q", ref], cwd=REPO, capture_output=True, timeout=30)
    return out.returncode == 0


def module_refs() -> list[str]:
    files = _repo_files()
    bad = []
    for doc in DOCS:
        for n, line in _lines(doc):
            for m in TICKED_PATH.finditer(line):
                ref = m.group(1)
                if line[: m.start()].endswith("not "):
                    continue  # "not `secrets.py`": named as what is not there
                if ref.startswith(("http", "/", "~", "$", ".")) or UPSTREAM.match(ref) or "*" in ref or "<" in ref:
                    continue
                if not (
                    ref.endswith(".py")
                    or ref.split("/")[0] in {"plugin", "mock_opensandbox", "tiers", "bench", "record", "docs"}
                ):
                    continue  # e.g. `os/arch`, `application/json`, an OCI layout's `blobs/`
                if not _exists(ref, doc, files) and not _ignored(ref):
                    bad.append(f"{doc}:{n}: `{ref}` does not exist")
            for mod, _sub in PY_M.findall(line):
                if importlib.util.find_spec(mod.split(".")[0]) is None or importlib.util.find_spec(mod) is None:
                    bad.append(f"{doc}:{n}: python -m {mod}: no such module")
    return bad


def _targets() -> set[str]:
    with open(os.path.join(REPO, "Makefile"), encoding="utf-8") as fh:
        return set(re.findall(r"^([a-z][\w-]*):", fh.read(), re.M))


def make_refs() -> list[str]:
    targets = _targets()
    return [
        f"{doc}:{n}: make {t}: no such target"
        for doc in DOCS
        for n, line in _lines(doc)
        for t in MAKE.findall(line)
        if t not in targets
    ]


@functools.lru_cache(maxsize=None)
def _help(command: tuple[str, ...]) -> str:
    r = subprocess.run(
        [sys.executable, "-m", *command, "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    return r.stdout + r.stderr


def option_refs() -> list[str]:
    bad = []
    for doc in DOCS:
        current: tuple[str, ...] | None = None  # options belong to the last command named in their block
        previous: tuple[str, ...] | None = None  # the command of the block before this one
        in_table, table_command = False, None
        for n, line in _lines(doc):
            if not line.strip() or line.startswith("#"):
                if current is not None or line.startswith("#"):
                    previous = current
                current, in_table = None, False
                continue
            if line.startswith("|"):  # an options table lists the options of the command above it; a row may
                if not in_table:  # name its own command
                    in_table, table_command = True, previous
                current = table_command
            for mod, sub in PY_M.findall(line):
                current = (mod, sub.strip()) if sub.strip() else (mod,)
            if current is None or current[0].split(".")[0] not in OWN:
                continue
            # a code span that starts with another command (`crane pull --format=oci`) names that command's options
            own = re.sub(
                r"`([^`]*)`",
                lambda m: m.group(0) if m.group(1).startswith("-") or "python" in m.group(1) else " ",
                line,
            )
            for opt in OPTION.findall(own):
                text = _help(current) + (_help(current[:1]) if len(current) > 1 else "")
                if not re.search(r"(?<![\w-])" + re.escape(opt) + r"(?![\w-])", text):
                    bad.append(f"{doc}:{n}: {opt} is not an option of python -m {' '.join(current)}")
    return bad


MOCK_CALL = re.compile(r"MockOpenSandbox\(([^)]*)\)")


def mock_keyword_refs() -> list[str]:
    """Every keyword of a documented ``MockOpenSandbox(...)`` call is a MockOptions field (the facade takes one
    options object, or its fields as keywords)."""
    from mock_opensandbox.options import MockOptions

    fields = set(MockOptions.__dataclass_fields__)
    bad = []
    for doc in DOCS + [os.path.join("mock_opensandbox", "QUIRKS.md")]:
        for n, line in _lines(doc):
            for m in MOCK_CALL.finditer(line):
                for kw in re.findall(r"(?:^|[,(\s])([a-z_]\w*)\s*=", m.group(1)):
                    if kw not in fields:
                        bad.append("%s:%d: MockOpenSandbox(%s=): not a MockOptions field" % (doc, n, kw))
    return bad


def test_documented_modules_and_files_exist():
    assert module_refs() == []


def test_documented_make_targets_exist():
    assert make_refs() == []


ARCHITECTURE = os.path.join("docs", "ARCHITECTURE.md")
TICKED_NAME = re.compile(r"`([A-Z][A-Za-z0-9]+)(?:\.([a-z_]\w*))?`")


@functools.lru_cache(maxsize=1)
def _classes() -> dict[str, set[str]]:
    """Every class defined in mock_opensandbox/ and plugin/ -> the names its body defines or assigns."""
    import ast

    out: dict[str, set[str]] = {}
    for top in ("mock_opensandbox", "plugin"):
        for d, _, fs in os.walk(os.path.join(REPO, top)):
            for f in fs:
                if not f.endswith(".py") or "__pycache__" in d:
                    continue
                with open(os.path.join(d, f), encoding="utf-8") as fh:
                    tree = ast.parse(fh.read())
                for node in ast.walk(tree):
                    if isinstance(node, ast.ClassDef):
                        names = out.setdefault(node.name, set())
                        for sub in ast.walk(node):
                            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                                names.add(sub.name)
                            elif isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store):
                                names.add(sub.attr)
                            elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                                names.add(sub.id)
    return out


def architecture_name_refs(docs: list[str] | None = None) -> list[str]:
    """The mechanisms in docs/ARCHITECTURE.md name classes and their methods (`SandboxRuntime.spawn`): each is a
    class of mock_opensandbox/ or plugin/, and the member is defined in it."""
    classes = _classes()
    bad = []
    for doc in docs or [ARCHITECTURE]:
        for n, line in _lines(doc):
            for m in TICKED_NAME.finditer(line):
                cls, member = m.group(1), m.group(2)
                if cls.isupper():
                    continue  # a constant or an acronym (`ROUTES`, `PID`), not a class
                if cls not in classes:
                    bad.append(f"{doc}:{n}: `{m.group(0).strip('`')}`: no class {cls}")
                elif member and member not in classes[cls]:
                    bad.append(f"{doc}:{n}: `{m.group(0).strip('`')}`: {cls} has no {member}")
    return bad


def test_architecture_names_exist():
    assert architecture_name_refs() == []


def test_a_stale_architecture_name_is_found(tmp_path):
    doc = tmp_path / "ARCH.md"
    doc.write_text("`SandboxRuntime.spawn` `SandboxRuntime.no_such` `NoSuchClass` `ROUTES`\n")
    found = architecture_name_refs([str(doc)])
    assert [f.split(": ", 1)[1] for f in found] == [
        "`SandboxRuntime.no_such`: SandboxRuntime has no no_such",
        "`NoSuchClass`: no class NoSuchClass",
    ]


def test_documented_options_exist():
    assert option_refs() == []


def test_documented_mock_keywords_exist():
    assert mock_keyword_refs() == []


@pytest.mark.parametrize(
    "doc_line,finder,expect",
    [
        (
            "Run `mock_opensandbox/no_such_module.py`.",
            module_refs,
            "`mock_opensandbox/no_such_module.py` does not exist",
        ),
        ("python -m mock_opensandbox.no_such_module", module_refs, "python -m mock_opensandbox.no_such_module"),
        ("python -m mock_opensandbox --port 1 --no-such-option", option_refs, "--no-such-option is not an option"),
        ("make no-such-target", make_refs, "make no-such-target: no such target"),
        ("`MockOpenSandbox(port=0, no_such=1)`", mock_keyword_refs, "no_such=): not a MockOptions field"),
    ],
)
def test_a_stale_reference_is_found(tmp_path, monkeypatch, doc_line, finder, expect):
    doc = tmp_path / "docs" / "STALE.md"
    doc.parent.mkdir()
    doc.write_text("# stale\n\n" + doc_line + "\n")
    monkeypatch.setattr(sys.modules[__name__], "DOCS", [str(doc)])
    found = finder()
    assert len(found) == 1 and expect in found[0], found
