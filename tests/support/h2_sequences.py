"""Hypothesis-generated HTTP/2 client byte streams, built with ``hyperframe``/``hpack``
(implementations independent of the engine): mostly well-formed frames in a plausible
order, with malformed ones mixed in — header lists mutated from a valid request, bad
sizes, stray stream ids, odd flags and padding, SETTINGS/PING/WINDOW_UPDATE values at
and past their bounds, raw frames of any type — and the server answering some streams.

The generator keeps bodies small (a sequence never fills a 64 KiB flow-control window),
so windows are compared by the corpus cases that fill them on purpose.
"""

from __future__ import annotations

from typing import Any

import hpack
from hyperframe.frame import (
    DataFrame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    PriorityFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)
from hypothesis import strategies as st

from tests.support import h2frames as f
from tests.support.h2_differential import Respond, Step

Header = tuple[bytes, bytes]
MAX_STEPS = 24
MAX_STREAM_ID = 2**31 - 1

# Fields a request may gain: legal ones, and (one at a time, now and then) one that is
# malformed or legal only in some requests.
GOOD_FIELDS: list[Header] = [
    (b"content-length", b"0"), (b"content-length", b"3"), (b"te", b"trailers"),
    (b"host", b"app.test"), (b"cookie", b"a=1"), (b"cookie", b"b=2"), (b"x-a", b"1"),
    (b"x-a", b""), (b"x-a", b"in ner"), (b"x-a", b"ctl\x01\x7f\xff"),
    (b"x-long", b"v" * 300),
]
ODD_FIELDS: list[Header] = [
    (b"content-length", b"x"), (b"content-length", b""), (b"te", b"gzip"),
    (b"te", b"Trailers"), (b"connection", b"close"), (b"upgrade", b"h2c"),
    (b"keep-alive", b"1"), (b"transfer-encoding", b"chunked"), (b"host", b"other.test"),
    (b"x-a", b" lead"), (b"x-a", b"trail\t"), (b"x-a", b"nul\0"), (b"x-a", b"cr\r"),
    (b"x-a", b"lf\n"), (b"X-Up", b"1"), (b"x a", b"1"), (b"x:a", b"1"), (b"", b"1"),
    (b"x\xe9", b"1"), (b":path", b"/again"), (b":foo", b"1"), (b":status", b"200"),
    (b":protocol", b"websocket"),
]
METHODS = [b"GET", b"POST", b"HEAD", b"PUT", b"CONNECT"]
PSEUDO = [(b":scheme", b"https"), (b":authority", b"app.test"), (b":path", b"/p")]
TRAILER_FIELDS: list[Header] = [(b"x-sum", b"1"), (b"X-Sum", b"1"), (b":path", b"/"),
                                (b"connection", b"x"), (b"content-length", b"3")]
SETTINGS_VALUES = {
    SettingsFrame.HEADER_TABLE_SIZE: [4096, 0, 100, 65536],
    SettingsFrame.ENABLE_PUSH: [0, 1, 2],
    SettingsFrame.MAX_CONCURRENT_STREAMS: [100, 0],
    SettingsFrame.INITIAL_WINDOW_SIZE: [65535, 0, 1, 2**31 - 1, 2**31],
    SettingsFrame.MAX_FRAME_SIZE: [16384, 2**24 - 1, 16383, 2**24],
    SettingsFrame.MAX_HEADER_LIST_SIZE: [2**16, 0],
    0x8: [0, 1, 2],  # SETTINGS_ENABLE_CONNECT_PROTOCOL
    0x99: [7],  # unknown: ignored
}


def on_stream(frame: bytes, stream_id: int) -> bytes:
    """``frame`` (built by hyperframe on stream 1) moved to ``stream_id``, 0 included,
    which hyperframe refuses to build for the frames that need a stream."""
    return frame[:5] + stream_id.to_bytes(4, "big") + frame[9:]


class Client:
    """Draws steps, keeping the state a client has: its HPACK encoder, its streams."""

    def __init__(self, draw: Any) -> None:
        self.draw = draw
        self.encoder = hpack.Encoder()
        self.highest = 0
        self.opened: list[int] = []  # the odd stream ids used, in order
        self.steps: list[Step] = [f.hello()]

    def stream_id(self, opening: bool = False) -> int:
        """A stream in play (the next new one, for ``opening``); sometimes another
        one, 0, even or the largest. (Hypothesis draws the first choice of a
        ``sampled_from`` most, and shrinks towards it: the first is the common case.)"""
        new = min(self.highest + 2 if self.highest else 1, MAX_STREAM_ID)
        known = list(reversed(self.opened[-8:]))
        if self.rare(16):
            return int(self.draw(st.sampled_from([min(new + 2, MAX_STREAM_ID), 2,
                                                  MAX_STREAM_ID, 0])))
        if known and (self.rare(4) if opening else not self.rare(4)):
            return int(self.draw(st.sampled_from(known)))
        return new

    def rare(self, one_in: int) -> bool:
        """True about once in ``one_in`` draws. (Hypothesis favours the bounds of an
        integer range and the ends of a ``sampled_from``: the rare case is neither.)"""
        return bool(self.draw(st.integers(0, one_in - 1)) == one_in // 2)

    def block(self, headers: list[Header]) -> bytes:
        if self.rare(10):
            self.encoder.header_table_size = self.draw(st.sampled_from([256, 4097, 0, 4096]))
        sensitive = self.draw(st.booleans())
        fields = [(n, v, True) if sensitive and n == b"cookie" else (n, v) for n, v in headers]
        return bytes(self.encoder.encode(fields, huffman=self.draw(st.booleans())))

    def request_headers(self) -> list[Header]:
        method = self.draw(st.sampled_from(METHODS))
        pseudo = [(b":method", method), *PSEUDO]
        if method == b"CONNECT" and self.draw(st.booleans()):
            pseudo = [(b":method", method), (b":authority", b"h.test:443")]
        if self.rare(8):  # a pseudo-header missing
            del pseudo[self.draw(st.integers(0, len(pseudo) - 1))]
        extra = self.draw(st.lists(st.sampled_from(GOOD_FIELDS), max_size=3))
        if self.rare(3):
            extra.insert(self.draw(st.integers(0, len(extra))),
                         self.draw(st.sampled_from(ODD_FIELDS)))
        headers = pseudo + extra
        if extra and self.rare(8):  # out of order
            headers = self.draw(st.permutations(headers))
        return list(headers)

    def headers_frames(self, sid: int, block: bytes, end_stream: bool) -> list[bytes]:
        """HEADERS (maybe padded, with priority) and CONTINUATIONs carrying ``block``."""
        cuts = sorted(self.draw(st.lists(st.integers(0, len(block)), max_size=2)))
        parts = [block[a:b] for a, b in zip([0, *cuts], [*cuts, len(block)], strict=True)]
        frame = HeadersFrame(1, data=parts[0])
        flags = {"END_STREAM"} if end_stream else set()
        if len(parts) == 1:
            flags.add("END_HEADERS")
        if self.rare(5):
            frame.pad_length = self.draw(st.integers(0, 10))
            flags.add("PADDED")
        if self.rare(5):
            frame.depends_on = self.draw(st.sampled_from([0, sid, max(sid - 2, 0), 99]))
            frame.stream_weight = self.draw(st.integers(0, 255))
            frame.exclusive = self.draw(st.booleans())
            flags.add("PRIORITY")
        for flag in sorted(flags):
            frame.flags.add(flag)
        out = [on_stream(bytes(frame.serialize()), sid)]
        for index, part in enumerate(parts[1:], 2):
            out.append(on_stream(f.continuation(1, part, end_headers=index == len(parts)), sid))
        return out

    def step(self) -> None:
        kind = self.draw(st.sampled_from(
            ["request"] * 5 + ["data"] * 4 + ["respond"] * 2 + [
                "trailers", "rst", "window", "settings", "ping", "priority", "raw",
                "goaway"]))
        getattr(self, kind)()

    def request(self) -> None:
        sid = self.stream_id(opening=True)
        if sid % 2 and sid > self.highest:
            self.highest = sid
            self.opened.append(sid)
        self.steps += self.headers_frames(sid, self.block(self.request_headers()),
                                          self.draw(st.booleans()))

    def trailers(self) -> None:
        sid = self.stream_id()
        fields = self.draw(st.lists(st.sampled_from(TRAILER_FIELDS), min_size=1, max_size=2))
        self.steps += self.headers_frames(sid, self.block(fields),
                                          not self.rare(5))

    def data(self) -> None:
        frame = DataFrame(1, data=self.draw(st.binary(max_size=40)))
        if self.draw(st.booleans()):
            frame.flags.add("END_STREAM")
        if self.rare(4):
            frame.pad_length = self.draw(st.integers(0, 8))
            frame.flags.add("PADDED")
        self.steps.append(on_stream(bytes(frame.serialize()), self.stream_id()))

    def rst(self) -> None:
        self.steps.append(on_stream(bytes(RstStreamFrame(1, error_code=self.draw(
            st.sampled_from([8, 0, 1, 0xFF]))).serialize()), self.stream_id()))

    def window(self) -> None:
        sid = self.stream_id() if self.draw(st.booleans()) else 0
        increment = self.draw(st.sampled_from([1000, 1, 2**31 - 1, 0]))
        if increment:
            self.steps.append(bytes(WindowUpdateFrame(sid, increment).serialize()))
        else:  # hyperframe refuses to build it
            self.steps.append(f.frame_header(4, 0x8, 0, sid) + b"\0\0\0\0")

    def settings(self) -> None:
        if self.rare(4):
            self.steps.append(f.settings_ack())
            return
        keys = self.draw(st.lists(st.sampled_from(sorted(SETTINGS_VALUES)), max_size=3))
        values = {k: self.draw(st.sampled_from(SETTINGS_VALUES[k])) for k in keys}
        self.steps.append(bytes(SettingsFrame(0, settings=values).serialize()))

    def ping(self) -> None:
        self.steps.append(bytes(PingFrame(0, opaque_data=self.draw(st.binary(
            min_size=8, max_size=8)), flags=["ACK"] if self.draw(st.booleans()) else []
                                          ).serialize()))

    def priority(self) -> None:
        sid = self.stream_id()
        self.steps.append(on_stream(bytes(PriorityFrame(1, depends_on=self.draw(
            st.sampled_from([0, sid, 1, 3])), stream_weight=self.draw(st.integers(0, 255))
                                                        ).serialize()), sid))

    def respond(self) -> None:
        self.steps.append(Respond(self.stream_id()))

    def goaway(self) -> None:
        self.steps.append(bytes(GoAwayFrame(0, last_stream_id=0, error_code=self.draw(
            st.sampled_from([0, 1]))).serialize()))  # (rare: it ends the comparison)

    def raw(self) -> None:
        """Any type (known ones with any size), any flags: what a fuzzer would send."""
        kind = self.draw(st.integers(0, 0x12))
        payload = self.draw(st.binary(max_size=12))
        self.steps.append(f.frame_header(len(payload), kind, self.draw(st.integers(0, 255)),
                                         self.stream_id()) + payload)


@st.composite
def sequences(draw: Any) -> list[Step]:
    """A client's byte stream (and the server's answers), the hello first."""
    client = Client(draw)
    client.request()  # a client starts with one (else most sequences end at once)
    for _ in range(draw(st.integers(0, MAX_STEPS))):
        client.step()
    return client.steps
