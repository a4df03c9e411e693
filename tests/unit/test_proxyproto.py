"""The PROXY protocol wrapper: what reaches the application, and what is refused."""

from __future__ import annotations

import struct

from twisted.internet.address import IPv4Address
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from gateway.dataplane.listeners.proxyproto import ProxyHeaderFactory

V1 = b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n"
V2 = (b"\r\n\r\n\x00\r\nQUIT\n\x21\x11" + struct.pack("!H", 12) + bytes([192, 0, 2, 1])
      + bytes([198, 51, 100, 2]) + struct.pack("!HH", 56324, 443))
REQUEST = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"


class Application(Protocol):
    received = b""

    def dataReceived(self, data: bytes) -> None:
        self.received += data


class ProxyProtocolTests(SynchronousTestCase):
    def connect(self, *reads: bytes) -> tuple[StringTransport, Application, object]:
        factory = ProxyHeaderFactory(Factory.forProtocol(Application))
        wrapper = factory.buildProtocol(IPv4Address("TCP", "10.0.0.1", 1000))
        assert wrapper is not None
        transport = StringTransport()
        wrapper.makeConnection(transport)
        for data in reads:
            wrapper.dataReceived(data)
        application = wrapper.wrappedProtocol
        assert isinstance(application, Application)
        return transport, application, wrapper.getPeer()

    def test_header_split_into_small_reads(self) -> None:
        """Found by fuzzing: a first read shorter than 16 bytes (v2) or 8 (v1) closed
        the connection; any split of a valid header is accepted."""
        for header in (V1, V2):
            data = header + REQUEST
            reads = [data[i:i + 3] for i in range(0, len(data), 3)]
            transport, application, peer = self.connect(*reads)
            self.assertFalse(transport.disconnecting, header)
            self.assertEqual(application.received, REQUEST)
            self.assertEqual(peer, IPv4Address("TCP", "192.0.2.1", 56324))

    def test_invalid_v1_fields_refused(self) -> None:
        """Found by fuzzing: a port that is no number (or a non-ASCII address) raised out
        of ``dataReceived``; addresses that are not IP addresses and ports out of range
        were accepted as the client. All close the connection, nothing reaches the app."""
        for header in (b"PROXY TCP4 192.0.2.1 198.51.100.2 x 443\r\n",
                       b"PROXY TCP4 192.0.2.\xff 198.51.100.2 1 443\r\n",
                       b"PROXY TCP4 999.0.2.1 198.51.100.2 1 443\r\n",
                       b"PROXY TCP4 192.0.2.1,10.0.0.1 198.51.100.2 1 443\r\n",
                       b"PROXY TCP6 192.0.2.1 198.51.100.2 1 443\r\n",
                       b"PROXY TCP4 192.0.2.1 198.51.100.2 70000 443\r\n",
                       b"PROXY TCP4 192.0.2.1 198.51.100.2 -1 443\r\n"):
            transport, application, _ = self.connect(header + REQUEST)
            self.assertTrue(transport.disconnecting, header)
            self.assertEqual(application.received, b"")

    def test_not_proxy_protocol(self) -> None:
        """Bytes that cannot start a PROXY header close the connection at once."""
        for data in (REQUEST, b"\r\n\r\n\x00\r\nQUIT\n\x31\x11\x00\x00rest", b"PROXZ"):
            transport, application, _ = self.connect(data)
            self.assertTrue(transport.disconnecting, data)
            self.assertEqual(application.received, b"")

    def test_incomplete_header_waits(self) -> None:
        """A header still incomplete keeps the connection pending (the connection's setup
        deadline, tested in test_connection_setup, aborts it); nothing reaches the app."""
        transport, application, _ = self.connect(V2[:10])
        self.assertFalse(transport.disconnecting)
        self.assertEqual(application.received, b"")
