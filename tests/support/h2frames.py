"""Raw HTTP/2 frames for abuse tests: builders (``hyperframe``/``hpack``, so a test can
send what no well-behaved client would), a parser for what comes back, and a small
blocking socket client (loopback only) that writes bytes and reads frames.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Callable, Iterable

import hpack
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    PriorityFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

from .processes import is_loopback

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
CANCEL = 0x8
Headers = Iterable[tuple[bytes, bytes]]


def request_headers(path: bytes = b"/", authority: bytes = b"app.test",
                    method: bytes = b"GET") -> list[tuple[bytes, bytes]]:
    return [(b":method", method), (b":scheme", b"http"), (b":authority", authority),
            (b":path", path)]


class Frames:
    """Frame bytes; header blocks come from one HPACK encoder (its table is per
    connection, like the server's decoder)."""

    def __init__(self) -> None:
        self.encoder = hpack.Encoder()

    def block(self, headers: Headers) -> bytes:
        return bytes(self.encoder.encode(list(headers)))

    def headers(self, stream_id: int, headers: Headers, *, end_stream: bool = True,
                end_headers: bool = True) -> bytes:
        return self.headers_block(stream_id, self.block(headers), end_stream=end_stream,
                                  end_headers=end_headers)

    @staticmethod
    def headers_block(stream_id: int, block: bytes, *, end_stream: bool = True,
                      end_headers: bool = True) -> bytes:
        frame = HeadersFrame(stream_id, data=block)
        if end_stream:
            frame.flags.add("END_STREAM")
        if end_headers:
            frame.flags.add("END_HEADERS")
        return bytes(frame.serialize())


def deliver(server: object, reactor: object, data: bytes) -> None:
    """``server.dataReceived(data)``, then turns of ``reactor`` (a MemoryReactorClock)
    until the codec has handled all of it: a read with more requests than it starts in
    one turn is handled a turn at a time (``STREAMS_PER_TURN``), reading paused."""
    server.dataReceived(data)  # type: ignore[attr-defined]
    for _ in range(10_000):
        if getattr(server, "backlog", None) is None:
            return
        reactor.advance(0)  # type: ignore[attr-defined]
    raise AssertionError("the codec never finished a read")


def settings(**values: int) -> bytes:
    """``settings(INITIAL_WINDOW_SIZE=0)``: names as in RFC 9113 without SETTINGS_."""
    codes = {"HEADER_TABLE_SIZE": 0x1, "ENABLE_PUSH": 0x2, "MAX_CONCURRENT_STREAMS": 0x3,
             "INITIAL_WINDOW_SIZE": 0x4, "MAX_FRAME_SIZE": 0x5, "MAX_HEADER_LIST_SIZE": 0x6}
    return bytes(SettingsFrame(0, settings={codes[k]: v for k, v in values.items()})
                 .serialize())


def settings_ack() -> bytes:
    return bytes(SettingsFrame(0, flags=["ACK"]).serialize())


def hello(**values: int) -> bytes:
    """What a client sends first: the preface, its SETTINGS, and (ahead of time) the
    ACK of the server's."""
    return PREFACE + settings(**values) + settings_ack()


def continuation(stream_id: int, block: bytes, end_headers: bool = False) -> bytes:
    return bytes(ContinuationFrame(stream_id, data=block,
                                   flags=["END_HEADERS"] if end_headers else []).serialize())


def data(stream_id: int, body: bytes, end_stream: bool = False) -> bytes:
    return bytes(DataFrame(stream_id, data=body,
                           flags=["END_STREAM"] if end_stream else []).serialize())


def rst(stream_id: int, code: int = CANCEL) -> bytes:
    return bytes(RstStreamFrame(stream_id, error_code=code).serialize())


def ping(payload: bytes = b"\0" * 8) -> bytes:
    return bytes(PingFrame(0, opaque_data=payload).serialize())


def window_update(stream_id: int, increment: int) -> bytes:
    return bytes(WindowUpdateFrame(stream_id, window_increment=increment).serialize())


def priority(stream_id: int) -> bytes:
    return bytes(PriorityFrame(stream_id, depends_on=0, stream_weight=15).serialize())


def extension(kind: int = 0xF0, stream_id: int = 0, body: bytes = b"") -> bytes:
    """A frame of a type nobody defines, with ``body`` (hyperframe's ExtensionFrame
    serialises a length of 0 whatever its body)."""
    return frame_header(len(body), kind, 0, stream_id) + body


def frame_header(length: int, kind: int, flags: int = 0, stream_id: int = 0) -> bytes:
    """A bare frame header (any length), for frames hyperframe would not build."""
    return length.to_bytes(3, "big") + bytes([kind, flags]) + stream_id.to_bytes(4, "big")


def parse(buffer: bytearray) -> list[Frame]:
    """The complete frames at the start of ``buffer`` (consumed from it)."""
    frames: list[Frame] = []
    while len(buffer) >= 9:
        frame, length = Frame.parse_frame_header(memoryview(bytes(buffer[:9])))
        if len(buffer) < 9 + length:
            break
        frame.parse_body(memoryview(bytes(buffer[9:9 + length])))
        del buffer[:9 + length]
        frames.append(frame)
    return frames


def goaway_in(frames: Iterable[Frame]) -> GoAwayFrame | None:
    return next((f for f in frames if isinstance(f, GoAwayFrame)), None)


class FrameClient:
    """One connection that writes raw bytes and reads frames back (h2c prior knowledge).
    ``receive_buffer`` shrinks the socket's receive buffer (a client that reads slowly)."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0,
                 receive_buffer: int = 0, source: str = "") -> None:
        if not is_loopback(host) or (source and not is_loopback(source)):
            raise ValueError("tests only talk to loopback")
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if source:  # another loopback address: another client, to the gateway
            self.sock.bind((source, 0))
        if receive_buffer:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.sock.settimeout(timeout)
        self.sock.connect((host, port))
        self.buffer = bytearray()
        self.frames: list[Frame] = []
        self.closed = False

    def send(self, payload: bytes) -> bool:
        """False once the server has closed (or reset) the connection."""
        try:
            self.sock.sendall(payload)
            return True
        except OSError:
            return False

    def poll(self, wait: float = 0.0) -> list[Frame]:
        """Read what has arrived (waiting up to ``wait`` s for the first bytes)."""
        new: list[Frame] = []
        while not self.closed and select.select([self.sock], [], [], wait)[0]:
            try:
                chunk = self.sock.recv(1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                self.closed = True
                break
            self.buffer += chunk
            new += parse(self.buffer)
            wait = 0.0
        self.frames += new
        return new

    def wait_for(self, found: Callable[[list[Frame]], bool], timeout: float = 10.0) -> bool:
        """Read until ``found(all frames so far)``, the connection closes, or timeout."""
        deadline = time.monotonic() + timeout
        while not found(self.frames) and not self.closed and time.monotonic() < deadline:
            self.poll(min(0.2, max(0.0, deadline - time.monotonic())))
        return found(self.frames)

    def goaway(self, timeout: float = 10.0) -> GoAwayFrame | None:
        self.wait_for(lambda frames: goaway_in(frames) is not None, timeout)
        return goaway_in(self.frames)

    def wait_closed(self, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while not self.closed and time.monotonic() < deadline:
            self.poll(0.2)
        return self.closed

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> FrameClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
