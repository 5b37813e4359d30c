"""A small pydantic-like validation engine, standard library only: the lax-mode coercions of
pydantic-core for Python input (int, bool, datetime), type specs (``Str``, ``Int``, ``Bool``, ``DateTime``,
``Literal``, ``Opt``, ``ListOf``, ``DictOf``) and ``Model`` (field order, aliases with ``populate_by_name``,
``extra="forbid"``, ``model_validator(mode="after")``), pydantic-core's error items (type, msg, ``loc`` = the
key the input used, ``input``, ``ctx``) and FastAPI's request-body decoding (``decode_body``,
``validate_body``: 422 ``{"detail": errors}`` via ``ValidationFailed``).

The server's own request models and checks, written with this engine, are in lifecycle/validation.py;
tiers/t2/server/test_server_oracle.py and tiers/t0/lifecycle/test_model_validation.py compare both with the real thing.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

_MISSING = object()


class ValidationFailed(Exception):
    """FastAPI's RequestValidationError: answered 422 ``{"detail": errors}``."""

    def __init__(self, errors: list[dict[str, Any]]):
        super().__init__("validation failed")
        self.errors = errors


def _err(type_: str, loc: list[Any], msg: str, input_: Any, ctx: dict[str, Any] | None = None) -> dict[str, Any]:
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
_WS = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
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
            return s[i - 1 :]
        return None
    return s[-1]


def to_int(value: Any, loc: list[Any], errors: list[dict[str, Any]]) -> Any:
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
            errors.append(
                _err(
                    "int_from_float", loc, "Input should be a valid integer, got a number with a fractional part", value
                )
            )
            return _MISSING
        if abs(value) > 2**63:
            errors.append(
                _err(
                    "int_parsing_size", loc, "Unable to parse input string as an integer, exceeded maximum size", value
                )
            )
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
        errors.append(
            _err("int_parsing", loc, "Input should be a valid integer, unable to parse string as an integer", value)
        )
        return _MISSING
    errors.append(_err("int_type", loc, "Input should be a valid integer", value))
    return _MISSING


def to_bool(value: Any, loc: list[Any], errors: list[dict[str, Any]]) -> Any:
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
    r"(?:([Zz])|([+-])(\d{2}):?(\d{2}))?)?$"
)
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


def to_datetime(value: Any, loc: list[Any], errors: list[dict[str, Any]]) -> Any:
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
            # a number: datetime_parsing; a string of digits went through the date parser too (pydantic 2's
            # datetime_from_date_parsing, "... a valid datetime or date, ...": tiers/t0/lifecycle/test_model_validation.py)
            kind, what = (
                ("datetime_from_date_parsing", "datetime or date")
                if isinstance(value, str)
                else ("datetime_parsing", "datetime")
            )
            errors.append(
                _err(
                    kind,
                    loc,
                    f"Input should be a valid {what}, dates after 9999 are not supported as unix timestamps",
                    value,
                    {"error": "dates after 9999 are not supported as unix timestamps"},
                )
            )
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
    errors.append(
        _err(
            "datetime_from_date_parsing",
            loc,
            "Input should be a valid datetime or date, " + reason,
            value,
            {"error": reason},
        )
    )
    return _MISSING


# =====================================================================================================
# type specs
# =====================================================================================================
class Spec:
    def run(self, value: Any, loc: list[Any], errors: list[dict[str, Any]]) -> Any:  # pragma: no cover - interface
        raise NotImplementedError


class Str(Spec):
    def __init__(self, min_length: int | None = None, max_length: int | None = None, pattern: str | None = None):
        self.min_length, self.max_length, self.pattern = min_length, max_length, pattern
        # Rust regex: ``$`` is end of text only; search (not match) semantics
        self._rx = re.compile(pattern.replace("$", r"\Z")) if pattern else None

    def run(self, value: Any, loc: list[Any], errors: list[dict[str, Any]]) -> Any:
        if not isinstance(value, str):
            errors.append(_err("string_type", loc, "Input should be a valid string", value))
            return _MISSING
        n = len(value)
        if self.min_length is not None and n < self.min_length:
            errors.append(
                _err(
                    "string_too_short",
                    loc,
                    "String should have at least %s" % _plural(self.min_length, "character"),
                    value,
                    {"min_length": self.min_length},
                )
            )
            return _MISSING
        if self.max_length is not None and n > self.max_length:
            errors.append(
                _err(
                    "string_too_long",
                    loc,
                    "String should have at most %s" % _plural(self.max_length, "character"),
                    value,
                    {"max_length": self.max_length},
                )
            )
            return _MISSING
        if self._rx is not None and not self._rx.search(value):
            errors.append(
                _err(
                    "string_pattern_mismatch",
                    loc,
                    "String should match pattern '%s'" % self.pattern,
                    value,
                    {"pattern": self.pattern},
                )
            )
            return _MISSING
        return value


class Int(Spec):
    def __init__(self, ge: int | None = None, le: int | None = None):
        self.ge, self.le = ge, le

    def run(self, value: Any, loc: list[Any], errors: list[dict[str, Any]]) -> Any:
        out = to_int(value, loc, errors)
        if out is _MISSING:
            return out
        if self.ge is not None and out < self.ge:
            errors.append(
                _err(
                    "greater_than_equal",
                    loc,
                    "Input should be greater than or equal to %d" % self.ge,
                    value,
                    {"ge": self.ge},
                )
            )
            return _MISSING
        if self.le is not None and out > self.le:
            errors.append(
                _err(
                    "less_than_equal", loc, "Input should be less than or equal to %d" % self.le, value, {"le": self.le}
                )
            )
            return _MISSING
        return out


class Bool(Spec):
    def run(self, value: Any, loc: list[Any], errors: list[dict[str, Any]]) -> Any:
        return to_bool(value, loc, errors)


class DateTime(Spec):
    def run(self, value: Any, loc: list[Any], errors: list[dict[str, Any]]) -> Any:
        return to_datetime(value, loc, errors)


class Literal(Spec):
    def __init__(self, *values: str):
        self.values = values
        quoted = ["'%s'" % v for v in values]
        self.expected = quoted[0] if len(quoted) == 1 else "%s or %s" % (", ".join(quoted[:-1]), quoted[-1])

    def run(self, value: Any, loc: list[Any], errors: list[dict[str, Any]]) -> Any:
        if isinstance(value, str) and value in self.values:
            return value
        errors.append(
            _err("literal_error", loc, "Input should be %s" % self.expected, value, {"expected": self.expected})
        )
        return _MISSING


class Opt(Spec):
    """``Optional[X]``: None passes."""

    def __init__(self, inner: Spec):
        self.inner = inner

    def run(self, value: Any, loc: list[Any], errors: list[dict[str, Any]]) -> Any:
        if value is None:
            return None
        return self.inner.run(value, loc, errors)


class ListOf(Spec):
    def __init__(self, item: Spec, min_length: int | None = None):
        self.item, self.min_length = item, min_length

    def run(self, value: Any, loc: list[Any], errors: list[dict[str, Any]]) -> Any:
        if not isinstance(value, (list, tuple)):
            errors.append(_err("list_type", loc, "Input should be a valid list", value))
            return _MISSING
        n_before = len(errors)
        out = [self.item.run(x, loc + [i], errors) for i, x in enumerate(value)]
        if len(errors) > n_before:
            return _MISSING
        if self.min_length is not None and len(out) < self.min_length:
            errors.append(
                _err(
                    "too_short",
                    loc,
                    "List should have at least %s after validation, not %d"
                    % (_plural(self.min_length, "item"), len(out)),
                    value,
                    {"field_type": "List", "min_length": self.min_length, "actual_length": len(out)},
                )
            )
            return _MISSING
        return out


class DictOf(Spec):
    """``Dict[str, X]`` (JSON keys are always strings)."""

    def __init__(self, value_spec: Spec | None):
        self.value_spec = value_spec  # None: any value (bare ``Dict``)

    def run(self, value: Any, loc: list[Any], errors: list[dict[str, Any]]) -> Any:
        if not isinstance(value, dict):
            errors.append(_err("dict_type", loc, "Input should be a valid dictionary", value))
            return _MISSING
        if self.value_spec is None:
            return dict(value)
        n_before = len(errors)
        out = {k: self.value_spec.run(v, loc + [k], errors) for k, v in value.items()}
        return _MISSING if len(errors) > n_before else out


class Field:
    def __init__(self, name: str, spec: Spec, *, alias: str | None = None, required: bool = False, default: Any = None):
        self.name, self.spec, self.alias, self.required, self.default = name, spec, alias, required, default


class Model(Spec):
    """A pydantic BaseModel: fields in definition order, alias then field name (``populate_by_name``),
    unknown keys ignored or ``extra_forbidden``; ``after`` runs only when every field validated."""

    def __init__(
        self,
        cls_name: str,
        fields: list[Field],
        *,
        forbid_extra: bool = False,
        populate_by_name: bool = True,
        after: Callable[[dict[str, Any]], None] | None = None,
    ):
        self.cls_name, self.fields, self.forbid_extra = cls_name, fields, forbid_extra
        self.populate_by_name, self.after = populate_by_name, after

    def run(self, value: Any, loc: list[Any], errors: list[dict[str, Any]]) -> Any:
        if not isinstance(value, dict):
            # FastAPI validates with from_attributes=True: pydantic's "model_attributes_type", no ctx
            errors.append(
                _err(
                    "model_attributes_type",
                    loc,
                    "Input should be a valid dictionary or object to extract fields from",
                    value,
                )
            )
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
        raise ValidationFailed(
            [_err("json_invalid", ["body", e.pos], "JSON decode error", {}, {"error": e.msg})]
        ) from None
    except Exception:  # undecodable bytes, nesting too deep: FastAPI's own 400 (Starlette's handler shape)
        raise DetailError(400, "There was an error parsing the body") from None


class DetailError(Exception):
    """An error the server answers in Starlette's default shape ``{"detail": ...}`` (not ErrorResponse):
    FastAPI's body-parse failure (fastapi/routing.py; oracle)."""

    def __init__(self, status: int, detail: Any):
        super().__init__(str(detail))
        self.status, self.detail = status, detail


def validate_body(spec: Spec, value: Any, *, required: bool = True, errors: list[dict[str, Any]] | None = None) -> Any:
    """Validate a decoded body against ``spec`` with loc ``["body", ...]``; raise ValidationFailed."""
    errs: list[dict[str, Any]] = [] if errors is None else errors
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
