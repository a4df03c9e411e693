"""HTTP/2 abuse (issue 12) against the codec over in-memory transports, with raw frames:
rapid reset, CONTINUATION floods, HPACK limits, control-frame floods, streams past the
advertised limit, zero-window stalls. Each is cut (GOAWAY with its code, one log line
naming the limit) or bounded, and a legitimate client using the same frames is not."""

from __future__ import annotations

from typing import Any

import hpack
from h2.errors import ErrorCodes
from hyperframe.frame import Frame, GoAwayFrame, RstStreamFrame, SettingsFrame
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.logger import globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from gateway.dataplane.core import ProxyCore
from gateway.dataplane.http2 import guard as h2_guard
from gateway.dataplane.http2 import protocol
from gateway.dataplane.http2.connection import H2Connection
from gateway.dataplane.routing.plan import build_plan
from tests.support import h2frames as f
from tests.support.memory_upstream import MemoryUpstream

from .config.helpers import base_config, load

CLIENT = IPv4Address("TCP", "192.0.2.7", 50000)
HOST = b"app.example.com"


def snapshot(route_timeout: str = "600s", **extra: Any) -> Any:
    return load(base_config(timeout_idle="300s", policy=[{
        "from": "https://app.example.com", "to": "http://127.0.0.1:9000/",
        "allow_public_unauthenticated_access": True, "timeout": route_timeout}], **extra))


SNAPSHOT = snapshot()


class AbuseTestCase(SynchronousTestCase):
    config = SNAPSHOT
    client_settings: dict[str, int] = {}

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.core = ProxyCore(self.reactor, build_plan(self.config), tls=False)
        self.core.start()
        self.addCleanup(self.core.stop)
        self.transport = StringTransport(peerAddress=CLIENT)
        self.server = H2Connection(self.core)
        self.server.makeConnection(self.transport)
        self.frames = f.Frames()
        self.inbox = bytearray()
        self.received: list[Frame] = []
        self.logged: list[dict[str, Any]] = []
        globalLogPublisher.addObserver(self.logged.append)
        self.addCleanup(globalLogPublisher.removeObserver, self.logged.append)
        self.send(f.hello(**self.client_settings))

    def send(self, data: bytes) -> None:
        f.deliver(self.server, self.reactor, data)

    def read(self) -> list[Frame]:
        self.inbox += self.transport.value()
        self.transport.clear()
        new = f.parse(self.inbox)
        self.received += new
        return new

    def request(self, stream_id: int, path: bytes = b"/x", end_stream: bool = True) -> bytes:
        return self.frames.headers(stream_id, f.request_headers(path, HOST),
                                   end_stream=end_stream)

    def goaway(self) -> GoAwayFrame | None:
        self.read()
        return f.goaway_in(self.received)

    def assert_cut(self, limit: str, code: ErrorCodes) -> None:
        goaway = self.goaway()
        self.assertIsNotNone(goaway, "no GOAWAY")
        assert goaway is not None
        self.assertEqual(ErrorCodes(goaway.error_code), code)
        self.assertTrue(self.transport.disconnecting or self.transport.disconnected)
        cuts = [e for e in self.logged if e.get("limit") is not None]
        self.assertEqual([(e["limit"], e["client"]) for e in cuts], [(limit, "192.0.2.7")])

    def resets(self, code: ErrorCodes) -> list[int]:
        self.read()
        return [x.stream_id for x in self.received
                if isinstance(x, RstStreamFrame) and x.error_code == code]


class RapidResetTests(AbuseTestCase):
    def test_reset_loop_is_cut(self) -> None:
        """Streams opened and reset in a loop (CVE-2023-44487): GOAWAY ENHANCE_YOUR_CALM
        once the reset budget is spent, and no more upstream work than that budget."""
        sid = 1
        for _ in range(40):  # 40 reads of 50 pairs: far past the burst
            if self.transport.disconnecting:
                break
            batch = b""
            for _ in range(50):
                batch += self.request(sid) + f.rst(sid)
                sid += 2
            self.send(batch)
        self.assert_cut("rapid_reset", ErrorCodes.ENHANCE_YOUR_CALM)
        self.assertLessEqual(len(self.reactor.tcpClients), h2_guard.RESET_BURST)
        self.assertLess(sid, 2 * (h2_guard.RESET_BURST + 100))

    def test_answers_to_our_own_resets_are_not_rapid_reset(self) -> None:
        """Found by the soak: when upstreams fail mid-body the gateway resets those
        streams, and an h2 client answers the frames still arriving on them with
        RST_STREAM. Hundreds of those, quickly, are no attack: the client cancelled
        nothing the gateway was still serving. (And a stream reset that way is forgotten:
        kept, 128 of them made every later stream REFUSED_STREAM.)"""
        from twisted.internet.error import ConnectionLost
        from twisted.python.failure import Failure
        for i in range(300):
            sid = 2 * i + 1
            self.send(self.request(sid))
            self.assertEqual(len(self.reactor.tcpClients), i + 1)  # not REFUSED_STREAM
            upstream = MemoryUpstream(self.reactor, -1)
            upstream.received()
            upstream.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npart")
            upstream.protocol.connectionLost(Failure(ConnectionLost()))  # reset mid-body
            self.send(f.rst(sid))  # the client's answer to a frame on its closed stream
        self.assertIsNone(self.goaway())
        self.assertEqual(self.server.streams, {})

    def test_stream_reset_in_the_same_read_is_never_started(self) -> None:
        """HEADERS and RST_STREAM arriving together: no exchange, no upstream connect."""
        self.send(self.request(1) + f.rst(1) + self.request(3) + f.rst(3))
        self.assertEqual((self.reactor.tcpClients, self.server.streams), ([], {}))
        self.assertEqual([e for e in self.logged if e.get("log_namespace") == "gateway.access"],
                         [])

    def test_pairs_split_across_turns_are_counted_once_and_never_started(self) -> None:
        """Many open-and-reset pairs in one read are handled a turn at a time: a pair
        whose RST_STREAM comes a turn after its HEADERS is still never started, and
        counted once (by the guard), not again when h2 reports the reset."""
        pairs = h2_guard.RESETS_PER_READ
        self.assertGreater(pairs, h2_guard.STREAMS_PER_TURN)
        self.send(b"".join(self.request(2 * i + 1) + f.rst(2 * i + 1) for i in range(pairs)))
        self.assertEqual((self.reactor.tcpClients, self.server.streams), ([], {}))
        self.assertEqual(self.server.guard.resets.tokens, h2_guard.RESET_BURST - pairs)
        self.assertIsNone(self.goaway())

    def test_a_read_of_many_pairs_is_cut_before_h2_parses_it(self) -> None:
        """Past RESETS_PER_READ pairs in one read: cut at once, at the cost of walking
        the frame headers (no HPACK decoding, no stream state, no upstream)."""
        pairs = h2_guard.RESETS_PER_READ + 1
        self.send(b"".join(self.request(2 * i + 1) + f.rst(2 * i + 1) for i in range(pairs)))
        self.assert_cut("rapid_reset", ErrorCodes.ENHANCE_YOUR_CALM)
        self.assertEqual(self.server.h2.highest_inbound_stream_id, 0)
        self.assertEqual(self.reactor.tcpClients, [])

    def test_resets_the_client_provokes_count_as_its_own(self) -> None:
        """MadeYouReset (CVE-2025-8671): a request, then a frame that makes the server
        reset it (here DATA past the request's content-length, which no control-frame
        budget counts), in a loop. Each reset cancels upstream work as a client
        RST_STREAM would, so it is charged to the same budget: cut once it is spent, no
        more upstream connections than the burst."""
        for i in range(4 * h2_guard.RESET_BURST):
            if self.transport.disconnecting:
                break
            sid = 2 * i + 1
            self.send(self.frames.headers(
                sid, [*f.request_headers(b"/x", HOST), (b"content-length", b"1")],
                end_stream=False))
            self.send(f.data(sid, b"ab"))
        self.assert_cut("rapid_reset", ErrorCodes.ENHANCE_YOUR_CALM)
        self.assertLessEqual(len(self.reactor.tcpClients), h2_guard.RESET_BURST + 1)

    def test_a_request_made_malformed_in_its_own_read_is_never_started(self) -> None:
        """A request and the frame that makes the server reset it, in one read: no
        exchange, no upstream connection (and the reset is charged)."""
        self.send(self.request(1) + f.frame_header(5, 0x2, 0, 1) + (1).to_bytes(4, "big")
                  + b"\x10")
        self.assertEqual((self.reactor.tcpClients, self.server.streams), ([], {}))
        self.assertEqual(self.server.guard.resets.tokens, h2_guard.RESET_BURST - 1)

    def test_slow_resets_are_allowed(self) -> None:
        """A browser cancelling streams now and then is never cut."""
        for i in range(200):
            sid = 2 * i + 1
            self.send(self.request(sid) + f.rst(sid))
            self.reactor.advance(1.0 / 16)  # 16 resets a second, for 12.5 s
        self.assertIsNone(self.goaway())
        self.assertEqual(self.server.streams, {})

    def test_reset_while_connecting_releases_the_upstream(self) -> None:
        """A stream reset while its upstream connection is being opened cancels the
        connect and gives the host back to the balancer (nothing left open)."""
        self.send(self.request(1))
        connector = self.reactor.connectors[0]
        exchange = self.server.streams[1].exchange
        assert exchange is not None and exchange.host_state is not None
        host = exchange.host_state
        self.assertEqual(host.active, 1)
        self.send(f.rst(1))
        self.assertTrue(connector.stoppedConnecting)
        self.assertEqual(host.active, 0)
        self.assertEqual(self.server.streams, {})

    def test_reset_after_request_sent_aborts_and_pools_nothing(self) -> None:
        self.send(self.request(1))
        upstream = MemoryUpstream(self.reactor)
        self.assertTrue(upstream.received().startswith(b"GET /x HTTP/1.1"))
        self.send(f.rst(1))
        self.assertTrue(upstream.transport.disconnected)
        self.assertEqual(self.core.pool.idle_count(), 0)


class HeaderBlockTests(AbuseTestCase):
    def test_continuation_flood_is_cut_by_bytes(self) -> None:
        """HEADERS without END_HEADERS, then 16 KiB CONTINUATIONs: cut once the block
        passes HEADER_BLOCK_MAX_BYTES (h2 alone buffers 64 of them, 1 MiB)."""
        self.send(self.frames.headers(1, f.request_headers(b"/x", HOST), end_headers=False))
        for _ in range(12):
            if self.transport.disconnecting:
                break
            self.send(f.continuation(1, b"\x00" * 16384))
        self.assert_cut("header_block_bytes", ErrorCodes.ENHANCE_YOUR_CALM)
        self.assertEqual(self.reactor.tcpClients, [])

    def test_empty_continuations_are_cut_by_count(self) -> None:
        self.send(self.frames.headers(1, f.request_headers(b"/x", HOST), end_headers=False))
        self.send(b"".join(f.continuation(1, b"") for _ in range(40)))
        self.assert_cut("header_block_frames", ErrorCodes.ENHANCE_YOUR_CALM)

    def test_long_header_block_in_continuations_is_served(self) -> None:
        """A legitimate 40 KiB header list split in 3 frames is fine."""
        block = self.frames.block([*f.request_headers(b"/ping", HOST),
                                   (b"x-big", b"v" * 40000)])
        self.send(self.frames.headers_block(1, block[:16000], end_headers=False)
                  + f.continuation(1, block[16000:32000])
                  + f.continuation(1, block[32000:], end_headers=True))
        self.assertIsNone(self.goaway())
        self.assertTrue(any(x.stream_id == 1 and "END_STREAM" in x.flags
                            for x in self.received))

    def test_oversized_frame_is_refused_before_it_is_buffered(self) -> None:
        """A frame header announcing 16 MiB is refused at once (FRAME_SIZE_ERROR), not
        after h2 has buffered the whole frame."""
        self.send(f.frame_header(2**24 - 1, 0x0, 0, 1) + b"\x00" * 20000)
        self.assert_cut("max_frame_size", ErrorCodes.FRAME_SIZE_ERROR)

    def test_header_list_over_the_advertised_size(self) -> None:
        block = self.frames.block([*f.request_headers(b"/x", HOST),
                                   *((b"x-h%d" % i, b"v" * 1000) for i in range(70))])
        self.send(self.frames.headers_block(1, block[:16000], end_headers=False)
                  + b"".join(f.continuation(1, block[i:i + 16000],
                                            end_headers=i + 16000 >= len(block))
                             for i in range(16000, len(block), 16000)))
        self.assert_cut("max_header_list_size", ErrorCodes.ENHANCE_YOUR_CALM)
        self.assertEqual(self.reactor.tcpClients, [])

    def test_single_huge_header_value(self) -> None:
        """One 100 KiB header value (in CONTINUATIONs): refused while decoding."""
        block = self.frames.block([*f.request_headers(b"/x", HOST), (b"x-huge", b"h" * 100000)])
        self.assertLess(len(block), protocol.HEADER_BLOCK_MAX_BYTES)
        self.send(self.frames.headers_block(1, block[:16000], end_headers=False)
                  + b"".join(f.continuation(1, block[i:i + 16000],
                                            end_headers=i + 16000 >= len(block))
                             for i in range(16000, len(block), 16000)))
        self.assert_cut("max_header_list_size", ErrorCodes.ENHANCE_YOUR_CALM)
        self.assertEqual(self.reactor.tcpClients, [])

    def test_hpack_bomb(self) -> None:
        """One 4 KiB entry in the dynamic table, then a block referencing it 1000 times
        (4 MiB decoded from 1 KiB): refused by the header-list limit while decoding."""
        encoder = hpack.Encoder()
        first = encoder.encode([*f.request_headers(b"/ping", HOST), (b"x-bomb", b"b" * 4000)])
        self.send(f.Frames.headers_block(1, first))
        self.assertIsNone(self.goaway())
        # the entry is now the newest in the dynamic table: index 62 (0x80 | 62)
        self.send(f.Frames.headers_block(3, b"\xbe" * 1000))
        self.assert_cut("max_header_list_size", ErrorCodes.ENHANCE_YOUR_CALM)
        self.assertEqual(self.reactor.tcpClients, [])

    def test_table_size_update_above_the_advertised(self) -> None:
        """A dynamic table size update past our HEADER_TABLE_SIZE (4096) is refused."""
        update = b"\x3f\xe1\xff\x03"  # size update to 65535 (5-bit prefix integer)
        self.send(f.Frames.headers_block(1, update + self.frames.block(
            f.request_headers(b"/x", HOST))))
        self.assert_cut("header_table_size", ErrorCodes.PROTOCOL_ERROR)


FLOODS = {
    "ping": f.ping(),
    "settings": f.settings(),
    "settings_ack": f.settings_ack(),
    "window_update": f.window_update(0, 1),
    "priority": f.priority(1),
    "empty_data": b"",  # built per test: needs an open stream
    "extension": f.extension(),
}


class ControlFloodTests(AbuseTestCase):
    def flood(self, frame: bytes, count: int = 3000) -> None:
        for start in range(0, count, 500):
            if self.transport.disconnecting:
                break
            self.send(frame * min(500, count - start))

    def test_floods_are_cut(self) -> None:
        for name, frame in FLOODS.items():
            with self.subTest(name):
                self.setUp()
                if name == "empty_data":
                    self.send(self.request(1, end_stream=False))
                    frame = f.data(1, b"")
                self.flood(frame)
                self.assert_cut("control_flood", ErrorCodes.ENHANCE_YOUR_CALM)

    def test_slow_control_frames_are_allowed(self) -> None:
        """A PING every 20 ms for 60 s (3000 of them) is under the refill rate."""
        for _ in range(3000):
            self.send(f.ping())
            self.reactor.advance(0.02)
        self.assertIsNone(self.goaway())

    def test_window_updates_paid_by_a_download(self) -> None:
        """A client with 64 KiB windows reading a 16 MiB download, giving the window
        back as soon as 4 KiB are consumed (as Go's client does), sends two
        WINDOW_UPDATEs per 4 KiB: thousands within the same second, and not a flood."""
        size = 16 << 20
        self.send(self.request(1, b"/big"))
        upstream = MemoryUpstream(self.reactor)
        upstream.respond(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        got = sent = unacked = updates = 0
        while got < size:
            if sent < size:
                upstream.respond(b"a" * 65536)
                sent += 65536
            for frame in self.read():
                if frame.type == 0x0 and frame.stream_id == 1:
                    got += len(frame.data)
                    unacked += len(frame.data)
                    if unacked >= 4096 or got == size:
                        self.send(f.window_update(1, unacked) + f.window_update(0, unacked))
                        unacked, updates = 0, updates + 2
            self.assertIsNone(f.goaway_in(self.received))
        self.assertEqual(got, size)
        self.assertGreater(updates, 1.5 * h2_guard.CONTROL_BURST)


class BlockedOutputTests(AbuseTestCase):
    def test_requests_while_not_reading(self) -> None:
        """A client whose socket is full keeps sending HEAD requests (each complete
        with its HEADERS): the answers pile up in the transport's buffer until
        BLOCKED_OUTPUT_MAX (lowered here to 16 KiB), then the connection is aborted."""
        self.patch(h2_guard, "BLOCKED_OUTPUT_MAX", 16384)
        self.server.pauseProducing()  # the socket buffer is full
        before = len(self.transport.value())
        sid = 1
        while not self.transport.disconnected and sid < 20000:
            self.send(b"".join(self.frames.headers(sid + 2 * i, f.request_headers(
                b"/ping", HOST, b"HEAD")) for i in range(100)))
            sid += 200
        self.assertTrue(self.transport.disconnected)
        self.assertLess(len(self.transport.value()) - before, 16384 + 4096)
        self.assertEqual([e["limit"] for e in self.logged if e.get("limit")],
                         ["blocked_output"])


class PausingTransport(StringTransport):
    """A socket whose buffer fills during a write: it pauses its producer (as Twisted's
    do) while the write that crossed the mark is still being made."""

    mark = 64 * 1024

    def write(self, data: bytes) -> None:
        super().write(data)
        if len(self.value()) > self.mark and self.producer is not None:
            self.producer.pauseProducing()


class FillingWriteTests(SynchronousTestCase):
    def test_many_streams_reopened_at_once(self) -> None:
        """Found by the soak: a client reading many downloads reopens the connection
        window; every stream drains in that one turn. DATA is handed to the socket every
        64 KiB across streams, so the socket pauses the connection early and the rest
        waits in the streams, not in one huge write that counted as blocked output."""
        reactor = MemoryReactorClock()
        core = ProxyCore(reactor, build_plan(SNAPSHOT), tls=False)
        transport = PausingTransport(peerAddress=CLIENT)
        server = H2Connection(core)
        server.makeConnection(transport)
        frames = f.Frames()
        f.deliver(server, reactor, f.hello(INITIAL_WINDOW_SIZE=16 * 1024 * 1024))
        streams = 12
        f.deliver(server, reactor, b"".join(frames.headers(1 + 2 * i, f.request_headers(
            b"/x", HOST), end_stream=True) for i in range(streams)))
        body = b"x" * 60000
        for index in range(streams):  # the connection window (65535) is spent at once
            upstream = MemoryUpstream(reactor, index)
            upstream.received()
            upstream.respond(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)
                             + body)
        transport.clear()
        server.resumeProducing()  # the client read that: the socket is empty again
        self.assertFalse(server.send_paused)
        self.assertGreater(server.buffered, h2_guard.BLOCKED_OUTPUT_MAX)
        f.deliver(server, reactor, f.window_update(0, 64 * 1024 * 1024))
        self.assertFalse(transport.disconnecting)
        self.assertTrue(server.send_paused)
        self.assertLess(len(transport.value()), 2 * PausingTransport.mark + 32 * 1024)
        server.resumeProducing()  # the client read it all: the rest follows
        transport.clear()
        for _ in range(streams * 2):
            server.resumeProducing()
            transport.clear()
        self.assertEqual(server.buffered, 0)


class ConcurrencyTests(AbuseTestCase):
    def open(self, first: int, count: int) -> None:
        self.send(b"".join(self.request(first + 2 * i) for i in range(count)))

    def test_stream_past_the_limit_is_refused(self) -> None:
        """Stream 129 gets REFUSED_STREAM; the 128 others keep going; one finishing
        makes room for the next."""
        self.open(1, 128)
        self.assertEqual(len(self.reactor.tcpClients), 128)
        self.open(257, 1)
        self.assertEqual(self.resets(ErrorCodes.REFUSED_STREAM), [257])
        self.assertIsNone(self.goaway())
        self.assertEqual(len(self.reactor.tcpClients), 128)
        self.send(f.rst(1))
        self.open(259, 1)
        self.assertEqual(len(self.reactor.tcpClients), 129)
        self.assertEqual(self.resets(ErrorCodes.REFUSED_STREAM), [257])

    def test_ignoring_refusals_closes_the_connection(self) -> None:
        self.open(1, 128)
        self.open(257, h2_guard.REFUSED_BURST + 1)
        self.assert_cut("max_concurrent_streams", ErrorCodes.PROTOCOL_ERROR)
        self.assertEqual(len(self.reactor.tcpClients), 128)

    def test_hard_cap_counts_streams_the_client_keeps_open(self) -> None:
        """Answered streams the client never ends stay open in h2 (not in the codec):
        past STREAMS_HARD_CAP of those, h2 itself closes the connection."""
        cap = protocol.STREAMS_HARD_CAP
        self.send(b"".join(self.request(2 * i + 1, b"/ping", end_stream=False)
                           for i in range(cap)))
        self.assertIsNone(self.goaway())
        self.assertEqual(self.server.streams, {})
        self.send(self.request(2 * cap + 1, b"/ping", end_stream=False))
        self.assert_cut("streams_hard_cap", ErrorCodes.PROTOCOL_ERROR)

    def test_settings_advertise_the_limits(self) -> None:
        settings = next(x for x in self.read() if isinstance(x, SettingsFrame))
        self.assertEqual(settings.settings[SettingsFrame.MAX_CONCURRENT_STREAMS], 128)
        self.assertEqual(settings.settings[SettingsFrame.MAX_HEADER_LIST_SIZE], 65536)


class TurnTests(AbuseTestCase):
    """One connection's many requests in one read cannot hold the reactor: they are
    started a turn at a time, and other connections are served in between."""

    def turn(self) -> None:
        """The next turn (the clock would run every turn at once: a real reactor polls
        its sockets between two)."""
        [call] = [c for c in self.reactor.getDelayedCalls() if c.func == self.server._next_turn]
        func, args, kw = call.func, call.args, call.kw
        call.cancel()
        func(*args, **kw)

    def test_requests_start_a_turn_at_a_time_with_reading_paused(self) -> None:
        turn = h2_guard.STREAMS_PER_TURN
        self.server.dataReceived(b"".join(self.request(2 * i + 1) for i in range(2 * turn + 1)))
        self.assertEqual(len(self.reactor.tcpClients), turn)
        self.assertEqual(self.transport.producerState, "paused")
        self.turn()
        self.assertEqual(len(self.reactor.tcpClients), 2 * turn)
        self.assertEqual(self.transport.producerState, "paused")
        self.turn()
        self.assertEqual(len(self.reactor.tcpClients), 2 * turn + 1)
        self.assertEqual(self.transport.producerState, "producing")
        self.assertIsNone(self.server.backlog)

    def test_a_busy_connection_starts_fewer_requests_a_turn(self) -> None:
        busy, turn = h2_guard.BUSY_STREAMS, h2_guard.STREAMS_PER_TURN
        f.deliver(self.server, self.reactor,
                  b"".join(self.request(2 * i + 1, end_stream=False) for i in range(busy)))
        self.assertEqual(len(self.server.streams), busy)
        self.server.dataReceived(b"".join(self.request(2 * (busy + i) + 1)
                                          for i in range(2 * turn)))
        self.assertEqual(len(self.server.streams), busy + h2_guard.STREAMS_PER_BUSY_TURN)
        self.turn()
        self.assertEqual(len(self.server.streams), busy + 2 * h2_guard.STREAMS_PER_BUSY_TURN)

    def test_another_connection_is_served_between_turns(self) -> None:
        turn = h2_guard.STREAMS_PER_TURN
        self.server.dataReceived(b"".join(self.request(2 * i + 1) for i in range(4 * turn)))
        other = H2Connection(self.core)
        other.makeConnection(StringTransport(peerAddress=CLIENT))
        other.dataReceived(f.hello() + f.Frames().headers(
            1, f.request_headers(b"/other", HOST), end_stream=True))
        self.assertEqual(len(self.reactor.tcpClients), turn + 1)  # before the second turn

    def test_what_arrives_while_a_read_is_pending_waits_its_turn(self) -> None:
        """(a TLS transport may deliver what it had already decrypted after the pause)"""
        turn = h2_guard.STREAMS_PER_TURN
        self.server.dataReceived(b"".join(self.request(2 * i + 1) for i in range(turn + 1)))
        self.server.dataReceived(self.request(2 * turn + 3))
        self.assertEqual(len(self.reactor.tcpClients), turn)
        self.turn()
        self.assertEqual(len(self.reactor.tcpClients), turn + 2)
        self.assertEqual(self.transport.producerState, "producing")

    def test_a_lost_connection_lets_go_of_its_streams_a_turn_at_a_time(self) -> None:
        from twisted.internet.error import ConnectionLost
        from twisted.python.failure import Failure

        from gateway.dataplane.http2 import connection
        f.deliver(self.server, self.reactor, b"".join(
            self.request(2 * i + 1, end_stream=False) for i in range(40)))
        exchanges = [s.exchange for s in self.server.streams.values() if s.exchange]
        self.assertEqual(len(exchanges), 40)
        self.server.connectionLost(Failure(ConnectionLost()))
        self.assertEqual(sum(e.finished for e in exchanges), connection.RELEASES_PER_TURN)
        self.reactor.advance(0)
        self.assertTrue(all(e.finished for e in exchanges))

    def test_a_connection_lost_between_turns_drops_the_rest(self) -> None:
        from twisted.internet.error import ConnectionLost
        from twisted.python.failure import Failure
        turn = h2_guard.STREAMS_PER_TURN
        self.server.dataReceived(b"".join(self.request(2 * i + 1) for i in range(3 * turn)))
        self.server.connectionLost(Failure(ConnectionLost()))
        self.assertEqual([c for c in self.reactor.getDelayedCalls()
                          if c.func == self.server._next_turn], [])
        self.reactor.advance(0)
        self.assertEqual(len(self.reactor.tcpClients), turn)


class ZeroWindowTestCase(AbuseTestCase):
    client_settings = {"INITIAL_WINDOW_SIZE": 0}

    def respond(self, stream_id: int, size: int) -> MemoryUpstream:
        """A response on a new stream, read from its upstream until that is paused."""
        self.send(self.request(stream_id, b"/big"))
        upstream = MemoryUpstream(self.reactor)
        upstream.respond(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        while upstream.transport.producerState == "producing" and size > 0:
            upstream.respond(b"a" * 65536)  # what one read of a socket brings
            size -= 65536
        return upstream


class ZeroWindowTests(ZeroWindowTestCase):

    def test_stalled_stream_is_reset_and_its_upstream_released(self) -> None:
        """No window for STALL_TIMEOUT (timeout_write unset): RST_STREAM CANCEL, the
        bytes dropped, the upstream aborted."""
        upstream = self.respond(1, 1 << 20)
        self.assertEqual(upstream.transport.producerState, "paused")
        self.reactor.advance(h2_guard.STALL_TIMEOUT - 1)
        self.assertEqual(self.resets(ErrorCodes.CANCEL), [])
        self.reactor.advance(2)
        self.assertEqual(self.resets(ErrorCodes.CANCEL), [1])
        self.assertTrue(upstream.transport.disconnected)
        self.assertEqual((self.server.streams, self.server.buffered), ({}, 0))
        self.assertIsNone(self.goaway())  # the connection itself stays usable

    def test_progress_restarts_the_deadline(self) -> None:
        """A slow reader that opens its window now and then is not reset."""
        upstream = self.respond(1, 1 << 20)
        for _ in range(5):
            self.reactor.advance(h2_guard.STALL_TIMEOUT * 0.8)
            self.send(f.window_update(1, 1000))
        self.assertEqual(self.resets(ErrorCodes.CANCEL), [])
        self.assertFalse(upstream.transport.disconnected)

    def test_connection_buffer_is_bounded(self) -> None:
        """Streams with closed windows: the bytes waiting in all of them together stay
        under the connection's high-water mark plus one upstream read per stream (each
        pauses on its first read past the mark), every upstream paused."""
        stalled = h2_guard.STALLED_STREAMS
        upstreams = [self.respond(2 * i + 1, 4 << 20) for i in range(stalled)]
        waiting = sum(len(s.pending) for s in self.server.streams.values())
        self.assertEqual(waiting, self.server.buffered)
        self.assertLessEqual(waiting, 2 * 1024 * 1024 + stalled * 65536)
        self.assertTrue(all(u.transport.producerState == "paused" for u in upstreams))
        self.send(f.settings(INITIAL_WINDOW_SIZE=1 << 24) + f.window_update(0, 1 << 30))
        self.assertTrue(all(u.transport.producerState == "producing" for u in upstreams))

    def test_a_client_reading_nothing_gets_no_more_upstream_work(self) -> None:
        """128 large downloads at once with zero windows (the client reads none of
        them): once STALLED_STREAMS responses wait for a window, the other requests
        wait too, not started (no upstream connection); they start as the client opens
        its windows, and all are answered."""
        stalled = h2_guard.STALLED_STREAMS
        for i in range(stalled):
            self.respond(2 * i + 1, 1 << 20)
        self.send(b"".join(self.request(2 * (stalled + i) + 1, b"/big") for i in range(40)))
        self.assertEqual(len(self.reactor.tcpClients), stalled)
        self.assertEqual(len(self.server.streams), stalled + 40)
        self.send(f.settings(INITIAL_WINDOW_SIZE=1 << 24) + f.window_update(0, 1 << 30))
        self.assertEqual(len(self.reactor.tcpClients), stalled + 40)


class WriteTimeoutTests(ZeroWindowTestCase):
    config = snapshot("5s", timeout_write="10s")

    def test_timeout_write_is_the_stall_deadline(self) -> None:
        upstream = self.respond(1, 1 << 20)
        self.reactor.advance(9)
        self.assertEqual(self.resets(ErrorCodes.CANCEL), [])
        self.reactor.advance(2)
        self.assertEqual(self.resets(ErrorCodes.CANCEL), [1])
        self.assertTrue(upstream.transport.disconnected)

    def test_socket_full_for_timeout_write_aborts(self) -> None:
        self.send(self.request(1, b"/x"))
        upstream = MemoryUpstream(self.reactor)
        self.reactor.advance(1)
        self.server.pauseProducing()
        self.reactor.advance(11)
        self.assertTrue(self.transport.disconnected)
        self.assertTrue(upstream.transport.disconnected)
        self.assertEqual([e["limit"] for e in self.logged if e.get("limit")],
                         ["timeout_write"])
