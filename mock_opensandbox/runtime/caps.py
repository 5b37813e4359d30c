"""The capability set of every sandbox process (data; QUIRKS.md, "Containment", has the row).

A sandbox of the real server (opensandbox-server 1.1.1, runtime docker) is a Docker container
created with ``cap_drop = DockerConfig.drop_capabilities`` and, since ``no_new_privileges``
defaults to true, ``security_opt = ["no-new-privileges=true"]`` (server ``config.py``
``DockerConfig``; ``services/docker/container_ops.py`` ``_base_host_config_kwargs``). Docker
starts from its default set (moby ``oci/caps/defaults.go``, Engine 20.10 as recorded in
fixtures/README.md) and gives a root process that set as bounding, permitted and
effective set; inheritable is empty since Engine 20.10.14 (CVE-2022-24769) and ambient is empty.
Result, as the real sandbox prints it: ``CapEff: 00000000800405fb``.
"""

from __future__ import annotations

# moby oci/caps/defaults.go DefaultCapabilities (Docker Engine 20.10)
DOCKER_DEFAULT_CAPS = (
    "CHOWN",
    "DAC_OVERRIDE",
    "FSETID",
    "FOWNER",
    "MKNOD",
    "NET_RAW",
    "SETGID",
    "SETUID",
    "SETFCAP",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
    "KILL",
    "AUDIT_WRITE",
)
# opensandbox-server 1.1.1 config.py DockerConfig.drop_capabilities (default)
SERVER_DROP_CAPS = (
    "AUDIT_WRITE",
    "MKNOD",
    "NET_ADMIN",
    "NET_RAW",
    "SYS_ADMIN",
    "SYS_MODULE",
    "SYS_PTRACE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
)
# opensandbox-server 1.1.1 config.py DockerConfig.no_new_privileges (default)
NO_NEW_PRIVILEGES = True

# linux/capability.h
CAP_NUMBERS = {
    "CHOWN": 0,
    "DAC_OVERRIDE": 1,
    "DAC_READ_SEARCH": 2,
    "FOWNER": 3,
    "FSETID": 4,
    "KILL": 5,
    "SETGID": 6,
    "SETUID": 7,
    "SETPCAP": 8,
    "LINUX_IMMUTABLE": 9,
    "NET_BIND_SERVICE": 10,
    "NET_BROADCAST": 11,
    "NET_ADMIN": 12,
    "NET_RAW": 13,
    "IPC_LOCK": 14,
    "IPC_OWNER": 15,
    "SYS_MODULE": 16,
    "SYS_RAWIO": 17,
    "SYS_CHROOT": 18,
    "SYS_PTRACE": 19,
    "SYS_PACCT": 20,
    "SYS_ADMIN": 21,
    "SYS_BOOT": 22,
    "SYS_NICE": 23,
    "SYS_RESOURCE": 24,
    "SYS_TIME": 25,
    "SYS_TTY_CONFIG": 26,
    "MKNOD": 27,
    "LEASE": 28,
    "AUDIT_WRITE": 29,
    "AUDIT_CONTROL": 30,
    "SETFCAP": 31,
    "MAC_OVERRIDE": 32,
    "MAC_ADMIN": 33,
    "SYSLOG": 34,
    "WAKE_ALARM": 35,
    "BLOCK_SUSPEND": 36,
    "AUDIT_READ": 37,
    "PERFMON": 38,
    "BPF": 39,
    "CHECKPOINT_RESTORE": 40,
}

# THE sandbox capability set: Docker's defaults minus the server's drop list
SANDBOX_CAPS: tuple[str, ...] = tuple(
    sorted((c for c in DOCKER_DEFAULT_CAPS if c not in SERVER_DROP_CAPS), key=CAP_NUMBERS.__getitem__)
)
SANDBOX_CAP_MASK: int = sum(1 << CAP_NUMBERS[c] for c in SANDBOX_CAPS)
# what `grep Cap /proc/self/status` prints in a sandbox of the real server (fixtures/21_containment_probes.json)
RECORDED_CAP_EFF = 0x00000000800405FB
assert SANDBOX_CAP_MASK == RECORDED_CAP_EFF, "capability data out of step with the recorded value"

# the /proc/<pid>/status lines a sandbox process shows
EXPECTED_STATUS = {
    "CapInh": 0,
    "CapPrm": SANDBOX_CAP_MASK,
    "CapEff": SANDBOX_CAP_MASK,
    "CapBnd": SANDBOX_CAP_MASK,
    "CapAmb": 0,
    "NoNewPrivs": 1 if NO_NEW_PRIVILEGES else 0,
}


def setpriv_bounding_arg() -> str:
    """util-linux setpriv's --bounding-set value for the sandbox set ("-all,+chown,...")."""
    return ",".join(["-all"] + ["+" + c.lower() for c in SANDBOX_CAPS])


def setpriv_options() -> list[str]:
    """util-linux setpriv options that drop to the sandbox set (bounding set; inheritable empty; the
    permitted and effective sets follow from the bounding set at exec, uid 0) and set no_new_privs."""
    opts = ["--bounding-set=" + setpriv_bounding_arg(), "--inh-caps=-all"]
    if NO_NEW_PRIVILEGES:
        opts.append("--no-new-privs")
    return opts
