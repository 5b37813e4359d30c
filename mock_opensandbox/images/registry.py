"""An OCI distribution (Docker Registry HTTP API v2) client for pulls, standard library only.

Auth: a 401 answer's ``WWW-Authenticate`` challenge is followed: ``Bearer realm=…,service=…,scope=…`` fetches a
token from the realm (with HTTP basic credentials when the create request carried ``imageAuth``), ``Basic``
retries with the credentials. Redirects (blob storage) are followed and the ``Authorization`` header is
dropped when the host changes. Manifests are fetched with every manifest/index media type accepted; an
index or manifest list yields the manifest of the wanted platform. Every manifest and config is checked
against its digest here, every layer blob while it is unpacked.

Credentials live only in the request headers of this module: no message, log line or exception text holds a
username, password, token or header (errors name the host, the repository, the status and the digest).
"""

from __future__ import annotations

import base64
import http.client
import ipaddress
import json
import re
import socket
import ssl
import threading
import urllib.parse
from typing import Any

from mock_opensandbox.images import reference
from mock_opensandbox.images.errors import (
    CorruptImage,
    ImageAuthError,
    ImageNotFound,
    RegistryUnreachable,
    UnsupportedImage,
)
from mock_opensandbox.images.sources import (
    INDEX_TYPES,
    MANIFEST_TYPES,
    MT_DOCKER_LIST,
    MT_DOCKER_MANIFEST,
    MT_OCI_INDEX,
    MT_OCI_MANIFEST,
    Blob,
    Found,
    check_digest,
    layers_from_manifest,
    load_json,
    pick_platform,
    sha256,
    want_platform,
)

ACCEPT = ", ".join([MT_OCI_INDEX, MT_OCI_MANIFEST, MT_DOCKER_LIST, MT_DOCKER_MANIFEST])
MAX_MANIFEST = 4 << 20
_CHALLENGE = re.compile(r'([A-Za-z_]+)="([^"]*)"')


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """('bearer'|'basic'|…, params) of a WWW-Authenticate header."""
    scheme, _, rest = (header or "").strip().partition(" ")
    return scheme.lower(), {k.lower(): v for k, v in _CHALLENGE.findall(rest)}


def is_loopback(host: str) -> bool:
    h = host.rsplit(":", 1)[0] if host.count(":") == 1 or host.startswith("[") and "]:" in host else host
    h = h.strip("[]")
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


class _Resp:
    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse):
        self.conn = conn
        self.resp = resp
        self.status = resp.status
        self.headers = resp.headers

    def read(self, n: int = -1) -> bytes:
        try:
            return self.resp.read(n) if n is not None and n >= 0 else self.resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise RegistryUnreachable("registry connection failed while reading (%s)" % type(e).__name__) from None

    def close(self) -> None:
        self.resp.close()
        self.conn.close()

    def __enter__(self) -> "_Resp":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Registry:
    """Pulls from OCI distribution registries. ``insecure`` hosts (and loopback ones, like Docker) may be
    spoken to over plain HTTP when HTTPS fails."""

    def __init__(
        self, *, insecure: tuple[str, ...] = (), timeout: float = 30.0, ssl_context: ssl.SSLContext | None = None
    ):
        self.insecure = set(insecure)
        self.timeout = timeout
        self.ssl_context = ssl_context or ssl.create_default_context()
        self._scheme: dict[str, str] = {}
        self._lock = threading.Lock()

    # -- public -------------------------------------------------------------------------------------
    def find(self, uri: str, platform: dict[str, str] | None, auth: dict[str, str] | None) -> Found:
        try:
            ref = reference.parse(uri)
        except ValueError as e:
            raise ImageNotFound("invalid reference format: %s" % e, ref=uri) from None
        s = _Session(self, ref, auth, uri)
        mdata, mtype, mdigest = s.manifest(ref.reference)
        manifest = load_json("manifest", mdata, uri)
        for _ in range(4):
            if mtype in INDEX_TYPES or ("manifests" in manifest and "layers" not in manifest):
                desc = pick_platform(manifest, want_platform(platform), uri)
                mdata, mtype, mdigest = s.manifest(desc["digest"])
                manifest = load_json("manifest", mdata, uri)
            else:
                break
        if "layers" not in manifest or manifest.get("schemaVersion") != 2:
            raise UnsupportedImage(
                "manifest of %s is not an OCI or Docker v2 image manifest (%s)" % (uri, mtype or "no media type"),
                ref=uri,
            )
        cdesc = manifest.get("config") or {}
        cfg = s.blob_bytes(cdesc.get("digest", ""), "image config")
        config = load_json("image config", cfg, uri)
        layers = layers_from_manifest(manifest, config, s.open_blob, uri)
        return Found(uri, "registry", ref.api_host, mdigest, cdesc["digest"], config, layers)

    # -- transport ----------------------------------------------------------------------------------
    def scheme(self, host: str) -> str:
        with self._lock:
            return self._scheme.get(host, "")

    def set_scheme(self, host: str, scheme: str) -> None:
        with self._lock:
            self._scheme[host] = scheme

    def connect(self, scheme: str, netloc: str) -> http.client.HTTPConnection:
        if scheme == "https":
            return http.client.HTTPSConnection(netloc, timeout=self.timeout, context=self.ssl_context)
        return http.client.HTTPConnection(netloc, timeout=self.timeout)


class _Session:
    """One pull: the repository, its credentials and the token the registry gave for it."""

    def __init__(self, reg: Registry, ref: reference.Reference, auth: dict[str, str] | None, uri: str):
        self.reg = reg
        self.ref = ref
        self.host = ref.api_host
        self.uri = uri
        self.basic: str | None = None
        if auth and (auth.get("username") or auth.get("password")):
            raw = "%s:%s" % (auth.get("username") or "", auth.get("password") or "")
            self.basic = "Basic " + base64.b64encode(raw.encode()).decode()
        self.authz: str | None = None  # what goes into Authorization for the registry
        self._lock = threading.Lock()

    # -- requests -----------------------------------------------------------------------------------
    def _send(self, url: str, headers: dict[str, str]) -> _Resp:
        """GET url, following up to 5 redirects; Authorization only ever goes to the registry host."""
        for _ in range(6):
            u = urllib.parse.urlsplit(url)
            if u.scheme not in ("http", "https") or not u.netloc:
                raise RegistryUnreachable("registry %s redirected to an unusable URL" % self.host, ref=self.uri)
            h = dict(headers)
            if u.netloc != self.host:
                h.pop("Authorization", None)
            path = u.path + ("?" + u.query if u.query else "")
            conn = self.reg.connect(u.scheme, u.netloc)
            try:
                conn.request("GET", path, headers=h)
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise _Net(e) from None
            if resp.status in (301, 302, 303, 307, 308) and resp.getheader("Location"):
                loc = urllib.parse.urljoin(url, resp.getheader("Location"))
                resp.close()
                conn.close()
                url = loc
                continue
            return _Resp(conn, resp)
        raise RegistryUnreachable("registry %s: too many redirects" % self.host, ref=self.uri)

    def _base(self) -> list[str]:
        s = self.reg.scheme(self.host)
        if s:
            return [s]
        if self.host in self.reg.insecure or is_loopback(self.host):
            return ["https", "http"]
        return ["https"]

    def get(self, path: str, accept: str | None = None) -> _Resp:
        """GET a registry path with auth; the answer's status is 2xx (else a typed error)."""
        headers = {"User-Agent": "mock-opensandbox-image-store"}
        if accept:
            headers["Accept"] = accept
        last: Exception | None = None
        tried = "https"
        for scheme in self._base():
            url = "%s://%s%s" % (scheme, self.host, path)
            try:
                resp = self._authed(url, headers)
            except _Net as e:
                last, tried = e.exc, scheme
                continue
            self.reg.set_scheme(self.host, scheme)
            return resp
        # Docker's words for it (moby's registry client: Get "<endpoint>/v2/": dial tcp ...)
        raise RegistryUnreachable('Get "%s://%s/v2/": %s' % (tried, self.host, _why(last, self.host)), ref=self.uri)

    def _authed(self, url: str, headers: dict[str, str]) -> _Resp:
        for attempt in range(2):
            h = dict(headers)
            if self.authz:
                h["Authorization"] = self.authz
            resp = self._send(url, h)
            if resp.status != 401 or attempt == 1:
                return self._check(resp)
            scheme, params = parse_challenge(resp.headers.get("WWW-Authenticate", ""))
            resp.close()
            if scheme == "bearer" and params.get("realm"):
                self.authz = "Bearer " + self._token(params)
            elif scheme == "basic" and self.basic:
                self.authz = self.basic
            else:
                raise self._denied()
        raise AssertionError("unreachable")  # pragma: no cover

    def _denied(self) -> Exception:
        if self.basic:
            return ImageAuthError(
                "unauthorized: the registry %s refused the credentials for %s" % (self.host, self.ref.path),
                ref=self.uri,
            )
        return ImageAuthError(
            "pull access denied for %s, repository does not exist or may require "
            "'docker login': denied: requested access to the resource is denied" % self.ref.familiar_name,
            ref=self.uri,
        )

    def _check(self, resp: _Resp) -> _Resp:
        if 200 <= resp.status < 300:
            return resp
        code = _error_code(resp)
        resp.close()
        if resp.status in (401, 403):
            raise self._denied()
        if resp.status == 404:
            raise ImageNotFound(
                "manifest for %s not found: manifest unknown: %s" % (self.ref.familiar(), code or "manifest unknown"),
                ref=self.uri,
            )
        if resp.status == 429 or resp.status >= 500:
            raise RegistryUnreachable("registry %s answered %d" % (self.host, resp.status), ref=self.uri)
        raise ImageNotFound(
            "registry %s answered %d for %s (%s)" % (self.host, resp.status, self.ref.path, code or "error"),
            ref=self.uri,
        )

    def _token(self, params: dict[str, str]) -> str:
        realm = params["realm"]
        q = {k: params[k] for k in ("service",) if params.get(k)}
        q["scope"] = params.get("scope") or "repository:%s:pull" % self.ref.path
        u = urllib.parse.urlsplit(realm)
        if u.scheme not in ("http", "https") or not u.netloc:
            raise ImageAuthError("registry %s gave an unusable token realm" % self.host, ref=self.uri)
        url = realm + ("&" if u.query else "?") + urllib.parse.urlencode(q)
        h = {"User-Agent": "mock-opensandbox-image-store"}
        if self.basic:
            h["Authorization"] = self.basic
        conn = self.reg.connect(u.scheme, u.netloc)
        try:
            try:
                conn.request("GET", url[len(u.scheme) + 3 + len(u.netloc) :] or "/", headers=h)
                resp = conn.getresponse()
                body = resp.read(1 << 20)
            except (OSError, http.client.HTTPException) as e:
                raise RegistryUnreachable(
                    "token server of %s is unreachable (%s)" % (self.host, _why(e, u.netloc)), ref=self.uri
                ) from None
        finally:
            conn.close()
        if resp.status in (401, 403):
            raise self._denied()
        if resp.status != 200:
            raise RegistryUnreachable("token server of %s answered %d" % (self.host, resp.status), ref=self.uri)
        try:
            doc = json.loads(body)
            tok = doc.get("token") or doc.get("access_token")
        except (ValueError, AttributeError):
            tok = None
        if not isinstance(tok, str) or not tok:
            raise ImageAuthError("token server of %s gave no token" % self.host, ref=self.uri)
        return tok

    # -- API ----------------------------------------------------------------------------------------
    def manifest(self, ref: str) -> tuple[bytes, str, str]:
        with self.get("/v2/%s/manifests/%s" % (self.ref.path, ref), accept=ACCEPT) as r:
            data = r.read(MAX_MANIFEST + 1)
            mtype = (r.headers.get("Content-Type") or "").split(";")[0].strip()
            header_digest = r.headers.get("Docker-Content-Digest")
        if len(data) > MAX_MANIFEST:
            raise CorruptImage("manifest of %s is larger than 4 MiB" % self.uri, ref=self.uri)
        if ref.startswith("sha256:"):
            check_digest("manifest", data, ref, self.uri)
        elif header_digest:
            check_digest("manifest", data, header_digest, self.uri)
        if mtype not in INDEX_TYPES + MANIFEST_TYPES:
            try:
                mtype = json.loads(data).get("mediaType") or mtype
            except (ValueError, AttributeError):
                pass

        return data, mtype, sha256(data)

    def blob_bytes(self, digest: str, what: str) -> bytes:
        if not digest:
            raise CorruptImage("%s has no digest" % what, ref=self.uri)
        with self.open_blob(digest) as r:
            data = r.read(MAX_MANIFEST * 4 + 1)
        check_digest(what, data, digest, self.uri)
        return data

    def open_blob(self, digest: str) -> Blob:
        try:
            return self.get("/v2/%s/blobs/%s" % (self.ref.path, digest))
        except ImageNotFound:
            raise CorruptImage(
                "blob %s of %s is missing from the registry" % (digest, self.uri), ref=self.uri
            ) from None


class _Net(Exception):
    def __init__(self, exc: Exception):
        super().__init__(str(type(exc).__name__))
        self.exc = exc


def _why(e: Exception | None, host: str = "") -> str:
    """Go's net/http words for a failed connection (what Docker's pull error ends with)."""
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    if e is None:
        return "no answer"
    if isinstance(e, socket.gaierror):
        return "dial tcp: lookup %s: no such host" % name
    if isinstance(e, ConnectionRefusedError):
        return "dial tcp %s: connect: connection refused" % host
    if isinstance(e, (socket.timeout, TimeoutError)):
        return "dial tcp %s: i/o timeout" % host
    if isinstance(e, ssl.SSLError):
        return "tls: handshake failure"
    if isinstance(e, ConnectionResetError):
        return "read: connection reset by peer"
    return type(e).__name__


def _error_code(resp: _Resp) -> str:
    try:
        doc = json.loads(resp.read(65536) or b"{}")
        errs = doc.get("errors") or []
        # JSON values: an entry with neither a message nor a code gives None, whose AttributeError below ends in ""
        texts: list[Any] = [e.get("message") or e.get("code") for e in errs if isinstance(e, dict)]
        return "; ".join("%s" % t.lower() for t in texts)
    except (ValueError, AttributeError, RegistryUnreachable):
        return ""
