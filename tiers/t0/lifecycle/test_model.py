"""t0: the sandbox table (mock_opensandbox.lifecycle.model) without HTTP: ids, states, TTL with a fake clock,
pagination, filters, metadata label rules."""

from __future__ import annotations

import threading
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mock_opensandbox.lifecycle import quirks
from mock_opensandbox.lifecycle.model import (
    FakeClock,
    Provisioner,
    SandboxStore,
    docker_pull_params,
    format_ts,
    is_valid_label_key,
    is_valid_label_value,
    validate_metadata,
)
from mock_opensandbox.lifecycle.quirks import MockError
from tiers.toolkit.waits import wait_until

T0 = datetime(2026, 11, 29, 7, 46, 42, 558200, tzinfo=timezone.utc)
IMG = {"uri": "local/python:3-slim"}
EP = ["tail", "-f", "/dev/null"]


class FakeProc:
    """Entrypoint stand-in: wait() blocks until exit(rc) is called."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self.rc: int | None = None

    def exit(self, rc: int) -> None:
        self.rc = rc
        self._done.set()

    def wait(self) -> int | None:
        self._done.wait(10)
        return self.rc


class RecordingProvisioner(Provisioner):
    def __init__(self, proc_factory=lambda: None):
        self.calls: list[tuple[str, str]] = []
        self.proc_factory = proc_factory
        self.procs: dict[str, object] = {}

    def start(self, sb):
        self.calls.append(("start", sb.id))
        p = self.proc_factory()
        self.procs[sb.id] = p
        return p

    def on_exit(self, sb):
        self.calls.append(("on_exit", sb.id))

    def pause(self, sb):
        self.calls.append(("pause", sb.id))

    def resume(self, sb):
        self.calls.append(("resume", sb.id))

    def stop(self, sb):
        self.calls.append(("stop", sb.id))


def make_store(**kw):
    clock = kw.pop("clock", None) or FakeClock(T0)
    prov = kw.pop("provisioner", None) or RecordingProvisioner()
    store = SandboxStore(clock=clock, provisioner=prov, start_reaper=kw.pop("start_reaper", False), **kw)
    return store, clock, prov


# -- timestamps ---------------------------------------------------------------------------------------
def test_format_ts_matches_recorded_shapes():
    assert format_ts(T0) == "2026-11-29T07:46:42.558200Z"  # recording 05
    assert format_ts(datetime(2026, 11, 29, 9, 47, 6, tzinfo=timezone.utc)) == "2026-11-29T09:47:06Z"  # recording 14
    plus2 = timezone(timedelta(hours=2))
    assert format_ts(datetime(2026, 11, 29, 11, 47, 6, 1, tzinfo=plus2)) == "2026-11-29T09:47:06.000001Z"


# -- create / get / json shapes -----------------------------------------------------------------------
def test_create_json_and_get_json_keys_follow_the_recordings():
    store, _clock, prov = make_store()
    sb = store.create(
        image=IMG, entrypoint=EP, metadata={"purpose": "live-recording"}, timeout=1800, resource_limits={"cpu": "500m"}
    )
    uuid.UUID(sb.id, version=4)
    created = sb.create_json()
    assert list(created) == ["id", "status", "metadata", "expiresAt", "createdAt", "entrypoint"]
    assert created["status"] == {
        "state": "Running",
        "reason": "CONTAINER_RUNNING",
        "message": "Sandbox container started successfully.",
        "lastTransitionAt": "2026-11-29T07:46:42.558200Z",
    }
    assert created["expiresAt"] == "2026-11-29T08:16:42.558200Z"
    got = store.get(sb.id).to_json()
    assert list(got) == ["id", "image", "status", "metadata", "entrypoint", "expiresAt", "createdAt"]
    assert got["image"] == {"uri": "local/python:3-slim"}
    assert got["status"]["message"] == "Sandbox container is running."
    assert ("start", sb.id) in prov.calls


def test_no_timeout_means_no_expiresat_and_no_metadata_key():
    store, _, _ = make_store()
    sb = store.create(image=IMG, entrypoint=EP)
    assert "expiresAt" not in sb.create_json() and "metadata" not in sb.create_json()  # recording 15
    assert "expiresAt" not in sb.to_json() and "metadata" not in sb.to_json()
    assert store.reap() == []


def test_image_auth_is_never_echoed():
    store, _, _ = make_store()
    sb = store.create(image={"uri": "private/x:1", "auth": {"username": "u", "password": "pw"}}, entrypoint=EP)
    assert sb.to_json()["image"] == {"uri": "private/x:1"}


def test_unknown_sandbox_is_404_with_the_recorded_body():
    store, _, _ = make_store()
    for op in (store.get, store.delete, store.pause, store.resume):
        with pytest.raises(MockError) as e:
            op("not-a-uuid")
        assert e.value.status == 404
        assert e.value.body() == {"code": "DOCKER::SANDBOX_NOT_FOUND", "message": "Sandbox not-a-uuid not found."}


def test_delete_then_404_and_provisioner_stop():
    store, _, prov = make_store()
    sb = store.create(image=IMG, entrypoint=EP)
    store.delete(sb.id)
    assert ("stop", sb.id) in prov.calls
    with pytest.raises(MockError) as e:
        store.delete(sb.id)
    assert e.value.quirk is quirks.SANDBOX_NOT_FOUND
    assert len(store) == 0


# -- image pull failures ------------------------------------------------------------------------------
def test_default_pull_failure_matches_recording_16():
    store, _, prov = make_store()
    with pytest.raises(MockError) as e:
        store.create(image={"uri": "local/does-not-exist:1"}, entrypoint=EP)
    assert e.value.status == 500
    body = e.value.body()
    assert body["code"] == "DOCKER::SANDBOX_IMAGE_PULL_FAILED"
    assert body["message"].startswith(
        "Failed to pull image local/does-not-exist:1: 500 Server Error for "
        "http+docker://localhost/v1.41/images/create?tag=1&fromImage=local%2Fdoes-not-exist:"
    )
    assert prov.calls == [] and len(store) == 0


def test_configurable_pull_failures():
    store, _, _ = make_store(pull_fails={"broken"})
    store.create(image={"uri": "local/does-not-exist:1"}, entrypoint=EP)  # default rule replaced
    with pytest.raises(MockError):
        store.create(image={"uri": "registry.example:5000/broken"}, entrypoint=EP)
    store2, _, _ = make_store(pull_fails=lambda uri: uri.endswith(":bad"))
    with pytest.raises(MockError):
        store2.create(image={"uri": "x:bad"}, entrypoint=EP)


@pytest.mark.parametrize(
    "uri,expected",
    [
        ("local/does-not-exist:1", ("local/does-not-exist", "1")),
        ("python", ("python", "latest")),
        ("registry:5000/app", ("registry:5000/app", "latest")),
        ("registry:5000/app:2", ("registry:5000/app", "2")),
        ("app@sha256:abc", ("app", "sha256:abc")),
    ],
)
def test_docker_pull_params(uri, expected):
    assert docker_pull_params(uri) == expected


# -- TTL ----------------------------------------------------------------------------------------------
def test_expiry_deletes_the_sandbox_at_expiresat():
    store, clock, prov = make_store()
    sb = store.create(image=IMG, entrypoint=EP, timeout=60)
    clock.advance(59.9)
    assert store.reap() == []
    clock.advance(0.1)
    assert store.reap() == [sb.id]
    assert ("stop", sb.id) in prov.calls
    with pytest.raises(MockError) as e:
        store.get(sb.id)
    assert e.value.status == 404


def test_reaper_thread_enforces_ttl_with_a_moved_clock():
    store, clock, prov = make_store(start_reaper=True, reap_interval=0.02)
    try:
        keep = store.create(image=IMG, entrypoint=EP, timeout=3600)
        gone = store.create(image=IMG, entrypoint=EP, timeout=60)
        clock.advance(61)
        assert wait_until(lambda: ("stop", gone.id) in prov.calls, 5.0)
        assert store.get(keep.id) is keep
    finally:
        store.close()
    assert ("stop", keep.id) in prov.calls


def test_renew_moves_expiry_and_must_be_in_the_future():
    store, clock, _ = make_store()
    sb = store.create(image=IMG, entrypoint=EP, timeout=60)
    with pytest.raises(MockError) as e:
        store.renew(sb.id, T0 - timedelta(hours=1))
    assert e.value.status == 400 and e.value.body() == {
        "code": "DOCKER::INVALID_EXPIRATION",
        "message": "New expiration time must be in the future.",
    }
    with pytest.raises(MockError):
        store.renew(sb.id, T0)  # "now" is not the future
    new = store.renew(sb.id, datetime(2026, 11, 29, 9, 47, 6))  # naive = UTC
    assert new == datetime(2026, 11, 29, 9, 47, 6, tzinfo=timezone.utc)
    assert sb.to_json()["expiresAt"] == "2026-11-29T09:47:06Z"
    clock.advance(3600)
    assert store.reap() == []
    clock.set(new)
    assert store.reap() == [sb.id]


def test_renew_can_shorten_but_not_add_a_ttl_to_a_manual_cleanup_sandbox():
    store, clock, _ = make_store()
    sb = store.create(image=IMG, entrypoint=EP, timeout=600)
    store.renew(sb.id, T0 + timedelta(seconds=5))
    clock.advance(5)
    assert store.reap() == [sb.id]
    manual = store.create(image=IMG, entrypoint=EP)  # no timeout: server labels it manual-cleanup
    with pytest.raises(MockError) as e:  # server docker_service.py renew_expiration; the oracle test
        store.renew(manual.id, T0 + timedelta(hours=1))
    assert (e.value.status, e.value.body()["code"]) == (409, "DOCKER::INVALID_EXPIRATION")


def test_renew_unknown_is_404_before_the_date_check():
    store, _, _ = make_store()
    with pytest.raises(MockError) as e:
        store.renew("00000000-0000-0000-0000-000000000000", T0 - timedelta(days=1))
    assert e.value.status == 404


# -- pause / resume -----------------------------------------------------------------------------------
def test_pause_resume_state_machine():
    store, _, prov = make_store()
    sb = store.create(image=IMG, entrypoint=EP)
    store.pause(sb.id)
    got = sb.to_json()["status"]
    assert (got["state"], got["reason"], got["message"]) == (
        "Paused",
        "CONTAINER_PAUSED",
        "Sandbox container is paused.",
    )
    assert got["lastTransitionAt"] == format_ts(sb.started_at)  # recording 14: unchanged by pause
    with pytest.raises(MockError) as e:
        store.pause(sb.id)
    assert (e.value.status, e.value.body()["code"]) == (409, "DOCKER::SANDBOX_NOT_RUNNING")
    store.resume(sb.id)
    assert sb.state == "Running"
    with pytest.raises(MockError) as e:
        store.resume(sb.id)
    assert (e.value.status, e.value.body()["code"]) == (409, "DOCKER::SANDBOX_NOT_PAUSED")
    assert [c for c, _ in prov.calls] == ["start", "pause", "resume"]


# -- entrypoint exit (recording 15) -------------------------------------------------------------------
@pytest.mark.parametrize(
    "rc,state,reason,message",
    [
        (1, "Failed", "CONTAINER_EXITED_ERROR", "Sandbox container exited with code 1."),
        (0, "Terminated", "CONTAINER_EXITED", "Sandbox container exited successfully."),
        (-9, "Failed", "CONTAINER_EXITED_ERROR", "Sandbox container exited with code 137."),
    ],
)
def test_entrypoint_exit_sets_the_status(rc, state, reason, message):
    store, clock, prov = make_store(provisioner=RecordingProvisioner(FakeProc))
    sb = store.create(image=IMG, entrypoint=["sh", "-c", "exit 1"], timeout=600)
    clock.advance(0.5)
    prov.procs[sb.id].exit(rc)
    assert wait_until(lambda: sb.exited, 5.0)
    st_ = sb.to_json()["status"]
    assert (st_["state"], st_["reason"], st_["message"]) == (state, reason, message)
    assert st_["lastTransitionAt"] == format_ts(T0 + timedelta(seconds=0.5))
    assert ("on_exit", sb.id) in prov.calls
    with pytest.raises(MockError) as e:
        store.pause(sb.id)
    assert e.value.quirk is quirks.SANDBOX_NOT_RUNNING
    with pytest.raises(MockError) as e:
        store.resume(sb.id)
    assert e.value.quirk is quirks.SANDBOX_NOT_PAUSED
    assert store.get(sb.id) is sb  # a failed sandbox stays listed until deleted or expired


def test_entrypoint_that_cannot_start_fails_with_its_exit_status():
    store, _, _ = make_store(provisioner=RecordingProvisioner(lambda: 127))
    sb = store.create(image=IMG, entrypoint=["/no/such/binary"])
    assert sb.to_json()["status"]["message"] == "Sandbox container exited with code 127."


def test_provisioner_failure_leaves_nothing_behind():
    class Boom(RecordingProvisioner):
        def start(self, sb):
            super().start(sb)
            raise RuntimeError("no runtime")

    prov = Boom()
    store, _, _ = make_store(provisioner=prov)
    with pytest.raises(RuntimeError):
        store.create(image=IMG, entrypoint=EP)
    assert len(store) == 0 and [c for c, _ in prov.calls] == ["start", "stop"]


# -- list: filters and pagination ---------------------------------------------------------------------
def _populate(store, clock, n, **kw):
    out = []
    for i in range(n):
        out.append(store.create(image=IMG, entrypoint=EP, metadata={"i": str(i), "team": "a" if i % 2 else "b"}, **kw))
        clock.advance(1)
    return out


def test_list_newest_first_and_pagination_numbers():
    store, clock, _ = make_store()
    made = _populate(store, clock, 45)
    items, pag = store.list()
    assert pag == {"page": 1, "pageSize": 20, "totalItems": 45, "totalPages": 3, "hasNextPage": True}
    assert [s.id for s in items] == [s.id for s in reversed(made)][:20]
    items, pag = store.list(page=3, page_size=20)
    assert len(items) == 5 and pag["hasNextPage"] is False
    items, pag = store.list(page=9, page_size=20)
    assert items == [] and pag["totalPages"] == 3
    items, pag = store.list(page_size=200)
    assert len(items) == 45 and pag["totalPages"] == 1
    with pytest.raises(ValueError):
        store.list(page=0)


def test_list_empty_pagination_matches_recording_05():
    store, _, _ = make_store()
    assert store.list(states=["Paused"]) == (
        [],
        {"page": 1, "pageSize": 20, "totalItems": 0, "totalPages": 0, "hasNextPage": False},
    )


def test_list_filters_state_or_case_insensitive_and_metadata_and():
    store, clock, _ = make_store()
    made = _populate(store, clock, 6)
    store.pause(made[0].id)
    store.pause(made[3].id)
    assert {s.id for s in store.list(states=["paused"])[0]} == {made[0].id, made[3].id}
    assert len(store.list(states=["Paused", "RUNNING"])[0]) == 6
    assert store.list(states=["Terminated"])[0] == []
    got = store.list(metadata={"team": "a"})[0]
    assert {s.id for s in got} == {made[1].id, made[3].id, made[5].id}
    got = store.list(metadata={"team": "a", "i": "3"}, states=["Paused"])[0]
    assert [s.id for s in got] == [made[3].id]
    assert store.list(metadata={"team": "a", "i": "2"})[0] == []
    assert store.list(metadata={"missing": ""})[0] == []


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 60), page=st.integers(1, 8), size=st.integers(1, 25))
def test_pagination_partitions_the_result(n, page, size):
    store, clock, _ = make_store()
    made = _populate(store, clock, n)
    seen = []
    p = 1
    while True:
        items, pag = store.list(page=p, page_size=size)
        assert pag["totalItems"] == n and pag["totalPages"] == -(-n // size)
        assert pag["hasNextPage"] == (p < pag["totalPages"])
        seen += [s.id for s in items]
        if not pag["hasNextPage"]:
            break
        p += 1
    assert seen == [s.id for s in reversed(made)]
    store.close()


# -- metadata labels (server services/validators.py) --------------------------------------------------
@pytest.mark.parametrize("key", ["purpose", "a", "A-b_c.d", "example.com/name", "a.b-c/x", "x" * 63, "p" * 253 + "/n"])
def test_valid_label_keys(key):
    assert is_valid_label_key(key)
    validate_metadata({key: "ok"})


@pytest.mark.parametrize(
    "key",
    [
        "",
        "Bad Key",
        "-a",
        "a-",
        "/a",
        "a/",
        "UPPER.example/x",
        "x" * 64,
        "a/b/c",
        "é",
        "a\n",
        "p" * 254 + "/n",
        "a..b/x",
    ],
)
def test_invalid_label_keys_are_rejected_with_a_message_naming_the_key(key):
    assert not is_valid_label_key(key)
    with pytest.raises(MockError) as e:
        validate_metadata({key: "ok"})
    assert e.value.status == 400
    assert e.value.body()["code"] == "SANDBOX::INVALID_METADATA_LABEL"
    assert e.value.body()["message"].startswith("Metadata key '%s' is invalid" % key)


def test_reserved_prefix_is_rejected():
    with pytest.raises(MockError) as e:
        validate_metadata({"opensandbox.io/id": "x"})
    assert "uses the reserved prefix 'opensandbox.io/'" in e.value.body()["message"]


@pytest.mark.parametrize(
    "value,ok",
    [
        ("", True),
        ("a", True),
        ("live-recording", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("-a", False),
        ("a_", False),
        ("has space", False),
        ("https://x", False),
        ("[]", False),
        ("a\n", False),
    ],
)
def test_label_values(value, ok):
    assert is_valid_label_value(value) is ok
    if not ok:
        with pytest.raises(MockError) as e:
            validate_metadata({"k": value})
        assert e.value.body()["message"].startswith("Metadata value '%s' is invalid" % value)


def test_store_create_rejects_bad_metadata_before_provisioning():
    store, _, prov = make_store()
    with pytest.raises(MockError):
        store.create(image=IMG, entrypoint=EP, metadata={"good": "x", "bad key": "y"})
    assert prov.calls == []


_ALNUM = st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_MID = st.sampled_from("abcXYZ019-_.")


@st.composite
def label_names(draw):
    n = draw(st.integers(1, 63))
    if n == 1:
        return draw(_ALNUM)
    mid = draw(st.lists(_MID, min_size=n - 2, max_size=n - 2))
    return draw(_ALNUM) + "".join(mid) + draw(_ALNUM)


@st.composite
def dns_subdomains(draw):
    labels = draw(st.lists(st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?\Z"), min_size=1, max_size=5))
    return ".".join(labels)


@settings(max_examples=200, deadline=None)
@given(name=label_names(), prefix=st.one_of(st.none(), dns_subdomains()))
def test_generated_valid_keys_are_accepted(name, prefix):
    key = name if prefix is None else prefix + "/" + name
    if key.startswith("opensandbox.io/"):
        return
    assert is_valid_label_key(key)
    validate_metadata({key: name})  # a valid name is also a valid value


@settings(max_examples=300, deadline=None)
@given(key=st.text(max_size=80), value=st.text(max_size=80))
def test_arbitrary_keys_and_values_never_crash_and_agree_with_the_rules(key, value):
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./")
    try:
        validate_metadata({key: value})
    except MockError as e:
        assert e.status == 400 and e.body()["code"] == "SANDBOX::INVALID_METADATA_LABEL"
        assert ("'%s'" % key) in e.body()["message"] or ("'%s'" % value) in e.body()["message"]
        return
    # accepted: every character is from the label alphabets and the value is short
    assert set(key) <= allowed and key
    assert set(value) <= allowed - {"/"} and len(value) <= 63


@settings(max_examples=200, deadline=None)
@given(value=st.text(alphabet="abcXYZ019-_.", max_size=70))
def test_value_rule_is_length_and_alnum_ends(value):
    expected = value == "" or (len(value) <= 63 and value[0].isalnum() and value[-1].isalnum())
    assert is_valid_label_value(value) is expected


def test_get_created_at_is_stamped_before_a_slow_start():
    """Docker stamps a container's Created before it starts it: a sandbox whose start takes long (a busy
    host) still has GET expiresAt - createdAt = its timeout, as the host computes its lifetime from them."""
    clock = FakeClock(T0)

    class SlowStart(RecordingProvisioner):
        def start(self, sb):
            clock.advance(2.0)
            return super().start(sb)

    store, _, _ = make_store(clock=clock, provisioner=SlowStart())
    sb = store.create(image=IMG, entrypoint=EP, timeout=600)
    got = store.get(sb.id).to_json()
    assert got["createdAt"] == "2026-11-29T07:46:42.558200Z"  # not 2 s later, when the start ended
    assert got["expiresAt"] == "2026-11-29T07:56:42.558200Z"
