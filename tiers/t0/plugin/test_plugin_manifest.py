"""The manifest and the initialize contract in provider.py must agree (the host compares them,
epp-host-reference §2.4); the manifest must pass the real host's parser; the plugin starts on
Python 3.10 and imports nothing heavy before it is needed."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: tomli (a dependency of agent-sandbox-client there)
    import tomli as tomllib

import pytest

import config
import methods.ports as ports
import provider

PLUGIN = pathlib.Path(provider.__file__).resolve().parent

MANIFEST = tomllib.loads((PLUGIN / "abx-provider.toml").read_text(encoding="utf-8"))
PY310 = "/root/.pyenv/versions/3.10.13/bin/python3.10"


def test_contract_constants_equal_the_manifest():
    assert MANIFEST["operation_contract_version"] == provider.OPERATION_CONTRACT_VERSION == 1
    assert MANIFEST["features"]["supported"] == provider.FEATURES
    assert MANIFEST["operations"] == provider.OPERATIONS
    assert MANIFEST["workflow"]["inputs"] == provider.WORKFLOW_INPUTS
    assert MANIFEST["workflow"]["startups"] == provider.STARTUP_MODES
    assert MANIFEST["provider"]["id"] == provider.PLUGIN_NAME
    assert MANIFEST["provider"]["version"] == provider.PLUGIN_VERSION
    assert MANIFEST["compat"]["requires"]["sdk"] == ">=0.4.0a6"
    assert ports.PLUGIN_NAME == provider.PLUGIN_NAME


def test_every_method_is_served_by_its_module():
    for name, module in provider.METHODS.items():
        assert callable(provider.method(name)), name
        assert provider.method(name).__module__ == "methods." + module == "methods." + name.split(".")[0]
    assert provider.method("nope.nope") is None


def test_initialize_answer_is_the_contract():
    import io

    ctx = provider.new_context(io.BytesIO(), io.BytesIO())
    res = provider.m_initialize(ctx, {"config": {"base_url": "http://x:1"}, "core": {"http_timeout": 5.0}})
    assert res["protocol"] == "epp/1"
    assert res["features"] == MANIFEST["features"]["supported"]
    assert res["operations"] == MANIFEST["operations"]
    assert res["workflow_inputs"] == MANIFEST["workflow"]["inputs"]
    assert res["startup_modes"] == MANIFEST["workflow"]["startups"]
    assert res["operation_contract_version"] == 1 and not isinstance(res["operation_contract_version"], bool)


def test_config_fields_match_the_plugin_defaults():
    fields = MANIFEST["config"]["fields"]
    assert set(fields) == set(config.DEFAULTS)
    for key, spec in fields.items():
        if spec.get("secret"):
            assert spec.get("default", "") in (None, ""), key
            assert key in config.SECRET_FIELDS
        elif "default" in spec:
            assert spec["default"] == config.DEFAULTS[key], key
        assert spec.get("type", "string") != "enum", "enum choices would need upper case (epp-host-ref §2.2)"
    assert set(config.SECRET_FIELDS) == {k for k, v in fields.items() if v.get("secret")}
    assert fields["api_key"]["env"] == ["OPEN_SANDBOX_API_KEY"]
    assert fields["domain"]["env"] == ["OPEN_SANDBOX_DOMAIN"]
    assert fields["protocol"]["env"] == ["OPEN_SANDBOX_PROTOCOL"]
    assert fields["use_server_proxy"]["env"] == ["OPEN_SANDBOX_USE_SERVER_PROXY"]
    assert set(config.CREATE_OPTIONS) <= set(fields) and not {"base_url", "api_key"} & set(config.CREATE_OPTIONS)


def test_the_real_host_accepts_the_manifest():
    from agent_sandbox.providers.manifest import load_manifest

    m = load_manifest(PLUGIN)
    assert m.id == "opensandbox" and m.kind == "exec"
    assert list(m.features) == provider.FEATURES
    assert {k: list(v) for k, v in m.operations.items()} == provider.OPERATIONS
    assert m.command == ("python3", "-S", "./launch.py")


def _run_plugin(python: str, lines: list[dict], env_extra: dict | None = None, tmp_path=None) -> list[dict]:
    data = "".join(json.dumps(m) + "\n" for m in lines).encode()
    env = {"PATH": os.environ.get("PATH", ""), "ABX_PROVIDER_DATA_DIR": str(tmp_path), **(env_extra or {})}
    out = subprocess.run(
        [python, str(PLUGIN / "provider.py")], input=data, capture_output=True, env=env, cwd=str(tmp_path), timeout=30
    )
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocol": "epp/1", "config": {}, "core": {"http_timeout": 30.0}, "locale": "en"},
}


@pytest.mark.skipif(not os.path.exists(PY310), reason="Python 3.10 interpreter not installed")
def test_plugin_runs_on_python_310(tmp_path):
    for path in sorted(PLUGIN.rglob("*.py")):
        subprocess.run(
            [PY310, "-c", f"import ast,sys; ast.parse(open({str(path)!r}).read(), feature_version=(3, 10))"],
            check=True,
            timeout=30,
        )
    got = _run_plugin(
        PY310,
        [
            INIT,
            {"jsonrpc": "2.0", "id": 2, "method": "nope.nope", "params": {}},
            {"jsonrpc": "2.0", "id": 3, "method": "shutdown", "params": {}},
        ],
        tmp_path=tmp_path,
    )
    by_id = {m["id"]: m for m in got}
    assert by_id[1]["result"]["protocol"] == "epp/1"
    assert by_id[2]["error"]["code"] == -32601
    assert by_id[3]["result"] == {}
    modules = ", ".join(
        ["methods." + m for m in sorted(set(provider.METHODS.values()))]
        + ["osb"]
        + ["osb." + p.stem for p in sorted((PLUGIN / "osb").glob("*.py")) if p.stem != "__init__"]
    )
    code = "import sys; sys.path.insert(0, %r); import provider, %s; print('ok')" % (str(PLUGIN), modules)
    assert subprocess.run([PY310, "-c", code], capture_output=True, text=True, timeout=30).stdout.strip() == "ok"


def test_startup_is_cheap_nothing_networky_imported(tmp_path):
    """Start and initialize import the loop, the provider, its context and the errors leaf only: the
    configuration, the client (the package osb/) and the methods (methods/) wait for the call that needs them."""
    init = json.dumps(INIT["params"])
    code = (
        "import io, json, sys; sys.path.insert(0, %r); before = set(sys.modules); import provider; "
        "ctx = provider.new_context(io.BytesIO(), io.BytesIO()); provider.m_initialize(ctx, json.loads(%r)); "
        "print(json.dumps(sorted(set(sys.modules) - before)))" % (str(PLUGIN), init)
    )
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=30)
    loaded = set(json.loads(out.stdout))
    own = {p.stem for p in PLUGIN.glob("*.py")} | {p.parent.name for p in PLUGIN.glob("*/__init__.py")}
    assert {m for m in loaded if m.split(".")[0] in own} == {"epp", "provider", "context", "errors"}, out.stderr
    assert "typing" not in loaded  # milliseconds at every start: annotations only
    assert not loaded & {"http.client", "socket", "ssl", "urllib.parse", "urllib.request", "email.utils"}


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sandbox_get_loads_only_the_lifecycle_part_of_the_client(tmp_path):
    """sandbox.get, a lifecycle call, loads the client's public surface and the modules behind the names it
    uses (transport, retries, lifecycle), never execd's (osb/execd.py, osb/sse.py, osb/multipart.py, osb/ws.py): the
    host starts a new plugin process for most calls, and each pays only for what it needs."""
    init = json.loads(json.dumps(INIT))
    init["params"]["config"] = {"base_url": f"http://127.0.0.1:{_closed_port()}"}
    get = {"jsonrpc": "2.0", "id": 2, "method": "sandbox.get", "params": {"sandbox_id": "x"}}
    out = subprocess.run(
        [sys.executable, "-S", "-X", "importtime", str(PLUGIN / "provider.py")],
        input="".join(json.dumps(m) + "\n" for m in (init, get)).encode(),
        capture_output=True,
        env={"PATH": os.environ.get("PATH", ""), "ABX_PROVIDER_DATA_DIR": str(tmp_path)},
        cwd=str(tmp_path),
        timeout=30,
    )
    assert b'"E5001"' in out.stdout, out.stdout  # answered: connection refused
    lines = out.stderr.decode(errors="replace").splitlines()
    loaded = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}
    client = {m for m in loaded if m == "osb" or m.startswith(("osb.", "osb_"))}
    assert client == {"osb", "osb.transport", "osb.retries", "osb.lifecycle"}


def test_only_protocol_lines_on_stdout_and_no_writes_outside_data_dir(tmp_path):
    before = sorted(str(p.relative_to(PLUGIN)) for p in PLUGIN.rglob("*"))
    init = json.loads(json.dumps(INIT))
    init["params"]["config"] = {"base_url": f"http://127.0.0.1:{_closed_port()}"}
    got = _run_plugin(
        sys.executable,
        [init, {"jsonrpc": "2.0", "id": 2, "method": "sandbox.get", "params": {"sandbox_id": "x"}}],
        tmp_path=tmp_path,
        env_extra={"PYTHONDONTWRITEBYTECODE": ""},
    )
    assert all(m.get("jsonrpc") == "2.0" for m in got)
    err = next(m for m in got if m.get("id") == 2)["error"]
    assert err["data"]["sdk_code"] == "E5001" and "connection refused" in err["message"]  # answered after EOF
    assert sorted(str(p.relative_to(PLUGIN)) for p in PLUGIN.rglob("*")) == before, (
        "the plugin wrote into its own (hashed) tree"
    )
