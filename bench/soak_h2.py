"""The soak's HTTP/2 client: one connection (h2c with prior knowledge, or TLS with ALPN
h2) carrying many concurrent streams, each body checked as it streams in (``Body``
verifiers of ``soak_http``)."""

from __future__ import annotations

import contextlib
import ssl
import time
from dataclasses import dataclass, field
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
from soak_http import Anything, Body, ConnectFailed, connect, error_note
from soak_record import (
    BAD_BYTES,
    BAD_FRAMING,
    BAD_HEADERS,
    CONN_LOST,
    STREAM_RESET,
    TIMEOUT,
    Outcome,
)


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
            self._fail_open(streams, TIMEOUT, error_note(exc))
        except (ConnectionError, ssl.SSLError, OSError) as exc:
            self._fail_open(streams, CONN_LOST, error_note(exc))
        except h2.exceptions.ProtocolError as exc:
            self._fail_open(streams, BAD_FRAMING, error_note(exc))
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


