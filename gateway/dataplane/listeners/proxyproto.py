"""PROXY protocol v1/v2 in front of the listener (``use_proxy_protocol``).

Every connection must open with a valid header (see ``proxyheader``): bytes that cannot
become one abort the connection at once, before any TLS or HTTP work. Until the header
is complete ``header_pending`` is true and the connection's setup deadline runs (the
codec switch's watchdog, ``timeout_handshake``), so a peer that sends half a header and
stalls is aborted then. Afterwards ``getPeer``/``getHost`` return the addresses the
header names, which is what the access log and X-Forwarded-For use; a v2 LOCAL header
(or v1 UNKNOWN) leaves the real ones.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.interfaces import IAddress
from twisted.protocols.policies import ProtocolWrapper, WrappingFactory

from gateway.wire.proxyheader import BadProxyHeader, read_header


def _address(pair: tuple[str, int] | None) -> IAddress | None:
    if pair is None:
        return None
    host, port = pair
    return IPv6Address("TCP", host, port) if ":" in host else IPv4Address("TCP", host, port)


class ProxyHeaderProtocol(ProtocolWrapper):
    header_pending = True
    _peer: IAddress | None = None
    _host: IAddress | None = None
    _buffer = b""

    def dataReceived(self, data: bytes) -> None:
        if not self.header_pending:
            self.wrappedProtocol.dataReceived(data)
            return
        buffer = self._buffer + data
        try:
            found = read_header(buffer)
        except BadProxyHeader:
            self._buffer = b""
            transport: Any = self.transport
            transport.abortConnection()
            return
        if found is None:
            self._buffer = buffer
            return
        header, used = found
        self._buffer = b""
        self.header_pending = False
        self._peer = _address(header.source)
        self._host = _address(header.destination)
        if used < len(buffer):
            self.wrappedProtocol.dataReceived(buffer[used:])

    def getPeer(self) -> IAddress:
        return self._peer or self.transport.getPeer()  # type: ignore[union-attr]

    def getHost(self) -> IAddress:
        return self._host or self.transport.getHost()  # type: ignore[union-attr]


class ProxyHeaderFactory(WrappingFactory):
    protocol = ProxyHeaderProtocol
    noisy = False

    def __init__(self, wrapped: Any) -> None:
        WrappingFactory.__init__(self, wrapped)  # type: ignore[arg-type]
