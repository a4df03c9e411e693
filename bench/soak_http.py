"""The soak's clients: HTTP/1.1 over raw sockets (keep-alive, pipelining, slow reads and
writes, early close), HTTP/2 with many concurrent streams (h2), and websockets.

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
from dataclasses import dataclass, field
from typing import Any, Protocol

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
from soak_record import (
    BAD_BYTES,
    BAD_FRAMING,
    BAD_HEADERS,
    CLOSED,
    CONN_LOST,
    REFUSED,
    RESET,
    STREAM_RESET,
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
                                elapsed=time.monotonic() - t0, note=_note(exc)))
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
            error, note = TIMEOUT, _note(exc)
        except (http.client.IncompleteRead, ConnectionError, ssl.SSLError, OSError) as exc:
            error, note = TRUNCATED, _note(exc)
        except http.client.HTTPException as exc:
            error, note = BAD_FRAMING, _note(exc)
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


def _note(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:200]


def failed_connect(exc: ConnectFailed, t0: float) -> Outcome:
    return Outcome(error=REFUSED, elapsed=time.monotonic() - t0, note=str(exc)[:200])


# --------------------------------------------------------------------------------------
# HTTP/2


@dataclass
class H2Req:
    method: str
    authority: str
    path: str
    body: Body
    status: int | None = None  # the answer asked for (another one's body is not checked)
    headers: list[tuple[str, str]] = field(default_factory=list)
    upload: bytes | None = None
    head_length: int | None = None
    cancel_after: int | None = None  # RST_STREAM(CANCEL) after this many body bytes


@dataclass
class _Stream:
    req: H2Req
    t0: float
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    wait: float = 0.0
    received: int = 0
    bad: bool = False
    error: str | None = None
    note: str = ""
    done: bool = False
    end: float = 0.0
    to_send: memoryview | None = None


class H2:
    """One HTTP/2 connection: h2c with prior knowledge, or TLS with ALPN h2."""

    def __init__(self, port: int, timeout: float, tls: ssl.SSLContext | None = None,
                 server_name: str | None = None) -> None:
        self.sock = connect(port, timeout, tls, server_name)
        if tls is not None and getattr(self.sock, "selected_alpn_protocol", lambda: None)() \
                != "h2":
            self.sock.close()
            raise ConnectFailed("the gateway did not negotiate h2")
        self.scheme = "https" if tls is not None else "http"
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 20})
        self.conn.increment_flow_control_window(8 << 20)
        self.sock.sendall(self.conn.data_to_send())
        self.usable = True

    def max_streams(self) -> int:
        return int(self.conn.remote_settings.max_concurrent_streams)

    def run(self, reqs: list[H2Req], slow: float = 0.0) -> list[Outcome]:
        """Send every request as concurrent streams and read until all have ended.
        ``slow`` delays every window update by that many seconds (a slow reader)."""
        streams: dict[int, _Stream] = {}
        order: list[int] = []
        for r in reqs:
            sid = self.conn.get_next_available_stream_id()
            hdrs = [(":method", r.method), (":scheme", self.scheme),
                    (":authority", r.authority), (":path", r.path), *r.headers]
            if r.upload is not None:
                hdrs.append(("content-length", str(len(r.upload))))
            self.conn.send_headers(sid, hdrs, end_stream=r.upload is None)
            st = _Stream(r, time.monotonic())
            if r.upload is not None:
                st.to_send = memoryview(r.upload)
            streams[sid] = st
            order.append(sid)
        try:
            self._loop(streams, slow)
        except TimeoutError as exc:
            self._fail_open(streams, TIMEOUT, _note(exc))
        except (ConnectionError, ssl.SSLError, OSError) as exc:
            self._fail_open(streams, CONN_LOST, _note(exc))
        except h2.exceptions.ProtocolError as exc:
            self._fail_open(streams, BAD_FRAMING, _note(exc))
        out = []
        for sid in order:
            st = streams[sid]
            error = st.error
            incomplete = st.req.cancel_after is None and not st.req.body.complete()
            if st.bad or (error is None and incomplete):
                error = BAD_BYTES
            elif error is None and st.req.method == "HEAD" and st.req.head_length is not None \
                    and st.headers.get("content-length") != str(st.req.head_length):
                error = BAD_HEADERS
                st.note = f"HEAD content-length {st.headers.get('content-length')}"
            out.append(Outcome(st.status, error, st.received, st.wait,
                               (st.end or time.monotonic()) - st.t0, st.note))
        return out

    def _fail_open(self, streams: dict[int, _Stream], error: str, note: str) -> None:
        self.usable = False
        now = time.monotonic()
        for st in streams.values():
            if not st.done:
                st.done, st.error, st.note, st.end = True, error, note, now
                if st.status is None:
                    st.wait = now - st.t0

    def _send_uploads(self, streams: dict[int, _Stream]) -> None:
        for sid, st in streams.items():
            view = st.to_send
            while view is not None and not st.done:
                window = min(self.conn.local_flow_control_window(sid),
                             self.conn.max_outbound_frame_size)
                if len(view) == 0:
                    self.conn.end_stream(sid)
                    st.to_send = view = None
                    break
                if window <= 0:
                    break
                n = min(window, len(view))
                self.conn.send_data(sid, view[:n].tobytes())
                view = st.to_send = view[n:]

    def _loop(self, streams: dict[int, _Stream], slow: float) -> None:
        while not all(st.done for st in streams.values()):
            self._send_uploads(streams)
            out = self.conn.data_to_send()
            if out:
                self.sock.sendall(out)
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the gateway closed the connection")
            for event in self.conn.receive_data(data):
                self._event(event, streams, slow)
        out = self.conn.data_to_send()
        if out:
            self.sock.sendall(out)

    def _event(self, event: Any, streams: dict[int, _Stream], slow: float) -> None:
        now = time.monotonic()
        sid = getattr(event, "stream_id", None)
        st = streams.get(sid) if sid is not None else None
        if isinstance(event, h2.events.ResponseReceived) and st is not None:
            st.headers = {str(k): str(v) for k, v in event.headers}
            st.status = int(st.headers[":status"])
            st.wait = now - st.t0
            if st.req.status is not None and st.status != st.req.status:
                st.req.body, st.req.cancel_after, st.req.head_length = Anything(), None, None
        elif isinstance(event, h2.events.DataReceived):
            if event.flow_controlled_length:
                if slow:
                    time.sleep(slow)
                with contextlib.suppress(h2.exceptions.StreamClosedError):
                    self.conn.acknowledge_received_data(event.flow_controlled_length,
                                                        event.stream_id)
            if st is None or st.done:
                return
            if not st.req.body.feed(event.data):
                st.bad = True
            st.received += len(event.data)
            if st.req.cancel_after is not None and st.received >= st.req.cancel_after:
                try:
                    self.conn.reset_stream(event.stream_id, h2.errors.ErrorCodes.CANCEL)
                except h2.exceptions.StreamClosedError:
                    # it ended in the frames of this same read: too late to cancel
                    st.req.cancel_after = None
                else:
                    st.done, st.end = True, now
        elif isinstance(event, h2.events.StreamEnded) and st is not None and not st.done:
            st.done, st.end = True, now
            if st.req.cancel_after is not None and st.received < st.req.cancel_after:
                st.req.cancel_after = None  # it ended before we cancelled: check it whole
        elif isinstance(event, h2.events.StreamReset) and st is not None and not st.done:
            st.done, st.end = True, now
            st.error, st.note = STREAM_RESET, f"RST_STREAM {event.error_code!r}"
            if st.status is None:
                st.wait = now - st.t0
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._fail_open(streams, CONN_LOST, f"GOAWAY {event.error_code!r}")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close_connection()
            self.sock.sendall(self.conn.data_to_send())
        with contextlib.suppress(OSError):
            self.sock.close()


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
