"""The image store's registry client against a real registry: Debian's docker-registry (distribution 2.8)
on 127.0.0.1, token auth through a test token server, htpasswd basic auth, an image index, a digest
mismatch, an unknown image, an unreachable registry; no credential in any error or cache file."""

from __future__ import annotations

import os
import platform
import socket

import pytest

from mock_opensandbox.images import (
    CorruptImage,
    DigestMismatch,
    ImageAuthError,
    ImageNotFound,
    ImageStore,
    RegistryUnreachable,
)
from mock_opensandbox.runtime import optional
from tiers.toolkit import registry as reg
from tiers.toolkit.images import MT_MANIFEST, BuiltImage, layer, push, sha


def need_registry() -> None:
    if reg.BINARY is None:
        pytest.skip("docker-registry %s: registry tests skipped" % optional.why_absent("docker-registry"))


USER, PASSWORD = "alice", "pw-Canary-7d1e"
CREDS = {"username": USER, "password": PASSWORD}
HOST_AMD64 = platform.machine() in ("x86_64", "amd64")


@pytest.fixture(scope="module")
def token_registry():
    need_registry()
    r = reg.Registry("token", {USER: PASSWORD})
    try:
        yield r
    finally:
        r.close()
    assert r.proc is None and not os.path.exists(r.work)


@pytest.fixture(scope="module")
def pushed(token_registry):
    """team/app:1 (one image), team/multi:1 (an index: amd64 + arm64), team/bad:1 (a layer blob altered in
    the registry's storage after the push)."""
    r = token_registry
    app = BuiltImage(
        [
            layer([("dir", "etc"), ("file", "etc/os-release", "ID=pushed\n")]),
            layer([("file", "etc/.wh.os-release", ""), ("file", "hello", "hi")]),
        ]
    )
    push(r.base, "team/app", "1", app, authz=r.push_authz(USER, "team/app"))
    amd = BuiltImage([layer([("file", "arch", "amd64")])], arch="amd64")
    arm = BuiltImage([layer([("file", "arch", "arm64")])], arch="arm64")
    push(r.base, "team/multi", "1", index=[arm, amd], authz=r.push_authz(USER, "team/multi"))
    bad = BuiltImage([layer([("file", "x", "y" * 4096)], gz=False)], gz=False)
    push(r.base, "team/bad", "1", bad, authz=r.push_authz(USER, "team/bad"))
    p = r.blob_path(sha(bad.layers[0][0]))
    data = bytearray(open(p, "rb").read())
    data[600] ^= 0x01  # inside the file's data: still a valid tar, wrong digest
    with open(p, "wb") as f:
        f.write(bytes(data))
    return {"app": app, "amd": amd, "arm": arm, "bad": bad}


def fresh(tmp_path, name="cache") -> ImageStore:
    return ImageStore(str(tmp_path / name), local_daemon=False, timeout=10)


def no_secret_in(tmp_path, *texts: str) -> None:
    for t in texts:
        assert PASSWORD not in t and USER not in t
    for dp, _dn, fn in os.walk(tmp_path):
        for n in fn:
            p = os.path.join(dp, n)
            if os.path.isfile(p) and not os.path.islink(p):
                assert PASSWORD.encode() not in open(p, "rb").read(), p


def test_token_auth_pull_with_image_auth(tmp_path, token_registry, pushed):
    s = fresh(tmp_path)
    img = s.resolve(token_registry.host + "/team/app:1", auth=CREDS)
    assert img.source == "registry" and img.digest == pushed["app"].digest
    assert img.id == sha(pushed["app"].config) and img.env[-1] == "HELLO=world"
    root = img.rootfs()
    assert sorted(os.listdir(root)) == ["etc", "hello"]
    assert os.listdir(os.path.join(root, "etc")) == []  # etc/os-release whited out by the second layer
    no_secret_in(tmp_path)
    reqs = token_registry.token.requests
    assert any(q["scope"] == "repository:team/app:pull" and q["auth"] for q in reqs)


def test_wrong_password_and_no_credentials_are_auth_errors(tmp_path, token_registry, pushed):
    ref = token_registry.host + "/team/app:1"
    with pytest.raises(ImageAuthError) as wrong:
        fresh(tmp_path, "a").resolve(ref, auth={"username": USER, "password": "not-" + PASSWORD})
    assert "refused the credentials" in str(wrong.value)
    with pytest.raises(ImageAuthError) as anon:
        fresh(tmp_path, "b").resolve(ref)
    assert "pull access denied for 127.0.0.1:%d/team/app" % token_registry.port in str(anon.value)
    no_secret_in(tmp_path, str(wrong.value), repr(wrong.value), str(anon.value))


def test_manifest_list_picks_the_platform(tmp_path, token_registry, pushed):
    ref = token_registry.host + "/team/multi:1"
    s = fresh(tmp_path)
    arm = s.resolve(ref, auth=CREDS, platform={"os": "linux", "arch": "arm64"})
    assert arm.digest == pushed["arm"].digest and open(os.path.join(arm.rootfs(), "arch")).read() == "arm64"
    if HOST_AMD64:
        host = s.resolve(ref, auth=CREDS)
        assert host.digest == pushed["amd"].digest


def test_layer_digest_mismatch_refused_and_not_cached(tmp_path, token_registry, pushed):
    s = fresh(tmp_path)
    with pytest.raises(DigestMismatch, match="layer blob"):
        s.resolve(token_registry.host + "/team/bad:1", auth=CREDS)
    assert os.listdir(tmp_path / "cache" / "layers" / "sha256") == []
    assert all(os.listdir(tmp_path / "cache" / "tmp" / d) == [] for d in os.listdir(tmp_path / "cache" / "tmp"))
    assert s.images() == []


def test_unknown_image_and_unknown_tag(tmp_path, token_registry, pushed):
    s = fresh(tmp_path)
    with pytest.raises(ImageNotFound, match="manifest unknown"):
        s.resolve(token_registry.host + "/team/app:nope", auth=CREDS)


def test_unreachable_registry(tmp_path):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(RegistryUnreachable, match="connection refused"):
        fresh(tmp_path).resolve("127.0.0.1:%d/team/app:1" % port, auth=CREDS)
    no_secret_in(tmp_path)


def test_basic_auth_registry(tmp_path):
    need_registry()
    try:
        r = reg.Registry("htpasswd", {USER: PASSWORD})
    except ImportError:
        pytest.skip("no bcrypt for the registry's htpasswd (Python's crypt module is gone)")
    try:
        import base64

        basic = "Basic " + base64.b64encode(("%s:%s" % (USER, PASSWORD)).encode()).decode()
        img = BuiltImage([layer([("file", "basic", "ok")])])
        push(r.base, "b/app", "1", img, authz=basic)
        got = fresh(tmp_path, "a").resolve(r.host + "/b/app:1", auth=CREDS)
        assert got.digest == img.digest and os.listdir(got.rootfs()) == ["basic"]
        with pytest.raises(ImageAuthError) as e:
            fresh(tmp_path, "b").resolve(r.host + "/b/app:1", auth={"username": USER, "password": "x"})
        no_secret_in(tmp_path, str(e.value))
    finally:
        r.close()


def test_corrupt_manifest_in_storage_is_refused(tmp_path, token_registry, pushed):
    """The registry's stored manifest altered (still JSON): its bytes no longer match the digest the
    registry announces (Docker-Content-Digest)."""
    r = token_registry
    img = BuiltImage([layer([("file", "m", "m")])])
    push(r.base, "team/man", "1", img, authz=r.push_authz(USER, "team/man"))
    p = r.blob_path(img.digest)
    data = open(p, "rb").read()
    with open(p, "wb") as f:
        f.write(data.replace(b'"schemaVersion": 2', b'"schemaVersion":  2'))
    with pytest.raises(CorruptImage):
        fresh(tmp_path).resolve(r.host + "/team/man:1", auth=CREDS)


def test_redirected_blobs_never_get_the_credentials(tmp_path):
    """Registries send blobs to storage elsewhere (307): the Authorization header stays with the registry
    host (a stand-in registry and storage here, stdlib servers; no docker-registry needed)."""
    import base64
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    img = BuiltImage([layer([("file", "r", "redirected")])])
    blobs = img.blobs()
    seen: dict[str, list] = {"registry": [], "storage": []}
    basic = "Basic " + base64.b64encode(("%s:%s" % (USER, PASSWORD)).encode()).decode()

    def server(name, answer):
        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                seen[name].append(self.headers.get("Authorization"))
                status, headers, body = answer(self)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        return httpd

    storage = server("storage", lambda h: (200, {}, blobs[h.path.rsplit("/", 1)[1]]))

    def reg_answer(h):
        if h.headers.get("Authorization") != basic:
            return 401, {"WWW-Authenticate": 'Basic realm="r"'}, b""
        if "/manifests/" in h.path:
            return 200, {"Content-Type": MT_MANIFEST, "Docker-Content-Digest": img.digest}, img.manifest
        digest = h.path.rsplit("/", 1)[1]
        return 307, {"Location": "http://127.0.0.1:%d/data/%s" % (storage.server_address[1], digest)}, b""

    registry = server("registry", reg_answer)
    try:
        got = fresh(tmp_path).resolve("127.0.0.1:%d/r/app:1" % registry.server_address[1], auth=CREDS)
        assert got.digest == img.digest and os.listdir(got.rootfs()) == ["r"]
        assert basic in seen["registry"] and len(seen["storage"]) == 2  # the config and the layer
        assert seen["storage"] == [None, None]
    finally:
        for s in (registry, storage):
            s.shutdown()
            s.server_close()
