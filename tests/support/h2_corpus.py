"""A hand-written corpus of HTTP/2 client byte streams for the differential test
(``tests/unit/test_h2_differential.py``): valid requests and bodies, CONTINUATION,
padding, priority, SETTINGS/PING/WINDOW_UPDATE, RST_STREAM, GOAWAY, and errors of every
kind (preface, idle and closed streams, sizes, flags, HPACK, pseudo-header fields,
connection-specific fields, content-length).

Each case names what the engine must do (RFC 9113): ``OK`` (no reset, no connection
error), ``RESET`` (a stream reset, the connection goes on) or a GOAWAY code; the
differential checks the rest. Each case builds its frames with its own HPACK encoder (the
server's decoder keeps the client's table per connection).
"""

from __future__ import annotations

from collections.abc import Callable

from hyperframe.frame import (
    DataFrame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    PushPromiseFrame,
    SettingsFrame,
)

from gateway.dataplane.http2.protocol import ErrorCode
from tests.support import h2frames as f
from tests.support.h2_differential import Respond, Step

REQUEST = f.request_headers()
H = f.frame_header


def _raw_headers(stream_id: int, block: bytes, flags: int = 0x5) -> bytes:
    """A HEADERS frame around ``block`` as given (END_STREAM|END_HEADERS by default)."""
    return H(len(block), 0x1, flags, stream_id) + block


HELLO = f.hello()
POST = [(b":method", b"POST"), *REQUEST[1:]]
BLOCK = [*REQUEST, (b"x-long", b"v" * 100)]
OK, RESET = "ok", "reset"  # expected of a case: nothing refused, or a stream reset
Build = Callable[[f.Frames], list[Step]]


def bad(*headers: tuple[bytes, bytes], base: list[tuple[bytes, bytes]] = REQUEST) -> Build:
    """A request with ``headers`` added, then a good one: the connection must go on."""
    return lambda fr: [HELLO, fr.headers(1, [*base, *headers]), fr.headers(3, REQUEST)]


def frames(*build: bytes | Respond | Callable[[f.Frames], bytes]) -> Build:
    """The hello, then each step (a callable gets the case's HPACK encoder)."""
    return lambda fr: [HELLO, *(b(fr) if callable(b) else b for b in build)]


def get(sid: int, end: bool = True) -> Callable[[f.Frames], bytes]:
    return lambda fr: fr.headers(sid, REQUEST, end_stream=end)


def post(sid: int, *extra: tuple[bytes, bytes]) -> Callable[[f.Frames], bytes]:
    return lambda fr: fr.headers(sid, [*POST, *extra], end_stream=False)


def trailers(sid: int, *fields: tuple[bytes, bytes], end: bool = True
             ) -> Callable[[f.Frames], bytes]:
    return lambda fr: fr.headers(sid, list(fields), end_stream=end)


def continued(fr: f.Frames) -> list[bytes]:
    block = fr.block(BLOCK)
    return [f.Frames.headers_block(1, block[:10], end_headers=False),
            f.continuation(1, block[10:30]), f.continuation(1, block[30:], end_headers=True)]


def in_frames(sid: int, block: bytes, size: int = 16384) -> list[bytes]:
    """``block`` as HEADERS (END_STREAM) and as many CONTINUATIONs as it takes."""
    parts = [block[i:i + size] for i in range(0, len(block), size)] or [b""]
    return [f.Frames.headers_block(sid, parts[0], end_headers=len(parts) == 1),
            *(f.continuation(sid, part, end_headers=i == len(parts) - 1)
              for i, part in enumerate(parts[1:], 1))]


def padded_headers(fr: f.Frames) -> bytes:
    return bytes(HeadersFrame(1, data=fr.block(POST), pad_length=7,
                              flags=["END_HEADERS", "PADDED"]).serialize())


def priority_on(stream_id: int, depends_on: int) -> bytes:
    return H(5, 0x2, 0, stream_id) + depends_on.to_bytes(4, "big") + b"\x10"


def with_priority(depends_on: int) -> Callable[[f.Frames], bytes]:
    return lambda fr: bytes(HeadersFrame(
        1, data=fr.block(REQUEST), depends_on=depends_on, stream_weight=200,
        exclusive=True, flags=["END_HEADERS", "END_STREAM", "PRIORITY"]).serialize())


P = ErrorCode
CASES: dict[str, tuple[object, Build]] = {
    # requests, bodies and the control frames around them
    "get": (OK, frames(get(1))),
    "two-gets": (OK, frames(get(1), lambda fr: fr.headers(3, f.request_headers(b"/b")))),
    "post-body": (OK, frames(post(1, (b"content-length", b"5")), f.data(1, b"hel"),
                             f.data(1, b"lo", end_stream=True))),
    "post-no-length": (OK, frames(post(1), f.data(1, b"abc"), f.data(1, b"", True))),
    "continuation": (OK, lambda fr: [HELLO, *continued(fr)]),
    "padded": (OK, frames(padded_headers, bytes(DataFrame(
        1, data=b"abc", pad_length=3, flags=["PADDED", "END_STREAM"]).serialize()))),
    "padding-fills-data": (OK, frames(post(1), H(4, 0x0, 0x9, 1) + b"\x03abc")),
    "priority": (OK, frames(with_priority(0), f.priority(1), f.priority(3), f.priority(9))),
    "priority-self-in-headers": (RESET, frames(with_priority(1), get(3))),
    "priority-self-in-trailers": (RESET, frames(post(1), lambda fr: bytes(HeadersFrame(
        1, data=fr.block([(b"x-sum", b"1")]), depends_on=1,
        flags=["END_HEADERS", "END_STREAM", "PRIORITY"]).serialize()), get(3))),
    "priority-frame-self-open": (RESET, frames(get(1, end=False), priority_on(1, 1), get(3))),
    "priority-frame-self-idle": (RESET, frames(get(1), priority_on(5, 5), get(5))),
    "priority-frame-self-closed": (OK, frames(get(1), Respond(1), priority_on(1, 1))),
    "settings-ping-window": (OK, frames(
        f.settings(HEADER_TABLE_SIZE=0, INITIAL_WINDOW_SIZE=1, MAX_FRAME_SIZE=20000,
                   ENABLE_PUSH=0),
        f.ping(b"abcdefgh"), f.window_update(0, 1000), get(1, end=False),
        f.window_update(1, 5), f.settings(INITIAL_WINDOW_SIZE=70000),
        bytes(SettingsFrame(0, settings={0x99: 7}).serialize()), f.settings_ack())),
    "ping-ack": (OK, frames(bytes(PingFrame(0, opaque_data=b"x" * 8,
                                            flags=["ACK"]).serialize()))),
    "client-reset": (RESET, frames(get(1, end=False), f.rst(1), f.data(1, b"late"),
                                f.rst(1), get(3), f.rst(3, 0))),
    "client-reset-then-headers": (P.STREAM_CLOSED, frames(get(1, end=False), f.rst(1),
                                                          get(1))),
    "client-goaway": (OK, frames(get(1), bytes(GoAwayFrame(
        0, last_stream_id=0, error_code=2).serialize()), get(3))),
    "extension-frame": (OK, frames(H(3, 0xF0) + b"abc", H(0, 0x77, 0xFF, 1), get(1))),
    "unknown-flags": (OK, frames(lambda fr: _raw_headers(1, fr.block(REQUEST), 0xD7 & ~0x28),
                                 H(8, 0x6, 0xFE) + b"\0" * 8)),
    "answered-then-late-frames": (OK, frames(get(1, end=False), Respond(1), f.data(1, b"x"),
                                             f.window_update(1, 9), f.priority(1),
                                             f.data(1, b"", end_stream=True), Respond(1),
                                             f.priority(1))),
    "answer-unknown-stream": (OK, frames(Respond(1), get(3), Respond(1))),
    "answered-then-data": (RESET, frames(get(1), Respond(1), f.data(1, b"x"))),
    "answered-then-headers": (P.STREAM_CLOSED, frames(get(1), Respond(1), get(1))),
    "answered-then-rst": (OK, frames(get(1), Respond(1), f.rst(1))),
    "answered-then-window-update": (OK, frames(get(1), Respond(1), f.window_update(1, 1))),
    "data-after-end-stream": (RESET, frames(get(1), f.data(1, b"x"), get(3))),
    "closed-reset-then-headers": (RESET, frames(get(1), Respond(1), f.data(1, b""),
                                                trailers(1, (b"x-s", b"1")), get(3))),
    "refused-then-frames": (RESET, frames(lambda fr: fr.headers(1, [*REQUEST, (b"te", b"x")],
                                                                end_stream=False),
                                          f.data(1, b"x"), trailers(1, (b"x-s", b"1")),
                                          f.window_update(1, 5), f.rst(1), get(3))),
    "trailers-without-end-answered": (RESET, frames(post(1), Respond(1),
                                                    trailers(1, (b"x-s", b"1"), end=False))),
    "settings-window-closed-stream": (RESET, frames(get(1), f.window_update(1, 1000),
                                                 f.data(1, b""), get(3),
                                                 f.settings(INITIAL_WINDOW_SIZE=2**31 - 1))),
    "headers-after-end-stream": (P.STREAM_CLOSED, frames(get(1), get(1))),
    "trailers": (OK, frames(post(1), f.data(1, b"ab"), trailers(1, (b"x-sum", b"1")))),
    "trailers-without-end": (RESET, frames(post(1), trailers(1, (b"x-sum", b"1"), end=False),
                                           get(3))),
    "trailers-with-pseudo": (RESET, frames(post(1), trailers(1, (b":path", b"/x")), get(3))),
    "trailers-upper-case": (RESET, frames(post(1), trailers(1, (b"X-Sum", b"1")), get(3))),
    "trailers-connection": (RESET, frames(post(1), trailers(1, (b"connection", b"x")),
                                          get(3))),
    # content-length (RFC 9113 8.1.1)
    "content-length-short": (RESET, frames(post(1, (b"content-length", b"5")),
                                           f.data(1, b"abc", True), get(3))),
    "content-length-long": (RESET, frames(post(1, (b"content-length", b"2")),
                                          f.data(1, b"abc"), get(3))),
    "content-length-trailers": (RESET, frames(post(1, (b"content-length", b"5")),
                                              f.data(1, b"abc"), trailers(1, (b"x-s", b"1")),
                                              get(3))),
    "content-length-no-body": (RESET, bad((b"content-length", b"3"))),
    "content-length-zero-no-body": (OK, bad((b"content-length", b"0"))),
    "content-length-invalid": (RESET, bad((b"content-length", b"1x"))),
    "content-length-twice": (RESET, bad((b"content-length", b"1"), (b"content-length", b"2"))),
    "content-length-same-twice": (OK, frames(post(1, (b"content-length", b"1"),
                                                  (b"content-length", b"1")),
                                             f.data(1, b"x", end_stream=True))),
    "head-with-body": (OK, frames(lambda fr: fr.headers(1, [(b":method", b"HEAD"),
                                                             *REQUEST[1:]], end_stream=False),
                                  f.data(1, b"x", end_stream=True))),
    # pseudo-header fields (RFC 9113 8.3)
    "no-method": (RESET, lambda fr: [HELLO, fr.headers(1, REQUEST[1:]), fr.headers(3, REQUEST)]),
    "no-scheme": (RESET, lambda fr: [HELLO, fr.headers(1, [REQUEST[0], *REQUEST[2:]]),
                                     fr.headers(3, REQUEST)]),
    "no-path": (RESET, lambda fr: [HELLO, fr.headers(1, REQUEST[:3]), fr.headers(3, REQUEST)]),
    "no-authority": (OK, lambda fr: [HELLO, fr.headers(1, [*REQUEST[:2], REQUEST[3]])]),
    "host-no-authority": (OK, lambda fr: [HELLO, fr.headers(1, [*REQUEST[:2], REQUEST[3],
                                                                 (b"host", b"a.test")])]),
    "two-hosts": (OK, bad((b"host", b"app.test"), (b"host", b"app.test"))),
    "empty-path": (RESET, bad(base=[*REQUEST[:3], (b":path", b"")])),
    "path-twice": (RESET, bad((b":path", b"/y"))),
    "pseudo-after-regular": (RESET, bad(base=[*REQUEST[:3], (b"x-a", b"1"), REQUEST[3]])),
    "unknown-pseudo": (RESET, bad((b":foo", b"1"))),
    "status-in-request": (RESET, bad((b":status", b"200"))),
    "protocol-pseudo": (RESET, bad((b":protocol", b"websocket"),
                                   base=[(b":method", b"CONNECT"), *REQUEST[1:]])),
    "connect": (OK, frames(lambda fr: fr.headers(1, [(b":method", b"CONNECT"),
                                                     (b":authority", b"h.test:443")],
                                                 end_stream=False), f.data(1, b"tunnel"))),
    "connect-with-path": (RESET, bad(base=[(b":method", b"CONNECT"), REQUEST[2],
                                           REQUEST[3]])),
    "connect-with-scheme": (RESET, bad(base=[(b":method", b"CONNECT"), REQUEST[1],
                                             (b":authority", b"h.test:443")])),
    "host-first-differs": (RESET, bad((b"host", b"other.test"), (b"host", REQUEST[2][1]))),
    "authority-and-host-differ": (RESET, bad((b"host", b"other.test"))),
    "authority-and-host-agree": (OK, bad((b"host", REQUEST[2][1]))),
    # fields (RFC 9113 8.2)
    "upper-case-name": (RESET, bad((b"X-A", b"1"))),
    "space-in-name": (RESET, bad((b"x a", b"1"))),
    "colon-in-name": (RESET, bad((b"x:a", b"1"))),
    "high-byte-in-name": (RESET, bad((b"x\xe9", b"1"))),
    "empty-name": (RESET, bad((b"", b"1"))),
    "nul-in-value": (RESET, bad((b"x-a", b"a\0b"))),
    "cr-in-value": (RESET, bad((b"x-a", b"a\rb"))),
    "lf-in-value": (RESET, bad((b"x-a", b"a\nb"))),
    "leading-space": (RESET, bad((b"x-a", b" a"))),
    "trailing-tab": (RESET, bad((b"x-a", b"a\t"))),
    "inner-space-and-tab": (OK, bad((b"x-a", b"a \tb"))),
    "empty-value": (OK, bad((b"x-a", b""))),
    "control-in-value": (OK, bad((b"x-a", b"a\x01b\x7f"))),
    "connection": (RESET, bad((b"connection", b"close"))),
    "keep-alive": (RESET, bad((b"keep-alive", b"5"))),
    "proxy-connection": (RESET, bad((b"proxy-connection", b"x"))),
    "transfer-encoding": (RESET, bad((b"transfer-encoding", b"chunked"))),
    "upgrade": (RESET, bad((b"upgrade", b"h2c"))),
    "te-gzip": (RESET, bad((b"te", b"gzip"))),
    "te-trailers": (OK, bad((b"te", b"trailers"))),
    "te-trailers-upper-case": (RESET, bad((b"te", b"Trailers"))),
    "cookies": (OK, bad((b"cookie", b"a=1"), (b"cookie", b"b=2"))),
    # connection errors
    "bad-preface": (P.PROTOCOL_ERROR, lambda fr: [b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n"
                                                  + f.settings()]),
    "http1-preface": (P.PROTOCOL_ERROR, lambda fr: [b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"]),
    "first-frame-not-settings": (P.PROTOCOL_ERROR, lambda fr: [f.PREFACE + f.ping()]),
    "settings-ack-first": (P.PROTOCOL_ERROR, lambda fr: [f.PREFACE + f.settings_ack()]),
    "frame-too-large": (P.FRAME_SIZE_ERROR, frames(H(16385, 0x0, 0, 1) + b"\0" * 16385)),
    "frame-too-large-truncated": (P.FRAME_SIZE_ERROR, frames(H(1 << 20, 0x0, 0, 1) + b"\0")),
    "truncated-frame": (OK, frames(lambda fr: fr.headers(1, REQUEST)[:-2])),
    "ping-size": (P.FRAME_SIZE_ERROR, frames(H(7, 0x6) + b"\0" * 7)),
    "ping-on-stream": (P.PROTOCOL_ERROR, frames(H(8, 0x6, 0, 1) + b"\0" * 8)),
    "rst-size": (P.FRAME_SIZE_ERROR, frames(get(1), H(3, 0x3, 0, 1) + b"\0" * 3)),
    "rst-stream-0": (P.PROTOCOL_ERROR, frames(H(4, 0x3) + b"\0\0\0\x08")),
    "rst-idle": (P.PROTOCOL_ERROR, frames(f.rst(1))),
    "window-update-size": (P.FRAME_SIZE_ERROR, frames(H(3, 0x8) + b"\0" * 3)),
    "window-update-zero": (P.PROTOCOL_ERROR, frames(H(4, 0x8) + b"\0\0\0\0")),
    "window-update-zero-stream": (RESET, frames(get(1), H(4, 0x8, 0, 1) + b"\0" * 4, get(3))),
    "window-update-idle": (P.PROTOCOL_ERROR, frames(f.window_update(1, 1))),
    "window-overflow": (P.FLOW_CONTROL_ERROR, frames(f.window_update(0, 2**31 - 1))),
    "window-overflow-stream": (RESET, frames(get(1), f.window_update(1, 2**31 - 1), get(3))),
    "settings-size": (P.FRAME_SIZE_ERROR, frames(H(5, 0x4) + b"\0" * 5)),
    "settings-ack-payload": (P.FRAME_SIZE_ERROR, frames(H(6, 0x4, 1) + b"\0" * 6)),
    "settings-on-stream": (P.PROTOCOL_ERROR, frames(H(0, 0x4, 0, 1))),
    "settings-enable-push-2": (P.PROTOCOL_ERROR, frames(f.settings(ENABLE_PUSH=2))),
    "settings-window-too-big": (P.FLOW_CONTROL_ERROR,
                                frames(f.settings(INITIAL_WINDOW_SIZE=2**31))),
    "settings-frame-size-small": (P.PROTOCOL_ERROR, frames(f.settings(MAX_FRAME_SIZE=16383))),
    "settings-frame-size-big": (P.PROTOCOL_ERROR, frames(f.settings(MAX_FRAME_SIZE=2**24))),
    "settings-window-overflows-stream": (P.FLOW_CONTROL_ERROR, frames(
        get(1), f.window_update(1, 2**31 - 65536), f.settings(INITIAL_WINDOW_SIZE=65536))),
    "priority-size": (P.FRAME_SIZE_ERROR, frames(H(4, 0x2, 0, 1) + b"\0" * 4)),
    "priority-stream-0": (P.PROTOCOL_ERROR, frames(H(5, 0x2) + b"\0" * 5)),
    "goaway-on-stream": (P.PROTOCOL_ERROR, frames(H(8, 0x7, 0, 1) + b"\0" * 8)),
    "goaway-short": (P.FRAME_SIZE_ERROR, frames(H(4, 0x7) + b"\0" * 4)),
    "push-promise-short": (P.PROTOCOL_ERROR, frames(H(0, 0x5, 0, 1))),
    "ping-wrong-size-on-stream": (P.FRAME_SIZE_ERROR, frames(H(0, 0x6, 0, 1))),
    "rst-wrong-size-on-stream-0": (P.FRAME_SIZE_ERROR, frames(H(0, 0x3))),
    "altsvc-from-client": (OK, frames(get(1), H(1, 0x0A, 0, 0) + b"x", H(0, 0x0A, 0, 1))),
    "continuation-on-reset-stream": (P.PROTOCOL_ERROR, frames(
        lambda fr: fr.headers(1, [*REQUEST, (b"te", b"x")], end_stream=False),
        f.continuation(1, b"", end_headers=True))),
    "push-promise": (P.PROTOCOL_ERROR, frames(get(1, end=False), lambda fr: bytes(
        PushPromiseFrame(1, promised_stream_id=2, data=fr.block(REQUEST),
                         flags=["END_HEADERS"]).serialize()))),
    "continuation-alone": (P.PROTOCOL_ERROR, frames(f.continuation(1, b"\x82", True))),
    "continuation-after-end": (P.PROTOCOL_ERROR, frames(get(1), f.continuation(1, b"", True))),
    "continuation-other-stream": (P.PROTOCOL_ERROR, lambda fr: [
        HELLO, *continued(fr)[:1], f.continuation(3, b"\x82", end_headers=True)]),
    "header-block-interrupted": (P.PROTOCOL_ERROR, lambda fr: [HELLO, *continued(fr)[:2],
                                                               f.ping()]),
    "header-block-interrupted-by-extension": (P.PROTOCOL_ERROR, lambda fr: [
        HELLO, *continued(fr)[:1], f.extension(0xF0, 0, b"")]),
    "headers-stream-0": (P.PROTOCOL_ERROR, frames(lambda fr: _raw_headers(0, fr.block(REQUEST)))),
    "data-stream-0": (P.PROTOCOL_ERROR, frames(H(1, 0x0) + b"x")),
    "data-idle": (P.PROTOCOL_ERROR, frames(f.data(1, b"x"))),
    "even-stream": (P.PROTOCOL_ERROR, frames(get(2))),
    "stream-id-backwards": (P.STREAM_CLOSED, frames(get(5), get(3))),
    "even-stream-below-highest": (P.PROTOCOL_ERROR, frames(get(3), get(2))),
    "even-stream-data-below-highest": (P.PROTOCOL_ERROR, frames(get(3), f.data(2, b"x"))),
    "even-stream-window-below-highest": (P.PROTOCOL_ERROR, frames(get(3),
                                                                  f.window_update(2, 1))),
    "rst-idle-after-a-stream": (P.PROTOCOL_ERROR, frames(get(1), f.rst(3))),
    "window-update-idle-after-a-stream": (P.PROTOCOL_ERROR, frames(get(1),
                                                                   f.window_update(3, 1))),
    "window-update-reserved-bit": (OK, frames(get(1, end=False),
                                              H(4, 0x8, 0, 1) + b"\x80\0\0\x01")),
    "window-update-zero-closed": (OK, frames(get(1), Respond(1), H(4, 0x8, 0, 1) + b"\0" * 4,
                                             get(3))),
    "headers-padding-too-long": (P.PROTOCOL_ERROR, frames(
        lambda fr: _raw_headers(1, b"\xff" + fr.block(REQUEST), 0xD))),
    "headers-padding-fills-frame": (RESET, frames(
        lambda fr: _raw_headers(1, b"\x02" + b"\0\0", 0xD), get(3))),
    "headers-padding-over-priority": (P.PROTOCOL_ERROR, frames(
        lambda fr: _raw_headers(1, b"\x03\0\0\0\0\x10" + b"\0\0", 0x2D))),
    "headers-padding-empty": (P.FRAME_SIZE_ERROR, frames(_raw_headers(1, b"", 0xD))),
    "headers-priority-short": (P.PROTOCOL_ERROR, frames(_raw_headers(1, b"\0\0\0", 0x25))),
    "data-padding-too-long": (P.PROTOCOL_ERROR, frames(post(1), H(4, 0x0, 0x8, 1) + b"\x04abc")),
    "data-padding-empty": (P.PROTOCOL_ERROR, frames(post(1), H(0, 0x0, 0x8, 1))),
    "flow-control-connection": (P.FLOW_CONTROL_ERROR, frames(
        post(1), *[f.data(1, b"x" * 16384)] * 4)),
    "flow-control-after-settings": (P.FLOW_CONTROL_ERROR, frames(
        f.settings(INITIAL_WINDOW_SIZE=1), post(1), *[f.data(1, b"x" * 16384)] * 3,
        f.data(1, b"y" * 16383), f.data(1, b"z"))),
    "stream-hard-cap": (P.PROTOCOL_ERROR, frames(*(get(sid, end=False)
                                                   for sid in range(1, 2 * 257 + 1, 2)))),
    # HPACK (RFC 7541) errors
    "hpack-index-0": (P.COMPRESSION_ERROR, frames(_raw_headers(1, b"\x80"))),
    "hpack-index-too-big": (P.COMPRESSION_ERROR, frames(_raw_headers(1, b"\xbe"))),
    "hpack-integer-truncated": (P.COMPRESSION_ERROR, frames(_raw_headers(1, b"\xff\x80"))),
    "hpack-integer-huge": (P.COMPRESSION_ERROR,
                           frames(_raw_headers(1, b"\xff" + b"\xff" * 9 + b"\x01"))),
    "hpack-string-past-end": (P.COMPRESSION_ERROR, frames(_raw_headers(1, b"\x40\x85ab"))),
    "hpack-huffman-eos": (P.COMPRESSION_ERROR,
                          frames(_raw_headers(1, b"\x40\x84\xff\xff\xff\xff\x01a"))),
    "hpack-huffman-bad-padding": (P.COMPRESSION_ERROR,
                                  frames(_raw_headers(1, b"\x40\x81\x00\x01a"))),
    "hpack-size-update-late": (P.COMPRESSION_ERROR, frames(_raw_headers(1, b"\x82\x20"))),
    "hpack-size-update-too-big": (P.PROTOCOL_ERROR, frames(_raw_headers(1, b"\x3f\xe2\x1f"))),
    "hpack-size-update-ok": (OK, frames(lambda fr: _raw_headers(
        1, b"\x3f\xe1\x1f\x20" + f.Frames().block(REQUEST)))),
    "hpack-size-update-second-block": (OK, frames(get(1), lambda fr: _raw_headers(
        3, b"\x20" + f.Frames().block(REQUEST)))),
    "hpack-list-too-big": (P.ENHANCE_YOUR_CALM, lambda fr: [HELLO, *in_frames(1, fr.block(
        [*REQUEST, *((b"x-%d" % i, b"v" * 4000) for i in range(17))]))]),
    "hpack-list-just-fits": (OK, lambda fr: [HELLO, *in_frames(1, fr.block(
        [*REQUEST, *((b"x-%d" % i, b"v" * 3800) for i in range(17))]))]),
    # one 4 KiB entry in the table, then a block naming it 20 times (80 KiB decoded)
    "hpack-bomb": (P.ENHANCE_YOUR_CALM, frames(
        lambda fr: _raw_headers(1, fr.block([*REQUEST, (b"x-big", b"v" * 4000)])),
        _raw_headers(3, b"\xbe" * 20))),
}
