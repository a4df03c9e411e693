"""The server side of an HTTP/2 connection (RFC 9113) as plain state: bytes in, events
out, frames queued in ``out`` for the codec to write. No I/O, no reactor.

Why our own and not ``h2``: its per-frame state machine, event objects and header
re-validation cost half of a proxied request's CPU. This engine does what a proxy's
server side needs and no more: no push, no priority tree (PRIORITY is parsed and
ignored, as RFC 9113 allows, but for the self-dependency that 5.3.1 makes a stream
error), no client side. What it does, it checks as strictly as ``h2`` did: the
preface and first SETTINGS, frame sizes per type, stream-id rules and states,
header-block sequencing, flow control both ways (windows never below zero or above
2**31-1), SETTINGS values, HPACK (``hpack``), and requests malformed per RFC 9113
8.1.1 / 8.2 / 8.3 (``fields``: refused with RST_STREAM PROTOCOL_ERROR, never handed
to the codec).

The state of every stream is here and only here: the codec holds each stream's
``Stream`` (``stream_state``) and reads it rather than keeping its own flags.
Connection errors raise ``H2Error`` with a limit name (the codec's ``Cut``) after
queueing GOAWAY. The per-connection abuse budgets stay in ``guard``, which reads the
frame headers before this engine parses them.
"""

from __future__ import annotations

from gateway.dataplane.http2.events import (
    ConnectionTerminated,
    DataReceived,
    Event,
    RequestReceived,
    RequestRefused,
    StreamEnded,
    StreamMalformed,
    StreamReset,
    WindowOpened,
)
from gateway.dataplane.http2.fields import fields_problem, request_problem
from gateway.dataplane.http2.hpack import Decoder, Encoder
from gateway.dataplane.http2.protocol import (
    CONTINUATION,
    DATA,
    DEFAULT_FRAME_SIZE,
    DEFAULT_WINDOW,
    FLAG_ACK,
    FLAG_END_HEADERS,
    FLAG_END_STREAM,
    FLAG_PADDED,
    FLAG_PRIORITY,
    GOAWAY,
    HEADER_BLOCK_MAX_BYTES,
    HEADER_TABLE_SIZE,
    HEADERS,
    LARGEST_FRAME_SIZE,
    MAX_CONCURRENT_STREAMS,
    MAX_FRAME_SIZE,
    MAX_HEADER_LIST_SIZE,
    MAX_WINDOW,
    PING,
    PREFACE,
    PRIORITY,
    PUSH_PROMISE,
    RST_STREAM,
    SETTING_ENABLE_CONNECT_PROTOCOL,
    SETTING_ENABLE_PUSH,
    SETTING_HEADER_TABLE_SIZE,
    SETTING_INITIAL_WINDOW_SIZE,
    SETTING_MAX_CONCURRENT_STREAMS,
    SETTING_MAX_FRAME_SIZE,
    SETTING_MAX_HEADER_LIST_SIZE,
    SETTINGS,
    STREAMS_HARD_CAP,
    WINDOW_UPDATE,
    ErrorCode,
    H2Error,
    frame,
    settings_payload,
)
from gateway.dataplane.http2.state import Stream

# Received bytes are given back (WINDOW_UPDATE) once this many are consumed: a quarter of
# the window, so a client uploading never waits for one.
ACK_THRESHOLD = 16384
# Streams we reset whose late frames are ignored (RFC 9113 5.1 "closed"); older ones
# are treated as closed normally.
RESET_MEMORY = 1024


class H2Engine:
    """One server connection. ``receive(data)`` returns events; ``send_*`` queue frames
    in ``out``; ``data_to_send()`` takes them."""

    def __init__(self, max_concurrent_streams: int = MAX_CONCURRENT_STREAMS,
                 streams_hard_cap: int = STREAMS_HARD_CAP,
                 max_header_list_size: int = MAX_HEADER_LIST_SIZE,
                 max_frame_size: int = MAX_FRAME_SIZE) -> None:
        self.out = bytearray()
        self.decoder = Decoder(HEADER_TABLE_SIZE, max_header_list_size)
        self.encoder = Encoder()
        self.streams: dict[int, Stream] = {}
        self.highest_inbound_stream_id = 0
        self.max_concurrent_streams = max_concurrent_streams
        self.streams_hard_cap = streams_hard_cap
        self.max_header_list_size = max_header_list_size
        self.max_frame_size = max_frame_size  # ours: what we accept
        self.max_outbound_frame_size = DEFAULT_FRAME_SIZE  # the client's
        self.peer_initial_window = DEFAULT_WINDOW
        self.out_window = DEFAULT_WINDOW  # the connection's send window
        self.in_window = DEFAULT_WINDOW  # the connection's receive window
        self.in_unacked = 0
        self.reset_by_us: dict[int, None] = {}
        self._preface = b""  # the part of the preface received so far
        self._preface_done = False
        self._got_settings = False
        self._buffer = b""  # an incomplete frame
        self._block: bytearray | None = None  # an unfinished header block ...
        self._block_stream = 0  # ... its stream
        self._block_end_stream = False  # ... whether its HEADERS ended the stream
        self._block_self_dependent = False  # ... and named the stream its own parent
        self.closed = False  # GOAWAY sent

    # -- sending
    def initiate(self) -> None:
        """Our SETTINGS (the server preface)."""
        self.out += frame(SETTINGS, 0, 0, settings_payload((
            (SETTING_MAX_CONCURRENT_STREAMS, self.max_concurrent_streams),
            (SETTING_INITIAL_WINDOW_SIZE, DEFAULT_WINDOW),
            (SETTING_MAX_HEADER_LIST_SIZE, self.max_header_list_size),
        )))

    def data_to_send(self) -> bytes:
        out = self.out
        if not out:
            return b""
        data = bytes(out)
        out.clear()
        return data

    def send_headers(self, stream_id: int, headers: list[tuple[bytes, bytes]],
                     end_stream: bool = False) -> bool:
        """Queue a header block; False when the stream is no longer open for sending."""
        stream = self.streams.get(stream_id)
        if stream is None or stream.local_ended:
            return False
        self._send_block(stream_id, stream, self.encoder.encode(headers), end_stream)
        return True

    def send_response_head(self, stream_id: int, status: int,
                           headers: list[tuple[bytes, bytes]], skip: frozenset[bytes],
                           end_stream: bool) -> bool:
        """``send_headers`` of ``:status`` and ``headers`` as an HTTP/1.1 upstream gave
        them (any case; the names in ``skip``, connection-specific, left out)."""
        stream = self.streams.get(stream_id)
        if stream is None or stream.local_ended:
            return False
        self._send_block(stream_id, stream,
                         self.encoder.encode_response(status, headers, skip), end_stream)
        return True

    def _send_block(self, stream_id: int, stream: Stream, block: bytes,
                    end_stream: bool) -> None:
        flags = FLAG_END_STREAM if end_stream else 0
        size = self.max_outbound_frame_size
        sid = stream_id.to_bytes(4, "big")
        length = len(block)
        out = self.out
        if length <= size:
            out += bytes((length >> 16, (length >> 8) & 0xFF, length & 0xFF, HEADERS,
                          flags | FLAG_END_HEADERS))
            out += sid
            out += block
        else:
            out += frame(HEADERS, flags, stream_id, block[:size])
            for start in range(size, length, size):
                last = start + size >= length
                out += frame(CONTINUATION, FLAG_END_HEADERS if last else 0, stream_id,
                             block[start:start + size])
        if end_stream:
            self._local_end(stream_id, stream)

    def stream_state(self, stream_id: int) -> Stream:
        """The stream's state, for the codec to hold while it serves the stream (one
        already gone is a closed one): ``local_ended`` says nothing more may be sent,
        our END_STREAM being out, a reset by either side, or the connection gone."""
        stream = self.streams.get(stream_id)
        if stream is None:
            stream = Stream(0)
            stream.local_ended = True
        return stream

    def drop_all(self) -> None:
        """The connection is gone or cut: no stream is open any more."""
        for stream in self.streams.values():
            stream.local_ended = True
        self.streams.clear()

    def window(self, stream_id: int) -> int:
        """How many DATA bytes may be sent on the stream now (0 if it is closed)."""
        stream = self.streams.get(stream_id)
        if stream is None or stream.local_ended:
            return 0
        window = stream.out_window
        return window if window < self.out_window else self.out_window

    def send_data(self, stream_id: int, data: bytes, end_stream: bool = False) -> bool:
        """Queue one DATA frame: ``data`` must fit ``window`` and the frame size."""
        stream = self.streams.get(stream_id)
        if stream is None or stream.local_ended:
            return False
        length = len(data)
        stream.out_window -= length
        self.out_window -= length
        out = self.out
        out += bytes((length >> 16, (length >> 8) & 0xFF, length & 0xFF, DATA,
                      FLAG_END_STREAM if end_stream else 0))
        out += stream_id.to_bytes(4, "big")
        out += data
        if end_stream:
            self._local_end(stream_id, stream)
        return True

    def reset_stream(self, stream_id: int, code: int) -> None:
        """RST_STREAM on an open stream; frames the client sent before it saw it are
        ignored. Nothing for a stream that is already closed."""
        stream = self.streams.pop(stream_id, None)
        if stream is not None:
            stream.local_ended = True
            self._rst(stream_id, code)

    def _rst(self, stream_id: int, code: int) -> None:
        memory = self.reset_by_us
        memory[stream_id] = None
        if len(memory) > RESET_MEMORY:
            del memory[next(iter(memory))]
        self.out += frame(RST_STREAM, 0, stream_id, code.to_bytes(4, "big"))

    def acknowledge(self, stream_id: int, size: int) -> None:
        """``size`` received bytes of the stream are consumed: reopen the windows."""
        if size <= 0:
            return
        self.in_unacked += size
        if self.in_unacked >= ACK_THRESHOLD:
            increment, self.in_unacked = self.in_unacked, 0
            self.in_window += increment
            self.out += frame(WINDOW_UPDATE, 0, 0, increment.to_bytes(4, "big"))
        stream = self.streams.get(stream_id)
        if stream is None or stream.remote_ended:
            return
        stream.in_unacked += size
        if stream.in_unacked >= ACK_THRESHOLD:
            increment, stream.in_unacked = stream.in_unacked, 0
            stream.in_window += increment
            self.out += frame(WINDOW_UPDATE, 0, stream_id, increment.to_bytes(4, "big"))

    def close(self, code: int = ErrorCode.NO_ERROR) -> None:
        """GOAWAY (once), naming the last stream we saw."""
        if self.closed:
            return
        self.closed = True
        self.out += frame(GOAWAY, 0, 0, self.highest_inbound_stream_id.to_bytes(4, "big")
                          + code.to_bytes(4, "big"))

    def _local_end(self, stream_id: int, stream: Stream) -> None:
        stream.local_ended = True
        if stream.remote_ended:
            del self.streams[stream_id]

    # -- receiving
    def receive(self, data: bytes) -> list[Event]:
        """Parse ``data``; raise ``H2Error`` (GOAWAY queued) on a connection error."""
        if self.closed:
            return []
        try:
            return self._receive(data)
        except H2Error as exc:  # (HPACK's errors among them)
            self.close(exc.code)
            raise

    def _receive(self, data: bytes) -> list[Event]:
        events: list[Event] = []
        if not self._preface_done:
            need = len(PREFACE) - len(self._preface)
            self._preface += data[:need]
            data = data[need:]
            if not PREFACE.startswith(self._preface):
                raise H2Error("protocol_error", ErrorCode.PROTOCOL_ERROR,
                              "invalid HTTP/2 preface")
            if len(self._preface) < len(PREFACE):
                return events
            self._preface_done = True
        buf = self._buffer + data if self._buffer else data
        pos = 0
        end = len(buf)
        limit = self.max_frame_size
        while end - pos >= 9:
            length = (buf[pos] << 16) | (buf[pos + 1] << 8) | buf[pos + 2]
            if length > limit:
                raise H2Error("max_frame_size", ErrorCode.FRAME_SIZE_ERROR,
                              f"a {length}-byte frame, {limit} advertised")
            start = pos + 9
            if end - start < length:
                break
            kind = buf[pos + 3]
            flags = buf[pos + 4]
            stream_id = int.from_bytes(buf[pos + 5:start], "big") & 0x7FFFFFFF
            pos = start + length
            self._frame(kind, flags, stream_id, buf[start:pos], events)
        self._buffer = buf[pos:] if pos < end else b""
        return events

    def _frame(self, kind: int, flags: int, stream_id: int, payload: bytes,
               events: list[Event]) -> None:
        if self._block is not None and (kind != CONTINUATION or stream_id != self._block_stream):
            raise _protocol("a header block interrupted by another frame")
        if not self._got_settings and (kind != SETTINGS or flags & FLAG_ACK):
            raise _protocol("the client's first frame is not SETTINGS")
        if kind == HEADERS:
            self._headers(flags, stream_id, payload, events)
        elif kind == DATA:
            self._data(flags, stream_id, payload, events)
        elif kind == WINDOW_UPDATE:
            self._window_update(stream_id, payload, events)
        elif kind == CONTINUATION:
            self._continuation(flags, stream_id, payload, events)
        elif kind == RST_STREAM:
            if len(payload) != 4:
                raise _frame_size("RST_STREAM")
            if not stream_id or self._idle(stream_id):
                raise _protocol("RST_STREAM on an idle stream")
            reset = self.streams.pop(stream_id, None)
            if reset is not None:
                events.append(StreamReset(stream_id, int.from_bytes(payload, "big"),
                                          reset.local_ended))
                reset.local_ended = True
        elif kind == SETTINGS:
            self._settings(flags, stream_id, payload, events)
        elif kind == PING:
            if len(payload) != 8:
                raise _frame_size("PING")
            if stream_id:
                raise _protocol("PING on a stream")
            if not flags & FLAG_ACK:
                self.out += frame(PING, FLAG_ACK, 0, payload)
        elif kind == PRIORITY:
            if len(payload) != 5:
                raise _frame_size("PRIORITY")
            if not stream_id:
                raise _protocol("PRIORITY on stream 0")
            if int.from_bytes(payload[:4], "big") & 0x7FFFFFFF == stream_id:
                self._depends_on_itself(stream_id, events)
        elif kind == GOAWAY:
            if stream_id:
                raise _protocol("GOAWAY on a stream")
            if len(payload) < 8:
                raise _frame_size("GOAWAY")
            events.append(ConnectionTerminated())
        elif kind == PUSH_PROMISE:
            raise _protocol("a client sent PUSH_PROMISE")
        # other types are extensions: ignored (RFC 9113 5.5)

    def _settings(self, flags: int, stream_id: int, payload: bytes,
                  events: list[Event]) -> None:
        if stream_id:
            raise _protocol("SETTINGS on a stream")
        if flags & FLAG_ACK:
            if payload:
                raise _frame_size("SETTINGS with ACK")
            return
        if len(payload) % 6:
            raise _frame_size("SETTINGS")
        self._got_settings = True
        grown = False
        for pos in range(0, len(payload), 6):
            ident = (payload[pos] << 8) | payload[pos + 1]
            value = int.from_bytes(payload[pos + 2:pos + 6], "big")
            if ident == SETTING_HEADER_TABLE_SIZE:
                self.encoder.size_update_due = True  # we keep none: tell it so again
            elif ident in (SETTING_ENABLE_PUSH, SETTING_ENABLE_CONNECT_PROTOCOL):
                if value > 1:
                    raise _protocol(f"SETTINGS {ident} is {value}, not 0 or 1")
            elif ident == SETTING_INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise H2Error("flow_control", ErrorCode.FLOW_CONTROL_ERROR,
                                  f"SETTINGS_INITIAL_WINDOW_SIZE {value}")
                delta = value - self.peer_initial_window
                self.peer_initial_window = value
                for stream in self.streams.values():
                    stream.out_window += delta
                    if stream.out_window > MAX_WINDOW:
                        raise H2Error("flow_control", ErrorCode.FLOW_CONTROL_ERROR,
                                      "a stream window past 2**31-1")
                grown = grown or delta > 0
            elif ident == SETTING_MAX_FRAME_SIZE:
                if not DEFAULT_FRAME_SIZE <= value <= LARGEST_FRAME_SIZE:
                    raise _protocol(f"SETTINGS_MAX_FRAME_SIZE {value}")
                self.max_outbound_frame_size = value
        self.out += frame(SETTINGS, FLAG_ACK, 0)
        if grown:
            events.append(WindowOpened(0))

    def _window_update(self, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if len(payload) != 4:
            raise _frame_size("WINDOW_UPDATE")
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if not stream_id:
            if not increment:
                raise _protocol("a WINDOW_UPDATE of 0 for the connection")
            self.out_window += increment
            if self.out_window > MAX_WINDOW:
                raise H2Error("flow_control", ErrorCode.FLOW_CONTROL_ERROR,
                              "the connection window past 2**31-1")
            events.append(WindowOpened(0))
            return
        if self._idle(stream_id):
            raise _protocol("WINDOW_UPDATE on an idle stream")
        stream = self.streams.get(stream_id)
        if stream is None:
            return  # closed: ignored
        if not increment or stream.out_window + increment > MAX_WINDOW:
            self._malformed(stream_id, "a stream WINDOW_UPDATE of 0 or past 2**31-1",
                            events, ErrorCode.FLOW_CONTROL_ERROR if increment
                            else ErrorCode.PROTOCOL_ERROR)
            return
        stream.out_window += increment
        events.append(WindowOpened(stream_id))

    def _data(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if not stream_id:
            raise _protocol("DATA on stream 0")
        flow = len(payload)
        if flow > self.in_window:
            raise H2Error("flow_control", ErrorCode.FLOW_CONTROL_ERROR,
                          "DATA past the connection window")
        self.in_window -= flow
        if flags & FLAG_PADDED:
            if not payload or payload[0] >= flow:
                raise _protocol("DATA padding longer than the frame")
            data = payload[1:flow - payload[0]]
        else:
            data = payload
        stream = self.streams.get(stream_id)
        if stream is None or stream.remote_ended:
            self.acknowledge(0, flow)  # nobody consumes these: the window comes back
            if self._idle(stream_id):
                raise _protocol("DATA on an idle stream")
            if stream is None and stream_id in self.reset_by_us:
                return
            self._malformed(stream_id, "DATA after the end of the stream", events,
                            ErrorCode.STREAM_CLOSED)
            return
        if flow > stream.in_window:
            raise H2Error("flow_control", ErrorCode.FLOW_CONTROL_ERROR,
                          "DATA past the stream window")
        stream.in_window -= flow
        ended = flags & FLAG_END_STREAM
        if stream.expected is not None:
            stream.received += len(data)
            if stream.received > stream.expected or (ended and stream.received != stream.expected):
                self.acknowledge(0, flow)
                self._malformed(stream_id, "a body that does not match its content-length",
                                events)
                return
        events.append(DataReceived(stream_id, data, flow))
        if ended:
            self._remote_end(stream_id, stream, events)

    def _headers(self, flags: int, stream_id: int, payload: bytes,
                 events: list[Event]) -> None:
        if not stream_id:
            raise _protocol("HEADERS on stream 0")
        start, end = 0, len(payload)
        if flags & FLAG_PADDED:
            if not payload:
                raise _frame_size("HEADERS")
            start, end = 1, end - payload[0]
        self_dependent = False
        if flags & FLAG_PRIORITY:
            start += 5
            # a stream depending on itself (RFC 9113 5.3.1): decoded, then refused
            self_dependent = start <= end and int.from_bytes(
                payload[start - 5:start - 1], "big") & 0x7FFFFFFF == stream_id
        if start > end:
            raise _protocol("HEADERS padding or priority longer than the frame")
        fragment = payload[start:end]
        if flags & FLAG_END_HEADERS:
            self._header_block(stream_id, fragment, bool(flags & FLAG_END_STREAM),
                               self_dependent, events)
        else:
            self._block = bytearray(fragment)
            self._block_stream = stream_id
            self._block_end_stream = bool(flags & FLAG_END_STREAM)
            self._block_self_dependent = self_dependent

    def _continuation(self, flags: int, stream_id: int, payload: bytes,
                      events: list[Event]) -> None:
        block = self._block
        if block is None:
            raise _protocol("CONTINUATION without a header block")
        block += payload
        if len(block) > HEADER_BLOCK_MAX_BYTES:  # (the guard has cut at it already)
            raise H2Error("header_block_bytes", ErrorCode.ENHANCE_YOUR_CALM,
                          f"a header block over {HEADER_BLOCK_MAX_BYTES} bytes")
        if flags & FLAG_END_HEADERS:
            self._block = None
            self._header_block(stream_id, bytes(block), self._block_end_stream,
                               self._block_self_dependent, events)

    def _header_block(self, stream_id: int, block: bytes, end_stream: bool,
                      self_dependent: bool, events: list[Event]) -> None:
        headers = self.decoder.decode(block)  # always: the table must stay in step
        if not stream_id & 1:  # RFC 9113 5.1.1
            raise _protocol("a client-initiated stream with an even id")
        if stream_id > self.highest_inbound_stream_id:
            self.highest_inbound_stream_id = stream_id
            if len(self.streams) >= self.streams_hard_cap:
                raise H2Error("streams_hard_cap", ErrorCode.PROTOCOL_ERROR,
                              f"over {self.streams_hard_cap} streams open")
            if self_dependent:
                problem: str | None = "a stream depending on itself"
                expected = None
            else:
                problem, expected = request_problem(headers)
                if problem is None and expected and end_stream:
                    problem = "a content-length with no body"
            if problem is not None:
                self._rst(stream_id, ErrorCode.PROTOCOL_ERROR)
                events.append(RequestRefused(stream_id, problem))
                return
            opened = Stream(self.peer_initial_window)
            opened.expected = expected
            opened.remote_ended = end_stream
            self.streams[stream_id] = opened
            events.append(RequestReceived(stream_id, headers, end_stream))
            return
        stream = self.streams.get(stream_id)
        if stream is not None and not stream.remote_ended:  # trailers
            if not end_stream or self_dependent:
                self._malformed(stream_id, "trailers without END_STREAM", events)
            elif (problem := fields_problem(headers)) is not None:
                self._malformed(stream_id, f"trailers: {problem}", events)
            elif stream.expected is not None and stream.received != stream.expected:
                self._malformed(stream_id, "a body that does not match its content-length",
                                events)
            else:
                self._remote_end(stream_id, stream, events)
            return
        if stream is None and stream_id in self.reset_by_us:
            return
        raise H2Error("protocol_error", ErrorCode.STREAM_CLOSED,
                      f"HEADERS on closed stream {stream_id}")

    def _depends_on_itself(self, stream_id: int, events: list[Event]) -> None:
        """A PRIORITY frame that makes its stream depend on itself: a stream error
        PROTOCOL_ERROR (RFC 9113 5.3.1), though the priority is otherwise ignored.
        PRIORITY may name a stream in any state (6.3): an open one is reset as a
        malformed one is; an idle one gets its RST_STREAM all the same (as Go's server
        does), not remembered among ours since nothing of it exists; a closed one has
        nothing left to end and gets nothing (5.1: no frame but PRIORITY is sent on a
        closed stream)."""
        if stream_id in self.streams:
            self._malformed(stream_id, "a stream depending on itself", events)
        elif self._idle(stream_id):
            self.out += frame(RST_STREAM, 0, stream_id,
                              ErrorCode.PROTOCOL_ERROR.to_bytes(4, "big"))

    def _idle(self, stream_id: int) -> bool:
        """A stream the client has not opened: above the highest one it opened, or an
        even id (the server's, and this server pushes nothing). RFC 9113 5.1: any frame
        but HEADERS and PRIORITY on an idle stream is a connection error."""
        return stream_id > self.highest_inbound_stream_id or not stream_id & 1

    def _remote_end(self, stream_id: int, stream: Stream, events: list[Event]) -> None:
        stream.remote_ended = True
        events.append(StreamEnded(stream_id))
        if stream.local_ended:
            del self.streams[stream_id]

    def _malformed(self, stream_id: int, why: str, events: list[Event],
                   code: int = ErrorCode.PROTOCOL_ERROR) -> None:
        """A stream error on a stream the codec may be serving: reset it, tell the codec."""
        known = self.streams.pop(stream_id, None)
        self._rst(stream_id, code)
        if known is not None:
            known.local_ended = True
            events.append(StreamMalformed(stream_id, why))


def _protocol(detail: str) -> H2Error:
    return H2Error("protocol_error", ErrorCode.PROTOCOL_ERROR, detail)


def _frame_size(kind: str) -> H2Error:
    return H2Error("frame_size", ErrorCode.FRAME_SIZE_ERROR, f"a {kind} frame of a wrong size")
