"""The listener's TLS transport (``gateway.twisted_ext.tlsio``): ciphertext leaves at once
on an idle socket, a full socket falls back to Twisted's buffer and flow control, and
reads deliver every record, close_notify included. A real TCP transport over a
socketpair on a ``MemoryReactorClock`` (no reactor runs); the client is pyOpenSSL on
memory BIOs."""

from __future__ import annotations

import contextlib
import socket
from typing import Any

import trustme
from OpenSSL import SSL
from twisted.internet import tcp
from twisted.internet.interfaces import IOpenSSLServerConnectionCreator, IPushProducer
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer

from gateway.dataplane.listeners.proxyproto import ProxyHeaderFactory
from gateway.twisted_ext.tlsio import FastTLSFactory, FastTLSProtocol

_CA = trustme.CA()
_LEAF = _CA.issue_cert("gateway.test")


@implementer(IOpenSSLServerConnectionCreator)
class _Creator:
    def __init__(self) -> None:
        ctx = SSL.Context(SSL.TLS_SERVER_METHOD)
        ctx.set_min_proto_version(SSL.TLS1_3_VERSION)
        _LEAF.configure_cert(ctx)  # type: ignore[arg-type]
        self.context = ctx

    def serverConnectionForTLS(self, protocol: Any) -> SSL.Connection:
        return SSL.Connection(self.context, None)


class _App(Protocol):
    """What the HTTP codec would be: records what it receives and how it ended."""

    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.lost: Failure | None = None

    def dataReceived(self, data: bytes) -> None:
        self.received.append(data)

    def connectionLost(self, reason: Failure = Failure(ConnectionError())) -> None:  # noqa: B008
        self.lost = reason


@implementer(IPushProducer)
class _Producer:
    def __init__(self) -> None:
        self.paused = False

    def pauseProducing(self) -> None:
        self.paused = True

    def resumeProducing(self) -> None:
        self.paused = False

    def stopProducing(self) -> None:
        pass


class _Port:
    _realPortNumber = 443


class _Client:
    """A TLS 1.3 client on memory BIOs."""

    def __init__(self) -> None:
        ctx = SSL.Context(SSL.TLS_CLIENT_METHOD)
        _CA.configure_trust(ctx)  # type: ignore[arg-type]
        self.conn = SSL.Connection(ctx, None)
        self.conn.set_tlsext_host_name(b"gateway.test")
        self.conn.set_connect_state()

    def outgoing(self) -> bytes:
        try:
            return self.conn.bio_read(1 << 20)
        except SSL.WantReadError:
            return b""

    def feed(self, data: bytes) -> bytes:
        """Ciphertext from the server in; the plaintext it carried out."""
        if data:
            self.conn.bio_write(data)
        out = b""
        while True:
            try:
                out += self.conn.recv(1 << 16)
            except (SSL.WantReadError, SSL.ZeroReturnError):
                return out


def _drain(sock: socket.socket) -> bytes:
    out = b""
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except BlockingIOError:
            return out
        if not chunk:
            return out
        out += chunk


class FastTLSTests(SynchronousTestCase):
    proxy_protocol = False

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.server_sock, self.peer = socket.socketpair()
        self.server_sock.setblocking(False)
        self.peer.setblocking(False)
        self.addCleanup(self.server_sock.close)
        self.addCleanup(self.peer.close)
        self.app = _App()
        factory = FastTLSFactory(_Creator(), Factory.forProtocol(lambda: self.app),
                                 clock=self.reactor)
        protocol = factory.buildProtocol(None)
        assert isinstance(protocol, FastTLSProtocol)
        self.tls = protocol
        outer: Any = protocol
        if self.proxy_protocol:
            outer = ProxyHeaderFactory(factory).buildProtocol(None)
            outer.wrappedProtocol = protocol
        self.outer = outer
        self.transport = tcp.Server(self.server_sock, outer, ("127.0.0.1", 1), _Port(),
                                    1, self.reactor)
        outer.makeConnection(self.transport)
        if self.proxy_protocol:
            outer.dataReceived(b"PROXY TCP4 192.0.2.1 192.0.2.2 40000 443\r\n")
        self.client = _Client()
        self._handshake()

    def _handshake(self) -> None:
        for _ in range(10):
            with contextlib.suppress(SSL.WantReadError):
                self.client.conn.do_handshake()
            out = self.client.outgoing()
            if out:
                self.outer.dataReceived(out)
            self.client.feed(_drain(self.peer))
            if self.tls._handshakeDone and not out:
                return
        self.fail("no handshake")

    def send(self, *messages: bytes) -> None:
        """The client's records, all in one TCP read of the server's."""
        for message in messages:
            self.client.conn.send(message)
        self.outer.dataReceived(self.client.outgoing())

    def test_idle_write_leaves_at_once(self) -> None:
        """A response on an idle socket is on the wire when ``write`` returns: no
        writability registration, no reactor turn."""
        self.tls.write(b"HTTP/1.1 200 OK\r\n\r\nhello")
        self.assertEqual(self.reactor.getWriters(), [])
        self.assertEqual(self.client.feed(_drain(self.peer)), b"HTTP/1.1 200 OK\r\n\r\nhello")

    def test_large_write_is_whole(self) -> None:
        """More than one record (pyOpenSSL's partial writes) in one ``write``."""
        body = bytes(range(256)) * 400  # 100 KiB: 7 records
        self.tls.write(body)
        got = b""
        for _ in range(100):
            got += self.client.feed(_drain(self.peer))
            if self.transport.dataBuffer or self.transport._tempDataBuffer:
                self.transport.doWrite()
            if len(got) >= len(body):
                break
        self.assertEqual(got, body)

    def test_full_socket_buffers_and_pauses_producer(self) -> None:
        """When the socket does not take everything, the rest waits in Twisted's buffer
        (registered for writability), the producer is paused, and resumed once sent."""
        producer = _Producer()
        self.tls.registerProducer(producer, True)
        self.server_sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        for _ in range(40):
            self.tls.write(b"x" * 16384)
        self.assertIn(self.transport, self.reactor.getWriters())
        self.assertTrue(producer.paused)
        for _ in range(1000):
            _drain(self.peer)
            self.transport.doWrite()
            if not producer.paused:
                break
        self.assertFalse(producer.paused)
        self.tls.unregisterProducer()

    def test_reads_every_record_of_a_chunk(self) -> None:
        """Several records in one read are all delivered, in order."""
        self.send(b"GET / HTTP/1.1\r\n", b"Host: a\r\n", b"\r\n")
        self.assertEqual(b"".join(self.app.received), b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")

    def test_record_split_across_reads(self) -> None:
        self.client.conn.send(b"split record")
        wire = self.client.outgoing()
        self.outer.dataReceived(wire[:7])
        self.assertEqual(self.app.received, [])
        self.outer.dataReceived(wire[7:])
        self.assertEqual(self.app.received, [b"split record"])

    def test_close_notify_after_data(self) -> None:
        """Data then close_notify in one read: the data is delivered, the gateway
        answers with its own close_notify and closes the TCP connection."""
        self.client.conn.send(b"last words")
        self.client.conn.shutdown()
        self.outer.dataReceived(self.client.outgoing())
        self.assertEqual(self.app.received, [b"last words"])
        self.assertTrue(self.transport.disconnecting)
        self.client.feed(_drain(self.peer))
        self.assertTrue(self.client.conn.get_shutdown() & SSL.RECEIVED_SHUTDOWN)

    def test_garbage_ends_the_connection(self) -> None:
        """A broken record is an error: the connection is closed (an alert is sent)."""
        self.outer.dataReceived(b"\x17\x03\x03\x00\x20" + b"\x00" * 32)
        self.assertTrue(self.transport.disconnecting)
        self.assertEqual(self.app.received, [])

    def test_write_after_connection_lost_is_dropped(self) -> None:
        self.tls.connectionLost(Failure(ConnectionError("gone")))
        self.tls.write(b"late")
        self.assertIsNotNone(self.app.lost)


    def test_bytearray_and_memoryview(self) -> None:
        self.tls.write(bytearray(b"from a bytearray, "))  # type: ignore[arg-type]
        self.tls.write(memoryview(b"and a memoryview"))  # type: ignore[arg-type]
        self.assertEqual(self.client.feed(_drain(self.peer)),
                         b"from a bytearray, and a memoryview")

class ProxyProtocolTLSTests(FastTLSTests):
    """The same behind a PROXY-protocol header: the wrapper only relays writes, so the
    ciphertext still goes straight to the TCP transport."""

    proxy_protocol = True

    def test_peer_from_header(self) -> None:
        self.assertEqual(self.tls.getPeer().host, "192.0.2.1")


class WrappedTransportTests(SynchronousTestCase):
    """Over anything but plain TCP (a PROXY-protocol wrapper, a test transport) the
    ciphertext goes through the transport's own ``write``."""

    def test_writes_through_transport_write(self) -> None:
        app = _App()
        factory = FastTLSFactory(_Creator(), Factory.forProtocol(lambda: app),
                                 clock=MemoryReactorClock())
        protocol = factory.buildProtocol(None)
        transport = StringTransport()
        protocol.makeConnection(transport)
        client = _Client()
        for _ in range(10):
            with contextlib.suppress(SSL.WantReadError):
                client.conn.do_handshake()
            out = client.outgoing()
            if out:
                protocol.dataReceived(out)
            client.feed(transport.value())
            transport.clear()
        protocol.write(b"through write")
        self.assertEqual(client.feed(transport.value()), b"through write")

