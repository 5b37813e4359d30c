"""Configuration coercion: provider options arrive as raw strings ("true", "60"), env/toml values
coerced by the host, manifest defaults as typed. Bad values are -32006 naming the field."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import methods.sandbox as sandbox
from config import Config
from errors import EppError


def bad(field, **raw):
    with pytest.raises(EppError) as info:
        Config(raw)
    assert info.value.code == -32006 and info.value.data["field"] == field
    assert field in info.value.message and info.value.data["suggestion"]
    return info.value


def test_defaults():
    cfg = Config({})
    assert cfg.server == "http://127.0.0.1:8080"
    assert cfg.api_key == "" and cfg.use_server_proxy is False and cfg.secure_access is False
    assert cfg.default_image == "python:3.12-slim"
    assert cfg.image_aliases == {"code": "opensandbox/code-interpreter:v1.1.0"}
    assert cfg.entrypoint == ["tail", "-f", "/dev/null"] and cfg.entrypoint_is_default
    assert cfg.ready_timeout == 60 and cfg.network_policy is None and cfg.platform is None
    assert cfg.http_timeout == 30.0


@pytest.mark.parametrize(
    "raw,server",
    [
        ({"base_url": "http://10.0.0.5:8080/v1"}, "http://10.0.0.5:8080"),
        ({"base_url": "http://10.0.0.5:8080/v1/"}, "http://10.0.0.5:8080"),
        ({"base_url": " https://osb.example.com/ "}, "https://osb.example.com"),
        ({"base_url": "https://gw.example.com/osb/v1"}, "https://gw.example.com/osb"),
        ({"base_url": "10.0.0.5:8080"}, "http://10.0.0.5:8080"),
        ({"domain": "osb.internal:9000"}, "http://osb.internal:9000"),
        ({"domain": "osb.internal", "protocol": "HTTPS"}, "https://osb.internal"),
        ({"domain": "osb.internal", "base_url": "http://other:1"}, "http://other:1"),  # explicit base_url wins
        ({"domain": "osb.internal", "base_url": "http://127.0.0.1:8080/v1"}, "http://osb.internal"),
    ],
)
def test_server_url(raw, server):
    assert Config(raw).server == server


def test_bad_urls_and_protocol():
    bad("base_url", base_url="ftp://x")
    bad("base_url", base_url="http://")
    bad("base_url", base_url="http://h:99999")
    bad("protocol", protocol="gopher")


@pytest.mark.parametrize(
    "value,expected",
    [
        ("true", True),
        ("TRUE", True),
        ("1", True),
        ("yes", True),
        ("on", True),
        (True, True),
        (1, True),
        ("false", False),
        ("0", False),
        ("no", False),
        ("Off", False),
        (False, False),
        ("", False),
        (0, False),
    ],
)
def test_bool_coercion(value, expected):
    assert Config({"use_server_proxy": value}).use_server_proxy is expected
    assert Config({"secure_access": value}).secure_access is expected


def test_bool_rejects_garbage():
    bad("use_server_proxy", use_server_proxy="maybe")
    bad("secure_access", secure_access=7)


@pytest.mark.parametrize("value,expected", [("60", 60), (" 5 ", 5), ("120.0", 120), (90, 90), (3600, 3600)])
def test_int_coercion(value, expected):
    assert Config({"ready_timeout": value}).ready_timeout == expected


@pytest.mark.parametrize("value", ["abc", "1.5", "0", "-3", "3601", True, [1]])
def test_int_rejects(value):
    bad("ready_timeout", ready_timeout=value)


@given(st.text(max_size=20))
def test_any_string_either_coerces_or_names_the_field(value):
    for field in (
        "ready_timeout",
        "use_server_proxy",
        "secure_access",
        "network_policy",
        "platform",
        "image_aliases",
        "entrypoint",
        "base_url",
        "protocol",
    ):
        try:
            Config({field: value})
        except EppError as exc:
            assert exc.code == -32006 and exc.data["field"] == field


def test_aliases_entrypoint_policy_platform():
    cfg = Config(
        {
            "image_aliases": "py=python:3.11, node=node:20-slim,",
            "entrypoint": "sh -c 'sleep infinity'",
            "network_policy": '{"defaultAction":"deny","egress":[{"action":"allow","target":"pypi.org"}]}',
            "platform": "linux/arm64",
        }
    )
    assert cfg.image_aliases == {"py": "python:3.11", "node": "node:20-slim"}
    assert cfg.entrypoint == ["sh", "-c", "sleep infinity"] and not cfg.entrypoint_is_default
    assert cfg.network_policy["defaultAction"] == "deny"
    assert cfg.platform == {"os": "linux", "arch": "arm64"}
    assert Config({"entrypoint": '["python3", "-m", "http.server"]'}).entrypoint == ["python3", "-m", "http.server"]
    assert Config({"image_aliases": ["a=b", "c=d"]}).image_aliases == {"a": "b", "c": "d"}  # csv from toml
    assert Config({"platform": "amd64"}).platform == {"os": "linux", "arch": "amd64"}
    bad("image_aliases", image_aliases="noequals")
    bad("entrypoint", entrypoint="sh -c 'unbalanced")
    bad("entrypoint", entrypoint="[1, 2]")
    bad("network_policy", network_policy="{not json")
    bad("network_policy", network_policy="[1]")
    bad("platform", platform="linux/arm64/v8")


def test_create_options_whitelist():
    base = Config({"base_url": "http://a:1", "api_key": "k1", "ready_timeout": "30"})
    clone = base.with_options(
        {
            "base_url": "http://evil:2",
            "api_key": "k2",
            "ready_timeout": "5",
            "default_image": "alpine:3",
            "entrypoint": "sleep 1000",
            "platform": "linux/amd64",
        }
    )
    assert clone.server == "http://a:1" and clone.api_key == "k1"  # never from options
    assert clone.ready_timeout == 5 and clone.default_image == "alpine:3"
    assert clone.entrypoint == ["sleep", "1000"] and clone.platform == {"os": "linux", "arch": "amd64"}
    assert base.with_options(None) is base and base.with_options({"base_url": "x"}) is base


def test_core_http_timeout():
    assert Config({}, {"http_timeout": 12.5}).http_timeout == 12.5
    assert Config({}, {"http_timeout": "junk"}).http_timeout == 30.0


def test_secrets_listed_for_redaction():
    cfg = Config({"api_key": "k-123", "registry_password": "p-456", "execd_access_token": "t-789"})
    assert sorted(cfg.secrets) == ["k-123", "p-456", "t-789"]


def test_image_resolution():
    cfg = Config({"image_aliases": "py=python:3.11"})
    assert sandbox.resolve_image(cfg, "base") == "python:3.12-slim"
    assert sandbox.resolve_image(cfg, None) == "python:3.12-slim"
    assert sandbox.resolve_image(cfg, "py") == "python:3.11"
    assert sandbox.resolve_image(cfg, "ghcr.io/me/img:1") == "ghcr.io/me/img:1"
    assert sandbox.resolve_image(Config({}), "code") == "opensandbox/code-interpreter:v1.1.0"
