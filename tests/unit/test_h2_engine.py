"""The HTTP/2 engine (``http2.engine``, ``http2.hpack``) on its own, with frames built by
``hyperframe``/``hpack`` (independent implementations): what RFC 9113 / 7541 require of a
server, connection errors with their codes, malformed requests refused per stream."""

from __future__ import annotations

import hpack
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)
from twisted.trial.unittest import SynchronousTestCase

from gateway.dataplane.http2 import protocol as e
from gateway.dataplane.http2.engine import H2Engine
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
from gateway.dataplane.http2.hpack import Decoder, Encoder, HpackError
from gateway.dataplane.http2.protocol import ErrorCode, H2Error
from tests.support import h2frames as f


def kinds(events: list[Event]) -> list[tuple[type, int]]:
    """Each event's kind and stream, without what else it carries."""
    return [(type(ev), getattr(ev, "stream_id", 0)) for ev in events]


REQUEST = [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"a.test"),
           (b":path", b"/x")]


class EngineTestCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.engine = H2Engine(128, 256, 65536)
        self.engine.initiate()
        self.frames = f.Frames()
        self.inbox = bytearray()
        self.events = self.feed(f.hello())

    def feed(self, data: bytes) -> list[Event]:
        return self.engine.receive(data)

    def sent(self) -> list[object]:
        self.inbox += self.engine.data_to_send()
        return f.parse(self.inbox)

    def request(self, stream_id: int, headers: list[tuple[bytes, bytes]] | None = None,
                end_stream: bool = True) -> list[Event]:
        return self.feed(self.frames.headers(stream_id, headers or REQUEST,
                                             end_stream=end_stream))

    def assert_connection_error(self, data: bytes, code: ErrorCode, limit: str) -> None:
        with self.assertRaises(H2Error) as caught:
            self.feed(data)
        self.assertEqual((caught.exception.code, caught.exception.limit), (code, limit))
        goaway = f.goaway_in(self.sent())
        assert goaway is not None
        self.assertEqual(goaway.error_code, code)
        self.assertEqual(self.feed(f.ping()), [])  # nothing more is read

    def assert_refused(self, headers: list[tuple[bytes, bytes]], why: str,
                       stream_id: int = 1) -> None:
        events = self.request(stream_id, headers)
        self.assertEqual(kinds(events), [(RequestRefused, stream_id)])
        assert isinstance(events[0], RequestRefused)
        self.assertIn(why, events[0].why)
        resets = [x for x in self.sent() if isinstance(x, RstStreamFrame)]
        self.assertEqual([(x.stream_id, x.error_code) for x in resets],
                         [(stream_id, ErrorCode.PROTOCOL_ERROR)])


class ConnectionTests(EngineTestCase):
    def test_settings_first_and_acknowledged(self) -> None:
        frames = self.sent()
        ours = frames[0]
        assert isinstance(ours, SettingsFrame)
        self.assertEqual(ours.settings, {SettingsFrame.MAX_CONCURRENT_STREAMS: 128,
                                         SettingsFrame.INITIAL_WINDOW_SIZE: 65535,
                                         SettingsFrame.MAX_HEADER_LIST_SIZE: 65536})
        self.assertTrue(any(isinstance(x, SettingsFrame) and "ACK" in x.flags
                            for x in frames[1:]))

    def test_bad_preface(self) -> None:
        engine = H2Engine(128, 256, 65536)
        with self.assertRaises(H2Error):
            engine.receive(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n")

    def test_preface_in_pieces(self) -> None:
        engine = H2Engine(128, 256, 65536)
        data = f.hello() + self.frames.headers(1, REQUEST)
        events = []
        for i in range(len(data)):
            events += engine.receive(data[i:i + 1])
        self.assertEqual(kinds(events), [(RequestReceived, 1)])

    def test_first_frame_must_be_settings(self) -> None:
        engine = H2Engine(128, 256, 65536)
        with self.assertRaises(H2Error) as caught:
            engine.receive(f.PREFACE + f.ping())
        self.assertEqual(caught.exception.code, ErrorCode.PROTOCOL_ERROR)

    def test_ping_is_answered(self) -> None:
        self.sent()
        self.feed(f.ping(b"12345678"))
        [pong] = self.sent()
        assert isinstance(pong, PingFrame)
        self.assertEqual((pong.opaque_data, "ACK" in pong.flags), (b"12345678", True))

    def test_frame_sizes(self) -> None:
        for data in (f.frame_header(7, e.PING) + b"\0" * 7,
                     f.frame_header(3, e.RST_STREAM, 0, 1) + b"\0" * 3,
                     f.frame_header(3, e.WINDOW_UPDATE) + b"\0" * 3,
                     f.frame_header(6, e.SETTINGS, 1) + b"\0" * 6,
                     f.frame_header(5, e.SETTINGS) + b"\0" * 5):
            with self.subTest(data[:9].hex()):
                self.setUp()
                self.assert_connection_error(data, ErrorCode.FRAME_SIZE_ERROR, "frame_size")

    def test_frame_over_max_size(self) -> None:
        self.assert_connection_error(f.frame_header(16385, e.DATA, 0, 1) + b"\0" * 16385,
                                     ErrorCode.FRAME_SIZE_ERROR, "max_frame_size")

    def test_push_promise_from_a_client(self) -> None:
        self.assert_connection_error(f.frame_header(4, e.PUSH_PROMISE, 4, 1) + b"\0\0\0\2",
                                     ErrorCode.PROTOCOL_ERROR, "protocol_error")

    def test_header_block_interrupted(self) -> None:
        self.assert_connection_error(
            self.frames.headers(1, REQUEST, end_headers=False) + f.ping(),
            ErrorCode.PROTOCOL_ERROR, "protocol_error")

    def test_continuation_on_another_stream(self) -> None:
        block = self.frames.block(REQUEST)
        self.assert_connection_error(
            f.Frames.headers_block(1, block[:3], end_headers=False)
            + f.continuation(3, block[3:], end_headers=True),
            ErrorCode.PROTOCOL_ERROR, "protocol_error")

    def test_stream_ids(self) -> None:
        self.assert_connection_error(self.frames.headers(2, REQUEST),
                                     ErrorCode.PROTOCOL_ERROR, "protocol_error")
        self.setUp()
        self.request(5)
        self.sent()
        self.engine.send_headers(5, [(b":status", b"200")], end_stream=True)
        self.assert_connection_error(self.frames.headers(3, REQUEST),
                                     ErrorCode.STREAM_CLOSED, "protocol_error")

    def test_frames_on_idle_streams(self) -> None:
        for data in (f.data(1, b"x"), f.window_update(1, 1), f.rst(1)):
            with self.subTest(data[:9].hex()):
                self.setUp()
                self.assert_connection_error(data, ErrorCode.PROTOCOL_ERROR,
                                             "protocol_error")

    def test_goaway_from_the_client(self) -> None:
        events = self.feed(bytes(GoAwayFrame(0, last_stream_id=0).serialize()))
        self.assertEqual(events, [ConnectionTerminated()])

    def test_settings_values(self) -> None:
        for values, code in (({"ENABLE_PUSH": 2}, ErrorCode.PROTOCOL_ERROR),
                             ({"INITIAL_WINDOW_SIZE": 2**31}, ErrorCode.FLOW_CONTROL_ERROR),
                             ({"MAX_FRAME_SIZE": 16383}, ErrorCode.PROTOCOL_ERROR),
                             ({"MAX_FRAME_SIZE": 2**24}, ErrorCode.PROTOCOL_ERROR)):
            with self.subTest(values):
                self.setUp()
                with self.assertRaises(H2Error) as caught:
                    self.feed(f.settings(**values))
                self.assertEqual(caught.exception.code, code)

    def test_unknown_frame_types_are_ignored(self) -> None:
        self.assertEqual(self.feed(f.extension(0xF0, 0, b"abc")), [])


class FlowControlTests(EngineTestCase):
    def test_data_past_the_windows(self) -> None:
        self.request(1, end_stream=False)
        chunk = f.data(1, b"x" * 16384)
        self.feed(chunk * 3)
        self.assert_connection_error(f.data(1, b"x" * 16384), ErrorCode.FLOW_CONTROL_ERROR,
                                     "flow_control")

    def test_consumed_bytes_reopen_both_windows(self) -> None:
        self.request(1, end_stream=False)
        events = self.feed(f.data(1, b"x" * 10000))
        self.assertEqual(events, [DataReceived(1, b"x" * 10000, 10000)])
        self.sent()
        self.engine.acknowledge(1, 10000)
        self.assertEqual(self.sent(), [])  # below the threshold: batched
        self.feed(f.data(1, b"x" * 10000))
        self.engine.acknowledge(1, 10000)
        updates = [(x.stream_id, x.window_increment) for x in self.sent()
                   if isinstance(x, WindowUpdateFrame)]
        self.assertEqual(updates, [(0, 20000), (1, 20000)])

    def test_padding_counts_against_the_window(self) -> None:
        self.request(1, end_stream=False)
        frame = DataFrame(1, data=b"abc", pad_length=10, flags=["PADDED"])
        events = self.feed(bytes(frame.serialize()))
        self.assertEqual(events, [DataReceived(1, b"abc", 14)])

    def test_send_window(self) -> None:
        self.request(1)
        self.assertEqual(self.engine.window(1), 65535)
        self.feed(f.settings(INITIAL_WINDOW_SIZE=100))
        self.assertEqual(self.engine.window(1), 100)
        events = self.feed(f.settings(INITIAL_WINDOW_SIZE=70000))
        self.assertIn(WindowOpened(0), events)
        self.assertEqual(self.engine.window(1), 65535)  # the connection's is the limit
        self.engine.send_data(1, b"x" * 1000)
        self.assertEqual(self.engine.window(1), 64535)
        self.feed(f.window_update(0, 10000))
        self.assertEqual(self.engine.window(1), 69000)

    def test_window_overflow(self) -> None:
        self.assert_connection_error(f.window_update(0, 2**31 - 1),
                                     ErrorCode.FLOW_CONTROL_ERROR, "flow_control")
        self.setUp()
        self.request(1)
        events = self.feed(f.window_update(1, 2**31 - 1))
        self.assertEqual([type(ev) for ev in events], [StreamMalformed])
        self.assertEqual(self.engine.window(1), 0)
        self.setUp()
        self.assert_connection_error(f.frame_header(4, e.WINDOW_UPDATE) + b"\0\0\0\0",
                                     ErrorCode.PROTOCOL_ERROR, "protocol_error")

    def test_data_on_a_stream_we_reset_is_ignored_and_given_back(self) -> None:
        self.request(1, end_stream=False)
        self.engine.reset_stream(1, ErrorCode.CANCEL)
        self.sent()
        for _ in range(4):  # 4 x 16 KiB: past the connection window unless given back
            self.assertEqual(self.feed(f.data(1, b"x" * 16384)), [])
        frames = self.sent()
        self.assertFalse(any(isinstance(x, RstStreamFrame) for x in frames))
        self.assertGreaterEqual(sum(x.window_increment for x in frames
                                    if isinstance(x, WindowUpdateFrame)), 3 * 16384)


class RequestTests(EngineTestCase):
    def test_request_and_body(self) -> None:
        events = self.request(1, [*REQUEST, (b"content-length", b"5")], end_stream=False)
        self.assertEqual(events, [RequestReceived(1, [*REQUEST, (b"content-length", b"5")],
                                   False)])
        events = self.feed(f.data(1, b"hel") + f.data(1, b"lo", end_stream=True))
        self.assertEqual(events, [DataReceived(1, b"hel", 3), DataReceived(1, b"lo", 2),
                                  StreamEnded(1)])

    def test_malformed_requests_are_refused_per_stream(self) -> None:
        cases = [
            ([(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"/")], None),
            ([*REQUEST, (b"X-Upper", b"v")], "upper case"),
            ([*REQUEST, (b"connection", b"close")], "connection-specific"),
            ([*REQUEST, (b"transfer-encoding", b"chunked")], "connection-specific"),
            ([*REQUEST, (b"te", b"gzip")], "te other"),
            ([*REQUEST, (b"x-a", b"a\r\nb")], "NUL, CR or LF"),
            ([(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"a\nb"),
              (b":path", b"/")], "NUL, CR or LF"),
            ([*REQUEST, (b"x-a", b" padded")], "white space"),
            ([(b"x-a", b"1"), *REQUEST], "after a regular"),
            ([*REQUEST[:3], (b"x-a", b"1"), (b":path", b"/y")], "after a regular"),
            ([*REQUEST[:3], (b":path", b"/"), (b":path", b"/y")], "twice"),
            ([*REQUEST, (b":status", b"200")], "not one of a request"),
            ([(b":scheme", b"https"), (b":path", b"/")], "no :method"),
            ([(b":method", b"GET"), (b":path", b"/")], "no :scheme"),
            ([(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"")], "empty :path"),
            ([*REQUEST, (b"host", b"b.test")], "differ"),
            ([*REQUEST, (b"content-length", b"x")], "content-length"),
            ([*REQUEST, (b"content-length", b"3"), (b"content-length", b"4")],
             "content-length"),
            ([*REQUEST, (b"content-length", b"3")], "no body"),  # with END_STREAM
        ]
        sid = 1
        for headers, why in cases:
            if why is None:  # valid: no :authority is fine (host may carry it)
                self.assertEqual(kinds(self.request(sid, headers)), [(RequestReceived, sid)])
            else:
                with self.subTest(why):
                    self.assert_refused(headers, why, sid)
            sid += 2
        self.assertEqual(self.engine.streams.keys(), {1})

    def test_body_longer_or_shorter_than_content_length(self) -> None:
        self.request(1, [*REQUEST, (b"content-length", b"3")], end_stream=False)
        events = self.feed(f.data(1, b"abcd"))
        self.assertEqual(kinds(events), [(StreamMalformed, 1)])
        self.request(3, [*REQUEST, (b"content-length", b"3")], end_stream=False)
        events = self.feed(f.data(3, b"ab", end_stream=True))
        self.assertEqual(kinds(events), [(StreamMalformed, 3)])
        resets = [(x.stream_id, x.error_code) for x in self.sent()
                  if isinstance(x, RstStreamFrame)]
        self.assertEqual(resets, [(1, ErrorCode.PROTOCOL_ERROR), (3, ErrorCode.PROTOCOL_ERROR)])

    def test_trailers_end_the_request(self) -> None:
        self.request(1, end_stream=False)
        self.feed(f.data(1, b"abc"))
        events = self.feed(self.frames.headers(1, [(b"x-checksum", b"1")], end_stream=True))
        self.assertEqual(events, [StreamEnded(1)])
        self.request(3, end_stream=False)
        events = self.feed(self.frames.headers(3, [(b"x-checksum", b"1")], end_stream=False))
        self.assertEqual(kinds(events), [(StreamMalformed, 3)])

    def test_client_reset(self) -> None:
        self.request(1, end_stream=False)
        self.assertEqual(self.feed(f.rst(1)), [StreamReset(1, 8, answered=False)])
        self.assertEqual(self.engine.streams, {})
        self.assertEqual(self.feed(f.rst(1)), [])  # closed: ignored

    def test_stream_closes_when_both_sides_end(self) -> None:
        self.request(1, end_stream=False)
        self.assertTrue(self.engine.send_headers(1, [(b":status", b"200")], end_stream=True))
        self.assertIn(1, self.engine.streams)  # half-closed (local): the client may send
        self.feed(f.data(1, b"", end_stream=True))
        self.assertEqual(self.engine.streams, {})
        self.assertFalse(self.engine.send_data(1, b"late"))

    def test_hard_cap(self) -> None:
        engine = H2Engine(2, 3, 65536)
        engine.receive(f.hello())
        for sid in (1, 3, 5):
            engine.receive(self.frames.headers(sid, REQUEST, end_stream=False))
        with self.assertRaises(H2Error) as caught:
            engine.receive(self.frames.headers(7, REQUEST, end_stream=False))
        self.assertEqual(caught.exception.limit, "streams_hard_cap")

    def test_self_dependency_is_refused(self) -> None:
        frame = HeadersFrame(1, data=self.frames.block(REQUEST), depends_on=1,
                             stream_weight=16, flags=["END_HEADERS", "END_STREAM", "PRIORITY"])
        events = self.feed(bytes(frame.serialize()))
        self.assertEqual(kinds(events), [(RequestRefused, 1)])
        # the block was decoded all the same: the next request still decodes
        self.assertEqual(kinds(self.request(3)), [(RequestReceived, 3)])

    def test_refused_stream_frames_afterwards_are_ignored(self) -> None:
        self.assert_refused([*REQUEST, (b"te", b"x")], "te")
        self.assertEqual(self.feed(f.data(1, b"x", end_stream=True)), [])


class ResponseTests(EngineTestCase):
    def test_headers_and_data_decode_with_an_independent_decoder(self) -> None:
        self.request(1)
        self.sent()
        headers = [(b":status", b"200"), (b"content-type", b"text/plain"),
                   (b"x-long", b"v" * 300), (b"x-" + b"n" * 200, b"1")]
        self.engine.send_headers(1, headers)
        self.engine.send_data(1, b"body", end_stream=True)
        frames = self.sent()
        decoder = hpack.Decoder()
        head = frames[0]
        assert isinstance(head, HeadersFrame)
        self.assertEqual(decoder.decode(head.data, raw=True), headers)
        self.assertEqual(decoder.header_table.maxsize, 0)  # told: no table
        self.assertEqual([(type(x).__name__, sorted(x.flags)) for x in frames], [
            ("HeadersFrame", ["END_HEADERS"]), ("DataFrame", ["END_STREAM"])])

    def test_big_header_block_uses_continuations(self) -> None:
        self.request(1)
        self.sent()
        headers = [(b":status", b"200"), *((b"x-%d" % i, b"v" * 1000) for i in range(40))]
        self.engine.send_headers(1, headers, end_stream=True)
        frames = self.sent()
        self.assertIsInstance(frames[0], HeadersFrame)
        self.assertTrue(all(isinstance(x, ContinuationFrame) for x in frames[1:]))
        self.assertEqual(["END_HEADERS" in x.flags for x in frames],
                         [False] * (len(frames) - 1) + [True])
        block = b"".join(x.data for x in frames)
        self.assertEqual(hpack.Decoder().decode(block, raw=True), headers)

    def test_size_update_again_after_the_client_changes_its_table(self) -> None:
        self.request(1)
        self.engine.send_headers(1, [(b":status", b"200")], end_stream=True)
        self.feed(f.settings(HEADER_TABLE_SIZE=100))
        self.request(3)
        self.sent()
        self.engine.send_headers(3, [(b":status", b"200")], end_stream=True)
        [head] = self.sent()
        assert isinstance(head, HeadersFrame)
        self.assertEqual(head.data[:1], b"\x20")


class HpackTests(SynchronousTestCase):
    def test_decodes_what_an_independent_encoder_makes(self) -> None:
        encoder = hpack.Encoder()
        decoder = Decoder()
        for i in range(200):  # the dynamic table fills and evicts
            headers = [(b":method", b"GET"), (b":path", b"/%d" % i),
                       (b"x-item", b"value-%d" % (i % 37)), (b"cookie", b"c" * (i % 50))]
            for huffman in (True, False):
                block = encoder.encode(headers, huffman=huffman)
                self.assertEqual(decoder.decode(block), headers)
        self.assertLessEqual(decoder.size, 4096)

    def test_errors(self) -> None:
        for block, limit in ((b"\x80", "compression_error"),  # index 0
                             (b"\xff\x80", "compression_error"),  # ends in an integer
                             (b"\xbe", "compression_error"),  # 62: empty dynamic table
                             (b"\x40\x85ab", "compression_error"),  # string past the end
                             (b"\x82\x20", "compression_error"),  # size update too late
                             (b"\x3f\xe2\x1f", "header_table_size")):  # 4097
            with self.subTest(block):
                with self.assertRaises(HpackError) as caught:
                    Decoder().decode(block)
                self.assertEqual(caught.exception.limit, limit)

    def test_list_size_bound_while_decoding(self) -> None:
        decoder = Decoder(max_list=1000)
        block = hpack.Encoder().encode([(b"x-a", b"a" * 900)])
        decoder.decode(block)
        with self.assertRaises(HpackError) as caught:
            decoder.decode(b"\xbe" * 2)  # the entry twice: 2 x 935 bytes
        self.assertEqual(caught.exception.limit, "max_header_list_size")

    def test_encoder_output_is_stateless(self) -> None:
        headers = [(b":status", b"404"), (b"content-length", b"12"), (b"x-y", b"z")]
        first, second = Encoder().encode(headers), Encoder().encode(headers)
        self.assertEqual(first, second)
        self.assertEqual(first[:1], b"\x20")
        self.assertEqual(hpack.Decoder().decode(first, raw=True), headers)
