"""Server oracle, generated bodies: hypothesis create, renew-expiration and metadata-patch bodies, the same to the
real server app and the mock (oracle_support.py); 25 examples each in ``make test``, 1,500 under ``-m slow``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiers.t2.clients import python_too_old
from tiers.t2.server import oracle_support as support
from tiers.t2.server.oracle_support import FAST, GOOD, SLOW, compare

if python_too_old("requirements-server-oracle.txt"):  # one skip line for the module, not one per test
    pytest.skip("server oracle: " + python_too_old("requirements-server-oracle.txt"), allow_module_level=True)

pytestmark = pytest.mark.spec_exempt("server 1.1.1 behaviours the June OpenAPI spec does not document")
# the module's fixtures (oracle_support.py)
oracle, mock, sandboxes, slow_only = support.oracle, support.mock, support.sandboxes, support.slow_only


# =====================================================================================================
# generated bodies
# =====================================================================================================
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**4), 10**4),
    st.sampled_from([1.5, 60.0, -0.0]),
    st.text(alphabet="ab -_./:0", max_size=6),
)
junk = st.recursive(
    scalars,
    lambda c: st.one_of(
        st.lists(c, max_size=2), st.dictionaries(st.sampled_from(["a", "uri", "os", "x"]), c, max_size=2)
    ),
    max_leaves=4,
)
label = st.text(alphabet="abAZ09-_./ ", min_size=0, max_size=8)
cpu = st.sampled_from(["500m", "1", "0", "-1", "1e3", "inf", "nan", "x", "", " 2 ", "0.5m", "1.5"])
mem = st.sampled_from(["512Mi", "1G", "0", "12Q", "", " 1Gi ", "1.5Gi", "100"])
FIELDS = {
    "image": st.one_of(
        junk,
        st.fixed_dictionaries({"uri": st.sampled_from(["local/python:3-slim", "", "  ", 5])}, optional={"auth": junk}),
    ),
    "snapshotId": st.one_of(scalars, st.sampled_from(["", " ", "snap"])),
    "platform": st.one_of(
        junk,
        st.fixed_dictionaries(
            {
                "os": st.sampled_from(["linux", "LINUX", "darwin", 3]),
                "arch": st.sampled_from(["amd64", "arm64 ", "x", None]),
            }
        ),
    ),
    "timeout": st.one_of(scalars, st.integers(0, 200), st.sampled_from(["60", " 70 ", "6_0", "60.0", 10**20])),
    "resourceLimits": st.one_of(
        junk,
        st.fixed_dictionaries(
            {}, optional={"cpu": cpu, "memory": mem, "gpu": st.sampled_from(["1", "all", "0"]), "disk": junk}
        ),
    ),
    "resource_limits": st.one_of(junk, st.just({"cpu": "1"})),
    "env": st.one_of(
        junk,
        st.dictionaries(
            st.sampled_from(["A", "OPENSANDBOX_EGRESS_LOG_LEVEL", "OPENSANDBOX_EGRESS_X", "OPENSANDBOX_LIFECYCLE"]),
            scalars,
            max_size=2,
        ),
    ),
    "metadata": st.one_of(junk, st.dictionaries(label, st.one_of(label, scalars), max_size=2)),
    "entrypoint": st.one_of(junk, st.lists(st.sampled_from(["true", "sleep", "1", 1, None]), max_size=3)),
    "secureAccess": st.one_of(st.booleans(), st.sampled_from(["true", "no", "maybe", 0, 1, 2, None])),
    "extensions": st.one_of(
        junk,
        st.dictionaries(
            st.sampled_from(["poolRef", "x", "access.renew.extend.seconds", "opensandbox.extensions.k"]),
            st.one_of(scalars, st.sampled_from(["300", "86401", "p"])),
            max_size=2,
        ),
    ),
    "templateId": st.one_of(scalars, st.just("tpl")),
    "lifecycle": st.one_of(
        junk,
        st.fixed_dictionaries(
            {},
            optional={
                "preStart": st.one_of(
                    junk,
                    st.fixed_dictionaries(
                        {"command": st.lists(st.sampled_from(["x", " ", 1]), max_size=2)},
                        optional={"timeoutSeconds": st.sampled_from([0, 5, 10801]), "extra": scalars},
                    ),
                ),
                "periodic": st.one_of(
                    junk,
                    st.lists(
                        st.fixed_dictionaries(
                            {
                                "name": st.sampled_from(["a", " a", " ", ""]),
                                "schedule": st.sampled_from(["@every 1m", " "]),
                                "command": st.sampled_from([["x"], [], [" "]]),
                            },
                            optional={"timeoutSeconds": st.sampled_from([1, 300, 301])},
                        ),
                        max_size=2,
                    ),
                ),
                "bogus": scalars,
            },
        ),
    ),
    "networkPolicy": st.one_of(
        junk,
        st.fixed_dictionaries(
            {},
            optional={
                "defaultAction": st.one_of(scalars, st.sampled_from(["allow", "deny"])),
                "default_action": st.sampled_from(["deny"]),
                "egress": st.one_of(
                    junk,
                    st.lists(
                        st.fixed_dictionaries(
                            {},
                            optional={
                                "action": st.one_of(scalars, st.just("allow")),
                                "target": st.sampled_from(["", "a.com", 3]),
                            },
                        ),
                        max_size=2,
                    ),
                ),
            },
        ),
    ),
    "credentialProxy": st.one_of(junk, st.just({"enabled": True})),
    "volumes": st.one_of(
        junk,
        st.lists(
            st.fixed_dictionaries(
                {"name": st.sampled_from(["v", "V", "v1"]), "mountPath": st.sampled_from(["/m", "m"])},
                optional={
                    "host": st.fixed_dictionaries(
                        {"path": st.sampled_from(["/data", "rel", "C:\\x", "/a//b", "/a/../b", "/a/"])}
                    ),
                    "pvc": st.fixed_dictionaries(
                        {"claimName": st.sampled_from(["c", "C", ""])},
                        optional={
                            "storage": st.sampled_from(["1Gi", "1X"]),
                            "accessModes": st.sampled_from([["rw"], "rw"]),
                            "createIfNotExists": st.sampled_from([False, "x"]),
                        },
                    ),
                    "ossfs": st.fixed_dictionaries(
                        {"bucket": st.sampled_from(["bkt", "b", " " * 3]), "endpoint": st.sampled_from(["e", "", " "])},
                        optional={
                            "version": st.sampled_from(["1.0", "3"]),
                            "options": st.sampled_from([["-o"], [" "], ["ok"]]),
                            "accessKeyId": st.sampled_from(["a", ""]),
                            "accessKeySecret": st.just("s"),
                        },
                    ),
                    "readOnly": st.sampled_from([True, "x"]),
                    "subPath": st.sampled_from(["a", "/a", "../a", ""]),
                },
            ),
            max_size=2,
        ),
    ),
}


create_bodies = st.one_of(
    st.fixed_dictionaries({}, optional=FIELDS),
    # mostly-valid bodies with one or two fields perturbed
    st.fixed_dictionaries(
        {},
        optional={
            k: FIELDS[k]
            for k in ("timeout", "metadata", "resourceLimits", "env", "platform", "extensions", "secureAccess")
        },
    ).map(lambda d: dict(GOOD, **d)),
)


def _create_case(mock, oracle, body):
    compare(mock, oracle, "POST", "/v1/sandboxes", body)


@FAST
@given(create_bodies)
def test_generated_create_bodies(mock, oracle, body):
    _create_case(mock, oracle, body)


expires = st.one_of(
    scalars,
    st.sampled_from(
        [
            "not-a-date",
            "2001-01-01",
            "2999-12-31T23:59:59Z",
            "2999-12-31",
            "2999-12-31T23:59:59+25:00",
            "2999-02-30T00:00:00Z",
            "1e12",
            4102444800,
            4102444800000,
            "2999-12-31 10:00",
            "2999-12-31T10:00:00.123456789",
        ]
    ),
)
renew_bodies = st.one_of(
    junk, st.fixed_dictionaries({}, optional={"expiresAt": expires, "expires_at": expires, "other": junk})
)
patch_bodies = st.one_of(
    junk,
    st.dictionaries(
        st.one_of(label, st.sampled_from(["opensandbox.io/x", "a/b", "A.b"])),
        st.one_of(label, st.none(), scalars),
        max_size=3,
    ),
)


@FAST
@given(renew_bodies, st.sampled_from(["timed", "manual", "unknown"]))
def test_generated_renew_bodies(mock, oracle, sandboxes, body, which):
    sid = sandboxes.get(which, "00000000-0000-0000-0000-000000000000")
    compare(mock, oracle, "POST", "/v1/sandboxes/%s/renew-expiration" % sid, body)


@FAST
@given(patch_bodies, st.sampled_from(["timed", "unknown"]))
def test_generated_patch_bodies(mock, oracle, sandboxes, body, which):
    sid = sandboxes.get(which, "00000000-0000-0000-0000-000000000000")
    compare(mock, oracle, "PATCH", "/v1/sandboxes/%s/metadata" % sid, body)


@pytest.mark.slow
@SLOW
@given(create_bodies)
def test_generated_create_bodies_slow(slow_only, mock, oracle, body):
    _create_case(mock, oracle, body)


@pytest.mark.slow
@SLOW
@given(renew_bodies, patch_bodies)
def test_generated_renew_patch_slow(slow_only, mock, oracle, sandboxes, rbody, pbody):
    compare(mock, oracle, "POST", "/v1/sandboxes/%s/renew-expiration" % sandboxes["timed"], rbody)
    compare(mock, oracle, "PATCH", "/v1/sandboxes/%s/metadata" % sandboxes["timed"], pbody)
