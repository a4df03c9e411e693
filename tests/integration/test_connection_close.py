"""Connections the gateway closes really end (issue 19's soak).

A TLS client uploads to an upstream that accepts and never reads, then goes away. The
gateway has paused reading that client (the upload cannot go anywhere), so it never
sees the client leave; when timeout_read gives up on the body it closes, and Twisted's
TLS close waits for the peer's close_notify, which a paused connection never reads:
the descriptor stayed open forever, one per such client.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from tests.support.daemon import gateway_daemon
from tests.support.processes import wait_until

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def never_reading_upstream() -> Iterator[int]:
    """Accepts connections and never reads from them."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                conn, _ = server.accept()
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for sock in (*held, server):
            sock.close()


def sockets_of(pid: int) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                count += 1
    return count


def test_tls_client_gone_while_paused_is_closed(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca.issue_cert("app.test").private_key_and_cert_chain_pem.write_to_path(
        str(tmp_path / "cert.pem"))
    context = ssl.create_default_context()
    ca.configure_trust(context)
    with never_reading_upstream() as port:
        config = {"insecure_server": False, "timeout_read": "1s",
                  "certificates": [{"cert": str(tmp_path / "cert.pem"),
                                    "key": str(tmp_path / "cert.pem")}],
                  "policy": [{"from": "https://app.test", "to": f"http://127.0.0.1:{port}",
                              "allow_public_unauthenticated_access": True}]}
        with gateway_daemon(tmp_path, config) as gw:
            pid = gw.process.pid
            assert pid is not None
            baseline = sockets_of(pid)
            for _ in range(3):
                raw = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
                sock = context.wrap_socket(raw, server_hostname="app.test")
                sock.sendall(b"POST /upload HTTP/1.1\r\nHost: app.test\r\n"
                             b"Content-Length: 67108864\r\n\r\n")
                block = b"x" * 65536
                with contextlib.suppress(TimeoutError, OSError):
                    deadline = time.monotonic() + 3
                    while time.monotonic() < deadline:  # until the gateway stops reading
                        sock.sendall(block)
                sock.close()  # gone, while the gateway is not reading it
            wait_until(lambda: sockets_of(pid) <= baseline + 1, 20,
                       what=f"the gateway's sockets back to {baseline} (+1 pooled)")
