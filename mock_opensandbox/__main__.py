"""``python -m mock_opensandbox``: run the mock OpenSandbox server in the foreground.

Prints its base URL (and the API key when it generated one), stops cleanly on Ctrl-C / SIGTERM:
every sandbox process is killed and the temporary root is removed (unless --root was given).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
from typing import Sequence

from mock_opensandbox.options import EXECD_MODES, GATEWAY_ROUTES, RUNTIMES, TIMINGS, MockOptions
from mock_opensandbox.runtime import isolation_note, netns, optional
from mock_opensandbox.runtime.cgroups import host as cgroup_host
from mock_opensandbox.runtime.jupyterenv import HINT
from mock_opensandbox.server import MockOpenSandbox
from mock_opensandbox.server_config import ConfigError, explicit_flags, merge, options_from_toml
from mock_opensandbox.workbench.cli import FAULT_ARG_HELP, parse_args, run_foreground


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m mock_opensandbox",
        description="Offline mock OpenSandbox server (lifecycle API + one execd per sandbox).",
    )
    p.add_argument(
        "--config",
        default=None,
        metavar="SERVER_TOML",
        help="read an opensandbox-server 1.1.1 config file and honour what applies (docs/MOCK.md, Server "
        "configuration file); a flag given explicitly wins over the file; keys not honoured are named at start-up "
        "(needs Python 3.11+)",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1; anything else warns); given explicitly, wins over --config's "
        "[server] host",
    )
    p.add_argument(
        "--port",
        type=int,
        default=8080,
        help="lifecycle port (default 8080; 0 = any free port); given explicitly, wins over --config's [server] port",
    )
    p.add_argument(
        "--api-key",
        default=None,
        help="required OPEN-SANDBOX-API-KEY value (default: a random key generated and printed)",
    )
    p.add_argument("--insecure", action="store_true", help="no API key at all (only when --api-key is not given)")
    p.add_argument(
        "--execd-mode",
        choices=EXECD_MODES,
        default="v1.1.0",
        help="execd behaviour: v1.1.0 (as recorded) or latest (byte-exact output, argv)",
    )
    p.add_argument("--execd-token", default=None, help="execd access token (X-EXECD-ACCESS-TOKEN)")
    p.add_argument(
        "--execd-bin",
        default=None,
        help="run this execd binary as one process per sandbox instead of the in-process execd",
    )
    p.add_argument("--gateway", action="store_true", help="endpoints carry routing headers clients must replay")
    p.add_argument(
        "--gateway-route",
        choices=GATEWAY_ROUTES,
        default="header",
        help="with --runtime kubernetes --gateway: the gateway's route mode, header (OpenSandbox-Ingress-To) or uri "
        "(/<id>/<port>/...) (QUIRKS.md, Kubernetes runtime: gateway and secure access)",
    )
    p.add_argument(
        "--secure-access-keys",
        default=None,
        metavar="ID=BASE64[,...]",
        help="with --runtime kubernetes --gateway: [ingress.secure_access] signing keys (default: one random key a)",
    )
    p.add_argument("--secure-access-active-key", default="", metavar="ID", help="the signing key (default: the first)")
    p.add_argument(
        "--timing",
        choices=TIMINGS,
        default="faithful",
        help="faithful (default): a real server's delays; fast: the ones no client depends on set to 0 "
        "(--execd-start-delay and --execd-close-delay, whatever they say; the output read every 5 ms, not 100; "
        "docs/MOCK.md, Timing)",
    )
    p.add_argument(
        "--runtime",
        choices=RUNTIMES,
        default="docker",
        help="the server's runtime.type: docker (default) or kubernetes (the /v1/pools API, extensions.poolRef "
        "creates, the sandbox lifecycle as the Kubernetes service answers it; QUIRKS.md)",
    )
    p.add_argument(
        "--sandbox-create-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="with --runtime kubernetes: [kubernetes] sandbox_create_timeout_seconds, how long a create waits for a "
        "pod that is not Ready (fault kind pod, docs/FAULTS.md) before 504 KUBERNETES::POD_READY_TIMEOUT",
    )
    p.add_argument(
        "--pool-acquisition-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="with --runtime kubernetes: [kubernetes] pool_acquisition_timeout_seconds, how long a create waits while "
        "Pool capacity is exhausted (fault kind pod, pod capacity) before 429 KUBERNETES::POOL_CAPACITY_EXHAUSTED",
    )
    numbers: tuple[tuple[str, type, float, str, str], ...] = (  # (flag, type, default, metavar, help)
        (
            "--execd-start-delay",
            float,
            0.2,
            "SECONDS",
            "a new sandbox's execd refuses connections this long although "
            "the create already says Running, like a real server (default 0.2; 0 = at once)",
        ),
        (
            "--max-sandbox-timeout",
            int,
            86400,
            "SECONDS",
            "refuse create timeouts above this (server "
            "max_sandbox_timeout_seconds; default 86400 as in the server's example config; 0 = no limit)",
        ),
        (
            "--pids-limit",
            int,
            4096,
            "N",
            "processes (threads) per sandbox, through the pids cgroup (server [docker] "
            "pids_limit; default 4096; 0 = no limit)",
        ),
        (
            "--execd-close-delay",
            float,
            1.0,
            "SECONDS",
            "execd keeps a finished command's stream open this long, like "
            "the real one (~1 s; default 1.0; 0 = close at once)",
        ),
    )
    p.add_argument(
        "--code-context-wait",
        type=float,
        default=None,
        metavar="SECONDS",
        help="bound the retries of a code context's kernel start (an unknown language) to this long, then 500 "
        "with the last error (default: until the client leaves, like execd's kernelWaitingBackoff)",
    )
    p.add_argument(
        "--code-unknown-language-wait",
        type=float,
        default=None,
        metavar="SECONDS",
        help="once the sandbox's Jupyter server has no kernel spec of a context's language, retry this long at most, "
        "then 500 (default: as --code-context-wait; --timing fast: 0)",
    )
    for flag, kind, default, metavar, text in numbers:
        p.add_argument(flag, type=kind, default=default, metavar=metavar, help=text)
    p.add_argument(
        "--network",
        choices=("bridge", "host"),
        default="bridge",
        help="bridge (default, the server's example config): each sandbox has its own network "
        "namespace, ports published through relays on 127.0.0.1, outbound traffic through "
        "slirp4netns when installed; host: sandboxes share the host's network",
    )
    p.add_argument(
        "--egress-mode",
        choices=("off", "dns", "dns+nft"),
        default=None,
        help="networkPolicy as a server with an egress image runs it (egress/): dns (default, the "
        "server's example config; off with the reason in the banner where this host cannot), "
        "dns+nft (also drops connections to addresses the policy does not allow; needs nft "
        "or iptables), off (no egress image: 400 to every networkPolicy)",
    )
    p.add_argument(
        "--egress-dns-upstream",
        default=None,
        metavar="IP[:PORT]",
        help="where the sandboxes' policy resolvers forward allowed names (default: the host's "
        "first non-loopback nameserver)",
    )
    p.add_argument(
        "--egress-ready-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long a create waits for a sidecar that refuses its policy before the server's 500 "
        "(default 30, as the server; tests may shorten it)",
    )
    p.add_argument(
        "--egress-bin",
        default=None,
        metavar="PATH",
        help="run this real egress sidecar binary (e.g. ../shared/opensandbox/egress/egress) in each "
        "policy sandbox's network namespace instead of the mock's resolver and policy API (root, "
        "iptables; nft for dns+nft)",
    )
    p.add_argument("--root", default=None, help="directory for sandbox roots (default: a temp dir removed at exit)")
    p.add_argument(
        "--volumes-dir",
        default=None,
        metavar="DIR",
        help="where named volumes (pvc) live; they outlive sandboxes and go at POST /__mock__/reset "
        "unless keep_volumes (default: <root>/volumes)",
    )
    p.add_argument(
        "--allowed-host-path",
        action="append",
        default=[],
        metavar="PREFIX",
        help="allow host binds (volumes[].host) under this absolute path; repeatable (server "
        "[storage] allowed_host_paths; default: none, host binds are refused)",
    )
    p.add_argument(
        "--no",
        action="append",
        default=[],
        metavar="TOOL",
        help="behave as without this optional tool (slirp4netns, cgroups, userns, ...: "
        "mock_opensandbox/runtime/optional.py); repeatable; adds to $OSB_MOCK_NO",
    )
    p.add_argument("--verbose", action="store_true", help="log every request to stderr")
    p.add_argument("--fault", action="append", default=[], metavar="JSON", help=FAULT_ARG_HELP)
    p.add_argument(
        "--image-dir",
        default=None,
        metavar="DIR",
        help="resolve image.uri through the image store: OCI layouts and docker-save tarballs in DIR, "
        "then a local Docker/Podman, then a registry pull (docs/IMAGES.md); an image none of them "
        "has fails the create like the server (500 DOCKER::SANDBOX_IMAGE_PULL_FAILED)",
    )
    p.add_argument(
        "--image-cache",
        default=None,
        metavar="DIR",
        help="where unpacked layers are kept across runs (default ~/.cache/mock-opensandbox/images)",
    )
    p.add_argument(
        "--jupyter-env",
        default=None,
        metavar="DIR",
        help="a virtualenv with Jupyter and kernels (make one: python -m mock_opensandbox.runtime.jupyterenv DIR): "
        "bound read-only into every sandbox of a code-interpreter image, Jupyter started inside it "
        "on 44771 like the image's entrypoint, so /code runs code (mock_opensandbox/runtime/jupyterenv.py)",
    )
    return p


def raise_nofile() -> int:
    """RLIMIT_NOFILE's soft limit raised to its hard limit (each sandbox holds a few fds in the mock:
    pipes, its execd listener, relay sockets; the common soft default 1024 ends a few hundred
    sandboxes early); the soft limit in force after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        want = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass
    return soft


def options_from_args(args: argparse.Namespace) -> MockOptions:
    """The command line's MockOptions (the pytest fixtures build theirs in pytest_opensandbox_mock.py)."""
    return MockOptions(
        host=args.host,
        port=args.port,
        api_key=args.api_key,
        insecure=args.insecure,
        execd_mode=args.execd_mode,
        execd_token=args.execd_token,
        gateway=args.gateway,
        gateway_route=args.gateway_route,
        secure_access_keys=args.secure_access_keys,
        secure_access_active_key=args.secure_access_active_key,
        root=args.root,
        execd_bin=args.execd_bin,
        verbose=args.verbose,
        execd_start_delay=args.execd_start_delay,
        max_sandbox_timeout=args.max_sandbox_timeout,
        network=args.network,
        volumes_dir=args.volumes_dir,
        allowed_host_paths=tuple(args.allowed_host_path),
        pids_limit=args.pids_limit,
        execd_close_delay=args.execd_close_delay,
        code_context_wait=args.code_context_wait,
        code_unknown_language_wait=args.code_unknown_language_wait,
        timing=args.timing,
        runtime=args.runtime,
        sandbox_create_timeout=args.sandbox_create_timeout,
        pool_acquisition_timeout=args.pool_acquisition_timeout,
        image_dir=args.image_dir,
        image_cache=args.image_cache,
        egress_mode=args.egress_mode,
        egress_dns_upstream=args.egress_dns_upstream,
        egress_ready_timeout=args.egress_ready_timeout,
        jupyter_env=args.jupyter_env,
        egress_bin=args.egress_bin,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(build_parser(), argv)
    if args is None:
        return 2
    if args.no:
        os.environ[optional.ENV] = ",".join([os.environ.get(optional.ENV, "")] + args.no).strip(",")
    nofile = raise_nofile()
    opts, notes = options_from_args(args), list[str]()
    try:
        if args.config:
            fields, notes = options_from_toml(args.config)
            # config="": applied here, with the command line's own rule for explicit flags ($OSB_MOCK_CONFIG unread)
            opts = merge(opts, fields, explicit_flags(build_parser(), argv)).replace(config="")
        osb = MockOpenSandbox(opts)
        notes = notes or osb.config_notes  # $OSB_MOCK_CONFIG's, when no --config
    except ConfigError as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    except ValueError as e:
        print("error: %s" % e, file=sys.stderr)
        return 2

    def banner() -> None:
        print("Mock OpenSandbox listening on %s" % osb.base_url, flush=True)
        for note in notes:  # --config: one line per key set that the mock does not honour
            print(note, flush=True)
        if osb.generated_api_key:
            print("API key (generated for this run, header OPEN-SANDBOX-API-KEY): %s" % osb.api_key, flush=True)
        elif osb.api_key is None:
            print("No API key required (--insecure).", flush=True)
        if osb.provisioner is not None:
            iso = osb.provisioner.isolation()
            print("Sandbox isolation: %s" % iso, flush=True)
            if iso.startswith("isolated"):  # what is and is not contained (README, "Isolation")
                print("  " + isolation_note(), flush=True)

            cg = cgroup_host()
            print(
                "Resource limits: %s" % (cg.note() or "memory, cpu and pids through cgroup v%d" % cg.version),
                flush=True,
            )

            if osb.network != "host" and not netns.find_stack()[0]:  # what each missing tool would add
                print(
                    "Optional tool slirp4netns: %s; it adds %s"
                    % (optional.why_absent("slirp4netns"), optional.TOOLS["slirp4netns"][0]),
                    flush=True,
                )
            if cg.note():
                print(
                    "Optional: cgroup delegation (%s) adds %s"
                    % (optional.install_hint("cgroups"), optional.TOOLS["cgroups"][0]),
                    flush=True,
                )
        print(
            "Egress (networkPolicy): %s"
            % (
                "off: %s" % (osb.egress_note or "no egress image (--egress-mode off)")
                if osb.egress_mode == "off"
                else "%s, DNS upstream %s:%d%s"
                % (
                    osb.egress_mode,
                    osb.egress_upstream[0],
                    osb.egress_upstream[1],
                    ", the real sidecar %s" % osb.egress_bin if osb.egress_bin else "",
                )
            ),
            flush=True,
        )
        if osb.jupyter_env:
            print("Code interpreter: Jupyter from %s in every code-interpreter sandbox" % osb.jupyter_env, flush=True)
        else:
            print(HINT[0].upper() + HINT[1:], flush=True)
        for rule in osb.faults.rules:
            print("Fault rule %s: %s" % (rule.id, json.dumps(rule.to_json(), sort_keys=True)), flush=True)
        o = osb.options
        if o.runtime == "kubernetes":
            print("Runtime: kubernetes (the /v1/pools API and extensions.poolRef creates; QUIRKS.md)", flush=True)
            if osb.ingress is not None:
                print("Gateway: http://%s (route %s)" % (osb.ingress.address, osb.ingress.route), flush=True)
        print(
            "Timing: %s (execd start delay %gs, stream close delay %gs, output read every %gs, unknown code language %s)"
            % (
                o.timing,
                o.execd_start_delay,
                o.execd_close_delay,
                o.execd_tail_interval,
                "retried" if o.code_unknown_language_wait is None else "%gs" % o.code_unknown_language_wait,
            ),
            flush=True,
        )
        print("Open files: up to %d (RLIMIT_NOFILE)." % nofile, flush=True)
        print("Sandbox roots under %s. Press Ctrl-C to stop." % osb.root, flush=True)

    return run_foreground(osb, args.fault, osb.options.host, osb.options.port, banner)


if __name__ == "__main__":
    sys.exit(main())
