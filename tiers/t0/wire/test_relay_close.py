"""wire/relay.py TCPRelay.close() while a connection's thread is being started: the thread is put in the relay's
set and started under its lock, so close() never meets a thread it cannot join (it raised "cannot join thread
before it is started" when it came between the two: a lifecycle DELETE answered 500 under load)."""

from __future__ import annotations

import socket
import threading
import time

from mock_opensandbox.wire import relay


def test_close_while_a_relay_thread_is_starting(monkeypatch):
    backend = socket.socket()
    backend.bind(("127.0.0.1", 0))
    backend.listen(4)
    starting = threading.Event()
    real_start = threading.Thread.start

    class SlowStart(threading.Thread):
        def start(self) -> None:
            if self.name.endswith("-back"):
                starting.set()
                time.sleep(0.3)  # the connection's thread preempted between the set and the start
            real_start(self)

    monkeypatch.setattr(relay.threading, "Thread", SlowStart)
    r = relay.TCPRelay(lambda: socket.create_connection(backend.getsockname(), timeout=5))
    client = socket.create_connection(("127.0.0.1", r.port), timeout=5)
    try:
        assert starting.wait(5)
        r.close()  # raised RuntimeError before
    finally:
        client.close()
        backend.close()
        r.close()
