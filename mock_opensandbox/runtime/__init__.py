"""The sandbox underneath one mock execd, contained the way a container of the real server is.

Modules: ``sandbox`` (SandboxRuntime: root, processes, pause/resume), its components ``paths``
(SandboxPaths, ``runtime.paths``: path mapping through the sandbox's view) and ``pid1`` (Pid1,
``runtime.pid1``: PID 1 started on first use, its view, devpts, network namespace, agent), ``holder``
(a sandbox's PID 1 - the mock's bootstrap.sh: execd, then the entrypoint - and how commands join its
namespaces), ``agent`` (the in-sandbox agent's channel: ``agent_call``),
``probe`` (can this OS contain a sandbox? once per process), ``scripts`` (the programs in ``scripts/`` and their arguments),
``caps`` (the capability set, data), ``execd`` (a real execd binary inside a sandbox), ``netns`` (its
own network namespace), ``cgroups`` (its resource limits), ``spawner`` (cgroup v1: the thread that
forks its processes inside its cgroups).

Containment, where the OS allows it (QUIRKS.md "Containment" has the sources). Every sandbox
process - the entrypoint and PID 1, foreground and background commands, PTY shells, an execd
process - runs
* in the sandbox's own mount, IPC and UTS namespaces (+ a user namespace mapping the caller to
  root when the mock is not root) and, normally, its own PID namespace (``ps`` shows only the
  sandbox; QUIRKS.md, Sandbox runtime: the process list);
* with the sandbox root as "/" after ``pivot_root`` (the host's tree is detached, not just
  hidden by a chroot): ``/usr /bin /sbin /lib*`` bound read-only from the host, a container
  ``/dev`` (tmpfs; null zero full random urandom tty; fresh devpts + ptmx; shm; mqueue; fd/stdin/
  stdout/stderr links; no block devices), ``/proc`` with Docker's read-only (bus fs irq sys
  sysrq-trigger) and masked (kcore keys timer_list ... acpi scsi) paths, ``/sys`` read-only with
  every cgroup hierarchy, ``/etc`` = the host's through an overlay with the image's accounts, a
  locked shadow, the 12-hex-digit hostname, host secrets and ``/etc/ssh`` whited out, and
  hosts/resolv.conf/nsswitch.conf/ld.so.cache/CA bundle bound read-only;
* with the server's capability set (``caps.SANDBOX_CAP_MASK`` = 0x800405fb as bounding,
  permitted and effective set; inheritable and ambient empty) and no_new_privs, set right
  before the exec of the sandbox process (``scripts/view.py`` and ``scripts/nsexec.py`` with
  prctl/capset; as root, once per sandbox for a thread that forks every command from inside,
  ``contained.py``, or per command with util-linux ``setpriv`` where that thread cannot be made).
The view is built while still privileged, in a namespace the host never sees; a failure of any
step stops the process before anything of the sandbox runs. The network (``netns``): a network
namespace per sandbox held by its PID 1, loopback up, ports reached with ``SandboxRuntime.connect``,
outbound traffic through slirp4netns when installed; ``network="host"`` shares the host's. Without a PID
namespace (``OSB_MOCK_PIDNS=0``, no nsenter) each command builds the view in a mount namespace
of its own and shares the host's processes. Where namespaces are unavailable at all (no
``unshare``/``setpriv``, user namespaces disabled, not Linux, ``OSB_MOCK_ISOLATION=0``) commands
run ON THE HOST with cwd/HOME/TMPDIR inside the root (QUIRKS.md, Sandbox runtime: "Fallback"), ``isolated`` is False and
the note says so (``x-mock-isolation``).

Standard library only, Python >= 3.10.
"""

from __future__ import annotations

from typing import Any

from mock_opensandbox.runtime import probe as _probe_mod
from mock_opensandbox.runtime._util import BASE_DIRS, DEFAULT_PATH, HOST_DIRS, SYSTEM_DIRS, VIEW_DIRS
from mock_opensandbox.runtime.caps import SANDBOX_CAP_MASK, SANDBOX_CAPS
from mock_opensandbox.runtime.execdproc import EXECD_PATH, ExecdProcess
from mock_opensandbox.runtime.paths import PathEscape
from mock_opensandbox.runtime.pid1 import IMPLICIT_ENTRYPOINT, SandboxNotRunning, SandboxTerminated
from mock_opensandbox.runtime.probe import isolation_note, probe_isolation
from mock_opensandbox.runtime.sandbox import SandboxRuntime

__all__ = [
    "SandboxRuntime",
    "PathEscape",
    "SandboxTerminated",
    "SandboxNotRunning",
    "probe_isolation",
    "isolation_note",
    "ISOLATION_NOTE",
    "SYSTEM_DIRS",
    "HOST_DIRS",
    "VIEW_DIRS",
    "BASE_DIRS",
    "DEFAULT_PATH",
    "IMPLICIT_ENTRYPOINT",
    "SANDBOX_CAPS",
    "SANDBOX_CAP_MASK",
    "ExecdProcess",
    "EXECD_PATH",
]


def __getattr__(name: str) -> Any:  # ISOLATION_NOTE is filled in by the first probe
    if name == "ISOLATION_NOTE":
        return _probe_mod.ISOLATION_NOTE
    raise AttributeError(name)
