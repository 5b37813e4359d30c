"""EPP input fuzzing: whatever arrives on stdin, the plugin answers every request that carries a
JSON-RPC id with one well-formed JSON-RPC error (or result), keeps serving, and writes nothing but
protocol lines to stdout (epp-host-reference §1.2: any other line gets it SIGKILLed by the host).

One plugin process per test, against an unreachable base_url (a closed port: every call that gets as
far as the network fails fast with E5001), except the last test, which fuzzes files.* parameters
against a mock sandbox. After every fuzzed line a sentinel request proves the plugin still answers,
and every stdout line written in between is checked.

Default run: a few hundred examples. ``make test-slow`` (-m slow): >= 10,000 per property.
"""

from __future__ import annotations

import base64
import contextlib
import json
import pathlib
import socket
import tempfile

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import provider
from tiers.toolkit.epp import MAX_LINE_BYTES, EppClient

METHODS = sorted(provider.METHODS)
INLINE = {"initialize", "shutdown"}  # answered inline; initialize would reconfigure the process
ALLOWED_CODES = {-32600, -32601, -32602, -32000, -32001, -32002, -32003, -32004, -32006}
ANSWER_WAIT = 15.0  # a hang detector, not a speed assertion
SENTINEL = {"method": "sandbox.get", "params": {}}  # answered -32602 at once, no I/O

DEFAULT = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
SLOW = settings(max_examples=10_000, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture
def slow_only(request):
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("slow fuzzing: run with `make test-slow` (-m slow)")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# =====================================================================================================
# the harness
# =====================================================================================================
def answered_id(line: bytes):
    """The id the plugin must answer for this line, or None (mirrors JSON-RPC 2.0 + provider.dispatch)."""
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(msg, dict):
        return None
    rid = msg.get("id")
    if rid is None or isinstance(rid, (bool, float, list, dict)):
        return None
    if not isinstance(msg.get("method"), str):
        return None if ("result" in msg or "error" in msg) else rid
    return rid


class Fuzzer:
    def __init__(self, config: dict):
        self._tmp = tempfile.TemporaryDirectory(prefix="epp-fuzz-")
        self.epp = EppClient(self._tmp.name + "/data", config, core={"http_timeout": 2.0})
        self.next_id = 1_000_000
        self.examples = 0

    def close(self):
        code = self.epp.close()
        self._tmp.cleanup()
        return code

    def fresh_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def _expect(self, rid):
        return self.epp.expect(rid)

    def _wait(self, rid, q):
        return self.epp.answer(rid, q, ANSWER_WAIT)

    def send_line(self, line: bytes, *, ours: bool = False) -> dict | None:
        """Write one raw line; return the answer it must get (None when it must get none)."""
        assert b"\n" not in line
        self.examples += 1
        start = len(self.epp.lines)
        rid = answered_id(line)
        if not ours:
            assume(not isinstance(rid, int) or rid < 1_000_000)  # never clash with our own ids
        q = self._expect(rid) if rid is not None else None
        with self.epp._wlock:
            self.epp.proc.stdin.write(line + b"\n")
            self.epp.proc.stdin.flush()
        sid = self.fresh_id()
        sq = self._expect(sid)
        self.epp.send({"id": sid, **SENTINEL})
        answer = self._wait(rid, q) if q is not None else None
        sentinel = self._wait(sid, sq)
        assert sentinel.get("error", {}).get("code") == -32602, sentinel
        # every line written meanwhile is a JSON object, and only the expected ids were answered
        assert self.epp.violations == [], self.epp.violations
        for raw in self.epp.lines[start:]:
            msg = json.loads(raw)
            assert isinstance(msg, dict) and len(raw) <= MAX_LINE_BYTES
            assert "id" in msg, f"unexpected notification {raw[:200]!r}"
            assert msg["id"] in (rid, sid), f"answer to an id that was not asked: {raw[:200]!r}"
        if answer is not None:
            check_answer(answer)
        return answer

    def send(self, msg: dict, *, ours: bool = False) -> dict | None:
        return self.send_line(json.dumps(msg).encode(), ours=ours)

    def call(self, method: str, params) -> dict:
        rid = self.fresh_id()
        answer = self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}, ours=True)
        assert answer is not None and answer["id"] == rid
        return answer


def check_answer(msg: dict) -> None:
    assert msg.get("jsonrpc") == "2.0"
    assert ("result" in msg) != ("error" in msg), msg
    if "error" in msg:
        err = msg["error"]
        assert isinstance(err, dict) and isinstance(err.get("code"), int) and isinstance(err.get("message"), str)
        assert err["code"] in ALLOWED_CODES, err
        assert "internal error" not in err["message"], err  # a TypeError/KeyError slipped through
        assert "data" not in err or isinstance(err["data"], dict)


@contextlib.contextmanager
def fuzzer(config: dict | None = None):
    fz = Fuzzer(config if config is not None else {"base_url": f"http://127.0.0.1:{closed_port()}"})
    try:
        yield fz
        # still serving: a real request gets its real answer
        ans = fz.call("sandbox.list", {"limit": 1})
        assert ans.get("error", {}).get("data", {}).get("sdk_code") in ("E5001", None)
    finally:
        code = fz.close()
    assert code == 0, f"the plugin exited with {code}"


# =====================================================================================================
# strategies
# =====================================================================================================
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
)
json_values = st.recursive(
    json_scalars,
    lambda kids: st.one_of(st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=10), kids, max_size=4)),
    max_leaves=12,
)
PARAM_KEYS = [
    "sandbox_id",
    "path",
    "source",
    "destination",
    "cmd",
    "args",
    "command",
    "env",
    "cwd",
    "user",
    "timeout",
    "detached",
    "background",
    "content_b64",
    "mode",
    "offset",
    "length",
    "depth",
    "pattern",
    "overwrite",
    "append",
    "port",
    "pid",
    "signal",
    "limit",
    "cursor",
    "status",
    "metadata",
    "template",
    "options",
    "envs",
    "cpu",
    "memory",
    "gpu",
    "disk",
    "secure",
    "request_timeout",
    "process_id",
    "data_b64",
    "cols",
    "rows",
    "data",
    "owner",
    "group",
    "id",
]
nasty_text = st.one_of(
    st.text(max_size=60),
    st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=30),
    st.sampled_from(
        [
            "",
            " ",
            "\x00",
            "/tmp/\x00x",
            "../../etc/passwd",
            "/" * 300,
            "a" * 5000,
            "\ud800",
            "é/ü",
            "0123456789abcdef0123456789abcdef",
            "00000000-0000-0000-0000-000000000000",
            "-1",
            "1e999",
            "!!notbase64!!",
            "Zm9v=",
            "=" * 7,
            "%00",
            "~root",
            "$HOME",
            "*" * 50,
            "**/*",
        ]
    ),
)
param_values = st.one_of(json_values, nasty_text, st.integers(-(2**65), 2**65), st.booleans(), st.none())
params_strategy = st.dictionaries(st.one_of(st.sampled_from(PARAM_KEYS), st.text(max_size=8)), param_values, max_size=6)
method_names = st.one_of(
    st.sampled_from([m for m in METHODS]),
    st.sampled_from(
        [
            "",
            "sandbox",
            "sandbox.",
            ".get",
            "SANDBOX.GET",
            "exec.run ",
            "files.exists",
            "$/cancel",
            "rpc.discover",
            "__init__",
            "METHODS",
            "x" * 300,
        ]
    ),
    st.text(max_size=20),
)
ids = st.one_of(
    st.integers(0, 999_999),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@st.composite
def envelopes(draw):
    msg: dict = {}
    if draw(st.booleans()) or draw(st.booleans()):
        msg["jsonrpc"] = draw(st.sampled_from(["2.0", "1.0", 2, None]))
    if draw(st.integers(0, 9)) > 0:
        msg["id"] = draw(ids)
    if draw(st.integers(0, 9)) > 0:
        msg["method"] = draw(st.one_of(method_names, json_values))
    if draw(st.integers(0, 9)) > 0:
        msg["params"] = draw(st.one_of(params_strategy, params_strategy, json_values))
    if draw(st.integers(0, 9)) == 0:
        msg[draw(st.sampled_from(["result", "error", "extra"]))] = draw(json_values)
    assume(not (isinstance(msg.get("method"), str) and msg["method"] in INLINE))
    return msg


@st.composite
def garbage_lines(draw):
    kind = draw(st.integers(0, 5))
    if kind == 0:
        data = draw(st.binary(max_size=200))
    elif kind == 1:
        data = draw(st.text(max_size=200)).encode("utf-8", "surrogatepass")
    elif kind == 2:  # JSON that is not an object
        data = json.dumps(draw(st.one_of(json_scalars, st.lists(json_values, max_size=4)))).encode()
    elif kind == 3:  # a request cut short
        full = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": draw(st.integers(0, 999)),
                "method": draw(method_names),
                "params": draw(params_strategy),
            }
        ).encode()
        data = full[: draw(st.integers(0, max(0, len(full) - 1)))]
    elif kind == 4:  # deep nesting
        depth = draw(st.integers(1, 200_000))
        data = b"[" * depth + b"]" * draw(st.sampled_from([0, depth]))
    else:  # NUL bytes and control characters around a request
        data = b"\x00" * draw(st.integers(1, 3)) + b'{"jsonrpc":"2.0","id":5,"method":"sandbox.get"}'
    data = data.replace(b"\n", b" ")
    assume(answered_id(data) is None or data.startswith(b"\x00"))
    return data


# =====================================================================================================
# properties
# =====================================================================================================
def _run(fz: Fuzzer, strategy, check, cfg):
    @cfg
    @given(strategy)
    def prop(value):
        check(fz, value)

    prop()


def _garbage(fz, line):
    fz.send_line(line)


def _envelope(fz, msg):
    answer = fz.send(msg)
    if answer is None:
        return
    if (
        "error" in answer
        and isinstance(msg.get("method"), str)
        and msg["method"] not in provider.METHODS
        and (msg.get("params") is None or isinstance(msg.get("params"), dict))
    ):
        assert answer["error"]["code"] == -32601, answer


def _typed_params(fz, item):
    method, params = item
    answer = fz.call(method, params)
    if "error" in answer:
        assert answer["error"]["code"] != -32601


def _huge(fz, item):
    method, key, size = item
    value = "\u00e9" * size
    answer = fz.call(method, {"sandbox_id": value if key == "sandbox_id" else "s-1", key: value})
    assert "error" in answer


known_calls = st.tuples(st.sampled_from([m for m in METHODS if m not in INLINE]), params_strategy)
huge_calls = st.tuples(
    st.sampled_from(
        ["sandbox.get", "files.read", "files.write", "exec.run", "sandbox.create", "ports.url", "files.list"]
    ),
    st.sampled_from(["sandbox_id", "path", "cmd", "content_b64", "template"]),
    st.sampled_from([100_000, 1_000_000, 2_500_000]),
)


def test_garbage_lines_get_no_answer_and_break_nothing():
    with fuzzer() as fz:
        _run(fz, garbage_lines(), _garbage, DEFAULT)


def test_envelopes_are_answered_exactly_when_they_carry_an_id():
    with fuzzer() as fz:
        _run(fz, envelopes(), _envelope, DEFAULT)


def test_known_methods_with_random_params_give_typed_errors():
    with fuzzer() as fz:
        _run(fz, known_calls, _typed_params, DEFAULT)


def test_huge_strings():
    with fuzzer() as fz:
        _run(fz, huge_calls, _huge, settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck)))


# every method that takes a sandbox_id validates it first (pty.* and process.stdin answer for themselves)
SANDBOX_METHODS = [
    m
    for m in METHODS
    if m not in INLINE | {"sandbox.list", "sandbox.create", "process.stdin"} and not m.startswith("pty.")
]
FILE_PATH_KEYS = {
    "files.read": ["path"],
    "files.write": ["path"],
    "files.list": ["path"],
    "files.stat": ["path"],
    "files.mkdir": ["path"],
    "files.remove": ["path"],
    "files.search": ["path"],
    "files.chmod": ["path"],
    "files.move": ["source", "destination"],
}


def test_wrong_param_types_and_nul_paths_are_invalid_params():
    not_a_string = st.one_of(
        st.none(),
        st.integers(),
        st.booleans(),
        st.floats(allow_nan=False),
        st.lists(st.text(max_size=3), max_size=2),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
        st.just(""),
        st.just("   "),
    )

    def check(fz, item):
        kind, method, bad = item
        if kind == "sandbox_id":
            params = {
                "sandbox_id": bad,
                "path": "/x",
                "source": "/a",
                "destination": "/b",
                "cmd": "true",
                "port": 80,
                "pid": 1,
                "mode": "644",
                "timeout": 60,
            }
            answer = fz.call(method, params)
            assert answer["error"]["code"] == -32602, (method, bad, answer)
        else:
            params = {"sandbox_id": "s-1", "path": "/ok", "source": "/ok", "destination": "/ok", "content_b64": ""}
            for key in FILE_PATH_KEYS[method]:
                params[key] = bad if isinstance(bad, str) and "\x00" in bad else "/a\x00b"
            answer = fz.call(method, params)
            assert answer["error"]["code"] == -32602, (method, answer)

    items = st.one_of(
        st.tuples(st.just("sandbox_id"), st.sampled_from(SANDBOX_METHODS), not_a_string),
        st.tuples(
            st.just("path"),
            st.sampled_from(sorted(FILE_PATH_KEYS)),
            st.text(max_size=20).map(lambda t: "/" + t + "\x00" + t),
        ),
    )
    with fuzzer() as fz:
        _run(fz, items, check, DEFAULT)


def test_text_that_is_not_unicode_is_invalid_params():
    """A lone surrogate (valid in JSON's \\u escapes, impossible in UTF-8) cannot go into a URL."""
    with fuzzer() as fz:
        for method in SANDBOX_METHODS:
            answer = fz.call(
                method,
                {
                    "sandbox_id": "s-\ud800",
                    "path": "/x",
                    "source": "/a",
                    "destination": "/b",
                    "cmd": "true",
                    "port": 80,
                    "pid": 1,
                    "mode": "644",
                    "timeout": 60,
                },
            )
            assert answer["error"]["code"] == -32602, (method, answer)
        answer = fz.call("files.read", {"sandbox_id": "s-1", "path": "/\udfff"})
        assert answer["error"]["code"] in (-32602, -32000)


def test_invalid_base64_is_refused_before_any_io():
    def check(fz, text):
        try:
            base64.b64decode(text, validate=True)
            return
        except ValueError:
            pass
        answer = fz.call("files.write", {"sandbox_id": "s-1", "path": "/x", "content_b64": text})
        assert answer["error"]["code"] == -32000 and "base64" in answer["error"]["message"], answer

    with fuzzer() as fz:
        _run(
            fz,
            st.one_of(st.text(max_size=30), st.sampled_from(["=", "a", "abc", "ab=c", "####", "Zg==Zg=="])),
            check,
            DEFAULT,
        )


# ---- the same properties at >= 10,000 examples each (make test-slow) -----------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ["garbage", "envelopes", "typed_params"])
def test_fuzz_slow(slow_only, name):
    strategy, check = {
        "garbage": (garbage_lines(), _garbage),
        "envelopes": (envelopes(), _envelope),
        "typed_params": (known_calls, _typed_params),
    }[name]
    with fuzzer() as fz:
        _run(fz, strategy, check, SLOW)
        assert fz.examples >= 10_000


# ---- files.* against a real sandbox of the mock ---------------------------------------------------------------


def test_file_params_against_a_mock_sandbox():
    """Arbitrary paths, modes, offsets and contents through the plugin to a mock sandbox: a result or a
    typed error, never an internal error; what was written reads back byte for byte."""
    from mock_opensandbox.server import MockOpenSandbox

    with MockOpenSandbox(execd_mode="latest") as mock:
        with fuzzer({"base_url": mock.base_url, "api_key": mock.api_key}) as fz:
            sid = fz.call("sandbox.create", {"template": "base", "timeout": 300})["result"]["sandbox_id"]
            written: dict = {}

            def check(fz, item):
                op, path, data, extra = item
                if op == "write":
                    ans = fz.call(
                        "files.write",
                        {"sandbox_id": sid, "path": path, "content_b64": base64.b64encode(data).decode(), **extra},
                    )
                    if "result" in ans:
                        written[path] = data
                        back = fz.call("files.read", {"sandbox_id": sid, "path": path})
                        if "result" in back:  # a later write may share the path after normalisation
                            assert base64.b64decode(back["result"]["content_b64"]) == data
                else:
                    fz.call(f"files.{op}", {"sandbox_id": sid, "path": path, **extra})

            paths = st.one_of(
                st.text(max_size=40).map(lambda t: "/fz/" + t),
                st.text(max_size=40),
                st.sampled_from(
                    [
                        "/",
                        "/fz/../../x",
                        "/fz/./a",
                        "//fz//b",
                        "/fz/" + "d/" * 40 + "f",
                        "/proc/self/environ",
                        "/fz/a\\b",
                        "/fz/ space",
                        "/fz/\u00e9\u4e16",
                    ]
                ),
            )
            extras = st.one_of(
                st.just({}),
                st.fixed_dictionaries(
                    {},
                    optional={
                        "mode": st.one_of(st.integers(-5, 0o10000), st.text(max_size=5)),
                        "offset": st.one_of(st.integers(-3, 10), st.text(max_size=2)),
                        "length": st.one_of(st.integers(-3, 10), st.none()),
                        "depth": st.one_of(st.integers(-1, 3), st.booleans()),
                        "pattern": st.one_of(st.text(max_size=6), st.integers()),
                    },
                ),
            )
            items = st.tuples(
                st.sampled_from(["write", "write", "read", "stat", "list", "mkdir", "remove", "search"]),
                paths,
                st.binary(max_size=300),
                extras,
            )
            _run(fz, items, check, settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck)))
            root = pathlib.Path(mock.store.get(sid).runtime.root).resolve()
            fz.call("sandbox.kill", {"sandbox_id": sid})
    assert not root.exists() or root.is_dir()
