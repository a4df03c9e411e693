"""A closed connection is freed by reference counting, at once, not left in a reference
cycle until the next full garbage collection: each such cycle kept a closed TLS
connection's ~20 KiB (its parser, its TLS state, its requests) alive, and the gateway's
memory grew with every connection it had served."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import h2.config
import h2.connection
from twisted.internet.address import IPv4Address
from twisted.internet.endpoints import TCP4ClientEndpoint
from twisted.internet.error import ConnectionDone
from twisted.internet.protocol import Protocol
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from gateway.config.snapshot import Snapshot
from gateway.dataplane.codecs.http1 import Http1Connection
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.http2.connection import H2Connection
from gateway.dataplane.routing.plan import build_plan
from gateway.twisted_ext.connect import connect_protocol
from tests.support import h2frames as f
from tests.support.memory_upstream import MemoryUpstream

from .config.helpers import base_config, load

SNAPSHOT = load(base_config(policy=[{
    "from": "https://app.example.com",
    "to": "http://127.0.0.1:9000/",
    "allow_public_unauthenticated_access": True,
}]))
WEBSOCKET_SNAPSHOT = load(base_config(policy=[{
    "from": "https://app.example.com",
    "to": "http://127.0.0.1:9000/",
    "allow_public_unauthenticated_access": True,
    "allow_websockets": True,
}]))
CLIENT = IPv4Address("TCP", "192.0.2.7", 50000)
P = TypeVar("P", bound=Protocol)
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"


@contextmanager
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def client_connection(snapshot: Snapshot, codec: Callable[[ProxyCore], P]
                      ) -> tuple[MemoryReactorClock, ProxyCore, P, StringTransport]:
    """A started proxy core and one client connection of ``codec`` to it."""
    reactor = MemoryReactorClock()
    core = ProxyCore(reactor, build_plan(snapshot), tls=False)
    core.start()
    conn = codec(core)
    transport = StringTransport(peerAddress=CLIENT)
    conn.makeConnection(transport)
    return reactor, core, conn, transport


def proxied_then_closed(codec: Callable[[ProxyCore], Protocol],
                        send: Callable[[Protocol, MemoryReactorClock], None]
                        ) -> list[weakref.ref[object]]:
    """One request relayed to an upstream and answered, then the client and the upstream
    connection closed; weak references to what should be gone."""
    reactor, core, conn, transport = client_connection(SNAPSHOT, codec)
    send(conn, reactor)
    upstream = MemoryUpstream(reactor)
    upstream.respond(RESPONSE)
    pooled = upstream.protocol._wrappedProtocol  # type: ignore[attr-defined]
    refs: list[weakref.ref[object]] = [weakref.ref(conn), weakref.ref(pooled)]
    transport.producer = None  # as a closed TCP transport lets go of its producer
    conn.connectionLost(Failure(ConnectionDone()))
    upstream.protocol.connectionLost(Failure(ConnectionDone()))
    core.stop()
    return refs


def http1_request(conn: Protocol, reactor: MemoryReactorClock) -> None:
    conn.dataReceived(b"GET / HTTP/1.1\r\nHost: app.example.com\r\n\r\n")


def h2_request(conn: Protocol, reactor: MemoryReactorClock) -> None:
    client = h2.connection.H2Connection(
        config=h2.config.H2Configuration(client_side=True, header_encoding=None))
    client.initiate_connection()
    client.send_headers(1, [(b":method", b"GET"), (b":scheme", b"https"),
                            (b":authority", b"app.example.com"), (b":path", b"/")],
                        end_stream=True)
    f.deliver(conn, reactor, client.data_to_send())


class FreedOnCloseTests(SynchronousTestCase):
    def assertFreed(self, refs: list[weakref.ref[object]]) -> None:
        alive = [type(o).__name__ for o in (ref() for ref in refs) if o is not None]
        self.assertEqual(alive, [], "kept alive after the connection closed")

    def test_http1_connection(self) -> None:
        """An HTTP/1.1 client connection (llhttp's parser holds its callbacks) and the
        upstream connection it used (the same, with the response parser)."""
        with collector_off():
            self.assertFreed(proxied_then_closed(Http1Connection, http1_request))

    def test_http2_connection(self) -> None:
        """An HTTP/2 connection whose stream was answered: the stream is its exchange's
        sink, and the exchange was the stream's."""
        with collector_off():
            self.assertFreed(proxied_then_closed(H2Connection, h2_request))

    def test_websocket_pipe(self) -> None:
        """A websocket relayed through a pipe, then closed in order by the client: once
        both connections are gone, the pipe, its upgrade watch and both connections are
        freed at once. The pipe and the watch it reports its close to pointed at each
        other, and the close's grace timer kept them all for 10 s after both were gone
        (with TLS, ~47 KiB a websocket: the soak's TLS gateway grew 35 MiB in 40 s)."""
        with collector_off():
            reactor, core, conn, transport = client_connection(WEBSOCKET_SNAPSHOT,
                                                               Http1Connection)
            conn.dataReceived(b"GET /chat HTTP/1.1\r\nHost: app.example.com\r\n"
                              b"Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
            upstream = MemoryUpstream(reactor)
            upstream.respond(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
                             b"Upgrade: websocket\r\n\r\n")
            pooled = upstream.protocol._wrappedProtocol  # type: ignore[attr-defined]
            self.assertIsNotNone(conn.pipe, "the upgrade made no pipe")
            refs: list[weakref.ref[object]] = [
                weakref.ref(conn), weakref.ref(pooled), weakref.ref(conn.pipe)]
            # as closed TCP transports are when their protocols hear of it
            transport.disconnected = True  # type: ignore[attr-defined]
            transport.producer = None
            conn.connectionLost(Failure(ConnectionDone()))
            upstream.transport.disconnected = True  # type: ignore[attr-defined]
            upstream.transport.producer = None
            upstream.protocol.connectionLost(Failure(ConnectionDone()))
            core.stop()
            self.assertEqual([c for c in reactor.getDelayedCalls() if c.active()], [])
            del conn, pooled, upstream, transport
            self.assertFreed(refs)

    def test_connect_protocol_hands_out_once(self) -> None:
        """The factory ``connect_protocol`` gives the endpoint lets go of the protocol
        once it is built (the connector keeps the factory for the connection's life)."""
        reactor = MemoryReactorClock()
        protocol = Protocol()
        connect_protocol(TCP4ClientEndpoint(reactor, "127.0.0.1", 9), protocol)
        factory = reactor.tcpClients[0][2]
        built = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 9))
        self.assertIsNotNone(built)
        self.assertNotIn(protocol, gc.get_referents(factory._wrappedFactory))

    def test_connect_protocol_called_directly_once_connected(self) -> None:
        """Once connected, the TCP connection calls the protocol itself, not through the
        endpoint's forwarding wrapper (one call less on every read)."""
        reactor = MemoryReactorClock()
        protocol = Protocol()
        connected = connect_protocol(TCP4ClientEndpoint(reactor, "127.0.0.1", 9), protocol)
        wrapper = reactor.tcpClients[0][2].buildProtocol(IPv4Address("TCP", "127.0.0.1", 9))
        transport = StringTransport()
        transport.protocol = wrapper  # type: ignore[attr-defined]  # as tcp.Client has it
        wrapper.makeConnection(transport)
        self.assertIs(self.successResultOf(connected), protocol)
        self.assertIs(transport.protocol, protocol)  # type: ignore[attr-defined]
