"""``--config server.toml``: the real server's configuration file, mapped onto MockOptions.

opensandbox-server 1.1.1 reads its TOML through pydantic models (``opensandbox_server/config.py``: ``AppConfig`` and
one class per table). This module checks a file the way those models do, as far as the mock needs it (types with
pydantic's lax coercion, ranges, literals, the model validators that refuse a file), and maps what the mock can
honour onto MockOptions fields:

    fields, notes = options_from_toml("server.toml")   # or the TOML text itself
    opts = MockOptions().replace(**fields)

``notes`` has one line per key the file sets that the mock does not honour (and per key the server itself ignores:
its models keep pydantic's default ``extra="ignore"``, so an unknown table or key is not an error there either).
A file the server would refuse raises ConfigError (a ValueError) with one line naming the key. Standard library
only; ``tomllib`` needs Python 3.11+ (on 3.10 ConfigError says so).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import importlib
import ipaddress
import os
import re
from typing import Any, Sequence

SERVER = "opensandbox-server 1.1.1"
BOOLS = {"0": False, "off": False, "f": False, "false": False, "n": False, "no": False}
BOOLS.update({"1": True, "on": True, "t": True, "true": True, "y": True, "yes": True})
KEY_ID = re.compile(r"^[0-9a-z]$")
SERVER_DROP_CAPS = (  # config.py DockerConfig.drop_capabilities default (= runtime/caps.py SERVER_DROP_CAPS)
    "AUDIT_WRITE MKNOD NET_ADMIN NET_RAW SYS_ADMIN SYS_MODULE SYS_PTRACE SYS_TIME SYS_TTY_CONFIG".split()
)
# the mock's CLI dest of each MockOptions field the file can set, where the two names differ
FLAG_OF = {"allowed_host_paths": "allowed_host_path"}
# a config file for every MockOpenSandbox of a process that names none (a test suite run "against" a server.toml)
ENV = "OSB_MOCK_CONFIG"


class ConfigError(ValueError):
    """A file the server would refuse (or one that cannot be read): the message is one line."""


# -- the schema: table -> key -> (kind, argument) ------------------------------------------------------------------
# kinds: str, int (argument: (min, max)), float ((min, max, exclusive min)), bool, lit (the allowed values),
# strs (a list of strings), env (a table of strings), table (a nested table, its own keys not checked here)
def _i(lo: int | None = None, hi: int | None = None) -> tuple[str, Any]:
    return ("int", (lo, hi))


def _f(lo: float | None = None, strict: bool = False) -> tuple[str, Any]:
    return ("float", (lo, None, strict))


S, B, T, L, E = ("str", None), ("bool", None), ("table", None), ("strs", None), ("env", None)
SCHEMA: dict[str, dict[str, tuple[str, Any]]] = {
    "server": {
        "host": S, "port": _i(1, 65535), "timeout_keep_alive": _i(1), "limit_concurrency": _i(0),
        "timeout_graceful_shutdown": _i(1), "backlog": _i(1), "thread_pool_size": _i(1),
        "loop": ("lit", ("auto", "uvloop", "asyncio")), "http": ("lit", ("auto", "httptools", "h11")),
        "api_key": S, "eip": S, "max_sandbox_timeout_seconds": _i(60),
    },
    "proxy": {"resolve_internal": B},
    "log": {
        "level": S, "file_enabled": B, "file_path": S, "access_file_path": S, "file_max_bytes": _i(1),
        "file_backup_count": _i(0),
    },
    "tenants": {
        "provider": ("lit", ("file", "http")), "endpoint": S, "max_stale_seconds": _f(0),
        "timeout_seconds": _f(0, True), "auth_header": S, "auth_token": S,
    },
    "renew_intent": {"enabled": B, "min_interval_seconds": _i(1), "redis": T},
    "otel": {"enabled": B, "endpoint": S, "service_name": S, "export_interval_millis": _i(1000)},
    "runtime": {"type": ("lit", ("docker", "kubernetes")), "execd_image": S, "execd_run_as_init": B},
    "kubernetes": {
        "kubeconfig_path": S, "insecure_skip_tls_verify": B, "informer_resync_seconds": _i(1),
        "informer_watch_timeout_seconds": _i(1), "read_qps": _f(0), "read_burst": _i(0), "write_qps": _f(0),
        "write_burst": _i(0), "namespace": S, "fastpath_endpoint": S, "fastpath_timeout_seconds": _f(1),
        "fastpath_wait_ready_seconds": _f(1), "fastpath_resource_pool": S, "template_s3_publish_secret": S,
        "workload_provider": S, "batchsandbox_template_file": S, "sandbox_create_timeout_seconds": _i(1),
        "pool_acquisition_timeout_seconds": _i(1), "sandbox_create_poll_interval_seconds": _f(0, True),
        "execd_init_resources": T, "image_pull_policy": S,
    },
    "agent_sandbox": {"template_file": S, "shutdown_policy": ("lit", ("Delete", "Retain")), "ingress_enabled": B},
    "ingress": {"mode": ("lit", ("direct", "gateway")), "gateway": T, "secure_access": T},
    "docker": {
        "network_mode": S, "api_timeout": _i(1), "host_ip": S, "drop_capabilities": L, "apparmor_profile": S,
        "no_new_privileges": B, "seccomp_profile": S, "port_range_min": _i(1024, 65535),
        "port_range_max": _i(1024, 65535), "publish_host": S, "pids_limit": _i(1), "sandbox_env": E,
        "sandbox_binds": L,
    },
    "storage": {"allowed_host_paths": L, "volume_default_size": S, "ossfs_mount_root": S},
    "store": {"type": ("lit", ("sqlite", "postgresql")), "path": S, "postgresql": T},
    "egress": {
        "image": S, "mode": ("lit", ("dns", "dns+nft")), "disable_ipv6": B, "otlp_endpoint": S,
        "readiness_timeout_seconds": _f(0, True), "requests": E, "limits": E, "upstream_proxy": T,
    },
    "secure_runtime": {
        "type": ("lit", ("", "gvisor", "kata", "firecracker")), "docker_runtime": S, "k8s_runtime_class": S,
    },
}  # fmt: skip

# keys the mock does not honour, with why (a key not listed here and not mapped below gets the table's reason)
WHY_TABLE = {
    "server": "the mock serves with its own HTTP server",
    "proxy": "the mock's /proxy routes reach a sandbox's ports directly",
    "log": "the mock logs to stderr (--verbose)",
    "tenants": "the mock has one API key, no tenants",
    "renew_intent": "no renew on access in the mock",
    "otel": "the mock exports no metrics",
    "kubernetes": "no cluster in the mock",
    "agent_sandbox": "the mock answers as the BatchSandbox provider",
    "docker": "the mock runs no Docker daemon",
    "storage": "the mock keeps named volumes under --volumes-dir",
    "store": "the mock keeps sandboxes in memory",
    "egress": "the mock's sidecar is its own (--egress-bin for the real binary)",
    "secure_runtime": "the mock's sandboxes are its own namespaces, no OCI runtime",
}
WHY_KEY = {
    ("docker", "sandbox_env"): "no MockOptions setting injects environment into every sandbox",
    ("docker", "sandbox_binds"): "no MockOptions setting binds host paths into every sandbox",
    ("docker", "port_range_min"): "the mock publishes ports on ephemeral 127.0.0.1 ports",
    ("docker", "port_range_max"): "the mock publishes ports on ephemeral 127.0.0.1 ports",
    ("docker", "publish_host"): "the mock publishes sandbox ports on 127.0.0.1 only",
    ("docker", "drop_capabilities"): "the mock's capability set is the server's default (runtime/caps.py)",
    ("docker", "no_new_privileges"): "the mock always sets no_new_privs (runtime/caps.py)",
    ("docker", "network_mode"): "the mock has bridge and host only (--network)",
    ("runtime", "execd_run_as_init"): "the mock's execd is not the sandbox's PID 1",
    ("ingress", "gateway.address"): "the mock's gateway listens on an ephemeral 127.0.0.1 port",
    ("ingress", "gateway.route.mode"): "the mock's gateway routes by header or uri only (--gateway-route)",
}


def _fail(where: str, msg: str) -> ConfigError:
    return ConfigError("%s: %s (%s refuses this file)" % (where, msg, SERVER))


def _value(where: str, kind: str, arg: Any, v: Any) -> Any:
    """``v`` as pydantic's lax mode takes it for this kind (ConfigError in pydantic's words otherwise)."""
    if kind == "str":
        if not isinstance(v, str):
            raise _fail(where, "Input should be a valid string")
        return v
    if kind == "bool":
        if isinstance(v, bool):
            return v
        if isinstance(v, int) and v in (0, 1):
            return bool(v)
        if isinstance(v, str) and v.strip().lower() in BOOLS:
            return BOOLS[v.strip().lower()]
        raise _fail(where, "Input should be a valid boolean")
    if kind == "lit":
        if v not in arg:
            raise _fail(where, "Input should be %s" % " or ".join(repr(a) for a in arg))
        return v
    if kind == "int":
        n: Any = v
        if isinstance(v, str):
            try:
                n = int(v.strip())
            except ValueError:
                raise _fail(where, "Input should be a valid integer, unable to parse string as an integer") from None
        elif isinstance(v, float) and v.is_integer():
            n = int(v)
        if not isinstance(n, int):
            raise _fail(where, "Input should be a valid integer")
        n = int(n)
        lo, hi = arg
        if lo is not None and n < lo:
            raise _fail(where, "Input should be greater than or equal to %d" % lo)
        if hi is not None and n > hi:
            raise _fail(where, "Input should be less than or equal to %d" % hi)
        return n
    if kind == "float":
        x: Any = v
        if isinstance(v, str):
            try:
                x = float(v.strip())
            except ValueError:
                raise _fail(where, "Input should be a valid number, unable to parse string as a number") from None
        if not isinstance(x, (int, float)):
            raise _fail(where, "Input should be a valid number")
        lo, _, strict = arg
        if lo is not None and (x <= lo if strict else x < lo):
            raise _fail(where, "Input should be greater than %s%g" % ("" if strict else "or equal to ", lo))
        return float(x)
    if kind == "strs":
        if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
            raise _fail(where, "Input should be a valid list of strings")
        return list(v)
    if kind == "env":
        if not isinstance(v, dict) or not all(isinstance(s, str) for s in v.values()):
            raise _fail(where, "Input should be a valid dictionary of strings")
        return dict(v)
    if not isinstance(v, dict):  # table
        raise _fail(where, "Input should be a valid dictionary")
    return v


def load_toml(text_or_path: str | os.PathLike[str]) -> tuple[dict[str, Any], str]:
    """(the parsed TOML, a name for messages): a path that exists is read, any other string is TOML text."""
    try:
        tomllib: Any = importlib.import_module("tomllib")
    except ImportError:
        raise ConfigError("--config needs Python 3.11+ for tomllib (this is Python 3.10)") from None
    text, name = str(text_or_path), "<config>"
    if isinstance(text_or_path, os.PathLike) or ("\n" not in text and ("=" not in text or os.path.exists(text))):
        name = os.fspath(text_or_path)
        try:
            with open(name, encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError("config %s: cannot read it: %s" % (name, getattr(e, "strerror", None) or e)) from None
    try:
        return tomllib.loads(text), name
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("config %s: is not valid TOML: %s" % (name, e)) from None


def _secure_access(sa: dict[str, Any]) -> tuple[str, str]:
    """[ingress.secure_access] (SecureAccessConfig) as MockOptions' (keys "id=b64,...", active key)."""
    where = "ingress.secure_access"
    active = sa.get("active_key")
    if not isinstance(active, str) or not KEY_ID.match(active):
        raise _fail(where + ".active_key", "must be exactly one character [0-9a-z], got %r" % (active,))
    keys = sa.get("keys")
    if not isinstance(keys, list) or not keys:
        raise _fail(where + ".keys", "List should have at least 1 item")
    ring: dict[str, str] = {}
    for i, k in enumerate(keys):
        kid, b64 = (k.get("key_id"), k.get("key")) if isinstance(k, dict) else (None, None)
        if not isinstance(kid, str) or not KEY_ID.match(kid):
            raise _fail("%s.keys.%d.key_id" % (where, i), "key_id must be exactly one character [0-9a-z]")
        raw = None
        for cand in (b64, (b64 or "") + "=" * ((4 - len(b64 or "") % 4) % 4)) if isinstance(b64, str) else ():
            try:
                raw = base64.b64decode(cand, validate=True)
                break
            except (binascii.Error, ValueError):
                continue
        if not raw:
            raise _fail("%s.keys.%d.key" % (where, i), "key is not valid base64 (or decodes to no bytes)")
        if kid in ring:
            raise _fail(where, "duplicate secure_access key_id %r; each key_id must be unique" % kid)
        ring[kid] = base64.b64encode(raw).decode()
    if active not in ring:
        raise _fail(where, "active_key %r not found in secure_access.keys; available keys: %s" % (active, sorted(ring)))
    return ",".join("%s=%s" % kv for kv in ring.items()), active


def execd_mode_of(image: str) -> str | None:
    """The execd mode an execd image's tag names: ``latest`` (byte-exact framing, QUIRKS.md "latest framing"),
    the v1.0.x/v1.1.x releases and local-up's ``from-binary`` build of v1.0.19 (the recorded one) ``v1.1.0``;
    None for any other tag (the mock runs its default)."""
    tag = image.rsplit("/", 1)[-1].partition("@")[0]
    tag = tag.partition(":")[2] if ":" in tag else "latest"  # an image without a tag is :latest
    if tag == "latest":
        return "latest"
    if tag == "from-binary" or re.match(r"^v?1\.[01]\.\d+$", tag):
        return "v1.1.0"
    return None


def options_from_toml(text_or_path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[str]]:
    """(MockOptions fields, notes) of a server.toml: the fields of every setting the file maps to, the notes
    one line per key set that the mock does not honour. ConfigError (one line) for a file the server refuses."""
    data, name = load_toml(text_or_path)
    notes: list[str] = []
    try:
        return _map(_checked(data, notes), notes)
    except ConfigError as e:
        raise ConfigError("config %s: %s" % (name, e)) from None


def _checked(data: dict[str, Any], notes: list[str]) -> dict[str, dict[str, Any]]:
    """The tables and keys of the schema, each value as the server's model takes it; a note per other one."""
    cfg: dict[str, dict[str, Any]] = {}
    for table, body in data.items():
        if table not in SCHEMA:
            notes.append("config: [%s] is no table of %s; ignored (the server ignores it too)" % (table, SERVER))
            continue
        if not isinstance(body, dict):
            raise _fail(table, "Input should be a valid dictionary")
        cfg[table] = {}
        for key, v in body.items():
            spec = SCHEMA[table].get(key)
            if spec is None:
                notes.append(
                    "config: [%s] %s is no key of %s; ignored (the server ignores it too)" % (table, key, SERVER)
                )
                continue
            cfg[table][key] = _value("%s.%s" % (table, key), spec[0], spec[1], v)
    return cfg


def _note(notes: list[str], table: str, key: str, why: str = "") -> None:
    notes.append("config: [%s] %s not honoured by the mock (%s)" % (table, key, why or WHY_TABLE[table]))


def _docker(dk: dict[str, Any], out: dict[str, Any], take: Any) -> None:
    """[docker] (DockerConfig) onto ``out``; ``take(table, key, default)`` marks a key honoured."""
    out["pids_limit"] = take("docker", "pids_limit", 4096)
    net = dk.get("network_mode", "host")  # the server's default is host
    if net in ("bridge", "host"):
        take("docker", "network_mode")
        out["network"] = net
    pub = dk.get("publish_host")
    if pub is not None:
        try:
            ip = ipaddress.ip_address(pub.strip() or "0.0.0.0")
        except ValueError:
            raise _fail("docker.publish_host", "must be an IP address (got %r)" % pub) from None
        if not isinstance(ip, ipaddress.IPv4Address):
            raise _fail("docker.publish_host", "must be an IPv4 address (got %r)" % pub)
        if str(ip) == "127.0.0.1":
            take("docker", "publish_host")
    lo, hi = dk.get("port_range_min", 40000), dk.get("port_range_max", 60000)
    if lo >= hi or hi - lo < 100:
        raise _fail("docker", "port range %d-%d: min must be below max, at least 100 ports" % (lo, hi))
    if sorted(dk.get("drop_capabilities", SERVER_DROP_CAPS)) == sorted(SERVER_DROP_CAPS):
        take("docker", "drop_capabilities")
    if dk.get("no_new_privileges", True):
        take("docker", "no_new_privileges")
    for k in ("sandbox_env", "sandbox_binds"):
        if not dk.get(k, 1):  # empty: nothing to honour
            take("docker", k)


def _map(cfg: dict[str, dict[str, Any]], notes: list[str]) -> tuple[dict[str, Any], list[str]]:
    out: dict[str, Any] = {}
    used: set[tuple[str, str]] = set()  # (table, key) honoured

    def take(table: str, key: str, default: Any = None) -> Any:
        if key in cfg.get(table, {}):
            used.add((table, key))
            return cfg[table][key]
        return default

    # [runtime] (required) and the model validators of AppConfig
    rt = cfg.get("runtime")
    if rt is None:
        raise _fail("runtime", "Field required")
    for key in ("type", "execd_image"):
        if key not in rt:
            raise _fail("runtime." + key, "Field required")
    if not rt["execd_image"]:
        raise _fail("runtime.execd_image", "String should have at least 1 character")
    runtime = out["runtime"] = take("runtime", "type")
    image = take("runtime", "execd_image")
    mode = execd_mode_of(image)
    out["execd_mode"] = mode or "v1.1.0"
    if mode is None:
        notes.append(
            "config: [runtime] execd_image %r not honoured by the mock (no execd generation known for its tag; "
            "execd mode v1.1.0, --execd-mode to choose)" % image
        )
    ingress = cfg.get("ingress", {})
    gw_mode = ingress.get("mode", "direct")
    if runtime == "docker":
        for table in ("kubernetes", "agent_sandbox"):
            if table in cfg:
                raise _fail(table, "the %s block must be omitted when runtime.type = 'docker'" % table)
        if "ingress" in cfg and gw_mode != "direct":
            raise _fail("ingress.mode", "ingress.mode must be 'direct' when runtime.type = 'docker'")
        if cfg.get("secure_runtime", {}).get("type") == "firecracker":
            raise _fail("secure_runtime.type", "'firecracker' is only compatible with runtime.type='kubernetes'")
    # [server]
    host = take("server", "host")
    if host is not None:
        out["host"] = host
    port = take("server", "port")
    if port is not None:
        out["port"] = port
    key = take("server", "api_key")
    out["api_key"], out["insecure"] = (key, False) if key and key.strip() else (None, True)  # no key: no auth
    out["max_sandbox_timeout"] = take("server", "max_sandbox_timeout_seconds")  # omitted: no upper bound
    # [docker]: read by the Docker runtime only (a pod has its own network namespace, as the mock's bridge)
    dk = cfg.get("docker", {})
    if runtime == "docker":
        _docker(dk, out, take)
    else:
        for k in dk:
            _note(notes, "docker", k, "the kubernetes runtime does not read [docker]")
            used.add(("docker", k))
        _docker(dk, {}, lambda *_: None)  # the server validates DockerConfig whatever the runtime
    # [storage]
    out["allowed_host_paths"] = tuple(take("storage", "allowed_host_paths", ()))
    # [egress]: an image turns networkPolicy on in the given mode; no image, 400 to every networkPolicy
    eg = cfg.get("egress", {})
    if eg.get("upstream_proxy") is not None and eg.get("mode", "dns") != "dns+nft":
        raise _fail("egress.upstream_proxy", 'requires egress.mode = "dns+nft"')
    out["egress_mode"] = take("egress", "mode", "dns") if take("egress", "image") else "off"
    if "image" not in eg:
        used.add(("egress", "mode"))  # the mode of no sidecar: nothing to honour
    out["egress_ready_timeout"] = take("egress", "readiness_timeout_seconds", 30.0)
    # [ingress] and [kubernetes]
    if "secure_access" in ingress and gw_mode != "gateway":
        raise _fail("ingress", "secure_access block requires ingress.mode = 'gateway'")
    if gw_mode == "gateway" and "gateway" not in ingress:
        raise _fail("ingress", "gateway block must be provided when ingress.mode = 'gateway'")
    if gw_mode == "direct" and "gateway" in ingress:
        raise _fail("ingress", "gateway block must be omitted unless ingress.mode = 'gateway'")
    take("ingress", "mode")
    out["gateway"] = gw_mode == "gateway"
    if out["gateway"]:
        gw = ingress["gateway"]
        route = gw.get("route")
        rmode = route.get("mode") if isinstance(route, dict) else None
        if not isinstance(gw.get("address"), str) or not gw["address"]:
            raise _fail("ingress.gateway.address", "Field required")
        if "://" in gw["address"]:
            raise _fail("ingress.gateway.address", "must not include a scheme; clients choose http/https")
        if rmode not in ("wildcard", "header", "uri"):
            raise _fail("ingress.gateway.route.mode", "Input should be 'wildcard', 'header' or 'uri'")
        used.add(("ingress", "gateway"))
        _note(notes, "ingress", "gateway.address", WHY_KEY[("ingress", "gateway.address")])
        if rmode == "wildcard":
            _note(notes, "ingress", "gateway.route.mode", WHY_KEY[("ingress", "gateway.route.mode")] + ": header")
        out["gateway_route"] = "uri" if rmode == "uri" else "header"
    if "secure_access" in ingress:
        used.add(("ingress", "secure_access"))
        out["secure_access_keys"], out["secure_access_active_key"] = _secure_access(ingress["secure_access"])
    if runtime == "kubernetes":
        out["sandbox_create_timeout"] = float(take("kubernetes", "sandbox_create_timeout_seconds", 60))
        out["pool_acquisition_timeout"] = float(take("kubernetes", "pool_acquisition_timeout_seconds", 30))
    # one note per key set and not honoured
    for table, body in cfg.items():
        for k in body:
            if (table, k) not in used:
                _note(notes, table, k, WHY_KEY.get((table, k), ""))
    return out, notes


def explicit_flags(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> set[str]:
    """The dests of the options given on this command line (a flag given explicitly wins over the file)."""
    probe = argparse.ArgumentParser(add_help=False)
    for a in parser._actions:  # argparse has no public list of a parser's actions
        if a.option_strings and a.dest != "help":
            kwargs: dict[str, Any] = {"dest": a.dest, "default": argparse.SUPPRESS}
            kwargs["action"] = "store_true" if a.nargs == 0 else "append"
            probe.add_argument(*a.option_strings, **kwargs)
    known, _ = probe.parse_known_args(argv)
    return set(vars(known))


def merge(options: Any, fields: dict[str, Any], explicit: set[str]) -> Any:
    """``options`` (MockOptions from the command line) with the file's ``fields``, except those whose flag
    was given explicitly."""
    keep = {"insecure", "api_key"} if explicit & {"insecure", "api_key"} else set()
    return options.replace(**{f: v for f, v in fields.items() if FLAG_OF.get(f, f) not in explicit and f not in keep})


def configured(options: Any, given: Any, changes: dict[str, Any]) -> tuple[Any, list[str]]:
    """(MockOptions, notes): ``options`` over the config file it names (``options.config``; None: $OSB_MOCK_CONFIG).

    A setting given explicitly wins over the file: a keyword in ``changes``, or a field of the ``given`` MockOptions
    that differs from MockOptions' default. A file named by the environment never sets a mock's identity, the
    listener's host and port and the API key: every mock of the process keeps its own (an ephemeral port, a key
    generated per instance), as separate servers would. No file: ``options`` unchanged, no notes."""
    path = os.environ.get(ENV, "") if options.config is None else options.config
    if not path:
        return options, []
    fields, notes = options_from_toml(path)
    if not options.config:
        for f in ("host", "port", "api_key", "insecure"):
            fields.pop(f, None)
    defaults = type(options)()
    explicit = set(changes) | {f for f in fields if given is not None and getattr(given, f) != getattr(defaults, f)}
    return merge(options, fields, {FLAG_OF.get(f, f) for f in explicit}), notes
