"""runtime/rootfs.py: the image config a sandbox gets (docs/IMAGES.md), as Docker/runc apply it: User looked up in the
image's own /etc/passwd and /etc/group (name, uid, name:group; groups = the primary gid + memberships; an unknown
name is runc's "unable to find user"), HOME from the passwd entry, Env under the container's with Docker's default
PATH, WorkingDir "" = "/". Pure: an image stand-in whose top layer holds the account files."""

from __future__ import annotations

import pytest

from mock_opensandbox.runtime.rootfs import DOCKER_DEFAULT_PATH, ImageRoot, UserNotFound, user_word

PASSWD = (
    "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    "app:x:1000:1000::/home/app:/bin/sh\n"
)
GROUP = "root:x:0:\nnogroup:x:65534:\napp:x:1000:\nwheel:x:10:app,other\n"


class FakeImage:
    def __init__(self, tmp, user="", env=(), wd=""):
        self.user, self.env, self.working_dir, self._tmp = user, list(env), wd, tmp
        (tmp / "etc").mkdir(exist_ok=True)
        (tmp / "etc" / "passwd").write_text(PASSWD)
        (tmp / "etc" / "group").write_text(GROUP)

    def lowerdirs(self):
        return [str(self._tmp)]

    def rootfs(self):  # pragma: no cover - overlay mode only here
        return str(self._tmp)


def _root(tmp_path, **kw) -> ImageRoot:
    return ImageRoot(str(tmp_path / "sb"), FakeImage(tmp_path, **kw), overlay=True)


@pytest.mark.parametrize(
    "spec,want",
    [
        ("", (0, 0, [0], "/root")),
        ("nobody", (65534, 65534, [65534], "/nonexistent")),
        ("app", (1000, 1000, [1000, 10], "/home/app")),
        ("1000", (1000, 1000, [1000, 10], "/home/app")),
        ("4242", (4242, 0, [0], "/")),
        ("app:wheel", (1000, 10, [10], "/home/app")),
        ("nobody:0", (65534, 0, [0], "/nonexistent")),
    ],
)
def test_user_as_runc_resolves_it(tmp_path, spec, want):
    assert _root(tmp_path, user=spec).user() == want


@pytest.mark.parametrize(
    "spec,msg", [("ghost", "unable to find user ghost"), ("app:ghosts", "unable to find group ghosts")]
)
def test_unknown_user_or_group(tmp_path, spec, msg):
    with pytest.raises(UserNotFound, match=msg):
        _root(tmp_path, user=spec).user()


def test_env_path_home_and_workdir(tmp_path):
    r = _root(tmp_path, env=["A=1", "A=2", "B=x=y", "junk"], wd="srv")
    assert r.env("/home/app") == {"A": "2", "B": "x=y", "PATH": DOCKER_DEFAULT_PATH, "HOME": "/home/app"}
    assert _root(tmp_path, env=["PATH=/bin", "HOME=/h"]).env("/root") == {"PATH": "/bin", "HOME": "/h"}
    assert r.working_dir() == "/srv" and _root(tmp_path).working_dir() == "/"
    assert user_word((1, 2, [2, 3], "/")) == "1 2 2,3" and user_word((0, 0, [], "/")) == "0 0 -"


def test_overlay_falls_back_to_a_copy_for_paths_options_cannot_carry(tmp_path):
    bad = tmp_path / "a,b"
    bad.mkdir()
    assert ImageRoot(str(bad / "sb"), FakeImage(bad), overlay=True).mode == "copy"
    assert _root(tmp_path).mode == "overlay"
