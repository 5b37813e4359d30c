"""The optional tools: what each adds, how to install it, and the switch that turns it off.

``OSB_MOCK_NO=slirp4netns,chromium,...`` (comma or space separated; ``all`` = every one) makes the
mock and the test tiers behave as on a machine without those tools, for one mock (``python -m
mock_opensandbox --no TOOL``) or one test run (``OSB_MOCK_NO=all make test``). Read at each call,
so a test may switch a tool off for one mock (monkeypatch the variable). Standard library only.
"""

from __future__ import annotations

import os
import shutil

ENV = "OSB_MOCK_NO"

# name -> (what it adds, what to install); "pasta" is an alias of "slirp4netns" (the mock uses only
# slirp4netns: see runtime/netns.py find_stack)
TOOLS: dict[str, tuple[str, str]] = {
    "slirp4netns": ("outbound traffic from a sandbox (eth0 and a default route)", "apt-get install slirp4netns"),
    "chromium": (
        "the dashboard's headless-browser test (tiers/t1/workbench/test_workbench_dashboard.py)",
        "apt-get install chromium",
    ),
    "docker-registry": (
        "the image-store tests against a real registry (tiers/t1/images/test_images_registry.py)",
        "apt-get install docker-registry",
    ),
    "execd": (
        "the real execd beside the checkout (../shared/opensandbox/execd): the differential tier, t3 "
        "and the real-execd tests",
        "put the execd binary at ../shared/opensandbox/execd or set OSB_EXECD_BIN",
    ),
    "cgroups": (
        "resource limits memory/cpu/pids per sandbox",
        "run as root, or in a delegated cgroup v2 subtree (systemd-run --user --scope -p Delegate=yes)",
    ),
    "userns": (
        "sandbox isolation for a non-root user (root needs no user namespace)",
        "sysctl -w kernel.unprivileged_userns_clone=1 (or run as root)",
    ),
}
ALIASES = {
    "pasta": "slirp4netns",
    "netstack": "slirp4netns",
    "registry": "docker-registry",
    "cgroup": "cgroups",
    "user-namespaces": "userns",
}


def switched_off() -> set[str]:
    """The tools OSB_MOCK_NO turns off (unknown words are ignored)."""
    words = os.environ.get(ENV, "").replace(",", " ").lower().split()
    if "all" in words:
        return set(TOOLS)
    return {ALIASES.get(w, w) for w in words} & set(TOOLS)


def off(tool: str) -> bool:
    """OSB_MOCK_NO turns this tool off."""
    return ALIASES.get(tool, tool) in switched_off()


def which(tool: str, *names: str) -> str | None:
    """shutil.which of the first of names (default: the tool's own name) found, None when the tool is
    switched off."""
    if off(tool):
        return None
    for name in names or (tool,):
        path = shutil.which(name)
        if path:
            return path
    return None


def why_absent(tool: str) -> str:
    """ "switched off by OSB_MOCK_NO" or "not installed (<install command>)"."""
    if off(tool):
        return "switched off by %s" % ENV
    return "not installed (%s)" % TOOLS[ALIASES.get(tool, tool)][1]


def install_hint(tool: str) -> str:
    return TOOLS[ALIASES.get(tool, tool)][1]
