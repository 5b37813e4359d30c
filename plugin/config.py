"""Configuration: the manifest's [config.fields] as typed values (``Config``), with the errors a
bad setting gets. Values arrive raw from initialize.config (provider options are strings:
"true", "60"); the host's core settings (http_timeout) from initialize.core. Every secret field is
registered with ``errors.SECRETS`` as soon as it is seen.
"""

from __future__ import annotations

import json

from errors import SECRETS, EppError
from params import as_text, is_number

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DEFAULT_BASE_URL = "http://127.0.0.1:8080"
DEFAULT_ENTRYPOINT = "tail -f /dev/null"
CODE_INTERPRETER_ENTRYPOINT = ["/opt/code-interpreter/code-interpreter.sh"]  # fixtures/27_code_interpreter.json
DEFAULTS: dict[str, Any] = {
    "base_url": DEFAULT_BASE_URL,
    "api_key": "",
    "domain": "",
    "protocol": "",
    "use_server_proxy": False,
    "default_image": "python:3.12-slim",
    "image_aliases": "code=opensandbox/code-interpreter:v1.1.0",
    "entrypoint": DEFAULT_ENTRYPOINT,
    "ready_timeout": 60,
    "registry_username": "",
    "registry_password": "",
    "network_policy": "",
    "platform": "",
    "secure_access": False,
    "pool": "",
    "execd_access_token": "",
    "volumes": "",
}
SECRET_FIELDS = ("api_key", "registry_password", "execd_access_token")
# Per-create `options` that may override the configuration for one sandbox (plugin/README.md). Other keys
# (base_url, api_key, ...) already reached this process through initialize.config and are ignored.
CREATE_OPTIONS = (
    "default_image",
    "image_aliases",
    "entrypoint",
    "ready_timeout",
    "registry_username",
    "registry_password",
    "network_policy",
    "platform",
    "secure_access",
    "pool",
    "volumes",
)
_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}


class Config:
    """Coerced configuration. Values arrive raw: provider options are strings ("true", "60")."""

    def __init__(self, raw: dict[str, Any], core: dict[str, Any] | None = None):
        self.raw = {k: v for k, v in (raw or {}).items() if v is not None}
        SECRETS.add(*(str(self.raw.get(k) or "") for k in SECRET_FIELDS))  # before anything can fail
        merged = {**DEFAULTS, **self.raw}
        core = core or {}
        self.api_key = as_text(merged["api_key"])
        self.protocol = as_text(merged["protocol"]).lower().removesuffix("://")
        if self.protocol not in ("", "http", "https"):
            raise config_error("protocol", "must be http or https")
        self.server = _server_url(as_text(merged["base_url"]), as_text(merged["domain"]), self.protocol)
        self.use_server_proxy = _bool("use_server_proxy", merged["use_server_proxy"])
        self.default_image = as_text(merged["default_image"]) or DEFAULTS["default_image"]
        self.image_aliases = _aliases(merged["image_aliases"])
        self.entrypoint = _entrypoint(merged["entrypoint"])
        self.entrypoint_is_default = self.entrypoint == DEFAULT_ENTRYPOINT.split()
        self.ready_timeout = _int("ready_timeout", merged["ready_timeout"], 1, 3600)
        self.registry_username = as_text(merged["registry_username"])
        self.registry_password = as_text(merged["registry_password"])
        self.network_policy = _network_policy(merged["network_policy"])
        self.volumes = _volumes(merged["volumes"])
        self.platform = _platform(merged["platform"])
        self.secure_access = _bool("secure_access", merged["secure_access"])
        self.pool = as_text(merged["pool"])
        self.execd_access_token = as_text(merged["execd_access_token"])
        try:
            self.http_timeout = max(1.0, float(core.get("http_timeout") or 30.0))
        except (TypeError, ValueError):
            self.http_timeout = 30.0

    def with_options(self, options: object) -> Config:
        if not isinstance(options, dict) or not options:
            return self
        picked = {k: v for k, v in options.items() if k in CREATE_OPTIONS and v is not None}
        if not picked:
            return self
        clone = Config({**self.raw, **picked})
        clone.http_timeout = self.http_timeout
        return clone

    @property
    def secrets(self) -> list[str]:
        return [getattr(self, k) for k in SECRET_FIELDS if getattr(self, k, "")]


def _bool(field: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = as_text(value).lower()
    if text in _TRUE:
        return True
    if text in _FALSE or text == "":
        return False if text else bool(DEFAULTS.get(field))
    raise config_error(field, "must be true or false")


def _int(field: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool):
        raise config_error(field, "must be a whole number")
    try:
        number = float(value) if not isinstance(value, int) else value
    except (TypeError, ValueError):
        raise config_error(field, f"must be a whole number between {lo} and {hi}") from None
    if not is_number(number) or number != int(number) or not lo <= number <= hi:
        raise config_error(field, f"must be a whole number between {lo} and {hi}")
    return int(number)


def _server_url(base_url: str, domain: str, protocol: str) -> str:
    """Server root without /v1. ``domain`` (host[:port]) is used when base_url is left at its default."""
    import urllib.parse

    url = base_url or DEFAULT_BASE_URL
    if domain and url.rstrip("/") in (DEFAULT_BASE_URL, DEFAULT_BASE_URL + "/v1"):
        url = domain if "://" in domain else f"{protocol or 'http'}://{domain}"
    if "://" not in url:
        url = f"{protocol or 'http'}://{url}"
    url = url.rstrip("/")
    if url.endswith("/v1"):
        url = url[:-3].rstrip("/")
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise config_error("base_url", "is not a valid URL") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise config_error("base_url", "must look like http://host:port (a trailing /v1 is accepted)")
    return url


def _aliases(value: object) -> dict[str, str]:
    if isinstance(value, dict):
        return {str(k).strip(): str(v).strip() for k, v in value.items()}
    items = value if isinstance(value, list) else as_text(value).split(",")
    out = {}
    for item in items:
        item = str(item).strip()
        if not item:
            continue
        name, sep, image = item.partition("=")
        if not sep or not name.strip() or not image.strip():
            raise config_error("image_aliases", f"entry {item[:60]!r} is not name=image")
        out[name.strip()] = image.strip()
    return out


def _entrypoint(value: object) -> list[str]:
    if isinstance(value, list):
        argv = [str(v) for v in value]
    else:
        text = as_text(value)
        if text.startswith("["):
            try:
                argv = json.loads(text)
            except ValueError:
                raise config_error("entrypoint", "is not a valid JSON list") from None
            if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
                raise config_error("entrypoint", "must be a list of strings")
        else:
            import shlex

            try:
                argv = shlex.split(text)
            except ValueError:
                raise config_error("entrypoint", "has unbalanced quotes") from None
    return argv or DEFAULT_ENTRYPOINT.split()


def _network_policy(value: object) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    text = as_text(value)
    if not text:
        return None
    try:
        policy = json.loads(text)
    except ValueError:
        raise config_error("network_policy", "is not valid JSON") from None
    if not isinstance(policy, dict):
        raise config_error("network_policy", 'must be a JSON object like {"defaultAction": "deny"}')
    return policy


def _volumes(value: object) -> list[dict[str, Any]] | None:
    """The create request's `volumes` (a JSON list of the server's Volume objects), checked by the server."""
    if isinstance(value, list):
        vols = value
    elif not as_text(value):
        return None
    else:
        try:
            vols = json.loads(as_text(value))
        except ValueError:
            raise config_error("volumes", "is not valid JSON") from None
    if not isinstance(vols, list) or not all(isinstance(v, dict) for v in vols):
        raise config_error(
            "volumes",
            'must be a JSON list like [{"name": "work", "pvc": {"claimName": "work"}, "mountPath": "/workspace/work"}]',
        )
    return vols or None


def _platform(value: object) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    text = as_text(value).lower()
    if not text:
        return None
    osname, sep, arch = text.partition("/")
    if not sep:
        osname, arch = "linux", text
    if not osname or not arch or "/" in arch:
        raise config_error("platform", "must look like linux/amd64 or linux/arm64")
    return {"os": osname, "arch": arch}


def config_error(field: str, problem: str) -> EppError:
    return EppError(
        -32006,
        f"Invalid opensandbox setting {field}: {problem}.",
        suggestion=f"Fix ABX_OPENSANDBOX_{field.upper()} (or [providers.opensandbox] {field} "
        "in ~/.abx/config.toml, or the provider option of the same name).",
        field=field,
    )
