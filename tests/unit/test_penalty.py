"""Penalties for client addresses whose HTTP/2 connections keep being cut (issue 12):
the bookkeeping, and the codec refusing a penalised client (PROXY-protocol case) while
serving others."""

from __future__ import annotations

from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.logger import globalLogPublisher
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from gateway.dataplane import penalty
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.http2.connection import H2Connection
from gateway.dataplane.listeners import tarpit
from gateway.dataplane.listeners.stack import LimitedFactory
from gateway.dataplane.penalty import Penalties, client_key
from gateway.dataplane.routing.plan import build_plan
from tests.support import h2frames as f

from .config.helpers import base_config, load

SNAPSHOT = load(base_config(policy=[{
    "from": "https://app.example.com", "to": "http://127.0.0.1:9000/",
    "allow_public_unauthenticated_access": True}]))


class BookkeepingTests(SynchronousTestCase):
    def test_three_quick_cuts_start_a_penalty_that_doubles(self) -> None:
        p = Penalties()
        self.assertIsNone(p.strike("192.0.2.1", "rapid_reset", 0.0))
        self.assertIsNone(p.strike("192.0.2.1", "rapid_reset", 1.0))
        self.assertEqual(p.strike("192.0.2.1", "control_flood", 2.0), penalty.PENALTY)
        self.assertTrue(p.refuses("192.0.2.1", 2.5))
        self.assertFalse(p.refuses("192.0.2.2", 2.5))
        self.assertFalse(p.refuses("192.0.2.1", 2.0 + penalty.PENALTY))
        for t in (13.0, 14.0):
            self.assertIsNone(p.strike("192.0.2.1", "rapid_reset", t))
        self.assertEqual(p.strike("192.0.2.1", "rapid_reset", 15.0), 2 * penalty.PENALTY)
        self.assertEqual(p.refused, 1)

    def test_strikes_are_forgotten_with_time(self) -> None:
        p = Penalties()
        for t in range(0, 400, 16):  # one cut every 16 s: never three within 30 s
            self.assertIsNone(p.strike("192.0.2.1", "rapid_reset", float(t)))
        self.assertFalse(p.refuses("192.0.2.1", 400.0))

    def test_slowness_is_no_strike(self) -> None:
        p = Penalties()
        for t in range(10):
            self.assertIsNone(p.strike("192.0.2.1", "timeout_write", float(t)))
            self.assertIsNone(p.strike("192.0.2.1", "timeout_read", float(t)))
        self.assertEqual(len(p), 0)

    def test_ipv6_by_its_64(self) -> None:
        p = Penalties()
        for i in range(3):
            p.strike(f"2001:db8:1:2::{i + 1}", "rapid_reset", 0.0)
        self.assertTrue(p.refuses("2001:db8:1:2:ffff::9", 1.0))
        self.assertFalse(p.refuses("2001:db8:1:3::1", 1.0))
        self.assertEqual(client_key("::ffff:192.0.2.7"), "192.0.2.7")

    def test_the_table_is_bounded(self) -> None:
        self.patch(penalty, "MAX_CLIENTS", 100)
        p = Penalties()
        for i in range(1000):
            p.strike(f"10.0.{i // 256}.{i % 256}", "rapid_reset", float(i))
        self.assertLessEqual(len(p), 100)


class CodecTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.core = ProxyCore(self.reactor, build_plan(SNAPSHOT), tls=False)
        self.core.start()
        self.addCleanup(self.core.stop)
        self.logged: list[dict[str, Any]] = []
        globalLogPublisher.addObserver(self.logged.append)
        self.addCleanup(globalLogPublisher.removeObserver, self.logged.append)

    def connect(self, host: str) -> tuple[H2Connection, StringTransport]:
        transport = StringTransport(peerAddress=IPv4Address("TCP", host, 50000))
        server = H2Connection(self.core)
        server.makeConnection(transport)
        return server, transport

    def rapid_reset(self, server: H2Connection) -> None:
        frames = f.Frames()
        pairs = b"".join(frames.headers(2 * i + 1, f.request_headers(b"/", b"app.example.com"))
                         + f.rst(2 * i + 1) for i in range(20))
        server.dataReceived(f.hello() + pairs)

    def test_a_client_cut_three_times_is_refused_others_are_served(self) -> None:
        for _ in range(3):
            server, transport = self.connect("192.0.2.7")
            self.rapid_reset(server)
            self.assertTrue(transport.disconnecting)
        [warning] = [e for e in self.logged if e.get("penalty")]
        self.assertEqual((warning["client"], warning["seconds"]), ("192.0.2.7", penalty.PENALTY))
        server, transport = self.connect("192.0.2.7")
        self.assertTrue(transport.disconnected)  # aborted at once, told why
        goaway = f.goaway_in(f.parse(bytearray(transport.value())))
        assert goaway is not None
        self.assertEqual(goaway.error_code, 0xB)  # ENHANCE_YOUR_CALM
        self.assertNotIn(server, self.core.connections)
        other, other_transport = self.connect("192.0.2.8")
        other.dataReceived(f.hello() + f.Frames().headers(
            1, f.request_headers(b"/ping", b"app.example.com")))
        self.assertIn(b"OK\n", other_transport.value())
        self.reactor.advance(penalty.PENALTY)
        _, transport = self.connect("192.0.2.7")
        self.assertFalse(transport.disconnecting)

    def test_refused_at_the_accept_without_proxy_protocol(self) -> None:
        for t in range(3):
            self.core.penalties.strike("192.0.2.7", "rapid_reset", float(t))

        class Inner:
            def buildProtocol(self, addr: Any) -> str:
                return "built"

        factory = LimitedFactory(Inner(), self.core.limit, self.reactor,  # type: ignore[arg-type]
                                 self.core.penalties)
        self.assertEqual(factory.buildProtocol(IPv4Address("TCP", "192.0.2.8", 1)), "built")
        # the refused are held unread (a reconnect loop waits), a few per address ...
        held = []
        for _ in range(tarpit.HOLD_PER_ADDRESS):
            protocol = factory.buildProtocol(IPv4Address("TCP", "192.0.2.7", 1))
            self.assertNotIn(protocol, (None, "built"))
            transport = StringTransport()
            protocol.makeConnection(transport)
            self.assertEqual(transport.producerState, "paused")
            held.append((transport, protocol))
        # ... then closed at once
        self.assertIsNone(factory.buildProtocol(IPv4Address("TCP", "192.0.2.7", 1)))
        self.reactor.advance(tarpit.HOLD_SECONDS)
        self.assertTrue(all(t.disconnecting for t, _ in held))
        self.assertEqual(held[0][0].value(), b"")  # not a byte written
        for _, protocol in held:
            protocol.connectionLost(Failure(ConnectionDone()))
        self.assertEqual((factory.tarpit.total, factory.tarpit.held), (0, {}))

    def test_held_connections_are_bounded_in_all(self) -> None:
        self.patch(tarpit, "HOLD_TOTAL", 5)
        pit = tarpit.Tarpit(self.reactor)
        for i in range(5):
            protocol = pit.protocol(f"192.0.2.{i}")
            assert protocol is not None
            protocol.makeConnection(StringTransport())
        self.assertIsNone(pit.protocol("192.0.2.99"))
