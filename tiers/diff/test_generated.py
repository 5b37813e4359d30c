"""Generated inputs (hypothesis) sent to the real execd and the mock: paths, Range headers, command
output bytes (invalid UTF-8, NUL, \\r, long lines), JSON bodies, env names, cwd, timeouts, multipart
bodies. A few examples per property in ``make test``; ``-m slow`` (make test-slow) runs many more.
Every generated path lives under the example's own directory of the throw-away sandbox."""

from __future__ import annotations

import json
import os
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from differential import Case, Ctx, run_case
from differential.corpus import _init_id, _wait_done
from differential.corpus_files import _multipart

QUICK = settings(
    max_examples=int(os.environ.get("OSB_DIFF_EXAMPLES", "6")),
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
    database=None,
)
SLOW = settings(
    max_examples=int(os.environ.get("OSB_DIFF_SLOW_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
_seq = iter(range(1 << 30))


def _check(pair, accepted, name: str, routes: tuple[str, ...], fn) -> None:
    case = Case(name, routes, fn)
    res = run_case(case, pair.real, pair.mock, accepted, tag=f"-{next(_seq)}")
    assert res.error is None, res.error
    assert not res.unexplained, "\n".join(f"{d.field}: real={d.real!r} mock={d.mock!r}" for d in res.unexplained)


# -- strategies --------------------------------------------------------------------------------
_name_chars = st.sampled_from(
    list(string.ascii_letters + string.digits + "._-~ $%{}()[]*?,:=+@#!'\"\\") + ["ü", "日", "\u00a0", "é"]
)
names = st.text(_name_chars, min_size=1, max_size=12).filter(lambda n: n not in (".", "..") and "/" not in n)
rel_paths = st.lists(st.one_of(names, st.just("."), st.just("..")), min_size=1, max_size=4)


def _under(c: Ctx, parts: list[str], trailing: bool = False) -> str:
    """A path under the example's directory; ".." never climbs above it (it is dropped there)."""
    depth, out = 0, []
    for p in parts:
        if p == "..":
            if depth == 0:
                continue
            depth -= 1
        elif p != ".":
            depth += 1
        out.append(p)
    return c.dir + "/" + "/".join(out) + ("/" if trailing else "")


range_specs = st.one_of(
    st.builds(lambda a, b: f"{a}-{b}", st.integers(-3, 40), st.integers(-3, 40)),
    st.builds(lambda a: f"{a}-", st.integers(-2, 40)),
    st.builds(lambda b: f"-{b}", st.integers(-2, 40)),
    st.sampled_from(["", "-", "x-1", "1-x", "1", " 1 - 2 ", "+1-2", "01-2", "1--2"]),
)
range_headers = st.one_of(
    st.builds(
        lambda unit, specs, sep: unit + sep.join(specs),
        st.sampled_from(["bytes=", "bytes=", "Bytes=", "items=", ""]),
        st.lists(range_specs, min_size=0, max_size=3),
        st.sampled_from([",", ", ", " ,"]),
    ),
    st.text(string.printable, max_size=12),
)


# -- properties --------------------------------------------------------------------------------
def _prop_paths(pair, accepted, parts, trailing, which):
    def fn(c: Ctx) -> None:
        c.mkdir("d/sub")
        c.write("d/f.txt", "x")
        c.symlink("d/l", "f.txt")
        p = _under(c, ["d"] + parts, trailing)
        if which == "info":
            c.get("/files/info", query=[("path", p)], label="info")
        elif which == "list":
            c.get("/directories/list", query={"path": p, "depth": "2"}, label="list")
        elif which == "search":
            c.get("/files/search", query={"path": c.p("d"), "pattern": parts[-1]}, label="search")
        elif which == "download":
            c.get(
                "/files/download", query={"path": p}, label="download"
            )  # a directory too (QUIRKS, "Download of a directory")
        elif which == "mkdir":
            c.post("/directories", {p: {"mode": 750}}, label="mkdir")
            c.snapshot("d", "fs")
        elif which == "delete":
            c.delete("/files", query=[("path", p)], label="delete")
            c.snapshot("d", "fs")
        elif which == "upload":
            meta = json.dumps({"path": p}).encode()
            c.req(
                "POST",
                "/files/upload",
                body=_multipart([("metadata", "m", meta, None), ("file", "f", b"up", None)]),
                headers=[("Content-Type", "multipart/form-data; boundary=XyZbOuNdArY")],
                label="upload",
            )
            c.snapshot("d", "fs")

    _check(pair, accepted, f"gen.paths.{which}", ("GET /files/info",), fn)


_WHICH = st.sampled_from(["info", "list", "search", "download", "mkdir", "delete", "upload"])


@pytest.mark.spec_exempt("differential: generated paths")
@QUICK
@given(parts=rel_paths, trailing=st.booleans(), which=_WHICH)
def test_generated_paths(pair, accepted, parts, trailing, which):
    _prop_paths(pair, accepted, parts, trailing, which)


def _prop_range(pair, accepted, size, header):
    def fn(c: Ctx) -> None:
        c.write("r.bin", bytes(range(size)))
        c.get("/files/download", query={"path": c.p("r.bin")}, headers=[("Range", header)], label="range")

    _check(pair, accepted, "gen.range", ("GET /files/download",), fn)


@pytest.mark.spec_exempt("differential: generated Range headers")
@QUICK
@given(size=st.sampled_from([0, 1, 10, 33]), header=range_headers)
def test_generated_ranges(pair, accepted, size, header):
    _prop_range(pair, accepted, size, header)


def _octal_printf(data: bytes) -> str:
    return "printf '" + "".join(f"\\{b:03o}" for b in data) + "'"


output_bytes = st.one_of(
    st.binary(max_size=40),
    st.lists(
        st.sampled_from(
            [
                b"a",
                b"\n",
                b"\r",
                b"\r\n",
                b"\x00",
                b"\xff",
                b"\xc3",
                b"\xc3\xa9",
                b"\xe2\x82",
                b"\xe2\x82\xac",
                b" ",
                b"<&>",
                b"\t",
                b"x" * 300,
            ]
        ),
        max_size=12,
    ).map(b"".join),
)


def _prop_output(pair, accepted, out, err, code):
    def fn(c: Ctx) -> None:
        cmd = f"{_octal_printf(out)}; {_octal_printf(err)} >&2; exit {code}"
        c.post("/command", {"command": cmd}, label="fg")
        r = c.post("/command", {"command": cmd, "background": True}, label="bg")
        cid = _init_id(r)
        _wait_done(c, cid)
        c.get(f"/command/{cid}/logs", label="logs")
        c.get(f"/command/status/{cid}", label="status")
        r = c.post("/session", {}, record=False)
        sid = json.loads(r.body).get("session_id") if r.status == 200 else None
        if sid:
            c.post(f"/session/{sid}/run", {"command": cmd}, label="session run")
            c.delete(f"/session/{sid}", record=False)

    _check(pair, accepted, "gen.output", ("POST /command", "GET /command/:id/logs", "POST /session/:sessionId/run"), fn)


@pytest.mark.spec_exempt("differential: generated command output")
@QUICK
@given(out=output_bytes, err=output_bytes, code=st.sampled_from([0, 0, 1, 7, 255]))
def test_generated_output(pair, accepted, out, err, code):
    _prop_output(pair, accepted, out, err, code)


json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=6),
    ),
    lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(st.text(max_size=5), kids, max_size=3)),
    max_leaves=6,
)
_FIELDS = ["command", "cwd", "background", "timeout", "uid", "gid", "envs", "Command", "TIMEOUT", "zzz"]


def _body(draw_fields: dict, command_ok: bool) -> dict:
    d = dict(draw_fields)
    if command_ok:
        d["command"] = "echo ok"
    for k in ("uid", "gid"):  # identities: never switch to something the sandbox cannot run as
        if k in d and not (d[k] is None or isinstance(d[k], (str, list, dict, bool, float))):
            d[k] = 0 if isinstance(d[k], int) and 0 <= d[k] < 2**32 else d[k]
    if "cwd" in d and isinstance(d["cwd"], str):
        d["cwd"] = "/tmp"
    if "background" in d and d["background"] is True:
        d["background"] = False
    if "command" in d and isinstance(d["command"], str):
        d["command"] = "echo ok"
    if "Command" in d and isinstance(d["Command"], str):
        d["Command"] = "echo ok"
    if "timeout" in d and isinstance(d["timeout"], int) and not isinstance(d["timeout"], bool) and d["timeout"] > 0:
        d["timeout"] = max(d["timeout"], 5000)
    return d


def _prop_json(pair, accepted, fields, command_ok, mutation):
    body = json.dumps(_body(fields, command_ok)).encode()
    if mutation == "truncate":
        body = body[: max(0, len(body) // 2)]
    elif mutation == "trailing":
        body += b" }x"
    elif mutation == "raw-ctl":
        body = body.replace(b"ok", b"o\x01k")

    def fn(c: Ctx) -> None:
        c.req("POST", "/command", body=body, headers=[("Content-Type", "application/json")], label="command")

    _check(pair, accepted, "gen.json", ("POST /command",), fn)


@pytest.mark.spec_exempt("differential: generated JSON bodies")
@QUICK
@given(
    fields=st.dictionaries(st.sampled_from(_FIELDS), json_values, max_size=4),
    command_ok=st.booleans(),
    mutation=st.sampled_from(["none", "none", "truncate", "trailing", "raw-ctl"]),
)
def test_generated_json_bodies(pair, accepted, fields, command_ok, mutation):
    _prop_json(pair, accepted, fields, command_ok, mutation)


env_names = st.text(st.sampled_from(list(string.ascii_letters + string.digits + "_-. =")), min_size=0, max_size=6)


def _prop_env(pair, accepted, envs, cwd_parts, cwd_kind, timeout):
    def fn(c: Ctx) -> None:
        c.mkdir("wd/a")
        c.write("wd/file", "x")
        if cwd_kind == "none":
            cwd = None
        elif cwd_kind == "tilde":
            cwd = "~"
        elif cwd_kind == "var":
            cwd = "$HOME"
        else:
            cwd = _under(c, ["wd"] + cwd_parts)
        body = {
            "command": "printenv | LC_ALL=C sort | grep -v '^_=' | grep -v '^PWD=' | grep -v '^SHLVL='; pwd",
            "envs": envs,
        }
        if cwd is not None:
            body["cwd"] = cwd
        if timeout is not None:
            body["timeout"] = timeout
        c.post("/command", body, label="command")

    _check(pair, accepted, "gen.env", ("POST /command",), fn)


@pytest.mark.spec_exempt("differential: generated envs/cwd")
@QUICK
@given(
    envs=st.dictionaries(env_names, st.text(st.characters(blacklist_characters="\x00"), max_size=8), max_size=3),
    cwd_parts=rel_paths,
    cwd_kind=st.sampled_from(["none", "path", "path", "tilde", "var"]),
    timeout=st.sampled_from([None, 0, -1, 60000]),
)
def test_generated_env_cwd(pair, accepted, envs, cwd_parts, cwd_kind, timeout):
    _prop_env(pair, accepted, envs, cwd_parts, cwd_kind, timeout)


part_specs = st.lists(
    st.tuples(
        st.sampled_from(["metadata", "file", "other", "Metadata"]),
        st.sampled_from([None, "f", "m.json", ""]),
        st.sampled_from(["good", "good", "bad-json", "no-path", "empty", "bytes"]),
    ),
    max_size=4,
)


def _prop_multipart(pair, accepted, specs, cut):
    def fn(c: Ctx) -> None:
        parts = []
        for i, (name, filename, kind) in enumerate(specs):
            if name.lower() == "metadata":
                data = {
                    "good": json.dumps({"path": c.p(f"u/m{i}")}).encode(),
                    "bad-json": b"{x",
                    "no-path": b"{}",
                    "empty": b"",
                    "bytes": b"\xff\x00",
                }[kind]
            else:
                data = {"good": b"content", "bad-json": b"{", "no-path": b"", "empty": b"", "bytes": b"\xff\x00"}[kind]
            parts.append((name, filename, data, None))
        body = _multipart(parts)
        if cut:
            body = body[: len(body) * cut // 4]
        c.req(
            "POST",
            "/files/upload",
            body=body,
            headers=[("Content-Type", "multipart/form-data; boundary=XyZbOuNdArY")],
            label="upload",
        )
        c.snapshot("", "fs")

    _check(pair, accepted, "gen.multipart", ("POST /files/upload",), fn)


@pytest.mark.spec_exempt("differential: generated multipart bodies")
@QUICK
@given(specs=part_specs, cut=st.sampled_from([0, 0, 0, 1, 2, 3]))
def test_generated_multipart(pair, accepted, specs, cut):
    _prop_multipart(pair, accepted, specs, cut)


# -- the same properties, many more examples (make test-slow) -----------------------------------
@pytest.mark.slow
@pytest.mark.spec_exempt("differential: generated inputs (slow)")
@SLOW
@given(
    parts=rel_paths,
    trailing=st.booleans(),
    which=_WHICH,
    size=st.sampled_from([0, 1, 10, 33]),
    header=range_headers,
    out=output_bytes,
    err=output_bytes,
    code=st.sampled_from([0, 1, 255]),
    fields=st.dictionaries(st.sampled_from(_FIELDS), json_values, max_size=4),
    command_ok=st.booleans(),
    mutation=st.sampled_from(["none", "truncate", "trailing", "raw-ctl"]),
    specs=part_specs,
    cut=st.sampled_from([0, 0, 1, 2, 3]),
)
def test_generated_slow(
    slow_only,
    pair,
    accepted,
    parts,
    trailing,
    which,
    size,
    header,
    out,
    err,
    code,
    fields,
    command_ok,
    mutation,
    specs,
    cut,
):
    _prop_paths(pair, accepted, parts, trailing, which)
    _prop_range(pair, accepted, size, header)
    _prop_output(pair, accepted, out, err, code)
    _prop_json(pair, accepted, fields, command_ok, mutation)
    _prop_multipart(pair, accepted, specs, cut)


@pytest.fixture
def slow_only(request):
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("slow differential fuzzing: run with `make test-slow` (-m slow)")
