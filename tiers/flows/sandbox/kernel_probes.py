"""Kernel interfaces Docker's default seccomp profile and capability set close, probed from inside a
sandbox by one bounded command: the same probe and the same expected answers on the mock
(tiers/t1/sandbox/test_seccomp.py) and on a real Docker container behind the live server
(tiers/t4/sandbox/test_live_kernel.py). Each line is ``name result errno`` (a raw syscall through ctypes) or
``name exit-status stderr`` (a command), so the two sides compare line by line.
"""

from __future__ import annotations

from typing import Dict, Tuple

# add_key / keyctl / request_key (keyrings), mount, umount2, bpf, perf_event_open, unshare(CLONE_NEWUSER),
# ptrace(PTRACE_ATTACH) of PID 1 and kexec_load, each as a raw syscall; then `unshare -U true` and
# `unshare -m true` as commands. x86_64 and aarch64 numbers.
PROBE = r"""
import ctypes, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
nr = {"x86_64": dict(add_key=248, keyctl=250, request_key=249, mount=165, umount2=166, bpf=321,
                     perf_event_open=298, unshare=272, ptrace=101, kexec_load=246),
      "aarch64": dict(add_key=217, keyctl=219, request_key=218, mount=40, umount2=39, bpf=280,
                      perf_event_open=241, unshare=97, ptrace=117, kexec_load=104)}[os.uname().machine]
calls = [("add_key", (b"user", b"osb-probe", b"v", 1, -3)), ("keyctl", (0, -3, 0)),
         ("request_key", (b"user", b"osb-probe", None, 0)), ("mount", (b"none", b"/tmp", b"tmpfs", 0, None)),
         ("umount2", (b"/proc", 2)), ("bpf", (0, None, 0)), ("perf_event_open", (None, 0, -1, -1, 0)),
         ("unshare", (0x10000000,)), ("ptrace", (16, 1, None, None)), ("kexec_load", (0, 0, None, 0))]
for name, args in calls:
    ctypes.set_errno(0)
    r = libc.syscall(nr[name], *args)
    print(name, r, ctypes.get_errno() if r < 0 else 0, flush=True)
    if name == "ptrace" and r == 0:
        libc.syscall(nr["ptrace"], 17, 1, None, None)  # PTRACE_DETACH
for argv in (["unshare", "-U", "true"], ["unshare", "-m", "true"]):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        print("cmd:" + " ".join(argv), p.returncode, p.stderr.strip().replace(" ", "_") or "-", flush=True)
    except FileNotFoundError:
        print("cmd:" + " ".join(argv), "missing", "-", flush=True)
"""

# What a container of the default profile answers (local/python:3-slim behind the live server 1.1.1 on
# Docker 20.10.24, its default seccomp profile and capability set, measured by tiers/t4/sandbox/test_live_kernel.py;
# QUIRKS.md "seccomp"): (result, errno) per syscall, (exit status, stderr with "_" for " ") per command.
EXPECTED: Dict[str, Tuple[str, str]] = {
    "add_key": ("-1", "1"),
    "keyctl": ("-1", "1"),
    "request_key": ("-1", "1"),
    "mount": ("-1", "1"),
    "umount2": ("-1", "1"),
    "bpf": ("-1", "1"),
    "perf_event_open": ("-1", "1"),
    "unshare": ("-1", "1"),
    "ptrace": ("0", "0"),  # PTRACE_ATTACH of PID 1 succeeds: same uid, its capabilities a subset, no Yama
    "kexec_load": ("-1", "1"),
    "cmd:unshare -U true": ("1", "unshare:_unshare_failed:_Operation_not_permitted"),
    "cmd:unshare -m true": ("1", "unshare:_unshare_failed:_Operation_not_permitted"),
}

COMMAND = "python3 -I -S -c '%s'" % PROBE.replace("'", "'\"'\"'")


def parse(out: str) -> Dict[str, Tuple[str, str]]:
    got: Dict[str, Tuple[str, str]] = {}
    for line in out.splitlines():
        parts = line.rsplit(" ", 2)
        if len(parts) == 3:
            got[parts[0]] = (parts[1], parts[2])
    return got


def check(out: str) -> Dict[str, Tuple[str, str]]:
    """The probe's answers; asserts each is what the container answers."""
    got = parse(out)
    diff = {k: (got.get(k), v) for k, v in EXPECTED.items() if got.get(k) != v}
    assert not diff, "got vs container: %r\n%s" % (diff, out)
    return got
