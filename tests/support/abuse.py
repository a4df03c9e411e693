"""Misbehaving clients for the connection-abuse tests: silent sockets, partial TLS
handshakes, trickled bytes, and a clock on how long the gateway lets them live."""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from collections.abc import Callable, Iterator

from .processes import is_loopback


def insecure_context(alpn: list[str] | None = None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if alpn:
        context.set_alpn_protocols(alpn)
    return context


def client_hello(server_name: str = "app.test") -> bytes:
    """The bytes of a real ClientHello (TLS 1.2/1.3, with SNI)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = insecure_context().wrap_bio(incoming, outgoing, server_hostname=server_name)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


@contextlib.contextmanager
def raw_socket(port: int, host: str = "127.0.0.1") -> Iterator[socket.socket]:
    if not is_loopback(host):
        raise ValueError("tests only talk to loopback")
    with socket.create_connection((host, port), timeout=10) as sock:
        yield sock


def until_closed(sock: socket.socket, limit: float, started: float | None = None,
                 drip: Callable[[], bytes] | None = None, every: float = 0.2
                 ) -> tuple[float, bytes]:
    """Read until the peer closes: (seconds since ``started`` (default: now) when it did,
    or ``inf`` if it is still open after ``limit`` seconds; the bytes received). ``drip``,
    if given, is called every ``every`` seconds for bytes to send meanwhile (a trickle)."""
    started = time.monotonic() if started is None else started
    end = started + limit
    sock.settimeout(every)
    received = b""
    while time.monotonic() < end:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            if drip is not None:
                with contextlib.suppress(OSError):
                    sock.sendall(drip())
            continue
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            return time.monotonic() - started, received
        if not chunk:
            return time.monotonic() - started, received
        received += chunk
    return float("inf"), received


def drip(data: bytes, size: int = 1) -> Callable[[], bytes]:
    """Successive ``size``-byte pieces of ``data`` (empty once it is used up)."""
    pieces = iter(range(0, len(data), size))

    def next_piece() -> bytes:
        start = next(pieces, None)
        return b"" if start is None else data[start:start + size]

    return next_piece
