"""Where a sandbox's volumes go in its view, and the argument of view.py's "mount the volumes" step.

``plan(root, resolve, volumes)`` checks each target the way Docker + runc refuse it (measured with
Docker 20.10 + runc, QUIRKS.md "Volumes") and returns the argument view.py reads: one entry per
volume, ``anchor:rel:target:ro`` with each field hex-encoded, entries joined by ",", mounts in
order of depth (a volume under another volume's path is mounted after it, as Docker sorts them).
view.py reaches ``anchor/rel`` and ``<root>/target`` one component at a time with O_NOFOLLOW and
binds the two descriptors (``/proc/self/fd/N``): no path is looked up twice.
"""

from __future__ import annotations

import os
import posixpath
from typing import Callable, Iterable

from mock_opensandbox.runtime._util import HOST_DIRS

BOOTSTRAP = "/opt/opensandbox/bootstrap.sh"
RUNTIME_DIR = "/opt/opensandbox"


class VolumeTargetError(Exception):
    """A volume that Docker/runc would not mount (the text is runc's or Docker's, with the mock's paths)."""


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _runc(detail: str) -> VolumeTargetError:
    return VolumeTargetError(
        "OCI runtime create failed: runc create failed: unable to start container process: %s: unknown" % detail
    )


def check_target(source: str, target: str, read_only: bool) -> None:
    """Raise VolumeTargetError for a sandbox path Docker or runc refuses as a mount destination, or one
    the mock keeps for itself (its runtime directory)."""
    if ":" in source or ":" in target:  # the server sends "source:target:mode" (HostConfig.Binds)
        raise VolumeTargetError(
            "invalid volume specification: '%s:%s:%s'" % (source, target, "ro" if read_only else "rw")
        )
    if target == "/":
        raise VolumeTargetError(
            "invalid volume specification: '%s:/:%s': invalid mount config for type \"bind\": "
            "invalid specification: destination can't be '/'" % (source, "ro" if read_only else "rw")
        )
    if target == "/proc":
        raise _runc(
            'error during container init: error mounting "%s" to rootfs at "/proc": cannot be mounted '
            "because it is not of type proc" % source
        )
    if _under(target, "/proc"):
        raise _runc(
            'error during container init: error mounting "%s" to rootfs at "%s": cannot be mounted '
            "because it is inside /proc" % (source, target)
        )
    if target == "/dev":
        raise _runc("unable to setup user: stat /dev/null: no such file or directory")
    if target != "/sys" and _under(target, "/sys"):
        raise _runc(
            'error during container init: error mounting "%s" to rootfs at "%s": mkdir %s: read-only '
            "file system" % (source, target, target)
        )
    if _under(RUNTIME_DIR, target) or _under(target, RUNTIME_DIR):
        # the server's bootstrap.sh and execd live there (the container's entrypoint): a volume over it
        # hides them and the container cannot start; below it, the mock keeps its runtime its own
        raise _runc('exec: "%s": stat %s: no such file or directory' % (BOOTSTRAP, BOOTSTRAP))


def encode(entries: Iterable[tuple[str, str, str, bool]]) -> str:
    return ",".join(
        ":".join(
            [
                a.encode("utf-8", "surrogateescape").hex(),
                r.encode("utf-8", "surrogateescape").hex(),
                t.encode("utf-8", "surrogateescape").hex(),
                "1" if ro else "0",
            ]
        )
        for a, r, t, ro in entries
    )


def plan(root: str, resolve: Callable[[str], str], volumes: Iterable[object]) -> str:
    """The view.py argument for ``volumes`` (objects with anchor, rel, host_path, target, read_only) in a
    sandbox whose root is ``root`` (``resolve`` maps a sandbox path into it, like the runtime's)."""
    entries = []
    seen: set[str] = set()
    for v in volumes:
        target = posixpath.normpath("/" + v.target.lstrip("/"))  # type: ignore[attr-defined]
        src, ro = v.host_path, v.read_only  # type: ignore[attr-defined]
        if target in seen:
            raise VolumeTargetError("Duplicate mount point: %s" % target)
        seen.add(target)
        check_target(src, target, ro)
        try:
            host = resolve(target)
        except (OSError, ValueError) as e:
            raise _runc(
                'error during container init: error mounting "%s" to rootfs at "%s": %s' % (src, target, e)
            ) from None
        rel = os.path.relpath(host, root)
        inside = "/" + rel if rel != "." else "/"
        if inside != target:  # a link in the image: the place it leads to must pass the same checks
            check_target(src, inside, ro)
        top = rel.split("/")[0]
        if top in HOST_DIRS and not os.path.lexists("/" + rel):
            # [choice] the mock's /usr, /bin, /lib* are the host's, bound read-only: no new mount point there
            raise _runc(
                'error during container init: error mounting "%s" to rootfs at "%s": mkdir %s: read-only '
                "file system" % (src, target, inside)
            )
        entries.append((rel.count("/"), v.anchor, v.rel, rel, ro))  # type: ignore[attr-defined]
    entries.sort(key=lambda e: e[0])
    return encode((a, r, t, ro) for _, a, r, t, ro in entries)
