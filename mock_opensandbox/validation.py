"""Request validation of opensandbox-server 1.1.1, without pydantic: FastAPI's 422 bodies and the
server's own pre-provisioning checks (HTTP 400 ``{code, message}``) for the Docker runtime.

A small declarative re-statement of the request models in the server's ``api/schema.py`` (field order,
aliases with ``populate_by_name``, ``extra="forbid"`` models, ``min_length``/``max_length``/``pattern``,
``ge``/``le``, ``Literal``, ``model_validator(mode="after")``), validated the way pydantic v2 validates
Python objects in lax mode (FastAPI calls ``validate_python`` on ``json.loads`` output). Error types,
messages, ``loc`` (the key the input used: alias or field name), ``input`` and ``ctx`` follow
pydantic-core; tiers/t2/test_server_oracle.py compares every rule here with the server's own models and
validators (``services/validators.py``, ``extensions/validation.py``, ``services/helpers.py``,
``services/docker/*``). Standard library only.
"""
from __future__ import annotations

import json
import math
import re
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable, Mapping

from . import quirks
from .model import validate_metadata
from .quirks import MockError, Quirk

_MISSING = object()


class ValidationFailed(Exception):
    """FastAPI's RequestValidationError: answered 422 ``{"detail": errors}``."""

    def __init__(self, errors: list[dict[str, Any]]):
        super().__init__("validation failed")
        self.errors = errors


def _err(type_: str, loc: list, msg: str, input_: Any, ctx: dict | None = None) -> dict[str, Any]:
    e: dict[str, Any] = {"type": type_, "loc": list(loc), "msg": msg, "input": input_}
    if ctx is not None:
        e["ctx"] = ctx
    return e


def _plural(n: int, word: str) -> str:
    return "%d %s%s" % (n, word, "" if n == 1 else "s")


# =====================================================================================================
# scalar coercions (pydantic-core lax mode, Python input)
# =====================================================================================================
_INT_STR_RE = re.compile(r"^[+-]?\d+(?:_\d+)*(?:\.0+)?$")
# Unicode White_Space (what pydantic-core's Rust trim() removes; narrower than str.strip())
_WS = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
      "\u2028\u2029\u202f\u205f\u3000"
_TRUE = {"1", "on", "t", "true", "y", "yes"}
_FALSE = {"0", "off", "f", "false", "n", "no"}


def _strip_leading_zeros(s: str) -> str | None:
    """pydantic-core's second try for an int string that Rust's parser refused: after a leading '0' it
    skips every further '0' and '_' ('0__0' -> '0', '0_1' -> '1', '0-0' -> '-0'; '0__' -> '_' fails)."""
    if not s or s[0] != "0":
        return None
    for i, c in enumerate(s[1:], 1):
        if c in "0_":
            continue
        if c in "123456789-":
            return s[i:]
        if c == ".":
            return s[i - 1:]
        return None
    return s[-1]


def to_int(value: Any, loc: list, errors: list) -> Any:
    """pydantic lax int: int, bool, integral float, numeric string (whitespace, sign, '_', '.0')."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            errors.append(_err("finite_number", loc, "Input should be a finite number", value))
            return _MISSING
        if value != int(value):
            errors.append(_err("int_from_float", loc, "Input should be a valid integer, got a number with a "
                                                      "fractional part", value))
            return _MISSING
        if abs(value) > 2 ** 63:
            errors.append(_err("int_parsing_size", loc, "Unable to parse input string as an integer, exceeded "
                                                        "maximum size", value))
            return _MISSING
        return int(value)
    if isinstance(value, str):
        s = value.strip(_WS)
        sign, rest = (s[0], s[1:]) if s[:1] in ("+", "-") else ("", s)
        alt = _strip_leading_zeros(rest)
        if alt is not None and alt.startswith("-"):
            alt = alt if sign != "-" else None
        elif alt is not None:
            alt = sign + alt
        for cand in (s, alt):
            if cand is not None and _INT_STR_RE.match(cand) and cand.isascii():
                return int(cand.split(".", 1)[0].replace("_", ""))
        errors.append(_err("int_parsing", loc, "Input should be a valid integer, unable to parse string as an "
                                               "integer", value))
        return _MISSING
    errors.append(_err("int_type", loc, "Input should be a valid integer", value))
    return _MISSING


def to_bool(value: Any, loc: list, errors: list) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        if value in (0, 1):
            return bool(value)
        errors.append(_err("bool_parsing", loc, "Input should be a valid boolean, unable to interpret input", value))
        return _MISSING
    if isinstance(value, str):
        if value.lower() in _TRUE:
            return True
        if value.lower() in _FALSE:
            return False
        errors.append(_err("bool_parsing", loc, "Input should be a valid boolean, unable to interpret input", value))
        return _MISSING
    errors.append(_err("bool_type", loc, "Input should be a valid boolean", value))
    return _MISSING


# -- datetime (pydantic/speedate) ---------------------------------------------------------------------
_DT_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})"
    r"(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9})\d*)?)?"
    r"(?:([Zz])|([+-])(\d{2}):?(\d{2}))?)?$")
_NUM_RE = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)$")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _date_error(s: str) -> str:
    """The reason speedate gives when a string is neither a datetime nor a date."""
    if len(s) < 10:
        return "input is too short"
    if not s[0:4].isdigit() or not s[0:4].isascii():
        return "invalid character in year"
    if s[4] != "-":
        return "invalid date separator, expected `-`"
    if not (s[5:7].isdigit() and s[5:7].isascii()):
        return "invalid character in month"
    if s[7] != "-":
        return "invalid date separator, expected `-`"
    if not (s[8:10].isdigit() and s[8:10].isascii()):
        return "invalid character in day"
    if not 1 <= int(s[5:7]) <= 12:
        return "month value is outside expected range of 1-12"
    try:
        datetime(int(s[0:4]), int(s[5:7]), int(s[8:10]))
    except ValueError:
        return "day value is outside expected range"
    return "unexpected extra characters at the end of the input"


def to_datetime(value: Any, loc: list, errors: list) -> Any:
    """pydantic v2 lax datetime: RFC 3339 / ISO strings, a bare date, or unix seconds (ms when large)."""
    if isinstance(value, bool) or value is None or not isinstance(value, (int, float, str)):
        errors.append(_err("datetime_type", loc, "Input should be a valid datetime", value))
        return _MISSING
    if isinstance(value, (int, float)) or _NUM_RE.match(value):
        num = float(value) if not isinstance(value, int) else value
        if abs(num) > 2e10:
            num = num / 1000
        try:
            return _EPOCH + timedelta(seconds=num)
        except OverflowError:
            errors.append(_err("datetime_parsing", loc, "Input should be a valid datetime, dates after 9999 are "
                                                        "not supported as unix timestamps", value,
                               {"error": "dates after 9999 are not supported as unix timestamps"}))
            return _MISSING
    m = _DT_RE.match(value)
    if m and m.group(4) is not None:
        y, mo, d, hh, mi = (int(m.group(i)) for i in range(1, 6))
        ss = int(m.group(6) or 0)
        frac = (m.group(7) or "")[:6].ljust(6, "0")
        try:
            tz = None
            if m.group(8):
                tz = timezone.utc
            elif m.group(9):
                oh, om = int(m.group(10)), int(m.group(11))
                if oh > 23 or om > 59:
                    raise ValueError("offset")
                off = timedelta(hours=oh, minutes=om)
                tz = timezone(off if m.group(9) == "+" else -off)
            if ss == 60:
                raise ValueError("leap second")
            return datetime(y, mo, d, hh, mi, ss, int(frac), tzinfo=tz)
        except ValueError:
            pass
    elif m:  # date only -> midnight (naive)
        try:
            return datetime(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        except ValueError:
            pass
    reason = _date_error(value)
    errors.append(_err("datetime_from_date_parsing", loc, "Input should be a valid datetime or date, " + reason,
                       value, {"error": reason}))
    return _MISSING


# =====================================================================================================
# type specs
# =====================================================================================================
class Spec:
    def run(self, value: Any, loc: list, errors: list) -> Any:  # pragma: no cover - interface
        raise NotImplementedError


class Str(Spec):
    def __init__(self, min_length: int | None = None, max_length: int | None = None, pattern: str | None = None):
        self.min_length, self.max_length, self.pattern = min_length, max_length, pattern
        # Rust regex: ``$`` is end of text only; search (not match) semantics
        self._rx = re.compile(pattern.replace("$", r"\Z")) if pattern else None

    def run(self, value, loc, errors):
        if not isinstance(value, str):
            errors.append(_err("string_type", loc, "Input should be a valid string", value))
            return _MISSING
        n = len(value)
        if self.min_length is not None and n < self.min_length:
            errors.append(_err("string_too_short", loc, "String should have at least %s"
                               % _plural(self.min_length, "character"), value, {"min_length": self.min_length}))
            return _MISSING
        if self.max_length is not None and n > self.max_length:
            errors.append(_err("string_too_long", loc, "String should have at most %s"
                               % _plural(self.max_length, "character"), value, {"max_length": self.max_length}))
            return _MISSING
        if self._rx is not None and not self._rx.search(value):
            errors.append(_err("string_pattern_mismatch", loc, "String should match pattern '%s'" % self.pattern,
                               value, {"pattern": self.pattern}))
            return _MISSING
        return value


class Int(Spec):
    def __init__(self, ge: int | None = None, le: int | None = None):
        self.ge, self.le = ge, le

    def run(self, value, loc, errors):
        out = to_int(value, loc, errors)
        if out is _MISSING:
            return out
        if self.ge is not None and out < self.ge:
            errors.append(_err("greater_than_equal", loc, "Input should be greater than or equal to %d" % self.ge,
                               value, {"ge": self.ge}))
            return _MISSING
        if self.le is not None and out > self.le:
            errors.append(_err("less_than_equal", loc, "Input should be less than or equal to %d" % self.le,
                               value, {"le": self.le}))
            return _MISSING
        return out


class Bool(Spec):
    def run(self, value, loc, errors):
        return to_bool(value, loc, errors)


class DateTime(Spec):
    def run(self, value, loc, errors):
        return to_datetime(value, loc, errors)


class Literal(Spec):
    def __init__(self, *values: str):
        self.values = values
        quoted = ["'%s'" % v for v in values]
        self.expected = quoted[0] if len(quoted) == 1 else "%s or %s" % (", ".join(quoted[:-1]), quoted[-1])

    def run(self, value, loc, errors):
        if isinstance(value, str) and value in self.values:
            return value
        errors.append(_err("literal_error", loc, "Input should be %s" % self.expected, value,
                           {"expected": self.expected}))
        return _MISSING


class Opt(Spec):
    """``Optional[X]``: None passes."""

    def __init__(self, inner: Spec):
        self.inner = inner

    def run(self, value, loc, errors):
        if value is None:
            return None
        return self.inner.run(value, loc, errors)


class ListOf(Spec):
    def __init__(self, item: Spec, min_length: int | None = None):
        self.item, self.min_length = item, min_length

    def run(self, value, loc, errors):
        if not isinstance(value, (list, tuple)):
            errors.append(_err("list_type", loc, "Input should be a valid list", value))
            return _MISSING
        n_before = len(errors)
        out = [self.item.run(x, loc + [i], errors) for i, x in enumerate(value)]
        if len(errors) > n_before:
            return _MISSING
        if self.min_length is not None and len(out) < self.min_length:
            errors.append(_err("too_short", loc, "List should have at least %s after validation, not %d"
                               % (_plural(self.min_length, "item"), len(out)), value,
                               {"field_type": "List", "min_length": self.min_length, "actual_length": len(out)}))
            return _MISSING
        return out


class DictOf(Spec):
    """``Dict[str, X]`` (JSON keys are always strings)."""

    def __init__(self, value_spec: Spec | None):
        self.value_spec = value_spec  # None: any value (bare ``Dict``)

    def run(self, value, loc, errors):
        if not isinstance(value, dict):
            errors.append(_err("dict_type", loc, "Input should be a valid dictionary", value))
            return _MISSING
        if self.value_spec is None:
            return dict(value)
        n_before = len(errors)
        out = {k: self.value_spec.run(v, loc + [k], errors) for k, v in value.items()}
        return _MISSING if len(errors) > n_before else out


class Field:
    def __init__(self, name: str, spec: Spec, *, alias: str | None = None, required: bool = False,
                 default: Any = None):
        self.name, self.spec, self.alias, self.required, self.default = name, spec, alias, required, default


class Model(Spec):
    """A pydantic BaseModel: fields in definition order, alias then field name (``populate_by_name``),
    unknown keys ignored or ``extra_forbidden``; ``after`` runs only when every field validated."""

    def __init__(self, cls_name: str, fields: list[Field], *, forbid_extra: bool = False,
                 populate_by_name: bool = True, after: Callable[[dict], None] | None = None):
        self.cls_name, self.fields, self.forbid_extra = cls_name, fields, forbid_extra
        self.populate_by_name, self.after = populate_by_name, after

    def run(self, value, loc, errors):
        if not isinstance(value, dict):
            # FastAPI validates with from_attributes=True: pydantic's "model_attributes_type", no ctx
            errors.append(_err("model_attributes_type", loc, "Input should be a valid dictionary or object to "
                                                             "extract fields from", value))
            return _MISSING
        n_before = len(errors)
        out: dict[str, Any] = {}
        used: set[str] = set()
        for f in self.fields:
            keys = [f.alias or f.name]
            if f.alias and self.populate_by_name:
                keys.append(f.name)
            key = next((k for k in keys if k in value), None)
            for k in keys:
                if k in value:
                    used.add(k)
            if key is None:
                if f.required:
                    errors.append(_err("missing", loc + [f.alias or f.name], "Field required", value))
                else:
                    out[f.name] = f.default() if callable(f.default) else f.default
                continue
            out[f.name] = f.spec.run(value[key], loc + [key], errors)
        if self.forbid_extra:
            for k, v in value.items():
                if k not in used:
                    errors.append(_err("extra_forbidden", loc + [k], "Extra inputs are not permitted", v))
        if len(errors) > n_before:
            return _MISSING
        if self.after is not None:
            try:
                self.after(out)
            except ValueError as e:
                errors.append(_err("value_error", loc, "Value error, %s" % e, value, {"error": {}}))
                return _MISSING
        return out


# =====================================================================================================
# the server's request models (api/schema.py)
# =====================================================================================================
_DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
OPENSANDBOX_LIFECYCLE = "OPENSANDBOX_LIFECYCLE"  # server constants.py

ImageAuth = Model("ImageAuth", [Field("username", Str(), required=True), Field("password", Str(), required=True)])
ImageSpec = Model("ImageSpec", [Field("uri", Str(), required=True), Field("auth", Opt(ImageAuth))])
PlatformSpec = Model("PlatformSpec", [Field("os", Str(), required=True), Field("arch", Str(), required=True)])
ResourceLimits = DictOf(Str())  # RootModel[Dict[str, str]]: errors carry no "root" segment
NetworkRule = Model("NetworkRule", [Field("action", Str(), required=True),
                                    Field("target", Str(min_length=1), required=True)])
NetworkPolicy = Model("NetworkPolicy", [Field("default_action", Opt(Str()), alias="defaultAction"),
                                        Field("egress", ListOf(NetworkRule), default=list)])
CredentialProxyConfig = Model("CredentialProxyConfig", [Field("enabled", Bool(), default=False)])


def _hook_after(h: dict) -> None:
    if not h["command"][0].strip():
        raise ValueError("Lifecycle hook command must not be empty.")


def _periodic_after(h: dict) -> None:
    h["name"], h["schedule"] = h["name"].strip(), h["schedule"].strip()
    if not h["name"]:
        raise ValueError("Periodic lifecycle hook name must not be blank.")
    if not h["schedule"]:
        raise ValueError("Periodic lifecycle hook schedule must not be blank.")
    if not h["command"][0].strip():
        raise ValueError("Periodic lifecycle hook command must not be empty.")


def _lifecycle_after(lc: dict) -> None:
    names = [h["name"] for h in lc.get("periodic") or []]
    if len(names) != len(set(names)):
        raise ValueError("Periodic lifecycle hook names must be unique.")


LifecycleHook = Model("LifecycleHook", [
    Field("command", ListOf(Str(), min_length=1), required=True),
    Field("timeout_seconds", Opt(Int(ge=1, le=10800)), alias="timeoutSeconds"),
], forbid_extra=True, after=_hook_after)
PeriodicLifecycleHook = Model("PeriodicLifecycleHook", [
    Field("name", Str(min_length=1), required=True),
    Field("schedule", Str(min_length=1), required=True),
    Field("command", ListOf(Str(), min_length=1), required=True),
    Field("timeout_seconds", Opt(Int(ge=1, le=300)), alias="timeoutSeconds"),
], forbid_extra=True, after=_periodic_after)
SandboxLifecycle = Model("SandboxLifecycle", [
    Field("pre_start", Opt(LifecycleHook), alias="preStart"),
    Field("periodic", Opt(ListOf(PeriodicLifecycleHook))),
], forbid_extra=True, after=_lifecycle_after)

Host = Model("Host", [Field("path", Str(pattern=r"^(/|[A-Za-z]:[\\/])"), required=True)], populate_by_name=False)
PVC = Model("PVC", [
    Field("claim_name", Str(pattern=_DNS_LABEL_PATTERN, max_length=253), alias="claimName", required=True),
    Field("create_if_not_exists", Bool(), alias="createIfNotExists", default=True),
    Field("delete_on_sandbox_termination", Bool(), alias="deleteOnSandboxTermination", default=False),
    Field("storage_class", Opt(Str()), alias="storageClass"),
    Field("storage", Opt(Str(pattern=r"^\d+(\.\d+)?(Ki|Mi|Gi|Ti|Pi|Ei)?$"))),
    Field("access_modes", Opt(ListOf(Str())), alias="accessModes"),
])


def _ossfs_after(o: dict) -> None:
    if not o.get("access_key_id") or not o.get("access_key_secret"):
        raise ValueError("OSSFS inline credentials are required: accessKeyId and accessKeySecret.")


OSSFS = Model("OSSFS", [
    Field("bucket", Str(min_length=3, max_length=63), required=True),
    Field("endpoint", Str(min_length=1), required=True),
    Field("version", Literal("1.0", "2.0"), default="2.0"),
    Field("options", Opt(ListOf(Str()))),
    Field("access_key_id", Opt(Str(min_length=1)), alias="accessKeyId"),
    Field("access_key_secret", Opt(Str(min_length=1)), alias="accessKeySecret"),
], after=_ossfs_after)


def _volume_after(v: dict) -> None:
    n = sum(v.get(b) is not None for b in ("host", "pvc", "ossfs"))
    if n == 0:
        raise ValueError("Exactly one backend (host, pvc, ossfs) must be specified, but none was provided.")
    if n > 1:
        raise ValueError("Exactly one backend (host, pvc, ossfs) must be specified, but multiple were provided.")


Volume = Model("Volume", [
    Field("name", Str(pattern=_DNS_LABEL_PATTERN, max_length=63), required=True),
    Field("host", Opt(Host)),
    Field("pvc", Opt(PVC)),
    Field("ossfs", Opt(OSSFS)),
    Field("mount_path", Str(pattern=r"^/.*"), alias="mountPath", required=True),
    Field("read_only", Bool(), alias="readOnly", default=False),
    Field("sub_path", Opt(Str()), alias="subPath"),
], after=_volume_after)


def _create_after(r: dict) -> None:
    """CreateSandboxRequest.validate_source_and_entrypoint (server api/schema.py); normalizes in place."""
    if r["env"] and OPENSANDBOX_LIFECYCLE in r["env"]:
        raise ValueError("Environment variable '%s' is reserved. Use the lifecycle request field instead."
                         % OPENSANDBOX_LIFECYCLE)
    tid = r["template_id"]
    if tid is not None and tid.strip():
        conflicts = {
            "image": r["image"] is not None,
            "snapshotId": bool((r["snapshot_id"] or "").strip()),
            "entrypoint": r["entrypoint"] is not None,
            "env": r["env"] is not None,
            "resourceLimits": r["resource_limits"] is not None,
            "resourceRequests": r["resource_requests"] is not None,
            "volumes": r["volumes"] is not None,
            "platform": r["platform"] is not None,
            "credentialProxy": r["credential_proxy"] is not None,
            "secureAccess": bool(r["secure_access"]),
            "lifecycle": r["lifecycle"] is not None,
        }
        present = sorted(k for k, v in conflicts.items() if v)
        if present:
            raise ValueError("templateId cannot be combined with: %s; the workload shape is fixed by the "
                             "template's golden image." % ", ".join(present))
        if r["timeout"] is None:
            raise ValueError("timeout is required when templateId is provided.")
        return
    if tid is not None:
        r["template_id"] = None
    if (r["extensions"] or {}).get("poolRef", "").strip():
        if r["lifecycle"] is not None:
            raise ValueError("lifecycle cannot be used together with poolRef.")
        if (r["snapshot_id"] or "").strip():
            raise ValueError("snapshotId cannot be used together with poolRef.")
        if r["snapshot_id"] is not None and not r["snapshot_id"].strip():
            r["snapshot_id"] = None
        return
    if r["credential_proxy"] and r["credential_proxy"]["enabled"] and r["network_policy"] is None:
        raise ValueError("credentialProxy.enabled requires networkPolicy.")
    has_image = r["image"] is not None and bool(r["image"]["uri"].strip())
    has_snapshot = bool((r["snapshot_id"] or "").strip())
    if has_image == has_snapshot:
        raise ValueError("Exactly one of image or snapshotId must be provided.")
    if has_image and not r["entrypoint"]:
        raise ValueError("Entrypoint is required when image is provided.")
    if r["image"] is not None and not has_image:
        r["image"] = None
    if r["snapshot_id"] is not None and not has_snapshot:
        r["snapshot_id"] = None
    if r["resource_limits"] is None:
        raise ValueError("resourceLimits is required when poolRef is not provided.")


CreateSandboxRequest = Model("CreateSandboxRequest", [
    Field("image", Opt(ImageSpec)),
    Field("snapshot_id", Opt(Str()), alias="snapshotId"),
    Field("platform", Opt(PlatformSpec)),
    Field("timeout", Opt(Int(ge=quirks.MIN_TIMEOUT))),
    Field("resource_limits", Opt(ResourceLimits), alias="resourceLimits"),
    Field("resource_requests", Opt(ResourceLimits), alias="resourceRequests"),
    Field("env", Opt(DictOf(Opt(Str())))),
    Field("metadata", Opt(DictOf(Str()))),
    Field("lifecycle", Opt(SandboxLifecycle)),
    Field("entrypoint", Opt(ListOf(Str(), min_length=1))),
    Field("network_policy", Opt(NetworkPolicy), alias="networkPolicy"),
    Field("credential_proxy", Opt(CredentialProxyConfig), alias="credentialProxy"),
    Field("secure_access", Bool(), alias="secureAccess", default=False),
    Field("volumes", Opt(ListOf(Volume))),
    Field("extensions", Opt(DictOf(Str()))),
    Field("template_id", Opt(Str(min_length=1)), alias="templateId"),
], after=_create_after)

RenewSandboxExpirationRequest = Model("RenewSandboxExpirationRequest", [
    Field("expires_at", DateTime(), alias="expiresAt", required=True)])
PatchSandboxMetadataRequest = DictOf(Opt(Str()))  # Dict[str, Optional[str]]
CreateSnapshotRequest = Model("CreateSnapshotRequest", [Field("name", Opt(Str(min_length=1)))],
                              populate_by_name=False)
MetricsEvent = Model("MetricsEvent", [
    Field("event_type", Literal("sandbox.create"), alias="eventType", required=True),
    Field("sandbox_id", Opt(Str()), alias="sandboxId"),
    Field("image", Opt(Str())),
    Field("create_duration_ms", Int(ge=0), alias="createDurationMs", required=True),
    Field("success", Bool(), required=True),
])
PoolCapacitySpec = Model("PoolCapacitySpec", [
    Field("buffer_max", Int(ge=0), alias="bufferMax", required=True),
    Field("buffer_min", Int(ge=0), alias="bufferMin", required=True),
    Field("pool_max", Int(ge=0), alias="poolMax", required=True),
    Field("pool_min", Int(ge=0), alias="poolMin", required=True),
])
CreatePoolRequest = Model("CreatePoolRequest", [
    Field("name", Str(pattern=_DNS_LABEL_PATTERN, max_length=253), required=True),
    Field("template", DictOf(None), required=True),
    Field("capacity_spec", PoolCapacitySpec, alias="capacitySpec", required=True),
])
UpdatePoolRequest = Model("UpdatePoolRequest", [
    Field("capacity_spec", PoolCapacitySpec, alias="capacitySpec", required=True)])
FsbTemplateReadiness = Model("FsbTemplateReadiness", [
    Field("probe", Opt(Str())), Field("warmup_seconds", Opt(Int(ge=0)), alias="warmupSeconds")])
CreateFsbTemplateRequest = Model("CreateFsbTemplateRequest", [
    Field("image", Str(min_length=1), required=True),
    Field("resource_limits", Opt(ResourceLimits), alias="resourceLimits"),
    Field("entrypoint", Opt(ListOf(Str(), min_length=1))),
    Field("env", Opt(DictOf(Str()))),
    Field("metadata", Opt(DictOf(Str()))),
    Field("readiness", Opt(FsbTemplateReadiness)),
    Field("publish", Str(min_length=1), required=True),
    Field("format", Literal("native", "overlaybd"), default="overlaybd"),
], forbid_extra=True)
NetworkRuleList = ListOf(NetworkRule)
TargetList = ListOf(Str())


# =====================================================================================================
# FastAPI request-body decoding (fastapi/routing.py get_request_handler + dependencies/utils.py)
# =====================================================================================================
_JSON_SUBTYPE_RE = re.compile(r"^\s*application\s*/\s*([^;\s]+)", re.IGNORECASE)


def _is_json_content_type(ct: str | None) -> bool:
    if not ct:
        return True  # no Content-Type: FastAPI still reads the body as JSON
    m = _JSON_SUBTYPE_RE.match(ct)
    if not m:
        return False
    sub = m.group(1).lower()
    return sub == "json" or sub.endswith("+json")


def decode_body(raw: bytes, content_type: str | None) -> Any:
    """The value FastAPI validates for a body parameter: ``_MISSING`` when there is no body, the JSON
    document when the content type is JSON (or absent), else the raw bytes as text. Bad JSON raises the
    422 ``json_invalid`` FastAPI answers (recording 03)."""
    if not raw:
        return _MISSING
    if not _is_json_content_type(content_type):
        return raw.decode("utf-8", "replace")
    try:
        return json.loads(raw)  # bytes: Python detects UTF-8/16/32 (a UTF-16 BOM decodes as UTF-16)
    except json.JSONDecodeError as e:
        raise ValidationFailed([_err("json_invalid", ["body", e.pos], "JSON decode error", {},
                                     {"error": e.msg})]) from None
    except Exception:  # undecodable bytes, nesting too deep: FastAPI's own 400 (Starlette's handler shape)
        raise DetailError(400, "There was an error parsing the body") from None


class DetailError(Exception):
    """An error the server answers in Starlette's default shape ``{"detail": ...}`` (not ErrorResponse):
    FastAPI's body-parse failure (fastapi/routing.py; oracle)."""

    def __init__(self, status: int, detail: Any):
        super().__init__(str(detail))
        self.status, self.detail = status, detail


def validate_body(spec: Spec, value: Any, *, required: bool = True, errors: list | None = None) -> Any:
    """Validate a decoded body against ``spec`` with loc ``["body", ...]``; raise ValidationFailed."""
    errs: list = [] if errors is None else errors
    if value is _MISSING:
        if required:
            errs.append(_err("missing", ["body"], "Field required", None))
            out = _MISSING
        else:
            out = None
    else:
        out = spec.run(value, ["body"], errs)
    if errs and errors is None:
        raise ValidationFailed(errs)
    return out


# =====================================================================================================
# the server's pre-provisioning checks for the Docker runtime (HTTP 400 {code, message})
# =====================================================================================================
def _bad(code: str, message: str, status: int = 400) -> MockError:
    return MockError(Quirk(status, code, "{m}", "server"), m=message)


INVALID_PARAMETER = "SANDBOX::INVALID_PARAMETER"
WINDOWS_UNSUPPORTED = Quirk(400, INVALID_PARAMETER, "platform.os 'windows' is not supported by the mock "
                            "OpenSandbox (it runs Linux processes only).", "[choice]")
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
ACCESS_RENEW_KEY = "access.renew.extend.seconds"  # server extensions/keys.py
ACCESS_RENEW_MIN, ACCESS_RENEW_MAX = 300, 86400
EGRESS_ENV_PREFIX = "OPENSANDBOX_EGRESS_"
ALLOWED_EGRESS_ENV_VARS = frozenset({  # server services/constants.py
    "OPENSANDBOX_EGRESS_LOG_LEVEL", "OPENSANDBOX_EGRESS_DNS_UPSTREAM_TIMEOUT",
    "OPENSANDBOX_EGRESS_MITMPROXY_SSL_INSECURE", "OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT",
    "OPENSANDBOX_EGRESS_MITMPROXY_EXTRA_PORTS", "OPENSANDBOX_EGRESS_DENY_WEBHOOK",
    "OPENSANDBOX_EGRESS_METRICS_EXTRA_ATTRS", "OPENSANDBOX_EGRESS_CREDENTIAL_VAULT_REQUIRE_TLS",
    "OPENSANDBOX_EGRESS_CREDENTIAL_VAULT_REQUIRE_SCOPED_MATCH",
    "OPENSANDBOX_EGRESS_CREDENTIAL_VAULT_TRUSTED_PROXY_CIDRS", "OPENSANDBOX_EGRESS_POLICY_FILE",
})


def validate_extensions(ext: Mapping[str, str] | None) -> None:
    """server extensions/validation.py _validate_access_renew_extend_seconds."""
    if not ext or ACCESS_RENEW_KEY not in ext:
        return
    raw = ext[ACCESS_RENEW_KEY]
    key = ACCESS_RENEW_KEY
    s = str(raw).strip()
    if not s:
        raise _bad(INVALID_PARAMETER, 'Invalid extensions["%s"]: empty value; omit the key to disable renew-on-'
                   "access, or use an integer between %d and %d seconds." % (key, ACCESS_RENEW_MIN, ACCESS_RENEW_MAX))
    try:
        n = int(s)
    except ValueError:
        raise _bad(INVALID_PARAMETER, 'Invalid extensions["%s"]: must be a base-10 integer string between %d and '
                   "%d, got %r." % (key, ACCESS_RENEW_MIN, ACCESS_RENEW_MAX, raw)) from None
    if n < ACCESS_RENEW_MIN or n > ACCESS_RENEW_MAX:
        raise _bad(INVALID_PARAMETER, 'Invalid extensions["%s"]: must be between %d and %d seconds (5 minutes to '
                   "24 hours inclusive), got %d." % (key, ACCESS_RENEW_MIN, ACCESS_RENEW_MAX, n))


_MEMORY_RE = re.compile(r"^\s*(\d+)([kmgti]i?|[kmgti]?b)?\s*\Z", re.IGNORECASE)
_MEMORY_MULT = {"": 1, "b": 1, "k": 10 ** 3, "kb": 10 ** 3, "ki": 1024, "m": 10 ** 6, "mb": 10 ** 6,
                "mi": 1024 ** 2, "g": 10 ** 9, "gb": 10 ** 9, "gi": 1024 ** 3, "t": 10 ** 12, "tb": 10 ** 12,
                "ti": 1024 ** 4}


def parse_memory_limit(value: str) -> int | None:
    """server services/helpers.py parse_memory_limit."""
    if not value:
        return None
    m = _MEMORY_RE.match(value)
    if not m:
        return None
    mult = _MEMORY_MULT.get((m.group(2) or "").lower())
    if not mult:
        return None
    return int(m.group(1)) * mult


def parse_nano_cpus(value: str) -> int | None:
    """server services/helpers.py parse_nano_cpus (Python float() syntax)."""
    if not value:
        return None
    s = value.strip().lower()
    try:
        cpus = float(s[:-1]) / 1000 if s.endswith("m") else float(s)
    except ValueError:
        return None
    if not math.isfinite(cpus) or cpus <= 0:
        return None
    nano = cpus * 1_000_000_000
    if not math.isfinite(nano):
        return None
    nano = int(nano)
    if nano > (1 << 63) - 1:
        return None
    return nano


def parse_gpu_request(value: str) -> int | None:
    if not value:
        return None
    s = value.strip().lower()
    if s == "all":
        return -1
    try:
        n = int(s)
    except ValueError:
        return None
    return n if n > 0 else None


def resolve_resource_limits(limits: Mapping[str, str] | None) -> dict[str, int | None]:
    """server services/docker/container_ops.py _resolve_resource_limits (Linux platform)."""
    limits = limits or {}
    out: dict[str, int | None] = {}
    for key, parser in (("memory", parse_memory_limit), ("cpu", parse_nano_cpus), ("gpu", parse_gpu_request)):
        if key not in limits:
            out[key] = None
            continue
        value = limits[key]
        try:
            parsed = parser(value)
        except ValueError:
            parsed = None
        if parsed is None or (parsed <= 0 and not (key == "gpu" and parsed == -1)):
            preview = repr(value[:80])
            if len(value) > 80:
                preview += "... (%d characters)" % len(value)
            raise _bad(INVALID_PARAMETER, "Invalid resourceLimits.%s: %s; must resolve to a " % (key, preview)
                       + ("positive device count or 'all'." if key == "gpu" else "positive resource limit."))
        out[key] = parsed
    return out


def ensure_platform_valid(platform: dict | None) -> None:
    if platform is None:
        return
    os_, arch = platform["os"].strip().lower(), platform["arch"].strip().lower()
    if os_ not in ("linux", "windows"):
        raise _bad(INVALID_PARAMETER, "Unsupported platform.os '%s'. Supported values: ['linux', 'windows']."
                   % platform["os"])
    if arch not in ("amd64", "arm64"):
        raise _bad(INVALID_PARAMETER, "Unsupported platform.arch '%s'. Supported values: ['amd64', 'arm64']."
                   % platform["arch"])
    platform["os"], platform["arch"] = os_, arch


def _host_path_errors(path: str, allowed: list[str] | None) -> None:
    """server services/validators.py ensure_valid_host_path."""
    code = "VOLUME::INVALID_HOST_PATH"
    if not path:
        raise _bad(code, "Host path cannot be empty.")
    if not re.match(r"^(/|[A-Za-z]:[\\/])", path):
        raise _bad(code, "Host path '%s' must be an absolute path starting with '/' or a Windows drive letter "
                         "(e.g. 'C:\\' or 'D:/')." % path)
    fwd = path.replace("\\", "/")
    tail = fwd[2:] if re.match(r"^[A-Za-z]:/", fwd) else fwd
    if "/.." in tail or tail == "/..":
        raise _bad(code, "Host path '%s' contains path traversal component '..'." % path)
    if "//" in tail or (len(tail) > 1 and tail.endswith("/")):
        raise _bad(code, "Host path '%s' is not normalized. Remove redundant slashes." % path)
    if allowed is not None:
        def norm(p: str) -> str:
            p = p.replace("\\", "/")
            if re.match(r"^[A-Za-z]:", p):
                p = p[0].lower() + p[1:]
            return p[:-1] if len(p) > 1 and p.endswith("/") else p
        n = norm(path)
        if not any(n == norm(a) or n.startswith(norm(a) + "/") for a in allowed):
            raise _bad("VOLUME::HOST_PATH_NOT_ALLOWED", "Host path '%s' is not under any allowed prefix. Allowed "
                                                        "prefixes: %s" % (path, allowed))


def ensure_volumes_valid(volumes: list[dict] | None, allowed_host_prefixes: list[str] | None) -> None:
    """server services/validators.py ensure_volumes_valid."""
    if not volumes:
        return
    seen: set[str] = set()
    for v in volumes:
        name = v["name"]
        if name in seen:
            raise _bad("VOLUME::DUPLICATE_NAME", "Duplicate volume name '%s'. Each volume must have a unique name."
                       % name)
        seen.add(name)
        sub = v.get("sub_path")
        if sub:
            if sub.startswith("/"):
                raise _bad("VOLUME::INVALID_SUB_PATH", "SubPath '%s' must be a relative path, not absolute." % sub)
            if any(p == ".." for p in sub.split("/")):
                raise _bad("VOLUME::INVALID_SUB_PATH", "SubPath '%s' contains path traversal '..' which is not "
                                                       "allowed." % sub)
        if v.get("host") is not None:
            _host_path_errors(v["host"]["path"], allowed_host_prefixes)
        if v.get("pvc") is not None:
            pass  # claimName: already a DNS label of <= 253 characters (the model's pattern)
        o = v.get("ossfs")
        if o is not None:
            if not o["bucket"].strip():
                raise _bad("VOLUME::INVALID_OSSFS_BUCKET", "OSSFS bucket cannot be empty.")
            if not o["endpoint"].strip():
                raise _bad("VOLUME::INVALID_OSSFS_ENDPOINT", "OSSFS endpoint cannot be empty.")
            for opt in o.get("options") or []:
                if not opt.strip():
                    raise _bad("VOLUME::INVALID_OSSFS_OPTION", "OSSFS options must be non-empty strings.")
                if opt.strip().startswith("-"):
                    raise _bad("VOLUME::INVALID_OSSFS_OPTION", "OSSFS options must be raw option payloads without "
                                                               "'-' prefix (e.g. 'allow_other', 'uid=1000').")


def split_egress_env(env: Mapping[str, str | None] | None) -> dict[str, str | None]:
    """server services/helpers.py split_egress_env: the sandbox's part; unknown OPENSANDBOX_EGRESS_* -> 400."""
    out: dict[str, str | None] = {}
    for k, v in (env or {}).items():
        if k.startswith(EGRESS_ENV_PREFIX):
            if k not in ALLOWED_EGRESS_ENV_VARS:
                raise _bad(INVALID_PARAMETER, "Environment variable '%s' is not allowed; permitted "
                                              "OPENSANDBOX_EGRESS_ keys: %s" % (k, sorted(ALLOWED_EGRESS_ENV_VARS)))
            if k == "OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT":
                out[k] = v
        else:
            out[k] = v
    return out


def timeout_or_raise(now: datetime, timeout: int | None, max_timeout: int | None) -> datetime | None:
    """server services/validators.py ensure_timeout_within_limit + calculate_expiration_or_raise."""
    if timeout is None:
        return None
    try:
        expires = now + timedelta(seconds=timeout)
    except (OverflowError, ValueError):
        raise MockError(quirks.TIMEOUT_TOO_LARGE, timeout=timeout) from None
    if max_timeout is not None and timeout > max_timeout:
        raise _bad(INVALID_PARAMETER, "Sandbox timeout %ds exceeds configured maximum of %ds."
                   % (timeout, max_timeout))
    return expires


def docker_create_checks(r: dict, *, now: datetime, max_timeout: int | None = None,
                         allowed_host_paths: Iterable[str] | None = ()) -> dict:
    """Everything the server checks between a valid CreateSandboxRequest and touching Docker, in its order
    (server api/lifecycle.py create_sandbox -> services/docker/docker_service.py create_sandbox). Returns
    {"env", "limits"}; raises MockError with the server's status/code/message. The expiry itself is the
    store's (SandboxStore.create): the server's second calculate_expiration_or_raise (in
    _prepare_creation_context) cannot fail once ensure_timeout_within_limit passed."""
    validate_extensions(r["extensions"])
    snap = (r["snapshot_id"] or "").strip()
    has_image = r["image"] is not None and bool(r["image"]["uri"].strip())
    if not (r["template_id"] or "").strip() and snap and not has_image:
        # server services/snapshot_restore.py: the mock keeps no snapshots, so every id is unknown
        raise _bad("SNAPSHOT::NOT_FOUND", "Snapshot %s not found" % snap, 404)
    if r["lifecycle"] is not None:
        raise _bad(INVALID_PARAMETER, "lifecycle hooks are not supported by the Docker provider.")
    if (r["extensions"] or {}).get("poolRef", "").strip():
        raise _bad("SANDBOX::UNSUPPORTED_POOL_REF", "poolRef is not supported by the Docker provider. Use "
                                                    "Kubernetes BatchSandbox provider instead.")
    if not r["entrypoint"]:
        raise _bad("DOCKER::INVALID_ENTRYPOINT", "Entrypoint must contain at least one command.")
    validate_metadata(r["metadata"])
    ensure_platform_valid(r["platform"])
    timeout_or_raise(now, r["timeout"], max_timeout)
    if r["secure_access"]:
        raise MockError(quirks.SECURE_ACCESS_UNSUPPORTED)
    if r["network_policy"] is not None:  # the mock has no egress sidecar image ([egress] image unset)
        raise MockError(quirks.NETWORK_POLICY_UNSUPPORTED)
    plat = r["platform"]
    windows = plat is not None and plat["os"] == "windows"
    limits = {} if windows else resolve_resource_limits(r["resource_limits"])
    env = split_egress_env(r["env"])
    allowed = list(allowed_host_paths) if allowed_host_paths is not None else None
    ensure_volumes_valid(r["volumes"], allowed)
    if windows:  # [choice] the server would boot a dockur/windows VM; the mock runs Linux processes only
        raise MockError(WINDOWS_UNSUPPORTED)
    return {"env": env, "limits": limits}
