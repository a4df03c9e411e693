"""Raw HTTP/1.1 over sockets, for tests that must send exactly the bytes they mean."""

from __future__ import annotations

import http.client
import socket
import ssl
import time
from dataclasses import dataclass

from .processes import is_loopback


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes
    header_list: list[tuple[str, str]]

    def json(self) -> object:
        import json

        return json.loads(self.body)


class _SharedReader:
    """One buffered reader for every response on a connection: ``http.client`` would
    otherwise make a new one per response and lose bytes already read ahead."""

    def __init__(self, sock: socket.socket) -> None:
        self._file = sock.makefile("rb")

    def makefile(self, *args: object, **kwargs: object) -> _SharedReader:
        return self

    def close(self) -> None:
        pass  # http.client closes its file after each response; the connection lives on

    def __getattr__(self, name: str) -> object:
        return getattr(self._file, name)


class RawClient:
    """One connection; ``send`` raw bytes, ``response`` parses the next response.

    With ``tls`` the connection is wrapped (``server_name`` for SNI and verification).
    ``receive_buffer`` shrinks the socket's receive buffer, and ``response(slow=...)``
    reads bodies in 128 KiB bursts with a pause of ``slow`` seconds after each: a client
    that reads slowly, so the server's send buffer fills and its flow control is
    exercised."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0, *,
                 tls: ssl.SSLContext | None = None, server_name: str | None = None,
                 receive_buffer: int = 0) -> None:
        if not is_loopback(host):
            raise ValueError("tests only talk to loopback")
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        if receive_buffer:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.settimeout(timeout)
        sock.connect((host, port))
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname=server_name or host)
        self.sock = sock
        self._reader = _SharedReader(self.sock)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def response(self, method: str = "GET", slow: float = 0.0) -> Response:
        reply = http.client.HTTPResponse(self._reader, method=method)  # type: ignore[arg-type]
        reply.begin()
        if slow:
            # Bursts with pauses between them: the server's buffer fills during each
            # pause (a steady trickle never queues enough to pause anything).
            pieces = []
            while piece := reply.read(131072):
                pieces.append(piece)
                time.sleep(slow)
            body = b"".join(pieces)
        else:
            body = reply.read()
        headers = reply.getheaders()
        return Response(reply.status, {k.lower(): v for k, v in headers}, body, headers)

    def request(self, method: str, path: str, host: str, headers: dict[str, str] | None = None,
                body: bytes = b"", slow: float = 0.0) -> Response:
        lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if body:
            lines.append(f"Content-Length: {len(body)}")
        self.send(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        return self.response(method, slow)

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True when the server closed the connection (EOF or reset) within ``timeout``."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def one_shot(port: int, data: bytes, timeout: float = 10.0) -> bytes:
    """Send ``data``, read until the server closes (or ``timeout``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        except (TimeoutError, ConnectionResetError):
            pass
    return b"".join(chunks)


def read_until(sock: socket.socket, marker: bytes, already: bytes = b"") -> bytes:
    """Read until ``marker`` has arrived (in ``already`` + what is read) or the peer
    closes; everything read."""
    data = already
    while marker not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def status_of(raw: bytes) -> int:
    """Status code of the first response in ``raw`` (0 if there is none)."""
    if not raw.startswith(b"HTTP/1.1 "):
        return 0
    return int(raw[9:12])
