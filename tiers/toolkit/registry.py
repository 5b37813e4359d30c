"""A real OCI registry for tests: Debian's ``docker-registry`` (distribution 2.8) on 127.0.0.1 with an
ephemeral port and a temp storage dir, with token auth (a tiny token server here, JWTs signed by openssl)
or htpasswd basic auth. Everything started here is stopped and removed by ``close()``."""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from mock_opensandbox.runtime import optional

BINARY = optional.which("docker-registry", "docker-registry", "registry")  # None with OSB_MOCK_NO=docker-registry
SERVICE = "test-registry"
ISSUER = "test-issuer"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenServer:
    """Docker's token auth (distribution docs/spec/auth/token.md): GET /token?service=&scope= with HTTP
    basic credentials; anonymous or wrong credentials get 401. The JWT carries the signing cert (x5c)."""

    def __init__(self, work: str, users: dict[str, str]):
        self.users = users
        self.key = os.path.join(work, "token.key")
        self.cert = os.path.join(work, "token.pem")
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                self.key,
                "-out",
                self.cert,
                "-days",
                "1",
                "-subj",
                "/CN=test-token",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        pem = open(self.cert).read()
        der = base64.b64decode("".join(pem.split("-----")[2].split()))
        self.x5c = base64.b64encode(der).decode()
        self.requests: list[dict] = []
        srv = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def do_GET(self):
                q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                auth = self.headers.get("Authorization", "")
                srv.requests.append({"scope": q.get("scope", [""])[0], "auth": bool(auth)})
                user = None
                if auth.startswith("Basic "):
                    u, _, p = base64.b64decode(auth[6:]).decode().partition(":")
                    if srv.users.get(u) == p:
                        user = u
                if user is None:
                    body = b'{"details":"incorrect username or password"}'
                    self.send_response(401)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                access = []
                for sc in q.get("scope", []):
                    typ, name, actions = sc.split(":")
                    access.append({"type": typ, "name": name, "actions": actions.split(",")})
                body = json.dumps({"token": srv.mint(user, access)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def realm(self) -> str:
        return "http://127.0.0.1:%d/token" % self.port

    def mint(self, user: str, access: list[dict]) -> str:
        now = int(time.time())
        head = _b64(json.dumps({"typ": "JWT", "alg": "RS256", "x5c": [self.x5c]}).encode())
        claims = _b64(
            json.dumps(
                {
                    "iss": ISSUER,
                    "sub": user,
                    "aud": SERVICE,
                    "exp": now + 600,
                    "nbf": now - 60,
                    "iat": now,
                    "jti": secrets.token_hex(8),
                    "access": access,
                }
            ).encode()
        )
        signing = ("%s.%s" % (head, claims)).encode()
        sig = subprocess.run(
            ["openssl", "dgst", "-sha256", "-sign", self.key],
            input=signing,
            capture_output=True,
            check=True,
            timeout=30,
        ).stdout
        return "%s.%s.%s" % (head, claims, _b64(sig))

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


class Registry:
    """``docker-registry serve`` on 127.0.0.1:<ephemeral>; auth = "token" | "htpasswd" | None."""

    def __init__(self, auth: str | None, users: dict[str, str] | None = None):
        assert BINARY, "docker-registry is not installed"
        self.work = tempfile.mkdtemp(prefix="osb-registry-")
        self.storage = os.path.join(self.work, "storage")
        self.token: TokenServer | None = None
        self.proc: subprocess.Popen | None = None
        users = users or {}
        try:
            cfg = [
                "version: 0.1",
                "log:",
                "  level: info",
                "  accesslog:",
                "    disabled: true",
                "storage:",
                "  filesystem:",
                "    rootdirectory: %s" % self.storage,
                "  delete:",
                "    enabled: true",
                "http:",
                "  addr: 127.0.0.1:0",
            ]
            if auth == "token":
                self.token = TokenServer(self.work, users)
                cfg += [
                    "auth:",
                    "  token:",
                    "    realm: %s" % self.token.realm,
                    "    service: %s" % SERVICE,
                    "    issuer: %s" % ISSUER,
                    "    rootcertbundle: %s" % self.token.cert,
                ]
            elif auth == "htpasswd":
                import warnings

                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    import crypt  # bcrypt through libxcrypt; the registry reads only bcrypt
                lines = [
                    u + ":" + crypt.crypt(p, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16)) for u, p in users.items()
                ]
                hp = os.path.join(self.work, "htpasswd")
                with open(hp, "w") as f:
                    f.write("\n".join(lines) + "\n")
                cfg += ["auth:", "  htpasswd:", "    realm: basic-realm", "    path: %s" % hp]
            path = os.path.join(self.work, "config.yml")
            with open(path, "w") as f:
                f.write("\n".join(cfg) + "\n")
            self.log = open(os.path.join(self.work, "registry.log"), "w+b")
            self.proc = subprocess.Popen(
                [BINARY, "serve", path],
                stdout=self.log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            self.port = self._wait_port()
        except BaseException:
            self.close()
            raise

    def _wait_port(self) -> int:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            self.log.seek(0)
            m = re.search(rb"listening on 127\.0\.0\.1:(\d+)", self.log.read())
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.log.seek(0)
        raise RuntimeError("registry did not start: %s" % self.log.read()[-2000:].decode(errors="replace"))

    @property
    def host(self) -> str:
        return "127.0.0.1:%d" % self.port

    @property
    def base(self) -> str:
        return "http://" + self.host

    def blob_path(self, digest: str) -> str:
        hexd = digest.split(":", 1)[1]
        return os.path.join(self.storage, "docker", "registry", "v2", "blobs", "sha256", hexd[:2], hexd, "data")

    def push_authz(self, user: str, repo: str) -> str | None:
        if self.token:
            return "Bearer " + self.token.mint(
                user, [{"type": "repository", "name": repo, "actions": ["pull", "push"]}]
            )
        return None

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
            self.proc = None
        if self.token is not None:
            self.token.close()
            self.token = None
        if getattr(self, "log", None):
            self.log.close()
        shutil.rmtree(self.work, ignore_errors=True)
