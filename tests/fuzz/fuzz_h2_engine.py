"""Fuzz target: the HTTP/2 frame layer and HPACK decoder on their own
(``gateway.dataplane.http2.engine``, ``http2.hpack``), without ``http2.guard`` in front
(``fuzz_h2_frames`` goes through the codec, whose guard stops many inputs first).

Input: chunk sizes, then the bytes a client sends after its preface, SETTINGS and the
ACK of ours (so every input starts where requests can be made).

Contract:

- ``receive`` raises nothing but ``H2Error``; after one, exactly one GOAWAY with its code
  ends what was written, and the engine reads nothing more;
- what the engine writes parses as frames: no stream frame (DATA, HEADERS,
  CONTINUATION, RST_STREAM) on stream 0, WINDOW_UPDATE increments of 1..2**31-1;
- a request handed up is one RFC 9113 8.2/8.3 calls well-formed where an HTTP/1.1
  upstream could be confused: pseudo-header fields first, once each, with a :method;
  no empty or upper-case field name, no control character, space or ``:`` in a regular
  name, no CR/LF/NUL in a value, no connection-specific field, ``te`` only ``trailers``, one
  content-length value at most; its body is handed up in order, never past that
  content-length, and ends at most once (and at that length);
- the state stays consistent: windows within bounds, open streams odd and at most the
  highest id seen and fewer than the hard cap, the HPACK table within its size;
- the same bytes read in one piece or cut anywhere give the same events, the same bytes
  written and the same error.

The server side is driven too (as the codec would): request bodies are acknowledged,
requests are answered (most once ended, some before, some with a reset), so streams
reach every state; what it writes must decode (``hpack``) to the response heads sent.
"""

from __future__ import annotations

import re

from tests.fuzz.harness import chunks, describe, fuzz, instrumented, split_input

with instrumented("gateway"):
    import hpack

    from gateway.dataplane.http2 import protocol as e
    from gateway.dataplane.http2.engine import RESET_MEMORY, H2Engine
    from gateway.dataplane.http2.events import DataReceived, Event, RequestReceived, StreamEnded
    from gateway.dataplane.http2.protocol import H2Error

MAX_CONCURRENT, HARD_CAP, MAX_LIST, MAX_FRAME = 128, 256, 65536, 16384
HELLO = (e.PREFACE + e.frame(e.SETTINGS, 0, 0, b"\0\x04\0\0\xff\xff")
         + e.frame(e.SETTINGS, e.FLAG_ACK, 0))
_CONNECTION_SPECIFIC = {b"connection", b"keep-alive", b"proxy-connection",
                        b"transfer-encoding", b"upgrade"}
# RFC 9113 8.2.1 (a pseudo-header name is checked without its leading ":")
_BAD_NAME = re.compile(rb"[\x00-\x20:A-Z\x7f-\xff]")
_BAD_VALUE = re.compile(rb"[\x00\r\n]")
_STREAM_FRAMES = {e.DATA, e.HEADERS, e.RST_STREAM, e.CONTINUATION}


def engine() -> H2Engine:
    made = H2Engine(MAX_CONCURRENT, HARD_CAP, MAX_LIST, MAX_FRAME)
    made.initiate()
    made.data_to_send()
    return made


def check_request(headers: list[tuple[bytes, bytes]]) -> None:
    names = [name for name, _ in headers]
    pseudo = [name for name in names if name[:1] == b":"]
    assert names[:len(pseudo)] == pseudo, describe(headers)
    assert b":method" in pseudo and len(set(pseudo)) == len(pseudo), describe(headers)
    for name, value in headers:
        assert name, describe(headers)
        assert not _BAD_NAME.search(name[1:] if name[:1] == b":" else name), describe(name)
        assert not _BAD_VALUE.search(value), describe(value)
        assert name not in _CONNECTION_SPECIFIC, describe(name)
        assert name != b"te" or value == b"trailers", describe(value)
    lengths = {value for name, value in headers if name == b"content-length"}
    assert len(lengths) <= 1 and all(v.isdigit() for v in lengths), describe(lengths)


class Session:
    """One engine fed chunk by chunk, its events and output checked as they come."""

    def __init__(self, answer: bool) -> None:
        self.engine = engine()
        self.answer = answer
        self.events: list[Event] = []
        self.written = bytearray()
        self.error: int | None = None
        self.bodies: dict[int, int] = {}  # stream -> DATA bytes handed up
        self.limits: dict[int, int | None] = {}  # stream -> content-length
        self.ended: set[int] = set()

    def feed(self, data: bytes) -> None:
        if self.error is not None:
            assert self.engine.receive(data) == [], "read after a connection error"
            return
        try:
            events = self.engine.receive(data)
        except H2Error as exc:
            self.error = int(exc.code)
            self.written += self.engine.data_to_send()
            assert self.engine.closed
            return
        for event in events:
            self.event(event)
        self.written += self.engine.data_to_send()
        self.check_state()

    def event(self, event: Event) -> None:
        self.events.append(event)
        stream_id = getattr(event, "stream_id", 0)
        if isinstance(event, RequestReceived):
            check_request(event.headers)
            assert stream_id % 2 and stream_id not in self.limits, describe(event)
            lengths = [int(v) for n, v in event.headers if n == b"content-length"]
            self.limits[stream_id] = lengths[0] if lengths else None
            self.bodies[stream_id] = 0
            if event.ended:
                self.ended.add(stream_id)
                assert not lengths or lengths[0] == 0, describe(event)
        elif isinstance(event, DataReceived):
            assert stream_id in self.bodies and stream_id not in self.ended, describe(event)
            self.bodies[stream_id] += len(event.data)
            limit = self.limits[stream_id]
            assert limit is None or self.bodies[stream_id] <= limit, describe(event)
            assert 0 <= len(event.data) <= event.flow, describe(event)
            if self.answer:
                self.engine.acknowledge(stream_id, event.flow)
        elif isinstance(event, StreamEnded):
            assert stream_id in self.bodies and stream_id not in self.ended, describe(event)
            limit = self.limits[stream_id]
            assert limit is None or self.bodies[stream_id] == limit, describe(event)
            self.ended.add(stream_id)
        # Answers, as the codec's could come: most once the request has ended, some at
        # once (the client's END_STREAM then closes the stream), some reset instead.
        early = stream_id % 4 == 1
        if self.answer and (isinstance(event, StreamEnded) or (
                isinstance(event, RequestReceived) and (early or stream_id in self.ended))):
            self.respond(stream_id)

    def respond(self, stream_id: int) -> None:
        """A head (as an HTTP/1.1 upstream gave it; now and then past a frame), as much
        body as the windows allow, the end; or a reset."""
        if stream_id % 3 == 0:
            self.engine.reset_stream(stream_id, e.ErrorCode.CANCEL)
            return
        pad = b"p" * (stream_id * 7919 % 20000)
        head = [(b"Content-Type", b"text/plain"), (b"X-Pad", pad), (b"Connection", b"close")]
        head_only = stream_id % 8 == 7  # as for a 204 or a 304
        if not self.engine.send_response_head(stream_id, 200, head, frozenset({b"connection"}),
                                              end_stream=head_only) or head_only:
            return
        window = min(self.engine.window(stream_id), 100)  # below 0 after a SETTINGS
        assert self.engine.send_data(stream_id, b"x" * max(window, 0), end_stream=True)
        assert self.engine.window(stream_id) == 0 and not self.engine.send_data(stream_id, b"")

    def check_state(self) -> None:
        engine = self.engine
        assert 0 <= engine.in_window <= e.MAX_WINDOW, engine.in_window
        assert engine.out_window <= e.MAX_WINDOW, engine.out_window
        assert len(engine.streams) <= HARD_CAP
        for stream_id, stream in engine.streams.items():
            assert stream_id % 2 and 0 < stream_id <= engine.highest_inbound_stream_id
            assert 0 <= stream.in_window <= e.MAX_WINDOW, stream.in_window
            assert stream.out_window <= e.MAX_WINDOW, stream.out_window
            assert not (stream.local_ended and stream.remote_ended), stream_id
        decoder = engine.decoder
        assert 0 <= decoder.size <= decoder.max_size <= decoder.settings_size
        assert decoder.size == sum(len(n) + len(v) + 32 for n, v in decoder.table)
        assert len(engine.reset_by_us) <= RESET_MEMORY

    def check_written(self) -> None:
        """Everything written parses, header blocks decode (``hpack``, an independent
        decoder) to a response head; one GOAWAY, last, if any."""
        data, position, goaways = bytes(self.written), 0, 0
        decoder, block = hpack.Decoder(), b""
        decoder.max_header_list_size = 2**20  # ours: the client sets no limit here
        while position < len(data):
            assert position + 9 <= len(data), describe(data[position:])
            length = int.from_bytes(data[position:position + 3], "big")
            kind, stream_id = data[position + 3], int.from_bytes(data[position + 5:position + 9],
                                                                  "big")
            payload = data[position + 9:position + 9 + length]
            assert len(payload) == length, describe(data[position:])
            position += 9 + length
            assert goaways == 0, "a frame after GOAWAY"
            if kind in _STREAM_FRAMES:
                assert stream_id, describe((kind, payload))
            if kind == e.RST_STREAM:
                assert len(payload) == 4, describe((stream_id, payload))
            elif kind == e.WINDOW_UPDATE:
                increment = int.from_bytes(payload, "big")
                assert len(payload) == 4 and 0 < increment <= e.MAX_WINDOW, describe(payload)
            elif kind in (e.HEADERS, e.CONTINUATION):
                block += payload
                if data[position - 9 - length + 4] & e.FLAG_END_HEADERS:
                    head = list(decoder.decode(block, raw=True))
                    assert head[0] == (b":status", b"200"), describe(head)
                    assert (b"content-type", b"text/plain") in head, describe(head)
                    assert all(n != b"connection" for n, _ in head), describe(head)
                    block = b""
            elif kind == e.GOAWAY:
                goaways += 1
                assert int.from_bytes(payload[4:8], "big") == self.error, describe(payload)
        assert goaways == (self.error is not None), (goaways, self.error)

    def outcome(self) -> tuple[object, ...]:
        # the events of a read that ends in a connection error are never returned (the
        # codec would drop them anyway): with an error, the events depend on the cuts
        return self.events if self.error is None else None, bytes(self.written), self.error


def run(parts: list[bytes], answer: bool) -> Session:
    session = Session(answer)
    for part in parts:
        session.feed(part)
    session.check_written()
    return session


def TestOneInput(data: bytes) -> None:
    sizes, payload = split_input(data)
    stream = HELLO + payload
    run(chunks(stream, sizes), answer=True)
    # the same bytes, without answers (they depend on when each read ends), whole and cut
    whole = run([stream], answer=False).outcome()
    cut = run(chunks(stream, sizes or b"\x07"), answer=False).outcome()
    assert whole == cut, describe((whole, cut))


if __name__ == "__main__":
    fuzz(TestOneInput)
