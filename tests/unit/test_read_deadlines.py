"""Request bodies and timeout_read (3 s here): a body must keep coming (at most
timeout_read between reads, an idle deadline), and time the gateway spends on its own
work before reading on (a pending authorization, an earlier pipelined request) never
counts against the client. Flow control toward the upstream does count: if neither the
client nor the upstream moves for timeout_read, the request ends."""

from __future__ import annotations

from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.trial.unittest import SynchronousTestCase

from gateway.dataplane.codecs.http1 import Http1Connection
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.routing.plan import build_plan
from tests.support.memory_upstream import MemoryUpstream

from .test_http1 import CLIENT, SNAPSHOT, parse

POST = (b"POST /api/up HTTP/1.1\r\nHost: app.example.com\r\nContent-Length: 100\r\n\r\n")


class BodyDeadlineTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.core = ProxyCore(self.reactor, build_plan(SNAPSHOT), tls=False)
        self.core.start()
        self.addCleanup(self.core.stop)
        self.client = StringTransport(peerAddress=CLIENT)
        self.conn = Http1Connection(self.core)
        self.conn.makeConnection(self.client)
        self.conn.dataReceived(POST + b"x" * 10)
        self.upstream = MemoryUpstream(self.reactor)

    def wait(self, seconds: float) -> None:
        for _ in range(round(seconds / 0.25)):
            self.reactor.advance(0.25)

    def test_stalled_body_gets_408(self) -> None:
        self.wait(2.75)
        self.assertFalse(self.client.disconnecting)
        self.wait(0.5)
        (response,) = parse(self.client.value())
        self.assertEqual(response.status, 408)
        self.assertTrue(self.client.disconnecting)
        self.assertTrue(self.upstream.transport.disconnecting)

    def test_body_that_keeps_coming_is_not_cut(self) -> None:
        for _ in range(5):
            self.wait(2.5)
            self.conn.dataReceived(b"x" * 10)
        self.assertFalse(self.client.disconnecting)

    def test_paused_by_the_gateway_does_not_count(self) -> None:
        """An authorization that takes longer than timeout_read holds the body back:
        no 408. Once reading resumes the client again has timeout_read for its next
        bytes."""
        self.wait(1.0)
        self.conn.pause_reading("authorize")
        self.wait(10.0)
        self.assertEqual(self.client.value(), b"")
        self.assertFalse(self.client.disconnecting)
        self.conn.resume_reading("authorize")
        self.wait(2.75)
        self.assertFalse(self.client.disconnecting)
        self.wait(0.5)
        self.assertEqual(parse(self.client.value())[0].status, 408)

    def test_stalled_upstream_still_counts(self) -> None:
        """An upstream that stops taking the body pauses reading ("upload"); if nothing
        moves for timeout_read the request ends, as before (no unbounded wait)."""
        self.conn.pause_reading("upload")
        self.wait(3.25)
        self.assertTrue(self.client.disconnecting)

    def test_pipelined_head_waits_without_a_deadline(self) -> None:
        """A pipelined request's head, held back while the one before it is answered,
        gets its timeout_read once reading resumes, not from its first byte."""
        self.conn.dataReceived(b"x" * 90 + b"GET /api/next HTTP/1.1\r\nHost: app.exa")
        self.assertIn("pipeline", self.conn.pauses)
        self.upstream.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n")
        for piece in (b"o", b"k"):  # the first response takes 4.5 s, but keeps coming
            self.wait(1.5)
            self.upstream.respond(piece)
        self.wait(1.5)
        self.assertFalse(self.client.disconnecting)
        self.upstream.respond(b"!")
        self.assertNotIn("pipeline", self.conn.pauses)
        self.wait(2.75)
        self.assertFalse(self.client.disconnecting)
        self.wait(0.5)
        self.assertEqual([r.status for r in parse(self.client.value())], [200, 408])
