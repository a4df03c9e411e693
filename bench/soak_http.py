"""The soak's clients: HTTP/1.1 over raw sockets (keep-alive, pipelining, slow reads and
writes, early close) and websockets; HTTP/2 with many concurrent streams is
``soak_h2``.

Every socket has a timeout and connects to 127.0.0.1 only. Response bodies are checked
as they stream in (``Body`` verifiers) and never kept whole, so 64 MiB responses cost no
memory here.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import json
import mmap
import os
import socket
import ssl
import struct
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from soak_record import (
    BAD_BYTES,
    BAD_FRAMING,
    BAD_HEADERS,
    CLOSED,
    REFUSED,
    RESET,
    TIMEOUT,
    TRUNCATED,
    Outcome,
)

HOST = "127.0.0.1"  # the only address the soak talks to
_PATTERN = bytes(range(256)) * 1025  # 256 KiB + 256: any offset, any slice up to 256 KiB


# --------------------------------------------------------------------------------------
# body verifiers


class Body(Protocol):
    def feed(self, data: bytes | memoryview) -> bool:
        """Check the next bytes; False on a mismatch."""

    def complete(self) -> bool:
        """True when everything arrived and was right."""


class Exact:
    def __init__(self, data: bytes) -> None:
        self.data, self.off = data, 0

    def feed(self, data: bytes | memoryview) -> bool:
        n = len(data)
        ok = self.data[self.off:self.off + n] == data
        self.off += n
        return ok

    def complete(self) -> bool:
        return self.off == len(self.data)


class Pattern:
    """Byte i is ``i % 256`` (the echo upstream's ``/bytes/<n>``, the fault upstream)."""

    def __init__(self, size: int) -> None:
        self.size, self.off = size, 0

    def feed(self, data: bytes | memoryview) -> bool:
        view = memoryview(data)
        if self.off + len(view) > self.size:
            return False
        pos = 0
        while pos < len(view):
            n = min(len(view) - pos, 256 * 1024)
            start = (self.off + pos) % 256
            if view[pos:pos + n] != _PATTERN[start:start + n]:
                return False
            pos += n
        self.off += len(view)
        return True

    def complete(self) -> bool:
        return self.off == self.size


class FileBody:
    """A file nginx serves, compared against the harness's read-only map of it."""

    def __init__(self, mm: mmap.mmap) -> None:
        self.mm, self.off = mm, 0

    def feed(self, data: bytes | memoryview) -> bool:
        n = len(data)
        if self.off + n > len(self.mm):
            return False
        ok = self.mm[self.off:self.off + n] == data
        self.off += n
        return ok

    def complete(self) -> bool:
        return self.off == len(self.mm)


class Anything:
    """An answer other than the one asked for (an error page): not checked."""

    def feed(self, data: bytes | memoryview) -> bool:
        return True

    def complete(self) -> bool:
        return True


class Empty:
    def feed(self, data: bytes | memoryview) -> bool:
        return len(data) == 0

    def complete(self) -> bool:
        return True


class EchoJson:
    """The echo upstream's description of the request: method and the body it received."""

    LIMIT = 1 << 20

    def __init__(self, method: str, body_length: int, body_sha256: str) -> None:
        self.method, self.length, self.sha = method, body_length, body_sha256
        self.buf = bytearray()

    def feed(self, data: bytes | memoryview) -> bool:
        self.buf += data
        return len(self.buf) <= self.LIMIT

    def complete(self) -> bool:
        try:
            doc = json.loads(self.buf)
        except ValueError:
            return False
        return bool(doc.get("method") == self.method and doc.get("body_length") == self.length
                    and doc.get("body_sha256") == self.sha)


# --------------------------------------------------------------------------------------
# request bodies


@dataclass
class Upload:
    """A request body: sized or chunked, sent at once or slowly (``pieces`` bytes at a
    time with ``pause`` seconds between them)."""

    data: bytes
    chunked: bool = False
    piece: int = 0  # 0: all at once
    pause: float = 0.0

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def header_lines(self) -> list[str]:
        return ["Transfer-Encoding: chunked"] if self.chunked else [
            f"Content-Length: {len(self.data)}"]

    def pieces(self) -> Iterator[bytes]:
        step = self.piece or max(len(self.data), 1)
        for i in range(0, len(self.data), step):
            part = self.data[i:i + step]
            yield b"%x\r\n%s\r\n" % (len(part), part) if self.chunked else part
        if self.chunked:
            yield b"0\r\n\r\n"


def request_bytes(method: str, host: str, path: str, headers: Iterable[tuple[str, str]] = (),
                  upload: Upload | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    lines += [f"{k}: {v}" for k, v in headers]
    if upload is not None:
        lines += upload.header_lines()
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


# --------------------------------------------------------------------------------------
# HTTP/1.1


class ConnectFailed(Exception):
    pass


def connect(port: int, timeout: float, tls: ssl.SSLContext | None = None,
            server_name: str | None = None, rcvbuf: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(timeout)
        sock.connect((HOST, port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname=server_name)
    except (OSError, ssl.SSLError) as exc:
        sock.close()
        raise ConnectFailed(f"{type(exc).__name__}: {exc}") from exc
    return sock


class _SharedReader:
    """One buffered reader for every response on a connection (pipelining: bytes read
    ahead belong to the next response)."""

    def __init__(self, sock: socket.socket) -> None:
        self._file = sock.makefile("rb", buffering=65536)

    def makefile(self, *args: object, **kwargs: object) -> _SharedReader:
        return self

    def close(self) -> None:
        pass  # http.client closes "its" file after every response: the connection lives on

    def release(self) -> None:
        """Really close the file (the socket's descriptor stays open while it exists)."""
        self._file.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


@dataclass
class Head:
    status: int
    headers: dict[str, str]
    will_close: bool


@dataclass
class Read:
    """How a response ended, and its head."""

    outcome: Outcome
    head: Head | None = None


class H1:
    """One HTTP/1.1 connection to a gateway (plain or TLS)."""

    def __init__(self, port: int, timeout: float, tls: ssl.SSLContext | None = None,
                 server_name: str | None = None, rcvbuf: int = 0) -> None:
        self.sock = connect(port, timeout, tls, server_name, rcvbuf)
        self.reader = _SharedReader(self.sock)
        self.usable = True

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_request(self, method: str, host: str, path: str,
                     headers: Iterable[tuple[str, str]] = (), upload: Upload | None = None
                     ) -> None:
        self.send(request_bytes(method, host, path, headers, upload))
        if upload is not None:
            for part in upload.pieces():
                if upload.pause:
                    time.sleep(upload.pause)
                self.send(part)

    def read_response(self, method: str, body: Body, t0: float, *, status: int | None = None,
                      head_length: int | None = None, slow: tuple[int, float] | None = None,
                      stop_after: int | None = None,
                      want_headers: dict[str, str] | None = None) -> Read:
        """Read one response, feeding its body to ``body`` (when the status is ``status``;
        another answer's body is read, not checked). ``slow=(burst, pause)`` reads
        ``burst`` bytes, then sleeps. ``stop_after``: stop once that many body bytes came
        (the caller then drops the connection). ``head_length``: the Content-Length a
        HEAD answer must announce."""
        resp = http.client.HTTPResponse(self.reader, method=method)  # type: ignore[arg-type]
        wait = 0.0
        try:
            resp.begin()
        except Exception as exc:
            self.usable = False
            return Read(Outcome(error=_before_head_error(exc), wait=time.monotonic() - t0,
                                elapsed=time.monotonic() - t0, note=error_note(exc)))
        wait = time.monotonic() - t0
        headers = {k.lower(): v for k, v in resp.getheaders()}
        head = Head(resp.status, headers, bool(resp.will_close))
        if status is not None and resp.status != status:
            body, stop_after, want_headers, head_length = Anything(), None, None, None
        received, bad, error, note = 0, False, None, ""
        try:
            burst = 0
            while True:
                data = resp.read1(65536)
                if not data:
                    break
                if not body.feed(data):
                    bad = True
                    break
                received += len(data)
                if stop_after is not None and received >= stop_after:
                    break
                if slow is not None:
                    burst += len(data)
                    if burst >= slow[0]:
                        time.sleep(slow[1])
                        burst = 0
            if not bad and stop_after is None and resp.length:  # EOF before Content-Length
                error = TRUNCATED
        except TimeoutError as exc:
            error, note = TIMEOUT, error_note(exc)
        except (http.client.IncompleteRead, ConnectionError, ssl.SSLError, OSError) as exc:
            error, note = TRUNCATED, error_note(exc)
        except http.client.HTTPException as exc:
            error, note = BAD_FRAMING, error_note(exc)
        end = time.monotonic()
        if bad or (error is None and stop_after is None and not body.complete()):
            error = BAD_BYTES
        elif error is None and method == "HEAD" and head_length is not None and \
                headers.get("content-length") != str(head_length):
            error, note = BAD_HEADERS, f"HEAD content-length {headers.get('content-length')}"
        elif error is None and want_headers:
            wrong = {k: headers.get(k.lower()) for k, v in want_headers.items()
                     if headers.get(k.lower()) != v}
            if wrong:
                error, note = BAD_HEADERS, f"headers {wrong}"
        if error is not None or head.will_close or stop_after is not None:
            self.usable = False
        return Read(Outcome(resp.status, error, received, wait, end - t0, note), head)

    def closed_by_peer(self, timeout: float) -> bool:
        """True when the gateway closes the connection (EOF/RST) within ``timeout``."""
        self.sock.settimeout(timeout)
        try:
            while self.reader.read1(65536):
                pass
            return True
        except (ConnectionError, ssl.SSLError):
            return True
        except (TimeoutError, OSError):
            return False

    def close(self, reset: bool = False) -> None:
        with contextlib.suppress(OSError):
            if reset:  # disappear with an RST
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        with contextlib.suppress(OSError):
            self.reader.release()
        with contextlib.suppress(OSError):
            self.sock.close()


def _before_head_error(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return TIMEOUT
    if isinstance(exc, http.client.RemoteDisconnected):
        return CLOSED
    if isinstance(exc, (ConnectionResetError, BrokenPipeError)):
        return RESET
    if isinstance(exc, (ssl.SSLError, ConnectionError)):
        return CLOSED
    if isinstance(exc, http.client.HTTPException):
        return BAD_FRAMING
    return CLOSED


def error_note(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:200]


def failed_connect(exc: ConnectFailed, t0: float) -> Outcome:
    return Outcome(error=REFUSED, elapsed=time.monotonic() - t0, note=str(exc)[:200])


# --------------------------------------------------------------------------------------
# websockets


def ws_frame(opcode: int, payload: bytes, mask: bytes) -> bytes:
    """One final, masked client frame."""
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    key = (mask * (n // 4 + 1))[:n]
    masked = (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big")
    return head + mask + masked


class WsError(Exception):
    pass


class WebSocket:
    """A websocket through the gateway: handshake, masked frames out, frames back."""

    def __init__(self, port: int, host: str, timeout: float,
                 tls: ssl.SSLContext | None = None) -> None:
        self.sock = connect(port, timeout, tls, host.split(":")[0])
        self.buf = b""
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /chat HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = self._until(b"\r\n\r\n")
        self.status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else 0
        accept = base64.b64encode(hashlib.sha1(
            key.encode() + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
        if self.status == 101 and accept not in head:
            raise WsError("bad Sec-WebSocket-Accept")

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise WsError("closed")
        self.buf += data

    def _until(self, marker: bytes) -> bytes:
        while marker not in self.buf:
            if len(self.buf) > 65536:
                raise WsError("head too long")
            self._fill()
        head, _, self.buf = self.buf.partition(marker)
        return head

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def send(self, opcode: int, payload: bytes) -> None:
        self.sock.sendall(ws_frame(opcode, payload, os.urandom(4)))

    def receive(self) -> tuple[int, bytes]:
        b1, b2 = self._exact(2)
        n = b2 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self._exact(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._exact(8))[0]
        if b2 & 0x80:
            raise WsError("masked server frame")
        return b1 & 0x0F, self._exact(n)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
