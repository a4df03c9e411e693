"""The upstream end of a connection the pool opened on a ``MemoryReactorClock``."""

from __future__ import annotations

from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport


class MemoryUpstream:
    """Builds the protocol the pool asked for and connects it to a StringTransport, so a
    test reads what the gateway sent upstream and feeds the upstream's answer."""

    def __init__(self, reactor: MemoryReactorClock, index: int = -1) -> None:
        self.host, self.port, factory, self.timeout, _ = reactor.tcpClients[index]
        protocol = factory.buildProtocol(IPv4Address("TCP", self.host, self.port))
        assert protocol is not None
        self.protocol = protocol
        self.transport = StringTransport()
        self.protocol.makeConnection(self.transport)

    def received(self) -> bytes:
        data: bytes = self.transport.value()
        self.transport.clear()
        return data

    def respond(self, data: bytes) -> None:
        self.protocol.dataReceived(data)
