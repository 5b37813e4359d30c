"""A tiny authoritative DNS server for tests (UDP, 127.0.0.1, an ephemeral port): A records from a
table, NXDOMAIN for any other name, and a log of the names asked (to see what a policy resolver
forwarded). Standard library only; stop() ends its thread and closes the port."""

from __future__ import annotations

import os
import socket
import struct
import threading


class StubResolver:
    def __init__(self, records: dict[str, str]):
        self.records = {k.lower().rstrip("."): v for k, v in records.items()}
        self.asked: list[str] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self._stop = False
        self._thread = threading.Thread(target=self._serve, name="test-dns", daemon=True)

    @property
    def address(self) -> str:
        return "127.0.0.1:%d" % self.port

    def __enter__(self) -> "StubResolver":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop = True
        try:
            self.sock.sendto(b"", ("127.0.0.1", self.port))  # wake recvfrom
        except OSError:
            pass
        self._thread.join(timeout=5)
        self.sock.close()

    def _serve(self) -> None:
        while not self._stop:
            try:
                pkt, peer = self.sock.recvfrom(4096)
            except OSError:
                return
            if self._stop:
                return
            if len(pkt) < 17:
                continue
            i, labels = 12, []
            while i < len(pkt) and pkt[i]:
                labels.append(pkt[i + 1 : i + 1 + pkt[i]].decode("ascii", "replace"))
                i += 1 + pkt[i]
            qend = i + 5
            name = ".".join(labels).lower()
            qtype = struct.unpack("!H", pkt[i + 1 : i + 3])[0]
            self.asked.append(name)
            qid, flags = struct.unpack("!HH", pkt[:4])
            ip = self.records.get(name)
            answer = b""
            if ip is not None and qtype == 1:
                answer = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + socket.inet_aton(ip)
            rcode = 0 if ip is not None else 3
            head = struct.pack("!HHHHHH", qid, 0x8400 | (flags & 0x0100) | rcode, 1, 1 if answer else 0, 0, 0)
            self.sock.sendto(head + pkt[12:qend] + answer, peer)


def query(server: tuple[str, int], name: str, timeout: float = 5.0) -> bytes:
    """One A query over UDP to server, the raw answer (for the bench's floor and the differential case)."""
    qid = struct.unpack("!H", os.urandom(2))[0]
    q = (
        struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0)
        + b"".join(bytes([len(p)]) + p.encode("ascii") for p in name.rstrip(".").split("."))
        + b"\0"
        + struct.pack("!HH", 1, 1)
    )
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.settimeout(timeout)
        s.sendto(q, server)
        while True:
            resp, _ = s.recvfrom(65535)
            if resp[:2] == q[:2]:
                return resp
    finally:
        s.close()
