"""SandboxRuntime.resolve(): sandbox paths never leave the root, whatever the path and symlinks."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mock_opensandbox.runtime import SandboxRuntime

segment = st.sampled_from(["a", "b", "..", ".", "", "l1", "l2", "l3", "etc", "tmp", "x y", "\u00e9"])
paths = (
    st.lists(segment, max_size=8)
    .map(lambda s: "/".join(s))
    .flatmap(lambda p: st.sampled_from(["/" + p, p, "//" + p, p + "/"]))
)
link_targets = st.one_of(
    paths.filter(bool),
    st.sampled_from(["/", "/etc", "../../../../..", "..", "/tmp/../..", "l1", "l2", "/l3", "/a/l1"]),
)
layouts = st.lists(st.tuples(st.sampled_from(["l1", "l2", "l3", "a/l1", "a/b/l2", "tmp/l3"]), link_targets), max_size=6)


def _inside(root: str, p: str) -> bool:
    return p == root or p.startswith(root + os.sep)


@settings(max_examples=120, deadline=None)
@given(layouts, st.lists(paths, min_size=1, max_size=5))
def test_resolve_never_escapes(layout, queries):
    d = tempfile.mkdtemp(prefix="osb-t0-")
    try:
        rt = SandboxRuntime(d, isolate=False)
        os.makedirs(os.path.join(d, "a", "b"), exist_ok=True)
        for where, target in layout:
            full = os.path.join(d, where)
            if not os.path.lexists(full):
                os.symlink(target, full)
        for q in queries:
            for follow in (True, False):
                try:
                    got = rt.resolve(q, follow_symlinks=follow)
                except OSError as exc:
                    assert exc.errno == errno.ELOOP
                    continue
                assert _inside(rt.root, got), (q, got)
                # whatever the host does with the result stays inside too
                assert _inside(rt.root, os.path.realpath(got)) or os.path.islink(got) and not follow
    finally:
        shutil.rmtree(d)


@pytest.fixture
def rt(tmp_path):
    r = SandboxRuntime(str(tmp_path / "root"), isolate=False)
    yield r
    r.cleanup()


def test_chroot_semantics(rt):
    root = rt.root
    os.symlink("/etc", os.path.join(root, "tmp", "abs"))
    os.symlink("../../../../../etc", os.path.join(root, "tmp", "rel"))
    assert rt.resolve("/tmp/abs/passwd") == os.path.join(root, "etc", "passwd")
    assert rt.resolve("/tmp/rel/passwd") == os.path.join(root, "etc", "passwd")
    assert rt.resolve("/../../..") == root
    assert rt.resolve("tmp/x") == os.path.join(root, "tmp", "x")
    assert rt.resolve("/tmp/abs", follow_symlinks=False) == os.path.join(root, "tmp", "abs")


def test_loops_and_bad_input(rt):
    os.symlink("b", os.path.join(rt.root, "tmp", "a"))
    os.symlink("a", os.path.join(rt.root, "tmp", "b"))
    with pytest.raises(OSError) as ei:
        rt.resolve("/tmp/a/x")
    assert ei.value.errno == errno.ELOOP
    with pytest.raises(ValueError):
        rt.resolve("/tmp/\x00x")
    with pytest.raises(ValueError):
        rt.resolve(b"/tmp")  # type: ignore[arg-type]
    assert rt.paths.to_sandbox(rt.resolve("/tmp/q")) == "/tmp/q"


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=60))
def test_arbitrary_strings(s):
    d = tempfile.mkdtemp(prefix="osb-t0-")
    try:
        rt = SandboxRuntime(d, isolate=False)
        try:
            got = rt.resolve(s)
        except ValueError:
            assert "\x00" in s
            return
        assert _inside(rt.root, got)
    finally:
        shutil.rmtree(d)


def test_a_download_name_never_splits_the_header_block():
    """net/http's headerNewlineToSpace: CR/LF in a Content-Disposition filename go out as spaces (found by
    test_epp_fuzz: a file named "a\\nb" made the mock write a raw newline into its header block)."""
    from mock_opensandbox.execd.files_routes import content_disposition

    assert content_disposition("a\nb\rc.txt") == 'attachment; filename="a b c.txt"'
    assert "\n" not in content_disposition("é\n") and "%0A" in content_disposition("é\n")
