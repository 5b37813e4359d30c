"""Go's JSON and Gin's replies, written once: what execd (Go 1.27, encoding/json on its v2 engine,
Gin) accepts, how it phrases a decoding error, how it writes JSON, errno and time text.

Every text here was observed from the real execd v1.0.19 binary through the differential tier
(tiers/diff, ``python -m differential``); QUIRKS.md (part 2) cites the cases.
Standard library only; imports nothing else from the mock (so every module may use it).
"""

from __future__ import annotations

import codecs
import datetime as _dt
import json
import os
import sys
from decimal import Decimal
from typing import Any, Mapping, Union

__all__ = [
    "GO_REPLACE",
    "go_utf8",
    "GoJSONError",
    "decode_value",
    "unmarshal_value",
    "check_struct",
    "decode",
    "go_json",
    "go_json_bytes",
    "quote_rune",
    "errno_text",
    "path_error",
    "go_time",
    "kind_of",
    "GIN_JSON",
    "Struct",
]

GIN_JSON = "application/json; charset=utf-8"  # Gin c.JSON


def _go_replace(exc: UnicodeError) -> tuple[str, int]:
    """Go replaces every byte of an invalid UTF-8 sequence with U+FFFD (utf8.DecodeRune width 1);
    Python's "replace" uses one U+FFFD per maximal subpart ("\xe2\x82" -> 2 vs 1; tiers/diff gen.output)."""
    if isinstance(exc, UnicodeDecodeError):
        return "\ufffd", exc.start + 1
    raise exc


codecs.register_error("go-replace", _go_replace)
GO_REPLACE = "go-replace"


def go_utf8(data: bytes) -> str:
    """bytes -> str the way Go's encoding/json (and strings.ToValidUTF8 per byte) sees them."""
    return data.decode("utf-8", GO_REPLACE)


class GoJSONError(ValueError):
    """A decoding error; str() is Go's message (what execd puts after "... body format. ")."""


def quote_rune(c: str) -> str:
    """strconv.QuoteRune as the JSON errors show it: 'x', '\\t', '\\x01'."""
    esc = {
        "\a": "\\a",
        "\b": "\\b",
        "\f": "\\f",
        "\n": "\\n",
        "\r": "\\r",
        "\t": "\\t",
        "\v": "\\v",
        "\\": "\\\\",
        "'": "\\'",
    }
    if c in esc:
        return "'" + esc[c] + "'"
    o = ord(c)
    if o < 0x20 or o == 0x7F:
        return f"'\\x{o:02x}'"
    if o == 0xFFFD:
        return "'\\ufffd'"
    return "'" + c + "'"


# encoding/json scanner.go maxNestingDepth: a value nested deeper is a SyntaxError "exceeded max
# depth" (real execd on /command, /files/mv: `error parsing request, MAYBE invalid body format.
# exceeded max depth`). The scanner below, json.loads and check_struct recurse once per level, so
# the interpreter's limit is raised to fit where Python frames stay off the C stack (>= 3.11); on 3.10 a
# value past the default limit gets the same error early (_deep).
MAX_DEPTH = 10000
if sys.version_info >= (3, 11) and sys.getrecursionlimit() < 3 * MAX_DEPTH:
    sys.setrecursionlimit(3 * MAX_DEPTH)


def _deep(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except RecursionError:
        raise GoJSONError("exceeded max depth") from None


class _Scan:
    """Finds the first syntax error of the first JSON value, worded as execd's decoder words it."""

    def __init__(self, s: str):
        self.s, self.i = s, 0
        self.depth = 0

    def err(self, ctx: str) -> GoJSONError:
        if self.i >= len(self.s):
            return GoJSONError("unexpected EOF")
        return GoJSONError(f"invalid character {quote_rune(self.s[self.i])} {ctx}".rstrip())

    def ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in " \t\r\n":
            self.i += 1

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def digit(self) -> bool:
        c = self.peek()
        return c != "" and c in "0123456789"

    def value(self) -> None:
        self.ws()
        c = self.peek()
        if c == "{" or c == "[":
            obj = c == "{"
            self.depth += 1
            if self.depth > MAX_DEPTH:  # encoding/json scanner.go pushParseState
                raise GoJSONError("exceeded max depth")
            close, after = ("}", "after object key:value pair") if obj else ("]", "after array element")
            self.i += 1
            self.ws()
            if self.peek() == close:
                self.i += 1
                self.depth -= 1
                return
            while True:
                if obj:
                    self.ws()
                    if self.peek() != '"':
                        raise self.err("looking for beginning of object key string")
                    self.string()
                    self.ws()
                    if self.peek() != ":":
                        raise self.err("after object key")
                    self.i += 1
                self.value()
                self.ws()
                c = self.peek()
                if c == ",":
                    self.i += 1
                    continue
                if c == close:
                    self.i += 1
                    self.depth -= 1
                    return
                raise self.err(after)
        if c == '"':
            self.string()
            return
        if c == "-" or self.digit():
            self.number()
            return
        for lit in ("true", "false", "null"):
            if c == lit[0]:
                self.i += 1
                for ch in lit[1:]:
                    if self.peek() != ch:
                        raise self.err(f"in literal {lit} (expecting {quote_rune(ch)})")
                    self.i += 1
                return
        raise self.err("looking for beginning of value")

    def string(self) -> None:
        self.i += 1
        while True:
            c = self.peek()
            if c == "":
                raise self.err("")
            if c == '"':
                self.i += 1
                return
            if c == "\\":
                start = self.i
                self.i += 1
                e = self.peek()
                if e == "":
                    raise self.err("")
                if e == "u":
                    hexd = self.s[self.i + 1 : self.i + 5]
                    if len(hexd) < 4 and all(h in "0123456789abcdefABCDEF" for h in hexd):
                        self.i = len(self.s)
                        raise self.err("")
                    if len(hexd) < 4 or any(h not in "0123456789abcdefABCDEF" for h in hexd):
                        raise GoJSONError(f"invalid escape sequence `{self.s[start : self.i + 5]}` in string")
                    self.i += 5
                    continue
                if e not in '"\\/bfnrt':
                    raise GoJSONError(f"invalid escape sequence `\\{e}` in string")
                self.i += 1
                continue
            if ord(c) < 0x20:
                raise self.err("in string")
            self.i += 1

    def number(self) -> None:
        if self.peek() == "-":
            self.i += 1
            if not self.digit():
                raise self.err("in numeric literal")
        if self.peek() == "0":
            self.i += 1
        else:
            while self.digit():
                self.i += 1
        if self.peek() == ".":
            self.i += 1
            if not self.digit():
                raise self.err("in numeric literal")
            while self.digit():
                self.i += 1
        if self.peek() in ("e", "E") and self.peek():
            self.i += 1
            if self.peek() in ("+", "-") and self.peek():
                self.i += 1
            if not self.digit():
                raise self.err("in numeric literal")
            while self.digit():
                self.i += 1


class _Num(float):
    """A JSON number that remembers its literal text (Go quotes it for integer targets)."""

    raw: str

    def __new__(cls, raw: str) -> "_Num":
        obj = super().__new__(cls, float(raw))
        obj.raw = raw
        return obj


def _no_constant(name: str) -> Any:
    raise ValueError("not JSON: " + name)  # NaN, Infinity: json.loads takes them, Go does not


def _loads(text: str) -> Any:
    try:
        return json.loads(text, parse_int=_Num, parse_float=_Num, parse_constant=_no_constant)
    except RecursionError:
        if sys.version_info < (3, 11):
            raise
    # CPython >= 3.12 bounds the C decoder by its own C recursion limit (below MAX_DEPTH, whatever
    # sys.setrecursionlimit says); json's pure-Python scanner recurses in Python frames, off the C stack
    from json.scanner import py_make_scanner  # type: ignore[attr-defined]  # not in typeshed

    dec = json.JSONDecoder(parse_int=_Num, parse_float=_Num, parse_constant=_no_constant)
    dec.scan_once = py_make_scanner(dec)
    return dec.decode(text)


def _scan_start(body: bytes, empty: str) -> tuple[str, _Scan, int]:
    """The body as text (invalid UTF-8 as U+FFFD), a scanner at its first value and where that starts;
    GoJSONError(empty) when there is none."""
    text = body.decode("utf-8", GO_REPLACE)
    sc = _Scan(text)
    sc.ws()
    if sc.i >= len(text):
        raise GoJSONError(empty)
    return text, sc, sc.i


def decode_value(body: bytes) -> Any:
    """The first JSON value of body with json.Decoder semantics (trailing data ignored, empty body
    "EOF", truncated "unexpected EOF"; invalid UTF-8 becomes U+FFFD). Numbers come back as _Num."""
    if len(body) < MAX_DEPTH:
        # a body that is one JSON value and nothing else, too short to nest past Go's depth limit: what
        # json.loads takes (NaN and Infinity aside) the scanner takes too, and the value is the same; the
        # scanner below runs only where json.loads refuses (it says what Go says)
        try:
            return _loads(body.decode("utf-8", GO_REPLACE))
        except ValueError:
            pass
    text, sc, start = _scan_start(body, "EOF")
    _deep(sc.value)
    return _deep(_loads, text[start : sc.i])


def unmarshal_value(body: bytes) -> Any:
    """json.Unmarshal semantics: the whole input must be one value."""
    text, sc, start = _scan_start(body, "unexpected end of JSON input")
    try:
        _deep(sc.value)
    except GoJSONError as exc:
        if str(exc) == "unexpected EOF":
            raise GoJSONError("unexpected end of JSON input") from None
        raise
    end = sc.i
    sc.ws()
    if sc.i < len(text):
        raise sc.err("after top-level value")
    return _deep(_loads, text[start:end])


def kind_of(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return "null"


class Struct:
    """A Go struct type for check_struct: its Go name and {json name: go type}; a go type is
    "string", "bool", "int", "int64", "uint32", "[]string", "map[string]string", "raw" or a Struct."""

    def __init__(self, name: str, fields: Mapping[str, Union[str, "Struct"]]):
        self.name, self.fields = name, dict(fields)
        self.lower = {k.lower(): k for k in self.fields}  # check_struct's case-insensitive match

    @property
    def short(self) -> str:
        return self.name.rsplit(".", 1)[-1]


_INT_RANGES = {"int64": (-(1 << 63), (1 << 63) - 1), "uint32": (0, (1 << 32) - 1), "int": (-(1 << 63), (1 << 63) - 1)}


def _num_literal(v: Any) -> str:
    return getattr(v, "raw", None) or json.dumps(v)


def _mismatch(v: Any, where: str, gotype: str) -> GoJSONError:
    kind = kind_of(v)
    if kind == "number" and gotype in _INT_RANGES:
        kind = "number " + _num_literal(v)  # integer targets quote the literal; string/bool ones do not
    return GoJSONError(f"json: cannot unmarshal {kind} into {where} of type {gotype}")


def _scalar(gotype: str, v: Any, where: str) -> Any:
    if gotype == "string":
        if not isinstance(v, str):
            raise _mismatch(v, where, gotype)
        return v
    if gotype == "bool":
        if not isinstance(v, bool):
            raise _mismatch(v, where, gotype)
        return v
    if gotype in _INT_RANGES:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _mismatch(v, where, gotype)
        raw = _num_literal(v)
        try:
            iv = int(raw)
        except ValueError:
            raise _mismatch(v, where, gotype) from None
        lo, hi = _INT_RANGES[gotype]
        if not lo <= iv <= hi:
            raise _mismatch(v, where, gotype)
        return iv
    return _plain(v)


def _plain(v: Any) -> Any:
    if isinstance(v, _Num):
        f = float(v)
        return int(v.raw) if v.raw.lstrip("-").isdigit() else f
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def check_struct(obj: Any, struct: Struct, _path: str = "") -> dict[str, Any]:
    """Go's unmarshal of a decoded value into struct: keys match exactly first, then case-insensitively
    (the last duplicate wins), unknown keys are ignored, null leaves a field unset. Returns the fields
    that were set ({json name: value}); raises GoJSONError with Go's message."""
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        if _path:
            raise GoJSONError(
                f"json: cannot unmarshal {kind_of(obj)} into Go struct field {_path} of type {struct.name}"
            )
        raise GoJSONError(f"json: cannot unmarshal {kind_of(obj)} into Go value of type {struct.name}")
    out: dict[str, Any] = {}
    lower = struct.lower
    base = _path or struct.short
    for key, v in obj.items():
        name = key if key in struct.fields else lower.get(key.lower())
        if name is None:
            continue
        gotype = struct.fields[name]
        where = f"Go struct field {base}.{key}"  # the key as the request spelled it (tiers/diff gen.json)
        if v is None:
            continue
        if isinstance(gotype, Struct):
            out[name] = check_struct(v, gotype, f"{base}.{key}")
            continue
        if gotype == "raw":
            out[name] = _plain(v)
        elif gotype.startswith("[]"):
            if not isinstance(v, list):
                raise _mismatch(v, where, gotype)
            out[name] = ["" if e is None else _scalar(gotype[2:], e, where) for e in v]
        elif gotype.startswith("map[string]"):
            if not isinstance(v, dict):
                raise _mismatch(v, where, gotype)
            elem = gotype[len("map[string]") :]
            out[name] = {
                k: ("" if e is None else _scalar(elem, e, f"Go struct field {base}.{key}.{k}")) for k, e in v.items()
            }
        else:
            out[name] = _scalar(gotype, v, where)
    return out


def decode(body: bytes, struct: Struct) -> dict[str, Any]:
    """bindJSON (json.NewDecoder(body).Decode) into struct."""
    out: dict[str, Any] = _deep(check_struct, decode_value(body), struct)
    return out


# ---------------------------------------------------------------------------------------------
# writing


def _go_float(f: float) -> str:
    """strconv.AppendFloat(f, 'f' or 'e', -1, 64) as encoding/json picks it."""
    if f != f or f in (float("inf"), float("-inf")):
        raise ValueError("json: unsupported value")
    if f == 0:
        return "-0" if str(f).startswith("-") else "0"
    a = abs(f)
    r = repr(f)
    if a < 1e-6 or a >= 1e21:
        mant, _, exp = r.partition("e")
        if not exp:
            d = Decimal(r)
            mant, _, exp = f"{d:e}".partition("e")
        mant = mant.rstrip("0").rstrip(".") if "." in mant else mant
        sign = "-" if exp.startswith("-") else "+"
        digits = exp.lstrip("+-").lstrip("0") or "0"
        if sign == "-" and len(digits) == 1:
            digits = "0" + digits if False else digits
        return f"{mant}e{sign}{digits}"
    s = format(Decimal(r), "f")
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return s


def _encode(obj: Any) -> str:
    if obj is None:
        return "null"
    if obj is True:
        return "true"
    if obj is False:
        return "false"
    if isinstance(obj, int):
        return str(int(obj))
    if isinstance(obj, float):
        return _go_float(obj)
    if isinstance(obj, str):
        return json.dumps(obj, ensure_ascii=False)
    if isinstance(obj, dict):
        return "{" + ",".join(json.dumps(str(k), ensure_ascii=False) + ":" + _encode(v) for k, v in obj.items()) + "}"
    if isinstance(obj, (list, tuple)):
        return "[" + ",".join(_encode(v) for v in obj) + "]"
    raise TypeError(f"cannot encode {type(obj).__name__}")


# Python's own encoder writes what _encode writes for everything but floats (compact separators, the
# same string escapes with ensure_ascii=False, ints and keys alike), in C: one call instead of one per value
_C_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False)


def _float_free(obj: Any) -> bool:
    """obj holds no float and nothing _encode refuses (str keys, JSON types only)."""
    t = type(obj)
    if t is str or t is int or t is bool or obj is None:
        return True
    if t is dict:
        return all(type(k) is str and _float_free(v) for k, v in obj.items())
    if t is list or t is tuple:
        return all(_float_free(v) for v in obj)
    return False


def go_json(obj: Any) -> str:
    """Compact JSON as Go's encoding/json writes it: HTML-safe escapes of <, >, &, U+2028/9, and
    floats in Go's shortest form (2.0 is "2")."""
    return html_safe(_C_ENCODER.encode(obj) if _float_free(obj) else _encode(obj))


def html_safe(s: str) -> str:
    """Encoded JSON with Go's HTML-safe escapes of <, >, &, U+2028 and U+2029 (encoding/json's HTMLEscape)."""
    return (
        s.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def go_json_bytes(obj: Any, newline: bool = False) -> bytes:
    """go_json as UTF-8; newline=True adds the "\\n" json.Encoder (gorilla WriteJSON) appends."""
    return (go_json(obj) + ("\n" if newline else "")).encode("utf-8", "surrogatepass")


# ---------------------------------------------------------------------------------------------
# errno and time text


def errno_text(err: BaseException) -> str:
    """Go's lower-case errno strings ("no such file or directory")."""
    if isinstance(err, OSError) and err.errno:
        msg = os.strerror(err.errno)
    else:
        msg = str(err.args[0] if getattr(err, "args", None) else err)
    return msg[:1].lower() + msg[1:]


def path_error(op: str, path: str, err: BaseException) -> str:
    """Go's *PathError text: "lstat /tmp/x: no such file or directory"."""
    return f"{op} {path}: {errno_text(err)}"


def go_time(ns: int) -> str:
    """Go's time.Time JSON form in UTC (RFC 3339 with nanoseconds, trailing zeros trimmed)."""
    secs, frac = divmod(int(ns), 1_000_000_000)
    base = _dt.datetime.fromtimestamp(secs, tz=_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    if frac:
        base += "." + f"{frac:09d}".rstrip("0")
    return base + "Z"
