"""A connection before its first request byte: the setup deadline (PROXY header, TLS
handshake: min(timeout_read, 10 s)), then the idle deadline, enforced by the core's
watchdog on the codec switch; the switch handing over to the codec; the redirector."""

from __future__ import annotations

from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from gateway.dataplane.codecs.http1 import Http1Connection
from gateway.dataplane.codecs.switch import (
    IDLE_EXPIRED,
    SETUP_EXPIRED,
    HTTPFactory,
    ProtocolSwitch,
    setup_verdict,
)
from gateway.dataplane.core import HANDSHAKE_LIMIT, ProxyCore, handshake_timeout
from gateway.dataplane.listeners.http_redirect import RedirectFactory
from gateway.dataplane.listeners.proxyproto import ProxyHeaderFactory
from gateway.dataplane.routing.plan import build_plan

from .test_http1 import SNAPSHOT  # timeout_read 3 s, timeout_idle 5 s

CLIENT = IPv4Address("TCP", "192.0.2.7", 50000)
TICK = 0.25  # the watchdog's period


class VerdictTests(SynchronousTestCase):
    def test_handshake_timeout_value(self) -> None:
        self.assertEqual(handshake_timeout(3.0), 3.0)
        self.assertEqual(handshake_timeout(30.0), HANDSHAKE_LIMIT)
        self.assertEqual(handshake_timeout(0.0), HANDSHAKE_LIMIT)  # 0: no read timeout

    def test_rules(self) -> None:
        self.assertIsNone(setup_verdict(12.9, 10.0, None, 3.0, 5.0))
        self.assertEqual(setup_verdict(13.1, 10.0, None, 3.0, 5.0), SETUP_EXPIRED)
        # Set up at 12: the handshake deadline no longer applies, the idle one does.
        self.assertIsNone(setup_verdict(16.9, 10.0, 12.0, 3.0, 5.0))
        self.assertEqual(setup_verdict(17.1, 10.0, 12.0, 3.0, 5.0), IDLE_EXPIRED)
        self.assertIsNone(setup_verdict(1e9, 10.0, 12.0, 3.0, 0.0))  # timeout_idle 0: none


class SwitchTestCase(SynchronousTestCase):
    tls = False
    codec = "auto"

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.core = ProxyCore(self.reactor, build_plan(SNAPSHOT), tls=self.tls)
        self.core.start()
        self.addCleanup(self.core.stop)
        self.client = StringTransport(peerAddress=CLIENT)

    def wait(self, seconds: float) -> None:
        """Let ``seconds`` pass with the watchdog running."""
        for _ in range(round(seconds / TICK)):
            self.reactor.advance(TICK)


class TLSSetupTests(SwitchTestCase):
    tls = True

    def setUp(self) -> None:
        super().setUp()
        self.switch = ProtocolSwitch(self.core, "auto", tls=True)
        self.switch.makeConnection(self.client)

    def test_unfinished_handshake_aborted(self) -> None:
        """Watched from the accept; aborted once the handshake deadline (3 s) passes."""
        self.assertIn(self.switch, self.core.connections)
        self.wait(2.75)
        self.assertFalse(self.client.disconnecting)
        self.wait(0.5)
        self.assertTrue(self.client.disconnected)  # aborted, not an orderly close
        self.assertNotIn(self.switch, self.core.connections)

    def test_after_handshake_idle_deadline(self) -> None:
        """Handshake done at 1 s: the idle deadline (5 s) runs from there."""
        self.wait(1.0)
        self.switch.handshakeCompleted()
        self.wait(4.75)
        self.assertFalse(self.client.disconnecting)
        self.wait(0.5)
        self.assertTrue(self.client.disconnected)

    def test_first_bytes_hand_over(self) -> None:
        """A request byte ends the switch's watch; the codec takes over."""
        self.switch.handshakeCompleted()
        self.switch.dataReceived(b"G")
        self.assertNotIn(self.switch, self.core.connections)
        (codec,) = self.core.connections
        self.assertIsInstance(codec, Http1Connection)
        self.assertIs(self.client.protocol, codec)


class PlainSetupTests(SwitchTestCase):
    def test_plain_is_set_up_at_once(self) -> None:
        """No handshake in plain text: a silent connection is idle from the accept."""
        switch = ProtocolSwitch(self.core, "auto", tls=False)
        switch.makeConnection(self.client)
        self.wait(4.75)
        self.assertFalse(self.client.disconnecting)
        self.wait(0.5)
        self.assertTrue(self.client.disconnected)

    def test_http1_codec_also_starts_with_the_switch(self) -> None:
        """codec_type http1: still a switch until the first byte (so a silent
        connection is watched), then HTTP/1.1 whatever the bytes."""
        protocol = HTTPFactory(self.core, "http1", tls=False).buildProtocol(CLIENT)
        self.assertIsInstance(protocol, ProtocolSwitch)
        protocol.makeConnection(self.client)
        protocol.dataReceived(b"PRI * HTTP/2.0\r\n")
        self.assertIsInstance(self.client.protocol, Http1Connection)

    def test_proxy_header_pending_is_setup(self) -> None:
        """With use_proxy_protocol in plain text, the setup deadline runs until the
        header is complete; then the idle one, and the header's client is the peer."""
        factory = ProxyHeaderFactory(HTTPFactory(self.core, "auto", tls=False))
        wrapper = factory.buildProtocol(CLIENT)
        wrapper.makeConnection(self.client)
        wrapper.dataReceived(b"PROXY TCP4 203.0.113.9 ")
        self.wait(2.0)
        wrapper.dataReceived(b"127.0.0.1 5555 443\r\n")
        self.wait(2.0)  # past the setup deadline (3 s from the accept), before idle's
        self.assertFalse(self.client.disconnecting)
        wrapper.dataReceived(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertIn(b"200", self.client.value().split(b"\r\n")[0])
        (codec,) = self.core.connections
        assert isinstance(codec, Http1Connection)
        self.assertEqual(codec.client_ip, "203.0.113.9")

    def test_proxy_header_stalled_aborted(self) -> None:
        factory = ProxyHeaderFactory(HTTPFactory(self.core, "auto", tls=False))
        wrapper = factory.buildProtocol(CLIENT)
        wrapper.makeConnection(self.client)
        wrapper.dataReceived(b"PROXY TCP4 203.0.113.9 ")
        self.wait(2.75)
        self.assertFalse(self.client.disconnecting)
        self.wait(0.5)
        self.assertTrue(self.client.disconnected)


class RedirectListenerTests(SynchronousTestCase):
    """The http->https redirector: the same setup deadline, and its connections count."""

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.factory = RedirectFactory(lambda: (), self.reactor, lambda: 3.0)
        self.client = StringTransport(peerAddress=CLIENT)
        self.protocol = self.factory.buildProtocol(CLIENT)
        self.protocol.makeConnection(self.client)

    def test_silent_connection_aborted(self) -> None:
        self.assertEqual(len(self.factory.live), 1)
        self.reactor.advance(2.9)
        self.assertFalse(self.client.disconnecting)
        self.reactor.advance(0.2)
        self.assertTrue(self.client.disconnected)
        self.protocol.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(self.factory.live, set())

    def test_answered_connection_leaves(self) -> None:
        self.protocol.dataReceived(b"GET /a HTTP/1.1\r\nHost: app.test\r\n\r\n")
        self.assertTrue(self.client.value().startswith(b"HTTP/1.1 301"))
        self.protocol.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(self.factory.live, set())
        self.assertEqual(self.reactor.getDelayedCalls(), [])
