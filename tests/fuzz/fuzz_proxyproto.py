"""Fuzz target: the PROXY protocol v1/v2 wrapper in front of the listener
(``gateway.dataplane.listeners.proxyproto``, Twisted's v1/v2 parsers underneath).

Input: chunk sizes, then the bytes a client sends (see ``harness.split_input``).

Contract:

- nothing raises out of ``dataReceived``;
- the application behind the wrapper sees nothing before a complete, valid header; after
  it, exactly the bytes that followed the header, and ``getPeer`` names the address the
  header gave (a valid IP for TCP);
- a refused header closes the connection; an incomplete one is aborted at the deadline;
- how the bytes were split into reads changes none of this.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from tests.fuzz.harness import chunks, describe, fuzz, instrumented, split_input

with instrumented("gateway", "twisted.protocols.haproxy"):
    from twisted.internet.address import IPv4Address, IPv6Address
    from twisted.internet.protocol import Factory, Protocol
    from twisted.internet.testing import StringTransport

    from gateway.dataplane.listeners.proxyproto import ProxyHeaderFactory

V1 = b"PROXY "
V2 = b"\r\n\r\n\x00\r\nQUIT\n"
CLIENT = IPv4Address("TCP", "198.51.100.1", 40000)


class Application(Protocol):
    def __init__(self) -> None:
        self.received = b""
        self.peer: Any = None

    def dataReceived(self, data: bytes) -> None:
        if self.peer is None:
            assert self.transport is not None
            self.peer = self.transport.getPeer()
        self.received += data


class Outcome:
    def __init__(self, reads: list[bytes]) -> None:
        factory = ProxyHeaderFactory(Factory.forProtocol(Application))
        wrapper = factory.buildProtocol(CLIENT)
        assert wrapper is not None
        self.transport = StringTransport(peerAddress=CLIENT)
        wrapper.makeConnection(self.transport)
        application = wrapper.wrappedProtocol
        assert isinstance(application, Application)
        for data in reads:
            if self.transport.disconnecting:
                break  # a real transport stops reading once it is closing
            wrapper.dataReceived(data)
        self.parsed = not wrapper.header_pending
        self.peer = wrapper.getPeer() if self.parsed else None
        self.received = application.received
        self.closed = bool(self.transport.disconnecting)
        # Refused now, or still waiting for the rest of the header: then the connection's
        # setup deadline (the codec switch's watchdog) aborts it.
        self.aborted = self.closed or wrapper.header_pending

    def key(self) -> tuple[Any, ...]:
        return (self.parsed, str(self.peer), self.received, self.closed)


def TestOneInput(data: bytes) -> None:
    sizes, payload = split_input(data)
    split = Outcome(chunks(payload, sizes))
    whole = Outcome([payload] if payload else [])
    assert split.key() == whole.key(), describe((payload, split.key(), whole.key()))
    for outcome in (split, whole):
        if not outcome.parsed:
            assert outcome.received == b"", describe(payload)
            assert outcome.aborted, describe(payload)  # refused now, or at the deadline
            continue
        assert payload.startswith((V1, V2)), describe(payload)
        assert payload.endswith(outcome.received), describe(payload)
        header = payload[:len(payload) - len(outcome.received)]
        if header.startswith(V1):
            assert header.endswith(b"\r\n") and header.count(b"\r\n") == 1, describe(header)
        peer = outcome.peer
        if isinstance(peer, IPv4Address | IPv6Address):
            ipaddress.ip_address(peer.host)
            assert 0 <= peer.port <= 65535, describe(header)


if __name__ == "__main__":
    fuzz(TestOneInput)
